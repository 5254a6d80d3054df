//! From inferred parameters to a simulator configuration (`pmlab sim
//! --config`), with the NVRAM latencies fitted by simulation so that the
//! profile reproduces the measured pointer-chasing curve.
//!
//! Capacities, entry sizes, queue sizes, the migration block and interval
//! and the interleaving come straight from the inference. The three read
//! latencies of the `nvram` model (RMW-buffer hit, AIT lookup, media read)
//! are not visible one by one; they are fitted, lowest level first, so that
//! the simulated curve meets each measured plateau (a secant search per
//! parameter, a few simulated points each). Every other parameter keeps the
//! simulator's documented default, and the file says which is which.

use crate::infer::Inferred;
use crate::pattern::Op;
use crate::probes::{self, Curve, Settings};
use crate::sim::Sim;
use crate::{Error, ErrorKind};
use std::fmt::Write;

/// The fitted read latencies of the `nvram` model (ns).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Latencies {
    /// `rmw_hit_ns`.
    pub rmw_hit: f64,
    /// `ait_ns`.
    pub ait: f64,
    /// `media_read_ns`.
    pub media_read: f64,
}

fn bytes(v: f64) -> String {
    let v = v.round() as u64;
    if v >= 1 << 20 && v.is_multiple_of(1 << 20) {
        format!("\"{}MiB\"", v >> 20)
    } else if v >= 1 << 10 && v.is_multiple_of(1 << 10) {
        format!("\"{}KiB\"", v >> 10)
    } else {
        format!("\"{v}B\"")
    }
}

/// The profile TOML for `inf` with latencies `lat`; `source` names what
/// was probed. The text always loads in the simulator: values that do not
/// form a valid device are an error.
pub fn toml(inf: &Inferred, lat: &Latencies, source: &str) -> Result<String, Error> {
    let need = |what: &str| {
        Error::new(
            ErrorKind::Results,
            format!(
                "cannot write an NVRAM profile: {what} was not inferred (see the report's notes); probe with a wider sweep"
            ),
        )
    };
    if inf.read_buffers.len() < 2 {
        return Err(need("a second read buffer"));
    }
    let rmw = inf.read_buffers[0].capacity;
    let ait = inf.read_buffers[1].capacity;
    let xpline = inf
        .read_entries
        .first()
        .copied()
        .flatten()
        .ok_or_else(|| need("the first buffer's entry size"))?;
    let ait_entry = inf
        .read_entries
        .get(1)
        .copied()
        .flatten()
        .ok_or_else(|| need("the second buffer's entry size"))?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Device profile inferred by `pmlab probe` from {source}."
    );
    let _ = writeln!(
        s,
        "# Values marked 'inferred' come from curve shapes (LENS III); 'fitted' ones"
    );
    let _ = writeln!(
        s,
        "# were solved by simulation to meet the measured plateaus; keys left out"
    );
    let _ = writeln!(
        s,
        "# keep the simulator's documented defaults (`pmlab sim show`)."
    );
    let _ = writeln!(s, "name = \"inferred\"");
    let _ = writeln!(
        s,
        "description = \"profile inferred by pmlab probe from {}\"",
        source.replace('"', "'")
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "[cpu]\nimpl = \"core\"");
    let _ = writeln!(s);
    let _ = writeln!(s, "[controller]\nimpl = \"imc\"");
    let ch = inf.channels.unwrap_or(1);
    let _ = writeln!(
        s,
        "channels = {ch}             # {}",
        if inf.channels.is_some() {
            "inferred: stride multiples of the granularity"
        } else {
            "no interleaving seen: one device"
        }
    );
    if let Some(g) = inf.interleave {
        let _ = writeln!(s, "interleave = {}      # inferred: stride sweep", bytes(g));
    }
    if let Some(w) = inf
        .write_buffers
        .iter()
        .find(|w| w.capacity < xpline.max(1024.0))
    {
        let _ = writeln!(
            s,
            "wpq_bytes = {}        # inferred: first store step",
            bytes(w.capacity)
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "[controller.dimm]\nimpl = \"nvram\"");
    let _ = writeln!(
        s,
        "xpline_bytes = {}          # inferred: entry size of the first read buffer",
        bytes(xpline)
    );
    let _ = writeln!(
        s,
        "rmw_bytes = {}            # inferred: first load inflection",
        bytes(rmw)
    );
    let _ = writeln!(
        s,
        "ait_buffer_bytes = {}      # inferred: second load inflection",
        bytes(ait)
    );
    let _ = writeln!(
        s,
        "ait_entry_bytes = {}        # inferred: entry size of the second read buffer",
        bytes(ait_entry)
    );
    // An entry larger than the XPLine that the block sweep sees as the
    // amplification unit is filled whole on a miss.
    let _ = writeln!(
        s,
        "ait_fill = \"{}\"          # inferred: {}",
        if ait_entry > xpline {
            "entry"
        } else {
            "sector"
        },
        if ait_entry > xpline {
            "amplification ends at the entry, so a miss fills it"
        } else {
            "amplification ends at the XPLine"
        }
    );
    if let Some(w) = inf
        .write_buffers
        .iter()
        .find(|w| w.capacity >= xpline.max(1024.0) && w.capacity < rmw)
    {
        let _ = writeln!(
            s,
            "lsq_bytes = {}             # inferred: store step",
            bytes(w.capacity)
        );
    }
    let _ = writeln!(
        s,
        "rmw_hit_ns = {:.2}           # fitted: first load plateau",
        lat.rmw_hit
    );
    let _ = writeln!(
        s,
        "ait_ns = {:.2}               # fitted: second load plateau",
        lat.ait
    );
    let _ = writeln!(
        s,
        "media_read_ns = {:.2}        # fitted: last load plateau",
        lat.media_read
    );
    if let Some(i) = inf.tail_interval {
        let _ = writeln!(
            s,
            "wear_threshold = {}        # inferred: iterations between overwrite long tails",
            i.round() as u64
        );
    }
    if let Some(b) = inf.migration_block {
        let _ = writeln!(
            s,
            "migration_bytes = {}      # inferred: overwrite-sweep frequency drop",
            bytes(b)
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "[controller.dimm.dram]\nimpl = \"ddr4\"                # not probed: simulator defaults"
    );
    // What is written must load back: values the inference produced from
    // damaged or odd curves (a NaN capacity written as "0B", an entry
    // larger than its buffer) are refused here rather than in `pmlab sim`.
    if let Err(e) = pmlab_sim::System::from_toml(&s, "the inferred profile") {
        return Err(Error::new(
            ErrorKind::Results,
            format!(
                "cannot write an NVRAM profile: the inferred values do not form a valid device ({e}); check the report's notes and probe again with a wider sweep"
            ),
        ));
    }
    Ok(s)
}

/// Simulated latency per line of a load pointer chase at each of
/// `regions` on the configuration `text`.
fn simulate(text: &str, regions: &[u64], block: u64, s: &Settings) -> Result<Vec<f64>, Error> {
    let mut sim = Sim::from_toml(text, "inferred profile", "inferred")?;
    let c = probes::ptrchase_region(&mut sim, s, Op::Load, block, regions, &mut |_, _, _| {})?;
    Ok(c.points.iter().map(|p| p.y).collect())
}

/// Fit the three read latencies to the plateaus of `load` (a load region
/// sweep): each is solved, lowest level first, so that the mean relative
/// error over its segment of the curve (up to the first buffer, between
/// the buffers, past the second) is zero. Returns them with the profile.
pub fn fit(
    inf: &Inferred,
    load: &Curve,
    source: &str,
    s: &Settings,
) -> Result<(Latencies, String), Error> {
    if inf.read_buffers.len() < 2 {
        return Err(Error::new(
            ErrorKind::Results,
            "cannot fit an NVRAM profile: fewer than two read buffers were inferred (widen the sweep: pmlab probe all --max-region 1GiB)",
        ));
    }
    let block = load.params.get("block").copied().unwrap_or(64.0) as u64;
    let c1 = inf.read_buffers[0].capacity;
    let c2 = inf.read_buffers[1].capacity;
    let segment = |lo: f64, hi: f64| -> (Vec<u64>, Vec<f64>) {
        load.points
            .iter()
            .filter(|p| p.x > lo && p.x <= hi)
            .map(|p| (p.x as u64, p.y))
            .unzip()
    };
    let segs = [
        segment(0.0, c1),
        segment(c1, c2),
        segment(c2, f64::INFINITY),
    ];
    if segs.iter().any(|(r, _)| r.is_empty()) {
        return Err(Error::new(
            ErrorKind::Results,
            "cannot fit an NVRAM profile: the load sweep needs points before, between and past both buffers",
        ));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (m0, m1, m2) = (mean(&segs[0].1), mean(&segs[1].1), mean(&segs[2].1));
    let mut lat = Latencies {
        rmw_hit: (m0 - 60.0).max(1.0),
        ait: ((m1 - m0) / 2.0).max(1.0),
        media_read: (m2 - m1).max(1.0),
    };
    // Mean relative error of the profile over segment k, and its scale
    // in ns (for the secant step).
    let err = |lat: &Latencies, k: usize| -> Result<f64, Error> {
        let (regions, want) = &segs[k];
        let got = simulate(&toml(inf, lat, source)?, regions, block, s)?;
        let rel: Vec<f64> = got.iter().zip(want).map(|(g, w)| (g - w) / w).collect();
        Ok(mean(&rel) * mean(want))
    };
    for _round in 0..2 {
        for (k, seg) in segs.iter().enumerate() {
            let get = |l: &Latencies| match k {
                0 => l.rmw_hit,
                1 => l.ait,
                _ => l.media_read,
            };
            let set = |l: &mut Latencies, v: f64| match k {
                0 => l.rmw_hit = v,
                1 => l.ait = v,
                _ => l.media_read = v,
            };
            let scale = mean(&seg.1);
            let mut x0 = get(&lat);
            let mut y0 = err(&lat, k)?;
            let mut x1 = (x0 - y0).max(0.0);
            for _ in 0..6 {
                if y0.abs() < 0.001 * scale {
                    break;
                }
                set(&mut lat, x1);
                let y1 = err(&lat, k)?;
                let slope = if (x1 - x0).abs() > 1e-9 {
                    (y1 - y0) / (x1 - x0)
                } else {
                    1.0
                };
                let slope = if slope.abs() < 0.05 { 1.0 } else { slope };
                let next = (x1 - y1 / slope).max(0.0);
                if y1.abs() < y0.abs() {
                    x0 = x1;
                    y0 = y1;
                }
                x1 = next;
            }
            set(&mut lat, x0);
        }
    }
    let text = toml(inf, &lat, source)?;
    Ok((lat, text))
}

/// One compared point: region, measured latency, simulated latency.
pub type CheckRow = (f64, f64, f64);

/// Compare the load pointer-chasing curve of the profile `text` with
/// `load`: the largest relative difference over all points, and per point.
pub fn check(text: &str, load: &Curve, s: &Settings) -> Result<(f64, Vec<CheckRow>), Error> {
    let block = load.params.get("block").copied().unwrap_or(64.0) as u64;
    let regions: Vec<u64> = load.points.iter().map(|p| p.x as u64).collect();
    let mut sim = Sim::from_toml(text, "inferred profile", "inferred")?;
    let c = probes::ptrchase_region(&mut sim, s, Op::Load, block, &regions, &mut |_, _, _| {})?;
    let mut worst: f64 = 0.0;
    let mut rows = Vec::new();
    for (a, b) in load.points.iter().zip(&c.points) {
        let d = (b.y - a.y) / a.y;
        worst = worst.max(d.abs());
        rows.push((a.x, a.y, b.y));
    }
    Ok((worst, rows))
}
