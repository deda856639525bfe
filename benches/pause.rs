//! Pause benchmark: the cost of one `pause → resume` of a task on the event loop, against
//! tokio's `sleep` in `spawn_local` tasks and smol's `Timer` on a `LocalExecutor`.
//!
//! Workload: `TASKS` tasks each loop `PAUSES` times on an 8 ms pause, all on one thread. One
//! iteration = spawn, let every task reach its first pause (not timed), then time (with
//! `std::time::Instant`, the real clock) until every task has finished its `PAUSES` pauses.
//! ns per pause→resume = that time / (`TASKS` × `PAUSES`). The timed part covers, per pause:
//! the timer firing, the wake, the task's poll and the next pause being armed; and once per
//! task its completion (amortised over `PAUSES`).
//!
//! Peers:
//! - `ours`: `shardloop::spawn` + `shardloop::timer::pause(8)`, driven by `EventLoop::run_until`
//!   (tick 8 ms, default idle wait) on a current-thread runtime with a paused clock
//!   (`start_paused(true)`). Join handles are dropped (detached tasks).
//! - `tokio_local`: `tokio::task::spawn_local` on a `LocalSet` + `tokio::time::sleep(8 ms)`,
//!   driven by `LocalSet::block_on` on the same kind of paused runtime. Join handles are
//!   dropped.
//! - `smol_local`: smol's building blocks: an `async_executor::LocalExecutor`, tasks spawned
//!   with `ex.spawn(..).detach()`, each pausing on `async_io::Timer::after(8 ms)`, the whole
//!   driven by `async_io::block_on(ex.run(..))`.
//!
//! ## Two clocks, one measure
//!
//! `ours` and `tokio_local` run on tokio's paused clock: when every task is parked the clock
//! jumps to the next deadline, so the thread never sleeps and the wall time of the window is
//! pure CPU work. Both check that the paused clock advanced exactly `PAUSES` × 8 ms and that
//! every task finished, so neither can skip work.
//!
//! async-io has no paused clock: its timers are real, so `smol_local` really waits 8 ms per
//! pause and its wall time mixes work with sleep. Subtracting the known sleep
//! (wall − `PAUSES` × 8 ms) does not leave the work: each task's next 8 ms starts when *it*
//! resumes, so while one task waits the thread is busy with the others, and the waits
//! overlap the work instead of adding to it. The subtraction undercounts, by up to the whole
//! sleep: with 100k tasks one round of wake-ups costs more than 8 ms of CPU, every timer is
//! already overdue when the thread gets to it, and wall ≈ CPU (so wall − sleep is low by
//! 80 ns per pause); with 1k tasks a round's work hides almost entirely inside the waits
//! (measured: wall − sleep ≈ 0.24 µs per pause against ≈ 1 µs of CPU). So every peer is also
//! measured by the CPU time of the thread that runs it (`CLOCK_THREAD_CPUTIME_ID`, read at
//! both ends of the same window), which counts the work and none of the waiting, whichever
//! clock the peer runs on. For the two paused-clock peers it equals their wall time within
//! noise (their thread never sleeps), so for them nothing changes; for `smol_local` it is the
//! only figure that means the same thing.
//!
//! What the CPU measure still leaves in, and out, for `smol_local`:
//! - In: real-clock costs the paused-clock peers never pay. Its timers come due spread over
//!   the time it took to re-arm them, not all on one boundary, so the thread turns async-io's
//!   reactor (an `epoll_wait` each) more often per round; and when a round ends early (the
//!   1k-task shape) it parks until the next timer and is woken again. This is why its 1k
//!   figure is higher than its 100k figure, the opposite of the other two peers: compare it
//!   on the 100k shape, where it never sleeps.
//! - Out, if nothing else were done: async-io keeps a helper thread ("async-io") that may
//!   take the reactor lock and fire timers itself while the executor thread is busy; that
//!   work would not show on the executor thread. So the run also reads the process's CPU
//!   time (`CLOCK_PROCESS_CPUTIME_ID`) over the same window, and the summary prints the
//!   difference, "other threads", per pause. Nothing else in the process runs during a
//!   window (criterion is idle, tokio's blocking pool is unused), so for `ours` and
//!   `tokio_local` that column is ~0 and for `smol_local` it is exactly the helper thread.
//!   The ratio columns use the whole process's CPU, so work moved to a helper thread is
//!   still counted.
//!
//! `smol_local` checks that every task finished and that the run, from the first spawn,
//! took at least `PAUSES` × 8 ms of real time (no timer fired early).
//!
//! Running: `cargo bench --bench pause` runs the criterion groups (`pause/ours`,
//! `pause/tokio_local`, `pause/smol_local`; 10 flat samples, one iteration = one whole run)
//! and then prints a summary: the median of `REPS` runs per peer, runs interleaved between
//! peers. Criterion is given the wall time for the two paused-clock peers and the process
//! CPU time for `smol_local` (its wall time includes real waits). The summary adds a
//! diagnostic shape, `SMALL` (1k tasks × 1000 pauses), whose working set stays in cache: the
//! gap between the two shapes is what cache misses cost at 100k tasks (`smol_local` really
//! sleeps 8 s per run of that shape). `cargo bench --bench pause -- summary` prints only the
//! summary; any other argument is a criterion filter (no summary). `cargo test --bench
//! pause` runs everything once, small.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use async_executor::LocalExecutor;

use criterion::Criterion;
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

/// What one run measured, over the timed window.
#[derive(Clone, Copy, Debug)]
struct Measured {
    /// Real time.
    wall: Duration,
    /// CPU time of the thread that ran the peer.
    thread_cpu: Duration,
    /// CPU time of the whole process (that thread plus any helper thread).
    process_cpu: Duration,
}

/// A CPU clock: `CLOCK_THREAD_CPUTIME_ID` or `CLOCK_PROCESS_CPUTIME_ID`.
fn cpu_time(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec` that outlives the call, and both clock ids
    // used here exist on every Linux the crate supports.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime({clock})");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The three clocks, read together at one end of a timed window.
#[derive(Clone, Copy)]
struct Stamp {
    wall: Instant,
    thread_cpu: Duration,
    process_cpu: Duration,
}

impl Stamp {
    fn now() -> Self {
        Stamp {
            thread_cpu: cpu_time(libc::CLOCK_THREAD_CPUTIME_ID),
            process_cpu: cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID),
            wall: Instant::now(),
        }
    }

    /// What was spent from `self` until now (read on the same thread).
    fn elapsed(self) -> Measured {
        let end = Stamp::now();
        Measured {
            wall: end.wall - self.wall,
            thread_cpu: end.thread_cpu - self.thread_cpu,
            process_cpu: end.process_cpu - self.process_cpu,
        }
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

/// One run of `ours`: from "every task is parked on its first pause" to "every task has
/// finished".
fn run_ours(shape: Shape) -> Measured {
    let Shape { tasks, pauses } = shape;
    support::paused_runtime().block_on(async {
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
        let start = Stamp::now();
        el.run_until(finished.wait()).await;
        let measured = start.elapsed();

        assert_eq!(logical.elapsed(), shape.logical(), "ours: logical time");
        assert_eq!(finished.left.get(), 0);
        drop(el);
        measured
    })
}

/// One run of `tokio_local`, timed like [`run_ours`].
fn run_tokio_local(shape: Shape) -> Measured {
    let Shape { tasks, pauses } = shape;
    let rt = support::paused_runtime();
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
        let start = Stamp::now();
        finished.wait().await;
        let measured = start.elapsed();

        assert_eq!(logical.elapsed(), shape.logical(), "tokio: logical time");
        assert_eq!(finished.left.get(), 0);
        measured
    })
}

/// One run of `smol_local`, timed like [`run_ours`] but on the real clock (see the module doc:
/// its figure is the CPU time of the window, not the wall time).
fn run_smol_local(shape: Shape) -> Measured {
    let Shape { tasks, pauses } = shape;
    let ex = LocalExecutor::new();
    let started = Countdown::new(tasks);
    let finished = Countdown::new(tasks);
    let spawned = Instant::now();
    for _ in 0..tasks {
        let (started, finished) = (started.clone(), finished.clone());
        ex.spawn(async move {
            started.arrive();
            for _ in 0..pauses {
                async_io::Timer::after(Duration::from_millis(PAUSE_MS)).await;
            }
            finished.arrive();
        })
        .detach();
    }
    // `async_io::block_on` (not `futures_lite`'s) so that this thread drives async-io's
    // reactor, and so fires the timers itself, rather than leaving that to async-io's helper
    // thread.
    let measured = async_io::block_on(ex.run(async {
        started.wait().await;
        let start = Stamp::now();
        finished.wait().await;
        start.elapsed()
    }));
    let whole_run = spawned.elapsed();

    assert_eq!(finished.left.get(), 0, "smol: every task finished");
    assert!(
        whole_run >= shape.logical(),
        "smol: {whole_run:?} for {} pauses of {PAUSE_MS} ms: a timer fired early",
        shape.pauses
    );
    drop(ex);
    measured
}

#[derive(Clone, Copy)]
struct Peer {
    name: &'static str,
    run: fn(Shape) -> Measured,
    /// The peer's timers are real: its wall time is mostly sleeping, so criterion is given
    /// its CPU time instead.
    real_clock: bool,
}

impl Peer {
    /// What criterion is given for one run (see the module doc).
    fn criterion_time(self, shape: Shape) -> Duration {
        let measured = (self.run)(shape);
        if self.real_clock {
            measured.process_cpu
        } else {
            measured.wall
        }
    }
}

/// Index of `tokio_local` and of `smol_local` in [`PEERS`] (the ratio columns).
const TOKIO: usize = 1;
const SMOL: usize = 2;

const PEERS: [Peer; 3] = [
    Peer {
        name: "ours",
        run: run_ours,
        real_clock: false,
    },
    Peer {
        name: "tokio_local",
        run: run_tokio_local,
        real_clock: false,
    },
    Peer {
        name: "smol_local",
        run: run_smol_local,
        real_clock: true,
    },
];

fn ns_per_pause(elapsed: Duration, shape: Shape) -> f64 {
    elapsed.as_nanos() as f64 / shape.cycles() as f64
}

fn bench(c: &mut Criterion, shape: Shape) {
    let mut group = support::whole_run_group(c, "pause", shape.cycles());
    for peer in PEERS {
        group.bench_function(peer.name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| peer.criterion_time(shape)).sum());
        });
    }
    group.finish();
}

/// One peer's runs of one shape, in ns per pause→resume.
#[derive(Clone, Default)]
struct Samples {
    wall: Vec<f64>,
    thread_cpu: Vec<f64>,
    /// Process CPU − thread CPU: helper threads.
    other_cpu: Vec<f64>,
    process_cpu: Vec<f64>,
}

impl Samples {
    fn push(&mut self, m: Measured, shape: Shape) {
        self.wall.push(ns_per_pause(m.wall, shape));
        self.thread_cpu.push(ns_per_pause(m.thread_cpu, shape));
        self.other_cpu.push(ns_per_pause(
            m.process_cpu.saturating_sub(m.thread_cpu),
            shape,
        ));
        self.process_cpu.push(ns_per_pause(m.process_cpu, shape));
    }
}

fn summary(shapes: &[Shape]) {
    println!();
    println!(
        "pause summary: {PAUSE_MS} ms pauses, median of {REPS} runs per peer; ours and \
         tokio_local on tokio's paused clock, smol_local on the real clock (its wall time \
         includes the real waits)"
    );
    println!(
        "CPU = CLOCK_THREAD_CPUTIME_ID of the peer's thread; other threads = \
         CLOCK_PROCESS_CPUTIME_ID − that; the ratios compare the whole process's CPU time"
    );
    println!();
    println!(
        "| tasks | pauses each | peer | ns per pause→resume, wall (median) | min | max \
         | CPU ns (median) | other threads' CPU ns | vs tokio_local | vs smol_local |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for &shape in shapes {
        let mut samples: Vec<Samples> = vec![Samples::default(); PEERS.len()];
        for _ in 0..REPS {
            for (peer, out) in PEERS.iter().zip(&mut samples) {
                out.push((peer.run)(shape), shape);
            }
        }
        let process: Vec<f64> = samples
            .iter()
            .map(|s| median(s.process_cpu.clone()))
            .collect();
        for ((peer, s), total) in PEERS.iter().zip(&samples).zip(&process) {
            let min = s.wall.iter().copied().fold(f64::INFINITY, f64::min);
            let max = s.wall.iter().copied().fold(0.0, f64::max);
            println!(
                "| {} | {} | {} | {:.1} | {min:.1} | {max:.1} | {:.1} | {:.1} | {:.2}× | {:.2}× |",
                shape.tasks,
                shape.pauses,
                peer.name,
                median(s.wall.clone()),
                median(s.thread_cpu.clone()),
                median(s.other_cpu.clone()),
                process[TOKIO] / total,
                process[SMOL] / total,
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
