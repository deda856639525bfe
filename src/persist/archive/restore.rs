//! Restoring a save from an archive: unpack, check, and move into place — or put every file
//! back where it was.
//!
//! An archive (any of the four formats, made by a rollup or by hand with `tar` or `zip`) is
//! unpacked into a fresh temp directory ([`extract`]: the untrusted-input
//! boundary, with its checks and [`Limits`]), checked as a loadable save (manifest,
//! checksums, every record: [`load()`]), and only then put in place as
//! `Saves/`. The save it replaces moves to `Backups/Restored-<UTC time>/` and the archive to
//! `Archives/Restored/`: nothing is deleted. A restore refused before the moves leaves every
//! file where it was and removes its temp directory; one that fails part-way through the
//! moves undoes them.
//!
//! `restore --list` is [`list`](super::list); its names are re-exported here, next to the
//! restore they describe, for the CLI.
//!
//! Owns the check of the unpacked save and the moves of a restore, and their undo. Must
//! never write outside its temp directory before the archive has been validated, and never
//! delete the operator's save or archive.

use std::ffi::OsStr;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jiff::Timestamp;

use super::extract::{self, Refusal};
pub use super::extract::{DEFAULT_MAX_ENTRIES, Limits};
use super::format::Format;
pub use super::list::{Listed, ListedKind, Table, UnreadableManifest, list};
use crate::persist::fsio::{self, sync_dir};
use crate::persist::layout::{self, Layout, TEMP_PREFIX};
use crate::persist::load;
use crate::persist::manifest::{self, Manifest};

/// The folder under the archives directory that restored archives move to.
pub const RESTORED_ARCHIVES: &str = "Restored";
/// Prefix of the backup a restore makes of the save it replaces (under `Backups/`).
pub const RESTORED_BACKUP_PREFIX: &str = "Restored-";
/// Inside the restore's temp directory: a save unpacked here is not at the temp directory's
/// top, so crash recovery sees an unfinished extraction as unfinished and deletes it.
const UNPACKED: &str = "unpacked";

/// A restore that happened: what moved where.
#[derive(Debug, Clone)]
pub struct Restored {
    /// Where the archive was.
    pub archive: PathBuf,
    /// Where the archive is now (in `Archives/Restored/`).
    pub archive_now: PathBuf,
    /// Where the save it replaced went (`Backups/Restored-<time>/`), if there was one.
    pub previous: Option<PathBuf>,
    /// The save directory, now holding the restored save.
    pub save: PathBuf,
    /// The restored save's manifest.
    pub manifest: Manifest,
}

impl fmt::Display for Restored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.manifest;
        writeln!(
            f,
            "restored the save of {} ({} items, {} mobiles, {} spawners) from {} into {}",
            m.created,
            m.items,
            m.mobiles,
            m.spawners,
            self.archive.display(),
            self.save.display()
        )?;
        match &self.previous {
            Some(previous) => writeln!(f, "the previous save is in {}", previous.display())?,
            None => writeln!(f, "there was no previous save")?,
        }
        write!(f, "the archive is now {}", self.archive_now.display())
    }
}

/// A restore that did not happen: the archive, the entry at fault (if one is), the reason.
#[derive(Debug, Clone)]
pub struct RestoreError {
    /// The archive that was to be restored.
    pub archive: PathBuf,
    /// The archive entry refused, as named in the archive.
    pub entry: Option<String>,
    /// Why not, in operator words.
    pub reason: String,
    /// `None`: nothing was changed. Otherwise where things were left, when a failure part-way
    /// through the moves could not put everything back.
    pub left: Option<String>,
    /// The OS error behind the failure, when there is one (a full disk is `ENOSPC` here);
    /// `None` when the archive itself was refused for what it holds. Shared, as in
    /// `PersistError`, so the error stays `Clone`.
    pub source: Option<Arc<io::Error>>,
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot restore {}: ", self.archive.display())?;
        if let Some(entry) = &self.entry {
            write!(f, "entry `{entry}` ")?;
        }
        write!(f, "{}; ", self.reason)?;
        match &self.left {
            None => write!(f, "nothing was changed (every file is where it was)"),
            Some(left) => write!(f, "{left}"),
        }
    }
}

impl std::error::Error for RestoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}

impl RestoreError {
    /// The archive was refused before anything moved: nothing was changed.
    fn refused(archive: &Path, refusal: Refusal) -> RestoreError {
        RestoreError {
            archive: archive.to_owned(),
            entry: refusal.entry,
            reason: refusal.reason,
            left: None,
            source: refusal.source.map(Arc::new),
        }
    }
}

/// A step of the moves that failed: what it was, naming its paths, and the OS's reason.
#[derive(Debug)]
struct MoveFailed {
    what: String,
    source: io::Error,
}

impl fmt::Display for MoveFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.source)
    }
}

/// Wraps the OS error of the step `what`, for `map_err`.
fn failed(what: String) -> impl FnOnce(io::Error) -> MoveFailed {
    move |source| MoveFailed { what, source }
}

/// Restores the save in `archive`: unpack, check, then put it in place as `Saves/`, the
/// current save (if any) moving to `Backups/Restored-<time>/` and the archive to
/// `<archives_dir>/Restored/`. The caller holds the data directory's lock.
pub fn restore(
    layout: &Layout,
    archives_dir: &Path,
    archive: &Path,
    limits: Limits,
) -> Result<Restored, RestoreError> {
    let refused = |refusal| RestoreError::refused(archive, refusal);
    let format = archive_format(archive).map_err(refused)?;
    let tmp = layout
        .create_temp_dir("restore")
        .map_err(|e| refused(Refusal::os(None, "cannot create a temp directory", e)))?;
    // Removed however this ends: a refusal, an error, or a panic unwinding out of the load
    // of what was unpacked. If even that fails, startup recovery deletes it (it has no
    // manifest at its top).
    let tmp = TempDir(tmp);
    // Newer than the save it replaces, whatever sequence it was archived with: recovery
    // orders saves by sequence (`Layout::order_after_current`), rewritten in the temp copy.
    let (root, manifest) = unpack_and_check(archive, format, &tmp.0, limits)
        .and_then(|(root, _)| {
            let m = layout.order_after_current(&root);
            m.map(|m| (root, m))
                .map_err(|e| Refusal::os(None, "cannot rewrite its manifest's sequence", e))
        })
        .map_err(refused)?;
    let mut moves = Moves::new(layout, archive);
    match moves.run(archives_dir, &root, &tmp.0) {
        Ok(()) => Ok(Restored {
            archive: archive.to_owned(),
            archive_now: moves.archive_now.unwrap_or_else(|| archive.to_owned()),
            previous: moves.previous,
            save: layout.saves.clone(),
            manifest,
        }),
        Err(failure) => {
            let left = moves.undo().err();
            Err(RestoreError {
                archive: archive.to_owned(),
                entry: None,
                reason: failure.to_string(),
                left,
                source: Some(Arc::new(failure.source)),
            })
        }
    }
}

/// The restore's temp directory, removed with everything in it when dropped (only ours:
/// it was created fresh by this restore).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Startup: restores the archive dropped directly into `Saves/`, if there is one. Several
/// are refused (which one was meant is the operator's call), naming them.
pub fn restore_dropped(
    layout: &Layout,
    archives_dir: &Path,
    limits: Limits,
) -> Result<Option<Restored>, RestoreError> {
    let found = dropped_archives(&layout.saves).map_err(|e| RestoreError {
        archive: layout.saves.clone(),
        entry: None,
        reason: format!("cannot look for archives in it: {e}"),
        left: None,
        source: Some(Arc::new(e)),
    })?;
    match found.as_slice() {
        [] => Ok(None),
        [one] => restore(layout, archives_dir, one, limits).map(Some),
        several => Err(RestoreError {
            archive: layout.saves.clone(),
            entry: None,
            reason: format!(
                "it holds {} archives ({}); leave exactly one there to restore it",
                several.len(),
                names(several)
            ),
            left: None,
            source: None,
        }),
    }
}

/// Archive files (by extension) directly inside `saves`, sorted; none if it does not exist.
fn dropped_archives(saves: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = layout::entries(saves)?;
    let mut found = Vec::new();
    for entry in entries {
        let is_archive = Format::from_name(&entry.file_name().to_string_lossy()).is_some();
        if is_archive && entry.file_type()?.is_file() {
            found.push(entry.path());
        }
    }
    found.sort();
    Ok(found)
}

fn names(paths: &[PathBuf]) -> String {
    let names: Vec<_> = paths
        .iter()
        .map(|p| p.file_name().unwrap_or(p.as_os_str()).to_string_lossy())
        .collect();
    names.join(", ")
}

fn archive_format(archive: &Path) -> Result<Format, Refusal> {
    let name = archive.file_name().unwrap_or_default().to_string_lossy();
    let format = Format::from_name(&name).ok_or_else(|| {
        Refusal::whole(
            "its name does not say its format: it must end in .tar.zst, .tar.gz, .tgz, .zip or \
             .tar",
        )
    })?;
    match fs::metadata(archive) {
        Ok(meta) if meta.is_file() => Ok(format),
        Ok(_) => Err(Refusal::whole("it is not a file")),
        Err(e) => Err(Refusal::os(None, "cannot read it", e)),
    }
}

/// Unpacks into `<tmp>/unpacked/` and loads the save found there in full. Returns the save's
/// directory (the archive's root or its single top folder) and its manifest.
fn unpack_and_check(
    archive: &Path,
    format: Format,
    tmp: &Path,
    limits: Limits,
) -> Result<(PathBuf, Manifest), Refusal> {
    let dest = tmp.join(UNPACKED);
    fs::create_dir(&dest).map_err(|e| cannot_unpack(&dest, e))?;
    let file = File::open(archive).map_err(|e| Refusal::os(None, "cannot read it", e))?;
    extract::unpack(file, format, &dest, limits)?;
    fsio::sync_tree(&dest).map_err(|e| cannot_unpack(&dest, e))?;
    let root = save_root(&dest)?;
    let loaded = load::load(&root).map_err(|e| {
        let file = e.file.strip_prefix(&dest).unwrap_or(&e.file);
        Refusal::whole(format!(
            "it does not hold a loadable save: {}: {}",
            file.display(),
            e.reason
        ))
    })?;
    Ok((root, loaded.manifest))
}

fn cannot_unpack(path: &Path, e: io::Error) -> Refusal {
    Refusal::os(None, &format!("cannot unpack into {}", path.display()), e)
}

/// The save's directory: the archive's root if `manifest.toml` is there, else its single
/// top folder (how `tar -cf x.tar Saves` packs it).
fn save_root(dest: &Path) -> Result<PathBuf, Refusal> {
    if dest.join(manifest::FILE_NAME).is_file() {
        return Ok(dest.to_owned());
    }
    let mut top = fs::read_dir(dest)
        .and_then(|entries| {
            entries
                .map(|e| e.map(|e| e.path()))
                .collect::<io::Result<Vec<_>>>()
        })
        .map_err(|e| cannot_unpack(dest, e))?;
    top.sort();
    match top.as_slice() {
        [folder] if folder.is_dir() => Ok(folder.clone()),
        [] => Err(Refusal::whole("it is empty")),
        _ => Err(Refusal::whole(format!(
            "it does not hold a save: no {} at its root, and more than one top-level entry \
             ({})",
            manifest::FILE_NAME,
            names(&top)
        ))),
    }
}

/// The moves of a restore, recorded as they happen so that a failure part-way can put
/// everything back.
///
/// The order, and why (a crash may stop it after any step; startup's `Layout::recover` then
/// runs before anything loads):
///
/// 1. The archive moves to `Archives/Restored/`. First, because it may be inside `Saves/`,
///    which is about to move whole: it must not travel into a backup (that a rollup might
///    archive and retention later delete). A crash here leaves `Saves/` as it was (without
///    the archive) and the unfinished extraction, which recovery deletes.
/// 2. The checked save moves from inside the restore's temp directory to a top-level temp
///    directory: until now it was not at a temp directory's top, so recovery deleted it as
///    unfinished; from now on recovery sees a complete save and never deletes it (if `Saves/`
///    still holds an older save, recovery files this one under `Backups/Automatic/`, if a
///    newer one, it swaps this one in: both leave a loadable save).
/// 3. `Saves/` moves to `Backups/Restored-<time>/` (or, holding nothing now that the
///    archive left, is removed as an empty directory). A crash here leaves no `Saves/`, and
///    recovery puts the complete temp save from step 2 in place: the restore completes.
/// 4. The temp save is renamed to `Saves/`.
///
/// Not `renameat2(RENAME_EXCHANGE)` as a save's swap does: the old save would come out under
/// a temp name, complete, and a crash right then would leave recovery to judge it against the
/// restored one. Recovery orders by sequence (the restored save is given the current one's
/// plus one), so it would keep the restore; but these steps never leave an old save under a
/// temp name at all, and each crash point above is tested.
struct Moves<'a> {
    layout: &'a Layout,
    archive: &'a Path,
    archive_now: Option<PathBuf>,
    staged: Option<PathBuf>,
    /// `Saves/` was an empty directory (after the archive left it) and was removed.
    saves_removed: bool,
    previous: Option<PathBuf>,
    in_place: bool,
}

impl<'a> Moves<'a> {
    fn new(layout: &'a Layout, archive: &'a Path) -> Moves<'a> {
        Moves {
            layout,
            archive,
            archive_now: None,
            staged: None,
            saves_removed: false,
            previous: None,
            in_place: false,
        }
    }

    /// Steps 1–4 above. The error says which step failed; [`undo`](Self::undo) reverses
    /// what was done.
    fn run(&mut self, archives_dir: &Path, root: &Path, tmp: &Path) -> Result<(), MoveFailed> {
        self.move_archive(&archives_dir.join(RESTORED_ARCHIVES))?;
        self.stage(root)?;
        // The extraction's leftovers (empty folders); recovery removes them if this fails.
        let _ = fs::remove_dir_all(tmp);
        self.move_previous()?;
        let staged = self.staged.as_ref().expect("staged in step 2");
        let saves = &self.layout.saves;
        fs::rename(staged, saves).map_err(failed(format!(
            "cannot rename {} to {}",
            staged.display(),
            saves.display()
        )))?;
        self.in_place = true;
        self.sync_root()
    }

    fn sync_root(&self) -> Result<(), MoveFailed> {
        let root = self.layout.root();
        sync_dir(root).map_err(failed(format!("cannot sync {}", root.display())))
    }

    fn move_archive(&mut self, restored: &Path) -> Result<(), MoveFailed> {
        fs::create_dir_all(restored)
            .map_err(failed(format!("cannot create {}", restored.display())))?;
        let name = self.archive.file_name().unwrap_or_default();
        if same_dir(self.archive.parent(), restored) {
            // Restoring an archive restored before: it is where it belongs.
            self.archive_now = Some(self.archive.to_owned());
            return Ok(());
        }
        let target = free_archive_name(restored, name);
        move_file(self.archive, &target)?;
        self.archive_now = Some(target);
        Ok(())
    }

    fn stage(&mut self, root: &Path) -> Result<(), MoveFailed> {
        let staged = self
            .layout
            .create_temp_dir("restored")
            .and_then(|dir| fs::remove_dir(&dir).map(|()| dir))
            .map_err(failed("cannot create a temp directory".to_owned()))?;
        fs::rename(root, &staged).map_err(failed(format!(
            "cannot rename {} to {}",
            root.display(),
            staged.display()
        )))?;
        self.staged = Some(staged);
        self.sync_root()
    }

    /// `Saves/` to `Backups/Restored-<time>/`, whatever it holds (it is the operator's, so it
    /// is kept even if it is not a loadable save); removed only when it is an empty directory.
    fn move_previous(&mut self) -> Result<(), MoveFailed> {
        let saves = &self.layout.saves;
        let empty = match fs::read_dir(saves) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(failed(format!("cannot read {}", saves.display()))(e)),
            Ok(mut entries) => entries.next().is_none(),
        };
        if empty {
            fs::remove_dir(saves).map_err(failed(format!(
                "cannot remove the empty {}",
                saves.display()
            )))?;
            self.saves_removed = true;
            return Ok(());
        }
        let backups = restored_backups_dir(self.layout);
        fs::create_dir_all(&backups)
            .map_err(failed(format!("cannot create {}", backups.display())))?;
        let target = free_backup_name(&backups, Timestamp::now());
        fs::rename(saves, &target).map_err(failed(format!(
            "cannot move the current save {} to {}",
            saves.display(),
            target.display()
        )))?;
        self.previous = Some(target);
        sync_dir(&backups).map_err(failed(format!("cannot sync {}", backups.display())))
    }

    /// Puts back what [`run`](Self::run) moved, newest first. The error says where things
    /// were left (for the operator) if some of it could not be put back.
    fn undo(&self) -> Result<(), String> {
        let saves = &self.layout.saves;
        let mut stuck = Vec::new();
        if self.in_place {
            // Only the final sync failed: the restore is done, the moves are not undone.
            return Err(format!(
                "the restored save is in {}, the previous one in {}, the archive in {}",
                saves.display(),
                self.previous
                    .as_ref()
                    .map_or("(none)".into(), |p| p.display().to_string()),
                self.archive_now
                    .as_ref()
                    .map_or("(unknown)".into(), |p| p.display().to_string())
            ));
        }
        if let Some(previous) = &self.previous
            && let Err(e) = fs::rename(previous, saves)
        {
            stuck.push(format!(
                "the previous save is in {} ({e})",
                previous.display()
            ));
        }
        if self.saves_removed
            && let Err(e) = fs::create_dir(saves)
        {
            stuck.push(format!("{} was not recreated ({e})", saves.display()));
        }
        if let Some(staged) = &self.staged {
            if stuck.is_empty() {
                // Our own copy of the restored save; the archive still holds it.
                let _ = fs::remove_dir_all(staged);
            } else {
                stuck.push(format!(
                    "the restored save is complete in {} (the next start puts it in place)",
                    staged.display()
                ));
            }
        }
        if let Some(now) = &self.archive_now
            && now != self.archive
            && let Err(e) = move_file(now, self.archive)
        {
            stuck.push(format!("the archive is in {} ({e})", now.display()));
        }
        let _ = sync_dir(self.layout.root());
        match stuck.is_empty() {
            true => Ok(()),
            false => Err(format!("nothing was deleted, but {}", stuck.join("; "))),
        }
    }
}

/// `Backups/`, where `Restored-<time>/` backups go (next to `Backups/Automatic/`).
pub(super) fn restored_backups_dir(layout: &Layout) -> PathBuf {
    layout
        .backups
        .parent()
        .map_or_else(|| layout.backups.clone(), Path::to_path_buf)
}

fn same_dir(a: Option<&Path>, b: &Path) -> bool {
    let a = a
        .filter(|a| !a.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `Restored-<UTC yyyy-MM-dd-HH-mm-ss>`, with `-2`, `-3`… if taken.
fn free_backup_name(backups: &Path, now: Timestamp) -> PathBuf {
    let base = format!(
        "{RESTORED_BACKUP_PREFIX}{}",
        now.strftime(layout::BACKUP_TIME_FORMAT)
    );
    free_name(backups, &base, "")
}

/// The archive's own file name, with `-2`, `-3`… before its extension if taken.
fn free_archive_name(dir: &Path, name: &OsStr) -> PathBuf {
    let name = name.to_string_lossy();
    let stem = Format::from_name(&name).map_or(&*name, |f| f.stem(&name));
    free_name(dir, stem, &name[stem.len()..])
}

fn free_name(dir: &Path, stem: &str, extension: &str) -> PathBuf {
    let mut path = dir.join(format!("{stem}{extension}"));
    let mut n = 1;
    while fs::symlink_metadata(&path).is_ok() {
        n += 1;
        path = dir.join(format!("{stem}-{n}{extension}"));
    }
    path
}

/// Moves a file: a rename, or across filesystems (an archive named on the command line may
/// be anywhere) a copy that is synced and in place before the original is removed.
fn move_file(from: &Path, to: &Path) -> Result<(), MoveFailed> {
    let moved = match fs::rename(from, to) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => copy_then_remove(from, to),
        other => other,
    };
    moved
        .and_then(|()| fsio::sync_parent(from))
        .and_then(|()| fsio::sync_parent(to))
        .map_err(failed(format!(
            "cannot move {} to {}",
            from.display(),
            to.display()
        )))
}

fn copy_then_remove(from: &Path, to: &Path) -> io::Result<()> {
    // A hidden temp name: never listed, and never mistaken for the archive if this stops
    // half-way (the original is still in place then).
    let name = to.file_name().unwrap_or_default().to_string_lossy();
    let copy = fsio::Replacement::new(
        to,
        &format!("{TEMP_PREFIX}restore-{}-{name}", std::process::id()),
    );
    copy.write(|out| io::copy(&mut File::open(from)?, out))?;
    copy.commit()?;
    fs::remove_file(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_names_get_a_number_before_the_extension() {
        let dir = tempfile::tempdir().unwrap();
        let first = free_archive_name(dir.path(), OsStr::new("w.tar.zst"));
        assert_eq!(first, dir.path().join("w.tar.zst"));
        fs::write(&first, "").unwrap();
        let second = free_archive_name(dir.path(), OsStr::new("w.tar.zst"));
        assert_eq!(second, dir.path().join("w-2.tar.zst"));
        let now: Timestamp = "2026-12-03T10:00:00Z".parse().unwrap();
        let backup = free_backup_name(dir.path(), now);
        assert_eq!(backup, dir.path().join("Restored-2026-12-03-10-00-00"));
    }
}
