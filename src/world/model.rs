//! The `World`: every item, mobile and spawner, looked up by serial, with the indexes kept in
//! step with them (container contents, sector membership) and the delta queues.
//!
//! All changes go through `World` methods (or the `item_mut` / `mobile_mut` guards), so every
//! change moves the indexes and marks a delta. Must never know about sockets, timers or
//! persistence formats: game logic drives it, networking drains its deltas, saves read its
//! plain-data entities.

use std::fmt;

use super::delta::{Delta, DeltaQueue, DeltaStats};
use super::entity::{Item, Mobile, Spawner};
use super::limits::{self, Breach};
use super::location::Location;
use super::pages::{ItemPages, MobilePages, SpawnerPages};
use super::sector::{SectorId, Sectors};
use super::serial::{IdMap, Serial, SerialAllocator};

/// A mobile entering or leaving the active part of the world (see `World::activate_around`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// It is now in an active sector: its behaviour should run.
    Woke,
    /// It is no longer in an active sector (or was removed): its behaviour should stop.
    Slept,
}

/// Told synchronously about every [`Activity`] change. It runs while the world is borrowed:
/// it must not touch the world (start tasks or timers instead).
pub(crate) type ActivityHook = Box<dyn FnMut(Activity, &Mobile)>;

/// Why an entity could not be added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorldError {
    /// An entity with this serial exists already.
    SerialInUse(Serial),
    /// A mobile serial for an item or the other way round (or 0).
    WrongRange(Serial),
    /// The parent named by an item does not exist.
    NoSuchParent(Serial),
    /// The spawner item does not exist.
    NoSuchItem(Serial),
    /// The entity would break one of the world's structural limits (`world::limits`).
    OverLimit(Serial, Breach),
}

impl fmt::Display for WorldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorldError::SerialInUse(s) => write!(f, "serial {s} is already in use"),
            WorldError::WrongRange(s) => write!(f, "serial {s} is not in the expected range"),
            WorldError::NoSuchParent(s) => write!(f, "parent {s} does not exist"),
            WorldError::NoSuchItem(s) => write!(f, "item {s} does not exist"),
            WorldError::OverLimit(s, breach) => write!(f, "{} {s} {breach}", breach.subject(*s)),
        }
    }
}

impl std::error::Error for WorldError {}

/// Every entity of the game, its indexes and its delta queues. Lives on the loop thread,
/// usually as `Rc<RefCell<World>>` shared by the game logic and the Deltas slot.
pub struct World {
    pub(super) seed: u64,
    pub(super) items: ItemPages,
    pub(super) mobiles: MobilePages,
    pub(super) spawners: SpawnerPages,
    /// Container or mobile → the items it holds.
    pub(super) contents: IdMap<Serial, Vec<Serial>>,
    pub(super) item_serials: SerialAllocator,
    pub(super) mobile_serials: SerialAllocator,
    pub(super) sectors: Sectors,
    pub(super) mobile_deltas: DeltaQueue,
    pub(super) item_deltas: DeltaQueue,
    pub(super) stats: DeltaStats,
    pub(super) hook: Option<ActivityHook>,
    /// What mobiles said since their `SPEECH` delta was last drained (the latest line each).
    pub(super) said: IdMap<Serial, String>,
}

impl World {
    /// An empty world. `seed` is kept for the game logic's random streams.
    pub fn new(seed: u64) -> World {
        World {
            seed,
            items: ItemPages::default(),
            mobiles: MobilePages::default(),
            spawners: SpawnerPages::default(),
            contents: IdMap::default(),
            item_serials: SerialAllocator::items(),
            mobile_serials: SerialAllocator::mobiles(),
            sectors: Sectors::default(),
            mobile_deltas: DeltaQueue::default(),
            item_deltas: DeltaQueue::default(),
            stats: DeltaStats::default(),
            hook: None,
            said: IdMap::default(),
        }
    }

    /// The seed the world was made with: games derive their random streams from it, so a
    /// loaded world draws the same numbers.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Reserves capacity for `items` more items and `mobiles` more mobiles.
    pub fn reserve(&mut self, items: usize, mobiles: usize) {
        self.items.reserve(items);
        self.mobiles.reserve(mobiles);
    }

    /// A free item serial.
    ///
    /// # Panics
    /// If all 2^30 item serials are in use.
    pub fn new_item_serial(&mut self) -> Serial {
        let items = &self.items;
        let serial = self.item_serials.allocate(|s| items.contains_key(&s));
        serial.expect("item serial range exhausted")
    }

    /// A free mobile serial.
    ///
    /// # Panics
    /// If all 2^30 mobile serials are in use.
    pub fn new_mobile_serial(&mut self) -> Serial {
        let mobiles = &self.mobiles;
        let serial = self.mobile_serials.allocate(|s| mobiles.contains_key(&s));
        serial.expect("mobile serial range exhausted")
    }

    /// The serials the item and mobile allocators try next. A save stores them so that a
    /// loaded world goes on numbering exactly where the saved one would have.
    pub fn next_serials(&self) -> (Serial, Serial) {
        (self.item_serials.peek(), self.mobile_serials.peek())
    }

    /// Sets what [`next_serials`](Self::next_serials) returns (after loading a save).
    /// Serials outside the allocator's range are ignored.
    pub fn resume_serials(&mut self, item: Serial, mobile: Serial) {
        self.item_serials.resume_at(item);
        self.mobile_serials.resume_at(mobile);
    }

    /// Adds an item that appears in the game (marks it `ADDED`). Its parent must exist, and
    /// it must not sit deeper than [`MAX_CONTAINER_DEPTH`](limits::MAX_CONTAINER_DEPTH).
    pub fn add_item(&mut self, item: Item) -> Result<Serial, WorldError> {
        if let Some(parent) = item.parent {
            if !self.items.contains_key(&parent) && !self.mobiles.contains_key(&parent) {
                return Err(WorldError::NoSuchParent(parent));
            }
            if self.items.contains_key(&parent) {
                let level = self.container_level(parent);
                if level.is_err() || level.is_ok_and(|l| l >= limits::MAX_CONTAINER_DEPTH) {
                    return Err(WorldError::OverLimit(item.serial, Breach::TooDeep));
                }
            }
        }
        let serial = self.restore_item(item)?;
        self.mark_item(serial, Delta::ADDED);
        Ok(serial)
    }

    /// Adds an item that already existed (world generation, loading a save): no delta, and
    /// its parent may be restored after it.
    pub fn restore_item(&mut self, item: Item) -> Result<Serial, WorldError> {
        let serial = item.serial;
        if !serial.is_item() {
            return Err(WorldError::WrongRange(serial));
        }
        if self.items.contains_key(&serial) {
            return Err(WorldError::SerialInUse(serial));
        }
        self.link_item(serial, item.parent, &item.location);
        self.items.insert(serial, item);
        if serial >= self.item_serials.peek() {
            self.item_serials.resume_after(serial);
        }
        Ok(serial)
    }

    /// Adds a mobile that appears in the game (marks it `ADDED`).
    pub fn add_mobile(&mut self, mobile: Mobile) -> Result<Serial, WorldError> {
        let serial = self.restore_mobile(mobile)?;
        self.mark_mobile(serial, Delta::ADDED);
        Ok(serial)
    }

    /// Adds a mobile that already existed (world generation, loading a save): no delta.
    pub fn restore_mobile(&mut self, mobile: Mobile) -> Result<Serial, WorldError> {
        let serial = mobile.serial;
        if !serial.is_mobile() {
            return Err(WorldError::WrongRange(serial));
        }
        if self.mobiles.contains_key(&serial) {
            return Err(WorldError::SerialInUse(serial));
        }
        let location = mobile.location;
        self.mobiles.insert(serial, mobile);
        if serial >= self.mobile_serials.peek() {
            self.mobile_serials.resume_after(serial);
        }
        self.relocate_mobile(serial, &Location::INTERNAL, &location);
        Ok(serial)
    }

    /// Attaches spawning data to an existing item (its serial), once. Data outside the
    /// spawner limits (`world::limits::check_spawner`) is refused.
    pub fn add_spawner(&mut self, spawner: Spawner) -> Result<(), WorldError> {
        if !self.items.contains_key(&spawner.serial) {
            return Err(WorldError::NoSuchItem(spawner.serial));
        }
        if self.spawners.contains_key(&spawner.serial) {
            return Err(WorldError::SerialInUse(spawner.serial));
        }
        limits::check_spawner(&spawner).map_err(|b| WorldError::OverLimit(spawner.serial, b))?;
        self.spawners.insert(spawner.serial, spawner);
        Ok(())
    }

    /// Deletes an item, everything inside it, and its spawning data; marks each `REMOVED`.
    pub fn remove_item(&mut self, serial: Serial) -> Option<Item> {
        self.delete_item(serial, true)
    }

    fn delete_item(&mut self, serial: Serial, unlink_from_parent: bool) -> Option<Item> {
        let item = self.items.remove(&serial)?;
        if unlink_from_parent || item.parent.is_none() {
            self.unlink_item(serial, item.parent, &item.location);
        }
        self.spawners.remove(&serial);
        self.mark_item(serial, Delta::REMOVED);
        self.delete_contents(serial);
        Some(item)
    }

    /// Deletes everything inside `parent`, at any depth, with a stack of its own rather than
    /// recursion: a chain as deep as a hostile save makes it costs heap, not thread stack.
    /// Each item goes (and is marked `REMOVED`) before its contents, siblings in order.
    fn delete_contents(&mut self, parent: Serial) {
        let mut pending: Vec<Serial> = Vec::new();
        push_reversed(&mut pending, self.contents.remove(&parent));
        while let Some(child) = pending.pop() {
            // Removed already (a cycle, which `check_limits` and `put_item_in` refuse).
            if self.items.remove(&child).is_none() {
                continue;
            }
            self.spawners.remove(&child);
            self.mark_item(child, Delta::REMOVED);
            push_reversed(&mut pending, self.contents.remove(&child));
        }
    }

    /// Deletes a mobile and everything it wears or carries; marks each `REMOVED`.
    pub fn remove_mobile(&mut self, serial: Serial) -> Option<Mobile> {
        let location = self.mobiles.get(&serial)?.location;
        self.relocate_mobile(serial, &location, &Location::INTERNAL);
        let mobile = self.mobiles.remove(&serial)?;
        self.said.remove(&serial);
        self.delete_contents(serial);
        self.mark_mobile(serial, Delta::REMOVED);
        Some(mobile)
    }

    /// The item `serial`, if it exists. To change one, [`item_mut`](Self::item_mut) (which
    /// marks its delta).
    pub fn item(&self, serial: Serial) -> Option<&Item> {
        self.items.get(&serial)
    }

    /// The mobile `serial`, if it exists. To change one, [`mobile_mut`](Self::mobile_mut).
    pub fn mobile(&self, serial: Serial) -> Option<&Mobile> {
        self.mobiles.get(&serial)
    }

    /// The spawning data of spawner item `serial`, if it is a spawner.
    pub fn spawner(&self, serial: Serial) -> Option<&Spawner> {
        self.spawners.get(&serial)
    }

    /// Spawning data is server-side only: changing it marks no delta.
    pub fn spawner_mut(&mut self, serial: Serial) -> Option<&mut Spawner> {
        self.spawners.get_mut(&serial)
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

    /// Items in the world (on the ground, in containers, worn).
    pub fn item_count(&self) -> usize {
        self.items.len()
    }

    /// Mobiles in the world, logged-in players' characters included.
    pub fn mobile_count(&self) -> usize {
        self.mobiles.len()
    }

    /// Spawners in the world.
    pub fn spawner_count(&self) -> usize {
        self.spawners.len()
    }

    /// The items held by a container or worn and carried by a mobile (directly).
    pub fn contents(&self, parent: Serial) -> &[Serial] {
        self.contents.get(&parent).map_or(&[], Vec::as_slice)
    }

    /// The mobiles in one sector.
    pub fn mobiles_in(&self, sector: SectorId) -> &[Serial] {
        self.sectors.mobiles(sector)
    }

    /// The items on the ground of one sector.
    pub fn items_in(&self, sector: SectorId) -> &[Serial] {
        self.sectors.items(sector)
    }

    /// Files an item under its parent, or its sector when on the ground.
    pub(super) fn link_item(&mut self, serial: Serial, parent: Option<Serial>, at: &Location) {
        match parent {
            Some(parent) => self.contents.entry(parent).or_default().push(serial),
            None => {
                if let Some(sector) = SectorId::of(at) {
                    self.sectors.add_item(sector, serial);
                }
            }
        }
    }

    /// Undoes [`link_item`](Self::link_item).
    pub(super) fn unlink_item(&mut self, serial: Serial, parent: Option<Serial>, at: &Location) {
        match parent {
            Some(parent) => {
                if let Some(list) = self.contents.get_mut(&parent) {
                    list.retain(|&s| s != serial);
                    if list.is_empty() {
                        self.contents.remove(&parent);
                    }
                }
            }
            None => {
                if let Some(sector) = SectorId::of(at) {
                    self.sectors.remove_item(sector, serial);
                }
            }
        }
    }
}

/// Appends `children` last-first, so that popping yields them in order.
fn push_reversed(stack: &mut Vec<Serial>, children: Option<Vec<Serial>>) {
    stack.extend(children.unwrap_or_default().into_iter().rev());
}

impl PartialEq for World {
    /// Same seed, entities, spawners and serial allocators (indexes and queues follow).
    fn eq(&self, other: &World) -> bool {
        self.seed == other.seed
            && self.items == other.items
            && self.mobiles == other.mobiles
            && self.spawners == other.spawners
            && self.item_serials == other.item_serials
            && self.mobile_serials == other.mobile_serials
    }
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("World")
            .field("seed", &self.seed)
            .field("items", &self.items.len())
            .field("mobiles", &self.mobiles.len())
            .field("spawners", &self.spawners.len())
            .field("active_sectors", &self.sectors.active_count())
            .field("pending_deltas", &self.pending_deltas())
            .finish()
    }
}
