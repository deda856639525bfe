//! Persistence: world saves that never freeze the game, and that a crash cannot break.
//!
//! A save is a [`Snapshot`] of the world's plain data taken on the loop thread (a few
//! milliseconds: the only stall), then sorted, encoded by `world.save_threads` workers and
//! written into a fresh temp directory on tokio's blocking pool, every file fsynced, the
//! manifest last, and swapped in as `Saves/` atomically; the save it replaces becomes a
//! backup. At every instant a complete, loadable save is on disk. See `docs/save-format.md`.
//!
//! - [`codec`]: the byte layout of each entity type, per version;
//! - [`file`](mod@file): one checksummed file of records; [`manifest`]: what makes a
//!   directory a save;
//! - [`snapshot`], [`save`], [`load`](mod@load): taking, writing and reading a save;
//! - [`layout`]: where saves, backups and temp directories live, the swap, crash recovery;
//! - [`saver`]: saves on the loop, never overlapping; [`autosave`], [`schedule`], [`clock`]:
//!   when they happen;
//! - [`archive`]: replaced saves rolled up into archives, and restoring from them;
//! - the building blocks: [`single_flight`] (one run at a time, one queued), [`fsio`]
//!   (durable writes), [`error`] ([`PersistError`]: what failed, where, and the OS's reason),
//!   [`background`] (low-priority threads), [`lock`] (one shard per data directory).
//!
//! Persistence knows the world's entities but nothing about sockets: what players should
//! hear is handed out as [`Notice`]s for the shard to deliver. Nor does it read the
//! configuration: the shard hands it plain settings ([`SaverConfig`], [`archive::Plan`],
//! [`archive::restore::Limits`]).

pub mod archive;
pub mod autosave;
pub mod background;
pub mod clock;
pub mod codec;
pub mod error;
pub mod file;
pub mod fsio;
pub mod layout;
pub mod load;
pub mod lock;
pub mod manifest;
pub mod save;
pub mod saver;
pub mod schedule;
pub mod single_flight;
pub mod snapshot;

pub use autosave::{Autosave, Cadence};
pub use clock::Clock;
pub use error::{Operation, PersistError};
pub use layout::{Layout, Replaced};
pub use load::{LoadError, Loaded, load};
pub use manifest::Manifest;
pub use save::Saved;
pub use saver::{Notice, Report, Saver, SaverConfig};
pub use single_flight::{Request, SingleFlight};
pub use snapshot::Snapshot;
