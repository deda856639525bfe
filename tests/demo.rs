//! The demo game's own pieces, tested once here (the demo's files are included by many test
//! crates; a `#[cfg(test)]` module in them would run in each).

mod common;
use common::demo::packets::{self, serial_xy, start_location};
use shardloop::game::text;

#[test]
fn serial_xy_is_big_endian() {
    assert_eq!(
        serial_xy(0x0102_0304, 0x0506, 0x0708),
        [1, 2, 3, 4, 5, 6, 7, 8]
    );
}

#[test]
fn steps_cover_the_eight_directions_once() {
    let steps: std::collections::HashSet<_> = (0..8).filter_map(packets::step).collect();
    assert_eq!(steps.len(), 8);
    assert!(packets::step(8).is_none());
}

#[test]
fn start_locations_are_on_the_map_and_stable() {
    let a = start_location("bot1");
    assert_eq!(a, start_location("bot1"));
    assert!(a.is_on_map());
    assert_ne!(a, start_location("bot2"));
}

#[test]
fn text_rejects_empty_long_and_invalid() {
    assert!(text(b"", 30, "name").is_err());
    assert!(text(&[b'a'; 31], 30, "name").is_err());
    assert!(text(&[0xff, 0xfe], 30, "name").is_err());
    assert_eq!(text("Zoë".as_bytes(), 30, "name"), Ok("Zoë"));
}
