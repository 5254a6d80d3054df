//! Deterministic mutation fuzzing of the trace readers and the analysis,
//! on stable Rust, in the normal test suite (the cargo-fuzz target in
//! `fuzz/` explores further on nightly). Every input must give records or a
//! clean error (binary errors name an offset), never a panic or a hang.

use pmlab_trace::analyze::{Analyzer, Config};
use pmlab_trace::{binary, text, whisper, ErrorKind, Op, Record};

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn seed_trace() -> Vec<u8> {
    let mut w = binary::Writer::with_meta(
        Vec::new(),
        &[("producer", "fuzz"), ("stores", "flushes-only")],
    )
    .unwrap();
    let mut rng = Rng(7);
    for i in 0..300u64 {
        let op = Op::ALL[rng.below(Op::ALL.len())];
        let addr = if rng.below(2) == 0 {
            0x7f00_0000_0000 + rng.below(1 << 16) as u64 * 8
        } else {
            rng.next()
        };
        let size = [0u32, 8, 64, 64, 4096][rng.below(5)];
        let mut r = Record::new(
            i * 10 + rng.below(20) as u64,
            rng.below(4) as u32,
            op,
            addr,
            size,
        );
        if rng.below(8) == 0 {
            r = r.dram();
        }
        w.write(&r).unwrap();
    }
    w.finish().unwrap()
}

/// Read all of `bytes`; feed the records to the analysis; check errors.
fn exercise(bytes: &[u8]) {
    let Ok(reader) = binary::Reader::new(bytes) else {
        return;
    };
    let mut a = Analyzer::new(Config {
        window_ns: 1000,
        flushes_as_stores: true,
    });
    let mut n = 0usize;
    for r in reader {
        match r {
            Ok(rec) => {
                // Mutated sizes reach 4 GiB; the analysis clamps them at
                // 16 MiB (tested in analyze's unit tests) but that is still
                // slow for thousands of rounds, so keep them out here.
                if rec.size <= 1 << 16 {
                    a.push(&rec);
                }
                n += 1;
                assert!(n <= bytes.len(), "more records than bytes");
            }
            Err(e) => {
                assert!(
                    matches!(e.kind(), ErrorKind::Malformed | ErrorKind::Truncated),
                    "{e}"
                );
                assert!(e.to_string().contains("offset"), "{e}");
            }
        }
    }
    let _ = a.finish();
}

#[test]
fn mutated_binary_traces_never_panic() {
    let base = seed_trace();
    let mut rng = Rng(2026);
    for round in 0..3000 {
        let mut b = base.clone();
        match round % 5 {
            0 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(b.len());
                    b[i] ^= 1 << rng.below(8);
                }
            }
            1 => {
                let i = 16 + rng.below(b.len() - 16);
                b[i] = rng.next() as u8;
            }
            2 => {
                let at = rng.below(b.len());
                let len = rng.below(40);
                let junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                b.splice(at..at, junk);
            }
            3 => {
                let at = rng.below(b.len());
                let end = (at + rng.below(40)).min(b.len());
                b.drain(at..end);
            }
            _ => {
                // Runs of continuation bytes: overlong varints.
                let at = 20 + rng.below(b.len() - 20);
                for j in at..(at + 12).min(b.len()) {
                    b[j] = 0xff;
                }
            }
        }
        exercise(&b);
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

#[test]
fn random_text_and_whisper_lines_never_panic() {
    let mut rng = Rng(99);
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
    ];
    for _ in 0..5000 {
        let n = rng.below(9);
        let mut line = String::new();
        for k in 0..n {
            if k > 0 {
                line.push(if rng.below(3) == 0 { ':' } else { ' ' });
            }
            line.push_str(words[rng.below(words.len())]);
        }
        let _ = text::parse_line(&line);
        let _ = whisper::parse_line(&line);
        let input = format!("{line}\n{line}\n");
        for r in text::Reader::new(input.as_bytes()) {
            if let Err(e) = r {
                assert!(e.to_string().starts_with("trace:"), "{e}");
            }
        }
        for r in whisper::Reader::new(input.as_bytes()) {
            if let Err(e) = r {
                assert!(e.to_string().starts_with("trace:"), "{e}");
            }
        }
    }
}
