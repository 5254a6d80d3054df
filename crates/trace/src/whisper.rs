//! Reader for the text traces of the WHISPER suite's tracer.
//!
//! WHISPER's instrumentation prints one event per line, fields separated by
//! `:`, possibly after an ftrace prefix (`task-pid [cpu] ... ts:`). The
//! part pmlab reads is
//!
//! ```text
//! tid:time_us:MARKER[:addr:size[:count]]:function:line
//! ```
//!
//! with markers `PM_W`/`PM_DW` (cacheable store), `PM_I`/`PM_DI`
//! (non-temporal store), `PM_R` (load), `PM_L` (clflush), `PM_O`
//! (clflushopt), `PM_N` (fence), `PM_B` and `PM_C` (barrier and commit,
//! read as fences), `PM_XS`/`PM_XE` (transaction start and end). For
//! flushes and non-temporal stores the first number after the address is
//! the bytes done and the second the count; pmlab uses the larger as the
//! size. Times are microseconds since the start and become nanoseconds;
//! thread ids are renumbered from 0 in order of appearance. Lines without
//! a `PM_` marker (ftrace headers, program output) are skipped and
//! counted.

use crate::{text::parse_u64, Error, ErrorKind, Op, Record, Space};
use std::collections::HashMap;
use std::io::BufRead;

/// Streams [`Record`]s from a WHISPER text trace.
pub struct Reader<R: BufRead> {
    inner: R,
    name: String,
    line_no: u64,
    line: String,
    threads: HashMap<u64, u32>,
    skipped: u64,
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
            threads: HashMap::new(),
            skipped: 0,
            failed: false,
        }
    }

    /// Name the input in error messages.
    pub fn with_name(mut self, name: impl Into<String>) -> Reader<R> {
        self.name = name.into();
        self
    }

    /// Lines skipped so far because they carried no PM event.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    fn err(&self, msg: String) -> Error {
        Error::new(
            ErrorKind::Malformed,
            format!("{}:{}: {msg}", self.name, self.line_no),
        )
    }

    fn read_next(&mut self) -> Result<Option<Record>, Error> {
        loop {
            self.line.clear();
            self.line_no += 1;
            match self.inner.read_line(&mut self.line) {
                Ok(0) => return Ok(None),
                Ok(_) => {}
                Err(e) => return Err(self.err(format!("cannot read: {e}"))),
            }
            match parse_line(&self.line) {
                Ok(None) => self.skipped += 1,
                Ok(Some((tid, mut rec))) => {
                    let next = self.threads.len() as u32;
                    rec.thread = *self.threads.entry(tid).or_insert(next);
                    return Ok(Some(rec));
                }
                Err(msg) => return Err(self.err(msg)),
            }
        }
    }
}

/// Parse the event of one line: (raw tid, record with thread 0), or
/// `Ok(None)` when the line carries no PM marker.
pub fn parse_line(line: &str) -> Result<Option<(u64, Record)>, String> {
    let fields: Vec<&str> = line.trim().split(':').map(str::trim).collect();
    let Some(m) = fields.iter().position(|f| f.starts_with("PM_")) else {
        return Ok(None);
    };
    if m < 2 {
        return Err("expected 'tid:time_us:' before the PM_ marker".into());
    }
    // The tid field may carry an ftrace prefix ("... func: 1234").
    let tid_field = fields[m - 2];
    let tid_digits = tid_field
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap_or("");
    let tid: u64 = tid_digits
        .parse()
        .map_err(|_| format!("thread id '{tid_field}' is not a number"))?;
    let time_us: u64 = fields[m - 1].parse().map_err(|_| {
        format!(
            "time '{}' is not a whole number of microseconds",
            fields[m - 1]
        )
    })?;
    let marker = fields[m];
    let (op, addressed) = match marker {
        "PM_W" | "PM_DW" => (Op::Write, true),
        "PM_I" | "PM_DI" => (Op::NtWrite, true),
        "PM_R" => (Op::Read, true),
        "PM_L" => (Op::Clflush, true),
        "PM_O" => (Op::ClflushOpt, true),
        "PM_N" | "PM_B" | "PM_C" => (Op::SFence, false),
        "PM_XS" => (Op::TxBegin, false),
        "PM_XE" => (Op::TxEnd, false),
        other => return Err(format!("unknown WHISPER marker '{other}'")),
    };
    let (addr, size) = if addressed {
        let a = fields
            .get(m + 1)
            .ok_or_else(|| format!("{marker} without an address"))?;
        let addr = if *a == "(nil)" {
            0
        } else {
            parse_u64(a).ok_or_else(|| format!("address '{a}' is not a number"))?
        };
        let s = fields
            .get(m + 2)
            .ok_or_else(|| format!("{marker} without a size"))?;
        let mut size: u64 = s
            .parse()
            .map_err(|_| format!("size '{s}' is not a number"))?;
        if matches!(op, Op::NtWrite | Op::Clflush | Op::ClflushOpt) {
            if let Some(c) = fields.get(m + 3).and_then(|c| c.parse::<u64>().ok()) {
                // "done:count:function:line": the count is numeric while
                // the function name is not.
                if fields.len() > m + 5 {
                    size = size.max(c);
                }
            }
        }
        let size = u32::try_from(size).map_err(|_| format!("size {size} is too large"))?;
        (addr, size)
    } else {
        (0, 0)
    };
    Ok(Some((
        tid,
        Record {
            time_ns: time_us.saturating_mul(1000),
            thread: 0,
            op,
            space: Space::Pm,
            addr,
            size,
        },
    )))
}

crate::text::stop_after_first_error!(Reader, BufRead, read_next);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_whisper_lines_with_and_without_ftrace_prefix() {
        let input = "\
# tracer: nop
4242:10:PM_XS:tx_begin:12
4242:11:PM_W:0x7f0000001000:8:insert:40
 memcached-4243 [001] .... 100.5: __pm_trace_print: 4243:12:PM_I:0x7f0000002000:64:256:copy:7
4242:13:PM_L:0x7f0000001000:0:64:flush:9
4242:14:PM_N:commit:50
4242:15:PM_XE:tx_end:60
random program output
";
        let recs: Vec<Record> = Reader::new(input.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        let ops: Vec<Op> = recs.iter().map(|r| r.op).collect();
        assert_eq!(
            ops,
            [
                Op::TxBegin,
                Op::Write,
                Op::NtWrite,
                Op::Clflush,
                Op::SFence,
                Op::TxEnd
            ]
        );
        assert_eq!(recs[1].addr, 0x7f00_0000_1000);
        assert_eq!(recs[1].size, 8);
        assert_eq!(recs[1].time_ns, 11_000);
        assert_eq!(recs[2].thread, 1);
        assert_eq!(recs[2].size, 256);
        assert_eq!(recs[3].size, 64);
        assert_eq!(recs[3].thread, 0);
    }

    #[test]
    fn bad_lines_name_file_line_and_field() {
        let input = "1:2:PM_W:0x10:8:f:1\n1:2:PM_W:zz:8:f:1\n";
        let res: Vec<_> = Reader::new(input.as_bytes()).with_name("w.txt").collect();
        assert!(res[0].is_ok());
        let e = res[1].as_ref().unwrap_err().to_string();
        assert!(e.starts_with("w.txt:2: address 'zz'"), "{e}");
        assert_eq!(res.len(), 2);
        assert!(parse_line("PM_W:0x10:8").is_err());
        assert!(parse_line("1:2:PM_Q:x:1").unwrap_err().contains("PM_Q"));
        assert!(parse_line("1:x:PM_N:f:1").unwrap_err().contains("time"));
    }
}
