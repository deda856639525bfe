//! Lantern Square (`examples/lantern.rs`), a game that shares nothing with the demo, tested as
//! its developer would: whole-shard tests on the test kit, and plain `#[tokio::test]`s of one
//! handler (the kit's `Harness`) and of the lamplighter's behaviour (on a bare `EventLoop`).

use std::time::Duration;

use shardloop::EventLoop;
use shardloop::config::{Config, ConfigFile, LoadOptions, SectionSpec};
use shardloop::shard::Shard;
use shardloop::testkit::{self, Harness, Login, TestShard};
use shardloop::world::{Location, MapId, Serial};

#[path = "../examples/lantern.rs"]
#[allow(dead_code)]
mod lantern;
use lantern::*;

/// The login with the default token, for the kit's `login`.
const LANTERN_LOGIN: Login = Login {
    request: |name| (LOGIN, login_payload("lantern", name)),
    accepted: WELCOME,
    read: |ok| {
        let word = |i: usize| u16::from_be_bytes([ok[i], ok[i + 1]]);
        let serial = Serial(u32::from_be_bytes(ok.get(..4)?.try_into().ok()?));
        Some((serial, Location::new(word(4), word(6), 0, MapId::FELUCCA)))
    },
};

fn login_payload(token: &str, name: &str) -> Vec<u8> {
    [&[token.len() as u8], token.as_bytes(), name.as_bytes()].concat()
}

fn square_shard() -> TestShard {
    let game = |config: &Config| lantern(config.section::<LanternConfig>());
    TestShard::new(Shard::builder().game(game)).with_login(LANTERN_LOGIN)
}

#[tokio::test(start_paused = true)]
async fn a_player_near_the_lamplighter_sees_the_lamps_lit_one_every_three_seconds() {
    square_shard()
        .run(|shard| async move {
            let mut ann = shard.login("Ann").await;
            assert_eq!(ann.location(), SQUARE);
            for n in 1..=3 {
                let said = ann.expect(SAID).await;
                assert_eq!(&said[4..], format!("Lamp {n} is lit.").as_bytes());
            }
            let world = shard.world().borrow();
            let lit = world.items().filter(|lamp| lamp.hue == LIT).count();
            assert_eq!(lit, 3);
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_test_shard_takes_the_game_s_section_set_by_hand() {
    let three = LanternConfig {
        lamps: 3,
        ..LanternConfig::default()
    };
    square_shard()
        .configure(move |config| config.set_section(three))
        .run(|shard| async move {
            assert_eq!(
                shard.world().borrow().item_count(),
                3,
                "three lamps generated"
            );
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn players_see_each_other_step_in_the_game_s_own_packets() {
    square_shard()
        .run(|shard| async move {
            let (mut ann, mut bo) = (shard.login("Ann").await, shard.login("Bo").await);
            ann.send(STEP, &[1]).await;
            assert_eq!(ann.expect(POSITION).await, [1, 245, 1, 244]);
            let seen = bo.expect(MOVED).await;
            assert_eq!(seen, serial_xy(ann.serial(), SQUARE.offset_clamped(1, 0)));
        })
        .await;
}

/// Why `conn` is closing, if it is.
fn why(square: &Harness, conn: shardloop::net::ConnId) -> Option<String> {
    square.closed(conn).map(|d| d.reason.clone())
}

#[tokio::test]
async fn a_wrong_token_is_answered_then_the_connection_closes() {
    let mut square = Harness::new(square(8), lantern(LanternConfig::default()));
    let eve = square.connect();
    let guess = login_payload("guess", "Eve");
    assert!(square.send(eve, LOGIN, &guess).is_ok());
    assert_eq!(square.sent(eve), [(REFUSED, b"wrong token".to_vec())]);
    assert_eq!(why(&square, eve).as_deref(), Some("wrong token"));
    assert!(square.players().is_empty());
    // Nothing more is read from a refused connection: its reason stays.
    let right = login_payload("lantern", "Eve");
    assert!(square.send(eve, LOGIN, &right).is_ok());
    assert_eq!(why(&square, eve).as_deref(), Some("wrong token"));
    let ann = square.connect();
    square.send(ann, LOGIN, &right).unwrap();
    assert_eq!(square.sent(ann)[0].0, WELCOME);
    assert_eq!(square.players().len(), 1);
    square.hang_up(ann);
    assert!(square.players().is_empty(), "the engine's cleanup ran");
}

#[tokio::test]
async fn a_bad_packet_closes_the_connection_as_the_server_does_and_the_player_leaves() {
    let mut square = Harness::new(square(8), lantern(LanternConfig::default()));
    let bo = square.connect();
    assert!(square.send(bo, STEP, &[1]).is_err());
    let early = why(&square, bo);
    assert_eq!(early.as_deref(), Some("packet 0x21 (step) before login"));
    let ann = square.connect();
    square
        .send(ann, LOGIN, &login_payload("lantern", "Ann"))
        .unwrap();
    assert_eq!(square.players().len(), 1);
    let err = square.send(ann, STEP, &[9]).unwrap_err().to_string();
    assert_eq!(err, "bad packet 0x21 (step): a step is one byte, 0 to 3");
    assert!(
        square.players().is_empty(),
        "closed: the engine took the player out"
    );
    assert_eq!(
        square.world().borrow().mobile_count(),
        1,
        "the lamplighter alone"
    );
}

#[tokio::test(start_paused = true)]
async fn the_lamplighter_alone_lights_every_lamp_then_stops() {
    let world = std::rc::Rc::new(std::cell::RefCell::new(square(3)));
    let lighter = world.borrow().mobiles().next().unwrap().serial;
    let npc = testkit::npc(&world, lighter);
    let began = tokio::time::Instant::now();
    EventLoop::new().run_until(lamplighter(npc)).await;
    // Three lamps at 3, 6 and 9 s; at 12 s it finds none left, says so and ends.
    assert_eq!(began.elapsed(), Duration::from_secs(12));
    assert_eq!(
        light_next(&mut world.borrow_mut()),
        None,
        "all three are lit"
    );
}

#[tokio::test]
async fn the_token_comes_from_the_lantern_section_of_the_configuration() {
    let options = LoadOptions {
        file: ConfigFile::None,
        env: vec![("SHARD_LANTERN__TOKEN".into(), "open sesame".into())],
        overrides: Default::default(),
        sections: vec![SectionSpec::of::<LanternConfig>()],
    };
    let config = Config::load(&options)
        .expect("a valid configuration")
        .config;
    let mut square = Harness::new(square(8), lantern(config.section()));
    let old = square.connect();
    square
        .send(old, LOGIN, &login_payload("lantern", "Ann"))
        .unwrap();
    assert_eq!(
        square.sent(old)[0].0,
        REFUSED,
        "the default token no longer opens"
    );
    let new = square.connect();
    square
        .send(new, LOGIN, &login_payload("open sesame", "Bo"))
        .unwrap();
    assert_eq!(square.sent(new)[0].0, WELCOME);
    let too_long = [("SHARD_LANTERN__TOKEN".to_owned(), "x".repeat(65))];
    let options = LoadOptions {
        env: too_long.to_vec(),
        ..options
    };
    let err = Config::load(&options).expect_err("refused");
    assert_eq!(err.key(), Some("lantern.token"), "{err}");
}
