//! valgrind lackey `--trace-mem=yes` output:
//!
//! ```text
//! ==1234== Lackey, an example Valgrind tool
//! I  04016e9a,3
//!  S 1ffefffd68,8
//!  L 04228e58,8
//!  M 0422a010,4
//! ```
//!
//! `L` becomes a read, `S` a write, `M` (modify) a read and a write of the
//! same bytes. Instruction fetches (`I`) are not memory requests of the
//! data path: they are skipped but counted as time, one nanosecond per
//! instruction, so that `--mode timed` keeps the program's rhythm. `==`
//! lines (valgrind's messages) and blank lines are skipped. Lackey traces
//! carry no thread ids: every record is thread 0.

use super::{next_line, parse_hex};
use crate::{Error, ErrorKind, Op, Record};
use std::io::BufRead;

/// Streams records from lackey output.
pub struct Reader<R: BufRead> {
    input: R,
    name: String,
    line: u64,
    buf: String,
    instructions: u64,
    pending: Option<Record>,
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
            instructions: 0,
            pending: None,
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
        if let Some(r) = self.pending.take() {
            return Ok(Some(r));
        }
        loop {
            if !next_line(&mut self.input, &mut self.buf, &self.name, self.line)? {
                return Ok(None);
            }
            self.line += 1;
            let l = self.buf.trim_end();
            if l.trim().is_empty() || l.starts_with("==") || l.starts_with("--") {
                continue;
            }
            let Some((kind, rest)) = l.trim_start().split_once(char::is_whitespace) else {
                return Err(self.bad(format!(
                    "expected 'KIND ADDR,SIZE' (KIND one of I, L, S, M), found '{l}'"
                )));
            };
            let Some((addr, size)) = rest.trim().split_once(',') else {
                return Err(self.bad(format!(
                    "expected 'ADDR,SIZE' after '{kind}', found '{}'",
                    rest.trim()
                )));
            };
            let addr = parse_hex(addr.trim())
                .ok_or_else(|| self.bad(format!("address '{}' is not hexadecimal", addr.trim())))?;
            let size: u32 = size
                .trim()
                .parse()
                .map_err(|_| self.bad(format!("size '{}' is not a number", size.trim())))?;
            let t = self.instructions;
            match kind {
                "I" => {
                    self.instructions += 1;
                    continue;
                }
                "L" => return Ok(Some(Record::new(t, 0, Op::Read, addr, size))),
                "S" => return Ok(Some(Record::new(t, 0, Op::Write, addr, size))),
                "M" => {
                    self.pending = Some(Record::new(t, 0, Op::Write, addr, size));
                    return Ok(Some(Record::new(t, 0, Op::Read, addr, size)));
                }
                k => return Err(self.bad(format!("unknown access kind '{k}': expected I, L, S or M (valgrind --tool=lackey --trace-mem=yes)"))),
            }
        }
    }
}

crate::text::stop_after_first_error!(Reader, BufRead, read_next);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_loads_stores_and_modifies() {
        let text = "==1== Lackey\nI  04016e9a,3\n S 1ffefffd68,8\nI  04016e9d,2\n L 04228e58,8\n M 0422a010,4\n";
        let recs: Vec<Record> = Reader::new(text.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        let ops: Vec<Op> = recs.iter().map(|r| r.op).collect();
        assert_eq!(ops, [Op::Write, Op::Read, Op::Read, Op::Write]);
        assert_eq!(recs[0].addr, 0x1ffefffd68);
        assert_eq!(recs[0].time_ns, 1);
        assert_eq!(recs[1].time_ns, 2);
        assert_eq!(recs[3].size, 4);
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let text = "I  0401,3\n X 0401,3\n";
        let err = Reader::new(text.as_bytes())
            .with_name("t.lackey")
            .find_map(|r| r.err())
            .unwrap();
        assert_eq!(err.kind(), ErrorKind::Malformed);
        assert!(
            err.to_string()
                .starts_with("t.lackey:2: unknown access kind 'X'"),
            "{err}"
        );
        let err = Reader::new(" L zz,4\n".as_bytes())
            .find_map(|r| r.err())
            .unwrap();
        assert!(err.to_string().contains(":1: address 'zz'"), "{err}");
        let err = Reader::new(" L 10\n".as_bytes())
            .find_map(|r| r.err())
            .unwrap();
        assert!(err.to_string().contains("ADDR,SIZE"), "{err}");
    }
}
