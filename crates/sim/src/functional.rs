//! The one conversion from a simulator configuration to the parameters of
//! the emulator's functional device model
//! ([`pmlab_model::device::DeviceParams`], used by `pmlab run --device`).
//!
//! Sizes, policies, write bandwidth and wear leveling are read from the
//! configuration's resolved parameters (what `pmlab sim show` lists), so
//! that no number is written twice. The three read latencies (RMW buffer,
//! AIT buffer, media) are not parameters of the simulator but sums along
//! its paths (core, controller, AIT table in the on-DIMM DRAM, buffer or
//! media): they are measured on the simulator itself, with isolated reads
//! that each level serves, so that they include every component on the
//! path exactly as the simulator times it.
//!
//! A configuration without an RMW buffer (DDR4, CXL, slow DRAM) becomes a
//! device without buffers whose one read latency is the simulator's mean
//! latency of isolated random reads.

use crate::config::ParamInfo;
use crate::{Error, Op, Request, System};
use pmlab_model::device::DeviceParams;
use pmlab_model::Bytes;

/// Idle time between the probe reads, ns: every queue and background fill
/// is done before the next read.
const GAP_NS: f64 = 20_000.0;

/// Random reads whose mean latency is a bufferless device's latency.
const RANDOM_READS: u64 = 256;

/// The functional-model parameters of the configuration `toml` (a preset's
/// text or a file's, such as a profile from `pmlab probe infer`); `origin`
/// names it in errors and becomes the parameters' name.
pub fn params_from_toml(toml: &str, origin: &str) -> Result<DeviceParams, Error> {
    let sys = System::from_toml(toml, origin)?;
    let fresh = || System::from_toml(toml, origin);
    convert(&sys, fresh)
}

/// The functional-model parameters of preset `name`.
pub fn params_of_preset(name: &str) -> Result<DeviceParams, Error> {
    let p = crate::presets::find(name)?;
    params_from_toml(p.toml, p.name)
}

fn value<'a>(ps: &'a [ParamInfo], component_ends: &str, name: &str) -> Option<&'a str> {
    ps.iter()
        .find(|p| p.name == name && p.component.ends_with(component_ends))
        .map(|p| p.value.as_str())
}

fn number(v: &str, unit: &str) -> Option<f64> {
    v.trim().trim_end_matches(unit).trim().parse().ok()
}

fn convert(sys: &System, fresh: impl Fn() -> Result<System, Error>) -> Result<DeviceParams, Error> {
    let ps = sys.params();
    let name = sys.name().to_string();
    let origin = name.clone();
    let missing = |what: &str| {
        Error::config(format!("{origin}: cannot read '{what}' for the device model (a device with an rmw buffer needs every nvram parameter)"))
    };
    let bytes = |comp: &str, key: &str| -> Result<u64, Error> {
        let v = value(ps, comp, key).ok_or_else(|| missing(key))?;
        Bytes::parse(v).map(Bytes::get).map_err(|_| missing(key))
    };
    let channels = value(ps, "controller", "channels")
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    let interleave = value(ps, "controller", "interleave")
        .and_then(|v| Bytes::parse(v).ok())
        .map_or(4096, Bytes::get);
    // One device's address stride: consecutive chunks of one DIMM.
    let stride = interleave * channels as u64;
    let read = |sys: &mut System, addr: u64, t: f64| -> f64 {
        sys.submit(&Request::new(t, Op::Read, addr, 64)).done_ns - t
    };
    if value(ps, "dimm", "rmw_bytes").is_none() {
        // No buffers: the mean of isolated random reads.
        let mut s = fresh()?;
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let (mut t, mut sum) = (0.0, 0.0);
        for _ in 0..RANDOM_READS {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let lat = read(&mut s, (rng % (1 << 34)) & !63, t);
            sum += lat;
            t += lat + GAP_NS;
        }
        let lat = sum / RANDOM_READS as f64;
        return Ok(DeviceParams {
            name,
            channels,
            interleave,
            xpline: 64,
            rmw_lines: 0,
            ait_entry: 64,
            ait_entries: 0,
            fill_entry: false,
            combine_in_buffer: false,
            prefetch: 0,
            prefetch_after: 1,
            rmw_ns: lat,
            ait_ns: lat,
            media_ns: lat,
            write_ns: 0.0,
            read_occ_ns: 0.0,
            wear_threshold: u32::MAX,
            wear_window: u64::MAX,
            migration_ns: 0.0,
        });
    }
    let xpline = bytes("dimm", "xpline_bytes")?;
    let rmw_lines = (bytes("dimm", "rmw_bytes")? / xpline) as u32;
    let ait_entry = bytes("dimm", "ait_entry_bytes")?;
    let ait_entries = (bytes("dimm", "ait_buffer_bytes")? / ait_entry) as u32;
    let gbs = |key: &str| -> Result<f64, Error> {
        value(ps, "dimm", key)
            .and_then(|v| number(v, "GB/s"))
            .filter(|g| *g > 0.0)
            .ok_or_else(|| missing(key))
    };
    let ns = |key: &str| -> Result<f64, Error> {
        value(ps, "dimm", key)
            .and_then(|v| number(v, "ns"))
            .ok_or_else(|| missing(key))
    };
    let count = |key: &str| -> Result<u64, Error> {
        value(ps, "dimm", key)
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| missing(key))
    };
    let choice = |key: &str| value(ps, "dimm", key).unwrap_or_default().to_string();
    // Media occupancy per XPLine: size over bandwidth (bytes per ns).
    let write_ns = xpline as f64 / gbs("media_write_gbs")?;
    let read_occ_ns = xpline as f64 / gbs("media_read_gbs")?;
    let migration_lines = (bytes("dimm", "migration_bytes")? / xpline) as f64;
    let migration_ns = migration_lines * (read_occ_ns + write_ns) + ns("migration_ns")?;

    // Back-to-back reads (closed loop, as a pointer chase issues them) of
    // the first line of `pages` AIT entries of one DIMM, in a scrambled
    // order (an odd multiplier permutes 0..2^n). Media: entries scattered
    // over 2^18 (1 GiB of 4 KiB entries), as a large region's are (the AIT
    // table reads then miss the on-DIMM DRAM's rows). AIT buffer: entries
    // within the buffer's own span, read twice (the second pass hits the
    // AIT buffer: the RMW buffer holds only the end of the first). RMW
    // buffer: each line, then its XPLine's second line.
    let pages = (ait_entries as u64 / 2)
        .clamp(1, 2048)
        .max(rmw_lines as u64 * 2);
    let span = (ait_entries as u64).next_power_of_two().max(pages);
    let scatter = |range: u64| -> Vec<u64> {
        (0..pages)
            .map(|k| (k * 2_654_435_761) % range.next_power_of_two())
            .collect()
    };
    let mut s = fresh()?;
    let mut t = 0.0;
    let mut level = |s: &mut System, order: &[u64], offsets: &[u64]| -> f64 {
        let mut sum = 0.0;
        for &k in order {
            for (i, &off) in offsets.iter().enumerate() {
                let l = read(s, k * stride + off, t);
                t += l;
                if i + 1 == offsets.len() {
                    sum += l;
                }
            }
        }
        sum / order.len() as f64
    };
    let media = level(&mut s, &scatter(1 << 18), &[0]);
    let mut s = fresh()?;
    let near = scatter(span);
    level(&mut s, &near, &[0]);
    let ait_ns = if ait_entries as u64 > pages && pages >= 2 * rmw_lines as u64 {
        level(&mut s, &near, &[0])
    } else {
        media
    };
    let rmw_ns = level(&mut s, &near, &[0, 64]);
    let _ = (t, GAP_NS);
    Ok(DeviceParams {
        name,
        channels,
        interleave,
        xpline,
        rmw_lines,
        ait_entry,
        ait_entries,
        fill_entry: choice("ait_fill") == "entry",
        combine_in_buffer: choice("write_combining") == "buffer",
        prefetch: count("prefetch_xplines")? as u32,
        prefetch_after: count("prefetch_after")?.max(1) as u32,
        rmw_ns,
        ait_ns,
        media_ns: media,
        write_ns,
        read_occ_ns,
        wear_threshold: count("wear_threshold")?.min(u32::MAX as u64) as u32,
        wear_window: count("wear_window")?,
        migration_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmlab_model::device::DeviceModel;

    #[test]
    fn every_preset_converts() {
        if std::env::var("PMLAB_SHOW_DEVICE").is_ok() {
            for p in crate::presets::ALL {
                eprintln!("{}", params_of_preset(p.name).unwrap().to_env());
            }
        }
        for p in crate::presets::ALL {
            let d = params_of_preset(p.name).unwrap_or_else(|e| panic!("{}: {e}", p.name));
            // It travels to the runtime and back unchanged.
            assert_eq!(DeviceParams::parse(&d.to_env()).unwrap(), d, "{}", p.name);
            assert!(
                d.media_ns > 60.0 && d.media_ns < 1000.0,
                "{}: {d:?}",
                p.name
            );
            assert!(
                d.rmw_ns <= d.ait_ns && d.ait_ns <= d.media_ns,
                "{}: {d:?}",
                p.name
            );
            if p.name.starts_with("optane") {
                assert!(d.has_buffers());
                assert_eq!((d.xpline, d.rmw_lines, d.ait_entry), (256, 64, 4096));
                assert_eq!(d.ait_entries, 4096);
                assert!(d.fill_entry && d.combine_in_buffer);
                assert_eq!((d.wear_threshold, d.wear_window), (14_000, 2_500_000));
                // 256 B at 2.3 GB/s.
                assert!((d.write_ns - 256.0 / 2.3).abs() < 1e-9);
                // The levels LENS reports: ~178, ~310, ~344 ns (docs/validation.md).
                assert!((d.rmw_ns - 172.0).abs() < 15.0, "{d:?}");
                assert!((d.ait_ns - 310.0).abs() < 31.0, "{d:?}");
                assert!((d.media_ns - 344.0).abs() < 35.0, "{d:?}");
            } else {
                assert!(!d.has_buffers(), "{}", p.name);
            }
        }
        assert_eq!(params_of_preset("optane-6dimm").unwrap().channels, 6);
        let e = params_of_preset("optane").unwrap_err().to_string();
        assert!(e.contains("valid presets are"), "{e}");
        let e = params_from_toml("name = 3", "bad.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.toml"), "{e}");
    }

    /// Closed-loop reads of `addrs` on the simulator (each after the
    /// previous completed, plus `gap`): their mean latency and the reads
    /// its RMW buffer, AIT buffer and media served.
    fn sim_reads(preset: &str, addrs: &[u64], gap: f64) -> (f64, [f64; 3]) {
        let mut s = System::preset(preset).unwrap();
        let mut t = 0.0;
        let mut sum = 0.0;
        for &a in addrs {
            let l = s.submit(&Request::new(t, Op::Read, a, 64)).done_ns - t;
            sum += l;
            t += l + gap;
        }
        let st = s.stats().flatten();
        let total = |suffix: &str| -> f64 {
            st.iter()
                .filter(|(k, _, _)| k.ends_with(suffix))
                .map(|(_, v, _)| v)
                .sum()
        };
        (
            sum / addrs.len() as f64,
            [
                total("rmw_buffer.hits"),
                total("ait_buffer.hits"),
                total("ait_buffer.misses"),
            ],
        )
    }

    fn chase(region: u64, block: u64, passes: u32, seed: u64) -> Vec<u64> {
        let n = region / block;
        let mut order: Vec<u64> = (0..n).collect();
        let mut r = seed | 1;
        for i in (1..order.len()).rev() {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            order.swap(i, (r % (i as u64 + 1)) as usize);
        }
        let mut out = Vec::new();
        for _ in 0..passes {
            for &b in &order {
                for l in (0..block).step_by(64) {
                    out.push(b * block + l);
                }
            }
        }
        out
    }

    /// The functional model counts the reads each level serves as the
    /// simulator does, and its mean latency is the simulator's, on short
    /// chases that each level serves, on one DIMM and on six interleaved.
    #[test]
    fn the_levels_agree_with_the_simulator_on_short_chases() {
        for preset in ["optane-1dimm", "optane-6dimm"] {
            let p = params_of_preset(preset).unwrap();
            for (region, block) in [
                (8u64 << 10, 64u64),
                (8 << 10, 256),
                (1 << 20, 64),
                (4 << 20, 256),
                (64 << 20, 64),
            ] {
                let seq = chase(region, block, 2, region ^ block);
                let seq = &seq[..seq.len().min(6000)];
                let (sim_mean, sim_levels) = sim_reads(preset, seq, 500.0);
                let mut m = DeviceModel::new(&p);
                let mean =
                    seq.iter().map(|&a| p.latency(m.read(a))).sum::<f64>() / seq.len() as f64;
                let c = m.counts();
                let ours = [c.rmw_hits, c.ait_hits, c.media_reads].map(|n| n as f64);
                let what = format!("{preset} {region} B / {block} B");
                for (o, s) in ours.iter().zip(sim_levels) {
                    assert!(
                        (o - s).abs() <= 0.03 * seq.len() as f64,
                        "{what}: levels {ours:?}, simulator {sim_levels:?}"
                    );
                }
                assert!(
                    (mean - sim_mean).abs() <= 0.05 * sim_mean,
                    "{what}: mean {mean:.1} ns, simulator {sim_mean:.1} ns"
                );
            }
        }
    }

    /// Write amplification of scattered and whole-XPLine writes, and the
    /// wear-leveling period of a hot XPLine, as the simulator counts them.
    #[test]
    fn writes_and_wear_agree_with_the_simulator() {
        let p = params_of_preset("optane-1dimm").unwrap();
        let run = |addrs: &[u64]| {
            let mut s = System::preset("optane-1dimm").unwrap();
            let mut t = 0.0;
            for &a in addrs {
                // One thread, a fence after each line: no LSQ combining, as
                // the emulator's write-backs arrive one at a time.
                let w = s.submit(&Request::new(t, Op::NtWrite, a, 64));
                let f = s.submit(&Request::new(w.done_ns, Op::SFence, 0, 0));
                t = f.done_ns + 100.0;
            }
            s.drain(t);
            let st = s.stats();
            let sum = |suffix: &str| -> f64 {
                st.flatten()
                    .iter()
                    .filter(|(k, _, _)| k.ends_with(suffix))
                    .map(|(_, v, _)| v)
                    .sum()
            };
            let (media, migrations) = (sum("media.writes"), sum("media.migrations"));
            (media, migrations)
        };
        let model = |addrs: &[u64]| {
            let mut m = DeviceModel::new(&p);
            for &a in addrs {
                m.write_back(a);
            }
            m
        };
        // Whole XPLines in order, then 64 B lines 4 KiB apart (more than
        // the buffer holds: every one a partial write).
        let whole: Vec<u64> = (0..4096u64).map(|l| l * 64).collect();
        let scattered: Vec<u64> = (0..2000u64).map(|k| k * 4096).collect();
        for seq in [&whole, &scattered] {
            let (sim_writes, _) = run(seq);
            let m = model(seq);
            // The simulator's drain also writes what is left in the buffer.
            let ours = m.counts().media_writes as f64;
            assert!(
                sim_writes >= ours && sim_writes - ours <= p.rmw_lines as f64,
                "sim {sim_writes}, model {ours}"
            );
        }
        // A hot XPLine written whole 30,000 times: two migrations (every
        // 14,000 writes) in both.
        let hot: Vec<u64> = (0..30_000u64)
            .flat_map(|_| (0..4).map(|l| l * 64))
            .collect();
        let (_, sim_mig) = run(&hot);
        let m = model(&hot);
        assert_eq!(m.counts().migrations, 2);
        assert_eq!(sim_mig, m.counts().migrations as f64);
    }
}
