//! What players see of the world's changes: the Deltas phase drains the world's mobile and
//! item changes and sends moves and NPC speech to the players in range, once per iteration
//! however many times a mobile changed in it.
//!
//! Owns the Deltas slot handler and the wiring of the loop's slots. Must never do I/O (it
//! queues packets on the sessions; the Flush phase writes them).

use std::cell::RefCell;
use std::rc::Rc;

use crate::EventLoopBuilder;
use crate::net::{Net, Sessions};
use crate::runtime::Slot;
use crate::world::{DELTAS_PER_ITERATION, Delta, Location, Serial, World};

use super::packets::{serial_xy, server};
use super::players::Players;

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
