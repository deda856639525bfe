//! What players see of the world's changes: the Deltas phase drains the world's mobile and
//! item changes and sends moves and NPC speech to the players in range, once per iteration
//! however many times a mobile changed in it.
//!
//! The engine decides *who* sees a change (the players in range, from the sector index) and
//! *when* (once per loop iteration); the game decides what it looks like on the wire: its
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
use crate::net::{ConnId, Net, Sessions, frame};
use crate::runtime::Phase;
use crate::world::{
    DELTAS_PER_ITERATION, Delta, IdMap, Location, SECTOR_SIZE, SectorId, Serial, World,
};

use super::players::Players;
use super::visibility::VIEW_RANGE;

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

/// The most deliveries (one world change reaching one player) the Deltas phase makes in one
/// iteration. Past it, the changes not yet fanned out wait for the next iteration, ahead of
/// newer ones, and are counted ([`FanOutStats::deferred`](super::FanOutStats)): a crowd
/// spreads its cost over iterations instead of stretching one.
pub const FANOUT_PER_ITERATION: usize = 200_000;

/// The most spoken lines held for one player reading too slowly; past it the oldest is
/// dropped. Speech is the lossy class of what players are sent: it never pushes a player's
/// unsent output past half its send limit, so chatter alone never disconnects anyone.
pub const HELD_CHATTER: usize = 64;

/// The Deltas slot handler with players connected: drains the world's changes like
/// [`crate::world::deltas_handler`], and sends moves and speech, encoded by `packets`, to
/// the players who can see them.
///
/// Each player gets the iteration's changes in one write (one packet of records with
/// [`DeltaPackets::batch`]): changes are grouped by the sector they happen in, each group
/// encoded once, and a player who sees all of a group gets it in one copy. A player gets
/// the changes of one group in the order they happened, moves before speech. At most
/// [`FANOUT_PER_ITERATION`] deliveries are made per iteration; the rest wait for the next.
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
    out: Batches,
    /// Speech held for players reading too slowly, oldest first: one packet (or record)
    /// each.
    held: IdMap<ConnId, VecDeque<Vec<u8>>>,
    payload: Vec<u8>,
    /// Runs so far, for [`RELEASE_EVERY`].
    runs: u32,
}

/// Held speech is looked at every this many runs of the fan-out.
const RELEASE_EVERY: u32 = 8;

/// The changes of one sector, encoded once.
#[derive(Default)]
struct Group {
    /// Indexes into the queue, in order.
    changes: Vec<usize>,
    /// Encoded moves, back to back, and each one's mover, spot and bytes.
    moves: Vec<u8>,
    movers: Vec<(Serial, Location, Range<usize>)>,
    /// `movers` indexes sorted by serial: a player finds its own move without a scan.
    by_mover: Vec<(Serial, usize)>,
    /// Encoded lines, back to back, and each one's spot and bytes.
    said: Vec<u8>,
    lines: Vec<(Location, Range<usize>)>,
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
        self.release_held(sessions);
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
        match packets.batch {
            Some(id) => self.out.send_batches(id, sessions),
            None => self.out.send_frames(sessions),
        }
    }

    /// Files the queue's changes into groups by sector, in order.
    fn group(&mut self) {
        for group in &mut self.groups {
            group.changes.clear();
        }
        self.group_of.clear();
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
            self.groups[g].changes.push(i);
        }
        self.groups.truncate(used);
    }

    /// Encodes group `g` and queues it to everyone who sees any of it; the deliveries made.
    fn fan_group(
        &mut self,
        g: usize,
        packets: &DeltaPackets,
        players: &Players,
        sessions: &mut Sessions,
    ) -> usize {
        let batch = packets.batch.is_some();
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
        let (corner_lo, corner_hi) = (
            Location::new(lo.0, lo.1, 0, map),
            Location::new(hi.0, hi.1, 0, map),
        );
        let xs = lo.0.saturating_sub(VIEW_RANGE)..=hi.0.saturating_add(VIEW_RANGE);
        let ys = lo.1.saturating_sub(VIEW_RANGE)..=hi.1.saturating_add(VIEW_RANGE);
        let chatter_limit = sessions.send_limit() / 2;
        let mut work = 0;
        for (serial, conn, at) in players.in_area(map, xs, ys) {
            work += 1;
            let whole = sees(&at, &corner_lo) && sees(&at, &corner_hi);
            let own = group
                .by_mover
                .binary_search_by_key(&serial, |&(s, _)| s)
                .ok()
                .map(|k| group.by_mover[k].1);
            let (buffer, count) = out.slot(conn);
            if whole {
                match own.map(|k| group.movers[k].2.clone()) {
                    Some(r) => {
                        buffer.extend_from_slice(&group.moves[..r.start]);
                        buffer.extend_from_slice(&group.moves[r.end..]);
                        *count += group.movers.len() as u64 - 1;
                    }
                    None => {
                        buffer.extend_from_slice(&group.moves);
                        *count += group.movers.len() as u64;
                    }
                }
            } else {
                for (k, (_, spot, r)) in group.movers.iter().enumerate() {
                    if Some(k) != own && sees(&at, spot) {
                        buffer.extend_from_slice(&group.moves[r.clone()]);
                        *count += 1;
                    }
                }
            }
            work += group.movers.len();
            if group.lines.is_empty() {
                continue;
            }
            work += group.lines.len();
            let backlog = sessions.pending_output(conn) + buffer.len();
            let ring = held.get_mut(&conn);
            let slow = ring.as_ref().is_some_and(|r| !r.is_empty())
                || backlog + group.said.len() > chatter_limit;
            if !slow && whole {
                buffer.extend_from_slice(&group.said);
                *count += group.lines.len() as u64;
                continue;
            }
            let visible = group
                .lines
                .iter()
                .filter(|(spot, _)| whole || sees(&at, spot));
            if !slow {
                for (_, r) in visible {
                    buffer.extend_from_slice(&group.said[r.clone()]);
                    *count += 1;
                }
                continue;
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
            out.held += stats.0;
            out.dropped += stats.1;
        }
        work
    }

    /// Sends held speech to players who have room for it again, oldest first; forgets
    /// players who left.
    fn release_held(&mut self, sessions: &mut Sessions) {
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
            let queued = out.index.get(&conn).map_or(0, |&i| out.buffers[i].0.len());
            let first = ring.front().map_or(0, Vec::len);
            if sessions.pending_output(conn) + queued + first > chatter_limit {
                return true; // no room yet: nothing to queue, no slot taken
            }
            let (buffer, count) = out.slot(conn);
            let mut backlog = sessions.pending_output(conn) + buffer.len();
            while let Some(line) = ring.front() {
                if backlog + line.len() > chatter_limit {
                    break;
                }
                backlog += line.len();
                buffer.extend_from_slice(line);
                *count += 1;
                ring.pop_front();
            }
            !ring.is_empty()
        });
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

/// This iteration's output for each player — whole packets, or records of a batch — in
/// the order players first got some. Buffers are kept between iterations, so a steady
/// crowd allocates nothing.
#[derive(Default)]
struct Batches {
    index: IdMap<ConnId, usize>,
    /// Players with output this iteration: `used` entries of `buffers` are theirs, with
    /// how many changes each holds.
    conns: Vec<ConnId>,
    buffers: Vec<(Vec<u8>, u64)>,
    /// Lines held and dropped since the counters were last read.
    held: u64,
    dropped: u64,
}

impl Batches {
    /// `conn`'s buffer and change count this iteration.
    fn slot(&mut self, conn: ConnId) -> (&mut Vec<u8>, &mut u64) {
        let slot = *self.index.entry(conn).or_insert_with(|| {
            self.conns.push(conn);
            if self.buffers.len() < self.conns.len() {
                self.buffers.push((Vec::new(), 0));
            }
            self.conns.len() - 1
        });
        let (buffer, count) = &mut self.buffers[slot];
        (buffer, count)
    }

    /// Queues each player's packets in one write, and empties the batches.
    fn send_frames(&mut self, sessions: &mut Sessions) {
        for (conn, (buffer, count)) in self.conns.drain(..).zip(&mut self.buffers) {
            if !buffer.is_empty() {
                sessions.send_frames(conn, buffer, *count);
            }
            buffer.clear();
            *count = 0;
        }
        self.index.clear();
    }

    /// Queues each player's records as packets `id`, cut at record boundaries below the
    /// packet limit, and empties the batches.
    fn send_batches(&mut self, id: u8, sessions: &mut Sessions) {
        for (conn, (buffer, count)) in self.conns.drain(..).zip(&mut self.buffers) {
            let mut rest = buffer.as_slice();
            while !rest.is_empty() {
                let cut = records_within(rest, MAX_PAYLOAD);
                if cut == 0 {
                    break; // unreachable: whole records only
                }
                let (packet, tail) = rest.split_at(cut);
                sessions.send_packet(conn, id, &[packet]);
                rest = tail;
            }
            buffer.clear();
            *count = 0;
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
        // 100 watchers see three sectors' worth of movers (x 96.., 112.., 128..).
        let watchers: Vec<ConnId> = (1..=100).map(|s| bed.join(s, spot(112))).collect();
        let per_group = FANOUT_PER_ITERATION / 100 + 1;
        let moves: Vec<Seen> = (0..3 * per_group)
            .map(|k| {
                let group = (k % 3) as u16;
                Seen::Moved(Serial(1000 + k as u32), spot(96 + 16 * group + 1))
            })
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
