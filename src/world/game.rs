//! The demo game logic, written as a game developer writes it on shardloop's timer API:
//! ground items decay on one-shot timers, spawners top up on minute cadences, NPCs near
//! players bark in async tasks.
//!
//! Owns the timers and tasks of the world and the bookkeeping to cancel them. Must never
//! touch sockets or save formats, never block, and never hold a world borrow while starting
//! or polling anything that could borrow it again (the activity hook runs inside one).

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::time::Duration;

use futures::future::{AbortHandle, Abortable};

use crate::timer::{self, TimerToken};

use super::bark::bark;
use super::entity::Mobile;
use super::model::{Activity, World};
use super::rng::Rng;
use super::serial::{IdMap, Serial};
use super::spawner::top_up;

/// Ground items decay this long after the world starts or they are spawned: uniform over
/// 10–60 minutes, drawn per item from the world's seed.
pub const DECAY_MIN: Duration = Duration::from_secs(10 * 60);
pub const DECAY_MAX: Duration = Duration::from_secs(60 * 60);

const DECAY_STREAM: u64 = 1 << 56;
const PHASE_STREAM: u64 = 2 << 56;
const BARK_STREAM: u64 = 3 << 56;
const SPAWN_STREAM: u64 = 4 << 56;

/// Counters of the game logic since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogicStats {
    /// Decay timers that fired and deleted their item.
    pub decays: u64,
    /// Spawner timer runs.
    pub spawner_runs: u64,
    pub spawned_mobiles: u64,
    pub spawned_items: u64,
    /// Bark tasks started (an NPC woke up) and aborted (it fell asleep or was removed).
    pub barks_started: u64,
    pub barks_stopped: u64,
}

impl LogicStats {
    /// World timer fires: what an idle shard (no players) runs.
    pub fn world_fires(&self) -> u64 {
        self.decays + self.spawner_runs
    }
}

/// A handle on the running game logic. Dropping it does not stop the logic (the timers own
/// it); [`stop`](Self::stop) does.
pub struct GameLogic {
    game: Rc<Game>,
}

struct Game {
    world: Rc<RefCell<World>>,
    seed: u64,
    spawn_rng: RefCell<Rng>,
    decay: RefCell<IdMap<Serial, TimerToken>>,
    spawners: RefCell<IdMap<Serial, TimerToken>>,
    barks: RefCell<IdMap<Serial, AbortHandle>>,
    stats: Cell<LogicStats>,
}

/// Starts the world's game logic on this loop: a decay timer per decaying ground item, a
/// repeating timer per spawner (first run at a random point of its first interval, so their
/// load is spread out), and bark tasks for NPCs in active sectors now and whenever one wakes.
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
    let seed = world.borrow().seed();
    let game = Rc::new(Game {
        world,
        seed,
        spawn_rng: RefCell::new(Rng::derive(seed, SPAWN_STREAM)),
        decay: RefCell::default(),
        spawners: RefCell::default(),
        barks: RefCell::default(),
        stats: Cell::default(),
    });
    for item in decaying_items(&game.world.borrow()) {
        game.schedule_decay(item);
    }
    for (spawner, minutes) in spawners(&game.world.borrow()) {
        game.schedule_spawner(spawner, minutes);
    }
    game.install_hook();
    let awake = game.world.borrow().active_mobiles();
    for npc in awake {
        game.start_bark_if_npc(npc);
    }
    GameLogic { game }
}

/// Decaying items on the ground, by serial.
fn decaying_items(world: &World) -> Vec<Serial> {
    let mut items: Vec<Serial> = world
        .items()
        .filter(|i| i.decays && i.is_on_ground())
        .map(|i| i.serial)
        .collect();
    items.sort_unstable();
    items
}

/// Spawners and their cadence in minutes, by serial.
fn spawners(world: &World) -> Vec<(Serial, u16)> {
    let mut spawners: Vec<(Serial, u16)> = world
        .spawners()
        .map(|s| (s.serial, s.interval_minutes))
        .collect();
    spawners.sort_unstable();
    spawners
}

/// How long item `serial` of a world seeded `seed` lies on the ground before it decays.
pub fn decay_delay(seed: u64, serial: Serial) -> Duration {
    let (min, max) = (DECAY_MIN.as_millis() as u64, DECAY_MAX.as_millis() as u64);
    let ms = Rng::derive(seed, DECAY_STREAM | u64::from(serial.0)).range(min..max + 1);
    Duration::from_millis(ms)
}

/// When spawner `serial` first runs: a random point in its first interval (at least 1 s).
pub fn spawner_phase(seed: u64, serial: Serial, interval: Duration) -> Duration {
    let ms = interval.as_millis().max(1000) as u64;
    Duration::from_millis(Rng::derive(seed, PHASE_STREAM | u64::from(serial.0)).range(1000..ms + 1))
}

impl Game {
    fn count(&self, f: impl FnOnce(&mut LogicStats)) {
        let mut stats = self.stats.get();
        f(&mut stats);
        self.stats.set(stats);
    }

    fn schedule_decay(self: &Rc<Self>, item: Serial) {
        let game = self.clone();
        let token = timer::after(decay_delay(self.seed, item)).start(move || game.decay(item));
        self.decay.borrow_mut().insert(item, token);
    }

    /// An item's decay timer fired: delete it if it still lies on the ground.
    fn decay(&self, item: Serial) {
        self.decay.borrow_mut().remove(&item);
        let mut world = self.world.borrow_mut();
        if world
            .item(item)
            .is_some_and(|i| i.decays && i.is_on_ground())
        {
            world.remove_item(item);
            self.count(|s| s.decays += 1);
        }
    }

    fn schedule_spawner(self: &Rc<Self>, spawner: Serial, minutes: u16) {
        let interval = Duration::from_secs(60 * u64::from(minutes.max(1)));
        let game = self.clone();
        let token = timer::after(spawner_phase(self.seed, spawner, interval))
            .every(interval)
            .start(move || game.run_spawner(spawner));
        self.spawners.borrow_mut().insert(spawner, token);
    }

    /// A spawner's timer fired: top it up; what it laid on the ground starts decaying.
    fn run_spawner(self: &Rc<Self>, spawner: Serial) {
        let made = {
            let mut world = self.world.borrow_mut();
            top_up(&mut world, spawner, &mut self.spawn_rng.borrow_mut())
        };
        let Some(made) = made else {
            self.spawners.borrow_mut().remove(&spawner);
            if let Some(me) = timer::current() {
                me.cancel();
            }
            return;
        };
        self.count(|s| {
            s.spawner_runs += 1;
            s.spawned_mobiles += made.mobiles.len() as u64;
            s.spawned_items += made.items.len() as u64;
        });
        for item in made.items {
            self.schedule_decay(item);
        }
    }

    fn install_hook(self: &Rc<Self>) {
        let game: Weak<Game> = Rc::downgrade(self);
        self.world
            .borrow_mut()
            .set_activity_hook(move |activity, mobile| {
                if let Some(game) = game.upgrade() {
                    game.on_activity(activity, mobile);
                }
            });
    }

    /// Runs inside a world borrow: starts or aborts tasks, never touches the world.
    fn on_activity(self: &Rc<Self>, activity: Activity, mobile: &Mobile) {
        match activity {
            Activity::Woke if mobile.is_npc => self.start_bark(mobile.serial),
            Activity::Woke => {}
            Activity::Slept => self.stop_bark(mobile.serial),
        }
    }

    fn start_bark_if_npc(self: &Rc<Self>, serial: Serial) {
        if self.world.borrow().mobile(serial).is_some_and(|m| m.is_npc) {
            self.start_bark(serial);
        }
    }

    fn start_bark(self: &Rc<Self>, npc: Serial) {
        if self.barks.borrow().contains_key(&npc) {
            return;
        }
        let starts = self.stats.get().barks_started;
        let rng = Rng::derive(self.seed, BARK_STREAM | starts << 32 | u64::from(npc.0));
        let (handle, registration) = AbortHandle::new_pair();
        let task = Abortable::new(bark(self.world.clone(), npc, rng), registration);
        drop(crate::spawn(task));
        self.barks.borrow_mut().insert(npc, handle);
        self.count(|s| s.barks_started += 1);
    }

    fn stop_bark(&self, npc: Serial) {
        if let Some(handle) = self.barks.borrow_mut().remove(&npc) {
            handle.abort();
            self.count(|s| s.barks_stopped += 1);
        }
    }
}

impl GameLogic {
    pub fn stats(&self) -> LogicStats {
        self.game.stats.get()
    }

    /// The decay timer of a ground item, while it is pending.
    pub fn decay_timer(&self, item: Serial) -> Option<TimerToken> {
        self.game.decay.borrow().get(&item).copied()
    }

    /// The repeating timer of a spawner.
    pub fn spawner_timer(&self, spawner: Serial) -> Option<TimerToken> {
        self.game.spawners.borrow().get(&spawner).copied()
    }

    /// World timers pending: decay timers plus spawner timers.
    pub fn world_timers(&self) -> usize {
        self.game.decay.borrow().len() + self.game.spawners.borrow().len()
    }

    /// NPCs barking now.
    pub fn barking(&self) -> usize {
        self.game.barks.borrow().len()
    }

    /// Cancels every timer, aborts every bark and removes the activity hook.
    ///
    /// # Panics
    /// Off the loop thread, or while the world is borrowed.
    pub fn stop(&self) {
        self.game.world.borrow_mut().clear_activity_hook();
        for (_, token) in self.game.decay.borrow_mut().drain() {
            token.cancel();
        }
        for (_, token) in self.game.spawners.borrow_mut().drain() {
            token.cancel();
        }
        for (_, handle) in self.game.barks.borrow_mut().drain() {
            handle.abort();
        }
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
