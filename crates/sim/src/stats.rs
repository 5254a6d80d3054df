//! Statistics: a latency histogram and a named, hierarchical stats tree.

use serde::Serialize;

/// A latency histogram with about 3% relative resolution (32 sub-buckets
/// per power of two, quarter-nanosecond floor), exact count, sum, min, max.
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
}

const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;

fn bucket_of(v: f64) -> usize {
    let x = (v.max(0.0) * 4.0) as u64;
    if x < 2 * SUB {
        return x as usize;
    }
    let exp = 63 - x.leading_zeros();
    let mant = (x >> (exp - SUB_BITS)) & (SUB - 1);
    (2 * SUB + (exp as u64 - SUB_BITS as u64 - 1) * SUB + mant) as usize
}

fn bucket_mid(i: usize) -> f64 {
    let i = i as u64;
    if i < 2 * SUB {
        return (i as f64 + 0.5) / 4.0;
    }
    let k = i - 2 * SUB;
    let exp = k / SUB + SUB_BITS as u64 + 1;
    let mant = k % SUB;
    let lo = (SUB + mant) << (exp - SUB_BITS as u64);
    let width = 1u64 << (exp - SUB_BITS as u64);
    (lo as f64 + width as f64 / 2.0) / 4.0
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: Vec::new(),
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: 0.0,
        }
    }
}

impl Histogram {
    /// Record one value (ns).
    #[inline]
    pub fn add(&mut self, v: f64) {
        let b = bucket_of(v);
        if b >= self.buckets.len() {
            self.buckets.resize(b + 1, 0);
        }
        self.buckets[b] += 1;
        self.count += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
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

    /// The `p`-th percentile (0..=100), clamped to the observed min and max.
    pub fn percentile(&self, p: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return bucket_mid(i).clamp(self.min, self.max);
            }
        }
        self.max
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
    fn percentiles_are_within_bucket_resolution() {
        let mut h = Histogram::default();
        for i in 1..=1000 {
            h.add(i as f64);
        }
        assert_eq!(h.count(), 1000);
        assert!((h.mean() - 500.5).abs() < 1e-9);
        let p50 = h.percentile(50.0);
        assert!((p50 - 500.0).abs() / 500.0 < 0.04, "{p50}");
        let p99 = h.percentile(99.0);
        assert!((p99 - 990.0).abs() / 990.0 < 0.04, "{p99}");
        assert_eq!(h.percentile(100.0), 1000.0);
    }

    #[test]
    fn bucket_mid_is_inside_its_bucket() {
        for v in [0.1, 3.0, 17.0, 100.0, 12345.0, 9.9e6] {
            let m = bucket_mid(bucket_of(v));
            assert!((m - v).abs() / v.max(1.0) < 0.05, "{v} -> {m}");
        }
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
