//! The demo game: behaviour that runs on the loop. World behaviour — decay, spawners, NPC
//! barks — on timers and tasks, and the packet handlers that let players into the world.
//!
//! Layering: the game uses the world model ([`crate::world`]: entities, serials, sectors,
//! deltas), the network ([`crate::net`]: connections, framing) and the runtime (timers,
//! tasks); none of them knows the game. Everything here runs on the loop thread and must
//! never block or do I/O: handlers queue packets, behaviours start timers and tasks.
//!
//! A game is a [`Game`]: packets, per-NPC behaviours, world-level timers and tasks started
//! with the shard, console commands — registered on the shard builder
//! (`shardloop::shard::Shard::builder()`), checked when it is built, started when it runs.
//! The demo game is one ([`demo`]); `docs/game-logic.md` is the guide to writing another.

mod barks;
mod behaviours;
mod context;
mod decay;
mod deltas;
mod demo;
mod dispatch;
mod logic;
mod npc;
pub mod packets;
mod players;
mod registry;
mod spawners;
mod visibility;

pub use barks::{bark, barks};
pub use behaviours::{BehaviourStats, Behaviours};
pub use context::GameContext;
pub use decay::{DECAY_MAX, DECAY_MIN, decay_delay};
pub use deltas::{DeltaPackets, EncodeMoved, EncodeSaid, deltas_handler, wire};
pub use demo::{demo, npc_behaviours};
pub use dispatch::{Packet, PacketHandler, Shared, install, install_demo_packets, register, text};
pub use logic::{
    GameLogic, IdleLoad, LogicStats, WorldTimers, idle_load, start_game_logic, start_world_timers,
};
pub use npc::Npc;
pub use packets::PACKETS;
pub use players::{
    MAX_NAME, MAX_SPEECH, Players, Rates, START, START_SPREAD, SYSTEM, VIEW_RANGE, broadcast,
    start_location,
};
pub(crate) use registry::CommandSpec;
pub use registry::{BuildError, CommandFn, DisconnectFn, Game, Games, PacketFn, Registered, Site};
pub use spawners::spawner_phase;
