//! The wall clock that autosave schedules and save timestamps read.
//!
//! In production it is the system's clock. Tests pass [`Clock::following_tokio`]: a wall
//! clock that starts at a chosen instant and then moves with tokio's clock, so a
//! `start_paused` test drives hours of autosave schedule in milliseconds, deterministically.
//!
//! Owns reading the time. Must never sleep.

use jiff::{SignedDuration, Timestamp};

/// Where saves, autosave and archives read the wall clock: the system's, or one pinned to a
/// start time that advances with tokio's clock (`time.clock_start`, tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// `Timestamp::now()`.
    System,
    /// `base` at tokio instant `at`, advancing with tokio's clock.
    FollowingTokio {
        /// The wall-clock time it read at `at`.
        base: Timestamp,
        /// The tokio instant `base` was read at.
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

    /// The wall-clock time now (for `FollowingTokio`: `base` plus the tokio time since `at`,
    /// saturating).
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
