//! The Raft log kept in the PM engine, driven through openraft's storage
//! traits the way openraft drives them, on real pools (`list` and
//! `btree`): entries survive a restart uncommitted and stay unread, a
//! truncation after a leader change rolls versions back, purge and
//! snapshots, installs that restore and installs that find the entries
//! already there, and a crash around an install.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{
    CommittedLeaderId, EntryPayload, Membership, RaftLogReader, RaftSnapshotBuilder, Vote,
};
use pmlab_kv_server::engine::open_engine;
use pmlab_kv_server::store::{self, LogPlacement, LogStore, StateMachine};
use pmlab_kv_server::types::{Cmd, Entry, LogId, NodeAddr, Reply};

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pmkv-elog-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn open(engine: &str, dir: &Path) -> (LogStore, StateMachine) {
    let e = open_engine(engine, dir, 16 << 20).unwrap();
    let (log, sm) = store::open(dir, e, LogPlacement::Engine).unwrap();
    assert_eq!(log.placement(), LogPlacement::Engine);
    (log, sm)
}

fn id(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, node), index)
}

fn members() -> Membership<u64, NodeAddr> {
    let nodes: BTreeMap<u64, NodeAddr> = (1..=3).map(|i| (i, NodeAddr::default())).collect();
    Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes)
}

fn membership(index: u64) -> Entry {
    Entry {
        log_id: id(0, 0, index),
        payload: EntryPayload::Membership(members()),
    }
}

fn blank(term: u64, node: u64, index: u64) -> Entry {
    Entry {
        log_id: id(term, node, index),
        payload: EntryPayload::Blank,
    }
}

fn normal(term: u64, node: u64, index: u64, cmd: Cmd) -> Entry {
    Entry {
        log_id: id(term, node, index),
        payload: EntryPayload::Normal(cmd),
    }
}

fn set(k: &str, v: &str) -> Cmd {
    Cmd::Set {
        key: k.into(),
        value: v.into(),
    }
}

fn cas(k: &str, e: &str, n: &str) -> Cmd {
    Cmd::Cas {
        key: k.into(),
        expected: e.into(),
        new: n.into(),
    }
}

fn del(k: &str) -> Cmd {
    Cmd::Del { key: k.into() }
}

/// Membership at 0, leader (1, 1)'s blank at 1, then `cmds` from 2 on.
fn first_term(cmds: Vec<Cmd>) -> Vec<Entry> {
    let mut v = vec![membership(0), blank(1, 1, 1)];
    for (i, c) in cmds.into_iter().enumerate() {
        v.push(normal(1, 1, 2 + i as u64, c));
    }
    v
}

async fn read(log: &mut LogStore, range: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
    log.try_get_log_entries(range).await.unwrap()
}

async fn apply_upto(log: &mut LogStore, sm: &mut StateMachine, from: u64, to: u64) -> Vec<Reply> {
    let entries = read(log, from..=to).await;
    sm.apply(entries).await.unwrap()
}

fn get(sm: &StateMachine, k: &str) -> Option<String> {
    sm.get(k.as_bytes())
        .unwrap()
        .map(|v| String::from_utf8(v).unwrap())
}

/// One test per engine for each scenario.
macro_rules! per_engine {
    ($body:ident: $($name:ident => $engine:literal),+) => {
        $(
            #[tokio::test]
            async fn $name() {
                $body($engine).await
            }
        )+
    };
}

per_engine!(uncommitted_entries_survive_a_restart_unread:
    uncommitted_entries_survive_a_restart_unread_list => "list",
    uncommitted_entries_survive_a_restart_unread_btree => "btree");

per_engine!(truncation_after_a_leader_change_rolls_back:
    truncation_after_a_leader_change_rolls_back_list => "list",
    truncation_after_a_leader_change_rolls_back_btree => "btree");

per_engine!(purge_snapshot_and_install:
    purge_snapshot_and_install_list => "list",
    purge_snapshot_and_install_btree => "btree");

per_engine!(a_crash_around_an_install_leaves_old_or_new_state:
    a_crash_around_an_install_leaves_old_or_new_state_list => "list",
    a_crash_around_an_install_leaves_old_or_new_state_btree => "btree");

async fn uncommitted_entries_survive_a_restart_unread(engine: &str) {
    let dir = tmpdir(&format!("uncommitted-{engine}"));
    let entries = first_term(vec![
        set("a", "1"),
        set("b", "2"),
        cas("a", "1", "x"),
        del("zz"),
        cas("b", "nope", "y"),
        del("b"),
    ]);
    {
        let (mut log, mut sm) = open(engine, &dir);
        log.blocking_append(entries.clone()).await.unwrap();
        // Committed up to index 3: the replies, and reads see only that.
        let replies = apply_upto(&mut log, &mut sm, 0, 3).await;
        assert_eq!(
            replies,
            vec![Reply::None, Reply::None, Reply::Ok, Reply::Ok]
        );
        assert_eq!(get(&sm, "a").as_deref(), Some("1"));
        assert_eq!(get(&sm, "b").as_deref(), Some("2"));
        // The CAS hit, the DEL of an absent key and the failed CAS answer
        // from what their append found; the last DEL found `b`.
        let replies = apply_upto(&mut log, &mut sm, 4, 5).await;
        assert_eq!(replies, vec![Reply::Bool(true), Reply::Bool(false)]);
        assert_eq!(get(&sm, "a").as_deref(), Some("x"));
        assert_eq!(
            get(&sm, "b").as_deref(),
            Some("2"),
            "entry 7 is not committed"
        );
        // The committed id is written with the next vote (or every 1,024
        // entries); the vote durably.
        log.save_committed(Some(id(1, 1, 5))).await.unwrap();
        log.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
        // Dropped without any further sync: a kill -9.
    }
    let (mut log, mut sm) = open(engine, &dir);
    assert!(!dir.join("raft.log").exists(), "no separate log file");
    let st = log.get_log_state().await.unwrap();
    assert_eq!(
        st.last_log_id,
        Some(id(1, 1, 7)),
        "every appended entry kept"
    );
    assert_eq!(st.last_purged_log_id, None);
    assert_eq!(log.read_committed().await.unwrap(), Some(id(1, 1, 5)));
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(Vote::new_committed(1, 1))
    );
    // Nothing applied yet after the restart: reads see no uncommitted state.
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied, None);
    assert_eq!(get(&sm, "a"), None);
    // The entries come back from the engine: log ids exact, commands with
    // the same effect (the stored CAS as the SET it became).
    let back = read(&mut log, 0..=7).await;
    let ids: Vec<LogId> = back.iter().map(|e| e.log_id).collect();
    let want: Vec<LogId> = entries.iter().map(|e| e.log_id).collect();
    assert_eq!(ids, want);
    let payloads: Vec<String> = back.iter().map(|e| format!("{:?}", e.payload)).collect();
    assert!(payloads[0].contains("membership"), "{}", payloads[0]);
    assert_eq!(back[1].payload, EntryPayload::Blank);
    assert_eq!(back[4].payload, EntryPayload::Normal(set("a", "x")));
    assert_eq!(back[5].payload, EntryPayload::Normal(del("zz")));
    assert_eq!(back[6].payload, EntryPayload::Normal(cas("b", "nope", "y")));
    assert_eq!(back[7].payload, EntryPayload::Normal(del("b")));
    apply_upto(&mut log, &mut sm, 0, 7).await;
    assert_eq!(get(&sm, "a").as_deref(), Some("x"));
    assert_eq!(get(&sm, "b"), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

async fn truncation_after_a_leader_change_rolls_back(engine: &str) {
    let dir = tmpdir(&format!("truncate-{engine}"));
    {
        let (mut log, mut sm) = open(engine, &dir);
        log.blocking_append(first_term(vec![
            set("a", "1"),
            set("a", "2"),
            set("b", "3"),
        ]))
        .await
        .unwrap();
        apply_upto(&mut log, &mut sm, 0, 2).await;
        // A new leader (2, 2) has other entries from index 3 on.
        log.truncate(id(1, 1, 3)).await.unwrap();
        let st = log.get_log_state().await.unwrap();
        assert_eq!(st.last_log_id, Some(id(1, 1, 2)));
        log.blocking_append(vec![blank(2, 2, 3), normal(2, 2, 4, cas("a", "1", "c"))])
            .await
            .unwrap();
        // A command of a leader whose blank entry is not in the log is refused.
        let err = log
            .blocking_append(vec![normal(3, 3, 5, set("z", "z"))])
            .await
            .unwrap_err();
        assert!(err.to_string().contains("blank"), "{err}");
    }
    let (mut log, mut sm) = open(engine, &dir);
    let back = read(&mut log, 0..=10).await;
    let ids: Vec<LogId> = back.iter().map(|e| e.log_id).collect();
    assert_eq!(
        ids,
        vec![
            id(0, 0, 0),
            id(1, 1, 1),
            id(1, 1, 2),
            id(2, 2, 3),
            id(2, 2, 4)
        ]
    );
    // The CAS ran against the state after the truncation (a = 1).
    assert_eq!(back[4].payload, EntryPayload::Normal(set("a", "c")));
    apply_upto(&mut log, &mut sm, 0, 4).await;
    assert_eq!(get(&sm, "a").as_deref(), Some("c"));
    assert_eq!(get(&sm, "b"), None, "the truncated SET of b is gone");
    std::fs::remove_dir_all(&dir).unwrap();
}

async fn purge_snapshot_and_install(engine: &str) {
    let dir = tmpdir(&format!("snap-{engine}"));
    let a = dir.join("a");
    let cmds: Vec<Cmd> = (0..19)
        .map(|i| set(&format!("k{}", i % 5), &format!("v{i}")))
        .collect();
    let entries = first_term(cmds);
    let last = entries.len() as u64 - 1; // 20
    let snap = {
        let (mut log, mut sm) = open(engine, &a);
        log.blocking_append(entries.clone()).await.unwrap();
        apply_upto(&mut log, &mut sm, 0, last).await;
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snap.meta.last_log_id, Some(id(1, 1, last)));
        log.purge(id(1, 1, 15)).await.unwrap();
        let st = log.get_log_state().await.unwrap();
        assert_eq!(st.last_purged_log_id, Some(id(1, 1, 15)));
        assert_eq!(read(&mut log, 0..=last).await.len(), 5, "16..=20 left");
        snap
    };
    // Reopened: purged and applied at 15, the membership from its record,
    // the rest re-applied by openraft from the log.
    {
        let (mut log, mut sm) = open(engine, &a);
        let st = log.get_log_state().await.unwrap();
        assert_eq!(st.last_purged_log_id, Some(id(1, 1, 15)));
        assert_eq!(st.last_log_id, Some(id(1, 1, last)));
        let (applied, m) = sm.applied_state().await.unwrap();
        assert_eq!(applied, Some(id(1, 1, 15)));
        assert_eq!(m.log_id(), &Some(id(0, 0, 0)));
        assert_eq!(get(&sm, "k3").as_deref(), Some("v13"));
        apply_upto(&mut log, &mut sm, 16, last).await;
        assert_eq!(get(&sm, "k3").as_deref(), Some("v18"));
    }

    // A fresh node installs the snapshot: the engine is restored at it.
    let data = snap.snapshot.into_inner();
    let b = dir.join("b");
    {
        let (mut log, mut sm) = open(engine, &b);
        log.blocking_append(first_term(vec![set("stale", "1")]))
            .await
            .unwrap();
        sm.install_snapshot(&snap.meta, Box::new(std::io::Cursor::new(data.clone())))
            .await
            .unwrap();
        log.purge(id(1, 1, last)).await.unwrap();
        assert_eq!(get(&sm, "k4").as_deref(), Some("v14"));
        assert_eq!(get(&sm, "stale"), None);
    }
    {
        let (mut log, mut sm) = open(engine, &b);
        let st = log.get_log_state().await.unwrap();
        assert_eq!(st.last_purged_log_id, Some(id(1, 1, last)));
        assert_eq!(st.last_log_id, Some(id(1, 1, last)));
        let (applied, m) = sm.applied_state().await.unwrap();
        assert_eq!(applied, Some(id(1, 1, last)));
        assert_eq!(m, snap.meta.last_membership);
        assert_eq!(get(&sm, "k0").as_deref(), Some("v15"));
        // The leader's next entry follows the snapshot.
        log.blocking_append(vec![normal(1, 1, last + 1, set("after", "1"))])
            .await
            .unwrap();
        assert_eq!(read(&mut log, 0..=100).await.len(), 1);
    }

    // A node that already holds the snapshot's last entry (and one more)
    // keeps its log: nothing is restored, the later entry stays readable.
    let c = dir.join("c");
    {
        let (mut log, mut sm) = open(engine, &c);
        let mut more = entries.clone();
        more.push(normal(1, 1, last + 1, set("extra", "e")));
        log.blocking_append(more).await.unwrap();
        sm.install_snapshot(&snap.meta, Box::new(std::io::Cursor::new(data)))
            .await
            .unwrap();
        log.purge(id(1, 1, last)).await.unwrap();
        let back = read(&mut log, 0..=100).await;
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].payload, EntryPayload::Normal(set("extra", "e")));
        assert_eq!(get(&sm, "k4").as_deref(), Some("v14"));
        assert_eq!(get(&sm, "extra"), None, "not applied yet");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

async fn a_crash_around_an_install_leaves_old_or_new_state(engine: &str) {
    let dir = tmpdir(&format!("crash-install-{engine}"));
    let leader = dir.join("leader");
    let snap = {
        let (mut log, mut sm) = open(engine, &leader);
        let cmds = (0..10).map(|i| set(&format!("k{i}"), "new")).collect();
        log.blocking_append(first_term(cmds)).await.unwrap();
        apply_upto(&mut log, &mut sm, 0, 11).await;
        sm.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap()
    };
    let f = dir.join("follower");
    {
        let (mut log, mut sm) = open(engine, &f);
        log.blocking_append(first_term(vec![set("k0", "old")]))
            .await
            .unwrap();
        apply_upto(&mut log, &mut sm, 0, 2).await;
        // openraft purges right after handing the install to the state
        // machine: the purge waits for it. The node dies before the install.
        log.purge(id(1, 1, 11)).await.unwrap();
    }
    {
        let (mut log, mut sm) = open(engine, &f);
        let st = log.get_log_state().await.unwrap();
        assert_eq!(st.last_purged_log_id, None, "the old log, whole");
        assert_eq!(st.last_log_id, Some(id(1, 1, 2)));
        apply_upto(&mut log, &mut sm, 0, 2).await;
        assert_eq!(get(&sm, "k0").as_deref(), Some("old"));
        // This time the install completes (restore is atomic in the
        // engine) and the node dies before anything else.
        log.purge(id(1, 1, 11)).await.unwrap();
        let data = snap.snapshot.into_inner();
        sm.install_snapshot(&snap.meta, Box::new(std::io::Cursor::new(data)))
            .await
            .unwrap();
    }
    let (mut log, sm) = open(engine, &f);
    let st = log.get_log_state().await.unwrap();
    assert_eq!(st.last_purged_log_id, Some(id(1, 1, 11)), "the new state");
    assert_eq!(st.last_log_id, Some(id(1, 1, 11)));
    assert_eq!(get(&sm, "k0").as_deref(), Some("new"));
    assert_eq!(get(&sm, "k9").as_deref(), Some("new"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_directory_is_refused_to_the_other_log_placement() {
    let dir = tmpdir("placement");
    {
        let e = open_engine("list", &dir, 16 << 20).unwrap();
        store::open(&dir, e, LogPlacement::File).unwrap();
    }
    let e = open_engine("list", &dir, 16 << 20).unwrap();
    let err = store::open(&dir, e, LogPlacement::Engine).err().unwrap();
    assert!(err.to_string().contains("--raft-log file"), "{err}");
    let d2 = tmpdir("placement2");
    {
        open("list", &d2);
    }
    let e = open_engine("list", &d2, 16 << 20).unwrap();
    let err = store::open(&d2, e, LogPlacement::File).err().unwrap();
    assert!(err.to_string().contains("--raft-log engine"), "{err}");
    let e = open_engine("mem", &tmpdir("placement3"), 0).unwrap();
    let err = store::open(&tmpdir("placement3"), e, LogPlacement::Engine)
        .err()
        .unwrap();
    assert!(err.to_string().contains("volatile"), "{err}");
    for d in [dir, d2, tmpdir("placement3")] {
        std::fs::remove_dir_all(&d).unwrap();
    }
}

/// `anchor` (libpmemobj) holds the log as well, when this build has it;
/// without it the engine is refused in one line naming the fix.
#[tokio::test]
async fn anchor_holds_the_log_when_libpmemobj_is_built_in() {
    if !pmlab_kv::EngineKind::Anchor.available() {
        let d = tmpdir("anchor-missing");
        let err = open_engine("anchor", &d, 16 << 20).err().unwrap();
        assert!(err.0.contains("libpmemobj"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
        return;
    }
    uncommitted_entries_survive_a_restart_unread("anchor").await;
    truncation_after_a_leader_change_rolls_back("anchor").await;
    purge_snapshot_and_install("anchor").await;
    a_crash_around_an_install_leaves_old_or_new_state("anchor").await;
}

/// A snapshot written into the engine as it arrives (`stage_*`): invisible
/// and gone after a crash before the install, committed by the install,
/// and restored from the kept data when a write dropped the staged
/// restore on the way. `btree` has no staged restore: it says so.
#[tokio::test]
async fn a_staged_install_commits_or_leaves_the_old_state() {
    let dir = tmpdir("staged");
    let snap = {
        let (mut log, mut sm) = open("list", &dir.join("leader"));
        let cmds = (0..40)
            .map(|i| set(&format!("k{i:02}"), &"n".repeat(300 + i)))
            .collect();
        log.blocking_append(first_term(cmds)).await.unwrap();
        apply_upto(&mut log, &mut sm, 0, 41).await;
        sm.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap()
    };
    let data = snap.snapshot.into_inner();
    let meta = snap.meta;
    let old = |d: PathBuf| async move {
        let (mut log, mut sm) = open("list", &d);
        log.blocking_append(first_term(vec![set("k00", "old")]))
            .await
            .unwrap();
        apply_upto(&mut log, &mut sm, 0, 2).await;
    };
    let feed = |sm: &StateMachine, upto: usize| {
        for piece in data[..upto].chunks(1000) {
            sm.stage_data(&meta.snapshot_id, piece.to_vec()).unwrap();
        }
    };
    let f = dir.join("f");
    old(f.clone()).await;
    {
        let (mut log, mut sm) = open("list", &f);
        apply_upto(&mut log, &mut sm, 0, 2).await;
        assert!(sm.stage_begin(&meta));
        assert!(!sm.stage_begin(&meta), "one staging at a time");
        feed(&sm, data.len() / 2);
        assert_eq!(get(&sm, "k00").as_deref(), Some("old"), "staged is unseen");
        // The node dies here.
    }
    {
        let (mut log, mut sm) = open("list", &f);
        apply_upto(&mut log, &mut sm, 0, 2).await;
        assert_eq!(get(&sm, "k00").as_deref(), Some("old"), "the old state");
        assert!(sm.stage_begin(&meta));
        feed(&sm, data.len());
        sm.stage_end(&meta.snapshot_id).unwrap();
        sm.install_snapshot(&meta, Box::new(std::io::Cursor::new(Vec::new())))
            .await
            .unwrap();
        assert_eq!(get(&sm, "k00").as_deref(), Some(&"n".repeat(300)[..]));
        sm.stage_drop(&meta.snapshot_id);
    }
    {
        let (mut log, mut sm) = open("list", &f);
        let st = log.get_log_state().await.unwrap();
        assert_eq!(st.last_purged_log_id, Some(id(1, 1, 41)));
        assert_eq!(get(&sm, "k39").as_deref(), Some(&"n".repeat(339)[..]));
        let (_, m) = sm.applied_state().await.unwrap();
        assert_eq!(m, meta.last_membership);
    }
    // A write in the middle drops the staged restore; the install then
    // restores the data kept on the way.
    let g = dir.join("g");
    old(g.clone()).await;
    {
        let (mut log, mut sm) = open("list", &g);
        apply_upto(&mut log, &mut sm, 0, 2).await;
        assert!(sm.stage_begin(&meta));
        feed(&sm, 3000);
        log.blocking_append(vec![normal(1, 1, 3, set("late", "1"))])
            .await
            .unwrap();
        for piece in data[3000..].chunks(1000) {
            sm.stage_data(&meta.snapshot_id, piece.to_vec()).unwrap();
        }
        sm.stage_end(&meta.snapshot_id).unwrap();
        sm.install_snapshot(&meta, Box::new(std::io::Cursor::new(Vec::new())))
            .await
            .unwrap();
        assert_eq!(get(&sm, "k00").as_deref(), Some(&"n".repeat(300)[..]));
        assert_eq!(get(&sm, "late"), None);
    }
    // Data that is not a snapshot fails the staging.
    let h = dir.join("h");
    old(h.clone()).await;
    {
        let (mut log, mut sm) = open("list", &h);
        apply_upto(&mut log, &mut sm, 0, 2).await;
        assert!(sm.stage_begin(&meta));
        let mut bad = data[..100].to_vec();
        bad[0] ^= 0xff;
        assert!(sm.stage_data(&meta.snapshot_id, bad).is_err());
        assert!(sm.stage_end(&meta.snapshot_id).is_err(), "dropped");
        assert_eq!(get(&sm, "k00").as_deref(), Some("old"));
    }
    let b = dir.join("b");
    let (_log, sm) = open("btree", &b);
    assert!(!sm.stage_begin(&meta), "btree installs whole");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The separate-log placement stages into a persistent engine (`wal`)
/// the same way: committed by the install, restored from the kept data
/// when an apply dropped the stage; a volatile engine (`mem`) installs
/// whole.
#[tokio::test]
async fn a_staged_install_beside_a_separate_log() {
    let dir = tmpdir("staged-file");
    let open_file = |engine: &str, d: &Path| {
        let e = open_engine(engine, d, 16 << 20).unwrap();
        store::open(d, e, LogPlacement::File).unwrap()
    };
    let (mut log, mut sm) = open_file("wal", &dir.join("leader"));
    let cmds = (0..30).map(|i| set(&format!("w{i:02}"), "new")).collect();
    log.blocking_append(first_term(cmds)).await.unwrap();
    apply_upto(&mut log, &mut sm, 0, 31).await;
    let snap = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let data = snap.snapshot.into_inner();
    let meta = snap.meta;
    for (name, write_between) in [("f", false), ("g", true)] {
        let (mut log, mut sm) = open_file("wal", &dir.join(name));
        log.blocking_append(first_term(vec![set("w00", "old")]))
            .await
            .unwrap();
        apply_upto(&mut log, &mut sm, 0, 2).await;
        assert!(sm.stage_begin(&meta));
        for (i, piece) in data.chunks(700).enumerate() {
            if write_between && i == 2 {
                log.blocking_append(vec![normal(1, 1, 3, set("late", "1"))])
                    .await
                    .unwrap();
                apply_upto(&mut log, &mut sm, 3, 3).await;
            }
            sm.stage_data(&meta.snapshot_id, piece.to_vec()).unwrap();
        }
        assert_eq!(get(&sm, "w00").as_deref(), Some("old"), "{name}: unseen");
        sm.stage_end(&meta.snapshot_id).unwrap();
        sm.install_snapshot(&meta, Box::new(std::io::Cursor::new(Vec::new())))
            .await
            .unwrap();
        assert_eq!(get(&sm, "w00").as_deref(), Some("new"), "{name}");
        assert_eq!(get(&sm, "w29").as_deref(), Some("new"), "{name}");
        assert_eq!(get(&sm, "late"), None, "{name}");
        drop((log, sm));
        let (_log, sm) = open_file("wal", &dir.join(name));
        assert_eq!(get(&sm, "w17").as_deref(), Some("new"), "{name}: reopened");
    }
    let (_log, sm) = open_file("mem", &dir.join("m"));
    assert!(!sm.stage_begin(&meta), "mem installs whole");
    std::fs::remove_dir_all(&dir).unwrap();
}
