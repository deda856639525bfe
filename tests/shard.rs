//! The shard wiring, as a library: console commands answered from the live world, the two
//! ways to stop, shutdown hooks, a headless console, and a data directory that cannot exist.

use std::io::{Cursor, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardloop::config::Config;
use shardloop::shard::{self, Console, ShardError, StopReason};

/// A small world (fast to generate) whose data directory is `dir`; no startup probe, so the
/// tests never sleep on the real clock for it.
fn small_config(dir: &Path) -> Config {
    let mut config = Config::default();
    config.server.data_dir = dir.join("data");
    config.server.probe_host = false;
    config.world.generate.items = 3_000;
    config.world.generate.mobiles = 400;
    // Any free port: tests run side by side, and 2593 may be taken.
    config.network.listen = vec!["127.0.0.1:0".parse().unwrap()];
    config
}

/// A console output the test can read.
#[derive(Clone, Default)]
struct Screen(Arc<Mutex<Vec<u8>>>);

impl Write for Screen {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Screen {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn console_commands_see_the_world_and_shutdown_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config(dir.path());
    let screen = Screen::default();
    let input = "help\nstatus\ndumptimers\nloopstats\nteleport\nshutdown\n";
    let console = Console::new(Cursor::new(input), screen.clone());

    let stopped = shard::run(&config, console, std::future::pending())
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
        "live timers in",
        "src/world/game.rs",
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

    let stopped = shard::run(&config, Console::none(), stop)
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

    let stopped = shard::run(&config, console, stop).await.expect("runs");

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

    let err = shard::run(&config, Console::none(), std::future::pending())
        .await
        .expect_err("cannot start");

    assert!(matches!(err, ShardError::DataDir { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("not-a-dir/data"), "{message}");
    assert!(message.contains("--data-dir"), "{message}");
}
