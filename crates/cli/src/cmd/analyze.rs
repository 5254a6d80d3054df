//! `pmlab analyze`: WHISPER's metrics of a PM trace, as a table or JSON.
//!
//! The analysis itself is `pmlab_trace::analyze`; this module opens the
//! trace, decides whether flushes stand for stores (traces of unmodified
//! PMDK programs), shows progress and prints.

use anyhow::{bail, Context};
use pmlab_model::units::Nanos;
use pmlab_trace::analyze::{Analyzer, Config, Histogram, Report};
use pmlab_trace::Format;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `pmlab analyze`.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  pmlab trace -o app.pmt -- ./app
  pmlab analyze app.pmt --window 50us --plot out/
      WHISPER's metrics (epochs, epoch sizes, singletons, dependencies within
      50 us, write amplification); out/ gets epoch_size, epochs_per_tx and
      singleton_bytes as SVG and PNG
  pmlab analyze --format whisper whisper-trace.txt --json | jq .epochs")]
pub struct Args {
    /// The trace (.pmt, pmlab text, or a WHISPER text trace with --format whisper).
    pub trace: PathBuf,
    /// Trace format: pmt, text, whisper, lackey or dramsim (default:
    /// recognised from the content).
    #[arg(long, alias = "trace-format")]
    pub format: Option<String>,
    /// Dependency window (WHISPER: 50us).
    #[arg(long, default_value = "50us")]
    pub window: String,
    /// Count flushed lines as stored: on, off, or auto (on for traces whose
    /// header says the program's plain stores were not recorded: libpmlab
    /// without `pmlab cc` instrumentation).
    #[arg(long, default_value = "auto")]
    pub infer_stores: String,
    /// Draw the distributions into this directory (SVG and PNG).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Show progress on stderr even when it is not a terminal.
    #[arg(long)]
    pub progress: bool,
}

/// Run the command.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let window = Nanos::parse(&args.window)
        .map_err(|e| anyhow::anyhow!("--window: {e}"))?
        .get();
    if window < 1.0 {
        bail!("--window must be at least 1ns (WHISPER uses 50us)");
    }
    let format = match &args.format {
        Some(f) => Some(Format::from_name(f).map_err(|e| anyhow::anyhow!("--format: {e}"))?),
        None => None,
    };
    let (header, stream) = pmlab_trace::open(&args.trace, format)?.into_parts();
    let meta: Meta = header.meta.clone();
    let flushes_as_stores = match args.infer_stores.as_str() {
        "on" => true,
        "off" => false,
        "auto" => header.stores_unseen(),
        other => bail!("--infer-stores '{other}': expected on, off or auto"),
    };
    let cfg = Config {
        window_ns: window as u64,
        flushes_as_stores,
    };
    let mut progress = crate::progress::Progress::new(args.json, args.progress);
    let started = Instant::now();
    let mut a = Analyzer::new(cfg);
    let mut n: u64 = 0;
    for rec in stream {
        let rec = rec?;
        a.push(&rec);
        n += 1;
        if n.is_multiple_of(1 << 20) {
            progress.count("pmlab analyze: reading", n, "records");
        }
    }
    progress.finish();
    if n == 0 {
        bail!(
            "{}: the trace holds no records (an empty file, or comments only): nothing to analyse",
            args.trace.display()
        );
    }
    let report = a.finish();
    let secs = started.elapsed().as_secs_f64();
    if let Some(dir) = &args.plot {
        plot(&report, dir)?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut v = to_json(&report);
        v["trace"] = json!(args.trace.display().to_string());
        v["trace_format"] = json!(header.format.name());
        v["meta"] = json!(meta
            .iter()
            .cloned()
            .collect::<std::collections::BTreeMap<_, _>>());
        v["analysis_seconds"] = json!(secs);
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    } else {
        print_table(&mut out, &args.trace, &report, &meta)?;
    }
    Ok(0)
}

pub(crate) type Meta = Vec<(String, String)>;

fn pct(v: Option<f64>) -> String {
    match v {
        Some(x) => format!("{:.1} %", x * 100.0),
        None => "n/a".into(),
    }
}

fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} K", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn dist(h: &Histogram) -> String {
    match h.median() {
        None => "n/a".into(),
        Some(m) => format!(
            "median {m}, mean {:.2}, p10 {}, p90 {}, max {}",
            h.mean(),
            h.quantile(0.1).unwrap_or(0),
            h.quantile(0.9).unwrap_or(0),
            h.max()
        ),
    }
}

fn print_table(out: &mut impl Write, path: &Path, r: &Report, meta: &Meta) -> anyhow::Result<()> {
    let row = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "  {k:<30} {v}");
    writeln!(
        out,
        "WHISPER metrics of {} (dependency window {})",
        path.display(),
        Nanos::new(r.window_ns as f64)
    )?;
    if let Some((_, p)) = meta.iter().find(|(k, _)| k == "program") {
        row(out, "program", p.clone())?;
    }
    row(out, "records", r.records.to_string())?;
    row(out, "threads", r.threads.to_string())?;
    row(out, "duration", format!("{:.6} s", r.duration_s()))?;
    row(out, "transactions", r.transactions.to_string())?;
    row(out, "epochs", r.epochs.to_string())?;
    row(
        out,
        "epochs per second",
        r.epochs_per_sec().map(si).unwrap_or_else(|| "n/a".into()),
    )?;
    row(out, "epochs per transaction", dist(&r.epochs_per_tx))?;
    row(out, "epoch size (unique 64 B lines)", dist(&r.epoch_lines))?;
    row(out, "singleton epochs", pct(r.singleton_share()))?;
    let sb = &r.singleton_bytes;
    row(
        out,
        "bytes stored by singletons",
        match sb.median() {
            None => "n/a".into(),
            Some(m) => format!(
                "median {m} B; {} under 10 B",
                pct(ratio(sb.count_range(0, 9), sb.count()))
            ),
        },
    )?;
    row(out, "self-dependent epochs", pct(r.self_dep_share()))?;
    row(out, "cross-dependent epochs", pct(r.cross_dep_share()))?;
    row(out, "non-temporal store bytes", pct(r.nt_byte_share()))?;
    row(
        out,
        "write amplification",
        match r.amplification() {
            Some(a) => format!("{:.0} % extra bytes per user byte", a * 100.0),
            None => "n/a (no USERDATA annotations)".into(),
        },
    )?;
    row(
        out,
        "PM share of accesses",
        if r.dram_known {
            pct(r.pm_share())
        } else {
            "n/a (no DRAM records or counts)".into()
        },
    )?;
    row(
        out,
        "PM stores / bytes",
        format!("{} / {}", r.pm_stores, r.pm_store_bytes),
    )?;
    row(
        out,
        "fences (sfence/ofence/dfence)",
        format!(
            "{}/{}/{} ({} with no PM store before)",
            r.fences[0], r.fences[1], r.fences[2], r.empty_fences
        ),
    )?;
    row(out, "flushes", r.flushes.to_string())?;
    if r.flushes_as_stores {
        row(
            out,
            "lines inferred from flushes",
            format!(
                "{} (plain stores not recorded; see --infer-stores)",
                r.inferred_lines
            ),
        )?;
    }
    if r.clamped_records > 0 {
        row(
            out,
            "records over 16 MiB",
            format!("{} (only their first 16 MiB counted)", r.clamped_records),
        )?;
    }
    if r.unmatched_tx_ends > 0 {
        row(out, "unmatched TXEND", r.unmatched_tx_ends.to_string())?;
    }
    Ok(())
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

fn hist_json(h: &Histogram) -> serde_json::Value {
    json!({
        "count": h.count(),
        "median": h.median(),
        "mean": h.mean(),
        "p10": h.quantile(0.1),
        "p90": h.quantile(0.9),
        "max": h.max(),
        "bins": h.bins().map(|(lo, hi, n)| json!([lo, hi, n])).collect::<Vec<_>>(),
    })
}

/// The report as JSON (stable keys, for scripts).
pub fn to_json(r: &Report) -> serde_json::Value {
    json!({
        "records": r.records,
        "threads": r.threads,
        "duration_s": r.duration_s(),
        "window_ns": r.window_ns,
        "flushes_as_stores": r.flushes_as_stores,
        "transactions": r.transactions,
        "epochs": r.epochs,
        "epochs_per_sec": r.epochs_per_sec(),
        "epochs_per_tx": hist_json(&r.epochs_per_tx),
        "epoch_lines": hist_json(&r.epoch_lines),
        "singleton_share": r.singleton_share(),
        "singleton_bytes": hist_json(&r.singleton_bytes),
        "self_dep_share": r.self_dep_share(),
        "cross_dep_share": r.cross_dep_share(),
        "self_dep_epochs": r.self_dep_epochs,
        "cross_dep_epochs": r.cross_dep_epochs,
        "nt_epochs": r.nt_epochs,
        "nt_byte_share": r.nt_byte_share(),
        "amplification": r.amplification(),
        "pm_share": r.pm_share(),
        "pm_accesses": r.pm_accesses,
        "dram_accesses": r.dram_accesses,
        "pm_stores": r.pm_stores,
        "pm_store_bytes": r.pm_store_bytes,
        "nt_store_bytes": r.nt_store_bytes,
        "user_bytes": r.user_bytes,
        "pm_reads": r.pm_reads,
        "fences": {"sfence": r.fences[0], "ofence": r.fences[1], "dfence": r.fences[2], "empty": r.empty_fences},
        "flushes": r.flushes,
        "inferred_lines": r.inferred_lines,
        "unmatched_tx_ends": r.unmatched_tx_ends,
        "peak_tracked_lines": r.peak_tracked_lines,
        "clamped_records": r.clamped_records,
    })
}

/// Bars of a histogram grouped into the given inclusive ranges, as shares
/// of all samples (percent).
fn grouped(h: &Histogram, groups: &[(u64, u64, &str)]) -> Vec<(String, f64)> {
    let n = h.count().max(1) as f64;
    groups
        .iter()
        .map(|&(lo, hi, label)| (label.to_string(), 100.0 * h.count_range(lo, hi) as f64 / n))
        .collect()
}

/// Draw the distributions as bar charts into `dir`, SVG and PNG.
fn plot(r: &Report, dir: &Path) -> anyhow::Result<()> {
    use pmlab_plot::{Axis, BarChart};
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--plot: cannot create directory {}", dir.display()))?;
    /// File name (without extension), title, x label, data, bar groups
    /// (inclusive ranges).
    type Chart<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'a Histogram,
        Vec<(u64, u64, &'a str)>,
    );
    let charts: [Chart; 3] = [
        (
            "epoch_size",
            "Epoch size (WHISPER fig. 4)",
            "unique 64 B lines per epoch",
            &r.epoch_lines,
            vec![
                (1, 1, "1"),
                (2, 2, "2"),
                (3, 3, "3"),
                (4, 4, "4"),
                (5, 8, "5-8"),
                (9, 16, "9-16"),
                (17, 32, "17-32"),
                (33, 63, "33-63"),
                (64, 64, "64"),
                (65, u64::MAX, ">64"),
            ],
        ),
        (
            "epochs_per_tx",
            "Epochs per transaction (WHISPER fig. 3)",
            "epochs",
            &r.epochs_per_tx,
            vec![
                (0, 0, "0"),
                (1, 1, "1"),
                (2, 2, "2"),
                (3, 3, "3"),
                (4, 4, "4"),
                (5, 5, "5"),
                (6, 6, "6"),
                (7, 10, "7-10"),
                (11, 20, "11-20"),
                (21, 50, "21-50"),
                (51, 100, "51-100"),
                (101, u64::MAX, ">100"),
            ],
        ),
        (
            "singleton_bytes",
            "Bytes stored by singleton epochs",
            "bytes",
            &r.singleton_bytes,
            vec![
                (0, 0, "0 (inferred)"),
                (1, 7, "1-7"),
                (8, 8, "8"),
                (9, 15, "9-15"),
                (16, 31, "16-31"),
                (32, 63, "32-63"),
                (64, 64, "64"),
                (65, u64::MAX, ">64"),
            ],
        ),
    ];
    for (file, title, x, h, groups) in charts {
        if h.count() == 0 {
            continue;
        }
        let mut chart = BarChart::new(title, x).y_axis(Axis::new("% of samples"));
        for (label, v) in grouped(h, &groups) {
            chart = chart.bar(label, v);
        }
        for ext in ["svg", "png"] {
            let path = dir.join(format!("{file}.{ext}"));
            chart
                .save(&path)
                .map_err(|e| anyhow::anyhow!("--plot: cannot write {}: {e}", path.display()))?;
        }
    }
    Ok(())
}
