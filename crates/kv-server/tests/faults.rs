//! A short fault schedule against three node processes (kill -9, restarts,
//! partitions, delay and drop through proxies), then a healed liveness
//! phase; the history must be linearizable and progress must resume.
//! The nodes run the PM `list` engine (`PMKV_FAULT_ENGINE=mem|btree|wal`
//! picks another). `PMKV_FAULT_SEED=N` replays a schedule; the seed is
//! printed either way.

use std::time::Duration;

use pmlab_kv_server::faults::{self, FaultConfig};
use pmlab_kv_server::lincheck::Verdict;

#[test]
fn short_fault_schedule_is_linearizable_and_recovers() {
    let seed = std::env::var("PMKV_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    let cfg = FaultConfig {
        bin: env!("CARGO_BIN_EXE_pmkv-server").into(),
        dir: std::env::temp_dir().join(format!("pmkv-faults-{}", std::process::id())),
        seed,
        nodes: 3,
        safety: Duration::from_secs(15),
        liveness: Duration::from_secs(8),
        clients: 4,
        keys: 6,
        verbose: false,
        engine: std::env::var("PMKV_FAULT_ENGINE").unwrap_or_else(|_| "list".into()),
    };
    let repro = format!(
        "PMKV_FAULT_SEED={seed} PMKV_FAULT_ENGINE={} cargo test --release -p pmlab-kv-server --test faults (or: {})",
        cfg.engine,
        faults::reproduce_line(&cfg)
    );
    eprintln!("fault seed {seed}; reproduce: {repro}");
    let rep = faults::run(&cfg).unwrap_or_else(|e| panic!("{e}; reproduce: {repro}"));
    eprintln!(
        "{} faults, {} ops, {} acknowledged writes, {} unknown, {} writes after healing",
        rep.faults.len(),
        rep.ops,
        rep.acked_writes,
        rep.unknown,
        rep.liveness_writes
    );
    for f in &rep.faults {
        eprintln!("  {f}");
    }
    assert!(
        rep.faults.len() >= 5,
        "the schedule injected only {} faults",
        rep.faults.len()
    );
    assert!(rep.acked_writes > 0, "no write was acknowledged at all");
    assert_eq!(rep.verdict, Verdict::Linearizable, "reproduce: {repro}");
    assert!(
        rep.liveness_writes > 0,
        "no progress after healing; reproduce: {repro}"
    );
    let _ = std::fs::remove_dir_all(&cfg.dir);
}
