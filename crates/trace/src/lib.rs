//! The trace format of pmlab, shared by every capability.
//!
//! A trace is a stream of [`Record`]s: a timestamp, a thread, an [`Op`]
//! (load, store, non-temporal store, flush, fence, transaction marker…), an
//! address and a size. The emulator's tracer writes it, the simulator
//! replays it, the analyses read it. One format, documented in
//! `docs/trace-format.md`.
//!
//! # Brief overview
//!
//! * [`Record`], [`Op`], [`Space`]: one event.
//! * [`binary::Writer`] / [`binary::Reader`]: the compact `.pmt` encoding
//!   (versioned header, delta and varint coded records). Readers stream: memory
//!   use is constant in trace length.
//! * [`ext::Note`], [`ext::Event`]: annotations of format version 2 (call
//!   sites, logged ranges, stored data, modules, PM mappings), read with
//!   [`binary::Reader::next_event`].
//! * [`text::Reader`] / [`text::write_record`]: one record per line, for
//!   people and for hand-made tests.
//! * [`open`]: opens a file of any supported format (`.pmt`, pmlab text,
//!   valgrind lackey, DRAM-simulator lines, WHISPER), recognised from its
//!   content unless named, and returns a [`Trace`]: its [`Header`] (format,
//!   version, metadata) and its records. No caller sniffs formats itself.
//! * [`whisper::Reader`]: imports the text traces of the WHISPER suite.
//! * [`analyze::Analyzer`]: WHISPER's metrics (epochs, singletons,
//!   dependencies, amplification…) in one streaming pass.
//! * [`Error`]: every malformed input is reported with its file and line or
//!   byte offset.
//!
//! This crate depends only on `pmlab-model`; it does no simulation.
//!
//! # Example
//!
//! ```
//! use pmlab_trace::{binary, Op, Record};
//!
//! let mut buf = Vec::new();
//! let mut w = binary::Writer::new(&mut buf).unwrap();
//! w.write(&Record::new(10, 0, Op::Write, 0x1000, 64)).unwrap();
//! w.write(&Record::new(12, 0, Op::Clwb, 0x1000, 64)).unwrap();
//! w.write(&Record::new(15, 0, Op::SFence, 0, 0)).unwrap();
//! w.finish().unwrap();
//!
//! let records: Vec<Record> = binary::Reader::new(&buf[..]).unwrap()
//!     .collect::<Result<_, _>>().unwrap();
//! assert_eq!(records.len(), 3);
//! assert_eq!(records[1].op, Op::Clwb);
//! ```
#![deny(missing_docs)]

pub mod analyze;
pub mod binary;
mod error;
pub mod ext;
pub mod import;
mod open;
mod record;
pub mod text;
pub mod whisper;

pub use error::{Error, ErrorKind};
pub use open::{open, recognise, Format, Header, RecordStream, Trace, SNIFF_BYTES};
pub use record::{Op, Record, Space};

use std::io::Read;

/// Read all of `input` as a binary trace (convenience for tests and tools).
pub fn read_all_binary<R: Read>(input: R) -> Result<Vec<Record>, Error> {
    binary::Reader::new(input)?.collect()
}
