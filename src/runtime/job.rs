//! What a wheel entry is: a paused task to wake, or a callback timer to run — plain data the
//! wheel holds and the timer API creates. Running one when its tick comes is `fire.rs`'s.
//!
//! A [`Job`] is one tagged pointer (8 bytes), so that a wheel entry is as small as the wheel
//! allows: a million paused tasks are a million entries. The tag (the pointer's two low bits,
//! free because every pointee is at least 4-aligned) says what the pointer is:
//!
//! - `TASK`: a pointer to the task that awaits the pause, kept valid by a *wheel hold*
//!   (`task.rs`, invariant 1: a plain tally in the task's header, on the loop thread, rather
//!   than an atomic count): the common case, a pause awaited by the task being polled. Its
//!   tick queues the task directly. (A task with `u16::MAX` holds already gets a `WAKER`
//!   entry with a counted waker of its own instead.)
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
use super::task::{self, Header};

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
    #[inline]
    pub(crate) fn pause(core: &Core, site: &'static Location<'static>) -> Job {
        match core.executor.polling() {
            Some(task) => Job::task(task, site),
            None => Job::tagged(NonNull::from(site).cast(), UNPOLLED, site),
        }
    }

    /// An entry that wakes `task`, the task being polled: a `TASK` entry with a wheel hold,
    /// or, if the task's holds are full, a `WAKER` entry with a counted waker.
    #[inline]
    fn task(task: NonNull<Header>, site: &'static Location<'static>) -> Job {
        // SAFETY: the task being polled holds the loop's count, on the loop thread.
        if unsafe { task::hold_for_wheel(task) } {
            Job::tagged(task.cast(), TASK, site)
        } else {
            // SAFETY: as above: live.
            Job::waker(unsafe { task::counted_waker(task) }, site)
        }
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

    /// Starts loading what waking this entry will touch (its task's block), ahead of its tick
    /// being run: a hint.
    #[inline]
    pub(crate) fn prefetch(&self) {
        if let Some(task) = self.task_ptr() {
            task::prefetch(task);
        }
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
        // a task (held), a `&'static Location`, or an owned box.
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
            // (A `WAKER` entry that wakes this task already is one whose holds were full.)
            if self.task_ptr() != Some(task) && !self.wakes_with(waker) {
                let site = self.site();
                *self = Job::task(task, site);
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

    /// Whether this is a `WAKER` entry whose waker wakes the same as `waker`.
    fn wakes_with(&self, waker: &Waker) -> bool {
        // SAFETY: a `WAKER` job owns its box.
        self.tag() == WAKER
            && unsafe { self.untagged().cast::<WakerJob>().as_ref() }
                .waker
                .will_wake(waker)
    }

    /// Wakes whoever awaits this pause (its tick came); a timer is not woken this way.
    pub(crate) fn wake(self, core: &Core) {
        let this = ManuallyDrop::new(self);
        let ptr = this.untagged();
        match this.tag() {
            TASK => {
                let task = ptr.cast();
                core.executor.wake_task(core, task);
                // SAFETY: a `TASK` job owns one wheel hold on its task, given up here, on the
                // loop thread (a job never leaves it).
                unsafe { task::drop_wheel_hold(task) };
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
        // SAFETY: each tag's pointer is what its constructor gave up ownership of: one wheel
        // hold on a task (a job is dropped on its loop's thread: it is `!Send`), a `&'static`
        // (nothing to free), or a box.
        unsafe {
            match self.tag() {
                TASK => task::drop_wheel_hold(ptr.cast()),
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
