//! Logging: the shard's log lines go to stderr through a bounded queue drained by a thread of
//! its own, so a slow or stuck stderr (a backed-up pipe, a stalled log collector) never stalls
//! the thread that logs — above all the loop thread.
//!
//! This module owns the subscriber's set-up for the binary ([`init`]), the queue ([`queue`]),
//! the count of lines it had to drop ([`dropped`]) and the periodic warning that reports them
//! ([`Watch`]). It must never make a logging thread wait for the sink: past [`QUEUE_LINES`]
//! waiting lines, new ones are dropped and counted. Its guard must outlive every line worth
//! keeping: dropping it ([`LogGuard`]) or [`exit`] writes out what is queued.

mod queue;
mod watch;

use std::io::IsTerminal;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tracing_appender::non_blocking::{ErrorCounter, WorkerGuard};
use tracing_subscriber::EnvFilter;

pub use queue::{QUEUE_LINES, queue};
pub use watch::Watch;

/// How often the drop watch looks at the counter: at most one warning per period.
pub const WATCH_EVERY: Duration = Duration::from_secs(10);

/// The line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One human-readable line per event.
    Pretty,
    /// One JSON object per line, for log collectors.
    Json,
}

/// The installed logging: the watch first (its last report still goes out), then the queue.
struct Installed {
    _watch: Option<Watch>,
    _queue: WorkerGuard,
}

static INSTALLED: Mutex<Option<Installed>> = Mutex::new(None);
static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Keeps logging installed; dropping it writes out every queued line (waiting for the sink at
/// most about a second) and stops the log threads. Hold it until the process ends.
#[must_use = "dropping it stops logging"]
pub struct LogGuard(());

impl Drop for LogGuard {
    fn drop(&mut self) {
        finish();
    }
}

/// Installs the process's subscriber: `RUST_LOG` filters (default `info`), lines in `format`
/// go to stderr through the queue, colours only on a terminal. Panics if a global subscriber
/// is set already.
pub fn init(format: Format) -> LogGuard {
    let (writer, queue) = queue(std::io::stderr(), QUEUE_LINES);
    let dropped = writer.error_counter();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal())
        // Formatting errors would be reported with `eprintln!`, straight to a stderr that may
        // be dead; the queue never fails a write, so nothing worth reporting is lost.
        .log_internal_errors(false);
    match format {
        Format::Pretty => logs.init(),
        Format::Json => logs.json().init(),
    }
    let watch = Watch::start(dropped.clone(), WATCH_EVERY)
        .inspect_err(|e| tracing::warn!("no log drop watch ({e}): dropped lines go unreported"))
        .ok();
    let _ = DROPPED.set(dropped);
    *lock() = Some(Installed {
        _watch: watch,
        _queue: queue,
    });
    LogGuard(())
}

/// Log lines dropped since [`init`] because the sink was too slow (0 before it).
#[must_use]
pub fn dropped() -> u64 {
    DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
}

/// Writes out every queued line, then ends the process with `code`: for exits that skip
/// destructors, so that their last lines are not lost with the queue.
pub fn exit(code: i32) -> ! {
    finish();
    std::process::exit(code)
}

/// Stops the watch (after its last report) and drains the queue; later calls do nothing.
fn finish() {
    let installed = lock().take();
    drop(installed);
}

fn lock() -> std::sync::MutexGuard<'static, Option<Installed>> {
    INSTALLED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
