//! The `loop:` status line: one log line per interval that tells an operator whether the loop
//! is healthy, from figures they can act on.
//!
//! Each line covers the interval since the previous one: process CPU (from `getrusage`, so
//! it includes every thread), loop wake-ups per second and, beside them, the loop thread's own
//! wake-ups per second (its voluntary context switches: at idle the two should be about
//! equal, and a thread that wakes more often than its loop pays for wake-ups that do no
//! work), iterations, fired and late ticks (and
//! of those, ticks two ticks or more late), peak and p99 wheel lag, the longest iteration (the
//! most work one iteration did, parking excluded), the loop thread's
//! run-queue wait and steal (from the loop profile's closed seconds: stolen time is wall time
//! neither parked nor on a CPU; steal is the part of it that is not run-queue wait), posts,
//! wakes issued/elided, sleep backoffs, the verdict and `idle_wait`.
//!
//! This module measures, formats and schedules the line (a repeating timer on the loop); it
//! must never block: the line goes to the log like any other.

use std::fmt;
use std::time::Duration;

use std::cell::RefCell;
use std::rc::Rc;

use crate::config::Config;
use crate::host::process_cpu_time;
use crate::runtime::{self, LagHistogram, LoopStats};
use crate::timer::{self, TimerToken};

/// One interval's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusLine {
    /// How long the interval was.
    pub interval: Duration,
    /// Process CPU over the interval, percent of one core.
    pub cpu_percent: f64,
    /// Loop wake-ups (idle sleeps that ended) per second.
    pub wakes_per_sec: f64,
    /// The loop thread's own wake-ups per second (`LoopStats::thread_wakeups`).
    pub thread_wakes_per_sec: f64,
    /// Every counter's change over the interval ([`LoopStats::since`]): counts and times as
    /// differences, the peak wheel lag and the verdict as they are at its end.
    pub change: LoopStats,
    /// The largest wheel lag in the interval.
    pub peak_lag: Duration,
    /// An upper bound of its 99th percentile.
    pub p99_lag: Duration,
    /// The most work one loop iteration did in the interval (parking excluded).
    pub longest_iteration: Duration,
    /// Stolen time over the interval that was not run-queue wait (host steal).
    pub steal: Duration,
    /// `server.idle_wait`, as configured.
    pub idle_wait: Duration,
}

/// Remembers the previous sample and turns the next one into a [`StatusLine`].
#[derive(Debug, Clone)]
pub struct StatusReporter {
    idle_wait: Duration,
    last_stats: LoopStats,
    last_cpu: Duration,
    last_at: std::time::Instant,
}

impl StatusReporter {
    /// A reporter whose first line covers the interval from now, `stats` being the loop's
    /// counters now.
    pub fn new(idle_wait: Duration, stats: LoopStats) -> Self {
        StatusReporter {
            idle_wait,
            last_stats: stats,
            last_cpu: process_cpu_time(),
            last_at: std::time::Instant::now(),
        }
    }

    /// The line for the interval ending now, given the loop's counters, the lag window and
    /// the window's longest iteration (`runtime::take_longest_iteration`).
    pub fn sample(
        &mut self,
        stats: LoopStats,
        lags: &LagHistogram,
        longest_iteration: Duration,
    ) -> StatusLine {
        let now = std::time::Instant::now();
        let cpu = process_cpu_time();
        let line = self.line(
            now.duration_since(self.last_at),
            cpu.saturating_sub(self.last_cpu),
            &stats,
            lags,
        );
        let line = StatusLine {
            longest_iteration,
            ..line
        };
        self.last_stats = stats;
        self.last_cpu = cpu;
        self.last_at = now;
        line
    }

    fn line(
        &self,
        interval: Duration,
        cpu: Duration,
        now: &LoopStats,
        lags: &LagHistogram,
    ) -> StatusLine {
        let change = now.since(&self.last_stats);
        let secs = interval.as_secs_f64().max(1e-9);
        StatusLine {
            interval,
            cpu_percent: 100.0 * cpu.as_secs_f64() / secs,
            wakes_per_sec: change.sleeps as f64 / secs,
            thread_wakes_per_sec: change.thread_wakeups as f64 / secs,
            change,
            peak_lag: lags.max(),
            p99_lag: lags.percentile(99.0),
            longest_iteration: Duration::ZERO,
            steal: change.stolen.saturating_sub(change.run_queue_wait),
            idle_wait: self.idle_wait,
        }
    }
}

impl fmt::Display for StatusLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.change;
        write!(
            f,
            "loop: cpu {:.2}% | wakes {:.1}/s thread {:.1}/s | iterations {} | fired ticks {} | late ticks {} \
             (>=2 ticks {}) | wheel lag peak {:.3?} p99<={:.3?} | longest iteration {:.3?} | run-queue wait {:.3?} steal \
             {:.3?} | posts {} | wakes issued {} elided {} | backoffs {} | verdict {:?} | \
             idle_wait {:?}",
            self.cpu_percent,
            self.wakes_per_sec,
            self.thread_wakes_per_sec,
            c.iterations,
            c.ticks_fired,
            c.late_ticks,
            c.very_late_ticks,
            self.peak_lag,
            self.p99_lag,
            self.longest_iteration,
            c.run_queue_wait,
            self.steal,
            c.posts,
            c.wakes_issued,
            c.wakes_elided,
            c.backoffs,
            c.verdict,
            self.idle_wait,
        )
    }
}

/// The status line's reporter and its last line (which `status` on the console shows).
pub(super) struct StatusState {
    reporter: RefCell<StatusReporter>,
    pub(super) last: RefCell<Option<StatusLine>>,
    pub(super) interval: Option<Duration>,
    pub(super) started: tokio::time::Instant,
}

impl StatusState {
    pub(super) fn new(config: &Config) -> StatusState {
        StatusState {
            reporter: RefCell::new(StatusReporter::new(
                config.server.idle_wait,
                runtime::stats(),
            )),
            last: RefCell::new(None),
            interval: config.server.loop_stats_interval(),
            started: tokio::time::Instant::now(),
        }
    }

    /// Samples the interval that ends now and logs its `loop:` line.
    pub(super) fn emit(&self) {
        let line = self.reporter.borrow_mut().sample(
            runtime::stats(),
            &runtime::take_lag_window(),
            runtime::take_longest_iteration(),
        );
        tracing::info!("{line}");
        *self.last.borrow_mut() = Some(line);
    }
}

pub(super) fn start_status_line(every: Duration, status: &Rc<StatusState>) -> TimerToken {
    let status = status.clone();
    timer::every(every).start(move || status.emit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reports_the_interval_not_the_totals() {
        let before = LoopStats {
            iterations: 100,
            sleeps: 40,
            thread_wakeups: 45,
            ticks_fired: 30,
            posts: 5,
            ..LoopStats::default()
        };
        let reporter = StatusReporter {
            idle_wait: Duration::from_secs(1),
            last_stats: before,
            last_cpu: Duration::ZERO,
            last_at: std::time::Instant::now(),
        };
        let after = LoopStats {
            iterations: 160,
            sleeps: 60,
            thread_wakeups: 67,
            ticks_fired: 50,
            late_ticks: 1,
            very_late_ticks: 1,
            posts: 9,
            stolen: Duration::from_millis(7),
            run_queue_wait: Duration::from_millis(5),
            ..before
        };
        let line = reporter.line(
            Duration::from_secs(10),
            Duration::from_millis(5),
            &after,
            &LagHistogram::default(),
        );
        assert_eq!(line.change.iterations, 60);
        assert_eq!(line.change.ticks_fired, 20);
        assert_eq!(line.change.posts, 4);
        assert!((line.wakes_per_sec - 2.0).abs() < 1e-9);
        assert!((line.cpu_percent - 0.05).abs() < 1e-9);
        let text = line.to_string();
        assert!((line.thread_wakes_per_sec - 2.2).abs() < 1e-9);
        assert!(
            text.starts_with("loop: cpu 0.05% | wakes 2.0/s thread 2.2/s | iterations 60"),
            "{text}"
        );
        assert!(text.contains("verdict Healthy"), "{text}");
        assert!(text.contains("late ticks 1 (>=2 ticks 1)"), "{text}");
        assert!(!text.contains("16ms"), "{text}");
        assert!(
            text.contains("run-queue wait 5.000ms steal 2.000ms"),
            "{text}"
        );
        assert!(text.contains("| longest iteration 0.000ns |"), "{text}");
        let busy = StatusLine {
            longest_iteration: Duration::from_micros(17_250),
            ..line
        };
        assert!(
            busy.to_string()
                .contains("p99<=0.000ns | longest iteration 17.250ms | run-queue wait"),
            "{busy}"
        );
    }

    #[test]
    fn cpu_time_counts_a_busy_loop() {
        let before = process_cpu_time();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        assert!(
            process_cpu_time() > before,
            "50 ms of spinning cost no CPU time?"
        );
    }
}
