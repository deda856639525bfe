//! One level of the hierarchical wheel: a ring of slots, each covering a fixed power-of-two
//! number of ticks.
//!
//! Level 0 has 4096 slots of one tick; every level above has 64 slots, each covering a whole
//! turn of the level below (see [`Level::new`] and the wheel's module docs).
//!
//! A level stores *placements* — (slab index, stamp, low bits of the due tick) — not entries. A
//! placement in a slot is *current* while the wheel's dense stamp array still holds its stamp
//! at its index; cancelling or moving an entry changes that stamp, which turns the placement
//! into garbage that is skipped, and dropped, the next time the slot is taken or compacted.
//! Because (the low 32 bits of) the due tick travel with the placement, taking a slot reads only
//! the placements and the small stamp array, never the entries themselves — except on the top
//! level, whose 2^36-tick slots need the full due tick from the entry (once per 2^36 ticks).
//!
//! `live` counts the current placements of a slot, so the occupancy bit is exact: a slot whose
//! every entry was cancelled is empty for [`Level::next_expiration`] at once.
//!
//! Invariants (for a level below the top, with `now` the wheel's elapsed tick):
//! - the slot holding `now` is never occupied: an entry is only placed on a level whose
//!   slot for it differs from `now`'s slot (see `level_for` in the wheel);
//! - so occupied slots are strictly later than `now`, and their order is time order;
//! - `min_due` of a slot is ≤ the due tick of every live entry in it (exact until a cancel);
//! - a slot with no live placement holds no placement at all (its list is cleared when `live`
//!   drops to 0), so every non-empty list is occupied and gets taken before `now` passes it.
//!
//! The top level is a ring: delays that cross a boundary of its range wrap into it, and a slot
//! at or behind `now`'s slot belongs to the next rotation.
//!
//! **Two-level occupancy bitmap.** Bit `i % 64` of `occupied[i / 64]` is set ⇔ slot `i` has a
//! live placement, and bit `w` of `summary` is set ⇔ `occupied[w] != 0`. Finding the first
//! occupied slot from a position is then two `trailing_zeros`, whatever the number of slots
//! (a 64-slot level has one word, and `summary` is just "is that word non-zero").

/// log2 of the slots of level 0.
pub(super) const LEVEL0_BITS: u32 = 12;
/// log2 of the slots of every level above 0.
pub(super) const UPPER_BITS: u32 = 6;

/// How far ahead of the placement being processed a loop over a slot list prefetches the
/// stamps (or entries) it is about to check.
pub(super) const PREFETCH_AHEAD: usize = 16;

/// Where an entry sits in a slot list (16 bytes). `stamp` is the entry's sequence number at
/// the time it was placed; any later reschedule gives the entry a new one, which orphans this
/// placement. `due_low` is the low 32 bits of the entry's due tick, so that a cascade can
/// re-place it without reading the entry (see [`Placement::due_in`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Placement {
    pub(super) stamp: u64,
    pub(super) index: u32,
    due_low: u32,
}

impl Placement {
    #[inline]
    pub(super) fn new(stamp: u64, index: u32, due: u64) -> Self {
        Placement {
            stamp,
            index,
            due_low: due as u32,
        }
    }

    /// The full due tick, for a placement taken from a slot that starts at `deadline` and
    /// covers `slot_range` ticks: the due tick is in `deadline .. deadline + slot_range`, so
    /// its offset from `deadline` is the wrapping difference of the low 32 bits — when the slot
    /// is narrower than 2^32 ticks. `None` for wider slots (top level only).
    #[inline]
    pub(super) fn due_in(&self, deadline: u64, slot_range: u64) -> Option<u64> {
        (slot_range <= 1 << 32)
            .then(|| deadline + u64::from(self.due_low.wrapping_sub(deadline as u32)))
    }
}

/// The next slot of a level that needs processing, and the tick at which it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Expiration {
    pub(super) level: usize,
    pub(super) slot: usize,
    /// The first tick covered by the slot: when it must be cascaded (or, on level 0, fired).
    pub(super) deadline: u64,
}

struct SlotList {
    placements: Vec<Placement>,
    live: u32,
    min_due: u64,
}

pub(super) struct Level {
    level: usize,
    /// log2 of the ticks one slot covers.
    shift: u32,
    /// log2 of the number of slots.
    bits: u32,
    /// Occupancy bitmap, one bit per slot (module docs).
    occupied: Box<[u64]>,
    /// Bit `w` set ⇔ `occupied[w] != 0`.
    summary: u64,
    slots: Box<[SlotList]>,
    /// An empty list with room (or none yet), handed to the next slot that starts filling
    /// with none of its own (see [`Level::take`]).
    spare: Vec<Placement>,
}

/// True when the placement is still its entry's current one. `stamps` is indexed by slab index
/// and holds the stamp of each entry's latest placement (see the wheel's module docs).
#[inline]
pub(super) fn is_current(stamps: &[u64], p: &Placement) -> bool {
    stamps.get(p.index as usize) == Some(&p.stamp)
}

/// Starts loading the stamp of slab index `index` into cache (a hint; see [`crate::slab`]).
#[inline]
pub(super) fn prefetch_stamp(stamps: &[u64], index: u32) {
    if let Some(stamp) = stamps.get(index as usize) {
        crate::slab::prefetch(stamp);
    }
}

impl Level {
    /// Level `level` of the wheel: level 0 has `2^LEVEL0_BITS` one-tick slots; level `L ≥ 1`
    /// has `2^UPPER_BITS` slots of `2^(LEVEL0_BITS + UPPER_BITS·(L−1))` ticks.
    pub(super) fn new(level: usize) -> Self {
        let (shift, bits) = match level {
            0 => (0, LEVEL0_BITS),
            _ => (LEVEL0_BITS + UPPER_BITS * (level as u32 - 1), UPPER_BITS),
        };
        let slots = 1usize << bits;
        Level {
            level,
            shift,
            bits,
            occupied: vec![0; slots.div_ceil(64)].into_boxed_slice(),
            summary: 0,
            slots: (0..slots)
                .map(|_| SlotList {
                    placements: Vec::new(),
                    live: 0,
                    min_due: u64::MAX,
                })
                .collect(),
            spare: Vec::new(),
        }
    }

    /// Ticks covered by one slot.
    pub(super) fn slot_range(&self) -> u64 {
        1 << self.shift
    }

    /// Ticks covered by the whole level (one turn of the ring).
    fn level_range(&self) -> u64 {
        1 << (self.shift + self.bits)
    }

    /// The slot of this level that covers tick `tick`.
    #[inline]
    pub(super) fn slot_for(&self, tick: u64) -> usize {
        ((tick >> self.shift) as usize) & (self.slots.len() - 1)
    }

    #[inline]
    fn mark(&mut self, slot: usize) {
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.summary |= 1 << (slot / 64);
    }

    #[inline]
    fn unmark(&mut self, slot: usize) {
        let word = &mut self.occupied[slot / 64];
        *word &= !(1 << (slot % 64));
        if *word == 0 {
            self.summary &= !(1 << (slot / 64));
        }
    }

    /// Appends a current placement, due at `due`, to `slot`'s list.
    #[inline]
    pub(super) fn add(&mut self, slot: usize, placement: Placement, due: u64) {
        if self.slots[slot].placements.capacity() == 0 {
            self.lend_spare(slot);
        }
        let list = &mut self.slots[slot];
        list.min_due = list.min_due.min(due);
        list.live += 1;
        list.placements.push(placement);
        self.mark(slot);
    }

    /// Gives `slot`, which has no buffer, the spare (see [`Level::take`]): once per slot that
    /// starts filling, kept off the inlined insert path.
    #[cold]
    #[inline(never)]
    fn lend_spare(&mut self, slot: usize) {
        self.slots[slot].placements = std::mem::take(&mut self.spare);
    }

    /// One live placement of `slot` became garbage. Returns true when the slot has so much
    /// garbage that the caller should compact it (see [`Level::compact`]).
    #[inline]
    pub(super) fn forget(&mut self, slot: usize) -> bool {
        let list = &mut self.slots[slot];
        list.live -= 1;
        if list.live == 0 {
            list.placements.clear();
            list.min_due = u64::MAX;
            self.unmark(slot);
            return false;
        }
        // Amortised O(1): compaction visits `len` placements and frees at least `len / 2`.
        list.placements.len() > 2 * list.live as usize + 16
    }

    /// Keeps only the current placements of `slot`: those whose stamp `stamps` still holds.
    pub(super) fn compact(&mut self, slot: usize, stamps: &[u64]) {
        let list = &mut self.slots[slot].placements;
        let mut kept = 0;
        for i in 0..list.len() {
            if let Some(ahead) = list.get(i + PREFETCH_AHEAD) {
                prefetch_stamp(stamps, ahead.index);
            }
            let p = list[i];
            if is_current(stamps, &p) {
                list[kept] = p;
                kept += 1;
            }
        }
        list.truncate(kept);
        debug_assert_eq!(kept, self.slots[slot].live as usize);
    }

    /// Moves every placement of `slot` into `out` (which must be empty) and empties the slot.
    ///
    /// `out`'s old buffer goes to the level's spare if the spare has none, else to the slot
    /// (which keeps it for the next time it fills). The next slot to start filling with no
    /// buffer of its own — on level 0 typically the next tick's, while this tick's tasks
    /// pause again — takes the spare ([`Level::add`]) instead of growing a list from nothing.
    /// So a steady wheel allocates nothing, whether its slots fill once per turn of the ring
    /// or one after another, tick by tick.
    pub(super) fn take(&mut self, slot: usize, out: &mut Vec<Placement>) {
        debug_assert!(out.is_empty());
        let list = &mut self.slots[slot];
        let old = std::mem::replace(out, std::mem::take(&mut list.placements));
        if self.spare.capacity() == 0 {
            self.spare = old;
        } else {
            list.placements = old;
        }
        list.live = 0;
        list.min_due = u64::MAX;
        self.unmark(slot);
    }

    /// The first occupied slot at or after `from` (no wrap), from the two-level bitmap.
    fn first_occupied_from(&self, from: usize) -> Option<usize> {
        let word = from / 64;
        let here = *self.occupied.get(word)? & (u64::MAX << (from % 64));
        if here != 0 {
            return Some(word * 64 + here.trailing_zeros() as usize);
        }
        // Words strictly after `word`: `checked_shl` covers `word == 63`.
        let later = self.summary & u64::MAX.checked_shl(word as u32 + 1).unwrap_or(0);
        if later == 0 {
            return None;
        }
        let word = later.trailing_zeros() as usize;
        Some(word * 64 + self.occupied[word].trailing_zeros() as usize)
    }

    /// The first occupied slot after `now`'s, in time order, with the tick it starts at.
    pub(super) fn next_expiration(&self, now: u64) -> Option<Expiration> {
        if self.summary == 0 {
            return None;
        }
        // Search from the slot after `now`'s and wrap: `now`'s own slot, if occupied at all
        // (top level only), holds the next rotation and so comes last.
        let slot = self
            .first_occupied_from(self.slot_for(now) + 1)
            .or_else(|| self.first_occupied_from(0))?;

        let level_start = now & !(self.level_range() - 1);
        let mut deadline = level_start + slot as u64 * self.slot_range();
        if deadline <= now {
            // Only the top level wraps (module invariants).
            deadline = deadline.saturating_add(self.level_range());
        }
        Some(Expiration {
            level: self.level,
            slot,
            deadline,
        })
    }

    /// A lower bound of the due ticks in `slot` (exact unless an entry was cancelled).
    pub(super) fn min_due(&self, slot: usize) -> u64 {
        self.slots[slot].min_due
    }

    #[cfg(test)]
    pub(super) fn placements(&self, slot: usize) -> usize {
        self.slots[slot].placements.len()
    }

    /// The number of current placements in `slot`.
    #[cfg(test)]
    pub(super) fn live(&self, slot: usize) -> usize {
        self.slots[slot].live as usize
    }
}
