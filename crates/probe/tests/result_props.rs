//! Property tests of what `pmlab probe infer` reads and writes: result sets
//! damaged at random (points made NaN, infinite, negative or huge, points
//! and curves dropped, duplicated or reordered, parameters changed, the
//! JSON itself corrupted) must be read or refused cleanly, inferred from
//! without a panic, and any profile written from them must load in the
//! simulator or be refused in one line. Seeds and case counts are fixed;
//! the file runs in well under a second.

use pmlab_probe::infer::{self, Inferred, Thresholds};
use pmlab_probe::probes::{Curve, Kind, Point};
use pmlab_probe::profile::{self, Latencies};
use pmlab_probe::suite::Results;
use pmlab_probe::Op;
use pmlab_testkit::{mutate_bytes, Rng};
use std::collections::BTreeMap;

fn curve(id: &str, kind: Kind, op: Op, params: &[(&str, f64)], pts: &[(f64, f64)]) -> Curve {
    Curve {
        id: id.into(),
        kind,
        op,
        params: params.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        x_label: "x".into(),
        y_label: "y".into(),
        points: pts
            .iter()
            .map(|&(x, y)| Point { x, y, lo: y, hi: y })
            .collect(),
    }
}

/// A result set shaped like an Optane DIMM's (two read buffers at 16 KiB
/// and 16 MiB with 256 B and 4 KiB entries, a 512 B write queue, long
/// tails, 4 KiB interleaving over 6 devices): every curve
/// [`infer::infer`] reads.
fn lens_like() -> Results {
    let load = |x: f64| {
        if x <= 16384.0 {
            170.0
        } else if x <= 16.0 * 1048576.0 {
            300.0
        } else {
            340.0
        }
    };
    let regions: Vec<f64> = (10..=26).map(|e| (1u64 << e) as f64).collect();
    let pts = |f: &dyn Fn(f64) -> f64| -> Vec<(f64, f64)> {
        regions.iter().map(|&x| (x, f(x))).collect()
    };
    let blocks = [64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0];
    let block = |entry: f64, base: f64| -> Vec<(f64, f64)> {
        blocks
            .iter()
            .map(|&b| (b, base + 100.0 * (entry / b).max(1.0)))
            .collect()
    };
    let mut tails: Vec<(f64, f64)> = (0..2000).map(|i| (i as f64, 1000.0)).collect();
    for i in (0..2000).step_by(250) {
        tails[i].1 = 60000.0;
    }
    let strides = [256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];
    Results {
        version: "0".into(),
        target: "sim:test".into(),
        description: "test".into(),
        noisy: false,
        seconds: BTreeMap::new(),
        curves: vec![
            curve(
                "load",
                Kind::PtrchaseRegion,
                Op::Load,
                &[("block", 64.0)],
                &pts(&load),
            ),
            curve(
                "store",
                Kind::PtrchaseRegion,
                Op::Store,
                &[("block", 64.0)],
                &pts(&|x| {
                    if x <= 512.0 {
                        60.0
                    } else {
                        load(x) + 40.0
                    }
                }),
            ),
            curve(
                "raw",
                Kind::PtrchaseRegion,
                Op::Raw,
                &[("block", 64.0)],
                &pts(&|x| 2.0 * load(x)),
            ),
            curve(
                "block1",
                Kind::PtrchaseBlock,
                Op::Load,
                &[("region", 1048576.0)],
                &block(256.0, 300.0),
            ),
            curve(
                "block2",
                Kind::PtrchaseBlock,
                Op::Load,
                &[("region", 67108864.0)],
                &block(4096.0, 340.0),
            ),
            curve(
                "ow",
                Kind::Overwrite,
                Op::Store,
                &[("region", 256.0)],
                &tails,
            ),
            curve(
                "owsweep",
                Kind::OverwriteSweep,
                Op::Store,
                &[],
                &[
                    (256.0, 0.004),
                    (4096.0, 0.004),
                    (65536.0, 0.004),
                    (262144.0, 0.0),
                ],
            ),
            curve(
                "stride",
                Kind::StrideInterleave,
                Op::Load,
                &[("size", 256.0)],
                &strides
                    .iter()
                    .map(|&s| (s, if s == 4096.0 { 12.0 } else { 6.0 }))
                    .collect::<Vec<_>>(),
            ),
            curve(
                "channels",
                Kind::StrideChannels,
                Op::Load,
                &[],
                &(1..=8)
                    .map(|k| (k as f64 * 4096.0, if k % 6 == 0 { 2.0 } else { 12.0 }))
                    .collect::<Vec<_>>(),
            ),
        ],
    }
}

/// Values a damaged or hostile result file can hold.
const ODD: &[f64] = &[
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    -1.0,
    0.0,
    1e300,
    -1e300,
    1e-300,
    3.0,
    4096.0,
    f64::MAX,
    u64::MAX as f64,
];

fn damage(rng: &mut Rng, r: &mut Results) {
    if r.curves.is_empty() {
        r.curves = lens_like().curves;
    }
    let c = rng.below(r.curves.len());
    let curve = &mut r.curves[c];
    let n = curve.points.len();
    match rng.below(10) {
        0 | 1 if n > 0 => {
            let i = rng.below(n);
            let v = *rng.pick(ODD);
            match rng.below(4) {
                0 => curve.points[i].x = v,
                1 => curve.points[i].y = v,
                2 => curve.points[i].lo = v,
                _ => curve.points[i].hi = v,
            }
        }
        2 if n > 0 => {
            let i = rng.below(n);
            curve.points.truncate(i);
        }
        3 if n > 0 => {
            let i = rng.below(n);
            let p = curve.points[i];
            curve.points.insert(rng.below(n), p);
        }
        4 if n > 1 => {
            let (i, j) = (rng.below(n), rng.below(n));
            curve.points.swap(i, j);
        }
        5 => {
            let key = *rng.pick(&["block", "region", "size", "outstanding", "stride"]);
            if rng.one_in(2) {
                curve.params.remove(key);
            } else {
                curve.params.insert(key.into(), *rng.pick(ODD));
            }
        }
        6 => {
            curve.kind = *rng.pick(&[
                Kind::PtrchaseRegion,
                Kind::PtrchaseBlock,
                Kind::Overwrite,
                Kind::OverwriteSweep,
                Kind::StrideSize,
                Kind::StrideInterleave,
                Kind::StrideChannels,
            ]);
            curve.op = *rng.pick(&[Op::Load, Op::Store, Op::Raw]);
        }
        7 => {
            r.curves.remove(c);
        }
        8 => {
            let copy = r.curves[c].clone();
            r.curves.push(copy);
        }
        _ => {
            let k = 0.5 + rng.below(100) as f64 / 25.0;
            for p in &mut curve.points {
                p.y *= k;
            }
        }
    }
}

/// Infer from `r`; a profile is either written, and then loads in the
/// simulator, or refused in one line. Whether a profile was written.
fn infer_and_write(r: &Results, what: &str) -> bool {
    let inf = infer::infer(&r.curves, &Thresholds::default());
    for note in &inf.notes {
        assert_eq!(note.lines().count(), 1, "{what}: {note}");
    }
    profile_loads(&inf, what)
}

fn profile_loads(inf: &Inferred, what: &str) -> bool {
    let lat = Latencies {
        rmw_hit: 112.0,
        ait: 61.0,
        media_read: 80.0,
    };
    match profile::toml(inf, &lat, "a \"damaged\" result set") {
        Ok(text) => match pmlab_sim::System::from_toml(&text, "profile") {
            Ok(_) => true,
            Err(e) => panic!("{what}: a written profile does not load: {e}\n{text}"),
        },
        Err(e) => {
            assert_eq!(e.to_string().lines().count(), 1, "{what}: {e}");
            false
        }
    }
}

#[test]
fn the_undamaged_set_infers_the_device_it_describes() {
    let inf = infer::infer(&lens_like().curves, &Thresholds::default());
    let caps: Vec<f64> = inf.read_buffers.iter().map(|b| b.capacity).collect();
    assert_eq!(caps, [16384.0, 16.0 * 1048576.0], "{inf:?}");
    assert_eq!(inf.read_entries, [Some(256.0), Some(4096.0)], "{inf:?}");
    assert!(profile_loads(&inf, "undamaged"));
}

#[test]
fn damaged_result_sets_are_inferred_from_without_a_panic() {
    let mut rng = Rng::new(4242);
    let mut written = 0;
    for round in 0..400 {
        let mut r = lens_like();
        for _ in 0..1 + rng.below(6) {
            damage(&mut rng, &mut r);
        }
        written += infer_and_write(&r, &format!("round {round}")) as u32;
    }
    // Light damage still leaves a profile; heavy damage does not.
    assert!(
        written > 0 && written < 400,
        "{written} of 400 wrote a profile"
    );
}

#[test]
fn corrupted_result_files_are_read_or_refused() {
    let json = serde_json::to_vec(&lens_like()).unwrap();
    let mut rng = Rng::new(808);
    let mut parsed = 0;
    for round in 0..400 {
        let mut b = json.clone();
        mutate_bytes(&mut rng, &mut b, 0);
        if let Ok(r) = serde_json::from_slice::<Results>(&b) {
            parsed += 1;
            infer_and_write(&r, &format!("round {round}"));
        }
    }
    assert!(parsed > 0 && parsed < 400, "{parsed} of 400 parsed");
}

#[test]
fn random_inferred_parameters_give_a_loadable_profile_or_a_clean_error() {
    let mut rng = Rng::new(99);
    let size = |rng: &mut Rng| -> f64 {
        if rng.one_in(4) {
            *rng.pick(ODD)
        } else {
            (1u64 << rng.below(34)) as f64
        }
    };
    for round in 0..400 {
        let mut inf = Inferred::default();
        for _ in 0..rng.below(4) {
            let c = size(&mut rng);
            inf.read_buffers.push(infer::Inflection {
                capacity: c,
                before: 100.0,
                after: 200.0,
            });
            inf.read_entries
                .push((!rng.one_in(5)).then(|| size(&mut rng)));
        }
        for _ in 0..rng.below(3) {
            let c = size(&mut rng);
            inf.write_buffers.push(infer::Inflection {
                capacity: c,
                before: 50.0,
                after: 90.0,
            });
        }
        if rng.one_in(2) {
            inf.interleave = Some(size(&mut rng));
        }
        if rng.one_in(2) {
            inf.channels = Some(rng.below(40) as u32);
        }
        if rng.one_in(2) {
            inf.migration_block = Some(size(&mut rng));
        }
        if rng.one_in(2) {
            inf.tail_interval_bytes = Some(size(&mut rng));
            inf.migration_ns = Some(*rng.pick(&[0.0, 50000.0, f64::NAN, -3.0]));
        }
        profile_loads(&inf, &format!("round {round}: {inf:?}"));
    }
}

/// Values no device has (a NaN or zero capacity, written as "0B"; a NaN
/// or negative latency; a zero XPLine) make `profile::toml` refuse in one
/// line instead of writing a profile that `pmlab sim` then refuses.
#[test]
fn a_profile_that_would_not_load_is_refused() {
    let good = infer::infer(&lens_like().curves, &Thresholds::default());
    let lat = Latencies {
        rmw_hit: 112.0,
        ait: 61.0,
        media_read: 80.0,
    };
    let mut cases: Vec<(&str, Inferred, Latencies)> = Vec::new();
    let mut nan_cap = good.clone();
    nan_cap.read_buffers[0].capacity = f64::NAN;
    cases.push(("NaN capacity", nan_cap, lat));
    let mut zero_ait = good.clone();
    zero_ait.read_buffers[1].capacity = 0.0;
    cases.push(("zero AIT capacity", zero_ait, lat));
    let mut zero_line = good.clone();
    zero_line.read_entries[0] = Some(0.0);
    cases.push(("zero XPLine", zero_line, lat));
    let mut nan_entry = good.clone();
    nan_entry.read_entries[1] = Some(f64::NAN);
    cases.push(("NaN entry", nan_entry, lat));
    for bad in [f64::NAN, -5.0, f64::INFINITY] {
        cases.push((
            "bad latency",
            good.clone(),
            Latencies {
                media_read: bad,
                ..lat
            },
        ));
    }
    for (what, inf, lat) in cases {
        match profile::toml(&inf, &lat, "odd") {
            Ok(text) => panic!("{what}: written:\n{text}"),
            Err(e) => {
                let msg = e.to_string();
                assert_eq!(msg.lines().count(), 1, "{what}: {msg}");
                assert!(msg.contains("profile"), "{what}: {msg}");
            }
        }
    }
    assert!(profile::toml(&good, &lat, "lens").is_ok());
}
