//! What a per-NPC behaviour gets: its NPC, the world, and a random stream of its own.
//!
//! Owns nothing but handles. A behaviour must never hold a world borrow across an `.await`
//! (the handlers and the deltas borrow it between its polls); the methods here borrow it for
//! the call only.

use std::cell::RefCell;
use std::rc::Rc;

use crate::world::rng::Rng;
use crate::world::{Location, Serial, World};

/// One NPC, as its behaviour sees it.
///
/// The random stream is derived from the world's seed, the behaviour, the NPC and how many
/// behaviours were started before: the same world and the same players' actions give the
/// same lines at the same logical times, run after run.
pub struct Npc {
    serial: Serial,
    world: Rc<RefCell<World>>,
    /// This behaviour's own random numbers: `npc.rng.range(5000..8000)`.
    pub rng: Rng,
}

impl Npc {
    /// The NPC `serial` of `world`, with its own random stream `rng` — what the engine hands
    /// a behaviour. Build one yourself to unit-test a behaviour without a shard (see
    /// [`crate::testkit::npc`], which derives a stream from the world's seed and the serial).
    pub fn new(serial: Serial, world: Rc<RefCell<World>>, rng: Rng) -> Npc {
        Npc { serial, world, rng }
    }

    /// This NPC's serial in the world (the key of its mobile).
    #[must_use]
    pub fn serial(&self) -> Serial {
        self.serial
    }

    /// The world, to borrow briefly (never across an `.await`).
    #[must_use]
    pub fn world(&self) -> &Rc<RefCell<World>> {
        &self.world
    }

    /// Says `text` to the players in range (they get it as speech from this NPC at the end of
    /// the iteration). False when the NPC no longer exists: end the behaviour then.
    pub fn say(&self, text: &str) -> bool {
        self.world.borrow_mut().say(self.serial, text)
    }

    /// Where the NPC stands, or `None` once it is gone.
    #[must_use]
    pub fn location(&self) -> Option<Location> {
        self.world.borrow().mobile(self.serial).map(|m| m.location)
    }

    /// The NPC still exists.
    #[must_use]
    pub fn exists(&self) -> bool {
        self.world.borrow().mobile(self.serial).is_some()
    }
}
