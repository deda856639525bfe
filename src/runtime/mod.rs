//! The runtime: the event loop, its local executor, the cross-thread context, the idle park
//! and loop health.
//!
//! It knows nothing of worlds or sockets: the shard plugs those into the loop's phase slots.

pub(crate) mod context;
mod event_loop;
pub(crate) mod executor;
mod health;
mod park;
mod stats;

pub use context::{LoopClosed, LoopContext};
pub use event_loop::{
    DEFAULT_IDLE_WAIT, DEFAULT_LATE_WAKE_PERCENT, DEFAULT_LATE_WAKE_THRESHOLD, DEFAULT_TICK,
    EventLoop, EventLoopBuilder, Slot,
};
pub use executor::{JoinError, JoinHandle, spawn};
pub use stats::{LagHistogram, LoopStats, Verdict};
