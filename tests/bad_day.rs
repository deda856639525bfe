//! An operator's bad day (issue 32): a data directory whose save went missing while its
//! backups are still there is refused, not taken for a new world; a loop stuck in a callback
//! is named by the watchdog, with the callback's line, and said to be back when it returns;
//! an idle loop, however long it sleeps, never is.

use std::path::Path;
use std::process::Output;
use std::sync::OnceLock;
use std::time::Duration;

use shardloop::persist::{self, Layout, Snapshot};
use shardloop::runtime::Watchdog;
use shardloop::{EventLoop, LoopContext, timer, world};

mod common;
use common::binary::{shardloop, spawn_logged};
use common::capture::Capture;
use common::deadline::{output_within, run_within};

const PATIENCE: Duration = Duration::from_secs(60);

/// A data directory whose only save is a backup: `Saves/` moved into `Backups/Automatic/`,
/// as a save ends up there once the next one replaces it.
fn only_a_backup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world::generate(21, 300, 40);
    let created = "2026-12-03T10:00:00Z".parse().unwrap();
    persist::save::write(&layout, Snapshot::take(&world, created, |_| true), 2).unwrap();
    std::fs::create_dir_all(&layout.backups).unwrap();
    std::fs::rename(&layout.saves, layout.backups.join("2026-12-03-10-00-00")).unwrap();
    layout.recover().unwrap(); // marks the backup complete, as a finished swap leaves it
    dir
}

fn start(data_dir: &Path, flags: &[&str]) -> Output {
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = shardloop(cwd.path(), (100, 10));
    cmd.arg("--data-dir").arg(data_dir).args(flags);
    run_within(&mut cmd, PATIENCE)
}

#[test]
fn a_missing_save_beside_its_backups_is_refused_not_taken_for_a_new_world() {
    let dir = only_a_backup();
    let before = common::tree::data(dir.path());
    let out = start(dir.path(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "refused with exit 2: {stderr}");
    for says in [
        "no save in",
        "1 backup(s) and 0 archive(s)",
        "2026-12-03-10-00-00",
        "server.data_dir",
        "--new-world",
        "Nothing was changed or deleted",
    ] {
        assert!(stderr.contains(says), "{says:?} in: {stderr}");
    }
    let after = common::tree::data(dir.path());
    assert!(
        after == before,
        "nothing on disk changed: {before:#?} then {after:#?}"
    );
    assert!(!dir.path().join("Saves").exists(), "no new world was saved");
}

#[test]
fn new_world_starts_one_anyway_and_an_empty_directory_starts_one_as_before() {
    let with_backup = only_a_backup();
    let empty = tempfile::tempdir().unwrap();
    for (dir, flags) in [
        (with_backup.path(), &["--new-world"][..]),
        (empty.path(), &[]),
    ] {
        let cwd = tempfile::tempdir().unwrap();
        let mut cmd = shardloop(cwd.path(), (100, 10));
        cmd.arg("--data-dir").arg(dir).args(flags);
        let (child, lines) = spawn_logged(&mut cmd);
        let ready = lines
            .iter()
            .take_while(|line| !line.contains("shard ready"))
            .count();
        // SAFETY: `kill` with a child's pid and SIGTERM touches no memory of this process.
        let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0);
        let out = output_within(child, PATIENCE);
        assert!(
            out.status.success(),
            "{flags:?} after {ready} lines: {out:?}"
        );
        assert!(dir.join("Saves").is_dir(), "the new world's final save");
    }
    let backups = Layout::new(with_backup.path(), with_backup.path().join("Saves")).backups;
    assert!(
        backups.join("2026-12-03-10-00-00").is_dir(),
        "the old backup is still there"
    );
}

/// Every log line of this test binary (the watchdog logs from a thread of its own, so the
/// subscriber must be the global one).
fn logs() -> &'static Capture {
    static LOGS: OnceLock<Capture> = OnceLock::new();
    LOGS.get_or_init(|| {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(capture.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        capture
    })
}

/// Runs `body` on a fresh loop (real time) with a watchdog of `limit` over it.
fn with_watchdog(limit: Duration, idle_wait: Duration, body: impl AsyncFnOnce()) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut event_loop = EventLoop::builder().idle_wait(idle_wait).build();
        let context = event_loop.context();
        let watchdog = Watchdog::start(context.clone(), limit).unwrap();
        event_loop.run_until(body()).await;
        drop(watchdog);
        context.watchdog_stalls()
    })
}

#[test]
fn a_callback_blocking_3s_under_a_1s_watchdog_is_named_by_its_line_then_said_to_be_back() {
    let logs = logs();
    let started = std::sync::Arc::new(OnceLock::new());
    let began = started.clone();
    let line = line!() + 3;
    let stalls = with_watchdog(Duration::from_secs(1), Duration::from_secs(1), async || {
        let began = began.clone();
        timer::after(Duration::from_millis(20)).start(move || {
            let _ = began.set(jiff::Timestamp::now());
            std::thread::sleep(Duration::from_secs(3));
        });
        timer::pause(3_200).await;
    });
    let text = logs.text();
    let stuck: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("the loop is stuck"))
        .collect();
    assert_eq!(
        stuck.len(),
        1,
        "one line for a 3 s stall (the next is 10 s on): {text}"
    );
    let site = format!("a timer callback created at tests/bad_day.rs:{line}:");
    assert!(stuck[0].contains(&site), "{site:?} in {}", stuck[0]);
    assert!(stuck[0].contains("ERROR"), "{}", stuck[0]);
    assert!(stuck[0].contains("in its Timers phase"), "{}", stuck[0]);
    assert!(text.contains("the loop is back"), "{text}");
    assert_eq!(stalls, 1, "counted once");
    // The figure docs/debugging.md quotes: how long after the limit the line came.
    let logged: jiff::Timestamp = stuck[0].split_whitespace().next().unwrap().parse().unwrap();
    let blocked = logged.duration_since(*started.get().unwrap());
    eprintln!("{}", stuck[0]);
    eprintln!("watchdog: the stuck line came {blocked:?} after the callback started (limit 1 s)");
    assert!(
        blocked >= jiff::SignedDuration::from_secs(1),
        "never before the limit"
    );
}

#[test]
fn an_idle_loop_sleeping_longer_than_the_watchdog_is_never_stuck() {
    // Parked for 2.5 s at a stretch (idle_wait 5 s, nothing due) under a 300 ms watchdog.
    let stalls = with_watchdog(
        Duration::from_millis(300),
        Duration::from_secs(5),
        async || {
            let context = LoopContext::current();
            let (tx, rx) = tokio::sync::oneshot::channel();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2_500));
                let _ = context.post(move || {
                    let _ = tx.send(());
                });
            });
            let _ = rx.await;
        },
    );
    assert_eq!(stalls, 0, "parked is not stuck");
}
