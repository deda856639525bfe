//! One shard per data directory: an exclusive `flock` on `<data_dir>/shard.lock`.
//!
//! Two processes writing the same `Saves/` (a shard started twice, or `shardloop restore`
//! while the shard runs) would swap saves under each other. The lock is taken at startup and
//! held until the process ends; the kernel releases it however the process ends, so a
//! crash never leaves a stale lock behind. The file holds the holder's pid, for the error
//! message only.
//!
//! Owns the lock file. Must never be taken on the loop thread in a loop (it is taken once).

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

pub const LOCK_FILE: &str = "shard.lock";

/// The held lock; dropping it releases it.
#[derive(Debug)]
pub struct DataLock {
    _file: File,
    pub path: PathBuf,
}

impl DataLock {
    /// Takes the lock of `data_dir` (which must exist), or says who holds it.
    pub fn acquire(data_dir: &Path) -> io::Result<DataLock> {
        let path = data_dir.join(LOCK_FILE);
        if !path.exists() {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)?;
        }
        // Held read-only: a descriptor open for writing would keep the filesystem from being
        // remounted read-only (which the kernel does by itself on I/O errors).
        let mut file = File::open(&path)?;
        // SAFETY: flock on a descriptor we own, non-blocking.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(e);
            }
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "{} is in use by another shardloop (pid {}): one shard or restore per \
                     data directory",
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
