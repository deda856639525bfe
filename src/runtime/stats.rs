//! What the loop counts about itself: production counters, cheap enough to keep always on.
//!
//! Counters are plain `Cell`s owned by the loop thread, except the wake counters, which other
//! threads bump and which therefore live (atomic) in `Shared`. [`LoopStats`] is a snapshot.

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
    pub(crate) max_wheel_lag: Cell<Duration>,
    pub(crate) panics: Cell<u64>,
}

impl Counters {
    pub(crate) fn bump(cell: &Cell<u64>) {
        cell.set(cell.get() + 1);
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
    /// Wakes not needed: the loop was running, or already signalled.
    pub wakes_elided: u64,
    /// Tick boundaries processed that had at least one due timer.
    pub ticks_fired: u64,
    /// Of those, ticks processed one tick or more after their boundary.
    pub late_ticks: u64,
    /// The largest processing time − boundary of a fired tick.
    pub max_wheel_lag: Duration,
    /// Panics caught in timer callbacks and tasks.
    pub panics: u64,
    /// How the loop treats idle time right now.
    pub verdict: Verdict,
}
