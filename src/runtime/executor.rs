//! The local executor: game futures polled by the loop, in wake order, each at most once per
//! iteration.
//!
//! Why not tokio's `spawn_local`? tokio decides the order in which woken tasks run, and that
//! order is not part of its contract. Game logic needs the same inputs to give the same
//! sequence of effects (T11), so tasks live here: one block per task (`task.rs`: header,
//! future, then output), a registry of the live ones and a FIFO of woken ones.
//!
//! The registry and the FIFO hold plain pointers, kept valid by the one count a task's block
//! gives the loop while the task is live or queued (`task.rs`, invariant 1). A task's
//! "queued" flag is a plain `Cell` in its header (only the loop thread touches it), and the
//! waker a poll lends is built from the header without touching its count — so a poll and a
//! wake on the loop thread cost no atomic operation. A task is queued once however often it
//! is woken. Woken on another thread, the waker takes the cross-thread queue instead, once
//! until drained (an atomic flag in the header), and is moved into the FIFO at the start of
//! the Tasks phase. A pause awaited by the task being polled keeps a counted pointer to the
//! task rather than its waker (`runtime::job`).
//!
//! Aborting a task drops its future on the spot, so whatever it owned (its pauses' wheel
//! entries, its timers' tokens, its guards) goes before `abort` returns. The one exception is
//! a task aborting itself: its future is being polled and cannot be dropped under its own
//! feet, so it is marked and dropped as soon as that poll returns, before any other task runs.
//!
//! Each task polled sees as `timer::now()` the logical time of what woke it ([`Ready`]).
//!
//! This module must never poll a future outside the Tasks phase, nor hold a `RefCell` borrow
//! while a future runs or is dropped (the future may spawn, pause, abort or drop other tasks).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::panic::Location;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use tokio::time::Instant;

use super::context::{Core, Shared, core, is_loop_thread, with_current};
use super::history::Site;
use super::panic::catch;
use super::profile::{ENABLED as PROFILING, Kind};
use super::stats::Counters;
use super::task::{self, Header, JoinError, JoinHandle, TaskRef, local};
use super::watch::Doing;

/// An entry of the ready FIFO: a task, or `run_until`'s root future (`None`).
type Entry = Option<NonNull<Header>>;

/// The id `run_until`'s own future has in the ready FIFO.
const ROOT: Entry = None;

/// How many places ahead of the task being polled (or woken, in the Timers phase) the next
/// task's block is prefetched: far enough for the load to arrive in time (a poll or a wake
/// takes tens of nanoseconds, a miss to memory about a hundred), near enough for it to stay.
pub(crate) const PREFETCH_AHEAD: usize = 4;

/// The waker of `run_until`'s root future (it has no task block).
pub(crate) struct RootWaker {
    /// On the cross-thread queue and not yet drained: another remote wake is a no-op.
    remote_queued: AtomicBool,
    shared: Arc<Shared>,
}

impl RootWaker {
    pub(crate) fn new(shared: Arc<Shared>) -> Arc<Self> {
        Arc::new(RootWaker {
            remote_queued: AtomicBool::new(false),
            shared,
        })
    }
}

impl Wake for RootWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let woken_here = is_loop_thread(self.shared.id)
            && with_current(|core| core.executor.wake_root(core)).unwrap_or(false);
        if !woken_here && !self.remote_queued.swap(true, Ordering::AcqRel) {
            self.shared.push_remote_wake(RemoteWake::Root(self.clone()));
        }
    }
}

/// A wake from another thread, waiting for the Tasks phase.
pub(crate) enum RemoteWake {
    Root(Arc<RootWaker>),
    Task(TaskRef),
}

/// The ready FIFO, and the logical time each woken task is to see at its poll.
///
/// A task woken while the Timers phase processes tick k (by a pause, or by a callback of
/// that tick) sees boundary k as `timer::now()` during its next poll, as the callbacks of
/// tick k do; any other wake sees the iteration's clock reading. The times are kept as runs
/// (`marks`: from this sequence number on, this time) rather than per entry, since a tick
/// wakes its tasks one after another: the queue stays one key per entry.
#[derive(Default)]
struct Ready {
    queue: VecDeque<Entry>,
    /// Sequence number of the next push, and of the next pop.
    pushed: u64,
    popped: u64,
    /// (first sequence number, logical time or `None` for the clock reading), oldest first;
    /// empty when the queue is.
    marks: VecDeque<(u64, Option<Instant>)>,
}

impl Ready {
    fn push(&mut self, id: Entry, at: Option<Instant>) {
        if self.marks.back().map(|&(_, time)| time) != Some(at) {
            self.marks.push_back((self.pushed, at));
        }
        self.queue.push_back(id);
        self.pushed += 1;
    }

    fn pop(&mut self) -> Option<(Entry, Option<Instant>)> {
        let id = self.queue.pop_front()?;
        let seq = self.popped;
        self.popped += 1;
        while self.marks.len() > 1 && self.marks[1].0 <= seq {
            self.marks.pop_front();
        }
        let at = self.marks.front().and_then(|&(_, time)| time);
        if self.queue.is_empty() {
            self.marks.clear();
        }
        Some((id, at))
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    /// The task `ahead` places behind the front, if there is one (the root is not a task).
    fn ahead(&self, ahead: usize) -> Option<NonNull<Header>> {
        self.queue.get(ahead).copied().flatten()
    }

    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Drops the entries for `id`, keeping every other entry's place and time.
    fn remove(&mut self, id: Entry) {
        let mut kept = Ready::default();
        while let Some((other, at)) = self.pop() {
            if other != id {
                kept.push(other, at);
            }
        }
        *self = kept;
    }

    /// Empties the FIFO, handing back its entries.
    fn take_all(&mut self) -> Vec<Entry> {
        self.marks.clear();
        self.popped = self.pushed;
        self.queue.drain(..).collect()
    }
}

pub(crate) struct Executor {
    /// Every live task, in no order; a task's header holds its index here.
    tasks: RefCell<Vec<NonNull<Header>>>,
    /// The task being polled.
    polling: Cell<Option<NonNull<Header>>>,
    ready: RefCell<Ready>,
    /// `run_until`'s future is in the ready FIFO (it has no header to hold the flag).
    root_queued: Cell<bool>,
    remote: RefCell<Vec<RemoteWake>>,
}

impl Executor {
    pub(crate) fn new() -> Self {
        Executor {
            tasks: RefCell::new(Vec::new()),
            polling: Cell::new(None),
            ready: RefCell::new(Ready::default()),
            root_queued: Cell::new(false),
            remote: RefCell::new(Vec::new()),
        }
    }

    /// Queues `run_until`'s future for its first poll (exactly once in the FIFO).
    pub(crate) fn schedule_root(&self) {
        let mut ready = self.ready.borrow_mut();
        if self.root_queued.get() {
            // Left queued by an earlier `run_until`: it moves to the back.
            ready.remove(ROOT);
        }
        ready.push(ROOT, None);
        self.root_queued.set(true);
    }

    /// Queues `run_until`'s future unless it is queued already, from the loop thread.
    /// Returns false when it could not (the FIFO is borrowed right now): the caller then
    /// takes the cross-thread path, which retries at the next Tasks phase.
    fn wake_root(&self, core: &Core) -> bool {
        if self.root_queued.get() {
            return true;
        }
        let Ok(mut ready) = self.ready.try_borrow_mut() else {
            return false;
        };
        self.root_queued.set(true);
        ready.push(ROOT, core.wake_time.get());
        drop(ready);
        Self::notify_parked(core);
        true
    }

    /// Queues the task `ptr` of this loop unless it is queued already or gone, from the loop
    /// thread. Returns false when it could not (as [`wake_root`](Self::wake_root)).
    pub(super) fn wake(&self, core: &Core, ptr: NonNull<Header>) -> bool {
        // SAFETY: the caller holds a count on the task (a waker, a wheel entry, a queue
        // entry), and this is its loop's thread, the only one that touches `local`.
        let header = unsafe { ptr.as_ref() };
        let flags = header.local.get();
        if flags & local::LIVE == 0 || flags & local::QUEUED != 0 {
            // Finished or aborted, or queued already.
            return true;
        }
        let Ok(mut ready) = self.ready.try_borrow_mut() else {
            return false;
        };
        // Queued while live: the loop's count, held for `LIVE`, now also covers the entry.
        header.update_local(local::QUEUED, 0);
        ready.push(Some(ptr), core.wake_time.get());
        drop(ready);
        Self::notify_parked(core);
        true
    }

    /// A wake on the loop thread while the loop is parked (by another future on this
    /// thread, polled by tokio) must wake the loop.
    fn notify_parked(core: &Core) {
        if !core.shared.is_running() {
            Counters::bump(&core.counters.local_notifies);
            core.shared.notify();
        }
    }

    /// Wakes task `ptr` from the loop thread, between polls (a pause's tick, a remote wake
    /// being drained): nothing is borrowed then, so it always queues.
    pub(crate) fn wake_task(&self, core: &Core, ptr: NonNull<Header>) {
        let queued = self.wake(core, ptr);
        debug_assert!(queued, "the ready FIFO is not borrowed between polls");
    }

    /// The task being polled, if `waker` is its waker (and not, say, a waker a combinator
    /// inside it made for one of its parts).
    pub(crate) fn polled_task(&self, waker: &Waker) -> Option<NonNull<Header>> {
        let polling = self.polling.get()?;
        (task::waker_task(waker) == Some(polling)).then_some(polling)
    }

    /// The task being polled.
    pub(crate) fn polling(&self) -> Option<NonNull<Header>> {
        self.polling.get()
    }

    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.borrow().is_empty()
    }

    /// Registers and queues a new task for `future`; with `handle`, the caller gets the join
    /// handle's count.
    fn spawn<F: Future + 'static>(
        &self,
        core: &Core,
        future: F,
        site: &'static Location<'static>,
        handle: bool,
    ) -> NonNull<Header> {
        let ptr = task::allocate(future, site, core.shared.clone(), handle);
        {
            let mut tasks = self.tasks.borrow_mut();
            let index = u32::try_from(tasks.len()).expect("more than 2^32 live tasks");
            // SAFETY: just allocated, and this is its loop's thread.
            unsafe { ptr.as_ref() }.index.set(index);
            tasks.push(ptr);
        }
        self.ready
            .borrow_mut()
            .push(Some(ptr), core.wake_time.get());
        ptr
    }

    /// Drops task `ptr`'s future now, or — if it is the task being polled — as soon as that
    /// poll returns. A task that is gone already is left alone.
    pub(super) fn abort(&self, ptr: NonNull<Header>) {
        // SAFETY: the caller holds a count (a handle), on the task's loop thread.
        let header = unsafe { ptr.as_ref() };
        let flags = header.local.get();
        if flags & local::LIVE == 0 {
            return;
        }
        if flags & local::POLLING != 0 {
            header.update_local(local::ABORT_AFTER_POLL, 0);
            return;
        }
        self.cancel(ptr);
    }

    /// Drops the future of the live task `ptr` (not being polled) and reports it cancelled.
    fn cancel(&self, ptr: NonNull<Header>) {
        // SAFETY: live, so the loop's count holds it; loop thread.
        let header = unsafe { ptr.as_ref() };
        header.update_local(0, local::LIVE);
        // Finishes the task even if the drop panics (the panic goes on to the caller).
        let _finish = Finish {
            executor: self,
            ptr,
            error: JoinError { panicked: false },
        };
        // SAFETY: `LIVE` was just cleared, on the loop thread, with nothing borrowed (the
        // drop may spawn, pause, abort or drop other tasks): its one drop (invariant 3).
        unsafe { (header.meta.drop_future)(ptr) };
    }

    /// After the future of `ptr` is gone (`LIVE` cleared): leaves the registry, and lets go
    /// of the loop's count unless the task is still queued or a wheel entry holds it.
    fn retire(&self, ptr: NonNull<Header>) {
        // SAFETY: the loop's count still holds it; loop thread.
        let header = unsafe { ptr.as_ref() };
        header.update_local(0, local::REGISTERED);
        {
            let mut tasks = self.tasks.borrow_mut();
            let index = header.index.get() as usize;
            debug_assert_eq!(tasks.get(index), Some(&ptr), "the header knows its place");
            tasks.swap_remove(index);
            if let Some(moved) = tasks.get(index) {
                // SAFETY: a registered task is live; loop thread.
                unsafe { moved.as_ref() }.index.set(index as u32);
            }
        }
        self.release_if_idle(ptr);
    }

    /// Lets go of the loop's count on `ptr` if nothing of the loop points there any more: not
    /// the registry, not the FIFO, no wheel entry (`task.rs`, invariant 1).
    fn release_if_idle(&self, ptr: NonNull<Header>) {
        // SAFETY: the loop's count still holds it; loop thread.
        if !unsafe { ptr.as_ref() }.loop_holds() {
            // SAFETY: the loop's count, given up now that nothing of the loop points here.
            unsafe { task::release(ptr) };
        }
    }

    /// The Tasks phase: polls what was woken before it started, in wake order, each once.
    /// `poll_root` polls `run_until`'s future when [`ROOT`] comes up; `remote`: the signal
    /// said tasks were woken from other threads (their queue is not locked otherwise).
    /// Returns true if anything ran.
    pub(crate) fn run_ready(&self, core: &Core, poll_root: &mut dyn FnMut(), remote: bool) -> bool {
        if remote {
            self.take_remote_wakes(core);
        }
        let batch = self.ready.borrow().len();
        // Each poll sees the logical time of what woke it (see `Ready`), else this reading.
        let reading = core.logical_now.get();
        // Each poll's time runs from the previous clock read to the next (see profile).
        let profile = &core.profile;
        // Read only with the profile: without it the stored mark costs no clock read.
        let mut since = profile.mark();
        let mut save_before = profile.save_total();
        for _ in 0..batch {
            let popped = {
                let mut ready = self.ready.borrow_mut();
                // With many tasks woken, each is cold by its turn: start loading one a few
                // places back now, so its header and future are in cache when it comes up.
                if let Some(later) = ready.ahead(PREFETCH_AHEAD) {
                    task::prefetch(later);
                }
                ready.pop()
            };
            let Some((entry, at)) = popped else {
                break;
            };
            core.logical_now.set(at.unwrap_or(reading));
            match entry {
                None => {
                    // A wake during the poll queues it again.
                    self.root_queued.set(false);
                    poll_root();
                    if PROFILING {
                        // `run_until`'s own future has no spawn site: restart the chain.
                        since = super::stamp::Stamp::now();
                        save_before = profile.save_total();
                    }
                }
                Some(ptr) => {
                    if let Some(site) = self.poll_task(core, ptr)
                        && PROFILING
                    {
                        profile.ran(Kind::Task, &mut since, &mut save_before, Site::from(site));
                    }
                }
            }
        }
        core.logical_now.set(reading);
        batch > 0
    }

    /// Moves the wakes from other threads into the FIFO, in their order.
    fn take_remote_wakes(&self, core: &Core) {
        let mut remote = self.remote.borrow_mut();
        let taken = core.shared.take_remote_wakes(&mut remote);
        Counters::add(&core.counters.remote_wakes_taken, taken);
        for wake in remote.drain(..) {
            // Cleared first: a remote wake from now on is queued again, never lost.
            match wake {
                RemoteWake::Root(root) => {
                    root.remote_queued.store(false, Ordering::Release);
                    let queued = self.wake_root(core);
                    debug_assert!(queued, "the ready FIFO is not borrowed here");
                }
                RemoteWake::Task(task) => {
                    task.header().clear_remote();
                    self.wake_task(core, task.ptr());
                }
            }
        }
    }

    /// Polls task `ptr` (popped from the FIFO) once; returns its spawn site if it was polled.
    fn poll_task(&self, core: &Core, ptr: NonNull<Header>) -> Option<&'static Location<'static>> {
        // SAFETY: a queued task holds the loop's count; loop thread.
        let header = unsafe { ptr.as_ref() };
        // A wake during the poll queues it again.
        let flags = header.update_local(local::POLLING, local::QUEUED);
        if flags & local::LIVE == 0 {
            // Finished or aborted since it was woken.
            header.update_local(0, local::POLLING);
            self.release_if_idle(ptr);
            return None;
        }
        let site = header.site();
        // Lent, not cloned: no reference count touched per poll.
        let waker = task::lent_waker(ptr);
        let mut cx = Context::from_waker(&waker);
        self.polling.set(Some(ptr));
        core.shared.now().run(Doing::Task(site));
        // SAFETY: `LIVE`, on the loop thread, nothing borrowed: the future is ours to poll.
        let polled = catch(|| unsafe { (header.meta.poll)(ptr, &mut cx) });
        core.shared.now().run(Doing::Nothing);
        self.polling.set(None);
        let flags = header.local.get();
        header.update_local(0, local::POLLING | local::ABORT_AFTER_POLL);
        match polled {
            Ok(Poll::Pending) if flags & local::ABORT_AFTER_POLL != 0 => self.cancel(ptr),
            Ok(Poll::Pending) => {}
            // The output is delivered and the future gone.
            Ok(Poll::Ready(())) => self.retire(ptr),
            Err(why) => {
                core.counters.count_panic();
                tracing::error!(
                    spawned_at = %site,
                    "a task panicked: {why}; the task is dropped, the loop goes on"
                );
                self.drop_panicked(ptr);
            }
        }
        Some(site)
    }

    /// After a panic out of a poll: drops what is left of the future and reports the panic.
    fn drop_panicked(&self, ptr: NonNull<Header>) {
        // SAFETY: the loop's count holds it; loop thread.
        let header = unsafe { ptr.as_ref() };
        if header.local.get() & local::LIVE == 0 {
            // The panic came after the future was dropped (from its output's drop, or from
            // the awaiter's waker); whatever was delivered stands.
            if !header.is_done() {
                // SAFETY: not delivered yet, loop thread, future gone.
                unsafe { (header.meta.fail)(ptr, JoinError { panicked: true }) };
            }
            self.retire(ptr);
            return;
        }
        header.update_local(0, local::LIVE);
        let _finish = Finish {
            executor: self,
            ptr,
            error: JoinError { panicked: true },
        };
        // SAFETY: `LIVE` was just cleared: the future's one drop (invariant 3). A second
        // panic, from the drop, is caught and logged: the first one is the one reported.
        if let Err(why) = catch(|| unsafe { (header.meta.drop_future)(ptr) }) {
            tracing::error!(
                spawned_at = %header.site(),
                "dropping a panicked task panicked too: {why}"
            );
        }
    }

    /// Drops every task (the loop is going away). Their `JoinHandle`s report cancellation.
    pub(crate) fn clear(&self) {
        // A future's drop may spawn: go until nothing is left.
        loop {
            let last = self.tasks.borrow().last().copied();
            let Some(ptr) = last else { break };
            self.cancel(ptr);
        }
        let queued = self.ready.borrow_mut().take_all();
        self.root_queued.set(false);
        for ptr in queued.into_iter().flatten() {
            // SAFETY: a queued task holds the loop's count; loop thread.
            unsafe { ptr.as_ref() }.update_local(0, local::QUEUED);
            self.release_if_idle(ptr);
        }
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Completes a task whose future was just dropped (or whose drop panicked): delivers
/// `error` and retires it.
struct Finish<'a> {
    executor: &'a Executor,
    ptr: NonNull<Header>,
    error: JoinError,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        // SAFETY: the loop's count holds it; the future is gone and nothing was delivered
        // (it was live until the caller cleared `LIVE`); loop thread.
        unsafe {
            let header = self.ptr.as_ref();
            (header.meta.fail)(self.ptr, self.error.clone());
        }
        self.executor.retire(self.ptr);
    }
}

/// Spawns on this thread's loop without a handle (used by `LoopContext::spawn`).
pub(crate) fn spawn_detached(
    future: impl Future<Output = ()> + 'static,
    site: &'static Location<'static>,
) {
    let core = core("LoopContext::spawn");
    core.executor.spawn(&core, future, site, false);
}

/// Runs `future` as a task on this thread's event loop and returns a handle to its output.
///
/// Tasks are polled by the loop in the order they were woken, never by tokio's scheduler.
///
/// # Panics
/// Off the loop thread; use `LoopContext::spawn` from other threads.
#[track_caller]
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
{
    let site = Location::caller();
    let core = core("shardloop::spawn");
    let ptr = core.executor.spawn(&core, future, site, true);
    // SAFETY: allocated for `F` with a handle; this is that handle.
    unsafe { JoinHandle::new(ptr) }
}
