//! `pmlab check TRACE`: find PM ordering and durability bugs in a trace
//! (the work is in `pmlab-check`). Exit 0 when clean, 1 with findings, 2
//! on errors.

use std::path::PathBuf;

/// Arguments of `pmlab check`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace (.pmt, recorded with `pmlab trace --sites` for source
    /// locations).
    pub trace: PathBuf,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Judge redundant flushes even if the trace says the program's own
    /// stores were not recorded.
    #[arg(long)]
    pub assume_complete_stores: bool,
    /// Print every record and annotation of the trace as text instead of
    /// checking it.
    #[arg(long)]
    pub dump: bool,
}

/// Run the command.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if args.dump {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        pmlab_check::dump(&args.trace, &mut out)?;
        return Ok(0);
    }
    let opts = pmlab_check::Options {
        assume_complete_stores: args.assume_complete_stores,
    };
    let t = std::time::Instant::now();
    let cpu0 = cpu_seconds();
    let report = pmlab_check::check_trace(&args.trace, opts)?;
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    if args.json {
        let mut v = report.to_json();
        v["check_seconds"] = secs.into();
        v["check_cpu_seconds"] = cpu.into();
        println!("{v}");
    } else {
        print!("{}", report.to_text());
    }
    Ok(if report.total() > 0 { 1 } else { 0 })
}

/// User plus system CPU time of this process so far.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(u.ru_utime) + tv(u.ru_stime)
}
