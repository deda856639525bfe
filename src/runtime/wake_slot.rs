//! The parked loop's waker slot: one registered waker, woken by reference from any thread.
//!
//! It does what `futures`' `AtomicWaker` does (one state word orders a registration with a
//! wake, and neither ever blocks), except that a wake leaves the waker in the slot instead of
//! taking it out. The loop registers the same waker at every park (tokio's `block_on` waker),
//! so with `AtomicWaker` every park cloned it and every wake dropped it: a reference count
//! moved between the posting thread and the loop thread on each post to a parked loop, a
//! written cache line on both sides for nothing. Here a park whose waker `will_wake` the one
//! held writes only the state word, and a wake calls `wake_by_ref`.
//!
//! The price: a registration that meets a wake in progress cannot store its waker (the waking
//! thread is reading the slot), so it wakes its own waker by reference instead, as
//! `AtomicWaker` does. The task is then polled again and registers again; the slot may hold
//! an older waker until then, which at worst wakes a task that has nothing to do. For the
//! loop, which always registers the one waker of its `block_on`, that never happens.
//!
//! This module must never decide when to wake: [`super::context`] does.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::Waker;

/// Nobody is in the slot.
const IDLE: u8 = 0;
/// The loop thread is storing a waker.
const REGISTERING: u8 = 1;
/// A thread is waking the stored waker.
const WAKING: u8 = 2;

/// A waker slot: one registrant (the loop thread), any number of wakers.
pub(crate) struct WakeSlot {
    state: AtomicU8,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: `waker` is only touched by the thread that moved `state` from IDLE to REGISTERING
// (register) or to WAKING (wake), and each leaves that state before any other thread can
// enter one, so the cell is never shared; a `Waker` is `Send + Sync`.
unsafe impl Send for WakeSlot {}
// SAFETY: as above.
unsafe impl Sync for WakeSlot {}

impl WakeSlot {
    pub(crate) fn new() -> Self {
        WakeSlot {
            state: AtomicU8::new(IDLE),
            waker: UnsafeCell::new(None),
        }
    }

    /// Stores `waker` (kept as is when the one held already wakes the same task), so that
    /// every later [`wake`](Self::wake) wakes it. The registration's read-modify-writes order
    /// it with a wake: either the wake comes after and finds this waker, or it came before and
    /// everything the waking thread wrote before waking is visible after this returns (the
    /// lost-wake argument in `park.rs` rests on that).
    pub(crate) fn register(&self, waker: &Waker) {
        match self
            .state
            .compare_exchange(IDLE, REGISTERING, Ordering::Acquire, Ordering::Acquire)
        {
            Ok(_) => {
                // SAFETY: REGISTERING is held: no other thread touches the cell until it is
                // left below.
                let slot = unsafe { &mut *self.waker.get() };
                if !slot.as_ref().is_some_and(|held| held.will_wake(waker)) {
                    *slot = Some(waker.clone());
                }
                // Leaving REGISTERING publishes the waker. A wake that came meanwhile found
                // REGISTERING and set WAKING on top, leaving the wake to us.
                if self
                    .state
                    .compare_exchange(REGISTERING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    // SAFETY: still ours: a wake that sets WAKING over REGISTERING does not
                    // touch the cell.
                    let held = unsafe { (*self.waker.get()).clone() };
                    self.state.swap(IDLE, Ordering::AcqRel);
                    if let Some(held) = held {
                        held.wake();
                    }
                }
            }
            Err(_) => {
                // A wake is in progress (only the loop thread registers): it may be waking the
                // older waker, so wake this one too.
                waker.wake_by_ref();
            }
        }
    }

    /// Wakes the stored waker, leaving it stored. Never blocks: against a registration in
    /// progress it leaves the wake to the registering thread.
    pub(crate) fn wake(&self) {
        if self.state.fetch_or(WAKING, Ordering::AcqRel) == IDLE {
            // SAFETY: this thread moved IDLE to WAKING: nobody else touches the cell until it
            // clears WAKING below (a registration meanwhile fails its exchange from IDLE and
            // leaves the cell alone; another wake finds WAKING set and does nothing).
            if let Some(waker) = unsafe { &*self.waker.get() } {
                waker.wake_by_ref();
            }
            self.state.fetch_and(!WAKING, Ordering::Release);
        }
        // Otherwise another thread is waking (it wakes the same waker), or the loop is
        // registering (it sees WAKING when it leaves and wakes).
    }
}

impl Default for WakeSlot {
    fn default() -> Self {
        Self::new()
    }
}

/// A waker that counts its wakes: for the tests of whatever holds and wakes one (this slot,
/// the thread's reactor, the network backends).
#[cfg(test)]
#[derive(Default)]
pub(crate) struct WakeCount(std::sync::atomic::AtomicUsize);

#[cfg(test)]
impl WakeCount {
    /// A fresh count and a waker that adds to it.
    pub(crate) fn waker() -> (Waker, std::sync::Arc<WakeCount>) {
        let count = std::sync::Arc::new(WakeCount::default());
        (Waker::from(count.clone()), count)
    }

    /// Wakes so far.
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// Counts one wake (for a waker of a test's own that counts as well).
    pub(crate) fn record(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
impl std::task::Wake for WakeCount {
    fn wake(self: std::sync::Arc<Self>) {
        self.record();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.record();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_wake_wakes_the_registered_waker_every_time_and_keeps_it() {
        let slot = WakeSlot::new();
        slot.wake(); // nothing registered: nothing to wake, no panic
        let (waker, count) = WakeCount::waker();
        slot.register(&waker);
        slot.wake();
        slot.wake();
        assert_eq!(count.count(), 2);
    }

    #[test]
    fn registering_the_same_waker_again_does_not_clone_it() {
        let slot = WakeSlot::new();
        let (waker, count) = WakeCount::waker();
        slot.register(&waker);
        let held = Arc::strong_count(&count);
        for _ in 0..10 {
            slot.register(&waker);
            slot.wake();
        }
        assert_eq!(Arc::strong_count(&count), held, "no clone kept per park");
        assert_eq!(count.count(), 10);
    }

    #[test]
    fn a_different_waker_replaces_the_held_one() {
        let slot = WakeSlot::new();
        let (waker1, first) = WakeCount::waker();
        let (waker2, second) = WakeCount::waker();
        slot.register(&waker1);
        slot.register(&waker2);
        slot.wake();
        assert_eq!(first.count(), 0);
        assert_eq!(second.count(), 1);
        drop(slot);
        assert_eq!(
            Arc::strong_count(&first),
            2,
            "the replaced waker was dropped"
        );
    }

    /// Wakes from other threads racing with registrations: every wake that comes after a
    /// registration of the (one) waker reaches it, none panics or deadlocks.
    #[test]
    fn wakes_racing_with_registrations_are_not_lost() {
        let slot = Arc::new(WakeSlot::new());
        let (waker, count) = WakeCount::waker();
        slot.register(&waker);
        let wakers: Vec<_> = (0..3)
            .map(|_| {
                let slot = slot.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        slot.wake();
                    }
                })
            })
            .collect();
        for _ in 0..20_000 {
            slot.register(&waker);
        }
        for w in wakers {
            w.join().expect("waker thread");
        }
        let before = count.count();
        slot.wake();
        assert_eq!(count.count(), before + 1);
        assert!(before > 0);
    }
}
