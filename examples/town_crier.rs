//! A custom shard on shardloop: the demo game, plus a town crier and an emote — a game that
//! builds on another game (the demo, included from `src/demo/` as the binary includes it).
//!
//! - The **town crier** is an NPC who stands in Britain and cries the news every 5 to 8
//!   seconds — only while players are near (a per-NPC behaviour: it starts when the crier's
//!   sector wakes and stops when it sleeps).
//! - The **emote** packet lets a player act something out (`*waves*`); every player in range
//!   sees it.
//! - The `cry <text>` console command has the crier cry `text` at once.
//!
//! Run it with `cargo run --release --example town_crier` (the same flags and
//! `config/shard.toml` as the shard binary). Its tests are `tests/town_crier.rs`; the guide
//! that walks through it is `docs/game-logic.md`. Everything here is shardloop's public API
//! and the demo's.

use std::process::ExitCode;

use shardloop::game::{Game, GameContext, Npc, Packet, text};
use shardloop::net::{Access, BadPacket, Rate};
use shardloop::shard::Shard;
use shardloop::timer;
use shardloop::world::{Location, Mobile, Serial, World};

/// The demo game, which the crier joins.
#[path = "../src/demo/mod.rs"]
pub mod demo;
use demo::packets::START;

/// The crier's name: how the game finds its crier in a loaded world.
pub const CRIER_NAME: &str = "Town Crier";
/// Where the crier stands: the middle of Britain, where new players arrive.
pub const CRIER_AT: Location = START;
/// What the crier cries.
pub const CRIES: &[&str] = &[
    "Hear ye, hear ye! The bank of Britain is open!",
    "Brigands seen on the road to Minoc!",
    "The healer's shop pays well for fresh ginseng!",
    "A fair in the town square at dusk!",
];

/// Emote, client → server: what the player does, UTF-8, 1 to [`MAX_EMOTE`] bytes.
pub const EMOTE: u8 = 0x10;
/// Emote seen, server → client: `[serial u32][UTF-8 text]`, to every player in range.
pub const EMOTE_SEEN: u8 = 0x90;
/// The longest emote, bytes.
pub const MAX_EMOTE: usize = 80;

/// The town crier's game: its NPC, its behaviour, the emote packet and the `cry` command.
pub fn town_crier() -> Game {
    Game::new("town crier")
        .setup_world(place_crier)
        .npc_behaviour("crier", is_crier, cry)
        .packet(EMOTE, "emote", Access::LoggedIn, emote)
        .rate_limit(
            EMOTE,
            Rate {
                per_sec: 2,
                burst: 4,
            },
        )
        .command("cry", "<text>", "the town crier cries TEXT now", cry_now)
}

fn main() -> ExitCode {
    Shard::builder()
        .section::<demo::DemoConfig>()
        .game(demo::demo_game)
        .game(|_| town_crier())
        .main()
}

/// Puts the crier in the world, unless the world (a save) has one already.
pub fn place_crier(world: &mut World) {
    if find_crier(world).is_some() {
        return;
    }
    let serial = world.new_mobile_serial();
    let mut crier = Mobile::new(serial, CRIER_NAME, 0x190);
    crier.is_npc = true;
    crier.location = CRIER_AT;
    world
        .add_mobile(crier)
        .expect("the crier's spot is on the map");
}

pub fn find_crier(world: &World) -> Option<Serial> {
    world.mobiles().find(|m| is_crier(m)).map(|m| m.serial)
}

fn is_crier(mobile: &Mobile) -> bool {
    mobile.is_npc && &*mobile.name == CRIER_NAME
}

/// The crier's behaviour, while players are near: a cry every 5 to 8 seconds.
async fn cry(mut npc: Npc) {
    loop {
        timer::pause(npc.rng.range(5000..8000)).await;
        let news = *npc.rng.pick(CRIES);
        if !npc.say(news) {
            return; // the crier is gone
        }
    }
}

/// An emote: every player in range (the sender too) sees it.
fn emote(p: &mut Packet<'_>, payload: &[u8]) -> Result<(), BadPacket> {
    let action = text(payload, MAX_EMOTE, "emote")?;
    let (serial, at) = p.player()?;
    p.broadcast_in_range(
        at,
        EMOTE_SEEN,
        &[&serial.0.to_be_bytes(), action.as_bytes()],
    );
    Ok(())
}

/// `cry <text>`: the crier cries it now.
fn cry_now(game: &GameContext, words: &[&str]) -> Result<String, String> {
    if words.is_empty() {
        return Err("what should the crier cry? e.g. `cry The king is coming!`".into());
    }
    let mut world = game.world().borrow_mut();
    let crier = find_crier(&world).ok_or("there is no town crier in this world")?;
    world.say(crier, &words.join(" "));
    Ok(format!("the town crier ({crier}) cries it"))
}
