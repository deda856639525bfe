//! Archives: replaced saves rolled up into hourly, daily and monthly archives, their
//! retention, and restoring a save from one. See `docs/backups-and-archives.md`.
//!
//! - [`format`](mod@format): the four archive encodings, written and read back;
//! - [`rollup`]: one rollup run and retention, on a blocking thread; [`archiver`]: runs them
//!   off the loop, one at a time;
//! - [`bounded`]: the limits, and the one way an untrusted archive is opened and read
//!   within them; [`check`]: finding an archive's manifest, and verifying that a file is a
//!   complete archive of a save;
//! - [`extract`]: unpacking an untrusted archive, entry by entry, within limits;
//!   [`restore`]: checking what was unpacked and moving it into place (or back);
//!   [`list`]: what `restore --list` shows;
//! - [`remote`]: the off-site bucket (`[archive.remote]`): uploads that never overwrite,
//!   checksums, listing, downloads within limits; [`upload`]: the uploader's own thread,
//!   which sends every archive there, retries through outages, marks what is verified and
//!   applies retention to the bucket.

pub mod archiver;
pub mod bounded;
pub mod check;
mod extension;
pub mod extract;
pub mod format;
pub mod list;
pub mod mark;
mod period;
pub mod remote;
pub mod restore;
pub mod rollup;
pub mod upload;

pub use archiver::Archiver;
pub use format::{Entry, Format};
pub use rollup::{Period, Plan};
