//! Post benchmark: cross-thread `LoopContext::post` throughput, against two unbounded
//! channels of boxed closures drained by a local task: tokio's `mpsc` and smol's
//! `async-channel`.
//!
//! Workload: `P` producer threads (std threads) post `POSTS / P` closures each, as fast as
//! they can; each closure adds its payload (a `u64` it captures, so every closure is a real
//! 8-byte heap allocation) to a counter on the loop thread. One iteration = start the
//! producers (held at a barrier), release them, and time (real clock) until the loop thread
//! has run every closure. posts/s = `POSTS` / that time. The sum is checked afterwards.
//!
//! Peers (all on the real clock; the first two on a current-thread tokio runtime each,
//! `enable_all`):
//! - `ours`: `LoopContext::post` into an `EventLoop` running `el.run()`; the last producer to
//!   finish calls `LoopContext::shutdown()`, and `run()` returns once everything accepted
//!   before that has run.
//! - `tokio_mpsc`: `tokio::sync::mpsc::unbounded_channel::<Box<dyn FnOnce() + Send>>()`; a
//!   `spawn_local` task on a `LocalSet` runs `while let Some(job) = rx.recv().await { job() }`
//!   and ends when every sender is dropped. The closures are boxed exactly as `post` boxes
//!   them.
//! - `smol_channel`: the same shape with smol's parts and no tokio at all:
//!   `async_channel::unbounded::<Box<dyn FnOnce() + Send>>()`, producers calling `try_send`
//!   (never full on an unbounded channel, so it is the plain non-async send, like tokio's
//!   `send`), drained by a task on an `async_executor::LocalExecutor` that runs
//!   `while let Ok(job) = rx.recv().await { job() }` and ends when every sender is dropped.
//!   The consumer thread runs it with `futures_lite::future::block_on`, which parks on a
//!   plain thread parker: the channel needs no I/O reactor, so none is started.
//!
//! The machine has 2 cores: with `P = 1` the loop and the producer each have one; `P = 2`
//! oversubscribes them (3 busy threads), and is reported as such.
//!
//! Running: `cargo bench --bench post` runs the criterion groups (`post/<peer>/<P>`, 10 flat
//! samples, one iteration = one whole run) and then prints a summary: the median of `REPS`
//! runs per peer, runs interleaved between peers. `-- summary` prints only the summary; any
//! other argument is a criterion filter. `cargo test --bench post` runs everything once, small.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use async_executor::LocalExecutor;
use criterion::{BenchmarkId, Criterion};
use shardloop::EventLoop;

mod support;
use support::median;

/// Closures posted per run, over all producers.
const POSTS: u64 = 1_000_000;
/// Producer thread counts measured.
const PRODUCERS: [u64; 2] = [1, 2];
/// Runs per peer behind each summary figure.
const REPS: usize = 5;
/// Posts per run under `cargo test --bench post`.
const TEST_POSTS: u64 = 10_000;

type Job = Box<dyn FnOnce() + Send + 'static>;

thread_local! {
    /// The consumer's counter (only ever touched on the loop / consumer thread).
    static SUM: Cell<u64> = const { Cell::new(0) };
}

/// The posted closure: captures its payload, adds it on the consumer thread.
fn job(payload: u64) -> impl FnOnce() + Send + 'static {
    move || SUM.with(|sum| sum.set(sum.get().wrapping_add(payload)))
}

/// What [`SUM`] must hold after a run of `per_producer` posts from `producers` threads.
fn expected_sum(producers: u64, per_producer: u64) -> u64 {
    producers * (per_producer * per_producer.saturating_sub(1) / 2)
}

/// Starts `producers` threads that wait at `barrier` (sized for them and the consumer), then
/// each hand `send` their share of jobs, in order.
fn start_producers<S>(
    producers: u64,
    per_producer: u64,
    barrier: &Arc<Barrier>,
    sender: S,
    send: fn(&S, Job),
) -> Vec<thread::JoinHandle<()>>
where
    S: Clone + Send + 'static,
{
    (0..producers)
        .map(|_| {
            let (sender, barrier) = (sender.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                for i in 0..per_producer {
                    send(&sender, Box::new(job(i)));
                }
            })
        })
        .collect()
}

/// Waits for the producers, then checks that every job ran exactly once on the consumer.
fn join_and_check(
    threads: Vec<thread::JoinHandle<()>>,
    producers: u64,
    per_producer: u64,
    peer: &str,
) {
    for t in threads {
        t.join().expect("producer");
    }
    assert_eq!(
        SUM.with(Cell::get),
        expected_sum(producers, per_producer),
        "{peer}: every job ran once"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// One run of `ours`: real time from releasing the producers to the last closure run.
fn run_ours(producers: u64, posts: u64) -> Duration {
    let per_producer = posts / producers;
    runtime().block_on(async {
        let mut el = EventLoop::builder().build();
        let barrier = Arc::new(Barrier::new(producers as usize + 1));
        let running = Arc::new(AtomicUsize::new(producers as usize));
        let threads: Vec<_> = (0..producers)
            .map(|_| {
                let (ctx, barrier, running) = (el.context(), barrier.clone(), running.clone());
                thread::spawn(move || {
                    barrier.wait();
                    for i in 0..per_producer {
                        ctx.post(job(i)).expect("the loop is running");
                    }
                    if running.fetch_sub(1, Ordering::AcqRel) == 1 {
                        ctx.shutdown();
                    }
                })
            })
            .collect();
        SUM.with(|sum| sum.set(0));
        barrier.wait();
        let start = Instant::now();
        el.run().await;
        let elapsed = start.elapsed();
        join_and_check(threads, producers, per_producer, "ours");
        drop(el);
        elapsed
    })
}

/// One run of `tokio_mpsc`, timed like [`run_ours`].
fn run_tokio_mpsc(producers: u64, posts: u64) -> Duration {
    let per_producer = posts / producers;
    let rt = runtime();
    let local = tokio::task::LocalSet::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
    let barrier = Arc::new(Barrier::new(producers as usize + 1));
    let threads = start_producers(producers, per_producer, &barrier, tx.clone(), |tx, job| {
        tx.send(job)
            .unwrap_or_else(|_| panic!("the consumer is running"));
    });
    drop(tx);
    let elapsed = local.block_on(&rt, async {
        SUM.with(|sum| sum.set(0));
        barrier.wait();
        let start = Instant::now();
        tokio::task::spawn_local(async move {
            while let Some(job) = rx.recv().await {
                job();
            }
        })
        .await
        .expect("consumer");
        start.elapsed()
    });
    join_and_check(threads, producers, per_producer, "tokio");
    elapsed
}

/// One run of `smol_channel`, timed like [`run_ours`].
fn run_smol_channel(producers: u64, posts: u64) -> Duration {
    let per_producer = posts / producers;
    let (tx, rx) = async_channel::unbounded::<Job>();
    let barrier = Arc::new(Barrier::new(producers as usize + 1));
    let threads = start_producers(producers, per_producer, &barrier, tx.clone(), |tx, job| {
        tx.try_send(job)
            .unwrap_or_else(|_| panic!("the consumer is running"));
    });
    drop(tx);
    let ex = LocalExecutor::new();
    SUM.with(|sum| sum.set(0));
    barrier.wait();
    let start = Instant::now();
    let consumer = ex.spawn(async move {
        while let Ok(job) = rx.recv().await {
            job();
        }
    });
    futures_lite::future::block_on(ex.run(consumer));
    let elapsed = start.elapsed();
    join_and_check(threads, producers, per_producer, "smol");
    elapsed
}

/// Index of `tokio_mpsc` and of `smol_channel` in [`PEERS`] (the ratio columns).
const TOKIO: usize = 1;
const SMOL: usize = 2;

#[derive(Clone, Copy)]
struct Peer {
    name: &'static str,
    run: fn(u64, u64) -> Duration,
}

const PEERS: [Peer; 3] = [
    Peer {
        name: "ours",
        run: run_ours,
    },
    Peer {
        name: "tokio_mpsc",
        run: run_tokio_mpsc,
    },
    Peer {
        name: "smol_channel",
        run: run_smol_channel,
    },
];

fn bench(c: &mut Criterion, posts: u64) {
    let mut group = support::whole_run_group(c, "post", posts);
    for producers in PRODUCERS {
        for peer in PEERS {
            group.bench_with_input(
                BenchmarkId::new(peer.name, producers),
                &producers,
                |b, &producers| {
                    b.iter_custom(|iters| (0..iters).map(|_| (peer.run)(producers, posts)).sum());
                },
            );
        }
    }
    group.finish();
}

fn summary(posts: u64) {
    println!();
    println!("post summary: {posts} posts per run, median of {REPS} runs (M posts/s)");
    println!();
    println!(
        "| producers | peer | M posts/s (median) | min | max | vs tokio_mpsc | vs smol_channel |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|");
    for producers in PRODUCERS {
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); PEERS.len()];
        for _ in 0..REPS {
            for (peer, out) in PEERS.iter().zip(&mut rates) {
                let elapsed = (peer.run)(producers, posts);
                out.push(posts as f64 / elapsed.as_secs_f64() / 1e6);
            }
        }
        let medians: Vec<f64> = rates.iter().cloned().map(median).collect();
        for ((peer, xs), m) in PEERS.iter().zip(&rates).zip(&medians) {
            let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let max = xs.iter().copied().fold(0.0, f64::max);
            println!(
                "| {producers} | {} | {m:.2} | {min:.2} | {max:.2} | {:.2}× | {:.2}× |",
                peer.name,
                m / medians[TOKIO],
                m / medians[SMOL]
            );
        }
    }
}

fn main() {
    let (mut criterion, run) = support::invocation();
    let posts = if run.full_size { POSTS } else { TEST_POSTS };
    bench(&mut criterion, posts);
    criterion.final_summary();
    if run.summary {
        summary(posts);
    }
}
