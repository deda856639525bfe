//! What players see of the world's changes: the Deltas phase drains the world's mobile and
//! item changes and sends moves and NPC speech to the players in range, once per iteration
//! however many times a mobile changed in it.
//!
//! The engine decides *who* sees a change (the players in range, from the sector index) and
//! *when* (once per loop iteration, written to the sockets at the next tick); the game decides what it looks like on the wire: its
//! [`DeltaPackets`], registered with `Game::deltas`. A shard whose games register none sends
//! nothing for world changes. With [`DeltaPackets::batch`] set, each player gets the
//! iteration's changes as one packet instead of one packet per change; system messages
//! ([`broadcast`]) use the game's speech encoding too.
//!
//! Owns the Deltas slot handler, the per-player batches and the wiring of the loop's slots.
//! Must never do I/O (it queues packets on the sessions; the Flush phase writes them).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Range;
use std::rc::Rc;

use crate::EventLoopBuilder;
use crate::net::{ConnId, GroupId, Net, Prepared, Sessions, SharedFrames, frame};
use crate::runtime::Phase;
use crate::world::{
    DELTAS_PER_ITERATION, Delta, IdMap, Location, SECTOR_SIZE, SectorId, Serial, World,
};

use super::players::Players;
use super::visibility::{Run, VIEW_RANGE, Visit};

/// Writes a moved mobile's packet payload: its serial and where it now stands.
pub type EncodeMoved = fn(Serial, Location, &mut Vec<u8>);
/// Writes a spoken line's packet payload: the speaker's serial and the line.
pub type EncodeSaid = fn(Serial, &str, &mut Vec<u8>);

/// How a game puts world changes on the wire: for each kind of change, the packet id and the
/// function that writes its payload (into an emptied buffer the engine reuses, so encoding
/// allocates nothing once the buffer has grown). `None`: players are not told of that kind.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeltaPackets {
    /// A mobile moved: sent to every player in range of where it now stands, but the mover.
    pub moved: Option<(u8, EncodeMoved)>,
    /// A mobile spoke (`Npc::say`): sent to every player in range, the speaker too.
    pub said: Option<(u8, EncodeSaid)>,
    /// `Some(id)`: each player gets all of an iteration's changes in one packet `id` (more
    /// only past the 64 KiB packet limit), whose payload is a run of records
    /// `[kind id u8][length u16, big-endian][payload]` — the kind id and payload being what
    /// would have been sent as a packet of its own. Each change is still encoded once. `None`
    /// (the default): one packet per change. Fewer, larger packets cost a crowd's loop and
    /// network less; the client must read the records.
    pub batch: Option<u8>,
}

impl DeltaPackets {
    /// Players are told of nothing.
    pub const NONE: DeltaPackets = DeltaPackets {
        moved: None,
        said: None,
        batch: None,
    };
}

/// The header of one record in a batch: kind id and length.
const RECORD_HEADER: usize = 3;
/// The most payload one packet holds.
const MAX_PAYLOAD: usize = u16::MAX as usize - frame::HEADER_LEN;

/// The serial a system message is sent from: 0 is never an entity's serial.
pub const SYSTEM: Serial = Serial(0);

/// Sends `text` to every logged-in player as a system message: said by [`SYSTEM`], in the
/// game's speech encoding `said` (its [`DeltaPackets::said`], which may cut it; `None`: the
/// game has no speech, and nothing is sent). Encoded once; always a packet of its own.
pub(crate) fn broadcast(net: &Net, players: &Players, said: Option<(u8, EncodeSaid)>, text: &str) {
    let Some((id, encode)) = said else {
        return;
    };
    let mut payload = Vec::new();
    encode(SYSTEM, text, &mut payload);
    if !fits(id, &payload, MAX_PAYLOAD) {
        return;
    }
    net.with_sessions(|sessions| {
        for conn in players.conns() {
            sessions.send_packet(conn, id, &[&payload]);
        }
    });
}

/// Puts the server and the world on a loop: the Network and Flush slots to `net`, the
/// Deltas slot to [`deltas_handler`]. Either backend runs on a plain loop.
pub fn wire(
    builder: EventLoopBuilder,
    net: &Net,
    world: Rc<RefCell<World>>,
    players: Rc<RefCell<Players>>,
    packets: DeltaPackets,
) -> EventLoopBuilder {
    builder
        .slot(Phase::Network, net.network_slot())
        .slot(
            Phase::Deltas,
            deltas_handler(world, players, net.clone(), packets),
        )
        .slot(Phase::Flush, net.flush_slot())
}

/// The most fan-out work the Deltas phase does in one iteration, in units of what costs
/// (each about a queue entry's worth): a change encoded, a player reached, an entry queued
/// on its connection (a range of a group's shared frames: the whole group to a player who
/// sees all of it, each move or line to one who sees part), a line held. Past it, the
/// groups not yet fanned out wait for the next iteration, ahead of newer changes, and are
/// counted ([`FanOutStats::deferred`](super::FanOutStats)): a crowd spreads its cost over
/// iterations instead of stretching one. At least one group goes out every iteration, so
/// nothing waits forever. Sized from `benches/broadcast.rs` to a few milliseconds of work
/// (docs/performance.md, "The fan-out budget (issue 33)").
pub const FANOUT_PER_ITERATION: usize = 50_000;

/// The most spoken lines held for one player reading too slowly; past it the oldest is
/// dropped. Speech is the lossy class of what players are sent: it never pushes a player's
/// unsent output past half its send limit, so chatter alone never disconnects anyone.
pub const HELD_CHATTER: usize = 64;

/// The Deltas slot handler with players connected: drains the world's changes like
/// [`crate::world::deltas_handler`], and sends moves and speech, encoded by `packets`, to
/// the players who can see them.
///
/// Changes are grouped by the sector they happen in (neighbouring sectors' groups merged
/// while they fit within [`VIEW_RANGE`]), each group is encoded once into shared frames,
/// and each player is queued the ranges of them it sees by reference, straight onto its
/// connection ([`Sessions::send_shared`]: no copy and no bookkeeping per player; one packet
/// of records per player with [`DeltaPackets::batch`]). The output goes out at the next tick boundary, at most one
/// write per player per tick, unless a reply of its own takes it along sooner. A player gets
/// the changes of one group in the order they happened, moves before speech. At most
/// [`FANOUT_PER_ITERATION`] units of work are done per iteration; the rest wait for the next.
/// Speech to a player whose unsent output is past half its send limit is held (at most
/// [`HELD_CHATTER`] lines, the oldest dropped first) until the player catches up.
pub fn deltas_handler(
    world: Rc<RefCell<World>>,
    players: Rc<RefCell<Players>>,
    net: Net,
    packets: DeltaPackets,
) -> impl FnMut() -> bool + 'static {
    let mut fan = FanOut::default();
    move || {
        let mut pending = false;
        if fan.queue.is_empty() {
            pending = world.borrow_mut().drain_changes(
                DELTAS_PER_ITERATION,
                |change| {
                    let Some(at) = change.location else { return };
                    if packets.moved.is_some() && change.delta.contains(Delta::MOVED) {
                        fan.queue.push(Seen::Moved(change.serial, at));
                    }
                    if let Some(line) = change.said.filter(|_| packets.said.is_some()) {
                        fan.queue
                            .push(Seen::Said(change.serial, at, line.to_owned()));
                    }
                },
                |_, _| {},
            );
        }
        if fan.queue.is_empty() && fan.held.is_empty() {
            return pending;
        }
        let mut players = players.borrow_mut();
        net.with_sessions(|sessions| fan.run(&packets, &mut players, sessions));
        pending || !fan.queue.is_empty()
    }
}

/// A change players in range should hear about.
enum Seen {
    Moved(Serial, Location),
    Said(Serial, Location, String),
}

impl Seen {
    fn at(&self) -> Location {
        match self {
            Seen::Moved(_, at) | Seen::Said(_, at, _) => *at,
        }
    }
}

/// The fan-out's state, kept between iterations so a steady crowd allocates nothing.
#[derive(Default)]
struct FanOut {
    /// Changes to fan out, oldest first: this iteration's, or those deferred from the last.
    queue: Vec<Seen>,
    /// This iteration's groups, in the order their first change happened.
    groups: Vec<Group>,
    group_of: IdMap<SectorId, usize>,
    /// Each group's sector, and the group it was merged into (itself if none), while
    /// grouping.
    sectors: Vec<SectorId>,
    merged_into: Vec<usize>,
    out: Batches,
    /// Speech held for players reading too slowly, oldest first: one packet (or record)
    /// each.
    held: IdMap<ConnId, VecDeque<Vec<u8>>>,
    payload: Vec<u8>,
    /// Runs so far, for [`RELEASE_EVERY`].
    runs: u32,
    /// Tests: every player through [`Walk::one`], the tight loop off — the reference it is
    /// checked against.
    #[cfg(test)]
    exact: bool,
    /// Tests: players the tight loop queued.
    #[cfg(test)]
    tight: usize,
}

/// Held speech is looked at every this many runs of the fan-out.
const RELEASE_EVERY: u32 = 8;

/// How many players ahead the fan-out hints their connections' lines into cache
/// ([`Sessions::prefetch`]): enough for the misses to overlap, few enough that the lines are
/// still there when their turn comes.
const PREFETCH_AHEAD: usize = 8;

/// The changes of one sector, or of neighbouring sectors close enough together (at most
/// [`VIEW_RANGE`] apart both ways), encoded once.
#[derive(Default)]
struct Group {
    /// The corners of the box the changes lie in, and their map.
    lo: (u16, u16),
    hi: (u16, u16),
    map: Option<crate::world::MapId>,
    /// Indexes into the queue, in order.
    changes: Vec<usize>,
    /// Encoded moves, back to back, and each one's mover, spot and bytes.
    moves: Vec<u8>,
    movers: Vec<(Serial, Location, Range<usize>)>,
    /// `movers` indexes sorted by serial: a player finds its own move without a scan.
    by_mover: Vec<(Serial, usize)>,
    /// A bit per hash of each mover's serial: most players around a group did not move in
    /// it, and one bit tells them so without the search of `by_mover`.
    mover_bits: MoverBits,
    /// Encoded lines, back to back, and each one's spot and bytes.
    said: Vec<u8>,
    lines: Vec<(Location, Range<usize>)>,
}

/// A set of serials that may answer "maybe" for one it does not hold, never "no" for one it
/// does: a bit per hash, 1024 of them (with a group's usual few dozen movers, a few percent
/// of the others are "maybe").
#[derive(Clone, Copy, Default)]
struct MoverBits([u64; 16]);

impl MoverBits {
    #[inline]
    fn bit(serial: Serial) -> (usize, u64) {
        // Fibonacci hashing: the top 10 bits of the product spread neighbouring serials.
        let h = (serial.0.wrapping_mul(0x9E37_79B9) >> 22) as usize;
        (h / 64, 1 << (h % 64))
    }

    fn insert(&mut self, serial: Serial) {
        let (word, bit) = Self::bit(serial);
        self.0[word] |= bit;
    }

    #[inline]
    fn may_hold(&self, serial: Serial) -> bool {
        let (word, bit) = Self::bit(serial);
        self.0[word] & bit != 0
    }
}

/// The 8 sectors around one, in a fixed order.
const NEIGHBOURS: [(i16, i16); 8] = [
    (-1, -1),
    (0, -1),
    (1, -1),
    (-1, 0),
    (1, 0),
    (-1, 1),
    (0, 1),
    (1, 1),
];

impl Group {
    /// Files change `i`, which happened at `at`.
    fn add(&mut self, i: usize, at: Location) {
        if self.map.is_none() {
            self.lo = (at.x, at.y);
            self.hi = (at.x, at.y);
            self.map = Some(at.map);
        }
        self.lo = (self.lo.0.min(at.x), self.lo.1.min(at.y));
        self.hi = (self.hi.0.max(at.x), self.hi.1.max(at.y));
        self.changes.push(i);
    }

    /// Whether this group's changes and `other`'s lie on one map within [`VIEW_RANGE`] of
    /// each other both ways.
    fn fits_with(&self, other: &Group) -> bool {
        let lo = (self.lo.0.min(other.lo.0), self.lo.1.min(other.lo.1));
        let hi = (self.hi.0.max(other.hi.0), self.hi.1.max(other.hi.1));
        self.map == other.map && hi.0 - lo.0 <= VIEW_RANGE && hi.1 - lo.1 <= VIEW_RANGE
    }
}

impl FanOut {
    fn run(&mut self, packets: &DeltaPackets, players: &mut Players, sessions: &mut Sessions) {
        self.group();
        let mut work = 0;
        let mut done = 0;
        while done < self.groups.len() && (work < FANOUT_PER_ITERATION || done == 0) {
            work += self.fan_group(done, packets, players, sessions);
            done += 1;
        }
        let deferred: Vec<usize> = {
            let mut rest: Vec<usize> = self.groups[done..]
                .iter()
                .flat_map(|g| g.changes.iter().copied())
                .collect();
            rest.sort_unstable();
            rest
        };
        self.release_held(packets.batch.is_some(), sessions);
        let stats = players.fan_out_mut();
        stats.chatter_held += std::mem::take(&mut self.out.held);
        stats.chatter_dropped += std::mem::take(&mut self.out.dropped);
        if deferred.is_empty() {
            self.queue.clear();
        } else {
            stats.deferred += deferred.len() as u64;
            stats.deferring_iterations += 1;
            let mut keep = vec![false; self.queue.len()];
            for i in deferred {
                keep[i] = true;
            }
            let mut i = 0;
            self.queue.retain(|_| {
                i += 1;
                keep[i - 1]
            });
        }
        if let Some(id) = packets.batch {
            self.out.send_batches(id, &self.groups[..done], sessions);
        }
    }

    /// Files the queue's changes into groups by sector, in order, then merges neighbouring
    /// sectors' groups whose changes lie within [`VIEW_RANGE`] of each other both ways: a
    /// crowd standing across a sector corner is one group, found with one area query and
    /// queued to each player in one piece, not four.
    fn group(&mut self) {
        for group in &mut self.groups {
            group.changes.clear();
            group.map = None;
        }
        self.group_of.clear();
        self.sectors.clear();
        let mut used = 0;
        for (i, seen) in self.queue.iter().enumerate() {
            let at = seen.at();
            let key = SectorId {
                map: at.map,
                x: at.x / SECTOR_SIZE,
                y: at.y / SECTOR_SIZE,
            };
            let g = *self.group_of.entry(key).or_insert_with(|| {
                used += 1;
                used - 1
            });
            if self.groups.len() <= g {
                self.groups.push(Group::default());
            }
            if self.sectors.len() <= g {
                self.sectors.push(key);
            }
            self.groups[g].add(i, at);
        }
        self.groups.truncate(used);
        self.merge_neighbours();
    }

    /// Merges each group into an earlier neighbouring one (of the 8 sectors around it) when
    /// both fit in one box at most [`VIEW_RANGE`] across; keeps the groups in the order of
    /// their first change, and each group's changes in the order they happened.
    fn merge_neighbours(&mut self) {
        let n = self.groups.len();
        self.merged_into.clear();
        self.merged_into.extend(0..n);
        for g in 1..n {
            let key = self.sectors[g];
            let into = NEIGHBOURS.iter().find_map(|&(dx, dy)| {
                let near = SectorId {
                    map: key.map,
                    x: key.x.checked_add_signed(dx)?,
                    y: key.y.checked_add_signed(dy)?,
                };
                let root = self.merged_into[*self.group_of.get(&near)?];
                (root < g && self.groups[root].fits_with(&self.groups[g])).then_some(root)
            });
            if let Some(root) = into {
                self.merged_into[g] = root;
                let moved = std::mem::take(&mut self.groups[g].changes);
                let (lo, hi) = (self.groups[g].lo, self.groups[g].hi);
                let target = &mut self.groups[root];
                target.lo = (target.lo.0.min(lo.0), target.lo.1.min(lo.1));
                target.hi = (target.hi.0.max(hi.0), target.hi.1.max(hi.1));
                target.changes.extend_from_slice(&moved);
                self.groups[g].changes = moved; // its allocation, kept for reuse
                self.groups[g].changes.clear();
            }
        }
        // Roots to the front, in order; merged groups' changes back in the order they
        // happened. Emptied groups go to the back, keeping their buffers.
        let mut kept = 0;
        for g in 0..n {
            if self.merged_into[g] == g {
                self.groups.swap(kept, g);
                kept += 1;
            }
        }
        for group in &mut self.groups[..kept] {
            if !group.changes.is_sorted() {
                group.changes.sort_unstable();
            }
        }
        self.groups.truncate(kept);
    }

    /// Encodes group `g` and queues it to everyone who sees any of it; the units of work done
    /// (see [`FANOUT_PER_ITERATION`]).
    fn fan_group(
        &mut self,
        g: usize,
        packets: &DeltaPackets,
        players: &Players,
        sessions: &mut Sessions,
    ) -> usize {
        let batch = packets.batch.is_some();
        #[cfg(test)]
        let exact = self.exact;
        let FanOut {
            queue,
            groups,
            out,
            held,
            payload,
            ..
        } = self;
        let group = &mut groups[g];
        group.moves.clear();
        group.movers.clear();
        group.by_mover.clear();
        group.mover_bits = MoverBits::default();
        group.said.clear();
        group.lines.clear();
        let (mut lo, mut hi) = ((u16::MAX, u16::MAX), (0, 0));
        let mut map = None;
        for &i in &group.changes {
            let seen = &queue[i];
            let at = seen.at();
            map = Some(at.map);
            lo = (lo.0.min(at.x), lo.1.min(at.y));
            hi = (hi.0.max(at.x), hi.1.max(at.y));
            payload.clear();
            match seen {
                Seen::Moved(serial, at) => {
                    let Some((id, encode)) = packets.moved else {
                        continue;
                    };
                    encode(*serial, *at, payload);
                    let start = group.moves.len();
                    if unit(batch, id, payload, &mut group.moves) {
                        let n = group.movers.len();
                        group.by_mover.push((*serial, n));
                        group.mover_bits.insert(*serial);
                        group.movers.push((*serial, *at, start..group.moves.len()));
                    }
                }
                Seen::Said(serial, at, line) => {
                    let Some((id, encode)) = packets.said else {
                        continue;
                    };
                    encode(*serial, line, payload);
                    let start = group.said.len();
                    if unit(batch, id, payload, &mut group.said) {
                        group.lines.push((*at, start..group.said.len()));
                    }
                }
            }
        }
        let Some(map) = map else { return 0 };
        group.by_mover.sort_unstable();
        // Who sees every change of the group: within range of both corners of its box.
        let whole_lo = (
            hi.0.saturating_sub(VIEW_RANGE),
            hi.1.saturating_sub(VIEW_RANGE),
        );
        let whole_hi = (
            lo.0.saturating_add(VIEW_RANGE),
            lo.1.saturating_add(VIEW_RANGE),
        );
        let xs = lo.0.saturating_sub(VIEW_RANGE)..=hi.0.saturating_add(VIEW_RANGE);
        let ys = lo.1.saturating_sub(VIEW_RANGE)..=hi.1.saturating_add(VIEW_RANGE);
        let chatter_limit = sessions.send_limit() / 2;
        let group = &*group;
        let mut walk = Walk {
            group,
            sink: Sink {
                batched: batch.then_some(&mut *out),
                g,
                moves: &group.moves,
                said: &group.said,
                shared: [None, None],
                whole: [None, None],
                entries: 0,
            },
            sessions,
            held,
            whole_lo,
            whole_hi,
            chatter_limit,
            // Work counts what costs: a change encoded, a player reached, an entry queued.
            work: group.changes.len(),
            chatter: (0, 0),
            #[cfg(test)]
            exact,
            #[cfg(test)]
            tight: 0,
        };
        players.visit_area_runs(map, xs, ys, PREFETCH_AHEAD, |seen| match seen {
            Visit::One(serial, conn, at, ahead) => walk.one(serial, conn, at, ahead),
            Visit::Run(run) => walk.run(run),
        });
        #[cfg(test)]
        let tight = walk.tight;
        let Walk {
            mut sink,
            sessions,
            work,
            chatter,
            ..
        } = walk;
        sink.finish(sessions);
        let work = work + sink.entries;
        out.held += chatter.0;
        out.dropped += chatter.1;
        #[cfg(test)]
        {
            self.tight += tight;
        }
        work
    }

    /// Sends held speech to players who have room for it again, oldest first; forgets
    /// players who left.
    fn release_held(&mut self, batch: bool, sessions: &mut Sessions) {
        if self.held.is_empty() {
            return;
        }
        // Backlogs shrink only as the Flush phase writes: a look every few runs is enough,
        // and keeps a crowd of slow readers from costing every iteration.
        self.runs = self.runs.wrapping_add(1);
        if !self.runs.is_multiple_of(RELEASE_EVERY) {
            return;
        }
        let chatter_limit = sessions.send_limit() / 2;
        let out = &mut self.out;
        self.held.retain(|&conn, ring| {
            if !sessions.is_open(conn) {
                return false;
            }
            let queued = out.index.get(&conn).map_or(0, |&i| out.slots[i].bytes);
            let first = ring.front().map_or(0, Vec::len);
            if sessions.pending_output(conn) + queued + first > chatter_limit {
                return true; // no room yet: nothing to queue, no slot taken
            }
            let mut backlog = sessions.pending_output(conn) + queued;
            while let Some(line) = ring.front() {
                if backlog + line.len() > chatter_limit {
                    break;
                }
                backlog += line.len();
                if batch {
                    out.slot(conn).push_own(line);
                } else {
                    // A held line is one whole packet; it goes with the broadcasts.
                    sessions.send_frames_at_tick(conn, line, 1);
                }
                ring.pop_front();
            }
            !ring.is_empty()
        });
    }
}

/// One group's walk of the area around it: what each player there is queued.
struct Walk<'a> {
    group: &'a Group,
    sink: Sink<'a>,
    sessions: &'a mut Sessions,
    held: &'a mut IdMap<ConnId, VecDeque<Vec<u8>>>,
    /// The box of the players who see every change of the group.
    whole_lo: (u16, u16),
    whole_hi: (u16, u16),
    chatter_limit: usize,
    /// Units of work so far (see [`FANOUT_PER_ITERATION`]), less the sink's entries.
    work: usize,
    /// Lines held and dropped.
    chatter: (u64, u64),
    /// Tests: [`FanOut::exact`], and the players the tight loop queued.
    #[cfg(test)]
    exact: bool,
    #[cfg(test)]
    tight: usize,
}

impl Walk<'_> {
    /// Queues player `serial` (on `conn`, standing at `at`) what it sees of the group;
    /// `ahead` is a player coming soon, whose connection is hinted into cache.
    fn one(&mut self, serial: Serial, conn: ConnId, at: Location, ahead: Option<ConnId>) {
        let Walk {
            group,
            sink,
            sessions,
            held,
            ..
        } = self;
        if let Some(ahead) = ahead {
            sessions.prefetch(ahead);
        }
        self.work += 1;
        // The area query answers on the group's map only.
        let whole = self.whole_lo.0 <= at.x
            && at.x <= self.whole_hi.0
            && self.whole_lo.1 <= at.y
            && at.y <= self.whole_hi.1;
        let own = group
            .mover_bits
            .may_hold(serial)
            .then(|| group.by_mover.binary_search_by_key(&serial, |&(s, _)| s))
            .and_then(Result::ok)
            .map(|k| group.by_mover[k].1);
        if whole {
            let (all, n) = (group.moves.len(), group.movers.len());
            match own {
                // All but its own move: the moves before it and after it.
                Some(k) => {
                    let r = group.movers[k].2.clone();
                    sink.moves_around(sessions, conn, r, all, (k as u64, (n - k - 1) as u64));
                }
                None => sink.push_whole(sessions, conn, Part::Moves, n as u64),
            }
        } else {
            for (k, (_, spot, r)) in group.movers.iter().enumerate() {
                if Some(k) != own && sees(&at, spot) {
                    sink.push(sessions, conn, Part::Moves, r.clone(), 1);
                }
            }
        }
        if group.lines.is_empty() {
            return;
        }
        let chatter_limit = self.chatter_limit;
        let backlog = sessions.pending_output(conn) + sink.unsent(conn);
        let ring = held.get_mut(&conn);
        let slow = ring.as_ref().is_some_and(|r| !r.is_empty())
            || backlog + group.said.len() > chatter_limit;
        if !slow && whole {
            let lines = group.lines.len() as u64;
            sink.push_whole(sessions, conn, Part::Said, lines);
            return;
        }
        let visible = group
            .lines
            .iter()
            .filter(|(spot, _)| whole || sees(&at, spot));
        if !slow {
            for (_, r) in visible {
                sink.push(sessions, conn, Part::Said, r.clone(), 1);
            }
            return;
        }
        let ring = match ring {
            Some(ring) => ring,
            None => held.entry(conn).or_default(),
        };
        let stats = hold(
            ring,
            visible.map(|(_, r)| &group.said[r.clone()]),
            chatter_limit,
        );
        self.work += (stats.0 + stats.1) as usize;
        self.chatter.0 += stats.0;
        self.chatter.1 += stats.1;
    }

    /// Every player of one sector wholly inside the area, in the sector's order: runs of
    /// them in the tight loop of [`Walk::join_whole`], and each one it stops at as
    /// [`Walk::one`] — so each player gets what [`Walk::one`] would give it, at the same
    /// point of the walk, and every limit trips at the same send.
    fn run(&mut self, run: Run<'_, ConnId>) {
        #[cfg(test)]
        if self.exact {
            for k in 0..run.len() {
                if let Some((serial, conn, at)) = run.get(k) {
                    self.one(serial, conn, at, run.who(k + PREFETCH_AHEAD));
                }
            }
            return;
        }
        let mut k = 0;
        while k < run.len() {
            k += self.join_whole(run, k);
            if let Some((serial, conn, at)) = run.get(k) {
                self.one(serial, conn, at, run.who(k + PREFETCH_AHEAD));
                k += 1;
            }
        }
    }

    /// From the `from`th player of `run` on, while the player takes only the whole of the
    /// group's moves the short way, queues them to it: the group has no lines, the moves
    /// are prepared (by their first recipient) with a deferral, the player sees the whole
    /// group (stands in its box), made none of its moves (by the group's filter: a "maybe"
    /// stops the loop), and its connection joins the
    /// deferral ([`Sessions::join_run`]: every limit checked as `send_prepared` checks it). How
    /// many players it queued. What [`Walk::one`] does for each of them, with the
    /// per-group tests hoisted out of the loop and its state in registers.
    #[inline(always)]
    fn join_whole(&mut self, run: Run<'_, ConnId>, from: usize) -> usize {
        if !self.group.lines.is_empty() {
            return 0;
        }
        let Some(prepared) = &self.sink.whole[0] else {
            return 0;
        };
        let Some(mut joins) = self.sessions.join_run(prepared) else {
            return 0;
        };
        let (bits, lo, hi) = (&self.group.mover_bits, self.whole_lo, self.whole_hi);
        for (serial, conn, at) in run.from(from) {
            let whole = lo.0 <= at.x && at.x <= hi.0 && lo.1 <= at.y && at.y <= hi.1;
            if !whole || bits.may_hold(serial) || !joins.join(conn) {
                break;
            }
        }
        let n = joins.finish();
        self.work += n;
        self.sink.entries += n;
        #[cfg(test)]
        {
            self.tight += n;
        }
        n
    }
}

/// Which of a group's encodings a piece of output lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Moves,
    Said,
}

/// Where the fan-out puts each player's share of one group.
///
/// Packets of their own (no [`DeltaPackets::batch`]): straight onto the player's connection,
/// by reference to the group's shared copy — no per-player bookkeeping in the fan-out, so a
/// recipient costs its connection's queue entry and little else. Batched: into the player's
/// slot, to be cut into packets of records once every group is fanned out.
struct Sink<'a> {
    batched: Option<&'a mut Batches>,
    g: usize,
    moves: &'a [u8],
    said: &'a [u8],
    /// The group's moves and lines, shared and filed with the sessions
    /// ([`Sessions::share`]), made when their first recipient is queued: groups nobody sees
    /// (a crowd of one, spread players) cost no copy.
    shared: [Option<GroupId>; 2],
    /// The whole of the group's moves and of its lines, prepared for the sessions
    /// ([`Sessions::prepare`]) when first queued to a player who sees all of them.
    whole: [Option<Prepared>; 2],
    /// Entries queued (ranges, or pieces of a slot), for the budget.
    entries: usize,
}

impl Sink<'_> {
    /// Queues `range` of `part` (`packets` packets or records) for `conn`.
    fn push(
        &mut self,
        sessions: &mut Sessions,
        conn: ConnId,
        part: Part,
        range: Range<usize>,
        packets: u64,
    ) {
        if range.is_empty() {
            return;
        }
        self.entries += 1;
        if let Some(out) = self.batched.as_deref_mut() {
            let source = match part {
                Part::Moves => Source::Moves(self.g),
                Part::Said => Source::Said(self.g),
            };
            out.slot(conn).push(source, range, packets);
            return;
        }
        let g = self.group(sessions, part);
        sessions.send_group(conn, g, range, packets);
    }

    /// Queues the whole of `part` (`packets` packets or records) for `conn`: the common case
    /// in a crowd, checked once per group and queued the sessions' short way (recorded once
    /// for the group, the recipient's connection touched only where its limits are kept).
    /// Once the part is prepared this is the one call per recipient, inlined into the
    /// area's walk; the first recipient of a part goes through [`Sink::push_whole_first`].
    #[inline(always)]
    fn push_whole(&mut self, sessions: &mut Sessions, conn: ConnId, part: Part, packets: u64) {
        let at = match part {
            Part::Moves => 0,
            Part::Said => 1,
        };
        if let Some(prepared) = &self.whole[at] {
            self.entries += 1;
            sessions.send_prepared(conn, prepared);
        } else {
            self.push_whole_first(sessions, conn, part, packets);
        }
    }

    /// [`Sink::push_whole`] while the part is not prepared: its first recipient (which
    /// prepares it), or every recipient when it is batched or empty.
    #[inline(never)]
    fn push_whole_first(
        &mut self,
        sessions: &mut Sessions,
        conn: ConnId,
        part: Part,
        packets: u64,
    ) {
        let (at, all) = match part {
            Part::Moves => (0, self.moves.len()),
            Part::Said => (1, self.said.len()),
        };
        if self.batched.is_some() || all == 0 {
            return self.push(sessions, conn, part, 0..all, packets);
        }
        self.entries += 1;
        let g = self.group(sessions, part);
        let prepared = sessions.prepare(g, 0..all, packets);
        sessions.send_prepared(conn, &prepared);
        self.whole[at] = Some(prepared);
    }

    /// Queues all the group's moves but `own` (the player's own move) for `conn`: the
    /// `packets.0` moves before it and the `packets.1` after, `all` bytes in all.
    fn moves_around(
        &mut self,
        sessions: &mut Sessions,
        conn: ConnId,
        own: Range<usize>,
        all: usize,
        packets: (u64, u64),
    ) {
        if self.batched.is_some() {
            self.push(sessions, conn, Part::Moves, 0..own.start, packets.0);
            self.push(sessions, conn, Part::Moves, own.end..all, packets.1);
            return;
        }
        self.entries += 1;
        let g = self.group(sessions, Part::Moves);
        sessions.send_group_around(conn, g, own, packets.0 + packets.1);
    }

    /// Bytes queued for `conn` by this fan-out and not yet on its connection (batched
    /// output waits in its slot until every group is fanned out).
    fn unsent(&self, conn: ConnId) -> usize {
        self.batched
            .as_deref()
            .and_then(|out| out.index.get(&conn).map(|&i| out.slots[i].bytes))
            .unwrap_or(0)
    }

    fn group(&mut self, sessions: &mut Sessions, part: Part) -> GroupId {
        let (at, bytes) = match part {
            Part::Moves => (0, self.moves),
            Part::Said => (1, self.said),
        };
        *self.shared[at].get_or_insert_with(|| sessions.share(SharedFrames::new(bytes)))
    }

    /// The group is fanned out: the sessions' table keeps its frames only while a queued
    /// range needs them.
    fn finish(&mut self, sessions: &mut Sessions) {
        self.whole = [None, None];
        for g in self.shared.iter_mut().filter_map(Option::take) {
            sessions.unshare(g);
        }
    }
}

/// Holds `lines` in `ring`, dropping the oldest past [`HELD_CHATTER`] lines or `max_bytes`
/// bytes; (held, dropped).
fn hold<'a>(
    ring: &mut VecDeque<Vec<u8>>,
    lines: impl Iterator<Item = &'a [u8]>,
    max_bytes: usize,
) -> (u64, u64) {
    let (mut held, mut dropped) = (0, 0);
    let mut bytes: usize = ring.iter().map(Vec::len).sum();
    for line in lines {
        let mut spare = None;
        while !ring.is_empty() && (ring.len() >= HELD_CHATTER || bytes + line.len() > max_bytes) {
            if let Some(oldest) = ring.pop_front() {
                bytes -= oldest.len();
                dropped += 1;
                spare = Some(oldest);
            }
        }
        if line.len() > max_bytes {
            dropped += 1;
            continue;
        }
        let mut buffer = spare.unwrap_or_default();
        buffer.clear();
        buffer.extend_from_slice(line);
        bytes += buffer.len();
        ring.push_back(buffer);
        held += 1;
    }
    (held, dropped)
}

/// Appends one change as it goes out: a packet of its own, or a record of a batch. False
/// (and nothing written) when it is too large for that.
fn unit(batch: bool, id: u8, payload: &[u8], out: &mut Vec<u8>) -> bool {
    if batch {
        if !fits(id, payload, MAX_PAYLOAD - RECORD_HEADER) {
            return false;
        }
        let Ok(len) = u16::try_from(payload.len()) else {
            return false;
        };
        out.push(id);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(payload);
    } else {
        if !fits(id, payload, MAX_PAYLOAD) {
            return false;
        }
        frame::put(out, id, &[payload]);
    }
    true
}

/// Where a piece of a player's output lies: in a group's encoded moves or lines (shared
/// by everyone who gets them), or in the player's own buffer (held speech let go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Moves(usize),
    Said(usize),
    Own,
}

/// One player's output this iteration: pieces, in order, each with its packet count.
#[derive(Default)]
struct Slot {
    pieces: Vec<(Source, Range<usize>, u64)>,
    /// Bytes of its own (held lines let go), which `Source::Own` pieces point into.
    own: Vec<u8>,
    /// Bytes in all its pieces.
    bytes: usize,
}

impl Slot {
    /// Appends `range` of `source` (`packets` packets or records); a range continuing the
    /// last piece joins it.
    fn push(&mut self, source: Source, range: Range<usize>, packets: u64) {
        if range.is_empty() {
            return;
        }
        self.bytes += range.len();
        if let Some((last, last_range, count)) = self.pieces.last_mut()
            && *last == source
            && last_range.end == range.start
        {
            last_range.end = range.end;
            *count += packets;
            return;
        }
        self.pieces.push((source, range, packets));
    }

    /// Appends a packet (or record) of its own.
    fn push_own(&mut self, bytes: &[u8]) {
        let start = self.own.len();
        self.own.extend_from_slice(bytes);
        self.push(Source::Own, start..self.own.len(), 1);
    }

    fn clear(&mut self) {
        self.pieces.clear();
        self.own.clear();
        self.bytes = 0;
    }
}

/// With [`DeltaPackets::batch`], this iteration's records for each player, as pieces of the
/// groups' encodings (and of held lines let go), in the order players first got some, until
/// they are cut into packets. Kept between iterations, so a steady crowd allocates nothing.
/// Also counts the lines held and dropped, in either mode.
#[derive(Default)]
struct Batches {
    index: IdMap<ConnId, usize>,
    /// Players with output this iteration: the first `conns.len()` slots are theirs.
    conns: Vec<ConnId>,
    slots: Vec<Slot>,
    /// A player's records, gathered to be cut into packets.
    records: Vec<u8>,
    /// Lines held and dropped since the counters were last read.
    held: u64,
    dropped: u64,
}

impl Batches {
    /// `conn`'s output this iteration.
    fn slot(&mut self, conn: ConnId) -> &mut Slot {
        let slot = *self.index.entry(conn).or_insert_with(|| {
            self.conns.push(conn);
            if self.slots.len() < self.conns.len() {
                self.slots.push(Slot::default());
            }
            self.conns.len() - 1
        });
        &mut self.slots[slot]
    }

    /// Queues each player's records as packets `id`, cut at record boundaries below the
    /// packet limit, and empties the batches.
    fn send_batches(&mut self, id: u8, groups: &[Group], sessions: &mut Sessions) {
        for (conn, slot) in self.conns.drain(..).zip(&mut self.slots) {
            self.records.clear();
            for (source, range, _) in &slot.pieces {
                let bytes = match *source {
                    Source::Moves(g) => &groups[g].moves,
                    Source::Said(g) => &groups[g].said,
                    Source::Own => &slot.own,
                };
                self.records.extend_from_slice(&bytes[range.clone()]);
            }
            let mut rest = self.records.as_slice();
            while !rest.is_empty() {
                let cut = records_within(rest, MAX_PAYLOAD);
                if cut == 0 {
                    break; // unreachable: whole records only
                }
                let (packet, tail) = rest.split_at(cut);
                sessions.send_packet_at_tick(conn, id, &[packet]);
                rest = tail;
            }
            slot.clear();
        }
        self.index.clear();
    }
}

/// The game's range rule (see `visibility.rs`).
fn sees(a: &Location, b: &Location) -> bool {
    a.distance(b).is_some_and(|d| d <= VIEW_RANGE)
}

/// A game's encoder wrote `payload` for packet `id`: false (and a warning naming the id and
/// size) when it cannot go out, being larger than `limit` — a line of 100 KB said by an NPC,
/// say. The change is dropped for everyone; nothing else is affected.
fn fits(id: u8, payload: &[u8], limit: usize) -> bool {
    if payload.len() <= limit {
        return true;
    }
    tracing::warn!(
        packet = format_args!("0x{id:02x}"),
        bytes = payload.len(),
        limit,
        "a world change encoded larger than a packet can carry was dropped; cut long text in \
         the game's encoder"
    );
    false
}

/// How many bytes of whole records at the start of `records` fit in `max` (at least one
/// record: each is smaller than a packet).
fn records_within(records: &[u8], max: usize) -> usize {
    let mut end = 0;
    while end + RECORD_HEADER <= records.len() {
        let len = usize::from(u16::from_be_bytes([records[end + 1], records[end + 2]]));
        let next = end + RECORD_HEADER + len;
        if next > max && end > 0 {
            break;
        }
        end = next;
    }
    end.min(records.len())
}

#[cfg(test)]
mod tests {
    use super::super::players::Player;
    use super::*;
    use crate::world::MapId;
    use tokio::time::Instant;

    const MOVED: u8 = 0xB1;
    const SAID: u8 = 0xB2;
    const OWN: u8 = 0xB3;
    const PACKETS: DeltaPackets = DeltaPackets {
        moved: Some((MOVED, |serial, at, out| {
            out.extend_from_slice(&serial.0.to_be_bytes());
            out.extend_from_slice(&at.x.to_be_bytes());
        })),
        said: Some((SAID, |_, line, out| out.extend_from_slice(line.as_bytes()))),
        batch: None,
    };

    /// Players on detached connections around a spot, and the fan-out between them.
    struct Bed {
        sessions: Sessions,
        players: Players,
        fan: FanOut,
    }

    impl Bed {
        fn new(send_limit: usize) -> Bed {
            Bed {
                sessions: Sessions::new(send_limit, usize::MAX),
                players: Players::default(),
                fan: FanOut::default(),
            }
        }

        fn join(&mut self, serial: u32, at: Location) -> ConnId {
            let peer = std::net::SocketAddr::from(([127, 0, 0, 1], 1000 + serial as u16));
            let conn = self.sessions.open_detached(peer, Instant::now());
            self.players.insert(Serial(serial), Player { conn, at });
            conn
        }

        /// One Deltas phase over `changes` (and whatever was deferred before them).
        fn iterate(&mut self, changes: impl IntoIterator<Item = Seen>) {
            self.fan.queue.extend(changes);
            self.fan
                .run(&PACKETS, &mut self.players, &mut self.sessions);
        }

        /// The packets queued for `conn`, taken: (id, payload).
        fn read(&mut self, conn: ConnId) -> Vec<(u8, Vec<u8>)> {
            let bytes = self.sessions.take_output(conn);
            let mut out = Vec::new();
            let mut rest = bytes.as_slice();
            while let Ok(Some(f)) = frame::split(rest, usize::from(u16::MAX)) {
                out.push((f.id, f.payload().to_vec()));
                rest = &rest[f.bytes.len()..];
            }
            out
        }
    }

    fn spot(x: u16) -> Location {
        Location::new(x, 100, 0, MapId::FELUCCA)
    }

    #[test]
    fn a_player_near_a_speech_flood_stays_connected_and_gets_its_own_packets() {
        let mut bed = Bed::new(16 << 10);
        let slow = bed.join(1, spot(100));
        let reader = bed.join(2, spot(101));
        let line = |n: usize| format!("{n:05} {}", "x".repeat(200));
        let mut n = 0;
        for _ in 0..100 {
            let lines: Vec<Seen> = (0..5)
                .map(|k| {
                    n += 1;
                    Seen::Said(Serial(900 + k), spot(102), line(n))
                })
                .collect();
            bed.iterate(lines);
            // The reader reads everything, every line, in order.
            let heard: Vec<_> = bed.read(reader);
            assert_eq!(heard.len(), 5);
            assert_eq!(heard[4], (SAID, line(n).into_bytes()));
            assert!(bed.sessions.is_open(slow), "chatter never disconnects");
            assert!(bed.sessions.pending_output(slow) <= 8 << 10);
        }
        let stats = bed.players.fan_out();
        assert!(stats.chatter_dropped > 0 && stats.chatter_held > stats.chatter_dropped);
        // Its own packets still reach it, after what it was sent before.
        assert!(bed.sessions.send_packet(slow, OWN, &[b"yours"]));
        let got = bed.read(slow);
        assert_eq!(got.last(), Some(&(OWN, b"yours".to_vec())));
        assert_eq!(
            got[0],
            (SAID, line(1).into_bytes()),
            "the first lines went out"
        );
        // Once it has read, the held lines follow (within a few runs): the newest kept, in
        // order.
        let mut held = Vec::new();
        for _ in 0..RELEASE_EVERY {
            bed.iterate([]);
            held.extend(bed.read(slow));
        }
        assert!(!held.is_empty());
        let numbers: Vec<usize> = held
            .iter()
            .map(|(_, p)| std::str::from_utf8(&p[..5]).unwrap().parse().unwrap())
            .collect();
        assert!(
            numbers.windows(2).all(|w| w[0] < w[1]),
            "in order: {numbers:?}"
        );
        let mut newest = *numbers.last().unwrap();
        while !bed.fan.held.is_empty() {
            let mut more = Vec::new();
            for _ in 0..RELEASE_EVERY {
                bed.iterate([]);
                more.extend(bed.read(slow));
            }
            let first: usize = std::str::from_utf8(&more[0].1[..5])
                .unwrap()
                .parse()
                .unwrap();
            assert!(first > newest, "in order");
            newest = std::str::from_utf8(&more.last().unwrap().1[..5])
                .unwrap()
                .parse()
                .unwrap();
        }
        assert_eq!(newest, n, "the oldest lines were the ones dropped");
        assert!(bed.sessions.is_open(slow) && bed.sessions.is_open(reader));
    }

    #[test]
    fn work_past_the_budget_waits_for_the_next_iteration_in_order() {
        let mut bed = Bed::new(64 << 20);
        // 10 watchers see three neighbouring sectors' worth of movers, too far apart to
        // be one group (30 tiles).
        let at = |x, y| Location::new(x, y, 0, MapId::FELUCCA);
        let watchers: Vec<ConnId> = (1..=10).map(|s| bed.join(s, at(112, 112))).collect();
        let spots = [at(97, 97), at(127, 97), at(97, 127)];
        // Each group costs its moves' encoding and each watcher reached and queued the
        // group (two units): past the budget on its own.
        let per_group = FANOUT_PER_ITERATION;
        let moves: Vec<Seen> = (0..3 * per_group)
            .map(|k| Seen::Moved(Serial(1000 + k as u32), spots[k % 3]))
            .collect();
        let expected: Vec<Vec<u32>> = (0..3)
            .map(|g| (0..per_group).map(|i| 1000 + (3 * i + g) as u32).collect())
            .collect();
        let movers = |got: &[(u8, Vec<u8>)]| -> Vec<u32> {
            got.iter()
                .map(|(_, p)| u32::from_be_bytes(p[..4].try_into().unwrap()))
                .collect()
        };
        bed.iterate(moves);
        assert_eq!(bed.players.fan_out().deferred, 2 * per_group as u64);
        for (g, expected) in expected.iter().enumerate() {
            for &w in &watchers {
                assert_eq!(&movers(&bed.read(w)), expected, "group {g}");
            }
            assert_eq!(bed.fan.queue.len(), (2 - g) * per_group);
            bed.iterate([]);
        }
        let stats = bed.players.fan_out();
        assert_eq!(stats.deferred, 3 * per_group as u64);
        assert_eq!(stats.deferring_iterations, 2);
    }

    #[test]
    fn a_group_seen_whole_costs_the_budget_a_unit_per_player_not_per_move() {
        let mut bed = Bed::new(64 << 20);
        let at = |x, y| Location::new(x, y, 0, MapId::FELUCCA);
        let watchers: Vec<ConnId> = (1..=100).map(|s| bed.join(s, at(112, 112))).collect();
        // Three groups of 1000 moves, each seen whole by 100 watchers: 300 000 deliveries
        // of a move to a player, but 3 × (1000 encoded + 100 reached + 100 queued) units.
        let spots = [at(97, 97), at(127, 97), at(97, 127)];
        let moves: Vec<Seen> = (0..3000)
            .map(|k| Seen::Moved(Serial(1000 + k as u32), spots[k % 3]))
            .collect();
        const { assert!(3 * 1200 < FANOUT_PER_ITERATION && 300_000 > FANOUT_PER_ITERATION) };
        bed.iterate(moves);
        assert_eq!(bed.players.fan_out().deferred, 0);
        assert!(bed.fan.queue.is_empty());
        for &w in &watchers {
            assert_eq!(bed.read(w).len(), 3000);
        }
    }

    #[test]
    fn a_crowd_across_a_sector_corner_is_one_group_and_everyone_gets_the_others_in_order() {
        let mut bed = Bed::new(64 << 20);
        // 36 players on a 6 × 6 grid, 3 tiles apart, across the corner at (112, 112).
        let at = |x, y| Location::new(x, y, 0, MapId::FELUCCA);
        let spots: Vec<Location> = (0..36u16)
            .map(|k| at(104 + 3 * (k % 6), 104 + 3 * (k / 6)))
            .collect();
        let conns: Vec<ConnId> = spots
            .iter()
            .enumerate()
            .map(|(k, &spot)| bed.join(k as u32 + 1, spot))
            .collect();
        let moves: Vec<Seen> = spots
            .iter()
            .enumerate()
            .map(|(k, &spot)| Seen::Moved(Serial(k as u32 + 1), spot))
            .collect();
        bed.iterate(moves);
        assert_eq!(bed.fan.groups.len(), 1, "four sectors, one group");
        for (k, &conn) in conns.iter().enumerate() {
            let got: Vec<u32> = bed
                .read(conn)
                .iter()
                .map(|(_, p)| u32::from_be_bytes(p[..4].try_into().unwrap()))
                .collect();
            let others: Vec<u32> = (1..=36).filter(|&s| s != k as u32 + 1).collect();
            assert_eq!(got, others, "player {}", k + 1);
        }
    }

    /// A mover and a watcher; the mover moves, then speaks. The watcher must get
    /// the move before the line, as they happened (and as they were queued for it).
    #[test]
    fn a_watcher_gets_a_groups_moves_before_its_lines_whoever_opened_a_deferral_first() {
        for (mover_x, watcher_x) in [(100, 101), (101, 100)] {
            let mut bed = Bed::new(64 << 20);
            let mover = bed.join(1, spot(mover_x));
            let watcher = bed.join(2, spot(watcher_x));
            // Warm-up: one delivery the long way makes both gates live.
            bed.iterate([Seen::Moved(Serial(1), spot(mover_x))]);
            bed.read(mover);
            bed.read(watcher);
            bed.iterate([
                Seen::Moved(Serial(1), spot(mover_x)),
                Seen::Said(Serial(1), spot(mover_x), "hello".to_string()),
            ]);
            let ids: Vec<u8> = bed.read(watcher).iter().map(|(id, _)| *id).collect();
            assert_eq!(
                ids,
                [MOVED, SAID],
                "mover at {mover_x}, watcher at {watcher_x}"
            );
        }
    }

    /// The tight loop against the walk player by player ([`FanOut::exact`]), on two beds
    /// driven alike: a crowd across a sector corner, different movers each iteration, a
    /// third of the players never reading, so the soft limit, the budget and the send limit
    /// are met on the way. Everyone gets the same packets in the same order, and every
    /// count is the same, after every iteration.
    #[test]
    fn the_tight_loop_queues_what_the_walk_player_by_player_does_under_every_limit() {
        let make = |exact| {
            let mut bed = Bed::new(0);
            bed.sessions = Sessions::new(6_000, 50_000).with_soft_limit(3_000);
            bed.fan.exact = exact;
            bed
        };
        let (mut walk, mut tight) = (make(true), make(false));
        // 48 players on an 8 × 6 grid, 2 tiles apart, across the corner at (112, 112).
        let at = |x, y| Location::new(x, y, 0, MapId::FELUCCA);
        let spots: Vec<Location> = (0..48u16)
            .map(|k| at(104 + 2 * (k % 8), 106 + 2 * (k / 8)))
            .collect();
        let mut conns = Vec::new();
        for (k, &spot) in spots.iter().enumerate() {
            let serial = k as u32 + 1;
            let conn = walk.join(serial, spot);
            assert_eq!(
                conn,
                tight.join(serial, spot),
                "the same slots on both beds"
            );
            conns.push(conn);
        }
        let moves = |round: usize| -> Vec<Seen> {
            (0..12)
                .map(|i| (round * 7 + i * 11) % 48)
                .map(|k| Seen::Moved(Serial(k as u32 + 1), spots[k]))
                .collect()
        };
        for round in 0..80 {
            walk.iterate(moves(round));
            tight.iterate(moves(round));
            assert_eq!(
                walk.sessions.counts(),
                tight.sessions.counts(),
                "round {round}"
            );
            for (k, &conn) in conns.iter().enumerate() {
                let (w, t) = (&walk.sessions, &tight.sessions);
                assert_eq!(
                    w.is_open(conn),
                    t.is_open(conn),
                    "round {round}, player {k}"
                );
                assert_eq!(w.pending_output(conn), t.pending_output(conn));
                if k % 3 != 0 {
                    assert_eq!(
                        walk.read(conn),
                        tight.read(conn),
                        "round {round}, player {k}"
                    );
                }
            }
        }
        assert!(
            tight.fan.tight > 1000 && walk.fan.tight == 0,
            "{}",
            tight.fan.tight
        );
        let closed = conns
            .iter()
            .filter(|&&c| !tight.sessions.is_open(c))
            .count();
        assert_eq!(closed, 16, "every player who never read went");
        let counts = tight.sessions.counts();
        assert!(
            !counts.contains("overflows 0") && !counts.contains("evictions 0"),
            "{counts}"
        );
    }

    /// The tight loop's work against [`FANOUT_PER_ITERATION`]: a crowd's group, then a
    /// group nobody sees sized so the two end 5 units past the budget, then one more change.
    /// The last waits for the next iteration, whichever way the crowd was queued: a player
    /// the tight loop queues costs a unit reached and a unit queued, as in the walk.
    #[test]
    fn the_tight_loop_counts_the_work_the_walk_player_by_player_counts() {
        let at = |x, y| Location::new(x, y, 0, MapId::FELUCCA);
        for exact in [true, false] {
            let mut bed = Bed::new(64 << 20);
            bed.fan.exact = exact;
            // 10 watchers in a sector wholly inside the crowd's area, seeing all of it.
            let watchers: Vec<ConnId> = (1..=10).map(|s| bed.join(s, at(100, 100))).collect();
            // Warm-up: one delivery the long way makes the gates live.
            bed.iterate([Seen::Moved(Serial(999), at(97, 97))]);
            for &w in &watchers {
                bed.read(w);
            }
            // The crowd: 10 moves + 10 reached + 10 queued = 30 units.
            let mut changes: Vec<Seen> = (0..10)
                .map(|k| Seen::Moved(Serial(1000 + k), at(97, 97)))
                .collect();
            // Nobody sees these: a unit each, to 5 past the budget.
            let far = FANOUT_PER_ITERATION + 5 - 30;
            changes.extend((0..far).map(|k| Seen::Moved(Serial(100_000 + k as u32), at(300, 300))));
            // A third group, which must wait.
            changes.push(Seen::Moved(Serial(900), at(97, 200)));
            bed.iterate(changes);
            assert_eq!(bed.fan.groups.len(), 3, "three groups");
            assert_eq!(bed.players.fan_out().deferred, 1, "exact {exact}");
            assert!(exact || bed.fan.tight >= 9, "tight {}", bed.fan.tight);
            for &w in &watchers {
                assert_eq!(bed.read(w).len(), 10, "exact {exact}");
            }
        }
    }

    /// A sector wholly inside a group's area holds players who see only part of it: the
    /// tight loop must stop at them (they get the moves they see, not the whole group).
    #[test]
    fn the_tight_loop_stops_at_a_player_in_a_whole_sector_who_sees_only_part_of_the_group() {
        let at = |x, y| Location::new(x, y, 0, MapId::FELUCCA);
        let mut bed = Bed::new(64 << 20);
        // Movers at x 100 and 116, one group: who sees both stands at x 98..=118; the area
        // is x 82..=134, so the sector x 96..=111 lies wholly inside it.
        let xs = [103, 104, 97, 105, 106];
        let conns: Vec<ConnId> = xs
            .iter()
            .enumerate()
            .map(|(k, &x)| bed.join(k as u32 + 1, at(x, 100)))
            .collect();
        // Warm-up: one delivery the long way makes the gates live.
        bed.iterate([Seen::Moved(Serial(999), at(101, 100))]);
        for &c in &conns {
            bed.read(c);
        }
        bed.iterate([
            Seen::Moved(Serial(1000), at(100, 100)),
            Seen::Moved(Serial(1001), at(116, 100)),
        ]);
        assert_eq!(bed.fan.groups.len(), 1, "one group");
        assert!(bed.fan.tight > 0, "the tight loop ran");
        for (k, &c) in conns.iter().enumerate() {
            let got: Vec<u32> = bed
                .read(c)
                .iter()
                .map(|(_, p)| u32::from_be_bytes(p[..4].try_into().unwrap()))
                .collect();
            // x 97 is 19 tiles from the mover at 116: out of view.
            let want: &[u32] = if xs[k] == 97 { &[1000] } else { &[1000, 1001] };
            assert_eq!(got, want, "player at x {}", xs[k]);
        }
    }

    #[test]
    fn groups_merge_only_while_they_fit_in_the_view_range() {
        let at = |x, y| Location::new(x, y, 0, MapId::FELUCCA);
        // Sectors (6, 6), (7, 6) and (8, 6): the first two 18 tiles apart, the third 19
        // further.
        let mut fan = FanOut {
            queue: vec![
                Seen::Moved(Serial(1), at(100, 100)),
                Seen::Moved(Serial(2), at(118, 100)),
                Seen::Moved(Serial(3), at(137, 100)),
                Seen::Moved(Serial(4), at(101, 101)),
            ],
            ..FanOut::default()
        };
        fan.group();
        let groups: Vec<&[usize]> = fan.groups.iter().map(|g| g.changes.as_slice()).collect();
        assert_eq!(groups, [&[0, 1, 3][..], &[2][..]]);
    }

    fn record(id: u8, len: usize) -> Vec<u8> {
        let mut r = vec![id];
        r.extend_from_slice(&(len as u16).to_be_bytes());
        r.extend(std::iter::repeat_n(id, len));
        r
    }

    #[test]
    fn an_encoding_larger_than_a_packet_is_dropped_not_a_panic() {
        assert!(fits(0x84, &[0; 100], MAX_PAYLOAD));
        assert!(fits(0x84, &vec![0; MAX_PAYLOAD], MAX_PAYLOAD));
        assert!(!fits(0x84, &vec![0; MAX_PAYLOAD + 1], MAX_PAYLOAD));
    }

    #[test]
    fn batches_are_cut_at_record_boundaries_below_the_limit() {
        let records: Vec<u8> = [record(1, 10), record(2, 20), record(3, 5)].concat();
        assert_eq!(records_within(&records, 1000), records.len());
        // The first two records (13 + 23 bytes) fit in 40; the third would not.
        assert_eq!(records_within(&records, 40), 36);
        // One record always goes, even alone over the limit.
        assert_eq!(records_within(&records, 5), 13);
    }
}
