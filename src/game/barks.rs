//! NPC barks: the idle chatter of NPCs near players, as plain `async fn`s on `pause`.
//!
//! Owns the bark tasks, one per awake NPC. A bark runs only while its NPC is in an active
//! sector: it starts when the NPC wakes and is aborted when it falls asleep, so a world with
//! no players runs none. Must never keep a world borrow across an `.await`, and never touch
//! the world from the activity hook (which runs inside a world borrow).

use std::cell::RefCell;
use std::rc::Rc;

use crate::timer::pause;
use crate::world::content::BARKS;
use crate::world::rng::Rng;
use crate::world::{Activity, Mobile, Serial, World};

use super::logic::Game;

/// The random stream of bark lines and pauses (one per NPC and start).
const BARK_STREAM: u64 = 3 << 56;

/// An NPC's chatter: a line every 17–33 s, the first within 5–8 s of waking up. Ends when
/// the NPC no longer exists.
pub async fn bark(world: Rc<RefCell<World>>, npc: Serial, mut rng: Rng) {
    loop {
        pause(rng.range(5000..8000)).await;
        if !say(&world, npc, &mut rng) {
            return;
        }
        pause(rng.range(12_000..25_000)).await;
    }
}

fn say(world: &RefCell<World>, npc: Serial, rng: &mut Rng) -> bool {
    let line: &&str = rng.pick(BARKS);
    world.borrow_mut().say(npc, line)
}

impl Game {
    /// Runs inside a world borrow: starts or aborts tasks, never touches the world.
    pub(super) fn on_activity(self: &Rc<Self>, activity: Activity, mobile: &Mobile) {
        match activity {
            Activity::Woke if mobile.is_npc => self.start_bark(mobile.serial),
            Activity::Woke => {}
            Activity::Slept => self.stop_bark(mobile.serial),
        }
    }

    pub(super) fn start_bark_if_npc(self: &Rc<Self>, serial: Serial) {
        if self.world.borrow().mobile(serial).is_some_and(|m| m.is_npc) {
            self.start_bark(serial);
        }
    }

    fn start_bark(self: &Rc<Self>, npc: Serial) {
        if self.barks.contains(&npc) {
            return;
        }
        let starts = self.stats.get().barks_started;
        let rng = Rng::derive(self.seed, BARK_STREAM | starts << 32 | u64::from(npc.0));
        let task = crate::spawn(bark(self.world.clone(), npc, rng));
        self.barks.insert(npc, task.abort_handle());
        self.count(|s| s.barks_started += 1);
    }

    fn stop_bark(&self, npc: Serial) {
        if self.barks.cancel(&npc) {
            self.count(|s| s.barks_stopped += 1);
        }
    }
}
