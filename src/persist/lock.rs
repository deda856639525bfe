//! One shard per directory it writes: an exclusive `flock` on `shard.lock` in each of them.
//!
//! Two processes writing the same `Saves/` (a shard started twice, or `shardloop restore`
//! while the shard runs) would swap saves under each other; two shards whose data
//! directories differ but whose `world.save_dir` or `archive.dir` are the same would do the
//! same, or clean up each other's temp directories at startup. So [`ShardLocks`] takes a lock
//! in *every* directory the shard writes: the data directory, the directory holding `Saves/`
//! (and its temp directories), and the archive directory — each distinct directory once. A
//! directory nested in another is locked on its own too, which is what catches a second
//! shard whose `archive.dir` is the first one's `Archives/`.
//!
//! The locks are taken at startup and held until the process ends; the kernel releases them
//! however the process ends, so a crash never leaves a stale lock behind. Each file holds the
//! holder's pid, for the error message only.
//!
//! Owns the lock file. Must never be taken on the loop thread in a loop (it is taken once).

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file's name in each locked directory; it holds the holder's pid.
pub const LOCK_FILE: &str = "shard.lock";

/// The held lock; dropping it releases it.
#[derive(Debug)]
pub struct DataLock {
    _file: File,
    /// The lock file held.
    pub path: PathBuf,
}

impl DataLock {
    /// Takes the lock of `data_dir` (which must exist), or says who holds it.
    pub fn acquire(data_dir: &Path) -> io::Result<DataLock> {
        DataLock::acquire_as(data_dir, "data directory")
    }

    /// Takes the lock of `dir` (which must exist), which this shard uses as its `role`.
    fn acquire_as(dir: &Path, role: &str) -> io::Result<DataLock> {
        let data_dir = dir;
        let path = data_dir.join(LOCK_FILE);
        if !path.exists() {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)?;
        }
        // Held read-only where the filesystem allows it: a descriptor open for writing keeps
        // the filesystem from being remounted read-only (`mount -o remount,ro` says busy).
        // NFS does not allow it: there `flock` is a POSIX lock, and an exclusive one needs a
        // descriptor open for writing (EBADF otherwise), so the lock is taken on one.
        let mut file = File::open(&path)?;
        let mut locked = lock(&file);
        if locked
            .as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::EBADF))
        {
            file = OpenOptions::new().read(true).write(true).open(&path)?;
            locked = lock(&file);
        }
        if let Err(e) = locked {
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(e);
            }
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "{} (this shard's {role}) is in use by another shardloop (pid {}): one \
                     shard or restore per directory",
                    data_dir.display(),
                    holder.trim()
                ),
            ));
        }
        // The pid is only for the message above: a full disk must not stop the start.
        let _ = std::fs::write(&path, std::process::id().to_string());
        Ok(DataLock { _file: file, path })
    }
}

/// `flock(LOCK_EX | LOCK_NB)` on `file`.
fn lock(file: &File) -> io::Result<()> {
    #[cfg(test)]
    if tests::NFS.get() && access_mode(file) == libc::O_RDONLY {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: flock on a descriptor we own, non-blocking.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `O_RDONLY`, `O_WRONLY` or `O_RDWR`: how `file` was opened.
#[cfg(test)]
fn access_mode(file: &File) -> i32 {
    // SAFETY: F_GETFL on a descriptor we own reads its flags and changes nothing.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) & libc::O_ACCMODE }
}

/// The locks of every directory a shard writes; dropping it releases them all.
#[derive(Debug)]
#[must_use = "the directories are locked only while this is held"]
pub struct ShardLocks {
    held: Vec<DataLock>,
}

impl ShardLocks {
    /// Creates (if missing) and locks each `(directory, role)`, in order; the same directory
    /// named twice (after resolving links and `..`) is locked once. Stops at the first one
    /// held by another process, releasing those already taken; the error names it.
    pub fn acquire<P: AsRef<Path>>(dirs: &[(P, &str)]) -> io::Result<ShardLocks> {
        let mut held: Vec<DataLock> = Vec::new();
        let mut seen: Vec<PathBuf> = Vec::new();
        for (dir, role) in dirs {
            let dir = dir.as_ref();
            std::fs::create_dir_all(dir).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot create {}: {e}", dir.display()))
            })?;
            let canonical = dir.canonicalize()?;
            if seen.contains(&canonical) {
                continue;
            }
            held.push(DataLock::acquire_as(dir, role)?);
            seen.push(canonical);
        }
        Ok(ShardLocks { held })
    }

    /// The lock files held, in the order taken.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.held.iter().map(|lock| lock.path.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// `flock` as NFS has it (a POSIX lock underneath): an exclusive lock on a descriptor
        /// open read-only fails with EBADF.
        pub(super) static NFS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// On NFS the lock is taken on a descriptor open for writing, which the exclusive lock
    /// needs there; elsewhere the descriptor stays read-only (so the filesystem can still be
    /// remounted read-only under a running shard).
    #[test]
    fn the_lock_is_taken_on_nfs_too_and_read_only_elsewhere() {
        let local = tempfile::tempdir().unwrap();
        let held = DataLock::acquire(local.path()).unwrap();
        assert_eq!(access_mode(&held._file), libc::O_RDONLY);

        let nfs = tempfile::tempdir().unwrap();
        NFS.set(true);
        let held = DataLock::acquire(nfs.path());
        let again = DataLock::acquire(nfs.path());
        NFS.set(false);
        let held = held.expect("locked on NFS");
        assert_eq!(access_mode(&held._file), libc::O_RDWR);
        let refused = again.expect_err("held already").to_string();
        assert!(
            refused.contains(&std::process::id().to_string()),
            "{refused}"
        );
    }

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataLock::acquire(dir.path()).unwrap();
        let e = DataLock::acquire(dir.path()).unwrap_err();
        assert!(
            e.to_string().contains(&std::process::id().to_string()),
            "{e}"
        );
        drop(first);
        DataLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn a_shared_save_or_archive_directory_is_refused_even_with_another_data_dir() {
        let root = tempfile::tempdir().unwrap();
        let (a, b, shared) = (
            root.path().join("a"),
            root.path().join("b"),
            root.path().join("a/Archives"),
        );
        let first =
            ShardLocks::acquire(&[(&a, "data directory"), (&shared, "archive directory")]).unwrap();
        assert_eq!(first.paths().count(), 2);
        // Another data directory, but the first one's archive directory.
        let e = ShardLocks::acquire(&[(&b, "data directory"), (&shared, "archive directory")])
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("archive directory") && text.contains("a/Archives"),
            "{text}"
        );
        // Its own data directory lock was let go when the second one failed.
        DataLock::acquire(&b).unwrap();
        // A save directory whose parent is the first one's data directory.
        let e = ShardLocks::acquire(&[(&b, "data directory"), (&a, "save directory")]);
        assert!(e.is_err());
        drop(first);
        let again =
            ShardLocks::acquire(&[(&b, "data directory"), (&a.join("."), "save directory")])
                .unwrap();
        assert_eq!(again.paths().count(), 2);
        // The same directory named twice is locked once, not refused by itself.
        drop(again);
        let once = ShardLocks::acquire(&[(&a, "data directory"), (&a.join("."), "save directory")])
            .unwrap();
        assert_eq!(once.paths().count(), 1);
    }
}
