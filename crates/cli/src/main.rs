//! The `pmlab` binary: parse the command line, dispatch to one command
//! module, map errors to exit codes. Each command lives in `cmd/<name>.rs`
//! and does its work through the library crates.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

mod progress;

mod cmd;

/// pmlab: emulate, simulate, profile and trace software for persistent and
/// other slow memory.
#[derive(Parser)]
#[command(name = "pmlab", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a program as if its memory were slower persistent memory.
    Run(cmd::run::Args),
    /// Measure this machine's memory latency and cache it for `run`.
    Calibrate(cmd::calibrate::Args),
    /// Compile C with pmlab's instrumentation (a drop-in for CC).
    Cc(cmd::cc::Args),
    /// Compile C++ with pmlab's instrumentation (a drop-in for CXX).
    #[command(name = "c++")]
    Cxx(cmd::cc::Args),
    /// As `cc`, always with gcc (CC="pmlab gcc": the choice stays with the build).
    Gcc(cmd::cc::Args),
    /// As `c++`, always with g++.
    #[command(name = "g++")]
    Gxx(cmd::cc::Args),
    /// Build Rust with pmlab's instrumentation (cargo with the hooks of `cc`).
    Cargo(cmd::cargo::Args),
    /// Measure the emulator's accuracy on the bundled workloads.
    Validate(cmd::validate::Args),
    /// Simulate a memory device on a trace.
    Sim(cmd::sim::Args),
    /// Run LENS probes on the host or on the simulator; infer a profile.
    Probe(cmd::probe::Args),
    /// Record a program's PM operations into a trace.
    Trace(cmd::trace::Args),
    /// Analyse a PM trace (WHISPER metrics).
    Analyze(cmd::analyze::Args),
    /// Find missing flushes and fences, and unlogged transactional stores.
    Check(cmd::check::Args),
    /// Test a program's recovery on the crash images its trace allows.
    Crash(cmd::crash::Args),
}

fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Calibrate(a) => cmd::calibrate::run(a),
        Command::Cc(a) => cmd::cc::run(a, cmd::cc::Lang::C, false),
        Command::Cxx(a) => cmd::cc::run(a, cmd::cc::Lang::Cxx, false),
        Command::Gcc(a) => cmd::cc::run(a, cmd::cc::Lang::C, true),
        Command::Gxx(a) => cmd::cc::run(a, cmd::cc::Lang::Cxx, true),
        Command::Cargo(a) => cmd::cargo::run(a),
        Command::Validate(a) => cmd::validate::run(a),
        Command::Sim(a) => cmd::sim::run(a),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Trace(a) => cmd::trace::run(a),
        Command::Analyze(a) => cmd::analyze::run(a),
        Command::Check(a) => cmd::check::run(a),
        Command::Crash(a) => cmd::crash::run(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("pmlab: error: {}", one_line(&err));
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The error and its causes on one line: "what: why: deeper why".
fn one_line(err: &anyhow::Error) -> String {
    let parts: Vec<String> = err.chain().map(|c| c.to_string()).collect();
    parts.join(": ")
}

/// Parse the command line. Help and version print as clap writes them (exit
/// 0); every other parse error is one `pmlab: error:` line (exit 2).
fn parse() -> Result<Cli, ExitCode> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut cmd = allow_negative_numbers(Cli::command());
    let parsed = cmd
        .try_get_matches_from_mut(&args)
        .and_then(|mut m| Cli::from_arg_matches_mut(&mut m).map_err(|e| e.format(&mut cmd)));
    parsed.map_err(|e| {
        use clap::error::ErrorKind;
        match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                let _ = e.print();
                ExitCode::SUCCESS
            }
            _ => {
                eprintln!("pmlab: error: {}", clap_one_line(&e, &cmd, &args));
                ExitCode::from(2)
            }
        }
    })
}

/// Let every option value look like a negative number (`--offset -5`), so
/// that clap hands it to the option (which accepts it or names the bad
/// value) instead of taking it for a flag and giving a wrong tip.
fn allow_negative_numbers(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        if a.get_action().takes_values() {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    })
    .mut_subcommands(allow_negative_numbers)
}

/// A clap error as one line: clap's own first line, its suggestion if it has
/// one, and which `--help` to read (that of the subcommand named in `args`).
fn clap_one_line(e: &clap::Error, root: &clap::Command, args: &[std::ffi::OsString]) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let mut sub = root;
    let mut path = vec!["pmlab"];
    for a in args.iter().skip(1).filter_map(|a| a.to_str()) {
        if a == "--" {
            break;
        }
        if let Some(s) = sub.find_subcommand(a) {
            sub = s;
            path.push(s.get_name());
        }
    }
    let see = format!("see '{} --help'", path.join(" "));
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let names: Vec<&str> = sub
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name())
            .filter(|n| *n != "help")
            .collect();
        return if names.is_empty() {
            format!("'{}' needs more arguments; {see}", path.join(" "))
        } else {
            format!(
                "'{}' needs a command: {}; {see}",
                path.join(" "),
                names.join(", ")
            )
        };
    }
    let rendered = e.render().to_string();
    if e.kind() == ErrorKind::ArgumentConflict && rendered.contains("the subcommand '") {
        // `pmlab sim run trace.pmt`: clap took `run` for the trace and the
        // trace for a subcommand, and says so backwards.
        let names: Vec<&str> = sub
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name())
            .filter(|n| *n != "help")
            .collect();
        return format!(
            "'{}' takes either one of its commands ({}) or its own arguments, and read two file names: give one ('{} [OPTIONS] FILE'); {see}",
            path.join(" "),
            names.join(", "),
            path.join(" ")
        );
    }
    let mut first = rendered
        .lines()
        .next()
        .unwrap_or("invalid command line")
        .trim_start_matches("error: ")
        .to_string();
    if first.ends_with(':') {
        // clap lists what it means on the lines below (the missing
        // arguments): keep them on this one.
        let rest: Vec<&str> = rendered
            .lines()
            .skip(1)
            .map(str::trim)
            .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
            .collect();
        if !rest.is_empty() {
            first = format!("{first} {}", rest.join(", "));
        }
    }
    let mut hints = Vec::new();
    for (kind, value) in e.context() {
        let quoted = |v: &ContextValue| match v {
            ContextValue::String(s) => format!("'{s}'"),
            ContextValue::Strings(v) => {
                let q: Vec<String> = v.iter().map(|s| format!("'{s}'")).collect();
                q.join(" or ")
            }
            other => other.to_string(),
        };
        match (kind, value) {
            (
                ContextKind::SuggestedArg
                | ContextKind::SuggestedSubcommand
                | ContextKind::SuggestedValue,
                _,
            ) => hints.push(format!("did you mean {}?", quoted(value))),
            (ContextKind::ValidValue, ContextValue::Strings(v))
                if !v.is_empty() && !first.contains("possible values") =>
            {
                hints.push(format!("possible values: {}", v.join(", ")))
            }
            _ => {}
        }
    }
    if hints.is_empty() {
        format!("{first}; {see}")
    } else {
        format!("{first} ({}); {see}", hints.join("; "))
    }
}
