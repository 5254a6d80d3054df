//! The example of docs/trace-format.md, byte for byte.

use pmlab_trace::{binary, ext::Note, Op, Record};

#[test]
fn documented_example_encodes_as_written() {
    let mut w = binary::Writer::new(Vec::new()).unwrap();
    w.write(&Record::new(0, 0, Op::TxBegin, 7, 0)).unwrap();
    w.write(&Record::new(5, 0, Op::Write, 0x1000, 64)).unwrap();
    w.write(&Record::new(9, 0, Op::SFence, 0, 0)).unwrap();
    w.write_note(9, 0, &Note::Site { ip: 0x1234 }).unwrap();
    let bytes = w.finish().unwrap();
    assert_eq!(&bytes[..8], b"PMLABTRC");
    assert_eq!(&bytes[8..16], &[2, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        &bytes[16..],
        &[
            0x09, 0x00, 0x00, 0x07, 0x00, 0xc1, 0x0a, 0x80, 0x40, 0xc6, 0x08, 0x8d, 0x00, 0xb4,
            0x24
        ]
    );
}
