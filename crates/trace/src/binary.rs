//! The binary trace format, `.pmt`, version 1.
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

use crate::{Error, ErrorKind, Op, Record, Space};
use std::io::{self, Read, Write};

/// The first eight bytes of every binary trace.
pub const MAGIC: &[u8; 8] = b"PMLABTRC";
/// The version this build writes and reads.
pub const VERSION: u16 = 1;

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

    fn flush_buf(&mut self) -> Result<(), Error> {
        self.inner
            .write_all(&self.buf)
            .map_err(|e| Error::io("writing trace", e))?;
        self.buf.clear();
        Ok(())
    }

    /// Records written so far.
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
        if version != VERSION {
            return Err(Error::new(
                ErrorKind::Version,
                format!("trace format version {version} is not supported by this build (it reads version {VERSION})"),
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
            buf: vec![0u8; 1 << 16].into_boxed_slice(),
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
        })
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
        if self.eof {
            return Ok(());
        }
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        while self.end < MAX_RECORD && !self.eof {
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
        if self.end - self.pos < MAX_RECORD {
            self.refill()?;
            if self.pos == self.end {
                return Ok(None);
            }
        }
        let start = self.base + self.pos as u64;
        let tag = self.buf[self.pos];
        self.pos += 1;
        let op = Op::from_code(tag & TAG_OP_MASK).ok_or_else(|| {
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
        Ok(Some(Record {
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
        }))
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
        }
    }
}
