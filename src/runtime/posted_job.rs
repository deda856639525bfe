//! One entry of the post queue: a closure posted to the loop, stored inside the entry when it
//! is small, and the site it was posted from.
//!
//! Why: a `Box<dyn FnOnce()>` per post is a `malloc` on the producer's thread whose `free`
//! always happens on the loop thread, so the producer's allocator cache never holds a block
//! and every post pays the slow path (docs/performance.md, "wake latency", the fourth pass:
//! 1.9–2.7 µs of the producer's 3–3.7 µs before its wake). A [`PostedJob`] keeps a closure of
//! up to [`INLINE_BYTES`] bytes (alignment up to [`INLINE_ALIGN`]) in the entry itself, so a
//! post allocates nothing; a larger or more aligned one is boxed, and the box is what the
//! entry holds.
//!
//! Owns: the entry's storage and the lifetime of the closure in it. A closure leaves the
//! entry exactly once: called ([`PostedJob::run`]) or dropped (the entry dropped unrun, e.g.
//! with the loop). The entry's type-erased half is a pointer to a static table of two
//! functions made for the closure's type (call-and-consume, drop), the way a hand-written
//! vtable is.
//!
//! Size: 32 bytes of storage (aligned to 8), the table pointer and the site make a 48-byte
//! entry. 32 bytes holds what posts capture in this crate (an `Instant` in
//! `examples/wake_latency`, a `u64` in `benches/post`, a channel sender or an `Arc` or two in
//! the tests, a sender and a `String` for a reply) and `spawn_with`'s closure (its `make`
//! plus the site) for a `make` of up to 24 bytes; a future passed to `spawn` is mostly bigger
//! and takes the box (the task it becomes allocates anyway). Not bigger, because the loop
//! moves entries under the queue's lock when it takes part of a backlog, and the buffer grows
//! by copying them: a 64-byte entry aligned to 64 (48 bytes of storage) cost post throughput
//! in `benches/post` (docs/performance.md, "wake latency", fifth pass).

use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::panic::Location;

/// Bytes of closure state stored in the entry without allocating.
pub(crate) const INLINE_BYTES: usize = 32;
/// The largest alignment a closure stored in the entry may have.
pub(crate) const INLINE_ALIGN: usize = 8;

/// Room for one closure: [`INLINE_BYTES`] bytes aligned to [`INLINE_ALIGN`].
#[repr(C, align(8))]
struct Storage(MaybeUninit<[u8; INLINE_BYTES]>);

const _: () = assert!(std::mem::align_of::<Storage>() == INLINE_ALIGN);
const _: () = assert!(std::mem::size_of::<Storage>() == INLINE_BYTES);

/// What the entry knows of its closure's type: two functions made for it.
struct Table {
    /// Moves the closure out of the storage and calls it. The storage is uninitialised after.
    call: unsafe fn(*mut Storage),
    /// Drops the closure in place. The storage is uninitialised after.
    drop: unsafe fn(*mut Storage),
}

/// The [`Table`] of closure type `F` (stored in place: the caller checked it fits).
struct TableOf<F>(PhantomData<F>);

impl<F: FnOnce()> TableOf<F> {
    const TABLE: Table = Table {
        call: call::<F>,
        drop: drop_in_place::<F>,
    };
}

/// # Safety
/// `storage` holds an initialised `F`, written by [`PostedJob::in_place`], that nothing will
/// read or drop again.
unsafe fn call<F: FnOnce()>(storage: *mut Storage) {
    // SAFETY: by this function's contract the storage holds an `F` nobody else will use, at an
    // address aligned for it (`in_place` checked `F`'s alignment against the storage's), so
    // reading it out moves it to this frame; a panic in `f` drops it here, once.
    let f = unsafe { storage.cast::<F>().read() };
    f();
}

/// # Safety
/// As [`call`]: `storage` holds an initialised `F` that nothing will read or drop again.
unsafe fn drop_in_place<F>(storage: *mut Storage) {
    // SAFETY: by this function's contract the storage holds a live, aligned `F` that is never
    // used again, so dropping it in place is its one drop.
    unsafe { storage.cast::<F>().drop_in_place() }
}

/// A closure posted to the loop, and where it was posted. Runs once ([`PostedJob::run`]) or
/// is dropped unrun; either way its captures are dropped exactly once.
#[repr(C)]
pub(crate) struct PostedJob {
    /// The closure (or, for one that does not fit, a `Box` of it). Always initialised while
    /// the entry lives: only `run` and `drop` end it, and each consumes the entry.
    storage: Storage,
    table: &'static Table,
    site: &'static Location<'static>,
}

const _: () = assert!(std::mem::size_of::<PostedJob>() == 48);

// SAFETY (of the auto traits, no `unsafe` here): `PostedJob` is `Send` and `Sync` by its
// fields (bytes, a `&'static` table, a location). `Send` is right because the only
// constructor, `new`, takes `F: Send`; `Sync` because a shared reference gives no access to
// the closure (only `run` and `drop`, which own the entry, touch it).

impl PostedJob {
    /// Stores `job` (in place if it fits, else boxed) with the site it was posted from.
    pub(crate) fn new<F>(job: F, site: &'static Location<'static>) -> Self
    where
        F: FnOnce() + Send + 'static,
    {
        if fits::<F>() {
            Self::in_place(job, site)
        } else {
            // `Box<F>` is one pointer: it always fits.
            Self::in_place(Box::new(job), site)
        }
    }

    /// Whether closures of type `F` are stored without a box.
    #[cfg(test)]
    pub(crate) fn is_inline<F>() -> bool {
        fits::<F>()
    }

    /// Stores `job` in the entry itself.
    ///
    /// # Panics
    /// If `F` does not fit (never: `new` checks first; the check folds away).
    fn in_place<F>(job: F, site: &'static Location<'static>) -> Self
    where
        F: FnOnce() + Send + 'static,
    {
        assert!(fits::<F>(), "a posted closure stored in place must fit");
        let mut storage = Storage(MaybeUninit::uninit());
        // SAFETY: `F` fits the storage in size and alignment (asserted above), and the storage
        // is fresh, so writing `job` there overwrites nothing; the entry built below owns it.
        unsafe { (&raw mut storage).cast::<F>().write(job) };
        PostedJob {
            storage,
            table: &TableOf::<F>::TABLE,
            site,
        }
    }

    /// Where the closure was posted.
    pub(crate) fn site(&self) -> &'static Location<'static> {
        self.site
    }

    /// Calls the closure, consuming it. A panic in it unwinds out of here, with the closure's
    /// captures dropped once on the way.
    pub(crate) fn run(self) {
        // The closure leaves through `call`: the entry's own drop must not run after.
        let mut this = ManuallyDrop::new(self);
        // SAFETY: the storage holds the live closure `table` was made for (the entry's
        // invariant), and `this` is never dropped or used again, so `call` moves it out once.
        unsafe { (this.table.call)(&raw mut this.storage) }
    }
}

impl Drop for PostedJob {
    /// Unrun (the loop dropped or shut down with posts queued): drop the closure's captures.
    fn drop(&mut self) {
        // SAFETY: the storage holds the live closure `table` was made for (the entry's
        // invariant; `run` never gets here), and after `drop` nothing reads the entry.
        unsafe { (self.table.drop)(&raw mut self.storage) }
    }
}

impl std::fmt::Debug for PostedJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostedJob")
            .field("site", &self.site)
            .finish_non_exhaustive()
    }
}

/// Whether an `F` fits the storage: its size and its alignment.
const fn fits<F>() -> bool {
    std::mem::size_of::<F>() <= INLINE_BYTES && std::mem::align_of::<F>() <= INLINE_ALIGN
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn here() -> &'static Location<'static> {
        Location::caller()
    }

    /// Whether the closure `job` would be stored in place.
    fn inline_of<F>(_job: &F) -> bool {
        PostedJob::is_inline::<F>()
    }

    /// Counts its drops in a shared counter.
    struct Dropped(Arc<AtomicUsize>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A capture that is too big for the storage.
    struct Big {
        bytes: [u8; INLINE_BYTES + 1],
        _dropped: Dropped,
    }

    /// A capture more aligned than the storage.
    #[repr(align(16))]
    struct Aligned {
        value: u64,
        _dropped: Dropped,
    }

    fn counters() -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)))
    }

    #[test]
    fn a_small_closure_is_stored_in_place_and_runs_once() {
        let (ran, dropped) = counters();
        let (r, d) = (ran.clone(), Dropped(dropped.clone()));
        let job = move || {
            let _keep = &d;
            r.fetch_add(1, Ordering::SeqCst);
        };
        assert!(inline_of(&job));
        let job = PostedJob::new(job, here());
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "stored, not dropped");
        job.run();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "captures dropped once, by the call"
        );
    }

    #[test]
    fn a_closure_of_exactly_the_storage_is_in_place() {
        let sum = Arc::new(AtomicUsize::new(0));
        let s = sum.clone();
        let words = [1usize, 2, 3];
        let job = move || {
            s.fetch_add(words.iter().sum(), Ordering::SeqCst);
        };
        assert_eq!(std::mem::size_of_val(&job), INLINE_BYTES);
        assert!(inline_of(&job));
        PostedJob::new(job, here()).run();
        assert_eq!(sum.load(Ordering::SeqCst), 6);
    }

    #[test]
    fn an_unrun_job_drops_its_captures_once() {
        let (ran, dropped) = counters();
        let (r, d) = (ran.clone(), Dropped(dropped.clone()));
        let job = PostedJob::new(
            move || {
                let _keep = &d;
                r.fetch_add(1, Ordering::SeqCst);
            },
            here(),
        );
        drop(job);
        assert_eq!(ran.load(Ordering::SeqCst), 0, "never called");
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_big_closure_is_boxed_and_behaves() {
        let (ran, dropped) = counters();
        let big = Big {
            bytes: [7; INLINE_BYTES + 1],
            _dropped: Dropped(dropped.clone()),
        };
        let r = ran.clone();
        let job = move || {
            r.fetch_add(usize::from(big.bytes[INLINE_BYTES]), Ordering::SeqCst);
            drop(big);
        };
        assert!(!inline_of(&job));
        PostedJob::new(job, here()).run();
        assert_eq!(ran.load(Ordering::SeqCst), 7);
        assert_eq!(dropped.load(Ordering::SeqCst), 1);

        let unrun = Big {
            bytes: [0; INLINE_BYTES + 1],
            _dropped: Dropped(dropped.clone()),
        };
        drop(PostedJob::new(move || drop(unrun), here()));
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            2,
            "unrun and boxed: dropped once"
        );
    }

    #[test]
    fn an_over_aligned_closure_is_boxed_and_behaves() {
        let (ran, dropped) = counters();
        let aligned = Aligned {
            value: 5,
            _dropped: Dropped(dropped.clone()),
        };
        let r = ran.clone();
        let job = move || {
            let address = (&raw const aligned).addr();
            assert_eq!(address % 16, 0, "the box keeps the alignment");
            r.fetch_add(aligned.value as usize, Ordering::SeqCst);
        };
        assert!(!inline_of(&job));
        PostedJob::new(job, here()).run();
        assert_eq!(ran.load(Ordering::SeqCst), 5);
        assert_eq!(dropped.load(Ordering::SeqCst), 1);

        let unrun = Aligned {
            value: 1,
            _dropped: Dropped(dropped.clone()),
        };
        drop(PostedJob::new(move || drop(unrun), here()));
        assert_eq!(dropped.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_zero_sized_closure_runs_and_drops() {
        static RAN: AtomicUsize = AtomicUsize::new(0);
        let job = || {
            RAN.fetch_add(1, Ordering::SeqCst);
        };
        assert_eq!(std::mem::size_of_val(&job), 0);
        PostedJob::new(job, here()).run();
        drop(PostedJob::new(job, here()));
        assert_eq!(RAN.load(Ordering::SeqCst), 1, "the dropped one never ran");
    }

    #[test]
    fn a_panicking_job_drops_its_captures_once_while_unwinding() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let d = Dropped(dropped.clone());
        let job = PostedJob::new(
            move || {
                let _keep = &d;
                panic!("posted job panics");
            },
            here(),
        );
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()));
        assert!(caught.is_err());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_site_is_kept() {
        let site = here();
        let job = PostedJob::new(|| {}, site);
        assert_eq!(job.site(), site);
        assert!(format!("{job:?}").contains("posted_job.rs"));
    }
}
