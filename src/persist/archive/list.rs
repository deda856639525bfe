//! `shardloop restore --list`: the backups and archives a restore could use, with the entity
//! counts their manifests give, as a table.
//!
//! Listing only reads, so it works while the shard runs. Archives are not unpacked: only
//! their `manifest.toml` entry is read, wherever a restore would find it, through
//! [`check::manifest`]: within the restore's [`Limits`] (entries, decompressed bytes, a
//! zip's central directory checked first) and at most 64 KiB of manifest.
//!
//! Owns finding and describing restorable saves, and the table. Must never write, move or
//! delete anything, nor extract an archive.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::bounded::Limits;
use super::check::{self, CheckError};
use super::format::Format;
use super::restore::{RESTORED_ARCHIVES, RESTORED_BACKUP_PREFIX, restored_backups_dir};
use crate::persist::layout::{self, Layout};
use crate::persist::manifest::{Manifest, ManifestError};

/// A backup or archive that `restore --list` shows.
#[derive(Debug, Clone)]
pub struct Listed {
    /// A backup (a save directory) or an archive (one file).
    pub kind: ListedKind,
    /// `Automatic` or `Restored` for backups; `Hourly`, `Daily`, `Monthly` or `Restored`
    /// for archives.
    pub group: String,
    /// Where it is: the backup's directory or the archive file.
    pub path: PathBuf,
    /// `path` relative to the data directory, for display.
    pub name: String,
    /// Bytes on disk (every file of a backup).
    pub bytes: u64,
    /// Its manifest, or why it cannot be read.
    pub manifest: Result<Manifest, UnreadableManifest>,
}

/// Why a listed backup's or archive's manifest cannot be read: what [`Manifest::read`] says
/// of a backup's `manifest.toml`, or what [`check::manifest`] (or parsing the text it found)
/// says of an archive's. `restore --list` shows it after `unreadable: `.
#[derive(Debug, Clone)]
pub enum UnreadableManifest {
    /// A backup's `manifest.toml` does not read or parse.
    Backup(ManifestError),
    /// An archive holds no manifest that reads and parses, or cannot be walked to it.
    Archive(CheckError),
    /// An off-site archive's metadata records no manifest that parses (it was not uploaded by
    /// a shard, or its manifest was too long for the metadata): why, in operator words.
    Remote(String),
}

impl fmt::Display for UnreadableManifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnreadableManifest::Backup(e) => e.fmt(f),
            UnreadableManifest::Archive(e) => e.fmt(f),
            UnreadableManifest::Remote(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for UnreadableManifest {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            UnreadableManifest::Backup(e) => Some(e),
            UnreadableManifest::Archive(e) => Some(e),
            UnreadableManifest::Remote(_) => None,
        }
    }
}

/// What a [`Listed`] entry is; backups sort before archives, archives on disk before those
/// off-site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ListedKind {
    /// A replaced save kept as a directory under `Backups/`.
    Backup,
    /// A save packed into one archive file under the archives directory.
    Archive,
    /// An archive in the off-site bucket (`[archive.remote]`): its path and name are its
    /// `s3://` URL, its counts those its metadata records (checked only by a restore).
    Remote,
}

/// Every backup (`Backups/Automatic/*`, `Backups/Restored-*`) and archive
/// (`<archives_dir>/{Hourly,Daily,Monthly,Restored}/*`), with the counts in its manifest.
/// Reads only: archives are not unpacked, only their `manifest.toml` entry is read, within
/// `limits`.
pub fn list(
    data_dir: &Path,
    layout: &Layout,
    archives_dir: &Path,
    limits: Limits,
) -> io::Result<Vec<Listed>> {
    let mut listed = Vec::new();
    for dir in sorted_entries(&layout.backups, |p| p.is_dir())? {
        listed.push(backup(data_dir, "Automatic", dir));
    }
    let restored = sorted_entries(&restored_backups_dir(layout), |p| {
        p.is_dir() && file_name(p).starts_with(RESTORED_BACKUP_PREFIX)
    })?;
    for dir in restored {
        listed.push(backup(data_dir, "Restored", dir));
    }
    for group in ["Hourly", "Daily", "Monthly", RESTORED_ARCHIVES] {
        let files = sorted_entries(&archives_dir.join(group), |p| {
            p.is_file() && Format::from_name(&file_name(p)).is_some()
        })?;
        for path in files {
            listed.push(archive(data_dir, group, path, limits));
        }
    }
    Ok(listed)
}

fn backup(data_dir: &Path, group: &str, path: PathBuf) -> Listed {
    Listed {
        kind: ListedKind::Backup,
        group: group.to_owned(),
        name: relative_name(data_dir, &path),
        bytes: tree_bytes(&path),
        manifest: Manifest::read(&path).map_err(UnreadableManifest::Backup),
        path,
    }
}

fn archive(data_dir: &Path, group: &str, path: PathBuf, limits: Limits) -> Listed {
    let format = Format::from_name(&file_name(&path)).expect("listed by extension");
    Listed {
        kind: ListedKind::Archive,
        group: group.to_owned(),
        name: relative_name(data_dir, &path),
        bytes: fs::metadata(&path).map_or(0, |m| m.len()),
        manifest: check::manifest(&path, format, limits)
            .and_then(|text| Manifest::parse(&text).map_err(CheckError::Manifest))
            .map_err(UnreadableManifest::Archive),
        path,
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

fn relative_name(data_dir: &Path, path: &Path) -> String {
    path.strip_prefix(data_dir)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The entries of `dir` that `keep` accepts, sorted; none if `dir` does not exist. Hidden
/// entries are work in progress (`.tmp-*` archives being written, `.deleting-*` backups) and
/// are never listed.
fn sorted_entries(dir: &Path, keep: impl Fn(&Path) -> bool) -> io::Result<Vec<PathBuf>> {
    let entries = layout::entries(dir)?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry.path();
        if !file_name(&path).starts_with('.') && keep(&path) {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// Bytes of every file under `dir` (links are not followed).
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&entry.path()),
            Ok(_) => entry.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// The `restore --list` table.
pub struct Table<'a>(pub &'a [Listed]);

impl fmt::Display for Table<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return writeln!(f, "no backups or archives");
        }
        let width = self
            .0
            .iter()
            .map(|l| l.name.len())
            .max()
            .unwrap_or(0)
            .max(4);
        writeln!(
            f,
            "{:<7}  {:<9}  {:<width$}  {:>10}  {:>8}  {:>8}  {:>8}  CREATED (UTC)",
            "KIND", "GROUP", "PATH", "SIZE", "ITEMS", "MOBILES", "SPAWNERS"
        )?;
        let mut groups: BTreeMap<ListedKind, usize> = BTreeMap::new();
        for listed in self.0 {
            *groups.entry(listed.kind).or_default() += 1;
            let kind = match listed.kind {
                ListedKind::Backup => "backup",
                ListedKind::Archive => "archive",
                ListedKind::Remote => "remote",
            };
            write!(
                f,
                "{kind:<7}  {:<9}  {:<width$}  {:>10}  ",
                listed.group,
                listed.name,
                human_bytes(listed.bytes)
            )?;
            match &listed.manifest {
                Ok(m) => writeln!(
                    f,
                    "{:>8}  {:>8}  {:>8}  {}",
                    m.items,
                    m.mobiles,
                    m.spawners,
                    m.created.strftime("%Y-%m-%d %H:%M:%S")
                )?,
                Err(why) => writeln!(f, "unreadable: {why}")?,
            }
        }
        write!(
            f,
            "{} backups, {} archives",
            groups.get(&ListedKind::Backup).unwrap_or(&0),
            groups.get(&ListedKind::Archive).unwrap_or(&0)
        )?;
        match groups.get(&ListedKind::Remote) {
            Some(remote) => write!(f, ", {remote} off-site"),
            None => Ok(()),
        }
    }
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_ls_h() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}
