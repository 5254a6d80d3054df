//! The text trace format: one record per line.
//!
//! ```text
//! # time_ns thread op addr size [dram]
//! 0     0 TXBEGIN 7 0
//! 120   0 W       0x7f0000001000 64
//! 130   0 CLWB    0x7f0000001000 64
//! 131   0 SFENCE  0 0
//! 140   1 R       0x1000 8 dram
//! ```
//!
//! Fields are separated by blanks; addresses are hexadecimal with `0x` or
//! decimal; `#` starts a comment; blank lines are skipped. Operation names
//! are those of [`Op::name`](crate::Op::name) (case-insensitive, with a few
//! aliases such as `LOAD`/`STORE`).

use crate::{Error, ErrorKind, Op, Record, Space};
use std::io::{BufRead, Write};

/// Write one record as a line.
pub fn write_record<W: Write>(out: &mut W, r: &Record) -> std::io::Result<()> {
    let dram = if r.space == Space::Dram { " dram" } else { "" };
    writeln!(
        out,
        "{} {} {} {:#x} {}{}",
        r.time_ns,
        r.thread,
        r.op.name(),
        r.addr,
        r.size,
        dram
    )
}

/// Parse one line. `Ok(None)` for blank and comment lines.
pub fn parse_line(line: &str) -> Result<Option<Record>, String> {
    let line = line.split('#').next().unwrap_or("").trim();
    if line.is_empty() {
        return Ok(None);
    }
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 5 || fields.len() > 6 {
        return Err(format!(
            "expected 'time thread op addr size [dram]' (5 or 6 fields), found {}",
            fields.len()
        ));
    }
    let time_ns = fields[0]
        .parse::<u64>()
        .map_err(|_| format!("time '{}' is not a whole number of nanoseconds", fields[0]))?;
    let thread = fields[1]
        .parse::<u32>()
        .map_err(|_| format!("thread '{}' is not a number below 2^32", fields[1]))?;
    let op = Op::from_name(fields[2]).ok_or_else(|| {
        let names: Vec<&str> = Op::ALL.iter().map(|o| o.name()).collect();
        format!(
            "unknown operation '{}': expected one of {}",
            fields[2],
            names.join(", ")
        )
    })?;
    let addr = parse_u64(fields[3])
        .ok_or_else(|| format!("address '{}' is not a number (use 0x… for hex)", fields[3]))?;
    let size = fields[4]
        .parse::<u32>()
        .map_err(|_| format!("size '{}' is not a number below 2^32", fields[4]))?;
    let space = match fields.get(5) {
        None => Space::Pm,
        Some(s) if s.eq_ignore_ascii_case("dram") => Space::Dram,
        Some(s) if s.eq_ignore_ascii_case("pm") => Space::Pm,
        Some(s) => return Err(format!("sixth field '{s}' must be 'dram' or 'pm'")),
    };
    Ok(Some(Record {
        time_ns,
        thread,
        op,
        space,
        addr,
        size,
    }))
}

/// Parse an unsigned number in decimal or `0x` hexadecimal.
pub fn parse_u64(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// Implements `Iterator` for a trace reader `$reader<R: $bound>` that has a
/// `failed: bool` field and a method `$read(&mut self) ->
/// Result<Option<Record>, Error>`. Every reader of this crate follows the
/// same rule: records until the end of the input or until the first
/// error, which is yielded once; then nothing, because malformed input
/// leaves no reliable place to resume.
macro_rules! stop_after_first_error {
    ($reader:ident, $bound:path, $read:ident) => {
        impl<R: $bound> Iterator for $reader<R> {
            type Item = Result<$crate::Record, $crate::Error>;

            fn next(&mut self) -> Option<Self::Item> {
                if self.failed {
                    return None;
                }
                let next = self.$read();
                self.failed = next.is_err();
                next.transpose()
            }
        }
    };
}
pub(crate) use stop_after_first_error;

/// Streams records from a text trace, one line at a time.
pub struct Reader<R: BufRead> {
    inner: R,
    name: String,
    line_no: u64,
    line: String,
    failed: bool,
}

impl<R: BufRead> Reader<R> {
    /// Read from `inner`.
    pub fn new(inner: R) -> Reader<R> {
        Reader {
            inner,
            name: "trace".into(),
            line_no: 0,
            line: String::new(),
            failed: false,
        }
    }

    /// Name the input in error messages.
    pub fn with_name(mut self, name: impl Into<String>) -> Reader<R> {
        self.name = name.into();
        self
    }

    fn read_next(&mut self) -> Result<Option<Record>, Error> {
        loop {
            self.line.clear();
            self.line_no += 1;
            match self.inner.read_line(&mut self.line) {
                Ok(0) => return Ok(None),
                Ok(_) => {}
                Err(e) => {
                    let kind = if e.kind() == std::io::ErrorKind::InvalidData {
                        ErrorKind::Malformed
                    } else {
                        ErrorKind::Io
                    };
                    return Err(Error::new(
                        kind,
                        format!("{}:{}: {e}", self.name, self.line_no),
                    ));
                }
            }
            match parse_line(&self.line) {
                Ok(None) => continue,
                Ok(Some(r)) => return Ok(Some(r)),
                Err(msg) => {
                    return Err(Error::new(
                        ErrorKind::Malformed,
                        format!("{}:{}: {msg}", self.name, self.line_no),
                    ))
                }
            }
        }
    }
}

stop_after_first_error!(Reader, BufRead, read_next);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip() {
        let recs = vec![
            Record::new(0, 0, Op::TxBegin, 7, 0),
            Record::new(120, 0, Op::Write, 0x7f00_0000_1000, 64),
            Record::new(140, 1, Op::Read, 0x1000, 8).dram(),
            Record::new(141, 1, Op::SFence, 0, 0),
        ];
        let mut out = Vec::new();
        for r in &recs {
            write_record(&mut out, r).unwrap();
        }
        let back: Vec<Record> = Reader::new(&out[..]).collect::<Result<_, _>>().unwrap();
        assert_eq!(back, recs);
    }

    #[test]
    fn errors_name_file_and_line() {
        let input = "# header\n\n10 0 W 0x40 64\n11 0 JUMP 0x40 64\n";
        let res: Vec<_> = Reader::new(input.as_bytes()).with_name("t.txt").collect();
        assert!(res[0].is_ok());
        let e = res[1].as_ref().unwrap_err().to_string();
        assert!(e.starts_with("t.txt:4: unknown operation 'JUMP'"), "{e}");
        assert_eq!(res.len(), 2);
        let e = parse_line("1 2 W zz 64").unwrap_err();
        assert!(e.contains("address 'zz'"));
        assert!(parse_line("1 2 W").is_err());
        assert!(parse_line("1 2 W 0 64 nvram").is_err());
    }
}
