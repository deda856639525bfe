//! What a wheel entry does when its tick comes: wake a paused task, or run a callback.
//!
//! This is the only place timer callbacks run. It never holds a borrow of the wheel while a
//! callback or a waker runs — callbacks start, cancel and inspect timers themselves.

use std::panic::{AssertUnwindSafe, Location, catch_unwind};
use std::task::Waker;

use tokio::time::Duration;

use super::context::Core;
use super::panic::panic_text;
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

impl WakeTarget {
    /// Remembers who polled the pause last (`cx`'s waker), as a task key when it is the
    /// waker of the task being polled.
    pub(crate) fn update(&mut self, core: &Core, waker: &Waker) {
        if let Some(task) = core.executor.polled_task(waker) {
            *self = WakeTarget::Task(task);
        } else if !matches!(self, WakeTarget::Waker(w) if w.will_wake(waker)) {
            *self = WakeTarget::Waker(waker.clone());
        }
    }

    fn wake(self, core: &Core) {
        match self {
            WakeTarget::Task(task) => core.executor.wake_task(core, task),
            WakeTarget::Waker(waker) => waker.wake(),
        }
    }
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
    fn is_last_run(&self) -> bool {
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

/// Runs the entry `key` that the wheel just yielded. Returns the timer's creation site when
/// a callback ran (for the loop profile), `None` for a pause woken or nothing run.
pub(crate) fn fire(core: &Core, key: Key) -> Option<&'static Location<'static>> {
    let mut wheel = core.wheel.borrow_mut();
    let job = wheel.get_mut(key)?;
    let timer = match job {
        Job::Wake { .. } => {
            if let Some(Job::Wake { target, .. }) = wheel.remove(key) {
                drop(wheel);
                target.wake(core);
            }
            return None;
        }
        Job::Timer(timer) => timer,
    };
    let last = timer.is_last_run();
    let callback = timer.callback.take();
    let site = timer.site;
    if !last {
        // Rescheduled before the callback runs, so that `next()` and `running()` answer
        // for the coming run while it executes, and cancel() from inside stops it.
        let next = core.clock.tick_ceil(timer.due_offset(timer.index + 1));
        wheel.reschedule(key, next);
    }
    drop(wheel);

    let mut callback = callback?;
    core.current_timer.set(Some(key));
    let outcome = catch_unwind(AssertUnwindSafe(&mut callback));
    core.current_timer.set(None);

    let mut wheel = core.wheel.borrow_mut();
    if let Err(payload) = outcome {
        core.counters.panics.set(core.counters.panics.get() + 1);
        tracing::error!(
            started_at = %site,
            "a timer callback panicked: {}; the timer is stopped, the loop goes on",
            panic_text(&*payload)
        );
        let removed = wheel.remove(key);
        drop(wheel);
        drop((removed, callback));
        return Some(site);
    }
    match wheel.get_mut(key) {
        Some(Job::Timer(timer)) if !last => {
            timer.index += 1;
            timer.callback = Some(callback);
        }
        Some(_) => {
            let removed = wheel.remove(key);
            drop(wheel);
            drop((removed, callback));
        }
        // Cancelled from inside its own callback.
        None => {
            drop(wheel);
            drop(callback);
        }
    }
    Some(site)
}
