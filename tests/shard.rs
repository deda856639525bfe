//! The shard wiring, as a library: console commands answered from the live world, the two
//! ways to stop, shutdown hooks, a headless console, and a data directory that cannot exist.

use std::io::Cursor;
use std::path::Path;
use std::time::Duration;

use shardloop::config::Config;
use shardloop::shard::{self, Console, ShardError, StopReason};

mod common;
use common::capture::Capture as Screen;
use common::client::{connect, recv, send};
use common::deadline::within;

/// A small world (fast to generate) whose data directory is `dir`; no startup probe, so the
/// tests never sleep on the real clock for it.
fn small_config(dir: &Path) -> Config {
    let mut config = Config::default();
    config.server.data_dir = dir.join("data");
    config.server.probe_host = false;
    config.world.generate.items = 3_000;
    config.world.generate.mobiles = 400;
    // Any free port: tests run side by side, and 2593 may be taken. A test that connects
    // reads the bound port from the console's `status`.
    config.network.listen = vec!["127.0.0.1:0".parse().unwrap()];
    // Autosave follows the wall clock (on the hour by default): a test that does not test it
    // must not meet one because it ran at 14:59.
    config.autosave.enabled = false;
    config
}

/// Longest a shard under test may run on the real clock before the test fails.
const REAL_TIME_LIMIT: Duration = Duration::from_secs(120);
/// The same on the paused clock: game time, which a stuck shard reaches in moments.
const GAME_TIME_LIMIT: Duration = Duration::from_secs(3600);

/// The demo shard's [`Shard::run`](shard::Shard::run), failed after `limit` of tokio's clock instead of hanging.
async fn run(
    config: &Config,
    console: Console,
    stop: impl std::future::Future<Output = ()>,
    limit: Duration,
) -> Result<shard::Stopped, ShardError> {
    let shard = common::demo::shard(config);
    within(limit, "the shard", shard.run(console, stop)).await
}

#[tokio::test]
async fn console_commands_see_the_world_and_shutdown_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(dir.path());
    let screen = Screen::default();
    let input = "help\nstatus\ndumptimers\nloopstats\nteleport\nshutdown\n";
    let console = Console::new(Cursor::new(input), screen.clone());

    let stopped = run(&config, console, std::future::pending(), REAL_TIME_LIMIT)
        .await
        .expect("the shard runs");

    assert_eq!(stopped.reason, StopReason::Console);
    assert_eq!(stopped.stats.panics, 0);
    assert!(config.server.data_dir.is_dir(), "data dir created");
    // Every answer, including the one to `shutdown`, is written before run returns.
    let text = screen.text();
    for expected in [
        "commands:",
        "verdict   healthy",
        "world     3000 items, 400 mobiles",
        "listening 127.0.0.1:",
        "live timers in",
        "src/demo/decay.rs",
        "fired ticks",
        "unknown command 'teleport'",
        "shutting down",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_stop_future_ends_the_shard_after_game_time_has_passed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config(dir.path());
    config.server.loop_stats_interval = Duration::from_secs(30);
    let stop = tokio::time::sleep(Duration::from_secs(600));

    let stopped = run(&config, Console::none(), stop, GAME_TIME_LIMIT)
        .await
        .expect("the shard runs");

    assert_eq!(stopped.reason, StopReason::Requested);
    // Ten game minutes: every spawner (1–10 minute cadences) has fired at least once.
    assert!(stopped.stats.ticks_fired >= 10, "{:?}", stopped.stats);
    assert_eq!(stopped.stats.late_ticks, 0, "{:?}", stopped.stats);
    assert_eq!(stopped.stats.panics, 0);
    assert!(stopped.uptime >= Duration::from_secs(600), "{stopped:?}");
}

#[tokio::test(start_paused = true)]
async fn a_closed_console_input_is_a_headless_shard() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(dir.path());
    let screen = Screen::default();
    let console = Console::new(std::io::empty(), screen.clone());
    let stop = tokio::time::sleep(Duration::from_secs(5));

    let stopped = run(&config, console, stop, GAME_TIME_LIMIT)
        .await
        .expect("runs");

    assert_eq!(stopped.reason, StopReason::Requested);
    assert_eq!(screen.text(), "", "nothing to answer");
}

#[tokio::test]
async fn a_data_dir_that_cannot_be_created_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let mut config = small_config(dir.path());
    config.server.data_dir = file.join("data");

    let err = run(
        &config,
        Console::none(),
        std::future::pending(),
        REAL_TIME_LIMIT,
    )
    .await
    .expect_err("cannot start");

    assert!(matches!(err, ShardError::DataDir { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("not-a-dir/data"), "{message}");
    assert!(message.contains("--data-dir"), "{message}");
}

#[tokio::test]
async fn save_commands_change_the_schedule_and_the_cadence_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_config(dir.path());
    // Autosave on, on a pinned wall clock: the next 30-minute or hourly save is 20 minutes
    // or more away, whenever the test runs.
    config.autosave.enabled = true;
    config.time.clock_start = Some("2026-06-15T00:10:00Z".parse().unwrap());
    let screen = Screen::default();
    let input = "savefrequency 30m 1m\nsavefrequency 1m 5m\nautosave off\nsave\nshutdown\n";
    let console = Console::new(Cursor::new(input), screen.clone());
    let stopped = run(&config, console, std::future::pending(), REAL_TIME_LIMIT)
        .await
        .expect("the shard runs");
    stopped.final_save.expect("the final save");
    let text = screen.text();
    assert!(
        text.contains("autosave every 30m (players warned 1m before)"),
        "{text}"
    );
    assert!(text.contains("warning 5m must be shorter"), "{text}");
    assert!(text.contains("autosave off until restart"), "{text}");
    let stored = config.server.data_dir.join("autosave.toml");
    assert!(text.contains(&stored.display().to_string()), "{text}");
    assert!(config.save_path().join("manifest.toml").is_file());

    // The next start takes the stored cadence over the configuration's 1h / 1m.
    let screen = Screen::default();
    let console = Console::new(Cursor::new("autosave\nstatus\nshutdown\n"), screen.clone());
    run(&config, console, std::future::pending(), REAL_TIME_LIMIT)
        .await
        .expect("the shard runs again");
    let text = screen.text();
    assert!(
        text.contains("autosave every 30m (players warned 1m before), next at"),
        "{text}"
    );
    assert!(text.contains("3000 items"), "{text}");
}

/// Console input fed line by line from the test (a `Cursor` would run every command at once).
struct Lines(std::sync::mpsc::Receiver<String>, Vec<u8>);

impl std::io::Read for Lines {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.1.is_empty() {
            match self.0.recv() {
                Ok(line) => self.1 = format!("{line}\n").into_bytes(),
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.1.len());
        buf[..n].copy_from_slice(&self.1[..n]);
        self.1.drain(..n);
        Ok(n)
    }
}

#[tokio::test]
async fn players_hear_a_save_start_and_finish_as_system_messages() {
    use common::demo::packets::{client, server};
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(dir.path());
    let (commands, lines) = std::sync::mpsc::channel();
    let screen = Screen::default();
    let console = Console::new(
        std::io::BufReader::new(Lines(lines, Vec::new())),
        screen.clone(),
    );
    // However the player's thread ends (a failed assertion included), the shard stops, and
    // joining the thread below then reports the failure.
    let (ended, player_ended) = tokio::sync::oneshot::channel::<()>();
    let player = std::thread::spawn(move || {
        let _ended = ended;
        commands.send("status".to_owned()).unwrap();
        let addr = screen.listening_address(Duration::from_secs(30));
        let mut stream = connect(addr);
        // Generous: the save the player waits to hear about runs on a busy machine.
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        send(&mut stream, client::LOGIN, b"Listener");
        assert_eq!(recv(&mut stream).0, server::LOGIN_OK);
        commands.send("save".to_owned()).unwrap();
        let mut heard = Vec::new();
        while heard.len() < 2 {
            let (id, payload) = recv(&mut stream);
            if id == server::SPEECH && payload[..4] == [0, 0, 0, 0] {
                heard.push(String::from_utf8(payload[4..].to_vec()).unwrap());
            }
        }
        commands.send("shutdown".to_owned()).unwrap();
        heard
    });
    let stop = async {
        let _ = player_ended.await;
    };
    let stopped = run(&config, console, stop, REAL_TIME_LIMIT)
        .await
        .expect("the shard runs");
    let heard = player.join().expect("the player thread");
    assert_eq!(heard[0], "The world is saving, please wait.");
    assert!(
        heard[1].starts_with("World save completed in "),
        "{heard:?}"
    );
    stopped.final_save.expect("the final save");
}

#[tokio::test]
async fn archive_console_commands_answer() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(dir.path());
    let screen = Screen::default();
    let input = "archive\narchivestatus\nprunearchives\nshutdown\n";
    let console = Console::new(Cursor::new(input), screen.clone());
    run(&config, console, std::future::pending(), REAL_TIME_LIMIT)
        .await
        .expect("the shard runs");
    let text = screen.text();
    // The startup rollup may still be running when `archive` arrives: either answer is right.
    assert!(
        text.contains("archive rollup started") || text.contains("a rollup is running"),
        "{text}"
    );
    assert!(
        text.contains("hourly") && text.contains("(keeping 24)"),
        "{text}"
    );
    assert!(text.contains("backups  0 in"), "{text}");
    assert!(
        text.contains("pruning archives") || text.contains("it prunes too"),
        "{text}"
    );

    let mut off = small_config(dir.path());
    off.archive.enabled = false;
    let screen = Screen::default();
    let console = Console::new(Cursor::new("archivestatus\nshutdown\n"), screen.clone());
    run(&off, console, std::future::pending(), REAL_TIME_LIMIT)
        .await
        .expect("the shard runs");
    assert!(
        screen.text().contains("archives are off"),
        "{}",
        screen.text()
    );
}

/// Waits (blocking, up to `patience`) until the screen shows a line containing `needle`.
fn wait_for(screen: &Screen, needle: &str, patience: Duration) -> String {
    let deadline = std::time::Instant::now() + patience;
    loop {
        let text = screen.text();
        if let Some(line) = text.lines().find(|l| l.contains(needle)) {
            return line.to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {needle:?} on the screen:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
#[cfg_attr(
    not(feature = "loop-profiling"),
    ignore = "the loop profile is compiled out of this build (--no-default-features)"
)]
async fn loopstats_shows_the_last_minute_and_csv_writes_the_history_and_its_chart() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(dir.path());
    let csv = dir.path().join("episode.csv");
    let (commands, lines) = std::sync::mpsc::channel();
    let screen = Screen::default();
    let console = Console::new(
        std::io::BufReader::new(Lines(lines, Vec::new())),
        screen.clone(),
    );
    let (ended, operator_ended) = tokio::sync::oneshot::channel::<()>();
    let seen = screen.clone();
    let path = csv.clone();
    let operator = std::thread::spawn(move || {
        let _ended = ended;
        // The profile closes its first second a second after the loop starts.
        std::thread::sleep(Duration::from_millis(2500));
        commands.send("loopstats".to_owned()).unwrap();
        wait_for(&seen, "since start:", Duration::from_secs(30));
        commands
            .send("loopstats csv episode.svg".to_owned())
            .unwrap();
        wait_for(&seen, "does not end in .csv", Duration::from_secs(30));
        commands
            .send(format!("loopstats csv {}", path.display()))
            .unwrap();
        let wrote = wait_for(&seen, "loopstats csv: wrote", Duration::from_secs(30));
        // The file exists now: a second write to it is refused, not overwritten.
        commands
            .send(format!("loopstats csv {}", path.display()))
            .unwrap();
        wait_for(&seen, "error: loopstats csv:", Duration::from_secs(30));
        commands.send("shutdown".to_owned()).unwrap();
        wrote
    });
    let stop = async {
        let _ = operator_ended.await;
    };
    run(&config, console, stop, REAL_TIME_LIMIT)
        .await
        .expect("the shard runs");
    let wrote = operator.join().expect("the operator thread");
    let text = screen.text();
    for expected in [
        "last ",
        "timers",
        "sleep",
        "stolen",
        "worst timer callback",
        "since start:",
        "fired ticks",
        "copied ",
    ] {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
    let rows: usize = wrote
        .split_whitespace()
        .nth(3)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a row count in {wrote:?}"));
    assert!(rows >= 2, "{wrote}");
    let file = std::fs::File::open(&csv).expect("the CSV");
    let seconds = shardloop::runtime::history::read_csv(file).expect("read_csv accepts it");
    assert_eq!(seconds.len(), rows);
    let svg = std::fs::read_to_string(csv.with_extension("svg")).expect("the chart beside it");
    assert!(svg.contains("<svg"), "{svg:.200}");
    assert!(
        text.contains("File exists") || text.contains("exists"),
        "{text}"
    );
}

/// `savefrequency` writes its file off the loop (issue 32): the answer comes at once, a file
/// that cannot be written is said afterwards (the cadence still applies), and of several quick
/// changes the last one is what the file keeps.
#[tokio::test]
async fn savefrequency_writes_off_the_loop_says_when_it_cannot_and_the_last_change_wins() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(dir.path());
    let stored = config.server.data_dir.join("autosave.toml");
    std::fs::create_dir_all(&stored).unwrap(); // a directory where the file goes: unwritable
    let (commands, lines) = std::sync::mpsc::channel();
    let screen = Screen::default();
    let console = Console::new(
        std::io::BufReader::new(Lines(lines, Vec::new())),
        screen.clone(),
    );
    let (ended, operator_ended) = tokio::sync::oneshot::channel::<()>();
    let (seen, path) = (screen.clone(), stored.clone());
    let operator = std::thread::spawn(move || {
        let _ended = ended;
        commands.send("savefrequency 30m 1m".to_owned()).unwrap();
        wait_for(&seen, "NOT kept across restarts", Duration::from_secs(30));
        std::fs::remove_dir(&path).unwrap();
        for every in ["20m", "40m", "50m", "45m"] {
            commands.send(format!("savefrequency {every} 1m")).unwrap();
        }
        commands.send("autosave".to_owned()).unwrap();
        wait_for(&seen, "autosave every 45m", Duration::from_secs(30));
        commands.send("shutdown".to_owned()).unwrap();
    });
    let stop = async {
        let _ = operator_ended.await;
    };
    run(&config, console, stop, REAL_TIME_LIMIT)
        .await
        .expect("the shard runs");
    operator.join().expect("the operator thread");
    let text = screen.text();
    assert!(
        text.contains("autosave every 30m (players warned 1m before)"),
        "{text}"
    );
    // The writes end before the next start reads the file; give the pool a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&stored).is_ok_and(|t| t.contains("45m")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the last cadence never reached the file"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let kept = std::fs::read_to_string(&stored).unwrap();
    assert!(
        kept.contains("\"45m\""),
        "no older write lands after it: {kept}"
    );
}

/// `archivestatus` reads no disk on the loop (issue 32): it answers from what the last run
/// found, so a backup deleted behind the shard's back still shows until the next run looks.
#[tokio::test]
async fn archivestatus_answers_from_the_last_run_not_from_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(dir.path());
    let backups = config.server.data_dir.join("Backups/Automatic");
    let (commands, lines) = std::sync::mpsc::channel();
    let screen = Screen::default();
    let console = Console::new(
        std::io::BufReader::new(Lines(lines, Vec::new())),
        screen.clone(),
    );
    let (ended, operator_ended) = tokio::sync::oneshot::channel::<()>();
    let seen = screen.clone();
    let operator = std::thread::spawn(move || {
        let _ended = ended;
        let status_until = |needle: &str| {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                let before = seen.text().len();
                commands.send("archivestatus".to_owned()).unwrap();
                std::thread::sleep(Duration::from_millis(100));
                let answer = seen.text()[before..].to_owned();
                if answer.contains(needle) {
                    return answer;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "no {needle:?}: {answer}"
                );
            }
        };
        // Two saves leave one backup; the rollup after the second counts it.
        commands.send("save".to_owned()).unwrap();
        status_until("last run");
        commands.send("save".to_owned()).unwrap();
        status_until("backups  1 in");
        for entry in std::fs::read_dir(&backups).unwrap() {
            std::fs::remove_dir_all(entry.unwrap().path()).unwrap();
        }
        let stale = status_until("backups");
        assert!(
            stale.contains("backups  1 in"),
            "not read again on the loop: {stale}"
        );
        commands.send("prunearchives".to_owned()).unwrap();
        status_until("backups  0 in");
        commands.send("shutdown".to_owned()).unwrap();
    });
    let stop = async {
        let _ = operator_ended.await;
    };
    run(&config, console, stop, REAL_TIME_LIMIT)
        .await
        .expect("the shard runs");
    operator.join().expect("the operator thread");
}
