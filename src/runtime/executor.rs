//! The local executor: game futures polled by the loop, in wake order, each at most once per
//! iteration.
//!
//! Why not tokio's `spawn_local`? tokio decides the order in which woken tasks run, and that
//! order is not part of its contract. Game logic needs the same inputs to give the same
//! sequence of effects (T11), so tasks live here: a generational slab of boxed futures and a
//! FIFO of woken task ids.
//!
//! Each slot holds its task's "queued" flag (a plain `Cell`: only the loop thread reads or
//! writes it) and a ready-made `Waker`, built once at spawn and lent to every poll — so a
//! poll and a wake on the loop thread cost no atomic operation. A task is queued once however
//! often it is woken. Woken on the loop thread, it goes straight to the FIFO; woken elsewhere,
//! its waker (an `Arc` holding the task id) goes to the cross-thread queue, deduplicated by an
//! atomic flag of its own, and is drained into the FIFO at the start of the Tasks phase. That
//! same `Arc` is what abort handles hold (one allocation, not two), and a pause awaited by the
//! task being polled remembers the task's key rather than its waker (`runtime::job::WakeTarget`).
//!
//! Aborting a task removes it from the slab and drops its future on the spot, so whatever it
//! owned (its pauses' wheel entries, its timers' tokens, its guards) goes before `abort`
//! returns. The one exception is a task aborting itself: its future is out of the slab being
//! polled and cannot be dropped under its own feet, so it is marked and dropped as soon as that
//! poll returns, before any other task runs.
//!
//! This module must never poll a future outside the Tasks phase, nor hold a `RefCell` borrow
//! while a future runs or is dropped (the future may spawn, pause, abort or drop other tasks).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::panic::Location;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, RawWakerVTable, Wake, Waker};

use futures::task::AtomicWaker;

use crate::slab::{Key, Slab};

use super::context::{Core, Shared, core, is_loop_thread, with_current};
use super::history::Site;
use super::panic::catch;
use super::profile::{ENABLED as PROFILING, Kind};
use super::stats::Counters;
use super::watch::Doing;

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

struct Task {
    /// `None` while the task is being polled.
    future: Option<LocalFuture>,
    /// The task's waker, lent to each poll (a no-op waker sits here meanwhile).
    waker: Waker,
    /// In the ready FIFO since its last poll started: another wake is a no-op.
    queued: Cell<bool>,
    site: &'static Location<'static>,
    /// Aborted while being polled (by itself): drop it when the poll returns.
    aborted: bool,
}

/// What every handle to one task shares, whatever its output type: its waker, and all an
/// [`AbortHandle`] needs. One allocation per task serves both (or `run_until`'s root future,
/// with [`ROOT`] as its id).
pub(crate) struct TaskWaker {
    task: Key,
    /// On the cross-thread queue and not yet drained: another remote wake is a no-op.
    remote_queued: AtomicBool,
    /// The result is in (finished, panicked or dropped).
    done: AtomicBool,
    /// Dropped by an abort: a cancellation even if the abort came from code unwinding a panic.
    aborted: AtomicBool,
    shared: Arc<Shared>,
}

/// The id `run_until`'s own future uses in the ready FIFO; the slab never issues it.
pub(crate) const ROOT: Key = Key::RESERVED;

impl TaskWaker {
    pub(crate) fn new_root(shared: Arc<Shared>) -> Arc<Self> {
        Self::new(ROOT, shared)
    }

    fn new(task: Key, shared: Arc<Shared>) -> Arc<Self> {
        Arc::new(TaskWaker {
            task,
            remote_queued: AtomicBool::new(false),
            done: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            shared,
        })
    }

    /// On the task's loop thread, drops its future (see [`Executor::abort`]).
    #[track_caller]
    fn abort(&self, what: &str) {
        let core = core(what);
        if self.done.load(Ordering::Acquire) {
            return;
        }
        assert!(
            core.shared.id == self.shared.id,
            "{what}: the task belongs to another event loop, still running on another thread; \
             abort it from that loop's thread (LoopContext::post)"
        );
        self.aborted.store(true, Ordering::Release);
        core.executor.abort(self.task);
    }
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let woken_here = is_loop_thread(self.shared.id)
            && with_current(|core| core.executor.wake(core, self.task)).unwrap_or(false);
        if !woken_here && !self.remote_queued.swap(true, Ordering::AcqRel) {
            self.shared.push_remote_wake(self.clone());
        }
    }
}

pub(crate) struct Executor {
    tasks: RefCell<Slab<Task>>,
    /// The task being polled, and its waker's identity (data and vtable pointers).
    polling: Cell<Option<(Key, *const (), *const RawWakerVTable)>>,
    ready: RefCell<VecDeque<Key>>,
    /// `run_until`'s future is in the ready FIFO (it has no slot to hold the flag).
    root_queued: Cell<bool>,
    remote: RefCell<Vec<Arc<TaskWaker>>>,
}

impl Executor {
    pub(crate) fn new() -> Self {
        Executor {
            tasks: RefCell::new(Slab::new()),
            polling: Cell::new(None),
            ready: RefCell::new(VecDeque::new()),
            root_queued: Cell::new(false),
            remote: RefCell::new(Vec::new()),
        }
    }

    /// Queues `run_until`'s future for its first poll (exactly once in the FIFO).
    pub(crate) fn schedule_root(&self) {
        let mut ready = self.ready.borrow_mut();
        ready.retain(|&id| id != ROOT);
        ready.push_back(ROOT);
        self.root_queued.set(true);
    }

    /// Queues task `id` (or [`ROOT`]) unless it is queued already, from the loop thread.
    /// Returns false when it could not look (the slab is being changed right now): the
    /// caller then takes the cross-thread path, which retries at the next Tasks phase.
    fn wake(&self, core: &Core, id: Key) -> bool {
        if id == ROOT {
            if self.root_queued.replace(true) {
                return true;
            }
        } else {
            let Ok(tasks) = self.tasks.try_borrow() else {
                return false;
            };
            match tasks.get(id) {
                // Finished or aborted: nothing to wake.
                None => return true,
                Some(task) if task.queued.replace(true) => return true,
                Some(_) => {}
            }
        }
        let Ok(mut ready) = self.ready.try_borrow_mut() else {
            self.unqueue(id);
            return false;
        };
        ready.push_back(id);
        drop(ready);
        if !core.shared.is_running() {
            // Woken by another future on this thread while the loop is parked.
            Counters::bump(&core.counters.local_notifies);
            core.shared.notify();
        }
        true
    }

    /// Wakes task `id` from the loop thread, between polls (a pause's tick, a remote wake
    /// being drained): nothing is borrowed then, so it always queues.
    pub(crate) fn wake_task(&self, core: &Core, id: Key) {
        if !self.wake(core, id) {
            self.ready.borrow_mut().push_back(id);
        }
    }

    /// The key of the task being polled, if `waker` is its waker (and not, say, a waker a
    /// combinator inside it made for one of its parts).
    pub(crate) fn polled_task(&self, waker: &Waker) -> Option<Key> {
        let (task, data, vtable) = self.polling.get()?;
        (std::ptr::eq(waker.data(), data) && std::ptr::eq(waker.vtable(), vtable)).then_some(task)
    }

    /// Undoes the flag [`wake`](Self::wake) set when it could not queue after all.
    fn unqueue(&self, id: Key) {
        if id == ROOT {
            self.root_queued.set(false);
        } else if let Ok(tasks) = self.tasks.try_borrow()
            && let Some(task) = tasks.get(id)
        {
            task.queued.set(false);
        }
    }

    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.borrow().is_empty()
    }

    /// The header of the task the next [`Executor::spawn`] will insert (its key is the one
    /// the slab issues next).
    fn next_header(&self, shared: &Arc<Shared>) -> Arc<TaskWaker> {
        TaskWaker::new(self.tasks.borrow().next_key(), shared.clone())
    }

    /// Inserts the task `header` was made for (by [`next_header`](Self::next_header), with
    /// nothing spawned in between) and queues it.
    fn spawn(
        &self,
        header: Arc<TaskWaker>,
        future: LocalFuture,
        site: &'static Location<'static>,
    ) -> Key {
        let mut tasks = self.tasks.borrow_mut();
        let expected = header.task;
        let waker = Waker::from(header);
        let key = tasks.insert(Task {
            future: Some(future),
            waker,
            queued: Cell::new(true),
            site,
            aborted: false,
        });
        assert_eq!(
            key, expected,
            "the slab issued another key than it announced"
        );
        self.ready.borrow_mut().push_back(key);
        key
    }

    /// Drops task `id`'s future now, or — if it is the task being polled — as soon as that
    /// poll returns. Unknown ids (finished, already aborted) are ignored.
    fn abort(&self, id: Key) {
        let removed = {
            let mut tasks = self.tasks.borrow_mut();
            let Some(task) = tasks.get_mut(id) else {
                return;
            };
            if task.future.is_none() {
                task.aborted = true;
                return;
            }
            tasks.remove(id)
        };
        // Unborrowed: the future's drop may pause, spawn or abort in turn. Its id may still be
        // in the ready FIFO; `poll_task` skips ids the slab no longer holds.
        drop(removed);
    }

    /// The Tasks phase: polls what was woken before it started, in wake order, each once.
    /// `poll_root` polls `run_until`'s future when [`ROOT`] comes up. Returns true if
    /// anything ran.
    pub(crate) fn run_ready(&self, core: &Core, poll_root: &mut dyn FnMut()) -> bool {
        {
            let mut remote = self.remote.borrow_mut();
            let taken = core.shared.take_remote_wakes(&mut remote);
            Counters::add(&core.counters.remote_wakes_taken, taken);
            for waker in remote.drain(..) {
                // Cleared first: a remote wake from now on is queued again, never lost.
                waker.remote_queued.store(false, Ordering::Release);
                self.wake_task(core, waker.task);
            }
        }
        let batch = self.ready.borrow().len();
        // Each poll's time runs from the previous clock read to the next (see profile).
        let profile = &core.profile;
        // Read only with the profile: without it the stored mark costs no clock read.
        let mut since = profile.mark();
        let mut save_before = profile.save_total();
        for _ in 0..batch {
            let Some(id) = self.ready.borrow_mut().pop_front() else {
                break;
            };
            if id == ROOT {
                // A wake during the poll queues it again.
                self.root_queued.set(false);
                poll_root();
                if PROFILING {
                    // `run_until`'s own future has no spawn site: restart the chain after it.
                    since = super::stamp::Stamp::now();
                    save_before = profile.save_total();
                }
            } else if let Some(site) = self.poll_task(core, id)
                && PROFILING
            {
                profile.ran(Kind::Task, &mut since, &mut save_before, Site::from(site));
            }
        }
        batch > 0
    }

    /// Polls task `id` once; returns its spawn site if it was polled.
    fn poll_task(&self, core: &Core, id: Key) -> Option<&'static Location<'static>> {
        let (mut future, waker, site) = {
            let mut tasks = self.tasks.borrow_mut();
            // Finished or dropped since it was woken.
            let task = tasks.get_mut(id)?;
            let future = task.future.take()?;
            // A wake during the poll queues it again.
            task.queued.set(false);
            // Lent, not cloned: no reference count touched per poll.
            let waker = std::mem::replace(&mut task.waker, Waker::noop().clone());
            (future, waker, task.site)
        };
        let mut cx = Context::from_waker(&waker);
        self.polling
            .set(Some((id, waker.data(), std::ptr::from_ref(waker.vtable()))));
        core.shared.now().run(Doing::Task(site));
        let polled = catch(|| future.as_mut().poll(&mut cx));
        core.shared.now().run(Doing::Nothing);
        self.polling.set(None);
        match polled {
            Ok(Poll::Pending) => {
                let mut tasks = self.tasks.borrow_mut();
                match tasks.get_mut(id) {
                    Some(task) if task.aborted => {
                        let task = tasks.remove(id);
                        drop(tasks);
                        drop((future, task, waker));
                    }
                    Some(task) => {
                        task.future = Some(future);
                        task.waker = waker;
                    }
                    None => {
                        drop(tasks);
                        drop((future, waker));
                    }
                }
            }
            Ok(Poll::Ready(())) => {
                let task = self.tasks.borrow_mut().remove(id);
                drop((future, task));
            }
            Err(why) => {
                core.counters.count_panic();
                tracing::error!(
                    spawned_at = %site,
                    "a task panicked: {why}; the task is dropped, the loop goes on"
                );
                let task = self.tasks.borrow_mut().remove(id);
                drop((future, task));
            }
        }
        Some(site)
    }

    /// Drops every task (the loop is going away). Their `JoinHandle`s report cancellation.
    pub(crate) fn clear(&self) {
        let tasks = std::mem::replace(&mut *self.tasks.borrow_mut(), Slab::new());
        self.ready.borrow_mut().clear();
        drop(tasks);
    }
}

/// Spawns on this thread's loop without a handle (used by `LoopContext::spawn`).
pub(crate) fn spawn_detached(
    future: impl Future<Output = ()> + 'static,
    site: &'static Location<'static>,
) {
    let core = core("LoopContext::spawn");
    let header = core.executor.next_header(&core.shared);
    core.executor.spawn(header, Box::pin(future), site);
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
    let link = core.executor.next_header(&core.shared);
    let state = Arc::new(JoinState {
        result: Mutex::new(None),
        link: link.clone(),
        waker: AtomicWaker::new(),
    });
    let guard = Completion {
        state: Some(state.clone()),
    };
    let task = async move {
        let output = future.await;
        guard.finish(Ok(output));
    };
    core.executor.spawn(link, Box::pin(task), site);
    JoinHandle { state }
}

/// Why a task produced no output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinError {
    panicked: bool,
}

impl JoinError {
    /// The task panicked (the panic was caught, logged and counted).
    #[must_use]
    pub fn is_panic(&self) -> bool {
        self.panicked
    }

    /// The task was dropped before finishing: it was aborted ([`JoinHandle::abort`],
    /// [`AbortHandle::abort`]) or its loop went away.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        !self.panicked
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.panicked {
            f.write_str("the task panicked")
        } else {
            f.write_str("the task was cancelled before it finished")
        }
    }
}

impl std::error::Error for JoinError {}

struct JoinState<T> {
    result: Mutex<Option<Result<T, JoinError>>>,
    link: Arc<TaskWaker>,
    waker: AtomicWaker,
}

/// Delivers a task's result to its handle exactly once — on completion, or from `Drop` when
/// the task dies first.
struct Completion<T> {
    state: Option<Arc<JoinState<T>>>,
}

impl<T> Completion<T> {
    fn finish(mut self, result: Result<T, JoinError>) {
        if let Some(state) = self.state.take() {
            deliver(&state, result);
        }
    }
}

impl<T> Drop for Completion<T> {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            // A panic unwinding out of the task's poll drops the task's state — this guard
            // included — on its way out; any other drop is a cancellation.
            let panicked = std::thread::panicking() && !state.link.aborted.load(Ordering::Acquire);
            deliver(&state, Err(JoinError { panicked }));
        }
    }
}

fn deliver<T>(state: &JoinState<T>, result: Result<T, JoinError>) {
    *state
        .result
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(result);
    state.link.done.store(true, Ordering::Release);
    state.waker.wake();
}

/// The output of a spawned task. Dropping the handle detaches the task (it keeps running);
/// dropping it is harmless on any thread. [`JoinHandle::abort`] stops the task.
#[must_use = "dropping a JoinHandle detaches the task; await it to get the output"]
pub struct JoinHandle<T> {
    state: Arc<JoinState<T>>,
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl<T> JoinHandle<T> {
    /// True once the task has finished, panicked or been dropped (aborted included).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.state.link.done.load(Ordering::Acquire)
    }

    /// Stops the task: its future is dropped **at once**, before `abort` returns — its pauses
    /// leave the wheel, its guards run — and awaiting the handle then yields a [`JoinError`]
    /// whose [`is_cancelled`](JoinError::is_cancelled) is true.
    ///
    /// - A task that has already finished (or panicked, or was aborted) is left alone: its
    ///   result stays what it was. Aborting twice is the same as once.
    /// - From inside the task itself the future cannot be dropped while it is being polled;
    ///   it is dropped as soon as the current poll returns `Pending`, before any other task
    ///   is polled, and is never polled again. If that poll completes instead, the task has
    ///   finished and the handle yields its output.
    ///
    /// # Panics
    /// Off the loop thread (even for a finished task, so that misuse shows in tests), or if
    /// the task is unfinished and belongs to a loop on another thread.
    #[track_caller]
    pub fn abort(&self) {
        self.state.link.abort("JoinHandle::abort");
    }

    /// A handle that can only abort the task: `Clone`, `'static`, `Send` whatever the output
    /// type — for keeping next to other behaviours ([`super::Keyed`]) or in a closure.
    #[must_use]
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            link: self.state.link.clone(),
        }
    }
}

/// Aborts a spawned task without owning its output; from [`JoinHandle::abort_handle`].
/// Cloning it is cheap; dropping it does nothing to the task.
#[derive(Clone)]
pub struct AbortHandle {
    link: Arc<TaskWaker>,
}

impl AbortHandle {
    /// Same as [`JoinHandle::abort`].
    ///
    /// # Panics
    /// As [`JoinHandle::abort`].
    #[track_caller]
    pub fn abort(&self) {
        self.link.abort("AbortHandle::abort");
    }

    /// True once the task has finished, panicked or been dropped (aborted included).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.link.done.load(Ordering::Acquire)
    }
}

impl fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbortHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if !self.is_finished() {
            self.state.waker.register(cx.waker());
            if !self.is_finished() {
                return Poll::Pending;
            }
        }
        let taken = self
            .state
            .result
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        match taken {
            Some(result) => Poll::Ready(result),
            // Polled again after completion: the output was already handed out.
            None => Poll::Ready(Err(JoinError { panicked: false })),
        }
    }
}
