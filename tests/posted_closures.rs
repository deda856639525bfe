//! The post queue end to end, for its entries that store small closures in place
//! (`src/runtime/posted_job.rs`): a mix of closure shapes — in place, exactly the storage's
//! 32 bytes, boxed for size, boxed for alignment, zero-sized, panicking, posting more —
//! posted from two threads while the loop runs, each run exactly once, in order per sender,
//! and every capture released; and a post the closed loop refuses drops its closure.
//!
//! No wall-clock bound is tight: the deadlines only turn a hang into a failure.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::thread;

use shardloop::{EventLoop, LoopClosed, LoopContext};
use tokio::time::Duration;

mod common;
use common::deadline::within;

const SENDERS: usize = 2;
const PER_SENDER: usize = 50_000;
/// One post in this many panics (after recording its run).
const PANIC_EVERY: usize = 10_000;

/// Runs of the zero-sized closures (they capture nothing, so they count here).
static ZERO_SIZED_RUNS: AtomicUsize = AtomicUsize::new(0);

/// What the closures record, shared by all of them (each holds an `Arc` of it).
struct Book {
    /// Runs of each post, by `sender * PER_SENDER + seq`.
    runs: Vec<AtomicU8>,
    /// Per sender, 1 + the last sequence number run (0: none yet).
    next: [AtomicUsize; SENDERS],
    /// Posts that ran before an earlier one from the same sender.
    out_of_order: AtomicUsize,
    /// Closures that ran (of every shape but the zero-sized), nested posts included.
    done: AtomicUsize,
}

impl Book {
    fn ran(&self, sender: usize, seq: usize) {
        self.runs[sender * PER_SENDER + seq].fetch_add(1, Ordering::Relaxed);
        if self.next[sender].swap(seq + 1, Ordering::Relaxed) > seq {
            self.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
        self.done.fetch_add(1, Ordering::Release);
    }
}

/// Aligned to 16: a closure that captures it is boxed whatever its size.
#[repr(align(16))]
struct Wide(u64, u64);

/// Posts closure number `seq` of `sender`, of the shape `seq` picks. Returns how many
/// closures it will make run: 2 for one that posts another, else 1.
fn post_one(ctx: &LoopContext, book: &Arc<Book>, sender: usize, seq: usize) -> usize {
    let book = book.clone();
    let posted = if seq % PANIC_EVERY == PANIC_EVERY - 1 {
        ctx.post(move || {
            book.ran(sender, seq);
            panic!("posted closure {sender}/{seq} panics on purpose");
        })
    } else {
        match seq % 6 {
            // 8 + 8 + 8 bytes: in place.
            0 => ctx.post(move || book.ran(sender, seq)),
            // Exactly 32 bytes aligned to 8: in place.
            1 => {
                let pad = [seq as u64; 2];
                ctx.post(move || {
                    std::hint::black_box(pad);
                    book.ran(sender, seq);
                })
            }
            // 48 bytes: boxed.
            2 => {
                let pad = [seq as u64; 4];
                ctx.post(move || {
                    assert_eq!(pad, [seq as u64; 4], "the boxed capture is intact");
                    book.ran(sender, seq);
                })
            }
            // 48 bytes aligned to 16: boxed.
            3 => {
                let wide = Wide(seq as u64, !(seq as u64));
                ctx.post(move || {
                    assert_eq!((&raw const wide).addr() % 16, 0, "aligned");
                    assert_eq!(wide.0, !wide.1, "the aligned capture is intact");
                    book.ran(sender, seq);
                })
            }
            // Zero-sized (the `Arc` clone is dropped here).
            4 => {
                drop(book);
                ctx.post(|| {
                    ZERO_SIZED_RUNS.fetch_add(1, Ordering::Release);
                })
            }
            // Posts one more from the loop thread, which runs after it.
            _ => {
                let again = ctx.clone();
                ctx.post(move || {
                    book.ran(sender, seq);
                    let book = book.clone();
                    again
                        .post(move || {
                            book.done.fetch_add(1, Ordering::Release);
                        })
                        .expect("the loop runs until every post has run");
                })
            }
        }
    };
    posted.expect("the loop runs until every post has run");
    if seq % PANIC_EVERY != PANIC_EVERY - 1 && seq % 6 == 5 {
        2
    } else {
        1
    }
}

/// 100 000 closures of mixed shapes from two threads while the loop runs: each runs exactly
/// once, in order per sender; the loop survives the panicking ones and counts them; and every
/// `Arc` a closure captured is released (the count back to 1), whether the closure ran in
/// place, boxed, panicked or posted another.
#[tokio::test]
async fn a_mix_of_closure_shapes_from_two_threads_runs_once_each_and_releases_every_capture() {
    let mut el = EventLoop::new();
    let ctx = el.context();
    let book = Arc::new(Book {
        runs: (0..SENDERS * PER_SENDER)
            .map(|_| AtomicU8::new(0))
            .collect(),
        next: std::array::from_fn(|_| AtomicUsize::new(0)),
        out_of_order: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
    });
    let producers: Vec<_> = (0..SENDERS)
        .map(|sender| {
            let (ctx, book) = (ctx.clone(), book.clone());
            thread::spawn(move || {
                (0..PER_SENDER)
                    .map(|seq| post_one(&ctx, &book, sender, seq))
                    .sum::<usize>()
            })
        })
        .collect();
    // Shuts the loop down once everything posted has run (a nested post made after
    // shutdown would be refused), or after a generous bound that only catches a hang.
    let stopper = {
        let (ctx, book) = (ctx.clone(), book.clone());
        thread::spawn(move || {
            let expected: usize = producers.into_iter().map(|p| p.join().unwrap()).sum();
            let zero_sized = SENDERS * (PER_SENDER / 6 + usize::from(PER_SENDER % 6 > 4));
            let started = std::time::Instant::now();
            while book.done.load(Ordering::Acquire) + ZERO_SIZED_RUNS.load(Ordering::Acquire)
                < expected
                && started.elapsed() < std::time::Duration::from_secs(120)
            {
                thread::sleep(std::time::Duration::from_millis(1));
            }
            ctx.shutdown();
            (expected, zero_sized)
        })
    };
    within(Duration::from_secs(180), "the loop's run", el.run()).await;
    let (expected, zero_sized) = stopper.join().unwrap();

    let zero_sized_runs = ZERO_SIZED_RUNS.load(Ordering::Acquire);
    assert_eq!(
        zero_sized_runs, zero_sized,
        "each zero-sized closure ran once"
    );
    assert_eq!(
        book.done.load(Ordering::Acquire) + zero_sized_runs,
        expected
    );
    for (id, runs) in book.runs.iter().enumerate() {
        let (sender, seq) = (id / PER_SENDER, id % PER_SENDER);
        let want = u8::from(seq % 6 != 4 || seq % PANIC_EVERY == PANIC_EVERY - 1);
        assert_eq!(runs.load(Ordering::Relaxed), want, "post {sender}/{seq}");
    }
    assert_eq!(
        book.out_of_order.load(Ordering::Relaxed),
        0,
        "FIFO per sender"
    );
    assert_eq!(
        el.stats().panics,
        (SENDERS * PER_SENDER / PANIC_EVERY) as u64
    );
    drop(el);
    assert_eq!(Arc::strong_count(&book), 1, "every capture released");
}

/// A post the shut-down loop refuses drops its closure at once (in place or boxed): the
/// caller gets `LoopClosed` and the capture is released, not kept in a queue nobody drains.
#[tokio::test]
async fn a_refused_post_drops_its_closure_once() {
    let el = EventLoop::new();
    let ctx = el.context();
    ctx.shutdown();
    let shared = Arc::new(());
    let small = shared.clone();
    assert_eq!(ctx.post(move || drop(small)), Err(LoopClosed));
    assert_eq!(
        Arc::strong_count(&shared),
        1,
        "the in-place closure was dropped"
    );
    let (big, pad) = (shared.clone(), [0u8; 64]);
    assert_eq!(
        ctx.post(move || drop((big, pad))),
        Err(LoopClosed),
        "refused after shutdown"
    );
    assert_eq!(
        Arc::strong_count(&shared),
        1,
        "the boxed closure was dropped"
    );
    drop(el);
    assert_eq!(Arc::strong_count(&shared), 1);
}
