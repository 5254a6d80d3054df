//! The binary trace format, `.pmt`, version 2 (reads 1 and 2).
//!
//! Layout (all integers little-endian; the full description is in
//! `docs/trace-format.md`):
//!
//! ```text
//! header:  "PMLABTRC" | version: u16 | flags: u16 | meta_len: u32 | meta: meta_len bytes of UTF-8 "key=value\n"
//! record:  tag: u8 | dtime: zigzag varint | [thread: varint] | [addr] | [size: varint]
//! tag:     bits 0-4 op code, bit 5 DRAM, bit 6 compact, bit 7 same thread as previous record
//! ```
//!
//! For addressed operations (accesses, flushes, user-data annotations) the
//! address is a zigzag varint delta from the previous addressed record and
//! "compact" means the size is 64 (no size field). For fences and markers
//! "compact" means address and size are both 0 (no fields); otherwise the
//! address and size follow as plain varints. A typical record takes 3 to 5
//! bytes. The file ends at a record boundary; there is no footer, so a trace
//! cut short by a crash is readable up to its last whole record.
//!
//! Version 2 adds annotations (codes 13-17, [`crate::ext`]): the same tag,
//! time and thread, then their own fields (varints, and a length-prefixed
//! payload for data and paths). The record iterator skips them;
//! [`Reader::next_event`] returns them.

use crate::ext::{code, Event, Note, MAX_PAYLOAD};
use crate::{Error, ErrorKind, Op, Record, Space};
use std::io::{self, Read, Write};

/// The first eight bytes of every binary trace.
pub const MAGIC: &[u8; 8] = b"PMLABTRC";
/// The version this build writes (it reads this one and 1).
pub const VERSION: u16 = 2;
/// The oldest version this build reads.
pub const MIN_VERSION: u16 = 1;

const TAG_OP_MASK: u8 = 0x1f;
const TAG_DRAM: u8 = 1 << 5;
const TAG_COMPACT: u8 = 1 << 6;
const TAG_SAME_THREAD: u8 = 1 << 7;
/// The longest encoding of one record: tag, three 10-byte varints, one 5-byte.
const MAX_RECORD: usize = 1 + 10 + 5 + 10 + 10;

fn addressed(op: Op) -> bool {
    op.is_access() || op.is_flush() || op == Op::UserData
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Writes records in the binary format. Buffers internally; call
/// [`Writer::finish`] to flush and get the inner writer back (dropping
/// the writer without `finish` loses the buffered tail).
pub struct Writer<W: Write> {
    inner: W,
    buf: Vec<u8>,
    prev_time: u64,
    prev_thread: Option<u32>,
    prev_addr: u64,
    records: u64,
    notes: u64,
}

impl<W: Write> Writer<W> {
    /// Start a trace with no metadata.
    pub fn new(inner: W) -> Result<Writer<W>, Error> {
        Writer::with_meta(inner, &[])
    }

    /// Start a trace whose header carries `meta` as key=value pairs (keys
    /// and values must not contain `=` or newlines).
    pub fn with_meta(mut inner: W, meta: &[(&str, &str)]) -> Result<Writer<W>, Error> {
        let mut text = String::new();
        for (k, v) in meta {
            if k.contains(['=', '\n']) || v.contains('\n') {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!("trace metadata key '{k}' or its value contains '=' or a newline"),
                ));
            }
            text.push_str(k);
            text.push('=');
            text.push_str(v);
            text.push('\n');
        }
        let mut head = Vec::with_capacity(16 + text.len());
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&0u16.to_le_bytes());
        head.extend_from_slice(&(text.len() as u32).to_le_bytes());
        head.extend_from_slice(text.as_bytes());
        inner
            .write_all(&head)
            .map_err(|e| Error::io("writing trace header", e))?;
        Ok(Writer {
            inner,
            buf: Vec::with_capacity(1 << 16),
            prev_time: 0,
            prev_thread: None,
            prev_addr: 0,
            records: 0,
            notes: 0,
        })
    }

    /// Append one record.
    pub fn write(&mut self, r: &Record) -> Result<(), Error> {
        let mut tag = r.op.code();
        if r.space == Space::Dram {
            tag |= TAG_DRAM;
        }
        let same_thread = self.prev_thread == Some(r.thread);
        if same_thread {
            tag |= TAG_SAME_THREAD;
        }
        let is_addr = addressed(r.op);
        let compact = if is_addr {
            r.size == 64
        } else {
            r.addr == 0 && r.size == 0
        };
        if compact {
            tag |= TAG_COMPACT;
        }
        self.buf.push(tag);
        put_varint(
            &mut self.buf,
            zigzag(r.time_ns.wrapping_sub(self.prev_time) as i64),
        );
        self.prev_time = r.time_ns;
        if !same_thread {
            put_varint(&mut self.buf, r.thread as u64);
            self.prev_thread = Some(r.thread);
        }
        if is_addr {
            put_varint(
                &mut self.buf,
                zigzag(r.addr.wrapping_sub(self.prev_addr) as i64),
            );
            self.prev_addr = r.addr;
            if !compact {
                put_varint(&mut self.buf, r.size as u64);
            }
        } else if !compact {
            put_varint(&mut self.buf, r.addr);
            put_varint(&mut self.buf, r.size as u64);
        }
        self.records += 1;
        if self.buf.len() >= (1 << 16) - MAX_RECORD {
            self.flush_buf()?;
        }
        Ok(())
    }

    /// Append one annotation of `thread` at `time_ns` (format version 2).
    /// Payloads (data bytes, paths) longer than [`MAX_PAYLOAD`] are an
    /// error: split data into several notes.
    pub fn write_note(&mut self, time_ns: u64, thread: u32, note: &Note) -> Result<(), Error> {
        let mut tag = note.code();
        let same_thread = self.prev_thread == Some(thread);
        if same_thread {
            tag |= TAG_SAME_THREAD;
        }
        let payload_len = match note {
            Note::Data { bytes, .. } => bytes.len(),
            Note::Module { path, .. } | Note::PmRange { path, .. } => path.len(),
            _ => 0,
        };
        if payload_len > MAX_PAYLOAD {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("an annotation's payload of {payload_len} bytes exceeds the limit of {MAX_PAYLOAD}: split it"),
            ));
        }
        self.buf.push(tag);
        put_varint(
            &mut self.buf,
            zigzag(time_ns.wrapping_sub(self.prev_time) as i64),
        );
        self.prev_time = time_ns;
        if !same_thread {
            put_varint(&mut self.buf, thread as u64);
            self.prev_thread = Some(thread);
        }
        match note {
            Note::Site { ip } => put_varint(&mut self.buf, *ip),
            Note::TxAdd { addr, len } => {
                put_varint(&mut self.buf, *addr);
                put_varint(&mut self.buf, *len);
            }
            Note::Data { addr, bytes } => {
                put_varint(&mut self.buf, *addr);
                put_varint(&mut self.buf, bytes.len() as u64);
                self.buf.extend_from_slice(bytes);
            }
            Note::Module {
                start,
                len,
                bias,
                path,
            } => {
                put_varint(&mut self.buf, *start);
                put_varint(&mut self.buf, *len);
                put_varint(&mut self.buf, *bias);
                put_varint(&mut self.buf, path.len() as u64);
                self.buf.extend_from_slice(path.as_bytes());
            }
            Note::PmRange {
                base,
                len,
                file_offset,
                path,
                init,
            } => {
                put_varint(&mut self.buf, *base);
                put_varint(&mut self.buf, *len);
                put_varint(&mut self.buf, *file_offset);
                put_varint(&mut self.buf, *init as u64);
                put_varint(&mut self.buf, path.len() as u64);
                self.buf.extend_from_slice(path.as_bytes());
            }
        }
        self.notes += 1;
        if self.buf.len() >= (1 << 16) - MAX_RECORD {
            self.flush_buf()?;
        }
        Ok(())
    }

    /// Annotations written so far.
    pub fn notes(&self) -> u64 {
        self.notes
    }

    fn flush_buf(&mut self) -> Result<(), Error> {
        self.inner
            .write_all(&self.buf)
            .map_err(|e| Error::io("writing trace", e))?;
        self.buf.clear();
        Ok(())
    }

    /// Records written so far (annotations not included).
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Write out buffered records without finishing the trace.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.flush_buf()?;
        self.inner
            .flush()
            .map_err(|e| Error::io("flushing trace", e))
    }

    /// Flush everything and return the inner writer.
    pub fn finish(mut self) -> Result<W, Error> {
        self.flush()?;
        Ok(self.inner)
    }
}

/// Streams records from a binary trace, in constant memory.
pub struct Reader<R: Read> {
    inner: R,
    name: String,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    eof: bool,
    /// Byte offset in the file of `buf[0]`.
    base: u64,
    prev_time: u64,
    prev_thread: u32,
    have_thread: bool,
    prev_addr: u64,
    meta: Vec<(String, String)>,
    failed: bool,
    version: u16,
}

impl<R: Read> Reader<R> {
    /// Read and check the header.
    pub fn new(mut inner: R) -> Result<Reader<R>, Error> {
        let mut head = [0u8; 16];
        read_exact_or(&mut inner, &mut head, "trace", 0)?;
        if &head[..8] != MAGIC {
            return Err(Error::new(
                ErrorKind::Malformed,
                "not a pmlab binary trace (bad magic at offset 0): convert it or pass --trace-format",
            ));
        }
        let version = u16::from_le_bytes([head[8], head[9]]);
        if !(MIN_VERSION..=VERSION).contains(&version) {
            return Err(Error::new(
                ErrorKind::Version,
                format!("trace format version {version} is not supported by this build (it reads versions {MIN_VERSION} to {VERSION})"),
            ));
        }
        let meta_len = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as usize;
        if meta_len > 1 << 20 {
            return Err(Error::new(
                ErrorKind::Malformed,
                format!("trace header claims {meta_len} bytes of metadata at offset 12 (limit 1 MiB): the file is corrupt"),
            ));
        }
        let mut meta_bytes = vec![0u8; meta_len];
        read_exact_or(&mut inner, &mut meta_bytes, "trace", 16)?;
        let text = String::from_utf8(meta_bytes).map_err(|_| {
            Error::new(
                ErrorKind::Malformed,
                "trace metadata at offset 16 is not UTF-8: the file is corrupt",
            )
        })?;
        let meta = text
            .lines()
            .filter_map(|l| {
                l.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        Ok(Reader {
            inner,
            name: "trace".to_string(),
            pos: 0,
            end: 0,
            eof: false,
            base: 16 + meta_len as u64,
            prev_time: 0,
            prev_thread: 0,
            have_thread: false,
            prev_addr: 0,
            meta,
            failed: false,
            version,
            buf: vec![0u8; 1 << 17].into_boxed_slice(),
        })
    }

    /// The format version in the header (1 or 2).
    pub fn version(&self) -> u16 {
        self.version
    }

    /// The next operation or annotation, in file order; `Ok(None)` at the
    /// end. Unlike the iterator, annotations are returned.
    pub fn next_event(&mut self) -> Result<Option<Event>, Error> {
        if self.failed {
            return Ok(None);
        }
        let r = self.decode_any();
        self.failed = r.is_err();
        r
    }

    /// Name the input in error messages (a file path).
    pub fn with_name(mut self, name: impl Into<String>) -> Reader<R> {
        self.name = name.into();
        self
    }

    /// The header's metadata.
    pub fn meta(&self) -> &[(String, String)] {
        &self.meta
    }

    /// The value of metadata key `key`.
    pub fn meta_value(&self, key: &str) -> Option<&str> {
        self.meta
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn refill(&mut self) -> Result<(), Error> {
        self.refill_to(MAX_RECORD)
    }

    /// Make at least `want` bytes available after `pos` unless the input
    /// ends first.
    fn refill_to(&mut self, want: usize) -> Result<(), Error> {
        if self.eof {
            return Ok(());
        }
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        while self.end < want && !self.eof {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(&self.name, e)),
            }
        }
        Ok(())
    }

    fn varint(&mut self, start: u64) -> Result<u64, Error> {
        let mut v: u64 = 0;
        let mut shift = 0;
        loop {
            if self.pos >= self.end {
                return Err(Error::new(
                    ErrorKind::Truncated,
                    format!(
                        "{}: trace ends inside the record at offset {start}",
                        self.name
                    ),
                ));
            }
            let b = self.buf[self.pos];
            self.pos += 1;
            if shift == 63 && b > 1 {
                return Err(Error::new(
                    ErrorKind::Malformed,
                    format!(
                        "{}: integer overflow in the record at offset {start}",
                        self.name
                    ),
                ));
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
        }
    }

    fn decode(&mut self) -> Result<Option<Record>, Error> {
        loop {
            match self.decode_any()? {
                None => return Ok(None),
                Some(Event::Record(r)) => return Ok(Some(r)),
                Some(Event::Note { .. }) => {}
            }
        }
    }

    fn payload(&mut self, start: u64, what: &str) -> Result<Vec<u8>, Error> {
        let len = self.varint(start)?;
        if len > MAX_PAYLOAD as u64 {
            return Err(Error::new(
                ErrorKind::Malformed,
                format!(
                    "{}: {what} of {len} bytes (limit {MAX_PAYLOAD}) in the record at offset {start}",
                    self.name
                ),
            ));
        }
        let len = len as usize;
        if self.end - self.pos < len {
            self.refill_to(len)?;
            if self.end - self.pos < len {
                return Err(Error::new(
                    ErrorKind::Truncated,
                    format!(
                        "{}: trace ends inside the record at offset {start}",
                        self.name
                    ),
                ));
            }
        }
        let v = self.buf[self.pos..self.pos + len].to_vec();
        self.pos += len;
        Ok(v)
    }

    fn path(&mut self, start: u64) -> Result<String, Error> {
        let bytes = self.payload(start, "a path")?;
        String::from_utf8(bytes).map_err(|_| {
            Error::new(
                ErrorKind::Malformed,
                format!(
                    "{}: a path that is not UTF-8 in the record at offset {start}",
                    self.name
                ),
            )
        })
    }

    fn note(&mut self, code: u8, start: u64) -> Result<Note, Error> {
        Ok(match code {
            code::SITE => Note::Site {
                ip: self.varint(start)?,
            },
            code::TXADD => Note::TxAdd {
                addr: self.varint(start)?,
                len: self.varint(start)?,
            },
            code::DATA => {
                let addr = self.varint(start)?;
                Note::Data {
                    addr,
                    bytes: self.payload(start, "data")?,
                }
            }
            code::MODULE => Note::Module {
                start: self.varint(start)?,
                len: self.varint(start)?,
                bias: self.varint(start)?,
                path: self.path(start)?,
            },
            _ => Note::PmRange {
                base: self.varint(start)?,
                len: self.varint(start)?,
                file_offset: self.varint(start)?,
                init: self.varint(start)? != 0,
                path: self.path(start)?,
            },
        })
    }

    fn decode_any(&mut self) -> Result<Option<Event>, Error> {
        if self.end - self.pos < MAX_RECORD {
            self.refill()?;
            if self.pos == self.end {
                return Ok(None);
            }
        }
        let start = self.base + self.pos as u64;
        let tag = self.buf[self.pos];
        self.pos += 1;
        let code = tag & TAG_OP_MASK;
        let is_note = self.version >= 2 && (code::SITE..=code::PMRANGE).contains(&code);
        let op = Op::from_code(code).or(if is_note { Some(Op::Untraced) } else { None });
        let op = op.ok_or_else(|| {
            Error::new(
                ErrorKind::Malformed,
                format!(
                    "{}: unknown operation code {} in the record at offset {start}",
                    self.name,
                    tag & TAG_OP_MASK
                ),
            )
        })?;
        let dt = unzigzag(self.varint(start)?);
        let time_ns = self.prev_time.wrapping_add(dt as u64);
        self.prev_time = time_ns;
        let thread = if tag & TAG_SAME_THREAD != 0 {
            if !self.have_thread {
                return Err(Error::new(
                    ErrorKind::Malformed,
                    format!(
                        "{}: first record at offset {start} refers to a previous thread",
                        self.name
                    ),
                ));
            }
            self.prev_thread
        } else {
            let t = self.varint(start)?;
            let t = u32::try_from(t).map_err(|_| {
                Error::new(
                    ErrorKind::Malformed,
                    format!(
                        "{}: thread id {t} out of range in the record at offset {start}",
                        self.name
                    ),
                )
            })?;
            self.prev_thread = t;
            self.have_thread = true;
            t
        };
        if is_note {
            let note = self.note(code, start)?;
            return Ok(Some(Event::Note {
                time_ns,
                thread,
                note,
            }));
        }
        let compact = tag & TAG_COMPACT != 0;
        let (addr, size) = if addressed(op) {
            let d = unzigzag(self.varint(start)?);
            let addr = self.prev_addr.wrapping_add(d as u64);
            self.prev_addr = addr;
            let size = if compact { 64 } else { self.varint(start)? };
            (addr, size)
        } else if compact {
            (0, 0)
        } else {
            let a = self.varint(start)?;
            (a, self.varint(start)?)
        };
        let size = u32::try_from(size).map_err(|_| {
            Error::new(
                ErrorKind::Malformed,
                format!(
                    "{}: size {size} out of range in the record at offset {start}",
                    self.name
                ),
            )
        })?;
        Ok(Some(Event::Record(Record {
            time_ns,
            thread,
            op,
            space: if tag & TAG_DRAM != 0 {
                Space::Dram
            } else {
                Space::Pm
            },
            addr,
            size,
        })))
    }
}

crate::text::stop_after_first_error!(Reader, Read, decode);

fn read_exact_or<R: Read>(r: &mut R, buf: &mut [u8], name: &str, offset: u64) -> Result<(), Error> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            Error::new(
                ErrorKind::Truncated,
                format!("{name}: file ends inside the header (at offset {offset}): not a complete pmlab trace"),
            )
        } else {
            Error::io(name, e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record::new(0, 0, Op::TxBegin, 7, 0),
            Record::new(5, 0, Op::Write, 0x7f00_0000_1000, 64),
            Record::new(6, 1, Op::Write, 0x7f00_0000_0040, 8),
            Record::new(4, 1, Op::Read, 0x10, 64).dram(),
            Record::new(9, 0, Op::Clwb, 0x7f00_0000_1000, 64),
            Record::new(10, 0, Op::SFence, 0, 0),
            Record::new(11, 0, Op::TxEnd, 7, 0),
            Record::new(u64::MAX, u32::MAX, Op::NtWrite, u64::MAX, u32::MAX),
            Record::new(0, 0, Op::Untraced, 1_000_000, 0),
            Record::new(1, 2, Op::OFence, 0, 0),
            Record::new(2, 2, Op::DFence, 0, 0),
            Record::new(3, 2, Op::UserData, 0x20, 24),
        ]
    }

    fn encode(records: &[Record]) -> Vec<u8> {
        let mut w = Writer::with_meta(Vec::new(), &[("producer", "test")]).unwrap();
        for r in records {
            w.write(r).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn round_trip_preserves_every_field() {
        let recs = sample();
        let bytes = encode(&recs);
        let r = Reader::new(&bytes[..]).unwrap();
        assert_eq!(r.meta_value("producer"), Some("test"));
        let back: Vec<Record> = r.collect::<Result<_, _>>().unwrap();
        assert_eq!(back, recs);
    }

    #[test]
    fn typical_records_are_small() {
        let recs: Vec<Record> = (0..1000u64)
            .map(|i| Record::new(i * 3, 0, Op::Write, 0x1000 + i * 64, 64))
            .collect();
        let bytes = encode(&recs);
        assert!(bytes.len() < 16 + 20 + 1000 * 4, "{} bytes", bytes.len());
    }

    #[test]
    fn many_records_cross_buffer_boundaries() {
        let recs: Vec<Record> = (0..200_000u64)
            .map(|i| {
                Record::new(
                    i,
                    (i % 3) as u32,
                    Op::ALL[(i % 13) as usize],
                    i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    (i % 200) as u32,
                )
            })
            .collect();
        let bytes = encode(&recs);
        let back: Vec<Record> = Reader::new(&bytes[..])
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back, recs);
    }

    #[test]
    fn truncation_is_reported_with_its_offset() {
        let bytes = encode(&sample());
        let cut = &bytes[..bytes.len() - 2];
        let results: Vec<_> = Reader::new(cut).unwrap().collect();
        let err = results.last().unwrap().as_ref().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Truncated);
        assert!(err.to_string().contains("offset"), "{err}");
        assert!(results[..results.len() - 1].iter().all(|r| r.is_ok()));
    }

    #[test]
    fn bad_magic_version_and_ops_are_rejected() {
        let e = Reader::new(&b"NOTATRACEFILE..................."[..])
            .err()
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::Malformed);
        let mut bytes = encode(&sample());
        bytes[8] = 9;
        assert_eq!(
            Reader::new(&bytes[..]).err().unwrap().kind(),
            ErrorKind::Version
        );
        let mut bytes = encode(&[]);
        bytes.push(0x1f);
        bytes.push(0);
        bytes.push(0);
        let e = Reader::new(&bytes[..])
            .unwrap()
            .next()
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("unknown operation code 31"), "{e}");
        assert_eq!(
            Reader::new(&b"PMLAB"[..]).err().unwrap().kind(),
            ErrorKind::Truncated
        );
    }

    #[test]
    fn notes_round_trip_and_the_iterator_skips_them() {
        let notes = [
            Note::Module {
                start: 0x5555_0000_0000,
                len: 0x4000,
                bias: 0x5555_0000_0000,
                path: "/bin/app".into(),
            },
            Note::PmRange {
                base: 0x7f00_0000_0000,
                len: 1 << 30,
                file_offset: 4096,
                path: "/mnt/pool".into(),
                init: true,
            },
            Note::Site {
                ip: 0x5555_0000_1234,
            },
            Note::TxAdd {
                addr: 0x7f00_0000_0040,
                len: 1 << 33,
            },
            Note::Data {
                addr: 0x7f00_0000_0040,
                bytes: (0..=255u8).cycle().take(MAX_PAYLOAD).collect(),
            },
        ];
        let mut w = Writer::new(Vec::new()).unwrap();
        let recs = sample();
        for (i, r) in recs.iter().enumerate() {
            w.write(r).unwrap();
            let n = &notes[i % notes.len()];
            w.write_note(r.time_ns, (i % 3) as u32, n).unwrap();
        }
        assert!(w
            .write_note(
                0,
                0,
                &Note::Data {
                    addr: 0,
                    bytes: vec![0; MAX_PAYLOAD + 1]
                }
            )
            .is_err());
        let bytes = w.finish().unwrap();
        let back: Vec<Record> = Reader::new(&bytes[..])
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(back, recs, "the iterator returns the operations only");
        let mut r = Reader::new(&bytes[..]).unwrap();
        assert_eq!(r.version(), VERSION);
        let mut i = 0;
        while let Some(e) = r.next_event().unwrap() {
            let k = i / 2;
            match e {
                Event::Record(rec) => {
                    assert_eq!(i % 2, 0);
                    assert_eq!(rec, recs[k]);
                }
                Event::Note { thread, note, .. } => {
                    assert_eq!(i % 2, 1);
                    assert_eq!(thread, (k % 3) as u32);
                    assert_eq!(note, notes[k % notes.len()]);
                }
            }
            i += 1;
        }
        assert_eq!(i, recs.len() * 2);
    }

    #[test]
    fn version_1_traces_are_still_read_and_hold_no_notes() {
        let mut bytes = encode(&sample());
        bytes[8] = 1;
        let r = Reader::new(&bytes[..]).unwrap();
        assert_eq!(r.version(), 1);
        let back: Vec<Record> = r.collect::<Result<_, _>>().unwrap();
        assert_eq!(back, sample());
        // Code 13 is an annotation in version 2 and unknown in version 1.
        let mut w = Writer::new(Vec::new()).unwrap();
        w.write_note(0, 0, &Note::Site { ip: 1 }).unwrap();
        let mut bytes = w.finish().unwrap();
        bytes[8] = 1;
        let e = Reader::new(&bytes[..])
            .unwrap()
            .next()
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("unknown operation code 13"), "{e}");
    }

    #[test]
    fn garbage_never_panics() {
        let base = encode(&sample());
        let mut seed = 12345u64;
        for _ in 0..2000 {
            let mut b = base.clone();
            for _ in 0..4 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let i = 16 + 17 + (seed >> 33) as usize % (b.len() - 33);
                b[i] = (seed >> 13) as u8;
            }
            if let Ok(r) = Reader::new(&b[..]) {
                for _ in r {}
            }
            if let Ok(mut r) = Reader::new(&b[..]) {
                while let Ok(Some(_)) = r.next_event() {}
            }
        }
    }
}
