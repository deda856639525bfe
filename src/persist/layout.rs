//! Where saves live on disk, and the moves between those places.
//!
//! ```text
//! <data_dir>/Saves/                          the current save (world.save_dir)
//! <data_dir>/Backups/Automatic/<UTC time>/   saves replaced by a newer one, each with a
//!                                            `backup.complete` marker once fully in place
//! <data_dir>/.tmp-save-<pid>-<n>/            a save being written (unique name)
//! ```
//!
//! Temp directories sit next to `Saves/` so that putting one in place is a rename inside one
//! filesystem. The swap itself is one `renameat2(RENAME_EXCHANGE)` where the filesystem has
//! it: `Saves/` never stops existing, and the old save comes out under the temp name, from
//! where it moves to `Backups/`: its own files only, anything else that was in `Saves/` (an
//! archive dropped there to restore) goes back into `Saves/` first, so retention never
//! deletes it with a backup. Elsewhere it is two renames with a gap that startup recovery
//! ([`Layout::recover`]) closes.
//!
//! Which of two complete saves is newer is decided by the manifest's `sequence` (one more
//! than the save it replaced), never by its wall-clock `created` time: a clock stepped
//! backwards, or a save or archive dated in the future, cannot make recovery put an older
//! save back. `created` only orders saves of equal sequence (saves written before the
//! sequence existed all read as 0).
//!
//! Owns the paths and directory moves (each fsynced, through `fsio`). Must never read or
//! write save contents beyond the manifest.

use std::collections::HashSet;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use jiff::Timestamp;

use super::file::Kind;
use super::fsio::{self, sync_dir};
use super::manifest::{self, Manifest};

/// The save directories being written by this process (see [`Layout::lock_writes`]).
struct Writers {
    busy: Mutex<HashSet<PathBuf>>,
    done: Condvar,
}

static WRITERS: std::sync::LazyLock<Writers> = std::sync::LazyLock::new(|| Writers {
    busy: Mutex::new(HashSet::new()),
    done: Condvar::new(),
});

fn lock_ignoring_poison<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One writer's hold on a save directory; dropping it lets the next one in.
#[must_use = "the directory is free again as soon as the guard drops"]
#[derive(Debug)]
pub struct WriteGuard {
    key: PathBuf,
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        lock_ignoring_poison(&WRITERS.busy).remove(&self.key);
        WRITERS.done.notify_all();
    }
}

/// Prefix of every temp directory. Startup finishes or cleans those of its own making only:
/// `<prefix><purpose>-<pid>-<n>-<ns>`, `purpose` one of [`TEMP_PURPOSES`] ([`is_own_temp`]).
/// Others are left alone, as the directory holding `Saves/` may be shared (`/var/lib`).
pub const TEMP_PREFIX: &str = ".tmp-";
/// What temp directories are made for: a save being written, the save a swap without the
/// exchange moved aside, a restore unpacking, a checked restore waiting to go in place.
pub const TEMP_PURPOSES: [&str; 4] = ["save", "old", "restore", "restored"];
/// How a backup's directory names its creation time (UTC), e.g. `2026-12-03-10-00-00`.
pub const BACKUP_TIME_FORMAT: &str = "%Y-%m-%d-%H-%M-%S";
/// Written into a backup once it is fully in place.
pub const BACKUP_MARKER: &str = "backup.complete";

/// The save directories of one shard.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The current save.
    pub saves: PathBuf,
    /// Where replaced saves go.
    pub backups: PathBuf,
}

impl Layout {
    /// The layout of a shard whose current save is `saves` and whose automatic backups go to
    /// `data_dir/Backups/Automatic/`. Touches no disk.
    pub fn new(data_dir: &Path, saves: PathBuf) -> Layout {
        Layout {
            saves,
            backups: data_dir.join("Backups").join("Automatic"),
        }
    }

    /// The directory holding `Saves/` and the temp directories.
    pub fn root(&self) -> &Path {
        self.saves.parent().unwrap_or(Path::new("."))
    }

    /// Waits until no other writer in this process is putting a save in place as `Saves/`, and
    /// keeps the others out until the guard drops. A save reads the sequence it replaces and
    /// swaps itself in under it: two at once (an autosave still writing on the blocking pool
    /// when a fault takes the final save) would otherwise carry the same sequence, and the
    /// older snapshot could land last. Other processes are kept out by the `shard.lock`.
    pub fn lock_writes(&self) -> WriteGuard {
        let key = std::path::absolute(&self.saves).unwrap_or_else(|_| self.saves.clone());
        let mut writing = lock_ignoring_poison(&WRITERS.busy);
        while writing.contains(&key) {
            writing = WRITERS
                .done
                .wait(writing)
                .unwrap_or_else(|p| p.into_inner());
        }
        writing.insert(key.clone());
        WriteGuard { key }
    }

    /// The sequence number of the save in `Saves/`; 0 if there is none or its manifest does
    /// not read (so the next save is 1).
    pub fn current_sequence(&self) -> u64 {
        Manifest::read(&self.saves).map_or(0, |m| m.sequence)
    }

    /// Rewrites the manifest of the complete save in `dir` (not yet in place) so that it
    /// orders as newer than `Saves/`: sequence one more than the current save's. For a restore,
    /// whose save may carry any old sequence. Durable (replaced through a synced temp file).
    /// Returns the manifest as now written.
    pub fn order_after_current(&self, dir: &Path) -> io::Result<Manifest> {
        let path = dir.join(manifest::FILE_NAME);
        let mut m = Manifest::read(dir).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        })?;
        m.sequence = self.current_sequence() + 1;
        fsio::replace(&path, ".manifest.toml.tmp", m.to_toml().as_bytes())?;
        Ok(m)
    }

    /// A new, empty temp directory for `purpose` (one of [`TEMP_PURPOSES`]: startup recovery
    /// touches no other), with a name no other run or writer uses.
    pub fn create_temp_dir(&self, purpose: &str) -> io::Result<PathBuf> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        std::fs::create_dir_all(self.root())?;
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let nanos = Timestamp::now().subsec_nanosecond();
            let name = format!("{TEMP_PREFIX}{purpose}-{}-{n}-{nanos}", std::process::id());
            let path = self.root().join(name);
            match std::fs::create_dir(&path) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                other => return other.map(|()| path),
            }
        }
    }

    /// Puts the complete save in `staged` in place as `Saves/`, and the save it replaces
    /// (if any) in `Backups/Automatic/`.
    ///
    /// [`SwapFailed::NotInPlace`] means the new save is *not* in place (`Saves/` is as
    /// before, or, if even that could not be restored, missing with the new save still
    /// complete in `staged` for [`recover`](Self::recover)). [`SwapFailed::NotDurable`]
    /// means it is, but the directory holding it could not be synced, so a crash or a power
    /// cut may still undo the rename: the save has failed, and the save it replaced stays
    /// where the swap left it, complete, for recovery to sort out against the new one.
    /// Once the new save is in place and durable, trouble with the old one is no failure of
    /// the save: it is reported in [`Replaced::LeftAt`], and the old save is never deleted.
    pub fn swap_in(&self, staged: &Path) -> Result<Replaced, SwapFailed> {
        if !self.saves.exists() {
            std::fs::rename(staged, &self.saves).map_err(SwapFailed::NotInPlace)?;
            return match sync_dir(self.root()) {
                Ok(()) => Ok(Replaced::Nothing),
                Err(source) => Err(SwapFailed::NotDurable {
                    source,
                    replaced: None,
                }),
            };
        }
        let old = match exchange(staged, &self.saves) {
            Ok(()) => staged.to_owned(),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
                self.two_renames(staged).map_err(SwapFailed::NotInPlace)?
            }
            Err(e) => return Err(SwapFailed::NotInPlace(e)),
        };
        if let Err(source) = sync_dir(self.root()) {
            return Err(SwapFailed::NotDurable {
                source,
                replaced: Some(old),
            });
        }
        Ok(self.back_up(&old))
    }

    /// The swap without an atomic exchange: `Saves/` aside, `staged` in, and back if that
    /// fails. Returns where the old save went.
    fn two_renames(&self, staged: &Path) -> io::Result<PathBuf> {
        let old = self.create_temp_dir("old")?;
        std::fs::remove_dir(&old)?;
        std::fs::rename(&self.saves, &old)?;
        if let Err(e) = std::fs::rename(staged, &self.saves) {
            // Put the old save back; if even that fails, `Saves/` is missing and the next
            // start promotes the newest complete temp save (the new one, in `staged`).
            let _ = std::fs::rename(&old, &self.saves);
            return Err(e);
        }
        Ok(old)
    }

    /// Moves a complete replaced save to `Backups/Automatic/<its creation time, UTC>/` and
    /// marks it complete. Anything in it that is not the save's own (an archive dropped into
    /// `Saves/` to restore at the next start, an operator's notes) goes back to `Saves/`
    /// first: only the save's files become a backup, which retention deletes one day.
    fn back_up(&self, old: &Path) -> Replaced {
        if let Err(e) = self.keep_in_saves(old) {
            return left_at(old, &e);
        }
        let created = Manifest::read(old).map_or_else(|_| Timestamp::now(), |m| m.created);
        let moved = std::fs::create_dir_all(&self.backups).and_then(|()| {
            let target = self.free_backup_name(created);
            std::fs::rename(old, &target)?;
            Ok(target)
        });
        let target = match moved {
            Ok(target) => target,
            Err(e) => return left_at(old, &e),
        };
        let marked = sync_dir(&self.backups)
            .and_then(|()| sync_dir(self.root()))
            .and_then(|()| mark_complete(&target));
        match marked {
            Ok(()) => Replaced::BackedUp(target),
            Err(e) => left_at(&target, &e),
        }
    }

    /// Moves every entry of the replaced save `old` that is not one of a save's files into
    /// `Saves/` (which holds the new save), each under its own name, or `<name>.<n>` if that
    /// is taken there. Each is a rename: a crash leaves it in one place or the other, and if
    /// it is still in `old`, recovery backs `old` up through here again.
    fn keep_in_saves(&self, old: &Path) -> io::Result<()> {
        let mut kept = 0;
        for entry in entries(old)? {
            let name = entry.file_name();
            if is_save_file(&name) {
                continue;
            }
            let mut target = self.saves.join(&name);
            let mut n = 1;
            while std::fs::symlink_metadata(&target).is_ok() {
                n += 1;
                let mut numbered = name.clone();
                numbered.push(format!(".{n}"));
                target = self.saves.join(numbered);
            }
            std::fs::rename(entry.path(), &target)?;
            tracing::info!(
                "kept {}: not part of the save, it stays in {} rather than going to Backups/ \
                 with the replaced save",
                target.display(),
                self.saves.display()
            );
            kept += 1;
        }
        if kept > 0 {
            sync_dir(&self.saves)?;
            sync_dir(old)?;
        }
        Ok(())
    }

    fn free_backup_name(&self, created: Timestamp) -> PathBuf {
        let base = created.strftime(BACKUP_TIME_FORMAT).to_string();
        let mut path = self.backups.join(&base);
        let mut n = 1;
        while path.exists() {
            n += 1;
            path = self.backups.join(format!("{base}-{n}"));
        }
        path
    }

    /// Startup: finishes or cleans what a crash left behind, before anything loads.
    ///
    /// A temp directory with a readable manifest, and data files of the sizes it names (the
    /// check load makes first), is a complete save (the manifest is written last): if
    /// `Saves/` is missing it becomes `Saves/` (the newest such one); if it is newer than
    /// `Saves/` the interrupted swap is finished; otherwise it is a replaced save that had
    /// not reached `Backups/` yet, and goes there. Newer means a higher sequence number, and
    /// only at equal sequence a later `created` ([`order`]). Any other temp directory was
    /// never finished (or is not one load would take) and is deleted. Returns what it did,
    /// one line each, for the log.
    pub fn recover(&self) -> io::Result<Vec<String>> {
        let mut done = Vec::new();
        let mut complete = Vec::new();
        for path in self.temp_dirs()? {
            match complete_save(&path) {
                Ok(m) => complete.push((order(&m), path)),
                Err(why) => {
                    std::fs::remove_dir_all(&path)?;
                    done.push(format!("removed unfinished {}{why}", path.display()));
                }
            }
        }
        // An empty `Saves/` (a restore interrupted after moving its archive out) holds
        // nothing to lose: treat it as missing.
        if is_empty_dir(&self.saves) {
            std::fs::remove_dir(&self.saves)?;
            done.push(format!("removed the empty {}", self.saves.display()));
        }
        if self.saves.exists() && Manifest::read(&self.saves).is_err() {
            // Not a save we can order against: touch nothing complete, let loading refuse it
            // with the reason. Nothing is ever deleted that might be the operator's world.
            return Ok(done);
        }
        // Oldest first, so each newer one replaces the one before it.
        complete.sort();
        for ((sequence, created), path) in complete {
            let current = Manifest::read(&self.saves).ok().map(|m| order(&m));
            let replaced = if current.is_none_or(|c| (sequence, created) > c) {
                let replaced = self.swap_in(&path).map_err(|e| e.into_io(&self.saves))?;
                done.push(format!(
                    "finished putting the save of {created} (sequence {sequence}) in place"
                ));
                replaced
            } else {
                self.back_up(&path)
            };
            match replaced {
                Replaced::Nothing => {}
                Replaced::BackedUp(to) => {
                    done.push(format!("moved a replaced save to {}", to.display()));
                }
                Replaced::LeftAt { path, error } => {
                    return Err(io::Error::other(format!(
                        "cannot move the replaced save {} to {}: {error}",
                        path.display(),
                        self.backups.display()
                    )));
                }
            }
        }
        self.mark_backups(&mut done)?;
        Ok(done)
    }

    /// Marks complete every backup that holds a readable manifest but no marker (a crash
    /// between its move and its marker).
    fn mark_backups(&self, done: &mut Vec<String>) -> io::Result<()> {
        for entry in entries(&self.backups)? {
            // Dot names are not backups (`.deleting-*`: one an archive rollup is deleting).
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let dir = entry.path();
            if dir.is_dir() && !dir.join(BACKUP_MARKER).exists() && Manifest::read(&dir).is_ok() {
                mark_complete(&dir)?;
                done.push(format!("marked the backup {} complete", dir.display()));
            }
        }
        Ok(())
    }

    fn temp_dirs(&self) -> io::Result<Vec<PathBuf>> {
        let entries = entries(self.root())?;
        let mut dirs = Vec::new();
        for entry in entries {
            let name = entry.file_name();
            if is_own_temp(&name) && entry.file_type()?.is_dir() {
                dirs.push(entry.path());
            }
        }
        dirs.sort();
        Ok(dirs)
    }
}

/// The manifest of the complete save in `dir`, a temp directory: one whose manifest reads and
/// whose data files are the sizes it names (the check load makes before reading anything).
/// Otherwise it was never finished, and the error says why, for the log (empty when there
/// is no manifest at all).
fn complete_save(dir: &Path) -> Result<Manifest, String> {
    let m = Manifest::read(dir).map_err(|e| match e {
        manifest::ManifestError::Unreadable(io) if io.kind() == io::ErrorKind::NotFound => {
            String::new()
        }
        e => format!(" (its manifest: {e})"),
    })?;
    super::load::check_claims(dir, &m).map_err(|e| {
        let file = e.file.strip_prefix(dir).unwrap_or(&e.file);
        format!(" ({}: {})", file.display(), e.reason)
    })?;
    Ok(m)
}

/// Why [`Layout::swap_in`] failed: whether the new save is in place decides what is on disk.
#[derive(Debug)]
pub enum SwapFailed {
    /// The new save is not in place; `Saves/` holds what it held before (see `swap_in`).
    NotInPlace(io::Error),
    /// The new save is in `Saves/`, but syncing the directory that holds it failed: a crash
    /// or a power cut may still undo the rename. The save it replaced is complete at
    /// `replaced` (`None`: there was none), where startup recovery keeps whichever of the
    /// two is newer as `Saves/` and moves the other to `Backups/`.
    NotDurable {
        /// Why the directory could not be synced.
        source: io::Error,
        /// Where the save the new one replaced is; `None` if there was none.
        replaced: Option<PathBuf>,
    },
}

impl SwapFailed {
    /// The OS error.
    pub fn source(&self) -> &io::Error {
        match self {
            SwapFailed::NotInPlace(source) | SwapFailed::NotDurable { source, .. } => source,
        }
    }

    /// What is on disk when the new save went in place as `saves` but is not durable, for the
    /// operator; `None` when it is not in place (the previous save is).
    pub fn on_disk(&self, saves: &Path) -> Option<String> {
        let SwapFailed::NotDurable { replaced, .. } = self else {
            return None;
        };
        let replaced = match replaced {
            Some(old) => format!(
                "the save it replaced is intact in {}, and the next start keeps the newer of \
                 the two as the save and moves the other to Backups/",
                old.display()
            ),
            None => "there was no save before it".to_owned(),
        };
        Some(format!(
            "the new save is in {}, but a crash or a power cut may still undo that (the \
             directory holding it could not be synced); {replaced}",
            saves.display()
        ))
    }

    /// The OS error, taken out.
    pub fn into_source(self) -> io::Error {
        match self {
            SwapFailed::NotInPlace(source) | SwapFailed::NotDurable { source, .. } => source,
        }
    }

    /// As one `io::Error` of the same kind, saying what is on disk.
    fn into_io(self, saves: &Path) -> io::Error {
        match self.on_disk(saves) {
            Some(on_disk) => {
                let kind = self.source().kind();
                io::Error::new(kind, format!("{}; {on_disk}", self.into_source()))
            }
            None => self.into_source(),
        }
    }
}

/// How recovery orders complete saves: by sequence number, then (among equals: saves from
/// before the sequence existed) by creation time.
pub fn order(m: &Manifest) -> (u64, Timestamp) {
    (m.sequence, m.created)
}

/// What became of the save a new one replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replaced {
    /// There was none.
    Nothing,
    /// In `Backups/Automatic/`, marked complete.
    BackedUp(PathBuf),
    /// Not (completely) moved or marked: it is intact at `path`, and the next start's
    /// [`Layout::recover`] finishes the job. `error` says what went wrong.
    LeftAt {
        /// Where the replaced save still is, intact.
        path: PathBuf,
        /// What went wrong moving or marking it.
        error: String,
    },
}

impl Replaced {
    /// The backup's path, once it is fully in place.
    pub fn backup(&self) -> Option<&Path> {
        match self {
            Replaced::BackedUp(path) => Some(path),
            _ => None,
        }
    }
}

fn left_at(path: &Path, e: &io::Error) -> Replaced {
    Replaced::LeftAt {
        path: path.to_owned(),
        error: e.to_string(),
    }
}

/// Is `name` that of a temp directory this shard makes (see [`TEMP_PREFIX`])? Only those are
/// finished or removed at startup: a `.tmp-*` of another program's, next to `Saves/`, is not.
pub fn is_own_temp(name: &std::ffi::OsStr) -> bool {
    let Some(rest) = name.as_bytes().strip_prefix(TEMP_PREFIX.as_bytes()) else {
        return false;
    };
    TEMP_PURPOSES.iter().any(|purpose| {
        let ids = rest
            .strip_prefix(purpose.as_bytes())
            .and_then(|ids| ids.strip_prefix(b"-"));
        // `<pid>-<n>-<ns>`: three numbers.
        ids.is_some_and(|ids| {
            let numbers: Vec<&[u8]> = ids.split(|&b| b == b'-').collect();
            numbers.len() == 3
                && numbers
                    .iter()
                    .all(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit))
        })
    })
}

/// Is `name` one of the files a save consists of (in `Saves/` or a backup)? Anything else in
/// `Saves/` is the operator's.
fn is_save_file(name: &std::ffi::OsStr) -> bool {
    name == manifest::FILE_NAME
        || name == BACKUP_MARKER
        || Kind::ALL.iter().any(|kind| name == kind.file_name())
}

fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none())
}

/// Writes the completion marker into a backup directory, durably.
fn mark_complete(backup: &Path) -> io::Result<()> {
    let marker = backup.join(BACKUP_MARKER);
    fsio::write(&marker, format!("{}\n", Timestamp::now()).as_bytes())?;
    sync_dir(backup)
}

/// The entries of `dir`, in no particular order; none if `dir` does not exist.
pub fn entries(dir: &Path) -> io::Result<Vec<std::fs::DirEntry>> {
    match std::fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        other => other?.collect(),
    }
}

/// Swaps two paths atomically (both must exist).
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    let a = CString::new(a.as_os_str().as_bytes())?;
    let b = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both are valid NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::{Snapshot, save};

    fn try_save_at(
        layout: &Layout,
        created: &str,
    ) -> Result<save::Saved, crate::persist::PersistError> {
        let world = crate::world::generate(4, 200, 20);
        let snapshot = Snapshot::take(&world, created.parse().unwrap(), |_| true);
        save::write(layout, snapshot, 1)
    }

    fn save_at(layout: &Layout, created: &str) -> Manifest {
        try_save_at(layout, created).unwrap().manifest
    }

    fn temp_dirs_in(layout: &Layout) -> Vec<PathBuf> {
        layout.temp_dirs().unwrap()
    }

    /// An fsync of the directory after the swap that fails is a failed save (the shard must
    /// not say "world saved"), and the error says what is on disk: the new save in `Saves/`,
    /// the one it replaced intact where the swap left it, both kept by the next start.
    #[test]
    fn a_failed_sync_after_the_swap_fails_the_save_and_says_what_is_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), dir.path().join("Saves"));
        let first = save_at(&layout, "2026-12-03T10:00:00Z");

        fsio::fail_next_sync_of(layout.root());
        let e = try_save_at(&layout, "2026-12-03T11:00:00Z").unwrap_err();
        assert_eq!(
            (e.step, e.source.raw_os_error()),
            ("syncing", Some(libc::EIO))
        );
        let text = e.to_string();
        let [old] = temp_dirs_in(&layout)
            .try_into()
            .expect("the replaced save, kept");
        assert_eq!(Manifest::read(&old).unwrap(), first, "intact");
        assert!(
            text.starts_with("world save failed while syncing")
                && text.contains(&format!("the new save is in {}", layout.saves.display()))
                && text.contains(&format!(
                    "the save it replaced is intact in {}",
                    old.display()
                ))
                && !text.contains("the previous save is intact"),
            "{text}"
        );
        assert_eq!(layout.current_sequence(), 2, "the new save is in place");
        assert!(
            entries(&layout.backups).unwrap().is_empty(),
            "no backup yet"
        );

        // The next start sorts them out: the newer stays, the other is backed up.
        let done = layout.recover().unwrap();
        assert_eq!(layout.current_sequence(), 2, "{done:?}");
        assert!(temp_dirs_in(&layout).is_empty(), "{done:?}");
        let [backup] = entries(&layout.backups).unwrap().try_into().unwrap();
        assert_eq!(Manifest::read(&backup.path()).unwrap(), first);
    }

    /// The same for a first save: failed, and no "replaced save" is named, least of all
    /// `Saves/` itself.
    #[test]
    fn a_failed_sync_after_a_first_save_fails_it_and_names_no_replaced_save() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), dir.path().join("Saves"));
        fsio::fail_next_sync_of(layout.root());
        let e = try_save_at(&layout, "2026-12-03T10:00:00Z").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&format!("the new save is in {}", layout.saves.display()))
                && text.ends_with("there was no save before it")
                && !text.contains("replaced"),
            "{text}"
        );
        assert!(crate::persist::load(&layout.saves).is_ok(), "in place");
        assert!(layout.recover().unwrap().is_empty());
        assert!(temp_dirs_in(&layout).is_empty());
    }

    #[test]
    fn saves_order_by_sequence_and_only_then_by_creation_time() {
        let older = "2026-12-03T10:00:00Z".parse().unwrap();
        let newer = "2026-12-03T11:00:00Z".parse().unwrap();
        let m = |sequence, created| Manifest {
            sequence,
            created,
            ..crate::persist::manifest::tests::sample()
        };
        assert!(order(&m(2, older)) > order(&m(1, newer)), "sequence first");
        assert!(
            order(&m(0, newer)) > order(&m(0, older)),
            "the clock among equals"
        );
    }

    #[test]
    fn a_save_put_after_the_current_one_gets_the_next_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), dir.path().join("Saves"));
        assert_eq!(layout.current_sequence(), 0, "no save yet");
        assert_eq!(save_at(&layout, "2026-12-03T10:00:00Z").sequence, 1);
        assert_eq!(save_at(&layout, "2026-12-03T09:00:00Z").sequence, 2);
        // A save from elsewhere (a restore) with an old sequence is placed after it.
        let other = tempfile::tempdir().unwrap();
        let elsewhere = Layout::new(other.path(), other.path().join("Saves"));
        save_at(&elsewhere, "2099-01-01T00:00:00Z");
        let rewritten = layout.order_after_current(&elsewhere.saves).unwrap();
        assert_eq!(rewritten.sequence, 3);
        assert_eq!(Manifest::read(&elsewhere.saves).unwrap(), rewritten);
        assert!(
            crate::persist::load(&elsewhere.saves).is_ok(),
            "still loads"
        );
    }
}
