//! Lantern Square: a small game of its own on shardloop, sharing nothing with the demo. It is
//! the proof that a game needs only the public API: its own login (a token from its own
//! `[lantern]` configuration section), its own step and position packets, its own packets for
//! world changes, its own world (a square ringed with lamps), and one NPC — the lamplighter,
//! who lights the next lamp every three seconds while players are near.
//!
//! Run it with `cargo run --release --example lantern` (the same flags and subcommands as
//! `shardloop`: `check-config` shows `[lantern]`; `SHARD_LANTERN__TOKEN=...` sets the token).
//! Its tests are `tests/lantern.rs`; `docs/game-logic.md` walks through it.
//!
//! The protocol (the engine's framing: `[id u8][length u16, big-endian][payload]`):
//!
//! | id | way | payload |
//! |---|---|---|
//! | `0x20` LOGIN | client → server | `[token length u8][token][name, UTF-8]` |
//! | `0x21` STEP | client → server | `[direction u8]`: 0 north, 1 east, 2 south, 3 west |
//! | `0xA0` WELCOME | server → client | `[serial u32][x u16][y u16]` |
//! | `0xA1` POSITION | server → client | `[x u16][y u16]`, after each step |
//! | `0xA3` REFUSED | server → client | why, UTF-8; then the connection closes |
//! | `0xA4` MOVED | server → client | `[serial u32][x u16][y u16]`: someone in sight moved |
//! | `0xA5` SAID | server → client | `[serial u32][text]`: someone in sight spoke |

use std::process::ExitCode;

use serde::{Deserialize, Serialize};
use shardloop::config::Section;
use shardloop::game::{DeltaPackets, Game, GameContext, Npc, Packet, text};
use shardloop::net::{Access, BadPacket};
use shardloop::shard::Shard;
use shardloop::timer;
use shardloop::world::{Item, Location, MapId, Mobile, Serial, World};

pub const LOGIN: u8 = 0x20;
pub const STEP: u8 = 0x21;
pub const WELCOME: u8 = 0xA0;
pub const POSITION: u8 = 0xA1;
pub const REFUSED: u8 = 0xA3;
pub const MOVED: u8 = 0xA4;
pub const SAID: u8 = 0xA5;

/// The middle of the square: where players arrive and the lamplighter starts.
pub const SQUARE: Location = Location::new(500, 500, 0, MapId::FELUCCA);
/// A lamp's graphic, and its hue unlit and lit.
pub const LAMP: u16 = 0x0B21;
pub const UNLIT: u16 = 0;
pub const LIT: u16 = 0x0501;
/// The lamplighter's name: how its behaviour finds it.
pub const LAMPLIGHTER: &str = "Lamplighter";
/// The longest player name, bytes.
pub const MAX_NAME: usize = 16;

/// `[lantern]` in `config/shard.toml`, `SHARD_LANTERN__TOKEN` and the like in the environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LanternConfig {
    /// What a client must send to log in.
    pub token: String,
    /// Lamps around the square (in a world generated from now on; a save keeps its own).
    pub lamps: u16,
}

impl Default for LanternConfig {
    fn default() -> LanternConfig {
        LanternConfig {
            token: "lantern".to_owned(),
            lamps: 8,
        }
    }
}

impl Section for LanternConfig {
    const NAME: &'static str = "lantern";

    fn check(&self) -> Result<(), (&'static str, String)> {
        if !(1..=64).contains(&self.token.len()) {
            return Err(("token", "must be 1 to 64 bytes".to_owned()));
        }
        if !(1..=360).contains(&self.lamps) {
            return Err(("lamps", "must be between 1 and 360".to_owned()));
        }
        Ok(())
    }
}

/// How moves and speech look on this game's wire.
pub const DELTAS: DeltaPackets = DeltaPackets {
    moved: Some((MOVED, |serial, at, out| {
        out.extend_from_slice(&serial_xy(serial, at));
    })),
    said: Some((SAID, |serial, line, out| {
        out.extend_from_slice(&serial.0.to_be_bytes());
        out.extend_from_slice(line.as_bytes());
    })),
    batch: None,
};

/// The whole game, with the settings of its `[lantern]` section.
pub fn lantern(config: LanternConfig) -> Game {
    let LanternConfig { token, lamps } = config;
    Game::new("lantern")
        .world_generator(move || square(lamps))
        .packet(LOGIN, "login", Access::Always, move |p, payload| {
            login(p, payload, &token)
        })
        .packet(STEP, "step", Access::LoggedIn, step)
        .deltas(DELTAS)
        .npc_behaviour("lamplighter", is_lamplighter, lamplighter)
        .command("lamps", "", "how many lamps are lit", lamps_lit)
}

fn main() -> ExitCode {
    Shard::builder()
        .section::<LanternConfig>()
        .game(|config| lantern(config.section::<LanternConfig>()))
        .main()
}

/// The square: `lamps` unlit lamps on a ring of radius 6 around [`SQUARE`], the lamplighter in
/// the middle.
pub fn square(lamps: u16) -> World {
    let mut world = World::new(1);
    for i in 0..lamps {
        let angle = f64::from(i) * std::f64::consts::TAU / f64::from(lamps);
        let (dx, dy) = ((6.0 * angle.cos()) as i32, (6.0 * angle.sin()) as i32);
        let mut lamp = Item::new(world.new_item_serial(), LAMP);
        lamp.location = SQUARE.offset_clamped(dx, dy);
        lamp.movable = false;
        lamp.hue = UNLIT;
        world.add_item(lamp).expect("a fresh serial on the map");
    }
    let mut npc = Mobile::new(world.new_mobile_serial(), LAMPLIGHTER, 0x190);
    npc.is_npc = true;
    npc.location = SQUARE;
    world.add_mobile(npc).expect("a fresh serial on the map");
    world
}

fn login(p: &mut Packet<'_>, payload: &[u8], token: &str) -> Result<(), BadPacket> {
    let (&len, rest) = payload
        .split_first()
        .ok_or_else(|| BadPacket::new("an empty login"))?;
    let (given, name) = rest.split_at(usize::from(len).min(rest.len()));
    if given != token.as_bytes() {
        p.refuse("wrong token", REFUSED, &[b"wrong token"]);
        return Ok(());
    }
    let name = text(name, MAX_NAME, "name")?;
    let mut mobile = Mobile::new(p.world.new_mobile_serial(), name, 0x190);
    mobile.location = SQUARE;
    let serial = p.log_in(mobile)?;
    p.answer(WELCOME, &[&serial_xy(serial, SQUARE)]);
    Ok(())
}

fn step(p: &mut Packet<'_>, payload: &[u8]) -> Result<(), BadPacket> {
    let (dx, dy) = match payload {
        [0] => (0, -1),
        [1] => (1, 0),
        [2] => (0, 1),
        [3] => (-1, 0),
        _ => return Err(BadPacket::new("a step is one byte, 0 to 3")),
    };
    let (_, at) = p.player()?;
    let to = at.offset_clamped(dx, dy);
    p.move_player(to)?;
    p.answer(POSITION, &[&to.x.to_be_bytes(), &to.y.to_be_bytes()]);
    Ok(())
}

fn is_lamplighter(mobile: &Mobile) -> bool {
    mobile.is_npc && &*mobile.name == LAMPLIGHTER
}

/// Every three seconds, lights the next unlit lamp and says so; done when all are lit.
pub async fn lamplighter(npc: Npc) {
    loop {
        timer::pause(3000).await;
        let lit = light_next(&mut npc.world().borrow_mut());
        let line = match lit {
            Some(n) => format!("Lamp {n} is lit."),
            None => "Every lamp is lit.".to_owned(),
        };
        if !npc.say(&line) || lit.is_none() {
            return;
        }
    }
}

/// Lights the unlit lamp with the lowest serial; its number (1 = the first lamp), or `None`
/// when every lamp is lit.
pub fn light_next(world: &mut World) -> Option<usize> {
    let mut lamps: Vec<(Serial, u16)> = world
        .items()
        .filter(|item| item.item_id == LAMP)
        .map(|item| (item.serial, item.hue))
        .collect();
    lamps.sort();
    let n = lamps.iter().position(|&(_, hue)| hue == UNLIT)?;
    world.item_mut(lamps[n].0)?.hue = LIT;
    Some(n + 1)
}

fn lamps_lit(ctx: &GameContext, _: &[&str]) -> Result<String, String> {
    let world = ctx.world().borrow();
    let lamps = world.items().filter(|item| item.item_id == LAMP);
    let (lit, all) = lamps.fold((0, 0), |(lit, all), lamp| {
        (lit + usize::from(lamp.hue == LIT), all + 1)
    });
    Ok(format!("{lit} of {all} lamps lit"))
}

/// `[serial u32][x u16][y u16]`.
pub fn serial_xy(serial: Serial, at: Location) -> [u8; 8] {
    let [s0, s1, s2, s3] = serial.0.to_be_bytes();
    let [x0, x1] = at.x.to_be_bytes();
    let [y0, y1] = at.y.to_be_bytes();
    [s0, s1, s2, s3, x0, x1, y0, y1]
}
