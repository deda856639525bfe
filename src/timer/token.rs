//! Starting callback timers (`TimerBuilder`) and controlling them afterwards (`TimerToken`).
//!
//! A token is a generational wheel key plus the id of its loop: `Copy`, `Send`, and inert
//! once its timer is gone — `cancel()` on a finished timer is a no-op that returns false, even
//! after the wheel reused the slot for another timer.

use std::panic::Location;

use tokio::time::{Duration, Instant};

use crate::runtime::Cancel;
use crate::runtime::context::{Core, LoopId, core};
use crate::runtime::job::{Job, TimerJob};
use crate::slab::Key;

/// Describes a callback timer; nothing happens until [`TimerBuilder::start`].
#[derive(Debug, Clone, Copy)]
#[must_use = "a TimerBuilder does nothing until .start() is called"]
pub struct TimerBuilder {
    delay: Duration,
    interval: Option<Duration>,
    times: Option<u32>,
    tolerance: Duration,
}

impl TimerBuilder {
    pub(super) fn new(delay: Duration) -> Self {
        TimerBuilder {
            delay,
            interval: None,
            times: None,
            tolerance: Duration::ZERO,
        }
    }

    /// Repeat every `interval` after the first run. Without [`TimerBuilder::times`], until
    /// cancelled. Intervals shorter than a tick run at most once per tick.
    pub fn every(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Run `n` times in total (with [`TimerBuilder::every`]; a one-shot runs once whatever
    /// `n` says, except `times(0)`, which never runs).
    pub fn times(mut self, n: u32) -> Self {
        self.times = Some(n);
        self
    }

    /// Lets every run come up to `tolerance` after its due tick, so that the loop can run it
    /// together with other timers instead of waking for it alone. A run is never early (T1):
    /// it comes at the first tick in `due ..= due + tolerance` at which the loop runs timers
    /// anyway — one where a timer without tolerance is due, or another tolerant timer reaches
    /// the end of its window — and at the end of its window at the latest. Where in that
    /// window depends only on the timers, never on the clock reading, posts, I/O or
    /// `idle_wait` (T11). In the tick that runs it, it takes its place by due tick then start
    /// order (T2), and `timer::now()` is that tick's boundary (T5). Repeats stay on their own
    /// grid (T3: run k is due at D + k·interval however late run k − 1 came).
    ///
    /// The tolerance counts in whole ticks, rounded down: under one tick (the default, zero)
    /// is a strict timer. `Duration::MAX` saturates.
    /// The rule in full: `docs/timers.md`, "Tolerance".
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Starts the timer on this thread's loop. The due instant counts from `timer::now()`
    /// (tokio's clock: the virtual one under `start_paused`).
    ///
    /// # Panics
    /// Off the loop thread.
    #[track_caller]
    pub fn start(self, callback: impl FnMut() + 'static) -> TimerToken {
        let site = Location::caller();
        let core = core("timer::TimerBuilder::start");
        let first_due = core.logical_offset().saturating_add(self.delay);
        let job = TimerJob {
            callback: Some(Box::new(callback)),
            site,
            first_due,
            interval: self.interval,
            index: 0,
            count: self
                .times
                .map(|n| if self.interval.is_some() { n } else { n.min(1) }),
            tolerance_ticks: whole_ticks(self.tolerance, core.clock.tick),
        };
        let (due, latest) = job.window(&core.clock, 0);
        let mut wheel = core.wheel.borrow_mut();
        let key = wheel.insert_tolerant(due, latest, Job::timer(Box::new(job)));
        if self.times == Some(0) {
            // Never runs: hand back a token that is already stale.
            let removed = wheel.remove(key);
            drop(wheel);
            drop(removed);
        }
        TimerToken::new(key, core.shared.id)
    }
}

/// Whole ticks in `span` (rounded down, saturating).
fn whole_ticks(span: Duration, tick: Duration) -> u64 {
    u64::try_from(span.as_nanos() / tick.as_nanos()).unwrap_or(u64::MAX)
}

/// A handle to a started timer. Stale once the timer is finished or cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerToken {
    key: Key,
    loop_id: LoopId,
}

impl TimerToken {
    pub(crate) fn new(key: Key, loop_id: LoopId) -> Self {
        TimerToken { key, loop_id }
    }

    /// Runs `f` on this token's timer, if it is alive and belongs to this thread's loop.
    #[track_caller]
    fn with<R>(&self, what: &str, f: impl FnOnce(&Core, &TimerJob) -> R) -> Option<R> {
        let core = core(what);
        if core.shared.id != self.loop_id {
            return None;
        }
        let wheel = core.wheel.borrow();
        match wheel.get(self.key) {
            Some(job) => job.as_timer().map(|timer| f(&core, timer)),
            _ => None,
        }
    }

    /// True while another run is scheduled: false during the last run and afterwards.
    #[track_caller]
    #[must_use]
    pub fn running(&self) -> bool {
        self.next().is_some()
    }

    /// Stops every later run, also from inside a callback of the same tick. Returns true if
    /// the timer was alive; false for a finished, cancelled or foreign token.
    #[track_caller]
    pub fn cancel(&self) -> bool {
        let core = core("TimerToken::cancel");
        if core.shared.id != self.loop_id {
            return false;
        }
        let mut wheel = core.wheel.borrow_mut();
        if wheel.get(self.key).and_then(Job::as_timer).is_none() {
            return false;
        }
        let removed = wheel.remove(self.key);
        drop(wheel);
        // The callback may own things whose drop touches the loop; run it unborrowed.
        drop(removed);
        true
    }

    /// The 0-based index of the run in progress, or of the next run; 0 for a stale token.
    #[track_caller]
    #[must_use]
    pub fn index(&self) -> u32 {
        self.with("TimerToken::index", |_, t| t.index).unwrap_or(0)
    }

    /// Total runs (`times(n)`), `None` for a timer that repeats until cancelled or a stale
    /// token.
    #[track_caller]
    #[must_use]
    pub fn count(&self) -> Option<u32> {
        self.with("TimerToken::count", |_, t| t.count).flatten()
    }

    /// Runs left, counting the one in progress: `Some(n - k)` in run k; `None` when
    /// unlimited or stale.
    #[track_caller]
    #[must_use]
    pub fn remaining_count(&self) -> Option<u32> {
        self.with("TimerToken::remaining_count", |_, t| {
            t.count.map(|n| n.saturating_sub(t.index))
        })
        .flatten()
    }

    /// The boundary of the next run, a [`tokio::time::Instant`] on the loop's clock (see
    /// [`super::now`]); `None` when not running. For a timer with a
    /// [tolerance](TimerBuilder::tolerance), the boundary it is due at: it runs then or up to
    /// its tolerance later.
    #[track_caller]
    #[must_use]
    pub fn next(&self) -> Option<Instant> {
        let core = core("TimerToken::next");
        if core.shared.id != self.loop_id {
            return None;
        }
        let wheel = core.wheel.borrow();
        if wheel.get(self.key).and_then(Job::as_timer).is_none() || !wheel.is_pending(self.key) {
            return None;
        }
        wheel.due(self.key).map(|tick| core.clock.boundary(tick))
    }
}

/// A timer kept in a [`Keyed`](crate::runtime::Keyed) set is cancelled when it is replaced or
/// the set is cancelled.
impl Cancel for TimerToken {
    fn cancel(&self) {
        TimerToken::cancel(self);
    }
}
