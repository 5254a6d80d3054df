//! Write a large synthetic trace for `bench/check-speed.sh`: N operations
//! from 4 threads, each thread storing to lines of a 64 MiB region, flushing
//! and fencing them (a few stores are left unflushed so the checker has
//! findings to group), with a transaction (logged range, stores, commit)
//! every 64 operations.
//!
//! Usage: cargo run --release -p pmlab-check --example gen_trace -- OUT.pmt N

use pmlab_trace::binary::Writer;
use pmlab_trace::ext::Note;
use pmlab_trace::{Op, Record};
use std::io::BufWriter;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: gen_trace OUT.pmt N");
        std::process::exit(2);
    }
    let n: u64 = match args[2].parse() {
        Ok(n) => n,
        Err(_) => {
            eprintln!("gen_trace: N '{}' is not a count", args[2]);
            std::process::exit(2);
        }
    };
    let f = match std::fs::File::create(&args[1]) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("gen_trace: cannot create {}: {e}", args[1]);
            std::process::exit(2);
        }
    };
    let meta = [("producer", "gen_trace"), ("stores", "instrumented")];
    let mut w = Writer::with_meta(BufWriter::with_capacity(1 << 20, f), &meta).unwrap();
    let base = 0x7f00_0000_0000u64;
    w.write_note(
        0,
        0,
        &Note::PmRange {
            base,
            len: 64 << 20,
            file_offset: 0,
            path: String::new(),
            init: false,
        },
    )
    .unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut written = 0u64;
    let mut t = 0u64;
    while written < n {
        let th = (rnd() % 4) as u32;
        let line = base + (rnd() % (1 << 20)) * 64;
        let tx = rnd() % 64 == 0;
        let mut rec = |w: &mut Writer<_>, op, a, s| {
            t += 3;
            w.write(&Record::new(t, th, op, a, s)).unwrap();
            written += 1;
        };
        if tx {
            rec(&mut w, Op::TxBegin, 1, 0);
            w.write_note(
                0,
                th,
                &Note::TxAdd {
                    addr: line,
                    len: 64,
                },
            )
            .unwrap();
        }
        for k in 0..3 {
            rec(&mut w, Op::Write, line + k * 8, 8);
        }
        if rnd() % 1000 != 0 {
            rec(&mut w, Op::Clwb, line, 64);
            rec(&mut w, Op::SFence, 0, 0);
        }
        if tx {
            rec(&mut w, Op::TxEnd, 1, 0);
        }
    }
    w.finish().unwrap();
    eprintln!("gen_trace: {written} records in {}", args[1]);
}
