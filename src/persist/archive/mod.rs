//! Archives: replaced saves rolled up into hourly, daily and monthly archives, their
//! retention, and restoring a save from one. See `docs/backups-and-archives.md`.

pub mod archiver;
pub mod format;
pub mod restore;
pub mod rollup;

pub use archiver::Archiver;
pub use format::{Entry, Format};
pub use rollup::{Period, Plan};
