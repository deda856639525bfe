//! Loading a save: check everything, then build the world.
//!
//! The manifest is read first (through its size cap). Nothing it claims is believed before
//! it is checked against the disk: every data file's size on disk must be the one the
//! manifest names, and every count must fit in that many bytes (a record takes at least
//! [`Kind::min_record_bytes`]); only then is room reserved for the world. Each file is read
//! bounded by that size, must match its CRC-32 in the manifest and its own header and
//! checksum; every record must decode (a string or list is bounded by the bytes left, never
//! by its length field), and the counts must agree. The world that results must hang
//! together (no item inside something not in the save, no serial twice) and keep within the
//! world's structural limits (`world::limits`: container depth, no containment cycle,
//! spawner bounds, places on a map). Any failure names the file, the entity where there is
//! one, and the limit. Loading never modifies or deletes anything.
//!
//! Owns reading. Must never write to the save directory, and never allocate by a figure it
//! has not checked against the bytes on disk.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::codec::{self, DecodeError, Reader};
use super::file::{self, Kind};
use super::manifest::{self, Manifest};
use crate::world::{EntityKind, World};

/// A loaded world and what its manifest said.
#[derive(Debug)]
pub struct Loaded {
    /// The world as the save holds it, its limits checked.
    pub world: World,
    /// The save's manifest: when it was taken, its counts and files.
    pub manifest: Manifest,
    /// Reading, checking and decoding the save, wall-clock time.
    pub took: Duration,
}

/// Why a save cannot be loaded: the file and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// The file at fault (a save file, or the manifest).
    pub file: PathBuf,
    /// Why it cannot be loaded, in operator words.
    pub reason: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot load the save: {}: {}. Nothing was changed or deleted; restore a backup \
             from Backups/ (or move this save away) to start",
            self.file.display(),
            self.reason
        )
    }
}

impl std::error::Error for LoadError {}

/// Loads the save in `dir`.
pub fn load(dir: &Path) -> Result<Loaded, LoadError> {
    let began = Instant::now();
    let manifest_path = dir.join(manifest::FILE_NAME);
    let manifest = Manifest::read(dir).map_err(|e| LoadError {
        file: manifest_path.clone(),
        reason: e.to_string(),
    })?;
    check_claims(dir, &manifest)?;
    let mut world = World::new(manifest.seed);
    // Bounded now: each count fits in bytes that are really on disk.
    world.reserve(manifest.items as usize, manifest.mobiles as usize);
    for kind in Kind::ALL {
        let path = dir.join(kind.file_name());
        let err = |reason: String| LoadError {
            file: path.clone(),
            reason,
        };
        let bytes = manifest.file(kind).map_or(0, |w| w.bytes);
        let checked = file::read(&path, kind, bytes).map_err(|e| err(e.to_string()))?;
        vouch(&manifest, kind, &checked).map_err(err)?;
        add_records(&mut world, kind, &checked).map_err(err)?;
    }
    world.resume_serials(manifest.next_item_serial, manifest.next_mobile_serial);
    check_parents(&world).map_err(|reason| LoadError {
        file: dir.join(Kind::Items.file_name()),
        reason,
    })?;
    world
        .check_limits()
        .map_err(|(entity, serial, breach)| LoadError {
            file: dir.join(file_of(entity).file_name()),
            reason: format!("{entity} {serial} {breach}"),
        })?;
    Ok(Loaded {
        world,
        manifest,
        took: began.elapsed(),
    })
}

/// What `manifest` says is possible: each data file in `dir` is as large on disk as the
/// manifest says, and each count fits in those bytes. Reads metadata only: the check a save
/// passes before anything is read, and what makes a temp directory with a manifest a
/// complete save for startup recovery.
pub fn check_claims(dir: &Path, manifest: &Manifest) -> Result<(), LoadError> {
    Kind::ALL
        .into_iter()
        .try_for_each(|kind| check_claim(dir, manifest, kind))
}

/// [`check_claims`] for the data file of `kind`.
fn check_claim(dir: &Path, manifest: &Manifest, kind: Kind) -> Result<(), LoadError> {
    let path = dir.join(kind.file_name());
    let listed = manifest.file(kind).ok_or_else(|| LoadError {
        file: path.clone(),
        reason: "not listed in the manifest".into(),
    })?;
    let on_disk = std::fs::metadata(&path).map_err(|e| LoadError {
        file: path.clone(),
        reason: file::FileError::Unreadable(e).to_string(),
    })?;
    file::check_size(on_disk.len(), listed.bytes).map_err(|e| LoadError {
        file: path.clone(),
        reason: e.to_string(),
    })?;
    let (count, most) = (manifest.count(kind), kind.max_records(listed.bytes));
    if count > most {
        return Err(LoadError {
            file: dir.join(manifest::FILE_NAME),
            reason: format!(
                "`[counts] {kind} = {count}` cannot be true: {} is {} bytes, room for at most \
                 {most} {kind} (one takes at least {} bytes)",
                kind.file_name(),
                listed.bytes,
                kind.min_record_bytes()
            ),
        });
    }
    Ok(())
}

/// The file an entity of this kind is stored in.
fn file_of(entity: EntityKind) -> Kind {
    match entity {
        EntityKind::Item => Kind::Items,
        EntityKind::Mobile => Kind::Mobiles,
        EntityKind::Spawner => Kind::Spawners,
    }
}

/// The file is the one the manifest describes.
fn vouch(manifest: &Manifest, kind: Kind, checked: &file::Checked) -> Result<(), String> {
    let listed = manifest
        .file(kind)
        .ok_or_else(|| "not listed in the manifest".to_owned())?;
    if listed.bytes != checked.bytes || listed.crc32 != checked.crc32 {
        return Err(format!(
            "does not match the manifest ({} bytes, crc32 {:08x}; the manifest says {} bytes, \
             crc32 {:08x}): it comes from another save or was changed",
            checked.bytes, checked.crc32, listed.bytes, listed.crc32
        ));
    }
    if checked.count != manifest.count(kind) {
        return Err(format!(
            "holds {} {kind}; the manifest says {}",
            checked.count,
            manifest.count(kind)
        ));
    }
    Ok(())
}

fn add_records(world: &mut World, kind: Kind, checked: &file::Checked) -> Result<(), String> {
    let mut r = Reader::new(checked.records());
    let version = checked.record_version;
    for index in 0..checked.count {
        let at = r.offset();
        let added = match kind {
            Kind::Items => {
                let item = codec::decode_item(version, &mut r).map_err(|e| record(index, e))?;
                world.restore_item(item).map(drop)
            }
            Kind::Mobiles => {
                let mobile = codec::decode_mobile(version, &mut r).map_err(|e| record(index, e))?;
                world.restore_mobile(mobile).map(drop)
            }
            Kind::Spawners => {
                let spawner =
                    codec::decode_spawner(version, &mut r).map_err(|e| record(index, e))?;
                world.add_spawner(spawner)
            }
        };
        added.map_err(|e| format!("record {index} (byte {at} of the records): {e}"))?;
    }
    if !r.is_done() {
        return Err(format!(
            "{} bytes left over after the {} records the header counts",
            checked.records().len() - r.offset(),
            checked.count
        ));
    }
    Ok(())
}

fn record(index: u64, e: DecodeError) -> String {
    format!("record {index}: {e}")
}

fn check_parents(world: &World) -> Result<(), String> {
    for item in world.items() {
        if let Some(parent) = item.parent
            && world.item(parent).is_none()
            && world.mobile(parent).is_none()
        {
            return Err(format!(
                "item {} is inside {parent}, which is not in the save",
                item.serial
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::{Layout, Snapshot, save};

    /// A small world's save in a fresh directory; returns it and the save's directory.
    fn saved() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), dir.path().join("Saves"));
        let world = crate::world::generate(4, 300, 40);
        let snapshot = Snapshot::take(&world, "2026-12-03T10:00:00Z".parse().unwrap(), |_| true);
        save::write(&layout, snapshot, 1).unwrap();
        (dir, layout.saves)
    }

    fn set_count(saves: &Path, kind: Kind, count: u64) {
        let path = saves.join(manifest::FILE_NAME);
        let mut m = Manifest::read(saves).unwrap();
        match kind {
            Kind::Items => m.items = count,
            Kind::Mobiles => m.mobiles = count,
            Kind::Spawners => m.spawners = count,
        }
        std::fs::write(path, m.to_toml()).unwrap();
    }

    #[test]
    fn a_count_one_past_what_the_bytes_hold_is_refused_and_one_less_gets_to_the_file() {
        let (_dir, saves) = saved();
        let bytes = Manifest::read(&saves)
            .unwrap()
            .file(Kind::Mobiles)
            .unwrap()
            .bytes;
        let most = Kind::Mobiles.max_records(bytes);
        set_count(&saves, Kind::Mobiles, most + 1);
        let e = load(&saves).unwrap_err();
        assert!(e.file.ends_with(manifest::FILE_NAME), "{e}");
        assert!(
            e.reason
                .contains(&format!("room for at most {most} mobiles")),
            "{e}"
        );
        // Possible by size, so checked further: the file's own count disagrees.
        set_count(&saves, Kind::Mobiles, most);
        let e = load(&saves).unwrap_err();
        assert!(e.file.ends_with("mobiles.bin"), "{e}");
        assert!(
            e.reason.contains(&format!("the manifest says {most}")),
            "{e}"
        );
    }

    #[test]
    fn a_size_in_the_manifest_other_than_the_disks_is_refused_before_reading() {
        let (_dir, saves) = saved();
        let mut m = Manifest::read(&saves).unwrap();
        m.files[2].1.bytes = u64::MAX;
        std::fs::write(saves.join(manifest::FILE_NAME), m.to_toml()).unwrap_or(());
        // `u64::MAX` does not fit TOML's i64: the manifest is refused as it is parsed.
        assert!(load(&saves).is_err());
        m.files[2].1.bytes = i64::MAX as u64;
        std::fs::write(saves.join(manifest::FILE_NAME), m.to_toml()).unwrap();
        let e = load(&saves).unwrap_err();
        assert!(e.file.ends_with("spawners.bin"), "{e}");
        assert!(e.reason.contains("bytes on disk; the manifest says"), "{e}");
    }
}
