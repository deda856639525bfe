//! What the demo's world timers share — the world, the seed their random streams derive
//! from, the timer of each decaying item and spawner, the counters — as `decay.rs` and
//! `spawners.rs` extend it and `logic.rs` starts it.
//!
//! Owns that state only; must never start a timer itself.

use std::cell::{Cell, RefCell};
use std::hash::BuildHasherDefault;
use std::rc::Rc;

use shardloop::runtime::Keyed;
use shardloop::timer::TimerToken;
use shardloop::world::rng::Rng;
use shardloop::world::{IdHasher, Serial, World};

/// What runs for each entity (an item's decay, a spawner's cadence), with the cheap id
/// hasher.
pub(super) type ByEntity<H> = Keyed<Serial, H, BuildHasherDefault<IdHasher>>;

/// The random stream spawners draw what they make from.
pub(super) const SPAWN_STREAM: u64 = 4 << 56;

/// Counters of the game logic since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogicStats {
    /// Decay timers that fired and deleted their item.
    pub decays: u64,
    /// Spawner timer runs.
    pub spawner_runs: u64,
    pub spawned_mobiles: u64,
    pub spawned_items: u64,
    /// Bark tasks started (an NPC woke up) and stopped (it fell asleep or was removed, or
    /// the logic stopped). Zero for the world timers alone ([`super::logic::WorldTimers`]).
    pub barks_started: u64,
    pub barks_stopped: u64,
}

impl LogicStats {
    /// World timer fires: what an idle shard (no players) runs.
    pub fn world_fires(&self) -> u64 {
        self.decays + self.spawner_runs
    }
}

/// What the world timers share: the world, the seed their random streams derive from, and
/// what runs for each entity.
pub(super) struct Logic {
    pub(super) world: Rc<RefCell<World>>,
    pub(super) seed: u64,
    pub(super) spawn_rng: RefCell<Rng>,
    pub(super) decay: ByEntity<TimerToken>,
    pub(super) spawners: ByEntity<TimerToken>,
    pub(super) stats: Cell<LogicStats>,
}

impl Logic {
    pub(super) fn count(&self, f: impl FnOnce(&mut LogicStats)) {
        let mut stats = self.stats.get();
        f(&mut stats);
        self.stats.set(stats);
    }
}
