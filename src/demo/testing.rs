//! The demo's side of the test kit: how its client logs in ([`LOGIN`] for
//! `TestShard::with_login`), what its players say, and where they start — the protocol
//! helpers a game gives its own tests, built on `shardloop::testkit`.
//!
//! Used by tests only; must never be needed by the demo game itself.

use shardloop::shard::ShardBuilder;
use shardloop::testkit::{Login, TestPlayer, TestShard};
use shardloop::world::{Location, MapId, Serial};

use super::packets::{client, server, start_location};

/// The demo's login for the test kit: `LOGIN` with the name, answered by `LOGIN_OK`
/// (`[serial u32][x u16][y u16]`).
pub const LOGIN: Login = Login {
    request: login_request,
    accepted: server::LOGIN_OK,
    read: login_answer,
};

fn login_request(name: &str) -> (u8, Vec<u8>) {
    (client::LOGIN, name.as_bytes().to_vec())
}

fn login_answer(ok: &[u8]) -> Option<(Serial, Location)> {
    let &[s0, s1, s2, s3, x0, x1, y0, y1] = ok else {
        return None;
    };
    let at = Location::new(
        u16::from_be_bytes([x0, x1]),
        u16::from_be_bytes([y0, y1]),
        0,
        MapId::FELUCCA,
    );
    Some((Serial(u32::from_be_bytes([s0, s1, s2, s3])), at))
}

/// A test shard of `builder`'s games whose players log in with the demo's [`LOGIN`].
pub fn test_shard(builder: ShardBuilder) -> TestShard {
    TestShard::new(builder).with_login(LOGIN)
}

/// `player` says `text` (the demo's `SAY` packet).
pub async fn say(player: &mut TestPlayer, text: &str) {
    player.send(client::SAY, text.as_bytes()).await;
}

/// A name whose player starts within `range` tiles of `near` (tried: `p0`, `p1`, ... up to
/// `p99999`) — to log a player in beside an NPC or another player.
///
/// # Panics
/// When no such name is found.
#[must_use]
pub fn name_near(near: Location, range: u16) -> String {
    (0..100_000)
        .map(|i| format!("p{i}"))
        .find(|name| {
            start_location(name)
                .distance(&near)
                .is_some_and(|d| d <= range)
        })
        .unwrap_or_else(|| panic!("no player name starts within {range} tiles of {near:?}"))
}
