//! Annotations: the records of format version 2 that describe the run
//! rather than one memory operation (codes 13-17 of the binary format).
//!
//! They carry what a correctness checker needs beside the operations: the
//! call site of the stores and flushes that follow ([`Note::Site`]), the
//! ranges a transaction logged ([`Note::TxAdd`]), the bytes a store wrote
//! or a flush wrote back ([`Note::Data`]), the loaded objects for
//! symbolising call sites ([`Note::Module`]) and the persistent-memory
//! mappings with their backing files ([`Note::PmRange`]).
//!
//! The plain record iterators of [`crate::binary::Reader`] skip them, so
//! analyses and the simulator see version 2 traces as they saw version 1;
//! [`crate::binary::Reader::next_event`] returns them.

use crate::Record;

/// Binary codes of the annotations (after the 13 operation codes).
pub mod code {
    /// [`super::Note::Site`].
    pub const SITE: u8 = 13;
    /// [`super::Note::TxAdd`].
    pub const TXADD: u8 = 14;
    /// [`super::Note::Data`].
    pub const DATA: u8 = 15;
    /// [`super::Note::Module`].
    pub const MODULE: u8 = 16;
    /// [`super::Note::PmRange`].
    pub const PMRANGE: u8 = 17;
}

/// The longest payload one annotation may carry (data bytes or a path).
pub const MAX_PAYLOAD: usize = 16 << 10;

/// One annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// The stores and flushes of this thread that follow were made by the
    /// instruction (or the call) that returns to `ip`, until the next
    /// `Site` of the thread.
    Site {
        /// A return address in the program's address space.
        ip: u64,
    },
    /// The thread's open transaction logged `[addr, addr+len)`: stores
    /// there inside the transaction are undone or redone on a crash.
    TxAdd {
        /// First byte.
        addr: u64,
        /// Bytes.
        len: u64,
    },
    /// The bytes at `addr` were these (the payload) just after the
    /// thread's previous store or flush record: the data it wrote, or the
    /// line it wrote back.
    Data {
        /// First byte.
        addr: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// A loaded object: addresses in `[start, start+len)` belong to the
    /// file `path`, whose own (link-time) addresses are those minus `bias`.
    Module {
        /// Lowest mapped address of the object.
        start: u64,
        /// Extent of its mapped segments.
        len: u64,
        /// Load bias (0 for a non-PIE executable).
        bias: u64,
        /// The file.
        path: String,
    },
    /// A persistent-memory mapping: `[base, base+len)`, backed by bytes
    /// `[file_offset, file_offset+len)` of `path` (empty: anonymous).
    /// With `init`, the file's contents before the program mapped it were
    /// saved beside the trace as `<trace>.init.<index>` (the index of this
    /// note among the trace's `PmRange` notes, from 0); without, the file
    /// was new (zeros).
    PmRange {
        /// First mapped byte.
        base: u64,
        /// Bytes mapped.
        len: u64,
        /// Offset in the file of `base`.
        file_offset: u64,
        /// The backing file, or empty.
        path: String,
        /// Initial contents saved beside the trace.
        init: bool,
    },
}

impl Note {
    /// The binary code.
    pub fn code(&self) -> u8 {
        match self {
            Note::Site { .. } => code::SITE,
            Note::TxAdd { .. } => code::TXADD,
            Note::Data { .. } => code::DATA,
            Note::Module { .. } => code::MODULE,
            Note::PmRange { .. } => code::PMRANGE,
        }
    }
}

/// What [`crate::binary::Reader::next_event`] returns: an operation or an
/// annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A memory operation, fence or marker.
    Record(Record),
    /// An annotation of thread `thread` at `time_ns`.
    Note {
        /// Nanoseconds since the start of the trace.
        time_ns: u64,
        /// The thread.
        thread: u32,
        /// What it says.
        note: Note,
    },
}
