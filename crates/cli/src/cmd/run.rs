//! `pmlab run`: not implemented yet (see the README's status table).

/// Arguments of `pmlab run`.
#[derive(clap::Args)]
#[command(disable_help_flag = false)]
pub struct Args {
    /// Everything after the command.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Run the command.
pub fn run(_args: Args) -> anyhow::Result<u8> {
    anyhow::bail!("'pmlab run' is not implemented yet in this build; see the README's status table")
}
