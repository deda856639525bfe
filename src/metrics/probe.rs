//! The loop side of the endpoint: a task on the loop that answers the HTTP thread's requests
//! with a [`Snapshot`] of what the [`Sources`] give.
//!
//! The HTTP thread sends a [`Request`] on a bounded channel; the task copies the loop's
//! counters and the shard's figures and sends them back on the request's oneshot. Sending never
//! waits (a oneshot holds one value), so the loop never waits on the HTTP thread; the HTTP
//! thread waits for the answer with a timeout. The task ends when the HTTP thread drops its
//! end of the channel, or with the loop.
//!
//! It must never do more on the loop than copy: formatting, drawing and file system walks
//! happen on the HTTP thread.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::net::NetStats;
use crate::persist::archive::archiver::LastRun;
use crate::runtime::history::LoopSecond;
use crate::runtime::{self, LagHistogram, LoopStats};

use super::saves::LastSave;

/// Requests that may wait for the loop at once; more are answered "busy" by the HTTP thread.
pub const QUEUE: usize = 8;

/// What the shard gives the endpoint, as closures it fills at wiring time. They run on the
/// loop thread (they may hold `Rc`s) and must be quick: they copy, nothing more.
pub struct Sources {
    /// The network's counters.
    pub net: Box<dyn Fn() -> NetStats>,
    /// The world's counts.
    pub world: Box<dyn Fn() -> WorldCounts>,
    /// The per-second history after uptime second `since` (all of it for `None`), oldest
    /// first. An empty `Vec` while the loop keeps no history.
    pub history: Box<dyn Fn(Option<u64>) -> Vec<LoopSecond>>,
    /// Saves and archives.
    pub persist: Box<dyn Fn() -> PersistFacts>,
}

/// The world's size and who is in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorldCounts {
    pub items: u64,
    pub mobiles: u64,
    pub players: u64,
    /// Timers armed on the loop's wheel.
    pub live_timers: u64,
}

/// Saves and archives, as the loop knows them.
#[derive(Debug, Clone, Default)]
pub struct PersistFacts {
    /// The last save that ended, if any.
    pub last_save: Option<LastSave>,
    /// A save is writing now.
    pub saving: bool,
    /// `None` when archives are off.
    pub archive: Option<ArchiveFacts>,
}

/// The archiver's state.
#[derive(Debug, Clone)]
pub struct ArchiveFacts {
    /// Rollup and prune runs finished since start.
    pub runs: u64,
    pub running: bool,
    pub last: Option<LastRun>,
}

/// What the HTTP thread wants: `/metrics` needs only the history it has not seen yet, the
/// page all of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Counters, and the history after this uptime second (`None`: all of it).
    Metrics { history_after: Option<u64> },
    /// Counters and the whole history.
    Page,
}

/// One request to the loop.
pub struct Request {
    pub want: Want,
    pub reply: oneshot::Sender<Snapshot>,
}

/// Everything one answer carries (plain data: it crosses to the HTTP thread).
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub stats: LoopStats,
    /// Wheel lag of every fired tick since the loop was built.
    pub lag: LagHistogram,
    /// CPU time of the loop thread (user + system).
    pub loop_cpu: Duration,
    pub net: NetStats,
    pub world: WorldCounts,
    pub persist: PersistFacts,
    /// Oldest first.
    pub history: Vec<LoopSecond>,
}

/// Starts the answering task on this thread's loop; requests go to the returned sender.
///
/// # Panics
/// Off the loop thread.
pub fn start(sources: Sources) -> mpsc::Sender<Request> {
    let (tx, mut rx) = mpsc::channel::<Request>(QUEUE);
    // Detached: it ends when the HTTP thread drops the sender, or with the loop.
    let _task = runtime::spawn(async move {
        while let Some(request) = rx.recv().await {
            // The requester may have given up (timeout): then nobody needs the answer.
            let _ = request.reply.send(snapshot(&sources, request.want));
        }
    });
    tx
}

/// Copies the loop's figures (on the loop thread).
pub fn snapshot(sources: &Sources, want: Want) -> Snapshot {
    let history = match want {
        Want::Metrics { history_after } => (sources.history)(history_after),
        Want::Page => (sources.history)(None),
    };
    Snapshot {
        stats: runtime::stats(),
        lag: runtime::lag_histogram(),
        loop_cpu: thread_cpu_time(),
        net: (sources.net)(),
        world: (sources.world)(),
        persist: (sources.persist)(),
        history,
    }
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    // SAFETY: clock_gettime writes into the zeroed timespec we own; the clock id is valid on
    // every Linux the shard supports.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        if libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) != 0 {
            return Duration::ZERO;
        }
        ts
    };
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}
