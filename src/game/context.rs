//! What a game's start hook and console commands see: the world, the players, the network,
//! and the place to leave what must stop with the shard.
//!
//! Owns the list of things to stop (timers, tasks, stop hooks) of every game, and stops them
//! in one call when the shard stops. Must never block; everything here runs on the loop.

use std::cell::{OnceCell, RefCell};
use std::future::Future;
use std::rc::Rc;

use crate::net::Net;
use crate::runtime::{AbortHandle, Cancel};
use crate::world::World;

use super::behaviours::{BehaviourStats, Behaviours};
use super::deltas::{DeltaPackets, broadcast};
use super::players::Players;

/// The shard's game state, shared by every game's start hook and console command.
#[derive(Clone)]
pub struct GameContext {
    world: Rc<RefCell<World>>,
    players: Rc<RefCell<Players>>,
    net: Net,
    /// The game's encoding of speech, which system messages use too.
    deltas: DeltaPackets,
    kept: Rc<Kept>,
    /// Every game's per-NPC behaviours, once the shard has started them.
    behaviours: Rc<OnceCell<Behaviours>>,
}

#[derive(Default)]
struct Kept {
    running: RefCell<Vec<Box<dyn Cancel>>>,
    on_stop: RefCell<Vec<Box<dyn FnOnce()>>>,
}

impl GameContext {
    pub(crate) fn new(
        world: Rc<RefCell<World>>,
        players: Rc<RefCell<Players>>,
        net: Net,
        deltas: DeltaPackets,
    ) -> Self {
        GameContext {
            world,
            players,
            net,
            deltas,
            kept: Rc::default(),
            behaviours: Rc::default(),
        }
    }

    /// Hands over the running per-NPC behaviours (once, by the shard).
    pub(crate) fn set_behaviours(&self, behaviours: Behaviours) {
        if self.behaviours.set(behaviours).is_err() {
            unreachable!("the shard starts the behaviours once");
        }
    }

    /// The running per-NPC behaviours: `None` inside start hooks (they start after them).
    #[must_use]
    pub fn behaviours(&self) -> Option<&Behaviours> {
        self.behaviours.get()
    }

    /// Each per-NPC behaviour's counters (started, stopped, panicked, running now), in
    /// registration order; empty until they start.
    #[must_use]
    pub fn behaviour_stats(&self) -> Vec<BehaviourStats> {
        self.behaviours().map(Behaviours::stats).unwrap_or_default()
    }

    /// The world, to borrow briefly (never across an `.await`).
    #[must_use]
    pub fn world(&self) -> &Rc<RefCell<World>> {
        &self.world
    }

    /// The logged-in players, where they stand, and who is in range of a spot.
    #[must_use]
    pub fn players(&self) -> &Rc<RefCell<Players>> {
        &self.players
    }

    /// The network server (connections and their output queues).
    #[must_use]
    pub fn net(&self) -> &Net {
        &self.net
    }

    /// Sends `text` to every logged-in player as a system message.
    pub fn broadcast(&self, text: &str) {
        broadcast(&self.net, &self.players.borrow(), self.deltas.said, text);
    }

    /// Stops `running` (a `TimerToken`, an `AbortHandle`, a `JoinHandle`) when the shard
    /// stops, before the final save.
    pub fn keep(&self, running: impl Cancel + 'static) {
        self.kept.running.borrow_mut().push(Box::new(running));
    }

    /// Spawns `future` on the loop, aborted when the shard stops; its handle, to abort it
    /// sooner.
    ///
    /// # Panics
    /// Off the loop thread.
    #[track_caller]
    pub fn spawn(&self, future: impl Future<Output = ()> + 'static) -> AbortHandle {
        let handle = crate::spawn(future).abort_handle();
        self.keep(handle.clone());
        handle
    }

    /// Runs `hook` when the shard stops, after the kept timers and tasks are stopped.
    pub fn on_stop(&self, hook: impl FnOnce() + 'static) {
        self.kept.on_stop.borrow_mut().push(Box::new(hook));
    }

    /// Stops the per-NPC behaviours, then everything kept, and runs the stop hooks, once.
    pub(crate) fn stop(&self) {
        if let Some(behaviours) = self.behaviours() {
            behaviours.stop();
        }
        // Taken out first: a cancelled task's drop may keep or stop something itself.
        let running = std::mem::take(&mut *self.kept.running.borrow_mut());
        for r in &running {
            r.cancel();
        }
        drop(running);
        let hooks = std::mem::take(&mut *self.kept.on_stop.borrow_mut());
        for hook in hooks {
            hook();
        }
    }
}
