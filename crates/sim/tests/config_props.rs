//! Property tests of the configuration loader: every bundled preset with
//! one parameter given a wrong value, an unknown key added, or its text
//! damaged at random must build or fail with one clean line; a failure
//! that comes from one parameter names it. A system that builds must then
//! serve a few requests of every kind with finite, ordered times. Seeds
//! and case counts are fixed (the file runs in about a second).

use pmlab_sim::{presets, Op, Request, System};
use pmlab_testkit::{mutate_text, Rng};

/// Values of every type and range a parameter can wrongly get.
const BAD_VALUES: &[&str] = &[
    "-1",
    "0",
    "-0.5",
    "1e12",
    "nan",
    "inf",
    "true",
    "\"\"",
    "\"x\"",
    "\"-4KiB\"",
    "\"0B\"",
    "\"1GB/s\"",
    "\"3 parsecs\"",
    "\"16KiB\"",
    "\"10ns\"",
    "[]",
    "[1, 2]",
    "{}",
    "{ impl = \"ddr4\" }",
    "\"ddr4\"",
    "\"nvram\"",
];

/// `(line index, table path, key)` of every `key = value` line of `toml`.
fn keyed_lines(toml: &str) -> Vec<(usize, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for (i, l) in toml.lines().enumerate() {
        let t = l.trim();
        if let Some(s) = t.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = s.to_string();
        } else if let Some((k, _)) = t.split_once('=') {
            if !t.starts_with('#') {
                out.push((i, section.clone(), k.trim().to_string()));
            }
        }
    }
    out
}

fn with_line(toml: &str, i: usize, line: &str) -> String {
    let mut lines: Vec<&str> = toml.lines().collect();
    lines[i] = line;
    lines.join("\n") + "\n"
}

/// A built system serves reads, writes, non-temporal writes, flushes and
/// fences with finite completion times no earlier than their issue.
fn serve_a_few(sys: &mut System, what: &str) {
    let mut t = 0.0;
    for (i, op) in [
        Op::Read,
        Op::Write,
        Op::NtWrite,
        Op::Clwb,
        Op::SFence,
        Op::Read,
    ]
    .into_iter()
    .cycle()
    .take(60)
    .enumerate()
    {
        let addr = (i as u64 * 4160) % (1 << 24);
        let c = sys.submit(&Request::new(t, op, addr, 64));
        assert!(
            c.done_ns.is_finite() && c.done_ns >= c.issue_ns,
            "{what}: {op:?} issued at {} done at {}",
            c.issue_ns,
            c.done_ns
        );
        if let Some(p) = c.persist_ns {
            assert!(p.is_finite() && p >= c.issue_ns, "{what}: persist at {p}");
        }
        t = c.done_ns;
    }
}

/// The error of a configuration: one line.
fn one_line(e: &pmlab_sim::Error, what: &str) -> String {
    let msg = e.to_string();
    assert_eq!(msg.lines().count(), 1, "{what}: not one line: {msg}");
    assert!(!msg.is_empty(), "{what}: empty message");
    msg
}

#[test]
fn a_wrong_value_is_accepted_or_named_in_the_error() {
    let mut rng = Rng::new(15);
    let mut errors = 0;
    let mut cases = 0;
    for p in presets::ALL {
        let lines: Vec<&str> = p.toml.lines().collect();
        for (i, section, key) in keyed_lines(p.toml) {
            // Three wrong values per parameter, drawn from the list.
            for _ in 0..3 {
                let v = rng.pick(BAD_VALUES);
                let edited = with_line(p.toml, i, &format!("{key} = {v}"));
                let what = format!("{}: [{section}] {key} = {v} (was '{}')", p.name, lines[i]);
                cases += 1;
                match System::from_toml(&edited, p.name) {
                    Ok(mut sys) => serve_a_few(&mut sys, &what),
                    Err(e) => {
                        errors += 1;
                        let msg = one_line(&e, &what);
                        // Another implementation's complaint names the
                        // component whose `impl` changed.
                        let named = msg.contains(&key) || (key == "impl" && msg.contains(&section));
                        assert!(named, "{what}: the error does not name '{key}': {msg}");
                    }
                }
            }
        }
    }
    // Most of these values are wrong for most parameters.
    assert!(errors > cases / 2, "{errors} errors in {cases} cases");
}

#[test]
fn an_unknown_key_is_named_in_the_error() {
    for p in presets::ALL {
        let mut section = String::from("(top level)");
        for (i, l) in p.toml.lines().enumerate() {
            if !l.trim().starts_with('[') {
                continue;
            }
            section = l.trim().to_string();
            // A new key right under each table header.
            let mut lines: Vec<&str> = p.toml.lines().collect();
            lines.insert(i + 1, "latency_typo = 3");
            let edited = lines.join("\n");
            let what = format!("{}: latency_typo under {section}", p.name);
            let e = System::from_toml(&edited, p.name)
                .err()
                .unwrap_or_else(|| panic!("{what}: accepted"));
            let msg = one_line(&e, &what);
            assert!(msg.contains("latency_typo"), "{what}: {msg}");
        }
        assert_ne!(section, "(top level)", "{}: no tables", p.name);
        let e = System::from_toml(&format!("latency_typo = 3\n{}", p.toml), p.name)
            .err()
            .expect("a top-level unknown key is refused");
        assert!(e.to_string().contains("latency_typo"), "{e}");
    }
}

#[test]
fn damaged_configurations_never_panic() {
    let mut rng = Rng::new(77);
    let mut built = 0;
    for round in 0..600 {
        let p = rng.pick(presets::ALL);
        let mut text = p.toml.to_string();
        for _ in 0..1 + rng.below(3) {
            text = mutate_text(&mut rng, &text, BAD_VALUES);
        }
        let what = format!("round {round} ({})", p.name);
        match System::from_toml(&text, "cfg") {
            Ok(mut sys) => {
                built += 1;
                serve_a_few(&mut sys, &what);
            }
            Err(e) => {
                let msg = one_line(&e, &what);
                assert!(msg.starts_with("cfg: "), "{what}: no origin: {msg}");
            }
        }
    }
    // Some damage (a comment, a default restated) leaves a valid system.
    assert!(built > 0 && built < 600, "{built} of 600 built");
}

/// A size far beyond any device (`2^63-1` bytes) is refused in one line
/// naming the key, rather than sizing an allocation that aborts the
/// process; a large one within the bound (1 TiB) still builds.
#[test]
fn a_huge_size_is_refused_in_one_line() {
    let p = presets::find("optane-1dimm").unwrap();
    for (i, _, key) in keyed_lines(p.toml) {
        if !key.ends_with("_bytes") {
            continue;
        }
        let edited = with_line(p.toml, i, &format!("{key} = 9223372036854775807"));
        match System::from_toml(&edited, p.name) {
            Err(e) => assert!(e.to_string().contains(&key), "{e}"),
            Ok(_) => panic!("{key} = 2^63-1 was accepted"),
        }
        let edited = with_line(p.toml, i, &format!("{key} = \"1TiB\""));
        if let Err(e) = System::from_toml(&edited, p.name) {
            // Only a key's own rule (a power of two, a ratio) may refuse it.
            assert!(e.to_string().contains(&key), "{e}");
        }
    }
}

/// A duration, bandwidth or clock period whose value would make simulated
/// times infinite or meaningless (1e308 ns, a bandwidth of 1e-300 GB/s, a
/// zero clock period) is refused in one line naming the key; every system
/// that does build keeps finite times.
#[test]
fn a_value_that_would_make_times_infinite_is_refused() {
    for p in presets::ALL {
        for (i, _, key) in keyed_lines(p.toml) {
            let values: &[&str] = if key.ends_with("_ns") || key == "tck" {
                &["1e308", "\"1e308ns\""]
            } else if key.ends_with("_gbs") {
                &["1e-300", "1e308"]
            } else {
                continue;
            };
            for v in values {
                let edited = with_line(p.toml, i, &format!("{key} = {v}"));
                let what = format!("{}: {key} = {v}", p.name);
                match System::from_toml(&edited, p.name) {
                    Err(e) => {
                        let msg = one_line(&e, &what);
                        assert!(msg.contains(&key), "{what}: {msg}");
                    }
                    Ok(_) => panic!("{what}: accepted"),
                }
            }
        }
        if let Some((i, _, _)) = keyed_lines(p.toml).into_iter().find(|(_, _, k)| k == "tck") {
            let edited = with_line(p.toml, i, "tck = 0");
            let e = System::from_toml(&edited, p.name)
                .err()
                .unwrap_or_else(|| panic!("{}: tck = 0 accepted", p.name));
            assert!(one_line(&e, p.name).contains("tck"), "{e}");
        }
    }
}
