//! NPC barks: the idle chatter of NPCs near players, as plain `async fn`s on `pause`.
//!
//! Owns the bark behaviour only. It runs only while its NPC is in an active sector: the game
//! logic starts it when the NPC wakes and aborts it when it falls asleep. Must never keep
//! a world borrow across an `.await`.

use std::cell::RefCell;
use std::rc::Rc;

use crate::timer::pause;

use super::content::BARKS;
use super::model::World;
use super::rng::Rng;
use super::serial::Serial;

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
