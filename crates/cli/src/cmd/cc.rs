//! `pmlab cc` / `pmlab c++`: not implemented yet (see the README's status table).

/// Which compiler driver to wrap.
#[derive(Clone, Copy)]
pub enum Lang {
    /// C (`clang`).
    C,
    /// C++ (`clang++`).
    Cxx,
}

/// Arguments of `pmlab cc`: passed to the compiler untouched.
#[derive(clap::Args)]
pub struct Args {
    /// Compiler arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Run the command.
pub fn run(_args: Args, _lang: Lang) -> anyhow::Result<u8> {
    anyhow::bail!("'pmlab cc' is not implemented yet in this build; see the README's status table")
}

/// True when the program at `path` was built by `pmlab cc` (so the
/// `instrumented` counter source can drive it). Used by `pmlab run
/// --source auto`. Owned by the instrumentation work (issue 3).
pub fn is_instrumented(_path: &std::path::Path) -> anyhow::Result<bool> {
    Ok(false)
}
