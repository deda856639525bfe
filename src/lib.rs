//! shardloop: the core of a game shard — one thread, one deterministic event loop that runs
//! timers, packet handlers and game logic written as `async fn`s.
//!
//! See `docs/` for the guides and `DESIGN.md` in the project's shared folder for the contract.

pub mod timer;
