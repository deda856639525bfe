//! Who is playing: the logged-in players, their connections and where they stand, and the
//! two ways to reach them — everyone in range of a spot, or everyone.
//!
//! Owns the player table, and keeps the sector index of players ([`Visibility`]) in step
//! with it: a player joins, moves and leaves through [`Players::insert`], [`Players::move_to`]
//! and [`Players::remove`] only (which a game reaches through `Packet::log_in`,
//! `Packet::move_player` and `Packet::log_out`), never by writing the maps or a `Player`'s
//! `at`. Must never touch the world's entities (handlers do)
//! and never do I/O (it only queues packets on the sessions).

use crate::net::{BadPacket, ConnId};
use crate::world::{Location, MapId, Serial};
use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use super::visibility::{Visibility, Visit};

/// Who is logged in on which connection, and where they stand. Ordered by serial wherever
/// it is walked: broadcasts go out in the same order on every run.
#[derive(Default)]
pub struct Players {
    by_conn: BTreeMap<ConnId, Serial>,
    by_serial: BTreeMap<Serial, Player>,
    /// The same players by sector, for [`Players::in_range`].
    by_sector: Visibility<ConnId>,
    fan_out: FanOutStats,
}

/// What the Deltas phase's fan-out of world changes to players has counted since start
/// ([`Players::fan_out`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FanOutStats {
    /// World changes left for the next iteration because this one had spent its
    /// fan-out budget ([`FANOUT_PER_ITERATION`](super::FANOUT_PER_ITERATION)).
    pub deferred: u64,
    /// Iterations that deferred changes.
    pub deferring_iterations: u64,
    /// Spoken lines held back for a player reading too slowly (sent once its backlog
    /// drains).
    pub chatter_held: u64,
    /// Held lines dropped, oldest first, because the player's held chatter was full.
    pub chatter_dropped: u64,
}

pub(super) struct Player {
    pub(super) conn: ConnId,
    /// Read it freely; change it with [`Players::move_to`], which refiles the player.
    pub(super) at: Location,
}

impl Players {
    /// How many players are logged in (one per connection that completed a login).
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_conn.len()
    }

    /// No player is logged in.
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

    /// Every logged-in player's mobile, in serial order (what world saves leave out).
    pub fn serials(&self) -> impl Iterator<Item = Serial> + '_ {
        self.by_serial.keys().copied()
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

    /// Every logged-in player's connection, by connection.
    pub(super) fn conns(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.by_conn.keys().copied()
    }

    /// Players within [`VIEW_RANGE`](super::VIEW_RANGE) of `at` and their connections, by
    /// serial. Reads only the sectors around `at` (see `visibility.rs`); the same players, in
    /// the same order, as a scan of every player.
    pub fn in_range(&self, at: Location) -> impl Iterator<Item = (Serial, ConnId)> + '_ {
        self.by_sector.in_range(at)
    }

    /// Hands `visit` each player standing on `map` within `xs` × `ys`, with its connection
    /// and spot, and the connection of the player `ahead` places further in the same sector
    /// (if any, to hint into cache), sector by sector; a sector lying wholly inside the area
    /// in one piece (see `visibility.rs`).
    pub(super) fn visit_area_runs(
        &self,
        map: MapId,
        xs: RangeInclusive<u16>,
        ys: RangeInclusive<u16>,
        ahead: usize,
        visit: impl FnMut(Visit<'_, ConnId>),
    ) {
        self.by_sector.visit_area_runs(map, xs, ys, ahead, visit);
    }

    /// What the fan-out of world changes has counted since start.
    #[must_use]
    pub fn fan_out(&self) -> FanOutStats {
        self.fan_out
    }

    pub(super) fn fan_out_mut(&mut self) -> &mut FanOutStats {
        &mut self.fan_out
    }
}
