//! The validation suite: the experiments of LENS (MICRO'20) and Yang et al.
//! (FAST'20) run on the bundled presets, compared with the published
//! figures. `pmlab sim validate --write docs/validation.md` regenerates the
//! report from [`run`].
//!
//! The experiments use only the public request API: they are the
//! microbenchmarks' access patterns, not special cases in the model.

use crate::drive::{Driver, Mode};
use crate::{Error, Op, Request, System};
use pmlab_trace::Record;
use serde::Serialize;

/// An absolute figure: simulated against published.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// What is measured.
    pub name: String,
    /// Preset it ran on.
    pub preset: &'static str,
    /// Unit.
    pub unit: &'static str,
    /// Simulated value.
    pub simulated: f64,
    /// Published value.
    pub published: f64,
    /// Where the published value comes from.
    pub source: &'static str,
    /// True when the value was an input of the calibration (the row then
    /// checks consistency, not prediction).
    pub calibration_input: bool,
    /// The largest error (percent) this figure may show: its error when
    /// the tolerance was set (2026-11-24), rounded up to a whole percent,
    /// plus 2.5 points, rounded up, and at least 5% (the tests fail when
    /// one figure drifts past it).
    pub tolerance_pct: f64,
}

impl Figure {
    /// |simulated - published| / published, in percent.
    pub fn error_pct(&self) -> f64 {
        (self.simulated - self.published).abs() / self.published * 100.0
    }

    /// Whether the error is within the figure's tolerance.
    pub fn within_tolerance(&self) -> bool {
        self.error_pct() <= self.tolerance_pct
    }
}

/// A qualitative result of LENS: reproduced or not, with the numbers.
#[derive(Debug, Clone, Serialize)]
pub struct Shape {
    /// The expected shape.
    pub name: String,
    /// The measured numbers behind the verdict.
    pub measured: String,
    /// Whether the simulation shows it.
    pub reproduced: bool,
}

/// A curve of the report, for plotting: named series of (x, y) points.
#[derive(Debug, Clone, Serialize)]
pub struct Curve {
    /// File-name-safe identifier (`pointer-chase`).
    pub id: &'static str,
    /// Title.
    pub title: &'static str,
    /// X axis label.
    pub x_label: &'static str,
    /// Whether x is a size in bytes (log scale).
    pub x_bytes: bool,
    /// Y axis label.
    pub y_label: &'static str,
    /// Whether y is a duration in ns.
    pub y_ns: bool,
    /// Whether y spans decades (log scale).
    pub y_log: bool,
    /// (series name, points).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Curves behind the shapes.
    pub curves: Vec<Curve>,
    /// Absolute figures.
    pub figures: Vec<Figure>,
    /// Shapes.
    pub shapes: Vec<Shape>,
    /// Mean of (100 - error %) over the figures, in percent.
    pub average_accuracy_pct: f64,
    /// The pointer chase on `slow-dram` (Quartz's model), region and ns
    /// per line: the contrast LENS draws with emulation.
    pub quartz_contrast: Vec<(u64, f64)>,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn permutation(n: usize, rng: &mut Rng) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        v.swap(i, rng.below(i as u64 + 1) as usize);
    }
    v
}

/// Mean closed-loop latency of `addrs` read one after another.
fn chase(sys: &mut System, addrs: impl Iterator<Item = u64>) -> f64 {
    let mut t = 0.0f64.max(last_time(sys));
    let (mut sum, mut n) = (0.0, 0u64);
    for a in addrs {
        let c = sys.submit(&Request::new(t, Op::Read, a, 64));
        sum += c.latency_ns();
        n += 1;
        t = c.done_ns;
    }
    set_time(sys, t);
    sum / n.max(1) as f64
}

// The experiments run one after another on one system; keep its clock.
thread_local! {
    static CLOCK: std::cell::Cell<f64> = const { std::cell::Cell::new(0.0) };
}
fn last_time(_s: &System) -> f64 {
    CLOCK.with(|c| c.get())
}
fn set_time(_s: &System, t: f64) {
    CLOCK.with(|c| c.set(t));
}
fn fresh(preset: &str) -> Result<System, Error> {
    CLOCK.with(|c| c.set(0.0));
    System::preset(preset)
}

/// LENS pointer chase: ns per cache line, lines of a `region` visited in a
/// random cyclic order; one warm-up pass, then measured passes.
pub fn pointer_chase(preset: &str, region: u64, seed: u64) -> Result<f64, Error> {
    let mut sys = fresh(preset)?;
    let lines = (region / 64) as usize;
    let mut rng = Rng(seed);
    let order = permutation(lines, &mut rng);
    let base = 1u64 << 32;
    chase(&mut sys, order.iter().map(|&i| base + i as u64 * 64));
    let passes = (200_000 / lines).clamp(1, 64);
    let mut total = 0.0;
    for _ in 0..passes {
        total += chase(&mut sys, order.iter().map(|&i| base + i as u64 * 64));
    }
    Ok(total / passes as f64)
}

/// Idle read latency: sequential lines, or random lines over 1 GiB.
pub fn idle_read(preset: &str, sequential: bool, seed: u64) -> Result<f64, Error> {
    let mut sys = fresh(preset)?;
    let mut rng = Rng(seed);
    let n = 20_000u64;
    let addrs: Vec<u64> = (0..n)
        .map(|i| {
            if sequential {
                i * 64
            } else {
                rng.below(1 << 24) * 64
            }
        })
        .collect();
    Ok(chase(&mut sys, addrs.into_iter()))
}

/// Latency from a store's issue to the completion of the fence after it
/// (`Write`: store + clwb; `NtWrite`: non-temporal store), idle system.
pub fn persist_latency(preset: &str, op: Op, seed: u64) -> Result<f64, Error> {
    let mut sys = fresh(preset)?;
    let mut rng = Rng(seed);
    let mut sum = 0.0;
    let n = 1000;
    for i in 0..n {
        let t = i as f64 * 5000.0;
        let a = rng.below(1 << 24) * 64;
        let w = sys.submit(&Request::new(t, op, a, 64));
        sys.submit(&Request::new(w.done_ns, Op::Clwb, a, 64));
        let f = sys.submit(&Request::new(w.done_ns, Op::SFence, 0, 0));
        sum += f.done_ns - t;
    }
    Ok(sum / n as f64)
}

/// Bandwidth (GB/s) of sequential 64 B `op`s with `window` outstanding.
pub fn bandwidth(preset: &str, op: Op, window: usize) -> Result<f64, Error> {
    let mut sys = fresh(preset)?;
    let mut d = Driver::new(Mode::Open(window));
    let n = 400_000u64;
    for i in 0..n {
        d.step(&mut sys, &Record::new(0, 0, op, i * 64, 64));
    }
    let s = sys.stats();
    Ok(if op == Op::Read {
        s.get("read_bandwidth")
    } else {
        s.get("write_bandwidth")
    }
    .unwrap_or(0.0))
}

/// LENS store pointer chase: ns per line of non-temporal stores over a
/// `region` in random order (16 outstanding, passes back to back, one
/// fence at the end of the run; `pmlab probe`'s `Fence::Run`).
pub fn write_chase(preset: &str, region: u64, seed: u64) -> Result<f64, Error> {
    let mut sys = fresh(preset)?;
    let lines = (region / 64) as usize;
    let mut rng = Rng(seed);
    let order = permutation(lines, &mut rng);
    let mut d = Driver::new(Mode::Open(16));
    let passes = (65_536 / lines).max(4);
    for _ in 0..passes {
        for &i in &order {
            d.step(
                &mut sys,
                &Record::new(0, 0, Op::NtWrite, (1 << 32) + i as u64 * 64, 64),
            );
        }
    }
    d.step(&mut sys, &Record::new(0, 0, Op::SFence, 0, 0));
    Ok(d.summary().end_ns / (passes * lines) as f64)
}

/// LENS read amplification at the RMW buffer: blocks of `block` bytes
/// read whole, at random block positions over 256 MiB.
pub fn read_amplification(preset: &str, block: u64, seed: u64) -> Result<f64, Error> {
    let mut sys = fresh(preset)?;
    let mut rng = Rng(seed);
    let n_blocks = (256 << 20) / block;
    let mut addrs = Vec::new();
    for _ in 0..(40_000 * 64 / block).max(2000) {
        let b = rng.below(n_blocks) * block;
        addrs.extend((0..block / 64).map(|k| b + k * 64));
    }
    chase(&mut sys, addrs.into_iter());
    Ok(sys
        .stats()
        .get("controller.dimm0.rmw_buffer.read_amplification")
        .unwrap_or(0.0))
}

/// LENS overwrite: `iterations` of (256 B non-temporal store + fence)
/// cycling over a `region`; returns each iteration's latency.
pub fn overwrite(preset: &str, region: u64, iterations: u64) -> Result<Vec<f32>, Error> {
    let mut sys = fresh(preset)?;
    let blocks = (region / 256).max(1);
    let mut t = 0.0;
    let mut out = Vec::with_capacity(iterations as usize);
    for i in 0..iterations {
        let a = (1u64 << 32) + (i % blocks) * 256;
        let w = sys.submit(&Request::new(t, Op::NtWrite, a, 256));
        let f = sys.submit(&Request::new(w.done_ns, Op::SFence, 0, 0));
        out.push((f.done_ns - t) as f32);
        t = f.done_ns;
    }
    Ok(out)
}

/// Yang et al.'s XPBuffer experiment (FAST'20, Fig. 9): 128 B
/// non-temporal stores to the first half of every XPLine of a `region`,
/// then to the second halves, round after round (16 outstanding, no
/// fences). Returns the write amplification (media bytes written over
/// bytes stored) after one warm-up round.
pub fn xpbuffer_amplification(preset: &str, region: u64) -> Result<f64, Error> {
    let mut sys = fresh(preset)?;
    let lines = (region / 256).max(1);
    let mut d = Driver::new(Mode::Open(16));
    let rounds = (200_000 / (lines * 4)).clamp(3, 1000);
    let round = |d: &mut Driver, sys: &mut System| {
        for half in 0..2 {
            for x in 0..lines {
                for k in 0..2 {
                    let a = (1u64 << 32) + x * 256 + half * 128 + k * 64;
                    d.step(sys, &Record::new(0, 0, Op::NtWrite, a, 64));
                }
            }
        }
    };
    round(&mut d, &mut sys);
    sys.reset_stats();
    for _ in 0..rounds {
        round(&mut d, &mut sys);
    }
    Ok(sys
        .stats()
        .get("controller.dimm0.media.write_amplification")
        .unwrap_or(0.0))
}

/// Write amplification of 64 B non-temporal stores at random lines of a
/// `region`, each followed by a fence (one thread, closed loop), after a
/// warm-up of one store per line.
pub fn fenced_random_amplification(preset: &str, region: u64, seed: u64) -> Result<f64, Error> {
    let mut sys = fresh(preset)?;
    let lines = (region / 64).max(1);
    let mut rng = Rng(seed);
    let mut d = Driver::new(Mode::Closed);
    let store = |d: &mut Driver, sys: &mut System, rng: &mut Rng| {
        let a = (1u64 << 32) + rng.below(lines) * 64;
        d.step(sys, &Record::new(0, 0, Op::NtWrite, a, 64));
        d.step(sys, &Record::new(0, 0, Op::SFence, 0, 0));
    };
    for _ in 0..lines.min(100_000) {
        store(&mut d, &mut sys, &mut rng);
    }
    sys.reset_stats();
    for _ in 0..100_000 {
        store(&mut d, &mut sys, &mut rng);
    }
    Ok(sys
        .stats()
        .get("controller.dimm0.media.write_amplification")
        .unwrap_or(0.0))
}

/// The `q` quantile (0..1) of `lat`, nearest rank.
pub fn quantile(lat: &[f32], q: f64) -> f64 {
    if lat.is_empty() {
        return f64::NAN;
    }
    let mut v = lat.to_vec();
    let k = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    let (_, x, _) = v.select_nth_unstable_by(k, f32::total_cmp);
    *x as f64
}

/// Median, count of iterations above 100x the median, and the mean
/// interval between them (NaN with fewer than two), by
/// `pmlab_model::tails`.
pub fn tails(lat: &[f32]) -> (f64, usize, f64) {
    let t = pmlab_model::tails::tails(lat, 100.0);
    (
        t.median,
        t.index.len(),
        t.mean_interval().unwrap_or(f64::NAN),
    )
}

const YANG: &str = "Yang et al., FAST'20";
const LENS: &str = "LENS, MICRO'20, Fig. 5a";
const YANG_WA: &str =
    "Yang et al., FAST'20, Fig. 9 (data: github.com/NVSL/OptaneStudy graphs/09-infer_xpbuffer.csv)";
const YANG_TAIL: &str =
    "Yang et al., FAST'20, Fig. 3 (data: github.com/NVSL/OptaneStudy graphs/03-tail_latency.csv)";

/// Run every experiment. `quick` shortens the wear-leveling runs (for
/// tests); the report then says so.
pub fn run(quick: bool, mut progress: impl FnMut(&str)) -> Result<Report, Error> {
    let mut figures = Vec::new();
    let fig = |name: &str,
               preset: &'static str,
               unit: &'static str,
               sim: f64,
               publ: f64,
               source: &'static str,
               cal: bool,
               tolerance_pct: f64| Figure {
        name: name.to_string(),
        preset,
        unit,
        simulated: sim,
        published: publ,
        source,
        calibration_input: cal,
        tolerance_pct,
    };
    progress("idle read latency");
    figures.push(fig(
        "idle read latency, sequential",
        "optane-1dimm",
        "ns",
        idle_read("optane-1dimm", true, 1)?,
        169.0,
        YANG,
        false,
        7.0,
    ));
    figures.push(fig(
        "idle read latency, random",
        "optane-1dimm",
        "ns",
        idle_read("optane-1dimm", false, 2)?,
        305.0,
        YANG,
        false,
        20.0,
    ));
    figures.push(fig(
        "idle read latency, sequential",
        "ddr4-2666",
        "ns",
        idle_read("ddr4-2666", true, 3)?,
        81.0,
        YANG,
        false,
        5.0,
    ));
    figures.push(fig(
        "idle read latency, random",
        "ddr4-2666",
        "ns",
        idle_read("ddr4-2666", false, 4)?,
        101.0,
        YANG,
        false,
        9.0,
    ));
    progress("pointer chasing");
    // Region, label, LENS's figure and its tolerance (percent).
    type Region = (u64, &'static str, Option<(f64, f64)>);
    let regions: [Region; 8] = [
        (4 << 10, "4 KiB", None),
        (16 << 10, "16 KiB", Some((178.0, 7.0))),
        (64 << 10, "64 KiB", Some((276.0, 5.0))),
        (1 << 20, "1 MiB", Some((310.0, 5.0))),
        (4 << 20, "4 MiB", None),
        (16 << 20, "16 MiB", Some((313.0, 5.0))),
        (32 << 20, "32 MiB", Some((344.0, 5.0))),
        (64 << 20, "64 MiB", None),
    ];
    let mut curves = Vec::new();
    let mut pc = Vec::new();
    for (i, (r, label, publ)) in regions.iter().enumerate() {
        let v = pointer_chase("optane-1dimm", *r, 10 + i as u64)?;
        pc.push((*label, v));
        if let Some((p, tol)) = publ {
            figures.push(fig(
                &format!("pointer chase, {label} region, ns/line"),
                "optane-1dimm",
                "ns",
                v,
                *p,
                LENS,
                false,
                *tol,
            ));
        }
    }
    progress("write latency");
    figures.push(fig(
        "store + clwb + sfence latency",
        "optane-1dimm",
        "ns",
        persist_latency("optane-1dimm", Op::Write, 5)?,
        62.0,
        YANG,
        true,
        7.0,
    ));
    figures.push(fig(
        "nt-store + sfence latency",
        "optane-1dimm",
        "ns",
        persist_latency("optane-1dimm", Op::NtWrite, 6)?,
        90.0,
        YANG,
        true,
        6.0,
    ));
    figures.push(fig(
        "store + clwb + sfence latency",
        "ddr4-2666",
        "ns",
        persist_latency("ddr4-2666", Op::Write, 7)?,
        57.0,
        YANG,
        true,
        9.0,
    ));
    figures.push(fig(
        "nt-store + sfence latency",
        "ddr4-2666",
        "ns",
        persist_latency("ddr4-2666", Op::NtWrite, 8)?,
        87.0,
        YANG,
        true,
        5.0,
    ));
    progress("bandwidth");
    figures.push(fig(
        "one-DIMM read bandwidth, sequential, 64 outstanding",
        "optane-1dimm",
        "GB/s",
        bandwidth("optane-1dimm", Op::Read, 64)?,
        6.5,
        YANG,
        true,
        5.0,
    ));
    figures.push(fig(
        "one-DIMM nt-write bandwidth, sequential, 64 outstanding",
        "optane-1dimm",
        "GB/s",
        bandwidth("optane-1dimm", Op::NtWrite, 64)?,
        2.2,
        YANG,
        true,
        8.0,
    ));

    let mut pc_sim = Vec::new();
    let mut pc_lens = Vec::new();
    for (i, (r, _, publ)) in regions.iter().enumerate() {
        pc_sim.push((*r as f64, pc[i].1));
        if let Some((p, _)) = publ {
            pc_lens.push((*r as f64, *p));
        }
    }
    let vans = vec![
        (16384.0, 136.0),
        (65536.0, 317.0),
        (1048576.0, 361.0),
        (33554432.0, 433.0),
    ];
    curves.push(Curve {
        id: "pointer-chase",
        title: "pointer chasing, one Optane DIMM",
        x_label: "region",
        x_bytes: true,
        y_label: "latency per cache line",
        y_ns: true,
        y_log: false,
        series: vec![
            ("pmlab sim".into(), pc_sim),
            ("LENS (real Optane)".into(), pc_lens),
            ("VANS (issue 4)".into(), vans),
        ],
    });
    let mut shapes = Vec::new();
    let get = |l: &str| pc.iter().find(|p| p.0 == l).map(|p| p.1).unwrap_or(0.0);
    shapes.push(Shape {
        name: "read latency per line steps up past 16 KiB and past 16 MiB (LENS Fig. 5a)".into(),
        measured: pc
            .iter()
            .map(|(l, v)| format!("{l}: {v:.0}"))
            .collect::<Vec<_>>()
            .join(", "),
        reproduced: get("64 KiB") > 1.2 * get("16 KiB")
            && get("32 MiB") > 1.05 * get("16 MiB")
            && get("4 KiB") < 1.05 * get("16 KiB")
            && get("16 MiB") < 1.1 * get("1 MiB"),
    });
    progress("write steps");
    let wregions: [(u64, &str); 8] = [
        (256, "256 B"),
        (512, "512 B"),
        (1024, "1 KiB"),
        (2048, "2 KiB"),
        (4096, "4 KiB"),
        (8192, "8 KiB"),
        (16384, "16 KiB"),
        (65536, "64 KiB"),
    ];
    let mut wc = Vec::new();
    for (i, (r, l)) in wregions.iter().enumerate() {
        wc.push((*l, write_chase("optane-1dimm", *r, 30 + i as u64)?));
    }
    curves.push(Curve {
        id: "store-chase",
        title: "non-temporal stores over a region, one Optane DIMM",
        x_label: "region",
        x_bytes: true,
        y_label: "time per cache line",
        y_ns: true,
        y_log: false,
        series: vec![(
            "pmlab sim".into(),
            wregions
                .iter()
                .zip(&wc)
                .map(|((r, _), (_, v))| (*r as f64, *v))
                .collect(),
        )],
    });
    let wget = |l: &str| wc.iter().find(|p| p.0 == l).map(|p| p.1).unwrap_or(0.0);
    shapes.push(Shape {
        name: "store latency per line steps up past 512 B and past 4 KiB (LENS Fig. 5a)".into(),
        measured: wc
            .iter()
            .map(|(l, v)| format!("{l}: {v:.1}"))
            .collect::<Vec<_>>()
            .join(", "),
        reproduced: wget("1 KiB") > 1.2 * wget("512 B")
            && wget("8 KiB") > 1.2 * wget("4 KiB")
            && wget("256 B") < 1.1 * wget("512 B")
            && wget("4 KiB") < 1.2 * wget("2 KiB"),
    });
    progress("read amplification");
    let mut ra = Vec::new();
    for (i, b) in [64u64, 128, 256, 512].iter().enumerate() {
        ra.push((*b, read_amplification("optane-1dimm", *b, 40 + i as u64)?));
    }
    curves.push(Curve {
        id: "read-amplification",
        title: "RMW-buffer read amplification",
        x_label: "block",
        x_bytes: true,
        y_label: "bytes fetched / bytes read",
        y_ns: false,
        y_log: false,
        series: vec![
            (
                "pmlab sim".into(),
                ra.iter().map(|(b, v)| (*b as f64, *v)).collect(),
            ),
            (
                "LENS".into(),
                vec![(64.0, 4.0), (128.0, 2.0), (256.0, 1.0), (512.0, 1.0)],
            ),
        ],
    });
    let rget = |b: u64| ra.iter().find(|p| p.0 == b).map(|p| p.1).unwrap_or(0.0);
    shapes.push(Shape {
        name: "RMW-buffer read amplification 4x for 64 B blocks, 1 from 256 B (LENS Fig. 6a)"
            .into(),
        measured: ra
            .iter()
            .map(|(b, v)| format!("{b} B: {v:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        reproduced: (rget(64) - 4.0).abs() < 0.2
            && (rget(256) - 1.0).abs() < 0.1
            && (rget(512) - 1.0).abs() < 0.1,
    });
    progress("write combining");
    // Yang et al. FAST'20 Fig. 9: region, label, published amplification
    // (their data file, linked in the source) and the tolerance.
    let xp_regions: [(u64, &str, f64, f64); 5] = [
        (8 << 10, "8 KiB", 1.036, 7.0),
        (16 << 10, "16 KiB", 1.036, 7.0),
        (32 << 10, "32 KiB", 1.820, 13.0),
        (64 << 10, "64 KiB", 2.043, 6.0),
        (1 << 20, "1 MiB", 2.075, 7.0),
    ];
    // Plotted, not scored: in regions of 4 KiB and less the LSQ (4 KiB)
    // holds the whole region and also merges a line's next round into it,
    // so the model goes below Yang et al.'s 1.03 at 4 KiB (0.80 at 256 B
    // shows the real device does this too, in smaller regions).
    let mut xp_publ: Vec<(f64, f64)> = vec![(256.0, 0.798), (4096.0, 1.034)];
    xp_publ.extend(xp_regions.iter().map(|p| (p.0 as f64, p.2)));
    let mut xp_sim = vec![
        (256.0, xpbuffer_amplification("optane-1dimm", 256)?),
        (4096.0, xpbuffer_amplification("optane-1dimm", 4096)?),
    ];
    for (r, label, publ, tol) in xp_regions {
        let v = xpbuffer_amplification("optane-1dimm", r)?;
        xp_sim.push((r as f64, v));
        figures.push(fig(
            &format!("write amplification, 128 B halves of each XPLine, {label} region"),
            "optane-1dimm",
            "x",
            v,
            publ,
            YANG_WA,
            false,
            tol,
        ));
    }
    let mut fenced = Vec::new();
    for (i, r) in [4u64 << 10, 16 << 10, 64 << 10, 1 << 20, 64 << 20]
        .iter()
        .enumerate()
    {
        fenced.push((
            *r,
            fenced_random_amplification("optane-1dimm", *r, 70 + i as u64)?,
        ));
    }
    curves.push(Curve {
        id: "write-amplification",
        title: "write amplification against region size, one Optane DIMM",
        x_label: "region",
        x_bytes: true,
        y_label: "media bytes written / bytes stored",
        y_ns: false,
        y_log: false,
        series: vec![
            ("pmlab sim, 128 B halves".into(), xp_sim),
            ("Yang et al. Fig. 9".into(), xp_publ),
            (
                "pmlab sim, random 64 B + fence".into(),
                fenced.iter().map(|(r, v)| (*r as f64, *v)).collect(),
            ),
        ],
    });
    let fget = |r: u64| fenced.iter().find(|p| p.0 == r).map(|p| p.1).unwrap_or(0.0);
    shapes.push(Shape {
        name: "random 64 B stores, a fence after each: amplification at most about 1 while the region fits the 16 KiB buffer (lines complete there), 4 (one XPLine per 64 B) far beyond it (Yang et al. FAST'20, section 3.3)".into(),
        measured: fenced
            .iter()
            .map(|(r, v)| format!("{}: {v:.2}", fmt_region(*r)))
            .collect::<Vec<_>>()
            .join(", "),
        reproduced: fget(4 << 10) < 1.3 && fget(16 << 10) < 1.5 && fget(64 << 20) > 3.6,
    });
    progress("pointer chasing, Quartz's model");
    let mut quartz_contrast = Vec::new();
    for (i, r) in [16u64 << 10, 64 << 10, 1 << 20, 32 << 20]
        .iter()
        .enumerate()
    {
        quartz_contrast.push((*r, pointer_chase("slow-dram", *r, 60 + i as u64)?));
    }
    progress("pointer chasing, six DIMMs");
    let (a6, b6, c6) = (
        pointer_chase("optane-6dimm", 16 << 10, 50)?,
        pointer_chase("optane-6dimm", 64 << 10, 51)?,
        pointer_chase("optane-6dimm", 256 << 10, 52)?,
    );
    shapes.push(Shape {
        name: "with six interleaved DIMMs the RMW-buffer step moves to larger regions (VANS IV, Fig. 10b)".into(),
        measured: format!(
            "6 DIMMs: 16 KiB: {a6:.0}, 64 KiB: {b6:.0}, 256 KiB: {c6:.0} (1 DIMM at 64 KiB: {:.0})",
            get("64 KiB")
        ),
        reproduced: b6 < 1.05 * a6 && c6 > 1.2 * a6 && get("64 KiB") > 1.2 * b6,
    });
    progress("interleaving");
    let (r1, r6) = (
        bandwidth("optane-1dimm", Op::Read, 512)?,
        bandwidth("optane-6dimm", Op::Read, 512)?,
    );
    let (w1, w6) = (
        bandwidth("optane-1dimm", Op::NtWrite, 512)?,
        bandwidth("optane-6dimm", Op::NtWrite, 512)?,
    );
    shapes.push(Shape {
        name: "six DIMMs interleaved at 4 KiB scale sequential bandwidth about 6x (LENS III-D)".into(),
        measured: format!("512 outstanding: read {r1:.1} -> {r6:.1} GB/s ({:.1}x), nt-write {w1:.1} -> {w6:.1} GB/s ({:.1}x)", r6 / r1, w6 / w1),
        reproduced: r6 > 5.0 * r1 && w6 > 5.0 * w1,
    });
    progress("wear-leveling tails");
    let iters = if quick { 60_000 } else { 100_000 };
    let lat = overwrite("optane-1dimm", 256, iters)?;
    let (median, n, interval) = tails(&lat);
    let per = 250usize;
    curves.push(Curve {
        id: "overwrite",
        title: "256 B overwrite, one Optane DIMM (max per 250 iterations)",
        x_label: "iteration",
        x_bytes: false,
        y_label: "latency",
        y_ns: true,
        y_log: true,
        series: vec![(
            "pmlab sim".into(),
            lat.chunks(per)
                .enumerate()
                .map(|(i, c)| {
                    (
                        (i * per) as f64,
                        c.iter().cloned().fold(0.0f32, f32::max) as f64,
                    )
                })
                .collect(),
        )],
    });
    let max = lat.iter().cloned().fold(0.0f32, f32::max) as f64;
    shapes.push(Shape {
        name: "256 B overwrite: a tail over 100x the median about every 14,000 iterations (LENS Fig. 7b)".into(),
        measured: format!("{iters} iterations: median {median:.0} ns, {n} tails (max {max:.0} ns = {:.0}x), one every {interval:.0} iterations", max / median),
        reproduced: n >= 2 && max > 100.0 * median && (interval - 14_000.0).abs() < 0.2 * 14_000.0,
    });
    progress("tail latency of hot regions");
    // Yang et al. FAST'20 Fig. 3: 99.999th-percentile write latency of a
    // hot region (µs); region, label, iterations (enough for several
    // wear-leveling migrations), published value, tolerance.
    // The 256 KiB region has no figure: Yang et al.'s 0.39 µs there is
    // their ordinary write latency, which includes costs this experiment
    // does not model (their p99.99 is 0.32-0.38 µs at every region); the
    // shape below checks only that the tail is gone.
    type Hot = (u64, &'static str, u64, Option<(f64, f64, bool)>);
    let hot: [Hot; 4] = [
        (256, "256 B", 200_000, Some((52.74, 8.0, true))),
        (4 << 10, "4 KiB", 400_000, Some((50.98, 5.0, false))),
        (16 << 10, "16 KiB", 1_200_000, Some((47.64, 10.0, false))),
        (256 << 10, "256 KiB", 400_000, None),
    ];
    let mut hot_tails = Vec::new();
    for (r, label, n, publ) in hot {
        let lat = overwrite("optane-1dimm", r, n)?;
        let p5 = quantile(&lat, 0.99999) / 1000.0;
        let p4 = quantile(&lat, 0.9999) / 1000.0;
        hot_tails.push((r, p4, p5));
        if let Some((publ, tol, cal)) = publ {
            figures.push(fig(
                &format!("p99.999 latency of 256 B nt-store + fence, {label} hot region"),
                "optane-1dimm",
                "µs",
                p5,
                publ,
                YANG_TAIL,
                cal,
                tol,
            ));
        }
    }
    shapes.push(Shape {
        name: "hot-region writes: p99.99 stays near the median while p99.999 reaches tens of µs up to 16 KiB regions, and not from 256 KiB (Yang et al. FAST'20 Fig. 3)".into(),
        measured: hot_tails
            .iter()
            .map(|(r, p4, p5)| format!("{}: p99.99 {p4:.2} µs, p99.999 {p5:.2} µs", fmt_region(*r)))
            .collect::<Vec<_>>()
            .join("; "),
        reproduced: hot_tails.iter().all(|(_, p4, _)| *p4 < 1.0)
            && hot_tails.iter().filter(|h| h.0 <= 16 << 10).all(|h| h.2 > 10.0)
            && hot_tails.iter().filter(|h| h.0 >= 256 << 10).all(|h| h.2 < 1.0),
    });
    let long = if quick { 0 } else { 2_600_000 };
    if long > 0 {
        let mut freq = Vec::new();
        for (r, l) in [
            (256u64, "256 B"),
            (16 << 10, "16 KiB"),
            (64 << 10, "64 KiB"),
            (256 << 10, "256 KiB"),
        ] {
            progress(&format!("tail frequency, {l}"));
            let lat = overwrite("optane-1dimm", r, long)?;
            let (_, n, _) = tails(&lat);
            freq.push((l, n as f64 / long as f64 * 1e6));
        }
        let f = |l: &str| freq.iter().find(|p| p.0 == l).map(|p| p.1).unwrap_or(0.0);
        shapes.push(Shape {
            name: "tail frequency drops for overwrite regions of 64 KiB and more (LENS Fig. 7c)"
                .into(),
            measured: format!("tails per million iterations ({long} iterations each): ")
                + &freq
                    .iter()
                    .map(|(l, v)| format!("{l}: {v:.1}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            reproduced: f("256 B") > 0.0
                && f("16 KiB") > 0.0
                && f("64 KiB") < 0.25 * f("16 KiB")
                && f("256 KiB") < 0.25 * f("16 KiB"),
        });
    }
    let average_accuracy_pct =
        figures.iter().map(|f| 100.0 - f.error_pct()).sum::<f64>() / figures.len() as f64;
    Ok(Report {
        quartz_contrast,
        curves,
        figures,
        shapes,
        average_accuracy_pct,
    })
}

impl Report {
    /// The report as Markdown (the body of `docs/validation.md`); with
    /// `images`, the curves are linked as `<images>/<id>.svg`.
    pub fn markdown(&self, command: &str, images: Option<&str>) -> String {
        let mut s = String::new();
        s.push_str("# Simulator validation\n\n");
        s.push_str(&format!("Generated by `{command}`; do not edit by hand. The experiments are in\n`crates/sim/src/validate.rs` and use only the public request API.\nParameters and their sources: `pmlab sim show optane-1dimm` and `configs/`.\n\n"));
        s.push_str("## Absolute figures\n\n| figure | preset | simulated | published | error | source |\n|---|---|---:|---:|---:|---|\n");
        for f in &self.figures {
            let cal = if f.calibration_input {
                " (calibration input)"
            } else {
                ""
            };
            s.push_str(&format!(
                "| {}{} | {} | {:.1} {} | {:.1} {} | {:.1}% | {} |\n",
                f.name,
                cal,
                f.preset,
                f.simulated,
                f.unit,
                f.published,
                f.unit,
                f.error_pct(),
                f.source
            ));
        }
        s.push_str(&format!(
            "\n**Average accuracy: {:.1}%** over {} figures (goal: at least 90%; VANS reports 86.5%).\n\n",
            self.average_accuracy_pct,
            self.figures.len()
        ));
        let rest: Vec<&Figure> = self
            .figures
            .iter()
            .filter(|f| !f.calibration_input)
            .collect();
        if !rest.is_empty() {
            let acc = rest.iter().map(|f| 100.0 - f.error_pct()).sum::<f64>() / rest.len() as f64;
            s.push_str(&format!(
                "Without the rows marked as calibration inputs: {acc:.1}% over {} figures.\n\n",
                rest.len()
            ));
        }
        s.push_str("VANS on the same pointer chase (figures of issue 4, run on this machine): 136 ns up to 16 KiB,\n317 at 64 KiB, 361 at 1 MiB, 433 at 32 MiB, that is errors of 23.6%, 14.9%, 16.5% and 25.9%\nagainst LENS's 178, 276, 310 and 344.\n\n");
        s.push_str("Calibration: `cpu.read_ns` was fitted on the DRAM rows; `rmw_hit_ns`, `ait_ns` and\n`media_read_ns` on the Optane pointer-chase and idle-latency rows (one value each for all\nrows); the media bandwidths are Yang et al.'s one-DIMM peaks, so the two bandwidth rows check\nthe composition, not a prediction; the four store-latency rows are the idle path
`cpu.store_ns` / `cpu.nt_store_ns` (the mean of Yang et al.'s DRAM and Optane figures), so they
check only that nothing else adds to an idle write. `migration_ns` (the wear-leveling
stall beyond copying 64 KiB) was fitted on the 256 B hot-region p99.999 row; the 4 KiB and
16 KiB rows check it. Everything else comes from the structure LENS and Yang et al. report.\n\n");
        s.push_str("## Shapes (LENS)\n\n| shape | measured | reproduced |\n|---|---|---|\n");
        for sh in &self.shapes {
            s.push_str(&format!(
                "| {} | {} | {} |\n",
                sh.name,
                sh.measured,
                if sh.reproduced { "yes" } else { "**no**" }
            ));
        }
        s.push_str("\nHow the shapes are measured: the store steps by LENS's store chase (non-temporal 64 B\nstores over the region in random order, 16 in flight, passes repeated back to back and one\nfence at the end of the run), so a region that fits in a write queue is re-written there;\n`pmlab probe` measures its streaming-store curve the same way (`--fence run`) and infers\nthe same 512 B and 4 KiB steps. The read amplification is the RMW buffer's counter (bytes\nfetched over bytes read), not a latency score; the AIT buffer's 4 KiB access granularity\n(LENS Fig. 6a) comes from `ait_fill = \"entry\"` and shows in `pmlab probe`'s block sweep\npast 16 MiB (docs/profiler.md).\n");
        s.push_str("\n## Contrast: Quartz's model\n\nThe same pointer chase on `slow-dram` (DRAM plus a fixed 200 ns, no buffers), the model of\nQuartz-style emulators: ");
        let q: Vec<String> = self
            .quartz_contrast
            .iter()
            .map(|(r, v)| format!("{} {v:.0} ns", fmt_region(*r)))
            .collect();
        s.push_str(&q.join(", "));
        s.push_str(".\nIts curve is nearly flat (DRAM row-buffer effects only) where real Optane steps at 16 KiB and\n16 MiB; LENS section II-B makes the same point about emulation.\n");
        s.push('\n');
        s.push_str(&device_placeholder());
        if let Some(dir) = images {
            s.push_str("\n## Curves\n\n");
            for c in &self.curves {
                s.push_str(&format!("![{}]({dir}/{}.svg)\n\n", c.title, c.id));
            }
        }
        s
    }
}

/// The first line of the generated section of `pmlab validate --device`
/// (the emulator against this simulator) in `docs/validation.md`.
pub const DEVICE_SECTION_BEGIN: &str =
    "<!-- generated by pmlab validate --device --write: begin -->";
/// The section's last line.
pub const DEVICE_SECTION_END: &str = "<!-- generated by pmlab validate --device --write: end -->";

/// The heading of the device section.
pub const DEVICE_HEADING: &str =
    "## The emulator against the simulator (`pmlab validate --device`)";

/// How `pmlab validate --device` compares the emulator with this
/// simulator (the method part of its section).
pub const DEVICE_METHOD: &str =
    "`pmlab run --device optane-1dimm` runs a program with the simulator's
device as a functional model (`pmlab_model::device`: RMW buffer, AIT
buffer, media, write combining, wear leveling, interleaving; parameters
converted from the preset by `pmlab_sim::functional`, the three read
latencies measured on the simulator). `pmlab validate --device
optane-1dimm` checks that a program emulated that way sees the curve this
simulator gives:

* the program is `workloads/lenschase.c` built by `pmlab cc`: LENS's
  pointer chase over a region (4 KiB to 1 GiB) in 64 B and 256 B blocks,
  each line linked to the next, the region flushed with `pflush` before
  every pass (regions from 256 MiB on are not flushed: they miss any
  cache); in device mode `pflush` evicts (`clflushopt`), and so does the
  plain build's fallback;
* each point runs the plain build natively and the `pmlab cc` build under
  `pmlab run --device`, both timing the chase on the thread's CPU clock
  (`-c`: time switched out is not latency); the emulated latency per line
  is the native build's own chase cost per line (flushes left out) plus
  the difference of the two runs' ns per line (the delay injected per
  line);
* the emulator charges a PM miss served by level X the latency of X less
  what that kind of access costs natively, which depends on its locality:
  a miss in a page missed in recently (a chase over 256 KiB, measured
  when the runtime starts, while the thread's footprint is within 1 MiB;
  growing with the footprint's logarithm to the DRAM latency at 32 MiB),
  the line right after the previous miss (the same chase in 256 B blocks:
  the prefetchers have it on its way; grown with the run's first line's
  cost), a line flushed fewer than 256 flushes before (the chase's first
  8 KiB alone, then the runtime's own flushed pages chased on the
  program's thread while it runs, the medians of the latest probes; in
  256 B blocks when it follows the previous miss, after a run of up to
  128 flushes, nearly a following line's cost from 256), or any other
  miss (the DRAM latency); so the emulated latency is the level's when
  those match the program's own costs;
* the expectation is `pmlab probe ptrchase --target sim:optane-1dimm` at
  the same region and block; the bound is 10% at every region; 4 KiB
  blocks (held out: nothing was tuned on them) are judged the same way;
* the overwrite point compares the period of the slow iterations of
  `lenschase -o N` (one 256 B block written, flushed and fenced N times)
  that last as long as the simulator's tails (0.9 to 1.3 times): the
  distance between two of them that the most of them repeat, so that
  stray slow iterations do not split it; with the period of the long
  tails of the simulator's overwrite probe, within 10%; the emulator
  charges a wear-leveling migration at the first durability point
  (`pm_drain`) after the model has seen the write that caused it;
* `--quick` (3 regions, both blocks, the overwrite) is the CI variant;
  `--plot DIR` draws both curves in `device-ptrchase.svg`/`.png`, and
  `--write docs/validation.md` replaces this section with the results.

What it does not show: the emulated program runs on this machine's DRAM,
so the comparison checks that the emulator injects the device model's
latencies where the simulator says they fall, not that either matches a
real Optane DIMM (the figures above do that for the simulator). The
functional model has no queues and no time: bandwidth limits, the LSQ's
combining window, the on-DIMM DRAM's row hits and the AIT entry's
background fill are not in it, and write-backs cost only their media time
beyond an epoch's length and wear-leveling stalls. The tests in
`crates/sim/src/functional.rs` check the levels, write amplification and
wear-leveling period against this simulator on short sequences.
";

/// The device section before any `pmlab validate --device --write` run:
/// the method and how to record the results.
pub fn device_placeholder() -> String {
    format!(
        "{DEVICE_SECTION_BEGIN}\n{DEVICE_HEADING}\n\n{DEVICE_METHOD}\nNo results recorded yet: `pmlab validate --device optane-1dimm --reps 3 --write docs/validation.md --plot docs/validation` writes them here.\n{DEVICE_SECTION_END}\n"
    )
}

/// The device section of `doc` (markers included), if it has one.
pub fn device_section_of(doc: &str) -> Option<&str> {
    let a = doc.find(DEVICE_SECTION_BEGIN)?;
    let rel = doc[a..].find(DEVICE_SECTION_END)?;
    let mut b = a + rel + DEVICE_SECTION_END.len();
    if doc[b..].starts_with('\n') {
        b += 1;
    }
    Some(&doc[a..b])
}

/// `doc` with its device section replaced by `section` (which carries its
/// markers); appended when `doc` has none.
pub fn splice_device_section(doc: &str, section: &str) -> String {
    match device_section_of(doc) {
        Some(old) => doc.replacen(old, section, 1),
        None => {
            let mut s = doc.to_string();
            if !s.ends_with('\n') && !s.is_empty() {
                s.push('\n');
            }
            s.push('\n');
            s.push_str(section);
            s
        }
    }
}

fn fmt_region(r: u64) -> String {
    if r >= 1 << 20 {
        format!("{} MiB", r >> 20)
    } else if r >= 1 << 10 {
        format!("{} KiB", r >> 10)
    } else {
        format!("{r} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_section_is_kept_and_replaced_whole() {
        let page = format!("# Page\n\nbefore\n\n{}\n## Curves\n", device_placeholder());
        let sec = device_section_of(&page).unwrap();
        assert!(
            sec.starts_with(DEVICE_SECTION_BEGIN)
                && sec.ends_with(&format!("{DEVICE_SECTION_END}\n"))
        );
        let results = format!(
            "{DEVICE_SECTION_BEGIN}\n{DEVICE_HEADING}\n\n| a | b |\n{DEVICE_SECTION_END}\n"
        );
        let new = splice_device_section(&page, &results);
        assert!(new.contains("| a | b |") && !new.contains("No results recorded yet"));
        assert!(new.starts_with("# Page\n\nbefore\n\n") && new.ends_with("\n## Curves\n"));
        // Regenerating the page keeps the recorded section.
        let regenerated = splice_device_section(&page, device_section_of(&new).unwrap());
        assert_eq!(regenerated, new);
        // A page without one gets it at the end.
        let appended = splice_device_section("# Other\n", &results);
        assert_eq!(device_section_of(&appended), Some(results.as_str()));
    }

    /// Each published figure within its own tolerance (a failure names
    /// every figure that drifted, with its numbers), and each shape
    /// reproduced.
    #[test]
    fn every_published_figure_stays_within_its_tolerance() {
        let r = run(true, |_| {}).unwrap();
        assert_eq!(r.figures.len(), 23, "figures added or lost");
        let misses: Vec<String> = r
            .figures
            .iter()
            .filter(|f| !f.within_tolerance())
            .map(|f| {
                format!(
                    "{} on {}: simulated {:.1} {} vs published {:.1} ({}): error {:.1}% > {:.1}%",
                    f.name,
                    f.preset,
                    f.simulated,
                    f.unit,
                    f.published,
                    f.source,
                    f.error_pct(),
                    f.tolerance_pct
                )
            })
            .collect();
        assert!(misses.is_empty(), "{}", misses.join("\n"));
        for f in &r.figures {
            assert!(
                (5.0..=20.0).contains(&f.tolerance_pct),
                "{}: tolerance {}",
                f.name,
                f.tolerance_pct
            );
        }
        let lost: Vec<&str> = r
            .shapes
            .iter()
            .filter(|s| !s.reproduced)
            .map(|s| s.name.as_str())
            .collect();
        assert!(lost.is_empty(), "shapes not reproduced: {lost:?}");
    }

    #[test]
    fn tolerance_is_relative_to_the_published_value() {
        let f = |simulated| Figure {
            name: "x".into(),
            preset: "p",
            unit: "ns",
            simulated,
            published: 200.0,
            source: "s",
            calibration_input: false,
            tolerance_pct: 5.0,
        };
        // 5% of 200 ns is 10 ns, either side.
        assert!(f(210.0).within_tolerance() && f(190.0).within_tolerance());
        assert!(!f(210.5).within_tolerance() && !f(189.5).within_tolerance());
        assert_eq!(f(230.0).error_pct(), 15.0);
    }

    /// cxl-type3: Pond (Li et al., ASPLOS'23), the preset's source, puts
    /// CXL memory 70-90 ns above local DRAM; local DRAM here is ddr4-2666
    /// (Yang et al.'s 101 ns for random reads). The idle random read on
    /// the expander must show that gap.
    #[test]
    fn cxl_type3_reads_are_70_to_90_ns_above_local_dram() {
        let cxl = idle_read("cxl-type3", false, 4).unwrap();
        let dram = idle_read("ddr4-2666", false, 4).unwrap();
        let gap = cxl - dram;
        assert!(
            (70.0..=90.0).contains(&gap),
            "CXL {cxl:.1} ns, DRAM {dram:.1} ns"
        );
        // Against the published DRAM figure too (within the DRAM row's
        // own 9% tolerance of 101 ns).
        assert!(
            (101.0 * 0.91 + 70.0..=101.0 * 1.09 + 90.0).contains(&cxl),
            "CXL {cxl:.1} ns"
        );
        // Sequential reads pay the same link.
        let seq = idle_read("cxl-type3", true, 3).unwrap();
        let dram_seq = idle_read("ddr4-2666", true, 3).unwrap();
        assert!(
            (70.0..=90.0).contains(&(seq - dram_seq)),
            "{seq} {dram_seq}"
        );
    }

    /// slow-dram: Quartz's model, set (its preset says) to Yang et al.'s
    /// 305 ns Optane random read; and flat where Optane steps: the pointer
    /// chase costs the same at 16 KiB as at 16 MiB (within DRAM row-buffer
    /// effects), unlike LENS's 178 vs 313 ns.
    #[test]
    fn slow_dram_reads_at_optanes_published_305_ns() {
        let r = idle_read("slow-dram", false, 2).unwrap();
        assert!((r - 305.0).abs() / 305.0 < 0.05, "{r:.1} ns");
        let small = pointer_chase("slow-dram", 16 << 10, 11).unwrap();
        let large = pointer_chase("slow-dram", 16 << 20, 13).unwrap();
        assert!(small > 250.0 && large < 330.0, "{small:.1} {large:.1}");
        assert!(
            large - small < 0.5 * (313.0 - 178.0),
            "{small:.1} {large:.1}"
        );
    }
}
