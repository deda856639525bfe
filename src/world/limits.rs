//! The world's structural limits: how deep containers nest, what a spawner may ask for, where
//! a thing may stand. A save breaking one is refused at load (`World::check_limits`, in `audit.rs`); the
//! world refuses the same at runtime where checking is cheap (a spawner filed with
//! `add_spawner`, an item put into a container), and a spawner's run never spawns more than
//! the limit whatever its data says.
//!
//! Each limit is the most the game makes (see `generate` and `content`) times a generous
//! margin: loose enough that no real world meets it, tight enough that a hostile file cannot
//! turn it into a stack overflow or an entity flood.
//!
//! Owns the limits and the checks. Must never change the world (it only looks), and never
//! walk containment by recursion: a hostile chain is as deep as the file is long.

use std::fmt;
use std::ops::RangeInclusive;

use super::entity::Spawner;
use super::location::{Location, MapId};
use super::serial::Serial;

/// How many containers deep an item may sit: on the ground or worn is level 0, in a backpack
/// level 1, in a bag in that backpack level 2 and so on. The generator makes level 1 (loot in
/// backpacks and chests); players nest a few bags; 32 is far beyond any real use.
pub const MAX_CONTAINER_DEPTH: u16 = 32;
/// The most a spawner keeps alive. The generator's groups are 3–32; each creature spawns with
/// its gear (about 5 entities), so one run makes at most ~1,300 entities.
pub const MAX_SPAWN_COUNT: u16 = 256;
/// The farthest (in tiles) a spawner spreads its spawns. The generator uses 2–12.
pub const MAX_SPAWN_RANGE: u16 = 64;
/// A spawner's cadence in minutes. The generator uses 5–15; 0 would mean "as fast as the
/// timer allows" and is refused; a week is the longest.
pub const SPAWN_INTERVAL_MINUTES: RangeInclusive<u16> = 1..=7 * 24 * 60;

/// Which kind of entity broke a limit (and so which save file holds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntityKind {
    /// An item (`items.bin`).
    Item,
    /// A mobile (`mobiles.bin`).
    Mobile,
    /// A spawner (`spawners.bin`).
    Spawner,
}

impl fmt::Display for EntityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EntityKind::Item => "item",
            EntityKind::Mobile => "mobile",
            EntityKind::Spawner => "spawner",
        })
    }
}

/// A limit an entity breaks, with the offending value. Displays as a sentence naming the
/// value and the limit (the caller names the entity).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Breach {
    /// Nested deeper than [`MAX_CONTAINER_DEPTH`].
    TooDeep,
    /// Inside itself, through the container named.
    Cycle {
        /// A container on the loop, by which the entity holds itself.
        through: Serial,
    },
    /// `max` over [`MAX_SPAWN_COUNT`].
    SpawnCount(u16),
    /// `range` over [`MAX_SPAWN_RANGE`].
    SpawnRange(u16),
    /// `interval_minutes` outside [`SPAWN_INTERVAL_MINUTES`].
    SpawnInterval(u16),
    /// A spawned list longer than [`MAX_SPAWN_COUNT`].
    SpawnedList(usize),
    /// A place on no known map, or outside its map's bounds.
    OffMap(Location),
    /// A spawner's home not on a map (spawns would land nowhere).
    HomeNotOnMap(Location),
}

impl Breach {
    /// What kind of entity `serial` is, breaking this limit: a spawner's limits are broken by
    /// spawners, the others by the item or mobile the serial names.
    pub fn subject(self, serial: Serial) -> EntityKind {
        match self {
            Breach::SpawnCount(_)
            | Breach::SpawnRange(_)
            | Breach::SpawnInterval(_)
            | Breach::SpawnedList(_)
            | Breach::HomeNotOnMap(_) => EntityKind::Spawner,
            _ if serial.is_mobile() => EntityKind::Mobile,
            _ => EntityKind::Item,
        }
    }
}

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Breach::TooDeep => write!(
                f,
                "sits more than {MAX_CONTAINER_DEPTH} containers deep (the container depth \
                 limit)"
            ),
            Breach::Cycle { through } => {
                write!(
                    f,
                    "is inside itself (a containment cycle through {through})"
                )
            }
            Breach::SpawnCount(n) => write!(
                f,
                "keeps up to {n} spawns alive; the limit is {MAX_SPAWN_COUNT} (spawner max)"
            ),
            Breach::SpawnRange(n) => write!(
                f,
                "spreads spawns over {n} tiles; the limit is {MAX_SPAWN_RANGE} (spawner range)"
            ),
            Breach::SpawnInterval(n) => write!(
                f,
                "runs every {n} minutes; the limit is {} to {} minutes (spawner interval)",
                SPAWN_INTERVAL_MINUTES.start(),
                SPAWN_INTERVAL_MINUTES.end()
            ),
            Breach::SpawnedList(n) => write!(
                f,
                "lists {n} spawned entities; the limit is {MAX_SPAWN_COUNT} (spawner max)"
            ),
            Breach::OffMap(at) => write!(f, "stands at {}, {}", place(at), map_rule()),
            Breach::HomeNotOnMap(at) => write!(
                f,
                "has its home at {}; a spawner's home must be on a map, within its bounds",
                place(at)
            ),
        }
    }
}

fn place(at: &Location) -> String {
    format!("({}, {}, {}) on map {}", at.x, at.y, at.z, at.map.0)
}

fn map_rule() -> String {
    format!(
        "outside the map bounds (a known map 0–5 and x, y inside its size, or the internal \
         map {})",
        MapId::INTERNAL.0
    )
}

/// Where something not held by anything may be: the internal map (nowhere), or inside the
/// bounds of a known map.
pub fn check_place(at: &Location) -> Result<(), Breach> {
    if at.map == MapId::INTERNAL || at.is_on_map() {
        Ok(())
    } else {
        Err(Breach::OffMap(*at))
    }
}

/// A spawner's data is within the limits.
pub fn check_spawner(s: &Spawner) -> Result<(), Breach> {
    if s.max > MAX_SPAWN_COUNT {
        return Err(Breach::SpawnCount(s.max));
    }
    if s.range > MAX_SPAWN_RANGE {
        return Err(Breach::SpawnRange(s.range));
    }
    if !SPAWN_INTERVAL_MINUTES.contains(&s.interval_minutes) {
        return Err(Breach::SpawnInterval(s.interval_minutes));
    }
    if s.spawned.len() > usize::from(MAX_SPAWN_COUNT) {
        return Err(Breach::SpawnedList(s.spawned.len()));
    }
    if !s.home.is_on_map() {
        return Err(Breach::HomeNotOnMap(s.home));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::SpawnKind;

    #[test]
    fn places_off_every_map_are_refused() {
        let on = |x, y, map| check_place(&Location::new(x, y, 0, MapId(map)));
        assert_eq!(on(6143, 4095, 0), Ok(()));
        assert_eq!(on(0, 0, MapId::INTERNAL.0), Ok(()));
        assert!(on(6144, 0, 0).is_err());
        assert!(on(0, 1600, 2).is_err());
        assert!(on(1, 1, 9).is_err());
    }

    #[test]
    fn spawner_bounds_are_each_refused_with_the_limit() {
        let ok = Spawner {
            serial: Serial::ITEM_MIN,
            home: Location::new(10, 10, 0, MapId::FELUCCA),
            range: 12,
            max: 32,
            interval_minutes: 10,
            kind: SpawnKind::Creature(0),
            spawned: Vec::new(),
        };
        assert_eq!(check_spawner(&ok), Ok(()));
        let with = |f: fn(&mut Spawner)| {
            let mut s = ok.clone();
            f(&mut s);
            check_spawner(&s).unwrap_err().to_string()
        };
        assert!(with(|s| s.max = 65535).contains("65535 spawns alive; the limit is 256"));
        assert!(with(|s| s.range = 65).contains("the limit is 64"));
        assert!(with(|s| s.interval_minutes = 0).contains("1 to 10080 minutes"));
        assert!(with(|s| s.spawned = vec![Serial(1); 257]).contains("257 spawned"));
        assert!(with(|s| s.home = Location::INTERNAL).contains("must be on a map"));
    }
}
