//! Whether a file is what its name says: an archive of a save. Two bounded reads, both
//! through [`bounded`] and its [`Limits`]:
//!
//! - [`manifest()`]: finds the archive's `manifest.toml` (at its root or in one top folder) and
//!   reads it, refusing one over [`MAX_MANIFEST_BYTES`]; it stops there (`restore --list`);
//! - [`verify`]: reads every entry to the end and checks that the manifest is there, parses,
//!   and that each data file it names is in the archive, next to it, with the size and CRC-32
//!   it records. An empty, truncated or damaged file, another format, or an archive of
//!   something else fails it. A rollup runs it on an archive it finds in place of one it
//!   would write, before trusting it (see `rollup`).
//!
//! Owns these checks. Must never write, move or delete anything, nor unpack to disk.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::Arc;

use super::bounded::{self, Flow, Kind, Limits, MAX_MANIFEST_BYTES, WalkError};
use super::format::Format;
use crate::persist::file::Written;
use crate::persist::manifest::{self, Manifest, ManifestError};

/// The text of the archive's `manifest.toml`, at its root or inside one top folder; the
/// error says why there is none (in operator words, without the path).
pub fn manifest(path: &Path, format: Format, limits: Limits) -> Result<String, CheckError> {
    let mut found = None;
    let walked = bounded::each_entry(path, format, limits, |name, kind, declared, data| {
        if kind != Kind::File || !is_manifest_name(name.as_bytes()) {
            return Ok(Flow::Next);
        }
        found = Some(read_manifest(name, declared, data));
        Ok(Flow::Stop)
    });
    walked?;
    found.unwrap_or(Err(CheckError::NoManifest))
}

/// Reads the whole archive at `path` within `limits` and checks it holds a complete save:
/// its manifest parses and every data file it names is there with the recorded size and
/// CRC-32. Returns the manifest; the error says what is wrong.
pub fn verify(path: &Path, format: Format, limits: Limits) -> Result<Manifest, CheckError> {
    let mut files: BTreeMap<String, (u64, Option<u32>)> = BTreeMap::new();
    let mut manifest = None;
    let walked = bounded::each_entry(path, format, limits, |name, kind, declared, data| {
        if kind != Kind::File {
            return Ok(Flow::Next);
        }
        if is_manifest_name(name.as_bytes()) && manifest.is_none() {
            let text = read_manifest(name, declared, data);
            manifest = Some((folder(name), text));
            return Ok(Flow::Next);
        }
        files.insert(normal(name), data_file_sum(data)?);
        Ok(Flow::Next)
    });
    walked?;
    let Some((folder, text)) = manifest else {
        return Err(CheckError::NoManifest);
    };
    let manifest = Manifest::parse(&text?).map_err(CheckError::Manifest)?;
    for (kind, written) in &manifest.files {
        let entry = normal(&format!("{folder}{}", kind.file_name()));
        match files.get(&entry) {
            None => return Err(CheckError::Missing { entry }),
            Some(&(bytes, crc32)) if (bytes, crc32) != (written.bytes, Some(written.crc32)) => {
                return Err(CheckError::Mismatch {
                    entry,
                    bytes,
                    crc32,
                    listed: *written,
                });
            }
            Some(_) => {}
        }
    }
    Ok(manifest)
}

/// Why an archive is not an archive of a save ([`verify`]), or has no manifest that can be
/// read ([`manifest()`]). Its text says what is wrong in operator words and names the entry
/// at fault, if one is, but not the archive: the caller does. `Clone`, so that the reports
/// and listings that hold one stay `Clone`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CheckError {
    /// The walk through the archive stopped: a limit of [`Limits`], or not a readable
    /// archive of its format.
    Walk(WalkError),
    /// No `manifest.toml` at its root or in a top folder.
    NoManifest,
    /// The manifest entry is larger than [`MAX_MANIFEST_BYTES`]: by the size its header
    /// declares (`Some`), or by what it holds (`None`, a zip entry's declared size can lie).
    ManifestTooLarge {
        /// The archive entry of the manifest (its path inside the archive).
        entry: String,
        /// The size its header declares, when that is what is over the limit.
        declared: Option<u64>,
    },
    /// Reading the manifest entry failed (a damaged stream, a limit).
    ManifestUnreadable {
        /// The archive entry of the manifest (its path inside the archive).
        entry: String,
        /// What reading it said.
        source: Arc<io::Error>,
    },
    /// The manifest entry is not UTF-8 text.
    ManifestNotText {
        /// The archive entry of the manifest (its path inside the archive).
        entry: String,
    },
    /// The manifest does not parse, or describes no save this build loads.
    Manifest(ManifestError),
    /// A data file the manifest names is not in the archive beside it.
    Missing {
        /// The data file's entry name the manifest expects.
        entry: String,
    },
    /// A data file whose size, or CRC-32 (`None`: it does not end in a valid one), is not
    /// what the manifest records for it (`listed`).
    Mismatch {
        /// The data file's entry in the archive.
        entry: String,
        /// Its size in the archive, in bytes.
        bytes: u64,
        /// The CRC-32 it ends with, if it ends in a valid one.
        crc32: Option<u32>,
        /// What the manifest records for it.
        listed: Written,
    },
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::Walk(e) => e.fmt(f),
            CheckError::NoManifest => write!(
                f,
                "no {} at its root or in a top folder",
                manifest::FILE_NAME
            ),
            CheckError::ManifestTooLarge { entry, declared } => {
                let bytes = declared.map_or("over".to_owned(), |b| b.to_string());
                write!(
                    f,
                    "{entry} is {bytes} bytes, more than the {MAX_MANIFEST_BYTES} a manifest \
                     may have"
                )
            }
            CheckError::ManifestUnreadable { entry, source } => {
                write!(f, "{entry} cannot be read: {source}")
            }
            CheckError::ManifestNotText { entry } => write!(f, "{entry} is not UTF-8 text"),
            CheckError::Manifest(e) => write!(f, "{}: {e}", manifest::FILE_NAME),
            CheckError::Missing { entry } => write!(f, "{entry} is missing"),
            CheckError::Mismatch {
                entry,
                bytes,
                crc32,
                listed,
            } => {
                let crc32 = crc32.map_or("no valid CRC-32".to_owned(), |c| format!("{c:08x}"));
                write!(
                    f,
                    "{entry} has {bytes} bytes ending in {crc32}; the manifest records {} \
                     bytes ending in {:08x}",
                    listed.bytes, listed.crc32
                )
            }
        }
    }
}

impl std::error::Error for CheckError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckError::Walk(e) => Some(e),
            CheckError::ManifestUnreadable { source, .. } => Some(&**source),
            CheckError::Manifest(e) => Some(e),
            _ => None,
        }
    }
}

impl From<WalkError> for CheckError {
    fn from(e: WalkError) -> CheckError {
        CheckError::Walk(e)
    }
}

/// A data file's size and, if its last four bytes are the CRC-32 of every byte before them
/// (how a save file ends, and the CRC its manifest records), that CRC.
fn data_file_sum(data: &mut dyn Read) -> io::Result<(u64, Option<u32>)> {
    let mut crc = crc32fast::Hasher::new();
    let mut bytes = 0u64;
    // The last four bytes read so far: not hashed until more bytes follow them.
    let mut held = Vec::with_capacity(4);
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = data.read(&mut buf)?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        held.extend_from_slice(&buf[..n]);
        let release = held.len().saturating_sub(4);
        crc.update(&held[..release]);
        held.drain(..release);
    }
    let stored = <[u8; 4]>::try_from(held.as_slice()).map(u32::from_le_bytes);
    let crc = crc.finalize();
    Ok((bytes, stored.ok().filter(|s| *s == crc)))
}

/// `manifest.toml` or `<folder>/manifest.toml` (`.` components aside).
pub fn is_manifest_name(name: &[u8]) -> bool {
    let parts = parts(name);
    match parts.as_slice() {
        [file] | [_, file] => *file == manifest::FILE_NAME,
        _ => false,
    }
}

/// The plain parts of an entry's path, or none at all if any part is not plain.
fn parts(name: &[u8]) -> Vec<&OsStr> {
    let mut parts = Vec::new();
    for component in Path::new(OsStr::from_bytes(name)).components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            _ => return Vec::new(),
        }
    }
    parts
}

/// An entry's path with `.` components dropped, `/`-joined.
fn normal(name: &str) -> String {
    let parts: Vec<_> = parts(name.as_bytes())
        .into_iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// The folder of a manifest entry, with its trailing `/` (empty at the root).
fn folder(name: &str) -> String {
    let normal = normal(name);
    match normal.rsplit_once('/') {
        Some((folder, _)) => format!("{folder}/"),
        None => String::new(),
    }
}

/// Reads a manifest entry of `declared` bytes: refused above [`MAX_MANIFEST_BYTES`], by its
/// declared size first and by what it holds (a zip entry's declared size can lie).
fn read_manifest(name: &str, declared: u64, data: &mut dyn Read) -> Result<String, CheckError> {
    let too_big = |declared| CheckError::ManifestTooLarge {
        entry: name.to_owned(),
        declared,
    };
    if declared > MAX_MANIFEST_BYTES {
        return Err(too_big(Some(declared)));
    }
    let mut bytes = Vec::new();
    data.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CheckError::ManifestUnreadable {
            entry: name.to_owned(),
            source: Arc::new(e),
        })?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(too_big(None));
    }
    String::from_utf8(bytes).map_err(|_| CheckError::ManifestNotText {
        entry: name.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::archive::format;

    #[test]
    fn manifest_names_at_the_root_or_one_folder_down() {
        assert!(is_manifest_name(b"manifest.toml"));
        assert!(is_manifest_name(b"./Saves/manifest.toml"));
        assert!(!is_manifest_name(b"a/b/manifest.toml"));
        assert!(!is_manifest_name(b"../manifest.toml"));
        assert!(!is_manifest_name(b"items.bin"));
        assert_eq!(folder("./Saves/manifest.toml"), "Saves/");
        assert_eq!(folder("manifest.toml"), "");
    }

    #[test]
    fn archives_of_a_save_verify_in_every_format_and_in_a_top_folder() {
        let dir = tempfile::tempdir().unwrap();
        let layout = crate::persist::Layout::new(dir.path(), dir.path().join("Saves"));
        let world = crate::world::generate(3, 200, 20);
        let at = "2026-12-03T10:00:00Z".parse().unwrap();
        let snapshot = crate::persist::Snapshot::take(&world, at, |_| true);
        crate::persist::save::write(&layout, snapshot, 1).unwrap();
        let names = ["manifest.toml", "items.bin", "mobiles.bin", "spawners.bin"];
        let paths: Vec<_> = names.iter().map(|n| layout.saves.join(n)).collect();
        for folder in ["", "Saves/"] {
            let files: Vec<(String, &Path)> = names
                .iter()
                .zip(&paths)
                .map(|(n, p)| (format!("{folder}{n}"), p.as_path()))
                .collect();
            for format in Format::ALL {
                let path = dir.path().join(format!("a{}", format.extension()));
                let _ = std::fs::remove_file(&path);
                format::write(&path, format, 3, &files).unwrap();
                let manifest = verify(&path, format, Limits::default()).unwrap();
                assert_eq!((manifest.items, manifest.created), (200, at), "{format:?}");
                // A data file missing: not an archive of the save its manifest describes.
                std::fs::remove_file(&path).unwrap();
                format::write(&path, format, 3, &files[..3]).unwrap();
                let why = verify(&path, format, Limits::default()).unwrap_err();
                let missing = format!("{folder}spawners.bin");
                assert!(
                    matches!(&why, CheckError::Missing { entry } if *entry == missing),
                    "{format:?}: {why:?}"
                );
                assert_eq!(why.to_string(), format!("{missing} is missing"));
            }
        }
    }

    #[test]
    fn files_that_are_not_archives_of_a_save_fail_verification() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits::default();
        for format in Format::ALL {
            let empty = dir.path().join(format!("empty{}", format.extension()));
            std::fs::write(&empty, b"").unwrap();
            let why = verify(&empty, format, limits).unwrap_err();
            assert!(!why.to_string().is_empty(), "{format:?}");
            // An archive that holds a big manifest: refused by its size, not read whole.
            let text = dir.path().join("manifest.toml");
            std::fs::write(&text, vec![b'#'; MAX_MANIFEST_BYTES as usize + 1]).unwrap();
            let big = dir.path().join(format!("big{}", format.extension()));
            format::write(&big, format, 3, &[("manifest.toml".into(), &text)]).unwrap();
            let why = manifest(&big, format, limits).unwrap_err();
            assert!(
                matches!(why, CheckError::ManifestTooLarge { .. }),
                "{format:?}: {why:?}"
            );
            assert!(
                why.to_string().contains("more than the 65536"),
                "{format:?}: {why}"
            );
            assert!(verify(&big, format, limits).is_err(), "{format:?}");
        }
    }
}
