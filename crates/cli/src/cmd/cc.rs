//! `pmlab cc` / `pmlab c++` / `pmlab gcc` / `pmlab g++`: a drop-in for
//! CC/CXX that builds programs whose every load and store calls into
//! libpmlab (the `instrumented` counter source). The wrapper itself (which
//! compiler, the flags it adds, the link line) is `pmlab_emu::cc`.

use anyhow::Result;
pub use pmlab_emu::cc::Lang;
use std::ffi::OsString;

const ABOUT: &str = "Compile C or C++ with pmlab's instrumentation: every load and store \
calls into libpmlab, so `pmlab run --source instrumented` can emulate the program without \
a PMU. All arguments go to the compiler; its diagnostics and exit status are pmlab's.";

const AFTER: &str = "Compiler: $PMLAB_CC (pmlab cc) or $PMLAB_CXX (pmlab c++), gcc or clang, \
a name on PATH or a path; else $PMLAB_CLANG / $PMLAB_CLANGXX; else clang-14 or clang. \
pmlab gcc / pmlab g++ always use gcc ($PMLAB_GCC / $PMLAB_GXX). \
PMLAB_CC_VERBOSE=1 prints each compiler command.

Example:
  pmlab cc -O2 -o app app.c && pmlab run --pm-latency 400ns -- ./app
  CC=\"pmlab cc\" PMLAB_CC=gcc make    (or CC=\"pmlab gcc\", which build systems record)

The compiler's own help follows.";

/// Arguments of `pmlab cc`: passed to the compiler untouched.
#[derive(clap::Args)]
#[command(disable_help_flag = true, disable_version_flag = true, after_help = AFTER)]
pub struct Args {
    /// Compiler arguments (as for gcc or clang).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    rest: Vec<OsString>,
}

/// pmlab's own help for the wrapper.
fn help(name: &'static str) -> String {
    let cmd = <Args as clap::Args>::augment_args(clap::Command::new(name))
        .bin_name(format!("pmlab {name}"))
        .about(ABOUT)
        .long_about(ABOUT)
        .override_usage(format!("pmlab {name} [compiler arguments]"));
    cmd.disable_help_flag(true).render_long_help().to_string()
}

/// Run the command: run the compiler (its exit status becomes ours).
/// `pmlab cc` / `pmlab c++` (`gcc` false) and `pmlab gcc` / `pmlab g++`
/// (`gcc` true). `--help` alone prints pmlab's help, then the compiler's.
pub fn run(args: Args, lang: Lang, gcc: bool) -> Result<u8> {
    let rest: Vec<String> = args
        .rest
        .into_iter()
        .map(|a| {
            a.into_string()
                .map_err(|a| anyhow::anyhow!("argument {a:?} is not valid UTF-8"))
        })
        .collect::<Result<_>>()?;
    if rest.len() == 1 && (rest[0] == "--help" || rest[0] == "-h") {
        let name = match (lang, gcc) {
            (Lang::C, false) => "cc",
            (Lang::Cxx, false) => "c++",
            (Lang::C, true) => "gcc",
            (Lang::Cxx, true) => "g++",
        };
        println!("{}", help(name));
        if rest[0] == "-h" {
            return Ok(0);
        }
        // The compiler's help after pmlab's (for its options), when there
        // is a compiler.
        return Ok(
            pmlab_emu::cc::compile(&rest, lang, gcc).unwrap_or_else(|e| {
                println!("(no compiler's help: {e})");
                0
            }),
        );
    }
    Ok(pmlab_emu::cc::compile(&rest, lang, gcc)?)
}
