//! `pmlab sim`: replay a trace on a simulated memory system, list and show
//! presets, and regenerate the validation report.
//!
//! ```text
//! pmlab sim --preset optane-1dimm trace.pmt [--mode closed|open:64|timed] [--json]
//! pmlab sim --config my.toml --trace-format text trace.txt
//! pmlab sim presets
//! pmlab sim show optane-6dimm
//! pmlab sim validate --write docs/validation.md --plot docs/validation
//! ```
//!
//! Every plotting option is `--plot DIR` (SVG and PNG of each chart).

use anyhow::{bail, Context};
use pmlab_sim::drive::{Driver, Mode};
use pmlab_sim::{presets, System};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Arguments of `pmlab sim`.
#[derive(clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Examples:
  pmlab sim gen random-read r.pmt --count 1000000 --span 1GiB
  pmlab sim --preset optane-1dimm --mode open:64 r.pmt --plot out/
      replays 1 M random reads with 64 in flight; prints latency percentiles
      (p50 to p99.999) and every component's statistics; out/ gets
      latency-tail.svg and .png
  pmlab sim --preset optane-1dimm --persistency all app.pmt
      compares x86-nvm, x86-adr, hops, hops-adr and ideal on a traced program
  pmlab sim --preset ddr4-2666 --json r.pmt | jq .stats.latency.read.p99"
)]
pub struct Args {
    #[command(subcommand)]
    sub: Option<Sub>,
    /// The trace to replay.
    trace: Option<PathBuf>,
    /// A bundled configuration (see `pmlab sim presets`).
    #[arg(long, conflicts_with = "config")]
    preset: Option<String>,
    /// A TOML configuration file (see docs/simulator.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// closed (latency), open:N (N outstanding per thread: bandwidth) or
    /// timed (issue at trace timestamps).
    #[arg(long, default_value = "closed")]
    mode: String,
    /// Trace format: pmt, text, lackey (valgrind --tool=lackey
    /// --trace-mem=yes), dramsim (address op cycle lines) or whisper.
    /// Default: recognised from the content.
    #[arg(long)]
    trace_format: Option<String>,
    /// memory: each W record is a memory write (DRAM-simulator traces);
    /// cached: W dirties a cache line that CLWB/CLFLUSH or an eviction
    /// writes back (traces of programs). Default: the config's cpu.stores.
    #[arg(long)]
    stores: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Replay under persistency models instead (docs/whisper.md): x86-nvm,
    /// x86-adr, hops, hops-adr, ideal, a comma-separated list, or all;
    /// hops@N (hops-adr@N) drains the persist buffers from N entries.
    #[arg(long)]
    persistency: Option<String>,
    /// With --persistency: count flushed lines as stored, on, off or auto
    /// (on for traces whose header says plain stores were not recorded),
    /// as in `pmlab analyze`.
    #[arg(long, default_value = "auto")]
    infer_stores: String,
    /// With --persistency: which flushes invalidate the line under the
    /// x86 models, so that the next store to it reads it from PM first
    /// (its write-back waits for that read): auto (clflush and clflushopt,
    /// as the Intel SDM documents; clwb retains), all (clwb too), none.
    #[arg(long, default_value = "auto")]
    flush_invalidates: String,
    /// Show progress on stderr even when it is not a terminal.
    #[arg(long)]
    progress: bool,
    /// Only read the trace, simulate nothing (measures parsing rate).
    #[arg(long)]
    parse_only: bool,
    /// Also draw the latency distribution of each operation class (a tail
    /// plot) into this directory, as latency-tail.svg and latency-tail.png.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// The tail plot to one file, SVG or PNG after its extension (the
    /// flag before --plot).
    #[arg(long, hide = true, value_name = "FILE")]
    svg: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Sub {
    /// List the bundled presets.
    #[command(after_help = "Example:
  pmlab sim presets --json | jq -r '.[].name'
      the names to pass to --preset")]
    Presets {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show every parameter of a preset (or of --config FILE) with its
    /// unit and source.
    #[command(after_help = "Examples:
  pmlab sim show optane-1dimm
      every parameter (controller.dimm.rmw_bytes  16KiB ...) with the
      paper and figure it comes from
  pmlab sim show --config my-device.toml --json")]
    Show {
        /// Preset name.
        name: Option<String>,
        /// A configuration file instead of a preset.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the validation experiments (LENS, Yang et al.) and print or
    /// write the report.
    #[command(after_help = "Example:
  pmlab sim validate --quick --write v.md --plot v/
      compares the simulator with 23 published Optane and DRAM figures and
      8 curve shapes; v.md holds the table, v/ the curves (SVG and PNG)")]
    Validate {
        /// Write the Markdown report to this file (docs/validation.md).
        #[arg(long)]
        write: Option<PathBuf>,
        /// Shorter wear-leveling runs (skips the tail-frequency sweep).
        #[arg(long)]
        quick: bool,
        /// Also draw the curves into this directory (SVG and PNG).
        #[arg(long, alias = "svg", value_name = "DIR")]
        plot: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write a synthetic trace (64 B records, 1 ns apart) for benchmarks
    /// and experiments: one or more threads, accesses of any multiple of
    /// 64 B, optional fences.
    #[command(
        after_help = "Each access of --chunk bytes becomes chunk/64 records of 64 B at
consecutive addresses. With --threads N the threads' accesses are
interleaved one access at a time (thread 0, 1, ..., N-1, 0, ...), each
record carrying its thread id; each thread has its own --span region
(thread i at i x span) unless --shared. --fence-every K puts an sfence
record of the thread after every K of its accesses. --count is the number
of accesses of all threads together.

Examples:
  pmlab sim gen random-write w.trc --count 100000 --span 64MiB --format dramsim
      100,000 random 64 B writes over 64 MiB as DRAMsim3 lines, for pmlab sim
      and for other simulators
  pmlab sim gen seq-ntwrite hot.pmt --span 256B --chunk 256B --fence-every 1 --count 400000
  pmlab sim --preset optane-1dimm hot.pmt
      LENS's overwrite (Yang et al.'s hot region): 256 B non-temporal stores
      to one XPLine, a fence after each; the latency table shows the
      wear-leveling stalls (tens of us) at p99.999
  pmlab sim gen random-ntwrite mt.pmt --threads 4 --fence-every 1 --span 1MiB
      four threads, each storing 64 B at random in its own 1 MiB and fencing
      after each store: each thread's fence orders only its own writes"
    )]
    Gen(GenArgs),
}

/// Arguments of `pmlab sim gen`.
#[derive(clap::Args)]
struct GenArgs {
    /// seq-read, seq-write, seq-ntwrite, random-read, random-write or
    /// random-ntwrite.
    pattern: String,
    /// Output file.
    out: PathBuf,
    /// Number of accesses (all threads together).
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Address span of each thread's region (e.g. 1GiB); sequential
    /// patterns wrap around in it.
    #[arg(long, default_value = "1GiB")]
    span: String,
    /// Bytes per access, a multiple of 64 (e.g. 256B): split into 64 B
    /// records at consecutive addresses.
    #[arg(long, default_value = "64B")]
    chunk: String,
    /// Threads, their accesses interleaved one at a time.
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// All threads use the same region (default: one region per thread).
    #[arg(long)]
    shared: bool,
    /// An sfence of the thread after every this many of its accesses
    /// (0: none).
    #[arg(long, default_value_t = 0)]
    fence_every: u64,
    /// Output format: pmt, text or dramsim.
    #[arg(long, default_value = "pmt")]
    format: String,
    /// Seed of random patterns.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print what was written as JSON.
    #[arg(long)]
    json: bool,
}

/// Synthetic access patterns of `pmlab sim gen`.
const PATTERNS: &str =
    "seq-read, seq-write, seq-ntwrite, random-read, random-write, random-ntwrite";

/// Run the command.
pub fn run(args: Args) -> anyhow::Result<u8> {
    match args.sub {
        Some(Sub::Presets { json }) => presets_cmd(json),
        Some(Sub::Show {
            ref name,
            ref config,
            json,
        }) => show(name.as_deref(), config.as_deref(), json),
        Some(Sub::Validate {
            ref write,
            quick,
            ref plot,
            json,
        }) => validate(
            write.as_deref(),
            quick,
            plot.as_deref(),
            json,
            args.progress,
        ),
        Some(Sub::Gen(ref g)) => gen(g),
        None => replay(&args),
    }
}

fn build(preset: Option<&str>, config: Option<&Path>) -> anyhow::Result<System> {
    Ok(match (preset, config) {
        (Some(p), None) => System::preset(p)?,
        (None, Some(c)) => System::from_file(c)?,
        (None, None) => bail!(
            "no memory system given: pass --preset NAME (see 'pmlab sim presets') or --config FILE"
        ),
        (Some(_), Some(_)) => bail!("--preset and --config are exclusive: pass one"),
    })
}

fn replay(args: &Args) -> anyhow::Result<u8> {
    let Some(trace) = &args.trace else {
        bail!("no trace given: pmlab sim --preset NAME TRACE (or 'pmlab sim presets', 'pmlab sim show NAME', 'pmlab sim validate')");
    };
    if let Some(models) = &args.persistency {
        return super::persistency::run(&super::persistency::Options {
            trace,
            format: args.trace_format.as_deref(),
            preset: args.preset.as_deref(),
            config: args.config.as_deref(),
            models,
            infer_stores: &args.infer_stores,
            flush_invalidates: &args.flush_invalidates,
            json: args.json,
            progress: args.progress,
        });
    }
    let mode = Mode::parse(&args.mode)?;
    let records = open_trace(trace, args.trace_format.as_deref())?;
    let format = records.header().format.name();
    let mut progress = crate::progress::Progress::new(args.json, args.progress);
    let start = std::time::Instant::now();
    if args.parse_only {
        let mut n: u64 = 0;
        for r in records {
            r?;
            n += 1;
        }
        let wall = start.elapsed().as_secs_f64();
        let rate = n as f64 / wall.max(1e-9);
        if args.json {
            let v = serde_json::json!({"trace": trace.display().to_string(), "records": n, "wall_seconds": wall, "records_per_second": rate, "peak_rss_kib": peak_rss_kib()});
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!(
                "{n} records in {wall:.3} s: {:.2} M records/s, peak RSS {} KiB",
                rate / 1e6,
                peak_rss_kib()
            );
        }
        return Ok(0);
    }
    let mut sys = build(args.preset.as_deref(), args.config.as_deref())?;
    match args.stores.as_deref() {
        None => {}
        Some("cached") => sys.set_cached_stores(true),
        Some("memory") => sys.set_cached_stores(false),
        Some(other) => bail!("unknown --stores '{other}': expected memory or cached"),
    }
    let mut driver = Driver::new(mode);
    let summary = driver.run(&mut sys, records, |n| {
        progress.count("pmlab sim: simulating", n, "records")
    })?;
    progress.finish();
    if summary.requests + summary.skipped == 0 {
        bail!(
            "{}: the trace holds no records (an empty file, or comments only): nothing to simulate",
            trace.display()
        );
    }
    if summary.requests == 0 {
        bail!(
            "{}: none of its {} records is a request to the simulated memory (all are DRAM accesses or markers): nothing to simulate",
            trace.display(),
            summary.skipped
        );
    }
    let wall = start.elapsed().as_secs_f64();
    // Let buffered writes reach the media so that media statistics count
    // every write of the trace.
    let drained = sys.drain(summary.end_ns);
    let stats = sys.stats();
    if let Some(path) = &args.svg {
        tail_plot(&sys, path, "--svg")?;
    }
    if let Some(dir) = &args.plot {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--plot: cannot create directory {}", dir.display()))?;
        for ext in ["svg", "png"] {
            tail_plot(&sys, &dir.join(format!("latency-tail.{ext}")), "--plot")?;
        }
    }
    let mode_name = args.mode.clone();
    if args.json {
        let v = serde_json::json!({
            "system": sys.name(),
            "trace": trace.display().to_string(),
            "trace_format": format,
            "mode": mode_name,
            "requests": summary.requests,
            "skipped": summary.skipped,
            "end_ns": summary.end_ns,
            "media_drained_ns": drained,
            "wall_seconds": wall,
            "requests_per_second": summary.requests as f64 / wall.max(1e-9),
            "peak_rss_kib": peak_rss_kib(),
            "stats": stats,
            "units": stats.units().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "system    {} ({})", sys.name(), sys.description())?;
    writeln!(
        out,
        "trace     {} ({format}; {} requests, {} skipped: DRAM records and markers)",
        trace.display(),
        summary.requests,
        summary.skipped
    )?;
    writeln!(out, "mode      {mode_name}")?;
    writeln!(
        out,
        "simulated {:.3} us (wall {:.2} s, {:.2} M req/s, peak RSS {} KiB)",
        summary.end_ns / 1e3,
        wall,
        summary.requests as f64 / wall.max(1e-9) / 1e6,
        peak_rss_kib()
    )?;
    writeln!(
        out,
        "drained   every buffered write on the media at {:.3} us",
        drained / 1e3
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10}",
        "latency", "count", "mean", "p50", "p90", "p99", "p99.9", "p99.99", "p99.999", "max"
    )?;
    if let Some(lat) = stats.children.iter().find(|c| c.name == "latency") {
        for c in &lat.children {
            let g = |k: &str| c.get(k).unwrap_or(0.0);
            writeln!(
                out,
                "{:<9} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                c.name,
                g("count"),
                g("mean"),
                g("p50"),
                g("p90"),
                g("p99"),
                g("p999"),
                g("p9999"),
                g("p99999"),
                g("max")
            )?;
        }
    }
    writeln!(out, "(ns)")?;
    writeln!(out)?;
    for (name, value, unit) in stats.flatten() {
        if name.starts_with("latency.") {
            continue;
        }
        writeln!(out, "{name:<48} {:>16} {unit}", fmt_value(value))?;
    }
    Ok(0)
}

fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// Open a trace in any supported format (`--trace-format` names one;
/// otherwise `pmlab_trace::open` recognises it from the content).
pub fn open_trace(path: &Path, format: Option<&str>) -> anyhow::Result<pmlab_trace::Trace> {
    let format = match format {
        Some(f) => Some(pmlab_trace::Format::from_name(f)?),
        None => None,
    };
    Ok(pmlab_trace::open(path, format)?)
}

/// Peak resident memory of this process in KiB (Linux; 0 elsewhere).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn presets_cmd(json: bool) -> anyhow::Result<u8> {
    if json {
        let v: Vec<_> = presets::ALL
            .iter()
            .map(|p| serde_json::json!({"name": p.name, "about": p.about}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for p in presets::ALL {
            println!("{:<14} {}", p.name, p.about);
        }
    }
    Ok(0)
}

fn show(name: Option<&str>, config: Option<&Path>, json: bool) -> anyhow::Result<u8> {
    let (sys, text) = match (name, config) {
        (Some(n), None) => (System::preset(n)?, presets::find(n)?.toml.to_string()),
        (None, Some(c)) => {
            let text = std::fs::read_to_string(c)
                .with_context(|| format!("cannot read config {}", c.display()))?;
            (System::from_toml(&text, &c.display().to_string())?, text)
        }
        _ => bail!("pass a preset name or --config FILE: pmlab sim show optane-1dimm"),
    };
    let rows: Vec<_> = sys
        .params()
        .iter()
        .map(|p| {
            let source = if p.given {
                presets::source_of_in(&text, &p.component, &p.name).unwrap_or_default()
            } else {
                format!("default: {}", p.doc)
            };
            (p, source)
        })
        .collect();
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(p, src)| serde_json::json!({"component": p.component, "name": p.name, "value": p.value, "meaning": p.doc, "source": src}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"name": sys.name(), "description": sys.description(), "parameters": v})
            )?
        );
        return Ok(0);
    }
    println!("{}: {}", sys.name(), sys.description());
    for (p, src) in rows {
        println!(
            "{:<32} {:>12}  {}",
            format!("{}.{}", p.component, p.name),
            p.value,
            p.doc
        );
        if p.given && !src.is_empty() {
            println!("{:<32} {:>12}  source: {src}", "", "");
        }
    }
    Ok(0)
}

fn validate(
    write: Option<&Path>,
    quick: bool,
    plot: Option<&Path>,
    json: bool,
    progress: bool,
) -> anyhow::Result<u8> {
    let mut shown = crate::progress::Progress::new(json, progress);
    let report = pmlab_sim::validate::run(quick, |step| {
        shown.message(&format!("pmlab sim validate: {step}"))
    })?;
    shown.finish();
    let command = if quick {
        "pmlab sim validate --quick --write docs/validation.md"
    } else {
        "pmlab sim validate --write docs/validation.md"
    };
    // Link the SVGs relative to the Markdown file when both are written.
    let images = plot.map(|dir| {
        let base = write.and_then(|w| w.parent()).unwrap_or(Path::new(""));
        dir.strip_prefix(base).unwrap_or(dir).display().to_string()
    });
    let command = match (plot, write) {
        (Some(d), Some(w)) => format!(
            "pmlab sim validate{} --write {} --plot {}",
            if quick { " --quick" } else { "" },
            w.display(),
            d.display()
        ),
        _ => command.to_string(),
    };
    let md = report.markdown(&command, images.as_deref());
    if let Some(dir) = plot {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for c in &report.curves {
            for ext in ["svg", "png"] {
                write_curve(c, &dir.join(format!("{}.{ext}", c.id)))?;
            }
        }
    }
    if let Some(path) = write {
        // The device section is `pmlab validate --device --write`'s: kept.
        let old = std::fs::read_to_string(path).unwrap_or_default();
        let md = match pmlab_sim::validate::device_section_of(&old) {
            Some(sec) => pmlab_sim::validate::splice_device_section(&md, sec),
            None => md.clone(),
        };
        crate::cmd::write_atomic(path, md.as_bytes(), "--write")?;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if write.is_none() {
        print!("{md}");
    } else {
        println!(
            "average accuracy {:.1}% over {} figures; {} of {} shapes reproduced; written to {}",
            report.average_accuracy_pct,
            report.figures.len(),
            report.shapes.iter().filter(|s| s.reproduced).count(),
            report.shapes.len(),
            write.unwrap().display()
        );
    }
    Ok(0)
}

fn gen(g: &GenArgs) -> anyhow::Result<u8> {
    use pmlab_trace::{binary, import::dramsim, text, Op, Record};
    let (pattern, out, count, format, seed, json) = (
        g.pattern.as_str(),
        g.out.as_path(),
        g.count,
        g.format.as_str(),
        g.seed,
        g.json,
    );
    let span = pmlab_model::Bytes::parse(&g.span)
        .map_err(|e| anyhow::anyhow!("--span: {e}"))?
        .get();
    if span < 64 {
        bail!("--span must be at least 64 bytes, got {span}");
    }
    let chunk = pmlab_model::Bytes::parse(&g.chunk)
        .map_err(|e| anyhow::anyhow!("--chunk: {e}"))?
        .get();
    if chunk == 0 || chunk % 64 != 0 || chunk > span {
        bail!("--chunk must be a multiple of 64 bytes from 64 B to --span ({span} B), got {chunk}");
    }
    if g.count == 0 {
        bail!("--count must be at least 1: a trace without records is one pmlab sim refuses");
    }
    if g.threads == 0 || g.threads > 4096 {
        bail!("--threads must be from 1 to 4096, got {}", g.threads);
    }
    let (op, random) = match pattern {
        "seq-read" => (Op::Read, false),
        "seq-write" => (Op::Write, false),
        "seq-ntwrite" => (Op::NtWrite, false),
        "random-read" => (Op::Read, true),
        "random-write" => (Op::Write, true),
        "random-ntwrite" => (Op::NtWrite, true),
        _ => bail!("unknown pattern '{pattern}': expected one of {PATTERNS}"),
    };
    if !["pmt", "text", "dramsim"].contains(&format) {
        bail!("unknown output format '{format}': expected pmt, text or dramsim");
    }
    if format == "dramsim" && (g.threads > 1 || g.fence_every > 0) {
        bail!("DRAMsim3 lines carry no thread ids or fences: use --format pmt or text with --threads or --fence-every");
    }
    let threads = g.threads as u64;
    let chunks = span / chunk;
    let mut state = seed;
    let mut rand = move || -> u64 {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    // Access i is thread i % threads's access number i / threads.
    let mut records = 0u64;
    let mut emit = |sink: &mut dyn FnMut(&Record) -> anyhow::Result<()>| -> anyhow::Result<()> {
        for i in 0..count {
            let th = i % threads;
            let k = i / threads;
            let pos = if random { rand() % chunks } else { k % chunks };
            let base = if g.shared { 0 } else { th * span };
            for l in 0..chunk / 64 {
                sink(&Record::new(
                    records,
                    th as u32,
                    op,
                    base + pos * chunk + l * 64,
                    64,
                ))?;
                records += 1;
            }
            if g.fence_every > 0 && (k + 1).is_multiple_of(g.fence_every) {
                sink(&Record::new(records, th as u32, Op::SFence, 0, 0))?;
                records += 1;
            }
        }
        Ok(())
    };
    if out.is_dir() {
        bail!(
            "{}: is a directory: give a file name for the trace",
            out.display()
        );
    }
    let tmp = crate::cmd::temp_beside(out);
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("cannot write {}", out.display()))?;
    // A failed run leaves neither a part of the trace nor the temporary file.
    struct Cleanup<'a>(&'a std::path::Path, bool);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            if !self.1 {
                let _ = std::fs::remove_file(self.0);
            }
        }
    }
    let mut cleanup = Cleanup(&tmp, false);
    let mut w = std::io::BufWriter::with_capacity(1 << 16, file);
    if format == "pmt" {
        let mut bw = binary::Writer::with_meta(
            &mut w,
            &[("generator", "pmlab sim gen"), ("pattern", pattern)],
        )?;
        emit(&mut |r| Ok(bw.write(r)?))?;
        bw.finish()?;
    } else if format == "text" {
        emit(&mut |r| Ok(text::write_record(&mut w, r)?))?;
    } else {
        emit(&mut |r| {
            dramsim::write_record(&mut w, r)?;
            Ok(())
        })?;
    }
    w.flush()?;
    drop(w);
    std::fs::rename(&tmp, out).with_context(|| format!("cannot write {}", out.display()))?;
    cleanup.1 = true;
    if json {
        let bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
        let v = serde_json::json!({"path": out.display().to_string(), "pattern": pattern, "accesses": count, "records": records, "threads": threads, "chunk": chunk, "fence_every": g.fence_every, "format": format, "bytes": bytes});
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(0)
}

fn write_curve(c: &pmlab_sim::validate::Curve, path: &Path) -> anyhow::Result<()> {
    use pmlab_plot::{Axis, Format, LineChart, Scale, Series};
    let x = Axis::new(c.x_label);
    let x = if c.x_bytes {
        x.scale(Scale::Log).format(Format::Bytes)
    } else {
        x
    };
    let y = Axis::new(c.y_label);
    let y = if c.y_ns { y.format(Format::Nanos) } else { y };
    let y = if c.y_log { y.scale(Scale::Log) } else { y };
    let mut chart = LineChart::new(c.title).x_axis(x).y_axis(y);
    for (name, pts) in &c.series {
        chart = chart.series(Series::new(name.clone(), pts.clone()).dots(true));
    }
    chart
        .save(path)
        .map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", path.display()))
}

/// Latency against the share of requests slower than it, per class.
fn tail_plot(sys: &System, path: &Path, flag: &str) -> anyhow::Result<()> {
    use pmlab_plot::{Axis, Format, LineChart, Scale, Series};
    let mut chart = LineChart::new(format!(
        "Request latency by share of slower requests, {}",
        sys.name()
    ))
    .x_axis(Axis::new("requests slower (%)").scale(Scale::Log))
    .y_axis(Axis::new("latency").scale(Scale::Log).format(Format::Nanos));
    let mut any = false;
    for class in ["read", "write", "nt_write", "flush", "fence"] {
        let Some(h) = sys.latency(class) else {
            continue;
        };
        if h.count() == 0 || h.max() <= 0.0 {
            continue; // nothing to show on a log axis
        }
        let pts: Vec<(f64, f64)> = [
            50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 99.995, 99.999,
        ]
        .iter()
        .map(|p| (100.0 - p, h.percentile(*p).max(0.01)))
        .collect();
        chart = chart.series(Series::new(class, pts).dots(true));
        any = true;
    }
    if !any {
        bail!("{flag}: the trace has no timed requests to plot");
    }
    chart
        .save(path)
        .map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", path.display()))
}
