//! The uploader: every archive a rollup wrote and verified goes off-site, on a thread of its
//! own, however long the store is away.
//!
//! A pass, each time a rollup or prune ends (and once at start):
//! 1. every archive in `Hourly/`, `Daily/`, `Monthly/` without a valid mark (below), oldest
//!    first, three at a time, is summed (size, SHA-256) and looked up in the bucket: an object there that matches is
//!    marked; a name taken by another object is a conflict (the local archive is kept, never
//!    overwritten, and the operator told); a free name is uploaded (`Store::upload`, never
//!    over an object), looked up again, and marked only if its size and checksum are the
//!    file's;
//! 2. retention in the bucket, as the rollup plan says for the disk (keep the newest
//!    `<kind>_retention`, and with `prune` none older than `max_age`), counting and deleting
//!    only objects named as archives under the prefix that carry the checksum a shard writes:
//!    a foreign object under the prefix is never deleted, nor counted.
//!
//! A pass stopped by the store (unreachable, refusing, failing) is tried again after
//! `retry.first`, then twice as long each time up to `retry.max`, for as long as it takes; a
//! new rollup tries at once. Nothing is lost meanwhile: an archive is deleted by local
//! retention only once it is marked (`rollup` asks `mark::is_off_site`).
//!
//! A mark is a small file, `Archives/.offsite/<Kind>/<archive name>`, written atomically after
//! the upload was verified: the bucket, the object and the file's size, SHA-256 and identity
//! (inode, modification time). A file that is not the one marked (an archive set aside and
//! written again under its name) has no valid mark. Delete `Archives/.offsite/` to have every
//! archive looked up in the bucket again (nothing is uploaded twice: a matching object is
//! only marked).
//!
//! The loop only starts the thread, wakes it and hears its [`Status`] (posted back through a
//! channel read by a task on the loop): it never waits on the network, a lock of this thread
//! or the disk this thread reads.
//!
//! Owns the uploads' order, retries, marks and the bucket's retention. Must never run on the
//! loop thread, overwrite an object, delete an object a shard did not write, or delete a local
//! archive (that is retention's, in `rollup`).

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use tokio::sync::{mpsc, oneshot};

use super::check;
use super::format::Format;
use super::mark::{is_off_site, write_mark};
use super::remote::{Backoff, Cause, Failure, Store, Sum, sum_bytes, sum_file};
use super::rollup::{self, Period, Plan};
use crate::persist::{Clock, background};

/// Archives uploaded at once (each below the multipart size is read whole into memory, so
/// this bounds the memory uploads take: a few times `DEFAULT_MULTIPART_BYTES`).
const UPLOADS_IN_FLIGHT: usize = 3;

/// The uploader's state, as the loop last heard it: `archivestatus` and `/metrics` read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// Where archives go (`s3://bucket/prefix`).
    pub url: String,
    /// Archives waiting for an off-site copy that is verified (those uploading included).
    pub queue: usize,
    /// Archives uploaded and verified since start.
    pub uploaded: u64,
    /// Their bytes.
    pub uploaded_bytes: u64,
    /// When the last archive was verified off-site (uploaded, or found there already).
    pub last_success: Option<Timestamp>,
    /// Failures since start, by cause (indexed as [`Cause::ALL`]).
    pub failures: [u64; Cause::ALL.len()],
    /// The last failure: when, and what.
    pub last_failure: Option<(Timestamp, Failure)>,
    /// Failed passes in a row (0 after a pass that went through).
    pub failing: u32,
    /// When the next attempt is due after a failure (a new rollup tries at once).
    pub retry_at: Option<Timestamp>,
    /// Archives whose name in the bucket is taken by another object: kept on disk, never
    /// overwritten, until the operator frees the name.
    pub conflicts: Vec<String>,
    /// Objects deleted from the bucket by retention since start.
    pub remote_deleted: u64,
    /// Passes finished since start (with or without a failure).
    pub passes: u64,
}

impl Status {
    /// The failures counted under `cause`.
    pub fn failures(&self, cause: Cause) -> u64 {
        self.failures[cause as usize]
    }
}

impl fmt::Display for Status {
    /// The off-site lines of `archivestatus`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "off-site {}: {} uploaded ({} bytes) since start, last verified {}; {} waiting",
            self.url,
            self.uploaded,
            self.uploaded_bytes,
            self.last_success
                .map_or("never".to_owned(), |t| t.to_string()),
            self.queue
        )?;
        if self.remote_deleted > 0 {
            write!(f, "; {} deleted by retention", self.remote_deleted)?;
        }
        let failures: Vec<String> = Cause::ALL
            .iter()
            .filter(|c| self.failures(**c) > 0)
            .map(|c| format!("{c} {}", self.failures(*c)))
            .collect();
        if !failures.is_empty() {
            write!(f, "\nfailures {}", failures.join(", "))?;
        }
        if let Some((at, failure)) = &self.last_failure {
            write!(f, "\nlast failure {at}: {failure}")?;
        }
        if let Some(at) = self.retry_at {
            write!(
                f,
                "\nfailing ({} in a row): next try at {at}, or at the next rollup",
                self.failing
            )?;
        }
        for name in &self.conflicts {
            write!(
                f,
                "\nCONFLICT {name}: its name in the bucket holds another object; it stays on \
                 disk until that name is free"
            )?;
        }
        Ok(())
    }
}

/// What the uploader's thread tells the loop.
enum Event {
    Status(Box<Status>),
    /// A pass ended having verified archives that were not before: retention may now delete
    /// some it held.
    Verified,
}

/// What the loop tells the uploader's thread.
enum Command {
    Wake,
    Stop,
}

/// The uploader, as the loop holds it: clones share it.
#[derive(Clone)]
pub struct Uploader {
    commands: mpsc::UnboundedSender<Command>,
    stopping: Arc<AtomicBool>,
    status: Rc<std::cell::RefCell<Status>>,
    /// Says the thread ended, and how many archives were still waiting then.
    done: Rc<std::cell::RefCell<Option<oneshot::Receiver<usize>>>>,
}

impl Uploader {
    /// Starts the uploader's thread (at low priority, with a runtime of its own) on the
    /// archives `plan` describes, into `store`, retrying as `retry` says, reading the time
    /// from `clock`. A first pass starts at once. `verified` runs on the loop after a pass
    /// that verified archives (the shard asks the archiver for a prune: retention may delete
    /// what it held).
    ///
    /// # Panics
    /// Off the loop thread (it starts a task there that hears the thread).
    pub fn start(
        plan: Plan,
        store: Store,
        retry: Backoff,
        clock: Clock,
        verified: Box<dyn Fn()>,
    ) -> io::Result<Uploader> {
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (events, mut events_rx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = oneshot::channel();
        let stopping = Arc::new(AtomicBool::new(false));
        let status = Status {
            url: store.url().to_string(),
            ..Status::default()
        };
        let worker = Worker {
            shared: Shared {
                plan,
                store,
                clock,
                stopping: stopping.clone(),
            },
            retry,
            status: status.clone(),
            events,
            owned: HashMap::new(),
        };
        std::thread::Builder::new()
            .name("shardloop-offsite".to_owned())
            .spawn(move || {
                background::lower_priority();
                let waiting = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(worker.run(commands_rx)),
                    Err(e) => {
                        tracing::error!("off-site uploads cannot start their runtime: {e}");
                        0
                    }
                };
                let _ = done_tx.send(waiting);
            })?;
        let shared = Rc::new(std::cell::RefCell::new(status));
        let heard = shared.clone();
        // Detached: it ends when the thread drops its sender, or with the loop.
        let _task = crate::runtime::spawn(async move {
            while let Some(event) = events_rx.recv().await {
                match event {
                    Event::Status(status) => *heard.borrow_mut() = *status,
                    Event::Verified => verified(),
                }
            }
        });
        Ok(Uploader {
            commands,
            stopping,
            status: shared,
            done: Rc::new(std::cell::RefCell::new(Some(done_rx))),
        })
    }

    /// A rollup or prune ended: look for new archives now (also ends a wait after a failure).
    pub fn wake(&self) {
        let _ = self.commands.send(Command::Wake);
    }

    /// The uploader's state as last heard (a copy).
    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// Stops the thread after one last pass (what the shutdown's last rollup wrote goes up,
    /// if the store is there), waiting at most `grace` for it (on the loop's clock, without
    /// blocking it): the archives still waiting then. `None` if the thread was still busy: it
    /// finishes the archive it is uploading and starts no other (what it did not do goes at
    /// the next start).
    pub async fn stop(&self, grace: Duration) -> Option<usize> {
        let _ = self.commands.send(Command::Stop);
        let done = self.done.borrow_mut().take()?;
        // The loop's own timer, not tokio's: the shard's loop may park outside tokio's
        // driver (`EventLoopBuilder::owns_its_thread`), which would not see a tokio timer.
        tokio::select! {
            biased;
            waiting = done => Some(waiting.unwrap_or(0)),
            () = crate::timer::pause_for(grace) => {
                self.stopping.store(true, Ordering::Relaxed);
                None
            }
        }
    }
}

/// The uploader's thread.
struct Worker {
    /// What the uploads read: shared by the ones in flight.
    shared: Shared,
    retry: Backoff,
    status: Status,
    events: mpsc::UnboundedSender<Event>,
    /// Objects looked up for retention: (name, size) → carries a shard's checksum.
    owned: HashMap<(String, u64), bool>,
}

/// What every upload of a pass reads.
struct Shared {
    plan: Plan,
    store: Store,
    clock: Clock,
    stopping: Arc<AtomicBool>,
}

/// How one archive's upload ended.
enum Sent {
    /// Uploaded and verified: its bytes.
    Uploaded(u64),
    /// It was there already, verified.
    Found,
    /// Not started: the pass is stopping.
    Skipped,
}

impl Worker {
    /// Passes until stopped; the archives still waiting then.
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) -> usize {
        let mut due = Some(tokio::time::Instant::now());
        loop {
            let woken = tokio::select! {
                command = commands.recv() => command,
                () = wait_until(due) => Some(Command::Wake),
            };
            // Wakes that piled up meanwhile are one pass; a stop is a last pass.
            let Some(mut command) = woken else {
                return self.status.queue;
            };
            while let Ok(more) = commands.try_recv() {
                if matches!(command, Command::Wake) {
                    command = more;
                }
            }
            let last = matches!(command, Command::Stop);
            if self.shared.stopped() {
                return self.status.queue;
            }
            due = match self.pass().await {
                Ok(verified) => {
                    self.status.failing = 0;
                    self.status.retry_at = None;
                    if verified > 0 {
                        let _ = self.events.send(Event::Verified);
                    }
                    None
                }
                Err(_) if self.shared.stopped() => return self.status.queue,
                Err(failure) => Some(self.failed(failure)),
            };
            self.status.passes += 1;
            self.publish();
            if last {
                return self.status.queue;
            }
        }
    }

    fn publish(&self) {
        let _ = self
            .events
            .send(Event::Status(Box::new(self.status.clone())));
    }

    /// Counts and logs a failed pass; when the next is due.
    fn failed(&mut self, failure: Failure) -> tokio::time::Instant {
        let now = self.shared.clock.now();
        self.status.failing += 1;
        self.status.failures[failure.cause as usize] += 1;
        let wait = self.retry.after(self.status.failing);
        self.status.retry_at = now
            .checked_add(jiff::SignedDuration::try_from(wait).unwrap_or_default())
            .ok();
        tracing::warn!(
            cause = %failure.cause,
            failing = self.status.failing,
            retry_in = %humantime::format_duration(wait),
            waiting = self.status.queue,
            "off-site upload failed: {}; nothing local is deleted until it is done",
            failure.message
        );
        self.status.last_failure = Some((now, failure));
        tokio::time::Instant::now() + wait
    }

    /// One pass (module docs): the archives verified off-site by it that were not before.
    /// [`UPLOADS_IN_FLIGHT`] archives go up at once, oldest first; a failure of the store
    /// starts no more (those in flight finish) and fails the pass.
    async fn pass(&mut self) -> Result<usize, Failure> {
        let pending = self.shared.pending()?;
        self.status.queue = pending.len();
        self.publish();
        let shared = &self.shared;
        let failed: std::cell::Cell<bool> = std::cell::Cell::new(false);
        let mut sends = futures::stream::iter(pending)
            .map(|(period, path)| {
                let failed = &failed;
                async move {
                    let name = file_name(&path);
                    let key = shared.store.url().key(period, &name);
                    let sent = match failed.get() || shared.stopped() {
                        true => Ok(Sent::Skipped),
                        false => shared.send(&path, &key).await,
                    };
                    (name, key, sent)
                }
            })
            .buffer_unordered(UPLOADS_IN_FLIGHT);
        let (mut verified, mut first_failure) = (0, None);
        while let Some((name, key, sent)) = sends.next().await {
            match sent {
                Ok(Sent::Skipped) => continue,
                Ok(sent) => {
                    verified += 1;
                    if let Sent::Uploaded(bytes) = sent {
                        self.status.uploaded += 1;
                        self.status.uploaded_bytes += bytes;
                        self.owned.insert((key, bytes), true);
                    }
                    self.status.queue = self.status.queue.saturating_sub(1);
                    self.status.last_success = Some(shared.clock.now());
                    self.status.conflicts.retain(|c| *c != name);
                }
                Err(failure) if matches!(failure.cause, Cause::Conflict | Cause::Mismatch) => {
                    conflict(&mut self.status, &shared.clock, &name, failure);
                }
                Err(failure) => {
                    failed.set(true);
                    first_failure.get_or_insert(failure);
                }
            }
            self.publish();
        }
        drop(sends);
        if let Some(failure) = first_failure {
            return Err(failure);
        }
        if self.shared.stopped() {
            return Ok(verified);
        }
        self.retention().await?;
        Ok(verified)
    }

    /// Retention in the bucket (module docs, step 2).
    async fn retention(&mut self) -> Result<(), Failure> {
        let store = &self.shared.store;
        let plan = &self.shared.plan;
        let (objects, _others) = store.archives().await?;
        let now = self.shared.clock.now();
        for period in Period::ALL {
            let keep = plan.retention[period as usize] as usize;
            if keep == 0 {
                continue;
            }
            let mut ours = Vec::new();
            for object in objects.iter().filter(|o| o.period == period) {
                if owns(&mut self.owned, store, &object.key, object.bytes).await? {
                    ours.push(object);
                }
            }
            let surplus = ours.len().saturating_sub(keep);
            for (i, object) in ours.iter().enumerate() {
                let too_old = plan.max_age.is_some_and(|age| {
                    let start = period.start(object.period_key(), &plan.zone).unwrap_or(now);
                    now.duration_since(start).as_secs_f64() > age.as_secs_f64()
                });
                if (i < surplus || too_old) && !self.shared.stopped() {
                    store.delete(&object.key).await?;
                    self.status.remote_deleted += 1;
                    tracing::info!(
                        object = %store.url().object_url(&object.key),
                        "off-site archive deleted by retention"
                    );
                }
            }
        }
        Ok(())
    }
}

/// An archive whose name in the bucket is taken: said once, counted once, kept on disk.
fn conflict(status: &mut Status, clock: &Clock, name: &str, failure: Failure) {
    if status.conflicts.iter().any(|c| c == name) {
        return;
    }
    tracing::warn!(
        "off-site: {}; {name} stays on disk (retention keeps it) until that name is free",
        failure.message
    );
    status.failures[failure.cause as usize] += 1;
    status.last_failure = Some((clock.now(), failure));
    status.conflicts.push(name.to_owned());
}

/// The object carries the checksum a shard writes (looked up once per name and size).
async fn owns(
    owned: &mut HashMap<(String, u64), bool>,
    store: &Store,
    key: &str,
    bytes: u64,
) -> Result<bool, Failure> {
    let id = (key.to_owned(), bytes);
    if let Some(owned) = owned.get(&id) {
        return Ok(*owned);
    }
    let found = store.stat(key).await?.is_some_and(|s| s.sha256.is_some());
    owned.insert(id, found);
    Ok(found)
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// The archives on disk without a valid mark, oldest first within each kind.
    fn pending(&self) -> Result<Vec<(Period, PathBuf)>, Failure> {
        let url = self.store.url();
        let mut pending = Vec::new();
        for period in Period::ALL {
            let found = rollup::archives(&self.plan, period).map_err(|e| Failure {
                cause: Cause::Local,
                message: format!("listing the {period} archives: {e}"),
            })?;
            pending.extend(
                found
                    .into_iter()
                    .filter(|(_, path)| !is_off_site(url, path))
                    .map(|(_, path)| (period, path)),
            );
        }
        Ok(pending)
    }

    /// Makes sure the archive at `path` is in the bucket as `key`, verified, and marks it:
    /// uploaded (never over an object: a name taken is looked up, and if the object there is
    /// this file, an earlier attempt landed and it is only marked), then looked up to check
    /// its size and checksum.
    async fn send(&self, path: &Path, key: &str) -> Result<Sent, Failure> {
        let local = |what: &str, e: io::Error| Failure {
            cause: Cause::Local,
            message: format!("{what} {}: {e}", path.display()),
        };
        // Below the multipart size the file is read once, summed and sent from memory.
        let size = std::fs::metadata(path)
            .map_err(|e| local("reading", e))?
            .len();
        let (sum, bytes) = match self.store.in_one_put(size) {
            true => {
                let bytes = std::fs::read(path).map_err(|e| local("reading", e))?;
                (sum_bytes(&bytes), Some(bytes))
            }
            false => (sum_file(path).map_err(|e| local("reading", e))?, None),
        };
        let object = self.store.url().object_url(key);
        let taken = |found: &super::remote::Stat| Failure {
            cause: Cause::Conflict,
            message: format!(
                "{object} already holds another object ({} bytes, {}), not {} ({} bytes); \
                 objects are never overwritten",
                found.bytes,
                found
                    .sha256
                    .as_deref()
                    .map_or("no checksum: not written by a shard".to_owned(), |s| {
                        format!("SHA-256 {s}")
                    }),
                path.display(),
                sum.bytes
            ),
        };
        let format = Format::from_name(&file_name(path));
        let manifest = format.and_then(|f| check::manifest(path, f, self.plan.limits).ok());
        let began = Instant::now();
        let manifest = manifest.as_deref();
        let sent = match bytes {
            Some(bytes) => self.store.upload_bytes(bytes, key, &sum, manifest).await,
            None => self.store.upload(path, key, &sum, manifest).await,
        };
        match sent {
            Ok(()) => {}
            Err(failure) if failure.cause == Cause::Conflict => {
                return match self.store.stat(key).await? {
                    Some(found) if found.matches(&sum) => {
                        self.mark(path, key, &sum)
                            .map_err(|e| local("marking", e))?;
                        Ok(Sent::Found)
                    }
                    Some(found) => Err(taken(&found)),
                    None => Err(failure),
                };
            }
            Err(failure) => return Err(failure),
        }
        let found = self.store.stat(key).await?.ok_or_else(|| Failure {
            cause: Cause::Mismatch,
            message: format!("{object} is not there after its upload"),
        })?;
        if !found.matches(&sum) {
            return Err(match found.sha256.as_deref() == Some(sum.hex().as_str()) {
                true => Failure {
                    cause: Cause::Mismatch,
                    message: format!(
                        "{object} has {} bytes after its upload, not {}",
                        found.bytes, sum.bytes
                    ),
                },
                false => taken(&found),
            });
        }
        self.mark(path, key, &sum)
            .map_err(|e| local("marking", e))?;
        tracing::info!(
            object = %object,
            bytes = sum.bytes,
            took = ?began.elapsed(),
            "archive uploaded off-site and verified"
        );
        Ok(Sent::Uploaded(sum.bytes))
    }

    fn mark(&self, path: &Path, key: &str, sum: &Sum) -> io::Result<()> {
        write_mark(self.store.url(), key, path, sum, self.clock.now())
    }
}

/// Waits until `due`, forever when `None`.
async fn wait_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_say_what_waits_and_what_failed() {
        let mut status = Status {
            url: "s3://bkt/shard".into(),
            queue: 2,
            failing: 3,
            retry_at: Some("2026-12-04T00:00:40Z".parse().unwrap()),
            conflicts: vec!["2026-12-03.tar.zst".into()],
            ..Status::default()
        };
        status.failures[Cause::Unreachable as usize] = 3;
        let text = status.to_string();
        assert!(
            text.starts_with("off-site s3://bkt/shard: 0 uploaded"),
            "{text}"
        );
        assert!(text.contains("2 waiting"), "{text}");
        assert!(text.contains("failures unreachable 3"), "{text}");
        assert!(text.contains("next try at 2026-12-04T00:00:40Z"), "{text}");
        assert!(text.contains("CONFLICT 2026-12-03.tar.zst"), "{text}");
    }
}
