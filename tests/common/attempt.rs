//! Runs one mutated save or archive through the shard's real entry points — load, restore,
//! `restore --list`, the archive dropped into `Saves/` at startup — and says what happened.
//!
//! A panic is the caller's to catch (`catch_unwind`), so a panic is never mistaken for a
//! refusal. Everything happens inside a scratch directory (on `/dev/shm` when it exists: a
//! million restores should not wait on fsync).
//!
//! Owns running a case. Must never make one (`mutate` does).

use std::path::{Path, PathBuf};

use shardloop::config::Config;
use shardloop::persist::archive::{Format, restore};
use shardloop::persist::{self, Layout};

use super::mutate::SaveFiles;

/// How one attempt ended (a panic escapes instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Loaded or restored: the mutation left a valid save.
    Accepted,
    /// Refused, with the message an operator would read.
    Refused(String),
    /// Two entry points judged the same bytes differently (a bug, though not a crash).
    Disagreed(String),
}

/// A scratch directory, on tmpfs when there is one.
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    match shm.is_dir() {
        true => tempfile::tempdir_in(shm).or_else(|_| tempfile::tempdir()),
        false => tempfile::tempdir(),
    }
    .expect("scratch dir")
}

/// Loads `save` as the shard's current save.
pub fn load(save: &SaveFiles) -> Outcome {
    let dir = scratch();
    let saves = dir.path().join("Saves");
    save.write(&saves);
    match persist::load(&saves) {
        Ok(_) => Outcome::Accepted,
        Err(e) => Outcome::Refused(e.to_string()),
    }
}

/// The limits a shard with the default configuration applies to archives.
fn limits() -> restore::Limits {
    Config::default().archive.restore_limits()
}

/// `archive` in `format`, through `shardloop restore`, `restore --list` and the startup
/// drop-in; `Accepted` when both took it, `Refused` when both refused it.
pub fn restore_archive(archive: &[u8], format: Format) -> Outcome {
    let dir = scratch();
    let data = dir.path().join("data");
    let layout = Layout::new(&data, data.join("Saves"));
    let archives = data.join("Archives");
    let name = format!("2026-12-01-08{}", format.extension());

    // `restore --list` reads every archive under Archives/.
    let hourly = archives.join("Hourly");
    std::fs::create_dir_all(&hourly).expect("archive dir");
    std::fs::write(hourly.join(&name), archive).expect("write archive");
    let _ = restore::list(&data, &layout, &archives, limits());

    let upload = dir.path().join(&name);
    std::fs::write(&upload, archive).expect("write archive");
    let restored = restore::restore(&layout, &archives, &upload, limits());

    // The same bytes dropped into an empty Saves/ of a fresh data directory.
    let dropped_data = dir.path().join("dropped");
    let dropped_layout = Layout::new(&dropped_data, dropped_data.join("Saves"));
    std::fs::create_dir_all(&dropped_layout.saves).expect("dropped saves");
    std::fs::write(dropped_layout.saves.join(&name), archive).expect("write archive");
    let dropped = restore::restore_dropped(&dropped_layout, &archives_of(&dropped_data), limits());

    match (restored, dropped) {
        (Ok(_), Ok(Some(_))) => Outcome::Accepted,
        (Err(e), Err(_)) => Outcome::Refused(e.to_string()),
        (Ok(_), other) => Outcome::Disagreed(format!(
            "restore took the archive but the startup drop-in did not: {other:?}"
        )),
        (Err(e), Ok(_)) => Outcome::Disagreed(format!(
            "the startup drop-in took an archive restore refused ({e})"
        )),
    }
}

fn archives_of(data: &Path) -> PathBuf {
    data.join("Archives")
}
