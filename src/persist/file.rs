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
    Items,
    Mobiles,
    Spawners,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Items, Kind::Mobiles, Kind::Spawners];

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
    pub bytes: u64,
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
    pub record_version: u16,
    pub count: u64,
    pub crc32: u32,
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
pub fn read(path: &Path, kind: Kind, bytes: u64) -> Result<Checked, String> {
    let cannot = |e: io::Error| format!("cannot read it: {e}");
    let file = File::open(path).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    check_size(meta.len(), bytes)?;
    let capacity = usize::try_from(bytes).map_err(|_| format!("{bytes} bytes do not fit"))?;
    let mut data = Vec::with_capacity(capacity);
    file.take(bytes + 1)
        .read_to_end(&mut data)
        .map_err(cannot)?;
    if data.len() as u64 != bytes {
        return Err(format!(
            "changed while being read ({} bytes read, {bytes} expected)",
            data.len()
        ));
    }
    check(data, kind)
}

/// The size on disk is the one the manifest names.
pub fn check_size(on_disk: u64, listed: u64) -> Result<(), String> {
    if on_disk != listed {
        return Err(format!(
            "is {on_disk} bytes on disk; the manifest says {listed} bytes: it is truncated, \
             comes from another save or was changed"
        ));
    }
    Ok(())
}

fn check(data: Vec<u8>, kind: Kind) -> Result<Checked, String> {
    if data.len() < HEADER + TRAILER {
        return Err(format!(
            "truncated: {} bytes, shorter than an empty save file ({} bytes)",
            data.len(),
            HEADER + TRAILER
        ));
    }
    if &data[..8] != MAGIC {
        return Err("not a shardloop save file (bad magic bytes)".into());
    }
    let body = data.len() - TRAILER;
    let stored = u32::from_le_bytes(data[body..].try_into().expect("4 bytes"));
    let actual = crc32fast::hash(&data[..body]);
    if stored != actual {
        return Err(format!(
            "checksum mismatch (stored {stored:08x}, computed {actual:08x}): the file is \
             truncated or corrupt"
        ));
    }
    let version = u16::from_le_bytes([data[8], data[9]]);
    if version != FILE_VERSION {
        return Err(format!(
            "file format version {version}; this build reads version {FILE_VERSION}"
        ));
    }
    match Kind::from_tag(data[10]) {
        Some(k) if k == kind => {}
        Some(k) => return Err(format!("holds {k}, not {kind}")),
        None => return Err(format!("unknown entity type tag {}", data[10])),
    }
    Ok(Checked {
        record_version: u16::from_le_bytes([data[11], data[12]]),
        count: u64::from_le_bytes(data[13..21].try_into().expect("8 bytes")),
        crc32: stored,
        bytes: data.len() as u64,
        data,
    })
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

        assert!(err(good[..10].to_vec(), Kind::Items).contains("truncated"));
        assert!(err(good[..good.len() - 1].to_vec(), Kind::Items).contains("checksum"));
        let mut flipped = good.clone();
        flipped[HEADER] ^= 0x40;
        assert!(err(flipped, Kind::Items).contains("checksum"));
        let mut magic = good.clone();
        magic[0] = b'X';
        assert!(err(magic, Kind::Items).contains("magic"));
        assert!(err(good.clone(), Kind::Mobiles).contains("holds items, not mobiles"));
        assert!(write(&dir.path().join("items.bin"), Kind::Items, 0, []).is_err());
    }

    #[test]
    fn a_size_other_than_the_manifests_is_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(dir.path());
        let real = std::fs::metadata(&path).unwrap().len();
        let e = read(&path, Kind::Items, real - 1).unwrap_err();
        assert!(e.contains(&format!("is {real} bytes on disk")), "{e}");
        let e = read(&path, Kind::Items, u64::MAX).unwrap_err();
        assert!(e.contains("the manifest says 18446744073709551615"), "{e}");
        let e = read(dir.path(), Kind::Items, 0).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
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
