//! NPC barks: the idle chatter of NPCs near players, as a plain `async fn` on `pause` — a
//! per-NPC behaviour the demo game registers like any game would ([`super::demo`](super::demo())).
//!
//! A bark runs only while its NPC is in an active sector (the behaviour engine starts it
//! when the NPC wakes and drops it when it falls asleep), so a world with no players runs
//! none. Must never keep a world borrow across an `.await`.

use shardloop::game::{Game, Npc};
use shardloop::timer::pause;
use shardloop::world::Mobile;

/// What NPCs say when they bark.
pub const BARKS: &[&str] = &[
    "Fresh bread, fresh fish!",
    "Hail, traveller.",
    "Beware the woods at night.",
    "Have ye seen my cat?",
    "Grrrr...",
    "*sniffs the air*",
];

/// An NPC's chatter: a line every 17–33 s, the first within 5–8 s of waking up. Ends when
/// the NPC no longer exists.
pub async fn bark(mut npc: Npc) {
    loop {
        pause(npc.rng.range(5000..8000)).await;
        let line = *npc.rng.pick(BARKS);
        if !npc.say(line) {
            return;
        }
        pause(npc.rng.range(12_000..25_000)).await;
    }
}

/// Which mobiles bark: every NPC.
#[must_use]
pub fn barks(mobile: &Mobile) -> bool {
    mobile.is_npc
}

/// `game` with the demo's per-NPC behaviours added (every NPC barks).
pub fn npc_behaviours(game: Game) -> Game {
    game.npc_behaviour("bark", barks, bark)
}
