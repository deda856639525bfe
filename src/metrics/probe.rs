//! What the loop gives the endpoint ([`Sources`], copied into a [`Snapshot`]), and the task on
//! the loop that answers the status page's requests.
//!
//! `/metrics` does not ask: it reads what [`super::publish`] copies once a second. The status
//! page asks, because it draws the whole 15-minute history, which would be wasteful to copy
//! every second for a page a person loads now and then, and a person does not notice the wait
//! for the loop's next iteration.
//!
//! The HTTP thread sends a [`Request`] on a bounded channel; the task copies the loop's
//! counters, the shard's figures and the history and sends them back on the request's
//! oneshot. Sending never waits (a oneshot holds one value), so the loop never waits on the
//! HTTP thread; the HTTP thread waits for the answer with a timeout. The task ends when the
//! HTTP thread drops its end of the channel, or with the loop.
//!
//! It must never do more on the loop than copy: formatting, drawing and file system walks
//! happen on the HTTP thread.

use std::rc::Rc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::net::NetStats;
use crate::persist::archive::archiver::LastRun;
use crate::persist::archive::upload::Status as OffsiteStatus;
use crate::runtime::history::LoopSecond;
use crate::runtime::profile::thread_cpu_time;
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
    /// Items in the world (on the ground, in containers, worn).
    pub items: u64,
    /// Mobiles in the world: NPCs and creatures, and players' characters.
    pub mobiles: u64,
    /// Players logged in now.
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
    /// The off-site uploader's state; `None` when `[archive.remote]` is off.
    pub offsite: Option<OffsiteStatus>,
}

/// The archiver's state.
#[derive(Debug, Clone)]
pub struct ArchiveFacts {
    /// Rollup and prune runs finished since start.
    pub runs: u64,
    /// A rollup or prune is running now.
    pub running: bool,
    /// The last finished run and how it went; `None` before the first ends.
    pub last: Option<LastRun>,
}

/// One request to the loop (the status page's: it wants the whole history, which the
/// per-second publish does not carry).
pub struct Request {
    /// Where the loop sends its answer; dropped unanswered when the loop is gone.
    pub reply: oneshot::Sender<Snapshot>,
}

/// Everything one answer carries (plain data: it crosses to the HTTP thread).
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The loop's counters since it was built.
    pub stats: LoopStats,
    /// Wheel lag of every fired tick since the loop was built.
    pub lag: LagHistogram,
    /// CPU time of the loop thread (user + system).
    pub loop_cpu: Duration,
    /// The network server's counters since it started.
    pub net: NetStats,
    /// The world's size and who is in it, now.
    pub world: WorldCounts,
    /// Saves and archives, as the loop knows them now.
    pub persist: PersistFacts,
    /// Oldest first.
    pub history: Vec<LoopSecond>,
}

/// Starts the answering task on this thread's loop; requests go to the returned sender.
///
/// # Panics
/// Off the loop thread.
pub fn start(sources: Rc<Sources>) -> mpsc::Sender<Request> {
    let (tx, mut rx) = mpsc::channel::<Request>(QUEUE);
    // Detached: it ends when the HTTP thread drops the sender, or with the loop.
    let _task = runtime::spawn(async move {
        while let Some(request) = rx.recv().await {
            // The requester may have given up (timeout): then nobody needs the answer.
            let _ = request.reply.send(snapshot(&sources));
        }
    });
    tx
}

/// Copies the loop's figures with the whole history (on the loop thread).
pub fn snapshot(sources: &Sources) -> Snapshot {
    Snapshot {
        history: (sources.history)(None),
        ..counters(sources)
    }
}

/// Copies the loop's counters, without history (on the loop thread).
pub fn counters(sources: &Sources) -> Snapshot {
    Snapshot {
        stats: runtime::stats(),
        lag: runtime::lag_histogram(),
        loop_cpu: thread_cpu_time(),
        net: (sources.net)(),
        world: (sources.world)(),
        persist: (sources.persist)(),
        history: Vec::new(),
    }
}
