//! Delta queues: which entities changed since they were last sent, and how.
//!
//! An entity is queued once however often it changes before the Deltas phase drains it: its
//! change flags merge. Owns the queue and the counters only; must never know how a change is
//! encoded or to whom it is sent (networking plugs in through `World::drain_deltas_with`).

use std::collections::VecDeque;
use std::ops::{BitOr, BitOrAssign};

use super::serial::{IdMap, Serial};

/// What changed about an entity (flags, merged while it waits in its queue).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Delta(u8);

impl Delta {
    /// Nothing changed.
    pub const NONE: Delta = Delta(0);
    /// It appeared in the world.
    pub const ADDED: Delta = Delta(1);
    /// Its location or parent changed.
    pub const MOVED: Delta = Delta(1 << 1);
    /// Its look changed (hue, graphic, body).
    pub const APPEARANCE: Delta = Delta(1 << 2);
    /// Some other field changed (through `item_mut` / `mobile_mut`).
    pub const PROPERTIES: Delta = Delta(1 << 3);
    /// It said something.
    pub const SPEECH: Delta = Delta(1 << 4);
    /// It was deleted.
    pub const REMOVED: Delta = Delta(1 << 5);

    /// Every flag of `other` is set here.
    pub fn contains(self, other: Delta) -> bool {
        self.0 & other.0 == other.0
    }

    /// No flag is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The flags as a byte (`ADDED` is bit 0, `REMOVED` bit 5).
    pub fn bits(self) -> u8 {
        self.0
    }
}

impl BitOr for Delta {
    type Output = Delta;
    fn bitor(self, rhs: Delta) -> Delta {
        Delta(self.0 | rhs.0)
    }
}

impl BitOrAssign for Delta {
    fn bitor_assign(&mut self, rhs: Delta) {
        self.0 |= rhs.0;
    }
}

/// One queue of changed entities, each present at most once, drained in the order they were
/// first marked.
#[derive(Debug, Default)]
pub(crate) struct DeltaQueue {
    order: VecDeque<Serial>,
    pending: IdMap<Serial, Delta>,
}

impl DeltaQueue {
    /// Merges `delta` into `serial`'s pending change; true if it was not queued yet.
    pub(crate) fn mark(&mut self, serial: Serial, delta: Delta) -> bool {
        match self.pending.get_mut(&serial) {
            Some(flags) => {
                *flags |= delta;
                false
            }
            None => {
                self.pending.insert(serial, delta);
                self.order.push_back(serial);
                true
            }
        }
    }

    /// Hands at most `max` queued changes to `sink`, oldest first; returns how many.
    pub(crate) fn drain(&mut self, max: usize, mut sink: impl FnMut(Serial, Delta)) -> usize {
        let mut sent = 0;
        while sent < max {
            let Some(serial) = self.order.pop_front() else {
                break;
            };
            let delta = self.pending.remove(&serial).unwrap_or_default();
            sink(serial, delta);
            sent += 1;
        }
        if self.order.is_empty() {
            self.order.shrink_to(1024);
            self.pending.shrink_to(1024);
        }
        sent
    }

    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// The change waiting for `serial`, if it is queued.
    pub(crate) fn pending(&self, serial: Serial) -> Option<Delta> {
        self.pending.get(&serial).copied()
    }
}

/// Counters of the delta queues since the world was created (observable for tests and the
/// console). "Sent" means drained: networking will send them; for now they are counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaStats {
    /// Changes marked on mobiles (every mark, merged or not).
    pub mobile_marks: u64,
    /// Changes marked on items.
    pub item_marks: u64,
    /// Mobiles put in the queue (a mobile already queued is not queued again).
    pub mobiles_queued: u64,
    /// Items put in the queue.
    pub items_queued: u64,
    /// Mobile changes drained.
    pub mobiles_sent: u64,
    /// Item changes drained.
    pub items_sent: u64,
    /// Drained changes that were deletions (mobiles and items).
    pub removals_sent: u64,
    /// Things said (`World::say`), and drained changes that carried speech.
    pub speech: u64,
    /// Drained changes that carried speech.
    pub speech_sent: u64,
}
