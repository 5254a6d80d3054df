//! Replays of logged-access streams through [`ModelState::run`]: the
//! streams the hooks log for chases of pointers (1 and 8 chains over
//! 256 MiB, as memlat and `bench/window_chains.c` walk them), a chase of
//! indices (`idxchase`) and a mix of loads, stores, updates and compares;
//! a reference copy of the batch path as it was before it was made
//! cheaper, which every stream must match exactly; and the cost of a
//! batch entry by stage (`bench/batch-cost.sh`, under callgrind).

use super::*;
use crate::source::instrumented::log::LOG_ENTRIES;
use crate::source::instrumented::sample::{set_policy, Policy};

/// Where the streams' regions start (2 MiB-aligned, as a huge mapping).
const BASE: usize = 0x7f40_0000_0000;

/// xorshift64.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// A random cyclic order of `lines` lines cut into `chains` cycles (each
/// node's successor in its own chain), as window_chains and memlat build
/// theirs.
fn chain_successors(lines: usize, chains: usize, seed: u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..lines as u32).collect();
    let mut s = seed;
    for i in (1..lines).rev() {
        order.swap(i, (next(&mut s) % (i as u64 + 1)) as usize);
    }
    let per = lines / chains;
    let mut succ = vec![0u32; lines];
    for c in 0..chains {
        let part = &order[c * per..(c + 1) * per];
        for i in 0..per {
            succ[part[i] as usize] = part[(i + 1) % per];
        }
    }
    succ
}

/// What the hooks log for `chains` chains over `region` bytes walked in
/// lock step, `extra` filter hits after each chain's load (they advance
/// the access count, `at`, without an entry): one 8-byte load per step
/// and chain whose value is the next node's address (`index`: the next
/// node's index, read by a 4-byte load, as an index-linked chase).
pub(super) fn chase(
    chains: usize,
    region: usize,
    entries: usize,
    extra: u64,
    index: bool,
) -> Vec<LogEntry> {
    let lines = region >> LINE_SHIFT;
    let succ = chain_successors(lines, chains, 0x9E37_79B9_7F4A_7C15 ^ chains as u64);
    let per = lines / chains;
    // Chain c starts at the first node of its part: any node of it.
    let mut s = 0x2545_F491_4F6C_DD1D;
    let mut heads: Vec<u32> = (0..chains)
        .map(|_| (next(&mut s) % lines as u64) as u32)
        .collect();
    let _ = per;
    let mut out = Vec::with_capacity(entries);
    let mut at = 0u64;
    while out.len() < entries {
        for h in heads.iter_mut() {
            let node = *h as usize;
            let nx = succ[node];
            let addr = BASE + (node << LINE_SHIFT);
            out.push(if index {
                LogEntry {
                    addr: addr | VALUE_NARROW,
                    at,
                    value: nx as u64,
                }
            } else {
                LogEntry {
                    addr: addr | VALUE_WIDE,
                    at,
                    value: (BASE + ((nx as usize) << LINE_SHIFT)) as u64,
                }
            });
            *h = nx;
            at += 1 + extra;
        }
    }
    out.truncate(entries);
    out
}

/// A mix of what a program logs: random loads (with and without a value)
/// and stores over 64 MiB, updates, compares after some loads, and
/// re-reads of a small hot set (model hits).
pub(super) fn mixed(entries: usize) -> Vec<LogEntry> {
    let mut s = 0x6A09_E667_F3BC_C909u64;
    let mut out = Vec::with_capacity(entries);
    let mut at = 0u64;
    while out.len() < entries {
        let r = next(&mut s);
        let hot = r & 3 == 0;
        let line = if hot {
            r >> 40 & 1023
        } else {
            r >> 20 & ((1 << 20) - 1)
        } as usize;
        let addr = BASE + (line << LINE_SHIFT) + (r as usize >> 8 & 7) * 8;
        let e = match r >> 2 & 7 {
            0 | 1 => LogEntry {
                addr: addr | STORE_BIT,
                at,
                value: 0,
            },
            2 => LogEntry {
                addr: addr | UPDATE | VALUE_WIDE,
                at,
                value: r >> 16,
            },
            3 => LogEntry { addr, at, value: 0 },
            4 => LogEntry {
                addr: addr | VALUE_NARROW,
                at,
                value: r >> 48,
            },
            _ => LogEntry {
                addr: addr | VALUE_WIDE,
                at,
                value: (BASE + ((r as usize >> 30 & ((1 << 20) - 1)) << LINE_SHIFT)) as u64,
            },
        };
        out.push(e);
        if r >> 5 & 3 == 0 && e.addr & VALUE_WIDE != 0 && e.addr & UPDATE == 0 {
            let site = 0x40_1000 + (r as usize >> 12 & 63) * 16;
            out.push(LogEntry {
                addr: site | ((r as usize >> 24 & 3) << OUTCOME_SHIFT) | BRANCH,
                at,
                value: 0,
            });
        }
        at += 1 + (r >> 60);
    }
    out.truncate(entries);
    out
}

/// The streams the tests and the benchmark replay.
pub(super) const STREAMS: [&str; 4] = ["chase8", "chase1", "idxchase", "mixed"];

/// The first `entries` of the stream `name` (one of [`STREAMS`]).
pub(super) fn stream(name: &str, entries: usize) -> Vec<LogEntry> {
    match name {
        "chase8" => chase(8, 256 << 20, entries, 0, false),
        "chase1" => chase(1, 256 << 20, entries, 0, false),
        "idxchase" => chase(1, 256 << 20, entries, 0, true),
        _ => mixed(entries),
    }
}

/// A fresh model of the configured cache (the compact one).
pub(super) fn fresh() -> ModelState {
    let (m, compact) = ModelState::new().expect("a model of the default cache");
    assert!(compact, "the default cache has the compact model");
    m
}

/// Run `entries` through `m` in logs of [`LOG_ENTRIES`].
pub(super) fn replay(m: &mut ModelState, entries: &[LogEntry]) {
    for log in entries.chunks(LOG_ENTRIES) {
        // SAFETY: the model is ours alone; the compact model needs no
        // filter.
        unsafe { m.run(None, log) };
    }
}

/// [`replay`] through the reference path.
fn replay_reference(m: &mut ModelState, entries: &[LogEntry]) {
    for log in entries.chunks(LOG_ENTRIES) {
        reference::run(m, log);
    }
}

/// The batch path as it was before it was made cheaper (settings read per
/// entry, the estimator's counts copied per miss, the first-sight rule's
/// counts charged per entry), kept to check that the new one computes
/// exactly the same totals.
mod reference {
    use super::*;

    pub(super) fn run(m: &mut ModelState, entries: &[LogEntry]) {
        if m.first.is_none() && m.device.is_none() && first_sight_rule() {
            let llc = settings::llc();
            m.first = Some(Box::new(FirstSight::new(
                llc.size_bytes >> LINE_SHIFT,
                llc.ways as usize,
            )));
        }
        let (before, window_before) = (m.totals.serial, m.window_serial);
        for &e in entries {
            process_one(m, e);
        }
        if let Some(f) = m.first.as_deref_mut() {
            f.settle();
            m.totals.serial = charged(f, m.est.counts());
        }
        let after = m.totals.serial;
        let serial = (after.dram - before.dram) + (after.pm - before.pm);
        let mut window = m.window_serial - window_before;
        if m.first.is_some() {
            let raw = m.window_raw.max(f64::MIN_POSITIVE);
            window *= (serial / raw).clamp(0.0, 1.0);
            m.window_raw = 0.0;
        }
        m.totals.hooked_serial += serial.max(window);
    }

    fn process_one(m: &mut ModelState, e: LogEntry) {
        if e.addr & BRANCH == BRANCH {
            let site = e.addr & ((1 << OUTCOME_SHIFT) - 1);
            let outcome = ((e.addr & !FLAGS) >> OUTCOME_SHIFT) as u8;
            m.est.branch(site as u64, outcome);
            return;
        }
        let write = e.addr & (STORE_BIT | UPDATE) != 0;
        let addr = e.addr & !FLAGS;
        let pm = is_pm(addr);
        let line = (addr >> LINE_SHIFT) as u64;
        let (seen, recent) = m
            .first
            .as_deref_mut()
            .map_or((true, true), |f| (f.seen(line), f.recent(line)));
        let totals = &mut m.totals;
        // SAFETY: the compact model takes no filter.
        let (miss, dirtied) = unsafe {
            cache_access(&mut m.cache, None, None, line, write, pm, |_, pm| {
                count_writeback(totals, pm)
            })
        };
        totals.pm_dirtied += dirtied as u64;
        totals.pm_lines_read += (miss && pm) as u64;
        let Some(f) = m.first.as_deref_mut() else {
            return count_miss(m, e, addr, pm, miss);
        };
        if seen && !recent {
            f.resight(miss);
        }
        let raw = m.est.counts();
        count_miss(m, e, addr, pm, miss);
        let now = m.est.counts();
        m.window_raw += (now.dram - raw.dram) + (now.pm - raw.pm);
        let f = m.first.as_deref_mut().expect("checked above");
        if !seen {
            f.first(miss, serial_of(now, Some(raw)));
        }
        m.totals.serial = charged(f, now);
    }

    fn count_miss(m: &mut ModelState, e: LogEntry, addr: usize, pm: bool, miss: bool) {
        m.entries += 1;
        let units = e.pos() * UNIT + m.entries * (settings::logged_weight() - UNIT);
        if miss {
            let kind = if pm { MemKind::Pm } else { MemKind::Dram };
            let loaded = if e.addr & VALUE_WIDE != 0 {
                Loaded::Wide(e.value)
            } else if e.addr & VALUE_NARROW != 0 {
                Loaded::Narrow(e.value as u32)
            } else {
                Loaded::Unknown
            };
            m.est.miss(addr as u64, kind, e.pos(), loaded, LINE_SHIFT);
            m.totals.serial = m.est.counts();
            let gap = units.saturating_sub(m.last_miss_units);
            m.last_miss_units = units;
            m.window_serial += window_share(gap, settings::hooked_window());
        } else if e.addr & (VALUE_WIDE | VALUE_NARROW) != 0 {
            let loaded = if e.addr & VALUE_WIDE != 0 {
                Loaded::Wide(e.value)
            } else {
                Loaded::Narrow(e.value as u32)
            };
            m.est.hit(addr as u64, loaded, LINE_SHIFT);
        }
    }
}

/// Holds the instrumented tests' lock and the PM table's (the settings,
/// the sampling policy and the PM ranges are process-wide), with every
/// address PM; puts back the settings, full modelling and the automatic
/// PM mode when dropped.
struct Quiet<'a> {
    _tests: std::sync::MutexGuard<'a, ()>,
    _table: std::sync::MutexGuard<'a, ()>,
    was: settings::HookConfig,
}

/// The settings in force (the PM mode aside).
fn current() -> settings::HookConfig {
    settings::HookConfig {
        llc: settings::llc(),
        overlap: settings::overlap(),
        hooked_window: settings::hooked_window(),
        logged_weight: settings::logged_weight(),
        pm_mode: settings::PmMode::Auto,
        random_replacement: settings::random_replacement(),
    }
}

/// Model a cache of `mib` MiB and `ways` ways from now on, with random
/// replacement or LRU.
fn use_cache(mib: u64, ways: u32, random: bool) {
    settings::store(&settings::HookConfig {
        llc: pmlab_model::cache::CacheConfig::new(mib << 20, ways),
        random_replacement: random,
        ..current()
    });
}

fn quiet() -> Quiet<'static> {
    let tests = crate::source::instrumented::tests::LOCK
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let table = crate::source::instrumented::pm::TEST_TABLE_LOCK
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    crate::source::instrumented::pm::set_mode(settings::PmMode::All);
    set_policy(Policy::Full);
    Quiet {
        _tests: tests,
        _table: table,
        was: current(),
    }
}

impl Drop for Quiet<'_> {
    fn drop(&mut self) {
        settings::store(&self.was);
        set_policy(Policy::Full);
        crate::source::instrumented::pm::set_mode(settings::PmMode::Auto);
    }
}

#[test]
fn the_batch_path_matches_the_reference_on_every_stream() {
    let _q = quiet();
    // Small models, so that the streams fill them and evict: 16 and 8
    // ways (the fixed-size scans), 4 (the general one), random and LRU.
    for (mib, ways, random, sampled) in [
        (1, 16, true, false),
        (1, 16, false, false),
        (1, 8, true, false),
        (2, 4, true, false),
        (1, 16, true, true),
    ] {
        use_cache(mib, ways, random);
        set_policy(if sampled {
            Policy::fixed(0.25)
        } else {
            Policy::Full
        });
        for name in STREAMS {
            let s = stream(name, 200_000);
            let (mut new, mut old) = (fresh(), fresh());
            replay(&mut new, &s);
            replay_reference(&mut old, &s);
            let mut t = new.totals;
            // The model's own serial count (before the timed-miss
            // correction, off here) is the serial count; the reference
            // does not keep it.
            let serial = t.serial.dram + t.serial.pm;
            assert!(
                (t.model_serial - serial).abs() <= 1e-9 * serial.max(1.0),
                "{name}: {} against {serial}",
                t.model_serial
            );
            t.model_serial = old.totals.model_serial;
            assert!(
                t.pm_lines_read > 0,
                "{name} (sampled: {sampled}): no miss {t:?}"
            );
            assert!(
                t.pm_writebacks > 0 || name != "mixed",
                "{name}: no eviction"
            );
            assert_eq!(
                t, old.totals,
                "{name} ({mib} MiB {ways}-way, random {random}, sampled {sampled})"
            );
            assert_eq!(new.est.counts(), old.est.counts(), "{name}");
            assert_eq!(new.entries, old.entries, "{name}");
            assert_eq!(new.window_serial, old.window_serial, "{name}");
        }
    }
}

/// Cache model alone: the stream's lines through a cache of the same
/// geometry, their sets prefetched ahead as [`ModelState::run`] does.
#[inline(never)]
fn stage_cache(c: &mut CompactCache, entries: &[LogEntry]) -> u64 {
    cache_pass(c, entries)
}

/// [`stage_cache`] for the warm-up (a function of its own, so that
/// callgrind counts it apart).
#[inline(never)]
fn warm_cache(c: &mut CompactCache, entries: &[LogEntry]) -> u64 {
    // (Not the same code as `stage_cache`, which the compiler would
    // otherwise fold into this one.)
    std::hint::black_box(cache_pass(c, entries))
}

#[inline(always)]
fn cache_pass(c: &mut CompactCache, entries: &[LogEntry]) -> u64 {
    let mut misses = 0;
    for (i, e) in entries.iter().enumerate() {
        if let Some(a) = entries.get(i + PREFETCH_AHEAD) {
            prefetch(c.set_addr(((a.addr & !FLAGS) >> LINE_SHIFT) as u64));
        }
        if e.addr & BRANCH == BRANCH {
            continue;
        }
        let a = c.access(
            ((e.addr & !FLAGS) >> LINE_SHIFT) as u64,
            e.addr & (STORE_BIT | UPDATE) != 0,
            true,
        );
        misses += u64::from(!a.hit);
    }
    misses
}

/// The overlap estimator alone, on the misses (`Some`) and hits of a
/// stream as the model classed them.
#[inline(never)]
fn stage_estimator(est: &mut OverlapEstimator, classed: &[(LogEntry, bool)]) {
    estimator_pass(est, classed)
}

/// [`stage_estimator`] for the warm-up.
#[inline(never)]
fn warm_estimator(est: &mut OverlapEstimator, classed: &[(LogEntry, bool)]) {
    estimator_pass(est, classed);
    std::hint::black_box(());
}

#[inline(always)]
fn estimator_pass(est: &mut OverlapEstimator, classed: &[(LogEntry, bool)]) {
    for &(e, miss) in classed {
        let addr = (e.addr & !FLAGS) as u64;
        if e.addr & BRANCH == BRANCH {
            let site = e.addr & ((1 << OUTCOME_SHIFT) - 1);
            est.branch(site as u64, ((e.addr & !FLAGS) >> OUTCOME_SHIFT) as u8);
            continue;
        }
        let loaded = loaded_of(e);
        if miss {
            est.miss(addr, MemKind::Pm, e.pos(), loaded, LINE_SHIFT);
        } else if loaded != Loaded::Unknown {
            est.hit(addr, loaded, LINE_SHIFT);
        }
    }
}

/// The whole batch path.
#[inline(never)]
fn stage_batch(m: &mut ModelState, entries: &[LogEntry]) {
    replay(m, entries);
}

/// The batch path before it was made cheaper.
#[inline(never)]
fn stage_reference(m: &mut ModelState, entries: &[LogEntry]) {
    replay_reference(m, entries);
}

/// `bench/batch-cost.sh`: each stream (`PMLAB_REPLAY_ENTRIES` entries,
/// default 400 000: the first 3/4 warm the model, the rest are measured;
/// `PMLAB_REPLAY_STREAM` names one stream, else all run)
/// through the batch path, the reference path, the cache model alone and
/// the estimator alone, each in its own function, so that callgrind's
/// inclusive counts split an entry's instructions by stage. Prints the
/// wall-clock ns per entry of each (meaningful on a quiet machine only).
#[test]
#[ignore]
fn batch_cost() {
    let _q = quiet();
    let n = std::env::var("PMLAB_REPLAY_ENTRIES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(400_000)
        .max(4 * LOG_ENTRIES);
    // A 4 MiB model (64 Ki lines, 16 ways), which the warm-up fills: the
    // same work per access as a larger one, whose filling would take
    // millions of entries under callgrind.
    use_cache(4, 16, true);
    let warm = (n * 3 / 4) / LOG_ENTRIES * LOG_ENTRIES;
    let only = std::env::var("PMLAB_REPLAY_STREAM").ok();
    for name in STREAMS {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let s = stream(name, n);
        let (head, tail) = s.split_at(warm);
        let time = |f: &mut dyn FnMut()| {
            let t = std::time::Instant::now();
            f();
            t.elapsed().as_nanos() as f64 / tail.len() as f64
        };
        let mut m = fresh();
        replay(&mut m, head);
        let before = m.totals;
        let batch = time(&mut || stage_batch(&mut m, tail));
        let misses = (m.totals.serial.pm_misses + m.totals.serial.dram_misses)
            - (before.serial.pm_misses + before.serial.dram_misses);
        let mut r = fresh();
        replay_reference(&mut r, head);
        let reference = time(&mut || stage_reference(&mut r, tail));
        let mut c = CompactCache::new(settings::llc()).expect("geometry");
        warm_cache(&mut c, head);
        let cache = time(&mut || {
            stage_cache(&mut c, tail);
        });
        // The estimator on the entries as the model classed them.
        let mut c = CompactCache::new(settings::llc()).expect("geometry");
        let classed: Vec<(LogEntry, bool)> = s
            .iter()
            .map(|&e| {
                let hit = e.addr & BRANCH == BRANCH
                    || c.access(
                        ((e.addr & !FLAGS) >> LINE_SHIFT) as u64,
                        e.addr & (STORE_BIT | UPDATE) != 0,
                        true,
                    )
                    .hit;
                (e, !hit)
            })
            .collect();
        let mut est = OverlapEstimator::new(settings::overlap());
        warm_estimator(&mut est, &classed[..warm]);
        let estimator = time(&mut || stage_estimator(&mut est, &classed[warm..]));
        println!(
            "replay {name}: {} entries, {misses} misses; ns per entry: batch {batch:.1}, \
             reference {reference:.1}, cache {cache:.1}, estimator {estimator:.1}",
            tail.len()
        );
    }
}
