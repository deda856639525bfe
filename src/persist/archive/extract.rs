//! The untrusted-input boundary of a restore: unpacking an archive's entries into one
//! directory, refusing anything that is not a plain file or folder that stays inside it.
//!
//! Archives come from anywhere (made by a rollup, by hand with `tar` or `zip`, or by someone
//! hostile). Extraction never uses the `tar` or `zip` crates' unpack functions: each entry is
//! checked first, and anything that could write outside the destination or make something
//! other than a plain file is refused with the entry named — absolute paths, `..`, symbolic
//! and hard links, devices and fifos, sparse files, PAX or GNU long-name headers that replace
//! an entry's name, and more bytes or entries than [`Limits`] allow (declared sizes are
//! checked before writing, actual bytes while copying). The archive is opened through
//! [`bounded`]: the decompressed tar stream is capped and a zip's central directory checked
//! before the `zip` crate parses it.
//!
//! [`unpack`] takes any seekable reader, so it can be reviewed, tested and fuzzed on its own.
//!
//! Owns the checks on archive entries and the writes under the destination. Must never
//! write outside the destination, create a link, or know what a save is, where a restore
//! moves things, or how archives are listed.

use std::fmt;
use std::fs;
use std::io::{self, BufReader, Read, Seek};
use std::path::{Component, Path, PathBuf};

use super::bounded::{self, WalkError};
use super::format::Format;
use crate::persist::fsio;

pub use super::bounded::{DEFAULT_MAX_ENTRIES, Limits};

/// Largest PAX header read (they hold a few keys; anything bigger is not a real archive).
const MAX_PAX_BYTES: u64 = 64 * 1024;

/// Why an archive is not unpacked: the entry at fault (as named in the archive), if one is,
/// the reason in operator words, and the OS error when the filesystem failed rather than the
/// archive being refused for what it holds. The caller attaches the archive's path.
#[derive(Debug)]
pub struct Refusal {
    /// The entry at fault, named as in the archive; `None` when the archive as a whole is.
    pub entry: Option<String>,
    /// Why, in operator words (a limit and its key, an unsafe path, a missing file).
    pub reason: String,
    /// The OS error when the filesystem failed; `None` when the archive was refused for what
    /// it holds.
    pub source: Option<io::Error>,
}

impl Refusal {
    /// A refusal of the entry `name`.
    pub fn entry(name: &str, reason: impl Into<String>) -> Refusal {
        Refusal {
            entry: Some(name.to_owned()),
            reason: reason.into(),
            source: None,
        }
    }

    /// A refusal of the archive as a whole.
    pub fn whole(reason: impl Into<String>) -> Refusal {
        Refusal {
            entry: None,
            reason: reason.into(),
            source: None,
        }
    }

    /// The filesystem failed at `what` (for the entry `name`, if any): the reason reads
    /// `<what>: <the OS error>`, and the OS error is kept.
    pub fn os(name: Option<&str>, what: &str, source: io::Error) -> Refusal {
        Refusal {
            entry: name.map(str::to_owned),
            reason: format!("{what}: {source}"),
            source: Some(source),
        }
    }
}

/// Unpacks the archive read from `input`, in `format`, into `dest` (an existing, empty
/// directory), within `limits`. Files are synced as they are written; directories are not
/// (the caller syncs the tree once). On a refusal, what was unpacked so far stays in `dest`
/// for the caller to remove.
pub fn unpack<R: Read + Seek>(
    input: R,
    format: Format,
    dest: &Path,
    limits: Limits,
) -> Result<(), Refusal> {
    let mut unpacker = Unpacker::new(dest, limits);
    match format {
        Format::Zip => unpack_zip(input, &mut unpacker),
        _ => {
            let stream =
                bounded::tar_stream(BufReader::new(input), format, limits).map_err(walk)?;
            unpack_tar(Box::new(stream), &mut unpacker)
        }
    }
}

fn unreadable(e: impl fmt::Display) -> Refusal {
    Refusal::whole(format!("it is not a readable archive: {e}"))
}

/// A bounded read that stopped: a limit hit (the stream cap or a zip directory), or an
/// archive that does not read.
fn walk(e: impl Into<WalkError>) -> Refusal {
    Refusal::whole(e.into().to_string())
}

/// Why writing an entry's file stopped: the disk (creating or syncing it), or the entry.
enum FileFailed {
    Disk(io::Error),
    Refused(Refusal),
}

impl From<io::Error> for FileFailed {
    fn from(e: io::Error) -> FileFailed {
        FileFailed::Disk(e)
    }
}

/// Writes checked entries under one directory, within the limits.
struct Unpacker<'a> {
    dest: &'a Path,
    limits: Limits,
    entries: usize,
    bytes: u64,
}

impl<'a> Unpacker<'a> {
    fn new(dest: &'a Path, limits: Limits) -> Unpacker<'a> {
        Unpacker {
            dest,
            limits,
            entries: 0,
            bytes: 0,
        }
    }

    /// Counts one more entry of any kind (links and headers too: they cost work to read).
    fn count(&mut self, name: &str) -> Result<(), Refusal> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(Refusal::entry(
                name,
                format!(
                    "is past the limit of {} entries an archive may hold",
                    self.limits.max_entries
                ),
            ));
        }
        Ok(())
    }

    fn dir(&mut self, name: &str) -> Result<(), Refusal> {
        let path = self.dest.join(safe_path(name)?);
        fs::create_dir_all(&path).map_err(|e| Refusal::os(Some(name), "cannot create", e))
    }

    /// Writes a regular file: the declared size is checked before anything is written, and
    /// the bytes actually read are counted (a zip entry's declared size can lie).
    fn file(&mut self, name: &str, declared: u64, data: &mut dyn Read) -> Result<(), Refusal> {
        let path = self.dest.join(safe_path(name)?);
        let left = self.limits.max_bytes - self.bytes;
        if declared > left {
            return Err(self.too_big(name, &format!("declares {declared} bytes")));
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| Refusal::os(Some(name), "cannot create its folder", e))?;
        }
        // A refusal inside the fill skips the file's fsync: refused bytes are not worth one.
        let copied = fsio::create(&path, |out| {
            let copied = io::copy(&mut data.take(left + 1), out).map_err(|e| {
                let why = match bounded::over_limit(&e) {
                    Some(limit) => limit.to_string(),
                    None => format!("cannot be read: {e}"),
                };
                FileFailed::Refused(Refusal::entry(name, why))
            })?;
            if copied > left {
                let why = self.too_big(name, "holds more bytes than it declares");
                return Err(FileFailed::Refused(why));
            }
            Ok(copied)
        })
        .map_err(|failed| match failed {
            FileFailed::Disk(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                Refusal::entry(name, "appears twice in the archive")
            }
            FileFailed::Disk(e) => Refusal::os(Some(name), "cannot be written", e),
            FileFailed::Refused(refusal) => refusal,
        })?;
        self.bytes += copied;
        Ok(())
    }

    fn too_big(&self, name: &str, what: &str) -> Refusal {
        Refusal::entry(
            name,
            format!(
                "{what}: the archive would unpack to more than archive.max_restore_bytes = {} \
                 bytes",
                self.limits.max_bytes
            ),
        )
    }
}

/// The entry's path relative to the unpack directory, if it stays inside it: only plain
/// names (and `.`), never `..`, a root or a prefix, and no backslash (a separator to the
/// tools of another system, so `a\..\..\x` could escape there).
pub fn safe_path(name: &str) -> Result<PathBuf, Refusal> {
    if name.contains('\\') {
        return Err(Refusal::entry(name, "has a backslash in its path"));
    }
    let mut rel = PathBuf::new();
    for component in Path::new(name).components() {
        match component {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(Refusal::entry(
                    name,
                    "has a `..` component (path traversal)",
                ));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(Refusal::entry(name, "has an absolute path"));
            }
        }
    }
    Ok(rel)
}

/// Unpacks a tar stream, entry by entry, in raw mode: the `tar` crate would otherwise apply
/// GNU long-name and PAX headers to the next entry's name itself, reading them into memory
/// whatever their size. Here they are seen, bounded and refused if they rename anything.
fn unpack_tar(stream: Box<dyn Read + '_>, unpacker: &mut Unpacker<'_>) -> Result<(), Refusal> {
    let mut tar = tar::Archive::new(stream);
    let entries = tar.entries().map_err(walk)?.raw(true);
    for entry in entries {
        let mut entry = entry.map_err(walk)?;
        let name = String::from_utf8_lossy(&entry.header().path_bytes()).into_owned();
        unpacker.count(&name)?;
        // The bytes that follow the header in the archive (`size()` would read a sparse
        // file's expanded size from fields other entry types do not have).
        let declared = entry
            .header()
            .entry_size()
            .map_err(|e| Refusal::entry(&name, format!("has a damaged header: {e}")))?;
        match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                unpacker.file(&name, declared, &mut entry)?;
            }
            tar::EntryType::Directory if declared == 0 => unpacker.dir(&name)?,
            tar::EntryType::Directory => {
                return Err(Refusal::entry(
                    &name,
                    "is a directory that claims to hold data",
                ));
            }
            tar::EntryType::XHeader | tar::EntryType::XGlobalHeader => {
                check_pax(&name, declared, &mut entry)?;
            }
            kind => return Err(refuse_kind(&name, kind, &mut entry)),
        }
    }
    Ok(())
}

/// A PAX header may carry timestamps and the like; one that sets a path or link (renaming
/// the entry that follows, so that what was checked is not what would be written) or a
/// size (so that the entry would be read differently from how its header reads) is refused.
fn check_pax(name: &str, declared: u64, data: &mut dyn Read) -> Result<(), Refusal> {
    if declared > MAX_PAX_BYTES {
        return Err(Refusal::entry(
            name,
            format!("is a PAX header of {declared} bytes (more than {MAX_PAX_BYTES})"),
        ));
    }
    let mut bytes = Vec::new();
    data.take(declared)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    for extension in tar::PaxExtensions::new(&bytes) {
        let extension =
            extension.map_err(|e| Refusal::entry(name, format!("is a damaged PAX header: {e}")))?;
        let value = String::from_utf8_lossy(extension.value_bytes());
        match extension.key_bytes() {
            b"path" | b"linkpath" => {
                return Err(Refusal::entry(
                    &value,
                    format!(
                        "is named by a PAX header ({name}) that replaces the name in the \
                         entry's own header"
                    ),
                ));
            }
            b"size" => {
                return Err(Refusal::entry(
                    name,
                    format!("is a PAX header that overrides the next entry's size ({value})"),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The refusal of an entry that is neither a regular file nor a directory.
fn refuse_kind(name: &str, kind: tar::EntryType, entry: &mut tar::Entry<'_, impl Read>) -> Refusal {
    let target = || {
        let bytes = entry.header().link_name_bytes().unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let what = match kind {
        tar::EntryType::Symlink => format!("is a symbolic link (to `{}`)", target()),
        tar::EntryType::Link => format!("is a hard link (to `{}`)", target()),
        tar::EntryType::Char => "is a character device".to_owned(),
        tar::EntryType::Block => "is a block device".to_owned(),
        tar::EntryType::Fifo => "is a fifo".to_owned(),
        tar::EntryType::GNUSparse => "is a GNU sparse file".to_owned(),
        tar::EntryType::GNULongName | tar::EntryType::GNULongLink => {
            let mut long = Vec::new();
            let _ = entry.take(4096).read_to_end(&mut long);
            let long = String::from_utf8_lossy(&long);
            let long = long.trim_end_matches('\0');
            return Refusal::entry(
                long,
                format!(
                    "is named by a GNU long-name header ({name}) that replaces the name in the \
                     entry's own header"
                ),
            );
        }
        other => format!("has the tar entry type {:?}", other.as_byte() as char),
    };
    Refusal::entry(
        name,
        format!("{what}: only regular files and directories are restored"),
    )
}

/// Unpacks a zip archive, checking each entry's name and kind first.
fn unpack_zip<R: Read + Seek>(input: R, unpacker: &mut Unpacker<'_>) -> Result<(), Refusal> {
    // The end records and central directory are checked before the zip crate parses them.
    let mut zip = bounded::zip_archive(BufReader::new(input), unpacker.limits).map_err(walk)?;
    for index in 0..zip.len() {
        let listed = zip.name_for_index(index).unwrap_or("?").to_owned();
        let mut entry = zip
            .by_index(index)
            .map_err(|e| Refusal::entry(&listed, format!("cannot be read: {e}")))?;
        let name = entry.name().to_owned();
        unpacker.count(&name)?;
        safe_path(&name)?;
        // Belt and braces: the zip crate's own view of whether the name stays inside.
        if entry.enclosed_name().is_none() {
            return Err(Refusal::entry(
                &name,
                "escapes the folder it is unpacked into",
            ));
        }
        match zip_kind(entry.unix_mode()) {
            ZipKind::Dir => unpacker.dir(&name)?,
            ZipKind::File if entry.is_dir() => unpacker.dir(&name)?,
            ZipKind::File => {
                let declared = entry.size();
                unpacker.file(&name, declared, &mut entry)?;
            }
            ZipKind::Other(what) => {
                return Err(Refusal::entry(
                    &name,
                    format!("is a {what}: only regular files and directories are restored"),
                ));
            }
        }
    }
    Ok(())
}

enum ZipKind {
    File,
    Dir,
    Other(&'static str),
}

/// What a zip entry's Unix mode says it is (no mode: a file, or a folder by its name).
fn zip_kind(mode: Option<u32>) -> ZipKind {
    const S_IFMT: u32 = 0o170_000;
    match mode.map(|m| m & S_IFMT) {
        None | Some(0) | Some(0o100_000) => ZipKind::File,
        Some(0o040_000) => ZipKind::Dir,
        Some(0o120_000) => ZipKind::Other("symbolic link"),
        Some(0o020_000) => ZipKind::Other("character device"),
        Some(0o060_000) => ZipKind::Other("block device"),
        Some(0o010_000) => ZipKind::Other("fifo"),
        Some(0o140_000) => ZipKind::Other("socket"),
        Some(_) => ZipKind::Other("file of unknown type"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_are_safe() {
        for good in ["manifest.toml", "./Saves/items.bin", "Saves/", "a/./b"] {
            assert!(safe_path(good).is_ok(), "{good}");
        }
        for bad in ["/etc/passwd", "../x", "a/../../x", "a\\..\\x", "a/.."] {
            let refusal = safe_path(bad).unwrap_err();
            assert_eq!(refusal.entry.as_deref(), Some(bad));
        }
    }
}
