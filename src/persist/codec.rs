//! Entity records: how one item, mobile or spawner is laid out in a save file, per version.
//!
//! Every integer is little-endian and fixed-width; a string is a `u16` byte length and UTF-8;
//! an optional serial is `u32` with 0 for "none" (0 is never a serial). A record has no
//! framing of its own: the file header says which type and which record version follow
//! (`super::file`), so each type can change its layout on its own.
//!
//! Versioning rule: the newest layout of each type is what [`encode_item`] and friends write;
//! the decoders keep one arm per version ever written, so a later build still reads an older
//! save. A version newer than this build knows is refused, never guessed at.
//!
//! Owns the byte layout only. Must never touch files, checksums or the `World`.

use std::fmt;

use crate::world::{Item, Location, MapId, Mobile, Serial, SpawnKind, Spawner};

/// The record version items are written in; the file header carries it.
pub const ITEM_VERSION: u16 = 1;
/// The record version mobiles are written in.
pub const MOBILE_VERSION: u16 = 1;
/// The record version spawners are written in.
pub const SPAWNER_VERSION: u16 = 1;

/// The fewest bytes one record of each type takes on disk, in the layouts this build reads.
/// A file of `n` record bytes cannot hold more than `n / MIN` records, so a count claiming
/// more is refused before anything is allocated for it (see `load`).
///
/// An item is fixed-size: serial 4, graphic, amount, hue 2 each, location 6, parent 4,
/// layer 1, flags 1.
pub const ITEM_RECORD_BYTES: usize = 22;
/// A mobile with an empty name: serial 4, name length 2, body and hue 2 each, location 6,
/// direction 1, seven stats 2 each, flags 1, spawner 4.
pub const MOBILE_MIN_RECORD_BYTES: usize = 36;
/// A spawner that spawned nothing: serial 4, home 6, range, max, interval 2 each, kind 1,
/// template 2, spawned count 4 (then 4 per spawned serial).
pub const SPAWNER_MIN_RECORD_BYTES: usize = 23;
/// Each serial in a spawner's spawned list.
pub const SPAWNED_SERIAL_BYTES: usize = 4;

/// Why bytes could not be read back as records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte offset in the record area where reading failed.
    pub offset: usize,
    /// What was wrong there, in words (`"the records end in the middle of a record"`).
    pub what: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {} of the records", self.what, self.offset)
    }
}

/// Appends little-endian fields to a buffer.
pub struct Writer<'a>(pub &'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn serial(&mut self, v: Option<Serial>) {
        self.u32(v.map_or(0, |s| s.0));
    }
    fn str(&mut self, v: &str) {
        // Names are bounded far below 64 KiB by the game; a longer one is cut at a char
        // boundary rather than written with a length that lies.
        let mut end = v.len().min(usize::from(u16::MAX));
        while !v.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.0.extend_from_slice(&v.as_bytes()[..end]);
    }
    fn location(&mut self, at: &Location) {
        self.u8(at.map.0);
        self.u16(at.x);
        self.u16(at.y);
        self.u8(at.z as u8);
    }
}

/// Reads fields back, remembering where it is for error messages.
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`, a file's record area.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// Everything was read.
    pub fn is_done(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// Bytes read so far: where the next field starts.
    pub fn offset(&self) -> usize {
        self.at
    }

    /// An error about the bytes at the current offset.
    pub fn error(&self, what: impl Into<String>) -> DecodeError {
        DecodeError {
            offset: self.at,
            what: what.into(),
        }
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let end = self.at + N;
        let bytes = self
            .bytes
            .get(self.at..end)
            .ok_or_else(|| self.error("the records end in the middle of a record"))?;
        self.at = end;
        Ok(bytes.try_into().expect("slice of length N"))
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take()?))
    }
    /// Reads a little-endian `u32` (a record count, a serial).
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn serial(&mut self) -> Result<Option<Serial>, DecodeError> {
        Ok(match self.u32()? {
            0 => None,
            s => Some(Serial(s)),
        })
    }
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn str(&mut self) -> Result<std::sync::Arc<str>, DecodeError> {
        let len = usize::from(self.u16()?);
        let start = self.at;
        let bytes = self
            .bytes
            .get(start..start + len)
            .ok_or_else(|| self.error("a string runs past the end of the records"))?;
        self.at += len;
        match std::str::from_utf8(bytes) {
            Ok(text) => Ok(text.into()),
            Err(_) => Err(DecodeError {
                offset: start,
                what: "a string is not valid UTF-8".into(),
            }),
        }
    }
    fn location(&mut self) -> Result<Location, DecodeError> {
        Ok(Location {
            map: MapId(self.u8()?),
            x: self.u16()?,
            y: self.u16()?,
            z: self.u8()? as i8,
        })
    }
}

// Item flags, one bit each.
const DECAYS: u8 = 1;
const MOVABLE: u8 = 2;
const VISIBLE: u8 = 4;
const CONTAINER: u8 = 8;

/// Writes `item` in layout [`ITEM_VERSION`] (22 bytes).
pub fn encode_item(item: &Item, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.u32(item.serial.0);
    w.u16(item.item_id);
    w.u16(item.amount);
    w.u16(item.hue);
    w.location(&item.location);
    w.serial(item.parent);
    w.u8(item.layer);
    w.u8(flag(item.decays, DECAYS)
        | flag(item.movable, MOVABLE)
        | flag(item.visible, VISIBLE)
        | flag(item.container, CONTAINER));
}

/// Reads one item written in layout `version`; a version newer than [`ITEM_VERSION`] is
/// refused, never guessed at.
pub fn decode_item(version: u16, r: &mut Reader<'_>) -> Result<Item, DecodeError> {
    match version {
        1 => {
            let serial = Serial(r.u32()?);
            let (item_id, amount, hue) = (r.u16()?, r.u16()?, r.u16()?);
            let location = r.location()?;
            let parent = r.serial()?;
            let layer = r.u8()?;
            let flags = r.u8()?;
            Ok(Item {
                serial,
                item_id,
                amount,
                hue,
                location,
                parent,
                layer,
                decays: flags & DECAYS != 0,
                movable: flags & MOVABLE != 0,
                visible: flags & VISIBLE != 0,
                container: flags & CONTAINER != 0,
            })
        }
        v => Err(newer(r, "item", v, ITEM_VERSION)),
    }
}

// Mobile flags.
const FEMALE: u8 = 1;
const NPC: u8 = 2;

/// Writes `mobile` in layout [`MOBILE_VERSION`].
pub fn encode_mobile(m: &Mobile, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.u32(m.serial.0);
    w.str(&m.name);
    w.u16(m.body);
    w.u16(m.hue);
    w.location(&m.location);
    w.u8(m.direction);
    for stat in [m.hits, m.hits_max, m.stam, m.mana, m.str, m.dex, m.int] {
        w.u16(stat);
    }
    w.u8(flag(m.female, FEMALE) | flag(m.is_npc, NPC));
    w.serial(m.spawner);
}

/// Reads one mobile written in layout `version`; a version newer than [`MOBILE_VERSION`]
/// is refused.
pub fn decode_mobile(version: u16, r: &mut Reader<'_>) -> Result<Mobile, DecodeError> {
    match version {
        1 => {
            let serial = Serial(r.u32()?);
            let name = r.str()?;
            let (body, hue) = (r.u16()?, r.u16()?);
            let location = r.location()?;
            let direction = r.u8()?;
            let mut stats = [0u16; 7];
            for stat in &mut stats {
                *stat = r.u16()?;
            }
            let [hits, hits_max, stam, mana, str, dex, int] = stats;
            let flags = r.u8()?;
            let spawner = r.serial()?;
            Ok(Mobile {
                serial,
                name,
                body,
                hue,
                location,
                direction,
                hits,
                hits_max,
                stam,
                mana,
                str,
                dex,
                int,
                female: flags & FEMALE != 0,
                is_npc: flags & NPC != 0,
                spawner,
            })
        }
        v => Err(newer(r, "mobile", v, MOBILE_VERSION)),
    }
}

const KIND_CREATURE: u8 = 0;
const KIND_ITEM: u8 = 1;

/// Writes `spawner` in layout [`SPAWNER_VERSION`].
pub fn encode_spawner(s: &Spawner, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.u32(s.serial.0);
    w.location(&s.home);
    w.u16(s.range);
    w.u16(s.max);
    w.u16(s.interval_minutes);
    let (kind, index) = match s.kind {
        SpawnKind::Creature(i) => (KIND_CREATURE, i),
        SpawnKind::Item(i) => (KIND_ITEM, i),
    };
    w.u8(kind);
    w.u16(index);
    w.u32(u32::try_from(s.spawned.len()).expect("fewer than 2^32 spawns"));
    for serial in &s.spawned {
        w.u32(serial.0);
    }
}

/// Reads one spawner written in layout `version`; a version newer than
/// [`SPAWNER_VERSION`] is refused.
pub fn decode_spawner(version: u16, r: &mut Reader<'_>) -> Result<Spawner, DecodeError> {
    match version {
        1 => {
            let serial = Serial(r.u32()?);
            let home = r.location()?;
            let (range, max, interval_minutes) = (r.u16()?, r.u16()?, r.u16()?);
            let kind = match (r.u8()?, r.u16()?) {
                (KIND_CREATURE, i) => SpawnKind::Creature(i),
                (KIND_ITEM, i) => SpawnKind::Item(i),
                (k, _) => return Err(r.error(format!("unknown spawn kind {k}"))),
            };
            let count = r.u32()? as usize;
            // The list is bounded by the bytes that are really there, not by its claim.
            if count > r.remaining() / SPAWNED_SERIAL_BYTES {
                return Err(r.error(format!(
                    "a spawned list claims {count} serials; only {} bytes are left",
                    r.remaining()
                )));
            }
            let mut spawned = Vec::with_capacity(count);
            for _ in 0..count {
                spawned.push(Serial(r.u32()?));
            }
            Ok(Spawner {
                serial,
                home,
                range,
                max,
                interval_minutes,
                kind,
                spawned,
            })
        }
        v => Err(newer(r, "spawner", v, SPAWNER_VERSION)),
    }
}

fn flag(set: bool, bit: u8) -> u8 {
    if set { bit } else { 0 }
}

fn newer(r: &Reader<'_>, what: &str, version: u16, known: u16) -> DecodeError {
    r.error(format!(
        "{what} records are version {version}; this build reads versions 1 to {known} \
         (the save was written by a newer shardloop)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item() -> Item {
        let mut item = Item::new(Serial(0x4000_0042), 0x0EED);
        item.amount = 500;
        item.hue = 0x0481;
        item.location = Location {
            map: MapId(1),
            x: 1234,
            y: 2345,
            z: -5,
        };
        item.parent = Some(Serial(7));
        item.layer = 0x15;
        item.decays = true;
        item.visible = false;
        item
    }

    #[test]
    fn an_item_survives_the_round_trip_in_22_bytes() {
        let mut bytes = Vec::new();
        encode_item(&item(), &mut bytes);
        assert_eq!(bytes.len(), 22);
        let mut r = Reader::new(&bytes);
        assert_eq!(decode_item(ITEM_VERSION, &mut r).unwrap(), item());
        assert!(r.is_done());
    }

    #[test]
    fn a_mobile_and_a_spawner_survive_the_round_trip() {
        let mut m = Mobile::new(Serial(9), "Grünwald the ünique", 0x190);
        m.stam = 77;
        m.is_npc = true;
        m.spawner = Some(Serial(0x4000_0001));
        let s = Spawner {
            serial: Serial(0x4000_0001),
            home: item().location,
            range: 8,
            max: 3,
            interval_minutes: 10,
            kind: SpawnKind::Item(4),
            spawned: vec![Serial(9), Serial(10)],
        };
        let mut bytes = Vec::new();
        encode_mobile(&m, &mut bytes);
        encode_spawner(&s, &mut bytes);
        let mut r = Reader::new(&bytes);
        assert_eq!(decode_mobile(MOBILE_VERSION, &mut r).unwrap(), m);
        assert_eq!(decode_spawner(SPAWNER_VERSION, &mut r).unwrap(), s);
        assert!(r.is_done());
    }

    #[test]
    fn the_smallest_records_take_the_minimum_sizes_named() {
        let mut bytes = Vec::new();
        encode_item(&Item::new(Serial(0x4000_0001), 1), &mut bytes);
        assert_eq!(bytes.len(), ITEM_RECORD_BYTES);
        bytes.clear();
        encode_mobile(&Mobile::new(Serial(1), "", 1), &mut bytes);
        assert_eq!(bytes.len(), MOBILE_MIN_RECORD_BYTES);
        bytes.clear();
        let mut s = Spawner {
            serial: Serial(0x4000_0001),
            home: Location::INTERNAL,
            range: 1,
            max: 1,
            interval_minutes: 5,
            kind: SpawnKind::Creature(0),
            spawned: Vec::new(),
        };
        encode_spawner(&s, &mut bytes);
        assert_eq!(bytes.len(), SPAWNER_MIN_RECORD_BYTES);
        bytes.clear();
        s.spawned = vec![Serial(9); 3];
        encode_spawner(&s, &mut bytes);
        assert_eq!(
            bytes.len(),
            SPAWNER_MIN_RECORD_BYTES + 3 * SPAWNED_SERIAL_BYTES
        );
    }

    #[test]
    fn a_spawned_list_longer_than_the_bytes_left_is_refused_before_allocating() {
        let s = Spawner {
            serial: Serial(0x4000_0001),
            home: Location::INTERNAL,
            range: 1,
            max: 1,
            interval_minutes: 5,
            kind: SpawnKind::Item(0),
            spawned: vec![Serial(9)],
        };
        let mut bytes = Vec::new();
        encode_spawner(&s, &mut bytes);
        let count_at = SPAWNER_MIN_RECORD_BYTES - 4;
        bytes[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = decode_spawner(SPAWNER_VERSION, &mut Reader::new(&bytes)).unwrap_err();
        assert!(e.what.contains("claims 4294967295 serials"), "{e}");
    }

    #[test]
    fn truncated_records_and_newer_versions_are_refused_with_the_offset() {
        let mut bytes = Vec::new();
        encode_item(&item(), &mut bytes);
        let e = decode_item(ITEM_VERSION, &mut Reader::new(&bytes[..10])).unwrap_err();
        assert!(e.what.contains("middle of a record"), "{e}");
        assert_eq!(e.offset, 10);
        let e = decode_item(2, &mut Reader::new(&bytes)).unwrap_err();
        assert!(e.to_string().contains("version 2"), "{e}");
    }

    #[test]
    fn bad_utf8_in_a_name_is_refused() {
        let mut m = Vec::new();
        encode_mobile(&Mobile::new(Serial(1), "ab", 1), &mut m);
        m[6] = 0xFF; // the first byte of the name (after serial and length)
        let e = decode_mobile(MOBILE_VERSION, &mut Reader::new(&m)).unwrap_err();
        assert!(e.what.contains("UTF-8"), "{e}");
    }
}
