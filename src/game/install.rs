//! How a game's registrations go live: its packets, flood limits and disconnect hooks onto
//! the network server ([`install`]), its per-NPC behaviours onto a world
//! ([`Behaviours::run`]). The top of the game layer: it reads [`Game`]s and hands their parts
//! to `dispatch.rs` and `behaviours.rs`, which know nothing of games.
//!
//! Owns the order hooks run in (every game's disconnect hooks in registration order, then the
//! engine's cleanup) and the containment of a hook that panics. Must never start a game's
//! timers or tasks: the shard does, when it runs.

use std::cell::RefCell;
use std::rc::Rc;

use crate::net::Net;
use crate::runtime;
use crate::world::World;

use super::behaviours::Behaviours;
use super::dispatch::{Packet, Shared, leave, register};
use super::players::Players;
use super::registry::{DisconnectFn, Game, Games, PacketFn, Site};

/// Registers the packets and flood limits of every game in `games` on `net` (taking them
/// out of the games), and the disconnect hook that takes a player out of the world; returns
/// the player table the handlers keep.
pub fn install(net: &Net, world: Rc<RefCell<World>>, games: &mut Games) -> Rc<RefCell<Players>> {
    let shared = Shared {
        world,
        players: Rc::default(),
    };
    for game in &mut games.games {
        for spec in std::mem::take(&mut game.packets) {
            let handler: Box<PacketFn> = spec.handler;
            register(net, &shared, spec.id, spec.name, spec.access, handler);
        }
        for (id, rate, _) in std::mem::take(&mut game.rates) {
            net.limit_rate(id, rate);
        }
    }
    let hooks: Vec<(Box<DisconnectFn>, Site)> = games
        .games
        .iter_mut()
        .flat_map(|game| std::mem::take(&mut game.disconnects))
        .collect();
    let Shared { world, players } = shared;
    let p = players.clone();
    net.on_disconnect(move |sessions, conn| {
        let mut world = world.borrow_mut();
        let mut players = p.borrow_mut();
        let mut packet = Packet {
            world: &mut world,
            players: &mut players,
            sessions,
            conn,
        };
        disconnected(&mut packet, &hooks);
    });
    players
}

/// The connection of `packet` closed: every game's disconnect hook, in registration order,
/// then the engine's cleanup (its player, if any, leaves the table and the world). A hook
/// that panics is logged with its line; the rest still run, and the player leaves anyway.
pub(crate) fn disconnected(packet: &mut Packet<'_>, hooks: &[(Box<DisconnectFn>, Site)]) {
    let conn = packet.conn;
    for (hook, site) in hooks {
        // One game's panic must not skip another's hook, nor the engine's cleanup.
        if let Err(why) = runtime::catch(|| hook(packet)) {
            tracing::error!(
                %conn,
                %site,
                "a disconnect hook panicked: {why}; the player leaves anyway"
            );
        }
    }
    leave(packet.world, packet.players, conn);
}

impl Behaviours {
    /// Runs the per-NPC behaviours of `game` on `world` without a shard — for a test or a
    /// bench that drives a world on a bare [`EventLoop`](crate::EventLoop): for every NPC
    /// awake now, and from now on whenever one wakes, exactly as a shard runs them. The rest
    /// of `game` (packets, start hooks) is not used. [`Behaviours::stop`] stops them.
    ///
    /// # Panics
    /// Off the loop thread, or while the world is borrowed.
    pub fn run(world: Rc<RefCell<World>>, game: Game) -> Behaviours {
        Behaviours::start(world, game.npcs)
    }
}
