//! Per-NPC behaviours benchmark: what it costs the loop to start and stop one behaviour per NPC
//! when a crowd's sector wakes up and falls asleep, against tokio's `spawn_local` + `abort`.
//!
//! Workload: `CROWD` NPCs stand in one sector far from everyone. One cycle:
//! - **start**: a player's presence is simulated with `World::activate_around` on the crowd;
//!   the world's activity hook starts the behaviour for every NPC, and the loop polls each new
//!   task once, up to its first `pause` (a minute, so it never fires). Timed from before
//!   `activate_around` to "every behaviour has been polled" (each counts itself on first poll).
//! - **stop**: `World::deactivate_around` — every behaviour's task is aborted and its future
//!   dropped, its pause leaving the wheel, before the call returns. Timed around that call;
//!   the bench checks that no behaviour future is left alive.
//!
//! Everything goes through the public game API a game developer uses: a [`Game`] with a
//! `setup_world` that places the crowd and an `npc_behaviour` that applies to it, run by the
//! [`TestShard`] on the paused clock (so the clock never moves; only CPU work is timed, with
//! `std::time::Instant`).
//!
//! Peers:
//! - `ours`: the shard's behaviours engine, as above.
//! - `tokio_local`: the same lifetime done by hand on tokio — `spawn_local` one task per NPC
//!   (a `tokio::time::sleep` of a minute), yield until each has been polled; then `abort` every
//!   `JoinHandle` and yield until every future has been dropped (tokio drops an aborted
//!   task's future when the runtime next runs it, so that wait is part of its stop).
//!
//! Figures are µs of loop time per 1,000 behaviours started, and per 1,000 stopped (target:
//! ≤ 1 ms per 1,000 each, issue 20).
//!
//! Running: `cargo bench --bench behaviours` runs the criterion groups (one iteration = one
//! start + stop cycle of the whole crowd) and then the summary (median of `REPS` runs per peer,
//! interleaved). `cargo bench --bench behaviours -- summary` prints only the summary.
//! `cargo test --bench behaviours` runs everything once, small.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use shardloop::game::{Game, Npc};
use shardloop::shard::Shard;
use shardloop::testkit::TestShard;
use shardloop::timer;
use shardloop::world::{Location, MapId, Mobile, World};

mod support;
use support::median;

/// NPCs in the crowd under `cargo bench`.
const CROWD: usize = 10_000;
/// The crowd under `cargo test --bench behaviours`.
const TEST_CROWD: usize = 500;
/// Start/stop cycles per shard in the summary.
const CYCLES: usize = 5;
/// Runs per peer behind each summary figure.
const REPS: usize = 3;
/// Where the crowd stands: a corner of the map nobody starts near.
const CROWD_AT: Location = Location {
    x: 100,
    y: 100,
    z: 0,
    map: MapId::FELUCCA,
};

/// Live behaviour futures (created minus dropped) and first polls, shared with the tasks.
#[derive(Clone, Default)]
struct Counters {
    polled: Rc<Cell<usize>>,
    alive: Rc<Cell<usize>>,
}

/// Counts one live future; uncounts it when dropped.
struct Alive(Rc<Cell<usize>>);

impl Alive {
    fn new(alive: &Rc<Cell<usize>>) -> Alive {
        alive.set(alive.get() + 1);
        Alive(alive.clone())
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

impl Counters {
    /// A behaviour body: counts its first poll, then waits a minute (never, in this bench).
    fn body(&self) -> impl Future<Output = ()> + use<> {
        let alive = Alive::new(&self.alive);
        let polled = self.polled.clone();
        async move {
            let _alive = alive;
            polled.set(polled.get() + 1);
            timer::pause(60_000).await;
        }
    }

    /// Yields to the loop until `n` bodies have been polled.
    async fn polled(&self, n: usize) {
        while self.polled.get() < n {
            tokio::task::yield_now().await;
        }
    }
}

/// The real time of one start and one stop.
#[derive(Clone, Copy, Default)]
struct Cycle {
    start: Duration,
    stop: Duration,
}

impl std::ops::Add for Cycle {
    type Output = Cycle;
    fn add(self, other: Cycle) -> Cycle {
        Cycle {
            start: self.start + other.start,
            stop: self.stop + other.stop,
        }
    }
}

/// Places `crowd` NPCs at [`CROWD_AT`].
fn place_crowd(crowd: usize) -> impl FnOnce(&mut World) {
    move |world| {
        for _ in 0..crowd {
            let serial = world.new_mobile_serial();
            let mut npc = Mobile::new(serial, "crowd", 0x190);
            npc.is_npc = true;
            npc.location = CROWD_AT;
            world.add_mobile(npc).expect("room for the crowd");
        }
    }
}

/// `cycles` start/stop cycles of `crowd` behaviours on a test shard; each cycle's times.
fn run_ours(crowd: usize, cycles: usize) -> Vec<Cycle> {
    let counters = Counters::default();
    let behaviour = counters.clone();
    let game = Game::new("crowd")
        .setup_world(place_crowd(crowd))
        .npc_behaviour(
            "mill",
            |m| &*m.name == "crowd",
            move |_npc: Npc| behaviour.body(),
        );
    let shard = TestShard::new(Shard::builder().game(move |_| game));
    support::paused_runtime().block_on(shard.run(|running| async move {
        let mut times = Vec::with_capacity(cycles);
        for cycle in 1..=cycles {
            let before = counters.polled.get();
            let start = Instant::now();
            running.world().borrow_mut().activate_around(CROWD_AT);
            counters.polled(before + crowd).await;
            let started = start.elapsed();
            assert_eq!(counters.alive.get(), crowd, "ours: one behaviour per NPC");

            let stop = Instant::now();
            running.world().borrow_mut().deactivate_around(CROWD_AT);
            let stopped = stop.elapsed();
            assert_eq!(
                counters.alive.get(),
                0,
                "ours: every future dropped at once"
            );

            let stats = &running.behaviour_stats()[0];
            assert_eq!(
                (stats.started, stats.stopped),
                ((cycle * crowd) as u64, (cycle * crowd) as u64)
            );
            times.push(Cycle {
                start: started,
                stop: stopped,
            });
        }
        times
    }))
}

/// The same cycles by hand on tokio's `LocalSet`.
fn run_tokio_local(crowd: usize, cycles: usize) -> Vec<Cycle> {
    let counters = Counters::default();
    let rt = support::paused_runtime();
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let mut times = Vec::with_capacity(cycles);
        for _ in 0..cycles {
            let before = counters.polled.get();
            let start = Instant::now();
            let tasks: Vec<_> = (0..crowd)
                .map(|_| {
                    let alive = Alive::new(&counters.alive);
                    let polled = counters.polled.clone();
                    tokio::task::spawn_local(async move {
                        let _alive = alive;
                        polled.set(polled.get() + 1);
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    })
                })
                .collect();
            counters.polled(before + crowd).await;
            let started = start.elapsed();
            assert_eq!(counters.alive.get(), crowd, "tokio: one task per NPC");

            let stop = Instant::now();
            for task in &tasks {
                task.abort();
            }
            while counters.alive.get() > 0 {
                tokio::task::yield_now().await;
            }
            let stopped = stop.elapsed();
            drop(tasks);
            times.push(Cycle {
                start: started,
                stop: stopped,
            });
        }
        times
    })
}

#[derive(Clone, Copy)]
struct Peer {
    name: &'static str,
    run: fn(usize, usize) -> Vec<Cycle>,
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

/// µs per 1,000 behaviours.
fn per_thousand(d: Duration, crowd: usize) -> f64 {
    d.as_secs_f64() * 1e6 * 1000.0 / crowd as f64
}

fn bench(c: &mut Criterion, crowd: usize) {
    let mut group = support::whole_run_group(c, "behaviours", crowd as u64);
    for peer in PEERS {
        // One iteration: one start and one stop of the whole crowd (the shard's own start-up,
        // outside the timed cycles, is not counted).
        group.bench_function(format!("{}/start+stop", peer.name), |b| {
            b.iter_custom(|iters| {
                let times = (peer.run)(crowd, iters as usize);
                times.iter().map(|c| c.start + c.stop).sum()
            });
        });
    }
    group.finish();
}

fn summary(crowd: usize) {
    println!();
    println!(
        "behaviours summary: {crowd} NPCs, {CYCLES} start/stop cycles per run, median of the \
         cycles of {REPS} runs per peer; µs of loop time per 1,000 behaviours"
    );
    println!();
    println!("| peer | start (median) | stop (median) | start+stop | vs tokio_local |");
    println!("|---|---:|---:|---:|---:|");
    let mut cycles: Vec<Vec<Cycle>> = vec![Vec::new(); PEERS.len()];
    for _ in 0..REPS {
        for (peer, out) in PEERS.iter().zip(&mut cycles) {
            out.extend((peer.run)(crowd, CYCLES));
        }
    }
    let row = |xs: &[Cycle], f: fn(&Cycle) -> Duration| {
        median(xs.iter().map(|c| per_thousand(f(c), crowd)).collect())
    };
    let both = |c: &Cycle| c.start + c.stop;
    let tokio_both = row(&cycles[1], both);
    for (peer, xs) in PEERS.iter().zip(&cycles) {
        let total = row(xs, both);
        println!(
            "| {} | {:.1} | {:.1} | {total:.1} | {:.2}× |",
            peer.name,
            row(xs, |c| c.start),
            row(xs, |c| c.stop),
            tokio_both / total
        );
    }
}

fn main() {
    let (mut criterion, run) = support::invocation();
    let crowd = if run.full_size { CROWD } else { TEST_CROWD };
    bench(&mut criterion, crowd);
    criterion.final_summary();
    if run.summary {
        summary(crowd);
    }
}
