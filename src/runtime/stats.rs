//! What the loop counts about itself: production counters, cheap enough to keep always on.
//!
//! Counters are plain `Cell`s owned by the loop thread, except the wakes issued, which other
//! threads bump and which therefore live (atomic) in `Shared`. Posts and elided wakes are
//! counted here, as the loop drains its queues, so that a producer touches no counter on the
//! post path. [`LoopStats`](super::LoopStats) is a snapshot; the counters themselves are
//! declared in [`super::telemetry`].

use std::cell::Cell;

use tokio::time::Duration;

use super::telemetry::Totals;

/// The loop's own counters (loop thread only): the totals of the table
/// ([`super::telemetry`]) and what the loop needs besides to derive the rest.
#[derive(Default)]
pub(crate) struct Counters {
    /// Every total the loop counts itself, one cell each.
    pub(crate) totals: Totals,
    /// Wheel lag of fired ticks since the last [`LagHistogram`] was taken.
    pub(crate) lag_window: Cell<LagHistogram>,
    /// Wheel lag of every fired tick since the loop was built (for `/metrics`).
    pub(crate) lag_total: Cell<LagHistogram>,
    /// The longest iteration since the status line last took it
    /// ([`take_longest_iteration`](super::take_longest_iteration)).
    pub(crate) longest_iteration_window: Cell<Duration>,
    /// The loop thread's voluntary context switches when the loop was built.
    pub(crate) switches_at_build: Cell<u64>,
    /// Cross-thread task wakes the loop has taken off their queue.
    pub(crate) remote_wakes_taken: Cell<u64>,
    /// Task wakes on the loop thread while the loop was parked (each asks for a loop wake).
    pub(crate) local_notifies: Cell<u64>,
}

impl Counters {
    /// A panic was caught and the loop goes on past it.
    pub(crate) fn count_panic(&self) {
        Counters::bump(&self.totals.panics);
    }

    pub(crate) fn bump(cell: &Cell<u64>) {
        cell.set(cell.get() + 1);
    }

    pub(crate) fn add(cell: &Cell<u64>, n: usize) {
        cell.set(cell.get() + n as u64);
    }

    /// Times the loop thread blocked and was woken since the loop was built (a system call:
    /// call it on the loop thread, per snapshot, not per iteration).
    pub(crate) fn thread_wakeups(&self) -> u64 {
        super::thread_wakes::voluntary_switches().saturating_sub(self.switches_at_build.get())
    }

    /// An iteration worked `worked` (its phases, without the park): the peak since start and
    /// the window's.
    pub(crate) fn record_iteration(&self, worked: Duration) {
        let total = &self.totals.longest_iteration;
        total.set(total.get().max(worked));
        let window = &self.longest_iteration_window;
        window.set(window.get().max(worked));
    }

    pub(crate) fn record_lag(&self, lag: Duration) {
        let mut window = self.lag_window.get();
        window.record(lag);
        self.lag_window.set(window);
        let mut total = self.lag_total.get();
        total.record(lag);
        self.lag_total.set(total);
    }
}

/// Number of [`LagHistogram`] buckets: bucket `i` holds lags below 2^i µs (the last one holds
/// everything from ~1 s up).
const LAG_BUCKETS: usize = 21;

/// Wheel lags (processing time − boundary of a fired tick) in power-of-two microsecond
/// buckets: constant size, O(1) to record, percentiles good to a factor of two — enough to
/// tell 50 µs from 2 ms at a glance, which is what an operator needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LagHistogram {
    counts: [u64; LAG_BUCKETS],
    max: Duration,
    sum: Duration,
}

impl LagHistogram {
    fn record(&mut self, lag: Duration) {
        let micros = u64::try_from(lag.as_micros()).unwrap_or(u64::MAX);
        // Bucket i covers [2^(i-1), 2^i) µs; bucket 0 is "under 1 µs".
        let bucket = (u64::BITS - micros.leading_zeros()) as usize;
        self.counts[bucket.min(LAG_BUCKETS - 1)] += 1;
        self.max = self.max.max(lag);
        self.sum = self.sum.saturating_add(lag);
    }

    /// The lags recorded, added up.
    #[must_use]
    pub fn sum(&self) -> Duration {
        self.sum
    }

    /// Each bucket's upper bound and how many lags fell in it (not cumulative), smallest
    /// first; the last bucket's bound is `None` (it has none).
    pub fn buckets(&self) -> impl Iterator<Item = (Option<Duration>, u64)> + '_ {
        self.counts.iter().enumerate().map(|(bucket, &count)| {
            let bound = (bucket < LAG_BUCKETS - 1).then(|| Duration::from_micros(1 << bucket));
            (bound, count)
        })
    }

    /// Fired ticks recorded.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The largest lag recorded.
    #[must_use]
    pub fn max(&self) -> Duration {
        self.max
    }

    /// An upper bound of the `p`-th percentile (0–100): the top of the bucket holding it,
    /// capped by the maximum. Zero when nothing was recorded.
    #[must_use]
    pub fn percentile(&self, p: f64) -> Duration {
        let total = self.count();
        if total == 0 {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank && bucket < LAG_BUCKETS - 1 {
                return Duration::from_micros(1 << bucket).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_bucket_upper_bounds_capped_by_the_max() {
        let mut h = LagHistogram::default();
        assert_eq!(h.percentile(99.0), Duration::ZERO);
        for _ in 0..98 {
            h.record(Duration::from_micros(40)); // bucket [32, 64)
        }
        h.record(Duration::from_micros(700)); // [512, 1024)
        h.record(Duration::from_millis(3));
        assert_eq!(h.count(), 100);
        assert_eq!(h.percentile(50.0), Duration::from_micros(64));
        assert_eq!(h.percentile(99.0), Duration::from_micros(1024));
        assert_eq!(h.percentile(100.0), Duration::from_millis(3));
        assert_eq!(h.max(), Duration::from_millis(3));
        h.record(Duration::ZERO);
        h.record(Duration::from_secs(3600));
        assert_eq!(h.percentile(100.0), Duration::from_secs(3600));
    }
}
