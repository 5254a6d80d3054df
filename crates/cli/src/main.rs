//! The `pmlab` binary: parse the command line, dispatch to one command
//! module, map errors to exit codes. Each command lives in `cmd/<name>.rs`
//! and does its work through the library crates.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

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
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Calibrate(a) => cmd::calibrate::run(a),
        Command::Cc(a) => cmd::cc::run(a, cmd::cc::Lang::C, false),
        Command::Cxx(a) => cmd::cc::run(a, cmd::cc::Lang::Cxx, false),
        Command::Gcc(a) => cmd::cc::run(a, cmd::cc::Lang::C, true),
        Command::Gxx(a) => cmd::cc::run(a, cmd::cc::Lang::Cxx, true),
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
