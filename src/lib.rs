//! shardloop: the core of a game shard — one thread, one deterministic event loop that runs
//! timers, packet handlers and game logic written as `async fn`s.
//!
//! ```no_run
//! use shardloop::{EventLoop, timer};
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() {
//!     let mut event_loop = EventLoop::new();
//!     event_loop
//!         .run_until(async {
//!             timer::pause(5000).await;
//!             println!("five seconds later, on the loop thread");
//!         })
//!         .await;
//! }
//! ```
//!
//! See `docs/` for the guides: `timers.md`, `threading-model.md`, `performance.md`.

pub mod config;
pub mod game;
pub mod host;
pub mod logs;
pub mod metrics;
pub mod net;
pub mod persist;
pub mod runtime;
pub mod shard;
mod slab;
pub mod testkit;
pub mod timer;
pub mod world;

pub use runtime::{
    AbortHandle, EventLoop, EventLoopBuilder, JoinError, JoinHandle, LoopClosed, LoopContext,
    LoopStats, Verdict, spawn,
};

/// The game developer's guide, `docs/game-logic.md`: compiled (and, where self-contained,
/// run) by `cargo test` as doctests, so the guide's code cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../docs/game-logic.md")]
pub struct GameLogicGuide;

/// The README: its Rust code blocks are compiled by `cargo test` as doctests, so the first
/// code a newcomer reads builds against today's API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct Readme;
