//! The demo game: behaviour that runs on the loop. World behaviour — decay, spawners, NPC
//! barks — on timers and tasks, and the packet handlers that let players into the world.
//!
//! Layering: the game uses the world model ([`crate::world`]: entities, serials, sectors,
//! deltas), the network ([`crate::net`]: connections, framing) and the runtime (timers,
//! tasks); none of them knows the game. Everything here runs on the loop thread and must
//! never block or do I/O: handlers queue packets, behaviours start timers and tasks.
//!
//! How to add to it (see `docs/architecture.md`):
//! - a packet: [`packets`] alone — an id, one entry in [`PACKETS`], one
//!   `fn(&mut Packet, &[u8])`;
//! - a timer-driven behaviour: a file like [`decay`](self::decay_delay) or the barks, keeping
//!   its timers or tasks in a [`crate::runtime::Keyed`] so that stopping the game stops them all.

mod barks;
mod decay;
mod deltas;
mod dispatch;
mod logic;
pub mod packets;
mod players;
mod spawners;
mod visibility;

pub use barks::bark;
pub use decay::{DECAY_MAX, DECAY_MIN, decay_delay};
pub use deltas::{deltas_handler, wire};
pub use dispatch::{Packet, PacketHandler, Shared, install, register};
pub use logic::{GameLogic, IdleLoad, LogicStats, idle_load, start_game_logic};
pub use packets::PACKETS;
pub use players::{
    MAX_NAME, MAX_SPEECH, Players, Rates, START, START_SPREAD, SYSTEM, VIEW_RANGE, broadcast,
    start_location,
};
pub use spawners::spawner_phase;
