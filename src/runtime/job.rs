//! What a wheel entry is: a paused task to wake, or a callback timer to run — plain data the
//! wheel holds and the timer API creates. Running one when its tick comes is `fire.rs`'s.
//!
//! A [`Job`] is one tagged pointer (8 bytes), so that a wheel entry is as small as the wheel
//! allows: a million paused tasks are a million entries. The tag (the pointer's two low bits,
//! free because every pointee is at least 4-aligned) says what the pointer is:
//!
//! - `TASK`: a counted pointer to the task that awaits the pause ([`TaskRef`]): the common
//!   case, a pause awaited by the task being polled. Its tick queues the task directly.
//! - `UNPOLLED`: the pause's creation site (`&'static Location`): a pause created outside any
//!   task and not polled yet. Its tick wakes nobody.
//! - `WAKER`: a box with any other waker (the root future of `run_until`, a combinator's own
//!   waker) and the creation site.
//! - `TIMER`: a box with a callback timer ([`TimerJob`]).
//!
//! In release builds a task's pause does not keep its creation site (8 bytes per entry):
//! `timer::dump()` lists it under its task's spawn site. Debug builds keep the site beside the
//! pointer, so tests see each pause's own line.
//!
//! Owns the entry types and their schedule arithmetic; must never touch the loop's core
//! beyond asking its executor which task is being polled.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::panic::Location;
use std::ptr::NonNull;
use std::task::Waker;

use tokio::time::Duration;

use super::context::{Clock, Core};
use super::task::{Header, TaskRef};

const TAG_BITS: usize = 0b11;
const TASK: usize = 0;
const UNPOLLED: usize = 1;
const WAKER: usize = 2;
const TIMER: usize = 3;

// Every pointee leaves the two tag bits free.
const _: () = {
    assert!(align_of::<Header>() > TAG_BITS);
    assert!(align_of::<Location<'static>>() > TAG_BITS);
    assert!(align_of::<WakerJob>() > TAG_BITS);
    assert!(align_of::<TimerJob>() > TAG_BITS);
};

/// A wheel entry's value: one tagged pointer (module docs).
pub(crate) struct Job {
    bits: NonNull<u8>,
    /// The creation site, for `dump()`, in debug builds (release: see module docs).
    #[cfg(debug_assertions)]
    site: &'static Location<'static>,
    /// Holds boxes of `!Send` callbacks.
    _not_send: PhantomData<*const ()>,
}

/// A pause awaited through any waker but its task's.
struct WakerJob {
    waker: Waker,
    site: &'static Location<'static>,
}

/// What a [`Job`] is, borrowed.
pub(crate) enum JobRef<'a> {
    /// A pause: wake its task (or waker) when due.
    Pause,
    /// A callback timer.
    Timer(&'a mut TimerJob),
}

impl Job {
    fn tagged(ptr: NonNull<u8>, tag: usize, _site: &'static Location<'static>) -> Job {
        Job {
            bits: ptr.map_addr(|addr| addr | tag),
            #[cfg(debug_assertions)]
            site: _site,
            _not_send: PhantomData,
        }
    }

    fn tag(&self) -> usize {
        self.bits.addr().get() & TAG_BITS
    }

    fn untagged(&self) -> NonNull<u8> {
        // SAFETY: without its tag the address is the pointee's, which is never null.
        unsafe { NonNull::new_unchecked(self.bits.as_ptr().map_addr(|addr| addr & !TAG_BITS)) }
    }

    /// A callback timer.
    pub(crate) fn timer(timer: Box<TimerJob>) -> Job {
        let site = timer.site;
        Job::tagged(NonNull::from(Box::leak(timer)).cast(), TIMER, site)
    }

    /// A pause created at `site`: it will wake the task being polled, if any (the task that
    /// creates a pause is nearly always the one that awaits it; its first poll corrects it).
    pub(crate) fn pause(core: &Core, site: &'static Location<'static>) -> Job {
        match core.executor.polling() {
            // SAFETY: the task being polled is live; the entry gets a count of its own.
            Some(task) => Job::task(unsafe { TaskRef::new_count(task) }, site),
            None => Job::tagged(NonNull::from(site).cast(), UNPOLLED, site),
        }
    }

    fn task(task: TaskRef, site: &'static Location<'static>) -> Job {
        Job::tagged(task.into_ptr().cast(), TASK, site)
    }

    fn waker(waker: Waker, site: &'static Location<'static>) -> Job {
        let boxed = Box::new(WakerJob { waker, site });
        Job::tagged(NonNull::from(Box::leak(boxed)).cast(), WAKER, site)
    }

    /// Which kind of entry this is, with the timer's state to change.
    pub(crate) fn kind(&mut self) -> JobRef<'_> {
        if self.tag() == TIMER {
            // SAFETY: a `TIMER` job owns the box its pointer came from (`Job::timer`), and
            // `&mut self` makes this the only access.
            JobRef::Timer(unsafe { self.untagged().cast::<TimerJob>().as_mut() })
        } else {
            JobRef::Pause
        }
    }

    /// The callback timer, if this is one.
    pub(crate) fn as_timer(&self) -> Option<&TimerJob> {
        // SAFETY: a `TIMER` job owns the box its pointer came from.
        (self.tag() == TIMER).then(|| unsafe { self.untagged().cast::<TimerJob>().as_ref() })
    }

    pub(crate) fn is_pause(&self) -> bool {
        self.tag() != TIMER
    }

    /// The task a `TASK` job wakes.
    fn task_ptr(&self) -> Option<NonNull<Header>> {
        (self.tag() == TASK).then(|| self.untagged().cast())
    }

    /// Where the entry was created (release builds: a task's pause gives its task's spawn
    /// site, see module docs).
    pub(crate) fn site(&self) -> &'static Location<'static> {
        #[cfg(debug_assertions)]
        {
            self.site
        }
        #[cfg(not(debug_assertions))]
        {
            self.own_site()
        }
    }

    /// The site the pointer leads to.
    #[cfg_attr(debug_assertions, allow(dead_code))]
    fn own_site(&self) -> &'static Location<'static> {
        let ptr = self.untagged();
        // SAFETY: each tag's pointee is what its constructor stored, alive while the job is:
        // a task (counted), a `&'static Location`, or an owned box.
        unsafe {
            match self.tag() {
                TASK => ptr.cast::<Header>().as_ref().site(),
                UNPOLLED => ptr.cast::<Location<'static>>().as_ref(),
                WAKER => ptr.cast::<WakerJob>().as_ref().site,
                _ => ptr.cast::<TimerJob>().as_ref().site,
            }
        }
    }

    /// Remembers who polled the pause last (`waker`), as a task pointer when it is the waker
    /// of the task being polled.
    pub(crate) fn update(&mut self, core: &Core, waker: &Waker) {
        debug_assert!(self.is_pause());
        if let Some(task) = core.executor.polled_task(waker) {
            if self.task_ptr() != Some(task) {
                let site = self.site();
                // SAFETY: the task being polled is live; the entry gets a count of its own.
                *self = Job::task(unsafe { TaskRef::new_count(task) }, site);
            }
            return;
        }
        if self.tag() == WAKER {
            // SAFETY: a `WAKER` job owns its box; `&mut self` is the only access.
            let boxed = unsafe { self.untagged().cast::<WakerJob>().as_mut() };
            if !boxed.waker.will_wake(waker) {
                boxed.waker = waker.clone();
            }
            return;
        }
        let site = self.site();
        *self = Job::waker(waker.clone(), site);
    }

    /// Wakes whoever awaits this pause (its tick came); a timer is not woken this way.
    pub(crate) fn wake(self, core: &Core) {
        let this = ManuallyDrop::new(self);
        let ptr = this.untagged();
        match this.tag() {
            TASK => {
                // SAFETY: a `TASK` job holds one count, taken over here.
                let task = unsafe { TaskRef::adopt(ptr.cast()) };
                core.executor.wake_task(core, task.ptr());
            }
            // SAFETY: a `WAKER` job owns its box, taken over here.
            WAKER => unsafe { Box::from_raw(ptr.cast::<WakerJob>().as_ptr()) }
                .waker
                .wake(),
            UNPOLLED => {}
            _ => {
                debug_assert!(false, "a timer is run, not woken");
                // SAFETY: a `TIMER` job owns its box, dropped here.
                drop(unsafe { Box::from_raw(ptr.cast::<TimerJob>().as_ptr()) });
            }
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let ptr = self.untagged();
        // SAFETY: each tag's pointer is what its constructor gave up ownership of: one count
        // on a task, a `&'static` (nothing to free), or a box.
        unsafe {
            match self.tag() {
                TASK => drop(TaskRef::adopt(ptr.cast())),
                UNPOLLED => {}
                WAKER => drop(Box::from_raw(ptr.cast::<WakerJob>().as_ptr())),
                _ => drop(Box::from_raw(ptr.cast::<TimerJob>().as_ptr())),
            }
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
    /// How many whole ticks after its due tick each run may come (`TimerBuilder::tolerance`;
    /// 0 = a strict timer).
    pub(crate) tolerance_ticks: u64,
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

    /// The ticks run `index` may run in: its due tick (T1, T3) and the last tick its
    /// tolerance allows, for the wheel's `insert_tolerant` / `reschedule_tolerant`.
    pub(crate) fn window(&self, clock: &Clock, index: u32) -> (u64, u64) {
        let due = clock.tick_ceil(self.due_offset(index));
        (due, due.saturating_add(self.tolerance_ticks))
    }

    /// Logical offset of run `index` (T3: D + k·interval, never accumulated from fire times).
    pub(crate) fn due_offset(&self, index: u32) -> Duration {
        let interval = self.interval.unwrap_or(Duration::ZERO);
        self.first_due
            .saturating_add(interval.saturating_mul(index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_one_pointer_in_release() {
        let expected = if cfg!(debug_assertions) { 16 } else { 8 };
        assert_eq!(size_of::<Job>(), expected);
    }
}
