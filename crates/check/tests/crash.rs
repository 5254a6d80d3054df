//! `pmlab_check::crash` on hand-made traces: how many images each crash
//! point gives, and the first failing image of a recovery that trusts a
//! flag persisted before its data.

use pmlab_check::crash::{self, Options, Points};
use pmlab_trace::binary::Writer;
use pmlab_trace::ext::Note;
use pmlab_trace::{Op, Record};
use std::path::{Path, PathBuf};
use std::time::Duration;

const BASE: u64 = 0x7f00_0000_0000;

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pmlab-check-crash-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A store of `byte` at pool offset `off` (8 bytes), with its data.
fn store(w: &mut Writer<Vec<u8>>, t: &mut u64, off: u64, byte: u8) {
    *t += 1;
    w.write(&Record::new(*t, 0, Op::Write, BASE + off, 8))
        .unwrap();
    w.write_note(
        *t,
        0,
        &Note::Data {
            addr: BASE + off,
            bytes: vec![byte; 8],
        },
    )
    .unwrap();
}

fn persist(w: &mut Writer<Vec<u8>>, t: &mut u64, off: u64, byte: u8) {
    *t += 1;
    w.write(&Record::new(*t, 0, Op::Clwb, BASE + off, 64))
        .unwrap();
    let mut line = vec![0u8; 64];
    line[..8].fill(byte);
    w.write_note(
        *t,
        0,
        &Note::Data {
            addr: BASE + off,
            bytes: line,
        },
    )
    .unwrap();
    *t += 1;
    w.write(&Record::new(*t, 0, Op::SFence, 0, 0)).unwrap();
}

/// Data at offset 64, flag at offset 0: `flag_first` persists the flag
/// before the data (the bug).
fn trace(d: &Path, flag_first: bool) -> PathBuf {
    let mut w = Writer::new(Vec::new()).unwrap();
    let pool = d.join("pool");
    w.write_note(
        0,
        0,
        &Note::PmRange {
            base: BASE,
            len: 4096,
            file_offset: 0,
            path: pool.display().to_string(),
            init: false,
        },
    )
    .unwrap();
    let mut t = 0;
    if flag_first {
        store(&mut w, &mut t, 0, 1);
        persist(&mut w, &mut t, 0, 1);
        store(&mut w, &mut t, 64, 7);
        persist(&mut w, &mut t, 64, 7);
    } else {
        store(&mut w, &mut t, 64, 7);
        persist(&mut w, &mut t, 64, 7);
        store(&mut w, &mut t, 0, 1);
        persist(&mut w, &mut t, 0, 1);
    }
    let p = d.join("t.pmt");
    std::fs::write(&p, w.finish().unwrap()).unwrap();
    p
}

/// Consistent unless the flag (byte 0) is set and the data (byte 64) is not.
const CHECK: &str =
    "[ \"$(od -An -tu1 -j0 -N1 {})\" -eq 0 ] || [ \"$(od -An -tu1 -j64 -N1 {})\" -ne 0 ]";

fn opts(d: &Path, check: &str) -> Options {
    Options {
        budget: 100,
        seed: 1,
        points: Points::Fences,
        check: check.into(),
        timeout: Duration::from_secs(10),
        dir: d.join("images"),
    }
}

#[test]
fn every_point_gives_two_images_per_pending_line() {
    let d = dir("count");
    let t = trace(&d, false);
    let out = crash::run(&t, &opts(&d, "true")).unwrap();
    // Fence 1: the data pending (2 images); fence 2: the flag (2); end: 1.
    assert_eq!(out.points, 3);
    assert_eq!(out.images, 5);
    assert!(out.failure.is_none());
    let out = crash::run(&t, &opts(&d, CHECK)).unwrap();
    assert!(out.failure.is_none(), "{:?}", out.failure);
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_flag_persisted_before_its_data_fails_with_the_data_line_missing() {
    let d = dir("late");
    let t = trace(&d, true);
    let out = crash::run(&t, &opts(&d, CHECK)).unwrap();
    let f = out.failure.expect("the late data must fail the check");
    // Before the first fence the flag is pending: the image where it
    // reached PM (the data is not written yet) fails.
    assert_eq!(f.point, 0);
    assert!(f.lost.is_empty());
    assert_eq!(f.kept, vec![(0, BASE)]);
    let img = std::fs::read(&f.image).unwrap();
    assert_eq!((img[0], img[64]), (1, 0));
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_trace_without_data_or_pool_is_refused() {
    let d = dir("refuse");
    let mut w = Writer::new(Vec::new()).unwrap();
    w.write(&Record::new(0, 0, Op::SFence, 0, 0)).unwrap();
    let p = d.join("t.pmt");
    std::fs::write(&p, w.finish().unwrap()).unwrap();
    let e = crash::run(&p, &opts(&d, "true")).unwrap_err();
    assert!(e.to_string().contains("file-backed"), "{e}");
    assert!(Points::parse("0").is_err() && Points::parse("x").is_err());
    assert_eq!(Points::parse("7").unwrap(), Points::Sample(7));
    std::fs::remove_dir_all(&d).ok();
}
