//! Save benchmark, on the default world (190,728 items, 33,158 mobiles).
//!
//! Criterion groups, each against its peer in the same run:
//! - `save_stall`: what the loop waits for, the options measured side by side. `capture`
//!   (ours: freeze the world, sharing its entity pages, and note the left-out players; the
//!   copy happens off the loop; `freeze` is its first part alone) against `copy` (the stop-the-world copy of every entity, the
//!   snapshot as the loop took it before), `slice_of_16` (one slice of a copy cut into 16
//!   slices across iterations: a lower bound, with a free cursor and no dirty tracking) and
//!   `encode_on_loop` (the naive save: copy, sort and encode every record on the loop thread,
//!   as a shard that serializes inline would).
//! - `save_cow`: what ours costs the loop afterwards, while a save holds the frozen pages: a
//!   change to an entity whose page is shared (`write_shared`: the page copied first) against
//!   the same change with nothing frozen (`write_unshared`), and the worst case, one change on
//!   every page of the world in one go (`write_every_page`, against `copy` above).
//! - `save_write`: the off-loop part, `persist::save::write` (sort, encode with the default
//!   workers, write, fsync, swap in) against `disk_floor` (one `std::fs::write` of the same
//!   number of bytes plus an fsync: what the disk alone costs).
//! - `load`: `persist::load` (read, check, decode, build the world) against `generate` (the
//!   other way a shard gets its world at startup).
//!
//! Summary (after the groups under `cargo bench`, or alone with `-- summary`): `SAVES` saves
//! through the `Saver` on an `EventLoop` running the world's game logic (its decay and
//! spawner timers) plus a probe timer every tick, so the loop has due ticks to be late for.
//! The saver lists the players to leave out (none), as the shard does. Per save: the loop
//! stall (snapshot), the wall time, the size; over the run: the largest
//! wheel lag and late ticks; memory: resident set before, its peak during the save (VmHWM,
//! reset through /proc/self/clear_refs before each save) and after, as multiples of the
//! save's size. Medians are quoted.
//!
//! Running: `cargo bench --bench save` (~1 min). `cargo test --bench save` runs each group
//! once on a small world.

use std::cell::RefCell;
use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, SamplingMode};
use shardloop::persist::{self, Capture, Clock, Layout, Saver, SaverConfig, Snapshot, codec};
use shardloop::world::{self, World};
use shardloop::{EventLoop, runtime, timer};

/// The demo game, as the binary compiles it.
#[path = "../src/demo/mod.rs"]
mod demo;
mod support;
use support::median;

#[path = "support/peak_heap.rs"]
mod peak_heap;

/// Counts live heap bytes and their peak: the memory a save needs.
#[global_allocator]
static ALLOCATOR: peak_heap::PeakHeap = peak_heap::PeakHeap;

/// Saves in the summary.
const SAVES: usize = 21;

fn world_for(full_size: bool) -> World {
    match full_size {
        true => world::generate_default(world::DEFAULT_SEED),
        false => world::generate(world::DEFAULT_SEED, 5_000, 800),
    }
}

/// The naive save's loop stall: everything but the disk, on the calling thread.
fn encode_on_loop(world: &World) -> usize {
    let mut snap = Snapshot::take(world, jiff::Timestamp::now(), |_| true);
    snap.sort();
    let mut bytes = Vec::new();
    snap.items
        .iter()
        .for_each(|i| codec::encode_item(i, &mut bytes));
    snap.mobiles
        .iter()
        .for_each(|m| codec::encode_mobile(m, &mut bytes));
    snap.spawners
        .iter()
        .for_each(|s| codec::encode_spawner(s, &mut bytes));
    bytes.len()
}

/// One slice of a copy cut into 16, as a sliced save would copy each iteration: the cost of
/// the copy alone, with the cursor for free (the world's maps have no stable one) and no
/// tracking of what changes behind it.
fn slice_of_16(world: &World) -> (Vec<world::Item>, Vec<world::Mobile>) {
    let items: Vec<_> = (world.items().take(world.item_count() / 16))
        .cloned()
        .collect();
    let mobiles: Vec<_> = (world.mobiles().take(world.mobile_count() / 16))
        .cloned()
        .collect();
    (items, mobiles)
}

/// What copy-on-write costs the loop after a freeze.
fn cow(c: &mut Criterion, world: &World) {
    let world = RefCell::new(world::generate(
        world.seed(),
        world.item_count() as u32,
        world.mobile_count() as u32,
    ));
    let item = world.borrow().items().nth(1000).expect("an item").serial;
    let every_page: Vec<_> = {
        let w = world.borrow();
        let mut serials: Vec<_> = w.items().map(|i| i.serial).collect();
        serials.sort();
        serials.dedup_by_key(|s| s.0 / 128);
        serials
    };
    let mut hue = 0u16;
    let mut group = c.benchmark_group("save_cow");
    group.sampling_mode(SamplingMode::Flat).sample_size(20);
    group.bench_function("write_shared", |b| {
        b.iter_batched(
            || world.borrow().freeze(),
            |frozen| {
                hue = hue.wrapping_add(1);
                world.borrow_mut().set_item_hue(item, hue);
                frozen
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("write_unshared", |b| {
        b.iter(|| {
            hue = hue.wrapping_add(1);
            world.borrow_mut().set_item_hue(item, hue)
        })
    });
    group.bench_function("write_every_page", |b| {
        b.iter_batched(
            || world.borrow().freeze(),
            |frozen| {
                hue = hue.wrapping_add(1);
                let mut w = world.borrow_mut();
                for &s in &every_page {
                    w.set_item_hue(s, hue);
                }
                frozen
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
    // The marks those writes queued would otherwise grow without bound.
    world.borrow_mut().drain_deltas(usize::MAX);
}

fn write_save(world: &World, root: &Path) -> u64 {
    let layout = Layout::new(root, root.join("Saves"));
    let snap = Snapshot::take(world, jiff::Timestamp::now(), |_| true);
    let saved =
        persist::save::write(&layout, snap, persist::save::default_threads()).expect("save");
    // Keep one backup at most, so the disk does not fill over many iterations.
    if let Some(backup) = saved.replaced.backup() {
        std::fs::remove_dir_all(backup).expect("remove backup");
    }
    saved.manifest.data_bytes()
}

fn disk_floor(root: &Path, bytes: &[u8]) {
    let path = root.join("floor.bin");
    let mut f = std::fs::File::create(&path).expect("create");
    f.write_all(bytes).expect("write");
    f.sync_all().expect("fsync");
    drop(f);
    std::fs::remove_file(path).expect("remove");
}

fn groups(c: &mut Criterion, world: &World) {
    let mut stall = c.benchmark_group("save_stall");
    stall.sampling_mode(SamplingMode::Flat).sample_size(20);
    stall.bench_function("capture", |b| {
        b.iter(|| black_box(Capture::take(world, jiff::Timestamp::now(), |_| true)))
    });
    stall.bench_function("freeze", |b| b.iter(|| black_box(world.freeze())));
    stall.bench_function("copy", |b| {
        b.iter(|| black_box(Snapshot::take(world, jiff::Timestamp::now(), |_| true)))
    });
    stall.bench_function("slice_of_16", |b| b.iter(|| black_box(slice_of_16(world))));
    stall.bench_function("encode_on_loop", |b| {
        b.iter(|| black_box(encode_on_loop(world)))
    });
    stall.finish();
    cow(c, world);

    let dir = tempfile::tempdir().expect("temp dir");
    let size = write_save(world, dir.path());
    let floor = vec![0x5Au8; size as usize];
    let mut write = c.benchmark_group("save_write");
    write.sampling_mode(SamplingMode::Flat).sample_size(10);
    write.bench_function("save", |b| b.iter(|| write_save(world, dir.path())));
    write.bench_function("disk_floor", |b| b.iter(|| disk_floor(dir.path(), &floor)));
    write.finish();

    let mut load = c.benchmark_group("load");
    load.sampling_mode(SamplingMode::Flat).sample_size(10);
    let saves = dir.path().join("Saves");
    load.bench_function("load", |b| {
        b.iter(|| black_box(persist::load(&saves).expect("load")))
    });
    let plan = (
        world.seed(),
        world.item_count() as u32,
        world.mobile_count() as u32,
    );
    load.bench_function("generate", |b| {
        b.iter(|| black_box(world::generate(plan.0, plan.1, plan.2)))
    });
    load.finish();
}

/// Resident set now and its peak since the last reset, in bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn reset_peak() {
    // "5" resets VmHWM to the current resident set (Linux 4.0+).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

struct Row {
    /// Allocated bytes: before the save, the peak during it, after it.
    heap: (usize, usize, usize),
    /// The largest wheel lag from just before the save to its end.
    lag: Duration,
    stall: Duration,
    took: Duration,
    bytes: u64,
    before: u64,
    peak: u64,
    after: u64,
}

fn summary(world: World) {
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (rows, lag, late) = runtime.block_on(async {
        let world = Rc::new(RefCell::new(world));
        let mut event_loop = EventLoop::builder().build();
        let root = dir.path().to_path_buf();
        let w = world.clone();
        let (rows, lag, late) = event_loop
            .run_until(async move {
                let logic = demo::start_game_logic(w.clone());
                let probe = timer::every(Duration::from_millis(8)).start(|| {});
                let saver = Saver::new(
                    w,
                    SaverConfig {
                        layout: Layout::new(&root, root.join("Saves")),
                        threads: persist::save::default_threads(),
                        clock: Clock::System,
                        keep: Box::new(|_| true),
                        notices: Box::new(|_| {}),
                    },
                );
                // As the shard does: the left-out players listed (none here), so the
                // snapshot reads no mobile on the loop.
                saver.leave_out(Vec::new);
                timer::pause(500).await;
                runtime::take_lag_window();
                let mut lag = Duration::ZERO;
                let late_before = runtime::stats().late_ticks;
                let mut rows = Vec::new();
                for _ in 0..SAVES {
                    timer::pause(300).await;
                    lag = lag.max(runtime::take_lag_window().max());
                    let (before, _) = rss();
                    reset_peak();
                    let heap_before = peak_heap::reset_peak();
                    let report = saver.save().await.expect("save");
                    let (_, peak) = rss();
                    let heap_peak = peak_heap::peak();
                    let save_lag = runtime::take_lag_window().max();
                    lag = lag.max(save_lag);
                    timer::pause(200).await;
                    let (after, _) = rss();
                    let heap = (heap_before, heap_peak, peak_heap::live());
                    rows.push(Row {
                        heap,
                        lag: save_lag,
                        stall: report.stall,
                        took: report.took,
                        bytes: report.bytes,
                        before,
                        peak,
                        after,
                    });
                }
                let lag = lag.max(runtime::take_lag_window().max());
                let late = runtime::stats().late_ticks - late_before;
                probe.cancel();
                logic.stop();
                (rows, lag, late)
            })
            .await;
        drop(world);
        (rows, lag, late)
    });
    print_summary(&rows, lag, late);
}

fn print_summary(rows: &[Row], max_lag: Duration, late: u64) {
    let mb = |b: u64| b as f64 / 1e6;
    let times = |a: u64, b: u64, size: u64| a.saturating_sub(b) as f64 / size as f64;
    println!(
        "\nsave summary: {SAVES} saves of the default world through the Saver, on a loop running its timers"
    );
    println!(
        "  heap: bytes allocated and not freed (counting allocator); RSS: resident set (VmRSS/VmHWM)"
    );
    println!(
        "{:>4} {:>9} {:>9} {:>8} {:>6} {:>11} {:>11} {:>10} {:>10} {:>10}",
        "save",
        "stall",
        "lag",
        "wall",
        "MB",
        "heap peak×",
        "heap kept×",
        "RSS MB",
        "RSS peak×",
        "RSS kept×"
    );
    let (mut heap_peak, mut heap_kept, mut rss_peak) = (Vec::new(), Vec::new(), Vec::new());
    for (i, r) in rows.iter().enumerate() {
        let (before, peak, after) = (r.heap.0 as u64, r.heap.1 as u64, r.heap.2 as u64);
        heap_peak.push(times(peak, before, r.bytes));
        heap_kept.push(times(after, before, r.bytes));
        rss_peak.push(times(r.peak, r.before, r.bytes));
        println!(
            "{:>4} {:>9.2?} {:>9.2?} {:>8.1?} {:>6.2} {:>11.2} {:>11.2} {:>10.1} {:>10.2} {:>10.2}",
            i + 1,
            r.stall,
            r.lag,
            r.took,
            mb(r.bytes),
            times(peak, before, r.bytes),
            times(after, before, r.bytes),
            mb(r.before),
            times(r.peak, r.before, r.bytes),
            times(r.after, r.before, r.bytes),
        );
    }
    let ms =
        |f: fn(&Row) -> Duration| median(rows.iter().map(|r| f(r).as_secs_f64() * 1e3).collect());
    println!(
        "median: stall {:.2} ms, wall {:.0} ms, size {:.2} MB, extra memory during a save {:.2}× \
         the save (heap; RSS {:.2}×), kept after {:.2}×",
        ms(|r| r.stall),
        ms(|r| r.took),
        mb(rows[0].bytes),
        median(heap_peak),
        median(rss_peak),
        median(heap_kept),
    );
    let mut stalls: Vec<Duration> = rows.iter().map(|r| r.stall).collect();
    stalls.sort();
    println!(
        "stall: p99 (nearest rank) {:.2?}, max {:.2?} over {} saves",
        stalls[(stalls.len() * 99).div_ceil(100) - 1],
        stalls[stalls.len() - 1],
        stalls.len()
    );
    println!(
        "max wheel lag over the run: {max_lag:.2?} (during saves: {:.2?}); late ticks: {late}",
        rows.iter().map(|r| r.lag).max().unwrap_or_default()
    );
}

fn main() {
    let (mut criterion, invocation) = support::invocation();
    let world = world_for(invocation.full_size);
    // The summary first: its resident-set figures would otherwise include what the groups
    // left in the allocator's caches.
    if invocation.summary {
        summary(world_for(invocation.full_size));
    }
    groups(&mut criterion, &world);
    criterion.final_summary();
}
