//! Quantities as users write them.
//!
//! Conventions, chosen to match how memory papers speak:
//!
//! * durations: `ns`, `us` (or `µs`), `ms`, `s`; a bare number is
//!   nanoseconds.
//! * sizes: `B`, `K`/`KB`/`KiB`, `M`/`MB`/`MiB`, `G`/`GB`/`GiB`, `T`/`TB`/`TiB`
//!   are all powers of 1024 (a "16 KB buffer" in LENS is 16,384 bytes); a
//!   bare number is bytes.
//! * bandwidths: `B/s`, `KB/s`, `MB/s`, `GB/s` are powers of 1000 (as DIMM
//!   datasheets and the bandwidth papers use them); `KiB/s`, `MiB/s`,
//!   `GiB/s` are powers of 1024.

use crate::{Error, ErrorKind};
use std::fmt;

fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    let num: String = s[..end].chars().filter(|&c| c != '_').collect();
    let value: f64 = num.parse().ok()?;
    Some((value, s[end..].trim()))
}

fn parse_err(what: &str, input: &str, accepted: &str) -> Error {
    Error::new(
        ErrorKind::Parse,
        format!("cannot read {what} '{input}': expected a number followed by one of {accepted}"),
    )
}

/// A duration in nanoseconds (non-negative, finite).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Nanos(f64);

impl Nanos {
    /// Units accepted by [`Nanos::parse`].
    pub const UNITS: &'static str = "ns, us, ms, s (a bare number is ns)";

    /// A duration of `ns` nanoseconds. Panics if `ns` is negative or not finite.
    pub fn new(ns: f64) -> Nanos {
        assert!(ns.is_finite() && ns >= 0.0, "invalid duration {ns}");
        Nanos(ns)
    }

    /// The value in nanoseconds.
    pub fn get(self) -> f64 {
        self.0
    }

    /// Parse `400`, `400ns`, `1.5us`, `10ms`, `2s`.
    pub fn parse(input: &str) -> Result<Nanos, Error> {
        let (v, unit) =
            split_number(input).ok_or_else(|| parse_err("duration", input, Self::UNITS))?;
        let mult = match unit {
            "" | "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            _ => return Err(parse_err("duration", input, Self::UNITS)),
        };
        let ns = v * mult;
        if !ns.is_finite() {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!("duration '{input}' is too large"),
            ));
        }
        Ok(Nanos(ns))
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        if ns >= 1e9 {
            write!(f, "{}s", trim(ns / 1e9))
        } else if ns >= 1e6 {
            write!(f, "{}ms", trim(ns / 1e6))
        } else if ns >= 1e3 {
            write!(f, "{}us", trim(ns / 1e3))
        } else {
            write!(f, "{}ns", trim(ns))
        }
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// A size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bytes(pub u64);

impl Bytes {
    /// Units accepted by [`Bytes::parse`].
    pub const UNITS: &'static str =
        "B, KiB/KB/K, MiB/MB/M, GiB/GB/G, TiB/TB/T (all powers of 1024)";

    /// The value in bytes.
    pub fn get(self) -> u64 {
        self.0
    }

    /// Parse `64`, `64B`, `16KB`, `16KiB`, `1.5GiB`.
    pub fn parse(input: &str) -> Result<Bytes, Error> {
        let (v, unit) = split_number(input).ok_or_else(|| parse_err("size", input, Self::UNITS))?;
        let mult: f64 = match unit.to_ascii_uppercase().as_str() {
            "" | "B" => 1.0,
            "K" | "KB" | "KIB" => 1024.0,
            "M" | "MB" | "MIB" => 1024.0 * 1024.0,
            "G" | "GB" | "GIB" => 1024.0 * 1024.0 * 1024.0,
            "T" | "TB" | "TIB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            _ => return Err(parse_err("size", input, Self::UNITS)),
        };
        let b = (v * mult).round();
        if !(0.0..=u64::MAX as f64).contains(&b) {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!("size '{input}' is too large"),
            ));
        }
        Ok(Bytes(b as u64))
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const STEPS: [(&str, u64); 4] = [
            ("TiB", 1 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ];
        for (name, size) in STEPS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{}", self.0 / size, name);
            }
        }
        for (name, size) in STEPS {
            if self.0 >= size {
                return write!(f, "{}{}", trim(self.0 as f64 / size as f64), name);
            }
        }
        write!(f, "{}B", self.0)
    }
}

/// A bandwidth in bytes per second.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Bandwidth(f64);

impl Bandwidth {
    /// Units accepted by [`Bandwidth::parse`].
    pub const UNITS: &'static str =
        "B/s, KB/s, MB/s, GB/s (powers of 1000), KiB/s, MiB/s, GiB/s (powers of 1024)";

    /// A bandwidth of `bytes_per_sec`. Panics if not finite and positive.
    pub fn new(bytes_per_sec: f64) -> Bandwidth {
        assert!(
            bytes_per_sec.is_finite() && bytes_per_sec > 0.0,
            "invalid bandwidth"
        );
        Bandwidth(bytes_per_sec)
    }

    /// Bytes per second.
    pub fn bytes_per_sec(self) -> f64 {
        self.0
    }

    /// Bytes per nanosecond (numerically GB/s).
    pub fn bytes_per_ns(self) -> f64 {
        self.0 / 1e9
    }

    /// Parse `8GB/s`, `500MB/s`, `6.5 GiB/s`.
    pub fn parse(input: &str) -> Result<Bandwidth, Error> {
        let (v, unit) =
            split_number(input).ok_or_else(|| parse_err("bandwidth", input, Self::UNITS))?;
        let unit = unit.strip_suffix("/s").or_else(|| unit.strip_suffix("ps"));
        let mult = match unit {
            Some("B") => 1.0,
            Some("KB") | Some("kB") => 1e3,
            Some("MB") => 1e6,
            Some("GB") => 1e9,
            Some("TB") => 1e12,
            Some("KiB") => 1024.0,
            Some("MiB") => 1024.0 * 1024.0,
            Some("GiB") => 1024.0 * 1024.0 * 1024.0,
            _ => return Err(parse_err("bandwidth", input, Self::UNITS)),
        };
        let bw = v * mult;
        if !(bw.is_finite() && bw > 0.0) {
            return Err(Error::new(
                ErrorKind::OutOfRange,
                format!("bandwidth '{input}' must be a positive finite rate"),
            ));
        }
        Ok(Bandwidth(bw))
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if v >= 1e9 {
            write!(f, "{}GB/s", trim(v / 1e9))
        } else if v >= 1e6 {
            write!(f, "{}MB/s", trim(v / 1e6))
        } else if v >= 1e3 {
            write!(f, "{}KB/s", trim(v / 1e3))
        } else {
            write!(f, "{}B/s", trim(v))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_and_without_units() {
        assert_eq!(Nanos::parse("400").unwrap().get(), 400.0);
        assert_eq!(Nanos::parse("400ns").unwrap().get(), 400.0);
        assert_eq!(Nanos::parse("1.5us").unwrap().get(), 1500.0);
        assert_eq!(Nanos::parse("10ms").unwrap().get(), 1e7);
        assert_eq!(Nanos::parse(" 2s ").unwrap().get(), 2e9);
    }

    #[test]
    fn durations_reject_unknown_units_naming_the_accepted_ones() {
        let e = Nanos::parse("10 parsecs").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Parse);
        assert!(e.to_string().contains("'10 parsecs'"));
        assert!(e.to_string().contains("ms"));
        assert!(Nanos::parse("").is_err());
        assert!(Nanos::parse("-5ns").is_err());
    }

    #[test]
    fn sizes_are_powers_of_1024() {
        assert_eq!(Bytes::parse("64").unwrap().get(), 64);
        assert_eq!(Bytes::parse("16KB").unwrap().get(), 16384);
        assert_eq!(Bytes::parse("16KiB").unwrap().get(), 16384);
        assert_eq!(Bytes::parse("1.5GiB").unwrap().get(), 3 << 29);
        assert_eq!(Bytes::parse("4k").unwrap().get(), 4096);
        assert!(Bytes::parse("4 furlongs").is_err());
    }

    #[test]
    fn sizes_print_compactly() {
        assert_eq!(Bytes(16384).to_string(), "16KiB");
        assert_eq!(Bytes(64).to_string(), "64B");
        assert_eq!(Bytes(1536).to_string(), "1.5KiB");
        assert_eq!(Bytes(1 << 30).to_string(), "1GiB");
    }

    #[test]
    fn bandwidths_parse_decimal_and_binary() {
        assert_eq!(Bandwidth::parse("8GB/s").unwrap().bytes_per_sec(), 8e9);
        assert_eq!(Bandwidth::parse("500MB/s").unwrap().bytes_per_sec(), 5e8);
        assert_eq!(
            Bandwidth::parse("1GiB/s").unwrap().bytes_per_sec(),
            1073741824.0
        );
        assert!(Bandwidth::parse("8GB").is_err());
        assert!(Bandwidth::parse("0GB/s").is_err());
        assert_eq!(Bandwidth::parse("6.5GB/s").unwrap().to_string(), "6.5GB/s");
    }

    #[test]
    fn durations_print_in_the_largest_fitting_unit() {
        assert_eq!(Nanos::new(400.0).to_string(), "400ns");
        assert_eq!(Nanos::new(1e7).to_string(), "10ms");
        assert_eq!(Nanos::new(1500.0).to_string(), "1.5us");
    }
}
