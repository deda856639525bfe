//! The demo game's packets (`docs/protocol.md`): their ids, payload encodings, and what each
//! does, with where new players appear and how long names and lines may be. Login puts a
//! player mobile into the world and wakes the sectors around it; moves and speech go to
//! every player within [`VIEW_RANGE`]; a disconnect (logout, a fault, the peer hanging up)
//! takes the mobile out. Each does so through the calls any game has
//! ([`Packet::log_in`], [`Packet::move_player`], [`Packet::log_out`]).
//!
//! The demo game ([`super::demo`]) registers every entry of [`PACKETS`]: an id, a name, who
//! may send it, and one plain function `fn(&mut Packet, &[u8]) -> Result<(), BadPacket>`
//! (the engine does the borrowing). The network layer knows only framing and ping.
//!
//! This is where the world and the network meet: the world never sees a socket and the server
//! never sees an entity. Handlers run in the Network phase; they must never do I/O (they only
//! queue packets on the sessions) and never block.

use shardloop::game::{DeltaPackets, Packet, PacketHandler, text};
use shardloop::net::{Access, BadPacket};
use shardloop::world::{Location, MapId, Mobile, Serial};

#[cfg(doc)]
use shardloop::game::VIEW_RANGE;

/// Longest player name, bytes of UTF-8.
pub const MAX_NAME: usize = 30;
/// Longest line a player may say, bytes of UTF-8 (system messages are cut to it too).
pub const MAX_SPEECH: usize = 200;
/// Where new players appear: Britain, spread over a square [`START_SPREAD`] tiles wide (by
/// name), so that a crowd of bots is a town, not one tile.
pub const START: Location = Location::new(1300, 1450, 0, MapId::FELUCCA);
/// The side of the square new players appear in, tiles.
pub const START_SPREAD: u16 = 400;

/// A new player's spot: [`START`] offset by a hash of the name (FNV-1a), the same for the
/// same name.
#[must_use]
pub fn start_location(name: &str) -> Location {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let spread = u64::from(START_SPREAD);
    let dx = (hash % spread) as i32;
    let dy = ((hash >> 32) % spread) as i32;
    START.offset_clamped(dx, dy)
}

/// The body of a player character.
const HUMAN_MALE: u16 = 0x190;

/// Packet ids, client → server.
pub mod client {
    /// Ping: 0–64 bytes of payload, answered with the identical frame (built into the
    /// server).
    pub use shardloop::net::frame::PING;
    /// Login: a UTF-8 name of 1–30 bytes.
    pub const LOGIN: u8 = 0x01;
    /// Move: `[direction u8 0–7][seq u8]`.
    pub const MOVE: u8 = 0x02;
    /// Say: UTF-8 text of 1–200 bytes.
    pub const SAY: u8 = 0x03;
    /// Logout: no payload.
    pub const LOGOUT: u8 = 0x04;
}

/// Packet ids, server → client.
pub mod server {
    /// Login accepted: `[serial u32][x u16][y u16]`.
    pub const LOGIN_OK: u8 = 0x81;
    /// Move accepted: `[seq u8][x u16][y u16]`.
    pub const MOVE_OK: u8 = 0x82;
    /// Speech: `[serial u32][UTF-8 text]`.
    pub const SPEECH: u8 = 0x84;
    /// A mobile in range moved: `[serial u32][x u16][y u16]`.
    pub const MOBILE_MOVED: u8 = 0x85;
}

/// `[serial u32][x u16][y u16]`, big-endian: the payload of `LOGIN_OK` and `MOBILE_MOVED`.
#[must_use]
pub fn serial_xy(serial: u32, x: u16, y: u16) -> [u8; 8] {
    let [s0, s1, s2, s3] = serial.to_be_bytes();
    let [x0, x1] = x.to_be_bytes();
    let [y0, y1] = y.to_be_bytes();
    [s0, s1, s2, s3, x0, x1, y0, y1]
}

/// How the demo tells players of world changes: a mobile in range moved (`MOBILE_MOVED`,
/// [`serial_xy`]) or spoke (`SPEECH`, `[serial u32][text]`).
pub const DELTAS: DeltaPackets = DeltaPackets {
    moved: Some((server::MOBILE_MOVED, encode_moved)),
    said: Some((server::SPEECH, encode_said)),
    batch: None,
};

fn encode_moved(serial: Serial, at: Location, out: &mut Vec<u8>) {
    out.extend_from_slice(&serial_xy(serial.0, at.x, at.y));
}

/// A line is cut to [`MAX_SPEECH`] bytes at a character boundary: a console broadcast may be
/// longer than a player's line.
fn encode_said(serial: Serial, line: &str, out: &mut Vec<u8>) {
    let mut end = line.len().min(MAX_SPEECH);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&serial.0.to_be_bytes());
    out.extend_from_slice(&line.as_bytes()[..end]);
}

/// The demo game's packets: id, name (in logs), who may send it, the handler.
pub const PACKETS: &[(u8, &str, Access, PacketHandler)] = &[
    (client::LOGIN, "login", Access::Always, login),
    (client::MOVE, "move", Access::LoggedIn, walk),
    (client::SAY, "say", Access::LoggedIn, say),
    (client::LOGOUT, "logout", Access::LoggedIn, logout),
];

fn login(p: &mut Packet<'_>, payload: &[u8]) -> Result<(), BadPacket> {
    // `log_in` refuses this too, but only after a serial has been taken for the mobile:
    // asked first, a repeated login burns no serial.
    if p.players.player(p.conn).is_some() {
        return Err(BadPacket::new("already logged in"));
    }
    let name = text(payload, MAX_NAME, "name")?;
    let mut mobile = Mobile::new(p.world.new_mobile_serial(), name, HUMAN_MALE);
    mobile.location = start_location(name);
    let at = mobile.location;
    let serial = p.log_in(mobile)?;
    p.answer(server::LOGIN_OK, &[&serial_xy(serial.0, at.x, at.y)]);
    Ok(())
}

fn walk(p: &mut Packet<'_>, payload: &[u8]) -> Result<(), BadPacket> {
    let &[direction, seq] = payload else {
        return Err(BadPacket::new(format!(
            "move payload of {} bytes, expected 2 (direction, sequence)",
            payload.len()
        )));
    };
    let (dx, dy) = step(direction)
        .ok_or_else(|| BadPacket::new(format!("direction {direction}, expected 0 to 7")))?;
    let (_, from) = p.player()?;
    let to = from.offset_clamped(dx, dy);
    p.move_player(to)?;
    let [x0, x1] = to.x.to_be_bytes();
    let [y0, y1] = to.y.to_be_bytes();
    p.answer(server::MOVE_OK, &[&[seq, x0, x1, y0, y1]]);
    Ok(())
}

fn say(p: &mut Packet<'_>, payload: &[u8]) -> Result<(), BadPacket> {
    let line = text(payload, MAX_SPEECH, "speech")?;
    let (serial, at) = p.player()?;
    p.broadcast_in_range(
        at,
        server::SPEECH,
        &[&serial.0.to_be_bytes(), line.as_bytes()],
    );
    Ok(())
}

fn logout(p: &mut Packet<'_>, _payload: &[u8]) -> Result<(), BadPacket> {
    p.log_out("logged out");
    Ok(())
}

/// The step for `direction` (0 = north, clockwise).
pub fn step(direction: u8) -> Option<(i32, i32)> {
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
