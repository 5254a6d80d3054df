//! The plain text traces of DRAM simulators: one request per line, an
//! address, an operation and optionally a cycle.
//!
//! ```text
//! 0x00001f40 READ 12      # DRAMsim3: address op cycle
//! 0x00001f80 WRITE 15
//! 0x00002000 R            # Ramulator (memory trace mode): address op
//! LD 0x2040               # Ramulator 2 load/store trace: op address
//! ```
//!
//! Operations: `READ`, `RD`, `R`, `LD`, `LOAD`, `P_MEM_RD`, `P_FETCH` are
//! reads; `WRITE`, `WR`, `W`, `ST`, `STORE`, `P_MEM_WR` are writes. A cycle
//! becomes a time of one nanosecond per cycle; lines without one take the
//! previous line's time plus one. Addresses are hexadecimal (with or
//! without `0x`); every request is 64 bytes, thread 0. `#` starts a
//! comment.

use super::{next_line, parse_hex};
use crate::{Error, ErrorKind, Op, Record};
use std::io::{BufRead, Write};

fn op_of(s: &str) -> Option<Op> {
    Some(match s.to_ascii_uppercase().as_str() {
        "READ" | "RD" | "R" | "LD" | "LOAD" | "P_MEM_RD" | "P_FETCH" => Op::Read,
        "WRITE" | "WR" | "W" | "ST" | "STORE" | "P_MEM_WR" => Op::Write,
        _ => return None,
    })
}

/// Write a record as a DRAMsim3 line (`0x... READ|WRITE time`). Only reads
/// and stores have an equivalent; other records are skipped (returns false).
pub fn write_record<W: Write>(out: &mut W, r: &Record) -> std::io::Result<bool> {
    let op = match r.op {
        Op::Read => "READ",
        Op::Write | Op::NtWrite => "WRITE",
        _ => return Ok(false),
    };
    writeln!(out, "{:#010x} {op} {}", r.addr, r.time_ns)?;
    Ok(true)
}

/// Streams records from a DRAM simulator trace.
pub struct Reader<R: BufRead> {
    input: R,
    name: String,
    line: u64,
    buf: String,
    time: u64,
    failed: bool,
}

impl<R: BufRead> Reader<R> {
    /// A reader of `input`.
    pub fn new(input: R) -> Reader<R> {
        Reader {
            input,
            name: "trace".into(),
            line: 0,
            buf: String::new(),
            time: 0,
            failed: false,
        }
    }

    /// Name the input in error messages (a file path).
    pub fn with_name(mut self, name: impl Into<String>) -> Reader<R> {
        self.name = name.into();
        self
    }

    fn bad(&self, what: String) -> Error {
        Error::new(
            ErrorKind::Malformed,
            format!("{}:{}: {what}", self.name, self.line),
        )
    }

    fn read_next(&mut self) -> Result<Option<Record>, Error> {
        loop {
            if !next_line(&mut self.input, &mut self.buf, &self.name, self.line)? {
                return Ok(None);
            }
            self.line += 1;
            let l = self.buf.split('#').next().unwrap_or("").trim();
            if l.is_empty() {
                continue;
            }
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 2 || f.len() > 3 {
                return Err(self.bad(format!("expected 'ADDRESS OP [CYCLE]' or 'OP ADDRESS [CYCLE]' (2 or 3 fields), found {}", f.len())));
            }
            let (op, addr) = match (op_of(f[1]), op_of(f[0])) {
                (Some(op), _) if parse_hex(f[0]).is_some() => (op, parse_hex(f[0]).unwrap_or(0)),
                (_, Some(op)) => {
                    let a = parse_hex(f[1]).ok_or_else(|| {
                        self.bad(format!("address '{}' is not hexadecimal", f[1]))
                    })?;
                    (op, a)
                }
                (Some(_), None) => {
                    return Err(self.bad(format!("address '{}' is not hexadecimal", f[0])))
                }
                (None, None) => {
                    return Err(self.bad(format!(
                        "unknown operation in '{l}': expected READ/WRITE, R/W, RD/WR or LD/ST"
                    )))
                }
            };
            let time = match f.get(2) {
                Some(c) => c
                    .parse::<u64>()
                    .map_err(|_| self.bad(format!("cycle '{c}' is not a whole number")))?,
                None => {
                    if self.line > 1 {
                        self.time + 1
                    } else {
                        0
                    }
                }
            };
            self.time = time;
            return Ok(Some(Record::new(time, 0, op, addr & !63, 64)));
        }
    }
}

crate::text::stop_after_first_error!(Reader, BufRead, read_next);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_three_dialects() {
        let text = "# comment\n0x1f40 READ 12\n0x1f80 WRITE 15\n2000 R\nLD 0x2040\nST 0x2080 40\n";
        let recs: Vec<Record> = Reader::new(text.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        let got: Vec<(u64, Op, u64)> = recs.iter().map(|r| (r.time_ns, r.op, r.addr)).collect();
        assert_eq!(
            got,
            [
                (12, Op::Read, 0x1f40),
                (15, Op::Write, 0x1f80),
                (16, Op::Read, 0x2000),
                (17, Op::Read, 0x2040),
                (40, Op::Write, 0x2080)
            ]
        );
    }

    #[test]
    fn round_trips_through_the_writer() {
        let mut out = Vec::new();
        assert!(write_record(&mut out, &Record::new(7, 0, Op::NtWrite, 0x40, 64)).unwrap());
        assert!(!write_record(&mut out, &Record::new(8, 0, Op::SFence, 0, 0)).unwrap());
        let recs: Vec<Record> = Reader::new(&out[..]).collect::<Result<_, _>>().unwrap();
        assert_eq!(recs, [Record::new(7, 0, Op::Write, 0x40, 64)]);
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let err = Reader::new("0x10 READ 1\n0x20 FETCHX 2\n".as_bytes())
            .with_name("d.trc")
            .find_map(|r| r.err())
            .unwrap();
        assert!(
            err.to_string().starts_with("d.trc:2: unknown operation"),
            "{err}"
        );
        let err = Reader::new("0x10 READ soon\n".as_bytes())
            .find_map(|r| r.err())
            .unwrap();
        assert!(err.to_string().contains(":1: cycle 'soon'"), "{err}");
        let err = Reader::new("0x10\n".as_bytes())
            .find_map(|r| r.err())
            .unwrap();
        assert!(err.to_string().contains("2 or 3 fields"), "{err}");
        let err = Reader::new("READ zz\n".as_bytes())
            .find_map(|r| r.err())
            .unwrap();
        assert!(err.to_string().contains("address 'zz'"), "{err}");
    }
}
