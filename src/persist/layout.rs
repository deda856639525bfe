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
//! where it moves to `Backups/`. Elsewhere it is two renames with a gap that startup
//! recovery ([`Layout::recover`]) closes.
//!
//! Owns the paths and directory moves (each fsynced). Must never read or write save
//! contents beyond the manifest.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use jiff::Timestamp;

use super::manifest::Manifest;

/// Prefix of every temp directory; anything with it is cleaned (or finished) at startup.
pub const TEMP_PREFIX: &str = ".tmp-";
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

    /// A new, empty temp directory for `purpose` ("save", ...), with a name no other run or
    /// writer uses.
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

    /// Puts the complete save in `staged` in place as `Saves/`. The save it replaces (if any)
    /// moves to `Backups/Automatic/`; its path is returned.
    pub fn swap_in(&self, staged: &Path) -> io::Result<Option<PathBuf>> {
        if !self.saves.exists() {
            std::fs::rename(staged, &self.saves)?;
            sync_dir(self.root())?;
            return Ok(None);
        }
        match exchange(staged, &self.saves) {
            Ok(()) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
                // No atomic exchange here: two renames. A crash between them leaves no
                // `Saves/`, and `recover` promotes the newest complete temp save.
                let old = self.create_temp_dir("old")?;
                std::fs::remove_dir(&old)?;
                std::fs::rename(&self.saves, &old)?;
                std::fs::rename(staged, &self.saves)?;
                sync_dir(self.root())?;
                return self.back_up(&old).map(Some);
            }
            Err(e) => return Err(e),
        }
        sync_dir(self.root())?;
        // `staged` now holds the replaced save.
        self.back_up(staged).map(Some)
    }

    /// Moves a complete replaced save to `Backups/Automatic/<its creation time, UTC>/` and
    /// marks it complete.
    fn back_up(&self, old: &Path) -> io::Result<PathBuf> {
        let created = Manifest::read(old).map_or_else(|_| Timestamp::now(), |m| m.created);
        std::fs::create_dir_all(&self.backups)?;
        let target = self.free_backup_name(created);
        std::fs::rename(old, &target)?;
        sync_dir(&self.backups)?;
        sync_dir(self.root())?;
        let marker = target.join(BACKUP_MARKER);
        std::fs::write(&marker, format!("{}\n", Timestamp::now()))?;
        std::fs::File::open(&marker)?.sync_all()?;
        sync_dir(&target)?;
        Ok(target)
    }

    fn free_backup_name(&self, created: Timestamp) -> PathBuf {
        let base = created.strftime("%Y-%m-%d-%H-%M-%S").to_string();
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
    /// A temp directory with a readable manifest is a complete save (the manifest is written
    /// last): if `Saves/` is missing it becomes `Saves/` (the newest such one); if it is
    /// newer than `Saves/` the interrupted swap is finished; otherwise it is a replaced save
    /// that had not reached `Backups/` yet, and goes there. A temp directory without one was
    /// never finished and is deleted. Returns what it did, one line each, for the log.
    pub fn recover(&self) -> io::Result<Vec<String>> {
        let mut done = Vec::new();
        let mut complete = Vec::new();
        for path in self.temp_dirs()? {
            match Manifest::read(&path) {
                Ok(m) => complete.push((m.created, path)),
                Err(_) => {
                    std::fs::remove_dir_all(&path)?;
                    done.push(format!("removed unfinished {}", path.display()));
                }
            }
        }
        if self.saves.exists() && Manifest::read(&self.saves).is_err() {
            // Not a save we can order against: touch nothing complete, let loading refuse it
            // with the reason. Nothing is ever deleted that might be the operator's world.
            return Ok(done);
        }
        // Oldest first, so each newer one replaces the one before it.
        complete.sort();
        for (created, path) in complete {
            let current = Manifest::read(&self.saves).ok().map(|m| m.created);
            if current.is_none_or(|c| created > c) {
                self.swap_in(&path)?;
                done.push(format!("finished putting the save of {created} in place"));
            } else {
                let target = self.back_up(&path)?;
                done.push(format!("moved a replaced save to {}", target.display()));
            }
        }
        Ok(done)
    }

    fn temp_dirs(&self) -> io::Result<Vec<PathBuf>> {
        let entries = match std::fs::read_dir(self.root()) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            other => other?,
        };
        let mut dirs = Vec::new();
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            if name.as_bytes().starts_with(TEMP_PREFIX.as_bytes()) && entry.file_type()?.is_dir() {
                dirs.push(entry.path());
            }
        }
        dirs.sort();
        Ok(dirs)
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

/// Makes the entries of `dir` (creations, renames) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
