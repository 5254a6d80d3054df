//! The readable report, the host's cache levels from sysfs, and the plots
//! of every curve with the inferred points marked.

use crate::infer::{self, Inferred, Thresholds};
use crate::probes::{Curve, Kind};
use crate::{Error, ErrorKind, Op};
use pmlab_plot::{fmt_size, Axis, Format, LineChart, Scale, Series};
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// One cache level as sysfs describes it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CacheLevel {
    /// 1, 2, 3...
    pub level: u32,
    /// `Data`, `Unified` (instruction caches are skipped).
    pub kind: String,
    /// Bytes.
    pub size: u64,
}

/// The data and unified caches of CPU 0 from
/// `/sys/devices/system/cpu/cpu0/cache` (empty when unavailable).
pub fn host_caches() -> Vec<CacheLevel> {
    let mut out = Vec::new();
    for i in 0..8 {
        let dir = PathBuf::from(format!("/sys/devices/system/cpu/cpu0/cache/index{i}"));
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .ok()
                .map(|s| s.trim().to_string())
        };
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        if kind == "Instruction" {
            continue;
        }
        let size = match pmlab_model::Bytes::parse(&size) {
            Ok(b) => b.get(),
            Err(_) => continue,
        };
        out.push(CacheLevel {
            level: level.parse().unwrap_or(0),
            kind,
            size,
        });
    }
    out.sort_by_key(|c| c.level);
    out
}

fn size(v: f64) -> String {
    pmlab_plot::fmt_tick(v, Format::Bytes)
}

/// The readable report.
pub fn text(
    target: &str,
    description: &str,
    inf: &Inferred,
    caches: &[CacheLevel],
    check: Option<f64>,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "pmlab probe report: {target}");
    let _ = writeln!(s, "  {description}");
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "Buffers (pointer chasing, inflections of latency per line):"
    );
    if inf.read_buffers.is_empty() {
        let _ = writeln!(s, "  load:  no inflection");
    }
    for (k, b) in inf.read_buffers.iter().enumerate() {
        let entry = match inf.read_entries.get(k).copied().flatten() {
            Some(e) => format!("entry {}", size(e)),
            None => "entry ?".into(),
        };
        let _ = writeln!(
            s,
            "  read buffer {}: {:>7}  ({entry}; {:.0} -> {:.0} ns per line past it)",
            k + 1,
            size(b.capacity),
            b.before,
            b.after
        );
    }
    if inf.write_buffers.is_empty() {
        let _ = writeln!(s, "  store: no step apart from the read buffers'");
    }
    for (k, b) in inf.write_buffers.iter().enumerate() {
        let _ = writeln!(
            s,
            "  write buffer {}: {:>7}  ({:.0} -> {:.0} ns per line past it)",
            k + 1,
            size(b.capacity),
            b.before,
            b.after
        );
    }
    if let Some((a, b)) = inf.load_latency {
        let _ = writeln!(
            s,
            "  load latency per line: {a:.1} ns (smallest region) .. {b:.1} ns (largest)"
        );
    }
    if let Some((a, b)) = inf.store_latency {
        let _ = writeln!(
            s,
            "  store latency per line: {a:.1} ns (smallest region) .. {b:.1} ns (largest)"
        );
    }
    match (inf.inclusive, inf.raw_ratio) {
        (Some(_), Some(r)) if inf.read_buffers.len() < 2 => {
            let _ = writeln!(
                s,
                "  read-after-write: RaW = {r:.2} x (R + W) ({} fast-forward; one buffer level, so no hierarchy to classify)",
                if r >= 0.9 { "no" } else { "some" }
            );
        }
        (Some(true), Some(r)) => {
            let _ = writeln!(
                s,
                "  organisation: inclusive hierarchy (RaW = {r:.2} x (R + W): no fast-forward)"
            );
        }
        (Some(false), Some(r)) => {
            let _ = writeln!(
                s,
                "  organisation: independent buffers (RaW = {r:.2} x (R + W): fast-forward)"
            );
        }
        _ => {}
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Policies:");
    match (inf.tail_interval, inf.tail_interval_bytes, inf.migration_ns) {
        (Some(i), Some(b), Some(m)) => {
            let _ = writeln!(
                s,
                "  long tails every {i:.0} overwrite iterations ({}) costing {:.1} us (on NVRAM: a migration)",
                size(b),
                m / 1e3
            );
        }
        (_, _, Some(m)) => {
            let _ = writeln!(
                s,
                "  long tails seen ({:.1} us) but too few to give an interval",
                m / 1e3
            );
        }
        _ => {
            let _ = writeln!(s, "  no long-tail iterations");
        }
    }
    if let Some(b) = inf.migration_block {
        let _ = writeln!(
            s,
            "  migration block: {} (long-tail frequency drops from this region size)",
            size(b)
        );
    }
    match inf.interleave {
        Some(g) => {
            let ch = inf
                .channels
                .map(|c| format!(" across {c} devices"))
                .unwrap_or_default();
            let _ = writeln!(s, "  interleaving: {} granularity{ch}", size(g));
        }
        None => {
            let _ = writeln!(s, "  interleaving: none seen");
        }
    }
    if inf.peak_gbs.0.is_some() || inf.peak_gbs.1.is_some() {
        let _ = writeln!(
            s,
            "  peak bandwidth: load {} GB/s, store {} GB/s",
            inf.peak_gbs
                .0
                .map(|v| format!("{v:.2}"))
                .unwrap_or("?".into()),
            inf.peak_gbs
                .1
                .map(|v| format!("{v:.2}"))
                .unwrap_or("?".into())
        );
    }
    if !caches.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(s, "Host caches (sysfs) against the load inflections:");
        for c in caches {
            let hit = inf
                .read_buffers
                .iter()
                .find(|b| b.capacity <= 2.0 * c.size as f64 && 2.0 * b.capacity >= c.size as f64);
            let _ = writeln!(
                s,
                "  L{} {:<8} {:>7}: {}",
                c.level,
                c.kind,
                size(c.size as f64),
                match hit {
                    Some(b) => format!("inflection at {}", size(b.capacity)),
                    None => "no inflection within a factor of 2".into(),
                }
            );
        }
        if let Some((_, last)) = inf.load_latency {
            let _ = writeln!(
                s,
                "  memory latency (largest region): {last:.1} ns per line"
            );
        }
    }
    if let Some(w) = check {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Profile check: the inferred profile reproduces the load curve within {:.1}% at every point",
            w * 100.0
        );
    }
    if !inf.notes.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(s, "Notes:");
        for n in &inf.notes {
            let _ = writeln!(s, "  - {n}");
        }
    }
    s
}

/// The title of a curve's plot, in words and units.
pub fn title(c: &Curve) -> String {
    let size_of = |k: &str| c.params.get(k).map(|&v| fmt_size(v)).unwrap_or("?".into());
    let op = match c.op {
        Op::Raw => "read-after-write",
        o => o.name(),
    };
    match c.kind {
        Kind::PtrchaseRegion if c.params.contains_key("outstanding") => format!(
            "Streaming stores: time per line by region size ({} blocks, {} in flight)",
            size_of("block"),
            c.params["outstanding"]
        ),
        Kind::PtrchaseRegion => format!(
            "Pointer chasing: {op} latency per line by region size ({} blocks)",
            size_of("block")
        ),
        Kind::PtrchaseBlock => format!(
            "Pointer chasing: {op} latency per line by block size ({} region)",
            size_of("region")
        ),
        Kind::Overwrite => format!(
            "Overwrite: time of each iteration over a {} region",
            size_of("region")
        ),
        Kind::OverwriteSweep => format!(
            "Overwrite: long tails by region size ({} written per region)",
            size_of("total")
        ),
        Kind::StrideSize => format!(
            "Stride: {op} bandwidth by access size ({} stride)",
            size_of("stride")
        ),
        Kind::StrideInterleave => format!(
            "Stride: {op} bandwidth by stride ({} accesses)",
            size_of("size")
        ),
        Kind::StrideChannels => format!(
            "Stride: {op} bandwidth by stride, multiples of the {} interleave",
            size_of("granularity")
        ),
    }
}

/// Draw every curve of `curves` into `dir` as `<id>.svg` and `<id>.png`
/// (creating `dir`), with the inferred points marked. Returns the files
/// written.
pub fn plots(curves: &[Curve], inf: &Inferred, dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut out = Vec::new();
    let th = Thresholds::default();
    for c in curves {
        if c.points.is_empty() {
            continue;
        }
        let log_x = !matches!(c.kind, Kind::Overwrite | Kind::StrideChannels);
        let x_fmt = if log_x { Format::Bytes } else { Format::Number };
        // Ticks carry the unit (`16 KiB`), so the label need not.
        let x_label = if log_x {
            c.x_label.trim_end_matches(" (bytes)")
        } else {
            &c.x_label
        };
        let mut ch = LineChart::new(title(c))
            .x_axis(
                Axis::new(x_label)
                    .scale(if log_x { Scale::Log } else { Scale::Linear })
                    .format(x_fmt),
            )
            .y_axis(Axis::new(&c.y_label));
        let pts: Vec<(f64, f64)> = c.points.iter().map(|p| (p.x, p.y)).collect();
        let dense = pts.len() > 200;
        let mut series = Series::new(c.op.name(), pts).dots(!dense);
        if !dense && c.points.iter().any(|p| p.hi > p.lo) {
            series = series.spread(c.points.iter().map(|p| (p.lo, p.hi)).collect());
        }
        ch = ch.series(series);
        match c.kind {
            Kind::PtrchaseRegion => {
                for f in infer::inflections(&c.points, th.rise) {
                    ch = ch.mark(f.capacity, f.before, size(f.capacity));
                }
            }
            Kind::PtrchaseBlock => {
                let region = c.params.get("region").copied().unwrap_or(0.0);
                let bufs = &inf.read_buffers;
                for (k, b) in bufs.iter().enumerate() {
                    let next = bufs.get(k + 1).map(|n| n.capacity).unwrap_or(f64::INFINITY);
                    if region > b.capacity && region <= next {
                        if let Some(Some(e)) = inf.read_entries.get(k) {
                            if let Some(p) = c.points.iter().find(|p| p.x == *e) {
                                ch = ch.mark(*e, p.y, format!("entry {}", size(*e)));
                            }
                        }
                    }
                }
            }
            Kind::Overwrite => {
                let ys: Vec<f64> = c.points.iter().map(|p| p.y).collect();
                let t = infer::tails(&ys, th.tail_factor);
                for &i in t.index.iter().take(6) {
                    ch = ch.mark(c.points[i].x, c.points[i].y, format!("tail #{i}"));
                }
            }
            Kind::OverwriteSweep => {
                if let Some(b) = inf.migration_block {
                    if let Some(p) = c.points.iter().find(|p| p.x == b) {
                        ch = ch.mark(b, p.y, format!("drop at {}", size(b)));
                    }
                }
            }
            Kind::StrideInterleave => {
                if let Some(g) = infer::interleave(&c.points) {
                    if let Some(p) = c.points.iter().find(|p| p.x == g) {
                        ch = ch.mark(g, p.y, format!("interleave {}", size(g)));
                    }
                }
            }
            Kind::StrideChannels => {
                if let Some(n) = infer::channels(&c.points) {
                    let p = c.points[n as usize - 1];
                    ch = ch.mark(p.x, p.y, format!("{n} devices"));
                }
            }
            Kind::StrideSize => {}
        }
        let pair = ch
            .save_pair(dir, &c.id)
            .map_err(|e| Error::new(ErrorKind::Io, format!("plot {}: {e}", c.id)))?;
        out.extend(pair);
    }
    Ok(out)
}
