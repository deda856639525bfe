//! The generator's content: creature and item templates, and the constructors that put a
//! creature (with its gear), a container (with its contents) or a ground item into a world.
//!
//! Shared by the generator (entities that already existed: no deltas) and the spawners
//! (entities that appear: `ADDED` deltas). Must never schedule anything (timers belong to the
//! game logic) nor decide how many of each thing a world holds (the generator does).

use super::entity::{Item, Mobile, layer};
use super::location::Location;
use super::model::World;
use super::rng::Rng;
use super::serial::Serial;

/// The spawner item's graphic (invisible to players).
pub(crate) const SPAWNER_ITEM: u16 = 0x1F13;
pub(crate) const BACKPACK: u16 = 0x0E75;
pub(crate) const BANK_BOX: u16 = 0x09AB;
pub(crate) const GOLD: u16 = 0x0EED;

/// A kind of creature a spawner can make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CreatureTemplate {
    pub name: &'static str,
    pub body: u16,
    pub hits: u16,
    pub str: u16,
    pub dex: u16,
    pub int: u16,
}

const fn creature(name: &'static str, body: u16, hits: u16, stats: [u16; 3]) -> CreatureTemplate {
    let [str, dex, int] = stats;
    CreatureTemplate {
        name,
        body,
        hits,
        str,
        dex,
        int,
    }
}

/// The creatures of the demo world.
pub(crate) const CREATURES: &[CreatureTemplate] = &[
    creature("a townsperson", 0x0190, 60, [50, 40, 40]),
    creature("a vendor", 0x0190, 80, [60, 50, 50]),
    creature("a guard", 0x0190, 400, [200, 100, 80]),
    creature("a brigand", 0x0190, 80, [70, 60, 50]),
    creature("a rabbit", 0x00CD, 8, [10, 25, 5]),
    creature("a grey wolf", 0x0019, 40, [60, 50, 20]),
    creature("a mongbat", 0x0027, 10, [10, 25, 10]),
    creature("an orc", 0x0011, 70, [100, 60, 40]),
    creature("a skeleton", 0x0032, 40, [50, 60, 20]),
    creature("a zombie", 0x0003, 50, [50, 30, 20]),
    creature("a headless one", 0x001F, 40, [40, 40, 20]),
    creature("a lizardman", 0x0021, 60, [90, 80, 40]),
    creature("an ettin", 0x0012, 200, [150, 50, 30]),
    creature("a troll", 0x0036, 250, [180, 50, 40]),
];

/// Resources item spawners lay on the ground: (graphic, largest pile).
pub(crate) const RESOURCES: &[(u16, u16)] = &[
    (0x0F7A, 5),  // black pearl
    (0x0F7B, 5),  // blood moss
    (0x0F84, 5),  // garlic
    (0x0F85, 5),  // ginseng
    (0x0F86, 5),  // mandrake root
    (0x0F88, 5),  // nightshade
    (0x0F8C, 5),  // sulfurous ash
    (0x0F8D, 5),  // spider's silk
    (0x19B9, 10), // ore
    (0x1BDD, 10), // logs
];

/// What players leave lying around (these decay).
pub(crate) const LITTER: &[u16] = &[0x0ECA, 0x09D0, 0x0F0E, 0x0F51, 0x1F03, 0x0E21, 0x13F6];
/// Fixed decoration on the ground (never decays, not movable).
pub(crate) const DECOR: &[u16] = &[
    0x0B90, 0x0B4F, 0x0B20, 0x0A28, 0x0C83, 0x0E77, 0x0E3D, 0x0CE3, 0x0D25, 0x1E5E,
];
/// Chests placed in towns.
pub(crate) const CHESTS: &[u16] = &[0x0E42, 0x0E43, 0x09A9, 0x0E7C];
/// What containers hold.
pub(crate) const LOOT: &[u16] = &[
    GOLD, 0x0F7A, 0x0F7B, 0x0F84, 0x1F4C, 0x0F0E, 0x0EFA, 0x1BF2, 0x097B,
];
/// Worn clothing, in the order a creature is dressed: (graphic, layer).
pub(crate) const CLOTHES: &[(u16, u8)] = &[
    (0x1517, layer::SHIRT),
    (0x152E, layer::PANTS),
    (0x170F, layer::SHOES),
];
/// Names of people.
pub(crate) const NAMES: &[&str] = &[
    "Adrian", "Beatrix", "Corwin", "Delia", "Edmund", "Fiona", "Gareth", "Helena", "Ivor",
    "Jocelyn", "Kestrel", "Lorien", "Maeve", "Nolan", "Ophelia", "Perrin",
];
/// Whether a creature appears in the game (a spawn: `ADDED` deltas) or already existed
/// (generation or loading: no deltas).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    Generated,
    Spawned,
}

/// Puts an item in the world, by `origin`.
///
/// # Panics
/// If its parent does not exist (a bug in the caller: parents are put first).
pub(crate) fn put_item(world: &mut World, item: Item, origin: Origin) -> Serial {
    let added = match origin {
        Origin::Generated => world.restore_item(item),
        Origin::Spawned => world.add_item(item),
    };
    added.expect("fresh serial, parent present")
}

fn put_mobile(world: &mut World, mobile: Mobile, origin: Origin) -> Serial {
    let added = match origin {
        Origin::Generated => world.restore_mobile(mobile),
        Origin::Spawned => world.add_mobile(mobile),
    };
    added.expect("fresh serial")
}

/// A creature of `CREATURES[template]` at `at`, carrying `gear` items (clothes, then a
/// backpack holding the rest).
pub(crate) fn make_creature(
    world: &mut World,
    rng: &mut Rng,
    template: u16,
    at: Location,
    gear: u32,
    spawner: Option<Serial>,
    origin: Origin,
) -> Serial {
    let t = CREATURES[usize::from(template) % CREATURES.len()];
    let mut mobile = Mobile::new(world.new_mobile_serial(), t.name, t.body);
    mobile.location = at;
    mobile.direction = rng.below(8) as u8;
    mobile.hits_max = t.hits;
    mobile.hits = t.hits;
    (mobile.str, mobile.dex, mobile.int) = (t.str, t.dex, t.int);
    mobile.stam = t.dex;
    mobile.mana = t.int;
    mobile.is_npc = true;
    mobile.spawner = spawner;
    let serial = put_mobile(world, mobile, origin);
    dress(world, rng, serial, gear, origin);
    serial
}

/// A logged-out player character (on the internal map) with a backpack and a bank box
/// sharing `items` items between them and their contents.
pub(crate) fn make_player(world: &mut World, rng: &mut Rng, items: u32) -> Serial {
    let female = rng.percent(50);
    let body = if female { 0x0191 } else { 0x0190 };
    let mut mobile = Mobile::new(world.new_mobile_serial(), *rng.pick(NAMES), body);
    mobile.female = female;
    mobile.hue = 0x83EA + rng.below(50) as u16;
    (
        mobile.hits,
        mobile.hits_max,
        mobile.str,
        mobile.dex,
        mobile.int,
    ) = (100, 100, 100, 80, 60);
    let serial = put_mobile(world, mobile, Origin::Generated);
    let in_pack = items.div_ceil(2);
    wear_container(world, rng, serial, BACKPACK, layer::BACKPACK, in_pack);
    wear_container(world, rng, serial, BANK_BOX, layer::BANK, items - in_pack);
    serial
}

/// Clothes first, then a backpack with the rest as loot.
fn dress(world: &mut World, rng: &mut Rng, mobile: Serial, gear: u32, origin: Origin) {
    let clothes = if gear > CLOTHES.len() as u32 {
        CLOTHES.len()
    } else {
        gear as usize
    };
    for &(item_id, worn) in &CLOTHES[..clothes] {
        let mut item = Item::new(world.new_item_serial(), item_id);
        item.parent = Some(mobile);
        item.layer = worn;
        item.hue = rng.below(1000) as u16;
        put_item(world, item, origin);
    }
    let rest = gear - clothes as u32;
    if rest > 0 {
        let mut pack = Item::new(world.new_item_serial(), BACKPACK);
        pack.parent = Some(mobile);
        pack.layer = layer::BACKPACK;
        pack.container = true;
        let pack = put_item(world, pack, origin);
        fill(world, rng, pack, rest - 1, origin);
    }
}

/// A worn container (backpack, bank box) holding `total - 1` items; nothing if `total` is 0.
fn wear_container(world: &mut World, rng: &mut Rng, mobile: Serial, id: u16, worn: u8, total: u32) {
    if total == 0 {
        return;
    }
    let mut item = Item::new(world.new_item_serial(), id);
    item.parent = Some(mobile);
    item.layer = worn;
    item.container = true;
    let container = put_item(world, item, Origin::Generated);
    fill(world, rng, container, total - 1, Origin::Generated);
}

/// A chest on the ground at `at` holding `contents` items.
pub(crate) fn make_chest(world: &mut World, rng: &mut Rng, at: Location, contents: u32) -> Serial {
    let mut chest = Item::new(world.new_item_serial(), *rng.pick(CHESTS));
    chest.location = at;
    chest.container = true;
    chest.movable = false;
    let chest = put_item(world, chest, Origin::Generated);
    fill(world, rng, chest, contents, Origin::Generated);
    chest
}

/// Puts `count` loot items into a container.
fn fill(world: &mut World, rng: &mut Rng, container: Serial, count: u32, origin: Origin) {
    for _ in 0..count {
        let item_id = *rng.pick(LOOT);
        let mut item = Item::new(world.new_item_serial(), item_id);
        item.parent = Some(container);
        item.location = Location::new(
            rng.range(40..140) as u16,
            rng.range(60..140) as u16,
            0,
            Default::default(),
        );
        item.amount = if item_id == GOLD {
            rng.range(1..500) as u16
        } else {
            1
        };
        put_item(world, item, origin);
    }
}

/// An item lying on the ground at `at`.
pub(crate) fn make_ground_item(
    world: &mut World,
    item_id: u16,
    at: Location,
    decays: bool,
    origin: Origin,
) -> Serial {
    let item = ground_item(world, item_id, at, decays);
    put_item(world, item, origin)
}

/// An item for the ground at `at` (not yet in the world).
pub(crate) fn ground_item(world: &mut World, item_id: u16, at: Location, decays: bool) -> Item {
    let mut item = Item::new(world.new_item_serial(), item_id);
    item.location = at;
    item.decays = decays;
    item.movable = decays;
    item
}

/// A pile of `RESOURCES[template]` on the ground at `at` (it decays).
pub(crate) fn make_resource(
    world: &mut World,
    rng: &mut Rng,
    template: u16,
    at: Location,
    origin: Origin,
) -> Serial {
    let (item_id, most) = RESOURCES[usize::from(template) % RESOURCES.len()];
    let mut item = ground_item(world, item_id, at, true);
    item.amount = rng.range(1..u64::from(most) + 1) as u16;
    put_item(world, item, origin)
}
