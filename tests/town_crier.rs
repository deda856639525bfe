//! The town crier example (`examples/town_crier.rs`), tested as a game developer tests a game:
//! on the test kit, on the paused clock, with real players over loopback.

use std::time::Duration;

use shardloop::shard::Shard;
use shardloop::world::{Location, MapId, World};
use tokio::time::Instant;

#[path = "../examples/town_crier.rs"]
#[allow(dead_code)]
mod town_crier;
use shardloop::testkit::TestShard;
use town_crier::demo::demo_game;
use town_crier::demo::packets::server;
use town_crier::demo::testing::{name_near, test_shard};
use town_crier::{CRIER_AT, CRIES, EMOTE, EMOTE_SEEN, find_crier, place_crier, town_crier};

fn text(speech: &[u8]) -> &str {
    std::str::from_utf8(&speech[4..]).expect("UTF-8 speech")
}

fn crier_shard() -> TestShard {
    test_shard(Shard::builder().game(demo_game).game(|_| town_crier()))
}

#[tokio::test(start_paused = true)]
async fn the_crier_cries_every_five_to_eight_seconds_to_a_player_nearby() {
    crier_shard()
        .run(|shard| async move {
            let crier = find_crier(&shard.world().borrow()).expect("the crier is placed");
            let mut anna = shard.login(&name_near(CRIER_AT, 8)).await;
            let mut last = Instant::now();
            for _ in 0..3 {
                // The crier barks too, as every NPC of the demo game does: wait for a cry.
                let is_cry = |s: &[u8]| s[..4] == crier.0.to_be_bytes() && CRIES.contains(&text(s));
                while !is_cry(&anna.expect(server::SPEECH).await) {}
                let gap = last.elapsed();
                assert!(gap >= Duration::from_secs(5), "{gap:?}");
                assert!(gap <= Duration::from_millis(8_020), "{gap:?}");
                last = Instant::now();
            }
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn the_crier_is_quiet_when_nobody_is_near() {
    crier_shard()
        .run(|shard| async move {
            let far = Location::new(CRIER_AT.x + 300, CRIER_AT.y + 300, 0, MapId::FELUCCA);
            let mut ben = shard.login(&name_near(far, 20)).await;
            ben.expect_none(server::SPEECH, Duration::from_secs(60))
                .await;
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn an_emote_is_seen_in_range_only() {
    crier_shard()
        .run(|shard| async move {
            let far = Location::new(CRIER_AT.x + 300, CRIER_AT.y + 300, 0, MapId::FELUCCA);
            let mut anna = shard.login(&name_near(CRIER_AT, 3)).await;
            let mut ben = shard.login(&name_near(anna.location(), 5)).await;
            let mut carl = shard.login(&name_near(far, 20)).await;
            anna.send(EMOTE, b"*waves*").await;
            let mut seen = anna.serial().0.to_be_bytes().to_vec();
            seen.extend(b"*waves*");
            assert_eq!(anna.expect(EMOTE_SEEN).await, seen);
            assert_eq!(ben.expect(EMOTE_SEEN).await, seen);
            carl.expect_none(EMOTE_SEEN, Duration::from_secs(5)).await;
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn an_emote_too_long_disconnects_its_sender() {
    crier_shard()
        .run(|shard| async move {
            let mut anna = shard.login("Anna").await;
            anna.send(EMOTE, &[b'a'; 81]).await;
            assert!(anna.closed_within(Duration::from_secs(5)).await);
        })
        .await;
}

#[test]
fn a_loaded_world_that_has_its_crier_gets_no_second_one() {
    let mut world = World::new(7);
    place_crier(&mut world);
    place_crier(&mut world);
    assert_eq!(world.mobiles().filter(|m| m.is_npc).count(), 1);
}
