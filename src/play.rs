//! The demo game protocol: what the packets of `docs/protocol.md` do to the world, and which
//! world changes go back out to players.
//!
//! Login puts a player mobile into the world and wakes the sectors around it; moves and
//! speech go to every player within [`VIEW_RANGE`]; a disconnect (logout, a fault, the peer
//! hanging up) takes the mobile out again. Handlers run in the Network phase; moves and NPC
//! speech queued as world deltas are sent from the Deltas phase, once per iteration, however
//! many times a mobile changed in it.
//!
//! This module is where the world and the network meet, and the only one: the world never
//! sees a socket and the server never sees an entity. It must never do I/O itself (it only
//! queues packets on [`Sessions`]).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use crate::EventLoopBuilder;
use crate::net::frame::{client, serial_xy, server};
use crate::net::{Access, BadPacket, ConnId, Net, Sessions};
use crate::runtime::Slot;
use crate::world::{DELTAS_PER_ITERATION, Delta, Location, MapId, Mobile, SectorId, Serial, World};

/// Players see mobiles and hear speech within this many tiles.
pub const VIEW_RANGE: u16 = 18;
/// Longest player name, bytes of UTF-8.
pub const MAX_NAME: usize = 30;
/// Longest line a player may say, bytes of UTF-8.
pub const MAX_SPEECH: usize = 200;
/// Where new players appear: Britain, spread over a square this many tiles wide (by name),
/// so that a crowd of bots is a town, not one tile.
pub const START: Location = Location {
    x: 1300,
    y: 1450,
    z: 0,
    map: MapId::FELUCCA,
};
pub const START_SPREAD: u16 = 400;
/// The body of a player character.
const HUMAN_MALE: u16 = 0x190;

/// Lines a player may say in a burst, and how fast the allowance refills: a client that
/// talks faster is disconnected (it would flood every player in range).
pub const SPEECH_BURST: u32 = 10;
pub const SPEECH_REFILL: Duration = Duration::from_millis(200);

/// Who is logged in on which connection, and where they stand. Ordered maps: broadcasts go
/// out in the same order on every run.
#[derive(Default)]
pub struct Players {
    by_conn: BTreeMap<ConnId, Serial>,
    by_serial: BTreeMap<Serial, Player>,
}

struct Player {
    conn: ConnId,
    at: Location,
    speech: Allowance,
}

/// A token bucket of [`SPEECH_BURST`] lines, one back every [`SPEECH_REFILL`].
struct Allowance {
    tokens: u32,
    refilled: Instant,
}

impl Allowance {
    fn new() -> Allowance {
        Allowance {
            tokens: SPEECH_BURST,
            refilled: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let earned = ((now - self.refilled).as_millis() / SPEECH_REFILL.as_millis())
            .min(u128::from(SPEECH_BURST)) as u32;
        if earned > 0 {
            self.tokens = (self.tokens + earned).min(SPEECH_BURST);
            self.refilled = now;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

impl Players {
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_conn.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_conn.is_empty()
    }

    /// The player logged in on `conn`.
    #[must_use]
    pub fn player(&self, conn: ConnId) -> Option<Serial> {
        self.by_conn.get(&conn).copied()
    }

    /// `serial` is a logged-in player's mobile (it lives only as long as its connection, so
    /// world saves leave it out).
    #[must_use]
    pub fn is_player(&self, serial: Serial) -> bool {
        self.by_serial.contains_key(&serial)
    }

    /// The player of a logged-in connection.
    fn get_mut(&mut self, conn: ConnId) -> Result<(Serial, &mut Player), BadPacket> {
        let serial = *self
            .by_conn
            .get(&conn)
            .ok_or_else(|| BadPacket::new("no player on this connection"))?;
        let player = self
            .by_serial
            .get_mut(&serial)
            .ok_or_else(|| BadPacket::new("no player mobile"))?;
        Ok((serial, player))
    }

    /// Connections of players within [`VIEW_RANGE`] of `at`.
    fn in_range(&self, at: Location) -> impl Iterator<Item = (Serial, ConnId)> + '_ {
        self.by_serial
            .iter()
            .filter(move |(_, p)| p.at.distance(&at).is_some_and(|d| d <= VIEW_RANGE))
            .map(|(serial, p)| (*serial, p.conn))
    }
}

/// Registers the protocol's handlers on `net` and returns the player table they keep.
pub fn install(net: &Net, world: Rc<RefCell<World>>) -> Rc<RefCell<Players>> {
    let players = Rc::new(RefCell::new(Players::default()));
    let (w, p) = (world.clone(), players.clone());
    net.handle(
        client::LOGIN,
        "login",
        Access::Always,
        move |s, conn, payload| login(&mut w.borrow_mut(), &mut p.borrow_mut(), s, conn, payload),
    );
    let (w, p) = (world.clone(), players.clone());
    net.handle(
        client::MOVE,
        "move",
        Access::LoggedIn,
        move |s, conn, payload| walk(&mut w.borrow_mut(), &mut p.borrow_mut(), s, conn, payload),
    );
    let p = players.clone();
    net.handle(
        client::SAY,
        "say",
        Access::LoggedIn,
        move |s, conn, payload| say(&mut p.borrow_mut(), s, conn, payload),
    );
    net.handle(client::LOGOUT, "logout", Access::LoggedIn, |s, conn, _| {
        s.close(conn, crate::net::Disconnect::normal("logged out"));
        Ok(())
    });
    let p = players.clone();
    net.on_disconnect(move |_, conn| leave(&mut world.borrow_mut(), &mut p.borrow_mut(), conn));
    players
}

fn login(
    world: &mut World,
    players: &mut Players,
    sessions: &mut Sessions,
    conn: ConnId,
    payload: &[u8],
) -> Result<(), BadPacket> {
    if players.player(conn).is_some() {
        return Err(BadPacket::new("already logged in"));
    }
    let name = text(payload, MAX_NAME, "name")?;
    let serial = world.new_mobile_serial();
    let mut mobile = Mobile::new(serial, name, HUMAN_MALE);
    let at = start_location(name);
    mobile.location = at;
    world
        .add_mobile(mobile)
        .map_err(|e| BadPacket::new(format!("cannot place the player: {e}")))?;
    world.activate_around(at);
    players.by_conn.insert(conn, serial);
    players.by_serial.insert(
        serial,
        Player {
            conn,
            at,
            speech: Allowance::new(),
        },
    );
    sessions.set_logged_in(conn);
    sessions.send_packet(conn, server::LOGIN_OK, &[&serial_xy(serial.0, at.x, at.y)]);
    tracing::info!(peer = ?sessions.peer(conn), %conn, %serial, name, "logged in");
    Ok(())
}

fn walk(
    world: &mut World,
    players: &mut Players,
    sessions: &mut Sessions,
    conn: ConnId,
    payload: &[u8],
) -> Result<(), BadPacket> {
    let &[direction, seq] = payload else {
        return Err(BadPacket::new(format!(
            "move payload of {} bytes, expected 2 (direction, sequence)",
            payload.len()
        )));
    };
    let (dx, dy) = step(direction)
        .ok_or_else(|| BadPacket::new(format!("direction {direction}, expected 0 to 7")))?;
    let (serial, player) = players.get_mut(conn)?;
    let from = player.at;
    let to = from.offset_clamped(dx, dy);
    player.at = to;
    world.move_mobile(serial, to);
    if SectorId::of(&from) != SectorId::of(&to) {
        // Wake the new neighbourhood before the old one may fall asleep: the overlap stays up.
        world.activate_around(to);
        world.deactivate_around(from);
    }
    let [x0, x1] = to.x.to_be_bytes();
    let [y0, y1] = to.y.to_be_bytes();
    sessions.send_packet(conn, server::MOVE_OK, &[&[seq, x0, x1, y0, y1]]);
    Ok(())
}

fn say(
    players: &mut Players,
    sessions: &mut Sessions,
    conn: ConnId,
    payload: &[u8],
) -> Result<(), BadPacket> {
    let line = text(payload, MAX_SPEECH, "speech")?;
    let (serial, player) = players.get_mut(conn)?;
    if !player.speech.take() {
        return Err(BadPacket::new(format!(
            "speech flood: more than {SPEECH_BURST} lines in a burst, or more than one per \
             {SPEECH_REFILL:?} after it"
        )));
    }
    let at = player.at;
    let serial_bytes = serial.0.to_be_bytes();
    for (_, listener) in players.in_range(at) {
        sessions.send_packet(listener, server::SPEECH, &[&serial_bytes, line.as_bytes()]);
    }
    Ok(())
}

/// The serial a system message is sent from: 0 is never an entity's serial.
pub const SYSTEM: Serial = Serial(0);

/// Sends `text` to every logged-in player as a system message (`0x84` from serial 0), cut
/// at a character boundary to [`MAX_SPEECH`] bytes.
pub fn broadcast(net: &Net, players: &Players, text: &str) {
    let mut end = text.len().min(MAX_SPEECH);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let from = SYSTEM.0.to_be_bytes();
    net.with_sessions(|sessions| {
        for &conn in players.by_conn.keys() {
            sessions.send_packet(conn, server::SPEECH, &[&from, &text.as_bytes()[..end]]);
        }
    });
}

/// The connection closed: its player leaves the world.
fn leave(world: &mut World, players: &mut Players, conn: ConnId) {
    let Some(serial) = players.by_conn.remove(&conn) else {
        return;
    };
    if let Some(player) = players.by_serial.remove(&serial) {
        world.deactivate_around(player.at);
    }
    world.remove_mobile(serial);
}

/// Puts the server and the world on a loop: the Network and Flush slots to `net`, the
/// Deltas slot to [`deltas_handler`]. Either backend runs on a plain loop.
pub fn wire(
    builder: EventLoopBuilder,
    net: &Net,
    world: Rc<RefCell<World>>,
    players: Rc<RefCell<Players>>,
) -> EventLoopBuilder {
    builder
        .slot(Slot::Network, net.network_slot())
        .slot(Slot::Deltas, deltas_handler(world, players, net.clone()))
        .slot(Slot::Flush, net.flush_slot())
}

/// The Deltas slot handler with players connected: drains the world's changes like
/// [`crate::world::deltas_handler`], and sends moves (`0x85`, to everyone in range but the mover)
/// and NPC speech (`0x84`) to the players who can see them.
pub fn deltas_handler(
    world: Rc<RefCell<World>>,
    players: Rc<RefCell<Players>>,
    net: Net,
) -> impl FnMut() -> bool + 'static {
    let mut outgoing: Vec<Seen> = Vec::new();
    move || {
        let pending = world.borrow_mut().drain_changes(
            DELTAS_PER_ITERATION,
            |change| {
                let Some(at) = change.location else { return };
                if change.delta.contains(Delta::MOVED) {
                    outgoing.push(Seen::Moved(change.serial, at));
                }
                if let Some(line) = change.said {
                    outgoing.push(Seen::Said(change.serial, at, line.to_owned()));
                }
            },
            |_, _| {},
        );
        if !outgoing.is_empty() {
            let players = players.borrow();
            net.with_sessions(|sessions| {
                for seen in outgoing.drain(..) {
                    seen.send(&players, sessions);
                }
            });
        }
        pending
    }
}

/// A change players in range should hear about.
enum Seen {
    Moved(Serial, Location),
    Said(Serial, Location, String),
}

impl Seen {
    fn send(&self, players: &Players, sessions: &mut Sessions) {
        match self {
            Seen::Moved(serial, at) => {
                let packet = serial_xy(serial.0, at.x, at.y);
                for (player, conn) in players.in_range(*at) {
                    if player != *serial {
                        sessions.send_packet(conn, server::MOBILE_MOVED, &[&packet]);
                    }
                }
            }
            Seen::Said(serial, at, line) => {
                let serial = serial.0.to_be_bytes();
                for (_, conn) in players.in_range(*at) {
                    sessions.send_packet(conn, server::SPEECH, &[&serial, line.as_bytes()]);
                }
            }
        }
    }
}

/// `payload` as UTF-8 text of 1 to `max` bytes.
fn text<'a>(payload: &'a [u8], max: usize, what: &str) -> Result<&'a str, BadPacket> {
    if payload.is_empty() || payload.len() > max {
        return Err(BadPacket::new(format!(
            "{what} of {} bytes, expected 1 to {max}",
            payload.len()
        )));
    }
    std::str::from_utf8(payload)
        .map_err(|e| BadPacket::new(format!("{what} is not valid UTF-8: {e}")))
}

/// The step for `direction` (0 = north, clockwise).
fn step(direction: u8) -> Option<(i32, i32)> {
    const STEPS: [(i32, i32); 8] = [
        (0, -1),
        (1, -1),
        (1, 0),
        (1, 1),
        (0, 1),
        (-1, 1),
        (-1, 0),
        (-1, -1),
    ];
    STEPS.get(usize::from(direction)).copied()
}

/// A new player's spot: [`START`] offset by a hash of the name (FNV-1a), the same for the
/// same name.
pub fn start_location(name: &str) -> Location {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let spread = u64::from(START_SPREAD);
    let dx = (hash % spread) as i32;
    let dy = ((hash >> 32) % spread) as i32;
    START.offset_clamped(dx, dy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_cover_the_eight_directions_once() {
        let steps: std::collections::HashSet<_> = (0..8).filter_map(step).collect();
        assert_eq!(steps.len(), 8);
        assert!(step(8).is_none());
    }

    #[test]
    fn start_locations_are_on_the_map_and_stable() {
        let a = start_location("bot1");
        assert_eq!(a, start_location("bot1"));
        assert!(a.is_on_map());
        assert_ne!(a, start_location("bot2"));
    }

    #[test]
    fn text_rejects_empty_long_and_invalid() {
        assert!(text(b"", 30, "name").is_err());
        assert!(text(&[b'a'; 31], 30, "name").is_err());
        assert!(text(&[0xff, 0xfe], 30, "name").is_err());
        assert_eq!(text("Zoë".as_bytes(), 30, "name"), Ok("Zoë"));
    }
}
