//! `/healthz`: is the loop still iterating?
//!
//! The loop bumps a heartbeat at the start of every iteration
//! ([`LoopContext::heartbeat`]). A watcher on the HTTP thread samples it every
//! [`SAMPLE_EVERY`] and notes when it last changed. An idle loop still iterates (it wakes at
//! least every `idle_wait`), but to not depend on that setting the watcher posts an empty
//! closure once the heartbeat has been still for [`NUDGE_AFTER`]: a live loop wakes and runs
//! it, a hung one cannot. The verdict is "stalled" once the heartbeat has been still for
//! `stale_after`.
//!
//! Owns that verdict only. It must never block the loop (a nudge is one post, at most one per
//! [`NUDGE_AFTER`], and only while the loop is quiet).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::runtime::LoopContext;

/// How often the watcher looks at the heartbeat.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// A heartbeat still for this long gets a nudge (an empty post).
pub const NUDGE_AFTER: Duration = Duration::from_secs(1);
/// The default of [`super::Settings::stale_after`]: the loop is reported stalled after this
/// long without an iteration.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(5);

/// What `/healthz` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The loop iterated this long ago.
    Alive(Duration),
    /// The loop has not iterated for this long.
    Stalled(Duration),
    /// The loop has shut down.
    Stopped,
}

/// The watcher's state, shared by its task and the handlers (HTTP thread only).
#[derive(Debug)]
pub struct Watch {
    context: LoopContext,
    stale_after: Duration,
    seen: Mutex<Seen>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    beat: u64,
    changed: Instant,
    nudged: Option<Instant>,
}

impl Watch {
    /// A watcher of `context`'s loop that reports it stalled once its heartbeat has been still
    /// for `stale_after`; its sampling starts with [`run`](Self::run).
    pub fn new(context: LoopContext, stale_after: Duration) -> Watch {
        let beat = context.heartbeat();
        Watch {
            context,
            stale_after,
            seen: Mutex::new(Seen {
                beat,
                changed: Instant::now(),
                nudged: None,
            }),
        }
    }

    /// Samples the heartbeat (the watcher task calls it every [`SAMPLE_EVERY`]).
    pub fn sample(&self) {
        let now = Instant::now();
        let beat = self.context.heartbeat();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if beat != seen.beat {
            seen.beat = beat;
            seen.changed = now;
            seen.nudged = None;
            return;
        }
        let still = now.duration_since(seen.changed);
        let due = seen
            .nudged
            .is_none_or(|at| now.duration_since(at) >= NUDGE_AFTER);
        if still >= NUDGE_AFTER && due {
            seen.nudged = Some(now);
            // Refused only once the loop has shut down, which `verdict` reports.
            let _ = self.context.post(|| {});
        }
    }

    /// The loop's state now.
    pub fn verdict(&self) -> Verdict {
        if self.context.is_shut_down() {
            return Verdict::Stopped;
        }
        self.sample();
        let seen = *self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let still = seen.changed.elapsed();
        if still > self.stale_after {
            Verdict::Stalled(still)
        } else {
            Verdict::Alive(still)
        }
    }

    /// Times the loop's watchdog found it stuck (for `/metrics`).
    pub fn watchdog_stalls(&self) -> u64 {
        self.context.watchdog_stalls()
    }

    /// How long the heartbeat has been still (for `/metrics`).
    pub fn still_for(&self) -> Duration {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .changed
            .elapsed()
    }

    /// Samples forever (spawn it on the HTTP runtime).
    pub async fn run(self: std::sync::Arc<Self>) {
        let mut every = tokio::time::interval(SAMPLE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            self.sample();
        }
    }
}
