//! The disk reserve: a preallocated file beside `Saves/` that a save gives up when the disk
//! is full, so that the save still fits, and that is made again once there is room.
//!
//! A full disk fails a save cleanly (the previous save is intact), but nothing frees space
//! by itself: every later save fails the same way until an operator makes room. With a
//! reserve of `world.disk_reserve` bytes (`disk-reserve` in the directory holding `Saves/`,
//! on the same filesystem), a save that runs out of space deletes the reserve and writes
//! again at once, from the same snapshot: the world is saved, the shard warns that the disk
//! is full and that it runs without a reserve, and the operator has one save's worth of
//! time to make room. After each successful save the reserve is made again if the disk has
//! room for it; until then a full disk fails saves as before, and the first save after the
//! operator frees space succeeds (no restart).
//!
//! The reserve is allocated (`fallocate`, or zeros where the filesystem has no
//! `fallocate`), never a sparse file that would free nothing. It holds nothing: deleting it
//! by hand is always safe, and the shard makes it again.
//!
//! Owns that file. Must never run on the loop thread (it allocates and deletes on disk), nor
//! delete anything but its own file.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::error::PersistError;

/// The reserve's file name, in the directory that holds `Saves/`.
pub(crate) const FILE_NAME: &str = "disk-reserve";

/// The default size of the reserve: about ten saves of the default world (5.9 MB).
pub(crate) const DEFAULT_BYTES: u64 = 64 << 20;

/// The smallest reserve allowed (other than none): a smaller one could not hold a save.
pub(crate) const MIN_BYTES: u64 = 1 << 20;

/// One change to the reserve at a time in this process (a save's thread, the startup).
static BUSY: Mutex<()> = Mutex::new(());

/// A reserve of `bytes` at `path`. Clones share it (and whether its absence was told).
#[derive(Debug, Clone)]
pub(crate) struct Reserve {
    path: PathBuf,
    bytes: u64,
    /// The operator has been told that there is no room for it (told once until it is made).
    told_missing: Arc<AtomicBool>,
}

/// What [`Reserve::ensure`] found or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ensured {
    /// It was there, whole.
    Present,
    /// It was missing or short and has been made.
    Made,
    /// The disk has less room than the reserve: it was not made (nothing was left behind).
    NoRoom {
        /// Bytes available to the shard on that filesystem.
        available: u64,
    },
}

impl Reserve {
    /// A reserve of `bytes` in `dir` (the directory holding `Saves/`); `None` for 0 (off).
    pub(crate) fn new(dir: &Path, bytes: u64) -> Option<Reserve> {
        (bytes > 0).then(|| Reserve {
            path: dir.join(FILE_NAME),
            bytes,
            told_missing: Arc::default(),
        })
    }

    /// Makes sure the reserve is in place and allocated: made (or completed) if the disk has
    /// room for it. Blocking.
    pub(crate) fn ensure(&self) -> io::Result<Ensured> {
        let _one = BUSY.lock().unwrap_or_else(|p| p.into_inner());
        let held = match std::fs::metadata(&self.path) {
            Ok(meta) if meta.is_file() => allocated(&meta),
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} is in the way and is not a file", self.path.display()),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        if held >= self.bytes {
            return Ok(Ensured::Present);
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let available = available(dir)?;
        if available + held < self.bytes {
            return Ok(Ensured::NoRoom { available });
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)?;
        match allocate(&mut file, self.bytes) {
            Ok(()) => Ok(Ensured::Made),
            Err(e) => {
                // Out of room after all (someone else wrote meanwhile): leave no part behind,
                // so the space stays with whoever needs it.
                drop(file);
                let _ = std::fs::remove_file(&self.path);
                if e.raw_os_error() == Some(libc::ENOSPC) {
                    return Ok(Ensured::NoRoom {
                        available: available.saturating_sub(self.bytes),
                    });
                }
                Err(e)
            }
        }
    }

    /// Deletes the reserve; the bytes it gave back (0 when there was none). Blocking.
    pub(crate) fn release(&self) -> io::Result<u64> {
        let _one = BUSY.lock().unwrap_or_else(|p| p.into_inner());
        let held = match std::fs::metadata(&self.path) {
            Ok(meta) if meta.is_file() => allocated(&meta),
            Ok(_) => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        std::fs::remove_file(&self.path)?;
        Ok(held)
    }
}

impl Reserve {
    /// [`ensure`](Self::ensure), telling the operator what matters: the reserve made, no room
    /// for it (once, until it is made), or an error. Blocking.
    pub(crate) fn keep(&self) {
        let path = self.path.display();
        match self.ensure() {
            Ok(Ensured::Present) => {
                self.told_missing.store(false, Ordering::Relaxed);
            }
            Ok(Ensured::Made) => {
                self.told_missing.store(false, Ordering::Relaxed);
                tracing::info!(bytes = self.bytes, path = %path, "disk reserve in place");
            }
            Ok(Ensured::NoRoom { available }) => {
                if !self.told_missing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        bytes = self.bytes,
                        available,
                        path = %path,
                        "no room on this disk for the disk reserve: the shard runs without \
                         one, so a full disk fails saves until room is made; the reserve is \
                         made again after the first save that finds room"
                    );
                }
            }
            Err(e) => tracing::warn!(
                path = %path,
                "cannot make the disk reserve: {e}; the shard runs without one"
            ),
        }
    }

    /// After a save failed with `full` (out of space): deletes the reserve so that the save
    /// fits when written again. `true` if it freed space (write again now); the operator is
    /// told either way. Blocking.
    pub(crate) fn give_up_for(&self, full: &PersistError) -> bool {
        let path = self.path.display();
        match self.release() {
            Ok(0) => false,
            Ok(freed) => {
                tracing::warn!(
                    freed,
                    path = %path,
                    "the disk is full ({} {}: {}): deleted the disk reserve to make room and \
                     saving again now. Make room on this disk: until the reserve is back, the \
                     next full disk fails saves",
                    full.step,
                    full.path.display(),
                    full.source
                );
                true
            }
            Err(e) => {
                tracing::warn!(path = %path, "the disk is full, and the disk reserve cannot be \
                    deleted to make room: {e}");
                false
            }
        }
    }
}

/// Bytes of a file that are really on disk (not a hole).
fn allocated(meta: &std::fs::Metadata) -> u64 {
    (meta.blocks() * 512).min(meta.len())
}

/// Bytes an unprivileged writer may still use on the filesystem of `dir`.
pub(crate) fn available(dir: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: statvfs is a plain C struct of integers: all zero bytes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a statvfs to fill, both outliving the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // statvfs's field types differ between platforms (u64 here, u32 on some).
    #[allow(clippy::unnecessary_cast)]
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Allocates `bytes` for `file`: `fallocate`, or zeros written where the filesystem has none.
fn allocate(file: &mut File, bytes: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(bytes).map_err(io::Error::other)?;
    // SAFETY: a valid open descriptor; mode 0 allocates and extends the file.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return Err(e);
    }
    file.set_len(0)?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        file.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_allocated_kept_and_released() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Reserve::new(dir.path(), 0).is_none(), "0 is no reserve");
        let reserve = Reserve::new(dir.path(), 2 << 20).unwrap();
        let path = dir.path().join(FILE_NAME);
        assert_eq!(reserve.path, path);
        assert_eq!(reserve.ensure().unwrap(), Ensured::Made);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 2 << 20);
        assert!(allocated(&meta) >= 2 << 20, "allocated, not a sparse file");
        assert_eq!(reserve.ensure().unwrap(), Ensured::Present);
        // Cut short by hand: made whole again.
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(1000)
            .unwrap();
        assert_eq!(reserve.ensure().unwrap(), Ensured::Made);
        assert_eq!(reserve.release().unwrap(), 2 << 20);
        assert!(!path.exists());
        assert_eq!(reserve.release().unwrap(), 0, "nothing left to give");
    }

    #[test]
    fn a_reserve_bigger_than_the_disk_is_not_made() {
        let dir = tempfile::tempdir().unwrap();
        let free = available(dir.path()).unwrap();
        let reserve = Reserve::new(dir.path(), free.saturating_mul(2).max(1 << 50)).unwrap();
        assert!(matches!(reserve.ensure().unwrap(), Ensured::NoRoom { .. }));
        assert!(!reserve.path.exists(), "no part of it left behind");
    }
}
