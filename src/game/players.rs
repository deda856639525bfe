//! Who is playing: the logged-in players, their connections and where they stand, and the
//! two ways to reach them — everyone in range of a spot, or everyone.
//!
//! Owns the player table and the players' flood limits ([`Rates`]), and keeps the sector
//! index of players ([`Visibility`]) in step with the table: a player joins, moves and leaves
//! through [`Players::insert`], [`Players::move_to`] and [`Players::remove`] only, never by
//! writing the maps or a `Player`'s `at`. Must never touch the world's entities (handlers do)
//! and never do I/O (it only queues packets on the sessions).

use crate::net::{BadPacket, ConnId, Net, Rate};
use crate::world::{Location, MapId, Serial};
use std::collections::BTreeMap;

use super::deltas::EncodeSaid;
use super::visibility::Visibility;

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
/// How fast players may move and talk: a move or a line beyond the rate is dropped, far
/// beyond it disconnects (see [`crate::net::rate`]). `None`: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    pub moves: Option<Rate>,
    pub speech: Option<Rate>,
}

impl Default for Rates {
    /// Moves: 10 a second (a running character's pace), 20 at once after a pause. Speech:
    /// 5 lines a second, 10 at once.
    fn default() -> Rates {
        Rates {
            moves: Some(Rate {
                per_sec: 10,
                burst: 20,
            }),
            speech: Some(Rate {
                per_sec: 5,
                burst: 10,
            }),
        }
    }
}

/// Who is logged in on which connection, and where they stand. Ordered by serial wherever
/// it is walked: broadcasts go out in the same order on every run.
#[derive(Default)]
pub struct Players {
    by_conn: BTreeMap<ConnId, Serial>,
    by_serial: BTreeMap<Serial, Player>,
    /// The same players by sector, for [`Players::in_range`].
    by_sector: Visibility<ConnId>,
}

pub(super) struct Player {
    pub(super) conn: ConnId,
    /// Read it freely; change it with [`Players::move_to`], which refiles the player.
    pub(super) at: Location,
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

    /// Where the player `serial` stands, if it is logged in.
    #[must_use]
    pub fn location(&self, serial: Serial) -> Option<Location> {
        self.by_serial.get(&serial).map(|p| p.at)
    }

    /// The player of a logged-in connection.
    pub(super) fn get_mut(&mut self, conn: ConnId) -> Result<(Serial, &mut Player), BadPacket> {
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

    /// A player logs in on `player.conn` as `serial`.
    pub(super) fn insert(&mut self, serial: Serial, player: Player) {
        self.by_conn.insert(player.conn, serial);
        self.by_sector.insert(serial, player.conn, player.at);
        self.by_serial.insert(serial, player);
    }

    /// A logged-in player now stands at `to`.
    pub(super) fn move_to(&mut self, serial: Serial, to: Location) {
        if let Some(player) = self.by_serial.get_mut(&serial) {
            self.by_sector.relocate(serial, player.at, to);
            player.at = to;
        }
    }

    /// The player on `conn` leaves; what it was, if there was one.
    pub(super) fn remove(&mut self, conn: ConnId) -> Option<(Serial, Player)> {
        let serial = self.by_conn.remove(&conn)?;
        let player = self.by_serial.remove(&serial)?;
        self.by_sector.remove(serial, player.at);
        Some((serial, player))
    }

    /// Players within [`VIEW_RANGE`] of `at` and their connections, by serial. Reads only
    /// the sectors around `at` (see `visibility.rs`); the same players, in the same order,
    /// as a scan of every player.
    pub fn in_range(&self, at: Location) -> impl Iterator<Item = (Serial, ConnId)> + '_ {
        self.by_sector.in_range(at)
    }
}

/// The serial a system message is sent from: 0 is never an entity's serial.
pub const SYSTEM: Serial = Serial(0);

/// Sends `text` to every logged-in player as a system message: said by [`SYSTEM`], in the
/// game's speech encoding `said` (its `DeltaPackets::said`; `None`: the game has no speech,
/// and nothing is sent), cut at a character boundary to [`MAX_SPEECH`] bytes. Encoded once.
pub fn broadcast(net: &Net, players: &Players, said: Option<(u8, EncodeSaid)>, text: &str) {
    let Some((id, encode)) = said else {
        return;
    };
    let mut end = text.len().min(MAX_SPEECH);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut payload = Vec::new();
    encode(SYSTEM, &text[..end], &mut payload);
    net.with_sessions(|sessions| {
        for &conn in players.by_conn.keys() {
            sessions.send_packet(conn, id, &[&payload]);
        }
    });
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
