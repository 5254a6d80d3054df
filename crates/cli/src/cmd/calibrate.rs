//! `pmlab calibrate`: measure this machine's DRAM latency and TSC frequency
//! and cache them for `pmlab run` (the work is `pmlab_emu::calibrate`).

use pmlab_emu::calibrate::{self, Calibration, Note, Settings};
use pmlab_model::units::Bytes;
use std::io::{IsTerminal, Write};

/// Arguments of `pmlab calibrate`.
#[derive(clap::Args)]
#[command(
    after_help = "Example:\n  pmlab calibrate            # measure and cache (a few seconds)\n  pmlab calibrate --show --json   # the cached result, for scripts"
)]
pub struct Args {
    /// Region to chase over (default: 8x the LLC, at least 256MiB, at most 1GiB).
    #[arg(long)]
    pub region: Option<String>,
    /// Dependent loads per measurement.
    #[arg(long, default_value_t = 10_000_000)]
    pub accesses: u64,
    /// Measurements (the median is kept).
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Print the cached calibration without measuring (error if none).
    #[arg(long)]
    pub show: bool,
    /// Measure but do not write the cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Show progress on stderr even when it is not a terminal.
    #[arg(long)]
    pub progress: bool,
}

fn print(c: &Calibration, json: bool, cached: bool) -> anyhow::Result<()> {
    if json {
        writeln!(std::io::stdout(), "{}", serde_json::to_string(c)?)?;
        return Ok(());
    }
    let mut out = std::io::stdout();
    writeln!(
        out,
        "dram_latency_ns={:.1} spread_ns={:.1} tsc_ghz={:.3} region={} llc={} huge_pages={} numa_nodes={}{}",
        c.dram_latency_ns,
        c.dram_latency_spread_ns,
        c.tsc_ghz,
        Bytes(c.region_bytes),
        Bytes(c.llc_bytes),
        c.huge_pages,
        c.numa_nodes,
        if cached { " (cached)" } else { "" }
    )?;
    if c.effective_llc_bytes > 0 {
        writeln!(
            out,
            "effective_llc={} (half of a chase's loads miss there; the instrumented source models it: PMLAB_INSTR_LLC={})",
            Bytes(c.effective_llc_bytes),
            calibrate::instr_llc_setting(c).unwrap_or_default()
        )?;
    } else {
        writeln!(
            out,
            "effective_llc=unknown (not measured, or no knee: the instrumented source models the sysfs size)"
        )?;
    }
    match c.remote_latency_ns {
        Some(r) => writeln!(out, "remote_latency_ns={r:.1}")?,
        None => writeln!(
            out,
            "one NUMA node: no remote latency measured (two-memory mode, --remote-latency, is unavailable here)"
        )?,
    }
    Ok(())
}

/// Print a calibration note on stderr: warnings always, progress when
/// asked for (or on a terminal).
pub fn note(progress: bool) -> impl Fn(Note) {
    move |n| match n {
        Note::Warning(w) => eprintln!("pmlab: warning: {w}"),
        Note::Info(i) => eprintln!("pmlab: {i}"),
        Note::Progress(p) if progress => eprintln!("pmlab: calibrate: {p}"),
        Note::Progress(_) => {}
    }
}

/// Run the command.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if args.show {
        let c = calibrate::load_cache()?.ok_or_else(|| {
            anyhow::anyhow!("no calibration cached for this machine: run `pmlab calibrate`")
        })?;
        print(&c, args.json, true)?;
        return Ok(0);
    }
    let region = match &args.region {
        Some(s) => Some(
            Bytes::parse(s)
                .map_err(|e| anyhow::anyhow!("--region: {e}"))?
                .get(),
        ),
        None => None,
    };
    let settings = Settings {
        region,
        accesses: args.accesses,
        repeat: args.repeat,
        effective_llc: true,
    };
    let progress = args.progress || std::io::stderr().is_terminal();
    let c = calibrate::measure(&settings, &note(progress))?;
    if !args.no_cache {
        calibrate::save(&c)?;
        if !args.json {
            eprintln!("pmlab: cached in {}", calibrate::cache_path()?.display());
        }
    }
    print(&c, args.json, false)?;
    Ok(0)
}
