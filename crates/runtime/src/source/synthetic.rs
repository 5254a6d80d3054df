//! `synthetic:FILE`: a scripted stream of per-epoch counter values, so the
//! whole emulator (epochs, signals, sync points, delays, amortisation) runs
//! and is tested on machines without a PMU.
//!
//! # Format
//!
//! UTF-8 text, one epoch description per line; `#` starts a comment, blank
//! lines are ignored. A line is a list of `key=value` pairs (integers or
//! decimals), optionally followed by `*N` to repeat it for N epochs:
//!
//! ```text
//! # stall-cycle lines (Quartz Table 1 counters)
//! stall=30000 l3_hit=0 l3_miss=100 bytes=6400
//! stall=9000 l3_miss=20 local=10 remote=10 *50
//! # access-count lines (as the instrumented source reports them)
//! pm=100 dram=400 bytes=6400 *1000
//! loop
//! ```
//!
//! Keys: `stall` (cycles stalled with an L2 miss pending), `l3_hit`,
//! `l3_miss`, `local`, `remote` (stall-cycle lines); `pm`, `dram` (serial
//! PM and DRAM accesses: access-count lines); `bytes` (bytes moved
//! between the caches and PM, either kind of line) and `write_bytes` (the
//! part of them written to PM, for `--pm-write-bandwidth`; 0 by default).
//! A line mixes no kinds. The line `loop` (last
//! non-comment line) makes the script start again when it ends; without it
//! every epoch after the last line reads zero. Every thread reads the
//! script from its start, independently.

use super::{EpochReading, Reading, Source, SourceKind, ThreadCounters};
use crate::error::{Error, ErrorKind};
use std::sync::Arc;

/// A parsed script.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    /// (reading, repeat count) per line.
    pub lines: Vec<(EpochReading, u64)>,
    /// Start again at the end.
    pub looping: bool,
}

impl Script {
    /// Parse a script; `origin` names it in errors (`FILE:LINE: ...`).
    pub fn parse(text: &str, origin: &str) -> Result<Script, Error> {
        let mut lines = Vec::new();
        let mut looping = false;
        for (no, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err =
                |msg: String| Error::new(ErrorKind::File, format!("{origin}:{}: {msg}", no + 1));
            if looping {
                return Err(err("'loop' must be the last line of the script".into()));
            }
            if line == "loop" {
                looping = true;
                continue;
            }
            let mut stalls = [0.0f64; 5];
            let mut acc = [0.0f64; 2];
            let (mut has_stall, mut has_acc) = (false, false);
            let mut bytes = 0u64;
            let mut write_bytes = 0u64;
            let mut repeat = 1u64;
            for tok in line.split_whitespace() {
                if let Some(n) = tok.strip_prefix('*') {
                    repeat = n.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        err(format!("bad repeat count '{tok}': expected *N with N >= 1"))
                    })?;
                    continue;
                }
                let (k, v) = tok
                    .split_once('=')
                    .ok_or_else(|| err(format!("expected key=value, found '{tok}'")))?;
                let val: f64 = v
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| {
                        err(format!("bad value '{v}' for '{k}': expected a number >= 0"))
                    })?;
                match k {
                    "stall" => (stalls[0], has_stall) = (val, true),
                    "l3_hit" => (stalls[1], has_stall) = (val, true),
                    "l3_miss" => (stalls[2], has_stall) = (val, true),
                    "local" => (stalls[3], has_stall) = (val, true),
                    "remote" => (stalls[4], has_stall) = (val, true),
                    "pm" => (acc[0], has_acc) = (val, true),
                    "dram" => (acc[1], has_acc) = (val, true),
                    "bytes" => bytes = val as u64,
                    "write_bytes" => write_bytes = val as u64,
                    _ => {
                        return Err(err(format!(
                            "unknown key '{k}': expected stall, l3_hit, l3_miss, local, remote, pm, dram, bytes or write_bytes"
                        )))
                    }
                }
            }
            if has_stall && has_acc {
                return Err(err(
                    "a line has either stall-cycle keys or access keys (pm, dram), not both".into(),
                ));
            }
            let reading = if has_stall {
                Reading::Stalls {
                    l2_stall_cycles: stalls[0],
                    l3_hits: stalls[1],
                    l3_misses: stalls[2],
                    local: stalls[3],
                    remote: stalls[4],
                }
            } else {
                Reading::Accesses {
                    pm_serial: acc[0],
                    dram_serial: acc[1],
                }
            };
            if write_bytes > bytes {
                return Err(err(format!(
                    "write_bytes={write_bytes} is more than bytes={bytes}: bytes counts both kinds"
                )));
            }
            lines.push((
                EpochReading {
                    reading,
                    pm_bytes: bytes,
                    pm_write_bytes: write_bytes,
                },
                repeat,
            ));
        }
        if lines.is_empty() {
            return Err(Error::new(
                ErrorKind::File,
                format!("{origin}: the script has no epoch lines (format in docs/emulator.md)"),
            ));
        }
        Ok(Script { lines, looping })
    }
}

/// The synthetic source: one shared script, one cursor per thread.
pub struct SyntheticSource {
    path: String,
    script: Arc<Script>,
}

impl SyntheticSource {
    /// Read and parse the script at `path`.
    pub fn load(path: &str) -> Result<SyntheticSource, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                ErrorKind::File,
                format!("cannot read synthetic counter script '{path}': {e}"),
            )
        })?;
        Ok(SyntheticSource {
            path: path.to_string(),
            script: Arc::new(Script::parse(&text, path)?),
        })
    }

    /// A source over an already parsed script (tests, benchmarks).
    pub fn from_script(script: Script) -> SyntheticSource {
        SyntheticSource {
            path: "<inline>".into(),
            script: Arc::new(script),
        }
    }
}

impl Source for SyntheticSource {
    fn name(&self) -> String {
        format!("synthetic:{}", self.path)
    }

    fn kind(&self) -> SourceKind {
        match self.script.lines[0].0.reading {
            Reading::Stalls { .. } => SourceKind::StallCycles,
            Reading::Accesses { .. } => SourceKind::AccessCounts,
        }
    }

    fn thread_counters(&self) -> Result<Box<dyn ThreadCounters>, Error> {
        Ok(Box::new(Cursor {
            script: Arc::clone(&self.script),
            line: 0,
            used: 0,
        }))
    }
}

/// One thread's position in the script.
pub struct Cursor {
    script: Arc<Script>,
    line: usize,
    used: u64,
}

impl ThreadCounters for Cursor {
    fn start(&mut self) -> Result<(), Error> {
        Ok(())
    }

    fn epoch_end(&mut self, _epoch_ns: f64) -> EpochReading {
        // Only reads the immutable script and moves two integers:
        // async-signal-safe.
        let lines = &self.script.lines;
        if self.line >= lines.len() {
            if !self.script.looping {
                return EpochReading::default();
            }
            self.line = 0;
        }
        let (r, n) = lines[self.line];
        self.used += 1;
        if self.used >= n {
            self.used = 0;
            self.line += 1;
        }
        r
    }

    fn stop(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_then_reads_zero() {
        let s = Script::parse("pm=2 *2\nstall=10 l3_miss=1 bytes=64\n", "t").unwrap();
        let src = SyntheticSource::from_script(s);
        let mut c = src.thread_counters().unwrap();
        let pm = |r: EpochReading| match r.reading {
            Reading::Accesses { pm_serial, .. } => pm_serial,
            _ => -1.0,
        };
        assert_eq!(pm(c.epoch_end(0.0)), 2.0);
        assert_eq!(pm(c.epoch_end(0.0)), 2.0);
        let third = c.epoch_end(0.0);
        assert!(
            matches!(third.reading, Reading::Stalls { l2_stall_cycles, .. } if l2_stall_cycles == 10.0)
        );
        assert_eq!(third.pm_bytes, 64);
        assert_eq!(c.epoch_end(0.0), EpochReading::default());
    }

    #[test]
    fn write_bytes_are_part_of_bytes() {
        let s = Script::parse(
            "pm=1 bytes=640 write_bytes=128
",
            "t",
        )
        .unwrap();
        let mut c = SyntheticSource::from_script(s).thread_counters().unwrap();
        let r = c.epoch_end(0.0);
        assert_eq!(
            (r.pm_bytes, r.pm_read_bytes(), r.pm_write_bytes),
            (640, 512, 128)
        );
        let e = Script::parse(
            "pm=1 bytes=64 write_bytes=128
",
            "s.txt",
        )
        .unwrap_err();
        assert!(
            e.message().starts_with("s.txt:1: write_bytes=128 is more"),
            "{e}"
        );
    }

    #[test]
    fn loop_starts_again() {
        let s = Script::parse("# c\npm=1\npm=2 # two\nloop\n", "t").unwrap();
        let mut c = SyntheticSource::from_script(s).thread_counters().unwrap();
        let got: Vec<f64> = (0..5)
            .map(|_| match c.epoch_end(0.0).reading {
                Reading::Accesses { pm_serial, .. } => pm_serial,
                _ => -1.0,
            })
            .collect();
        assert_eq!(got, vec![1.0, 2.0, 1.0, 2.0, 1.0]);
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = Script::parse("pm=1\nstall=3 pm=2\n", "s.txt").unwrap_err();
        assert!(e.message().starts_with("s.txt:2:"), "{e}");
        let e = Script::parse("pm=x\n", "s.txt").unwrap_err();
        assert!(e.message().contains("bad value 'x'"), "{e}");
        let e = Script::parse("foo=1\n", "s.txt").unwrap_err();
        assert!(e.message().contains("unknown key 'foo'"), "{e}");
        let e = Script::parse("loop\npm=1\n", "s.txt").unwrap_err();
        assert!(e.message().contains("last line"), "{e}");
        assert!(Script::parse("# nothing\n", "s.txt").is_err());
        assert!(Script::parse("pm=1 *0\n", "s.txt").is_err());
    }
}
