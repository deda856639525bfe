//! Changing entities and draining the delta queues.
//!
//! Every change marks its entity in the mobile or item delta queue (once per drain, flags
//! merged); `drain_deltas` empties them in bounded amounts from the Deltas phase. Owns the
//! change side of `World`. Must never encode or send anything: draining only counts, or
//! hands each change to the caller's sink.

use super::delta::{Delta, DeltaStats};
use super::entity::Item;
use super::limits::MAX_CONTAINER_DEPTH;
use super::location::Location;
use super::model::World;
use super::serial::Serial;

/// One drained mobile change, as [`World::drain_changes`] hands it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MobileChange<'a> {
    /// The mobile that changed.
    pub serial: Serial,
    /// Every change it had since it was last drained, merged.
    pub delta: Delta,
    /// Where the mobile is now; `None` once it is removed.
    pub location: Option<Location>,
    /// Its words, for a `SPEECH` change.
    pub said: Option<&'a str>,
}

/// Changes drained per queue per call of the shard's Deltas handler.
pub const DELTAS_PER_ITERATION: usize = 1024;

impl World {
    /// Puts an item on the ground at `to` (taking it out of any container).
    pub fn move_item(&mut self, serial: Serial, to: Location) -> bool {
        self.place_item(serial, None, to)
    }

    /// Puts an item into a container (or onto a mobile) at `position` in its window.
    /// False if either does not exist, if `parent` is the item itself or inside it (a cycle),
    /// or if the item and what it holds would then sit deeper than
    /// [`MAX_CONTAINER_DEPTH`](super::limits::MAX_CONTAINER_DEPTH). Costs a walk up from
    /// `parent` (bounded by the limit) and one over the item's own contents.
    pub fn put_item_in(&mut self, serial: Serial, parent: Serial, position: Location) -> bool {
        let parent_exists = self.items.contains_key(&parent) || self.mobiles.contains_key(&parent);
        parent_exists
            && parent != serial
            && self.fits_inside(serial, parent)
            && self.place_item(serial, Some(parent), position)
    }

    /// `serial` may go into `parent` without a cycle and within the depth limit.
    fn fits_inside(&self, serial: Serial, parent: Serial) -> bool {
        if !self.items.contains_key(&parent) {
            return self.nesting_below(serial) <= MAX_CONTAINER_DEPTH; // onto a mobile: level 0
        }
        // Walk up the items from the new parent (a wearer ends it): meeting `serial` means a
        // cycle.
        let mut at = Some(parent);
        let mut steps = 0;
        while let Some(s) = at.filter(|s| self.items.contains_key(s)) {
            if s == serial || steps > MAX_CONTAINER_DEPTH {
                return false;
            }
            steps += 1;
            at = self.items.get(&s).and_then(|i| i.parent);
        }
        // `steps` is the number of items from `parent` up to its root, so the item's level
        // would be `steps`; its deepest content that plus what lies below it.
        steps + self.nesting_below(serial) <= MAX_CONTAINER_DEPTH
    }

    fn place_item(&mut self, serial: Serial, parent: Option<Serial>, to: Location) -> bool {
        let Some(item) = self.items.get_mut(&serial) else {
            return false;
        };
        let (old_parent, old_location) = (item.parent, item.location);
        item.parent = parent;
        item.location = to;
        self.unlink_item(serial, old_parent, &old_location);
        self.link_item(serial, parent, &to);
        self.mark_item(serial, Delta::MOVED);
        true
    }

    /// Moves a mobile (waking or putting it to sleep if it changes activity).
    pub fn move_mobile(&mut self, serial: Serial, to: Location) -> bool {
        let Some(mobile) = self.mobiles.get_mut(&serial) else {
            return false;
        };
        let from = std::mem::replace(&mut mobile.location, to);
        self.relocate_mobile(serial, &from, &to);
        self.mark_mobile(serial, Delta::MOVED);
        true
    }

    /// Recolours an item.
    pub fn set_item_hue(&mut self, serial: Serial, hue: u16) -> bool {
        self.edit_item(serial, Delta::APPEARANCE, |item| item.hue = hue)
    }

    /// Recolours a mobile.
    pub fn set_mobile_hue(&mut self, serial: Serial, hue: u16) -> bool {
        let Some(mobile) = self.mobiles.get_mut(&serial) else {
            return false;
        };
        mobile.hue = hue;
        self.mark_mobile(serial, Delta::APPEARANCE);
        true
    }

    fn edit_item(&mut self, serial: Serial, delta: Delta, f: impl FnOnce(&mut Item)) -> bool {
        let Some(item) = self.items.get_mut(&serial) else {
            return false;
        };
        f(item);
        self.mark_item(serial, delta);
        true
    }

    /// A mobile says `text` to those around it (counted, and queued as a `SPEECH` delta
    /// whose drain hands the text on; said twice before a drain, the later line wins).
    pub fn say(&mut self, serial: Serial, text: &str) -> bool {
        let Some(mobile) = self.mobiles.get(&serial) else {
            return false;
        };
        tracing::trace!(npc = %serial, name = %mobile.name, "says {text:?}");
        self.stats.speech += 1;
        self.said.insert(serial, text.to_owned());
        self.mark_mobile(serial, Delta::SPEECH);
        true
    }

    /// Queues a change of a mobile (merged if it is queued already).
    pub fn mark_mobile(&mut self, serial: Serial, delta: Delta) {
        self.stats.mobile_marks += 1;
        if self.mobile_deltas.mark(serial, delta) {
            self.stats.mobiles_queued += 1;
        }
    }

    /// Queues a change of an item (merged if it is queued already).
    pub fn mark_item(&mut self, serial: Serial, delta: Delta) {
        self.stats.item_marks += 1;
        if self.item_deltas.mark(serial, delta) {
            self.stats.items_queued += 1;
        }
    }

    /// Drains at most `max` mobile changes, then at most `max` item changes, counting them
    /// as sent. True if either queue still holds work (the loop must not park). This is the
    /// Deltas slot handler's body.
    pub fn drain_deltas(&mut self, max: usize) -> bool {
        self.drain_deltas_with(max, |_, _| {})
    }

    /// [`drain_deltas`](Self::drain_deltas), handing each change to `sink` (networking).
    pub fn drain_deltas_with(&mut self, max: usize, sink: impl FnMut(Serial, Delta)) -> bool {
        let sink = std::cell::RefCell::new(sink);
        self.drain_changes(
            max,
            |change| (sink.borrow_mut())(change.serial, change.delta),
            |serial, delta| (sink.borrow_mut())(serial, delta),
        )
    }

    /// [`drain_deltas`](Self::drain_deltas), handing each mobile change to `on_mobile` with
    /// what a client needs to show it (where the mobile is now, what it said), and each item
    /// change to `on_item`.
    pub fn drain_changes(
        &mut self,
        max: usize,
        mut on_mobile: impl FnMut(MobileChange<'_>),
        mut on_item: impl FnMut(Serial, Delta),
    ) -> bool {
        let stats = &mut self.stats;
        let (mobiles_by_serial, said) = (&self.mobiles, &mut self.said);
        let mobiles = self.mobile_deltas.drain(max, |serial, delta| {
            count_sent(stats, delta);
            let text = match delta.contains(Delta::SPEECH) {
                true => said.remove(&serial),
                false => None,
            };
            on_mobile(MobileChange {
                serial,
                delta,
                location: mobiles_by_serial.get(&serial).map(|m| m.location),
                said: text.as_deref(),
            });
        });
        let items = self.item_deltas.drain(max, |serial, delta| {
            count_sent(stats, delta);
            on_item(serial, delta);
        });
        stats.mobiles_sent += mobiles as u64;
        stats.items_sent += items as u64;
        self.mobile_deltas.len() + self.item_deltas.len() > 0
    }

    /// Changes waiting: (mobiles, items).
    pub fn pending_deltas(&self) -> (usize, usize) {
        (self.mobile_deltas.len(), self.item_deltas.len())
    }

    /// The change waiting for a mobile, if it is queued.
    pub fn pending_mobile_delta(&self, serial: Serial) -> Option<Delta> {
        self.mobile_deltas.pending(serial)
    }

    /// The change waiting for an item, if it is queued.
    pub fn pending_item_delta(&self, serial: Serial) -> Option<Delta> {
        self.item_deltas.pending(serial)
    }

    /// The delta queues' counters since the world was made.
    pub fn delta_stats(&self) -> DeltaStats {
        self.stats
    }
}

fn count_sent(stats: &mut DeltaStats, delta: Delta) {
    if delta.contains(Delta::REMOVED) {
        stats.removals_sent += 1;
    }
    if delta.contains(Delta::SPEECH) {
        stats.speech_sent += 1;
    }
}
