//! `item_mut` / `mobile_mut`: mutable access to one entity that keeps the world consistent.
//!
//! A guard derefs to the entity; when dropped after a mutable use it re-files the entity if
//! its location or parent changed (waking or putting a mobile to sleep as needed) and marks
//! one delta. Must never let the serial change: it is restored on drop.

use std::ops::{Deref, DerefMut};

use super::delta::Delta;
use super::entity::{Item, Mobile};
use super::location::Location;
use super::model::World;
use super::serial::Serial;

impl World {
    /// Mutable access to an item; see [`ItemMut`].
    pub fn item_mut(&mut self, serial: Serial) -> Option<ItemMut<'_>> {
        let item = self.items.get(&serial)?;
        let before = (item.parent, item.location);
        Some(ItemMut {
            world: self,
            serial,
            before,
            touched: false,
        })
    }

    /// Mutable access to a mobile; see [`MobileMut`].
    pub fn mobile_mut(&mut self, serial: Serial) -> Option<MobileMut<'_>> {
        let before = self.mobiles.get(&serial)?.location;
        Some(MobileMut {
            world: self,
            serial,
            before,
            touched: false,
        })
    }
}

/// An item borrowed mutably from the world. On drop, if it was used mutably: a new parent or
/// location is re-filed (the new parent must exist) and the item is marked `MOVED` or
/// `PROPERTIES`.
pub struct ItemMut<'w> {
    world: &'w mut World,
    serial: Serial,
    before: (Option<Serial>, Location),
    touched: bool,
}

impl Deref for ItemMut<'_> {
    type Target = Item;
    fn deref(&self) -> &Item {
        &self.world.items[&self.serial]
    }
}

impl DerefMut for ItemMut<'_> {
    fn deref_mut(&mut self) -> &mut Item {
        self.touched = true;
        self.world
            .items
            .get_mut(&self.serial)
            .expect("guarded item")
    }
}

impl Drop for ItemMut<'_> {
    fn drop(&mut self) {
        if !self.touched {
            return;
        }
        let serial = self.serial;
        let item = self.world.items.get_mut(&serial).expect("guarded item");
        item.serial = serial;
        let after = (item.parent, item.location);
        if after == self.before {
            self.world.mark_item(serial, Delta::PROPERTIES);
            return;
        }
        let (old_parent, old_location) = self.before;
        self.world.unlink_item(serial, old_parent, &old_location);
        self.world.link_item(serial, after.0, &after.1);
        self.world
            .mark_item(serial, Delta::MOVED | Delta::PROPERTIES);
    }
}

/// A mobile borrowed mutably from the world. On drop, if it was used mutably: a new location
/// is re-filed (waking it or putting it to sleep) and it is marked `MOVED` or `PROPERTIES`.
pub struct MobileMut<'w> {
    world: &'w mut World,
    serial: Serial,
    before: Location,
    touched: bool,
}

impl Deref for MobileMut<'_> {
    type Target = Mobile;
    fn deref(&self) -> &Mobile {
        &self.world.mobiles[&self.serial]
    }
}

impl DerefMut for MobileMut<'_> {
    fn deref_mut(&mut self) -> &mut Mobile {
        self.touched = true;
        self.world
            .mobiles
            .get_mut(&self.serial)
            .expect("guarded mobile")
    }
}

impl Drop for MobileMut<'_> {
    fn drop(&mut self) {
        if !self.touched {
            return;
        }
        let serial = self.serial;
        let mobile = self.world.mobiles.get_mut(&serial).expect("guarded mobile");
        mobile.serial = serial;
        let after = mobile.location;
        if after == self.before {
            self.world.mark_mobile(serial, Delta::PROPERTIES);
            return;
        }
        self.world.relocate_mobile(serial, &self.before, &after);
        self.world
            .mark_mobile(serial, Delta::MOVED | Delta::PROPERTIES);
    }
}
