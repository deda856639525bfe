//! Pause benchmark: the cost of one `pause → resume` of a task on the event loop, against
//! tokio's `sleep` in `spawn_local` tasks.
//!
//! Workload: `TASKS` tasks each loop `PAUSES` times on an 8 ms pause, all on one
//! current-thread runtime with a paused clock (`start_paused(true)`), so the clock jumps from
//! boundary to boundary and only CPU work is measured. All tasks pause in lock-step: every
//! 8 ms boundary wakes all of them. One iteration = spawn, let every task reach its first
//! pause (not timed), then time (with `std::time::Instant`, the real clock) until every task
//! has finished its `PAUSES` pauses. ns per pause→resume = that time / (`TASKS` × `PAUSES`).
//! The timed part covers, per pause: the timer firing, the wake, the task's poll and the next
//! pause being armed; and once per task its completion (amortised over `PAUSES`).
//!
//! Peers:
//! - `ours`: `shardloop::spawn` + `shardloop::timer::pause(8)`, driven by `EventLoop::run_until`
//!   (tick 8 ms, default idle wait). Join handles are dropped (detached tasks).
//! - `tokio_local`: `tokio::task::spawn_local` on a `LocalSet` + `tokio::time::sleep(8 ms)`,
//!   driven by `LocalSet::block_on`. Join handles are dropped.
//!
//! Both peers check that the paused clock advanced exactly `PAUSES` × 8 ms and that every
//! task finished, so neither can skip work.
//!
//! Running: `cargo bench --bench pause` runs the criterion groups (`pause/ours`,
//! `pause/tokio_local`; 10 flat samples, one iteration = one whole run) and then prints a
//! summary: the median of `REPS` runs per peer, runs interleaved between peers. The summary
//! adds a diagnostic shape, `SMALL` (1k tasks × 1000 pauses), whose working set stays in
//! cache: the gap between the two shapes is what cache misses cost at 100k tasks.
//! `cargo bench --bench pause -- summary` prints only the summary; any other argument is a
//! criterion filter (no summary). `cargo test --bench pause` runs everything once, small.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use shardloop::EventLoop;
use shardloop::timer::pause;

mod support;
use support::median;

/// Tasks alive at once.
const TASKS: usize = 100_000;
/// Pauses per task.
const PAUSES: u32 = 10;
/// A second, cache-resident shape printed in the summary only (diagnostic): fewer tasks,
/// more pauses each, the same total of pause→resume cycles.
const SMALL: Shape = Shape {
    tasks: 1_000,
    pauses: 1_000,
};
/// The pause, equal to the loop's tick.
const PAUSE_MS: u64 = 8;
/// Runs per peer behind each summary figure (medians are reported).
const REPS: usize = 5;
/// The shape under `cargo test --bench pause`.
const TEST: Shape = Shape {
    tasks: 1_000,
    pauses: 3,
};

/// How many tasks, each pausing how many times.
#[derive(Clone, Copy, Debug)]
struct Shape {
    tasks: usize,
    pauses: u32,
}

impl Shape {
    /// Pause→resume cycles per run.
    fn cycles(self) -> u64 {
        self.tasks as u64 * u64::from(self.pauses)
    }

    /// The logical time every run must take: `pauses` boundaries of 8 ms.
    fn logical(self) -> Duration {
        Duration::from_millis(PAUSE_MS) * self.pauses
    }
}

/// The shape of a real run.
const MAIN: Shape = Shape {
    tasks: TASKS,
    pauses: PAUSES,
};

/// Counts arrivals and wakes its one waiter when the last one arrives.
struct Countdown {
    left: Cell<usize>,
    waiter: RefCell<Option<Waker>>,
}

impl Countdown {
    fn new(n: usize) -> Rc<Self> {
        Rc::new(Countdown {
            left: Cell::new(n),
            waiter: RefCell::new(None),
        })
    }

    fn arrive(&self) {
        let left = self.left.get() - 1;
        self.left.set(left);
        if left == 0
            && let Some(waker) = self.waiter.borrow_mut().take()
        {
            waker.wake();
        }
    }

    async fn wait(&self) {
        poll_fn(|cx| {
            if self.left.get() == 0 {
                Poll::Ready(())
            } else {
                *self.waiter.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
    }
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("tokio runtime")
}

/// One run of `ours`: the real time from "every task is parked on its first pause" to "every
/// task has finished".
fn run_ours(shape: Shape) -> Duration {
    let Shape { tasks, pauses } = shape;
    paused_runtime().block_on(async {
        let mut el = EventLoop::builder()
            .tick(Duration::from_millis(PAUSE_MS))
            .build();
        let started = Countdown::new(tasks);
        let finished = Countdown::new(tasks);
        for _ in 0..tasks {
            let (started, finished) = (started.clone(), finished.clone());
            drop(shardloop::spawn(async move {
                started.arrive();
                for _ in 0..pauses {
                    pause(PAUSE_MS).await;
                }
                finished.arrive();
            }));
        }
        el.run_until(started.wait()).await;

        let logical = tokio::time::Instant::now();
        let start = Instant::now();
        el.run_until(finished.wait()).await;
        let elapsed = start.elapsed();

        assert_eq!(logical.elapsed(), shape.logical(), "ours: logical time");
        assert_eq!(finished.left.get(), 0);
        drop(el);
        elapsed
    })
}

/// One run of `tokio_local`, timed like [`run_ours`].
fn run_tokio_local(shape: Shape) -> Duration {
    let Shape { tasks, pauses } = shape;
    let rt = paused_runtime();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let started = Countdown::new(tasks);
        let finished = Countdown::new(tasks);
        for _ in 0..tasks {
            let (started, finished) = (started.clone(), finished.clone());
            drop(tokio::task::spawn_local(async move {
                started.arrive();
                for _ in 0..pauses {
                    tokio::time::sleep(Duration::from_millis(PAUSE_MS)).await;
                }
                finished.arrive();
            }));
        }
        started.wait().await;

        let logical = tokio::time::Instant::now();
        let start = Instant::now();
        finished.wait().await;
        let elapsed = start.elapsed();

        assert_eq!(logical.elapsed(), shape.logical(), "tokio: logical time");
        assert_eq!(finished.left.get(), 0);
        elapsed
    })
}

#[derive(Clone, Copy)]
struct Peer {
    name: &'static str,
    run: fn(Shape) -> Duration,
}

const PEERS: [Peer; 2] = [
    Peer {
        name: "ours",
        run: run_ours,
    },
    Peer {
        name: "tokio_local",
        run: run_tokio_local,
    },
];

fn ns_per_pause(elapsed: Duration, shape: Shape) -> f64 {
    elapsed.as_nanos() as f64 / shape.cycles() as f64
}

fn bench(c: &mut Criterion, shape: Shape) {
    let mut group = c.benchmark_group("pause");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(shape.cycles()));
    for peer in PEERS {
        group.bench_function(peer.name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| (peer.run)(shape)).sum());
        });
    }
    group.finish();
}

fn summary(shapes: &[Shape]) {
    println!();
    println!("pause summary: paused clock, {PAUSE_MS} ms pauses, median of {REPS} runs per peer");
    println!();
    println!(
        "| tasks | pauses each | peer | ns per pause→resume (median) | min | max | vs tokio_local |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|");
    for &shape in shapes {
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); PEERS.len()];
        for _ in 0..REPS {
            for (peer, out) in PEERS.iter().zip(&mut samples) {
                out.push(ns_per_pause((peer.run)(shape), shape));
            }
        }
        let medians: Vec<f64> = samples.iter().cloned().map(median).collect();
        for ((peer, xs), m) in PEERS.iter().zip(&samples).zip(&medians) {
            let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let max = xs.iter().copied().fold(0.0, f64::max);
            println!(
                "| {} | {} | {} | {m:.1} | {min:.1} | {max:.1} | {:.2}× |",
                shape.tasks,
                shape.pauses,
                peer.name,
                medians[1] / m
            );
        }
    }
}

fn main() {
    let (mut criterion, run) = support::invocation();
    let shape = if run.full_size { MAIN } else { TEST };
    bench(&mut criterion, shape);
    criterion.final_summary();
    if run.summary {
        summary(&[MAIN, SMALL]);
    }
}
