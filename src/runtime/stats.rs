//! What the loop counts about itself: production counters, cheap enough to keep always on.
//!
//! Counters are plain `Cell`s owned by the loop thread, except the wakes issued, which other
//! threads bump and which therefore live (atomic) in `Shared`. Posts and elided wakes are
//! counted here, as the loop drains its queues, so that a producer touches no counter on the
//! post path. [`LoopStats`] is a snapshot.

use std::cell::Cell;
use std::fmt;

use tokio::time::Duration;

/// The loop's own counters (loop thread only).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) iterations: Cell<u64>,
    pub(crate) sleeps: Cell<u64>,
    pub(crate) late_wakes: Cell<u64>,
    pub(crate) ticks_fired: Cell<u64>,
    pub(crate) late_ticks: Cell<u64>,
    pub(crate) very_late_ticks: Cell<u64>,
    pub(crate) max_wheel_lag: Cell<Duration>,
    pub(crate) panics: Cell<u64>,
    /// Wheel lag of fired ticks since the last [`LagHistogram`] was taken.
    pub(crate) lag_window: Cell<LagHistogram>,
    /// Wheel lag of every fired tick since the loop was built (for `/metrics`).
    pub(crate) lag_total: Cell<LagHistogram>,
    /// The loop thread's voluntary context switches when the loop was built.
    pub(crate) switches_at_build: Cell<u64>,
    /// Posted closures the loop has taken off the queue.
    pub(crate) posts_taken: Cell<u64>,
    /// Cross-thread task wakes the loop has taken off their queue.
    pub(crate) remote_wakes_taken: Cell<u64>,
    /// Task wakes on the loop thread while the loop was parked (each asks for a loop wake).
    pub(crate) local_notifies: Cell<u64>,
}

impl Counters {
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

/// How the loop is treating idle time, in one word for dashboards and one sentence for
/// operators (its `Display`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Verdict {
    /// Sleeping when idle, and the host returns from sleeps on time.
    #[default]
    Healthy,
    /// The host kept returning idle waits late, so sleeping is suspended for a while.
    SleepSuspended,
    /// `idle_wait = 0`: the loop never sleeps, by configuration.
    SpinningConfigured,
    /// The startup probe found this host cannot sleep precisely; the loop never sleeps.
    SpinningUnsupported,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Healthy => "healthy: sleeping when idle, waking on time",
            Verdict::SleepSuspended => {
                "sleep suspended (host): idle waits came back late, so the loop spins for now; \
                 a dedicated CPU or idle_wait = 0 avoids this"
            }
            Verdict::SpinningConfigured => "spinning (configured): idle_wait = 0, never sleeps",
            Verdict::SpinningUnsupported => {
                "spinning (host unsupported): the startup probe found sleeps overshoot a tick"
            }
        })
    }
}

/// A snapshot of the loop's production counters since it was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoopStats {
    /// Loop iterations run.
    pub iterations: u64,
    /// Idle blocks (the loop parked with every queue empty).
    pub sleeps: u64,
    /// Idle blocks that returned one tick or more after their deadline.
    pub late_wakes: u64,
    /// Wakes sent to a possibly parked loop by posts and cross-thread task wakes.
    pub wakes_issued: u64,
    /// Wakes not needed: the loop was running, or already signalled. Derived by the loop:
    /// posts, cross-thread task wakes and parked-loop task wakes, less the wakes they issued.
    pub wakes_elided: u64,
    /// Tick boundaries processed that had at least one due timer.
    pub ticks_fired: u64,
    /// Of those, ticks processed one tick or more after their boundary.
    pub late_ticks: u64,
    /// Of those, ticks processed two ticks (16 ms by default) or more after their boundary.
    pub very_late_ticks: u64,
    /// The largest processing time − boundary of a fired tick.
    pub max_wheel_lag: Duration,
    /// Panics caught in timer callbacks and tasks.
    pub panics: u64,
    /// How the loop treats idle time right now.
    pub verdict: Verdict,
    /// Times sleeping was suspended because the host returned sleeps late.
    pub backoffs: u64,
    /// Closures posted by `LoopContext::post` (and `spawn`, which posts) that the loop has
    /// taken to run (counted by the loop, so a post still queued is not in it yet).
    pub posts: u64,
    /// Wall time the loop was neither parked nor on a CPU (run-queue wait, host steal), over
    /// the seconds the profile has closed; zero without the profile.
    pub stolen: Duration,
    /// The part of `stolen` measured as run-queue wait.
    pub run_queue_wait: Duration,
    /// Times the loop thread blocked and was woken: its voluntary context switches since the
    /// loop was built (`getrusage(RUSAGE_THREAD)`, read when this snapshot was taken). The
    /// loop blocks only in its idle park, so at idle this tracks `sleeps`; a thread that
    /// wakes more often than the loop is paying for wake-ups that do no work.
    pub thread_wakeups: u64,
}

/// One counter per line, `name  value`, for the console's `loopstats`.
impl fmt::Display for LoopStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows: [(&str, &dyn fmt::Display); 15] = [
            ("iterations", &self.iterations),
            ("idle sleeps", &self.sleeps),
            ("thread wake-ups", &self.thread_wakeups),
            ("late wakes", &self.late_wakes),
            ("fired ticks", &self.ticks_fired),
            ("late ticks", &self.late_ticks),
            ("ticks late >= 2 ticks", &self.very_late_ticks),
            (
                "peak wheel lag",
                &format_args!("{:.3?}", self.max_wheel_lag),
            ),
            ("posts", &self.posts),
            ("wakes issued", &self.wakes_issued),
            ("wakes elided", &self.wakes_elided),
            ("sleep backoffs", &self.backoffs),
            ("stolen", &format_args!("{:.3?}", self.stolen)),
            (
                "run-queue wait",
                &format_args!("{:.3?}", self.run_queue_wait),
            ),
            ("panics caught", &self.panics),
        ];
        for (name, value) in rows {
            writeln!(f, "{name:<22} {value}")?;
        }
        write!(f, "{:<22} {}", "verdict", self.verdict)
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
