//! A fixed-size histogram of non-negative integers: exact counts for small
//! values, power-of-two buckets above. Memory is constant whatever the
//! number or range of samples.

/// Values below this are counted exactly.
const EXACT: u64 = 128;
/// Power-of-two buckets above `EXACT`: [2^7, 2^8), ..., [2^63, 2^64).
const LOG_BUCKETS: usize = 57;

/// A histogram with exact bins for 0..128 and one bin per power of two
/// above.
#[derive(Debug, Clone)]
pub struct Histogram {
    exact: [u64; EXACT as usize],
    log: [u64; LOG_BUCKETS],
    count: u64,
    sum: u128,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Histogram {
        Histogram {
            exact: [0; EXACT as usize],
            log: [0; LOG_BUCKETS],
            count: 0,
            sum: 0,
            max: 0,
        }
    }

    /// Count one sample.
    #[inline]
    pub fn add(&mut self, v: u64) {
        if v < EXACT {
            self.exact[v as usize] += 1;
        } else {
            let b = (63 - v.leading_zeros()) as usize - 7;
            self.log[b] += 1;
        }
        self.count += 1;
        self.sum += v as u128;
        if v > self.max {
            self.max = v;
        }
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Largest sample (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Mean of the samples (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// Samples equal to `v` (exact range) or in `v`'s bucket.
    pub fn count_of(&self, v: u64) -> u64 {
        if v < EXACT {
            self.exact[v as usize]
        } else {
            self.log[(63 - v.leading_zeros()) as usize - 7]
        }
    }

    /// Samples in `lo..=hi` (bucket resolution above 127: a bucket counts
    /// when its lower bound lies in the range).
    pub fn count_range(&self, lo: u64, hi: u64) -> u64 {
        self.bins()
            .filter(|(b_lo, _, _)| *b_lo >= lo && *b_lo <= hi)
            .map(|(_, _, n)| n)
            .sum()
    }

    /// The `q`-quantile (0..=1), as the lower bound of the bin holding it.
    /// Exact below 128. `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (lo, _, n) in self.bins() {
            seen += n;
            if seen >= rank {
                return Some(lo);
            }
        }
        Some(self.max)
    }

    /// The median (see [`Histogram::quantile`]).
    pub fn median(&self) -> Option<u64> {
        self.quantile(0.5)
    }

    /// Non-empty bins as (lowest value, highest value, samples).
    pub fn bins(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let exact = self
            .exact
            .iter()
            .enumerate()
            .map(|(v, &n)| (v as u64, v as u64, n));
        let log = self.log.iter().enumerate().map(|(b, &n)| {
            let lo = 1u64 << (b + 7);
            let hi = lo.wrapping_shl(1).wrapping_sub(1).max(lo);
            let hi = if b + 7 == 63 { u64::MAX } else { hi };
            (lo, hi, n)
        });
        exact.chain(log).filter(|(_, _, n)| *n > 0)
    }

    /// Merge another histogram into this one.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.exact.iter_mut().zip(other.exact.iter()) {
            *a += b;
        }
        for (a, b) in self.log.iter_mut().zip(other.log.iter()) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_quantiles_are_exact_for_small_values() {
        let mut h = Histogram::new();
        for v in [1, 1, 1, 2, 5, 9, 40] {
            h.add(v);
        }
        assert_eq!(h.median(), Some(2));
        assert_eq!(h.quantile(0.0), Some(1));
        assert_eq!(h.quantile(1.0), Some(40));
        assert_eq!(h.count_of(1), 3);
        assert_eq!(h.count_range(2, 9), 3);
        assert_eq!(h.max(), 40);
        assert!((h.mean() - 59.0 / 7.0).abs() < 1e-9);
    }

    #[test]
    fn large_values_fall_in_power_of_two_buckets() {
        let mut h = Histogram::new();
        h.add(128);
        h.add(255);
        h.add(256);
        h.add(u64::MAX);
        let bins: Vec<_> = h.bins().collect();
        assert_eq!(bins[0], (128, 255, 2));
        assert_eq!(bins[1], (256, 511, 1));
        assert_eq!(bins[2].0, 1 << 63);
        assert_eq!(h.median(), Some(128));
        assert_eq!(Histogram::new().median(), None);
    }
}
