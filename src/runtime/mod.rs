//! The runtime: the event loop, its local executor (tasks, their `JoinHandle`s and
//! `AbortHandle`s), the keyed set of running behaviours, the cross-thread context, the idle
//! park, loop health and faults (a panic that escapes a phase, or a reported one).
//!
//! It knows nothing of worlds or sockets: the shard plugs those into the loop's phase slots.

pub(crate) mod context;
mod event_loop;
pub(crate) mod executor;
pub(crate) mod fault;
mod fire;
mod health;
pub mod history;
pub(crate) mod job;
mod keyed;
mod panic;
pub(crate) mod park;
mod phase;
mod posted_job;
pub(crate) mod profile;
pub(crate) mod reactor;
mod spin;
pub(crate) mod stamp;
mod stats;
pub(crate) mod task;
pub mod telemetry;
mod thread_wakes;
mod verdict;
pub(crate) mod wake_slot;
mod watch;
mod watchdog;

pub use context::{LoopClosed, LoopContext};
pub use event_loop::{
    DEFAULT_IDLE_WAIT, DEFAULT_LATE_WAKE_PERCENT, DEFAULT_LATE_WAKE_THRESHOLD,
    DEFAULT_SPIN_BEFORE_PARK, DEFAULT_TICK, EventLoop, EventLoopBuilder,
};
pub use executor::spawn;
pub(crate) use fault::faulted;
pub use fault::{Fault, report_fault};
pub use keyed::{Cancel, Keyed};
pub(crate) use panic::catch;
pub use phase::{Account, Phase, PhaseInfo};
pub use stats::LagHistogram;
pub use task::{AbortHandle, JoinError, JoinHandle};
pub use telemetry::LoopStats;
pub use verdict::Verdict;
pub use watch::Doing;
pub use watchdog::Watchdog;

use std::time::Duration;

/// The counters of this thread's loop, from code running on it (a console command, a status
/// timer); `EventLoop::stats` is the same from outside.
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub fn stats() -> LoopStats {
    context::core("runtime::stats").stats()
}

/// The wheel lags recorded since the previous call, from code running on the loop.
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub fn take_lag_window() -> LagHistogram {
    context::core("runtime::take_lag_window")
        .counters
        .lag_window
        .take()
}

/// The longest loop iteration (its phases' work, parking excluded) since the previous call,
/// from code running on the loop: the `loop:` status line's window. The peak since start is
/// [`LoopStats::longest_iteration`].
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub fn take_longest_iteration() -> Duration {
    context::core("runtime::take_longest_iteration")
        .counters
        .longest_iteration_window
        .take()
}

/// Runs `snapshot` — copying the world for a save — and counts its time as the profile's
/// [`Phase::Save`], out of the phase it runs in. Off the loop thread, or without the
/// profile, it just runs `snapshot`.
pub(crate) fn time_save_snapshot<R>(snapshot: impl FnOnce() -> R) -> R {
    if !profile::ENABLED {
        return snapshot();
    }
    let began = stamp::Stamp::now();
    let out = snapshot();
    let took = stamp::Stamp::now().since(began);
    context::with_current(|core| core.profile.saved(took));
    out
}

/// Registers what the loop calls as each profiled second closes, to fill in what only the
/// caller knows (packets in and out, players, the worst packet handler). One hook per loop:
/// a second call replaces the first. It runs on the loop thread between iterations, must be
/// quick, and is dropped if it panics.
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub(crate) fn on_each_second(hook: impl FnMut(&mut history::LoopSecond) + 'static) {
    context::core("runtime::on_each_second")
        .profile
        .set_hook(Box::new(hook));
}

/// Runs `f` with the loop's per-second history (empty without the `loop-profiling` profile),
/// from code running on the loop. Keep it short: the loop waits. To write the history out,
/// clone it here (a copy of the fixed ring) and write the copy elsewhere.
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub fn with_history<R>(f: impl FnOnce(&history::History) -> R) -> R {
    f(&context::core("runtime::with_history").profile.history())
}

/// Whether this build profiles the loop (the `loop-profiling` feature).
#[must_use]
pub fn profiling() -> bool {
    profile::ENABLED
}

/// The wheel lag of every tick fired since the loop was built, from code running on it (the
/// metrics endpoint's probe). Unlike [`take_lag_window`] it takes nothing away.
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub(crate) fn lag_histogram() -> LagHistogram {
    context::core("runtime::lag_histogram")
        .counters
        .lag_total
        .get()
}

/// Counts a panic that code on the loop caught itself (a game behaviour that contains its
/// own panics, logging them with its own site) in [`LoopStats::panics`], beside those the
/// loop catches.
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub(crate) fn count_panic() {
    context::core("runtime::count_panic").counters.count_panic();
}
