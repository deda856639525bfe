//! `Frozen`: the world's entities as they were at one instant, readable from any thread while
//! the world goes on changing.
//!
//! [`World::freeze`] shares the world's entity pages instead of copying the entities (see
//! `pages.rs`): it costs one reference count per page, and every later change to the world
//! copies the page it touches before changing it, so the frozen view never sees it. A save
//! freezes the world on the loop and reads the view on another thread.
//!
//! Owns the read-only view. Must never change an entity, and never hold anything of the world
//! but its entities and serial allocators (no indexes, no deltas, no hook).

use std::fmt;

use super::entity::{Item, Mobile, Spawner};
use super::model::World;
use super::pages::{ItemPages, MobilePages, SpawnerPages};
use super::serial::Serial;

/// Every item, mobile and spawner of a world at the instant it was frozen. `Send` and `Sync`:
/// it holds only shared, unchanging pages.
#[derive(Clone)]
pub struct Frozen {
    seed: u64,
    next_serials: (Serial, Serial),
    items: ItemPages,
    mobiles: MobilePages,
    spawners: SpawnerPages,
}

impl World {
    /// The world's entities as they are now, for reading elsewhere while the world changes.
    /// Costs one reference count per page (128 items or mobiles, 64 spawners), not a copy of
    /// the entities; later changes each copy the page they touch once, while the view is
    /// alive.
    pub fn freeze(&self) -> Frozen {
        Frozen {
            seed: self.seed,
            next_serials: self.next_serials(),
            items: self.items.clone(),
            mobiles: self.mobiles.clone(),
            spawners: self.spawners.clone(),
        }
    }
}

impl Frozen {
    /// The world's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// What [`World::next_serials`] returned at the instant of the freeze.
    pub fn next_serials(&self) -> (Serial, Serial) {
        self.next_serials
    }

    /// The item `serial`, if it existed.
    pub fn item(&self, serial: Serial) -> Option<&Item> {
        self.items.get(&serial)
    }

    /// The mobile `serial`, if it existed.
    pub fn mobile(&self, serial: Serial) -> Option<&Mobile> {
        self.mobiles.get(&serial)
    }

    /// Every item, in an unspecified but deterministic order.
    pub fn items(&self) -> impl Iterator<Item = &Item> {
        self.items.values()
    }

    /// Every mobile, in an unspecified but deterministic order.
    pub fn mobiles(&self) -> impl Iterator<Item = &Mobile> {
        self.mobiles.values()
    }

    /// Every spawner, in an unspecified but deterministic order.
    pub fn spawners(&self) -> impl Iterator<Item = &Spawner> {
        self.spawners.values()
    }

    /// Items.
    pub fn item_count(&self) -> usize {
        self.items.len()
    }

    /// Mobiles.
    pub fn mobile_count(&self) -> usize {
        self.mobiles.len()
    }

    /// Spawners.
    pub fn spawner_count(&self) -> usize {
        self.spawners.len()
    }

    /// Pages held (items, mobiles and spawners): what the freeze cost, one count each.
    pub fn page_count(&self) -> usize {
        self.items.page_count() + self.mobiles.page_count() + self.spawners.page_count()
    }
}

impl fmt::Debug for Frozen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frozen")
            .field("seed", &self.seed)
            .field("items", &self.items.len())
            .field("mobiles", &self.mobiles.len())
            .field("spawners", &self.spawners.len())
            .field("pages", &self.page_count())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::{Location, MapId, generate};

    fn sorted<T: Clone, K: Ord>(all: impl Iterator<Item = T>, key: impl Fn(&T) -> K) -> Vec<T> {
        let mut v: Vec<T> = all.collect();
        v.sort_by_key(|x| key(x));
        v
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Frozen>();
    }

    #[test]
    fn a_frozen_world_keeps_the_instant_it_was_taken() {
        let mut world = generate(3, 2_000, 300);
        let before = world.clone_entities();
        let frozen = world.freeze();
        let item = world.items().nth(10).unwrap().serial;
        let mobile = world.mobiles().nth(10).unwrap().serial;
        let to = Location {
            map: MapId::FELUCCA,
            x: 100,
            y: 100,
            z: 0,
        };
        world.move_item(item, to);
        world.move_mobile(mobile, to);
        let gone = world.items().nth(20).unwrap().serial;
        world.remove_item(gone);
        let gone = world.mobiles().nth(20).unwrap().serial;
        world.remove_mobile(gone);
        let serial = world.new_item_serial();
        world.add_item(crate::world::Item::new(serial, 1)).unwrap();
        assert_eq!(frozen.item_count(), before.0.len());
        assert_eq!(sorted(frozen.items().cloned(), |i| i.serial), before.0);
        assert_eq!(sorted(frozen.mobiles().cloned(), |m| m.serial), before.1);
        assert_eq!(sorted(frozen.spawners().cloned(), |s| s.serial), before.2);
        assert!(frozen.item(serial).is_none());
    }

    impl World {
        /// Every entity, copied and sorted by serial: the stop-the-world copy.
        fn clone_entities(&self) -> (Vec<Item>, Vec<Mobile>, Vec<Spawner>) {
            (
                sorted(self.items().cloned(), |i| i.serial),
                sorted(self.mobiles().cloned(), |m| m.serial),
                sorted(self.spawners().cloned(), |s| s.serial),
            )
        }
    }
}
