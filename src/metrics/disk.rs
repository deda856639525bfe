//! Bytes on disk per directory the shard writes (saves, backups, archives), for
//! `/metrics`: walked on a blocking thread of the HTTP runtime, cached, at most once per
//! [`DiskCache::every`], in the background once the first walk is done.
//!
//! A walk is bounded: at most [`MAX_ENTRIES`] entries per directory, [`MAX_DEPTH`] levels,
//! symbolic links not followed. A tree past the bound reports what it counted and says so
//! (`truncated`). It must never run on the loop thread, and never walk more often than the
//! cache allows however often it is scraped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
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

/// When the directories were walked, and what the walk found.
type Measured = (Instant, Vec<DirSize>);

/// The directories to measure and the last measurement.
#[derive(Debug)]
pub struct DiskCache {
    dirs: Arc<[(&'static str, PathBuf)]>,
    every: Duration,
    last: Arc<Mutex<Option<Measured>>>,
    /// A walk is under way on the blocking pool.
    walking: Arc<AtomicBool>,
}

impl DiskCache {
    /// A cache of `dirs` (each a label and a directory), walked at most once per `every`;
    /// nothing is walked until the first [`sizes`](Self::sizes).
    pub fn new(dirs: Vec<(&'static str, PathBuf)>, every: Duration) -> DiskCache {
        DiskCache {
            dirs: dirs.into(),
            every,
            last: Arc::new(Mutex::new(None)),
            walking: Arc::new(AtomicBool::new(false)),
        }
    }

    /// How often the directories are walked at most.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// The sizes. Only the first call waits for a walk; later ones get the cached sizes at
    /// once and, when those are older than [`DiskCache::every`], start one walk in the
    /// background for the calls after (a scrape never waits behind a large tree).
    pub async fn sizes(&self) -> Vec<DirSize> {
        let cached = lock(&self.last).clone();
        let Some((at, sizes)) = cached else {
            let dirs = self.dirs.clone();
            let walked = tokio::task::spawn_blocking(move || walk(&dirs))
                .await
                .unwrap_or_default();
            *lock(&self.last) = Some((Instant::now(), walked.clone()));
            return walked;
        };
        if at.elapsed() >= self.every && !self.walking.swap(true, Ordering::AcqRel) {
            let (dirs, last, walking) =
                (self.dirs.clone(), self.last.clone(), self.walking.clone());
            // Detached: a walk still running at shutdown is not waited for.
            drop(tokio::task::spawn_blocking(move || {
                let walked = walk(&dirs);
                *lock(&last) = Some((Instant::now(), walked));
                walking.store(false, Ordering::Release);
            }));
        }
        sizes
    }
}

fn walk(dirs: &[(&'static str, PathBuf)]) -> Vec<DirSize> {
    dirs.iter()
        .map(|(name, path)| measure(name, path))
        .collect()
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

    #[tokio::test]
    async fn a_stale_cache_answers_at_once_and_refreshes_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), [0u8; 10]).unwrap();
        let cache = DiskCache::new(vec![("saves", dir.path().to_owned())], Duration::ZERO);
        assert_eq!(cache.sizes().await[0].bytes, 10, "the first call walks");
        std::fs::write(dir.path().join("b"), [0u8; 5]).unwrap();
        // Stale at once (every = 0): answered from the cache, a walk starts behind it.
        assert_eq!(cache.sizes().await[0].bytes, 10);
        let began = Instant::now();
        loop {
            if cache.sizes().await[0].bytes == 15 {
                break;
            }
            assert!(began.elapsed() < Duration::from_secs(10), "no refresh");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

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
