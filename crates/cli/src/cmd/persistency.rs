//! `pmlab sim --persistency MODEL[,MODEL…]|all TRACE`: replay a PM trace
//! under persistency models (`pmlab_sim::persistency`) and compare their
//! run times, normalised to x86-nvm, with where the time goes.
//!
//! A HOPS model may carry a persist-buffer drain threshold: `hops@1` (or
//! `hops-adr@1`) drains from the first buffered entry instead of HOPS's 16.
//! `--flush-invalidates` says which flushes leave their line out of the
//! caches under the x86 models (the next store to it then reads it from
//! PM before its write-back can start).

use anyhow::{bail, Context};
use pmlab_sim::persistency::{media_write_ns, Config, FlushInvalidation, Model, Replay, Report};
use pmlab_sim::System;
use serde_json::json;
use std::io::Write;
use std::path::Path;

/// One model to run, with its optional drain threshold.
#[derive(Debug)]
struct Choice {
    model: Model,
    drain_at: Option<usize>,
    label: String,
}

fn parse_models(spec: &str) -> anyhow::Result<Vec<Choice>> {
    let every = Model::all().map(Model::name).collect::<Vec<_>>().join(",");
    let spec = if spec == "all" { every.as_str() } else { spec };
    let mut v = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, drain) = match part.split_once('@') {
            Some((n, d)) => {
                let d: usize = d.parse().ok().filter(|d| (1..=32).contains(d)).with_context(|| {
                    format!("--persistency {part}: the drain threshold after '@' must be 1 to 32 entries")
                })?;
                (n, Some(d))
            }
            None => (part, None),
        };
        let model =
            Model::from_name(name).map_err(|e| anyhow::anyhow!("--persistency: {e} (or 'all')"))?;
        if drain.is_some() && !model.is_hops() {
            bail!("--persistency {part}: only hops and hops-adr take a drain threshold (hops@N)");
        }
        v.push(Choice {
            model,
            drain_at: drain,
            label: part.to_string(),
        });
    }
    if v.is_empty() {
        bail!("--persistency needs a model: {} or all", Model::names());
    }
    Ok(v)
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

/// What to replay, and how (from `pmlab sim`'s arguments).
pub struct Options<'a> {
    /// The trace.
    pub trace: &'a Path,
    /// `--trace-format`.
    pub format: Option<&'a str>,
    /// `--preset`.
    pub preset: Option<&'a str>,
    /// `--config`.
    pub config: Option<&'a Path>,
    /// `--persistency`: the models.
    pub models: &'a str,
    /// `--infer-stores`: on, off or auto.
    pub infer_stores: &'a str,
    /// `--flush-invalidates`: auto, all or none.
    pub flush_invalidates: &'a str,
    /// `--json`.
    pub json: bool,
    /// `--progress`.
    pub progress: bool,
}

/// Run the replays and print the comparison.
pub fn run(o: &Options) -> anyhow::Result<u8> {
    let Options {
        trace,
        format,
        preset,
        config,
        models,
        infer_stores,
        flush_invalidates,
        json: json_out,
        progress,
    } = *o;
    let invalidation = FlushInvalidation::from_name(flush_invalidates)
        .map_err(|e| anyhow::anyhow!("--flush-invalidates: {e}"))?;
    let choices = parse_models(models)?;
    let infer = match infer_stores {
        "on" => Some(true),
        "off" => Some(false),
        "auto" => None,
        other => bail!("--infer-stores '{other}': expected on, off or auto"),
    };
    let format = match format {
        Some(f) => Some(
            pmlab_trace::Format::from_name(f)
                .map_err(|e| anyhow::anyhow!("--trace-format: {e}"))?,
        ),
        None => None,
    };
    let mut shown = crate::progress::Progress::new(json_out, progress);
    let mut results: Vec<(String, Report)> = Vec::new();
    let mut system_name = String::new();
    for c in &choices {
        let sys = build(preset, config)?;
        system_name = sys.name().to_string();
        let mut probe = build(preset, config)?;
        let media = media_write_ns(&mut probe);
        let (header, stream) = pmlab_trace::open(trace, format)?.into_parts();
        let mut cfg = Config::new(c.model, media);
        cfg.flushes_as_stores = infer.unwrap_or_else(|| header.stores_unseen());
        cfg.flush_invalidates = invalidation;
        if let Some(d) = c.drain_at {
            cfg.pb_drain_at = d;
        }
        shown.message(&format!(
            "pmlab sim: replaying {} under {}",
            trace.display(),
            c.label
        ));
        let (report, _) = Replay::new(sys, cfg).run(stream)?;
        if report.records == 0 {
            bail!(
                "{}: the trace holds no records (an empty file, or comments only): nothing to replay",
                trace.display()
            );
        }
        results.push((c.label.clone(), report));
    }
    let base = results
        .iter()
        .find(|(_, r)| r.model.name() == "x86-nvm")
        .map(|(_, r)| r.run_ns)
        .filter(|x| *x > 0.0);
    let mut out = std::io::stdout().lock();
    if json_out {
        // Keyed by model, so that a script reads one key path
        // (`models["hops"]["run_ns"]`); `order` keeps the command line's.
        let rows: serde_json::Map<String, serde_json::Value> = results
            .iter()
            .map(|(label, r)| {
                let b = &r.breakdown;
                let row = json!({
                    "model": label,
                    "run_ns": r.run_ns,
                    "normalised_to_x86_nvm": base.map(|x| r.run_ns / x),
                    "compute_ns": b.compute_ns,
                    "read_ns": b.read_ns,
                    "durability_ns": b.durability_ns,
                    "buffer_full_ns": b.buffer_full_ns,
                    "issue_ns": b.issue_ns,
                    "rfo_wait_ns": b.rfo_wait_ns,
                    "rfo_reads": r.rfo_reads,
                    "rfo_read_ns": r.rfo_read_ns,
                    "rfo_delayed_writebacks": r.rfo_delayed_writebacks,
                    "records": r.records,
                    "threads": r.threads,
                    "lines_written": r.lines_written,
                    "durability_points": r.durability_points,
                    "epochs_drained": r.epochs_drained,
                    "cross_deps": r.cross_deps,
                    "cross_waits": r.cross_waits,
                    "media_write_ns": r.media_write_ns,
                });
                (label.clone(), row)
            })
            .collect();
        let v = json!({
            "system": system_name,
            "trace": trace.display().to_string(),
            "flush_invalidates": invalidation.name(),
            "models": rows,
            "order": results.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(0);
    }
    let first = &results[0].1;
    writeln!(
        out,
        "persistency replay of {} on {} ({} records, {} threads; media write {:.0} ns after acceptance; flushes invalidating: {})",
        trace.display(),
        system_name,
        first.records,
        first.threads,
        first.media_write_ns,
        invalidation_note(invalidation)
    )?;
    writeln!(
        out,
        "{:<10} {:>12} {:>10} {:>9} {:>9} {:>11} {:>9} {:>11} {:>8} {:>11} {:>10}",
        "model",
        "run time",
        "vs nvm",
        "compute",
        "PM loads",
        "durability",
        "(RFO)",
        "buffer full",
        "issue",
        "dur. points",
        "RFO reads"
    )?;
    for (label, r) in &results {
        let b = &r.breakdown;
        let tot = b.total().max(1e-9);
        let pct = |x: f64| format!("{:.1}%", 100.0 * x / tot);
        writeln!(
            out,
            "{:<10} {:>12} {:>10} {:>9} {:>9} {:>11} {:>9} {:>11} {:>8} {:>11} {:>10}",
            label,
            fmt_ns(r.run_ns),
            base.map(|x| format!("{:.3}", r.run_ns / x))
                .unwrap_or_else(|| "-".into()),
            pct(b.compute_ns),
            pct(b.read_ns),
            pct(b.durability_ns),
            pct(b.rfo_wait_ns),
            pct(b.buffer_full_ns),
            pct(b.issue_ns),
            r.durability_points,
            r.rfo_reads
        )?;
    }
    writeln!(
        out,
        "(time shares are of all threads' simulated time; 'vs nvm' is run time over x86-nvm's; '(RFO)' is the part of\n \
         the durability waits due to write-backs that waited for their line's read for ownership after an invalidating\n \
         flush; 'RFO reads' counts those reads)"
    )?;
    Ok(0)
}

/// The flushes that invalidate under `f`, for the report's header.
fn invalidation_note(f: FlushInvalidation) -> &'static str {
    match f {
        FlushInvalidation::All => "all (clflush, clflushopt, clwb)",
        FlushInvalidation::Never => "none",
        _ => "auto (clflush, clflushopt; clwb retains)",
    }
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.3} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_lists_parse_and_reject_nonsense() {
        let v = parse_models("all").unwrap();
        assert_eq!(v.len(), 5);
        assert!(v.iter().any(|c| c.model.name() == "hops-adr"));
        let v = parse_models("hops@1,x86-adr").unwrap();
        assert_eq!(v[0].drain_at, Some(1));
        assert!(parse_models("hops@0").is_err());
        assert!(parse_models("x86-adr@4").is_err());
        assert_eq!(parse_models("hops-adr@8").unwrap()[0].drain_at, Some(8));
        let e = parse_models("tso").unwrap_err().to_string();
        assert!(e.contains("x86-nvm, x86-adr, hops, hops-adr, ideal"), "{e}");
        assert!(parse_models("").is_err());
    }
}
