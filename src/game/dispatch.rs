//! How a packet reaches its handler: [`register`] puts a handler on the network server with
//! the world and the players borrowed for each call, so a handler never clones an `Rc` or
//! borrows a `RefCell` itself (`install.rs` registers every game's this way).
//! [`Packet`]'s helpers are what handlers share: who sent it, answer them, reach the players
//! in range, read text — and a player's life on a connection: [`Packet::log_in`],
//! [`Packet::move_player`], [`Packet::log_out`]. A game's login chooses the mobile and the
//! spot; the engine keeps the player table, the sector index and the world in step.
//!
//! Owns that plumbing only; what packets mean is the games'. Must never do I/O (sending only
//! queues on the sessions).

use std::cell::RefCell;
use std::rc::Rc;

use crate::net::{Access, BadPacket, ConnId, Disconnect, Net, Sessions, log_at};
use crate::world::{Location, Mobile, SectorId, Serial, World};

use super::players::{Player, Players};

/// What a packet handler works on: the world, the players, the connections, and the
/// connection the packet came from.
pub struct Packet<'a> {
    /// The world, borrowed for this handler call only.
    pub world: &'a mut World,
    /// The logged-in players: who is on which connection, and where.
    pub players: &'a mut Players,
    /// Every open connection: send to one, close one (the sender's answer goes here too).
    pub sessions: &'a mut Sessions,
    /// The connection this packet came from.
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

    /// Logs the sender in as `mobile`, where the mobile stands: puts it into the world, wakes
    /// the sectors around it and binds this connection to it. From then on the connection may
    /// send `Access::LoggedIn` packets, and every engine service knows the player —
    /// [`Packet::player`], range queries, `Npc::say`, console `status`, and saves, which leave
    /// logged-in players' mobiles out. The engine takes the mobile out of the world when the
    /// connection closes. The serial is the game's to choose, usually
    /// `p.world.new_mobile_serial()`.
    ///
    /// An error (return it to disconnect the sender): this connection is already logged in,
    /// or the world refuses the mobile (its serial is taken, or it stands off the map).
    pub fn log_in(&mut self, mobile: Mobile) -> Result<Serial, BadPacket> {
        let conn = self.conn;
        if self.players.player(conn).is_some() {
            return Err(BadPacket::new("already logged in"));
        }
        let at = mobile.location;
        let name = mobile.name.clone();
        let serial = self
            .world
            .add_mobile(mobile)
            .map_err(|e| BadPacket::new(format!("cannot place the player: {e}")))?;
        self.world.activate_around(at);
        self.players.insert(serial, Player { conn, at });
        self.sessions.set_logged_in(conn);
        let level = self.sessions.churn().logged_in();
        log_at!(level, peer = ?self.sessions.peer(conn), %conn, %serial, name = &*name, "logged in");
        Ok(serial)
    }

    /// Moves the sender's player to `to` — its mobile, its place in the player table and the
    /// sectors awake around it (the new neighbourhood wakes before the old one may sleep) —
    /// and returns where it stood. An error when the sender has not logged in.
    pub fn move_player(&mut self, to: Location) -> Result<Location, BadPacket> {
        let (serial, player) = self.players.get_mut(self.conn)?;
        let from = player.at;
        self.players.move_to(serial, to);
        self.world.move_mobile(serial, to);
        if SectorId::of(&from) != SectorId::of(&to) {
            // The overlap of the two neighbourhoods stays awake throughout.
            self.world.activate_around(to);
            self.world.deactivate_around(from);
        }
        Ok(from)
    }

    /// Closes the sender's connection as a normal logout, with `why` in the log; the player
    /// leaves the world when it closes (after the games' disconnect hooks have run).
    pub fn log_out(&mut self, why: &str) {
        self.sessions.close(self.conn, Disconnect::normal(why));
    }

    /// Refuses the sender: queues packet `id` (the game's answer: a reason code, a message)
    /// and closes the connection once that answer is written, with `why` in the log. Nothing
    /// more is read from it meanwhile. For a login the game turns down — a wrong token, a
    /// full shard — where returning an error would cut the client off without a word.
    pub fn refuse(&mut self, why: &str, id: u8, parts: &[&[u8]]) {
        self.sessions.send_packet(self.conn, id, parts);
        self.sessions
            .close_after_flush(self.conn, Disconnect::normal(why));
    }

    /// Queues packet `id` with the concatenation of `parts` as its payload to the sender.
    pub fn answer(&mut self, id: u8, parts: &[&[u8]]) {
        self.sessions.send_packet(self.conn, id, parts);
    }

    /// Queues packet `id` to every player within [`VIEW_RANGE`](super::VIEW_RANGE) of `at`
    /// (the sender too, if it is in range), in serial order; how many it reached.
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
pub(crate) struct Shared {
    pub world: Rc<RefCell<World>>,
    pub players: Rc<RefCell<Players>>,
}

/// Registers `handler` for packet `id` on `net`, with the world and players of `shared`
/// borrowed for each call.
pub(crate) fn register(
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

/// The connection closed: its player, if it logged in, leaves the table and the world.
pub(crate) fn leave(world: &mut World, players: &mut Players, conn: ConnId) {
    let Some((serial, player)) = players.remove(conn) else {
        return;
    };
    world.deactivate_around(player.at);
    world.remove_mobile(serial);
}
