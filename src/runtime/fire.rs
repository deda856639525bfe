//! Running a wheel entry when its tick comes: wake the paused task, or run the callback (and
//! reschedule a repeating one, T3), with a panicking callback contained, logged with its
//! creation site and counted.
//!
//! This is the only place timer callbacks run. It never holds a borrow of the wheel while a
//! callback or a waker runs — callbacks start, cancel and inspect timers themselves.

use std::panic::Location;

use super::context::Core;
use super::job::JobRef;
use super::panic::catch;
use super::watch::Doing;
use crate::slab::Key;

/// Runs the entry `key` that the wheel just yielded. Returns the timer's creation site when
/// a callback ran (for the loop profile), `None` for a pause woken or nothing run.
pub(crate) fn fire(core: &Core, key: Key) -> Option<&'static Location<'static>> {
    let mut wheel = core.wheel.borrow_mut();
    let job = wheel.get_mut(key)?;
    let timer = match job.kind() {
        JobRef::Pause => {
            if let Some(pause) = wheel.remove(key) {
                drop(wheel);
                pause.wake(core);
            }
            return None;
        }
        JobRef::Timer(timer) => timer,
    };
    let last = timer.is_last_run();
    let callback = timer.callback.take();
    let site = timer.site;
    if !last {
        // Rescheduled before the callback runs, so that `next()` and `running()` answer
        // for the coming run while it executes, and cancel() from inside stops it.
        let (due, latest) = timer.window(&core.clock, timer.index + 1);
        wheel.reschedule_tolerant(key, due, latest);
    }
    drop(wheel);

    let mut callback = callback?;
    core.current_timer.set(Some(key));
    core.shared.now().run(Doing::Timer(site));
    let outcome = catch(&mut callback);
    core.shared.now().run(Doing::Nothing);
    core.current_timer.set(None);

    let mut wheel = core.wheel.borrow_mut();
    if let Err(why) = outcome {
        core.counters.count_panic();
        tracing::error!(
            started_at = %site,
            "a timer callback panicked: {why}; the timer is stopped, the loop goes on"
        );
        let removed = wheel.remove(key);
        drop(wheel);
        drop((removed, callback));
        return Some(site);
    }
    match wheel.get_mut(key).map(|job| job.kind()) {
        Some(JobRef::Timer(timer)) if !last => {
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
