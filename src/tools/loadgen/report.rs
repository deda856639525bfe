//! What a `loadgen` run measured, and how it is printed: a load mode's figures here, a
//! hostile mode's in `attack::report`, and `Report`, either of the two.
//!
//! This module owns the load report's figures and their wording, which scripts and operators
//! read (`scripts/measure-network.sh`). It must never hide that this tool may have been the
//! bottleneck: the report says so when it was.

use std::fmt;
use std::time::Duration;

use super::Mode;
pub use super::attack::AttackReport;

/// What a run found: a load mode's measurement, or what a hostile mode's server did to it.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    Load(LoadReport),
    Attack(AttackReport),
}

impl Report {
    /// Clients that failed in a way the run did not expect (for a hostile mode, not the
    /// server refusing or closing connections, which is what it is there to see).
    #[must_use]
    pub fn errors(&self) -> u64 {
        match self {
            Report::Load(load) => u64::from(load.errors),
            Report::Attack(attack) => attack.errors,
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Load(load) => load.fmt(f),
            Report::Attack(attack) => attack.fmt(f),
        }
    }
}

/// What a load mode (ping, walk) measured.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    pub mode: Mode,
    /// Clients asked for.
    pub connections: u32,
    /// Clients set up: connected (and, in `walk` mode, logged in).
    pub connected: u32,
    /// From the first connect to the last client set up.
    pub setup: Duration,
    /// The measurement window: round trips are counted only if they start and end in it.
    /// As asked, or shorter if every client failed before its end.
    pub duration: Duration,
    pub round_trips: u64,
    pub round_trips_per_sec: f64,
    pub rtt_p50: Duration,
    pub rtt_p99: Duration,
    pub rtt_max: Duration,
    /// Clients that failed to set up or lost their connection.
    pub errors: u32,
    /// The first failure, as `client N: what happened`.
    pub first_error: Option<String>,
    /// `0x84` speech packets received (setup included).
    pub speech: u64,
    /// `0x85` mobile-moved packets received (setup included).
    pub moved: u64,
    /// Packets received that the mode neither asked for nor expects.
    pub other: u64,
    /// `walk`: ticks that fired more than 25 ms late, this tool being too busy.
    pub late_ticks: u64,
    /// `walk`: moves not sent because the previous one was still unanswered.
    pub skipped_moves: u64,
    /// CPU time this process used during the window, in cores (1.0 = one core all the time).
    /// The runtime has one thread, so near 1.0 this tool is the bottleneck.
    pub cpu: f64,
    /// This tool's own delay, sampled every 10 ms: how long a task that is ready to run
    /// waits for the runtime's one thread. Every RTT includes about this much of the tool.
    pub lag_p99: Duration,
    pub lag_max: Duration,
}

impl LoadReport {
    /// This tool's own CPU use above which its figures are its ceiling, not the server's.
    const SATURATED_CPU: f64 = 0.9;

    /// Whether this tool, not the server, may have set the figures: its thread was busy
    /// all the time, a walk tick fired late, or its own delay is as big as a typical RTT.
    #[must_use]
    pub fn loadgen_saturated(&self) -> bool {
        self.cpu >= Self::SATURATED_CPU
            || self.late_ticks > 0
            || (self.round_trips > 0 && self.lag_p99 >= self.rtt_p50)
    }
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "loadgen: {}, {}/{} connections, {:.1} s (setup {})",
            self.mode,
            self.connected,
            self.connections,
            self.duration.as_secs_f64(),
            Micros(self.setup),
        )?;
        writeln!(
            f,
            "  round trips {} ({:.1}/s)",
            self.round_trips, self.round_trips_per_sec
        )?;
        writeln!(
            f,
            "  rtt p50 {}  p99 {}  max {}",
            Micros(self.rtt_p50),
            Micros(self.rtt_p99),
            Micros(self.rtt_max)
        )?;
        if self.mode == Mode::Walk || self.speech + self.moved + self.other > 0 {
            writeln!(
                f,
                "  received 0x84 ×{}  0x85 ×{}  other ×{}",
                self.speech, self.moved, self.other
            )?;
        }
        if self.mode == Mode::Walk {
            writeln!(
                f,
                "  behind schedule: {} late ticks (loadgen busy), {} skipped moves (server slow)",
                self.late_ticks, self.skipped_moves
            )?;
        }
        writeln!(
            f,
            "  loadgen lag p99 {}  max {}  cpu {:.2} cores (1 thread)",
            Micros(self.lag_p99),
            Micros(self.lag_max),
            self.cpu
        )?;
        write!(f, "  errors {}", self.errors)?;
        if let Some(first) = &self.first_error {
            write!(f, " (first: {first})")?;
        }
        if self.loadgen_saturated() {
            write!(
                f,
                "\n  warning: loadgen was saturated: these figures are partly its own limits"
            )?;
        }
        Ok(())
    }
}

/// A duration shown with the unit that suits it: `80 µs`, `3.1 ms`, `1.25 s`.
pub(super) struct Micros(pub(super) Duration);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self.0.as_micros();
        if micros < 1_000 {
            write!(f, "{micros} µs")
        } else if micros < 1_000_000 {
            write!(f, "{:.1} ms", micros as f64 / 1e3)
        } else {
            write!(f, "{:.2} s", micros as f64 / 1e6)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_in_a_fitting_unit() {
        let show = |d| Micros(d).to_string();
        assert_eq!(show(Duration::from_micros(80)), "80 µs");
        assert_eq!(show(Duration::from_micros(3_100)), "3.1 ms");
        assert_eq!(show(Duration::from_millis(1_250)), "1.25 s");
    }
}
