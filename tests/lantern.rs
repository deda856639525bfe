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
    let game = |_: &Config| lantern(LanternConfig::default());
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

#[tokio::test]
async fn a_wrong_token_is_answered_then_the_connection_closes() {
    let mut square = Harness::new(square(8), lantern(LanternConfig::default()));
    let eve = square.connect();
    assert!(
        square
            .send(eve, LOGIN, &login_payload("guess", "Eve"))
            .is_ok()
    );
    assert_eq!(square.sent(eve), [(REFUSED, b"wrong token".to_vec())]);
    assert_eq!(
        square.closed(eve).map(|d| d.reason.as_str()),
        Some("wrong token")
    );
    assert!(square.players().is_empty());
    let ann = square.connect();
    square
        .send(ann, LOGIN, &login_payload("lantern", "Ann"))
        .unwrap();
    assert_eq!(square.sent(ann)[0].0, WELCOME);
    assert_eq!(square.players().len(), 1);
    square.hang_up(ann);
    assert!(square.players().is_empty(), "the engine's cleanup ran");
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
