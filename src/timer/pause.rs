//! `Pause`: the future behind `timer::pause`.
//!
//! A pause is armed when it is created (the delay counts from `timer::now()` then, not from
//! the first poll), as one wheel entry saying whom to wake: the task being polled, or the
//! waker it was last polled with (`runtime::job`). When its tick comes, the entry is removed
//! and that task or waker woken; the pause sees its key gone and completes.
//! Dropping an unfinished pause removes the entry (T9) — on the loop thread. Dropped on
//! another thread it cannot reach the wheel, and the entry simply fires into nothing.

use std::panic::Location;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Duration;

use crate::runtime::context::{LoopId, core, try_core};
use crate::slab::Key;

use crate::runtime::job::Job;

/// Completes at the first tick boundary at or after its due instant (`timer::now()` at
/// creation plus the delay, on tokio's clock — the virtual one under `start_paused`).
/// `Send`, `Unpin`, 12 bytes; dropping it cancels it.
#[must_use = "a Pause does nothing unless awaited"]
#[derive(Debug)]
pub struct Pause {
    key: Key,
    loop_id: LoopId,
}

impl Pause {
    #[track_caller]
    pub(super) fn new(delay: Duration) -> Pause {
        let site = Location::caller();
        let core = core("timer::pause");
        let due = core.pause_due(delay);
        let job = Job::pause(&core, site);
        let key = core.wheel.borrow_mut().insert(due, job);
        Pause {
            key,
            loop_id: core.shared.id,
        }
    }
}

/// The `loop_id` of a pause that has completed: no loop has id 0, and a completed pause has
/// no entry left to look up or remove, so polling or dropping it again touches nothing.
const COMPLETED: LoopId = 0;

impl Future for Pause {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.loop_id == COMPLETED {
            return Poll::Ready(());
        }
        let core = core("polling a timer::Pause");
        if core.shared.id != this.loop_id {
            return Poll::Ready(());
        }
        let mut wheel = core.wheel.borrow_mut();
        match wheel.get_mut(this.key) {
            Some(job) if job.is_pause() => {
                job.update(&core, cx.waker());
                Poll::Pending
            }
            _ => {
                // Fired (its entry is gone): the drop that follows has nothing to remove.
                this.loop_id = COMPLETED;
                Poll::Ready(())
            }
        }
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        if self.loop_id == COMPLETED {
            return;
        }
        let Some(core) = try_core() else { return };
        if core.shared.id != self.loop_id {
            return;
        }
        // The wheel may be borrowed if the pause is dropped by a waker's drop during the
        // Timers phase; the entry then fires into nothing, which is harmless.
        if let Ok(mut wheel) = core.wheel.try_borrow_mut()
            && wheel.get(self.key).is_some_and(Job::is_pause)
        {
            let removed = wheel.remove(self.key);
            drop(wheel);
            drop(removed);
        }
    }
}
