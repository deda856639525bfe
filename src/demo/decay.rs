//! Decay: ground items go away on one-shot timers, 10–60 minutes after the world starts or
//! after their spawner laid them down.
//!
//! Owns the decay timers (one per decaying ground item). Must never decide what lies on
//! the ground (the world model does) and never hold a world borrow while starting a timer.

use std::rc::Rc;
use std::time::Duration;

use shardloop::timer;
use shardloop::world::rng::Rng;
use shardloop::world::{Serial, World};

use super::state::Logic;

/// Ground items decay this long after the world starts or they are spawned: uniform over
/// 10–60 minutes, drawn per item from the world's seed.
pub const DECAY_MIN: Duration = Duration::from_secs(10 * 60);
pub const DECAY_MAX: Duration = Duration::from_secs(60 * 60);

/// How late a decay may come: the loop runs it with other due timers instead of waking for
/// it alone (at idle, most of the world's wake-ups were decays). A quarter of a second on a
/// 10–60 minute delay is invisible to a player; see docs/performance.md, "Tolerance".
pub const DECAY_TOLERANCE: Duration = Duration::from_millis(250);

/// The random stream decay delays are drawn from (one draw per item serial).
const DECAY_STREAM: u64 = 1 << 56;

/// How long item `serial` of a world seeded `seed` lies on the ground before it decays.
pub fn decay_delay(seed: u64, serial: Serial) -> Duration {
    let (min, max) = (DECAY_MIN.as_millis() as u64, DECAY_MAX.as_millis() as u64);
    let ms = Rng::derive(seed, DECAY_STREAM | u64::from(serial.0)).range(min..max + 1);
    Duration::from_millis(ms)
}

/// Decaying items on the ground, by serial.
pub(super) fn decaying_items(world: &World) -> Vec<Serial> {
    let mut items: Vec<Serial> = world
        .items()
        .filter(|i| i.decays && i.is_on_ground())
        .map(|i| i.serial)
        .collect();
    items.sort_unstable();
    items
}

impl Logic {
    pub(super) fn schedule_decay(self: &Rc<Self>, item: Serial) {
        let game = self.clone();
        let token = timer::after(decay_delay(self.seed, item))
            .tolerance(DECAY_TOLERANCE)
            .start(move || game.decay(item));
        self.decay.insert(item, token);
    }

    /// An item's decay timer fired: delete it if it still lies on the ground.
    fn decay(&self, item: Serial) {
        self.decay.remove(&item);
        let mut world = self.world.borrow_mut();
        if world
            .item(item)
            .is_some_and(|i| i.decays && i.is_on_ground())
        {
            world.remove_item(item);
            self.count(|s| s.decays += 1);
        }
    }
}
