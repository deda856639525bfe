//! Spawners on their cadence: each runs every 5–15 minutes, first at a random point of its
//! first interval so that their load is spread out, and tops its group up (the world model's
//! [`top_up`]); what it lays on the ground starts decaying.
//!
//! Owns the spawner timers. Must never spawn anything itself (that is the model's job) and
//! never hold a world borrow while starting a timer.

use std::rc::Rc;
use std::time::Duration;

use shardloop::timer;
use shardloop::world::rng::Rng;
use shardloop::world::{Serial, World, top_up};

use super::state::Logic;

/// How late a spawner run may come, so that the loop runs it with other due timers (see
/// [`super::decay::DECAY_TOLERANCE`]); small beside a 5–15 minute cadence.
pub const SPAWNER_TOLERANCE: Duration = Duration::from_millis(250);

/// The random stream first-run phases are drawn from (one draw per spawner serial).
const PHASE_STREAM: u64 = 2 << 56;

/// When spawner `serial` first runs: a random point in its first interval (at least 1 s).
pub fn spawner_phase(seed: u64, serial: Serial, interval: Duration) -> Duration {
    let ms = interval.as_millis().max(1000) as u64;
    Duration::from_millis(Rng::derive(seed, PHASE_STREAM | u64::from(serial.0)).range(1000..ms + 1))
}

/// Spawners and their cadence in minutes, by serial.
pub(super) fn spawners(world: &World) -> Vec<(Serial, u16)> {
    let mut spawners: Vec<(Serial, u16)> = world
        .spawners()
        .map(|s| (s.serial, s.interval_minutes))
        .collect();
    spawners.sort_unstable();
    spawners
}

impl Logic {
    pub(super) fn schedule_spawner(self: &Rc<Self>, spawner: Serial, minutes: u16) {
        let interval = Duration::from_secs(60 * u64::from(minutes.max(1)));
        let game = self.clone();
        let token = timer::after(spawner_phase(self.seed, spawner, interval))
            .every(interval)
            .tolerance(SPAWNER_TOLERANCE)
            .start(move || game.run_spawner(spawner));
        self.spawners.insert(spawner, token);
    }

    /// A spawner's timer fired: top it up; what it laid on the ground starts decaying.
    fn run_spawner(self: &Rc<Self>, spawner: Serial) {
        let made = {
            let mut world = self.world.borrow_mut();
            top_up(&mut world, spawner, &mut self.spawn_rng.borrow_mut())
        };
        let Some(made) = made else {
            // The spawner was deleted: its own timer ends here.
            self.spawners.remove(&spawner);
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
}
