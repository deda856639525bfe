//! Connection churn in the log: accepts, logins, disconnects and refusals are logged one by one
//! while they are few, and summed up in one line a second while they are many.
//!
//! A second starts with its first event. Its first [`ONE_BY_ONE`] events are logged one by
//! one at their usual level, as a quiet shard always logged them. From the next one on, that
//! second's events are logged at `debug` only, and one summary line ends the second: how many
//! connections closed, grouped by the kind of their reason ([`Disconnect::kind`]), how many
//! were refused (by kind), opened and logged in — counting the whole second, the events logged
//! one by one included. A connect flood or a wave of timeouts thus costs the log at most
//! [`ONE_BY_ONE`] lines and one summary a second, while every detail stays at `debug`.
//!
//! The summary's timer is armed only when a second overflows and is gone once it fired, so a
//! quiet or idle shard never wakes up for it.
//!
//! This module owns the counting, each event's level and the summary. The callers write their
//! own lines at the level it returns (they keep their targets and fields). It must never log
//! an event above `debug` once its second is past the budget, and never keep a timer armed
//! with nothing to report.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Level;

use super::reason::Disconnect;
use crate::timer::{self, TimerToken};

/// Logs an event at a level chosen at run time (`tracing`'s macros take a constant one).
macro_rules! log_at {
    ($level:expr, $($event:tt)+) => {
        match $level {
            ::tracing::Level::ERROR => ::tracing::error!($($event)+),
            ::tracing::Level::WARN => ::tracing::warn!($($event)+),
            ::tracing::Level::INFO => ::tracing::info!($($event)+),
            ::tracing::Level::DEBUG => ::tracing::debug!($($event)+),
            _ => ::tracing::trace!($($event)+),
        }
    };
}
pub(crate) use log_at;

/// Connection events logged one by one in a second; the rest of that second's go to `debug`
/// and a summary.
pub const ONE_BY_ONE: u32 = 10;

/// The summary's period.
const SECOND: Duration = Duration::from_secs(1);

/// Kinds of reason told apart in one summary; the rest count as "other". Kinds are made by
/// the server, but their number is bounded all the same.
const MAX_KINDS: usize = 8;

/// The churn of one server's connections. Lives on the loop thread, in [`super::Sessions`].
pub struct Churn(Rc<RefCell<Second>>);

/// What happened since a second's first event.
#[derive(Default)]
struct Second {
    /// When its first event came; `None` before it.
    started: Option<Instant>,
    events: u32,
    opened: u64,
    logged_in: u64,
    closed: Tally,
    /// Closes for a fault, among `closed`.
    faults: u64,
    refused: Tally,
    /// Ends the second with its summary; armed once the second overflows.
    summary: Option<TimerToken>,
}

/// Counts by kind of reason. Kept from one second to the next (emptied), so a second of
/// refusals of kinds seen before allocates nothing.
#[derive(Default)]
struct Tally {
    total: u64,
    kinds: Vec<(Cow<'static, str>, u64)>,
}

impl Default for Churn {
    fn default() -> Churn {
        Churn::new()
    }
}

impl Churn {
    /// Nothing counted yet, no timer armed.
    #[must_use]
    pub fn new() -> Churn {
        Churn(Rc::default())
    }

    /// A connection was accepted (its own line is at `debug` in any case).
    pub fn opened(&self) {
        self.count(Level::DEBUG, |second| second.opened += 1);
    }

    /// A connection logged in: the level of its line.
    #[must_use = "the event's line goes at this level"]
    pub fn logged_in(&self) -> Level {
        self.count(Level::INFO, |second| second.logged_in += 1)
    }

    /// A connection closed: the level of its line (`WARN` for a fault, else `INFO`, while
    /// the second is within its budget).
    #[must_use = "the event's line goes at this level"]
    pub fn closed(&self, why: &Disconnect) -> Level {
        let level = if why.fault { Level::WARN } else { Level::INFO };
        self.count(level, |second| {
            second.closed.add(why.owned_kind());
            second.faults += u64::from(why.fault);
        })
    }

    /// A connection was refused at accept, counted as `kind` (`"too many connections"`,
    /// `"connecting too fast"`): the level of its line. Allocates nothing for a kind already
    /// seen.
    #[must_use = "the event's line goes at this level"]
    pub fn refused(&self, kind: &'static str) -> Level {
        self.count(Level::WARN, |second| {
            second.refused.add(Cow::Borrowed(kind));
        })
    }

    /// Counts one event; `level` while the second is within its budget, `DEBUG` past it.
    fn count(&self, level: Level, add: impl FnOnce(&mut Second)) -> Level {
        let now = Instant::now();
        let mut second = self.0.borrow_mut();
        second.roll(now);
        add(&mut second);
        second.events = second.events.saturating_add(1);
        if second.events <= ONE_BY_ONE {
            return level;
        }
        if second.summary.is_none() {
            second.summary = Some(self.arm(second.remaining(now)));
        }
        Level::DEBUG
    }

    /// The timer that ends the current second, `after` from now, with its summary.
    fn arm(&self, after: Duration) -> TimerToken {
        let second = Rc::downgrade(&self.0);
        timer::after(after).start(move || {
            if let Some(second) = second.upgrade() {
                let mut ended = second.borrow_mut();
                ended.log_summary();
                ended.clear(None);
            }
        })
    }
}

impl Drop for Churn {
    /// A summary still due goes out now (the server is going away, with the loop maybe). Its
    /// timer is left to fire into nothing: cancelling needs the loop thread.
    fn drop(&mut self) {
        let second = self.0.borrow();
        if second.summary.is_some() {
            second.log_summary();
        }
    }
}

impl Second {
    /// Starts a new second at `now`, unless the current one still runs or awaits its
    /// summary.
    fn roll(&mut self, now: Instant) {
        let running = self.started.is_some_and(|start| now - start < SECOND);
        if !running && self.summary.is_none() {
            self.clear(Some(now));
        }
    }

    /// Forgets the second's counts (keeping the tallies' room) and starts the next at
    /// `started`; no summary is due.
    fn clear(&mut self, started: Option<Instant>) {
        let (mut closed, mut refused) = (
            std::mem::take(&mut self.closed),
            std::mem::take(&mut self.refused),
        );
        closed.clear();
        refused.clear();
        *self = Second {
            started,
            closed,
            refused,
            ..Second::default()
        };
    }

    /// How long until the second ends.
    fn remaining(&self, now: Instant) -> Duration {
        self.started.map_or(SECOND, |start| {
            (start + SECOND).saturating_duration_since(now)
        })
    }

    fn log_summary(&self) {
        let level = if self.faults > 0 || self.refused.total > 0 {
            Level::WARN
        } else {
            Level::INFO
        };
        log_at!(
            level,
            closed = self.closed.total,
            refused = self.refused.total,
            opened = self.opened,
            logged_in = self.logged_in,
            "{self}"
        );
    }
}

/// `connections in the last second: 312 closed (298 idle timeout, 14 bad packet), 20 opened;
/// the first 10 were logged one by one, the rest only at debug` — parts with nothing to count
/// left out.
impl fmt::Display for Second {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.closed.total > 0 {
            parts.push(format!("{} closed ({})", self.closed.total, self.closed));
        }
        if self.refused.total > 0 {
            parts.push(format!("{} refused ({})", self.refused.total, self.refused));
        }
        if self.opened > 0 {
            parts.push(format!("{} opened", self.opened));
        }
        if self.logged_in > 0 {
            parts.push(format!("{} logged in", self.logged_in));
        }
        write!(
            f,
            "connections in the last second: {}; the first {ONE_BY_ONE} were logged one by one, \
             the rest only at debug",
            parts.join(", ")
        )
    }
}

impl Tally {
    fn add(&mut self, kind: Cow<'static, str>) {
        self.total += 1;
        let known = self.kinds.iter().any(|(k, _)| *k == kind);
        let kind = if known || self.kinds.len() < MAX_KINDS {
            kind
        } else {
            Cow::Borrowed("other")
        };
        match self.kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => self.kinds.push((kind, 1)),
        }
    }

    fn clear(&mut self) {
        self.total = 0;
        self.kinds.clear();
    }
}

/// `298 idle timeout, 14 bad packet`: the most frequent first.
impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: Vec<&(Cow<'static, str>, u64)> = self.kinds.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        for (i, (kind, n)) in kinds.into_iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{n} {kind}")?;
        }
        Ok(())
    }
}
