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
use std::collections::HashMap;
use std::rc::Rc;

use crate::EventLoopBuilder;
use crate::net::{ConnId, Net, Sessions, frame};
use crate::runtime::Phase;
use crate::world::{DELTAS_PER_ITERATION, Delta, Location, Serial, World};

use super::players::Players;

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

/// The Deltas slot handler with players connected: drains the world's changes like
/// [`crate::world::deltas_handler`], and sends moves and speech, encoded by `packets`, to
/// the players who can see them.
pub fn deltas_handler(
    world: Rc<RefCell<World>>,
    players: Rc<RefCell<Players>>,
    net: Net,
    packets: DeltaPackets,
) -> impl FnMut() -> bool + 'static {
    let mut outgoing: Vec<Seen> = Vec::new();
    let mut payload: Vec<u8> = Vec::new();
    let mut batches = Batches::default();
    move || {
        let pending = world.borrow_mut().drain_changes(
            DELTAS_PER_ITERATION,
            |change| {
                let Some(at) = change.location else { return };
                if packets.moved.is_some() && change.delta.contains(Delta::MOVED) {
                    outgoing.push(Seen::Moved(change.serial, at));
                }
                if let Some(line) = change.said.filter(|_| packets.said.is_some()) {
                    outgoing.push(Seen::Said(change.serial, at, line.to_owned()));
                }
            },
            |_, _| {},
        );
        if !outgoing.is_empty() {
            let players = players.borrow();
            net.with_sessions(|sessions| {
                let mut out = match packets.batch {
                    Some(_) => Out::Batch(&mut batches),
                    None => Out::Direct(sessions),
                };
                for seen in outgoing.drain(..) {
                    payload.clear();
                    seen.send(&packets, &mut payload, &players, &mut out);
                }
                if let Some(id) = packets.batch {
                    batches.send(id, sessions);
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
    /// Encodes the change once into `payload` and queues it to everyone who sees it.
    fn send(
        &self,
        packets: &DeltaPackets,
        payload: &mut Vec<u8>,
        players: &Players,
        out: &mut Out<'_>,
    ) {
        match self {
            Seen::Moved(serial, at) => {
                let Some((id, encode)) = packets.moved else {
                    return;
                };
                encode(*serial, *at, payload);
                if !fits(id, payload, out.limit()) {
                    return;
                }
                for (player, conn) in players.in_range(*at) {
                    if player != *serial {
                        out.send(conn, id, payload);
                    }
                }
            }
            Seen::Said(serial, at, line) => {
                let Some((id, encode)) = packets.said else {
                    return;
                };
                encode(*serial, line, payload);
                if !fits(id, payload, out.limit()) {
                    return;
                }
                for (_, conn) in players.in_range(*at) {
                    out.send(conn, id, payload);
                }
            }
        }
    }
}

/// Where an encoded change goes: straight onto the connection, or into its batch.
enum Out<'a> {
    Direct(&'a mut Sessions),
    Batch(&'a mut Batches),
}

impl Out<'_> {
    /// The largest payload one change may have here: a packet's, or a packet's less a
    /// record header in a batch.
    fn limit(&self) -> usize {
        match self {
            Out::Direct(_) => MAX_PAYLOAD,
            Out::Batch(_) => MAX_PAYLOAD - RECORD_HEADER,
        }
    }

    fn send(&mut self, conn: ConnId, id: u8, payload: &[u8]) {
        match self {
            Out::Direct(sessions) => {
                sessions.send_packet(conn, id, &[payload]);
            }
            Out::Batch(batches) => batches.add(conn, id, payload),
        }
    }
}

/// This iteration's records for each player, in the order players first got one (the order
/// changes and range queries run in: the same on every run). Buffers are kept between
/// iterations, so a steady crowd allocates nothing.
#[derive(Default)]
struct Batches {
    index: HashMap<ConnId, usize>,
    /// Players with records this iteration: `used` entries of `buffers` are theirs.
    conns: Vec<ConnId>,
    buffers: Vec<Vec<u8>>,
}

impl Batches {
    fn add(&mut self, conn: ConnId, id: u8, payload: &[u8]) {
        let Ok(len) = u16::try_from(payload.len()) else {
            return; // unreachable: a change's payload fits a packet of its own
        };
        let slot = *self.index.entry(conn).or_insert_with(|| {
            self.conns.push(conn);
            if self.buffers.len() < self.conns.len() {
                self.buffers.push(Vec::new());
            }
            self.conns.len() - 1
        });
        let buffer = &mut self.buffers[slot];
        buffer.push(id);
        buffer.extend_from_slice(&len.to_be_bytes());
        buffer.extend_from_slice(payload);
    }

    /// Queues each player's records as packets `id`, cut at record boundaries below the
    /// packet limit, and empties the batches.
    fn send(&mut self, id: u8, sessions: &mut Sessions) {
        for (conn, buffer) in self.conns.drain(..).zip(&mut self.buffers) {
            let mut rest = buffer.as_slice();
            while !rest.is_empty() {
                let cut = records_within(rest, MAX_PAYLOAD);
                if cut == 0 {
                    break; // unreachable: `add` writes whole records only
                }
                let (packet, tail) = rest.split_at(cut);
                sessions.send_packet(conn, id, &[packet]);
                rest = tail;
            }
            buffer.clear();
        }
        self.index.clear();
    }
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
    use super::*;

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
