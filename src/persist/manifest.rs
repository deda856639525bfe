//! `manifest.toml`: the small, human-readable file that makes a directory a save.
//!
//! It is written last, after every data file is on disk, so a directory without a manifest
//! (or with one that does not parse) was never a complete save. It names the world's seed and
//! serial cursors, the entity counts, the creation time (UTC), the save's sequence number,
//! and each data file's size and CRC-32 — so swapping in a file from another save is caught,
//! not only a damaged one.
//!
//! It is read from untrusted places (an archive, a directory an operator dropped in), so it is
//! read through a cap ([`MAX_BYTES`]), never whole; its counts are only claims until `load`
//! has checked them against the files' sizes.
//!
//! Owns the manifest's text form. Must never read or write data files.

use std::fmt::{self, Write as _};
use std::io::{self, Read as _};
use std::path::Path;
use std::sync::Arc;

use jiff::Timestamp;

use super::file::{Kind, Written};
use crate::world::Serial;

/// The manifest's name in a save directory.
pub const FILE_NAME: &str = "manifest.toml";
/// The save format as a whole (directory layout and manifest keys).
pub const SAVE_FORMAT: u32 = 1;
/// The largest manifest read: a real one is about 600 bytes, so 64 KiB leaves room for any
/// comments an operator adds and none for a file meant to exhaust memory.
pub const MAX_BYTES: u64 = 64 * 1024;

/// Everything a manifest records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// [`SAVE_FORMAT`] when written by this build.
    pub format: u32,
    /// When the snapshot was taken.
    pub created: Timestamp,
    /// One more than the save this one replaced: what crash recovery orders saves by (never
    /// the clock, which can step backwards). Optional in the file (added after format 1
    /// shipped): a manifest without it reads as 0.
    pub sequence: u64,
    /// The shardloop version that wrote it (informational).
    pub writer: String,
    /// The world's generation seed.
    pub seed: u64,
    /// The serial the next new item gets.
    pub next_item_serial: Serial,
    /// The serial the next new mobile gets.
    pub next_mobile_serial: Serial,
    /// Items in the save.
    pub items: u64,
    /// Mobiles in the save.
    pub mobiles: u64,
    /// Spawners in the save.
    pub spawners: u64,
    /// One entry per [`Kind`], in [`Kind::ALL`] order.
    pub files: Vec<(Kind, Written)>,
}

impl Manifest {
    /// The entity count it records for `kind`.
    pub fn count(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Items => self.items,
            Kind::Mobiles => self.mobiles,
            Kind::Spawners => self.spawners,
        }
    }

    /// Total bytes of the data files.
    pub fn data_bytes(&self) -> u64 {
        self.files.iter().map(|(_, w)| w.bytes).sum()
    }

    /// What it records of `kind`'s data file.
    pub fn file(&self, kind: Kind) -> Option<Written> {
        self.files.iter().find(|(k, _)| *k == kind).map(|(_, w)| *w)
    }

    /// The manifest's text. Deterministic: the same manifest always gives the same bytes.
    pub fn to_toml(&self) -> String {
        let mut s = String::new();
        s.push_str(
            "# shardloop save manifest. Written last: a directory without it is not a save.\n",
        );
        s.push_str("# Every data file below is checked against its size and CRC-32 at load.\n");
        let _ = writeln!(s, "format = {}", self.format);
        let _ = writeln!(s, "created = \"{}\"", self.created);
        let _ = writeln!(s, "sequence = {}", self.sequence);
        let _ = writeln!(s, "writer = \"shardloop {}\"", self.writer);
        let _ = writeln!(s, "seed = \"{:#x}\"", self.seed);
        let _ = writeln!(s, "next_item_serial = {}", self.next_item_serial.0);
        let _ = writeln!(s, "next_mobile_serial = {}", self.next_mobile_serial.0);
        let _ = writeln!(s, "\n[counts]");
        for kind in Kind::ALL {
            let _ = writeln!(s, "{kind} = {}", self.count(kind));
        }
        for (kind, w) in &self.files {
            let _ = writeln!(s, "\n[files.\"{}\"]", kind.file_name());
            let _ = writeln!(s, "bytes = {}", w.bytes);
            let _ = writeln!(s, "crc32 = \"{:08x}\"", w.crc32);
        }
        s
    }

    /// Reads `dir/manifest.toml`, refusing one over [`MAX_BYTES`] without reading past the
    /// cap. The error says what is wrong (the caller names the file).
    pub fn read(dir: &Path) -> Result<Manifest, ManifestError> {
        let cannot = |e: io::Error| ManifestError::Unreadable(Arc::new(e));
        let file = std::fs::File::open(dir.join(FILE_NAME)).map_err(cannot)?;
        let mut text = String::new();
        file.take(MAX_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(cannot)?;
        if text.len() as u64 > MAX_BYTES {
            return Err(ManifestError::TooLarge);
        }
        Manifest::parse(&text)
    }

    /// The manifest in `text`; the error names the key at fault, if one is.
    pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
        let doc: toml::Table = text.parse().map_err(ManifestError::Toml)?;
        let format = int(&doc, "format")? as u32;
        if format != SAVE_FORMAT {
            return Err(ManifestError::Format { found: format });
        }
        let created = string(&doc, "created")?
            .parse::<Timestamp>()
            .map_err(ManifestError::Created)?;
        let seed = string(&doc, "seed")?;
        let seed = u64::from_str_radix(seed.trim_start_matches("0x"), 16).map_err(|_| {
            ManifestError::Seed {
                value: seed.to_owned(),
            }
        })?;
        let counts = table(&doc, "counts")?;
        let files = table(&doc, "files")?;
        let sequence = match doc.get("sequence") {
            None => 0,
            Some(_) => int(&doc, "sequence")?,
        };
        let mut manifest = Manifest {
            format,
            created,
            sequence,
            writer: string(&doc, "writer")?
                .trim_start_matches("shardloop ")
                .to_owned(),
            seed,
            next_item_serial: Serial(u32_field(&doc, "next_item_serial")?),
            next_mobile_serial: Serial(u32_field(&doc, "next_mobile_serial")?),
            items: int(counts, "items")?,
            mobiles: int(counts, "mobiles")?,
            spawners: int(counts, "spawners")?,
            files: Vec::new(),
        };
        for kind in Kind::ALL {
            let entry = table(files, kind.file_name())?;
            let crc = string(entry, "crc32")?;
            let crc32 = u32::from_str_radix(crc, 16).map_err(|_| ManifestError::Crc32 {
                file: kind.file_name(),
                value: crc.to_owned(),
            })?;
            let written = Written {
                bytes: int(entry, "bytes")?,
                crc32,
            };
            manifest.files.push((kind, written));
        }
        Ok(manifest)
    }
}

fn field<'a>(t: &'a toml::Table, key: &'static str) -> Result<&'a toml::Value, ManifestError> {
    t.get(key).ok_or(ManifestError::Missing { key })
}

fn int(t: &toml::Table, key: &'static str) -> Result<u64, ManifestError> {
    match field(t, key)? {
        toml::Value::Integer(i) if *i >= 0 => Ok(*i as u64),
        v => Err(ManifestError::NotACount {
            key,
            value: v.to_string(),
        }),
    }
}

fn u32_field(t: &toml::Table, key: &'static str) -> Result<u32, ManifestError> {
    let value = int(t, key)?;
    u32::try_from(value).map_err(|_| ManifestError::OutOfRange { key, value })
}

fn string<'a>(t: &'a toml::Table, key: &'static str) -> Result<&'a str, ManifestError> {
    field(t, key)?
        .as_str()
        .ok_or(ManifestError::NotAString { key })
}

fn table<'a>(t: &'a toml::Table, key: &'static str) -> Result<&'a toml::Table, ManifestError> {
    field(t, key)?
        .as_table()
        .ok_or(ManifestError::NotATable { key })
}

/// Why a manifest cannot be read ([`Manifest::read`]) or does not describe a save this build
/// loads ([`Manifest::parse`]). It names the key at fault, if one is, but not the file: the
/// caller does. `Clone` (the OS error is shared behind an [`Arc`]), so that a listing that
/// holds one stays `Clone`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ManifestError {
    /// Opening or reading the file failed: the operating system's error (`InvalidData` for
    /// text that is not UTF-8).
    Unreadable(Arc<io::Error>),
    /// Larger than [`MAX_BYTES`]: refused without being read whole.
    TooLarge,
    /// Not TOML at all.
    Toml(toml::de::Error),
    /// A save format other than [`SAVE_FORMAT`].
    Format {
        /// The `format` the manifest has.
        found: u32,
    },
    /// A key (or a `[table]`) that every manifest has is not there.
    Missing {
        /// The key (dotted for a nested one).
        key: &'static str,
    },
    /// A count, size or serial that is not a non-negative integer: `value` as the file has it.
    NotACount {
        /// The key.
        key: &'static str,
        /// Its value as the file has it.
        value: String,
    },
    /// A serial too large for one.
    OutOfRange {
        /// The key.
        key: &'static str,
        /// Its value.
        value: u64,
    },
    /// A key that must hold a string holds something else.
    NotAString {
        /// The key.
        key: &'static str,
    },
    /// A key that must be a `[table]` is something else.
    NotATable {
        /// The key.
        key: &'static str,
    },
    /// `created` is not a timestamp.
    Created(jiff::Error),
    /// `seed` is not a hexadecimal number.
    Seed {
        /// Its value as the file has it.
        value: String,
    },
    /// The `crc32` of the data file `file` is not hexadecimal.
    Crc32 {
        /// The data file's name.
        file: &'static str,
        /// Its `crc32` as the manifest has it.
        value: String,
    },
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::Unreadable(e) => write!(f, "cannot read it: {e}"),
            ManifestError::TooLarge => write!(
                f,
                "larger than the {MAX_BYTES}-byte cap for a manifest (a real one is under 1 KiB)"
            ),
            ManifestError::Toml(e) => write!(f, "not valid TOML: {e}"),
            ManifestError::Format { found } => write!(
                f,
                "save format {found}; this build reads format {SAVE_FORMAT}"
            ),
            ManifestError::Missing { key } => write!(f, "`{key}` is missing"),
            ManifestError::NotACount { key, value } => {
                write!(f, "`{key}` = {value} is not a count")
            }
            ManifestError::OutOfRange { key, value } => {
                write!(f, "`{key}` = {value} is out of range")
            }
            ManifestError::NotAString { key } => write!(f, "`{key}` is not a string"),
            ManifestError::NotATable { key } => write!(f, "`[{key}]` is not a table"),
            ManifestError::Created(e) => write!(f, "`created` is not a timestamp: {e}"),
            ManifestError::Seed { value } => {
                write!(f, "`seed` {value:?} is not a hexadecimal number")
            }
            ManifestError::Crc32 { file, value } => {
                write!(f, "crc32 {value:?} of {file} is not hexadecimal")
            }
        }
    }
}

impl std::error::Error for ManifestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ManifestError::Unreadable(e) => Some(&**e),
            ManifestError::Toml(e) => Some(e),
            ManifestError::Created(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> Manifest {
        Manifest {
            format: SAVE_FORMAT,
            created: "2026-12-03T10:00:00Z".parse().unwrap(),
            sequence: 41,
            writer: "0.1.0".into(),
            seed: u64::MAX - 1,
            next_item_serial: Serial(0x4000_0010),
            next_mobile_serial: Serial(12),
            items: 15,
            mobiles: 11,
            spawners: 2,
            files: Kind::ALL
                .iter()
                .enumerate()
                .map(|(i, &k)| {
                    let w = Written {
                        bytes: 100 + i as u64,
                        crc32: 0xDEAD_0000 + i as u32,
                    };
                    (k, w)
                })
                .collect(),
        }
    }

    #[test]
    fn a_manifest_reads_back_exactly_and_prints_the_same_text() {
        let text = sample().to_toml();
        let back = Manifest::parse(&text).unwrap();
        assert_eq!(back, sample());
        assert_eq!(back.to_toml(), text);
        assert_eq!(back.data_bytes(), 303);
    }

    #[test]
    fn a_damaged_manifest_says_what_is_wrong() {
        let text = sample().to_toml();
        let cut = &text[..text.find("[files").unwrap()];
        let e = Manifest::parse(cut).unwrap_err();
        assert!(
            matches!(e, ManifestError::Missing { key: "files" }),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "`files` is missing");
        let newer = text.replace("format = 1", "format = 7");
        let e = Manifest::parse(&newer).unwrap_err();
        assert_eq!(e.to_string(), "save format 7; this build reads format 1");
        let e = Manifest::parse("created = ").unwrap_err();
        assert!(e.to_string().starts_with("not valid TOML: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        let negative = text.replace("sequence = 41", "sequence = -1");
        let e = Manifest::parse(&negative).unwrap_err();
        assert_eq!(e.to_string(), "`sequence` = -1 is not a count");
        let crc = text.replace("crc32 = \"dead0001\"", "crc32 = \"xyz\"");
        let e = Manifest::parse(&crc).unwrap_err();
        assert_eq!(
            e.to_string(),
            "crc32 \"xyz\" of mobiles.bin is not hexadecimal"
        );
    }

    #[test]
    fn a_manifest_without_a_sequence_reads_as_sequence_0() {
        let text = sample().to_toml().replace("sequence = 41\n", "");
        assert_eq!(Manifest::parse(&text).unwrap().sequence, 0);
    }

    #[test]
    fn a_manifest_over_the_cap_is_refused_without_reading_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = sample().to_toml();
        std::fs::write(dir.path().join(FILE_NAME), &text).unwrap();
        assert_eq!(Manifest::read(dir.path()).unwrap(), sample());
        text.push_str(&"#".repeat(MAX_BYTES as usize));
        std::fs::write(dir.path().join(FILE_NAME), &text).unwrap();
        let e = Manifest::read(dir.path()).unwrap_err();
        assert!(matches!(e, ManifestError::TooLarge), "{e:?}");
        assert!(e.to_string().contains("65536-byte cap"), "{e}");
    }
}
