//! `pmlab cargo ARGS...`: cargo with pmlab's load/store hooks in the
//! program's crates, libpmlab on its link line and a target directory of
//! its own. The work (flags, variables, target directory) is
//! `pmlab_emu::cargo`.

use anyhow::Result;
use std::ffi::OsString;

const ABOUT: &str = "Build Rust programs with pmlab's instrumentation: every load and store \
of the program's own crates calls into libpmlab, as with `pmlab cc`, so `pmlab run --source \
instrumented` slows its PM accesses and `pmlab trace` records its PM stores. All arguments \
go to cargo; its output and exit status are pmlab's.";

const AFTER: &str = "The hooks and the link flags are appended to CARGO_ENCODED_RUSTFLAGS or \
RUSTFLAGS. Only the host target's crates are instrumented (CARGO_BUILD_TARGET is set to the \
host unless --target is given), and the build goes to TARGET_DIR/pmlab unless --target-dir or \
CARGO_TARGET_DIR is given: a plain `cargo build` does not overwrite it. The program finds \
libpmlab.so by its rpath and runs normally outside pmlab. A program tells pmlab which of its \
mappings are PM with pmlab_pm_register (include/pmlab.h; look it up with dlsym to run without \
pmlab too). PMLAB_CARGO picks the cargo; PMLAB_CC_VERBOSE=1 prints what is set.

Example:
  pmlab cargo build --release
  pmlab run --source instrumented --pm-latency 400ns -- target/pmlab/x86_64-unknown-linux-gnu/release/app
  pmlab trace -o app.pmt -- target/pmlab/x86_64-unknown-linux-gnu/release/app";

/// Arguments of `pmlab cargo`: passed to cargo untouched.
#[derive(clap::Args)]
#[command(disable_help_flag = true, disable_version_flag = true, after_help = AFTER)]
pub struct Args {
    /// Cargo arguments (a subcommand and its options; `+toolchain` first).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    rest: Vec<OsString>,
}

/// Run the command: run cargo (its exit status becomes ours). `--help`
/// or no argument prints pmlab's help.
pub fn run(args: Args) -> Result<u8> {
    let rest: Vec<String> = args
        .rest
        .into_iter()
        .map(|a| {
            a.into_string()
                .map_err(|a| anyhow::anyhow!("argument {a:?} is not valid UTF-8"))
        })
        .collect::<Result<_>>()?;
    if rest.is_empty() || (rest.len() == 1 && (rest[0] == "--help" || rest[0] == "-h")) {
        let cmd = <Args as clap::Args>::augment_args(clap::Command::new("cargo"))
            .bin_name("pmlab cargo")
            .about(ABOUT)
            .override_usage("pmlab cargo [+TOOLCHAIN] COMMAND [cargo options]");
        println!("{}", cmd.disable_help_flag(true).render_long_help());
        return Ok(0);
    }
    Ok(pmlab_emu::cargo::run(&rest)?)
}
