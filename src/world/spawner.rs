//! What a spawner does when it runs: forget what it spawned that is gone, then top its group
//! up to `max` around its home.
//!
//! World-side only: must never start timers (the game logic schedules spawners and the
//! decay of what they spawn) and never read the clock.

use super::content::{self, Origin};
use super::entity::SpawnKind;
use super::limits::{MAX_SPAWN_COUNT, MAX_SPAWN_RANGE};
use super::model::World;
use super::rng::Rng;
use super::serial::Serial;

/// What one run of a spawner made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopUp {
    /// Creatures made (with their gear, whose items are not listed).
    pub mobiles: Vec<Serial>,
    /// Ground items made (resources).
    pub items: Vec<Serial>,
}

/// Gear a respawned creature carries (clothes and a backpack).
const RESPAWN_GEAR: u32 = 4;

/// Runs spawner `serial` once: prunes its dead, spawns up to `max`. `None` if there is no
/// such spawner (it was deleted). Whatever its data says (it can be changed through
/// `spawner_mut`), one run spawns at most [`MAX_SPAWN_COUNT`] within [`MAX_SPAWN_RANGE`].
pub fn top_up(world: &mut World, serial: Serial, rng: &mut Rng) -> Option<TopUp> {
    let spawner = world.spawners.get(&serial)?;
    let alive: Vec<Serial> = spawner
        .spawned
        .iter()
        .copied()
        .filter(|&s| world.items.contains_key(&s) || world.mobiles.contains_key(&s))
        .collect();
    let max = spawner.max.min(MAX_SPAWN_COUNT);
    let missing = usize::from(max).saturating_sub(alive.len());
    let (home, range, kind) = (
        spawner.home,
        spawner.range.min(MAX_SPAWN_RANGE),
        spawner.kind,
    );
    let mut made = TopUp::default();
    for _ in 0..missing {
        let at = home.offset_clamped(rng.offset(range), rng.offset(range));
        match kind {
            SpawnKind::Creature(t) => made.mobiles.push(content::make_creature(
                world,
                rng,
                t,
                at,
                RESPAWN_GEAR,
                Some(serial),
                Origin::Spawned,
            )),
            SpawnKind::Item(t) => {
                made.items
                    .push(content::make_resource(world, rng, t, at, Origin::Spawned));
            }
        }
    }
    let spawner = world.spawners.get_mut(&serial)?;
    spawner.spawned = alive;
    spawner
        .spawned
        .extend(made.mobiles.iter().chain(&made.items));
    Some(made)
}
