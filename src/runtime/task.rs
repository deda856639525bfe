//! One spawned task in one allocation: a header, then the future, whose memory holds the
//! output once the future is done; and a waker vtable of its own whose data pointer is that
//! header, so a waker, a join handle, an abort handle, a queue entry and a wheel entry are
//! each one pointer to the same block.
//!
//! (async-task's raw task was the reference read for this design; the code and its rules are
//! this crate's own.)
//!
//! Owns the block's layout, its reference count and flags, its wakers and its handles'
//! access to the output. It never polls or drops a future by itself: the executor
//! (`executor.rs`) decides when, on the loop thread, and calls the block's functions.
//!
//! # Layout
//!
//! `Block<F>` is `#[repr(C)] { header: Header, stage: Stage<F> }`, so a pointer to the block is
//! a pointer to its header, and every type-erased path works with `NonNull<Header>`. `Stage<F>`
//! is a union of the future and its `Result<F::Output, JoinError>`: the future is dropped in
//! place before the output is written over it. What the block's type was is in the header's
//! [`Meta`]: the functions that know `F`, and the spawn site. One `Meta` is made per future
//! type and spawn site, and kept for the life of the process (see [`meta`]).
//!
//! # Who touches what
//!
//! - `state` (atomic, any thread): the reference count and the flags other threads read or
//!   write: `DONE`, `OUTPUT`, `HANDLE`, `AWAITER`, `REMOTE_QUEUED`.
//! - `local`, `index` and `wheel_holds` (plain cells): only the thread of the task's loop, and
//!   so the future (polled and dropped there only, by the executor).
//! - The output: written on the loop thread before `DONE` is set (release); taken by whoever
//!   clears `OUTPUT` after seeing it set (acquire): the join handle, or the last reference.
//!
//! # Invariants
//!
//! 1. The block lives while its count is non-zero. One count per [`TaskRef`] (wakers, join
//!    and abort handles, remote-wake queue entries), plus one for the loop, held while the
//!    task is `REGISTERED` or `QUEUED` or has wheel holds: the executor's registry and ready
//!    FIFO, and the loop's wheel entries that wake the task (`runtime::job`), hold plain
//!    pointers and rely on it. A wheel entry takes a *hold* ([`hold_for_wheel`]), a plain
//!    tally in the header, instead of a count: taking and dropping it, once per pause, then
//!    costs no atomic operation.
//! 2. `LIVE` ⇔ the stage holds the future. `REGISTERED` ⇔ the executor keeps the task in its
//!    registry at `index`. `LIVE` ⇒ `REGISTERED` (between the two changes of a completion, a
//!    task may briefly be registered and no longer `LIVE`: its future's drop may drop the
//!    last wheel hold then, and the loop's count stays until the task leaves the registry).
//! 3. `LIVE` is cleared before the future is dropped, so it is never dropped twice, and a wake
//!    or an abort that the drop itself causes is a no-op for this task.
//! 4. `OUTPUT` ⇒ the future is gone and the stage holds the output; whoever clears `OUTPUT`
//!    owns the output and is the only one to read or drop it.
//! 5. `DONE` is set once, after the output is written (or dropped, with no handle to want
//!    it), and never cleared. `HANDLE` is set at spawn iff a join handle exists, and cleared
//!    when it goes.
//! 6. `AWAITER` ⇔ the loop's awaiter table holds a waker for this task; both change together
//!    under that table's lock.

use std::any::TypeId;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::panic::Location;
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

use super::context::{Shared, core, is_loop_thread, with_current};

/// The result is in: finished, panicked or cancelled.
const DONE: usize = 1;
/// The stage holds the output, not yet taken.
const OUTPUT: usize = 1 << 1;
/// A join handle exists (so the output is kept for it).
const HANDLE: usize = 1 << 2;
/// A waker awaits the result in the loop's awaiter table.
const AWAITER: usize = 1 << 3;
/// On the loop's cross-thread wake queue and not yet drained.
const REMOTE_QUEUED: usize = 1 << 4;
/// One reference.
const REF_ONE: usize = 1 << 5;
/// A count this high means leaked references: stop rather than wrap.
const REF_LIMIT: usize = usize::MAX / 2;

/// Loop-thread flags (`Header::local`).
pub(super) mod local {
    /// The stage holds the future (invariant 2).
    pub(in crate::runtime) const LIVE: u8 = 1;
    /// In the ready FIFO since its last poll started.
    pub(in crate::runtime) const QUEUED: u8 = 1 << 1;
    /// Being polled.
    pub(in crate::runtime) const POLLING: u8 = 1 << 2;
    /// Aborted while being polled (by itself): drop it when the poll returns.
    pub(in crate::runtime) const ABORT_AFTER_POLL: u8 = 1 << 3;
    /// In the executor's registry (invariant 2).
    pub(in crate::runtime) const REGISTERED: u8 = 1 << 4;
}

/// Why a task produced no output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinError {
    pub(super) panicked: bool,
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

/// What a block is: the functions that know its future type, and where it was spawned.
pub(super) struct Meta {
    pub(super) site: &'static Location<'static>,
    /// Polls the future; on `Ready` drops it and delivers the output. Loop thread, `LIVE`.
    pub(super) poll: unsafe fn(NonNull<Header>, &mut Context<'_>) -> Poll<()>,
    /// Drops the future in place. Loop thread; the caller cleared `LIVE`.
    pub(super) drop_future: unsafe fn(NonNull<Header>),
    /// Delivers `Err(error)` (the future is gone). Loop thread, once.
    pub(super) fail: unsafe fn(NonNull<Header>, JoinError),
    /// Moves the output to `*mut Result<Output, JoinError>`. Caller owns the output (inv. 4).
    take_output: unsafe fn(NonNull<Header>, *mut ()),
    /// Drops the output in place. Caller owns the output (inv. 4).
    drop_output: unsafe fn(NonNull<Header>),
    /// Frees the block (and what it still holds). Last reference only.
    dealloc: unsafe fn(NonNull<Header>),
}

/// The first part of every task block.
pub(crate) struct Header {
    state: AtomicUsize,
    pub(super) meta: &'static Meta,
    /// The loop's shared half, from `Arc::into_raw`: the block holds one strong count.
    shared: NonNull<Shared>,
    /// Position in the executor's registry while `LIVE` (loop thread only).
    pub(super) index: Cell<u32>,
    /// `local::*` flags (loop thread only).
    pub(super) local: Cell<u8>,
    /// Wheel entries pointing at this task with a hold rather than a count (invariant 1;
    /// loop thread only). It fits in the header's padding: the block does not grow.
    wheel_holds: Cell<u16>,
}

impl Header {
    pub(super) fn shared(&self) -> &Shared {
        // SAFETY: the block holds a strong count of this `Arc` until `dealloc`, and a header
        // is only reached through a live reference to its block (invariant 1).
        unsafe { self.shared.as_ref() }
    }

    pub(super) fn site(&self) -> &'static Location<'static> {
        self.meta.site
    }

    pub(super) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) & DONE != 0
    }

    /// The flags, with `set` turned on and `clear` off (loop thread only).
    #[inline]
    pub(super) fn update_local(&self, set: u8, clear: u8) -> u8 {
        let flags = (self.local.get() | set) & !clear;
        self.local.set(flags);
        flags
    }

    /// Whether the loop still holds its count on the block (invariant 1; loop thread only).
    #[inline]
    pub(super) fn loop_holds(&self) -> bool {
        self.local.get() & (local::REGISTERED | local::QUEUED) != 0 || self.wheel_holds.get() != 0
    }

    /// Marks the task as on the cross-thread queue; false when it already is, or is done.
    fn claim_remote(&self) -> bool {
        self.state.fetch_or(REMOTE_QUEUED, Ordering::AcqRel) & (REMOTE_QUEUED | DONE) == 0
    }

    /// Off the cross-thread queue again (the loop drained it): a later remote wake queues anew.
    pub(super) fn clear_remote(&self) {
        self.state.fetch_and(!REMOTE_QUEUED, Ordering::AcqRel);
    }
}

/// A counted pointer to a task block: what wakers, handles, wheel entries and the
/// cross-thread queue hold.
pub(crate) struct TaskRef(NonNull<Header>);

// SAFETY: what another thread may reach through a `TaskRef` is the atomic `state`, the
// immutable `meta` and the `Shared` (itself `Sync`); the `Cell`s and the future are touched
// only on the loop thread (module docs), and the output only by its owner (invariant 4).
unsafe impl Send for TaskRef {}
// SAFETY: as for `Send`: every method reachable from `&TaskRef` on another thread touches
// only atomics, immutable data or `Sync` data.
unsafe impl Sync for TaskRef {}

impl TaskRef {
    /// Takes over one count the caller holds on `ptr`.
    ///
    /// # Safety
    /// `ptr` is a live block and the caller gives up one of its counts.
    pub(super) unsafe fn adopt(ptr: NonNull<Header>) -> TaskRef {
        TaskRef(ptr)
    }

    /// A new count on the live block `ptr`.
    ///
    /// # Safety
    /// `ptr` is a live block (someone holds a count for the duration of this call).
    pub(super) unsafe fn new_count(ptr: NonNull<Header>) -> TaskRef {
        // SAFETY: live, per the caller.
        unsafe { acquire(ptr) };
        TaskRef(ptr)
    }

    pub(super) fn ptr(&self) -> NonNull<Header> {
        self.0
    }

    pub(super) fn header(&self) -> &Header {
        // SAFETY: this reference keeps the block alive (invariant 1).
        unsafe { self.0.as_ref() }
    }
}

impl Clone for TaskRef {
    fn clone(&self) -> Self {
        // SAFETY: `self` keeps the block alive.
        unsafe { TaskRef::new_count(self.0) }
    }
}

impl Drop for TaskRef {
    fn drop(&mut self) {
        // SAFETY: this reference holds one count, given up here.
        unsafe { release(self.0) };
    }
}

/// One more count.
///
/// # Safety
/// `ptr` is a live block.
unsafe fn acquire(ptr: NonNull<Header>) {
    // SAFETY: live, per the caller.
    let header = unsafe { ptr.as_ref() };
    // Relaxed: a new count is made from an existing one, which already orders the access.
    if header.state.fetch_add(REF_ONE, Ordering::Relaxed) > REF_LIMIT {
        std::process::abort();
    }
}

/// One count fewer; frees the block with the last.
///
/// # Safety
/// The caller holds a count on `ptr` and gives it up.
pub(super) unsafe fn release(ptr: NonNull<Header>) {
    // SAFETY: the caller's count keeps it alive until the decrement.
    let header = unsafe { ptr.as_ref() };
    let meta = header.meta;
    // AcqRel: the last holder must see every other holder's writes before it frees.
    let before = header.state.fetch_sub(REF_ONE, Ordering::AcqRel);
    if before & !(REF_ONE - 1) == REF_ONE {
        // SAFETY: that was the last count: nobody else can reach the block.
        unsafe { (meta.dealloc)(ptr) };
    }
}

/// The block behind a [`Header`] pointer of type `F`.
#[repr(C)]
struct Block<F: Future> {
    header: Header,
    stage: UnsafeCell<Stage<F>>,
}

/// The future, then (once it is dropped) its output, in the same bytes.
union Stage<F: Future> {
    future: ManuallyDrop<F>,
    output: ManuallyDrop<Result<F::Output, JoinError>>,
}

impl<F: Future + 'static> Block<F> {
    /// Allocates a task for `future`, `LIVE` and `QUEUED`, holding the loop's count and, if
    /// `handle`, one for the join handle.
    fn allocate(
        future: F,
        meta: &'static Meta,
        shared: Arc<Shared>,
        handle: bool,
    ) -> NonNull<Header> {
        let (state, refs) = if handle { (HANDLE, 2) } else { (0, 1) };
        let block = Box::new(Block {
            header: Header {
                state: AtomicUsize::new(state | (refs * REF_ONE)),
                meta,
                shared: NonNull::new(Arc::into_raw(shared).cast_mut())
                    .unwrap_or_else(|| unreachable!("Arc::into_raw is never null")),
                index: Cell::new(0),
                local: Cell::new(local::LIVE | local::REGISTERED | local::QUEUED),
                wheel_holds: Cell::new(0),
            },
            stage: UnsafeCell::new(Stage {
                future: ManuallyDrop::new(future),
            }),
        });
        NonNull::from(Box::leak(block)).cast()
    }

    /// The stage of the block at `ptr`.
    ///
    /// # Safety
    /// `ptr` is a live block of this type, and the caller has the right to the stage part it
    /// uses (the future: loop thread and `LIVE`; the output: its owner, invariant 4).
    unsafe fn stage<'a>(ptr: NonNull<Header>) -> &'a mut Stage<F> {
        // SAFETY: `Block` is `repr(C)` with the header first, so the block pointer is the
        // header pointer; the caller vouches for the type and for exclusive use.
        unsafe { &mut *(*ptr.cast::<Self>().as_ptr()).stage.get() }
    }

    /// # Safety
    /// As [`Meta::poll`].
    unsafe fn poll(ptr: NonNull<Header>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: `LIVE` on the loop thread: the future is there and ours to poll.
        let stage = unsafe { Self::stage(ptr) };
        // SAFETY: the future never moves: it lives in the block until dropped in place.
        let future = unsafe { Pin::new_unchecked(&mut *stage.future) };
        let Poll::Ready(output) = future.poll(cx) else {
            return Poll::Pending;
        };
        // SAFETY: the block is live while being polled (the loop's count).
        let header = unsafe { ptr.as_ref() };
        header.update_local(0, local::LIVE);
        // SAFETY: `LIVE` was just cleared: this is the future's one drop (invariant 3).
        unsafe { ManuallyDrop::drop(&mut stage.future) };
        // SAFETY: the future is gone; the output is delivered once.
        unsafe { Self::deliver(ptr, Ok(output)) };
        Poll::Ready(())
    }

    /// # Safety
    /// As [`Meta::drop_future`].
    unsafe fn drop_future(ptr: NonNull<Header>) {
        // SAFETY: the caller cleared `LIVE` on the loop thread: the future is ours to drop,
        // once (invariant 3).
        unsafe { ManuallyDrop::drop(&mut Self::stage(ptr).future) };
    }

    /// # Safety
    /// As [`Meta::fail`].
    unsafe fn fail(ptr: NonNull<Header>, error: JoinError) {
        // SAFETY: forwarded.
        unsafe { Self::deliver(ptr, Err(error)) };
    }

    /// Stores the result for the join handle (or drops it when there is none), then sets
    /// `DONE` and wakes whoever awaits it.
    ///
    /// # Safety
    /// Loop thread, the future already dropped, called once per task.
    unsafe fn deliver(ptr: NonNull<Header>, result: Result<F::Output, JoinError>) {
        // SAFETY: live (the loop's count).
        let header = unsafe { ptr.as_ref() };
        let done = if header.state.load(Ordering::Acquire) & HANDLE != 0 {
            // SAFETY: the future is gone and nobody owns an output yet: the bytes are free.
            unsafe { Self::stage(ptr).output = ManuallyDrop::new(result) };
            DONE | OUTPUT
        } else {
            // No handle will ever want it. (If the handle is dropped on another thread right
            // now, after the check above, the output is stored and `dealloc` drops it.)
            drop(result);
            DONE
        };
        // SeqCst, paired with the handle's: either it sees `DONE`, or this sees `AWAITER`.
        let before = header.state.fetch_or(done, Ordering::SeqCst);
        if before & AWAITER != 0
            && let Some(waker) = header.shared().take_awaiter(ptr, || {
                header.state.fetch_and(!AWAITER, Ordering::SeqCst) & AWAITER != 0
            })
        {
            waker.wake();
        }
    }

    /// # Safety
    /// As [`Meta::take_output`].
    unsafe fn take_output(ptr: NonNull<Header>, out: *mut ()) {
        // SAFETY: the caller owns the output (cleared `OUTPUT`), and `out` points to a
        // `MaybeUninit<Result<F::Output, JoinError>>` (the handle's own type).
        unsafe {
            let output = ManuallyDrop::take(&mut Self::stage(ptr).output);
            out.cast::<Result<F::Output, JoinError>>().write(output);
        }
    }

    /// # Safety
    /// As [`Meta::drop_output`].
    unsafe fn drop_output(ptr: NonNull<Header>) {
        // SAFETY: the caller owns the output (cleared `OUTPUT`).
        unsafe { ManuallyDrop::drop(&mut Self::stage(ptr).output) };
    }

    /// # Safety
    /// As [`Meta::dealloc`].
    unsafe fn dealloc(ptr: NonNull<Header>) {
        // SAFETY: the last count: nobody else can reach the block. The future is gone (the
        // loop's count outlives `LIVE`); an output still there was orphaned by a handle
        // dropped as the task finished, and is ours.
        unsafe {
            let header = ptr.as_ref();
            if header.state.load(Ordering::Acquire) & OUTPUT != 0 {
                Self::drop_output(ptr);
            }
            drop(Arc::from_raw(header.shared.as_ptr().cast_const()));
            drop(Box::from_raw(ptr.cast::<Self>().as_ptr()));
        }
    }

    fn new_meta(site: &'static Location<'static>) -> Meta {
        Meta {
            site,
            poll: Self::poll,
            drop_future: Self::drop_future,
            fail: Self::fail,
            take_output: Self::take_output,
            drop_output: Self::drop_output,
            dealloc: Self::dealloc,
        }
    }
}

/// The [`Meta`] of future type `F` spawned at `site`: made once per pair and thread, kept for
/// the life of the process (a few per spawn line; the header then holds one pointer for both
/// the functions and the site).
fn meta<F: Future + 'static>(site: &'static Location<'static>) -> &'static Meta {
    type Metas = HashMap<(TypeId, usize), &'static Meta>;
    thread_local! {
        static METAS: RefCell<Metas> = RefCell::new(HashMap::new());
    }
    let key = (TypeId::of::<F>(), std::ptr::from_ref(site) as usize);
    METAS.with(|metas| {
        *metas
            .borrow_mut()
            .entry(key)
            .or_insert_with(|| Box::leak(Box::new(Block::<F>::new_meta(site))))
    })
}

/// Allocates a task for `future`, `LIVE`, `REGISTERED` and `QUEUED` (the caller registers and
/// queues it), holding the loop's count and, if `handle`, the join handle's.
pub(super) fn allocate<F: Future + 'static>(
    future: F,
    site: &'static Location<'static>,
    shared: Arc<Shared>,
    handle: bool,
) -> NonNull<Header> {
    Block::allocate(future, meta::<F>(site), shared, handle)
}

/// Starts loading task `ptr`'s header and the start of its future into the cache, for a
/// wake or a poll coming shortly: a hint, with no effect on what the program does.
#[inline]
pub(super) fn prefetch(ptr: NonNull<Header>) {
    // The future follows the 32-byte header: the next line holds its start (the block is
    // at least 16-aligned, so header and future may straddle two lines). Prefetching never
    // faults, so the second address need not be inside the block.
    let block = ptr.as_ptr().cast::<u8>();
    crate::slab::prefetch_address(block);
    crate::slab::prefetch_address(block.wrapping_add(64));
}

/// Takes a wheel hold on task `ptr` for a wheel entry that will wake it (invariant 1); false
/// when the task already has `u16::MAX` of them (the entry then keeps a counted waker
/// instead, see `runtime::job`).
///
/// # Safety
/// On the task's loop thread, while the loop holds its count on `ptr` (e.g. while the task
/// is being polled).
#[inline]
pub(super) unsafe fn hold_for_wheel(ptr: NonNull<Header>) -> bool {
    // SAFETY: live: the loop's count, per the caller.
    let header = unsafe { ptr.as_ref() };
    let holds = header.wheel_holds.get();
    if holds == u16::MAX {
        return false;
    }
    header.wheel_holds.set(holds + 1);
    true
}

/// Gives up one wheel hold on task `ptr`; with the last one, of a task the executor is done
/// with, the loop's count goes too (and may free the block).
///
/// # Safety
/// On the task's loop thread; the caller owns one hold ([`hold_for_wheel`]) and gives it up.
#[inline]
pub(super) unsafe fn drop_wheel_hold(ptr: NonNull<Header>) {
    // SAFETY: the caller's hold keeps the loop's count, and so the block (invariant 1).
    let header = unsafe { ptr.as_ref() };
    let holds = header.wheel_holds.get();
    debug_assert!(holds > 0, "a wheel hold was given up twice");
    header.wheel_holds.set(holds.saturating_sub(1));
    if !header.loop_holds() {
        // SAFETY: that was the last thing the loop's count was held for.
        unsafe { release(ptr) };
    }
}

/// A counted waker for task `ptr` (what a wheel entry keeps when the task's holds are full).
///
/// # Safety
/// `ptr` is a live block (someone holds a count for the duration of this call).
pub(super) unsafe fn counted_waker(ptr: NonNull<Header>) -> Waker {
    // Cloning the lent waker takes a count of its own.
    Waker::clone(&*lent_waker(ptr))
}

static WAKER_VTABLE: RawWakerVTable =
    RawWakerVTable::new(clone_waker, wake_waker, wake_by_ref_waker, drop_waker);

/// The task's waker, lent for one poll: it holds no count of its own (the loop's count keeps
/// the block alive while it polls), so lending it touches no atomic.
pub(super) fn lent_waker(ptr: NonNull<Header>) -> ManuallyDrop<Waker> {
    // SAFETY: the vtable's functions treat the data pointer as a task header and uphold the
    // `RawWaker` contract (counts for clones, released on drop); `ManuallyDrop` keeps this
    // uncounted copy from ever being dropped.
    ManuallyDrop::new(unsafe { Waker::from_raw(RawWaker::new(ptr.as_ptr().cast(), &WAKER_VTABLE)) })
}

/// The task `waker` wakes, if it is a task waker.
pub(super) fn waker_task(waker: &Waker) -> Option<NonNull<Header>> {
    std::ptr::eq(waker.vtable(), &WAKER_VTABLE)
        .then(|| NonNull::new(waker.data().cast_mut().cast()))
        .flatten()
}

unsafe fn clone_waker(data: *const ()) -> RawWaker {
    // SAFETY: a waker's data is a live header while the waker exists.
    let ptr = unsafe { NonNull::new_unchecked(data.cast_mut().cast::<Header>()) };
    // SAFETY: as above.
    unsafe {
        acquire(ptr);
        ptr.as_ref().shared().count_task_waker(true);
    }
    RawWaker::new(data, &WAKER_VTABLE)
}

unsafe fn wake_waker(data: *const ()) {
    // SAFETY: as `wake_by_ref_waker`, then this waker's count is given up.
    unsafe {
        wake_by_ref_waker(data);
        drop_waker(data);
    }
}

unsafe fn wake_by_ref_waker(data: *const ()) {
    // SAFETY: a waker's data is a live header while the waker exists.
    let ptr = unsafe { NonNull::new_unchecked(data.cast_mut().cast::<Header>()) };
    wake(ptr);
}

unsafe fn drop_waker(data: *const ()) {
    // SAFETY: the waker holds one count, given up here; until then the header is live.
    unsafe {
        let ptr = NonNull::new_unchecked(data.cast_mut().cast::<Header>());
        ptr.as_ref().shared().count_task_waker(false);
        release(ptr);
    }
}

/// Wakes the live task `ptr`: straight into the ready FIFO on its loop's thread, else through
/// the loop's cross-thread queue (once until drained).
fn wake(ptr: NonNull<Header>) {
    // SAFETY: the caller's waker holds a count.
    let header = unsafe { ptr.as_ref() };
    let shared = header.shared();
    let woken_here = is_loop_thread(shared.id)
        && with_current(|core| core.executor.wake(core, ptr)).unwrap_or(false);
    if !woken_here && header.claim_remote() {
        // SAFETY: live (the caller's count); the queue entry gets a count of its own.
        let task = unsafe { TaskRef::new_count(ptr) };
        shared.push_remote_wake(super::executor::RemoteWake::Task(task));
    }
}

/// The output of a spawned task. Dropping the handle detaches the task (it keeps running);
/// dropping it is harmless on any thread. [`JoinHandle::abort`] stops the task.
#[must_use = "dropping a JoinHandle detaches the task; await it to get the output"]
pub struct JoinHandle<T> {
    task: TaskRef,
    _output: PhantomData<T>,
}

// SAFETY: the handle's only access to `T` is taking the output out (by value, on whichever
// thread polls it), so it may move to another thread exactly when `T` may.
unsafe impl<T: Send> Send for JoinHandle<T> {}
// SAFETY: through `&JoinHandle` nothing reaches `T` (only the atomic flags and the abort).
unsafe impl<T: Send> Sync for JoinHandle<T> {}
// The output is never pinned: it is moved out whole.
impl<T> Unpin for JoinHandle<T> {}

impl<T> JoinHandle<T> {
    /// The handle of the task `ptr`, taking over the count `allocate` gave it.
    ///
    /// # Safety
    /// `ptr` was allocated for a future whose output is `T`, with a handle, and this is its
    /// one `JoinHandle`.
    pub(super) unsafe fn new(ptr: NonNull<Header>) -> Self {
        JoinHandle {
            // SAFETY: the handle's count, per the caller.
            task: unsafe { TaskRef::adopt(ptr) },
            _output: PhantomData,
        }
    }

    /// True once the task has finished, panicked or been dropped (aborted included).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.task.header().is_done()
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
        abort(&self.task, "JoinHandle::abort");
    }

    /// A handle that can only abort the task: `Clone`, `'static`, `Send` whatever the output
    /// type — for keeping next to other behaviours ([`super::Keyed`]) or in a closure.
    #[must_use]
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            task: self.task.clone(),
        }
    }

    /// Takes the output, now that the task is done.
    fn take(&mut self) -> Result<T, JoinError> {
        let header = self.task.header();
        self.forget_awaiter();
        if header.state.fetch_and(!OUTPUT, Ordering::AcqRel) & OUTPUT == 0 {
            // Polled again after completion: the output was already handed out.
            return Err(JoinError { panicked: false });
        }
        let mut out = MaybeUninit::<Result<T, JoinError>>::uninit();
        // SAFETY: `OUTPUT` was ours to clear, so the output is ours (invariant 4); the block
        // was allocated for output type `T` (`JoinHandle::new`).
        unsafe {
            (header.meta.take_output)(self.task.ptr(), out.as_mut_ptr().cast());
            out.assume_init()
        }
    }

    /// Removes this handle's waker from the awaiter table, if one is there.
    fn forget_awaiter(&self) {
        let header = self.task.header();
        if header.state.load(Ordering::SeqCst) & AWAITER != 0 {
            drop(header.shared().take_awaiter(self.task.ptr(), || {
                header.state.fetch_and(!AWAITER, Ordering::SeqCst) & AWAITER != 0
            }));
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let header = self.task.header();
        if !header.is_done() {
            header
                .shared()
                .put_awaiter(self.task.ptr(), cx.waker().clone(), || {
                    header.state.fetch_or(AWAITER, Ordering::SeqCst);
                });
            // SeqCst, paired with `deliver`'s: either it saw `AWAITER`, or this sees `DONE`.
            if header.state.load(Ordering::SeqCst) & DONE == 0 {
                return Poll::Pending;
            }
        }
        Poll::Ready(self.take())
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        self.forget_awaiter();
        let header = self.task.header();
        let before = header.state.fetch_and(!(HANDLE | OUTPUT), Ordering::AcqRel);
        if before & OUTPUT != 0 {
            // SAFETY: `OUTPUT` was ours to clear: the output is ours to drop (invariant 4).
            unsafe { (header.meta.drop_output)(self.task.ptr()) };
        }
    }
}

/// Aborts a spawned task without owning its output; from [`JoinHandle::abort_handle`].
/// Cloning it is cheap; dropping it does nothing to the task.
#[derive(Clone)]
pub struct AbortHandle {
    task: TaskRef,
}

impl AbortHandle {
    /// Same as [`JoinHandle::abort`].
    ///
    /// # Panics
    /// As [`JoinHandle::abort`].
    #[track_caller]
    pub fn abort(&self) {
        abort(&self.task, "AbortHandle::abort");
    }

    /// True once the task has finished, panicked or been dropped (aborted included).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.task.header().is_done()
    }
}

impl fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbortHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// On the task's loop thread, drops its future (see [`super::executor::Executor::abort`]).
#[track_caller]
fn abort(task: &TaskRef, what: &str) {
    let core = core(what);
    let header = task.header();
    if header.is_done() {
        return;
    }
    assert!(
        core.shared.id == header.shared().id,
        "{what}: the task belongs to another event loop, still running on another thread; \
         abort it from that loop's thread (LoopContext::post)"
    );
    core.executor.abort(task.ptr());
}

#[cfg(test)]
mod tests;
