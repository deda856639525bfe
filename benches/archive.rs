//! Archive benchmark, on the default world's save (190,728 items, 33,158 mobiles; 5.87 MB).
//!
//! Criterion group `archive`: `format::write` of the save's four files in each format at
//! level 3 (`archive.level`'s default), against `gnu_tar_zstd`: GNU tar piping through the
//! zstd command-line tool at the same level (`tar -I 'zstd -3' -cf`), the tools an operator
//! would use by hand.
//!
//! Summary (after the group under `cargo bench`, or alone with `-- summary`):
//! 1. per format: archive size, ratio, median time of 5 writes, MB/s of input;
//! 2. the loop during a rollup: an `EventLoop` running the world's game logic and a probe
//!    timer every tick, while the `Archiver` rolls up three backups from 33 to 40 days ago
//!    (an hourly, a daily and a monthly archive each, months permitting): the largest wheel
//!    lag and late ticks over the rollup, against 1.5 s of the same loop with no rollup.
//!
//! Running: `cargo bench --bench archive` (~1 min). `cargo test --bench archive` runs one
//! small pass.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use shardloop::persist::archive::{Archiver, Format, Plan, format};
use shardloop::persist::{self, Clock, Layout, Snapshot};
use shardloop::world::{self, World};
use shardloop::{EventLoop, runtime, timer};

/// The demo game, as the binary compiles it.
#[path = "../src/demo/mod.rs"]
mod demo;
mod support;
use support::median;

const LEVEL: i32 = 3;

fn world_for(full_size: bool) -> World {
    match full_size {
        true => world::generate_default(world::DEFAULT_SEED),
        false => world::generate(world::DEFAULT_SEED, 5_000, 800),
    }
}

/// A save of `world` in `dir/Saves`; its files as (name, path).
fn save(world: &World, dir: &Path) -> Vec<(String, PathBuf)> {
    let layout = Layout::new(dir, dir.join("Saves"));
    persist::save::write(
        &layout,
        Snapshot::take(world, Timestamp::now(), |_| true),
        1,
    )
    .expect("save");
    ["manifest.toml", "items.bin", "mobiles.bin", "spawners.bin"]
        .iter()
        .map(|n| (n.to_string(), layout.saves.join(n)))
        .collect()
}

fn write_once(files: &[(String, PathBuf)], out: &Path, format: Format) -> u64 {
    let sources: Vec<(String, &Path)> = files
        .iter()
        .map(|(n, p)| (n.clone(), p.as_path()))
        .collect();
    let path = out.join(format!("bench{}", format.extension()));
    format::write(&path, format, LEVEL, &sources).expect("write");
    let size = std::fs::metadata(&path).expect("size").len();
    std::fs::remove_file(&path).expect("remove");
    size
}

fn gnu_tar_zstd(saves: &Path, out: &Path) {
    let path = out.join("gnu.tar.zst");
    let status = Command::new("tar")
        .args(["-I", &format!("zstd -{LEVEL} -q")])
        .arg("-cf")
        .arg(&path)
        .arg("-C")
        .arg(saves)
        .args(["manifest.toml", "items.bin", "mobiles.bin", "spawners.bin"])
        .status()
        .expect("tar and zstd installed");
    assert!(status.success());
    std::fs::remove_file(path).expect("remove");
}

fn groups(c: &mut Criterion, files: &[(String, PathBuf)], saves: &Path, out: &Path) {
    let mut group = c.benchmark_group("archive");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    for format in Format::ALL {
        let name = format.extension().trim_start_matches('.').replace('.', "_");
        group.bench_function(name, |b| b.iter(|| write_once(files, out, format)));
    }
    group.bench_function("gnu_tar_zstd", |b| b.iter(|| gnu_tar_zstd(saves, out)));
    group.finish();
}

fn format_table(files: &[(String, PathBuf)], out: &Path) {
    let input: u64 = files
        .iter()
        .map(|(_, p)| std::fs::metadata(p).expect("size").len())
        .sum();
    println!(
        "\narchive summary: the default world's save, {:.2} MB of input, level {LEVEL}",
        input as f64 / 1e6
    );
    println!(
        "{:<10} {:>10} {:>7} {:>10} {:>10}",
        "format", "size MB", "ratio", "time ms", "MB/s in"
    );
    for format in Format::ALL {
        let mut times = Vec::new();
        let mut size = 0;
        for _ in 0..5 {
            let began = Instant::now();
            size = write_once(files, out, format);
            times.push(began.elapsed().as_secs_f64());
        }
        let t = median(times);
        println!(
            "{:<10} {:>10.2} {:>7.2} {:>10.1} {:>10.0}",
            format.extension(),
            size as f64 / 1e6,
            input as f64 / size as f64,
            t * 1e3,
            input as f64 / 1e6 / t
        );
    }
}

/// The largest wheel lag and late ticks over `span`, with or without a rollup running.
fn loop_during(world: World, root: &Path, rollup: bool) -> (Duration, u64, Duration) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let root = root.to_path_buf();
    runtime.block_on(async move {
        let world = std::rc::Rc::new(std::cell::RefCell::new(world));
        let mut event_loop = EventLoop::builder().build();
        event_loop
            .run_until(async move {
                let logic = demo::start_game_logic(world.clone());
                let probe = timer::every(Duration::from_millis(8)).start(|| {});
                timer::pause(500).await;
                runtime::take_lag_window();
                let late = runtime::stats().late_ticks;
                let began = Instant::now();
                if rollup {
                    let layout = Layout::new(&root, root.join("Saves"));
                    let plan = Plan {
                        dir: root.join("Archives"),
                        format: Format::TarZst,
                        level: LEVEL,
                        zone: TimeZone::UTC,
                        retention: [24, 30, 12],
                        keep_backups: 2,
                        max_age: None,
                        limits: Default::default(),
                        remote: None,
                    };
                    let archiver = Archiver::new(layout, plan, Clock::System);
                    archiver.request();
                    archiver.idle().await;
                } else {
                    timer::pause(1500).await;
                }
                let took = began.elapsed();
                let lag = runtime::take_lag_window().max();
                let late = runtime::stats().late_ticks - late;
                probe.cancel();
                logic.stop();
                (lag, late, took)
            })
            .await
    })
}

/// Three complete backups in three past hours (and past day and month), from `saves`.
fn backups(root: &Path, saves: &Path) {
    let now = Timestamp::now();
    for days in [40i64, 35, 33] {
        let at = now - SignedDuration::from_hours(24 * days);
        let dir = root
            .join("Backups/Automatic")
            .join(at.strftime("%Y-%m-%d-%H-%M-%S").to_string());
        std::fs::create_dir_all(&dir).expect("backup dir");
        for entry in std::fs::read_dir(saves).expect("saves") {
            let entry = entry.expect("entry");
            std::fs::copy(entry.path(), dir.join(entry.file_name())).expect("copy");
        }
        std::fs::write(dir.join(persist::layout::BACKUP_MARKER), "").expect("marker");
    }
}

fn main() {
    let (mut criterion, invocation) = support::invocation();
    let dir = tempfile::tempdir().expect("temp dir");
    let world = world_for(invocation.full_size);
    let files = save(&world, dir.path());
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).expect("out dir");
    if invocation.summary {
        format_table(&files, &out);
        let (lag, late, took) = loop_during(world_for(true), dir.path(), false);
        println!(
            "\nloop without a rollup: max wheel lag {lag:.2?}, late ticks {late} over {took:.2?}"
        );
        backups(dir.path(), &dir.path().join("Saves"));
        let (lag, late, took) = loop_during(world_for(true), dir.path(), true);
        let count = |kind: &str| {
            std::fs::read_dir(dir.path().join("Archives").join(kind)).map_or(0, |d| d.count())
        };
        println!(
            "loop during a rollup ({} hourly, {} daily, {} monthly archives in {took:.2?}): \
             max wheel lag {lag:.2?}, late ticks {late}",
            count("Hourly"),
            count("Daily"),
            count("Monthly")
        );
    }
    groups(&mut criterion, &files, &dir.path().join("Saves"), &out);
    criterion.final_summary();
}
