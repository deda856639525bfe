//! shardloop: the core of a game shard — a persistent online world server — on tokio. One
//! thread runs all game logic (timers, packet handlers, NPC behaviour written as `async fn`s)
//! in one deterministic event loop, flat out when there is work and at almost no cost when
//! there is none, never firing a timer early.
//!
//! This page is for two readers: the operator who runs a shard and the game developer who
//! writes a game on it. The guides are markdown files in the repository, named here by path;
//! the map of the source (modules, what each owns, which way data flows) is
//! `docs/architecture.md`, and the measured costs are in `docs/performance.md`.
//!
//! # Operators: running a shard
//!
//! - **Start it** with `cargo run --release`: the demo shard loads its world from `data/`
//!   (generating one the first time), listens for players on port 2593 and saves every hour.
//!   Other commands of the binary: `check-config`, `probe-host`, `restore`, `loadgen`,
//!   `chart` (`cargo run --release -- --help`).
//! - **Configuration**: `config/shard.toml`, every key documented in place, overridden by
//!   `SHARD_*` environment variables and flags; `shardloop check-config` prints the result and
//!   where each value came from. Every key and error: `docs/configuration.md`.
//! - **Console**: type `help` on stdin for the commands (`status`, `save`, `loopstats`,
//!   `dumptimers`, `shutdown`, ...). Ctrl-C saves and stops.
//! - **Logs** go to stderr, filtered by `RUST_LOG` (`--log-format json` for collectors), with
//!   a `loop:` health line every `server.loop_stats_interval`. Reading them when the loop is
//!   slow, the loop profile and `loopstats`: `docs/debugging.md`.
//! - **Metrics**: `[metrics] listen` turns on `/metrics` (Prometheus), `/healthz` and a
//!   status page, served from a thread of their own: `docs/monitoring.md`.
//! - **The host** a shard needs, sizing and tuning: `docs/server-requirements.md`
//!   (`shardloop probe-host` grades a machine). **Saves, backups, archives** and
//!   `shardloop restore`: `docs/backups-and-archives.md`.
//!
//! # Game developers: the API
//!
//! - **A game** is a [`game::Game`]: its packets and login, what its players see of world
//!   changes, its world, per-NPC behaviours, start hooks, console commands and configuration
//!   section, registered from your own crate without editing shardloop. A shard runs it:
//!   `Shard::builder().game(..)` ([`shard::Shard::builder`], [`shard::ShardBuilder::game`]),
//!   then [`shard::ShardBuilder::main`] for a whole process with `run`, `check-config` and
//!   `restore`. Guide: `docs/game-logic.md` (worked examples: `examples/lantern.rs`, a game of
//!   its own; `examples/town_crier.rs`, a game on the demo). The demo game that
//!   `cargo run` serves is built the same way, outside this library (`src/demo/`).
//! - **Time**: [`timer::pause`] in async code, [`timer::after`] and [`timer::every`] for
//!   callbacks, all on the loop's tick boundaries — never early, no drift, FIFO. The rules
//!   and the wheel: `docs/timers.md`.
//! - **Tasks**: [`spawn`] runs a future on the loop thread (it need not be `Send`);
//!   [`LoopContext`] posts work to the loop from other threads. What runs on which thread,
//!   and what must never block: `docs/threading-model.md`.
//! - **Packets**: the wire format, every packet and disconnect reason, adding a handler:
//!   `docs/protocol.md`.
//! - **Tests**: [`testkit`] runs a whole shard on the test's paused clock
//!   ([`testkit::TestShard`]) with loopback players ([`testkit::TestPlayer`]) that log in with
//!   your game's packets, so an hour-long behaviour is tested in milliseconds; or one
//!   handler with no shard ([`testkit::Harness`]), or one behaviour ([`testkit::npc`]). It is
//!   behind the `testkit` cargo feature, for tests only: add
//!   `shardloop = { ..., features = ["testkit"] }` to your game's `[dev-dependencies]`.
//!
//! # Cargo features
//!
//! - `io-uring` (default): the io_uring network backend (Linux), chosen at run time by
//!   `network.backend`; epoll is always there.
//! - `loop-profiling` (default): the loop's per-phase profile and its per-second history
//!   (`loopstats`, the status page's chart): `docs/debugging.md`. It costs under 1 % of the
//!   loop's CPU; `--no-default-features --features io-uring` compiles it out.
//! - `testkit`: [`testkit`] and the engine's fault-injection hooks, for tests. No release
//!   build needs it; this crate's own tests, benches and examples turn it on through a
//!   dev-dependency on the crate itself.
//!
//! The loop alone, without a shard — a task that pauses on the loop thread:
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

// Every `pub` item is reachable from outside, or it is `pub(crate)`: the public surface is
// chosen, not grown by accident (async-executor lints the same way). CI runs clippy with
// `-D warnings`.
// Every public item says what it is (missing_docs): the API documentation is the game
// developer's and the operator tool's reference, not a list of names.
#![warn(unreachable_pub, missing_docs)]
// docs.rs (Cargo.toml's `[package.metadata.docs.rs]`) marks what the `testkit` feature gates.
#![cfg_attr(docsrs, feature(doc_cfg))]

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
// Tests only: behind the `testkit` feature, as tokio's `test-util` is, so no release build
// carries it. This crate's tests, benches and examples have it through the dev-dependency on
// the crate itself; `cfg(doc)` keeps it in the API docs of every build.
#[cfg(any(test, doc, feature = "testkit"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
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

/// The README: its Rust code blocks are compiled by `cargo test` as doctests, without a
/// single warning, so the first code a newcomer reads and copies builds cleanly against
/// today's API.
#[cfg(doctest)]
#[doc(test(attr(deny(warnings))))]
#[doc = include_str!("../README.md")]
pub struct Readme;
