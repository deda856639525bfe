//! The game world: entities (items, mobiles, spawners) with serials and locations, the mobile
//! and item delta queues drained in the Deltas phase, sectors and player presence, a seeded
//! generator for the demo world, and the demo game logic (decay, spawners, barks).
//!
//! How the shard wires it (all on the loop thread):
//!
//! ```no_run
//! use std::{cell::RefCell, rc::Rc};
//! use shardloop::{EventLoop, runtime::Slot, world};
//!
//! # async fn shard() {
//! let world = Rc::new(RefCell::new(world::generate_default(world::DEFAULT_SEED)));
//! let mut event_loop = EventLoop::builder()
//!     .slot(Slot::Deltas, world::deltas_handler(world.clone()))
//!     .build();
//! let _logic = world::start_game_logic(world.clone());
//! event_loop.run().await;
//! # }
//! ```
//!
//! The world knows nothing about sockets or persistence formats: networking drains its
//! deltas (`World::drain_deltas_with`) and reports player presence (`activate_around`),
//! saves read and restore its plain-data entities (`restore_item`, `restore_mobile`,
//! `add_spawner`). See `docs/world.md`.

mod activity;
mod bark;
mod changes;
pub mod content;
mod delta;
mod entity;
mod game;
mod generate;
mod guard;
mod location;
mod model;
pub mod rng;
mod sector;
mod serial;
mod spawner;

use std::cell::RefCell;
use std::rc::Rc;

pub use bark::bark;
pub use changes::{DELTAS_PER_ITERATION, MobileChange};
pub use delta::{Delta, DeltaStats};
pub use entity::{Item, Mobile, SpawnKind, Spawner, layer};
pub use game::{
    DECAY_MAX, DECAY_MIN, GameLogic, IdleLoad, LogicStats, decay_delay, idle_load, spawner_phase,
    start_game_logic,
};
pub use generate::{
    DEFAULT_ITEMS, DEFAULT_MOBILES, DEFAULT_SEED, SPAWNER_MINUTES, generate, generate_default,
};
pub use guard::{ItemMut, MobileMut};
pub use location::{Location, MapId};
pub use model::{Activity, ActivityHook, World, WorldError};
pub use sector::{ACTIVE_RANGE, SECTOR_SIZE, SectorId};
pub use serial::{IdHasher, IdMap, Serial, SerialAllocator};
pub use spawner::{TopUp, top_up};

/// The Deltas slot handler: drains up to [`DELTAS_PER_ITERATION`] mobile and item changes per
/// iteration and says whether any are left (so the loop does not park with work pending).
pub fn deltas_handler(world: Rc<RefCell<World>>) -> impl FnMut() -> bool + 'static {
    move || world.borrow_mut().drain_deltas(DELTAS_PER_ITERATION)
}
