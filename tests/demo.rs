//! The demo game's own pieces, tested once here (the demo's files are included by many test
//! crates; a `#[cfg(test)]` module in them would run in each).

use std::io::Write;

mod common;
use common::demo::packets::{self, serial_xy, start_location};
use common::demo::{DemoConfig, Rates};
use shardloop::config::{Config, ConfigError, ConfigFile, LoadOptions, SectionSpec};
use shardloop::game::text;
use shardloop::net::Rate;

/// The configuration of `toml` and `env`, with the demo's section declared.
fn load(toml: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(toml.as_bytes()).unwrap();
    let options = LoadOptions {
        file: ConfigFile::Required(file.path().to_owned()),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        overrides: Default::default(),
        sections: vec![SectionSpec::of::<DemoConfig>()],
    };
    Config::load(&options).map(|loaded| loaded.config)
}

#[test]
fn the_demo_s_flood_limits_come_from_its_own_section() {
    let config = load(
        "[demo]\nmove_rate = 4\nmove_burst = 8\n",
        &[("SHARD_DEMO__SPEECH_RATE", "0")],
    )
    .unwrap();
    let rates = config.section::<DemoConfig>().rates();
    assert_eq!(
        rates.moves,
        Some(Rate {
            per_sec: 4,
            burst: 8
        })
    );
    assert_eq!(rates.speech, None, "a rate of 0 is no limit");
    let defaults = load("", &[]).unwrap().section::<DemoConfig>().rates();
    assert_eq!(defaults, Rates::default());
    assert_eq!(
        defaults.moves,
        Some(Rate {
            per_sec: 10,
            burst: 20
        })
    );
}

#[test]
fn the_demo_s_old_network_keys_are_refused_with_their_new_names() {
    let err = load("[network]\nmove_rate = 5\n", &[]).unwrap_err();
    assert_eq!(err.key(), Some("network.move_rate"));
    assert!(err.to_string().contains("moved to demo.move_rate"), "{err}");
    let err = load("", &[("SHARD_NETWORK__SPEECH_BURST", "3")]).unwrap_err();
    assert!(
        err.to_string().contains("SHARD_DEMO__SPEECH_BURST"),
        "{err}"
    );
    let err = load("[demo]\nmove_burst = 0\n", &[]).unwrap_err();
    assert_eq!(err.key(), Some("demo.move_burst"), "{err}");
    assert!(err.to_string().contains("at least 1"), "{err}");
}

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
