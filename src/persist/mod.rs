//! Persistence: world saves that never freeze the game, and that a crash cannot break.
//!
//! A save is a [`Snapshot`] of the world's plain data at one instant: the loop only freezes
//! the world ([`Capture`]: its entity pages shared, copied when next changed; well under a
//! millisecond, the only stall), and the entities are copied out, sorted, encoded by `world.save_threads` workers and
//! written into a fresh temp directory on tokio's blocking pool, every file fsynced, the
//! manifest last, and swapped in as `Saves/` atomically; the save it replaces becomes a
//! backup. At every instant a complete, loadable save is on disk. See `docs/save-format.md`.
//!
//! - [`codec`]: the byte layout of each entity type, per version;
//! - [`file`](mod@file): one checksummed file of records; [`manifest`]: what makes a
//!   directory a save;
//! - [`Capture`], [`Snapshot`], [`save`], [`load`](mod@load): taking, writing and reading a
//!   save;
//! - [`layout`]: where saves, backups and temp directories live, the swap, crash recovery;
//! - [`Saver`]: saves on the loop, never overlapping ([`Request`], [`Notice`], [`Report`]);
//!   [`autosave`] and [`clock`]: when they happen;
//! - [`archive`]: replaced saves rolled up into archives, and restoring from them;
//! - [`error`] ([`PersistError`]: what failed, where, and the OS's reason), [`lock`] (one
//!   shard per data directory).
//!
//! The building blocks underneath are the crate's own, not API: `snapshot.rs` and
//! `saver.rs` (public only through the items above, which tests and benches drive),
//! `schedule.rs` (the autosave times), `single_flight.rs` (one run at a time, one queued),
//! `fsio.rs` (durable writes), `background.rs` (low-priority threads) and `reserve.rs` (the
//! disk reserve a save gives up when the disk is full, `world.disk_reserve`).
//!
//! Persistence knows the world's entities but nothing about sockets: what players should
//! hear is handed out as [`Notice`]s for the shard to deliver. Nor does it read the
//! configuration: the shard hands it plain settings ([`SaverConfig`], [`archive::Plan`],
//! [`archive::restore::Limits`]).

pub mod archive;
pub mod autosave;
mod background;
pub mod clock;
pub mod codec;
pub mod error;
pub mod file;
mod fsio;
pub mod layout;
pub mod load;
pub mod lock;
pub mod manifest;
pub(crate) mod reserve;
pub mod save;
mod saver;
pub(crate) mod schedule;
mod single_flight;
mod snapshot;

pub use autosave::{Autosave, Cadence};
pub use clock::Clock;
pub use error::{Operation, PersistError};
pub use layout::{Layout, Replaced};
pub use load::{LoadError, Loaded, load};
pub use manifest::Manifest;
pub use save::Saved;
pub use saver::{Notice, Report, Saver, SaverConfig};
pub use single_flight::Request;
pub use snapshot::{Capture, Snapshot};
