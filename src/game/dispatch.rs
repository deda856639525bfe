//! How a packet reaches its handler: [`register`] puts a plain handler function on the
//! network server with the world and the players borrowed for each call, so a handler never
//! clones an `Rc` or borrows a `RefCell` itself; [`install`] registers every packet of
//! [`PACKETS`] and the disconnect hook.
//!
//! Owns that plumbing only; what packets mean is [`super::packets`]'s. Must never do I/O.

use std::cell::RefCell;
use std::rc::Rc;

use crate::net::{Access, BadPacket, ConnId, Net, Sessions};
use crate::world::World;

use super::packets::client;
use super::packets::{PACKETS, leave};
use super::players::{Players, Rates};

/// What a packet handler works on: the world, the players, the connections, and the
/// connection the packet came from.
pub struct Packet<'a> {
    pub world: &'a mut World,
    pub players: &'a mut Players,
    pub sessions: &'a mut Sessions,
    pub conn: ConnId,
}

/// A packet handler: a plain function. An `Err` disconnects the sender with its reason.
pub type PacketHandler = fn(&mut Packet<'_>, &[u8]) -> Result<(), BadPacket>;

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
    handler: PacketHandler,
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

/// Registers the protocol's handlers on `net` with the flood limits of `rates`, and returns
/// the player table they keep.
pub fn install(net: &Net, world: Rc<RefCell<World>>, rates: &Rates) -> Rc<RefCell<Players>> {
    let shared = Shared {
        world,
        players: Rc::default(),
    };
    for &(id, name, access, handler) in PACKETS {
        register(net, &shared, id, name, access, handler);
    }
    for (id, rate) in [(client::MOVE, rates.moves), (client::SAY, rates.speech)] {
        if let Some(rate) = rate {
            net.limit_rate(id, rate);
        }
    }
    let Shared { world, players } = shared;
    let p = players.clone();
    net.on_disconnect(move |_, conn| leave(&mut world.borrow_mut(), &mut p.borrow_mut(), conn));
    players
}
