//! What a game's start hook and console commands see: the world, the players, the network,
//! and the place to leave what must stop with the shard.
//!
//! Owns the list of things to stop (timers, tasks, stop hooks) of every game, and stops them
//! in one call when the shard stops. Must never block; everything here runs on the loop.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

use crate::net::Net;
use crate::runtime::{AbortHandle, Cancel};
use crate::world::World;

use super::players::{Players, broadcast};

/// The shard's game state, shared by every game's start hook and console command.
#[derive(Clone)]
pub struct GameContext {
    world: Rc<RefCell<World>>,
    players: Rc<RefCell<Players>>,
    net: Net,
    kept: Rc<Kept>,
}

#[derive(Default)]
struct Kept {
    running: RefCell<Vec<Box<dyn Cancel>>>,
    on_stop: RefCell<Vec<Box<dyn FnOnce()>>>,
}

impl GameContext {
    pub(crate) fn new(world: Rc<RefCell<World>>, players: Rc<RefCell<Players>>, net: Net) -> Self {
        GameContext {
            world,
            players,
            net,
            kept: Rc::default(),
        }
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
        broadcast(&self.net, &self.players.borrow(), text);
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

    /// Stops everything kept and runs the stop hooks, once.
    pub(crate) fn stop(&self) {
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
