//! Durable writes: the few ways persistence puts bytes on disk so that a crash or a power cut
//! leaves either the old state or the new one, never a torn file.
//!
//! - [`create`] / [`write_new`]: a new file, filled and fsynced before it is called done;
//! - [`write()`]: the same for a file that may already exist (it is truncated);
//! - [`Replacement`] / [`replace`]: a file replaced atomically — written under a temporary
//!   name next to it, fsynced, optionally checked, renamed over the target, and the directory
//!   fsynced so the rename itself survives a crash;
//! - [`sync_dir`], [`sync_parent`], [`sync_tree`]: making creations and renames durable.
//!
//! A new file's *name* is durable only once its directory is synced; callers that create
//! many files in one directory sync it once at the end (a save syncs its temp directory after
//! the manifest, a restore the whole unpacked tree).
//!
//! Owns the write-fsync-rename-fsync order. Must never decide where files go or what they
//! hold, and never wrap errors: callers know the operation and add it (see `PersistError`).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Creates `path`, which must not exist yet, lets `fill` write it, and fsyncs it.
///
/// `fill`'s error is returned as is, and the file is then not synced (a caller that refuses
/// what it was writing does not pay for an fsync). The half-written file is left for the
/// caller to remove: it usually lives in a temp directory that goes as a whole.
pub(crate) fn create<T, E: From<io::Error>>(
    path: &Path,
    fill: impl FnOnce(&mut File) -> Result<T, E>,
) -> Result<T, E> {
    let mut file = File::create_new(path)?;
    let filled = fill(&mut file)?;
    file.sync_all()?;
    Ok(filled)
}

/// A new file holding `data`, fsynced. `path` must not exist yet.
pub(crate) fn write_new(path: &Path, data: &[u8]) -> io::Result<()> {
    create(path, |file| file.write_all(data))
}

/// `path` holding `data` (created, or truncated if it exists), fsynced.
pub(crate) fn write(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut file = File::create(path)?;
    file.write_all(data)?;
    file.sync_all()
}

/// A file that will replace `target` in one rename. It is written under a temporary name in
/// the target's directory (a rename is atomic only within one filesystem); until
/// [`commit`](Self::commit) the target is untouched, and dropping an uncommitted replacement
/// removes the temporary file.
#[derive(Debug)]
pub(crate) struct Replacement {
    target: PathBuf,
    temp: PathBuf,
    committed: bool,
}

impl Replacement {
    /// A replacement of `target`, written as `temp_name` next to it. Choose a temp name that
    /// startup or the next run recognises and cleans up, should a crash leave it behind.
    pub(crate) fn new(target: &Path, temp_name: &str) -> Replacement {
        Replacement {
            target: target.to_owned(),
            temp: target.with_file_name(temp_name),
            committed: false,
        }
    }

    /// Where the new content is written until the commit (to read it back and check it).
    pub(crate) fn temp(&self) -> &Path {
        &self.temp
    }

    /// Creates the temporary file (a leftover of an earlier attempt is removed first), lets
    /// `fill` write it, and fsyncs it.
    pub(crate) fn write<T, E: From<io::Error>>(
        &self,
        fill: impl FnOnce(&mut File) -> Result<T, E>,
    ) -> Result<T, E> {
        remove_if_present(&self.temp)?;
        create(&self.temp, fill)
    }

    /// Renames the written file over the target and fsyncs the directory. Once the rename is
    /// done the target holds the new content even if the directory sync then fails (the
    /// error says the rename may not survive a crash).
    pub(crate) fn commit(mut self) -> io::Result<()> {
        fs::rename(&self.temp, &self.target)?;
        self.committed = true;
        sync_parent(&self.target)
    }
}

impl Drop for Replacement {
    fn drop(&mut self) {
        if !self.committed {
            // Best effort: a leftover is harmless (it has a temp name) and cleaned later.
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// Replaces `target` with `data` atomically (see [`Replacement`]).
pub(crate) fn replace(target: &Path, temp_name: &str, data: &[u8]) -> io::Result<()> {
    let replacement = Replacement::new(target, temp_name);
    replacement.write(|file| file.write_all(data))?;
    replacement.commit()
}

/// Makes the entries of `dir` (creations, renames, removals) durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(test)]
    if FAIL_NEXT_SYNC.with(|f| f.borrow().as_deref() == Some(dir)) {
        FAIL_NEXT_SYNC.with(|f| f.borrow_mut().take());
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    File::open(dir)?.sync_all()
}

#[cfg(test)]
thread_local! {
    /// Fault injection: the directory whose next [`sync_dir`] on this thread fails.
    static FAIL_NEXT_SYNC: std::cell::RefCell<Option<PathBuf>> =
        const { std::cell::RefCell::new(None) };
}

/// FAULT INJECTION, for unit tests only: the next [`sync_dir`] of `dir` (the same path, as
/// given) on this thread fails with EIO, as an fsync does when the disk fails under it.
#[cfg(test)]
pub(crate) fn fail_next_sync_of(dir: &Path) {
    FAIL_NEXT_SYNC.with(|f| *f.borrow_mut() = Some(dir.to_owned()));
}

/// [`sync_dir`] on the directory holding `path` (`.` for a bare file name).
pub(crate) fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => sync_dir(dir),
        _ => sync_dir(Path::new(".")),
    }
}

/// fsyncs `dir` and every directory under it (files are synced as they are written), so a
/// tree is durable before it is renamed into place. Links are not followed.
pub(crate) fn sync_tree(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        }
    }
    sync_dir(dir)
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn create_fills_a_new_file_and_refuses_an_existing_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        let n = create(&path, |f| f.write_all(b"abc").map(|()| 3)).unwrap();
        assert_eq!(n, 3);
        assert_eq!(fs::read(&path).unwrap(), b"abc");
        let again = write_new(&path, b"x").unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(
            fs::read(&path).unwrap(),
            b"abc",
            "the existing file is untouched"
        );
    }

    /// A caller's own error: the disk's, or its refusal of what it was writing.
    #[derive(Debug, PartialEq)]
    enum Failed {
        Disk(io::ErrorKind),
        Refused,
    }

    impl From<io::Error> for Failed {
        fn from(e: io::Error) -> Failed {
            Failed::Disk(e.kind())
        }
    }

    #[test]
    fn a_failing_fill_is_returned_as_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        let e = create(&path, |f| {
            f.write_all(b"half")?;
            Err::<(), _>(Failed::Refused)
        });
        assert_eq!(e.unwrap_err(), Failed::Refused);
        assert_eq!(fs::read(&path).unwrap(), b"half", "left for the caller");
        let e = create(&path, |_| Ok::<(), Failed>(()));
        assert_eq!(e.unwrap_err(), Failed::Disk(io::ErrorKind::AlreadyExists));
    }

    #[test]
    fn write_truncates_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("marker");
        write(&path, b"a longer first text").unwrap();
        write(&path, b"short").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"short");
    }

    #[test]
    fn replace_swaps_the_content_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("autosave.toml");
        fs::write(&target, "old").unwrap();
        // A leftover of a crashed attempt does not get in the way.
        fs::write(dir.path().join("autosave.toml.tmp"), "stale").unwrap();
        replace(&target, "autosave.toml.tmp", b"new").unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(names(dir.path()), ["autosave.toml"]);
    }

    #[test]
    fn an_uncommitted_replacement_leaves_the_target_and_removes_its_temp() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("w.tar");
        fs::write(&target, "old").unwrap();
        {
            let replacement = Replacement::new(&target, ".tmp-1-w.tar");
            replacement.write(|f| f.write_all(b"new")).unwrap();
            assert_eq!(fs::read(replacement.temp()).unwrap(), b"new");
            // Dropped here: a check of the temp file failed, say.
        }
        assert_eq!(fs::read_to_string(&target).unwrap(), "old");
        assert_eq!(names(dir.path()), ["w.tar"]);
    }

    #[test]
    fn a_replacement_in_a_missing_directory_fails_without_side_effects() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("gone").join("w.tar");
        let e = replace(&target, ".tmp-w.tar", b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn directories_sync_alone_in_trees_and_as_parents() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/b/c")).unwrap();
        fs::write(dir.path().join("a/b/f"), "").unwrap();
        sync_tree(dir.path()).unwrap();
        sync_dir(&dir.path().join("a")).unwrap();
        sync_parent(&dir.path().join("a/b/f")).unwrap();
        sync_parent(Path::new("relative-name")).unwrap();
        let missing = sync_tree(&dir.path().join("nope")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }
}
