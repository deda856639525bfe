//! A packet handler's surroundings without a shard: a world, the player table and
//! connections with no socket behind them, so a game's login, moves and refusals are unit
//! tests of plain function calls — no listener, no loop, no clock.
//!
//! Owns those stand-ins and the game's packet table; must never be used by the shard. What a
//! handler sends stays queued on its connection until [`Harness::sent`] reads it.

use std::cell::RefCell;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::rc::Rc;

use tokio::time::Instant;

use crate::game::{DisconnectFn, Game, Npc, Packet, PacketFn, Players, Site, disconnected};
use crate::net::reason::{bad_packet, before_login, unknown_packet};
use crate::net::{Access, BadPacket, ConnId, Disconnect, Sessions, frame};
use crate::world::rng::Rng;
use crate::world::{Serial, World};

/// Large enough that no test meets the send limit or the outbound budget by accident.
const OUTPUT_LIMIT: usize = 64 << 20;

/// A world, its players and detached connections, with one game's packets and disconnect
/// hooks: send a packet as a client would, read what the handler answered.
pub struct Harness {
    world: Rc<RefCell<World>>,
    players: Players,
    sessions: Sessions,
    packets: Vec<(u8, &'static str, Access, Box<PacketFn>)>,
    disconnects: Vec<(Box<DisconnectFn>, Site)>,
    /// Connections whose close has been handled (hooks run, player taken out).
    gone: HashSet<ConnId>,
    next_port: u16,
}

impl Harness {
    /// `world`, with the packets and disconnect hooks of `game` (the rest of the game — start
    /// hooks, behaviours, commands — is not used).
    pub fn new(world: World, game: Game) -> Harness {
        let Game {
            packets,
            disconnects,
            ..
        } = game;
        Harness {
            world: Rc::new(RefCell::new(world)),
            players: Players::default(),
            sessions: Sessions::new(OUTPUT_LIMIT, OUTPUT_LIMIT),
            packets: packets
                .into_iter()
                .map(|p| (p.id, p.name, p.access, p.handler))
                .collect(),
            disconnects,
            gone: HashSet::new(),
            next_port: 40_000,
        }
    }

    /// A new connection, not logged in, from its own loopback port.
    pub fn connect(&mut self) -> ConnId {
        self.next_port += 1;
        let peer = SocketAddr::from(([127, 0, 0, 1], self.next_port));
        self.sessions.open_detached(peer, Instant::now())
    }

    /// Packet `id` with `payload` arrives on `conn`, as the shard would hand it over: to the
    /// game's handler for `id`; an unknown id, or an `Access::LoggedIn` packet before login,
    /// closes the connection as the server does (with its reasons), and so does a handler's
    /// error (`bad packet 0x.. (name): reason`). A connection that is closing, or lingering
    /// after `Packet::refuse`, is not read: the packet is ignored (`Ok`). Once a connection
    /// has closed, the game's disconnect hooks run and the engine takes its player out, as
    /// at the end of the shard's phase. The result is the handler's.
    pub fn send(&mut self, conn: ConnId, id: u8, payload: &[u8]) -> Result<(), BadPacket> {
        if !self.sessions.is_open(conn) {
            return Ok(()); // the server reads nothing more from it
        }
        let result = self.dispatch(conn, id, payload);
        if let Err(why) = &result {
            self.sessions
                .close(conn, Disconnect::fault(why.to_string()));
        }
        if self.sessions.is_closing(conn) {
            self.clean_up(conn);
        }
        result
    }

    fn dispatch(&mut self, conn: ConnId, id: u8, payload: &[u8]) -> Result<(), BadPacket> {
        let Some((_, name, access, handler)) = self.packets.iter().find(|p| p.0 == id) else {
            return Err(BadPacket::new(unknown_packet(id)));
        };
        if *access == Access::LoggedIn && !self.sessions.is_logged_in(conn) {
            return Err(BadPacket::new(before_login(id, name)));
        }
        let mut world = self.world.borrow_mut();
        let mut packet = Packet {
            world: &mut world,
            players: &mut self.players,
            sessions: &mut self.sessions,
            conn,
        };
        handler(&mut packet, payload).map_err(|bad| BadPacket::new(bad_packet(id, name, bad)))
    }

    /// The game's disconnect hooks (a panicking one does not stop the rest), then the
    /// engine's cleanup, once per connection.
    fn clean_up(&mut self, conn: ConnId) {
        if !self.gone.insert(conn) {
            return;
        }
        let mut world = self.world.borrow_mut();
        let mut packet = Packet {
            world: &mut world,
            players: &mut self.players,
            sessions: &mut self.sessions,
            conn,
        };
        disconnected(&mut packet, &self.disconnects);
    }

    /// The packets queued for `conn` since the last call, as (id, payload), in order.
    ///
    /// # Panics
    /// When the queued bytes are not whole frames (a bug in the engine, not the game).
    pub fn sent(&mut self, conn: ConnId) -> Vec<(u8, Vec<u8>)> {
        let bytes = self.sessions.take_output(conn);
        let mut packets = Vec::new();
        let mut rest = bytes.as_slice();
        while !rest.is_empty() {
            assert!(rest.len() >= frame::HEADER_LEN, "a cut frame: {rest:?}");
            let len = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
            let (one, tail) = rest.split_at(len);
            packets.push((one[0], one[frame::HEADER_LEN..].to_vec()));
            rest = tail;
        }
        packets
    }

    /// Why `conn` is closed or closing (at once, or once its answer is written); `None`
    /// while it is open.
    #[must_use]
    pub fn closed(&self, conn: ConnId) -> Option<&Disconnect> {
        self.sessions.closing_reason(conn)
    }

    /// The client on `conn` hangs up (or its lingering answer has been written): the game's
    /// disconnect hooks run, then the engine's own cleanup takes its player (if any) out of
    /// the table and the world — once, however often it is called.
    pub fn hang_up(&mut self, conn: ConnId) {
        self.sessions.close(conn, Disconnect::normal("hung up"));
        self.clean_up(conn);
    }

    /// The world: borrow it briefly.
    #[must_use]
    pub fn world(&self) -> &Rc<RefCell<World>> {
        &self.world
    }

    /// Who is logged in, and where.
    #[must_use]
    pub fn players(&self) -> &Players {
        &self.players
    }

    /// The NPC `serial` of this world, as a behaviour gets it ([`npc`]).
    #[must_use]
    pub fn npc(&self, serial: Serial) -> Npc {
        npc(&self.world, serial)
    }
}

/// The NPC `serial` of `world`, as a per-NPC behaviour gets it, with a random stream of the
/// kit's own derived from the world's seed and the serial (the same on every run, though not
/// the stream the engine would draw for that NPC): to call a behaviour's
/// `async fn` in a plain `#[tokio::test]`, on an `EventLoop`, without a shard.
#[must_use]
pub fn npc(world: &Rc<RefCell<World>>, serial: Serial) -> Npc {
    /// The testkit's own random streams, apart from the engine's.
    const TESTKIT_STREAM: u64 = 9 << 56;
    let seed = world.borrow().seed();
    let rng = Rng::derive(seed, TESTKIT_STREAM | u64::from(serial.0));
    Npc::new(serial, world.clone(), rng)
}
