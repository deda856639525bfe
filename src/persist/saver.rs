//! The saver: runs world saves on the loop, one at a time.
//!
//! A save is a snapshot on the loop thread (the only stall the game sees: the world frozen,
//! its pages shared rather than copied, see `snapshot.rs`) and then [`save::write`] on a
//! background thread, which copies the frozen entities out and writes them. Saves run in a [`SingleFlight`]: while one is
//! writing, any number of further requests fold into a single queued save, started (with a
//! fresh snapshot) when the current one ends: saves never overlap and never pile up.
//!
//! What happens is told through [`Notice`]s (the shard turns them into player broadcasts and
//! log lines); callers that need the outcome await [`Saver::save`].
//!
//! Owns what a save run is and what it tells. Must never block the loop: nothing here waits
//! on the disk.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::clock::Clock;
use super::error::{Operation, PersistError};
use super::layout::{Layout, Replaced};
use super::reserve::Reserve;
use super::save::{self, Saved};
use super::single_flight::{Request, SingleFlight};
use super::snapshot::Capture;
use crate::world::{Mobile, Serial, World};

/// What a finished save reports.
#[derive(Debug, Clone)]
pub struct Report {
    /// How long the loop was held for the snapshot.
    pub stall: Duration,
    /// From the snapshot to the save in place.
    pub took: Duration,
    /// Bytes of the save's data files (the manifest's count).
    pub bytes: u64,
    /// Items saved.
    pub items: u64,
    /// Mobiles saved (players left out, as `SaverConfig::keep` says).
    pub mobiles: u64,
    /// When the snapshot was taken: the save's time, and its backup's name later.
    pub created: Timestamp,
    /// What became of the save this one replaced.
    pub replaced: Replaced,
}

/// Something players or staff should hear about.
#[derive(Debug, Clone)]
pub enum Notice {
    /// An autosave is this far away.
    Warning(Duration),
    /// A save has started.
    Saving,
    /// A save is on disk and in place; the report says how long it took and what it holds.
    Saved(Report),
    /// A save failed (the previous save is intact); the error says where and why.
    Failed(PersistError),
}

impl fmt::Display for Notice {
    /// The line players see.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::Warning(d) => write!(f, "The world will save in {}.", spoken(*d)),
            Notice::Saving => f.write_str("The world is saving, please wait."),
            Notice::Saved(r) => write!(
                f,
                "World save completed in {:.2} seconds.",
                r.took.as_secs_f64()
            ),
            Notice::Failed(_) => f.write_str("The world save failed; staff have been told."),
        }
    }
}

/// "1 minute", "30 seconds", "2 hours": whole units, as a person would say it.
fn spoken(d: Duration) -> String {
    let secs = d.as_secs_f64().round() as u64;
    let (n, unit) = match secs {
        s if s >= 3600 && s % 3600 == 0 => (s / 3600, "hour"),
        s if s >= 60 && s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// Everything the saver needs, given once.
pub struct SaverConfig {
    /// Where the save goes and where the one it replaces is backed up.
    pub layout: Layout,
    /// Serialization workers.
    pub threads: usize,
    /// The wall clock a save's time is read from.
    pub clock: Clock,
    /// Which mobiles a save keeps (the shard leaves out players).
    pub keep: Box<dyn Fn(&Mobile) -> bool>,
    /// Called on the loop thread with each notice as it happens (the shard tells players and
    /// the log).
    pub notices: Box<dyn Fn(&Notice)>,
}

/// A save's outcome, as every waiter and listener gets it.
type Outcome = Result<Report, PersistError>;

/// The world's saver; clones share it. Lives on the loop thread.
#[derive(Clone)]
pub struct Saver {
    flight: SingleFlight<(), Outcome>,
    inner: Rc<Inner>,
}

struct Inner {
    world: Rc<RefCell<World>>,
    config: SaverConfig,
    /// The disk reserve saves give up when the disk is full ([`Saver::keep_reserve`]).
    reserve: RefCell<Option<Reserve>>,
    /// Lists the mobiles to leave out, in place of asking `keep` of each ([`Saver::leave_out`]).
    left_out: RefCell<Option<LeftOut>>,
}

/// Lists the mobiles a save leaves out, at the instant of its snapshot.
type LeftOut = Rc<dyn Fn() -> Vec<Serial>>;

impl Saver {
    /// The saver of `world`. Nothing is saved until [`request`](Self::request).
    pub fn new(world: Rc<RefCell<World>>, config: SaverConfig) -> Saver {
        let inner = Rc::new(Inner {
            world,
            config,
            reserve: RefCell::new(None),
            left_out: RefCell::new(None),
        });
        let runs = inner.clone();
        Saver {
            flight: SingleFlight::new(move |()| Inner::start(&runs)),
            inner,
        }
    }

    /// Keeps `reserve` from now on: it is made now (off the loop) and after every save that
    /// finds room for it, and a save that finds the disk full gives it up and writes again
    /// (see [`super::reserve`]). On the loop thread, inside the runtime.
    pub(crate) fn keep_reserve(&self, reserve: Reserve) {
        let making = reserve.clone();
        *self.inner.reserve.borrow_mut() = Some(reserve);
        drop(tokio::task::spawn_blocking(move || making.keep()));
    }

    /// From the next snapshot on, leaves out the mobiles `list` returns (called on the loop
    /// at the instant of each snapshot), and what they wear or carry, instead of asking
    /// [`SaverConfig::keep`] of every mobile: the snapshot then costs the loop nothing per
    /// mobile. `list` must name every mobile `keep` refuses (the shard lists its logged-in
    /// players, the mobiles its `keep` refuses).
    pub fn leave_out(&self, list: impl Fn() -> Vec<Serial> + 'static) {
        *self.inner.left_out.borrow_mut() = Some(Rc::new(list));
    }

    /// Starts a save, or queues one behind the save that is writing. On the loop thread.
    pub fn request(&self) -> Request {
        self.flight.request(())
    }

    /// Saves the world as it is now (or as it is when the save writing now ends) and waits
    /// until that save is on disk.
    pub async fn save(&self) -> Outcome {
        self.flight.request_and_wait(()).await
    }

    /// Waits until no save is writing or queued.
    pub async fn idle(&self) {
        self.flight.idle().await
    }

    /// A save is writing now.
    pub fn is_writing(&self) -> bool {
        self.flight.is_running()
    }

    /// Saves that have finished (successfully or not) since start.
    pub fn finished(&self) -> u64 {
        self.flight.finished()
    }
}

impl Inner {
    /// Announces a save and returns it, to run on the loop; its outcome is announced too.
    fn start(this: &Rc<Inner>) -> impl Future<Output = Outcome> + use<> {
        (this.config.notices)(&Notice::Saving);
        let this = this.clone();
        async move {
            let outcome = this.run().await;
            match &outcome {
                Ok(r) => (this.config.notices)(&Notice::Saved(r.clone())),
                Err(e) => (this.config.notices)(&Notice::Failed(e.clone())),
            }
            outcome
        }
    }

    /// One save: the world frozen on the loop (the stall), everything else off it.
    async fn run(&self) -> Outcome {
        let saves = &self.config.layout.saves;
        let began = Instant::now();
        // Timed by the loop profile as its own part, out of the phase it runs in.
        let left_out = self.left_out.borrow().clone();
        let capture = crate::runtime::time_save_snapshot(|| {
            let (world, now) = (&self.world.borrow(), self.config.clock.now());
            match left_out {
                Some(list) => Capture::leaving_out(world, now, list()),
                None => Capture::take(world, now, &self.config.keep),
            }
        });
        let stall = began.elapsed();
        tracing::debug!(
            ?stall,
            pages = capture.frozen().page_count(),
            "world save: snapshot taken"
        );
        let layout = self.config.layout.clone();
        let threads = self.config.threads;
        let reserve = self.reserve.borrow().clone();
        let job = tokio::task::spawn_blocking(move || {
            save::write_capture_in_background(&layout, capture, threads, reserve.as_ref())
        });
        match job.await {
            Ok(Ok(saved)) => Ok(report(saved, stall, began.elapsed())),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(thread_died("writing", saves, e)),
        }
    }
}

/// A blocking-pool thread of the save panicked (or was cancelled at shutdown).
fn thread_died(step: &'static str, saves: &Path, e: tokio::task::JoinError) -> PersistError {
    let source = io::Error::other(format!("the thread doing it died: {e}"));
    PersistError::new(Operation::Save, step, saves, source)
}

fn report(saved: Saved, stall: Duration, took: Duration) -> Report {
    Report {
        stall,
        took,
        bytes: saved.manifest.data_bytes(),
        items: saved.manifest.items,
        mobiles: saved.manifest.mobiles,
        created: saved.manifest.created,
        replaced: saved.replaced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_spoken_in_whole_units() {
        let w = |s| Notice::Warning(Duration::from_secs(s)).to_string();
        assert_eq!(w(60), "The world will save in 1 minute.");
        assert_eq!(w(120), "The world will save in 2 minutes.");
        assert_eq!(w(90), "The world will save in 90 seconds.");
        assert_eq!(w(7200), "The world will save in 2 hours.");
        assert_eq!(w(1), "The world will save in 1 second.");
    }
}
