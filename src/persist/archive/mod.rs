//! Archives: replaced saves rolled up into hourly, daily and monthly archives, their
//! retention, and restoring a save from one. See `docs/backups-and-archives.md`.

pub mod format;

pub use format::{Entry, Format};
