//! The loop's recent past: one [`LoopSecond`] per second of the loop thread's wall time, kept
//! in a fixed ring of [`History::CAPACITY`] (15 minutes), so an episode can be compared with
//! the quiet minutes around it.
//!
//! A record says where the second went — each [`Phase`]: the loop's phases, the save snapshot,
//! sleep, and time *stolen* from the thread (run-queue wait, host steal) —, what the loop
//! counted in it ([`SecondCounts`]), and
//! the worst offender of the second for each kind of work (timer callback, task poll, posted
//! closure, packet handler) with its site. [`Summary`] condenses the last N seconds for the
//! console's `loopstats`; [`write_csv`] and [`read_csv`] carry the ring to a file and back
//! (`docs/loopstats-csv.md` documents every column) for the chart ([`chart`], drawn off the loop).
//!
//! This module only keeps and formats records: the loop fills them. It must never allocate
//! per second (the ring is allocated once, records are plain `Copy` data), and never read a
//! clock or do I/O itself: writing a CSV is the caller's to do, off the loop thread.

pub mod chart;
mod csv;
mod summary;

use std::fmt;
use std::iter::Chain;
use std::panic::Location;
use std::slice;
use std::time::Duration;

pub use csv::{COLUMNS, Column, CsvError, MAX_LINE_BYTES, MAX_ROWS, read_csv, write_csv};
pub(crate) use summary::time_of_day;
pub use summary::{PhaseSummary, Summary, Worst};

use super::phase::Phase;
use super::telemetry::SecondCounts;

/// Where a timer was created, a task spawned or a closure posted: the caller's file, line and
/// column, as `#[track_caller]` gives them. A copy of a [`Location`] that a CSV reader can also
/// make (it cannot make a `Location`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Site {
    /// The source file, as the compiler names it (relative to the crate that holds it).
    pub file: &'static str,
    /// The line, from 1.
    pub line: u32,
    /// The column, from 1.
    pub column: u32,
}

impl From<&'static Location<'static>> for Site {
    fn from(location: &'static Location<'static>) -> Site {
        Site {
            file: location.file(),
            line: location.line(),
            column: location.column(),
        }
    }
}

/// `file:line:column`, as the compiler and editors write it.
impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// The longest single run of one kind of work in a second, and what ran: a [`Site`] for
/// timer callbacks, task polls and posted closures, a packet id for packet handlers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offender<S> {
    /// How long it ran (save snapshot time inside it excluded).
    pub took: Duration,
    /// What ran.
    pub site: S,
}

impl<S> Offender<S> {
    /// Keeps the longer of `slot` and this run (the earlier one on a tie).
    pub fn offer(slot: &mut Option<Offender<S>>, took: Duration, site: S) {
        if slot.as_ref().is_none_or(|worst| took > worst.took) {
            *slot = Some(Offender { took, site });
        }
    }
}

/// The worst offender of a second for each kind of work; `None` when that kind did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offenders {
    /// The longest timer callback, by the site that created the timer.
    pub timer: Option<Offender<Site>>,
    /// The longest task poll, by the site that spawned the task.
    pub task: Option<Offender<Site>>,
    /// The longest posted closure, by the site that posted it.
    pub posted: Option<Offender<Site>>,
    /// The packet id whose handler ran longest.
    pub handler: Option<Offender<u8>>,
}

/// One second of the loop thread: where its wall time went, what the loop counted, and the
/// worst offenders. Plain data, filled by the loop and pushed into a [`History`].
///
/// `wall` is the wall time the record covers: about a second, more when one piece of work
/// ran past the end of the second (the record closes after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoopSecond {
    /// Wall-clock start of the second, in seconds since the Unix epoch.
    pub unix_second: u64,
    /// The loop's uptime at the start of the second, in whole seconds.
    pub uptime_second: u64,
    /// The wall time this record covers.
    pub wall: Duration,
    /// The time spent in each [`Phase`], indexed by `Phase as usize`; read it with
    /// [`LoopSecond::spent`].
    pub parts: [Duration; Phase::COUNT],
    /// The share of [`Phase::Stolen`] measured as run-queue wait (from the thread's
    /// schedstat); the rest of it is host steal.
    pub run_queue_wait: Duration,
    /// What the loop counted in the second (the table in [`super::telemetry`]).
    pub counts: SecondCounts,
    /// The longest timer callback, task poll, posted closure and packet handler.
    pub worst: Offenders,
}

impl LoopSecond {
    /// The time spent in `phase`.
    #[must_use]
    pub fn spent(&self, phase: Phase) -> Duration {
        self.parts[phase as usize]
    }

    /// Adds `took` to `phase`.
    pub fn add(&mut self, phase: Phase, took: Duration) {
        self.parts[phase as usize] += took;
    }

    /// `phase`'s share of the wall time, 0–1 (0 for a record with no wall time).
    #[must_use]
    pub fn share(&self, phase: Phase) -> f64 {
        if self.wall.is_zero() {
            return 0.0;
        }
        self.spent(phase).as_secs_f64() / self.wall.as_secs_f64()
    }
}

/// The last [`History::CAPACITY`] seconds, oldest dropped first. Allocated once, at
/// construction; pushing never allocates.
#[derive(Clone)]
pub struct History {
    ring: Box<[LoopSecond]>,
    /// Where the next record goes.
    next: usize,
    len: usize,
}

impl Default for History {
    fn default() -> History {
        History::new()
    }
}

impl fmt::Debug for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("History")
            .field("len", &self.len)
            .field("newest", &self.iter().next_back())
            .finish()
    }
}

impl History {
    /// Seconds kept: 15 minutes, enough to hold an episode and the baseline around it.
    pub const CAPACITY: usize = 900;

    /// An empty history, with room for [`History::CAPACITY`] seconds.
    #[must_use]
    pub fn new() -> History {
        History {
            ring: vec![LoopSecond::default(); History::CAPACITY].into_boxed_slice(),
            next: 0,
            len: 0,
        }
    }

    /// A history that never records: what a build without the `loop-profiling` feature
    /// keeps, so that it does not hold 15 minutes of empty seconds. Pushing to it does nothing.
    #[must_use]
    pub(crate) fn unused() -> History {
        History {
            ring: Box::default(),
            next: 0,
            len: 0,
        }
    }

    /// Records a second, dropping the oldest when full.
    pub fn push(&mut self, second: LoopSecond) {
        let Some(slot) = self.ring.get_mut(self.next) else {
            return; // an unused history
        };
        *slot = second;
        self.next = (self.next + 1) % History::CAPACITY;
        self.len = (self.len + 1).min(History::CAPACITY);
    }

    /// Seconds recorded (at most [`History::CAPACITY`]).
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no second is recorded yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every recorded second, oldest first.
    #[must_use]
    pub fn iter(&self) -> Seconds<'_> {
        self.last(self.len)
    }

    /// The newest `n` seconds (all of them when fewer are recorded), oldest first.
    #[must_use]
    pub fn last(&self, n: usize) -> Seconds<'_> {
        let (older, newer) = self.halves();
        let skip = self.len - n.min(self.len);
        let (older, newer) = match older.get(skip..) {
            Some(rest) => (rest, newer),
            None => (&older[older.len()..], &newer[skip - older.len()..]),
        };
        Seconds(older.iter().chain(newer.iter()))
    }

    /// The summary of the newest `n` seconds, for `loopstats`.
    #[must_use]
    pub fn summary(&self, n: usize) -> Summary {
        Summary::of(self.last(n))
    }

    /// Every recorded second as CSV ([`write_csv`]).
    ///
    /// # Errors
    /// Those of `out`.
    pub fn write_csv(&self, out: impl std::io::Write) -> std::io::Result<()> {
        write_csv(self.iter(), out)
    }

    /// The ring in order: the older part (from `next`, once it has wrapped), then the newer.
    fn halves(&self) -> (&[LoopSecond], &[LoopSecond]) {
        if self.len < History::CAPACITY {
            (&self.ring[..self.len], &[])
        } else {
            (&self.ring[self.next..], &self.ring[..self.next])
        }
    }
}

/// Seconds of a [`History`], oldest first (reversible, with an exact length).
#[derive(Debug, Clone)]
pub struct Seconds<'a>(Chain<slice::Iter<'a, LoopSecond>, slice::Iter<'a, LoopSecond>>);

impl<'a> Iterator for Seconds<'a> {
    type Item = &'a LoopSecond;

    fn next(&mut self) -> Option<&'a LoopSecond> {
        self.0.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Seconds<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back()
    }
}

// Both halves are slice iterators, so the chain's size hint is exact.
impl ExactSizeIterator for Seconds<'_> {}

#[cfg(test)]
mod tests;
