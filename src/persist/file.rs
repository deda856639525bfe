//! One save file: all records of one entity type, between a header and a checksum.
//!
//! ```text
//! offset  size  field
//! 0       8     magic  "SHLDSAVE"
//! 8       2     file format version (u16 LE, FILE_VERSION)
//! 10      1     entity type: 1 items, 2 mobiles, 3 spawners
//! 11      2     record version of that type (u16 LE; see `codec`)
//! 13      8     record count (u64 LE)
//! 21      ...   the records
//! end-4   4     CRC-32 (IEEE) of every byte before it (u32 LE)
//! ```
//!
//! A file is therefore self-checking: truncation, a flipped bit or a file of another type
//! put in its place are all caught before a single record is decoded.
//!
//! Owns the container of one file (written and fsynced through `fsio`). Must never decide
//! where files live or what a complete save is (`save`, `load`, `manifest` do).

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use super::codec;
use super::fsio;

/// The first eight bytes of every save file.
pub const MAGIC: &[u8; 8] = b"SHLDSAVE";
/// The container layout above. Bumped only if the header itself changes.
pub const FILE_VERSION: u16 = 1;
const HEADER: usize = 21;
const TRAILER: usize = 4;
/// Bytes of a file that are not records: the header and the checksum.
pub const OVERHEAD: u64 = (HEADER + TRAILER) as u64;

/// The entity types a save holds, one file each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `items.bin`.
    Items,
    /// `mobiles.bin` (players' mobiles included).
    Mobiles,
    /// `spawners.bin`.
    Spawners,
}

impl Kind {
    /// Every kind, in the order a save writes and lists them.
    pub const ALL: [Kind; 3] = [Kind::Items, Kind::Mobiles, Kind::Spawners];

    /// Its file's name in a save directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Kind::Items => "items.bin",
            Kind::Mobiles => "mobiles.bin",
            Kind::Spawners => "spawners.bin",
        }
    }

    fn tag(self) -> u8 {
        match self {
            Kind::Items => 1,
            Kind::Mobiles => 2,
            Kind::Spawners => 3,
        }
    }

    /// The record version this build writes.
    pub fn record_version(self) -> u16 {
        match self {
            Kind::Items => codec::ITEM_VERSION,
            Kind::Mobiles => codec::MOBILE_VERSION,
            Kind::Spawners => codec::SPAWNER_VERSION,
        }
    }

    /// The fewest bytes one record of this type takes on disk (see `codec`).
    pub fn min_record_bytes(self) -> u64 {
        let bytes = match self {
            Kind::Items => codec::ITEM_RECORD_BYTES,
            Kind::Mobiles => codec::MOBILE_MIN_RECORD_BYTES,
            Kind::Spawners => codec::SPAWNER_MIN_RECORD_BYTES,
        };
        bytes as u64
    }

    /// The most records a file of `bytes` bytes (header and checksum included) can hold.
    pub fn max_records(self, bytes: u64) -> u64 {
        bytes.saturating_sub(OVERHEAD) / self.min_record_bytes()
    }

    fn from_tag(tag: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.tag() == tag)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Items => "items",
            Kind::Mobiles => "mobiles",
            Kind::Spawners => "spawners",
        })
    }
}

/// What was written: enough for the manifest to vouch for the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The file's size, header and checksum included.
    pub bytes: u64,
    /// The CRC-32 it ends with.
    pub crc32: u32,
}

/// Writes a file of `count` records of `kind`, the records arriving as encoded chunks in
/// order, and fsyncs it. The file must not exist yet.
pub fn write(
    path: &Path,
    kind: Kind,
    count: u64,
    chunks: impl IntoIterator<Item = io::Result<Vec<u8>>>,
) -> io::Result<Written> {
    fsio::create(path, |file| {
        let mut crc = crc32fast::Hasher::new();
        let mut bytes = 0u64;
        let mut put = |file: &mut File, data: &[u8]| -> io::Result<()> {
            crc.update(data);
            bytes += data.len() as u64;
            file.write_all(data)
        };
        put(file, &header(kind, count))?;
        for chunk in chunks {
            put(file, &chunk?)?;
        }
        let crc32 = crc.finalize();
        file.write_all(&crc32.to_le_bytes())?;
        Ok(Written {
            bytes: bytes + TRAILER as u64,
            crc32,
        })
    })
}

fn header(kind: Kind, count: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..10].copy_from_slice(&FILE_VERSION.to_le_bytes());
    h[10] = kind.tag();
    h[11..13].copy_from_slice(&kind.record_version().to_le_bytes());
    h[13..21].copy_from_slice(&count.to_le_bytes());
    h
}

/// A file read back and checked: its records are ready to decode.
#[derive(Debug)]
pub struct Checked {
    /// The version of the records' encoding.
    pub record_version: u16,
    /// Records in the file, as its header says.
    pub count: u64,
    /// The CRC-32 it ends with (checked).
    pub crc32: u32,
    /// Its size.
    pub bytes: u64,
    data: Vec<u8>,
}

impl Checked {
    /// The record area.
    pub fn records(&self) -> &[u8] {
        &self.data[HEADER..self.data.len() - TRAILER]
    }
}

/// Reads `path` and checks it is an intact file of `kind` of exactly `bytes` bytes (what the
/// manifest says). The size on disk is compared before anything is allocated, and reading
/// stops one byte past `bytes` whatever the file does meanwhile: memory is bounded by the
/// manifest's figure, checked against the disk. The error says what is wrong in operator
/// words (the caller adds the path).
pub fn read(path: &Path, kind: Kind, bytes: u64) -> Result<Checked, FileError> {
    let file = File::open(path).map_err(FileError::Unreadable)?;
    let meta = file.metadata().map_err(FileError::Unreadable)?;
    if !meta.is_file() {
        return Err(FileError::NotAFile);
    }
    check_size(meta.len(), bytes)?;
    let capacity = usize::try_from(bytes).map_err(|_| FileError::TooLarge { bytes })?;
    let mut data = Vec::with_capacity(capacity);
    file.take(bytes + 1)
        .read_to_end(&mut data)
        .map_err(FileError::Unreadable)?;
    if data.len() as u64 != bytes {
        return Err(FileError::Changed {
            read: data.len() as u64,
            expected: bytes,
        });
    }
    check(data, kind)
}

/// The size on disk is the one the manifest names.
pub fn check_size(on_disk: u64, listed: u64) -> Result<(), FileError> {
    if on_disk != listed {
        return Err(FileError::SizeMismatch { on_disk, listed });
    }
    Ok(())
}

fn check(data: Vec<u8>, kind: Kind) -> Result<Checked, FileError> {
    if data.len() < HEADER + TRAILER {
        return Err(FileError::Truncated {
            bytes: data.len() as u64,
        });
    }
    if &data[..8] != MAGIC {
        return Err(FileError::BadMagic);
    }
    let body = data.len() - TRAILER;
    let stored = u32::from_le_bytes(data[body..].try_into().expect("4 bytes"));
    let computed = crc32fast::hash(&data[..body]);
    if stored != computed {
        return Err(FileError::Checksum { stored, computed });
    }
    let version = u16::from_le_bytes([data[8], data[9]]);
    if version != FILE_VERSION {
        return Err(FileError::Version { found: version });
    }
    match Kind::from_tag(data[10]) {
        Some(k) if k == kind => {}
        Some(holds) => {
            return Err(FileError::WrongKind {
                holds,
                expected: kind,
            });
        }
        None => return Err(FileError::UnknownKind { tag: data[10] }),
    }
    Ok(Checked {
        record_version: u16::from_le_bytes([data[11], data[12]]),
        count: u64::from_le_bytes(data[13..21].try_into().expect("8 bytes")),
        crc32: stored,
        bytes: data.len() as u64,
        data,
    })
}

/// Why a save file is not the intact file of its type, of the size its manifest names
/// ([`read`], [`check_size`]). Its text says what is wrong in operator words and leaves the
/// path out: the caller names the file (`LoadError` does).
#[derive(Debug)]
#[non_exhaustive]
pub enum FileError {
    /// Opening, inspecting or reading the file failed: the operating system's error.
    Unreadable(io::Error),
    /// It is a directory, a device or anything but a regular file.
    NotAFile,
    /// The manifest's size for it does not fit in this process's address space.
    TooLarge {
        /// The size the manifest names.
        bytes: u64,
    },
    /// Its size on disk is not the size its manifest names.
    SizeMismatch {
        /// Its size on disk, in bytes.
        on_disk: u64,
        /// The size the manifest names.
        listed: u64,
    },
    /// It grew or shrank while being read: `read` bytes came, `expected` were checked on disk.
    Changed {
        /// Bytes read.
        read: u64,
        /// Bytes its size on disk said there were.
        expected: u64,
    },
    /// `bytes` long: shorter than the header and checksum of an empty save file.
    Truncated {
        /// Its length.
        bytes: u64,
    },
    /// It does not start with [`MAGIC`]: not a shardloop save file.
    BadMagic,
    /// The CRC-32 it ends with is not the one of the bytes before it.
    Checksum {
        /// The CRC-32 the file ends with.
        stored: u32,
        /// The CRC-32 of the bytes before it.
        computed: u32,
    },
    /// A container layout other than [`FILE_VERSION`].
    Version {
        /// The container version the file has.
        found: u16,
    },
    /// A save file of another entity type than the one asked for.
    WrongKind {
        /// The entity type the file holds.
        holds: Kind,
        /// The one asked for.
        expected: Kind,
    },
    /// An entity type tag no version of shardloop writes.
    UnknownKind {
        /// The tag byte found.
        tag: u8,
    },
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Unreadable(e) => write!(f, "cannot read it: {e}"),
            FileError::NotAFile => f.write_str("not a regular file"),
            FileError::TooLarge { bytes } => write!(f, "{bytes} bytes do not fit"),
            FileError::SizeMismatch { on_disk, listed } => write!(
                f,
                "is {on_disk} bytes on disk; the manifest says {listed} bytes: it is truncated, \
                 comes from another save or was changed"
            ),
            FileError::Changed { read, expected } => write!(
                f,
                "changed while being read ({read} bytes read, {expected} expected)"
            ),
            FileError::Truncated { bytes } => write!(
                f,
                "truncated: {bytes} bytes, shorter than an empty save file ({OVERHEAD} bytes)"
            ),
            FileError::BadMagic => f.write_str("not a shardloop save file (bad magic bytes)"),
            FileError::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:08x}, computed {computed:08x}): the file is \
                 truncated or corrupt"
            ),
            FileError::Version { found } => write!(
                f,
                "file format version {found}; this build reads version {FILE_VERSION}"
            ),
            FileError::WrongKind { holds, expected } => write!(f, "holds {holds}, not {expected}"),
            FileError::UnknownKind { tag } => write!(f, "unknown entity type tag {tag}"),
        }
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FileError::Unreadable(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(dir: &Path) -> std::path::PathBuf {
        let path = dir.join("items.bin");
        let chunks = vec![Ok(vec![1, 2, 3]), Ok(vec![4, 5])];
        let w = write(&path, Kind::Items, 2, chunks).unwrap();
        assert_eq!(w.bytes, (HEADER + 5 + TRAILER) as u64);
        path
    }

    #[test]
    fn a_written_file_reads_back_with_its_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(dir.path());
        let checked = read(&path, Kind::Items, (HEADER + 5 + TRAILER) as u64).unwrap();
        assert_eq!(checked.records(), &[1, 2, 3, 4, 5]);
        assert_eq!(checked.count, 2);
        assert_eq!(checked.record_version, codec::ITEM_VERSION);
    }

    #[test]
    fn every_kind_of_damage_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let good = std::fs::read(sample(dir.path())).unwrap();
        let err = |data: Vec<u8>, kind| check(data, kind).unwrap_err();

        let e = err(good[..10].to_vec(), Kind::Items);
        assert!(matches!(e, FileError::Truncated { bytes: 10 }), "{e:?}");
        assert!(e.to_string().starts_with("truncated: 10 bytes"), "{e}");
        let e = err(good[..good.len() - 1].to_vec(), Kind::Items);
        assert!(matches!(e, FileError::Checksum { .. }), "{e:?}");
        let mut flipped = good.clone();
        flipped[HEADER] ^= 0x40;
        let e = err(flipped, Kind::Items);
        assert!(
            e.to_string().starts_with("checksum mismatch (stored "),
            "{e}"
        );
        let mut magic = good.clone();
        magic[0] = b'X';
        let e = err(magic, Kind::Items);
        assert!(matches!(e, FileError::BadMagic), "{e:?}");
        assert!(e.to_string().contains("magic"), "{e}");
        let e = err(good.clone(), Kind::Mobiles);
        assert_eq!(e.to_string(), "holds items, not mobiles");
        let mut tag = good.clone();
        tag[10] = 9;
        let body = tag.len() - TRAILER;
        let resealed = crc32fast::hash(&tag[..body]).to_le_bytes();
        tag[body..].copy_from_slice(&resealed);
        assert!(matches!(
            err(tag, Kind::Items),
            FileError::UnknownKind { tag: 9 }
        ));
        assert!(write(&dir.path().join("items.bin"), Kind::Items, 0, []).is_err());
    }

    #[test]
    fn a_size_other_than_the_manifests_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(dir.path());
        let real = std::fs::metadata(&path).unwrap().len();
        let e = read(&path, Kind::Items, real - 1).unwrap_err();
        assert!(
            e.to_string().contains(&format!("is {real} bytes on disk")),
            "{e}"
        );
        let e = read(&path, Kind::Items, u64::MAX).unwrap_err();
        let says = "the manifest says 18446744073709551615";
        assert!(e.to_string().contains(says), "{e}");
        let e = read(dir.path(), Kind::Items, 0).unwrap_err();
        assert!(matches!(e, FileError::NotAFile), "{e:?}");
        assert_eq!(e.to_string(), "not a regular file");
        let e = read(&dir.path().join("absent.bin"), Kind::Items, 0).unwrap_err();
        assert!(std::error::Error::source(&e).is_some(), "{e:?}");
        assert!(e.to_string().starts_with("cannot read it: "), "{e}");
    }

    #[test]
    fn record_counts_are_bounded_by_the_bytes() {
        assert_eq!(Kind::Items.max_records(OVERHEAD + 44), 2);
        assert_eq!(Kind::Items.max_records(OVERHEAD + 43), 1);
        assert_eq!(Kind::Items.max_records(3), 0);
        assert_eq!(Kind::Mobiles.max_records(OVERHEAD + 36), 1);
        assert_eq!(Kind::Spawners.max_records(OVERHEAD + 46), 2);
    }
}
