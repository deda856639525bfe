//! Sectors: the map cut into 16×16-tile squares, which entities are in each, and which are
//! active (near a player).
//!
//! As in the C# shard, a player activates the sectors within [`ACTIVE_RANGE`] of its own;
//! behaviour that costs timers (AI, barks) runs only in active sectors. Owns the membership
//! lists and activation counts; must never start or stop behaviour itself (the `World`
//! reports mobiles waking and sleeping to the game logic's hook).

use std::hash::{Hash, Hasher};

use super::location::{Location, MapId};
use super::serial::{IdMap, Serial};

/// Tiles per sector side.
pub const SECTOR_SIZE: u16 = 16;
/// Sectors activated around a player's sector in each direction: a player keeps
/// (2·2+1)² = 25 sectors (80×80 tiles) active.
pub const ACTIVE_RANGE: u16 = 2;

/// One sector of one map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SectorId {
    /// The map it is on (never [`MapId::INTERNAL`], which has no sectors).
    pub map: MapId,
    /// Column: the tile `x` divided by [`SECTOR_SIZE`].
    pub x: u16,
    /// Row: the tile `y` divided by [`SECTOR_SIZE`].
    pub y: u16,
}

impl SectorId {
    /// The sector holding `location`; `None` off the maps (internal map, out of bounds).
    pub fn of(location: &Location) -> Option<SectorId> {
        location.is_on_map().then_some(SectorId {
            map: location.map,
            x: location.x / SECTOR_SIZE,
            y: location.y / SECTOR_SIZE,
        })
    }

    /// The sectors within `range` of this one (itself included), clipped to the map.
    pub fn around(self, range: u16) -> impl Iterator<Item = SectorId> {
        let (w, h) = self.map.size().unwrap_or((0, 0));
        let (max_x, max_y) = (w.div_ceil(SECTOR_SIZE), h.div_ceil(SECTOR_SIZE));
        let xs = self.x.saturating_sub(range)..(self.x + range + 1).min(max_x);
        let ys = self.y.saturating_sub(range)..(self.y + range + 1).min(max_y);
        let map = self.map;
        xs.flat_map(move |x| ys.clone().map(move |y| SectorId { map, x, y }))
    }
}

impl Hash for SectorId {
    /// One packed `u32` (map, x, y), for [`IdHasher`](super::serial::IdHasher).
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u32(u32::from(self.map.0) << 24 | u32::from(self.x) << 12 | u32::from(self.y));
    }
}

/// The entities of one sector and how many players keep it active.
#[derive(Debug, Default)]
struct Sector {
    mobiles: Vec<Serial>,
    items: Vec<Serial>,
    players: u32,
}

/// Every non-empty or active sector.
#[derive(Debug, Default)]
pub(crate) struct Sectors {
    sectors: IdMap<SectorId, Sector>,
    active: usize,
}

impl Sectors {
    pub(crate) fn add_mobile(&mut self, id: SectorId, serial: Serial) {
        self.sectors.entry(id).or_default().mobiles.push(serial);
    }

    pub(crate) fn remove_mobile(&mut self, id: SectorId, serial: Serial) {
        self.edit(id, |s| remove(&mut s.mobiles, serial));
    }

    pub(crate) fn add_item(&mut self, id: SectorId, serial: Serial) {
        self.sectors.entry(id).or_default().items.push(serial);
    }

    pub(crate) fn remove_item(&mut self, id: SectorId, serial: Serial) {
        self.edit(id, |s| remove(&mut s.items, serial));
    }

    pub(crate) fn mobiles(&self, id: SectorId) -> &[Serial] {
        self.sectors.get(&id).map_or(&[], |s| &s.mobiles)
    }

    pub(crate) fn items(&self, id: SectorId) -> &[Serial] {
        self.sectors.get(&id).map_or(&[], |s| &s.items)
    }

    pub(crate) fn is_active(&self, id: SectorId) -> bool {
        self.sectors.get(&id).is_some_and(|s| s.players > 0)
    }

    pub(crate) fn active_count(&self) -> usize {
        self.active
    }

    /// The active sectors, in no particular (but deterministic) order.
    pub(crate) fn active(&self) -> impl Iterator<Item = SectorId> + '_ {
        self.sectors
            .iter()
            .filter(|(_, s)| s.players > 0)
            .map(|(id, _)| *id)
    }

    /// One more player near `id`; true if that made it active.
    pub(crate) fn enter(&mut self, id: SectorId) -> bool {
        let sector = self.sectors.entry(id).or_default();
        sector.players += 1;
        let woke = sector.players == 1;
        self.active += usize::from(woke);
        woke
    }

    /// One player fewer near `id`; true if that made it inactive.
    pub(crate) fn leave(&mut self, id: SectorId) -> bool {
        let mut slept = false;
        self.edit(id, |s| {
            if s.players > 0 {
                s.players -= 1;
                slept = s.players == 0;
            }
        });
        self.active -= usize::from(slept);
        slept
    }

    /// Applies `f` to a sector, then forgets the sector if it is empty and inactive.
    fn edit(&mut self, id: SectorId, f: impl FnOnce(&mut Sector)) {
        if let Some(sector) = self.sectors.get_mut(&id) {
            f(sector);
            if sector.players == 0 && sector.mobiles.is_empty() && sector.items.is_empty() {
                self.sectors.remove(&id);
            }
        }
    }
}

fn remove(list: &mut Vec<Serial>, serial: Serial) {
    if let Some(i) = list.iter().position(|&s| s == serial) {
        list.swap_remove(i);
    }
}
