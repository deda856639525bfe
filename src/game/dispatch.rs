//! How a packet reaches its handler: [`register`] puts a handler on the network server with
//! the world and the players borrowed for each call, so a handler never clones an `Rc` or
//! borrows a `RefCell` itself; [`install`] registers every packet of every game, their flood
//! limits, and the disconnect hook. [`Packet`]'s helpers are what handlers share: who sent
//! it, answer them, reach the players in range, read text.
//!
//! Owns that plumbing only; what packets mean is the games'. Must never do I/O (sending only
//! queues on the sessions).

use std::cell::RefCell;
use std::rc::Rc;

use crate::net::{Access, BadPacket, ConnId, Net, Sessions};
use crate::world::{Location, Serial, World};

use super::packets::leave;
use super::players::Players;
use super::registry::{Games, PacketFn};

/// What a packet handler works on: the world, the players, the connections, and the
/// connection the packet came from.
pub struct Packet<'a> {
    pub world: &'a mut World,
    pub players: &'a mut Players,
    pub sessions: &'a mut Sessions,
    pub conn: ConnId,
}

/// A packet handler as a plain function. An `Err` disconnects the sender with its reason.
pub type PacketHandler = fn(&mut Packet<'_>, &[u8]) -> Result<(), BadPacket>;

impl Packet<'_> {
    /// The sender's player mobile and where it stands; an error (which disconnects) when the
    /// connection has not logged in — register with `Access::LoggedIn` and it always has.
    pub fn player(&self) -> Result<(Serial, Location), BadPacket> {
        let serial = self
            .players
            .player(self.conn)
            .ok_or_else(|| BadPacket::new("no player on this connection"))?;
        let at = self
            .players
            .location(serial)
            .ok_or_else(|| BadPacket::new("no player mobile"))?;
        Ok((serial, at))
    }

    /// Queues packet `id` with the concatenation of `parts` as its payload to the sender.
    pub fn answer(&mut self, id: u8, parts: &[&[u8]]) {
        self.sessions.send_packet(self.conn, id, parts);
    }

    /// Queues packet `id` to every player within [`VIEW_RANGE`](super::VIEW_RANGE) of `at` (the sender too, if
    /// it is in range), in serial order; how many it reached.
    pub fn broadcast_in_range(&mut self, at: Location, id: u8, parts: &[&[u8]]) -> usize {
        let mut reached = 0;
        for (_, conn) in self.players.in_range(at) {
            self.sessions.send_packet(conn, id, parts);
            reached += 1;
        }
        reached
    }
}

/// `payload` as UTF-8 text of 1 to `max` bytes, or an error naming `what` and the limit (a
/// handler returns it to disconnect the sender).
pub fn text<'a>(payload: &'a [u8], max: usize, what: &str) -> Result<&'a str, BadPacket> {
    if payload.is_empty() || payload.len() > max {
        return Err(BadPacket::new(format!(
            "{what} of {} bytes, expected 1 to {max}",
            payload.len()
        )));
    }
    std::str::from_utf8(payload)
        .map_err(|e| BadPacket::new(format!("{what} is not valid UTF-8: {e}")))
}

/// The game state every handler shares, as the shard holds it.
#[derive(Clone)]
pub struct Shared {
    pub world: Rc<RefCell<World>>,
    pub players: Rc<RefCell<Players>>,
}

/// Registers `handler` for packet `id` on `net`, with the world and players of `shared`
/// borrowed for each call.
pub fn register(
    net: &Net,
    shared: &Shared,
    id: u8,
    name: &'static str,
    access: Access,
    handler: impl Fn(&mut Packet<'_>, &[u8]) -> Result<(), BadPacket> + 'static,
) {
    let shared = shared.clone();
    net.handle(id, name, access, move |sessions, conn, payload| {
        let mut world = shared.world.borrow_mut();
        let mut players = shared.players.borrow_mut();
        let mut packet = Packet {
            world: &mut world,
            players: &mut players,
            sessions,
            conn,
        };
        handler(&mut packet, payload)
    });
}

/// Installs the packets and flood limits of the demo game alone (no world timers, no
/// behaviours) with the limits of `rates`: for tests and benches that drive the protocol on a
/// bare loop.
pub fn install_demo_packets(
    net: &Net,
    world: Rc<RefCell<World>>,
    rates: &super::Rates,
) -> Rc<RefCell<Players>> {
    let mut games = Games::check(vec![super::demo(*rates)], &[])
        .expect("the demo game registers each packet once");
    install(net, world, &mut games)
}

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
    let Shared { world, players } = shared;
    let p = players.clone();
    net.on_disconnect(move |_, conn| leave(&mut world.borrow_mut(), &mut p.borrow_mut(), conn));
    players
}
