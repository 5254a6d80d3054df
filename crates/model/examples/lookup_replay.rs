//! The B+-tree lookups of `workloads/bptree.c` replayed through the
//! runtime's cache model, misses counted per tree level (issue 16: which
//! levels the model keeps that the machine loses).
//!
//! The stream is bptree's: per lookup a random leaf key, then one line per
//! level, root first (fanout 8, one 64 B node a line, each level its own
//! array). The model is a [`CompactCache`] of 16 ways with random
//! replacement, as the runtime builds it (`PMLAB_INSTR_RR=1`, the
//! default), 1 MiB-2 GiB. Other users of a shared LLC are played by
//! foreign lines: after each lookup, `others` of them
//! ([`CompactCache::fill_foreign`]: each a miss that takes a line from the
//! tree, as another tenant's fill does). A rate of other fills per second turns
//! into `others` per lookup at a given time per lookup, so a level's
//! misses then depend on the time between its visits, which is what the
//! native timed runs show (`bptree -x 0 -g GAP_NS`).
//!
//! Usage: `cargo run --release -p pmlab-model --example lookup_replay --
//! [LEAF_MIB [MODEL_MIB,... [OTHERS,...]]]` (defaults 256, `8,16,32`,
//! `0,2,4,8,16`). Prints one line per model size and rate: the misses
//! per lookup and per level, root first.

use pmlab_model::cache::{CacheConfig, CompactCache};

/// A line of a tree level, `level` counted from the leaves (0), for the
/// leaf key index `key`: each level's array starts at its own 2^36-line
/// boundary.
fn tree_line(level: u32, key: u64) -> u64 {
    (u64::from(level) << 36) + (key >> (3 * (level + 1)))
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn list(arg: Option<String>, default: &[u64]) -> Result<Vec<u64>, String> {
    match arg {
        None => Ok(default.to_vec()),
        Some(a) => a
            .split(',')
            .map(|x| {
                x.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("`{x}` is not a whole number"))
            })
            .collect(),
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("lookup_replay: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let usage = "usage: lookup_replay [LEAF_MIB [MODEL_MIB,... [OTHERS,...]]]";
    let mut args = std::env::args().skip(1);
    let leaf_mib = list(args.next(), &[256])?;
    let [leaf_mib] = leaf_mib[..] else {
        return Err(format!("one leaf size, not {}: {usage}", leaf_mib.len()));
    };
    if !(1..=1 << 16).contains(&leaf_mib) {
        return Err(format!("leaf size {leaf_mib} MiB: give 1-65536"));
    }
    let models = list(args.next(), &[8, 16, 32])?;
    let others = list(args.next(), &[0, 2, 4, 8, 16])?;
    let keys = (leaf_mib << 20) / 8;
    // Levels above the leaves while the level below has more than one node.
    let mut levels = 1u32;
    while keys >> (3 * levels) > 1 {
        levels += 1;
    }
    let lookups = 2_000_000u64;
    let warm = 2_000_000u64;
    for &mib in &models {
        if !(1..=2048).contains(&mib) || !mib.is_power_of_two() {
            return Err(format!("model size {mib} MiB: give a power of two, 1-2048"));
        }
        for &k in &others {
            let mut c = CompactCache::new(CacheConfig::new(mib << 20, 16))
                .map_err(|e| format!("model of {mib} MiB: {e}"))?;
            c.set_random_replacement(Some(0x2545_F491_4F6C_DD1D));
            let mut s = 0x9E37_79B9_7F4A_7C15u64 ^ mib ^ (k << 20);
            let mut per_level = vec![0u64; levels as usize];
            for q in 0..warm + lookups {
                let key = xorshift(&mut s) % keys;
                for l in (0..levels).rev() {
                    let miss = !c.access(tree_line(l, key), false, true).hit;
                    if q >= warm && miss {
                        per_level[(levels - 1 - l) as usize] += 1;
                    }
                }
                c.fill_foreign(k);
            }
            let total: u64 = per_level.iter().sum();
            let shares: Vec<String> = per_level
                .iter()
                .map(|&m| format!("{:.3}", m as f64 / lookups as f64))
                .collect();
            println!(
                "leaves {leaf_mib} MiB, model {mib} MiB 16-way random, others {k}/lookup: \
                 misses_per_lookup={:.3} level_misses={}",
                total as f64 / lookups as f64,
                shares.join("/")
            );
        }
    }
    Ok(())
}
