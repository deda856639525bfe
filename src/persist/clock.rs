//! The wall clock that autosave schedules and save timestamps read.
//!
//! In production it is the system's clock. Tests pass [`Clock::following_tokio`]: a wall
//! clock that starts at a chosen instant and then moves with tokio's clock, so a
//! `start_paused` test drives hours of autosave schedule in milliseconds, deterministically.
//!
//! Owns reading the time. Must never sleep.

use jiff::{SignedDuration, Timestamp};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// `Timestamp::now()`.
    System,
    /// `base` at tokio instant `at`, advancing with tokio's clock.
    FollowingTokio {
        base: Timestamp,
        at: tokio::time::Instant,
    },
}

impl Clock {
    /// A clock that reads `base` now and advances with tokio's (possibly paused) clock.
    pub fn following_tokio(base: Timestamp) -> Clock {
        Clock::FollowingTokio {
            base,
            at: tokio::time::Instant::now(),
        }
    }

    pub fn now(&self) -> Timestamp {
        match self {
            Clock::System => Timestamp::now(),
            Clock::FollowingTokio { base, at } => {
                let elapsed = SignedDuration::try_from(at.elapsed()).unwrap_or(SignedDuration::MAX);
                base.saturating_add(elapsed).expect("a signed duration")
            }
        }
    }
}
