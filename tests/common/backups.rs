//! Backups as a shard leaves them, made directly: for the tests of what rollups and uploads
//! do with them.

use std::path::PathBuf;

use jiff::Timestamp;
use shardloop::persist::{self, Layout, Snapshot};
use shardloop::world::World;

/// A complete automatic backup of `world` created at `at` (as a save would leave it), in
/// `layout`'s `Backups/Automatic/`; its directory.
pub fn backup(layout: &Layout, world: &World, at: &str) -> PathBuf {
    let created: Timestamp = at.parse().unwrap();
    // On the same filesystem as the backups, so that the rename below works on a tmpfs too.
    std::fs::create_dir_all(layout.root()).unwrap();
    let scratch = tempfile::tempdir_in(layout.root()).unwrap();
    let l = Layout::new(scratch.path(), scratch.path().join("Saves"));
    persist::save::write(&l, Snapshot::take(world, created, |_| true), 1).unwrap();
    std::fs::create_dir_all(&layout.backups).unwrap();
    let target = layout
        .backups
        .join(created.strftime("%Y-%m-%d-%H-%M-%S").to_string());
    std::fs::rename(&l.saves, &target).unwrap();
    std::fs::write(target.join(persist::layout::BACKUP_MARKER), "").unwrap();
    target
}
