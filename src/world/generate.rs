//! The seeded world generator, used when no save exists: a world of a given size with a
//! plausible make-up — most items worn, carried or in chests, a fifth fixed decoration, about
//! one in a hundred lying on the ground waiting to decay; most mobiles NPCs kept by spawners,
//! a few logged-out player characters.
//!
//! Same seed and sizes → the same world, entity for entity. Must never schedule anything
//! (the game logic starts timers for what it finds) and never read the clock.

use super::content::{self, CREATURES, DECOR, LITTER, Origin, RESOURCES, SPAWNER_ITEM};
use super::entity::{SpawnKind, Spawner};
use super::location::{Location, MapId};
use super::model::World;
use super::rng::Rng;

/// The seed the shard uses unless configured otherwise.
pub const DEFAULT_SEED: u64 = 0x5EED_0000_2024;
/// Items in the default world: the real world the C# shard was measured on.
pub const DEFAULT_ITEMS: u32 = 190_728;
/// Mobiles in the default world.
pub const DEFAULT_MOBILES: u32 = 33_158;

/// Templates of creatures that live in towns (people); the rest roam the wilderness.
const TOWNSFOLK: u64 = 4;
/// Towns per map.
const TOWNS_PER_MAP: usize = 12;
/// Spawner cadences, in minutes: uniform over this range.
pub const SPAWNER_MINUTES: std::ops::RangeInclusive<u16> = 5..=15;

/// How a world of `items` and `mobiles` is shared out. Each share is a floor of a
/// percentage, so they never add up to more than the total; decoration takes the rest.
#[derive(Clone, Copy, Debug)]
struct Plan {
    players: u32,
    npcs: u32,
    /// At most this many spawner items (2 %).
    spawners: u32,
    /// Clothes, backpacks and loot of NPCs (55 %).
    npc_gear: u32,
    /// Ground piles kept by item spawners (60 % of the 1 % that decays).
    resources: u32,
    /// Other decaying ground items (the rest of that 1 %).
    litter: u32,
    /// Backpacks, bank boxes and their contents (10 %).
    player_items: u32,
    /// Chests in towns and their contents (10 %).
    chest_items: u32,
}

impl Plan {
    fn new(items: u32, mobiles: u32) -> Plan {
        let percent = |n: u32, p: u64| (u64::from(n) * p / 100) as u32;
        let players = percent(mobiles, 3);
        let decaying = percent(items, 1);
        let resources = percent(decaying, 60);
        Plan {
            players,
            npcs: mobiles - players,
            spawners: percent(items, 2),
            npc_gear: percent(items, 55),
            resources,
            litter: decaying - resources,
            player_items: percent(items, 10),
            chest_items: percent(items, 10),
        }
    }
}

/// Generates a world of exactly `items` items and `mobiles` mobiles from `seed`.
pub fn generate(seed: u64, items: u32, mobiles: u32) -> World {
    let plan = Plan::new(items, mobiles);
    let mut g = Generator::new(seed);
    g.world.reserve(items as usize, mobiles as usize);
    let mut spawners = plan.spawners;
    g.creatures(plan.npcs, plan.npc_gear, &mut spawners);
    let unkept = g.resources(plan.resources, &mut spawners);
    g.litter(plan.litter + unkept);
    g.players(plan.players, plan.player_items);
    g.chests(plan.chest_items);
    g.decor(items - g.world.item_count() as u32);
    debug_assert_eq!(g.world.item_count(), items as usize);
    debug_assert_eq!(g.world.mobile_count(), mobiles as usize);
    g.world
}

/// The default world: [`DEFAULT_ITEMS`] items and [`DEFAULT_MOBILES`] mobiles.
pub fn generate_default(seed: u64) -> World {
    generate(seed, DEFAULT_ITEMS, DEFAULT_MOBILES)
}

struct Generator {
    world: World,
    rng: Rng,
    towns: Vec<Location>,
}

impl Generator {
    fn new(seed: u64) -> Generator {
        let mut g = Generator {
            world: World::new(seed),
            rng: Rng::new(seed),
            towns: Vec::new(),
        };
        g.towns = (0..2 * TOWNS_PER_MAP).map(|_| g.anywhere()).collect();
        g
    }

    /// A random spot on Felucca or Trammel (their landmass: the first 5120 columns).
    fn anywhere(&mut self) -> Location {
        let map = if self.rng.percent(50) {
            MapId::FELUCCA
        } else {
            MapId::TRAMMEL
        };
        let x = self.rng.range(0..5120) as u16;
        let y = self.rng.range(0..4096) as u16;
        Location::new(x, y, self.rng.range(0..20) as i8, map)
    }

    fn near(&mut self, center: Location, radius: u16) -> Location {
        let (dx, dy) = (self.rng.offset(radius), self.rng.offset(radius));
        center.offset_clamped(dx, dy)
    }

    fn near_town(&mut self, radius: u16) -> Location {
        let town = *self.rng.pick(&self.towns);
        self.near(town, radius)
    }

    /// `npcs` creatures in groups of 8–32, each group kept by a spawner while `spawners`
    /// lasts; `gear` items shared out evenly among them.
    fn creatures(&mut self, npcs: u32, gear: u32, spawners: &mut u32) {
        let (base, extra) = (
            gear.checked_div(npcs).unwrap_or(0),
            gear.checked_rem(npcs).unwrap_or(0),
        );
        let mut made = 0;
        while made < npcs {
            let group = (self.rng.range(8..33) as u32).min(npcs - made);
            let in_town = self.rng.percent(25);
            let template = if in_town {
                self.rng.below(TOWNSFOLK)
            } else {
                self.rng.range(TOWNSFOLK..CREATURES.len() as u64)
            } as u16;
            let home = if in_town {
                self.near_town(60)
            } else {
                self.anywhere()
            };
            let kind = SpawnKind::Creature(template);
            let range = self.rng.range(4..13) as u16;
            let mut spawner = self.spawner(spawners, home, range, kind);
            for _ in 0..group {
                let at = self.near(home, spawner.as_ref().map_or(8, |s| s.range));
                let gear = base + u32::from(made < extra);
                let keeper = spawner.as_ref().map(|s| s.serial);
                let npc = content::make_creature(
                    &mut self.world,
                    &mut self.rng,
                    template,
                    at,
                    gear,
                    keeper,
                    Origin::Generated,
                );
                if let Some(s) = spawner.as_mut() {
                    s.spawned.push(npc);
                }
                made += 1;
            }
            self.keep(spawner, group);
        }
    }

    /// `piles` decaying resource piles in groups of 3–8, each kept by a spawner while
    /// `spawners` lasts. Returns the piles left over for lack of spawners.
    fn resources(&mut self, piles: u32, spawners: &mut u32) -> u32 {
        let mut left = piles;
        while left > 0 && *spawners > 0 {
            let group = (self.rng.range(3..9) as u32).min(left);
            let template = self.rng.below(RESOURCES.len() as u64) as u16;
            let home = self.anywhere();
            let kind = SpawnKind::Item(template);
            let range = self.rng.range(2..7) as u16;
            let mut spawner = self.spawner(spawners, home, range, kind);
            let s = spawner.as_mut().expect("spawner budget checked");
            for _ in 0..group {
                let at = self.near(home, s.range);
                let pile = content::make_resource(
                    &mut self.world,
                    &mut self.rng,
                    template,
                    at,
                    Origin::Generated,
                );
                s.spawned.push(pile);
            }
            self.keep(spawner, group);
            left -= group;
        }
        left
    }

    /// A spawner item at `home` and its data (spawned list empty), if the budget allows.
    fn spawner(
        &mut self,
        budget: &mut u32,
        home: Location,
        range: u16,
        kind: SpawnKind,
    ) -> Option<Spawner> {
        if *budget == 0 {
            return None;
        }
        *budget -= 1;
        let mut item = content::ground_item(&mut self.world, SPAWNER_ITEM, home, false);
        item.visible = false;
        let serial = content::put_item(&mut self.world, item, Origin::Generated);
        Some(Spawner {
            serial,
            home,
            range,
            max: 0,
            interval_minutes: self
                .rng
                .range(u64::from(*SPAWNER_MINUTES.start())..u64::from(*SPAWNER_MINUTES.end()) + 1)
                as u16,
            kind,
            spawned: Vec::new(),
        })
    }

    /// Files a spawner's data now that its group exists; it keeps `group` alive.
    fn keep(&mut self, spawner: Option<Spawner>, group: u32) {
        if let Some(mut s) = spawner {
            s.max = group as u16;
            self.world.add_spawner(s).expect("spawner item exists");
        }
    }

    /// Decaying odds and ends near towns.
    fn litter(&mut self, count: u32) {
        for _ in 0..count {
            let at = self.near_town(40);
            let item_id = *self.rng.pick(LITTER);
            content::make_ground_item(&mut self.world, item_id, at, true, Origin::Generated);
        }
    }

    /// Logged-out characters sharing `items` items evenly.
    fn players(&mut self, players: u32, items: u32) {
        let (base, extra) = (
            items.checked_div(players).unwrap_or(0),
            items.checked_rem(players).unwrap_or(0),
        );
        for i in 0..players {
            content::make_player(&mut self.world, &mut self.rng, base + u32::from(i < extra));
        }
    }

    /// Chests in towns holding 4–24 items each, `items` in all.
    fn chests(&mut self, items: u32) {
        let mut left = items;
        while left > 0 {
            let contents = (self.rng.range(4..25) as u32).min(left - 1);
            let at = self.near_town(60);
            content::make_chest(&mut self.world, &mut self.rng, at, contents);
            left -= contents + 1;
        }
    }

    /// Fixed decoration: seven in ten in towns, the rest anywhere.
    fn decor(&mut self, count: u32) {
        for _ in 0..count {
            let at = if self.rng.percent(70) {
                self.near_town(80)
            } else {
                self.anywhere()
            };
            let item_id = *self.rng.pick(DECOR);
            content::make_ground_item(&mut self.world, item_id, at, false, Origin::Generated);
        }
    }
}
