//! The demo game's world behaviour, written as a game developer writes it on shardloop's
//! timer API: ground items decay on one-shot timers ([`super::decay`]), spawners top up on
//! minute cadences ([`super::spawners`]) — the world-level timers the demo game starts with
//! the shard ([`super::demo`]) — and, for tests and tools that run the logic without a
//! shard, [`start_game_logic`] adds the NPC barks ([`super::barks`]) through the same
//! behaviour engine the shard uses. This file ties them together: starting them, the
//! counters, and stopping everything.
//!
//! Must never touch sockets or save formats, never block, and never hold a world borrow
//! while starting or polling anything that could borrow it again.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use shardloop::game::{Behaviours, Game};
use shardloop::timer::TimerToken;
use shardloop::world::rng::Rng;
use shardloop::world::{Serial, World};

use super::decay::{DECAY_MAX, DECAY_MIN, decaying_items};
use super::spawners::spawners;
use super::state::{ByEntity, Logic, SPAWN_STREAM};

pub use super::state::LogicStats;

/// A handle on the running game logic: the world timers and the barks. Dropping it does not
/// stop the logic (the timers own it); [`stop`](Self::stop) does.
pub struct GameLogic {
    timers: WorldTimers,
    barks: Behaviours,
}

/// A handle on the demo's world timers (decay and spawners). Dropping it does not stop them;
/// [`stop`](Self::stop) does.
pub struct WorldTimers {
    game: Rc<Logic>,
}

/// Starts the demo's game logic on this loop without a shard: [`start_world_timers`] and the
/// barks of NPCs in active sectors, now and whenever one wakes (the world's activity hook is
/// the barks'). A shard starts the same through [`super::demo`].
///
/// **Idle load** (no players: only decay and spawner timers fire). A spawner fires once per
/// interval, intervals uniform over 5–15 min; the default world (`generate_default`) has
/// 1 795 spawners, Σ 1/interval = **3.34 fires/s**. Its 1 907 decaying ground items go
/// uniformly over minutes 10–60 (1 907 / 3 000 s = 0.64 fires/s), and the resource piles
/// among them come back when their spawner next runs, to decay again. Measured under paused
/// time (`tests/world.rs`, `docs/world.md`): **3.3 fires/s** over the first 10 minutes (all
/// spawner runs), **4.1 fires/s** over minutes 10–60, **3.8 fires/s** in the steady state
/// (hours 2–6) — and at most one loop wake-up per fire (3.25 fired ticks/s at first).
/// A player adds the barks of the NPCs around it (two pauses per 17–33 s line each).
/// [`idle_load`] computes the expected figures for any world.
///
/// # Panics
/// Off the loop thread.
pub fn start_game_logic(world: Rc<RefCell<World>>) -> GameLogic {
    let timers = start_world_timers(world.clone());
    let barks = Behaviours::run(world, super::barks::npc_behaviours(Game::new("demo")));
    GameLogic { timers, barks }
}

/// Starts the demo's world timers on this loop: a decay timer per decaying ground item and a
/// repeating timer per spawner (first run at a random point of its first interval, so their
/// load is spread out).
///
/// # Panics
/// Off the loop thread.
pub fn start_world_timers(world: Rc<RefCell<World>>) -> WorldTimers {
    let seed = world.borrow().seed();
    let game = Rc::new(Logic {
        world,
        seed,
        spawn_rng: RefCell::new(Rng::derive(seed, SPAWN_STREAM)),
        decay: ByEntity::new(),
        spawners: ByEntity::new(),
        stats: Cell::default(),
    });
    for item in decaying_items(&game.world.borrow()) {
        game.schedule_decay(item);
    }
    for (spawner, minutes) in spawners(&game.world.borrow()) {
        game.schedule_spawner(spawner, minutes);
    }
    WorldTimers { game }
}

impl WorldTimers {
    pub fn stats(&self) -> LogicStats {
        self.game.stats.get()
    }

    /// The decay timer of a ground item, while it is pending.
    pub fn decay_timer(&self, item: Serial) -> Option<TimerToken> {
        self.game.decay.get(&item)
    }

    /// The repeating timer of a spawner.
    pub fn spawner_timer(&self, spawner: Serial) -> Option<TimerToken> {
        self.game.spawners.get(&spawner)
    }

    /// World timers pending: decay timers plus spawner timers.
    pub fn world_timers(&self) -> usize {
        self.game.decay.len() + self.game.spawners.len()
    }

    /// Cancels every timer.
    ///
    /// # Panics
    /// Off the loop thread.
    pub fn stop(&self) {
        self.game.decay.cancel_all();
        self.game.spawners.cancel_all();
    }
}

impl GameLogic {
    pub fn stats(&self) -> LogicStats {
        let barks = self.barks.stats().first().copied().unwrap_or_default();
        LogicStats {
            barks_started: barks.started,
            barks_stopped: barks.stopped,
            ..self.timers.stats()
        }
    }

    /// The decay timer of a ground item, while it is pending.
    pub fn decay_timer(&self, item: Serial) -> Option<TimerToken> {
        self.timers.decay_timer(item)
    }

    /// The repeating timer of a spawner.
    pub fn spawner_timer(&self, spawner: Serial) -> Option<TimerToken> {
        self.timers.spawner_timer(spawner)
    }

    /// World timers pending: decay timers plus spawner timers.
    pub fn world_timers(&self) -> usize {
        self.timers.world_timers()
    }

    /// NPCs barking now.
    pub fn barking(&self) -> usize {
        self.barks.running()
    }

    /// Cancels every timer, aborts every bark and removes the activity hook.
    ///
    /// # Panics
    /// Off the loop thread, or while the world is borrowed.
    pub fn stop(&self) {
        self.barks.stop();
        self.timers.stop();
    }
}

/// The expected idle timer load of a world (no players), from its spawners and decaying
/// ground items.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IdleLoad {
    pub spawners: usize,
    /// Σ 1/interval over the spawners.
    pub spawner_fires_per_sec: f64,
    pub decaying_items: usize,
    /// While the world's first decaying items go (minutes 10–60 after start): count / 50 min.
    pub decay_fires_per_sec: f64,
}

impl IdleLoad {
    /// Both together: the idle load during the first hour's decay window.
    pub fn peak_fires_per_sec(&self) -> f64 {
        self.spawner_fires_per_sec + self.decay_fires_per_sec
    }
}

/// Computes [`IdleLoad`] for a world before its logic starts.
pub fn idle_load(world: &World) -> IdleLoad {
    let spawner_fires_per_sec = world
        .spawners()
        .map(|s| 1.0 / (60.0 * f64::from(s.interval_minutes.max(1))))
        .sum();
    let decaying_items = decaying_items(world).len();
    let window = (DECAY_MAX - DECAY_MIN).as_secs_f64();
    IdleLoad {
        spawners: world.spawner_count(),
        spawner_fires_per_sec,
        decaying_items,
        decay_fires_per_sec: decaying_items as f64 / window,
    }
}
