//! Timer wheel benchmark: `shardloop::timer::wheel::Wheel` against its peers on one workload.
//!
//! Workload: insert N timers due 8 ms–10 s out (fixed seed), cancel every other one in
//! insertion order, then advance in 8 ms steps until every remaining timer has fired.
//! Each phase is timed on its own: *start* (N inserts), *cancel* (N/2 removes) and *fire*
//! (the whole advance loop, divided by the N/2 fired timers). A second pass times every
//! 8 ms step's drain on its own, for the p99 time to drain one tick.
//!
//! Peers, all fed the same due ticks (uniform in 1..=1250, i.e. 8 ms × k, k ≤ 1250):
//! - `ours`: [`Wheel`] with one tick = 8 ms; a fired timer is consumed with `remove`.
//! - `delay_queue`: tokio-util's `DelayQueue` on a current-thread runtime with paused time,
//!   stepped with `tokio::time::advance(8 ms)` and drained with `poll_expired` until it
//!   returns `Pending`. Its *fire* time covers the drains only, not the `advance` call (the
//!   clock step, a task yield and the time driver's turn); that cost is printed separately.
//! - `hhwt`: `hierarchical_hash_wheel_timer`'s cancellable `QuadWheelWithOverflow` (no
//!   threads). Its unit is nominally 1 ms; here one unit is one 8 ms tick, so each step is
//!   one `tick()`, the same granularity as ours.
//! - `btreemap`: `BTreeMap<(due, seq), value>`; cancel removes by key, fire pops the first
//!   entries while due ≤ now.
//!
//! Running: `cargo bench --bench wheel` runs the criterion groups `wheel/start`,
//! `wheel/cancel` and `wheel/fire` (ids `wheel/<phase>/<peer>/<N>`, one iteration = the whole
//! phase) for N = 10k, 100k and 1M, then prints a markdown summary (median of 5 repetitions
//! per peer and N). One positional argument narrows the run:
//! - `-- 100000` (or `100k`, `1M`, …): only that N, criterion groups and summary;
//! - `-- summary` or `-- summary/100000`: only the summary table;
//! - anything else is a plain criterion filter (and skips the summary).
//!
//! Under `cargo test --benches` (criterion's test mode) every benchmark runs once at N = 1000
//! and every peer's output is checked; no summary.

use std::collections::BTreeMap;
use std::future::poll_fn;
use std::hint::black_box;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use criterion::{BenchmarkFilter, BenchmarkId, Criterion, SamplingMode, Throughput};
use hierarchical_hash_wheel_timer::IdOnlyTimerEntry;
use hierarchical_hash_wheel_timer::wheels::cancellable::QuadWheelWithOverflow;
use shardloop::timer::wheel::{Key, Wheel};
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key as DqKey;

/// One tick of the wheel under test, in milliseconds.
const TICK_MS: u64 = 8;
/// The latest due tick: 10 s / 8 ms.
const MAX_DUE: u64 = 10_000 / TICK_MS;
/// The fixed seed of the delays.
const SEED: u64 = 0x5eed_cafe_f00d_0001;
/// Repetitions behind each number of the summary table (medians are reported).
const REPS: usize = 5;
/// The N of a real run.
const BENCH_NS: [usize; 3] = [10_000, 100_000, 1_000_000];
/// The N of `cargo test --benches`.
const TEST_NS: [usize; 1] = [1_000];

// ---------------------------------------------------------------------------------------------
// Workload

/// splitmix64: a tiny, good-enough generator with a fixed seed, so every peer and every run
/// sees the same delays.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `n` due ticks, uniform in `1..=MAX_DUE` (8 ms–10 s).
fn make_delays(n: usize) -> Vec<u64> {
    let mut rng = SplitMix64(SEED);
    (0..n).map(|_| 1 + rng.next_u64() % MAX_DUE).collect()
}

/// Timers that fire: every other timer (indices 0, 2, 4, …) is cancelled.
fn expected_fired(n: usize) -> usize {
    n / 2
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Start,
    Cancel,
    Fire,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Start => "start",
            Phase::Cancel => "cancel",
            Phase::Fire => "fire",
        }
    }
}

#[derive(Clone, Copy)]
struct Opts {
    /// The last phase to run; later phases are skipped and the structure is dropped untimed.
    upto: Phase,
    /// Time every step's drain on its own (costs two `Instant::now` per step).
    per_tick: bool,
}

/// What one scenario measured.
#[derive(Default)]
struct Run {
    start: Duration,
    cancel: Duration,
    fire: Duration,
    fired: usize,
    /// Drain time of every 8 ms step, when `Opts::per_tick`.
    ticks: Vec<Duration>,
    /// `delay_queue` only: time spent in `tokio::time::advance`, not counted in `fire`.
    advance: Duration,
}

impl Run {
    fn phase(&self, phase: Phase) -> Duration {
        match phase {
            Phase::Start => self.start,
            Phase::Cancel => self.cancel,
            Phase::Fire => self.fire,
        }
    }
}

/// Consumes fired values: sums them (so nothing is optimised away) and, when checking,
/// asserts that each fires exactly at its due tick.
struct Sink<'a> {
    sum: u64,
    check: Option<&'a [u64]>,
}

impl<'a> Sink<'a> {
    fn new(check: Option<&'a [u64]>) -> Self {
        Sink { sum: 0, check }
    }

    #[inline(always)]
    fn fire(&mut self, value: u64, now: u64) {
        self.sum = self.sum.wrapping_add(value);
        if let Some(delays) = self.check {
            assert_eq!(
                delays[value as usize], now,
                "timer {value} fired at the wrong tick"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Synchronous peers

/// A timer structure driven without a runtime.
trait SyncPeer {
    type Handle: Copy;
    fn create() -> Self;
    fn start_timer(&mut self, seq: u64, due: u64) -> Self::Handle;
    fn cancel_timer(&mut self, handle: Self::Handle);
    /// Advances to tick `now` and consumes every timer due by then; returns how many fired.
    fn drain_tick(&mut self, now: u64, sink: &mut Sink<'_>) -> usize;
    /// Live timers, when the structure can tell.
    fn live(&self) -> Option<usize>;
}

impl SyncPeer for Wheel<u64> {
    type Handle = Key;

    fn create() -> Self {
        Wheel::new()
    }

    #[inline]
    fn start_timer(&mut self, seq: u64, due: u64) -> Key {
        self.insert(due, seq)
    }

    #[inline]
    fn cancel_timer(&mut self, key: Key) {
        let removed = self.remove(key);
        assert!(removed.is_some());
    }

    #[inline]
    fn drain_tick(&mut self, now: u64, sink: &mut Sink<'_>) -> usize {
        let mut fired = 0;
        while let Some(expired) = self.poll(now) {
            let value = self.remove(expired.key).expect("a fired timer is live");
            sink.fire(value, now);
            fired += 1;
        }
        fired
    }

    fn live(&self) -> Option<usize> {
        Some(self.len())
    }
}

/// The ordered-map baseline.
struct BTreePeer(BTreeMap<(u64, u64), u64>);

impl SyncPeer for BTreePeer {
    type Handle = (u64, u64);

    fn create() -> Self {
        BTreePeer(BTreeMap::new())
    }

    #[inline]
    fn start_timer(&mut self, seq: u64, due: u64) -> (u64, u64) {
        self.0.insert((due, seq), seq);
        (due, seq)
    }

    #[inline]
    fn cancel_timer(&mut self, handle: (u64, u64)) {
        let removed = self.0.remove(&handle);
        assert!(removed.is_some());
    }

    #[inline]
    fn drain_tick(&mut self, now: u64, sink: &mut Sink<'_>) -> usize {
        let mut fired = 0;
        while let Some(entry) = self.0.first_entry() {
            if entry.key().0 > now {
                break;
            }
            sink.fire(entry.remove(), now);
            fired += 1;
        }
        fired
    }

    fn live(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

/// `hierarchical_hash_wheel_timer`'s cancellable quad wheel; one of its units = one 8 ms tick.
struct HhwtPeer {
    wheel: QuadWheelWithOverflow<IdOnlyTimerEntry<u64>>,
    now: u64,
}

impl SyncPeer for HhwtPeer {
    type Handle = u64;

    fn create() -> Self {
        HhwtPeer {
            wheel: QuadWheelWithOverflow::new(),
            now: 0,
        }
    }

    #[inline]
    fn start_timer(&mut self, seq: u64, due: u64) -> u64 {
        let entry = IdOnlyTimerEntry {
            id: seq,
            delay: Duration::from_millis(due - self.now),
        };
        assert!(self.wheel.insert(entry).is_ok());
        seq
    }

    #[inline]
    fn cancel_timer(&mut self, id: u64) {
        assert!(self.wheel.cancel(&id).is_ok());
    }

    #[inline]
    fn drain_tick(&mut self, now: u64, sink: &mut Sink<'_>) -> usize {
        let mut fired = 0;
        while self.now < now {
            self.now += 1;
            for entry in self.wheel.tick() {
                sink.fire(entry.id, self.now);
                fired += 1;
            }
        }
        fired
    }

    fn live(&self) -> Option<usize> {
        None // no public count
    }
}

fn run_sync<P: SyncPeer>(delays: &[u64], opts: Opts, sink: &mut Sink<'_>) -> Run {
    let n = delays.len();
    let mut run = Run::default();
    let mut peer = P::create();
    let mut handles = Vec::with_capacity(n);

    let t = Instant::now();
    for (seq, &due) in delays.iter().enumerate() {
        handles.push(peer.start_timer(seq as u64, due));
    }
    run.start = t.elapsed();
    if opts.upto == Phase::Start {
        return run;
    }

    let t = Instant::now();
    for &handle in handles.iter().step_by(2) {
        peer.cancel_timer(handle);
    }
    run.cancel = t.elapsed();
    if opts.upto == Phase::Cancel {
        return run;
    }

    let expected = expected_fired(n);
    let mut fired = 0;
    let mut now = 0;
    if opts.per_tick {
        run.ticks.reserve(MAX_DUE as usize + 1);
        let t = Instant::now();
        while fired < expected && now <= MAX_DUE {
            now += 1;
            let s = Instant::now();
            fired += peer.drain_tick(now, sink);
            run.ticks.push(s.elapsed());
        }
        run.fire = t.elapsed();
    } else {
        let t = Instant::now();
        while fired < expected && now <= MAX_DUE {
            now += 1;
            fired += peer.drain_tick(now, sink);
        }
        run.fire = t.elapsed();
    }
    run.fired = fired;
    assert_eq!(fired, expected, "not every timer fired");
    if let Some(live) = peer.live() {
        assert_eq!(live, 0, "timers left after the last fire");
    }
    drop(black_box(peer));
    run
}

// ---------------------------------------------------------------------------------------------
// tokio-util DelayQueue

/// Polls the queue until it has nothing more to give at the current (paused) instant.
fn drain_delay_queue(
    queue: &mut DelayQueue<u64>,
    cx: &mut Context<'_>,
    now: u64,
    sink: &mut Sink<'_>,
) -> usize {
    let mut fired = 0;
    while let Poll::Ready(Some(expired)) = queue.poll_expired(cx) {
        sink.fire(expired.into_inner(), now);
        fired += 1;
    }
    fired
}

fn run_delay_queue(delays: &[u64], opts: Opts, sink: &mut Sink<'_>) -> Run {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let n = delays.len();
        let mut run = Run::default();
        let mut queue = DelayQueue::new();
        let mut handles: Vec<DqKey> = Vec::with_capacity(n);

        let t = Instant::now();
        for (seq, &due) in delays.iter().enumerate() {
            handles.push(queue.insert(seq as u64, Duration::from_millis(due * TICK_MS)));
        }
        run.start = t.elapsed();
        if opts.upto == Phase::Start {
            return run;
        }

        let t = Instant::now();
        for handle in handles.iter().step_by(2) {
            queue.remove(handle);
        }
        run.cancel = t.elapsed();
        if opts.upto == Phase::Cancel {
            return run;
        }

        let expected = expected_fired(n);
        let step = Duration::from_millis(TICK_MS);
        let mut fired = 0;
        let mut now = 0;
        if opts.per_tick {
            run.ticks.reserve(MAX_DUE as usize + 1);
        }
        while fired < expected && now <= MAX_DUE {
            now += 1;
            let a = Instant::now();
            tokio::time::advance(step).await;
            let s = Instant::now();
            // `unconstrained`: tokio's co-operative budget must not cut a drain short.
            fired += tokio::task::unconstrained(poll_fn(|cx| {
                Poll::Ready(drain_delay_queue(&mut queue, cx, now, sink))
            }))
            .await;
            let e = Instant::now();
            run.advance += s - a;
            run.fire += e - s;
            if opts.per_tick {
                run.ticks.push(e - s);
            }
        }
        run.fired = fired;
        assert_eq!(fired, expected, "DelayQueue did not fire every timer");
        assert!(queue.is_empty(), "timers left after the last fire");
        run
    })
}

// ---------------------------------------------------------------------------------------------
// Peers table

type RunFn = fn(&[u64], Opts, &mut Sink<'_>) -> Run;

struct PeerDef {
    name: &'static str,
    run: RunFn,
}

const PEERS: [PeerDef; 4] = [
    PeerDef {
        name: "ours",
        run: run_sync::<Wheel<u64>>,
    },
    PeerDef {
        name: "delay_queue",
        run: run_delay_queue,
    },
    PeerDef {
        name: "hhwt",
        run: run_sync::<HhwtPeer>,
    },
    PeerDef {
        name: "btreemap",
        run: run_sync::<BTreePeer>,
    },
];

/// Runs every peer once with per-fire checks: each timer fires exactly at its due tick,
/// exactly the non-cancelled half fires, and nothing is left.
fn validate(n: usize) {
    let delays = make_delays(n);
    for peer in &PEERS {
        let mut sink = Sink::new(Some(&delays));
        let opts = Opts {
            upto: Phase::Fire,
            per_tick: false,
        };
        let run = (peer.run)(&delays, opts, &mut sink);
        assert_eq!(run.fired, expected_fired(n), "{}", peer.name);
        let expected_sum: u64 = (1..n as u64).step_by(2).sum();
        assert_eq!(sink.sum, expected_sum, "{}: wrong timers fired", peer.name);
    }
}

// ---------------------------------------------------------------------------------------------
// Criterion

fn bench_phase(c: &mut Criterion, phase: Phase, ns: &[usize]) {
    let mut group = c.benchmark_group(format!("wheel/{}", phase.name()));
    group.sample_size(10).sampling_mode(SamplingMode::Flat);
    for &n in ns {
        let (warm_up, measure) = match n {
            0..=10_000 => (0.2, 1.0),
            10_001..=100_000 => (0.2, 2.0),
            _ => (0.1, 3.0),
        };
        group
            .warm_up_time(Duration::from_secs_f64(warm_up))
            .measurement_time(Duration::from_secs_f64(measure));
        let ops = match phase {
            Phase::Start => n,
            Phase::Cancel => n.div_ceil(2),
            Phase::Fire => expected_fired(n),
        };
        group.throughput(Throughput::Elements(ops as u64));
        let delays = make_delays(n);
        let opts = Opts {
            upto: phase,
            per_tick: false,
        };
        for peer in &PEERS {
            group.bench_with_input(BenchmarkId::new(peer.name, n), &delays, |b, delays| {
                b.iter_custom(|iters| {
                    let mut sink = Sink::new(None);
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += (peer.run)(delays, opts, &mut sink).phase(phase);
                    }
                    black_box(sink.sum);
                    total
                });
            });
        }
    }
    group.finish();
}

// ---------------------------------------------------------------------------------------------
// Summary table

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Nearest-rank percentile of durations, in nanoseconds.
fn percentile_ns(durations: &[Duration], p: f64) -> f64 {
    let mut ns: Vec<u128> = durations.iter().map(Duration::as_nanos).collect();
    ns.sort_unstable();
    let rank = ((p / 100.0) * ns.len() as f64).ceil().max(1.0) as usize;
    ns[rank - 1] as f64
}

#[derive(Default)]
struct Samples {
    start: Vec<f64>,
    cancel: Vec<f64>,
    fire: Vec<f64>,
    p50_tick: Vec<f64>,
    p99_tick: Vec<f64>,
    max_tick: Vec<f64>,
    advance: Vec<f64>,
}

struct Medians {
    start: f64,
    cancel: f64,
    fire: f64,
    p50_tick: f64,
    p99_tick: f64,
    max_tick: f64,
    advance: f64,
}

fn summary(ns: &[usize]) {
    println!("\n## Summary: median of {REPS} repetitions (ns per operation, tick drain in µs)\n");
    println!(
        "| N | peer | ns/start | ns/cancel | ns/fired | p99 tick drain µs | start vs DQ | cancel vs DQ | fire vs DQ |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut notes = Vec::new();
    for &n in ns {
        let delays = make_delays(n);
        let mut samples: Vec<Samples> = PEERS.iter().map(|_| Samples::default()).collect();
        let cancelled = n.div_ceil(2) as f64;
        let fired = expected_fired(n) as f64;
        // Repetitions outermost, so that noise spreads evenly over the peers.
        for _ in 0..REPS {
            for (peer, s) in PEERS.iter().zip(samples.iter_mut()) {
                let mut sink = Sink::new(None);
                let full = Opts {
                    upto: Phase::Fire,
                    per_tick: false,
                };
                let run = (peer.run)(&delays, full, &mut sink);
                s.start.push(run.start.as_nanos() as f64 / n as f64);
                s.cancel.push(run.cancel.as_nanos() as f64 / cancelled);
                s.fire.push(run.fire.as_nanos() as f64 / fired);
                s.advance.push(run.advance.as_nanos() as f64 / fired);

                let ticked = Opts {
                    upto: Phase::Fire,
                    per_tick: true,
                };
                let run = (peer.run)(&delays, ticked, &mut sink);
                s.p50_tick.push(percentile_ns(&run.ticks, 50.0));
                s.p99_tick.push(percentile_ns(&run.ticks, 99.0));
                s.max_tick.push(percentile_ns(&run.ticks, 100.0));
                black_box(sink.sum);
            }
        }
        let medians: Vec<Medians> = samples
            .iter_mut()
            .map(|s| Medians {
                start: median(&mut s.start),
                cancel: median(&mut s.cancel),
                fire: median(&mut s.fire),
                p50_tick: median(&mut s.p50_tick),
                p99_tick: median(&mut s.p99_tick),
                max_tick: median(&mut s.max_tick),
                advance: median(&mut s.advance),
            })
            .collect();
        let dq = PEERS
            .iter()
            .position(|p| p.name == "delay_queue")
            .expect("delay_queue peer");
        let dq = &medians[dq];
        for (peer, m) in PEERS.iter().zip(&medians) {
            println!(
                "| {n} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}× | {:.2}× | {:.2}× |",
                peer.name,
                m.start,
                m.cancel,
                m.fire,
                m.p99_tick / 1000.0,
                dq.start / m.start,
                dq.cancel / m.cancel,
                dq.fire / m.fire,
            );
            notes.push(format!(
                "| {n} | {} | {:.1} | {:.1} | {:.1} | {} |",
                peer.name,
                m.p50_tick / 1000.0,
                m.p99_tick / 1000.0,
                m.max_tick / 1000.0,
                if peer.name == "delay_queue" {
                    format!("{:.1}", m.advance)
                } else {
                    "–".to_string()
                },
            ));
        }
    }
    println!(
        "\n\"vs DQ\" = DelayQueue's median / this peer's median (> 1 = faster than DelayQueue).\n"
    );
    println!("### Per-tick drain (median over repetitions of each run's percentile)\n");
    println!("| N | peer | p50 µs | p99 µs | max µs | DQ advance ns/fired (not in ns/fired) |");
    println!("|---|---|---:|---:|---:|---:|");
    for line in notes {
        println!("{line}");
    }
}

// ---------------------------------------------------------------------------------------------
// Command line

#[derive(Debug, PartialEq, Eq)]
enum Mode {
    Bench,
    Test,
    List,
}

/// Criterion options that take a value (the value is not a positional argument).
const VALUE_OPTS: [&str; 18] = [
    "--color",
    "-c",
    "--save-baseline",
    "-s",
    "--baseline",
    "-b",
    "--baseline-lenient",
    "--load-baseline",
    "--sample-size",
    "--warm-up-time",
    "--measurement-time",
    "--nresamples",
    "--noise-threshold",
    "--confidence-level",
    "--significance-level",
    "--profile-time",
    "--plotting-backend",
    "--output-format",
];

fn parse_n(token: &str) -> Option<usize> {
    let n = match token.to_ascii_lowercase().as_str() {
        "10k" => 10_000,
        "100k" => 100_000,
        "1m" => 1_000_000,
        other => other.replace('_', "").parse().ok()?,
    };
    BENCH_NS.contains(&n).then_some(n)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let mode = if has("--list") {
        Mode::List
    } else if has("--bench") && !has("--test") {
        Mode::Bench
    } else {
        Mode::Test
    };
    let mut positional = Vec::new();
    let mut skip_value = false;
    for arg in &args {
        if skip_value {
            skip_value = false;
        } else if arg.starts_with('-') {
            skip_value = VALUE_OPTS.contains(&arg.as_str()) || arg == "--format";
        } else {
            positional.push(arg.as_str());
        }
    }

    let all_ns: &[usize] = if mode == Mode::Test {
        &TEST_NS
    } else {
        &BENCH_NS
    };
    let mut ns: Vec<usize> = all_ns.to_vec();
    let mut criterion = Criterion::default().configure_from_args();
    let mut run_summary = mode == Mode::Bench;
    match positional.first().copied() {
        None => {}
        Some(token) if parse_n(token).is_some() => {
            let n = parse_n(token).unwrap_or_default();
            ns = vec![n];
            criterion = criterion.with_filter(format!("^wheel/[a-z]+/[a-z_]+/{n}$"));
        }
        Some(token) if token == "summary" || token.starts_with("summary/") => {
            if let Some(n) = token.strip_prefix("summary/").and_then(parse_n) {
                ns = vec![n];
            }
            criterion = criterion.with_benchmark_filter(BenchmarkFilter::RejectAll);
        }
        Some(_) => run_summary = false,
    }

    if mode != Mode::List {
        validate(if mode == Mode::Test {
            TEST_NS[0]
        } else {
            10_000
        });
    }
    let criterion_ns: &[usize] = if mode == Mode::List { all_ns } else { &ns };
    for phase in [Phase::Start, Phase::Cancel, Phase::Fire] {
        bench_phase(&mut criterion, phase, criterion_ns);
    }
    criterion.final_summary();
    if run_summary {
        summary(&ns);
    }
}
