//! Property tests of the runtime's settings: random and hostile values of
//! the `PMLAB_*` variables, one at a time and many at once, given to the
//! parse entry point (`Config::from_lookup`) must give a configuration that
//! keeps every documented bound or one clean error line that names the
//! variable (or, for a contradiction between two, the quantity in words);
//! never a panic. Seeds and case counts are fixed; the file runs in well
//! under a second. Kept apart from the unit tests so that it can follow the
//! options when their definitions move.

use pmlab::config::Config;
use pmlab_testkit::{random_word, Rng};
use std::collections::HashMap;

/// Every variable the parser reads, with the words its cross-checks use.
const VARS: &[(&str, &str)] = &[
    ("PMLAB_ACTIVE", ""),
    ("PMLAB_SOURCE", ""),
    ("PMLAB_PM_LATENCY", "PM latency"),
    ("PMLAB_DRAM_LATENCY", "DRAM latency"),
    ("PMLAB_REMOTE_LATENCY", "remote latency"),
    ("PMLAB_W", ""),
    ("PMLAB_PM_BANDWIDTH", ""),
    ("PMLAB_BW_THROTTLE", ""),
    ("PMLAB_EPOCH_MAX", "maximum epoch"),
    ("PMLAB_EPOCH_MIN", "minimum epoch"),
    ("PMLAB_LOCK_EPOCH_MIN", "minimum lock epoch"),
    ("PMLAB_NO_INJECT", ""),
    ("PMLAB_TSC_GHZ", ""),
    ("PMLAB_CPU_GHZ", ""),
    ("PMLAB_WRITE_LATENCY", ""),
    ("PMLAB_WRITE_PARALLELISM", ""),
    ("PMLAB_PM_FILE", ""),
    ("PMLAB_PM_POOL_SIZE", ""),
    ("PMLAB_PM_NODE", ""),
    ("PMLAB_STATS_FILE", ""),
    ("PMLAB_STATS", ""),
    ("PMLAB_SIGNAL", ""),
    ("PMLAB_LAUNCHER_PID", ""),
];

/// Values of every shape the variables can wrongly (or rightly) hold.
const VALUES: &[&str] = &[
    "",
    " ",
    "0",
    "1",
    "-1",
    "6",
    "21",
    "1024",
    "1025",
    "0.5",
    "nan",
    "inf",
    "-inf",
    "1e400",
    "18446744073709551616",
    "0ns",
    "1ns",
    "-5ns",
    "300ns",
    " 300ns ",
    "0.4us",
    "999ns",
    "1ms",
    "20ms",
    "10s",
    "1e400ns",
    "10 parsecs",
    "2GB/s",
    "0GB/s",
    "-1GB/s",
    "1e400GB/s",
    "1MiB",
    "1KiB",
    "16EiB",
    "1GiB",
    "software",
    "mba",
    "none",
    "magic",
    "yes",
    "on",
    "synthetic:s.txt",
    "hw",
    "é",
];

fn parse(vars: &HashMap<&str, String>) -> Result<Config, pmlab::Error> {
    Config::from_lookup(|k| vars.get(k).cloned())
}

/// The documented bounds of a configuration that parsed.
fn check_bounds(c: &Config, what: &str) {
    let finite_nonneg = |v: f64, name: &str| {
        assert!(v.is_finite() && v >= 0.0, "{what}: {name} = {v}");
    };
    finite_nonneg(c.pm_latency_ns, "pm_latency_ns");
    finite_nonneg(c.dram_latency_ns, "dram_latency_ns");
    finite_nonneg(c.epoch_max_ns, "epoch_max_ns");
    finite_nonneg(c.epoch_min_ns, "epoch_min_ns");
    finite_nonneg(c.write_latency_ns, "write_latency_ns");
    assert!(c.dram_latency_ns > 0.0, "{what}");
    let base = c.remote_latency_ns.unwrap_or(c.dram_latency_ns);
    finite_nonneg(base, "remote_latency_ns");
    assert!(c.pm_latency_ns >= base, "{what}: PM faster than its base");
    assert!(
        c.epoch_max_ns >= 1e3,
        "{what}: epoch max {}",
        c.epoch_max_ns
    );
    assert!(c.epoch_min_ns <= c.epoch_max_ns, "{what}");
    if let Some(l) = c.lock_epoch_min_ns {
        finite_nonneg(l, "lock_epoch_min_ns");
        assert!(l <= c.epoch_max_ns, "{what}");
    }
    assert!(c.w.is_finite() && c.w > 0.0, "{what}: w = {}", c.w);
    for (v, name) in [
        (c.pm_bytes_per_ns, "pm_bytes_per_ns"),
        (c.tsc_ghz, "tsc_ghz"),
        (c.cpu_ghz, "cpu_ghz"),
    ] {
        if let Some(v) = v {
            assert!(v.is_finite() && v > 0.0, "{what}: {name} = {v}");
        }
    }
    assert!((1..=1024).contains(&c.write_parallelism), "{what}");
    assert!(c.pool_size >= 1 << 20, "{what}: pool {}", c.pool_size);
    assert!((2..=20).contains(&c.signal_offset), "{what}");
    assert!(c.pm_file.as_ref().is_none_or(|f| !f.is_empty()), "{what}");
    assert!(
        c.stats_file.as_ref().is_none_or(|f| !f.is_empty()),
        "{what}"
    );
}

/// An error is one line naming one of `set` (the variable, or the
/// quantity in the words of the cross-checks).
fn check_error(e: &pmlab::Error, set: &[&str], what: &str) {
    let msg = e.to_string();
    assert_eq!(msg.lines().count(), 1, "{what}: not one line: {msg}");
    let named = VARS
        .iter()
        .filter(|(v, _)| set.contains(v))
        .any(|(v, words)| msg.contains(v) || (!words.is_empty() && msg.contains(words)));
    assert!(named, "{what}: the error names none of {set:?}: {msg}");
}

#[test]
fn one_variable_at_a_time_is_accepted_within_bounds_or_named() {
    let mut errors = 0;
    for (var, _) in VARS {
        for v in VALUES {
            let vars = HashMap::from([(*var, v.to_string())]);
            let what = format!("{var}={v:?}");
            match parse(&vars) {
                Ok(c) => check_bounds(&c, &what),
                Err(e) => {
                    errors += 1;
                    check_error(&e, &[var], &what);
                }
            }
        }
    }
    // Each value list holds some valid and many invalid values.
    let cases = VARS.len() * VALUES.len();
    assert!(errors > cases / 4 && errors < cases, "{errors} of {cases}");
}

#[test]
fn many_variables_at_once_never_panic() {
    let mut rng = Rng::new(2718);
    for round in 0..3000 {
        let mut vars = HashMap::new();
        for _ in 0..1 + rng.below(8) {
            let (var, _) = *rng.pick(VARS);
            let v = if rng.one_in(8) {
                random_word(&mut rng)
            } else {
                rng.pick(VALUES).to_string()
            };
            vars.insert(var, v);
        }
        let what = format!("round {round}: {vars:?}");
        match parse(&vars) {
            Ok(c) => check_bounds(&c, &what),
            Err(e) => {
                let set: Vec<&str> = vars.keys().copied().collect();
                check_error(&e, &set, &what);
            }
        }
    }
}
