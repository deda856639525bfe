//! Archive rollups killed with SIGKILL at random moments, ten times over: the next start
//! completes the job, no partial archive ever carries a final name, no backup is lost.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use shardloop::config::Compression;
use shardloop::persist::archive::rollup::{self, Period, Plan};
use shardloop::persist::archive::{Format, format};
use shardloop::persist::{self, Layout, Snapshot};
use shardloop::world;

mod common;

const ROUNDS: u64 = 10;
/// Hours of backups: more than the 24 hourly archives kept, across two or three days.
const HOURS: i64 = 30;

/// The one wall-clock instant of the scenario: the backups are dated before it and the shard's
/// clock starts at it (`--clock-start`), so a run that crosses an hour, a UTC midnight or a
/// month sees the same periods as any other. Half past the hour: the few seconds the shard
/// runs stay inside it.
const NOW: &str = "2026-11-30T12:30:00Z";

fn shard(dir: &Path) -> Command {
    let mut cmd = common::binary::shardloop(dir, (40_000, 6_000));
    cmd.args(["--clock-start", NOW])
        .env("SHARD_NETWORK__LISTEN", "[]")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Starts the shard and returns it with a receiver of its log lines, once it is ready.
// The child is returned to the caller, who waits for it; clippy cannot see that.
#[allow(clippy::zombie_processes)]
fn start(dir: &Path, stdin: Stdio) -> (Child, mpsc::Receiver<String>) {
    let mut child = shard(dir).stdin(stdin).spawn().unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the shard became ready");
        assert!(
            !line.contains("generated the world"),
            "it must load the save: {line}"
        );
        if line.contains("shard ready") {
            return (child, rx);
        }
    }
}

/// A save in `Saves/` and a complete backup for each of the last `HOURS` hours (UTC).
fn history(data: &Path, now: Timestamp) -> Vec<(Timestamp, PathBuf)> {
    let layout = Layout::new(data, data.join("Saves"));
    let world = world::generate(world::DEFAULT_SEED, 40_000, 6_000);
    persist::save::write(&layout, Snapshot::take(&world, now, |_| true), 1).unwrap();
    let mut made = Vec::new();
    for h in 1..=HOURS {
        let at = now - SignedDuration::from_hours(h);
        let name = at.strftime("%Y-%m-%d-%H-%M-%S").to_string();
        let dir = layout.backups.join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(&layout.saves).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
        std::fs::write(dir.join(persist::layout::BACKUP_MARKER), "").unwrap();
        made.push((at, dir));
    }
    made
}

fn plan(data: &Path) -> Plan {
    Plan {
        dir: data.join("Archives"),
        format: Format::from(Compression::Zstd),
        level: 3,
        zone: TimeZone::UTC,
        retention: [24, 30, 12],
        keep_backups: 2,
        max_age: None,
        limits: Default::default(),
        remote: None,
    }
}

/// Every archive with a final name reads back whole and holds a save's four files.
fn check_archives(plan: &Plan) -> usize {
    let mut count = 0;
    for period in Period::ALL {
        for (_, path) in rollup::archives(plan, period).unwrap() {
            let entries =
                format::list(&path, Format::TarZst, Default::default()).unwrap_or_else(|e| {
                    panic!("{} has a final name but is broken: {e}", path.display())
                });
            let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
            assert_eq!(
                names,
                ["manifest.toml", "items.bin", "mobiles.bin", "spawners.bin"],
                "{}",
                path.display()
            );
            count += 1;
        }
    }
    count
}

/// Every backup that is gone was the newest of no period still owed an archive.
fn check_no_backup_lost(plan: &Plan, made: &[(Timestamp, PathBuf)], now: Timestamp) {
    for period in Period::ALL {
        let mut newest: BTreeMap<String, &PathBuf> = BTreeMap::new();
        for (at, dir) in made.iter().rev() {
            newest.insert(period.key(*at, &plan.zone), dir);
        }
        let current = period.key(now, &plan.zone);
        let kept: Vec<_> = newest
            .keys()
            .rev()
            .filter(|k| **k != current)
            .take(24)
            .collect();
        for (key, dir) in &newest {
            let archived = Format::ALL.iter().any(|f| {
                plan.dir
                    .join(period.dir_name())
                    .join(format!("{key}{}", f.extension()))
                    .is_file()
            });
            if kept.contains(&key) && !archived {
                assert!(
                    dir.join("manifest.toml").is_file(),
                    "{} was deleted before the {period} archive {key} existed",
                    dir.display()
                );
            }
        }
    }
}

#[test]
fn killed_during_rollups_ten_times_the_next_start_finishes_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let now: Timestamp = NOW.parse().unwrap();
    let made = history(&data, now);
    let plan = plan(&data);
    let mut rng = 0x5EED_u64;
    let mut mid_run = 0;
    for round in 0..ROUNDS {
        let (mut child, _log) = start(dir.path(), Stdio::null());
        // SplitMix64: delays spread over the ~1 s the startup rollup takes.
        rng = rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        std::thread::sleep(Duration::from_millis((z ^ (z >> 31)) % (300 + 100 * round)));
        child.kill().unwrap();
        child.wait().unwrap();
        let hourly = data.join("Archives/Hourly");
        if std::fs::read_dir(&hourly).is_ok_and(|mut d| {
            d.any(|e| {
                e.unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".tmp-")
            })
        }) {
            mid_run += 1;
        }
        check_archives(&plan);
        check_no_backup_lost(&plan, &made, now);
    }
    // One last start, stopped cleanly: shutdown waits for the rollup to finish.
    let (mut child, _log) = start(dir.path(), Stdio::piped());
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "shutdown").unwrap();
    }
    let status = common::deadline::output_within(child, Duration::from_secs(60)).status;
    assert!(status.success(), "{status}");
    let layout = Layout::new(&data, data.join("Saves"));
    let after = rollup::run(&layout, &plan, now).unwrap();
    assert!(
        after.written.is_empty(),
        "the shard left archives to write: {after:?}"
    );
    let archives = check_archives(&plan);
    check_no_backup_lost(&plan, &made, now);
    assert!(
        archives >= 24,
        "24 hourly archives and the daily ones: {archives}"
    );
    println!("{mid_run} of {ROUNDS} kills left a half-written archive behind");
    assert!(
        mid_run >= 1,
        "no kill landed in the middle of writing an archive: nothing interrupted was checked"
    );
}
