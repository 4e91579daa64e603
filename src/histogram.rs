//! Fixed-bucket wait histograms with atomic bucket counters.
//!
//! One set of bucket bounds, 1 ms to 60 s, serves both the Prometheus
//! `rate_limit_fair_queue_wait_seconds` histogram and each tenant's wait-p95 indicator. Each
//! tenant slot keeps one histogram whose buckets only ever grow, across the tenants that use the
//! slot: the engine-wide histogram is their sum, and a tenant's own view is the counts minus a
//! baseline taken when it claimed the slot. So a wait is recorded once, with one `Relaxed`
//! `fetch_add` after a binary search over 16 constants: no lock, no allocation, safe on the hot
//! path. Readers sum the buckets with `Relaxed` loads; a snapshot taken while writers run may be
//! off by the few observations in flight, which a histogram tolerates, and never goes backwards
//! (each bucket only grows).

use crate::sync::{AtomicU64, Ordering};

/// Upper bounds (`le`) of the finite buckets, in ns: 1 ms … 60 s. A value equal to a bound falls
/// in that bound's bucket, as Prometheus' `le` requires.
pub(crate) const BOUNDS_NS: [u64; 16] = [
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
    20_000_000_000,
    30_000_000_000,
    60_000_000_000,
];

/// The same bounds as Prometheus `le` label values (seconds).
pub(crate) const BOUNDS_LE: [&str; 16] = [
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5",
    "10", "20", "30", "60",
];

/// Buckets: the finite ones plus `+Inf`.
pub(crate) const BUCKETS: usize = BOUNDS_NS.len() + 1;

/// The bucket a wait of `ns` falls in: the first bound `>= ns`, or the `+Inf` bucket.
#[inline]
pub(crate) fn bucket_of(ns: u64) -> usize {
    BOUNDS_NS.partition_point(|&bound| bound < ns)
}

/// A slot's wait histogram: per-bucket (not cumulative) counts that only grow, and the
/// baseline its current tenant started from. `repr(C)`: the counts, which grants write, first.
#[derive(Default)]
#[repr(C)]
pub(crate) struct TenantWaits {
    buckets: [AtomicU64; BUCKETS],
    /// The counts when the current tenant claimed the slot; written only by the claimer.
    base: [AtomicU64; BUCKETS],
}

impl TenantWaits {
    #[inline]
    pub(crate) fn record(&self, ns: u64) {
        // Relaxed: statistics, see the module docs.
        self.buckets[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
    }

    /// A new tenant starts counting from here. Called only by the thread that owns the slot
    /// exclusively (a claim), when no ticket of the previous tenant is live.
    pub(crate) fn reset(&self) {
        for (base, bucket) in self.base.iter().zip(&self.buckets) {
            // Relaxed: the claimer's Release of `counts` publishes the baseline.
            base.store(bucket.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// The current tenant's per-bucket counts.
    pub(crate) fn counts(&self) -> [u64; BUCKETS] {
        // Relaxed: a snapshot of statistics.
        std::array::from_fn(|i| {
            let base = self.base[i].load(Ordering::Relaxed);
            self.buckets[i].load(Ordering::Relaxed).saturating_sub(base)
        })
    }

    /// Adds every count this slot ever recorded into `counts` (the engine-wide histogram).
    pub(crate) fn add_lifetime_into(&self, counts: &mut [u64; BUCKETS]) {
        for (total, bucket) in counts.iter_mut().zip(&self.buckets) {
            // Relaxed: a snapshot of statistics.
            *total += bucket.load(Ordering::Relaxed);
        }
    }
}

/// The `q` quantile (0 < q ≤ 1) of per-bucket `counts`, by linear interpolation inside the bucket
/// that holds it, as Prometheus' `histogram_quantile` does: the lower edge of the first bucket is
/// 0, and a quantile in the `+Inf` bucket is reported as the highest finite bound (60 s).
/// `None` when there are no observations.
pub(crate) fn quantile_ns(counts: &[u64; BUCKETS], q: f64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &count) in counts.iter().enumerate() {
        if count == 0 || ((below + count) as f64) < rank {
            below += count;
            continue;
        }
        let Some(&upper) = BOUNDS_NS.get(i) else {
            return Some(BOUNDS_NS[BOUNDS_NS.len() - 1]);
        };
        let lower = if i == 0 { 0 } else { BOUNDS_NS[i - 1] };
        let fraction = ((rank - below as f64) / count as f64).clamp(0.0, 1.0);
        return Some(lower + ((upper - lower) as f64 * fraction) as u64);
    }
    Some(BOUNDS_NS[BOUNDS_NS.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_match_labels_and_buckets_include_their_bound() {
        for (ns, le) in BOUNDS_NS.iter().zip(BOUNDS_LE) {
            assert_eq!((*ns as f64 / 1e9).to_string(), le);
        }
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1_000_000), 0);
        assert_eq!(bucket_of(1_000_001), 1);
        assert_eq!(bucket_of(60_000_000_000), 15);
        assert_eq!(bucket_of(60_000_000_001), 16);
        assert_eq!(bucket_of(u64::MAX), 16);
    }

    #[test]
    fn quantile_interpolates_inside_the_bucket() {
        let mut counts = [0u64; BUCKETS];
        assert_eq!(quantile_ns(&counts, 0.95), None);
        counts[bucket_of(7_000_000)] = 100; // all in (5 ms, 10 ms]
        assert_eq!(quantile_ns(&counts, 0.5), Some(7_500_000));
        assert_eq!(quantile_ns(&counts, 1.0), Some(10_000_000));
        counts[BUCKETS - 1] = 1_000;
        assert_eq!(quantile_ns(&counts, 0.95), Some(60_000_000_000));
    }
}
