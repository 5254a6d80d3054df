//! One module per subcommand. Each exposes `Args` (clap) and
//! `run(Args) -> anyhow::Result<u8>` returning the process exit code.

pub mod analyze;
pub mod calibrate;
pub mod cargo;
pub mod cc;
pub mod check;
pub mod crash;
pub mod persistency;
pub mod probe;
pub mod run;
pub mod sim;
pub mod trace;
pub mod validate;
