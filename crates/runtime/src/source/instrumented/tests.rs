//! The hooks end to end: callbacks, log, model, modeller thread and
//! calibration on real threads.

use super::cost::{calibrate, HookCosts};
use super::hooks::{activate, deactivate, on_access, on_cmp};
use super::log::LOG_ENTRIES;
use super::model::ThreadTotals;
use super::pm::add_pm_range;
use super::settings::{HookConfig, PmMode, DEFAULT_HOOKED_WINDOW, DEFAULT_LOGGED_WEIGHT};
use super::thread::{thread_exit, totals, totals_and_ran, Ran};
use pmlab_model::cache::CacheConfig;
use pmlab_model::mlp::OverlapConfig;

/// What `__sanitizer_cov_load8` does.
fn load8(p: *const u64) {
    on_access(p as usize, 8, false, Some(p));
}

/// What `__sanitizer_cov_store8` does.
fn store8(p: *mut u64) {
    on_access(p as usize, 8, true, None);
}

// The hooks' state is process-global (ACTIVE, ranges); tests run each
// scenario on a fresh thread and serialise on one lock.
pub(super) static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(super) fn cfg(mode: PmMode) -> HookConfig {
    HookConfig {
        llc: CacheConfig::new(1 << 20, 16),
        overlap: OverlapConfig::default(),
        hooked_window: DEFAULT_HOOKED_WINDOW,
        logged_weight: DEFAULT_LOGGED_WEIGHT,
        pm_mode: mode,
        // LRU: these tests count exact misses of walks larger than the
        // model (random replacement lets a few lines survive).
        random_replacement: false,
    }
}

fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().unwrap()
}

#[test]
fn inactive_hooks_count_nothing() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    deactivate();
    let t = on_thread(|| {
        let x = 5u64;
        load8(&x);
        totals()
    });
    assert_eq!(t.accesses, 0);
}

#[test]
fn repeated_access_hits_the_filter() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    activate(cfg(PmMode::All));
    let t = on_thread(|| {
        let x = [0u64; 8];
        for _ in 0..1000 {
            load8(&x[0]);
        }
        let t = totals();
        thread_exit();
        t
    });
    deactivate();
    assert_eq!(t.accesses, 1000);
    assert_eq!(t.slow_calls, 1);
    assert_eq!(t.serial.pm_misses, 1);
}

#[test]
fn pointer_chase_over_a_large_array_is_serial_pm() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // The compact model (1024 sets) and the full one (1536 sets).
    for llc in [CacheConfig::new(1 << 20, 16), CacheConfig::new(3 << 19, 16)] {
        activate(HookConfig {
            llc,
            ..cfg(PmMode::All)
        });
        chase_20000();
    }
}

fn chase_20000() {
    let t = on_thread(|| {
        // 8 MiB of one pointer per line, chained with a stride that
        // defeats the 1 MiB model.
        let n = 1 << 17;
        let mut v = vec![0u64; n * 8];
        let base = v.as_ptr() as u64;
        let stride = 4099usize; // odd: visits every line
        for i in 0..n {
            let next = (i + stride) % n;
            v[i * 8] = base + (next * 64) as u64;
        }
        let mut p = v.as_ptr();
        let before = totals();
        for _ in 0..20_000 {
            load8(p);
            // SAFETY: p points into v.
            p = unsafe { *p } as *const u64;
        }
        let t = totals();
        thread_exit();
        (before, t)
    });
    deactivate();
    let (a, b) = t;
    let misses = b.serial.pm_misses - a.serial.pm_misses;
    let serial = b.serial.pm - a.serial.pm;
    assert_eq!(misses, 20_000);
    assert!((serial - 20_000.0).abs() < 2.0, "serial {serial}");
    assert_eq!(b.serial.dram_misses, 0);
    // A chase loses nothing to the hooks' window.
    assert!((b.hooked_serial - a.hooked_serial - serial).abs() < 1e-6);
}

#[test]
fn pool_ranges_attribute_misses_and_write_backs() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    activate(cfg(PmMode::Pool));
    let (pm_buf, dram_buf) = (vec![0u8; 4 << 20], vec![0u8; 4 << 20]);
    let pm_addr = pm_buf.as_ptr() as usize;
    let dram_addr = dram_buf.as_ptr() as usize;
    {
        let _t = super::pm::TEST_TABLE_LOCK
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        assert!(add_pm_range(pm_addr, pm_buf.len()));
    }
    let t = on_thread(move || {
        // Write every line of both 4 MiB buffers, twice: the second pass
        // misses again (8 MiB > 1 MiB model) and evicts dirty lines.
        for _ in 0..2 {
            for off in (0..4 << 20).step_by(64) {
                store8((pm_addr + off) as *mut u64);
                store8((dram_addr + off) as *mut u64);
            }
        }
        let t = totals();
        thread_exit();
        t
    });
    deactivate();
    let lines = (4u64 << 20) / 64;
    assert_eq!(t.serial.pm_misses, 2 * lines);
    assert_eq!(t.serial.dram_misses, 2 * lines);
    // Everything but what still fits in the model was written back.
    let resident = (1u64 << 20) / 64;
    assert_eq!(t.pm_writebacks + t.dram_writebacks, 4 * lines - resident);
    assert!(t.pm_writebacks.abs_diff(t.dram_writebacks) <= resident);
    assert_eq!(t.pm_bytes(), (t.serial.pm_misses + t.pm_writebacks) * 64);
    // Every PM store missed, so dirtied its line: the write-backs the
    // bandwidth model charges, evicted or not.
    assert_eq!(t.pm_dirtied, 2 * lines);
    assert!(super::pm::unregister(pm_addr, pm_buf.len()).is_ok());
    drop((pm_buf, dram_buf));
}

#[test]
fn calibration_gives_positive_costs() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    activate(cfg(PmMode::All));
    let c = on_thread(|| {
        let c = calibrate();
        thread_exit();
        c
    });
    deactivate();
    assert!(c.fast_ns > 0.0 && c.tsc_ghz > 0.0, "{c:?}");
    assert!(c.miss_ns >= c.fast_ns, "{c:?}");
    assert!(c.cmp_ns > 0.0 && c.cmp_logged_ns >= c.cmp_ns, "{c:?}");
    let a = ThreadTotals::default();
    // 100 calls, 16 of them logged and processed in 2 batches that took
    // 400 ticks in all; 30 compares, 5 of them logged (the model's entries,
    // `slow_calls`, include them).
    let b = ThreadTotals {
        accesses: 100,
        slow_calls: 21,
        batches: 2,
        slow_cycles: 400,
        compares: 30,
        compares_logged: 5,
        ..Default::default()
    };
    // At 2 ns a hit, 10 ns a logged miss, 1 ns a compare, 4 ns a logged
    // one, 15 ns per batch timing and a 2 GHz TSC:
    // 84 x 2 + 16 x 10 + 25 x 1 + 5 x 4 + 2 x 15 + 400 / 2 = 603 ns.
    let c = HookCosts {
        fast_ns: 2.0,
        miss_ns: 10.0,
        cmp_ns: 1.0,
        cmp_logged_ns: 4.0,
        tsc_ghz: 2.0,
        tsc_pair_ns: 15.0,
    };
    let o = c.overhead_ns(&a, &b);
    assert!((o - 603.0).abs() < 1e-9, "{o}");
    // Each kind of call is charged at its own cost.
    let only = |t: ThreadTotals| c.calls_ns(&a, &t);
    let hits = ThreadTotals {
        accesses: 7,
        ..Default::default()
    };
    assert_eq!(only(hits), 14.0);
    let logged = ThreadTotals {
        accesses: 7,
        slow_calls: 7,
        ..Default::default()
    };
    assert_eq!(only(logged), 70.0);
    let cmps = ThreadTotals {
        compares: 7,
        ..Default::default()
    };
    assert_eq!(only(cmps), 7.0);
    let cmps_logged = ThreadTotals {
        slow_calls: 7,
        compares: 7,
        compares_logged: 7,
        ..Default::default()
    };
    assert_eq!(only(cmps_logged), 28.0);
}

#[test]
fn compare_callbacks_are_counted_by_kind() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    activate(cfg(PmMode::All));
    let (a, b) = on_thread(|| {
        let v = vec![7u64; 64 * 8];
        let a = totals();
        for i in 0..64 {
            // A logged load of 7 arms the compares: 10 of other values
            // log nothing, the one of 7 is logged, the next (disarmed)
            // logs nothing either.
            load8(&v[i * 8]);
            for k in 0..10 {
                on_cmp(100 + k, 200, 0x1000);
            }
            on_cmp(7, 9, 0x2000);
            on_cmp(7, 9, 0x2000);
        }
        let b = totals();
        thread_exit();
        (a, b)
    });
    deactivate();
    assert_eq!(b.accesses - a.accesses, 64);
    assert_eq!(b.compares - a.compares, 64 * 12);
    assert_eq!(b.compares_logged - a.compares_logged, 64);
    // The model ran every logged entry, accesses and compares.
    assert_eq!(b.slow_calls - a.slow_calls, 64 + 64);
    let c = HookCosts {
        fast_ns: 2.0,
        miss_ns: 10.0,
        cmp_ns: 1.0,
        cmp_logged_ns: 4.0,
        ..HookCosts::default()
    };
    // 64 logged loads, 704 compares logging nothing, 64 logged.
    assert_eq!(c.calls_ns(&a, &b), 64.0 * 10.0 + 704.0 + 64.0 * 4.0);
    // Inactive hooks count no compare.
    let t = on_thread(|| {
        on_cmp(1, 2, 0x1000);
        totals()
    });
    assert_eq!(t.compares, 0);
}

/// A chase over `chains` interleaved random cycles of lines in an
/// 8 MiB array, `steps` loads each; returns the thread's totals before
/// and after.
fn chase_chains(chains: usize, steps: usize, read_midway: bool) -> (ThreadTotals, ThreadTotals) {
    on_thread(move || {
        let n = 1 << 17;
        let mut v = vec![0u64; n * 8];
        let base = v.as_ptr() as u64;
        // One odd stride per chain over disjoint slices of the array.
        let per = n / chains;
        for c in 0..chains {
            for i in 0..per {
                let next = c * per + (i + 4099) % per;
                v[(c * per + i) * 8] = base + (next * 64) as u64;
            }
        }
        let mut p: Vec<*const u64> = (0..chains)
            .map(|c| unsafe { v.as_ptr().add(c * per * 8) })
            .collect();
        let before = totals();
        for k in 0..steps {
            for q in p.iter_mut() {
                load8(*q);
                // SAFETY: every value points into v.
                *q = unsafe { **q } as *const u64;
            }
            if read_midway && k % 97 == 0 {
                // An epoch end in the middle of a batch.
                let _ = totals();
            }
        }
        let after = totals();
        thread_exit();
        (before, after)
    })
}

#[test]
fn logged_misses_are_counted_exactly_whenever_totals_are_read() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    activate(cfg(PmMode::All));
    for midway in [false, true] {
        let (a, b) = chase_chains(1, 5_000, midway);
        assert_eq!(b.serial.pm_misses - a.serial.pm_misses, 5_000, "{midway}");
        assert_eq!(b.slow_calls - a.slow_calls, 5_000);
        let batches = (b.batches + b.offloaded) - (a.batches + a.offloaded);
        assert!(batches >= 5_000 / LOG_ENTRIES as u64);
        assert!(((b.serial.pm - a.serial.pm) - 5_000.0).abs() < 2.0);
    }
    deactivate();
}

#[test]
fn a_reading_reports_the_batch_it_ran_itself() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    activate(cfg(PmMode::All));
    let (a, b, ran, again) = on_thread(|| {
        // 100 misses, fewer than a log: nothing runs before the read.
        let v = vec![0u64; 100 * 8];
        let a = totals();
        for i in 0..100 {
            load8(&v[i * 8]);
        }
        let (b, ran) = totals_and_ran();
        // Nothing left to run: a second reading runs nothing.
        let (_, again) = totals_and_ran();
        thread_exit();
        (a, b, ran, again)
    });
    deactivate();
    assert_eq!(b.slow_calls - a.slow_calls, 100);
    // The totals gained exactly the batch the reading ran (its cycles
    // are what the caller timed, not to be counted twice).
    assert_eq!(ran.batches, 1);
    assert_eq!(ran.batches, b.batches - a.batches);
    assert_eq!(ran.cycles, b.slow_cycles - a.slow_cycles);
    assert!(ran.cycles > 0);
    assert_eq!(again, Ran::default());
}

#[test]
fn independent_chains_logged_in_batches_overlap() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    activate(cfg(PmMode::All));
    for chains in [2usize, 4, 8] {
        let (a, b) = chase_chains(chains, 2_000, true);
        let misses = (b.serial.pm_misses - a.serial.pm_misses) as f64;
        let serial = b.serial.pm - a.serial.pm;
        assert_eq!(misses, (chains * 2_000) as f64);
        // Each step of the chains costs one latency.
        assert!((serial - 2_000.0).abs() < 3.0, "{chains}: {serial}");
        // Under the hooks (2 window units per logged miss) a window of
        // 13 holds 6.5 misses: 2 and 4 chains still overlap fully (a
        // latency per step), 8 run 6.5 at a time (16,000 / 6.5).
        let hooked = b.hooked_serial - a.hooked_serial;
        let want = if chains == 8 { 16_000.0 / 6.5 } else { 2_000.0 };
        assert!(
            (hooked - want).abs() < 0.01 * want,
            "{chains}: {hooked} vs {want}"
        );
    }
    deactivate();
}

/// What `__sanitizer_cov_load4` does.
fn load4(p: *const u32) {
    on_access(p as usize, 4, false, Some(p as *const u64));
}

#[test]
fn index_chases_with_4_and_8_byte_indices_are_serial_pm() {
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    activate(cfg(PmMode::All));
    for wide in [false, true] {
        let (a, b) = on_thread(move || {
            // 8 MiB of 64 B nodes, `i = nodes[i].next` with an odd stride;
            // the index is the node's last 4 or 8 bytes (the hook must
            // read exactly the access's size: a 4-byte read at the end of
            // the vector must not read past it).
            let n = 1usize << 17;
            let mut v = vec![0u64; n * 8];
            for i in 0..n {
                let next = ((i + 4099) % n) as u64;
                if wide {
                    v[i * 8 + 7] = next;
                } else {
                    v[i * 8 + 7] = next << 32;
                }
            }
            let mut i = 0usize;
            let before = totals();
            for _ in 0..20_000 {
                if wide {
                    let p = &v[i * 8 + 7] as *const u64;
                    load8(p);
                    i = v[i * 8 + 7] as usize;
                } else {
                    // The upper half of the last word (little-endian).
                    let p = unsafe { (&v[i * 8 + 7] as *const u64 as *const u32).add(1) };
                    load4(p);
                    i = unsafe { *p } as usize;
                }
            }
            let after = totals();
            thread_exit();
            (before, after)
        });
        let serial = b.serial.pm - a.serial.pm;
        let dependent = b.serial.dependent - a.serial.dependent;
        assert_eq!(b.serial.pm_misses - a.serial.pm_misses, 20_000, "{wide}");
        assert!(dependent >= 19_950, "wide {wide}: {dependent} dependent");
        assert!((serial - 20_000.0).abs() < 60.0, "wide {wide}: {serial}");
    }
    deactivate();
}
