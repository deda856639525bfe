//! The snapshot: a consistent copy of the world's plain data at one instant.
//!
//! Taking it is the only part of a save the game waits for, so the loop does the least that
//! makes it consistent: [`Capture::take`] freezes the world (`World::freeze`: the entity
//! pages are shared, not copied, and the world copies a page before it next changes it) and
//! notes which mobiles the save leaves out and what they hold. Copying the entities out into
//! lists ([`Capture::into_snapshot`]), sorting, encoding, checksums and disk work happen
//! later on other threads (`save`), on data the game can no longer change under them.
//! [`Snapshot::take`] is the stop-the-world copy, all on the calling thread.
//!
//! Owns the copy. Must never encode, sort or touch the disk.

use std::collections::HashSet;

use jiff::Timestamp;

use crate::world::{Frozen, Item, Mobile, Serial, Spawner, World};

/// A world's entities at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When it was taken (the save's time).
    pub created: Timestamp,
    /// The world's seed, kept so a loaded world goes on with the same random streams.
    pub seed: u64,
    /// The serial the next new item gets (serials are never reused).
    pub next_item_serial: Serial,
    /// The serial the next new mobile gets.
    pub next_mobile_serial: Serial,
    /// Every item but those a left-out mobile wears or carries; in the world's order until
    /// [`sort`](Self::sort)ed by serial.
    pub items: Vec<Item>,
    /// Every mobile the `keep` filter of [`take`](Self::take) accepted.
    pub mobiles: Vec<Mobile>,
    /// Every spawner.
    pub spawners: Vec<Spawner>,
}

/// A snapshot as the loop takes it: the world frozen at one instant, and what the save
/// leaves out. `Send`: made into a [`Snapshot`] on another thread.
#[derive(Debug, Clone)]
pub struct Capture {
    created: Timestamp,
    frozen: Frozen,
    /// Mobiles the `keep` filter refused.
    left_out: HashSet<Serial>,
    /// Items those mobiles wear or carry, at any depth.
    held: HashSet<Serial>,
}

impl Capture {
    /// Freezes `world` and notes the mobiles `keep` refuses and everything they wear or carry
    /// (the shard leaves out logged-in players: a player's mobile lives only as long as its
    /// connection). On the loop: costs a reference count per page of entities and one call of
    /// `keep` per mobile (a read of every mobile), no copy of an entity.
    pub fn take(world: &World, created: Timestamp, keep: impl Fn(&Mobile) -> bool) -> Capture {
        let refused = (world.mobiles())
            .filter(|m| !keep(m))
            .map(|m| m.serial)
            .collect();
        Capture::leaving_out(world, created, refused)
    }

    /// [`take`](Self::take), leaving out the mobiles listed (serials of no mobile are
    /// ignored) and what they wear or carry: costs a reference count per page of entities and
    /// a walk of what those mobiles hold, whatever the number of mobiles.
    pub fn leaving_out(world: &World, created: Timestamp, mobiles: Vec<Serial>) -> Capture {
        let left_out: Vec<Serial> = (mobiles.into_iter())
            .filter(|&s| world.mobile(s).is_some())
            .collect();
        let held = held_by(world, left_out.clone());
        Capture {
            created,
            frozen: world.freeze(),
            left_out: left_out.into_iter().collect(),
            held,
        }
    }

    /// The save's time.
    pub fn created(&self) -> Timestamp {
        self.created
    }

    /// The frozen world.
    pub fn frozen(&self) -> &Frozen {
        &self.frozen
    }

    /// Copies the frozen entities out, leaving out what the filter refused. Off the loop: it
    /// costs what a stop-the-world copy costs, and frees the frozen pages when it returns.
    pub fn into_snapshot(self) -> Snapshot {
        let Capture {
            created,
            frozen,
            left_out,
            held,
        } = self;
        let (next_item_serial, next_mobile_serial) = frozen.next_serials();
        let mut items = Vec::with_capacity(frozen.item_count());
        items.extend(
            frozen
                .items()
                .filter(|i| !held.contains(&i.serial))
                .cloned(),
        );
        let mut mobiles = Vec::with_capacity(frozen.mobile_count());
        mobiles.extend(
            (frozen.mobiles())
                .filter(|m| !left_out.contains(&m.serial))
                .cloned(),
        );
        let mut spawners = Vec::with_capacity(frozen.spawner_count());
        spawners.extend(frozen.spawners().cloned());
        Snapshot {
            created,
            seed: frozen.seed(),
            next_item_serial,
            next_mobile_serial,
            items,
            mobiles,
            spawners,
        }
    }
}

impl Snapshot {
    /// Copies `world`, leaving out the mobiles `keep` refuses and everything they wear or
    /// carry, all at once on the calling thread: the stop-the-world copy. A save on the loop
    /// takes a [`Capture`] instead; this is for a world that is not running (a final save
    /// after a fault, tests, benches).
    pub fn take(world: &World, created: Timestamp, keep: impl Fn(&Mobile) -> bool) -> Snapshot {
        let (next_item_serial, next_mobile_serial) = world.next_serials();
        let mut mobiles = Vec::with_capacity(world.mobile_count());
        let mut left_out = Vec::new();
        for mobile in world.mobiles() {
            if keep(mobile) {
                mobiles.push(mobile.clone());
            } else {
                left_out.push(mobile.serial);
            }
        }
        let skip = held_by(world, left_out);
        let mut items = Vec::with_capacity(world.item_count());
        items.extend(world.items().filter(|i| !skip.contains(&i.serial)).cloned());
        Snapshot {
            created,
            seed: world.seed(),
            next_item_serial,
            next_mobile_serial,
            items,
            mobiles,
            spawners: world.spawners().cloned().collect(),
        }
    }

    /// Puts every list in serial order, so the same world always encodes to the same bytes
    /// whatever order its maps iterate in. Off the loop thread.
    pub fn sort(&mut self) {
        self.items.sort_unstable_by_key(|i| i.serial);
        self.mobiles.sort_unstable_by_key(|m| m.serial);
        self.spawners.sort_unstable_by_key(|s| s.serial);
    }
}

/// Every item inside `owners`, at any depth.
fn held_by(world: &World, mut owners: Vec<Serial>) -> HashSet<Serial> {
    let mut held = HashSet::new();
    while let Some(owner) = owners.pop() {
        for &item in world.contents(owner) {
            if held.insert(item) {
                owners.push(item);
            }
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::{Location, MapId};

    #[test]
    fn left_out_mobiles_take_what_they_carry_with_them() {
        let mut world = World::new(7);
        let npc = Mobile {
            is_npc: true,
            ..Mobile::new(Serial(1), "npc", 1)
        };
        let player = Mobile::new(Serial(2), "player", 1);
        world.restore_mobile(npc).unwrap();
        world.restore_mobile(player).unwrap();
        let mut pack = Item::new(Serial(0x4000_0001), 0xE75);
        pack.parent = Some(Serial(2));
        let mut coin = Item::new(Serial(0x4000_0002), 0xEED);
        coin.parent = Some(pack.serial);
        let mut rock = Item::new(Serial(0x4000_0003), 0x1363);
        rock.location = Location {
            map: MapId::FELUCCA,
            x: 10,
            y: 10,
            z: 0,
        };
        for item in [pack, coin, rock] {
            world.restore_item(item).unwrap();
        }
        let mut captured =
            Capture::take(&world, Timestamp::UNIX_EPOCH, |m| m.is_npc).into_snapshot();
        captured.sort();
        let mut snap = Snapshot::take(&world, Timestamp::UNIX_EPOCH, |m| m.is_npc);
        snap.sort();
        assert_eq!(captured.items, snap.items);
        assert_eq!(captured.mobiles, snap.mobiles);
        assert_eq!(captured.next_item_serial, snap.next_item_serial);
        // Listing the left-out mobile (and a serial of no mobile) instead.
        let mut listed =
            Capture::leaving_out(&world, Timestamp::UNIX_EPOCH, vec![Serial(2), Serial(9)])
                .into_snapshot();
        listed.sort();
        assert_eq!(listed.items, snap.items);
        assert_eq!(listed.mobiles, snap.mobiles);
        let mobiles: Vec<_> = snap.mobiles.iter().map(|m| m.serial).collect();
        let items: Vec<_> = snap.items.iter().map(|i| i.serial).collect();
        assert_eq!(mobiles, [Serial(1)]);
        assert_eq!(items, [Serial(0x4000_0003)]);
        assert_eq!(snap.next_item_serial, Serial(0x4000_0004));
    }
}
