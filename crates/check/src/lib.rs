//! Persistent-memory correctness over pmlab traces: the class of tools of
//! PMDK's pmemcheck and pmreorder, working from `pmlab trace` recordings
//! instead of a valgrind run.
//!
//! # Brief overview
//!
//! * [`check_trace`] / [`Checker`]: one streaming pass, a state machine per
//!   cache line (dirty, flushed, fenced; per thread where x86 orders per
//!   thread), reporting stores not flushed or not fenced before a
//!   durability point (a transaction's commit, the end of the program),
//!   stores between a flush and its fence, redundant flushes, flushes of
//!   non-PM memory and transactional stores outside the transaction's log
//!   ([`Kind`]). Findings are grouped by kind and call site
//!   ([`Report`]) and symbolised from the trace's module notes and the
//!   program's debug information ([`symbols`]).
//! * [`crash`]: crash images. At chosen points of a trace recorded with
//!   data, every line not yet durable may or may not have reached PM; the
//!   images are enumerated (exhaustively when few, sampled from a seed
//!   otherwise), written as pool files and handed to the program's own
//!   consistency check.
//! * [`Error`]: the one error type.
//!
//! Depends only on `pmlab-trace` (and `addr2line` for symbols); it runs
//! no program itself except in [`crash`], which runs the check command.
//!
//! # Example
//!
//! ```
//! use pmlab_check::{Checker, Kind, Options, When};
//! use pmlab_trace::{ext::Event, Op, Record};
//!
//! let mut c = Checker::new(&[], Options::default());
//! c.event(&Event::Record(Record::new(0, 0, Op::Write, 0x1000, 8)));
//! c.event(&Event::Record(Record::new(1, 0, Op::Clwb, 0x1000, 64)));
//! let report = c.finish(); // no fence: the store is not durable
//! assert_eq!(report.count(Kind::NotFenced(When::Exit)), 1);
//! ```
#![deny(missing_docs)]

mod checker;
pub mod crash;
mod error;
mod report;
pub mod symbols;

pub use checker::{Checker, Options};
pub use error::{Error, ErrorKind};
pub use report::{Finding, Group, Kind, Report, When};

use std::path::Path;

/// Check the trace at `path` in one streaming pass: a binary trace with
/// its annotations, or any other format `pmlab_trace::open` reads (text
/// traces: operations only, every store assumed recorded).
pub fn check_trace(path: &Path, opts: Options) -> Result<Report, Error> {
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path.display(), e))?;
    let mut magic = [0u8; 8];
    let n = std::io::Read::read(&mut f, &mut magic).map_err(|e| Error::io(path.display(), e))?;
    if n < magic.len() || &magic != pmlab_trace::binary::MAGIC {
        let mut c = Checker::new(&[], opts);
        for rec in pmlab_trace::open(path, None)
            .map_err(|e| Error::new(ErrorKind::Trace, e.to_string()))?
        {
            c.record(&rec.map_err(|e| Error::new(ErrorKind::Trace, e.to_string()))?);
        }
        // A text trace without records is an empty file (or a wrong one),
        // not a program that made no PM operations (its .pmt has a header).
        let report = c.finish();
        if report.records == 0 {
            return Err(Error::new(
                ErrorKind::Trace,
                format!(
                    "{}: the trace holds no records (an empty file, or comments only): nothing to check",
                    path.display()
                ),
            ));
        }
        return Ok(report);
    }
    drop(f);
    let f = std::fs::File::open(path).map_err(|e| Error::io(path.display(), e))?;
    let mut r = pmlab_trace::binary::Reader::new(std::io::BufReader::with_capacity(1 << 17, f))
        .map_err(|e| Error::new(ErrorKind::Trace, format!("{}: {e}", path.display())))?
        .with_name(path.display().to_string());
    let mut c = Checker::new(r.meta(), opts);
    while let Some(ev) = r.next_event()? {
        c.event(&ev);
    }
    Ok(c.finish())
}

/// Write every record and annotation of the binary trace at `path` as
/// text, one per line (records in the text format of `pmlab-trace`).
pub fn dump<W: std::io::Write>(path: &Path, out: &mut W) -> Result<(), Error> {
    let f = std::fs::File::open(path).map_err(|e| Error::io(path.display(), e))?;
    let mut r = pmlab_trace::binary::Reader::new(std::io::BufReader::new(f))
        .map_err(|e| Error::new(ErrorKind::Trace, format!("{}: {e}", path.display())))?
        .with_name(path.display().to_string());
    let r = dump_events(&mut r, out);
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::io("writing the dump", e)),
        Ok(r) => r,
    }
}

fn dump_events<R: std::io::Read, W: std::io::Write>(
    r: &mut pmlab_trace::binary::Reader<R>,
    out: &mut W,
) -> std::io::Result<Result<(), Error>> {
    use pmlab_trace::ext::{Event, Note};
    let io = |e| e;
    for (k, v) in r.meta().to_vec() {
        writeln!(out, "# {k}={v}").map_err(io)?;
    }
    loop {
        let ev = match r.next_event() {
            Ok(Some(ev)) => ev,
            Ok(None) => break,
            Err(e) => return Ok(Err(e.into())),
        };
        match ev {
            Event::Record(rec) => pmlab_trace::text::write_record(out, &rec).map_err(io)?,
            Event::Note {
                time_ns,
                thread,
                note,
            } => {
                let text = match note {
                    Note::Site { ip } => format!("SITE {ip:#x}"),
                    Note::TxAdd { addr, len } => format!("TXADD {addr:#x} {len}"),
                    Note::Data { addr, bytes } => {
                        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                        format!("DATA {addr:#x} {} {hex}", bytes.len())
                    }
                    Note::Module {
                        start,
                        len,
                        bias,
                        path,
                    } => format!("MODULE {start:#x} {len} bias {bias:#x} {path}"),
                    Note::PmRange {
                        base,
                        len,
                        file_offset,
                        path,
                        init,
                    } => format!("PMRANGE {base:#x} {len} offset {file_offset} init {init} {path}"),
                };
                writeln!(out, "{time_ns} {thread} {text}").map_err(io)?;
            }
        }
    }
    Ok(Ok(()))
}
