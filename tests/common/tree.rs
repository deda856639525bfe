//! A directory tree as data, to show that a refused operation changed nothing on disk.

use std::path::{Path, PathBuf};

use shardloop::persist::lock::LOCK_FILE;

/// One entry: its path under the root, and for a file its size and CRC-32 (`None` for a
/// directory).
pub type Entry = (PathBuf, Option<(usize, u32)>);

/// Every entry under `root`, sorted. Lock files (`shard.lock`, which every shard start and
/// restore takes in each directory it writes) are not data, and neither is a directory that
/// holds nothing but one: a refused start may still have created the archive directory only
/// to lock it.
pub fn data(root: &Path) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(root).unwrap().to_path_buf();
            if path.symlink_metadata().unwrap().is_dir() {
                if !holds_only_a_lock(&path) {
                    out.push((relative, None));
                }
                stack.push(path);
            } else if !relative.ends_with(LOCK_FILE) {
                let bytes = std::fs::read(&path).unwrap();
                out.push((relative, Some((bytes.len(), crc32fast::hash(&bytes)))));
            }
        }
    }
    out.sort();
    out
}

fn holds_only_a_lock(dir: &Path) -> bool {
    let mut entries = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name());
    entries.next().is_some_and(|first| first == LOCK_FILE) && entries.next().is_none()
}
