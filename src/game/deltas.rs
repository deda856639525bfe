//! What players see of the world's changes: the Deltas phase drains the world's mobile and
//! item changes and sends moves and NPC speech to the players in range, once per iteration
//! however many times a mobile changed in it.
//!
//! The engine decides *who* sees a change (the players in range, from the sector index) and
//! *when* (once per loop iteration); the game decides what it looks like on the wire: its
//! [`DeltaPackets`], registered with `Game::deltas`. A shard whose games register none sends
//! nothing for world changes.
//!
//! Owns the Deltas slot handler and the wiring of the loop's slots. Must never do I/O (it
//! queues packets on the sessions; the Flush phase writes them).

use std::cell::RefCell;
use std::rc::Rc;

use crate::EventLoopBuilder;
use crate::net::{Net, Sessions};
use crate::runtime::Slot;
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
        .slot(Slot::Network, net.network_slot())
        .slot(
            Slot::Deltas,
            deltas_handler(world, players, net.clone(), packets),
        )
        .slot(Slot::Flush, net.flush_slot())
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
                for seen in outgoing.drain(..) {
                    payload.clear();
                    seen.send(&packets, &mut payload, &players, sessions);
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
        sessions: &mut Sessions,
    ) {
        match self {
            Seen::Moved(serial, at) => {
                let Some((id, encode)) = packets.moved else {
                    return;
                };
                encode(*serial, *at, payload);
                for (player, conn) in players.in_range(*at) {
                    if player != *serial {
                        sessions.send_packet(conn, id, &[payload]);
                    }
                }
            }
            Seen::Said(serial, at, line) => {
                let Some((id, encode)) = packets.said else {
                    return;
                };
                encode(*serial, line, payload);
                for (_, conn) in players.in_range(*at) {
                    sessions.send_packet(conn, id, &[payload]);
                }
            }
        }
    }
}
