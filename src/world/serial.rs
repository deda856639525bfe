//! Serials: the 32-bit identity of every entity, split into a mobile range and an item range
//! as in Ultima Online, and the allocators that hand them out.
//!
//! Owns the numbering only. Must never know what an entity is made of, nor how serials are
//! stored on disk or sent on the wire.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// The identity of an entity. Mobiles use `0x0000_0001..=0x3FFF_FFFF`, items
/// `0x4000_0000..=0x7FFF_FFFF`; 0 and the top half are never issued.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Serial(pub u32);

impl Serial {
    /// The first mobile serial.
    pub const MOBILE_MIN: Serial = Serial(0x0000_0001);
    /// The last mobile serial.
    pub const MOBILE_MAX: Serial = Serial(0x3FFF_FFFF);
    /// The first item serial.
    pub const ITEM_MIN: Serial = Serial(0x4000_0000);
    /// The last item serial.
    pub const ITEM_MAX: Serial = Serial(0x7FFF_FFFF);

    /// In the mobile range.
    pub fn is_mobile(self) -> bool {
        (Self::MOBILE_MIN.0..=Self::MOBILE_MAX.0).contains(&self.0)
    }

    /// In the item range.
    pub fn is_item(self) -> bool {
        (Self::ITEM_MIN.0..=Self::ITEM_MAX.0).contains(&self.0)
    }

    /// A mobile or an item serial (not 0, not the top half).
    pub fn is_valid(self) -> bool {
        self.is_mobile() || self.is_item()
    }
}

impl fmt::Display for Serial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:08X}", self.0)
    }
}

/// Hands out serials of one range in increasing order, wrapping at the end of the range and
/// skipping serials still in use (the scheme of the C# shard).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SerialAllocator {
    next: u32,
    min: u32,
    max: u32,
}

impl SerialAllocator {
    /// The allocator of mobile serials, starting at [`Serial::MOBILE_MIN`].
    pub fn mobiles() -> SerialAllocator {
        Self::over(Serial::MOBILE_MIN, Serial::MOBILE_MAX)
    }

    /// The allocator of item serials, starting at [`Serial::ITEM_MIN`].
    pub fn items() -> SerialAllocator {
        Self::over(Serial::ITEM_MIN, Serial::ITEM_MAX)
    }

    fn over(min: Serial, max: Serial) -> SerialAllocator {
        SerialAllocator {
            next: min.0,
            min: min.0,
            max: max.0,
        }
    }

    /// The serial the next call to [`allocate`](Self::allocate) tries first.
    pub fn peek(&self) -> Serial {
        Serial(self.next)
    }

    /// Continues after `last` (after loading a save: the highest serial in use).
    pub fn resume_after(&mut self, last: Serial) {
        if (self.min..=self.max).contains(&last.0) {
            self.next = self.successor(last.0);
        }
    }

    /// Makes `next` the serial tried first (ignored outside the range).
    pub fn resume_at(&mut self, next: Serial) {
        if (self.min..=self.max).contains(&next.0) {
            self.next = next.0;
        }
    }

    /// The next serial for which `in_use` is false; `None` only if the whole range is in use.
    pub fn allocate(&mut self, in_use: impl Fn(Serial) -> bool) -> Option<Serial> {
        let start = self.next;
        loop {
            let candidate = self.next;
            self.next = self.successor(candidate);
            if !in_use(Serial(candidate)) {
                return Some(Serial(candidate));
            }
            if self.next == start {
                return None;
            }
        }
    }

    fn successor(&self, serial: u32) -> u32 {
        if serial >= self.max {
            self.min
        } else {
            serial + 1
        }
    }
}

/// A hasher for 32-bit ids (serials, sector ids): one multiplication. Serials are mostly
/// sequential, and `x · odd` keeps sequential keys distinct in the low bits that pick a
/// bucket while mixing the high bits the table uses as tags. Fixed, so iteration order
/// depends only on what was inserted (determinism).
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A `HashMap` keyed by ids, with [`IdHasher`].
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
