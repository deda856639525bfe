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

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;

use jiff::Timestamp;

use super::file::{Kind, Written};
use crate::world::Serial;

pub const FILE_NAME: &str = "manifest.toml";
/// The save format as a whole (directory layout and manifest keys).
pub const SAVE_FORMAT: u32 = 1;
/// The largest manifest read: a real one is about 600 bytes, so 64 KiB leaves room for any
/// comments an operator adds and none for a file meant to exhaust memory.
pub const MAX_BYTES: u64 = 64 * 1024;

/// Everything a manifest records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub format: u32,
    /// When the snapshot was taken.
    pub created: Timestamp,
    /// One more than the save this one replaced: what crash recovery orders saves by (never
    /// the clock, which can step backwards). Optional in the file (added after format 1
    /// shipped): a manifest without it reads as 0.
    pub sequence: u64,
    /// The shardloop version that wrote it (informational).
    pub writer: String,
    pub seed: u64,
    pub next_item_serial: Serial,
    pub next_mobile_serial: Serial,
    pub items: u64,
    pub mobiles: u64,
    pub spawners: u64,
    /// One entry per [`Kind`], in [`Kind::ALL`] order.
    pub files: Vec<(Kind, Written)>,
}

impl Manifest {
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
    pub fn read(dir: &Path) -> Result<Manifest, String> {
        let cannot = |e: std::io::Error| format!("cannot read it: {e}");
        let file = std::fs::File::open(dir.join(FILE_NAME)).map_err(cannot)?;
        let mut text = String::new();
        file.take(MAX_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(cannot)?;
        if text.len() as u64 > MAX_BYTES {
            return Err(format!(
                "larger than the {MAX_BYTES}-byte cap for a manifest (a real one is under 1 KiB)"
            ));
        }
        Manifest::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Manifest, String> {
        let doc: toml::Table = text.parse().map_err(|e| format!("not valid TOML: {e}"))?;
        let format = int(&doc, "format")? as u32;
        if format != SAVE_FORMAT {
            return Err(format!(
                "save format {format}; this build reads format {SAVE_FORMAT}"
            ));
        }
        let created = string(&doc, "created")?
            .parse::<Timestamp>()
            .map_err(|e| format!("`created` is not a timestamp: {e}"))?;
        let seed = string(&doc, "seed")?;
        let seed = u64::from_str_radix(seed.trim_start_matches("0x"), 16)
            .map_err(|_| format!("`seed` {seed:?} is not a hexadecimal number"))?;
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
            let crc32 = u32::from_str_radix(crc, 16)
                .map_err(|_| format!("crc32 {crc:?} of {} is not hexadecimal", kind.file_name()))?;
            let written = Written {
                bytes: int(entry, "bytes")?,
                crc32,
            };
            manifest.files.push((kind, written));
        }
        Ok(manifest)
    }
}

fn field<'a>(t: &'a toml::Table, key: &str) -> Result<&'a toml::Value, String> {
    t.get(key).ok_or_else(|| format!("`{key}` is missing"))
}

fn int(t: &toml::Table, key: &str) -> Result<u64, String> {
    match field(t, key)? {
        toml::Value::Integer(i) if *i >= 0 => Ok(*i as u64),
        v => Err(format!("`{key}` = {v} is not a count")),
    }
}

fn u32_field(t: &toml::Table, key: &str) -> Result<u32, String> {
    let v = int(t, key)?;
    u32::try_from(v).map_err(|_| format!("`{key}` = {v} is out of range"))
}

fn string<'a>(t: &'a toml::Table, key: &str) -> Result<&'a str, String> {
    field(t, key)?
        .as_str()
        .ok_or_else(|| format!("`{key}` is not a string"))
}

fn table<'a>(t: &'a toml::Table, key: &str) -> Result<&'a toml::Table, String> {
    field(t, key)?
        .as_table()
        .ok_or_else(|| format!("`[{key}]` is not a table"))
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
        assert!(
            Manifest::parse(cut)
                .unwrap_err()
                .contains("`files` is missing")
        );
        let newer = text.replace("format = 1", "format = 7");
        assert!(Manifest::parse(&newer).unwrap_err().contains("format 7"));
        assert!(Manifest::parse("created = ").unwrap_err().contains("TOML"));
        let negative = text.replace("sequence = 41", "sequence = -1");
        let e = Manifest::parse(&negative).unwrap_err();
        assert!(e.contains("`sequence` = -1 is not a count"), "{e}");
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
        assert!(e.contains("65536-byte cap"), "{e}");
    }
}
