//! The runtime: the event loop, its local executor, the cross-thread context, the idle park,
//! loop health and faults (a panic that escapes a phase, or a reported one).
//!
//! It knows nothing of worlds or sockets: the shard plugs those into the loop's phase slots.

pub(crate) mod context;
mod event_loop;
pub(crate) mod executor;
pub mod fault;
mod health;
pub mod history;
pub(crate) mod park;
mod stats;

pub use context::{LoopClosed, LoopContext};
pub use event_loop::{
    DEFAULT_IDLE_WAIT, DEFAULT_LATE_WAKE_PERCENT, DEFAULT_LATE_WAKE_THRESHOLD,
    DEFAULT_SPIN_BEFORE_PARK, DEFAULT_TICK, EventLoop, EventLoopBuilder, Slot,
};
pub use executor::{JoinError, JoinHandle, spawn};
pub use fault::{Fault, Phase, faulted, report_fault};
pub use stats::{LagHistogram, LoopStats, Verdict};

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

/// The wheel lag of every tick fired since the loop was built, from code running on it (the
/// metrics endpoint's probe). Unlike [`take_lag_window`] it takes nothing away.
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub fn lag_histogram() -> LagHistogram {
    context::core("runtime::lag_histogram")
        .counters
        .lag_total
        .get()
}
