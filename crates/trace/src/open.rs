//! Opening a trace file of any supported format: the one place that
//! recognises formats from content, so that no command sniffs them itself.
//!
//! Recognition looks at the first bytes of the file (up to
//! [`SNIFF_BYTES`]): the `.pmt` magic, else the first line that is not
//! blank, a comment (`#`) or a valgrind message (`==`, `--`): valgrind
//! lackey (`KIND ADDR,SIZE`), a DRAM-simulator line (`ADDR OP [CYCLE]` or
//! `OP ADDR`), pmlab text (`time thread op addr size`), and else any line
//! carrying a WHISPER `PM_` marker. A file that is none of these is one
//! error naming the formats and the `--trace-format` override. An empty
//! file, or one of comments only, is a pmlab text trace of no records
//! (the caller decides whether that is an error).

use crate::import::{dramsim, lackey};
use crate::{binary, text, whisper, Error, ErrorKind, Record};
use std::fs::File;
use std::io::{BufReader, Cursor, Read};
use std::path::Path;

/// How many bytes of a file [`open`] reads to recognise its format.
pub const SNIFF_BYTES: usize = 8192;

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
    /// valgrind `--tool=lackey --trace-mem=yes` output ([`lackey`]).
    Lackey,
    /// DRAM-simulator request lines (DRAMsim3, Ramulator; [`dramsim`]).
    DramSim,
}

impl Format {
    /// Names accepted on command lines.
    pub const NAMES: &'static str = "pmt, text, lackey, dramsim, whisper";

    /// Every format, in the order of [`Format::NAMES`].
    pub const ALL: [Format; 5] = [
        Format::Binary,
        Format::Text,
        Format::Lackey,
        Format::DramSim,
        Format::Whisper,
    ];

    /// The format's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Binary => "pmt",
            Format::Text => "text",
            Format::Whisper => "whisper",
            Format::Lackey => "lackey",
            Format::DramSim => "dramsim",
        }
    }

    /// Parse a format name as given on a command line (`pmt` or `binary`,
    /// `text` or `txt`, `lackey`, `dramsim` or `ramulator`, `whisper`).
    pub fn from_name(name: &str) -> Result<Format, Error> {
        match name {
            "pmt" | "binary" => Ok(Format::Binary),
            "text" | "txt" => Ok(Format::Text),
            "whisper" => Ok(Format::Whisper),
            "lackey" => Ok(Format::Lackey),
            "dramsim" | "ramulator" => Ok(Format::DramSim),
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

/// What [`open`] learned about a trace before its first record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The format read.
    pub format: Format,
    /// True when the format was recognised from the content, false when
    /// the caller named it.
    pub recognised: bool,
    /// The format version (`.pmt` only).
    pub version: Option<u16>,
    /// The header's `key=value` metadata (`.pmt` only; empty otherwise).
    pub meta: Vec<(String, String)>,
}

impl Header {
    /// The value of metadata key `key`.
    pub fn meta_value(&self, key: &str) -> Option<&str> {
        self.meta
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// True when the header says the program's plain stores were not
    /// recorded (libpmlab without `pmlab cc` instrumentation): only
    /// flushes and library copies were, so flushed lines stand for stores.
    pub fn stores_unseen(&self) -> bool {
        match self.meta_value("stores") {
            Some(v) => v == "flushes-only",
            None => self.meta_value("pmdk") == Some("interposed"),
        }
    }
}

/// A boxed stream of records from any format.
pub type RecordStream = Box<dyn Iterator<Item = Result<Record, Error>>>;

/// An open trace: its [`Header`] and its records (iterate the `Trace`
/// itself, or take the stream with [`Trace::into_records`]).
pub struct Trace {
    header: Header,
    records: RecordStream,
}

impl Trace {
    /// What is known before the first record.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The record stream alone.
    pub fn into_records(self) -> RecordStream {
        self.records
    }

    /// The header and the record stream.
    pub fn into_parts(self) -> (Header, RecordStream) {
        (self.header, self.records)
    }
}

impl Iterator for Trace {
    type Item = Result<Record, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.records.next()
    }
}

/// The file's first bytes, read up to [`SNIFF_BYTES`] (or 8 bytes when
/// they are the `.pmt` magic), then the rest of it: reading the head
/// consumes nothing, so pipes work too.
type Input = BufReader<std::io::Chain<Cursor<Vec<u8>>, File>>;

/// Open a trace file. With `format` None the format is recognised from
/// the file's first bytes (see the module documentation); an unknown
/// content is an [`ErrorKind::Unrecognised`] error naming the file.
pub fn open(path: &Path, format: Option<Format>) -> Result<Trace, Error> {
    let name = path.display().to_string();
    let mut file = File::open(path).map_err(|e| Error::io(&name, e))?;
    let head = read_head(&mut file).map_err(|e| Error::io(&name, e))?;
    let (format, recognised) = match format {
        Some(f) => (f, false),
        None => (recognise(&head, &name)?, true),
    };
    let input: Input = BufReader::with_capacity(1 << 16, Cursor::new(head).chain(file));
    let mut header = Header {
        format,
        recognised,
        version: None,
        meta: Vec::new(),
    };
    let records: RecordStream = match format {
        Format::Binary => {
            let r = binary::Reader::new(input)
                .map_err(|e| Error::new(e.kind(), format!("{name}: {e}")))?
                .with_name(name);
            header.version = Some(r.version());
            header.meta = r.meta().to_vec();
            Box::new(r)
        }
        Format::Text => Box::new(text::Reader::new(input).with_name(name)),
        Format::Whisper => Box::new(whisper::Reader::new(input).with_name(name)),
        Format::Lackey => Box::new(lackey::Reader::new(input).with_name(name)),
        Format::DramSim => Box::new(dramsim::Reader::new(input).with_name(name)),
    };
    Ok(Trace { header, records })
}

fn read_head(file: &mut File) -> std::io::Result<Vec<u8>> {
    let mut head = vec![0u8; SNIFF_BYTES];
    let mut n = 0;
    while n < head.len() {
        match file.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        if n >= binary::MAGIC.len() && head.starts_with(binary::MAGIC) {
            break;
        }
    }
    head.truncate(n);
    Ok(head)
}

/// Recognise the format of a file from its first bytes (`head`, at most
/// [`SNIFF_BYTES`] of them; `name` names the file in the error).
pub fn recognise(head: &[u8], name: &str) -> Result<Format, Error> {
    if head.starts_with(binary::MAGIC) {
        return Ok(Format::Binary);
    }
    let unknown = |what: String| {
        Error::new(
            ErrorKind::Unrecognised,
            format!(
                "{name}: not a trace in a format pmlab knows ({}): {what}; pass --trace-format NAME if it is one",
                Format::NAMES
            ),
        )
    };
    if head.contains(&0) {
        return Err(unknown(
            "binary data without the .pmt magic 'PMLABTRC'".to_string(),
        ));
    }
    // A sample cut in the middle of a character loses its last line only.
    let text = match std::str::from_utf8(head) {
        Ok(t) => t,
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or("")
        }
        Err(_) => {
            return Err(unknown(
                "binary data without the .pmt magic 'PMLABTRC'".to_string(),
            ))
        }
    };
    let data = |l: &&str| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#') && !t.starts_with("==") && !t.starts_with("--")
    };
    let Some((line_no, line)) = text.lines().enumerate().find(|(_, l)| data(l)) else {
        // Empty, or comments only: a text trace of no records.
        return Ok(Format::Text);
    };
    if is_lackey(line) {
        return Ok(Format::Lackey);
    }
    if is_dramsim(line) {
        return Ok(Format::DramSim);
    }
    let as_text = text::parse_line(line);
    if matches!(as_text, Ok(Some(_))) {
        return Ok(Format::Text);
    }
    if text
        .lines()
        .any(|l| matches!(whisper::parse_line(l), Ok(Some(_))))
    {
        return Ok(Format::Whisper);
    }
    let shown: String = line
        .trim()
        .chars()
        .take(60)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let why = match as_text {
        Err(e) => format!(" (as pmlab text: {e})"),
        _ => String::new(),
    };
    Err(unknown(format!(
        "line {} reads '{shown}'{why}",
        line_no + 1
    )))
}

fn hexish(s: &str) -> bool {
    let h = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    !h.is_empty() && h.len() <= 16 && h.chars().all(|c| c.is_ascii_hexdigit())
}

/// `KIND ADDR,SIZE` with KIND one of I, L, S, M.
fn is_lackey(line: &str) -> bool {
    let f: Vec<&str> = line.split_whitespace().collect();
    f.len() == 2
        && ["I", "L", "S", "M"].contains(&f[0])
        && f[1]
            .split_once(',')
            .is_some_and(|(a, b)| hexish(a) && b.parse::<u32>().is_ok())
}

/// `ADDR OP [CYCLE]` or `OP ADDR [CYCLE]`.
fn is_dramsim(line: &str) -> bool {
    let line = line.split('#').next().unwrap_or("");
    let f: Vec<&str> = line.split_whitespace().collect();
    let op = |s: &str| {
        [
            "READ", "WRITE", "RD", "WR", "R", "W", "LD", "ST", "LOAD", "STORE", "P_MEM_RD",
            "P_MEM_WR", "P_FETCH",
        ]
        .contains(&s.to_ascii_uppercase().as_str())
    };
    let cycle_ok = f.get(2).is_none_or(|c| c.parse::<u64>().is_ok());
    (2..=3).contains(&f.len())
        && cycle_ok
        && ((hexish(f[0]) && op(f[1])) || (op(f[0]) && hexish(f[1])))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Op;

    struct Tmp(std::path::PathBuf);

    impl Tmp {
        fn new(name: &str, bytes: &[u8]) -> Tmp {
            let p = std::env::temp_dir().join(format!("pmlab-open-{}-{name}", std::process::id()));
            std::fs::write(&p, bytes).unwrap();
            Tmp(p)
        }
    }

    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn opened(name: &str, bytes: &[u8]) -> (Header, Vec<Record>) {
        let t = Tmp::new(name, bytes);
        let tr = open(&t.0, None).unwrap();
        let h = tr.header().clone();
        (h, tr.collect::<Result<_, _>>().unwrap())
    }

    #[test]
    fn recognises_pmt_with_its_header() {
        let mut w =
            binary::Writer::with_meta(Vec::new(), &[("stores", "flushes-only"), ("x", "1")])
                .unwrap();
        w.write(&Record::new(1, 0, Op::Write, 0x40, 64)).unwrap();
        let (h, recs) = opened("a.pmt", &w.finish().unwrap());
        assert_eq!(h.format, Format::Binary);
        assert!(h.recognised);
        assert_eq!(h.version, Some(binary::VERSION));
        assert_eq!(h.meta_value("x"), Some("1"));
        assert!(h.stores_unseen());
        assert_eq!(recs.len(), 1);
    }

    #[test]
    fn recognises_text() {
        let (h, recs) = opened("t.txt", b"# time thread op addr size\n\n0 0 R 0x1000 64\n");
        assert_eq!(h.format, Format::Text);
        assert!(h.meta.is_empty() && h.version.is_none() && !h.stores_unseen());
        assert_eq!(recs[0].op, Op::Read);
    }

    #[test]
    fn recognises_lackey() {
        let (h, recs) = opened(
            "t.lackey",
            b"==1== Lackey, an example\nI  04016e9a,3\n S 1ffefffd68,8\n",
        );
        assert_eq!(h.format, Format::Lackey);
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].op, Op::Write);
    }

    #[test]
    fn recognises_the_dram_simulator_dialects() {
        for (i, text) in ["0x1f40 READ 12\n", "1f40 R\n", "LD 0x2040\n"]
            .iter()
            .enumerate()
        {
            let (h, recs) = opened(&format!("d{i}.trc"), text.as_bytes());
            assert_eq!(h.format, Format::DramSim, "{text}");
            assert_eq!(recs.len(), 1);
        }
    }

    #[test]
    fn recognises_whisper_after_lines_without_markers() {
        let (h, recs) = opened(
            "w.txt",
            b"# tracer: nop\nprogram says hello\n7001:2:PM_W:0x7f0000001000:8:put:10\n",
        );
        assert_eq!(h.format, Format::Whisper);
        assert_eq!(recs[0].op, Op::Write);
    }

    #[test]
    fn empty_and_comment_only_files_are_text_traces_of_no_records() {
        for (name, bytes) in [("e0", &b""[..]), ("e1", &b"# nothing\n\n"[..])] {
            let (h, recs) = opened(name, bytes);
            assert_eq!(h.format, Format::Text);
            assert!(recs.is_empty());
        }
    }

    #[test]
    fn unknown_content_is_one_error_naming_the_formats() {
        for (name, bytes) in [
            ("u.csv", &b"time,op,addr\n1,R,0x40\n"[..]),
            ("u.bin", &[0x7f, b'E', b'L', b'F', 0xff, 0xfe, 0, 1][..]),
            ("u.nul", &b"\x00\x01\x02garbage\n"[..]),
            ("u.ctl", &b"\x01\x02 garbage\n"[..]),
        ] {
            let t = Tmp::new(name, bytes);
            let e = open(&t.0, None).err().expect("an error");
            assert_eq!(e.kind(), ErrorKind::Unrecognised);
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "{msg}");
            assert!(msg.contains(name), "{msg}");
            assert!(msg.contains(Format::NAMES), "{msg}");
            assert!(msg.contains("--trace-format"), "{msg}");
            assert!(!msg.chars().any(char::is_control), "{msg:?}");
        }
    }

    #[test]
    fn a_named_format_overrides_recognition() {
        let t = Tmp::new("o.trc", b"0x1f40 READ 12\n");
        let tr = open(&t.0, Some(Format::DramSim)).unwrap();
        assert!(!tr.header().recognised);
        let t = Tmp::new("o.txt", b"0 0 R 0x1000 64\n");
        let e = open(&t.0, Some(Format::Binary)).err().expect("an error");
        assert!(e.to_string().contains("not a pmlab binary trace"), "{e}");
        let e = open(Path::new("/nonexistent/pmlab.pmt"), None)
            .err()
            .expect("an error");
        assert!(e.to_string().contains("/nonexistent/pmlab.pmt"), "{e}");
    }

    #[test]
    fn format_names_round_trip() {
        for f in Format::ALL {
            assert_eq!(Format::from_name(f.name()).unwrap(), f);
            assert!(Format::NAMES.contains(f.name()));
        }
        let e = Format::from_name("csv").unwrap_err().to_string();
        assert!(e.contains("unknown trace format 'csv'"), "{e}");
    }
}
