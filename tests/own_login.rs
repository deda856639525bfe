//! A game with a login of its own, on the engine alone (no demo game): the engine's player
//! services — `p.player()`, range broadcasts, the player table the saves and `status` read —
//! work for whatever game logged the player in, and every game's disconnect hook runs, in
//! registration order, before the engine takes the player out of the world.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use shardloop::game::{BuildError, DeltaPackets, Game, Games, Packet};
use shardloop::net::{Access, BadPacket};
use shardloop::shard::Shard;
use shardloop::testkit::TestShard;
use shardloop::world::{Location, MapId, Mobile, Serial};

/// Client → server: login with a token, a step east, a shout.
const LOGIN: u8 = 0x20;
const STEP: u8 = 0x21;
const SHOUT: u8 = 0x22;
/// Server → client: welcome (`[serial u32]`), where you stand (`[x u16]`), a shout heard,
/// a refused login (`[reason]`).
const WELCOME: u8 = 0xA0;
const HERE: u8 = 0xA1;
const HEARD: u8 = 0xA2;
const REFUSED: u8 = 0xA3;
/// Server → client, the game's world changes: a mobile moved (`[serial u32][x u16]`), a line
/// said (`[text]`, system messages too).
const MOVED: u8 = 0xA4;
const SAID: u8 = 0xA5;
/// The demo's packets for the same changes, which a game of its own must never receive.
const DEMO_MOVED: u8 = 0x85;
const DEMO_SPEECH: u8 = 0x84;

const DELTAS: DeltaPackets = DeltaPackets {
    moved: Some((MOVED, |serial, at, out| {
        out.extend_from_slice(&serial.0.to_be_bytes());
        out.extend_from_slice(&at.x.to_be_bytes());
    })),
    said: Some((SAID, |_, line, out| out.extend_from_slice(line.as_bytes()))),
    batch: None,
};
/// Server → client: the iteration's world changes in one packet (`DeltaPackets::batch`).
const CHANGES: u8 = 0xA6;

const SPAWN: Location = Location::new(100, 100, 0, MapId::FELUCCA);

fn login(p: &mut Packet<'_>, token: &[u8]) -> Result<(), BadPacket> {
    if token != b"lantern" {
        p.refuse("wrong token", REFUSED, &[b"wrong token"]);
        return Ok(());
    }
    let mut mobile = Mobile::new(p.world.new_mobile_serial(), "lamplighter", 0x190);
    mobile.location = SPAWN;
    let serial = p.log_in(mobile)?;
    p.answer(WELCOME, &[&serial.0.to_be_bytes()]);
    Ok(())
}

fn step(p: &mut Packet<'_>, _: &[u8]) -> Result<(), BadPacket> {
    let (_, at) = p.player()?;
    let to = at.offset_clamped(1, 0);
    p.move_player(to)?;
    p.answer(HERE, &[&to.x.to_be_bytes()]);
    Ok(())
}

fn shout(p: &mut Packet<'_>, _: &[u8]) -> Result<(), BadPacket> {
    let (serial, at) = p.player()?;
    p.broadcast_in_range(at, HEARD, &[&serial.0.to_be_bytes()]);
    Ok(())
}

fn lanterns() -> Game {
    Game::new("lanterns")
        .packet(LOGIN, "login", Access::Always, login)
        .packet(STEP, "step", Access::LoggedIn, step)
        .packet(SHOUT, "shout", Access::LoggedIn, shout)
}

const SOON: Duration = Duration::from_secs(5);

#[tokio::test(start_paused = true)]
async fn a_game_s_own_login_gets_every_engine_service() {
    TestShard::new(Shard::builder().game(|_| lanterns()))
        .configure(|config| {
            (config.world.generate.items, config.world.generate.mobiles) = (500, 50)
        })
        .run(|shard| async move {
            // No game here generates a world: the shard starts empty, whatever the sizes.
            let counts = |w: &shardloop::world::World| (w.item_count(), w.mobile_count());
            assert_eq!(counts(&shard.world().borrow()), (0, 0));
            let mut ann = shard.connect().await;
            ann.send(STEP, &[]).await;
            assert!(ann.closed_within(SOON).await, "not logged in: refused");
            let (mut bea, mut cid) = (shard.connect().await, shard.connect().await);
            bea.send(LOGIN, b"lantern").await;
            let serial = u32::from_be_bytes(bea.expect(WELCOME).await.try_into().unwrap());
            cid.send(LOGIN, b"lantern").await;
            cid.expect(WELCOME).await;
            bea.send(STEP, &[]).await;
            assert_eq!(bea.expect(HERE).await, 101u16.to_be_bytes());
            bea.send(SHOUT, &[]).await;
            assert_eq!(cid.expect(HEARD).await, serial.to_be_bytes(), "in range");
            // No game encodes world changes here: the step sent nothing to cid.
            cid.expect_none(DEMO_MOVED, SOON).await;
            let players = shard.context().players().borrow();
            assert_eq!(players.len(), 2, "the table status and saves read");
            let bea_serial = Serial(serial);
            assert!(players.is_player(bea_serial), "saves leave it out");
            assert_eq!(
                players.location(bea_serial),
                Some(SPAWN.offset_clamped(1, 0))
            );
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn every_game_s_disconnect_hook_runs_in_order_then_the_player_leaves() {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let hook = |name: &'static str, seen: &Rc<RefCell<Vec<String>>>| {
        let seen = seen.clone();
        move |p: &mut Packet<'_>| {
            let still_there = p.player().is_ok_and(|(s, _)| p.world.mobile(s).is_some());
            seen.borrow_mut().push(format!("{name} {still_there}"));
        }
    };
    let panics = |_: &mut Packet<'_>| panic!("a broken hook");
    let (one, two) = (hook("first", &seen), hook("second", &seen));
    let builder = Shard::builder()
        .game(move |_| lanterns().on_disconnect(one).on_disconnect(panics))
        .game(move |_| Game::new("other").on_disconnect(two));
    let log = seen.clone();
    TestShard::new(builder)
        .run(|shard| async move {
            let mut bea = shard.connect().await;
            bea.send(LOGIN, b"lantern").await;
            let serial = u32::from_be_bytes(bea.expect(WELCOME).await.try_into().unwrap());
            drop(bea);
            shard.advance(Duration::from_millis(100)).await;
            assert_eq!(*log.borrow(), ["first true", "second true"]);
            assert!(shard.world().borrow().mobile(Serial(serial)).is_none());
            assert!(shard.context().players().borrow().is_empty());
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_login_is_answered_then_closed_and_nothing_after_it_is_read() {
    TestShard::new(Shard::builder().game(|_| lanterns()))
        .run(|shard| async move {
            let mut bea = shard.connect().await;
            bea.send(LOGIN, b"lantern").await;
            bea.expect(WELCOME).await;
            let mut eve = shard.connect().await;
            eve.send(LOGIN, b"guess").await;
            eve.send(LOGIN, b"lantern").await; // already refused: never read
            assert_eq!(eve.expect(REFUSED).await, b"wrong token");
            eve.expect_none(WELCOME, SOON).await;
            assert!(eve.closed_within(SOON).await);
            // Only the refused connection is affected: the player beside it plays on.
            bea.send(STEP, &[]).await;
            assert_eq!(bea.expect(HERE).await, 101u16.to_be_bytes());
            assert_eq!(shard.context().players().borrow().len(), 1);
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn world_changes_and_system_messages_go_out_in_the_game_s_own_packets() {
    TestShard::new(Shard::builder().game(|_| lanterns().deltas(DELTAS)))
        .run(|shard| async move {
            let (mut bea, mut cid) = (shard.connect().await, shard.connect().await);
            bea.send(LOGIN, b"lantern").await;
            let serial = bea.expect(WELCOME).await;
            cid.send(LOGIN, b"lantern").await;
            cid.expect(WELCOME).await;
            bea.send(STEP, &[]).await;
            let seen = cid.expect(MOVED).await;
            assert_eq!(seen[..4], serial[..], "the mover, in the game's encoding");
            assert_eq!(seen[4..], 101u16.to_be_bytes());
            shard.context().broadcast("dusk falls");
            assert_eq!(bea.expect(SAID).await, b"dusk falls");
            assert_eq!(cid.expect(SAID).await, b"dusk falls");
            cid.expect_none(DEMO_MOVED, SOON).await;
            bea.expect_none(DEMO_SPEECH, SOON).await;
            // Lines too long for any packet are dropped with a warning, not a crash.
            let long = "a".repeat(70_000);
            let bea_serial = Serial(u32::from_be_bytes(serial[..4].try_into().unwrap()));
            assert!(shard.world().borrow_mut().say(bea_serial, &long));
            shard.context().broadcast(&long);
            shard.context().broadcast("night falls");
            assert_eq!(cid.expect(SAID).await, b"night falls");
        })
        .await;
}

/// `[kind u8][len u16][payload]` records of a batch, as (kind, payload).
fn records(mut batch: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while let [kind, l0, l1, rest @ ..] = batch {
        let (payload, tail) = rest.split_at(usize::from(u16::from_be_bytes([*l0, *l1])));
        out.push((*kind, payload.to_vec()));
        batch = tail;
    }
    out
}

#[tokio::test(start_paused = true)]
async fn batched_deltas_bring_an_iteration_s_changes_in_one_packet_per_player() {
    let batched = DeltaPackets {
        batch: Some(CHANGES),
        ..DELTAS
    };
    TestShard::new(Shard::builder().game(move |_| lanterns().deltas(batched)))
        .run(|shard| async move {
            let (mut bea, mut cid) = (shard.connect().await, shard.connect().await);
            bea.send(LOGIN, b"lantern").await;
            let serial = bea.expect(WELCOME).await;
            cid.send(LOGIN, b"lantern").await;
            let cid_serial = cid.expect(WELCOME).await;
            // Two changes in one iteration, made on the loop between two Deltas phases.
            let world = shard.world().clone();
            let bea_serial = Serial(u32::from_be_bytes(serial[..4].try_into().unwrap()));
            let cid_serial = Serial(u32::from_be_bytes(cid_serial[..4].try_into().unwrap()));
            let moved = SPAWN.offset_clamped(2, 0);
            world.borrow_mut().move_mobile(bea_serial, moved);
            assert!(world.borrow_mut().say(cid_serial, "good evening"));
            let batch = cid.expect(CHANGES).await;
            let mut moved_payload = serial[..4].to_vec();
            moved_payload.extend_from_slice(&102u16.to_be_bytes());
            assert_eq!(
                records(&batch),
                [(MOVED, moved_payload), (SAID, b"good evening".to_vec())]
            );
            // The mover is not told of its own move: only the line reaches it.
            assert_eq!(
                records(&bea.expect(CHANGES).await),
                [(SAID, b"good evening".to_vec())]
            );
            cid.expect_none(MOVED, SOON).await;
        })
        .await;
}

#[test]
fn two_games_encoding_world_changes_is_a_build_error_naming_both_lines() {
    let first_line = line!() + 1;
    let a = Game::new("lanterns").deltas(DELTAS);
    let b = Game::new("torches").deltas(DeltaPackets::default());
    let Err(err) = Games::check(vec![a, b], &[]) else {
        panic!("two deltas encoders were accepted");
    };
    assert!(matches!(err, BuildError::DuplicateDeltas { .. }), "{err}");
    let text = err.to_string();
    for needle in [
        "lanterns".to_owned(),
        "torches".to_owned(),
        format!("own_login.rs:{first_line}"),
        format!("own_login.rs:{}", first_line + 1),
    ] {
        assert!(text.contains(&needle), "{needle:?} not in {text}");
    }
}
