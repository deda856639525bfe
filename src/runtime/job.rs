//! What a wheel entry is: a paused task to wake, or a callback timer to run — plain data the
//! wheel holds and the timer API creates. Running one when its tick comes is `fire.rs`'s.
//!
//! Owns the entry types and their schedule arithmetic; must never touch the loop's core.

use std::panic::Location;
use std::task::Waker;

use tokio::time::Duration;

use crate::slab::Key;

pub(crate) enum Job {
    /// A `Pause`: wake its task.
    Wake {
        target: WakeTarget,
        site: &'static Location<'static>,
    },
    /// A callback timer.
    Timer(Box<TimerJob>),
}

impl Job {
    pub(crate) fn site(&self) -> &'static Location<'static> {
        match self {
            Job::Wake { site, .. } => site,
            Job::Timer(t) => t.site,
        }
    }
}

/// Whom a pause wakes when its tick comes.
pub(crate) enum WakeTarget {
    /// The loop's task that awaits it, by key: the wake touches only the task's slot, not
    /// its waker's `Arc` (a cache miss per wake with many tasks, and two atomic operations).
    Task(Key),
    /// Anything else: the root future of `run_until`, a future polled by a combinator with
    /// wakers of its own, a pause polled off the executor.
    Waker(Waker),
}

pub(crate) struct TimerJob {
    /// `None` while the callback runs.
    pub(crate) callback: Option<Box<dyn FnMut()>>,
    pub(crate) site: &'static Location<'static>,
    /// Logical due instant of run 0, as an offset from the epoch (T3 counts from it).
    pub(crate) first_due: Duration,
    pub(crate) interval: Option<Duration>,
    /// The run in progress, or the next one: 0-based.
    pub(crate) index: u32,
    /// Total runs, `None` = until cancelled.
    pub(crate) count: Option<u32>,
}

impl TimerJob {
    /// True when the run at `index` is the last one.
    pub(super) fn is_last_run(&self) -> bool {
        match (self.interval, self.count) {
            (None, _) => true,
            (Some(_), Some(count)) => self.index + 1 >= count,
            (Some(_), None) => false,
        }
    }

    /// Logical offset of run `index` (T3: D + k·interval, never accumulated from fire times).
    pub(crate) fn due_offset(&self, index: u32) -> Duration {
        let interval = self.interval.unwrap_or(Duration::ZERO);
        self.first_due
            .saturating_add(interval.saturating_mul(index))
    }
}
