//! The off-site mark: a small file, `Archives/.offsite/<Kind>/<archive name>`, that says an
//! archive's copy in the bucket was verified (the bucket, the object, and the file's size,
//! SHA-256 and identity: inode and modification time). The uploader writes one after a
//! verified upload; local retention (`rollup`) deletes an archive only once [`is_off_site`]
//! holds for it.
//!
//! A mark is written under a temp name and renamed, so it is whole or absent, and read capped
//! at [`MAX_MARK_BYTES`]: a file there that is not a mark only makes the archive look
//! unmarked (it is then looked up in the bucket again, never lost).
//!
//! Owns the marks' place, format and meaning. Must never touch the network, nor delete an
//! archive.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::remote::{RemoteUrl, Sum};

/// The directory under the archive directory that holds the marks.
pub const MARKS_DIR: &str = ".offsite";
/// The longest a mark file may be (a real one is about 300 bytes).
pub const MAX_MARK_BYTES: u64 = 4096;

/// What a mark records.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Mark {
    /// The bucket and prefix it went to.
    url: String,
    /// The object.
    key: String,
    /// The file's size, bytes.
    bytes: u64,
    /// The file's SHA-256, hex.
    sha256: String,
    /// The file's identity when it was marked: `inode:mtime_seconds.mtime_nanoseconds`.
    file: String,
    /// When the upload was verified.
    verified: String,
}

/// `<archives>/<Kind>/<name>` → `<archives>/.offsite/<Kind>/<name>`.
fn mark_path(archive: &Path) -> Option<PathBuf> {
    let kind_dir = archive.parent()?;
    let archives = kind_dir.parent()?;
    Some(
        archives
            .join(MARKS_DIR)
            .join(kind_dir.file_name()?)
            .join(archive.file_name()?),
    )
}

/// The identity of a file as a mark records it.
fn identity(meta: &std::fs::Metadata) -> String {
    format!("{}:{}.{}", meta.ino(), meta.mtime(), meta.mtime_nsec())
}

/// The archive at `archive` has a copy at `url` that was verified: its mark names `url`, and
/// the file is the one that was marked (size, inode, modification time). Reads two inodes
/// and one small file; never the network.
pub fn is_off_site(url: &RemoteUrl, archive: &Path) -> bool {
    let (Some(path), Ok(meta)) = (mark_path(archive), std::fs::metadata(archive)) else {
        return false;
    };
    let Ok(text) = read_capped(&path) else {
        return false;
    };
    toml::from_str::<Mark>(&text).is_ok_and(|mark| {
        mark.url == url.to_string() && mark.bytes == meta.len() && mark.file == identity(&meta)
    })
}

fn read_capped(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_MARK_BYTES)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// Marks `archive` (whose sum is `sum`) as verified at `url` as `key`: written under a temp
/// name and renamed, so a mark is whole or absent. Not fsynced: a mark only ever claims what
/// is true (the object was verified), and one lost in a crash costs a look-up in the bucket at
/// the next pass, never an upload or a deletion.
pub(super) fn write_mark(
    url: &RemoteUrl,
    key: &str,
    archive: &Path,
    sum: &Sum,
    now: Timestamp,
) -> io::Result<()> {
    let path = mark_path(archive).ok_or_else(|| io::Error::other("not in a kind directory"))?;
    let meta = std::fs::metadata(archive)?;
    let mark = Mark {
        url: url.to_string(),
        key: key.to_owned(),
        bytes: sum.bytes,
        sha256: sum.hex(),
        file: identity(&meta),
        verified: now.to_string(),
    };
    let text = toml::to_string(&mark).map_err(io::Error::other)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let temp = path.with_file_name(format!(
        "{}mark-{}-{}",
        crate::persist::layout::TEMP_PREFIX,
        std::process::id(),
        archive.file_name().unwrap_or_default().to_string_lossy()
    ));
    std::fs::write(&temp, text).and_then(|()| std::fs::rename(&temp, &path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::archive::Period;
    use crate::persist::archive::remote::sum_file;

    #[test]
    fn a_mark_holds_only_for_the_file_it_was_written_for() {
        let dir = tempfile::tempdir().unwrap();
        let daily = dir.path().join("Archives/Daily");
        std::fs::create_dir_all(&daily).unwrap();
        let archive = daily.join("2026-12-03.tar.zst");
        std::fs::write(&archive, b"an archive").unwrap();
        let url = RemoteUrl::parse("s3://bkt/shard").unwrap();
        assert!(!is_off_site(&url, &archive));
        let sum = sum_file(&archive).unwrap();
        let key = url.key(Period::Daily, "2026-12-03.tar.zst");
        let now = "2026-12-04T00:00:00Z".parse().unwrap();
        write_mark(&url, &key, &archive, &sum, now).unwrap();
        assert!(is_off_site(&url, &archive));
        assert!(
            dir.path()
                .join("Archives/.offsite/Daily/2026-12-03.tar.zst")
                .is_file()
        );
        // Another bucket: not verified there.
        let other = RemoteUrl::parse("s3://bkt/other").unwrap();
        assert!(!is_off_site(&other, &archive));
        // The archive set aside and written again under its name: not the marked file.
        std::fs::rename(&archive, daily.join("aside")).unwrap();
        std::fs::write(&archive, b"an archive").unwrap();
        assert!(!is_off_site(&url, &archive));
    }
}
