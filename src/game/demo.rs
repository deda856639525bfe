//! The demo game, registered through the same public API any game uses ([`Game`]): its
//! packets (login, move, say, logout) and their flood limits, how moves and speech look on
//! the wire, its world timers (decay and
//! spawners, started with the shard and stopped with it), and NPC barks as a per-NPC
//! behaviour. No privileged path: a custom shard can leave it out, or add to it.

use super::barks::{bark, barks};
use super::logic::start_world_timers;
use super::packets::{DELTAS, PACKETS, client};
use super::players::Rates;
use super::registry::Game;

/// The demo game, with the flood limits of `rates` on moves and speech (the shard passes
/// `network.move_rate` and `network.speech_rate`).
pub fn demo(rates: Rates) -> Game {
    let mut game = Game::new("demo").deltas(DELTAS);
    for &(id, name, access, handler) in PACKETS {
        game = game.packet(id, name, access, handler);
    }
    for (id, rate) in [(client::MOVE, rates.moves), (client::SAY, rates.speech)] {
        if let Some(rate) = rate {
            game = game.rate_limit(id, rate);
        }
    }
    let game = game.on_start(|ctx| {
        let timers = start_world_timers(ctx.world().clone());
        ctx.on_stop(move || timers.stop());
    });
    with_npc_behaviours(game)
}

/// The demo's per-NPC behaviours alone (every NPC barks), as a game.
pub fn npc_behaviours() -> Game {
    with_npc_behaviours(Game::new("demo"))
}

fn with_npc_behaviours(game: Game) -> Game {
    game.npc_behaviour("bark", barks, bark)
}
