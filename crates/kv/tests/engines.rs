//! The same property suite against every engine: random operations,
//! versions, rollbacks, snapshots, restores, discards, compactions,
//! reopens and unsynced crashes, checked against the model map.

use pmlab_kv::stress::Rng;
use pmlab_kv::{compare, create, open, Engine, EngineKind, ErrorKind, Model, Options};
use std::path::PathBuf;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pmkv-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn engines() -> Vec<EngineKind> {
    EngineKind::ALL
        .into_iter()
        .filter(|k| k.available())
        .collect()
}

fn val(r: &mut Rng) -> Vec<u8> {
    let len = match r.below(30) {
        0 => 64 * 1024 + r.below(2000),
        1..=3 => r.below(5000),
        _ => r.below(100),
    };
    let b = r.next_u64() as u8;
    (0..len).map(|i| b.wrapping_add(i as u8)).collect()
}

/// Run `ops` random operations on `kind` with `seed`, comparing with the
/// model; returns the compactions since the last reopen.
fn run(kind: EngineKind, seed: u64, ops: u32) -> u64 {
    run_keys(kind, seed, ops, false)
}

/// [`run`] with `long` keys: longer than the 12 bytes a B+-tree slot
/// holds, sharing that prefix, one a prefix of another, one longer than a
/// small page.
fn run_keys(kind: EngineKind, seed: u64, ops: u32, long: bool) -> u64 {
    let d = dir(&format!("{}-{seed}-{long}", kind.name()));
    let path = d.join("pool");
    let mut r = Rng::new(seed);
    let group = [1, 1, 3, 8][r.below(4) as usize];
    let opts = Options {
        size: 64 << 20,
        page_size: [512, 1024, 4096][r.below(3) as usize],
        fanout: 4 + r.below(4) as u32,
        group,
    };
    let eff_group = if matches!(kind, EngineKind::List | EngineKind::BTree) {
        group
    } else {
        1
    };
    let ctx = format!(
        "engine {} seed {seed} page {} fanout {} group {group}",
        kind.name(),
        opts.page_size,
        opts.fanout
    );
    let mut e: Box<dyn Engine> = create(&path, kind, &opts).unwrap();
    let mut m = Model::new();
    let mut durable = m.clone();
    let mut unsynced = 0u32;
    let keys: Vec<Vec<u8>> = if long {
        (0..10)
            .map(|i| format!("a-shared-prefix/{}", i * 37 % 10).into_bytes())
            .chain([
                b"a-shared-pre".to_vec(),
                b"a-shared-prefix/".to_vec(),
                b"a-shared-prefix/1\0".to_vec(),
                [b"a-shared-prefix/".as_slice(), &[7u8; 900]].concat(),
                [b"a-shared-prefix/".as_slice(), &[7u8; 901]].concat(),
            ])
            .collect()
    } else {
        (0..12)
            .map(|i| format!("key{i}").into_bytes())
            .chain([vec![], vec![0u8, 255]])
            .collect()
    };
    for step in 0..ops {
        let at = format!("{ctx} step {step}");
        let key = keys[r.below(keys.len() as u64) as usize].clone();
        let v = m.last_version() + 1 + r.below(3);
        let mut committed_now = false;
        match r.below(100) {
            0..=39 => {
                let x = val(&mut r);
                e.set(&key, &x, v).unwrap();
                m.put(&key, Some(&x), v).unwrap();
                unsynced += 1;
            }
            40..=49 => {
                let a = e.delete(&key, v).unwrap();
                let b = m.delete(&key, v).unwrap();
                assert_eq!(a, b, "{at}: delete result");
                unsynced += a as u32;
            }
            50..=59 => {
                let expected = if r.below(2) == 0 {
                    m.get(&key)
                } else {
                    Some(val(&mut r))
                };
                let x = val(&mut r);
                let a = e.compare_and_set(&key, expected.as_deref(), &x, v).unwrap();
                let b = m.compare_and_set(&key, expected.as_deref(), &x, v).unwrap();
                assert_eq!(a, b, "{at}: cas result");
                unsynced += a as u32;
            }
            60..=69 => {
                let lo = m.floor();
                let idx = lo + r.below(m.last_version() - lo + 1);
                let at_idx = r.below(2) == 0;
                let i = if at_idx { idx } else { u64::MAX };
                assert_eq!(
                    e.get_at(&key, i).unwrap(),
                    m.get_at(&key, i).unwrap(),
                    "{at}: get_at {i}"
                );
                if lo > 0 {
                    assert_eq!(
                        e.get_at(&key, lo - 1).unwrap_err().kind(),
                        ErrorKind::Discarded,
                        "{at}"
                    );
                }
            }
            70..=74 => {
                let lo = m.floor();
                let idx = m.last_version() - r.below(m.last_version() - lo + 1).min(4);
                e.rollback_above(idx).unwrap();
                m.rollback_above(idx).unwrap();
                committed_now = true;
            }
            75..=79 => {
                let lo = m.floor();
                let idx = lo + r.below(m.last_version() - lo + 1);
                e.discard_below(idx).unwrap();
                m.discard_below(idx).unwrap();
                committed_now = true;
            }
            80..=83 => {
                let lo = m.floor();
                let idx = lo + r.below(m.last_version() - lo + 1);
                let snap: Vec<_> = e.snapshot(idx).unwrap().map(|x| x.unwrap()).collect();
                assert_eq!(snap, m.snapshot(idx).unwrap(), "{at}: snapshot at {idx}");
                if r.below(3) == 0 {
                    // restore a lagging replica from it: here, ourselves
                    let at_v = m.last_version() + 1;
                    if r.below(2) == 0 {
                        e.restore(at_v, &mut snap.clone().into_iter()).unwrap();
                    } else {
                        let mut borrowed = snap.iter().map(|(k, v)| (&k[..], &v[..]));
                        e.restore_sorted(at_v, &mut borrowed).unwrap();
                    }
                    m.restore(at_v, snap);
                    committed_now = true;
                }
            }
            84..=87 => {
                e.sync().unwrap();
                committed_now = true;
            }
            88..=90 => {
                e.compact().unwrap();
                committed_now = true;
            }
            91..=95 => {
                e.sync().unwrap();
                drop(e);
                e = open(&path, kind, &opts).unwrap();
                committed_now = true;
            }
            _ => {
                // crash: drop without syncing; only durable writes survive
                drop(e);
                e = open(&path, kind, &opts).unwrap();
                m = durable.clone();
                unsynced = 0;
                compare(e.as_ref(), &m)
                    .unwrap_or_else(|err| panic!("{at}: after an unsynced crash: {err}"));
            }
        }
        if committed_now || unsynced >= eff_group {
            durable = m.clone();
            unsynced = 0;
        }
        assert_eq!(e.last_version(), m.last_version(), "{at}");
        assert_eq!(
            e.durable_version(),
            durable.last_version(),
            "{at}: durable version"
        );
        if step % 25 == 0 || committed_now {
            compare(e.as_ref(), &m).unwrap_or_else(|err| panic!("{at}: {err}"));
            if unsynced == 0 {
                e.check().unwrap_or_else(|err| panic!("{at}: check: {err}"));
            }
        }
    }
    e.sync().unwrap();
    let compactions = e.usage().compactions;
    drop(e);
    let e = open(&path, kind, &opts).unwrap();
    compare(e.as_ref(), &m).unwrap_or_else(|err| panic!("{ctx}: after the final reopen: {err}"));
    e.check().unwrap();
    drop(e);
    std::fs::remove_dir_all(&d).unwrap();
    compactions
}

#[test]
fn every_engine_matches_the_model_on_random_operations() {
    for kind in engines() {
        let mut compactions = 0;
        for seed in 1..=6u64 {
            compactions += run(kind, seed * 7919 + kind as u64, 400);
        }
        if kind != EngineKind::Anchor {
            // explicit compact() calls aside, the engines compact on their own
            assert!(compactions > 0, "{kind:?}: no compaction ran");
        }
    }
}

#[test]
fn btree_keys_longer_than_a_slot_prefix_match_the_model() {
    for seed in 1..=6u64 {
        run_keys(EngineKind::BTree, seed * 104_729, 400, true);
    }
}

#[test]
fn writes_out_of_version_order_and_oversized_values_are_refused() {
    for kind in engines() {
        let d = dir(&format!("order-{}", kind.name()));
        let mut e = create(&d.join("pool"), kind, &Options::default()).unwrap();
        e.set(b"a", b"1", 5).unwrap();
        assert_eq!(
            e.set(b"a", b"2", 5).unwrap_err().kind(),
            ErrorKind::VersionOrder
        );
        assert_eq!(
            e.set(b"a", &vec![0u8; pmlab_kv::MAX_VALUE + 1], 6)
                .unwrap_err()
                .kind(),
            ErrorKind::TooLarge
        );
        assert_eq!(
            e.discard_below(9).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        e.discard_below(5).unwrap();
        assert_eq!(
            e.rollback_above(4).unwrap_err().kind(),
            ErrorKind::Discarded
        );
        assert_eq!(e.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
        drop(e);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn a_pool_of_one_engine_does_not_open_as_another() {
    let kinds = engines();
    for a in &kinds {
        let d = dir(&format!("cross-{}", a.name()));
        let path = d.join("pool");
        drop(create(&path, *a, &Options::default()).unwrap());
        for b in &kinds {
            if a != b {
                let err = open(&path, *b, &Options::default())
                    .err()
                    .unwrap_or_else(|| panic!("{a:?} opened as {b:?}"));
                assert!(!err.to_string().contains('\n'), "{err}");
            }
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn twenty_thousand_keys_survive_reopen_in_each_engine() {
    for kind in engines() {
        let d = dir(&format!("many-{}", kind.name()));
        let path = d.join("pool");
        let opts = Options {
            group: 16,
            ..Options::default()
        };
        let mut e = create(&path, kind, &opts).unwrap();
        for i in 0..20_000u64 {
            e.set(format!("key{i:08}").as_bytes(), &i.to_le_bytes(), i + 1)
                .unwrap();
        }
        e.sync().unwrap();
        drop(e);
        let e = open(&path, kind, &opts).unwrap();
        for i in (0..20_000u64).step_by(997) {
            assert_eq!(
                e.get(format!("key{i:08}").as_bytes()).unwrap(),
                Some(i.to_le_bytes().to_vec())
            );
        }
        assert_eq!(e.snapshot(20_000).unwrap().count(), 20_000);
        e.check().unwrap();
        drop(e);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn the_anchor_engine_is_built_when_libpmemobj_is_installed() {
    let header = std::path::Path::new("/usr/include/libpmemobj.h").exists();
    let off = std::env::var("PMKV_NO_ANCHOR").is_ok_and(|v| v == "1");
    assert_eq!(EngineKind::Anchor.available(), header && !off);
    if !EngineKind::Anchor.available() {
        let d = dir("no-anchor");
        let err = create(&d.join("pool"), EngineKind::Anchor, &Options::default())
            .err()
            .unwrap();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(err.to_string().contains("libpmemobj"), "{err}");
    }
}

#[test]
fn a_full_pool_refuses_the_write_and_keeps_every_earlier_one() {
    for kind in engines() {
        let d = dir(&format!("full-{}", kind.name()));
        let path = d.join("pool");
        let size = if kind == EngineKind::Anchor {
            8 << 20
        } else {
            256 << 10
        };
        let opts = Options {
            size,
            page_size: 1024,
            ..Options::default()
        };
        let mut e = create(&path, kind, &opts).unwrap();
        let mut m = Model::new();
        let big = vec![7u8; 20_000];
        let mut full = false;
        for v in 1..2000u64 {
            let key = format!("k{v}");
            match e.set(key.as_bytes(), &big, v) {
                Ok(()) => m.put(key.as_bytes(), Some(&big), v).unwrap(),
                Err(err) => {
                    assert_eq!(err.kind(), ErrorKind::Full, "{kind:?}: {err}");
                    full = true;
                    break;
                }
            }
        }
        assert!(full, "{kind:?}: the pool never filled");
        compare(e.as_ref(), &m).unwrap();
        drop(e);
        let e = open(&path, kind, &opts).unwrap();
        compare(e.as_ref(), &m).unwrap_or_else(|err| panic!("{kind:?} after reopen: {err}"));
        e.check().unwrap();
        drop(e);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn damaged_records_and_nodes_are_reported_inconsistent() {
    let d = dir("damage");
    // list: the first record after the base record gets an unknown kind
    let path = d.join("list");
    let mut e = create(&path, EngineKind::List, &Options::default()).unwrap();
    e.set(b"a", b"1", 1).unwrap();
    drop(e);
    let mut b = std::fs::read(&path).unwrap();
    let rec = 4096 + 16 + 24; // first page, control block, base record
    assert_eq!(b[rec], 1, "the set record is where the layout says");
    b[rec] = 9;
    std::fs::write(&path, &b).unwrap();
    let err = open(&path, EngineKind::List, &Options::default())
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::Inconsistent, "{err}");
    assert!(err.to_string().contains("kind 9"), "{err}");
    // btree: a leaf loses its magic
    let path = d.join("btree");
    let mut e = create(&path, EngineKind::BTree, &Options::default()).unwrap();
    e.set(b"a", b"1", 1).unwrap();
    drop(e);
    let mut b = std::fs::read(&path).unwrap();
    let at = b.windows(4).position(|w| w == b"LEAF").unwrap();
    b[at] = b'X';
    std::fs::write(&path, &b).unwrap();
    let e = open(&path, EngineKind::BTree, &Options::default()).unwrap();
    let err = e.check().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Inconsistent, "{err}");
    assert!(err.to_string().contains("magic"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_btree_with_a_cycle_is_reported_not_followed() {
    let d = dir("cycle");
    let path = d.join("btree");
    let opts = Options {
        fanout: 4,
        ..Options::default()
    };
    let mut e = create(&path, EngineKind::BTree, &opts).unwrap();
    for v in 1..=40u64 {
        e.set(format!("k{v:03}").as_bytes(), b"x", v).unwrap();
    }
    drop(e);
    let mut b = std::fs::read(&path).unwrap();
    let word = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    // the current root slot (higher sequence number) holds the root node at word 5
    let slot = if word(&b, 1024) > word(&b, 2048) {
        1024
    } else {
        2048
    };
    let root = word(&b, slot + 5 * 8) as usize;
    assert_eq!(
        &b[root..root + 4],
        b"INNR",
        "the root of 40 keys at fan-out 4 is an inner node"
    );
    // its last child becomes the root itself
    let n = u32::from_le_bytes(b[root + 4..root + 8].try_into().unwrap()) as usize;
    // layout 2: a 16-byte header, then 32-byte slots with the child at byte 24
    let child = root + 16 + 32 * (n - 1) + 24;
    b[child..child + 8].copy_from_slice(&(root as u64).to_le_bytes());
    std::fs::write(&path, &b).unwrap();
    let e = open(&path, EngineKind::BTree, &opts).unwrap();
    let err = e.check().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Inconsistent, "{err}");
    assert!(
        e.get(b"k040").is_err(),
        "a read down the cycle must fail, not loop"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn garbage_is_reclaimed_without_being_asked() {
    for kind in [EngineKind::List, EngineKind::Wal, EngineKind::BTree] {
        let d = dir(&format!("gc-{}", kind.name()));
        let path = d.join("pool");
        let opts = Options {
            size: 2 << 20,
            page_size: 1024,
            group: 4,
            ..Options::default()
        };
        let mut e = create(&path, kind, &opts).unwrap();
        let value = vec![3u8; 1000];
        // 6 MB written into a 2 MiB pool: only reclaiming can make room
        for v in 1..=6000u64 {
            e.set(format!("k{}", v % 7).as_bytes(), &value, v)
                .unwrap_or_else(|err| panic!("{kind:?} at {v}: {err}"));
            if v % 100 == 0 {
                e.discard_below(v).unwrap();
            }
        }
        e.sync().unwrap();
        let u = e.usage();
        assert!(u.compactions > 0, "{kind:?}: {u:?}");
        assert!(u.pm_bytes < 2 << 20, "{kind:?}: {u:?}");
        e.check().unwrap();
        drop(e);
        let e = open(&path, kind, &opts).unwrap();
        assert_eq!(e.get(b"k3").unwrap(), Some(value.clone()));
        e.check().unwrap();
        drop(e);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

/// Regression (issue 19, found by `pmlab crash` driving `pmkv stress` with
/// seed 1): rolling back every write leaves an empty structure, and the
/// B+-tree then failed loading a root at offset 0 ("range 0x0+160 leaves
/// the pool's pages") on the rollback itself.
#[test]
fn r19_rolling_back_every_write_leaves_an_empty_usable_store() {
    for kind in engines() {
        let d = dir(&format!("empty-{}", kind.name()));
        let path = d.join("pool");
        {
            let mut e = create(&path, kind, &Options::default()).unwrap();
            e.set(b"a", b"1", 1).unwrap();
            e.set(b"b", b"2", 2).unwrap();
            e.rollback_above(0)
                .unwrap_or_else(|err| panic!("{kind:?}: {err}"));
            assert_eq!(e.get(b"a").unwrap(), None, "{kind:?}");
            assert_eq!(e.get(b"b").unwrap(), None, "{kind:?}");
            e.set(b"c", b"3", 3).unwrap();
            e.sync().unwrap();
        }
        let e = open(&path, kind, &Options::default()).unwrap();
        assert_eq!(e.get(b"c").unwrap().as_deref(), Some(&b"3"[..]), "{kind:?}");
        assert_eq!(e.get(b"a").unwrap(), None, "{kind:?}");
        e.check().unwrap_or_else(|err| panic!("{kind:?}: {err}"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}

/// `written_above` names the key of every version above an index and the
/// floor, in version order, before and after a reopen, a rollback and a
/// discard: a Raft log kept in the engine finds its entries with it.
#[test]
fn written_above_lists_each_version_with_its_key() {
    for kind in engines() {
        let d = dir(&format!("written-{}", kind.name()));
        let path = d.join("pool");
        let want = |pairs: &[(u64, &str)]| -> Vec<(u64, Vec<u8>)> {
            pairs
                .iter()
                .map(|(v, k)| (*v, k.as_bytes().to_vec()))
                .collect()
        };
        {
            let mut e = create(&path, kind, &Options::default()).unwrap();
            for (v, k) in [(1, "b"), (2, "a"), (3, "b"), (4, "c"), (5, "a")] {
                e.put(k.as_bytes(), Some(b"x"), v).unwrap();
            }
            e.put(b"c", None, 6).unwrap();
            e.sync().unwrap();
            assert_eq!(
                e.written_above(2).unwrap(),
                want(&[(3, "b"), (4, "c"), (5, "a"), (6, "c")]),
                "{kind:?}"
            );
        }
        let mut e = open(&path, kind, &Options::default()).unwrap();
        assert_eq!(
            e.written_above(4).unwrap(),
            want(&[(5, "a"), (6, "c")]),
            "{kind:?} after reopen"
        );
        e.rollback_above(5).unwrap();
        e.discard_below(3).unwrap();
        assert_eq!(
            e.written_above(0).unwrap(),
            want(&[(4, "c"), (5, "a")]),
            "{kind:?} after rollback and discard"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn restore_sorted_matches_restore_in_each_engine_and_survives_reopen() {
    for kind in engines() {
        let d = dir(&format!("restore-sorted-{}", kind.name()));
        let opts = Options {
            size: 64 << 20,
            ..Options::default()
        };
        let mut r = Rng::new(7);
        // Key order, as a snapshot yields them; values up to 64 KiB.
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..300)
            .map(|i| (format!("k{i:05}").into_bytes(), val(&mut r)))
            .collect();
        let mut a = create(&d.join("a"), kind, &opts).unwrap();
        let mut b = create(&d.join("b"), kind, &opts).unwrap();
        for (i, (k, v)) in pairs.iter().enumerate().take(20) {
            a.put(k, Some(v), i as u64 + 1).unwrap();
            b.put(k, Some(v), i as u64 + 1).unwrap();
        }
        a.sync().unwrap();
        b.sync().unwrap();
        a.restore(500, &mut pairs.clone().into_iter()).unwrap();
        b.restore_sorted(500, &mut pairs.iter().map(|(k, v)| (&k[..], &v[..])))
            .unwrap();
        let ctx = format!("engine {}", kind.name());
        let snap = |e: &dyn Engine| -> Vec<(Vec<u8>, Vec<u8>)> {
            e.snapshot(500).unwrap().map(|p| p.unwrap()).collect()
        };
        assert_eq!(snap(a.as_ref()), pairs, "{ctx}: restore");
        assert_eq!(snap(b.as_ref()), pairs, "{ctx}: restore_sorted");
        assert_eq!((b.last_version(), b.floor()), (500, 500), "{ctx}");
        drop(b);
        let b = open(&d.join("b"), kind, &opts).unwrap();
        assert_eq!(snap(b.as_ref()), pairs, "{ctx}: restore_sorted, reopened");
        b.check().unwrap();
        // Out of key order (and a key given twice): restored as `restore`
        // would, the later value winning.
        let mut c = create(&d.join("c"), kind, &opts).unwrap();
        let mut shuffled: Vec<(Vec<u8>, Vec<u8>)> = pairs.iter().rev().cloned().collect();
        shuffled.push((pairs[0].0.clone(), b"last".to_vec()));
        c.restore_sorted(9, &mut shuffled.iter().map(|(k, v)| (&k[..], &v[..])))
            .unwrap();
        pairs[0].1 = b"last".to_vec();
        assert_eq!(
            c.snapshot(9)
                .unwrap()
                .map(|p| p.unwrap())
                .collect::<Vec<_>>(),
            pairs,
            "{ctx}: unsorted"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}

#[test]
fn staged_restore_commits_atomically_and_any_other_write_drops_it() {
    for kind in [EngineKind::List, EngineKind::Wal] {
        let ctx = format!("engine {}", kind.name());
        let d = dir(&format!("staged-{}", kind.name()));
        let opts = Options {
            size: 64 << 20,
            ..Options::default()
        };
        let mut r = Rng::new(11);
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..400)
            .map(|i| (format!("s{i:05}").into_bytes(), val(&mut r)))
            .collect();
        let snap = |e: &dyn Engine, at: u64| -> Vec<(Vec<u8>, Vec<u8>)> {
            e.snapshot(at).unwrap().map(|p| p.unwrap()).collect()
        };
        let mut e = create(&d.join("a"), kind, &opts).unwrap();
        for v in 1..=30u64 {
            e.put(format!("old{v:03}").as_bytes(), Some(b"x"), v)
                .unwrap();
        }
        e.sync().unwrap();
        let before = snap(e.as_ref(), 30);
        // Staged, not committed: readers and a reopen see the old state.
        assert!(e.stage_begin(700).unwrap(), "{ctx}: stages");
        for (k, v) in &pairs[..200] {
            e.stage_push(k, v).unwrap();
        }
        assert!(e.stage_active());
        assert_eq!(snap(e.as_ref(), 30), before, "{ctx}: staged is invisible");
        drop(e);
        let mut e = open(&d.join("a"), kind, &opts).unwrap();
        assert_eq!(snap(e.as_ref(), 30), before, "{ctx}: reopened mid-stage");
        assert!(!e.stage_active());
        e.check().unwrap();
        // A write drops the staged restore; the old state goes on.
        assert!(e.stage_begin(700).unwrap());
        e.stage_push(&pairs[0].0, &pairs[0].1).unwrap();
        e.put(b"old031", Some(b"y"), 31).unwrap();
        assert!(!e.stage_active(), "{ctx}: a write drops the stage");
        assert!(e.stage_commit().is_err());
        e.sync().unwrap();
        assert_eq!(e.get(b"old031").unwrap().as_deref(), Some(&b"y"[..]));
        e.check().unwrap();
        // Keys out of order drop it too.
        assert!(e.stage_begin(700).unwrap());
        e.stage_push(b"b", b"1").unwrap();
        assert!(e.stage_push(b"a", b"1").is_err(), "{ctx}: out of order");
        assert!(!e.stage_active());
        e.check().unwrap();
        // A whole staged restore commits as `restore` would.
        assert!(e.stage_begin(700).unwrap());
        for (k, v) in &pairs {
            e.stage_push(k, v).unwrap();
        }
        e.stage_commit().unwrap();
        assert_eq!((e.last_version(), e.floor()), (700, 700), "{ctx}");
        assert_eq!(snap(e.as_ref(), 700), pairs, "{ctx}: committed");
        e.put(b"zz", Some(b"after"), 701).unwrap();
        e.sync().unwrap();
        drop(e);
        let e = open(&d.join("a"), kind, &opts).unwrap();
        let mut want = pairs.clone();
        want.push((b"zz".to_vec(), b"after".to_vec()));
        assert_eq!(snap(e.as_ref(), 701), want, "{ctx}: reopened");
        e.check().unwrap();
    }
}
