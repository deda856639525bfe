//! The game API: what a game plugs into a shard and what it gets back. A game is a [`Game`]
//! — its packets and flood limits, its login (through [`Packet::log_in`]), its disconnect
//! hooks, how world changes look on its wire ([`DeltaPackets`]), its per-NPC behaviours,
//! world-level timers and tasks started with the shard, its console commands and the world
//! it starts with — registered on the shard builder (`shardloop::shard::Shard::builder()`),
//! checked when it is built, started when it runs. `docs/game-logic.md` is the guide.
//!
//! Layering: this module uses the world model ([`crate::world`]: entities, serials, sectors,
//! deltas), the network ([`crate::net`]: connections, framing) and the runtime (timers,
//! tasks); none of them knows a game. It keeps what every game shares — the player table,
//! the sector index of players, the Deltas phase's *who* and *when* — and must never name a
//! game's packet, id, rate or content: the demo game is a client of this API like any other
//! (it lives outside the library, in `src/demo/`). Everything here runs on the loop thread
//! and must never block or do I/O: handlers queue packets, behaviours start timers and tasks.

mod behaviours;
mod context;
mod deltas;
mod dispatch;
mod install;
mod npc;
mod players;
mod registry;
mod visibility;

pub use behaviours::{BehaviourStats, Behaviours};
pub use context::GameContext;
pub use deltas::{
    DeltaPackets, EncodeMoved, EncodeSaid, FANOUT_PER_ITERATION, HELD_CHATTER, SYSTEM,
    deltas_handler, wire,
};
pub use dispatch::{Packet, PacketHandler, text};
pub use install::install;
pub use npc::Npc;
pub use players::{FanOutStats, Players};
pub(crate) use registry::CommandSpec;
pub use registry::{BuildError, Game, Games, Registered};
pub use visibility::VIEW_RANGE;

// What the test kit's handler harness takes from a game, and the disconnect sequence it runs
// as the shard does.
#[cfg(any(test, doc, feature = "testkit"))]
pub(crate) use {
    install::disconnected,
    registry::{DisconnectFn, PacketFn, Site},
};
