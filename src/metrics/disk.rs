//! Bytes on disk per directory the shard writes (saves, backups, archives), for
//! `/metrics`: walked on a blocking thread of the HTTP runtime, cached, at most once per
//! [`DiskCache::every`].
//!
//! A walk is bounded: at most [`MAX_ENTRIES`] entries per directory, [`MAX_DEPTH`] levels,
//! symbolic links not followed. A tree past the bound reports what it counted and says so
//! (`truncated`). It must never run on the loop thread, and never walk more often than the
//! cache allows however often it is scraped.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Entries one directory's walk visits at most.
pub const MAX_ENTRIES: u64 = 200_000;
/// Levels below the directory a walk goes at most.
pub const MAX_DEPTH: usize = 16;

/// One directory's size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirSize {
    /// The label: `saves`, `backups`, `archives`.
    pub name: &'static str,
    /// Bytes of regular files (apparent size).
    pub bytes: u64,
    /// The walk stopped at a bound: `bytes` is a lower bound.
    pub truncated: bool,
}

/// The directories to measure and the last measurement.
#[derive(Debug)]
pub struct DiskCache {
    dirs: Arc<[(&'static str, PathBuf)]>,
    every: Duration,
    last: Mutex<Option<(Instant, Vec<DirSize>)>>,
}

impl DiskCache {
    pub fn new(dirs: Vec<(&'static str, PathBuf)>, every: Duration) -> DiskCache {
        DiskCache {
            dirs: dirs.into(),
            every,
            last: Mutex::new(None),
        }
    }

    /// How often the directories are walked at most.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// The sizes, walked again (on the blocking pool) when the cached ones are older than
    /// [`DiskCache::every`].
    pub async fn sizes(&self) -> Vec<DirSize> {
        if let Some((at, sizes)) = &*lock(&self.last)
            && at.elapsed() < self.every
        {
            return sizes.clone();
        }
        let dirs = self.dirs.clone();
        let walked = tokio::task::spawn_blocking(move || {
            dirs.iter()
                .map(|(name, path)| measure(name, path))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        *lock(&self.last) = Some((Instant::now(), walked.clone()));
        walked
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Walks `path` within the bounds.
pub fn measure(name: &'static str, path: &Path) -> DirSize {
    let mut size = DirSize {
        name,
        bytes: 0,
        truncated: false,
    };
    let mut entries = 0u64;
    let mut stack = vec![(path.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue; // gone, or not a directory yet: nothing on disk
        };
        for entry in read.flatten() {
            entries += 1;
            if entries > MAX_ENTRIES {
                size.truncated = true;
                return size;
            }
            // symlink_metadata: a link is not followed (it could point anywhere, or loop).
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_file() {
                size.bytes += meta.len();
            } else if meta.is_dir() {
                if depth >= MAX_DEPTH {
                    size.truncated = true;
                } else {
                    stack.push((entry.path(), depth + 1));
                }
            }
        }
    }
    size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_files_below_and_not_links_and_stops_at_the_depth_bound() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a"), [0u8; 100]).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/b"), [0u8; 20]).unwrap();
        std::os::unix::fs::symlink("/proc/self", root.join("link")).unwrap();
        let size = measure("saves", root);
        assert_eq!((size.bytes, size.truncated), (120, false));
        assert_eq!(measure("saves", &root.join("missing")).bytes, 0);

        let mut deep = root.join("deep");
        for _ in 0..=MAX_DEPTH + 1 {
            deep = deep.join("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("far"), [0u8; 7]).unwrap();
        let size = measure("saves", root);
        assert_eq!((size.bytes, size.truncated), (120, true));
    }
}
