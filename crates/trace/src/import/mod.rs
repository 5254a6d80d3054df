//! Importers for traces written by other tools, so that the same workload
//! can be replayed by pmlab's simulator and by other simulators.
//!
//! * [`lackey`]: valgrind `--tool=lackey --trace-mem=yes` output.
//! * [`dramsim`]: the plain `address op cycle` lines that DRAM simulators
//!   read (DRAMsim3's `0x1f40 READ 12`, Ramulator's `0x1f40 R`, Ramulator
//!   2's `LD 0x1f40`), in both directions ([`dramsim::write_record`]).
//!
//! Readers stream (constant memory in trace length) and report malformed
//! input as `file:line: what is wrong`.

pub mod dramsim;
pub mod lackey;

use crate::{Error, ErrorKind};
use std::io::BufRead;

/// Read one line into `buf` (cleared first); false at end of input.
pub(crate) fn next_line<R: BufRead>(
    input: &mut R,
    buf: &mut String,
    name: &str,
    line: u64,
) -> Result<bool, Error> {
    buf.clear();
    match input.read_line(buf) {
        Ok(0) => Ok(false),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(Error::new(
            ErrorKind::Malformed,
            format!(
                "{name}:{}: not UTF-8 text (a binary trace? give its format as pmt: --trace-format pmt in pmlab sim, --format pmt in pmlab analyze)",
                line + 1
            ),
        )),
        Err(e) => Err(Error::new(ErrorKind::Io, format!("{name}: {e}"))),
    }
}

/// Parse a hexadecimal number with or without `0x`.
pub(crate) fn parse_hex(s: &str) -> Option<u64> {
    let h = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if h.is_empty() || h.len() > 16 {
        return None;
    }
    u64::from_str_radix(h, 16).ok()
}

#[cfg(test)]
mod tests {
    /// Garbage in, errors out: never a panic.
    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0x1234_5678;
        let alphabet = b" \t,0x19afAFLSMIRWDEAT#=\n\xff\xc3";
        for _ in 0..300 {
            let mut input = Vec::new();
            for _ in 0..200 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                input.push(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            for r in super::lackey::Reader::new(&input[..]) {
                let _ = r;
            }
            for r in super::dramsim::Reader::new(&input[..]) {
                let _ = r;
            }
        }
    }
}
