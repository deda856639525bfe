//! A whole world against its structural limits (`limits.rs`): the check a loaded save must
//! pass before the shard runs it ([`World::check_limits`]), and the container levels that
//! check and the runtime's own checks need (how deep an item sits, how deep its contents go).
//!
//! Owns walking containment, always iteratively: a hostile chain is as deep as the file is
//! long. Must never change the world (it only looks), nor define a limit (`limits.rs` does).

use super::limits::{Breach, EntityKind, MAX_CONTAINER_DEPTH, check_place};
use super::model::World;
use super::serial::{IdMap, Serial};

impl World {
    /// Checks the whole world against the limits, in time linear in its size and memory for
    /// one level per item: the first entity found breaking one, and how. Spawners were
    /// checked as they were filed ([`World::add_spawner`]).
    pub fn check_limits(&self) -> Result<(), (EntityKind, Serial, Breach)> {
        for m in self.mobiles.values() {
            check_place(&m.location).map_err(|b| (EntityKind::Mobile, m.serial, b))?;
        }
        for item in self.items.values() {
            if item.parent.is_none() {
                check_place(&item.location).map_err(|b| (EntityKind::Item, item.serial, b))?;
            }
        }
        let mut levels = IdMap::default();
        levels.reserve(self.items.len());
        for serial in self.items.keys() {
            self.level_into(serial, &mut levels)
                .map_err(|b| (EntityKind::Item, serial, b))?;
        }
        Ok(())
    }

    /// The container level of `serial` (see [`MAX_CONTAINER_DEPTH`]), filing it and every
    /// container above it in `levels`. Walks up at most one step past the limit: a chain
    /// deeper than that, or one that comes back to itself, is refused without going on.
    fn level_into(&self, serial: Serial, levels: &mut IdMap<Serial, u16>) -> Result<u16, Breach> {
        // The chain from `serial` up to the first item whose level is known or that is not
        // inside another item.
        let mut chain: Vec<Serial> = Vec::new();
        let mut at = serial;
        let base = loop {
            if let Some(&known) = levels.get(&at) {
                break Some(known);
            }
            if chain.contains(&at) {
                return Err(Breach::Cycle { through: at });
            }
            chain.push(at);
            if chain.len() > usize::from(MAX_CONTAINER_DEPTH) + 1 {
                return Err(Breach::TooDeep);
            }
            match self.items.get(&at).and_then(|i| i.parent) {
                Some(parent) if self.items.contains_key(&parent) => at = parent,
                _ => break None, // on the ground, worn or carried: level 0
            }
        };
        // The top of the chain is level 0, or one below the known container it sits in.
        let top = base.map_or(0, |known| known + 1);
        let mut level = top;
        for &s in chain.iter().rev() {
            if level > MAX_CONTAINER_DEPTH {
                return Err(Breach::TooDeep);
            }
            levels.insert(s, level);
            level += 1;
        }
        Ok(level - 1)
    }

    /// The container level of `serial` now; `Err` past the limit or in a cycle.
    pub fn container_level(&self, serial: Serial) -> Result<u16, Breach> {
        self.level_into(serial, &mut IdMap::default())
    }

    /// How many levels of containers lie inside `serial` (0 for an item holding nothing), at
    /// most one past the limit: iterative, over its contents only.
    pub fn nesting_below(&self, serial: Serial) -> u16 {
        let mut deepest = 0;
        let mut stack = vec![(serial, 0u16)];
        while let Some((s, level)) = stack.pop() {
            deepest = deepest.max(level);
            if level > MAX_CONTAINER_DEPTH {
                continue;
            }
            stack.extend(self.contents(s).iter().map(|&child| (child, level + 1)));
        }
        deepest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::{Item, Location, MapId, Mobile};

    fn item(serial: u32, parent: Option<u32>) -> Item {
        let mut item = Item::new(Serial(serial), 1);
        item.parent = parent.map(Serial);
        item.container = true;
        item
    }

    /// A chain of `n` items, each inside the one before, the first worn by a mobile.
    fn chain(n: u32) -> World {
        let mut world = World::new(1);
        world
            .restore_mobile(Mobile::new(Serial(1), "m", 1))
            .unwrap();
        let base = Serial::ITEM_MIN.0;
        for i in 0..n {
            let parent = if i == 0 { 1 } else { base + i - 1 };
            world.restore_item(item(base + i, Some(parent))).unwrap();
        }
        world
    }

    #[test]
    fn a_chain_up_to_the_limit_passes_and_one_deeper_is_refused() {
        let depth = u32::from(MAX_CONTAINER_DEPTH);
        assert_eq!(chain(depth + 1).check_limits(), Ok(()));
        let deepest = Serial(Serial::ITEM_MIN.0 + depth);
        assert_eq!(
            chain(depth + 1).container_level(deepest),
            Ok(MAX_CONTAINER_DEPTH)
        );
        let (kind, _, breach) = chain(depth + 2).check_limits().unwrap_err();
        assert_eq!((kind, breach), (EntityKind::Item, Breach::TooDeep));
    }

    #[test]
    fn a_chain_of_100k_is_refused_quickly_without_recursion() {
        let world = chain(100_000);
        let (_, serial, breach) = world.check_limits().unwrap_err();
        assert_eq!(breach, Breach::TooDeep);
        assert!(world.container_level(serial).is_err());
    }

    #[test]
    fn a_containment_cycle_is_refused_naming_it() {
        let mut world = World::new(1);
        let (a, b) = (Serial::ITEM_MIN.0, Serial::ITEM_MIN.0 + 1);
        world.restore_item(item(a, Some(b))).unwrap();
        world.restore_item(item(b, Some(a))).unwrap();
        let (_, _, breach) = world.check_limits().unwrap_err();
        assert!(matches!(breach, Breach::Cycle { .. }), "{breach:?}");
        assert!(breach.to_string().contains("inside itself"));
    }

    #[test]
    fn a_mobile_off_the_map_is_refused_naming_it() {
        let mut world = World::new(1);
        let mut m = Mobile::new(Serial(3), "m", 1);
        m.location = Location::new(60_000, 5, 0, MapId::FELUCCA);
        world.restore_mobile(m).unwrap();
        let (kind, serial, breach) = world.check_limits().unwrap_err();
        assert_eq!((kind, serial), (EntityKind::Mobile, Serial(3)));
        assert!(
            breach.to_string().contains("(60000, 5, 0) on map 0"),
            "{breach}"
        );
    }
}
