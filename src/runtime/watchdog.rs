//! The watchdog: a thread of its own that names a stuck loop. When the loop has been inside
//! one iteration for longer than its limit, it logs at ERROR the phase and the code running
//! ([`Doing`]: a timer callback by creation site, a task by spawn site, a posted closure by
//! post site, a packet handler by packet id), again every [`REPEAT`] while the loop stays
//! stuck, counts the episode ([`LoopContext::watchdog_stalls`], `/metrics`), and says when the
//! loop is back and how long it was gone. It never kills anything: a loop stuck in a long
//! callback may yet return, and a shard that cannot is stopped by its operator, who now knows
//! which line to look at.
//!
//! It reads only what the loop publishes in atomics ([`LoopContext::heartbeat`],
//! [`LoopContext::in_iteration`], [`LoopContext::running_now`]): an idle, parked loop is never
//! "stuck", however long it sleeps. Owns the thread and its decisions; must never touch the
//! loop's state or make the loop wait for it.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::context::LoopContext;
use super::watch::Doing;

/// While the loop stays stuck, the watchdog says so again this often.
const REPEAT: Duration = Duration::from_secs(10);

/// How often the watchdog looks, at most: a tenth of its limit, within these bounds, so it
/// finds a stuck loop within a tenth of the limit of it getting stuck.
const LOOK_AT_LEAST: Duration = Duration::from_millis(10);
const LOOK_AT_MOST: Duration = Duration::from_secs(1);

/// A running watchdog; dropping it stops the thread.
#[derive(Debug)]
#[must_use = "dropping the watchdog stops it"]
pub struct Watchdog {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts a watchdog over the loop of `context` that speaks up once the loop has been in
    /// one iteration for `limit`.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start(context: LoopContext, limit: Duration) -> std::io::Result<Watchdog> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let look = (limit / 10).clamp(LOOK_AT_LEAST, LOOK_AT_MOST);
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("shardloop-watchdog".into())
            .spawn(move || {
                let mut watch = Watch::new(context, limit);
                while !wait(&stopped, look) {
                    watch.look(Instant::now());
                }
            })?;
        Ok(Watchdog {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (flag, wake) = &*self.stop;
        *flag.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Waits `look`, or until stopped; true once stopped.
fn wait(stop: &(Mutex<bool>, Condvar), look: Duration) -> bool {
    let (flag, wake) = stop;
    let stopped = flag.lock().unwrap_or_else(PoisonError::into_inner);
    let (stopped, _) = wake
        .wait_timeout_while(stopped, look, |stopped| !*stopped)
        .unwrap_or_else(PoisonError::into_inner);
    *stopped
}

/// What the watchdog thread knows between looks.
struct Watch {
    context: LoopContext,
    limit: Duration,
    /// The heartbeat last seen, and when it was first seen (or the loop last seen idle).
    beat: u64,
    since: Instant,
    /// While the loop is reported stuck: when it was last said.
    said: Option<Instant>,
}

impl Watch {
    fn new(context: LoopContext, limit: Duration) -> Watch {
        Watch {
            beat: context.heartbeat(),
            context,
            limit,
            since: Instant::now(),
            said: None,
        }
    }

    /// One look at the loop, at `now`.
    fn look(&mut self, now: Instant) {
        let beat = self.context.heartbeat();
        let busy = self.context.in_iteration() && !self.context.is_shut_down();
        if beat != self.beat || !busy {
            if self.said.take().is_some() {
                tracing::warn!(
                    "the loop is back: the iteration the watchdog reported took {:.1?}",
                    now.saturating_duration_since(self.since)
                );
            }
            (self.beat, self.since) = (beat, now);
            return;
        }
        let stuck = now.saturating_duration_since(self.since);
        let due = match self.said {
            None => stuck >= self.limit,
            Some(said) => now.saturating_duration_since(said) >= REPEAT,
        };
        if !due {
            return;
        }
        if self.said.is_none() {
            self.context.shared.count_stall();
        }
        self.said = Some(now);
        let (phase, doing) = self.context.running_now();
        let phase = phase.map_or_else(|| "between phases".to_owned(), |p| format!("{p} phase"));
        tracing::error!(
            "the loop is stuck: {stuck:.1?} in one iteration, in its {phase}, running {doing}{}; \
             no player gets an answer until it returns (server.watchdog = {:?})",
            hint(doing),
            self.limit
        );
    }
}

/// What to look at, for the kinds of code that name a site.
fn hint(doing: Doing) -> &'static str {
    match doing {
        Doing::Nothing => "",
        _ => " — look for a blocking call or an endless loop there",
    }
}
