//! Property tests of every trace reader: valid traces damaged at random
//! (bits flipped, bytes replaced, inserted or deleted, cut short, lines
//! dropped, duplicated or rewritten) and random input must give records or
//! one clean error, never a panic or a hang. Seeds and case counts are
//! fixed, so a failure names its round and reproduces everywhere; the whole
//! file runs in well under a second. (These replace the cargo-fuzz targets,
//! which needed nightly and were never run.)

use pmlab_testkit::{mutate_bytes, mutate_text, random_word, Rng};
use pmlab_trace::analyze::{Analyzer, Config};
use pmlab_trace::import::{dramsim, lackey};
use pmlab_trace::{binary, text, whisper, Error, ErrorKind, Op, Record};

fn random_record(rng: &mut Rng, i: u64) -> Record {
    let op = *rng.pick(&Op::ALL);
    let addr = if rng.one_in(2) {
        0x7f00_0000_0000 + rng.below(1 << 16) as u64 * 8
    } else {
        rng.next_u64()
    };
    let size = *rng.pick(&[0u32, 8, 64, 64, 4096]);
    let r = Record::new(
        i * 10 + rng.below(20) as u64,
        rng.below(4) as u32,
        op,
        addr,
        size,
    );
    if rng.one_in(8) {
        r.dram()
    } else {
        r
    }
}

fn seed_trace() -> Vec<u8> {
    let mut w = binary::Writer::with_meta(
        Vec::new(),
        &[("producer", "props"), ("stores", "flushes-only")],
    )
    .unwrap();
    let mut rng = Rng::new(7);
    for i in 0..300u64 {
        w.write(&random_record(&mut rng, i)).unwrap();
    }
    w.finish().unwrap()
}

/// Read all of `bytes` as a binary trace and feed the records to the
/// analysis; check that an error is the last item and names an offset.
fn exercise_binary(bytes: &[u8], round: usize) {
    let Ok(reader) = binary::Reader::new(bytes) else {
        return;
    };
    let mut a = Analyzer::new(Config {
        window_ns: 1000,
        flushes_as_stores: true,
    });
    let mut n = 0usize;
    let mut errors = 0;
    for r in reader {
        assert_eq!(errors, 0, "round {round}: an item after an error");
        match r {
            Ok(rec) => {
                // Mutated sizes reach 4 GiB; the analysis clamps them at
                // 16 MiB (tested in analyze's unit tests) but that is still
                // slow for thousands of rounds, so keep them out here.
                if rec.size <= 1 << 16 {
                    a.push(&rec);
                }
                n += 1;
                assert!(n <= bytes.len(), "round {round}: more records than bytes");
            }
            Err(e) => {
                errors += 1;
                assert!(
                    matches!(e.kind(), ErrorKind::Malformed | ErrorKind::Truncated),
                    "round {round}: {e}"
                );
                assert!(e.to_string().contains("offset"), "round {round}: {e}");
            }
        }
    }
    let _ = a.finish();
}

#[test]
fn mutated_binary_traces_never_panic() {
    let base = seed_trace();
    let mut rng = Rng::new(2026);
    for round in 0..3000 {
        let mut b = base.clone();
        // Keep the magic in most rounds so the damage reaches the records.
        let keep = if round % 10 == 0 { 0 } else { 16 };
        for _ in 0..1 + rng.below(3) {
            mutate_bytes(&mut rng, &mut b, keep);
        }
        exercise_binary(&b, round);
    }
}

#[test]
fn random_bytes_after_the_magic_never_panic() {
    let mut rng = Rng::new(5);
    for round in 0..500 {
        let mut b = seed_trace()[..16].to_vec();
        let len = rng.below(200);
        b.extend(rng.bytes(len));
        exercise_binary(&b, round);
    }
}

#[test]
fn every_truncation_is_a_clean_error_or_a_shorter_trace() {
    let base = seed_trace();
    for cut in 0..base.len() {
        let b = &base[..cut];
        match binary::Reader::new(b) {
            Err(e) => assert!(cut < 16 + 40, "header error at {cut}: {e}"),
            Ok(r) => {
                let results: Vec<_> = r.collect();
                // Only the last item may be an error, and it says truncated.
                for (i, x) in results.iter().enumerate() {
                    if let Err(e) = x {
                        assert_eq!(i, results.len() - 1);
                        assert_eq!(e.kind(), ErrorKind::Truncated, "{e}");
                    }
                }
            }
        }
    }
}

/// Drain a text-format reader over `input` (named `trace`): at most one
/// error, as the last item, naming the input and a line; no more items
/// than lines. Whether it failed.
fn drain_text(
    items: impl Iterator<Item = Result<Record, Error>>,
    input: &[u8],
    what: &str,
) -> bool {
    let lines = input.split(|&b| b == b'\n').count();
    let mut n = 0;
    let mut failed = false;
    for r in items {
        assert!(!failed, "{what}: an item after an error");
        n += 1;
        if let Err(e) = r {
            failed = true;
            assert!(
                matches!(e.kind(), ErrorKind::Malformed | ErrorKind::Io),
                "{what}: {e}"
            );
            let msg = e.to_string();
            assert!(msg.starts_with("trace:"), "{what}: no input name: {msg}");
            assert_eq!(msg.lines().count(), 1, "{what}: not one line: {msg}");
        }
    }
    // Lackey turns `M` into two records.
    assert!(n <= 2 * lines + 1, "{what}: {n} items from {lines} lines");
    failed
}

/// One reader of each text format over `bytes`; how many failed.
fn drain_all_text_formats(bytes: &[u8], round: usize) -> usize {
    [
        drain_text(text::Reader::new(bytes), bytes, &format!("text {round}")),
        drain_text(
            whisper::Reader::new(bytes),
            bytes,
            &format!("whisper {round}"),
        ),
        drain_text(
            lackey::Reader::new(bytes),
            bytes,
            &format!("lackey {round}"),
        ),
        drain_text(
            dramsim::Reader::new(bytes),
            bytes,
            &format!("dramsim {round}"),
        ),
    ]
    .iter()
    .filter(|&&f| f)
    .count()
}

/// Valid input of each text format: pmlab text, DRAMsim, lackey and
/// WHISPER lines.
fn text_seeds() -> Vec<String> {
    let mut rng = Rng::new(11);
    let records: Vec<Record> = (0..40).map(|i| random_record(&mut rng, i)).collect();
    let mut t = Vec::new();
    let mut d = Vec::new();
    for r in &records {
        text::write_record(&mut t, r).unwrap();
        dramsim::write_record(&mut d, r).unwrap();
    }
    let lackey = "==12== Lackey, an example Valgrind tool\nI  04016e9a,3\n S 1ffefffd68,8\n L 04228e58,8\n M 0422a010,4\nI  04016e9d,5\n".repeat(5);
    let whisper = "1234:10:PM_XS:0:f:1\n1234:11:PM_W:0x7f0000001000:8:f:2\n1234:12:PM_L:0x7f0000001000:64:1:f:3\n1234:13:PM_N:f:4\n1235:14:PM_XE:0:f:5\nnoise line\n".repeat(5);
    vec![
        String::from_utf8(t).unwrap(),
        String::from_utf8(d).unwrap(),
        lackey,
        whisper,
    ]
}

#[test]
fn mutated_text_traces_never_panic() {
    let seeds = text_seeds();
    // The seeds themselves read cleanly in their own format.
    assert!(text::Reader::new(seeds[0].as_bytes()).all(|r| r.is_ok()));
    assert!(dramsim::Reader::new(seeds[1].as_bytes()).all(|r| r.is_ok()));
    assert!(lackey::Reader::new(seeds[2].as_bytes()).all(|r| r.is_ok()));
    assert!(whisper::Reader::new(seeds[3].as_bytes()).all(|r| r.is_ok()));
    let values = [
        "0",
        "-1",
        "0x",
        "0xzz",
        "18446744073709551616",
        "4294967296",
        "W",
        "NT",
        "READ",
        "PM_W",
        "PM_I",
        "",
        "nan",
    ];
    let mut rng = Rng::new(31);
    let mut failures = 0;
    for round in 0..1500 {
        let seed = rng.pick(&seeds);
        let mut m = seed.clone();
        for _ in 0..1 + rng.below(3) {
            m = mutate_text(&mut rng, &m, &values);
        }
        let mut bytes = m.into_bytes();
        if rng.one_in(6) {
            // Not UTF-8 any more.
            mutate_bytes(&mut rng, &mut bytes, 0);
        }
        failures += drain_all_text_formats(&bytes, round);
    }
    // Each input is another format's garbage, so most readers fail; but
    // not every one (the damage must also leave readable traces).
    assert!((1500..4 * 1500).contains(&failures), "{failures} failures");
}

#[test]
fn random_text_and_whisper_lines_never_panic() {
    let mut rng = Rng::new(99);
    let words = [
        "0",
        "1",
        "18446744073709551616",
        "-3",
        "0x",
        "0xzz",
        "0x7f00",
        "W",
        "R",
        "NT",
        "SFENCE",
        "TXBEGIN",
        "dram",
        "pm",
        "nvram",
        "#",
        "PM_W",
        "PM_N",
        "PM_XS",
        "PM_L",
        "PM_I",
        "(nil)",
        ":",
        "::",
        "4294967296",
        "é",
        "\t",
        "I",
        "M",
        "==",
        ",",
    ];
    for round in 0..3000 {
        let n = rng.below(9);
        let mut line = String::new();
        for k in 0..n {
            if k > 0 {
                line.push(if rng.one_in(3) { ':' } else { ' ' });
            }
            if rng.one_in(10) {
                line.push_str(&random_word(&mut rng));
            } else {
                let w: &&str = rng.pick(&words);
                line.push_str(w);
            }
        }
        let _ = text::parse_line(&line);
        let _ = whisper::parse_line(&line);
        let input = format!("{line}\n{line}\n");
        drain_all_text_formats(input.as_bytes(), round);
    }
}
