//! Sizes and durations written for people: `256 MiB`, `4 KiB`, `1.5 µs`.
//! Chart ticks use them, and so can titles and reports.

/// A number with at most three significant digits and no trailing zeros
/// (`16`, `1.5`, `0.25`, `123`).
pub(crate) fn short(v: f64) -> String {
    let s = if v.abs() >= 100.0 || v == v.round() {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A size in bytes with binary units: `64 B`, `4 KiB`, `1.5 MiB`, `256 GiB`.
///
/// ```
/// assert_eq!(pmlab_plot::fmt_size(256.0 * 1048576.0), "256 MiB");
/// assert_eq!(pmlab_plot::fmt_size(4096.0), "4 KiB");
/// assert_eq!(pmlab_plot::fmt_size(100.0), "100 B");
/// ```
pub fn fmt_size(bytes: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = bytes;
    let mut i = 0;
    while x.abs() >= 1024.0 && i + 1 < UNITS.len() {
        x /= 1024.0;
        i += 1;
    }
    format!("{} {}", short(x), UNITS[i])
}

/// A duration given in nanoseconds: `80 ns`, `1.5 µs`, `2 ms`, `3.2 s`.
///
/// ```
/// assert_eq!(pmlab_plot::fmt_duration(1500.0), "1.5 µs");
/// assert_eq!(pmlab_plot::fmt_duration(80.0), "80 ns");
/// assert_eq!(pmlab_plot::fmt_duration(2.5e9), "2.5 s");
/// ```
pub fn fmt_duration(ns: f64) -> String {
    let a = ns.abs();
    if a >= 1e9 {
        format!("{} s", short(ns / 1e9))
    } else if a >= 1e6 {
        format!("{} ms", short(ns / 1e6))
    } else if a >= 1e3 {
        format!("{} µs", short(ns / 1e3))
    } else {
        format!("{} ns", short(ns))
    }
}

/// A plain count with an SI suffix past ten thousand: `950`, `25k`, `3M`.
pub fn fmt_count(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", short(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", short(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", short(v / 1e3))
    } else {
        short(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_binary_units_with_a_space() {
        assert_eq!(fmt_size(0.0), "0 B");
        assert_eq!(fmt_size(64.0), "64 B");
        assert_eq!(fmt_size(1023.0), "1023 B");
        assert_eq!(fmt_size(1024.0), "1 KiB");
        assert_eq!(fmt_size(1536.0), "1.5 KiB");
        assert_eq!(fmt_size(16384.0), "16 KiB");
        assert_eq!(fmt_size(3.0 * 1024.0 * 1024.0 * 1024.0), "3 GiB");
    }

    #[test]
    fn durations_pick_the_largest_whole_unit() {
        assert_eq!(fmt_duration(0.5), "0.5 ns");
        assert_eq!(fmt_duration(999.0), "999 ns");
        assert_eq!(fmt_duration(1000.0), "1 µs");
        assert_eq!(fmt_duration(1536.0), "1.54 µs");
        assert_eq!(fmt_duration(2e6), "2 ms");
        assert_eq!(fmt_duration(12.5e6), "12.5 ms");
    }

    #[test]
    fn counts_get_si_suffixes() {
        assert_eq!(fmt_count(950.0), "950");
        assert_eq!(fmt_count(25_000.0), "25k");
        assert_eq!(fmt_count(3e6), "3M");
        assert_eq!(fmt_count(0.25), "0.25");
    }
}
