//! The world model: entities (items, mobiles, spawners) with serials and locations, the mobile
//! and item delta queues drained in the Deltas phase, sectors and player presence, and a
//! seeded generator of a populated world ([`generate`]: towns, creatures, spawners — the
//! demo's starting world, and the test and bench fixture of every size). Behaviour on the
//! loop (decay, spawners' cadence, barks, packet handlers) is a game's, through
//! [`crate::game`].
//!
//! The model is plain data and plain methods: it never starts a timer or a task and never
//! reads the clock (it imports neither `timer` nor `runtime`), so a test can build, change
//! and inspect a world without a loop. How a loop drains its deltas:
//!
//! ```no_run
//! use std::{cell::RefCell, rc::Rc};
//! use shardloop::{EventLoop, runtime::Phase, timer, world};
//!
//! # async fn shard() {
//! let world = Rc::new(RefCell::new(world::generate_default(world::DEFAULT_SEED)));
//! let mut event_loop = EventLoop::builder()
//!     .slot(Phase::Deltas, world::deltas_handler(world.clone()))
//!     .build();
//! let w = world.clone();
//! let _census = timer::every(std::time::Duration::from_secs(60))
//!     .start(move || println!("{} mobiles", w.borrow().mobile_count()));
//! event_loop.run().await;
//! # }
//! ```
//!
//! The world knows nothing about sockets or persistence formats: networking drains its
//! deltas (`World::drain_deltas_with`) and reports player presence (`activate_around`),
//! saves freeze its plain-data entities (`World::freeze`: shared pages, copied on write, so
//! the loop does not copy the world) and restore them (`restore_item`, `restore_mobile`,
//! `add_spawner`). See `docs/world.md`.

mod activity;
mod audit;
mod changes;
pub(crate) mod content;
mod delta;
mod entity;
mod frozen;
mod generate;
mod guard;
pub mod limits;
mod location;
mod model;
mod pages;
pub mod rng;
mod sector;
mod serial;
mod spawner;

use std::cell::RefCell;
use std::rc::Rc;

pub use changes::{DELTAS_PER_ITERATION, MobileChange};
pub use delta::{Delta, DeltaStats};
pub use entity::{Item, Mobile, SpawnKind, Spawner, layer};
pub use frozen::Frozen;
pub use generate::{
    DEFAULT_ITEMS, DEFAULT_MOBILES, DEFAULT_SEED, SPAWNER_MINUTES, generate, generate_default,
};
pub use guard::{ItemMut, MobileMut};
pub use limits::{Breach, EntityKind};
pub use location::{Location, MapId};
pub use model::{Activity, World, WorldError};
pub use sector::{ACTIVE_RANGE, SECTOR_SIZE, SectorId};
pub(crate) use serial::IdMap;
pub use serial::{IdHasher, Serial, SerialAllocator};
pub use spawner::{TopUp, top_up};

/// The Deltas slot handler: drains up to [`DELTAS_PER_ITERATION`] mobile and item changes per
/// iteration and says whether any are left (so the loop does not park with work pending).
pub fn deltas_handler(world: Rc<RefCell<World>>) -> impl FnMut() -> bool + 'static {
    move || world.borrow_mut().drain_deltas(DELTAS_PER_ITERATION)
}
