//! The hierarchical timing wheel: a pure data structure, counted in ticks.
//!
//! The wheel knows nothing of clocks, tokio or callbacks. It is told "advance to tick N" and
//! hands back, one at a time, the entries whose due tick has come. The runtime turns instants
//! into ticks and runs what comes out.
//!
//! # Layout
//!
//! Six levels (`wheel/level.rs`). Level 0 has 4096 slots of one tick; levels 1 to 5 have 64
//! slots, a slot of level `L` covering `2^(12 + 6·(L−1))` ticks: 4096 ticks on level 1, 2^36
//! on level 5. The whole wheel spans 2^42 ticks (~1 115 years at 8 ms). Read a tick as a
//! 12-bit digit (level 0) under 6-bit digits (levels 1–5): an entry due at tick `due` is
//! placed on the level of the highest digit in which `due` differs from `elapsed` (see
//! `level_for`). When `elapsed` reaches the first tick of an upper slot, the slot is
//! *cascaded*: each entry is placed again, relative to the new `elapsed`, and so lands on a
//! lower level, eventually level 0, where a slot holds exactly one due tick. A wide level 0
//! means that every delay under 4096 ticks (~33 s at 8 ms) goes straight to its tick and is
//! never cascaded.
//!
//! Levels are disjoint in time: everything on level `L` is due inside `elapsed`'s current
//! level-`L+1` block, and everything above it later, so the first occupied slot of the lowest
//! non-empty level is always the next thing to process. (The top level's ring keeps this:
//! what wraps into it is due in a later rotation.)
//!
//! # Storage and stamps
//!
//! Entries (value, due tick, stamp) live in a generational slab (`src/slab.rs`); slot lists hold
//! 16-byte *placements* (slab index, stamp, low 32 bits of the due tick). Every insert or
//! reschedule takes the next *stamp* (multiples of 4, plus bit 1, `TOLERANT`, for a tolerant
//! entry; bit 0, `FIRED`, marks a yielded entry).
//! Cancellation is lazy: a placement whose stamp is no longer its entry's is garbage, skipped
//! when its slot is taken. Two checks, so that neither hot path reads memory it does not need:
//!
//! - **Slot placements** are checked against `stamps`, a dense `u64` per slab index holding
//!   the stamp of that index's latest placement (`VACANT` once an entry that sat in a slot is
//!   removed). A cascade reads the placements and this small array, never the 4× larger slab.
//! - **Batch placements** (the tick being yielded) are checked against the entry's own stamp
//!   in the slab, which [`Wheel::poll`] reads anyway to build the key and mark it fired; so a
//!   fired timer costs one random slab access, shared with the caller's `remove`.
//!
//! **Where an entry is.** An entry is in a slot iff `due > elapsed`, and then in the slot
//! `(level_for(elapsed, due), slot_for(due))`: that is where it was placed, and neither
//! changes until `elapsed` reaches the slot's first tick — at which point the slot is
//! cascaded. So cancel and reschedule find the slot whose live count to decrement from `due`
//! alone. Otherwise (`due ≤ elapsed`) the entry is in the batch or already fired, and its
//! batch placement is orphaned by the slab stamp alone.
//!
//! # Tolerant entries
//!
//! An entry inserted with [`Wheel::insert_tolerant`] is due at tick `due` but may be yielded as
//! late as tick `latest`. It sits in a slot at `latest` (so, to the slots and to
//! [`Wheel::next_due`], it is an entry due at `latest`), and is also listed in `early`, ordered
//! by (due, stamp), and in `windows` (slab index → due tick). Its stamp carries `TOLERANT`, so
//! that plain entries never look either up, and an entry stays the same size.
//!
//! A tick is an *anchor* when a slot yields something at it: a plain entry's due tick, or a
//! tolerant entry's latest one. At each anchor `a`, every tolerant entry with `due ≤ a` is
//! pulled out of `early` and `windows` (its slot placement orphaned, its `due` field set to
//! `a`) and yielded at `a`, merged with the tick's own entries in (due, stamp) order. So a
//! tolerant entry is never yielded before its due tick, never after its latest one, and only
//! at ticks the wheel yields at anyway: what it yields, and when, depends on the entries and
//! on nothing else (not on how often or how far [`Wheel::poll`] is called).
//!
//! # Guarantees
//!
//! - **Never early (T1).** Only level-0 slots fire, and a level-0 slot holds exactly the
//!   entries due at that tick. Upper levels only ever move entries *down*; the cascade point
//!   is the start of the slot, never its end, so there is no "one upper resolution early"
//!   case (the bug of the C# wheel, which fired an entry whose delay was an exact multiple of
//!   an upper ring's resolution one resolution too soon).
//!   A tolerant entry is yielded at an anchor at or after its due tick (above).
//! - **Order (T2).** Every insert or reschedule takes the next sequence number (its *stamp*)
//!   and is pushed at the back of its slot list, so every list is in stamp order. A cascade
//!   empties one slot, in order, into lower slots that are empty at that moment (they cover
//!   the block that is only now starting), so lists stay in stamp order and the entries of
//!   one tick come out FIFO — cascaded or not — with no sorting. (An anchor that pulls
//!   tolerant entries sorts its batch by (due, stamp): only then.)
//! - **No same-tick re-entry (T4).** Before a tick's entries are yielded, `elapsed` moves to
//!   that tick, and an insert is never due before `elapsed + 1`.
//! - **Range (T8).** Delays up to [`MAX_DELAY`] ticks are exact; longer ones saturate.
//! - **Cost.** Insert and remove are O(1) (amortised: a slot is compacted when over half
//!   of it is garbage). Finding the next due tick and skipping empty ranges are O(levels)
//!   thanks to one occupancy bitmap per level (two-level on level 0): no empty tick is visited.
//!
//! This module must never depend on time, I/O or the runtime.

mod level;

pub use crate::slab::Key;
use std::collections::{BTreeSet, HashMap};

use crate::slab::Slab;
use level::{
    Expiration, LEVEL0_BITS, Level, PREFETCH_AHEAD, Placement, UPPER_BITS, is_current,
    prefetch_stamp,
};

/// Number of levels: level 0 and five 64-slot levels above it.
const NUM_LEVELS: usize = 6;

/// The longest delay the wheel represents exactly, in ticks (2^42 − 1). Longer delays are
/// saturated to it.
pub const MAX_DELAY: u64 = (1 << (LEVEL0_BITS + UPPER_BITS * (NUM_LEVELS as u32 - 1))) - 1;

/// Stamps are even; a stamp with this bit set marks its entry as yielded (fired), so no
/// placement, whose stamp is even, matches it any more.
const FIRED: u64 = 1;
/// Set in the stamps of tolerant entries (module docs, "Tolerant entries").
const TOLERANT: u64 = 2;
/// Stamps count in steps of this, leaving the two flag bits free.
const STAMP_STEP: u64 = 4;
/// The stamp of a vacant slab index: odd, so no placement ever matches it.
const VACANT: u64 = u64::MAX;

struct Entry<T> {
    value: T,
    /// The tick the entry's slot placement is for: its due tick, or a tolerant entry's latest
    /// tick (the anchor's once it was pulled into a batch; its due tick is in `windows`
    /// until then).
    due: u64,
    /// The stamp of the latest insert or reschedule, `| FIRED` once yielded.
    stamp: u64,
}

/// An entry [`Wheel::poll`] found due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    /// The entry's key, as [`Wheel::insert`] returned it.
    pub key: Key,
    /// The tick being processed: the entry's due tick, or for a tolerant entry an anchor at
    /// or after it (module docs); at or before the `now` it was polled with.
    pub tick: u64,
}

/// A hierarchical timing wheel holding values of type `T`.
pub struct Wheel<T> {
    /// The last tick processed: every entry due at or before it has been yielded or is in
    /// `batch`.
    elapsed: u64,
    levels: Box<[Level; NUM_LEVELS]>,
    slab: Slab<Entry<T>>,
    /// By slab index: the stamp of the entry's latest placement, or `VACANT` once an entry
    /// that was in a slot is removed. Always as long as the slab's entry vector. Only slot
    /// placements are checked against it (module docs, "Storage and stamps").
    stamps: Vec<u64>,
    next_stamp: u64,
    /// The placements of tick `elapsed` still to be yielded, in order (garbage included, it is
    /// skipped); `batch_pos` is the cursor.
    batch: Vec<Placement>,
    batch_pos: usize,
    /// Spare buffer swapped with slot lists while they are processed.
    scratch: Vec<Placement>,
    /// Tolerant entries not yet pulled into a batch: (due tick, stamp, slab index), so in the
    /// order they are yielded in (module docs, "Tolerant entries").
    early: BTreeSet<(u64, u64, u32)>,
    /// The due tick of each tolerant entry in `early`, by slab index.
    windows: HashMap<u32, u64>,
    /// No slot expires before this tick: set to the next expiration by a poll that found
    /// nothing more to process, and lowered to the slot's first tick by every placement since
    /// (a removal only makes it more cautious). A poll up to an earlier tick with the batch
    /// drained has nothing to do, and skips the scan of the six levels — on a loop woken by
    /// a post, a packet or a task wake between ticks, those are cold lines read for nothing.
    quiet_until: u64,
}

impl<T> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Wheel<T> {
    /// An empty wheel at tick 0. Tick 0 counts as processed: the earliest due tick is 1.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty wheel at tick 0 with room for `capacity` live entries before its entry storage
    /// reallocates (slot lists still grow on demand).
    pub fn with_capacity(capacity: usize) -> Self {
        Wheel {
            elapsed: 0,
            levels: Box::new(std::array::from_fn(Level::new)),
            slab: Slab::with_capacity(capacity),
            stamps: Vec::with_capacity(capacity),
            next_stamp: 0,
            batch: Vec::new(),
            batch_pos: 0,
            scratch: Vec::new(),
            early: BTreeSet::new(),
            windows: HashMap::new(),
            quiet_until: 0,
        }
    }

    /// The last tick processed.
    #[must_use]
    pub fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Number of live entries (scheduled, due, or fired and not yet removed).
    #[must_use]
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// No entry is live (none waiting, none fired and kept).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tick an entry will be due at: `due` clamped to `elapsed + 1 ..= elapsed + MAX_DELAY`.
    #[must_use]
    #[inline]
    pub fn clamp_due(&self, due: u64) -> u64 {
        due.clamp(
            self.elapsed.saturating_add(1),
            self.elapsed.saturating_add(MAX_DELAY),
        )
    }

    /// Schedules `value` for tick `due` (clamped, see [`Wheel::clamp_due`]).
    pub fn insert(&mut self, due: u64, value: T) -> Key {
        self.insert_tolerant(due, due, value)
    }

    /// Schedules `value` for tick `due`, to be yielded at the first anchor in `due..=latest`
    /// (module docs, "Tolerant entries"); both clamped, and `latest` at least `due`. With
    /// `latest == due` this is [`Wheel::insert`].
    pub fn insert_tolerant(&mut self, due: u64, latest: u64, value: T) -> Key {
        let (earliest, due) = self.clamp_window(due, latest);
        let stamp = self.take_stamp(earliest < due);
        let key = self.slab.insert(Entry { value, due, stamp });
        let index = key.index();
        match self.stamps.get_mut(index as usize) {
            Some(slot) => *slot = stamp,
            None => {
                debug_assert_eq!(index as usize, self.stamps.len(), "stamps track the slab");
                self.stamps.push(stamp);
            }
        }
        self.place(Placement::new(stamp, index, due), due);
        self.list_early(earliest, stamp, index);
        key
    }

    /// Moves a live entry — scheduled, due or already fired — to tick `due` (clamped). It
    /// goes to the back of that tick's FIFO order, as a fresh insert would. Returns false for
    /// a stale key.
    pub fn reschedule(&mut self, key: Key, due: u64) -> bool {
        self.reschedule_tolerant(key, due, due)
    }

    /// [`Wheel::reschedule`] to the window `due..=latest`, as [`Wheel::insert_tolerant`]
    /// would place it.
    pub fn reschedule_tolerant(&mut self, key: Key, due: u64, latest: u64) -> bool {
        let (earliest, due) = self.clamp_window(due, latest);
        let stamp = self.take_stamp(earliest < due);
        let Some(entry) = self.slab.get_mut(key) else {
            return false;
        };
        let old_due = std::mem::replace(&mut entry.due, due);
        let old_stamp = std::mem::replace(&mut entry.stamp, stamp);
        let index = key.index();
        self.unlist_early(old_stamp, index);
        // The new stamp orphans the old placement before its slot is told (and compacted).
        self.stamps[index as usize] = stamp;
        self.detach(old_due);
        self.place(Placement::new(stamp, index, due), due);
        self.list_early(earliest, stamp, index);
        true
    }

    /// Lists a tolerant entry (`earliest < due`, so its stamp has `TOLERANT`) in `early`.
    #[inline]
    fn list_early(&mut self, earliest: u64, stamp: u64, index: u32) {
        if stamp & TOLERANT != 0 {
            self.early.insert((earliest, stamp, index));
            self.windows.insert(index, earliest);
        }
    }

    /// Takes an entry out of `early`, if it is a tolerant one still listed there.
    #[inline]
    fn unlist_early(&mut self, stamp: u64, index: u32) {
        if stamp & TOLERANT != 0
            && let Some(earliest) = self.windows.remove(&index)
        {
            self.early.remove(&(earliest, stamp & !FIRED, index));
        }
    }

    /// A window's (due, latest) ticks as the wheel keeps them: both clamped, latest ≥ due.
    #[inline]
    fn clamp_window(&self, due: u64, latest: u64) -> (u64, u64) {
        let due = self.clamp_due(due);
        (due, self.clamp_due(latest).max(due))
    }

    /// Removes an entry wherever it is, returning its value; `None` for a stale or foreign
    /// key. An entry removed while its tick is being drained is not yielded.
    pub fn remove(&mut self, key: Key) -> Option<T> {
        let entry = self.slab.remove(key)?;
        self.unlist_early(entry.stamp, key.index());
        if entry.due > self.elapsed {
            // In a slot: orphan that placement. (A batch placement is checked against the
            // slab, which no longer holds the entry.)
            self.stamps[key.index() as usize] = VACANT;
            self.detach(entry.due);
        }
        Some(entry.value)
    }

    /// The value of the live entry `key`; `None` for a stale or foreign key.
    #[must_use]
    pub fn get(&self, key: Key) -> Option<&T> {
        self.slab.get(key).map(|e| &e.value)
    }

    /// The value of the live entry `key`, to change in place; `None` for a stale or foreign key.
    #[must_use]
    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        self.slab.get_mut(key).map(|e| &mut e.value)
    }

    /// Every live entry with its key and due tick, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Key, u64, &T)> {
        self.slab
            .iter()
            .map(|(key, e)| (key, self.earliest(key.index(), e), &e.value))
    }

    /// The tick a live entry is (or was, once fired) due at.
    #[must_use]
    pub fn due(&self, key: Key) -> Option<u64> {
        self.slab.get(key).map(|e| self.earliest(key.index(), e))
    }

    /// An entry's due tick: `due`, unless it is a tolerant entry not pulled yet.
    #[inline]
    fn earliest(&self, index: u32, e: &Entry<T>) -> u64 {
        if e.stamp & TOLERANT != 0 {
            self.windows.get(&index).copied().unwrap_or(e.due)
        } else {
            e.due
        }
    }

    /// The last tick a pending entry may be yielded at: its due tick, or a tolerant entry's
    /// latest tick. `None` for a stale key or an entry already pulled into a batch or yielded.
    #[must_use]
    pub fn latest(&self, key: Key) -> Option<u64> {
        self.slab
            .get(key)
            .filter(|e| e.stamp & FIRED == 0 && e.due > self.elapsed)
            .map(|e| e.due)
    }

    /// True when the entry is waiting for its tick (not yet yielded).
    #[must_use]
    pub fn is_pending(&self, key: Key) -> bool {
        self.slab.get(key).is_some_and(|e| e.stamp & FIRED == 0)
    }

    /// The earliest tick at which [`Wheel::poll`] may yield something (the next anchor: a
    /// tolerant entry counts at its latest tick), or `None` when nothing is scheduled. Exact,
    /// except after a cancel from an upper level (or a tolerant entry pulled early, which
    /// is one), where it may be earlier than the real answer (never later). O(levels), plus
    /// any cancelled entries at the front of a tick that is being yielded.
    #[must_use]
    pub fn next_due(&self) -> Option<u64> {
        if self.batch[self.batch_pos..]
            .iter()
            .any(|p| self.in_batch(p).is_some())
        {
            return Some(self.elapsed);
        }
        let exp = self.next_expiration()?;
        Some(match exp.level {
            0 => exp.deadline,
            _ => self.levels[exp.level].min_due(exp.slot).max(exp.deadline),
        })
    }

    /// Advances to tick `now` and yields the next entry due at or before it, in order of due
    /// tick then sequence. Call until `None`: only then has the wheel reached `now`. A yielded
    /// entry stays (as fired) until [`Wheel::remove`]d or [`Wheel::reschedule`]d.
    pub fn poll(&mut self, now: u64) -> Option<Expired> {
        if now < self.quiet_until && self.batch_pos >= self.batch.len() {
            // What the scan below would end with: nothing expires by `now`.
            self.elapsed = self.elapsed.max(now);
            return None;
        }
        loop {
            if let Some(expired) = self.pop_batch() {
                return Some(expired);
            }
            match self.next_expiration() {
                Some(exp) if exp.deadline <= now => self.process(exp),
                next => {
                    self.elapsed = self.elapsed.max(now);
                    self.quiet_until = next.map_or(u64::MAX, |exp| exp.deadline);
                    return None;
                }
            }
        }
    }

    /// The value of the entry `ahead` places after the next one [`Wheel::poll`] would yield
    /// from the tick being processed, if that placement is still current — a hint for callers
    /// that prefetch what their values point to (skipped placements count as places; `None`
    /// past the end of the tick, or when the wheel is between ticks).
    #[must_use]
    #[inline]
    pub fn upcoming(&self, ahead: usize) -> Option<&T> {
        let p = self.batch.get(self.batch_pos.checked_add(ahead)?)?;
        let (_, entry) = self.slab.get_by_index(p.index)?;
        (entry.stamp == p.stamp).then_some(&entry.value)
    }

    #[inline]
    fn take_stamp(&mut self, tolerant: bool) -> u64 {
        let stamp = self.next_stamp;
        self.next_stamp += STAMP_STEP;
        if tolerant { stamp | TOLERANT } else { stamp }
    }

    /// Puts a current placement, due at `due`, into its slot relative to `elapsed`.
    #[inline]
    fn place(&mut self, p: Placement, due: u64) {
        let level = &mut self.levels[level_for(self.elapsed, due)];
        let slot = level.slot_for(due);
        // The slot expires at its first tick (the top level's wrap included: what wraps into
        // it is due in the next rotation, and so is that slot's first tick).
        let first_tick = due & !(level.slot_range() - 1);
        self.quiet_until = self.quiet_until.min(first_tick);
        level.add(slot, p, due);
    }

    /// An entry due at `due` had its placement orphaned (its stamp already changed). If that
    /// placement sits in a slot, the slot loses a live placement. The slot is found from `due`
    /// alone: an entry is in a slot iff `due > elapsed`, and then in the slot `place` would
    /// pick now (module docs, "Where an entry is").
    fn detach(&mut self, due: u64) {
        if due <= self.elapsed {
            // In the batch (skipped by its stamp) or fired (nowhere).
            return;
        }
        let level = &mut self.levels[level_for(self.elapsed, due)];
        let slot = level.slot_for(due);
        if level.forget(slot) {
            level.compact(slot, &self.stamps);
        }
    }

    fn pop_batch(&mut self) -> Option<Expired> {
        while let Some(&p) = self.batch.get(self.batch_pos) {
            // Entries are in random slab order: overlap the misses of the next ones.
            if let Some(ahead) = self.batch.get(self.batch_pos + PREFETCH_AHEAD) {
                self.slab.prefetch(ahead.index);
            }
            self.batch_pos += 1;
            let Some((key, entry)) = self.slab.get_by_index_mut(p.index) else {
                continue;
            };
            if entry.stamp != p.stamp {
                continue;
            }
            entry.stamp |= FIRED;
            return Some(Expired {
                key,
                tick: self.elapsed,
            });
        }
        self.batch.clear();
        self.batch_pos = 0;
        None
    }

    /// The key of a batch placement's entry, if the placement is still current (its entry is
    /// live, has not moved since, and has not been yielded).
    fn in_batch(&self, p: &Placement) -> Option<Key> {
        let (key, entry) = self.slab.get_by_index(p.index)?;
        (entry.stamp == p.stamp).then_some(key)
    }

    /// The earliest slot of any level that needs processing: the first occupied slot of the
    /// lowest non-empty level, because levels are disjoint in time (module docs).
    fn next_expiration(&self) -> Option<Expiration> {
        let exp = self
            .levels
            .iter()
            .find_map(|level| level.next_expiration(self.elapsed))?;
        debug_assert!(
            self.levels[exp.level..]
                .iter()
                .filter_map(|level| level.next_expiration(self.elapsed))
                .all(|later| later.deadline >= exp.deadline),
            "a higher level expires before {exp:?}"
        );
        Some(exp)
    }

    /// Processes one expiration at its deadline. Every entry of the slot is due at or after
    /// the slot's first tick: those due exactly then form the batch of that tick; the rest
    /// cascade to a lower level. A level-0 slot holds one tick, so it becomes the batch as is.
    fn process(&mut self, exp: Expiration) {
        self.elapsed = exp.deadline;
        debug_assert!(self.batch.is_empty());
        self.batch_pos = 0;
        if exp.level == 0 {
            self.levels[0].take(exp.slot, &mut self.batch);
            for p in self.batch.iter().take(PREFETCH_AHEAD) {
                self.slab.prefetch(p.index);
            }
        } else {
            self.cascade(exp);
        }
        debug_assert!(
            self.batch.is_sorted_by_key(|p| p.stamp),
            "slot lists are FIFO"
        );
        // A non-empty batch makes this tick an anchor (a cascade may leave none).
        if !self.batch.is_empty() {
            self.pull_early();
        }
    }

    /// At an anchor (`elapsed`, with its batch taken): moves every tolerant entry due by now
    /// into the batch, which is then in (due, stamp) order (module docs, "Tolerant entries").
    fn pull_early(&mut self) {
        let anchor = self.elapsed;
        if self.early.first().is_none_or(|&(due, _, _)| due > anchor) {
            return;
        }
        let later = self.early.split_off(&(anchor.saturating_add(1), 0, 0));
        let pulled = std::mem::replace(&mut self.early, later);
        let mut merged: Vec<(u64, Placement)> = Vec::with_capacity(pulled.len() + self.batch.len());
        // The tick's own entries, less tolerant ones that reached their latest tick here:
        // they come from `pulled`, in their due order.
        for p in self.batch.drain(..) {
            if p.stamp & TOLERANT == 0 {
                merged.push((anchor, p));
            }
        }
        for (earliest, stamp, index) in pulled {
            self.windows.remove(&index);
            let Some((_, entry)) = self.slab.get_by_index_mut(index) else {
                continue;
            };
            debug_assert_eq!(entry.stamp, stamp, "early lists current entries only");
            let latest = std::mem::replace(&mut entry.due, anchor);
            if latest > anchor {
                // Its slot placement is garbage from now on; the entry is in the batch.
                self.stamps[index as usize] = VACANT;
                self.detach(latest);
            }
            merged.push((earliest, Placement::new(stamp, index, anchor)));
        }
        merged.sort_unstable_by_key(|&(earliest, p)| (earliest, p.stamp));
        self.batch.extend(merged.into_iter().map(|(_, p)| p));
    }

    /// Re-places every current placement of an upper slot relative to the new `elapsed`
    /// (its deadline), reading only the placements and the stamp array.
    fn cascade(&mut self, exp: Expiration) {
        let mut taken = std::mem::take(&mut self.scratch);
        self.levels[exp.level].take(exp.slot, &mut taken);
        let slot_range = self.levels[exp.level].slot_range();
        for i in 0..taken.len() {
            // Stamps are in random order relative to a slot: overlap their misses.
            if let Some(ahead) = taken.get(i + PREFETCH_AHEAD) {
                prefetch_stamp(&self.stamps, ahead.index);
            }
            let p = taken[i];
            if !is_current(&self.stamps, &p) {
                continue;
            }
            let due = match p.due_in(exp.deadline, slot_range) {
                Some(due) => due,
                // Top level only: its slots are too wide for the 32 bits a placement keeps.
                None => self
                    .slab
                    .get_by_index(p.index)
                    .map_or(exp.deadline, |(_, e)| e.due),
            };
            if due <= exp.deadline {
                self.batch.push(p);
            } else {
                self.place(p, due);
            }
        }
        taken.clear();
        self.scratch = taken;
    }

    #[cfg(test)]
    fn garbage_in(&self, level: usize, slot: usize) -> usize {
        self.levels[level].placements(slot)
    }
}

/// The level an entry due at `due` belongs on when the wheel is at `elapsed`: the level of
/// the highest digit in which the two differ, reading a tick as one 12-bit digit (level 0)
/// under 6-bit digits (levels 1 and up). A difference beyond the top level is folded into it
/// (the top level is a ring, see [`level`]).
///
/// Bit trick: the low 12 bits are forced on, so the highest differing bit `b` is at least 11,
/// and `(b − 6) / 6` maps `b = 11` to level 0, `12..=17` to 1, `18..=23` to 2, and so on: level
/// 0's 12-bit digit counts as two 6-bit digits (hence `LEVEL0_BITS == 2 · UPPER_BITS`).
#[inline]
fn level_for(elapsed: u64, due: u64) -> usize {
    const LOW_DIGIT: u64 = (1 << LEVEL0_BITS) - 1;
    const _: () = assert!(LEVEL0_BITS == 2 * UPPER_BITS);
    let differing = ((elapsed ^ due) | LOW_DIGIT).min(MAX_DELAY);
    let highest_bit = 63 - differing.leading_zeros() as usize;
    (highest_bit - UPPER_BITS as usize) / UPPER_BITS as usize
}

#[cfg(test)]
mod tests;
