//! Off-site uploads measured (docs/performance.md, "Off-site archives"): throughput of a day's
//! archives, and the loop's wheel lag while they go up. `scripts/measure-offsite.sh` runs it
//! against a moto server beside boto3's `upload_file` to the same server in the same run.
//!
//! ```sh
//! offsite_upload prepare DIR
//!     # DIR/data: the default world's backups over 30 November, rolled up at 00:30 on the
//!     # 1st: 24 hourly archives, the day's, the month's (26 .tar.zst, ~1.7 MB each)
//! AWS_ACCESS_KEY_ID=.. AWS_SECRET_ACCESS_KEY=.. AWS_DEFAULT_REGION=.. \
//!     offsite_upload upload DIR ENDPOINT s3://BUCKET/PREFIX [LAGS]
//!     # a loop running the demo world's timers and a probe timer every 8 ms tick, while the
//!     # shard's uploader sends every archive of DIR/data/Archives to s3://BUCKET/PREFIX
//!     # through ENDPOINT, and for as long again without it (the baseline); prints one line:
//!     # bytes, seconds, MB/s, the probe's lag p50/p99/max in each; appends every lag to
//!     # LAGS ("upload NANOS" / "baseline NANOS") for pooling over rounds
//! ```
//!
//! The baseline comes after the upload when PREFIX ends in an odd digit and before it
//! otherwise, so that neither side always runs first.
//!
//! ```sh
//! offsite_upload watch SECONDS LAGS TAG
//!     # the same loop and probe for SECONDS, nothing else in this process; appends the lags
//!     # as "TAG NANOS" (the script runs boto3's uploads meanwhile: the same upload from
//!     # another process, to tell what the upload costs this machine from what the uploader
//!     # costs the loop)
//! ```
//!
//! The probe records `Instant::now() − timer::now()` at each run (the lag from the tick's
//! boundary, as `examples/wake_latency.rs` does): exact samples, nearest-rank percentiles.

use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use shardloop::config::ArchiveConfig;
use shardloop::persist::archive::mark::MARKS_DIR;
use shardloop::persist::archive::remote::{Remote, RemoteUrl, Store};
use shardloop::persist::archive::rollup::{self, Period, Plan};
use shardloop::persist::archive::upload::Uploader;
use shardloop::persist::{self, Clock, Layout, Snapshot};
use shardloop::{EventLoop, timer, world};

/// The demo game, as the binary compiles it.
#[path = "../src/demo/mod.rs"]
mod demo;

/// The rollup's "now": the day and month before are past periods.
const NOW: &str = "2026-12-01T00:30:00Z";

/// The shard's default rollup plan for `data`.
fn plan(data: &Path) -> Plan {
    ArchiveConfig::default().plan(data.join("Archives"), TimeZone::UTC)
}

/// The default world's backups every hour of 30 November (each a little different: the
/// world generated with another seed), rolled up.
fn prepare(dir: &Path) {
    let data = dir.join("data");
    let layout = Layout::new(&data, data.join("Saves"));
    std::fs::create_dir_all(&layout.backups).expect("backups dir");
    for hour in 0..24i64 {
        let at: Timestamp = "2026-11-30T00:20:00Z".parse().expect("time");
        let at = at + SignedDuration::from_hours(hour);
        let world = world::generate_default(world::DEFAULT_SEED + hour as u64);
        let scratch = tempfile::tempdir_in(&data).expect("scratch");
        let l = Layout::new(scratch.path(), scratch.path().join("Saves"));
        persist::save::write(&l, Snapshot::take(&world, at, |_| true), 1).expect("save");
        let target = layout
            .backups
            .join(at.strftime("%Y-%m-%d-%H-%M-%S").to_string());
        std::fs::rename(&l.saves, &target).expect("rename");
        std::fs::write(target.join(persist::layout::BACKUP_MARKER), "").expect("marker");
    }
    let report = rollup::run(&layout, &plan(&data), NOW.parse().expect("now")).expect("rollup");
    let bytes: u64 = report.written.iter().map(|w| w.archive_bytes).sum();
    println!(
        "prepared {} archives, {bytes} bytes, in {}",
        report.written.len(),
        data.join("Archives").display()
    );
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn summary(mut lags: Vec<Duration>) -> String {
    lags.sort();
    format!(
        "n={} p50={:.3}ms p99={:.3}ms max={:.3}ms",
        lags.len(),
        percentile(&lags, 50.0).as_secs_f64() * 1e3,
        percentile(&lags, 99.0).as_secs_f64() * 1e3,
        lags.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    )
}

/// The probe's lags, as it records them.
type Lags = Rc<RefCell<Vec<Duration>>>;

/// Runs `body` on a loop running the demo world's timers and the 8 ms probe (after half a
/// second to settle), handing it the probe's lags to take windows of.
fn on_probed_loop<T>(body: impl AsyncFnOnce(Lags) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let world = Rc::new(RefCell::new(world::generate_default(world::DEFAULT_SEED)));
        let mut event_loop = EventLoop::builder().build();
        event_loop
            .run_until(async move {
                let logic = demo::start_game_logic(world);
                let lags = Lags::default();
                let sink = lags.clone();
                let probe = timer::every(Duration::from_millis(8)).start(move || {
                    sink.borrow_mut()
                        .push(tokio::time::Instant::now() - timer::now());
                });
                timer::pause(500).await;
                let out = body(lags).await;
                probe.cancel();
                logic.stop();
                out
            })
            .await
    })
}

/// The probe's lags from now on, for `lasting`.
async fn window(lags: &Lags, lasting: Duration) -> Vec<Duration> {
    timer::pause(200).await;
    lags.borrow_mut().clear();
    timer::pause_for(lasting).await;
    std::mem::take(&mut *lags.borrow_mut())
}

/// Appends `lags` to the file `path` as `TAG NANOS` lines.
fn append(path: &Path, tag: &str, lags: &[Duration]) {
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("lags file");
    for lag in lags {
        writeln!(out, "{tag} {}", lag.as_nanos()).expect("write");
    }
}

fn upload(dir: &Path, endpoint: &str, url: &str, lags_file: Option<&Path>) {
    let baseline_first = url.ends_with(['0', '2', '4', '6', '8']);
    let data = dir.join("data");
    // Every archive goes again: no marks from an earlier round.
    let _ = std::fs::remove_dir_all(data.join("Archives").join(MARKS_DIR));
    let url = RemoteUrl::parse(url).expect("s3://bucket/prefix");
    let remote = Remote {
        endpoint: Some(endpoint.to_owned()),
        allow_http: true,
        ..Remote::new(url.clone())
    };
    let store = Store::open(&remote).expect("client");
    let plan = Plan {
        remote: Some(url),
        ..plan(&data)
    };
    let archives: Vec<PathBuf> = Period::ALL
        .iter()
        .flat_map(|p| rollup::archives(&plan, *p).expect("archives"))
        .map(|(_, path)| path)
        .collect();
    let count = archives.len();
    let bytes: u64 = archives
        .iter()
        .map(|path| std::fs::metadata(path).expect("size").len())
        .sum();
    let (took, during, baseline) = on_probed_loop(async move |lags: Lags| {
        let mut baseline = match baseline_first {
            true => window(&lags, Duration::from_secs(1)).await,
            false => Vec::new(),
        };
        // The upload, timed, with the probe's lags while it runs.
        timer::pause(200).await;
        lags.borrow_mut().clear();
        let began = tokio::time::Instant::now();
        let uploader = Uploader::start(plan, store, remote.retry, Clock::System, Box::new(|| {}))
            .expect("uploader");
        loop {
            let status = uploader.status();
            if status.uploaded as usize >= count && status.queue == 0 {
                break;
            }
            assert!(status.failing == 0, "upload failing: {status}");
            timer::pause(1).await;
        }
        let took = began.elapsed();
        let during = std::mem::take(&mut *lags.borrow_mut());
        let _ = uploader.stop(Duration::from_secs(10)).await;
        if !baseline_first {
            baseline = window(&lags, took.max(Duration::from_secs(1))).await;
        }
        (took, during, baseline)
    });
    if let Some(path) = lags_file {
        append(path, "upload", &during);
        append(path, "baseline", &baseline);
    }
    println!(
        "ours: {count} archives, {bytes} bytes in {:.3} s = {:.1} MB/s; lag without upload {}; \
         during upload {}",
        took.as_secs_f64(),
        bytes as f64 / 1e6 / took.as_secs_f64(),
        summary(baseline),
        summary(during)
    );
}

/// `watch`: the loop and its probe for `seconds`, the lags appended to `lags_file` as `tag`.
fn watch(seconds: f64, lags_file: &Path, tag: &str) {
    let lags =
        on_probed_loop(async |lags: Lags| window(&lags, Duration::from_secs_f64(seconds)).await);
    append(lags_file, tag, &lags);
    println!("{tag}: lag {}", summary(lags));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["prepare", dir] => prepare(&PathBuf::from(dir)),
        ["upload", dir, endpoint, url] => upload(&PathBuf::from(dir), endpoint, url, None),
        ["upload", dir, endpoint, url, lags] => {
            upload(&PathBuf::from(dir), endpoint, url, Some(Path::new(lags)))
        }
        ["watch", seconds, lags, tag] => {
            watch(seconds.parse().expect("seconds"), Path::new(lags), tag)
        }
        _ => {
            eprintln!(
                "usage: offsite_upload prepare DIR | upload DIR ENDPOINT s3://BUCKET/PREFIX [LAGS] \
                 | watch SECONDS LAGS TAG"
            );
            std::process::exit(2);
        }
    }
}
