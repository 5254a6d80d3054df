//! `pmlab crash`: placeholder.
/// Arguments.
#[derive(clap::Args)]
pub struct Args {}
/// Run.
pub fn run(_a: Args) -> anyhow::Result<u8> {
    Ok(0)
}
