//! Long tails in a series of latencies: the iterations slower than a
//! factor times the median, and how far apart they come. The one
//! implementation behind the profiler's inference (`pmlab probe infer`,
//! the overwrite probe) and the simulator's validation (LENS Fig. 7).

/// The long-tail iterations of a series.
#[derive(Debug, Clone, PartialEq)]
pub struct Tails {
    /// Indices of the slow iterations, in order.
    pub index: Vec<usize>,
    /// Median time of all iterations (the upper median for an even
    /// count; 0 for an empty series).
    pub median: f64,
    /// Median time of the slow iterations (0 without any).
    pub tail_median: f64,
}

fn upper_median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The iterations of `times` slower than `factor` times the median (none
/// when the median is not positive). `times` may be `f64` or `f32`.
pub fn tails<T: Copy + Into<f64>>(times: &[T], factor: f64) -> Tails {
    let median = upper_median(times.iter().map(|&t| t.into()).collect());
    let index: Vec<usize> = times
        .iter()
        .enumerate()
        .filter(|(_, &t)| median > 0.0 && t.into() > factor * median)
        .map(|(i, _)| i)
        .collect();
    let tail_median = upper_median(index.iter().map(|&i| times[i].into()).collect());
    Tails {
        index,
        median,
        tail_median,
    }
}

/// The median gap between consecutive tails, in iterations (None with
/// fewer than two tails). Robust to a missed or an extra tail.
pub fn tail_interval(t: &Tails) -> Option<f64> {
    if t.index.len() < 2 {
        return None;
    }
    let gaps: Vec<f64> = t.index.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    Some(upper_median(gaps))
}

impl Tails {
    /// The mean gap between tails: the span from the first to the last
    /// over the gaps between them (None with fewer than two tails).
    pub fn mean_interval(&self) -> Option<f64> {
        let (first, last) = (self.index.first()?, self.index.last()?);
        (self.index.len() >= 2).then(|| (last - first) as f64 / (self.index.len() - 1) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_every_140_iterations_of_15_us_over_100_ns() {
        let mut times = vec![100.0; 1000];
        for i in (50..1000).step_by(140) {
            times[i] = 15_000.0;
        }
        let t = tails(&times, 5.0);
        assert_eq!(t.index, vec![50, 190, 330, 470, 610, 750, 890]);
        assert_eq!(t.median, 100.0);
        assert_eq!(t.tail_median, 15_000.0);
        assert_eq!(tail_interval(&t), Some(140.0));
        assert_eq!(t.mean_interval(), Some(140.0));
    }

    #[test]
    fn median_and_mean_intervals_differ_on_uneven_gaps() {
        // Gaps 10, 10, 40: the median gap ignores the one missed tail.
        let mut times = vec![1.0f32; 100];
        for i in [0, 10, 20, 60] {
            times[i] = 500.0;
        }
        let t = tails(&times, 100.0);
        assert_eq!(t.index, vec![0, 10, 20, 60]);
        assert_eq!(tail_interval(&t), Some(10.0));
        assert_eq!(t.mean_interval(), Some(20.0));
    }

    #[test]
    fn no_tails_without_a_positive_median_or_enough_of_them() {
        let t = tails::<f64>(&[], 5.0);
        assert!(t.index.is_empty() && t.median == 0.0 && t.tail_median == 0.0);
        assert_eq!(tail_interval(&t), None);
        assert_eq!(t.mean_interval(), None);
        let t = tails(&[0.0, 0.0, 0.0, 7.0], 5.0);
        assert!(t.index.is_empty(), "a zero median finds no tails");
        let t = tails(&[1.0, 1.0, 1.0, 7.0], 5.0);
        assert_eq!(t.index, vec![3]);
        assert_eq!(tail_interval(&t), None);
        // At exactly the factor is not slower.
        assert!(tails(&[1.0, 1.0, 1.0, 5.0], 5.0).index.is_empty());
    }
}
