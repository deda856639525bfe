//! The archiver: runs rollups (and the console's prunes) off the loop, one at a time.
//!
//! The shard asks for a rollup at startup and after every completed save. A request while a
//! run is going folds into one more run after it (a run looks at everything on disk, so one
//! is enough however many saves completed meanwhile). The work itself happens on a
//! low-priority background thread; the loop only starts it and hears how it went. The
//! one-at-a-time bookkeeping is the crate's single flight (`persist/single_flight.rs`), as
//! for saves; a request answers with its [`Request`] outcome.
//!
//! Owns what a run is, and its log lines. Must never block the loop.

use std::future::Future;
use std::io;
use std::rc::Rc;

use jiff::Timestamp;

use super::rollup::{self, Period, Plan};
use crate::persist::error::{Operation, PersistError};
use crate::persist::single_flight::{Request, SingleFlight};
use crate::persist::{Clock, Layout, background};

/// How the last run went.
#[derive(Debug, Clone)]
pub struct LastRun {
    /// When the run started (the shard's wall clock).
    pub at: Timestamp,
    /// What it wrote, pruned and deleted, or the error that stopped it.
    pub outcome: Result<rollup::Report, PersistError>,
}

/// The shard's archiver; clones share it. Lives on the loop thread.
#[derive(Clone)]
pub struct Archiver {
    inner: Rc<Inner>,
    flight: SingleFlight<Job, LastRun>,
}

struct Inner {
    layout: Layout,
    plan: Plan,
    clock: Clock,
    /// Called on the loop after every run ([`Archiver::after_each_run`]).
    after_run: AfterRun,
}

type AfterRun = Rc<std::cell::RefCell<Vec<Box<dyn Fn(&LastRun)>>>>;

/// What a run does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    Rollup,
    Prune,
}

impl Job {
    fn operation(self) -> Operation {
        match self {
            Job::Rollup => Operation::Rollup,
            Job::Prune => Operation::Prune,
        }
    }
}

impl Archiver {
    /// An archiver of the saves and backups `layout` names, running `plan`, reading the time
    /// from `clock`. Nothing runs until a request.
    pub fn new(layout: Layout, plan: Plan, clock: Clock) -> Archiver {
        let inner = Rc::new(Inner {
            layout,
            plan,
            clock,
            after_run: AfterRun::default(),
        });
        let runs = inner.clone();
        Archiver {
            inner,
            flight: SingleFlight::new(move |job| runs.run(job)),
        }
    }

    /// Starts a rollup, or queues one behind the run that is going.
    pub fn request(&self) -> Request {
        self.start(Job::Rollup)
    }

    /// Applies retention and age pruning now (a full rollup does that too).
    pub fn prune(&self) -> Request {
        self.start(Job::Prune)
    }

    fn start(&self, job: Job) -> Request {
        // A rollup prunes as well, so one queued rollup covers either request.
        let job = if self.flight.is_running() {
            Job::Rollup
        } else {
            job
        };
        self.flight.request(job)
    }

    /// Waits until no run is going or queued.
    pub async fn idle(&self) {
        self.flight.idle().await
    }

    /// Runs finished since start.
    pub fn runs(&self) -> u64 {
        self.flight.finished()
    }

    /// The last finished run, if one has finished.
    pub fn last(&self) -> Option<LastRun> {
        self.flight.last()
    }

    /// A run is going now (on its background thread).
    pub fn is_running(&self) -> bool {
        self.flight.is_running()
    }

    /// What each run does: where archives go, their format, the retention.
    pub fn plan(&self) -> &Plan {
        &self.inner.plan
    }

    /// Calls `f` on the loop thread after every run that ends (rollup or prune), with how it
    /// went: the off-site uploader looks for new archives then.
    pub fn after_each_run(&self, f: impl Fn(&LastRun) + 'static) {
        self.inner.after_run.borrow_mut().push(Box::new(f));
    }
}

impl Inner {
    /// Starts `job` on a background thread now; the future returned hears how it went (and
    /// logs it).
    fn run(&self, job: Job) -> impl Future<Output = LastRun> + use<> {
        let (layout, plan) = (self.layout.clone(), self.plan.clone());
        let now = self.clock.now();
        let work = tokio::task::spawn_blocking(move || {
            background::run("shardloop-archive", move || match job {
                Job::Rollup => rollup::run(&layout, &plan, now).map_err(|e| e.error),
                Job::Prune => rollup::prune(&plan, now).map(|pruned| rollup::Report {
                    pruned,
                    ..rollup::Report::default()
                }),
            })
        });
        let dir = self.plan.dir.clone();
        let after_run = self.after_run.clone();
        async move {
            let thread = |step, source| PersistError::new(job.operation(), step, &dir, source);
            let outcome = match work.await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(e)) => Err(thread("starting the archive thread for", e)),
                Err(e) => Err(thread(
                    "running the archive thread for",
                    io::Error::other(format!("the thread died: {e}")),
                )),
            };
            log(&outcome);
            let last = LastRun { at: now, outcome };
            after_run.borrow().iter().for_each(|f| f(&last));
            last
        }
    }
}

fn log(outcome: &Result<rollup::Report, PersistError>) {
    match outcome {
        Ok(report) => {
            for (path, why) in &report.set_aside {
                tracing::warn!(
                    path = %path.display(),
                    "an archive file did not verify ({why}); it was set aside under this \
                     name, its period will be archived again and its backups are kept"
                );
            }
            for w in &report.written {
                tracing::info!(
                    kind = %w.period,
                    path = %w.path.display(),
                    input_bytes = w.input_bytes,
                    archive_bytes = w.archive_bytes,
                    took = ?w.took,
                    "archive written"
                );
            }
            if !report.held.is_empty() {
                tracing::info!(
                    archives_held = report.held.len(),
                    "archives retention would delete are kept until their off-site copy is verified"
                );
            }
            if !report.pruned.is_empty() || !report.deleted_backups.is_empty() {
                tracing::info!(
                    archives_pruned = report.pruned.len(),
                    backups_deleted = report.deleted_backups.len(),
                    "archives and backups tidied"
                );
            }
        }
        Err(e) => tracing::error!("{e}"),
    }
}

/// The console's `archivestatus`: per kind, how many archives and their bytes; the last
/// run; when the next is due. Reads three small directories (a few `stat`s).
pub fn status(archiver: &Archiver, next_save: Option<Timestamp>, now: Timestamp) -> String {
    let plan = archiver.plan();
    let mut out = String::new();
    for period in Period::ALL {
        let found = rollup::archives(plan, period).unwrap_or_default();
        let bytes: u64 = found
            .iter()
            .filter_map(|(_, p)| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        let newest = found.last().map_or("none".to_owned(), |(k, _)| k.clone());
        out.push_str(&format!(
            "{:<8} {:>3} archives, {:>10} bytes, newest {newest} (keeping {})\n",
            period.to_string(),
            found.len(),
            bytes,
            plan.retention[period as usize]
        ));
    }
    let backups = rollup::backups(&archiver.inner.layout).unwrap_or_default();
    out.push_str(&format!(
        "backups  {} in {} (keeping {} once archived)\n",
        backups.len(),
        archiver.inner.layout.backups.display(),
        plan.keep_backups
    ));
    let last = match archiver.last() {
        None => "no run yet".to_owned(),
        Some(LastRun { at, outcome: Ok(r) }) => format!(
            "{at}: {} written, {} pruned, {} backups deleted in {:.2?}",
            r.written.len(),
            r.pruned.len(),
            r.deleted_backups.len(),
            r.took
        ),
        Some(LastRun {
            at,
            outcome: Err(e),
        }) => format!("{at}: FAILED: {e}"),
    };
    out.push_str(&format!("last run {last}\n"));
    let hour_ends = Period::Hourly
        .start(&Period::Hourly.key(now, &plan.zone), &plan.zone)
        .map(|start| start + jiff::SignedDuration::from_hours(1));
    out.push_str(&format!(
        "next run after the next save{}; the current hour ends at {}",
        next_save.map_or(String::new(), |t| format!(" ({t})")),
        hour_ends.map_or("?".to_owned(), |t| t.to_string()),
    ));
    if archiver.is_running() {
        out.push_str("\na run is going now");
    }
    out
}
