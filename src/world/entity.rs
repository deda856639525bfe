//! The entities: items, mobiles and spawners, as plain data.
//!
//! These are the fields a world save stores: no handles, no timers, no caches. Must never
//! hold runtime state (timers, tasks, sockets) nor know how it is encoded on disk or on the
//! wire; the `World` keeps every index built from them.

use std::sync::Arc;

use super::location::Location;
use super::serial::Serial;

/// Equipment layers (where an item sits on a mobile), as numbered by the game client.
pub mod layer {
    /// Not worn: on the ground or in a container.
    pub const NONE: u8 = 0x00;
    /// A one-handed weapon, in the right hand.
    pub const ONE_HANDED: u8 = 0x01;
    /// Shoes, boots, sandals.
    pub const SHOES: u8 = 0x03;
    /// Pants, skirts.
    pub const PANTS: u8 = 0x04;
    /// Shirts.
    pub const SHIRT: u8 = 0x05;
    /// Helms and hats.
    pub const HELM: u8 = 0x06;
    /// The backpack: a container every character wears.
    pub const BACKPACK: u8 = 0x15;
    /// Robes and other outer torso wear.
    pub const OUTER_TORSO: u8 = 0x16;
    /// The bank box: a container worn but never shown, opened at a banker.
    pub const BANK: u8 = 0x1D;
}

/// An item: on the ground (`parent == None`, `location` on a map), in a container, or worn by
/// a mobile (`parent` is the container or the mobile).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// Its serial: unique among items, never reused.
    pub serial: Serial,
    /// The graphic (art id) the client draws.
    pub item_id: u16,
    /// How many it stands for (a pile of 500 gold is one item); at least 1.
    pub amount: u16,
    /// The colour the client tints it with; 0 = the graphic's own.
    pub hue: u16,
    /// On the ground: the world position. Inside a container: the position in its window.
    pub location: Location,
    /// The container or mobile holding it; `None` on the ground.
    pub parent: Option<Serial>,
    /// Where it is worn (see [`layer`]); `layer::NONE` when not worn.
    pub layer: u8,
    /// Deleted by a decay timer some time after being left on the ground.
    pub decays: bool,
    /// Players may pick it up (statics and spawners are not movable).
    pub movable: bool,
    /// Players may see it; `false` for an item kept in the world but not to be shown.
    pub visible: bool,
    /// Holds other items (bags, chests, backpacks).
    pub container: bool,
}

impl Item {
    /// An item of graphic `item_id`, amount 1, nowhere, movable and visible.
    pub fn new(serial: Serial, item_id: u16) -> Item {
        Item {
            serial,
            item_id,
            amount: 1,
            hue: 0,
            location: Location::INTERNAL,
            parent: None,
            layer: layer::NONE,
            decays: false,
            movable: true,
            visible: true,
            container: false,
        }
    }

    /// On the ground of a map (not held, not nowhere).
    pub fn is_on_ground(&self) -> bool {
        self.parent.is_none() && self.location.is_on_map()
    }
}

/// A creature or a character.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mobile {
    /// Its serial: unique among mobiles, never reused.
    pub serial: Serial,
    /// Shared, immutable text: copying a mobile (a save's snapshot copies every one) bumps a
    /// count instead of allocating.
    pub name: Arc<str>,
    /// The body graphic the client draws.
    pub body: u16,
    /// The skin colour the client tints the body with; 0 = the body's own.
    pub hue: u16,
    /// Where it stands; [`Location::INTERNAL`] while it is in no map.
    pub location: Location,
    /// 0..=7, north clockwise.
    pub direction: u8,
    /// Hit points now, 0 ..= `hits_max`.
    pub hits: u16,
    /// Hit points when unhurt.
    pub hits_max: u16,
    /// Stamina now.
    pub stam: u16,
    /// Mana now.
    pub mana: u16,
    /// Strength.
    pub str: u16,
    /// Dexterity.
    pub dex: u16,
    /// Intelligence.
    pub int: u16,
    /// Drawn as female (the body graphic usually says so too).
    pub female: bool,
    /// Driven by the server (false for player characters).
    pub is_npc: bool,
    /// The spawner that made it, if any.
    pub spawner: Option<Serial>,
}

impl Mobile {
    /// A mobile of body `body` with 1 in every stat, nowhere.
    pub fn new(serial: Serial, name: impl Into<Arc<str>>, body: u16) -> Mobile {
        Mobile {
            serial,
            name: name.into(),
            body,
            hue: 0,
            location: Location::INTERNAL,
            direction: 0,
            hits: 1,
            hits_max: 1,
            stam: 1,
            mana: 1,
            str: 1,
            dex: 1,
            int: 1,
            female: false,
            is_npc: false,
            spawner: None,
        }
    }
}

/// What a spawner makes: an index into the generator's creature or item templates (`content.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpawnKind {
    /// A creature: the index of its template in the generator's creature table.
    Creature(u16),
    /// A ground item (a resource): the index of its template in the generator's resource
    /// table.
    Item(u16),
}

/// The spawning data of a spawner item (the item with the same serial).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spawner {
    /// The serial of the spawner item.
    pub serial: Serial,
    /// The centre of its area: where the spawner item stands.
    pub home: Location,
    /// Spawns land within this many tiles of `home`.
    pub range: u16,
    /// How many spawns it keeps alive.
    pub max: u16,
    /// Its cadence: it tops up every `interval_minutes`.
    pub interval_minutes: u16,
    /// What it makes.
    pub kind: SpawnKind,
    /// What it spawned (entries that no longer exist are pruned when it next runs).
    pub spawned: Vec<Serial>,
}
