//! A linearizability checker for histories of GET/SET/DEL/CAS on a
//! key-value map, in the manner of Wing and Gong's search with Lowe's
//! memoisation (as Porcupine does it).
//!
//! Single-key operations make linearizability local: the history is split
//! per key and each key is checked as one register. An operation whose
//! outcome is unknown (a timeout, a dropped connection) may have taken
//! effect at any time after its call, or never: it is given an infinite
//! return time and any outcome.

use std::collections::{BTreeMap, HashSet};

/// An operation on one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    /// Read the key.
    Get,
    /// Write a value.
    Set(Vec<u8>),
    /// Delete the key.
    Del,
    /// Write `new` if the key holds `expected`.
    Cas {
        /// The value required.
        expected: Vec<u8>,
        /// The value written.
        new: Vec<u8>,
    },
}

/// What the client saw.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A read's value.
    Value(Option<Vec<u8>>),
    /// A set's acknowledgement.
    Ok,
    /// Whether a delete found the key / a compare-and-set stored.
    Bool(bool),
    /// No answer (timeout, error after sending): may or may not have happened.
    Unknown,
}

/// One completed (or abandoned) operation of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Which client issued it (for reports).
    pub client: usize,
    /// The key.
    pub key: Vec<u8>,
    /// The operation.
    pub op: Op,
    /// What came back.
    pub outcome: Outcome,
    /// When it was sent (any monotonic unit, e.g. ns since the start).
    pub call: u64,
    /// When the answer came back (ignored for [`Outcome::Unknown`]).
    pub ret: u64,
}

/// The checker's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every key's history has a linearization.
    Linearizable,
    /// This key's history has none.
    NotLinearizable {
        /// The key.
        key: Vec<u8>,
        /// The key's operations, in call order, for the report.
        events: Vec<Event>,
    },
    /// The search gave up on this key after its step budget.
    Undecided {
        /// The key.
        key: Vec<u8>,
    },
}

/// Steps the search may take per key before giving up.
pub const STEP_BUDGET: u64 = 20_000_000;

/// Apply `op` to `state`: the new state if the outcome is consistent with it.
fn step(state: &Option<Vec<u8>>, op: &Op, out: &Outcome) -> Option<Option<Vec<u8>>> {
    let unknown = *out == Outcome::Unknown;
    match op {
        Op::Get => (unknown || *out == Outcome::Value(state.clone())).then(|| state.clone()),
        Op::Set(v) => (unknown || *out == Outcome::Ok).then(|| Some(v.clone())),
        Op::Del => (unknown || *out == Outcome::Bool(state.is_some())).then_some(None),
        Op::Cas { expected, new } => {
            let hit = state.as_deref() == Some(expected.as_slice());
            if !unknown && *out != Outcome::Bool(hit) {
                return None;
            }
            Some(if hit {
                Some(new.clone())
            } else {
                state.clone()
            })
        }
    }
}

/// Check a whole history (initially every key is absent).
pub fn check(history: &[Event]) -> Verdict {
    let mut keys: BTreeMap<&[u8], Vec<&Event>> = BTreeMap::new();
    for e in history {
        keys.entry(&e.key).or_default().push(e);
    }
    for (key, evs) in keys {
        match check_register(&evs) {
            Some(true) => {}
            Some(false) => {
                let mut events: Vec<Event> = evs.into_iter().cloned().collect();
                events.sort_by_key(|e| e.call);
                return Verdict::NotLinearizable {
                    key: key.to_vec(),
                    events,
                };
            }
            None => return Verdict::Undecided { key: key.to_vec() },
        }
    }
    Verdict::Linearizable
}

/// One key: `Some(true)` linearizable, `Some(false)` not, `None` undecided.
fn check_register(ops: &[&Event]) -> Option<bool> {
    let n = ops.len();
    if n == 0 {
        return Some(true);
    }
    // Entries 0..n are calls, n..2n returns; 2n is the list head.
    let ret_time = |e: &Event| {
        if e.outcome == Outcome::Unknown {
            u64::MAX
        } else {
            e.ret.max(e.call)
        }
    };
    let mut order: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * n);
    for (i, e) in ops.iter().enumerate() {
        order.push((e.call, 0, i));
        order.push((ret_time(e), 1, n + i));
    }
    // Calls before returns at equal times: touching operations overlap.
    order.sort();
    let head = 2 * n;
    let mut next = vec![0usize; 2 * n + 1];
    let mut prev = vec![0usize; 2 * n + 1];
    let mut last = head;
    for &(_, _, id) in &order {
        next[last] = id;
        prev[id] = last;
        last = id;
    }
    next[last] = head;
    prev[head] = last;

    let words = n.div_ceil(64);
    let mut lin = vec![0u64; words];
    let mut state: Option<Vec<u8>> = None;
    let mut cache: HashSet<(Vec<u64>, Option<Vec<u8>>)> = HashSet::new();
    let mut stack: Vec<(usize, Option<Vec<u8>>)> = Vec::new();
    let mut entry = next[head];
    let mut steps = 0u64;
    while next[head] != head {
        steps += 1;
        if steps > STEP_BUDGET {
            return None;
        }
        if entry < n {
            let e = ops[entry];
            if let Some(s2) = step(&state, &e.op, &e.outcome) {
                lin[entry / 64] |= 1 << (entry % 64);
                if cache.insert((lin.clone(), s2.clone())) {
                    stack.push((entry, std::mem::replace(&mut state, s2)));
                    // Lift the call and its return out of the list.
                    for x in [entry, entry + n] {
                        next[prev[x]] = next[x];
                        prev[next[x]] = prev[x];
                    }
                    entry = next[head];
                    continue;
                }
                lin[entry / 64] &= !(1 << (entry % 64));
            }
            entry = next[entry];
        } else {
            // A return whose call is not linearized yet: backtrack.
            let Some((call, old)) = stack.pop() else {
                return Some(false);
            };
            state = old;
            lin[call / 64] &= !(1 << (call % 64));
            for x in [call + n, call] {
                next[prev[x]] = x;
                prev[next[x]] = x;
            }
            entry = next[call];
        }
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(client: usize, op: Op, outcome: Outcome, call: u64, ret: u64) -> Event {
        Event {
            client,
            key: b"x".to_vec(),
            op,
            outcome,
            call,
            ret,
        }
    }

    fn v(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    #[test]
    fn planted_stale_read_is_caught() {
        let h = vec![
            ev(0, Op::Set(v("1")), Outcome::Ok, 0, 10),
            ev(1, Op::Set(v("2")), Outcome::Ok, 20, 30),
            ev(2, Op::Get, Outcome::Value(Some(v("1"))), 40, 50),
        ];
        assert!(matches!(check(&h), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn concurrent_reads_may_see_either_value() {
        let h = vec![
            ev(0, Op::Set(v("1")), Outcome::Ok, 0, 10),
            ev(1, Op::Set(v("2")), Outcome::Ok, 20, 60),
            ev(2, Op::Get, Outcome::Value(Some(v("2"))), 30, 40),
            ev(3, Op::Get, Outcome::Value(Some(v("2"))), 45, 50),
            ev(
                2,
                Op::Cas {
                    expected: v("2"),
                    new: v("3"),
                },
                Outcome::Bool(true),
                70,
                80,
            ),
            ev(3, Op::Get, Outcome::Value(Some(v("3"))), 90, 95),
        ];
        assert_eq!(check(&h), Verdict::Linearizable);
        // But a read seeing 2 and a later one seeing 1 again is not.
        let mut bad = h.clone();
        bad[3] = ev(3, Op::Get, Outcome::Value(Some(v("1"))), 45, 50);
        assert!(matches!(check(&bad), Verdict::NotLinearizable { .. }));
    }

    #[test]
    fn unknown_outcomes_may_or_may_not_happen() {
        let h = vec![
            ev(0, Op::Set(v("1")), Outcome::Unknown, 0, 0),
            ev(1, Op::Get, Outcome::Value(None), 10, 20),
            ev(1, Op::Get, Outcome::Value(Some(v("1"))), 30, 40),
        ];
        assert_eq!(check(&h), Verdict::Linearizable);
        let lost = vec![
            ev(0, Op::Set(v("1")), Outcome::Ok, 0, 5),
            ev(1, Op::Get, Outcome::Value(None), 10, 20),
        ];
        assert!(
            matches!(check(&lost), Verdict::NotLinearizable { .. }),
            "an acknowledged write was lost"
        );
    }

    #[test]
    fn failed_cas_and_delete_are_checked() {
        let h = vec![
            ev(0, Op::Set(v("a")), Outcome::Ok, 0, 5),
            ev(
                0,
                Op::Cas {
                    expected: v("b"),
                    new: v("c"),
                },
                Outcome::Bool(true),
                10,
                15,
            ),
        ];
        assert!(matches!(check(&h), Verdict::NotLinearizable { .. }));
        let h = vec![
            ev(0, Op::Del, Outcome::Bool(false), 0, 5),
            ev(0, Op::Set(v("a")), Outcome::Ok, 10, 15),
            ev(0, Op::Del, Outcome::Bool(true), 20, 25),
            ev(0, Op::Get, Outcome::Value(None), 30, 35),
        ];
        assert_eq!(check(&h), Verdict::Linearizable);
    }

    #[test]
    fn random_histories_from_a_real_register_are_accepted() {
        // Operations applied to a model at distinct instants; each gets an
        // interval around its instant, so the history is linearizable.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..20 {
            let mut state: Option<Vec<u8>> = None;
            let mut h = Vec::new();
            for i in 0..60u64 {
                let at = i * 100 + 1000;
                let op = match rnd(4) {
                    0 => Op::Get,
                    1 => Op::Set(vec![rnd(3) as u8]),
                    2 => Op::Del,
                    _ => Op::Cas {
                        expected: vec![rnd(3) as u8],
                        new: vec![rnd(3) as u8],
                    },
                };
                let out = match &op {
                    Op::Get => Outcome::Value(state.clone()),
                    Op::Set(_) => Outcome::Ok,
                    Op::Del => Outcome::Bool(state.is_some()),
                    Op::Cas { expected, .. } => {
                        Outcome::Bool(state.as_deref() == Some(expected.as_slice()))
                    }
                };
                state = step(&state, &op, &out).unwrap();
                let (call, ret) = (at - rnd(200), at + rnd(200));
                h.push(ev(rnd(5) as usize, op, out, call, ret));
            }
            assert_eq!(check(&h), Verdict::Linearizable);
        }
    }
}
