//! The kill -9 test: a deterministic stream of operations, the child that
//! runs it against a pool and acknowledges each version once durable, and
//! the parent that kills the child at random points and checks the pool.
//!
//! Operation `v` depends only on the seed and `v` ([`op`]); its outcome
//! depends on the state, which the parent tracks with a [`Model`]. The
//! child (`pmkv stress`) opens the pool, prints `start S` (the first version
//! it will run), runs operations `S, S+1, ...`, and after every `group`
//! operations syncs and prints `ack V` for each. The parent
//! ([`crash_runs`]) kills it with SIGKILL after a seeded delay, reopens the
//! pool, checks every invariant, and requires the state to equal the model
//! after the last acknowledged version `A`, or after `A + j` for some
//! `j <= group` (the in-flight group, which may have been durable or not,
//! wholly or up to an operation that committed it early).

use crate::error::{Error, ErrorKind, Result};
use crate::{compare, Engine, EngineKind, Model, Options};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A small deterministic generator (splitmix64).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// One operation of the stress stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Set a key.
    Set(Vec<u8>, Vec<u8>),
    /// Delete a key.
    Delete(Vec<u8>),
    /// Compare-and-set a key.
    Cas(Vec<u8>, Option<Vec<u8>>, Vec<u8>),
    /// Roll back everything above `last - n` (not below the floor).
    Rollback(u64),
    /// Discard below `last - n` (not below the floor).
    Discard(u64),
}

/// The value written by operation `v` of stream `seed` (when it writes one).
pub fn value(seed: u64, v: u64) -> Vec<u8> {
    let mut r = Rng::new(seed ^ v.wrapping_mul(0xa076_1d64_78bd_642f) ^ 0x5555);
    let len = if r.below(40) == 0 {
        1000 + r.below(70_000)
    } else {
        r.below(300)
    };
    let b = r.next_u64();
    (0..len)
        .map(|i| (b.wrapping_add(i.wrapping_mul(31)) >> (i % 7)) as u8)
        .collect()
}

/// Operation `v` of stream `seed`.
pub fn op(seed: u64, v: u64) -> Op {
    let mut r = Rng::new(seed ^ v.wrapping_mul(0xe703_7ed1_a0b4_28db));
    let key = format!("k{:02}", r.below(24)).into_bytes();
    match r.below(100) {
        0..=54 => Op::Set(key, value(seed, v)),
        55..=69 => Op::Delete(key),
        70..=91 => {
            let back = 1 + r.below(8);
            let expected = if r.below(3) == 0 {
                None
            } else {
                Some(value(seed, v.saturating_sub(back)))
            };
            Op::Cas(key, expected, value(seed, v))
        }
        92..=95 => Op::Rollback(r.below(4)),
        _ => Op::Discard(5 + r.below(20)),
    }
}

/// Anything that applies operations: an engine or the model.
pub trait Target {
    /// Apply `op` at version `v`.
    fn apply(&mut self, op: &Op, v: u64) -> Result<()>;
}

impl Target for Model {
    fn apply(&mut self, op: &Op, v: u64) -> Result<()> {
        match op {
            Op::Set(k, val) => self.put(k, Some(val), v),
            Op::Delete(k) => self.delete(k, v).map(|_| ()),
            Op::Cas(k, e, n) => self.compare_and_set(k, e.as_deref(), n, v).map(|_| ()),
            Op::Rollback(n) => {
                self.rollback_above(self.last_version().saturating_sub(*n).max(self.floor()))
            }
            Op::Discard(n) => {
                self.discard_below(self.last_version().saturating_sub(*n).max(self.floor()))
            }
        }
    }
}

impl Target for Box<dyn Engine> {
    fn apply(&mut self, op: &Op, v: u64) -> Result<()> {
        match op {
            Op::Set(k, val) => self.set(k, val, v),
            Op::Delete(k) => self.delete(k, v).map(|_| ()),
            Op::Cas(k, e, n) => self.compare_and_set(k, e.as_deref(), n, v).map(|_| ()),
            Op::Rollback(n) => {
                self.rollback_above(self.last_version().saturating_sub(*n).max(self.floor()))
            }
            Op::Discard(n) => {
                self.discard_below(self.last_version().saturating_sub(*n).max(self.floor()))
            }
        }
    }
}

/// The child's loop: open the pool, print `start S`, then run `count`
/// operations acknowledging each group once durable.
///
/// With `plant_early_ack` the child acknowledges each operation before
/// syncing it: a deliberate bug, so that a test shows [`crash_runs`]
/// catches lost acknowledged writes.
pub fn child(
    path: &Path,
    kind: EngineKind,
    seed: u64,
    group: u32,
    count: u64,
    plant_early_ack: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let opts = Options {
        group,
        ..Options::default()
    };
    let mut e = crate::open(path, kind, &opts)?;
    let start = e.last_version() + 1;
    let io = |err: std::io::Error| Error::io("stdout", err);
    writeln!(out, "start {start}")
        .and_then(|_| out.flush())
        .map_err(io)?;
    let mut unacked = Vec::new();
    for v in start..start + count {
        e.apply(&op(seed, v), v)?;
        unacked.push(v);
        if plant_early_ack || unacked.len() as u32 >= group.max(1) {
            if !plant_early_ack {
                e.sync()?;
            }
            let mut s = String::new();
            for a in unacked.drain(..) {
                s.push_str(&format!("ack {a}\n"));
            }
            out.write_all(s.as_bytes())
                .and_then(|_| out.flush())
                .map_err(io)?;
        }
    }
    Ok(())
}

/// What [`crash_runs`] found.
#[derive(Clone, Debug, Default)]
pub struct CrashReport {
    /// Runs (children started).
    pub runs: u64,
    /// Runs ended by SIGKILL (the others finished their operations).
    pub kills: u64,
    /// Operations acknowledged over all runs.
    pub acked: u64,
    /// Runs whose in-flight group was found durable, wholly or in part.
    pub in_flight_present: u64,
    /// Runs whose in-flight group was found absent.
    pub in_flight_absent: u64,
}

/// The parent: create a pool of `kind` in `dir`, then `runs` times start
/// `exe stress ...` on it, kill it after a seeded delay, and check the
/// reopened pool against the model. The error names the seed, run and
/// the first broken invariant or difference. `plant_early_ack` passes the
/// deliberate bug of [`child`] on to the children.
pub fn crash_runs(
    exe: &Path,
    kind: EngineKind,
    dir: &Path,
    runs: u64,
    seed: u64,
    group: u32,
    plant_early_ack: bool,
) -> Result<CrashReport> {
    let path = dir.join(format!("crash-{}.pool", kind.name()));
    let _ = std::fs::remove_file(&path);
    let opts = Options {
        size: 256 << 20,
        page_size: 1024,
        group,
        ..Options::default()
    };
    drop(crate::create(&path, kind, &opts)?);
    let mut rng = Rng::new(seed);
    let mut model = Model::new();
    let mut reached = 0u64; // operations applied to the model
    let mut report = CrashReport::default();
    let fail = |run: u64, msg: String| {
        Error::new(
            ErrorKind::Inconsistent,
            format!("kill -9 {} seed {seed} run {run}: {msg} (reproduce: pmkv crashtest --engine {} --seed {seed} --runs {})", kind.name(), kind.name(), run + 1),
        )
    };
    for run in 0..runs {
        let quick = rng.below(6) == 0;
        let delay = Duration::from_micros(500 + rng.below(30_000));
        let mut child = Command::new(exe)
            .args([
                "stress",
                "--engine",
                kind.name(),
                "--seed",
                &seed.to_string(),
                "--group",
                &group.to_string(),
            ])
            .args(if plant_early_ack {
                &["--plant-early-ack"][..]
            } else {
                &[]
            })
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::io(exe.display(), e))?;
        report.runs += 1;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| fail(run, "no stdout".into()))?;
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("start") {
                    let _ = tx.send(());
                }
                lines.push(line);
            }
            lines
        });
        if !quick {
            let _ = rx.recv_timeout(Duration::from_secs(20));
        }
        std::thread::sleep(delay);
        // SAFETY: kill on our own child's pid.
        let killed = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) } == 0;
        let status = child.wait().map_err(|e| Error::io("wait", e))?;
        let lines = reader.join().unwrap_or_default();
        let mut stderr = String::new();
        if let Some(mut s) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut s, &mut stderr);
        }
        if status.code().is_some_and(|c| c != 0) {
            return Err(fail(run, format!("the child failed: {}", stderr.trim())));
        }
        if killed && status.code().is_none() {
            report.kills += 1;
        }
        let mut start = None;
        let mut acked = None;
        for l in &lines {
            let num = |p: &str| l.strip_prefix(p).and_then(|n| n.trim().parse::<u64>().ok());
            if let Some(s) = num("start ") {
                start = Some(s);
            } else if let Some(a) = num("ack ") {
                if acked.is_some_and(|x| a != x + 1) || (acked.is_none() && Some(a) != start) {
                    return Err(fail(run, format!("acknowledgement {a} out of sequence")));
                }
                acked = Some(a);
                report.acked += 1;
            }
        }
        if let Some(s) = start {
            if s > reached + 1 {
                return Err(fail(
                    run,
                    format!("the child started at version {s}, but only {reached} operations ran"),
                ));
            }
        }
        let a = acked.unwrap_or(reached).max(reached);
        for v in reached + 1..=a {
            model
                .apply(&op(seed, v), v)
                .map_err(|e| fail(run, format!("model at version {v}: {e}")))?;
        }
        reached = a;
        let e = crate::open(&path, kind, &opts).map_err(|e| fail(run, format!("reopen: {e}")))?;
        e.check().map_err(|e| fail(run, format!("check: {e}")))?;
        let mut cand = model.clone();
        let mut matched = None;
        let mut first_err = None;
        for j in 0..=group as u64 {
            if j > 0 {
                let v = a + j;
                if cand.apply(&op(seed, v), v).is_err() {
                    break;
                }
            }
            match compare(e.as_ref(), &cand) {
                Ok(()) => {
                    matched = Some(j);
                    break;
                }
                Err(err) => {
                    if first_err.is_none() {
                        first_err = Some(err);
                    }
                }
            }
        }
        match matched {
            None => {
                let err = first_err.map(|e| e.to_string()).unwrap_or_default();
                return Err(fail(
                    run,
                    format!("acknowledged through version {a}: {err}"),
                ));
            }
            Some(0) => report.in_flight_absent += 1,
            Some(j) => {
                report.in_flight_present += 1;
                model = cand;
                reached = a + j;
            }
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(report)
}
