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
//! * [`open`]: opens a file of any supported format, guessing from content.
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
mod record;
pub mod text;
pub mod whisper;

pub use error::{Error, ErrorKind};
pub use record::{Op, Record, Space};

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The formats [`open`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// pmlab's binary format (`.pmt`).
    Binary,
    /// pmlab's text format.
    Text,
    /// The text traces of the WHISPER suite ([`whisper`]).
    Whisper,
}

impl Format {
    /// Names accepted on command lines.
    pub const NAMES: &'static str = "pmt, text, whisper";

    /// Parse a format name as given on a command line.
    pub fn from_name(name: &str) -> Result<Format, Error> {
        match name {
            "pmt" | "binary" => Ok(Format::Binary),
            "text" | "txt" => Ok(Format::Text),
            "whisper" => Ok(Format::Whisper),
            _ => Err(Error::new(
                ErrorKind::Usage,
                format!(
                    "unknown trace format '{name}': expected one of {}",
                    Format::NAMES
                ),
            )),
        }
    }
}

/// A boxed stream of records from any format.
pub type RecordStream = Box<dyn Iterator<Item = Result<Record, Error>>>;

/// Open a trace file. With `format` None the format is recognised from the
/// file's first bytes (the binary magic, or else text).
pub fn open(path: &Path, format: Option<Format>) -> Result<RecordStream, Error> {
    let file = File::open(path).map_err(|e| Error::io(path.display().to_string(), e))?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let format = match format {
        Some(f) => f,
        None => {
            let head = reader
                .fill_buf()
                .map_err(|e| Error::io(path.display().to_string(), e))?;
            if head.starts_with(binary::MAGIC) {
                Format::Binary
            } else {
                Format::Text
            }
        }
    };
    let name = path.display().to_string();
    Ok(match format {
        Format::Binary => Box::new(binary::Reader::new(reader)?.with_name(name)),
        Format::Text => Box::new(text::Reader::new(reader).with_name(name)),
        Format::Whisper => Box::new(whisper::Reader::new(reader).with_name(name)),
    })
}

/// Read all of `input` as a binary trace (convenience for tests and tools).
pub fn read_all_binary<R: Read>(input: R) -> Result<Vec<Record>, Error> {
    binary::Reader::new(input)?.collect()
}
