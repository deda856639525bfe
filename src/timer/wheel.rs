//! The hierarchical timing wheel: a pure data structure, counted in ticks.
//!
//! The wheel knows nothing of clocks, tokio or callbacks. It is told "advance to tick N" and
//! hands back, one at a time, the entries whose due tick has come. The runtime turns instants
//! into ticks and runs what comes out.
//!
//! # Layout
//!
//! Seven [levels](level) of 64 slots. A slot of level `L` covers `64^L` ticks, so level 0 holds
//! single ticks, level 1 blocks of 64, and level 6 blocks of 2^36; the whole wheel spans 2^42
//! ticks (~1 115 years at 8 ms). An entry due at tick `due` is placed on the level of the
//! highest 6-bit digit in which `due` differs from `elapsed` (see [`level_for`]). When
//! `elapsed` reaches the first tick of an upper slot, the slot is *cascaded*: each entry is
//! placed again, relative to the new `elapsed`, and so lands on a lower level, eventually
//! level 0, where a slot holds exactly one due tick.
//!
//! Levels are disjoint in time: everything on level `L` is due inside `elapsed`'s current
//! level-`L+1` block, and everything above it later, so the first occupied slot of the lowest
//! non-empty level is always the next thing to process. (The top level's ring keeps this:
//! what wraps into it is due in a later rotation.)
//!
//! # Guarantees
//!
//! - **Never early (T1).** Only level-0 slots fire, and a level-0 slot holds exactly the
//!   entries due at that tick. Upper levels only ever move entries *down*; the cascade point
//!   is the start of the slot, never its end, so there is no "one upper resolution early"
//!   case (the bug of the C# wheel, which fired an entry whose delay was an exact multiple of
//!   an upper ring's resolution one resolution too soon).
//! - **Order (T2).** Every insert or reschedule takes the next sequence number (its *stamp*)
//!   and is pushed at the back of its slot list, so every list is in stamp order. A cascade
//!   empties one slot, in order, into lower slots that are empty at that moment (they cover
//!   the block that is only now starting), so lists stay in stamp order and the entries of
//!   one tick come out FIFO — cascaded or not — with no sorting.
//! - **No same-tick re-entry (T4).** Before a tick's entries are yielded, `elapsed` moves to
//!   that tick, and an insert is never due before `elapsed + 1`.
//! - **Range (T8).** Delays up to [`MAX_DELAY`] ticks are exact; longer ones saturate.
//! - **Cost.** Insert and remove are O(1). Finding the next due tick and skipping empty
//!   ranges are O(levels) thanks to one occupancy bitmap per level: no empty tick is visited.
//!
//! This module must never depend on time, I/O or the runtime.

mod level;

pub use crate::slab::Key;
use crate::slab::Slab;
use level::{Expiration, LEVEL_SLOTS, Level, Placement, SLOT_BITS};

/// Number of levels.
const NUM_LEVELS: usize = 7;

/// The longest delay the wheel represents exactly, in ticks (2^42 − 1). Longer delays are
/// saturated to it.
pub const MAX_DELAY: u64 = (1 << (SLOT_BITS as usize * NUM_LEVELS)) - 1;

/// How far ahead of the placement being processed a cascade prefetches slab entries.
const PREFETCH_AHEAD: usize = 12;

/// Where an entry is right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// In a slot list.
    Slot { level: u8, slot: u8 },
    /// In the batch of the tick being drained, not yet yielded.
    Due,
    /// Yielded by [`Wheel::poll`]; stays until removed or rescheduled.
    Fired,
}

struct Entry<T> {
    value: T,
    due: u64,
    /// The sequence number of the latest insert or reschedule: FIFO order and placement stamp.
    stamp: u64,
    place: Place,
}

/// An entry [`Wheel::poll`] found due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    pub key: Key,
    pub tick: u64,
}

/// A hierarchical timing wheel holding values of type `T`.
pub struct Wheel<T> {
    /// The last tick processed: every entry due at or before it has been yielded or is in
    /// `batch`.
    elapsed: u64,
    levels: Box<[Level; NUM_LEVELS]>,
    slab: Slab<Entry<T>>,
    next_stamp: u64,
    /// Entries of tick `elapsed` still to be yielded, in order; `batch_pos` is the cursor.
    batch: Vec<Placement>,
    batch_pos: usize,
    /// Spare buffer swapped with slot lists while they are processed.
    scratch: Vec<Placement>,
}

impl<T> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Wheel<T> {
    /// An empty wheel at tick 0. Tick 0 counts as processed: the earliest due tick is 1.
    pub fn new() -> Self {
        Wheel {
            elapsed: 0,
            levels: Box::new(std::array::from_fn(Level::new)),
            slab: Slab::new(),
            next_stamp: 0,
            batch: Vec::new(),
            batch_pos: 0,
            scratch: Vec::new(),
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

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tick an entry will be due at: `due` clamped to `elapsed + 1 ..= elapsed + MAX_DELAY`.
    #[must_use]
    pub fn clamp_due(&self, due: u64) -> u64 {
        due.clamp(
            self.elapsed.saturating_add(1),
            self.elapsed.saturating_add(MAX_DELAY),
        )
    }

    /// Schedules `value` for tick `due` (clamped, see [`Wheel::clamp_due`]).
    pub fn insert(&mut self, due: u64, value: T) -> Key {
        let due = self.clamp_due(due);
        let stamp = self.take_stamp();
        let key = self.slab.insert(Entry {
            value,
            due,
            stamp,
            place: Place::Fired,
        });
        self.place(key.index(), stamp, due);
        key
    }

    /// Moves a live entry — scheduled, due or already fired — to tick `due` (clamped). It
    /// goes to the back of that tick's FIFO order, as a fresh insert would. Returns false for
    /// a stale key.
    pub fn reschedule(&mut self, key: Key, due: u64) -> bool {
        let due = self.clamp_due(due);
        let stamp = self.take_stamp();
        let Some(entry) = self.slab.get_mut(key) else {
            return false;
        };
        let old_place = entry.place;
        entry.due = due;
        entry.stamp = stamp;
        self.detach(old_place);
        self.place(key.index(), stamp, due);
        true
    }

    /// Removes an entry wherever it is, returning its value; `None` for a stale or foreign
    /// key. An entry removed while its tick is being drained is not yielded.
    pub fn remove(&mut self, key: Key) -> Option<T> {
        let entry = self.slab.remove(key)?;
        self.detach(entry.place);
        Some(entry.value)
    }

    #[must_use]
    pub fn get(&self, key: Key) -> Option<&T> {
        self.slab.get(key).map(|e| &e.value)
    }

    #[must_use]
    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        self.slab.get_mut(key).map(|e| &mut e.value)
    }

    /// Every live entry with its key and due tick, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Key, u64, &T)> {
        self.slab.iter().map(|(key, e)| (key, e.due, &e.value))
    }

    /// The tick a live entry is (or was, once fired) due at.
    #[must_use]
    pub fn due(&self, key: Key) -> Option<u64> {
        self.slab.get(key).map(|e| e.due)
    }

    /// True when the entry is waiting for its tick (not yet yielded).
    #[must_use]
    pub fn is_pending(&self, key: Key) -> bool {
        self.slab.get(key).is_some_and(|e| e.place != Place::Fired)
    }

    /// The earliest tick at which [`Wheel::poll`] may yield something, or `None` when nothing
    /// is scheduled. Exact, except after a cancel from an upper level, where it may be
    /// earlier than the real answer (never later). O(levels).
    #[must_use]
    pub fn next_due(&self) -> Option<u64> {
        if self.batch_pos < self.batch.len() {
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
        loop {
            if let Some(expired) = self.pop_batch() {
                return Some(expired);
            }
            match self.next_expiration() {
                Some(exp) if exp.deadline <= now => self.process(exp),
                _ => {
                    self.elapsed = self.elapsed.max(now);
                    return None;
                }
            }
        }
    }

    fn take_stamp(&mut self) -> u64 {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        stamp
    }

    /// Puts an entry (already in the slab with `stamp` and `due`) into its slot.
    fn place(&mut self, index: u32, stamp: u64, due: u64) {
        let level = level_for(self.elapsed, due);
        let slot = self.levels[level].slot_for(due);
        self.levels[level].add(slot, Placement { stamp, index }, due);
        if let Some(entry) = self.slab.get_by_index_mut(index) {
            entry.place = Place::Slot {
                level: level as u8,
                slot: slot as u8,
            };
        }
    }

    /// The entry that was at `place` left it (its placement is now garbage).
    fn detach(&mut self, place: Place) {
        let Place::Slot { level, slot } = place else {
            // A batch placement is skipped by its stamp; a fired entry is nowhere.
            return;
        };
        let (level, slot) = (level as usize, slot as usize);
        if self.levels[level].forget(slot) {
            let slab = &self.slab;
            self.levels[level].compact(slot, |p| is_current(slab, p));
        }
    }

    fn pop_batch(&mut self) -> Option<Expired> {
        while let Some(&p) = self.batch.get(self.batch_pos) {
            self.batch_pos += 1;
            let Some(entry) = self.slab.get_by_index_mut(p.index) else {
                continue;
            };
            if entry.stamp != p.stamp || entry.place != Place::Due {
                continue;
            }
            entry.place = Place::Fired;
            let (key, _) = self.slab.get_by_index(p.index)?;
            return Some(Expired {
                key,
                tick: self.elapsed,
            });
        }
        self.batch.clear();
        self.batch_pos = 0;
        None
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
    /// the slot's first tick: those due exactly then (all of them on level 0) form the batch
    /// of that tick; the rest cascade to a lower level.
    fn process(&mut self, exp: Expiration) {
        self.elapsed = exp.deadline;
        let mut taken = std::mem::take(&mut self.scratch);
        self.levels[exp.level].take(exp.slot, &mut taken);
        debug_assert!(self.batch.is_empty());
        for i in 0..taken.len() {
            // Slab entries are in random order relative to a slot: overlap their misses.
            if let Some(ahead) = taken.get(i + PREFETCH_AHEAD) {
                self.slab.prefetch(ahead.index);
            }
            let p = taken[i];
            if !is_current(&self.slab, &p) {
                continue;
            }
            let Some(entry) = self.slab.get_by_index_mut(p.index) else {
                continue;
            };
            if entry.due <= exp.deadline {
                entry.place = Place::Due;
                self.batch.push(p);
            } else {
                let due = entry.due;
                self.place(p.index, p.stamp, due);
            }
        }
        taken.clear();
        self.scratch = taken;
        debug_assert!(
            self.batch.is_sorted_by_key(|p| p.stamp),
            "slot lists are FIFO"
        );
        self.batch_pos = 0;
    }

    #[cfg(test)]
    fn garbage_in(&self, level: usize, slot: usize) -> usize {
        self.levels[level].placements(slot)
    }
}

/// True when the placement still points at its entry's current position.
fn is_current<T>(slab: &Slab<Entry<T>>, p: &Placement) -> bool {
    slab.get_by_index(p.index)
        .is_some_and(|(_, e)| e.stamp == p.stamp && matches!(e.place, Place::Slot { .. }))
}

/// The level an entry due at `due` belongs on when the wheel is at `elapsed`: the level of
/// the highest 6-bit digit in which the two differ. The low digit is forced on so that equal
/// or adjacent ticks land on level 0; a difference beyond the top level is folded into it
/// (the top level is a ring, see [`level`]).
fn level_for(elapsed: u64, due: u64) -> usize {
    const LOW_DIGIT: u64 = LEVEL_SLOTS as u64 - 1;
    let differing = ((elapsed ^ due) | LOW_DIGIT).min(MAX_DELAY);
    let highest_bit = 63 - differing.leading_zeros() as usize;
    highest_bit / SLOT_BITS as usize
}

#[cfg(test)]
mod tests;
