//! Statistics: a latency histogram and a named, hierarchical stats tree.

use serde::Serialize;

/// Values are recorded in quarter nanoseconds (the resolution of the
/// simulator's clocks that matters).
const UNITS_PER_NS: f64 = 4.0;

/// Values below this many units (512 ns) are counted exactly, one counter
/// per unit, before they reach the HdrHistogram: with three significant
/// digits it holds them at unit resolution too, so this loses nothing; it
/// only saves the cost of its `record` on the simulator's hot path
/// (`crates/sim/README.md`, "Latency histograms").
const EXACT_UNITS: usize = 2048;

/// A latency histogram: an HdrHistogram (crate `hdrhistogram`) with three
/// significant digits (0.1% relative resolution above 512 ns, exact
/// quarter nanoseconds below), growing to any value; plus the exact
/// count, sum, min and max. Percentiles up to p99.999 are read from it.
#[derive(Debug, Clone)]
pub struct Histogram {
    /// Counts of the values below [`EXACT_UNITS`], by unit.
    exact: Vec<u64>,
    /// The values from [`EXACT_UNITS`] on.
    hdr: hdrhistogram::Histogram<u64>,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            exact: vec![0; EXACT_UNITS],
            hdr: hdrhistogram::Histogram::new(3).expect("3 significant digits are valid"),
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: 0.0,
        }
    }
}

impl Histogram {
    /// Record one value (ns; negative values count as 0).
    #[inline]
    pub fn add(&mut self, v: f64) {
        // The cast saturates; the histogram grows to the value, and one it
        // cannot grow to is recorded as its largest.
        let units = (v.max(0.0) * UNITS_PER_NS) as u64;
        match self.exact.get_mut(units as usize) {
            Some(n) => *n += 1,
            None => self.record_large(units),
        }
        self.count += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    #[cold]
    fn record_large(&mut self, units: u64) {
        if self.hdr.record(units).is_err() {
            self.hdr.saturating_record(units);
        }
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Mean (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// Largest value (0 when empty).
    pub fn max(&self) -> f64 {
        self.max
    }

    /// The `p`-th percentile (0..=100): the value of rank `p / 100 * count`
    /// (rounded up), to the histogram's resolution, clamped to the observed
    /// min and max (0 when empty).
    pub fn percentile(&self, p: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let q = (p / 100.0).clamp(0.0, 1.0);
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        let mut at = None;
        for (units, n) in self.exact.iter().enumerate() {
            seen += n;
            if seen >= rank {
                at = Some(units as f64);
                break;
            }
        }
        if at.is_none() {
            for v in self.hdr.iter_recorded() {
                seen += v.count_at_value();
                if seen >= rank {
                    at = Some(self.hdr.highest_equivalent(v.value_iterated_to()) as f64);
                    break;
                }
            }
        }
        at.map_or(self.max, |u| (u / UNITS_PER_NS).clamp(self.min, self.max))
    }
}

/// One named statistic.
#[derive(Debug, Clone, Serialize)]
pub struct Stat {
    /// Name, unique within its node.
    pub name: String,
    /// Value.
    pub value: f64,
    /// Unit (`ns`, `GB/s`, `count`, `ratio`, `B`…).
    pub unit: &'static str,
}

/// A node of the statistics tree: the stats of one component and those of
/// its children.
///
/// It serialises as one object per node, keyed by name, so that a script
/// reads a value with one key path (`stats["latency"]["read"]["p99"]`, the
/// same path as [`Stats::get`]): each value is a number under its name and
/// each child an object under its name. Units are not part of that object:
/// [`Stats::units`] lists them by dotted path.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Component name (`controller`, `dimm0`, `rmw_buffer`…).
    pub name: String,
    /// This component's values.
    pub values: Vec<Stat>,
    /// Child components.
    pub children: Vec<Stats>,
}

impl Serialize for Stats {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = ser.serialize_map(Some(self.values.len() + self.children.len()))?;
        for v in &self.values {
            m.serialize_entry(&v.name, &v.value)?;
        }
        for c in &self.children {
            m.serialize_entry(&c.name, c)?;
        }
        m.end()
    }
}

impl Stats {
    /// An empty node.
    pub fn new(name: impl Into<String>) -> Stats {
        Stats {
            name: name.into(),
            values: Vec::new(),
            children: Vec::new(),
        }
    }

    /// Add a value (names contain no `.`: it separates path components).
    pub fn set(&mut self, name: &str, value: f64, unit: &'static str) {
        debug_assert!(!name.contains('.'), "stat name '{name}' contains a dot");
        self.values.push(Stat {
            name: name.to_string(),
            value,
            unit,
        });
    }

    /// Add a child node.
    pub fn push(&mut self, child: Stats) {
        self.children.push(child);
    }

    /// Look a value up by dotted path below this node
    /// (`controller.dimm0.rmw_buffer.hit_rate`).
    pub fn get(&self, path: &str) -> Option<f64> {
        match path.split_once('.') {
            None => self.values.iter().find(|s| s.name == path).map(|s| s.value),
            Some((head, rest)) => {
                let child = self.children.iter().find(|c| c.name == head)?;
                child.get(rest)
            }
        }
    }

    /// The unit of every value by dotted path (`latency.read.p99` → `ns`),
    /// depth first.
    pub fn units(&self) -> Vec<(String, &'static str)> {
        self.flatten().into_iter().map(|(p, _, u)| (p, u)).collect()
    }

    /// Every value as (dotted path, value, unit), depth first.
    pub fn flatten(&self) -> Vec<(String, f64, &'static str)> {
        let mut out = Vec::new();
        self.flatten_into("", &mut out);
        out
    }

    fn flatten_into(&self, prefix: &str, out: &mut Vec<(String, f64, &'static str)>) {
        for s in &self.values {
            out.push((format!("{prefix}{}", s.name), s.value, s.unit));
        }
        for c in &self.children {
            c.flatten_into(&format!("{prefix}{}.", c.name), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_within_a_tenth_of_a_percent() {
        let mut h = Histogram::default();
        for i in 1..=1000 {
            h.add(i as f64);
        }
        assert_eq!(h.count(), 1000);
        assert!((h.mean() - 500.5).abs() < 1e-9);
        // The value of rank p * n (or the next: rounding of p * n), to
        // 0.1%.
        for (p, want) in [(50.0, 500.0), (99.0, 990.0), (99.9, 999.0)] {
            let got = h.percentile(p);
            assert!(
                got >= want * 0.999 && got <= (want + 1.0) * 1.001,
                "p{p}: {got}"
            );
        }
        assert_eq!(h.percentile(100.0), 1000.0);
        assert_eq!(h.percentile(0.0), 1.0);
    }

    #[test]
    fn deep_tails_are_resolved() {
        // 99,990 requests of 100 ns, 9 of 10 us and one of 1 ms: p99.99 is
        // the last 100 ns request, p99.999 the 10 us ones, p100 the 1 ms.
        let mut h = Histogram::default();
        for _ in 0..99_990 {
            h.add(100.0);
        }
        for _ in 0..9 {
            h.add(10_000.0);
        }
        h.add(1e6);
        assert_eq!(h.percentile(99.99), 100.0);
        let p = h.percentile(99.999);
        assert!((p - 10_000.0).abs() / 10_000.0 <= 0.001, "{p}");
        assert_eq!(h.percentile(100.0), 1e6);
        // Quarter nanoseconds are exact below 512 ns.
        let mut q = Histogram::default();
        q.add(0.25);
        q.add(137.75);
        assert_eq!(q.percentile(100.0), 137.75);
        assert_eq!(q.percentile(50.0), 0.25);
    }

    #[test]
    fn the_exact_front_agrees_with_a_plain_hdr_histogram() {
        // Values on both sides of 512 ns: the percentiles are those of one
        // HdrHistogram holding every value.
        let mut h = Histogram::default();
        let mut plain = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v =
                (x % 4_000_000) as f64 / 1000.0 + if x.is_multiple_of(7) { 3000.0 } else { 0.0 };
            h.add(v);
            plain.record((v * UNITS_PER_NS) as u64).unwrap();
        }
        for p in [1.0, 50.0, 90.0, 99.0, 99.9, 99.99, 99.999] {
            let want = plain.value_at_quantile(p / 100.0) as f64 / UNITS_PER_NS;
            let got = h.percentile(p);
            assert!(
                (got - want).abs() <= 0.001 * want + 0.25,
                "p{p}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn empty_and_extreme_values_do_not_panic() {
        let mut h = Histogram::default();
        assert_eq!(h.percentile(99.0), 0.0);
        h.add(-3.0);
        h.add(f64::MAX);
        h.add(f64::INFINITY);
        assert_eq!(h.count(), 3);
        assert!(h.percentile(50.0) >= 0.0);
    }

    #[test]
    fn stats_get_by_path() {
        let mut root = Stats::new("system");
        let mut c = Stats::new("dimm0");
        c.set("hits", 3.0, "count");
        root.push(c);
        assert_eq!(root.get("dimm0.hits"), Some(3.0));
        assert_eq!(root.get("dimm0.misses"), None);
        assert_eq!(root.flatten()[0].0, "dimm0.hits");
        assert_eq!(root.units(), vec![("dimm0.hits".to_string(), "count")]);
    }

    #[test]
    fn stats_serialise_as_objects_keyed_by_name() {
        let mut root = Stats::new("system");
        root.set("requests", 2.0, "count");
        let mut lat = Stats::new("latency");
        let mut read = Stats::new("read");
        read.set("p99", 120.5, "ns");
        lat.push(read);
        root.push(lat);
        let v: serde_json::Value = serde_json::to_value(&root).unwrap();
        assert_eq!(v["latency"]["read"]["p99"], 120.5);
        assert_eq!(v["requests"], 2.0);
        assert!(v.get("name").is_none() && v.get("values").is_none());
    }
}
