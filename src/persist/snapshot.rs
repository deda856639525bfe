//! The snapshot: a consistent copy of the world's plain data, taken on the loop thread.
//!
//! Taking it is the only part of a save the game waits for, so it does the least that makes
//! the copy consistent: clone the entities as they are at this instant, in whatever order the
//! world iterates. Sorting, encoding, checksums and disk work happen later on other threads
//! (`save`), on data the game can no longer change under them.
//!
//! Owns the copy. Must never encode, sort or touch the disk.

use std::collections::HashSet;
use std::mem::MaybeUninit;

use jiff::Timestamp;

use crate::world::{Item, Mobile, Serial, Spawner, World};

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

/// Empty lists with room for a whole snapshot, their memory already touched.
///
/// Memory fresh from the kernel costs a page fault on first write; for the default world's
/// 8 MB that is about 2000 faults, several milliseconds on a VM, and on the loop thread they
/// were most of the stall. Prepared on a blocking thread, the loop only copies.
#[derive(Debug, Default)]
pub struct Buffers {
    items: Vec<Item>,
    mobiles: Vec<Mobile>,
    spawners: Vec<Spawner>,
}

impl Buffers {
    /// Room for the given counts plus a little slack (the world may grow before the copy).
    pub fn prefaulted(items: usize, mobiles: usize, spawners: usize) -> Buffers {
        Buffers {
            items: prefaulted(items + items / 64 + 16),
            mobiles: prefaulted(mobiles + mobiles / 64 + 16),
            spawners: prefaulted(spawners + spawners / 64 + 16),
        }
    }
}

fn prefaulted<T>(capacity: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(capacity);
    v.spare_capacity_mut().fill_with(MaybeUninit::zeroed);
    std::hint::black_box(&mut v);
    v
}

impl Snapshot {
    /// Copies `world`, leaving out the mobiles `keep` refuses and everything they wear or
    /// carry (the shard leaves out logged-in players: a player's mobile lives only as long
    /// as its connection).
    pub fn take(world: &World, created: Timestamp, keep: impl Fn(&Mobile) -> bool) -> Snapshot {
        Snapshot::take_into(Buffers::default(), world, created, keep)
    }

    /// [`take`](Self::take), into `buffers`.
    pub fn take_into(
        buffers: Buffers,
        world: &World,
        created: Timestamp,
        keep: impl Fn(&Mobile) -> bool,
    ) -> Snapshot {
        let Buffers {
            mut items,
            mut mobiles,
            mut spawners,
        } = buffers;
        let (next_item_serial, next_mobile_serial) = world.next_serials();
        let mut left_out = Vec::new();
        for mobile in world.mobiles() {
            if keep(mobile) {
                mobiles.push(mobile.clone());
            } else {
                left_out.push(mobile.serial);
            }
        }
        let skip = held_by(world, left_out);
        if skip.is_empty() {
            items.extend(world.items().cloned());
        } else {
            items.extend(world.items().filter(|i| !skip.contains(&i.serial)).cloned());
        }
        spawners.extend(world.spawners().cloned());
        Snapshot {
            created,
            seed: world.seed(),
            next_item_serial,
            next_mobile_serial,
            items,
            mobiles,
            spawners,
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
        let mut snap = Snapshot::take(&world, Timestamp::UNIX_EPOCH, |m| m.is_npc);
        snap.sort();
        let mobiles: Vec<_> = snap.mobiles.iter().map(|m| m.serial).collect();
        let items: Vec<_> = snap.items.iter().map(|i| i.serial).collect();
        assert_eq!(mobiles, [Serial(1)]);
        assert_eq!(items, [Serial(0x4000_0003)]);
        assert_eq!(snap.next_item_serial, Serial(0x4000_0004));
    }
}
