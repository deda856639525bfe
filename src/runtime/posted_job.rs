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
//!
//! Bounds: the entry erases the closure's type, so only [`PostedJob::new`]'s bounds keep
//! out a closure that may not cross to the loop thread (`Send`) or that borrows a caller's
//! local (`'static`); the entry itself is `Send` and `Sync` by its bytes. Both bounds are
//! checked through the public `post`, which must refuse such a closure to compile:
//!
//! ```compile_fail,E0277
//! // Not `Send`: an `Rc` would be dropped and counted on the loop thread and this one.
//! let el = shardloop::EventLoop::new();
//! let shared = std::rc::Rc::new(1);
//! let _ = el.context().post(move || drop(shared));
//! ```
//!
//! ```compile_fail,E0597
//! // Not `'static`: the closure would read `local` after this frame is gone.
//! let el = shardloop::EventLoop::new();
//! let local = 5_u32;
//! let borrowed = &local;
//! let _ = el.context().post(move || assert_eq!(*borrowed, 5));
//! ```
//!
//! (Stable rustdoc does not check the error codes, so the doc test below shows that the
//! same posts with an `Arc` and with `local` moved in compile: a failure above is the
//! bound's, not a typo's. With `Send` or `'static` taken off `new` and `post`, the crate
//! still compiles and the matching test above fails.)
//!
//! ```
//! let el = shardloop::EventLoop::new();
//! let shared = std::sync::Arc::new(1);
//! let local = 5_u32;
//! let _ = el.context().post(move || assert_eq!((*shared, local), (1, 5)));
//! ```

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

    /// Counts its drops in a `'static` counter (no `Arc` that a double drop would free
    /// twice), then panics.
    struct PanicsOnDrop(&'static AtomicUsize);

    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
            panic!("a capture panics in its drop");
        }
    }

    /// Counts its drops in a `'static` counter.
    struct Counted(&'static AtomicUsize);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_capture_that_panics_in_its_drop_after_the_call_is_dropped_once_with_the_rest() {
        static PANICKY: AtomicUsize = AtomicUsize::new(0);
        static OTHER: AtomicUsize = AtomicUsize::new(0);
        static RAN: AtomicUsize = AtomicUsize::new(0);
        let (panicky, other) = (PanicsOnDrop(&PANICKY), Counted(&OTHER));
        let job = move || {
            let _keep = (&panicky, &other);
            RAN.fetch_add(1, Ordering::SeqCst);
        };
        assert!(inline_of(&job));
        let job = PostedJob::new(job, here());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()));
        assert!(caught.is_err(), "the drop's panic leaves `run`");
        assert_eq!(RAN.load(Ordering::SeqCst), 1);
        assert_eq!(PANICKY.load(Ordering::SeqCst), 1, "dropped once, not again");
        assert_eq!(
            OTHER.load(Ordering::SeqCst),
            1,
            "the other capture is dropped too"
        );
    }

    #[test]
    fn a_capture_that_panics_in_its_drop_unrun_is_dropped_once_with_the_rest() {
        static PANICKY: AtomicUsize = AtomicUsize::new(0);
        static OTHER: AtomicUsize = AtomicUsize::new(0);
        for boxed in [false, true] {
            let before = PANICKY.load(Ordering::SeqCst);
            let (panicky, other) = (PanicsOnDrop(&PANICKY), Counted(&OTHER));
            let ballast = [0u8; INLINE_BYTES];
            let job = PostedJob::new(
                move || {
                    let _keep = (&panicky, &other);
                    if boxed {
                        std::hint::black_box(ballast);
                    }
                },
                here(),
            );
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(job)));
            assert!(caught.is_err(), "the drop's panic leaves the entry's drop");
            assert_eq!(PANICKY.load(Ordering::SeqCst), before + 1, "dropped once");
        }
        assert_eq!(
            OTHER.load(Ordering::SeqCst),
            2,
            "the other capture too, both times"
        );
    }

    /// 32 bytes but aligned to 16: the size fits, the alignment does not.
    #[repr(align(16))]
    struct Wide([u64; 4]);

    #[test]
    fn the_size_and_the_alignment_each_decide_where_a_closure_goes() {
        static RAN: AtomicUsize = AtomicUsize::new(0);
        let wide = Wide([1, 2, 3, 4]);
        let aligned_32 = move || {
            assert_eq!(
                (&raw const wide).addr() % 16,
                0,
                "the box keeps the alignment"
            );
            RAN.fetch_add(wide.0.iter().sum::<u64>() as usize, Ordering::SeqCst);
        };
        assert_eq!(std::mem::size_of_val(&aligned_32), INLINE_BYTES);
        assert!(!inline_of(&aligned_32), "32 bytes aligned to 16: boxed");

        let words = [10u64, 20, 30, 40, 50];
        let forty = move || {
            RAN.fetch_add(words.iter().sum::<u64>() as usize, Ordering::SeqCst);
        };
        assert_eq!(std::mem::size_of_val(&forty), 40);
        assert!(!inline_of(&forty), "40 bytes: boxed");

        let words = [100u64, 200, 300, 400];
        let thirty_two = move || {
            RAN.fetch_add(words.iter().sum::<u64>() as usize, Ordering::SeqCst);
        };
        assert_eq!(std::mem::size_of_val(&thirty_two), INLINE_BYTES);
        assert!(inline_of(&thirty_two), "32 bytes aligned to 8: in place");

        PostedJob::new(aligned_32, here()).run();
        PostedJob::new(forty, here()).run();
        PostedJob::new(thirty_two, here()).run();
        assert_eq!(RAN.load(Ordering::SeqCst), 10 + 150 + 1000);
    }

    /// What one entry of [`entries_survive_being_moved_by_a_growing_queue`] captures: its
    /// number spread over the whole storage, so a stale read shows.
    fn numbered(n: u64, out: Arc<std::sync::Mutex<Vec<u64>>>) -> impl FnOnce() + Send {
        let words = [n, n ^ u64::MAX, n.wrapping_mul(0x9e37_79b9_7f4a_7c15)];
        move || {
            assert_eq!(words[1], words[0] ^ u64::MAX, "storage intact");
            assert_eq!(words[2], words[0].wrapping_mul(0x9e37_79b9_7f4a_7c15));
            out.lock().unwrap().push(words[0]);
        }
    }

    #[test]
    fn entries_survive_being_moved_by_a_growing_queue() {
        // The queue's buffer grows by copying entries bitwise, and a take moves them again:
        // every stored closure must be whole after any number of such moves.
        let out = Arc::new(std::sync::Mutex::new(Vec::new()));
        let job = numbered(0, out.clone());
        assert!(inline_of(&job));
        drop(job);
        let mut queue = std::collections::VecDeque::with_capacity(1);
        let mut next = 0;
        for round in 0..8 {
            // Push, pop half from the front (so the ring wraps), grow again.
            for _ in 0..(1 << round) * 3 {
                queue.push_back(PostedJob::new(numbered(next, out.clone()), here()));
                next += 1;
            }
            for _ in 0..queue.len() / 2 {
                queue.pop_front().expect("queued").run();
            }
        }
        let moved: Vec<PostedJob> = queue.drain(..).collect();
        for job in moved {
            job.run();
        }
        let out = Arc::try_unwrap(out)
            .expect("every capture released")
            .into_inner()
            .unwrap();
        assert_eq!(
            out,
            (0..next).collect::<Vec<_>>(),
            "each ran once, in order"
        );
    }

    #[test]
    fn a_send_closure_that_is_not_sync_is_accepted() {
        // `PostedJob` is `Sync` by its fields; that is sound only because a shared entry
        // gives no access to the closure. A `Send + !Sync` capture must still be postable.
        let cell = std::cell::Cell::new(2u64);
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        let job = PostedJob::new(
            move || {
                cell.set(cell.get() * 21);
                s.store(cell.get() as usize, Ordering::SeqCst);
            },
            here(),
        );
        std::thread::spawn(move || job.run()).join().unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 42);
    }

    #[test]
    fn the_site_is_kept() {
        let site = here();
        let job = PostedJob::new(|| {}, site);
        assert_eq!(job.site(), site);
        assert!(format!("{job:?}").contains("posted_job.rs"));
    }
}
