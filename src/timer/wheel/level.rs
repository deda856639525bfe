//! One level of the hierarchical wheel: 64 slots, each covering `64^level` ticks.
//!
//! A level stores *placements* — (slab index, stamp) pairs — not entries. Cancelling an entry
//! does not search its slot: the entry's stamp changes (or the entry goes away), which turns
//! its placement into garbage that is skipped, and dropped, the next time the slot is taken.
//! `live` counts the placements that still match their entry, so the occupancy bit is exact:
//! a slot whose every entry was cancelled is empty for [`Level::next_expiration`] at once.
//!
//! Invariants (for a level below the top, with `now` the wheel's elapsed tick):
//! - the slot holding `now` is never occupied: an entry is only placed on a level whose
//!   slot for it differs from `now`'s slot (see `level_for` in the wheel);
//! - so occupied slots are strictly later than `now`, and their order is time order;
//! - `min_due` of a slot is ≤ the due tick of every live entry in it (exact until a cancel).
//!
//! The top level is a ring: delays that cross a 64^7 boundary wrap into it, and a slot at or
//! behind `now`'s slot belongs to the next rotation.

/// log2 of the slots per level.
pub(super) const SLOT_BITS: u32 = 6;
/// Slots per level.
pub(super) const LEVEL_SLOTS: usize = 1 << SLOT_BITS;

/// Where an entry sits in a slot list. `stamp` is the entry's sequence number at the time it
/// was placed; any later reschedule gives the entry a new one, which orphans this placement.
#[derive(Clone, Copy, Debug)]
pub(super) struct Placement {
    pub(super) stamp: u64,
    pub(super) index: u32,
}

/// The next slot of a level that needs processing, and the tick at which it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Expiration {
    pub(super) level: usize,
    pub(super) slot: usize,
    /// The first tick covered by the slot: when it must be cascaded (or, on level 0, fired).
    pub(super) deadline: u64,
}

#[derive(Default)]
struct SlotList {
    placements: Vec<Placement>,
    live: u32,
    min_due: u64,
}

pub(super) struct Level {
    level: usize,
    /// Bit `i` set ⇔ slot `i` has at least one live placement.
    occupied: u64,
    slots: [SlotList; LEVEL_SLOTS],
}

/// Ticks covered by one slot of `level`.
pub(super) const fn slot_range(level: usize) -> u64 {
    1 << (SLOT_BITS as usize * level)
}

/// Ticks covered by the whole of `level`.
pub(super) const fn level_range(level: usize) -> u64 {
    1 << (SLOT_BITS as usize * (level + 1))
}

impl Level {
    pub(super) fn new(level: usize) -> Self {
        Level {
            level,
            occupied: 0,
            slots: std::array::from_fn(|_| SlotList {
                min_due: u64::MAX,
                ..SlotList::default()
            }),
        }
    }

    /// The slot of this level that covers tick `tick`.
    pub(super) fn slot_for(&self, tick: u64) -> usize {
        ((tick >> (SLOT_BITS as usize * self.level)) as usize) & (LEVEL_SLOTS - 1)
    }

    pub(super) fn add(&mut self, slot: usize, placement: Placement, due: u64) {
        let list = &mut self.slots[slot];
        list.placements.push(placement);
        list.live += 1;
        list.min_due = list.min_due.min(due);
        self.occupied |= 1 << slot;
    }

    /// One live placement of `slot` became garbage. Returns true when the slot has so much
    /// garbage that the caller should compact it (see [`Level::compact`]).
    pub(super) fn forget(&mut self, slot: usize) -> bool {
        let list = &mut self.slots[slot];
        list.live -= 1;
        if list.live == 0 {
            list.placements.clear();
            list.min_due = u64::MAX;
            self.occupied &= !(1 << slot);
            return false;
        }
        // Amortised O(1): compaction visits `len` placements and frees at least `len / 2`.
        list.placements.len() > 2 * list.live as usize + 16
    }

    /// Keeps only the placements `is_live` accepts.
    pub(super) fn compact(&mut self, slot: usize, is_live: impl FnMut(&Placement) -> bool) {
        self.slots[slot].placements.retain(is_live);
    }

    /// Moves every placement of `slot` into `out` (which must be empty) and empties the slot.
    /// Swapping keeps both allocations alive, so a steady wheel allocates nothing.
    pub(super) fn take(&mut self, slot: usize, out: &mut Vec<Placement>) {
        debug_assert!(out.is_empty());
        let list = &mut self.slots[slot];
        std::mem::swap(&mut list.placements, out);
        list.live = 0;
        list.min_due = u64::MAX;
        self.occupied &= !(1 << slot);
    }

    /// The first occupied slot after `now`'s, in time order, with the tick it starts at.
    pub(super) fn next_expiration(&self, now: u64) -> Option<Expiration> {
        if self.occupied == 0 {
            return None;
        }
        // Search from the slot after `now`'s and wrap: `now`'s own slot, if occupied at all
        // (top level only), holds the next rotation and so comes last.
        let start = (self.slot_for(now) + 1) % LEVEL_SLOTS;
        let distance = self.occupied.rotate_right(start as u32).trailing_zeros() as usize;
        let slot = (start + distance) % LEVEL_SLOTS;

        let level_start = now & !(level_range(self.level) - 1);
        let mut deadline = level_start + slot as u64 * slot_range(self.level);
        if deadline <= now {
            // Only the top level wraps (module invariants).
            deadline = deadline.saturating_add(level_range(self.level));
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
}
