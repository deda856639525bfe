//! The archiver: runs rollups (and the console's prunes) off the loop, one at a time.
//!
//! The shard asks for a rollup at startup and after every completed save. A request while a
//! run is going folds into one more run after it (a run looks at everything on disk, so one
//! is enough however many saves completed meanwhile). The work itself happens on a
//! low-priority background thread; the loop only starts it and hears how it went. The
//! one-at-a-time bookkeeping is the crate's single flight (`persist/single_flight.rs`), as
//! for saves; a request answers with its [`Request`] outcome.
//!
//! `archivestatus` reads what is on disk from an `Inventory` that each run takes on its
//! thread as it ends (and the archiver once at startup), so the console never lists a
//! directory on the loop.
//!
//! Owns what a run is, and its log lines. Must never block the loop.

use std::cell::RefCell;
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
    /// What is on disk, as the last run (or startup) found it.
    inventory: Rc<RefCell<Inventory>>,
    /// Called on the loop after every run ([`Archiver::after_each_run`]).
    after_run: AfterRun,
}

/// The archives of each kind and the backups, as a run found them on disk.
#[derive(Debug, Clone, Default)]
struct Inventory {
    /// Per [`Period`] (in [`Period::ALL`] order): how many archives, their bytes, the newest.
    periods: Vec<(usize, u64, Option<String>)>,
    /// Backups waiting in `Backups/`.
    backups: usize,
}

impl Inventory {
    /// Lists the archive directories and the backups (a few `stat`s): never on the loop,
    /// but at startup and on a run's thread.
    fn read(plan: &Plan, layout: &Layout) -> Inventory {
        let periods = Period::ALL
            .iter()
            .map(|&period| {
                let found = rollup::archives(plan, period).unwrap_or_default();
                let bytes = found
                    .iter()
                    .filter_map(|(_, p)| std::fs::metadata(p).ok())
                    .map(|m| m.len())
                    .sum();
                (found.len(), bytes, found.last().map(|(k, _)| k.clone()))
            })
            .collect();
        let backups = rollup::backups(layout).unwrap_or_default().len();
        Inventory { periods, backups }
    }
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
    /// from `clock`. Nothing runs until a request; what is on disk is read once now (at
    /// startup, before the shard is ready).
    pub fn new(layout: Layout, plan: Plan, clock: Clock) -> Archiver {
        let inventory = Rc::new(RefCell::new(Inventory::read(&plan, &layout)));
        let inner = Rc::new(Inner {
            layout,
            plan,
            clock,
            inventory,
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
            background::run("shardloop-archive", move || {
                let outcome = match job {
                    Job::Rollup => rollup::run(&layout, &plan, now),
                    Job::Prune => rollup::prune_run(&plan, now),
                };
                (outcome, Inventory::read(&plan, &layout))
            })
        });
        let inventory = self.inventory.clone();
        let dir = self.plan.dir.clone();
        let after_run = self.after_run.clone();
        async move {
            let thread = |step, source| {
                let e = PersistError::new(job.operation(), step, &dir, source);
                tracing::error!("{e}");
                Err(e)
            };
            let outcome = match work.await {
                Ok(Ok((outcome, found))) => {
                    *inventory.borrow_mut() = found;
                    log(&outcome);
                    outcome.map_err(|e| e.error)
                }
                Ok(Err(e)) => thread("starting the archive thread for", e),
                Err(e) => thread(
                    "running the archive thread for",
                    io::Error::other(format!("the thread died: {e}")),
                ),
            };
            let last = LastRun { at: now, outcome };
            after_run.borrow().iter().for_each(|f| f(&last));
            last
        }
    }
}

/// Logs what a run did, and each thing that failed in it (the rest of the run went on).
fn log(outcome: &Result<rollup::Report, rollup::RollupError>) {
    let report = match outcome {
        Ok(report) => report,
        Err(e) => &*e.partial,
    };
    for (path, why) in &report.set_aside {
        tracing::warn!(
            path = %path.display(),
            "an archive file did not verify ({why}); it was set aside under this \
             name, its period will be archived again and its backups are kept"
        );
    }
    for (path, why) in &report.quarantined {
        tracing::warn!(
            path = %path.display(),
            "a backup is not whole ({why}); it was quarantined under this name (never \
             archived or deleted by the shard: inspect it, then remove it), and its period \
             is archived from the next newest backup"
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
    if report.aged_out_later > 0 {
        tracing::warn!(
            left = report.aged_out_later,
            "more archives are older than archive.max_age than one run deletes (at most {} \
             of each kind, never the newest): the rest go in later runs. If the system clock \
             jumped forward, set it right and nothing more is deleted",
            rollup::MAX_AGED_OUT_PER_RUN
        );
    }
    for e in &report.failed {
        tracing::error!("{e}");
    }
}

/// The console's `archivestatus`: per kind, how many archives and their bytes; the last
/// run; when the next is due. Reads no disk: what is on it comes from the last run's
/// `Inventory` (or startup's).
pub fn status(archiver: &Archiver, next_save: Option<Timestamp>, now: Timestamp) -> String {
    let plan = archiver.plan();
    let inventory = archiver.inner.inventory.borrow();
    let mut out = String::new();
    for (period, (count, bytes, newest)) in Period::ALL.iter().zip(&inventory.periods) {
        out.push_str(&format!(
            "{:<8} {:>3} archives, {:>10} bytes, newest {} (keeping {})\n",
            period.to_string(),
            count,
            bytes,
            newest.as_deref().unwrap_or("none"),
            plan.retention[*period as usize]
        ));
    }
    out.push_str(&format!(
        "backups  {} in {} (keeping {} once archived)\n",
        inventory.backups,
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
