//! The demo game: a small UO-like world — players log in by name, walk and talk; ground items
//! decay, spawners top up their creatures, NPCs near players bark — built on shardloop's
//! public API exactly as a third-party game is. Its protocol and login ([`packets`]), how
//! its world changes go on the wire ([`packets::DELTAS`]), its flood limits and its `[demo]`
//! configuration section ([`DemoConfig`]), its world timers ([`logic`]: decay and spawners)
//! and its per-NPC behaviour ([`barks`]) are all here; the engine knows none of them.
//!
//! **How the rule is kept.** This module is never part of the library: the `shardloop`
//! binary declares it (`src/main.rs`), and the tests, benches and examples that drive the
//! demo include the same files with `#[path = "../src/demo/mod.rs"] mod demo;`. Compiled
//! outside the library, it can reach only what the library makes `pub` — the API any game
//! has — and the library cannot name it at all. Inside, files refer to each other with
//! `super::` (never `crate::`), so the module compiles wherever it is included.
//!
//! Must never need a private engine item: what it lacks, the engine offers to every game.

// Each crate that includes the demo uses a different part of it.
#![allow(dead_code, unused_imports)]

pub mod barks;
mod config;
pub mod decay;
pub mod logic;
pub mod packets;
pub mod spawners;
mod state;
// Its test helpers stand on `shardloop::testkit`, which only test builds have: the `testkit`
// feature is on when cargo builds this package's tests, benches and examples (and the binary
// for them), off in `cargo build` and `cargo run`.
#[cfg(feature = "testkit")]
pub mod testing;

use std::cell::RefCell;
use std::rc::Rc;

use shardloop::config::Config;
use shardloop::game::{self, Game, Games, Players};
use shardloop::net::Net;
use shardloop::shard::Shard;
use shardloop::world::{self, World};

pub use barks::npc_behaviours;
pub use config::{DemoConfig, Rates};
pub use decay::{DECAY_MAX, DECAY_MIN, DECAY_TOLERANCE, decay_delay};
pub use logic::{GameLogic, IdleLoad, LogicStats, WorldTimers, idle_load, start_game_logic};
pub use spawners::{SPAWNER_TOLERANCE, spawner_phase};

/// The demo game as the shard serves it: its `[demo]` section read from `config`, its world
/// generated from `[world.generate]` when there is no save.
pub fn demo_game(config: &Config) -> Game {
    let generate = config.world.generate;
    demo(config.section::<DemoConfig>().rates())
        .world_generator(move || generate_world(generate.seed, generate.items, generate.mobiles))
}

/// The demo shard of `config`, as `shardloop run` serves it: [`demo_game`] on the builder,
/// with its `[demo]` section declared.
///
/// # Panics
/// Never for the demo alone: its registrations do not clash.
pub fn shard(config: &Config) -> Shard {
    Shard::builder()
        .section::<DemoConfig>()
        .game(demo_game)
        .build(config)
        .expect("the demo game registers each packet and command once")
}

/// The demo game with the flood limits of `rates`: its packets, its deltas, its world
/// timers (started with the shard, stopped with it) and the NPC barks. No world generator:
/// the shard starts from its save, or an empty world ([`demo_game`] adds the generator).
pub fn demo(rates: Rates) -> Game {
    let mut game = Game::new("demo").deltas(packets::DELTAS);
    for &(id, name, access, handler) in packets::PACKETS {
        game = game.packet(id, name, access, handler);
    }
    let limits = [
        (packets::client::MOVE, rates.moves),
        (packets::client::SAY, rates.speech),
    ];
    for (id, rate) in limits {
        if let Some(rate) = rate {
            game = game.rate_limit(id, rate);
        }
    }
    let game = game.on_start(|ctx| {
        let timers = logic::start_world_timers(ctx.world().clone());
        ctx.on_stop(move || timers.stop());
    });
    npc_behaviours(game)
}

/// The demo's world: `items` and `mobiles` from seed `seed` (the engine's seeded generator),
/// logged with the idle timer load its spawners and decaying items will make.
pub fn generate_world(seed: u64, items: u32, mobiles: u32) -> World {
    let began = std::time::Instant::now();
    let world = world::generate(seed, items, mobiles);
    let load = idle_load(&world);
    tracing::info!(
        items = world.item_count(),
        mobiles = world.mobile_count(),
        spawners = world.spawner_count(),
        seed,
        took = ?began.elapsed(),
        "no save to load: generated the world; idle timer load {:.1} fires/s from spawners, \
         up to {:.1} fires/s while the first hour's items decay",
        load.spawner_fires_per_sec,
        load.peak_fires_per_sec(),
    );
    world
}

/// Installs the demo's packets, flood limits (`rates`) and the engine's disconnect cleanup on
/// `net` alone — no world timers, no behaviours — for tests and benches that drive the
/// protocol on a bare loop; the player table the handlers keep.
pub fn install_packets(net: &Net, world: Rc<RefCell<World>>, rates: Rates) -> Rc<RefCell<Players>> {
    let mut games =
        Games::check(vec![demo(rates)], &[]).expect("the demo game registers each packet once");
    game::install(net, world, &mut games)
}
