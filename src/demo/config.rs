//! The demo's `[demo]` configuration section: its flood limits on moves and speech.
//!
//! Owns those keys, their defaults and their checks; must never read an engine section.

use serde::{Deserialize, Serialize};
use shardloop::config::Section;
use shardloop::net::Rate;

/// `[demo]` in `config/shard.toml`; `SHARD_DEMO__MOVE_RATE` and the like in the environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DemoConfig {
    /// Moves a player may make a second (0 = no limit), and in a burst.
    pub move_rate: u32,
    pub move_burst: u32,
    /// Lines a player may say a second (0 = no limit), and in a burst.
    pub speech_rate: u32,
    pub speech_burst: u32,
}

impl Default for DemoConfig {
    /// Moves: 10 a second (a running character's pace), 20 at once after a pause. Speech:
    /// 5 lines a second, 10 at once.
    fn default() -> DemoConfig {
        DemoConfig {
            move_rate: 10,
            move_burst: 20,
            speech_rate: 5,
            speech_burst: 10,
        }
    }
}

impl Section for DemoConfig {
    const NAME: &'static str = "demo";

    /// Before the demo left the engine these were `[network]` keys.
    const RENAMED: &'static [(&'static str, &'static str)] = &[
        ("network.move_rate", "move_rate"),
        ("network.move_burst", "move_burst"),
        ("network.speech_rate", "speech_rate"),
        ("network.speech_burst", "speech_burst"),
    ];

    /// A limited packet needs a burst of at least one, or no packet would ever pass.
    fn check(&self) -> Result<(), (&'static str, String)> {
        let limits = [
            ("move_burst", self.move_rate, self.move_burst),
            ("speech_burst", self.speech_rate, self.speech_burst),
        ];
        for (key, per_sec, burst) in limits {
            if per_sec > 0 && burst == 0 {
                return Err((
                    key,
                    "must be at least 1 while its rate is limited".to_owned(),
                ));
            }
        }
        Ok(())
    }
}

impl DemoConfig {
    /// The flood limits these keys describe.
    #[must_use]
    pub fn rates(&self) -> Rates {
        Rates {
            moves: Rate::from_keys(self.move_rate, self.move_burst),
            speech: Rate::from_keys(self.speech_rate, self.speech_burst),
        }
    }
}

/// How fast players may move and talk: a move or a line beyond the rate is dropped, far
/// beyond it disconnects (`docs/protocol.md`, flood limits). `None`: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    pub moves: Option<Rate>,
    pub speech: Option<Rate>,
}

impl Default for Rates {
    /// [`DemoConfig::default`]'s limits.
    fn default() -> Rates {
        DemoConfig::default().rates()
    }
}

impl Rates {
    /// No flood limits (benches and tests that measure the handlers themselves).
    pub const NONE: Rates = Rates {
        moves: None,
        speech: None,
    };
}
