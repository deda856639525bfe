//! Timers for game logic: `pause(ms).await` in async code, callbacks with `after`/`every`.
//!
//! ```no_run
//! use std::time::Duration;
//! use shardloop::{EventLoop, spawn, timer};
//!
//! struct Npc;
//!
//! impl Npc {
//!     fn say(&self, text: &str) {
//!         println!("{text}");
//!     }
//! }
//!
//! async fn bark(npc: Npc) {
//!     let mut seed = 7u64; // a seeded generator: the same barks every run
//!     loop {
//!         seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
//!         timer::pause(5000 + (seed >> 33) % 3000).await; // 5 to 8 seconds
//!         npc.say("Fresh bread!");
//!     }
//! }
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() {
//!     let mut event_loop = EventLoop::new();
//!     event_loop
//!         .run_until(async {
//!             let refill = timer::every(Duration::from_secs(60)).start(|| println!("refill"));
//!             spawn(bark(Npc));
//!             timer::pause(600_000).await;
//!             refill.cancel();
//!         })
//!         .await;
//! }
//! ```
//!
//! Everything here runs on the loop thread and counts in ticks (8 ms by default) from the
//! loop's [`epoch`]: a timer runs on the first tick boundary at or after its due instant —
//! never earlier — in the order timers were started (rules T1–T12 in `docs/timers.md`). A
//! callback timer that need not be exact can say how late it may run
//! ([`TimerBuilder::tolerance`]): the loop then runs it with the timers it wakes for anyway.
//!
//! **Clock.** Every instant here ([`now`], [`epoch`], [`TimerToken::next`]) is a
//! [`tokio::time::Instant`] from tokio's clock: `CLOCK_MONOTONIC` in production, the virtual
//! clock under `#[tokio::test(start_paused = true)]`. Every delay is a [`std::time::Duration`]
//! of that clock (`tokio::time::Duration` is the same type).
//!
//! The [`wheel`] is the data structure underneath: pure, tick-based, no clock. This module
//! turns instants into ticks and must never block or touch tokio's scheduler.

mod dump;
mod pause;
mod token;
pub mod wheel;

pub use dump::TimerDump;
pub use pause::Pause;
pub use token::{TimerBuilder, TimerToken};

use tokio::time::{Duration, Instant};

use crate::runtime::context::core;

/// A future that completes `ms` milliseconds from now (rounded up to a tick boundary).
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub fn pause(ms: u64) -> Pause {
    Pause::new(Duration::from_millis(ms))
}

/// [`pause`] with a `Duration`. `Duration::MAX` saturates to the wheel's range (~1 115 years
/// at 8 ms ticks).
#[track_caller]
pub fn pause_for(delay: Duration) -> Pause {
    Pause::new(delay)
}

/// A timer that runs once, `delay` from now. Add `.every(..)` / `.times(..)`, then `.start(..)`.
#[must_use = "a TimerBuilder does nothing until .start() is called"]
pub fn after(delay: Duration) -> TimerBuilder {
    TimerBuilder::new(delay)
}

/// A timer that repeats every `interval`, the first run one interval from now.
/// Same as `after(interval).every(interval)`.
#[must_use = "a TimerBuilder does nothing until .start() is called"]
pub fn every(interval: Duration) -> TimerBuilder {
    TimerBuilder::new(interval).every(interval)
}

/// Inside a timer callback, the token of the timer being run; `None` elsewhere.
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub fn current() -> Option<TimerToken> {
    let core = core("timer::current");
    core.current_timer
        .get()
        .map(|key| TimerToken::new(key, core.shared.id))
}

/// The loop's logical time: during timer callbacks the boundary being processed; in a task
/// woken while a tick was processed (by a pause, or by a callback of that tick), that tick's
/// boundary, for the whole poll; elsewhere this iteration's clock reading (T5). Durations
/// measured from it never drift, and what a task starts after a pause lands on the same tick
/// whatever the clock reading or `idle_wait` (T11).
///
/// **Clock:** a [`tokio::time::Instant`] — tokio's clock, which is the monotonic clock
/// (`CLOCK_MONOTONIC`) in production and tokio's virtual clock under
/// `#[tokio::test(start_paused = true)]` (or `tokio::time::pause`), where it only moves when
/// the runtime is idle or the test advances it. Compare it with other `tokio::time::Instant`s
/// (`tokio::time::Instant::now()`, [`epoch`], [`TimerToken::next`]), not with
/// `std::time::Instant::now()`, which keeps running while tokio's clock is paused.
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub fn now() -> Instant {
    core("timer::now").logical_now.get()
}

/// The loop's epoch, tick 0: the instant every tick boundary counts from (boundary k is
/// `epoch() + k·tick`), fixed when `EventLoopBuilder::build()` ran (T12). Before the first
/// tick, `now() == epoch()`.
///
/// **Clock:** a [`tokio::time::Instant`], read from tokio's clock by `build()` — so under
/// `#[tokio::test(start_paused = true)]` it is the paused virtual clock's reading at that
/// moment, and durations such as `timer::now() - timer::epoch()` are exact logical time.
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub fn epoch() -> Instant {
    core("timer::epoch").clock.epoch
}

/// How many timers and pauses are live on this thread's loop (cheap: no walk, unlike
/// [`dump`]).
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub fn live() -> usize {
    core("timer::live").wheel.borrow().len()
}

/// Every live timer and pause, grouped by where it was started.
///
/// # Panics
/// Off the loop thread.
#[track_caller]
pub fn dump() -> TimerDump {
    TimerDump::collect(&core("timer::dump"))
}
