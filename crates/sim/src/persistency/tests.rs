//! Tests of the persistency replay and its models (moved unchanged from
//! the one-file version; models are named through the registry).

use super::*;
use pmlab_trace::{Op, Record};

/// The registered model called `name`.
fn named(name: &str) -> Model {
    Model::from_name(name).unwrap()
}

/// PMDK-like transactions: per epoch, `compute` ns of work, then a
/// store, its clwb and an sfence in quick succession; 6 epochs (9
/// lines) per transaction.
fn trace(threads: u32, txs: u64, compute: u64) -> Vec<Record> {
    let mut v = Vec::new();
    let mut time = vec![0u64; threads as usize];
    for i in 0..txs {
        for th in 0..threads {
            let t = &mut time[th as usize];
            let mut push = |gap, op, addr, size| {
                *t += gap;
                v.push(Record::new(*t, th, op, addr, size));
            };
            push(compute, Op::TxBegin, i, 0);
            for e in 0..6u64 {
                let base = 0x10_0000 * (th as u64 + 1) + ((i * 6 + e) % 512) * 128;
                push(compute, Op::Write, base, 8);
                push(2, Op::Clwb, base, 64);
                if e % 2 == 0 {
                    push(2, Op::Write, base + 64, 8);
                    push(2, Op::Clwb, base + 64, 64);
                }
                push(2, Op::SFence, 0, 0);
            }
            push(2, Op::TxEnd, i, 0);
        }
    }
    v.sort_by_key(|r| r.time_ns);
    v
}

fn run_cfg(cfg: impl Fn(f64) -> Config, recs: &[Record]) -> Report {
    let sys = System::preset("optane-1dimm").unwrap();
    let mut probe = System::preset("optane-1dimm").unwrap();
    Replay::new(sys, cfg(media_write_ns(&mut probe)))
        .run(recs.iter().copied().map(Ok))
        .unwrap()
        .0
}

fn run(model: Model, recs: &[Record]) -> Report {
    run_cfg(|m| Config::new(model, m), recs)
}

#[test]
fn models_order_as_in_hops() {
    let recs = trace(2, 300, 500);
    let nvm = run(named("x86-nvm"), &recs);
    let adr = run(named("x86-adr"), &recs);
    let ideal = run(named("ideal"), &recs);
    // HOPS with the buffer draining in the background as soon as it
    // holds anything: flushes leave the critical path.
    let hops = run_cfg(
        |m| Config {
            pb_drain_at: 1,
            ..Config::new(named("hops"), m)
        },
        &recs,
    );
    assert!(
        nvm.run_ns > adr.run_ns,
        "nvm {} adr {}",
        nvm.run_ns,
        adr.run_ns
    );
    assert!(
        nvm.run_ns > hops.run_ns,
        "nvm {} hops {}",
        nvm.run_ns,
        hops.run_ns
    );
    assert!(
        hops.run_ns >= ideal.run_ns,
        "hops {} ideal {}",
        hops.run_ns,
        ideal.run_ns
    );
    assert!(
        adr.run_ns >= ideal.run_ns,
        "adr {} ideal {}",
        adr.run_ns,
        ideal.run_ns
    );
    // Compute alone is a lower bound for every model.
    assert!(ideal.breakdown.compute_ns > 0.0);
    assert!(ideal.run_ns * 2.0 >= ideal.breakdown.compute_ns * 0.99);
    assert!(nvm.breakdown.durability_ns > adr.breakdown.durability_ns);
    assert!(hops.breakdown.durability_ns < nvm.breakdown.durability_ns);
    assert_eq!(nvm.threads, 2);
    assert!(hops.epochs_drained > 0);
}

#[test]
fn hops_with_late_draining_pays_its_epochs_at_commit() {
    // With draining from 16 entries and 9 lines per transaction, the
    // buffer drains only at the commit's dfence, epoch after epoch.
    let recs = trace(1, 100, 500);
    let hops = run(named("hops"), &recs);
    assert_eq!(hops.durability_points, 100);
    assert_eq!(hops.epochs_drained, 600);
    assert!(hops.breakdown.durability_ns > 0.0);
}

#[test]
fn hops_dfence_waits_for_the_buffer_and_ofence_does_not() {
    let mk = |fence| {
        vec![
            Record::new(0, 0, Op::Write, 0x1000, 8),
            Record::new(10, 0, fence, 0, 0),
            Record::new(20, 0, Op::Write, 0x2000, 8),
        ]
    };
    let o = run(named("hops"), &mk(Op::OFence));
    let d = run(named("hops"), &mk(Op::DFence));
    assert_eq!(o.breakdown.durability_ns, 0.0);
    assert!(d.breakdown.durability_ns > 0.0);
    assert!(d.durability_points == 1 && o.durability_points == 0);
}

#[test]
fn unknown_model_names_the_valid_ones() {
    let e = Model::from_name("tso").unwrap_err().to_string();
    assert!(e.contains("x86-nvm, x86-adr, hops, hops-adr, ideal"), "{e}");
    assert_eq!(Model::from_name("hops").unwrap().name(), "hops");
    assert_eq!(Model::from_name("hops-adr").unwrap().name(), "hops-adr");
    assert_ne!(named("hops"), named("hops-adr"));
    assert!(named("hops-adr").is_hops() && !named("x86-adr").is_hops());
}

fn hops_at(drain_at: usize) -> impl Fn(f64) -> Config {
    move |m| Config {
        pb_drain_at: drain_at,
        ..Config::new(named("hops"), m)
    }
}

fn rec(t: u64, th: u32, op: Op, addr: u64) -> Record {
    let size = if matches!(op, Op::Write | Op::NtWrite | Op::Clwb) {
        8
    } else {
        0
    };
    Record::new(t, th, op, addr, size)
}

#[test]
fn requests_reach_memory_in_the_time_order_of_the_threads_next_records() {
    // Thread 1 computes for 1 ms before its second record; thread 0
    // fences every microsecond meanwhile. Thread 1's write belongs at
    // 1 ms: replayed first, it would sit at the head of the controller's
    // queue and hold thread 0's writes back until then.
    let mut v = vec![rec(0, 1, Op::Write, 0x9000)];
    v.push(rec(1_000_000, 1, Op::NtWrite, 0x9040));
    v.push(rec(1_000_010, 1, Op::SFence, 0));
    for i in 0..1000u64 {
        let t = 1 + i * 1000;
        v.push(rec(t, 0, Op::Write, 0x10_0000 + (i % 64) * 64));
        v.push(rec(t + 2, 0, Op::Clwb, 0x10_0000 + (i % 64) * 64));
        v.push(rec(t + 4, 0, Op::SFence, 0));
    }
    v.sort_by_key(|r| r.time_ns);
    let adr = run(named("x86-adr"), &v);
    assert_eq!(adr.durability_points, 1001);
    // Each fence waits for one write to reach the controller (~60 ns),
    // never for the 1 ms write.
    assert!(
        adr.breakdown.durability_ns < 1001.0 * 200.0,
        "{:?}",
        adr.breakdown
    );
}

#[test]
fn hops_epochs_drain_in_order_and_an_epochs_lines_together() {
    // Three lines in three epochs, then a dfence: three round trips.
    // The same three lines in one epoch: one round trip.
    let apart = [0x1000, 0x2000, 0x3000]
        .iter()
        .enumerate()
        .flat_map(|(i, &a)| {
            let t = i as u64 * 10;
            [rec(t, 0, Op::Write, a), rec(t + 5, 0, Op::OFence, 0)]
        })
        .chain([rec(40, 0, Op::DFence, 0)])
        .collect::<Vec<_>>();
    let together = vec![
        rec(0, 0, Op::Write, 0x1000),
        rec(10, 0, Op::Write, 0x2000),
        rec(20, 0, Op::Write, 0x3000),
        rec(40, 0, Op::DFence, 0),
    ];
    let a = run(named("hops"), &apart);
    let t = run(named("hops"), &together);
    assert_eq!((a.epochs_drained, t.epochs_drained), (3, 1));
    let one_trip = t.breakdown.durability_ns;
    assert!(one_trip > a.media_write_ns, "{one_trip}");
    assert!(a.breakdown.durability_ns > 2.5 * one_trip, "{a:?}");
}

#[test]
fn hops_buffer_drains_in_the_background_from_16_entries() {
    // n stores in one epoch, 100 us of compute, then a dfence: from 16
    // entries the buffer drained meanwhile, below it waits for the
    // dfence.
    let mk = |n: u64, same_line: bool| {
        let mut v: Vec<Record> = (0..n)
            .map(|i| {
                let a = if same_line { 0x1000 } else { 0x1000 + i * 64 };
                rec(i * 10, 0, Op::Write, a)
            })
            .collect();
        v.push(rec(100_000, 0, Op::DFence, 0));
        v
    };
    let below = run(named("hops"), &mk(15, false));
    let at = run(named("hops"), &mk(16, false));
    assert!(below.breakdown.durability_ns > 0.0, "{below:?}");
    assert_eq!(at.breakdown.durability_ns, 0.0, "{at:?}");
    // Every store takes an entry, also to a line already buffered in
    // the epoch (HOPS Table 2: no coalescing).
    let same = run(named("hops"), &mk(16, true));
    assert_eq!(same.breakdown.durability_ns, 0.0, "{same:?}");
    assert_eq!(same.lines_written, 16);
}

#[test]
fn hops_epoch_drains_no_earlier_than_its_stores() {
    // Draining from the first entry, the second epoch's line is stored
    // 100 us after the first epoch was acknowledged: it cannot be on
    // the media before then, so the dfence right after it waits.
    let v = vec![
        rec(0, 0, Op::Write, 0x1000),
        rec(10, 0, Op::OFence, 0),
        rec(100_000, 0, Op::Write, 0x2000),
        rec(100_010, 0, Op::OFence, 0),
        rec(100_020, 0, Op::DFence, 0),
    ];
    let r = run_cfg(hops_at(1), &v);
    assert!(
        r.breakdown.durability_ns > r.media_write_ns,
        "{:?}",
        r.breakdown
    );
}

#[test]
fn hops_dfence_keeps_what_drained_in_the_background() {
    // Three epochs drain one after the other from the first entry
    // during 10 us of compute: the dfence finds them acknowledged.
    let mut v = Vec::new();
    for (i, a) in [0x1000u64, 0x2000, 0x3000].iter().enumerate() {
        let t = i as u64 * 20;
        v.push(rec(t, 0, Op::Write, *a));
        v.push(rec(t + 10, 0, Op::OFence, 0));
    }
    v.push(rec(10_000, 0, Op::DFence, 0));
    let r = run_cfg(hops_at(1), &v);
    assert_eq!(r.breakdown.durability_ns, 0.0, "{:?}", r.breakdown);
    assert_eq!(r.epochs_drained, 3);
}

#[test]
fn hops_cross_thread_dependency_orders_the_dependent_epoch_after_its_source() {
    // Thread 0 stores a line and keeps it buffered; thread 1 stores
    // the same line and commits: its dfence waits for thread 0's epoch
    // (forced out) and then for its own. (Thread 0's buffer drains at
    // the end of the run, which no fence waits for.)
    let mk = |line1: u64| {
        vec![
            rec(0, 0, Op::Write, 0x1000),
            rec(100, 1, Op::Write, line1),
            rec(200, 1, Op::DFence, 0),
        ]
    };
    let dep = run(named("hops"), &mk(0x1000));
    let free = run(named("hops"), &mk(0x2000));
    assert_eq!((dep.cross_deps, dep.cross_waits), (1, 1));
    assert_eq!((free.cross_deps, free.cross_waits), (0, 0));
    assert!(
        dep.breakdown.durability_ns > 1.5 * free.breakdown.durability_ns,
        "dep {:?} free {:?}",
        dep.breakdown,
        free.breakdown
    );
}

#[test]
fn hops_dependency_points_from_the_later_store_to_the_earlier() {
    // Thread 1 stores first, thread 0 second: thread 1's commit does
    // not wait for thread 0 (whose epoch depends on thread 1's).
    let v = vec![
        rec(0, 1, Op::Write, 0x1000),
        rec(100, 0, Op::Write, 0x1000),
        rec(200, 1, Op::DFence, 0),
        rec(300_000, 0, Op::DFence, 0),
    ];
    let r = run(named("hops"), &v);
    assert_eq!((r.cross_deps, r.cross_waits), (1, 0));
}

#[test]
fn hops_dependency_splits_the_source_epoch() {
    // After thread 1 depends on thread 0's open epoch, thread 0's next
    // store belongs to a new epoch: thread 1's commit forces out only
    // the store it depends on, thread 0's own commit drains the other.
    let v = vec![
        rec(0, 0, Op::Write, 0x1000),
        rec(100, 1, Op::Write, 0x1000),
        rec(150, 0, Op::Write, 0x2000),
        rec(200, 1, Op::DFence, 0),
        rec(300_000, 0, Op::DFence, 0),
    ];
    let r = run(named("hops"), &v);
    assert_eq!(r.cross_deps, 1);
    assert_eq!(r.epochs_drained, 3);
}

fn with_inval(model: Model, f: FlushInvalidation) -> impl Fn(f64) -> Config {
    move |m| Config {
        flush_invalidates: f,
        ..Config::new(model, m)
    }
}

/// A store, `flush` and an sfence; 100 us later the same line again
/// (its write-back long gone from the controller's queue), stored by
/// `second`, flushed with `clwb`, fenced.
fn store_twice(flush: Op, second: Op) -> Vec<Record> {
    vec![
        rec(0, 0, Op::Write, 0x1000),
        rec(10, 0, flush, 0x1000),
        rec(20, 0, Op::SFence, 0),
        rec(100_000, 0, second, 0x1000),
        rec(100_010, 0, Op::Clwb, 0x1000),
        rec(100_020, 0, Op::SFence, 0),
    ]
}

#[test]
fn store_after_clflushopt_makes_the_next_fence_wait_for_a_pm_read() {
    let v = store_twice(Op::ClflushOpt, Op::Write);
    for model in [named("x86-nvm"), named("x86-adr")] {
        let none = run_cfg(with_inval(model, FlushInvalidation::Never), &v);
        let auto = run_cfg(with_inval(model, FlushInvalidation::Auto), &v);
        assert_eq!((none.rfo_reads, auto.rfo_reads), (0, 1), "{model:?}");
        assert_eq!(none.breakdown.rfo_wait_ns, 0.0);
        assert!(auto.rfo_read_ns > 0.0 && auto.rfo_delayed_writebacks == 1);
        // The second fence waits for the read and then the write-back:
        // longer than without the read, by the part of the read that
        // came after the clwb (the store was 10 ns before it).
        let extra = auto.breakdown.durability_ns - none.breakdown.durability_ns;
        assert!(extra > 0.0, "{model:?} auto {auto:?} none {none:?}");
        assert!(auto.breakdown.rfo_wait_ns > 0.0);
        assert!(auto.breakdown.rfo_wait_ns <= auto.breakdown.durability_ns);
        assert!(
            auto.breakdown.rfo_wait_ns <= auto.rfo_read_ns,
            "{:?} {}",
            auto.breakdown,
            auto.rfo_read_ns
        );
        assert!(auto.run_ns > none.run_ns);
        // The write-backs are the same: only when they start differs.
        assert_eq!(auto.lines_written, none.lines_written);
    }
}

#[test]
fn clwb_retains_the_line_under_auto_and_invalidates_under_all() {
    let v = store_twice(Op::Clwb, Op::Write);
    let auto = run_cfg(with_inval(named("x86-nvm"), FlushInvalidation::Auto), &v);
    let all = run_cfg(with_inval(named("x86-nvm"), FlushInvalidation::All), &v);
    let none = run_cfg(with_inval(named("x86-nvm"), FlushInvalidation::Never), &v);
    assert_eq!((auto.rfo_reads, all.rfo_reads), (0, 1));
    assert_eq!(auto.run_ns, none.run_ns);
    assert!(all.breakdown.durability_ns > auto.breakdown.durability_ns);
    assert!(all.breakdown.rfo_wait_ns > 0.0);
    // clflush invalidates under auto, like clflushopt.
    let v = store_twice(Op::Clflush, Op::Write);
    let r = run_cfg(with_inval(named("x86-adr"), FlushInvalidation::Auto), &v);
    assert_eq!(r.rfo_reads, 1);
}

#[test]
fn nt_store_to_an_invalidated_line_needs_no_read() {
    let mut v = store_twice(Op::ClflushOpt, Op::NtWrite);
    let r = run_cfg(with_inval(named("x86-nvm"), FlushInvalidation::All), &v);
    assert_eq!((r.rfo_reads, r.breakdown.rfo_wait_ns), (0, 0.0));
    // The non-temporal store did not bring the line back: a later
    // cacheable store still reads it.
    v.push(rec(200_000, 0, Op::Write, 0x1000));
    v.push(rec(200_010, 0, Op::Clwb, 0x1000));
    v.push(rec(200_020, 0, Op::SFence, 0));
    let r = run_cfg(with_inval(named("x86-nvm"), FlushInvalidation::All), &v);
    assert_eq!(r.rfo_reads, 1);
}

#[test]
fn a_flush_invalidates_the_line_for_every_thread_and_one_read_serves_stores_in_flight() {
    // Thread 0 flushes the line out; thread 1 stores to it twice in
    // quick succession (one read), and its write-back waits for it.
    let v = vec![
        rec(0, 0, Op::Write, 0x1000),
        rec(10, 0, Op::ClflushOpt, 0x1000),
        rec(20, 0, Op::SFence, 0),
        rec(100_000, 1, Op::Write, 0x1000),
        rec(100_002, 1, Op::Write, 0x1008),
        rec(100_004, 1, Op::Clwb, 0x1000),
        rec(100_010, 1, Op::SFence, 0),
        // Long after the read: the line is cached, no read.
        rec(200_000, 1, Op::Write, 0x1000),
        rec(200_004, 1, Op::Clwb, 0x1000),
        rec(200_010, 1, Op::SFence, 0),
    ];
    let r = run_cfg(with_inval(named("x86-adr"), FlushInvalidation::Auto), &v);
    assert_eq!((r.rfo_reads, r.rfo_delayed_writebacks), (1, 1));
    assert!(r.breakdown.rfo_wait_ns > 0.0, "{:?}", r.breakdown);
}

#[test]
fn hops_and_ideal_ignore_flush_invalidation() {
    // Stores, clflushopts and fences of a PMDK-like trace: HOPS keeps
    // PM lines in its caches, ideal has no flushes.
    let mut v = trace(2, 200, 500);
    for r in &mut v {
        if r.op == Op::Clwb {
            r.op = Op::ClflushOpt;
        }
    }
    for model in [named("hops"), named("hops-adr"), named("ideal")] {
        let none = run_cfg(with_inval(model, FlushInvalidation::Never), &v);
        let all = run_cfg(with_inval(model, FlushInvalidation::All), &v);
        assert_eq!(all.rfo_reads, 0, "{model:?}");
        assert_eq!(all.run_ns, none.run_ns, "{model:?}");
        assert_eq!(all.breakdown.durability_ns, none.breakdown.durability_ns);
    }
    // The x86 models pay: the trace reuses its lines (512 per thread).
    let none = run_cfg(with_inval(named("x86-nvm"), FlushInvalidation::Never), &v);
    let auto = run_cfg(with_inval(named("x86-nvm"), FlushInvalidation::Auto), &v);
    assert!(auto.rfo_reads > 0);
    assert!(auto.run_ns > none.run_ns);
}

#[test]
fn flush_invalidation_names() {
    assert_eq!(
        FlushInvalidation::from_name("all").unwrap(),
        FlushInvalidation::All
    );
    assert_eq!(FlushInvalidation::Never.name(), "none");
    let e = FlushInvalidation::from_name("some")
        .unwrap_err()
        .to_string();
    assert!(e.contains("auto, all, none"), "{e}");
    assert!(FlushInvalidation::Auto.invalidates(Op::ClflushOpt));
    assert!(!FlushInvalidation::Auto.invalidates(Op::Clwb));
    assert!(FlushInvalidation::All.invalidates(Op::Clwb));
    assert!(!FlushInvalidation::All.invalidates(Op::Write));
    assert!(!FlushInvalidation::Never.invalidates(Op::Clflush));
    assert_eq!(
        Config::new(named("x86-nvm"), 0.0).flush_invalidates,
        FlushInvalidation::Auto
    );
}

#[test]
fn hops_adr_acknowledges_epochs_at_the_controller() {
    // Three epochs and a dfence: HOPS waits for each epoch on the
    // media, HOPS with a persistent write queue only for its
    // acceptance; the epochs still go one after the other.
    let mut v = Vec::new();
    for (i, a) in [0x1000u64, 0x2000, 0x3000].iter().enumerate() {
        let t = i as u64 * 10;
        v.push(rec(t, 0, Op::Write, *a));
        v.push(rec(t + 5, 0, Op::OFence, 0));
    }
    v.push(rec(40, 0, Op::DFence, 0));
    let nvm = run(named("hops"), &v);
    let adr = run(named("hops-adr"), &v);
    assert_eq!((nvm.epochs_drained, adr.epochs_drained), (3, 3));
    assert!(adr.breakdown.durability_ns > 0.0);
    assert!(
        adr.breakdown.durability_ns + 2.5 * nvm.media_write_ns < nvm.breakdown.durability_ns,
        "adr {:?} nvm {:?}",
        adr.breakdown,
        nvm.breakdown
    );
}
