//! Which loop this thread runs, and the handle other threads use to reach it.
//!
//! Two halves:
//! - [`Core`]: everything the loop thread owns (wheel, tasks, counters). It is `!Send`, lives
//!   in an `Rc`, and is found through a thread-local set when the loop is built. `timer::*`,
//!   `spawn` and token methods reach it from there, and panic with advice elsewhere.
//! - [`Shared`]: the part other threads may touch — the post queue, remote task wakes, the
//!   one-shot "wake the loop" signal, and the counters those paths update. [`LoopContext`] is
//!   a cloneable `Arc` of it.
//!
//! The wake signal is *sticky and single*: the first post or remote wake after the loop last
//! looked raises `NOTIFIED` in the signal word and wakes the loop; later ones find it up and
//! elide their wake. Each cross-thread queue also has a bit in that word, raised with the
//! push, so that the loop locks only the queues that were pushed to (a wake that brings a
//! post leaves the task-wake queue's lock alone). The loop takes the word before it drains,
//! so a post is never lost and never leaves the loop signalled once handled. Why that holds,
//! and which orderings it rests on, is written beside the park that waits for it (`park.rs`).
//!
//! The post path is built so that a producer and the loop share as few written cache lines as
//! possible: a producer raises the signal while it holds the queue's lock, on the same line
//! (so the raise costs no line of its own), counts nothing (posts and elided wakes are
//! counted by the loop as it drains, see [`Core::stats`]), wakes the loop's waker by
//! reference (no reference count moves, `wake_slot.rs`), and
//! everything a post touches — the queue and its lock, `closed`, the signal, the waker — sits
//! in one 128-byte block ([`Mailbox`]), apart from the flags the loop writes every iteration
//! ([`Padded`]). A post to a parked loop then moves one block's two adjacent lines between the
//! cores, and the woken loop finds the signal, the posts and the cross-thread task wakes on
//! those same two lines. (They were three blocks on the producer's side — the queue, the
//! signal, and the loop's own flags for `closed`, which every iteration writes — and a fourth
//! line for the loop's drain of the task wakes: docs/performance.md, "wake latency".)
//!
//! This module must never run game code: it only stores and hands over.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::collections::VecDeque;
use std::fmt;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::time::{Duration, Instant};

use super::job::Job;
use super::phase::Phase;
use super::watch::{Doing, Now};
use crate::slab::Key;
use crate::timer::wheel::Wheel;

use super::executor::{Executor, RemoteWake};
use super::fault::FaultState;
use super::health::Health;
use super::profile::Profile;
use super::stats::Counters;
use super::task::Header;
use super::telemetry::LoopStats;
use super::wake_slot::WakeSlot;

/// A closure posted to the loop, and where it was posted: stored in the queue's entry itself
/// when it is small, so a post does not allocate (`posted_job.rs`).
pub(crate) type Posted = super::posted_job::PostedJob;

/// Identifies one loop for the lifetime of the process (32 bits: it sits in every `Pause`
/// and `TimerToken`, and so in every task that holds one).
pub(crate) type LoopId = u32;

static NEXT_LOOP_ID: AtomicU32 = AtomicU32::new(1);

/// Keeps what it holds alone on its cache line(s): 128 bytes, because x86 fetches lines in
/// adjacent pairs, so two hot atomics 64 bytes apart still contend.
#[repr(align(128))]
pub(crate) struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Bit of [`Mailbox::signal`]: a wake was asked for since the loop last looked. Raised by
/// whoever wakes the loop, lowered by the loop at the start of an iteration.
const NOTIFIED: u8 = 1;
/// Bit of [`Mailbox::signal`]: the post queue may hold closures the loop has not taken.
const POSTED: u8 = 1 << 1;
/// Bit of [`Mailbox::signal`]: the remote-wake queue may hold task wakes.
const REMOTE: u8 = 1 << 2;

/// What the loop found in the signal word at the start of an iteration: which cross-thread
/// queues to drain. A queue whose bit is down is not locked at all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Signalled(u8);

impl Signalled {
    /// Posts may be waiting in the queue.
    pub(crate) fn posted(self) -> bool {
        self.0 & POSTED != 0
    }

    /// Cross-thread task wakes may be waiting.
    pub(crate) fn remote(self) -> bool {
        self.0 & REMOTE != 0
    }
}

/// What other threads hand the loop, with the signal that tells it: one 128-byte block
/// ([`Padded`]), laid out in this order (`repr(C)`) so that the first line holds what every
/// post touches (the queue's lock and buffer, `closed`, the signal, the wake counters) and the
/// second the waker and the cross-thread task wakes.
#[repr(C)]
struct Mailbox {
    posted: Mutex<VecDeque<Posted>>,
    /// The wake signal: [`NOTIFIED`], and a bit per cross-thread queue ([`POSTED`],
    /// [`REMOTE`]) raised by the producer in the same critical section as its push and
    /// lowered (all at once) by the loop at the start of an iteration.
    signal: AtomicU8,
    /// Shut down: posts are refused (read under the queue's lock, see `push_posted`).
    closed: AtomicBool,
    /// Wakes [`Shared::notify`] sent (the rare case: the loop was not already signalled).
    issued: AtomicU64,
    /// Wakes [`Shared::notify_always`] sent.
    forced: AtomicU64,
    waker: WakeSlot,
    /// Tasks woken from other threads, in wake order. `None` once the loop is dropped: a
    /// task's entry would keep its block, and the block this `Shared`, alive forever.
    remote_ready: Mutex<Option<Vec<RemoteWake>>>,
}

// Both lines of one `Padded` block, and no more.
const _: () = assert!(std::mem::size_of::<Mailbox>() <= 128);

/// Flags the loop thread writes and other threads only read.
struct LoopSide {
    /// True while the loop thread is inside an iteration (not parked, not yielded to tokio).
    /// Only the loop thread touches it.
    running: AtomicBool,
    /// Bumped at the start of every iteration (loop thread only): how a watcher on another
    /// thread tells a loop that iterates from one that hangs.
    heartbeat: AtomicU64,
    /// The phase and the code running now, for a watchdog (loop thread writes only).
    now: Now,
}

/// The loop's half that other threads may touch.
pub(crate) struct Shared {
    pub(crate) id: LoopId,
    mailbox: Padded<Mailbox>,
    side: Padded<LoopSide>,
    /// The wakers of join handles awaiting an unfinished task, by task block address (rare:
    /// kept here rather than in every task; `task.rs`, invariant 6).
    awaiters: Mutex<HashMap<usize, std::task::Waker>>,
    /// Times a watchdog found this loop stuck (written by the watchdog's thread).
    stalls: AtomicU64,
    /// Clones of loop tasks' wakers alive now (`task.rs`): held by something outside the
    /// loop that may wake a task through tokio's reactor (a timer, a socket), so while it is
    /// not zero the park does not block outside tokio. Kept only when [`Shared::counts_wakers`].
    task_wakers: AtomicUsize,
    /// The loop may park outside tokio (`EventLoopBuilder::park_outside_tokio`), so clones
    /// of task wakers are counted. Fixed when the loop is built and never changed, which is
    /// what keeps the count whole: a clone made uncounted and dropped counted (or the other
    /// way round) would throw it off for good. A plain field: every clone and drop of a task
    /// waker reads it, and with the option off (the default) that read is all they pay.
    counts_wakers: bool,
}

/// A posted job could not be delivered: the loop has shut down (or was dropped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopClosed;

impl fmt::Display for LoopClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the event loop has shut down; the job was not queued")
    }
}

impl std::error::Error for LoopClosed {}

impl Shared {
    /// `counts_wakers`: see the field.
    fn new(counts_wakers: bool) -> Self {
        Shared {
            id: next_loop_id(),
            mailbox: Padded(Mailbox {
                posted: Mutex::new(VecDeque::new()),
                signal: AtomicU8::new(0),
                closed: AtomicBool::new(false),
                issued: AtomicU64::new(0),
                forced: AtomicU64::new(0),
                waker: WakeSlot::new(),
                remote_ready: Mutex::new(Some(Vec::new())),
            }),
            side: Padded(LoopSide {
                running: AtomicBool::new(false),
                heartbeat: AtomicU64::new(0),
                now: Now::default(),
            }),
            awaiters: Mutex::new(HashMap::new()),
            stalls: AtomicU64::new(0),
            task_wakers: AtomicUsize::new(0),
            counts_wakers,
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.mailbox.closed.load(Ordering::Acquire)
    }

    pub(crate) fn close(&self) {
        self.mailbox.closed.store(true, Ordering::Release);
        self.notify();
    }

    pub(crate) fn push_posted(&self, job: Posted) -> Result<(), LoopClosed> {
        {
            let mut queue = lock(&self.mailbox.posted);
            // Checked under the lock so that a post racing with shutdown is either queued
            // before the loop's final drain or refused.
            if self.is_closed() {
                return Err(LoopClosed);
            }
            queue.push_back(job);
        }
        self.raise(POSTED);
        Ok(())
    }

    /// Moves up to `max` posted closures into `out`, oldest first; returns how many, and
    /// whether more are left in the queue.
    pub(crate) fn take_posted(&self, out: &mut VecDeque<Posted>, max: usize) -> (usize, bool) {
        let mut queue = lock(&self.mailbox.posted);
        if out.is_empty() && queue.len() <= max {
            // The usual case: swap the buffers, so the lock is held for O(1) whatever the
            // backlog, and a producer waiting on it is not put to sleep.
            std::mem::swap(&mut *queue, out);
            return (out.len(), false);
        }
        let n = queue.len().min(max);
        out.extend(queue.drain(..n));
        (n, !queue.is_empty())
    }

    /// Whether a cross-thread queue was pushed to since the loop last took the signal (one
    /// load: no lock). For the look at the end of an iteration.
    pub(crate) fn queues_signalled(&self) -> bool {
        self.mailbox.signal.load(Ordering::Acquire) & (POSTED | REMOTE) != 0
    }

    /// Discards what is still queued (after shutdown, when the loop is dropped).
    pub(crate) fn clear_posted(&self) -> VecDeque<Posted> {
        std::mem::take(&mut *lock(&self.mailbox.posted))
    }

    pub(crate) fn push_remote_wake(&self, wake: RemoteWake) {
        let refused = match lock(&self.mailbox.remote_ready).as_mut() {
            Some(queue) => {
                queue.push(wake);
                None
            }
            None => Some(wake),
        };
        match refused {
            None => self.raise(REMOTE),
            // The loop is gone: nothing to wake (dropped outside the lock).
            Some(wake) => drop(wake),
        }
    }

    /// The loop is going away: drops the remote wakes queued and refuses later ones.
    pub(crate) fn close_remote_wakes(&self) {
        let queued = lock(&self.mailbox.remote_ready).take();
        drop(queued);
    }

    /// Stores the waker awaiting task `task`, replacing an earlier one, and runs `flag`
    /// (which sets the task's `AWAITER` flag) under the same lock.
    pub(crate) fn put_awaiter(
        &self,
        task: std::ptr::NonNull<Header>,
        waker: std::task::Waker,
        flag: impl FnOnce(),
    ) {
        let mut awaiters = lock(&self.awaiters);
        awaiters.insert(task.as_ptr() as usize, waker);
        flag();
    }

    /// Takes the waker awaiting task `task` if `unflag` (which clears the task's `AWAITER`
    /// flag, under the same lock) says it was there.
    pub(crate) fn take_awaiter(
        &self,
        task: std::ptr::NonNull<Header>,
        unflag: impl FnOnce() -> bool,
    ) -> Option<std::task::Waker> {
        let mut awaiters = lock(&self.awaiters);
        if unflag() {
            awaiters.remove(&(task.as_ptr() as usize))
        } else {
            None
        }
    }

    /// Moves the remote wakes into `out`; returns how many.
    pub(crate) fn take_remote_wakes(&self, out: &mut Vec<RemoteWake>) -> usize {
        let mut guard = lock(&self.mailbox.remote_ready);
        let Some(ready) = guard.as_mut() else {
            return 0;
        };
        let n = ready.len();
        if out.is_empty() {
            std::mem::swap(ready, out);
        } else {
            out.append(ready);
        }
        n
    }

    /// After a push to `queue` (its lock released): raises the queue's bit and [`NOTIFIED`]
    /// in one read-modify-write, whose place in the signal's order is what the lost-wake
    /// argument in `park.rs` rests on, and wakes the loop if this was the first raise since
    /// the loop last took the signal. When a load finds both bits up already, nothing is
    /// written (a burst of posts then only reads the line while the loop works); that skip
    /// leans on the queue's mutex, as `park.rs` explains.
    fn raise(&self, queue: u8) {
        let signal = &self.mailbox.signal;
        let both = queue | NOTIFIED;
        if signal.load(Ordering::Acquire) & both == both {
            return;
        }
        self.wake_if_first(signal.fetch_or(both, Ordering::AcqRel));
    }

    /// After a push raised the signal from `before`: wakes the loop if this push was the
    /// first since the loop last took the signal (the others find [`NOTIFIED`] up and leave
    /// the wake to that first one), unless this is the loop thread inside an iteration (it
    /// looks at the signal before it parks).
    fn wake_if_first(&self, before: u8) {
        if before & NOTIFIED != 0 || self.in_iteration_here() {
            return;
        }
        self.mailbox.issued.fetch_add(1, Ordering::Relaxed);
        self.mailbox.waker.wake();
    }

    /// True on the loop's own thread while it is inside an iteration.
    fn in_iteration_here(&self) -> bool {
        is_loop_thread(self.id) && self.side.running.load(Ordering::Relaxed)
    }

    /// Wakes the loop if it may be parked, for a reason that is no queue (shutdown, a wake of
    /// a task on the loop thread while the loop is parked). From inside an iteration this is
    /// elided: the loop checks its queues before it parks.
    ///
    /// Not counted when elided: the loop derives that count (see [`Core::stats`]).
    pub(crate) fn notify(&self) {
        if self.in_iteration_here() {
            return;
        }
        // The load first: while the flag is up, a burst of notifies only reads its line.
        let signal = &self.mailbox.signal;
        if signal.load(Ordering::Acquire) & NOTIFIED != 0 {
            return;
        }
        self.wake_if_first(signal.fetch_or(NOTIFIED, Ordering::AcqRel));
    }

    /// Wakes the loop even from inside an iteration: for sources that feed a phase slot,
    /// which (unlike the queues) the loop does not look at again before it parks.
    ///
    /// Raised by a turn of the loop thread's own reactor (`reactor.rs`), it only raises the
    /// signal (and counts): every turn is followed by an iteration that takes it, so a wake-up (a write to
    /// the doorbell the loop is about to leave, or tokio's unpark) would buy nothing.
    pub(crate) fn notify_always(&self) {
        self.mailbox.signal.fetch_or(NOTIFIED, Ordering::AcqRel);
        // Counted either way: the count is what tells the spin rule that an event came.
        self.mailbox.forced.fetch_add(1, Ordering::Relaxed);
        if TURNING.with(Cell::get) == self.id {
            return;
        }
        self.mailbox.waker.wake();
    }

    /// Every wake issued so far, both kinds.
    pub(crate) fn wakes_issued_total(&self) -> u64 {
        let (issued, forced) = self.wakes_issued();
        issued + forced
    }

    /// Wakes issued by [`notify`](Self::notify) and by [`notify_always`](Self::notify_always).
    fn wakes_issued(&self) -> (u64, u64) {
        (
            self.mailbox.issued.load(Ordering::Relaxed),
            self.mailbox.forced.load(Ordering::Relaxed),
        )
    }

    /// True while the loop thread is inside an iteration (from another thread: as last
    /// written, a moment ago).
    pub(crate) fn is_running(&self) -> bool {
        self.side.running.load(Ordering::Relaxed)
    }

    pub(crate) fn set_running(&self, running: bool) {
        let side = &self.side;
        if running {
            // Only the loop thread writes it: a plain load and store, no locked instruction.
            let beat = side.heartbeat.load(Ordering::Relaxed).wrapping_add(1);
            side.heartbeat.store(beat, Ordering::Relaxed);
        }
        side.running.store(running, Ordering::Relaxed);
        if !running {
            side.now.enter(None);
        }
    }

    /// The phase and the code running now (the loop writes it; a watchdog reads it).
    pub(crate) fn now(&self) -> &Now {
        &self.side.now
    }

    /// A watchdog found the loop stuck once more.
    pub(crate) fn count_stall(&self) {
        self.stalls.fetch_add(1, Ordering::Relaxed);
    }

    /// Called by the loop at the start of an iteration, before it drains the cross-thread
    /// queues: lowers the whole signal and says which queues were pushed to. Anything pushed
    /// after this raises the signal again (and wakes, or finds the loop about to look).
    pub(crate) fn take_signal(&self) -> Signalled {
        let signal = &self.mailbox.signal;
        // Written only when set: an iteration that nobody signalled leaves the line alone,
        // so producers reading it keep their copy. (A producer that raises it between the
        // load and here is seen at the next iteration, which its raise makes happen.)
        if signal.load(Ordering::Relaxed) == 0 {
            return Signalled(0);
        }
        Signalled(signal.swap(0, Ordering::AcqRel))
    }

    /// A clone of a loop task's waker was made (`+1`) or dropped (`-1`); nothing unless the
    /// loop may park outside tokio (the count's only reader).
    #[inline]
    pub(crate) fn count_task_waker(&self, made: bool) {
        if !self.counts_wakers {
            return;
        }
        if made {
            self.task_wakers.fetch_add(1, Ordering::Relaxed);
        } else {
            self.task_wakers.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Clones of loop tasks' wakers alive now. Read on the loop thread before it parks: a
    /// clone it made itself (in a poll) is seen; one made elsewhere is made from a clone
    /// that is still counted, so the count cannot read zero while either is alive. Always
    /// zero on a loop built without `park_outside_tokio`, which never asks.
    pub(crate) fn task_wakers_out(&self) -> usize {
        self.task_wakers.load(Ordering::Relaxed)
    }

    /// Registers the loop future's waker, then reports whether a wake is already pending.
    /// Registering first closes the race with a notifier that runs in between.
    pub(crate) fn register_and_check(&self, waker: &std::task::Waker) -> bool {
        self.mailbox.waker.register(waker);
        self.mailbox.signal.load(Ordering::Acquire) != 0
    }
}

/// The next loop id. 2^32 loops in one process would wrap it: stop rather than let two loops
/// share an id.
fn next_loop_id() -> LoopId {
    let id = NEXT_LOOP_ID.fetch_add(1, Ordering::Relaxed);
    assert!(
        id != 0,
        "more than 2^32 - 1 event loops built in this process"
    );
    id
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Queues stay consistent even if a thread panicked while holding the lock: every
    // critical section here is a single push or drain.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The fixed facts of a loop's clock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    /// Tick 0.
    pub(crate) epoch: Instant,
    pub(crate) tick: Duration,
}

impl Clock {
    fn tick_nanos(&self) -> u128 {
        self.tick.as_nanos()
    }

    /// The last boundary at or before `instant` (tick index).
    pub(crate) fn tick_at(&self, instant: Instant) -> u64 {
        let since = instant.saturating_duration_since(self.epoch).as_nanos();
        self.ticks_in(since, false)
    }

    /// The first boundary at or after `epoch + offset` (tick index), saturating.
    pub(crate) fn tick_ceil(&self, offset: Duration) -> u64 {
        self.ticks_in(offset.as_nanos(), true)
    }

    /// Whole ticks in `nanos` (rounded up if `up`), saturating. In 64 bits while both fit
    /// (584 years): a 128-bit division is a library call, and this runs for every pause and
    /// timer started.
    fn ticks_in(&self, nanos: u128, up: bool) -> u64 {
        let tick = self.tick_nanos();
        match (u64::try_from(nanos), u64::try_from(tick)) {
            (Ok(nanos), Ok(tick)) if up => nanos.div_ceil(tick),
            (Ok(nanos), Ok(tick)) => nanos / tick,
            _ if up => u64::try_from(nanos.div_ceil(tick)).unwrap_or(u64::MAX),
            _ => u64::try_from(nanos / tick).unwrap_or(u64::MAX),
        }
    }

    /// The instant of boundary `tick`, saturating far in the future.
    pub(crate) fn boundary(&self, tick: u64) -> Instant {
        let nanos = u128::from(tick) * self.tick_nanos();
        let offset = Duration::new(
            u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX / 4),
            (nanos % 1_000_000_000) as u32,
        );
        self.epoch
            .checked_add(offset)
            .unwrap_or_else(|| self.epoch + Duration::from_secs(u64::MAX / 4_000_000_000))
    }
}

/// Everything the loop thread owns.
pub(crate) struct Core {
    pub(crate) shared: Arc<Shared>,
    pub(crate) clock: Clock,
    pub(crate) wheel: RefCell<Wheel<Job>>,
    /// `timer::now()`: the boundary being processed during Timers, else this iteration's
    /// clock reading (T5).
    pub(crate) logical_now: Cell<Instant>,
    /// The logical time a task woken now sees at its next poll: the boundary being processed
    /// while the Timers phase runs, `None` (the clock reading of the iteration that polls it)
    /// elsewhere.
    pub(crate) wake_time: Cell<Option<Instant>>,
    /// The timer whose callback is running, for `timer::current()`.
    pub(crate) current_timer: Cell<Option<Key>>,
    /// The last [`Core::pause_due`] answer: (logical time, delay, due tick).
    last_due: Cell<(Instant, Duration, u64)>,
    pub(crate) executor: Executor,
    pub(crate) counters: Counters,
    pub(crate) health: RefCell<Health>,
    pub(crate) faults: FaultState,
    pub(crate) profile: Profile,
}

impl Core {
    /// `counts_wakers`: the loop may park outside tokio, so clones of task wakers are
    /// counted (`Shared::task_wakers_out`).
    pub(crate) fn new(clock: Clock, health: Health, counts_wakers: bool) -> Rc<Self> {
        Rc::new(Core {
            shared: Arc::new(Shared::new(counts_wakers)),
            clock,
            wheel: RefCell::new(Wheel::new()),
            logical_now: Cell::new(clock.epoch),
            wake_time: Cell::new(None),
            current_timer: Cell::new(None),
            last_due: Cell::new((clock.epoch, Duration::ZERO, clock.tick_ceil(Duration::ZERO))),
            executor: Executor::new(),
            counters: Counters::default(),
            health: RefCell::new(health),
            faults: FaultState::default(),
            profile: Profile::new(),
        })
    }

    pub(crate) fn stats(&self) -> LoopStats {
        let c = &self.counters;
        let (issued, forced) = self.shared.wakes_issued();
        let health = self.health.borrow();
        let (stolen, run_queue_wait) = self.profile.totals();
        let counted = c.totals.snapshot();
        LoopStats {
            wakes_issued: issued + forced,
            // Every post, remote wake and local wake of a parked loop asked for a wake;
            // those that did not issue one were elided. (The counters are read one by one
            // while producers run: a snapshot may be off by the posts in flight.)
            wakes_elided: (counted.posts + c.remote_wakes_taken.get() + c.local_notifies.get())
                .saturating_sub(issued),
            verdict: health.verdict(),
            backoffs: health.backoffs,
            stolen,
            run_queue_wait,
            thread_wakeups: c.thread_wakeups(),
            ..counted
        }
    }

    /// Offset of `timer::now()` from the epoch.
    pub(crate) fn logical_offset(&self) -> Duration {
        self.logical_now
            .get()
            .saturating_duration_since(self.clock.epoch)
    }

    /// The tick a pause of `delay` started now is due at: the first boundary at or after
    /// `timer::now()` + `delay` (T1). The last answer is kept: the tasks one tick wakes mostly
    /// pause again for the same delay from the same logical time, and then the instant
    /// arithmetic and the division are skipped. (The answer depends on those two alone, the
    /// clock being the loop's for good, so a kept one is always the one computed anew.)
    #[inline]
    pub(crate) fn pause_due(&self, delay: Duration) -> u64 {
        let now = self.logical_now.get();
        let (at, for_delay, due) = self.last_due.get();
        if at == now && for_delay == delay {
            return due;
        }
        let due = self
            .clock
            .tick_ceil(self.logical_offset().saturating_add(delay));
        self.last_due.set((now, delay, due));
        due
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<Core>>> = const { RefCell::new(None) };
    static CURRENT_ID: Cell<LoopId> = const { Cell::new(0) };
}

thread_local! {
    /// The loop whose park is dispatching a turn of the thread's reactor (0: none).
    static TURNING: Cell<LoopId> = const { Cell::new(0) };
}

/// Marks this thread, until dropped, as dispatching a turn of its reactor (`reactor.rs`) for
/// the park of one loop: that loop's [`Shared::notify_always`] then only raises its signal,
/// since its park turns only where an iteration of it follows. Another loop's source woken by
/// the same turn is woken as usual.
pub(crate) struct Turning(());

impl Turning {
    pub(crate) fn enter(for_loop: LoopId) -> Turning {
        TURNING.with(|t| t.set(for_loop));
        Turning(())
    }
}

impl Drop for Turning {
    fn drop(&mut self) {
        TURNING.with(|t| t.set(0));
    }
}

/// Makes `core` this thread's loop (a later loop on the same thread replaces an earlier one).
pub(crate) fn install(core: &Rc<Core>) {
    let previous = CURRENT.with(|c| c.replace(Some(core.clone())));
    CURRENT_ID.with(|id| id.set(core.shared.id));
    drop(previous); // outside the borrow, as in `uninstall`
}

/// Undoes [`install`] if `core` is still this thread's loop.
pub(crate) fn uninstall(core: &Rc<Core>) {
    let taken = CURRENT.try_with(|c| {
        let mut c = c.borrow_mut();
        if c.as_ref().is_some_and(|cur| Rc::ptr_eq(cur, core)) {
            CURRENT_ID.with(|id| id.set(0));
            c.take()
        } else {
            None
        }
    });
    // Dropped outside the borrow: whatever the loop still owns may look for a loop as it goes.
    drop(taken);
}

pub(crate) fn is_loop_thread(id: LoopId) -> bool {
    CURRENT_ID.try_with(|c| c.get() == id).unwrap_or(false)
}

/// Runs `f` with this thread's loop, without cloning the `Rc` (hot paths).
pub(crate) fn with_current<R>(f: impl FnOnce(&Core) -> R) -> Option<R> {
    CURRENT
        .try_with(|c| c.borrow().as_deref().map(f))
        .ok()
        .flatten()
}

pub(crate) fn try_core() -> Option<Rc<Core>> {
    CURRENT.try_with(|c| c.borrow().clone()).ok().flatten()
}

/// This thread's loop, or a panic that says what went wrong and what to do.
#[track_caller]
pub(crate) fn core(what: &str) -> Rc<Core> {
    try_core().unwrap_or_else(|| {
        panic!(
            "{what} must be called on the event loop's thread (the thread that built the \
             EventLoop); from another thread, use LoopContext::post or LoopContext::spawn"
        )
    })
}

/// A handle to a loop, usable from any thread: post closures, spawn `Send` futures, shut
/// it down.
#[derive(Clone)]
pub struct LoopContext {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for LoopContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoopContext")
            .field("loop", &self.shared.id)
            .field("closed", &self.shared.is_closed())
            .finish()
    }
}

impl LoopContext {
    /// The context of the loop this thread runs.
    ///
    /// # Panics
    /// Off a loop thread, with a message saying how to get a context there.
    #[track_caller]
    pub fn current() -> LoopContext {
        Self::try_current().unwrap_or_else(|| {
            panic!(
                "LoopContext::current() called off the event loop's thread: clone the \
                 context on the loop thread (EventLoop::context) and move it here"
            )
        })
    }

    /// The context of the loop this thread runs, if any.
    #[must_use]
    pub fn try_current() -> Option<LoopContext> {
        try_core().map(|core| LoopContext {
            shared: core.shared.clone(),
        })
    }

    /// Runs `job` on the loop thread, after what was posted before it (FIFO per sender).
    /// Wakes a parked loop at once; from the loop thread itself no wake is needed. The
    /// caller's line is the site the loop profile names if the closure runs long.
    #[track_caller]
    pub fn post(&self, job: impl FnOnce() + Send + 'static) -> Result<(), LoopClosed> {
        self.shared
            .push_posted(Posted::new(job, std::panic::Location::caller()))
    }

    /// Runs a `Send` future as a task on the loop.
    #[track_caller]
    pub fn spawn(
        &self,
        future: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), LoopClosed> {
        let site = std::panic::Location::caller();
        self.shared.push_posted(Posted::new(
            move || super::executor::spawn_detached(future, site),
            site,
        ))
    }

    /// Builds a future on the loop thread and runs it there: `make` crosses threads, the
    /// future it returns never does (so it may hold `Rc`s, entity handles, …).
    #[track_caller]
    pub fn spawn_with<F, Fut>(&self, make: F) -> Result<(), LoopClosed>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let site = std::panic::Location::caller();
        self.shared.push_posted(Posted::new(
            move || super::executor::spawn_detached(make(), site),
            site,
        ))
    }

    /// Makes the loop run another iteration soon, waking it if it is parked. For I/O sources
    /// that feed a phase slot (a socket became readable): the slot handler then finds the
    /// work. Unlike a post, this is never elided inside an iteration — the slot may already
    /// have run in it — so call it once per batch of readiness, not per byte.
    pub fn wake(&self) {
        self.shared.notify_always();
    }

    /// Asks the loop to stop: `EventLoop::run` returns at the end of the current iteration
    /// and later posts fail with [`LoopClosed`]. Idempotent, callable from any thread.
    pub fn shutdown(&self) {
        self.shared.close();
    }

    /// A number that changes every time the loop starts an iteration. Another thread that
    /// sees it unchanged for longer than the loop ever idles (it wakes at least every
    /// `idle_wait`, and at once for a post) knows the loop is stuck inside one.
    #[must_use]
    pub fn heartbeat(&self) -> u64 {
        self.shared.side.heartbeat.load(Ordering::Relaxed)
    }

    /// Whether the loop is inside an iteration (not parked, not between iterations): with
    /// [`LoopContext::heartbeat`], how a watchdog tells a busy loop from an idle one.
    #[must_use]
    pub fn in_iteration(&self) -> bool {
        self.shared.is_running()
    }

    /// The phase the loop is in and the code it is running, as the loop last published them
    /// (`None`: between iterations). Cheap; meant for a watchdog on another thread.
    #[must_use]
    pub fn running_now(&self) -> (Option<Phase>, Doing) {
        self.shared.now().read()
    }

    /// Publishes the code the loop starts running (or, [`Doing::Nothing`], finished), for a
    /// watchdog. On the loop thread.
    pub(crate) fn publish(&self, doing: Doing) {
        self.shared.now().run(doing);
    }

    /// Times a watchdog found this loop stuck ([`super::Watchdog`]).
    #[must_use]
    pub fn watchdog_stalls(&self) -> u64 {
        self.shared.stalls.load(Ordering::Relaxed)
    }

    /// True once [`LoopContext::shutdown`] was called.
    #[must_use]
    pub fn is_shut_down(&self) -> bool {
        self.shared.is_closed()
    }
}
