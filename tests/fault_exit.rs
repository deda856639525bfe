//! The binary on a fault: a panic that escapes a loop phase (injected with the hidden
//! `--fault-inject-phase-panic` flag) ends in an orderly stop with a final save and exit code
//! 70, and the log names the panic and its site.
//!
//! Bounds are generous (a minute): these tests check behaviour, not speed.

use std::path::Path;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::Duration;

use shardloop::persist::Manifest;
use shardloop::shard::ShardError;

mod common;

const PATIENCE: Duration = Duration::from_secs(60);

fn shardloop(dir: &Path, clock_start: &str) -> Command {
    let mut cmd = common::binary::shardloop(dir, (2_000, 300));
    cmd.args(["--clock-start", clock_start]);
    cmd
}

/// Starts `cmd` with its log (stderr) read line by line on a thread.
fn start(mut cmd: Command) -> (Child, mpsc::Receiver<String>) {
    common::binary::spawn_logged(&mut cmd)
}

/// Reads log lines into `seen` until one contains `what`.
fn wait_for(lines: &mpsc::Receiver<String>, seen: &mut Vec<String>, what: &str) {
    while !seen.iter().any(|l| l.contains(what)) {
        match lines.recv_timeout(PATIENCE) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("no {what:?} in the log: {seen:#?}"),
        }
    }
}

/// Waits for the exit (killing the child after [`PATIENCE`]); the rest of the log joins `seen`.
fn finish(child: Child, lines: &mpsc::Receiver<String>, seen: &mut Vec<String>) -> Option<i32> {
    let status = common::deadline::output_within(child, PATIENCE).status;
    // The reader thread sees EOF once the process is gone.
    seen.extend(lines.iter());
    status.code()
}

fn manifest(dir: &Path) -> Manifest {
    let saves = dir.join("data/Saves");
    Manifest::read(&saves).unwrap_or_else(|e| panic!("{saves:?}: {e}"))
}

#[test]
fn a_phase_panic_exits_70_after_a_final_save_and_logs_the_panic_and_its_site() {
    let dir = tempfile::tempdir().unwrap();

    // A first run leaves a save, taken at its pinned clock.
    let (child, lines) = start(shardloop(dir.path(), "2030-01-01T00:00:00Z"));
    let mut seen = Vec::new();
    wait_for(&lines, &mut seen, "shard ready");
    // SAFETY: kill(2) on the child we spawned, which is still running.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(finish(child, &lines, &mut seen), Some(0), "{seen:#?}");
    let before = manifest(dir.path());

    // The second run, a day later by its clock, loads it; then a phase panics.
    let mut cmd = shardloop(dir.path(), "2030-01-02T00:00:00Z");
    cmd.args(["--fault-inject-phase-panic", "50ms"]);
    let (child, lines) = start(cmd);
    let mut seen = Vec::new();
    let code = finish(child, &lines, &mut seen);
    let log = seen.join("\n");

    assert_eq!(
        code,
        Some(i32::from(ShardError::FAULT_EXIT_CODE)),
        "exit code; log:\n{log}"
    );
    assert_eq!(ShardError::FAULT_EXIT_CODE, 70, "the documented code");
    assert!(log.contains("loaded the world save"), "{log}");
    // The panic, its phase and its site (file:line:column), in the shard's own log line.
    assert!(
        seen.iter().any(|l| l.contains("ERROR")
            && l.contains("a panic escaped the loop's Deltas phase at src/runtime/event_loop.rs:")
            && l.contains("injected fault: a loop phase panics")),
        "{log}"
    );
    assert!(
        log.contains("taking the final save of the world as the panic left it"),
        "{log}"
    );
    assert!(log.contains("the shard stopped on a fault"), "{log}");

    // A new save is in place, taken after the fault by the second run's clock; the first run's
    // save went to Backups/.
    let after = manifest(dir.path());
    assert!(
        after.created > before.created && after.created >= "2030-01-02T00:00:00Z".parse().unwrap(),
        "created {} after {}",
        after.created,
        before.created
    );
    assert_eq!((after.items, after.mobiles), (before.items, before.mobiles));
    for file in ["items.bin", "mobiles.bin", "spawners.bin"] {
        assert!(dir.path().join("data/Saves").join(file).is_file(), "{file}");
    }
    let backups = std::fs::read_dir(dir.path().join("data/Backups"))
        .unwrap()
        .count();
    assert!(backups >= 1, "the replaced save is in Backups/");
}

#[cfg(all(target_os = "linux", feature = "io-uring"))]
#[test]
fn a_dead_io_uring_ring_closes_its_players_and_stops_the_shard_with_a_final_save() {
    use common::client::{closed_by_server, connect, ping, send};
    use common::demo::packets::client;
    use shardloop::config::Config;
    use shardloop::net::BackendKind;
    use shardloop::runtime::Fault;
    use shardloop::shard::Console;

    let Some(()) = common::skip::or_skip(shardloop::net::io_uring_available(), "io_uring") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.server.data_dir = dir.path().join("data");
    config.server.probe_host = false;
    config.server.loop_stats_interval = Duration::ZERO;
    config.world.generate.items = 2_000;
    config.world.generate.mobiles = 300;
    config.network.listen = vec!["127.0.0.1:0".parse().unwrap()];
    config.autosave.enabled = false;
    let screen = common::capture::Capture::default();
    let console = Console::new(std::io::Cursor::new("status\n"), screen.clone());

    // A player thread: connected and answered (so its connection is on the ring), then it
    // pings once more after the ring is made to fail, and waits for the server to close it.
    let (attached, on_ring) = tokio::sync::oneshot::channel::<()>();
    let (injected, ring_failing) = mpsc::channel::<()>();
    let player = std::thread::spawn(move || {
        let mut stream = connect(screen.listening_address(PATIENCE));
        ping(&mut stream, b"before");
        attached.send(()).unwrap();
        ring_failing.recv_timeout(PATIENCE).unwrap();
        send(&mut stream, client::PING, b"after");
        closed_by_server(&mut stream)
    });
    // Runs on the loop thread, where the ring is.
    let stop = async {
        if on_ring.await.is_ok() {
            shardloop::testkit::inject_uring_enter_failure(libc::EBADF);
            injected.send(()).unwrap();
        }
        std::future::pending::<()>().await;
    };
    let ran = BackendKind::IoUring
        .block_on(async {
            common::deadline::within(
                PATIENCE,
                "the shard",
                common::demo::shard(&config).run_with(BackendKind::IoUring, console, stop),
            )
            .await
        })
        .expect("an io_uring runtime");

    assert!(player.join().unwrap(), "the player's connection was closed");
    let e = ran.expect_err("the shard stops on the dead ring");
    assert_eq!(e.exit_code(), ShardError::FAULT_EXIT_CODE);
    let ShardError::Fault { fault, final_save } = &e else {
        panic!("not a fault: {e}");
    };
    assert!(
        matches!(fault, Fault::Reported { message }
            if message.starts_with("io_uring ring failed: io_uring_enter: Bad file descriptor")),
        "{fault:?}"
    );
    let created = final_save.as_ref().expect("the final save");
    assert_eq!(manifest(dir.path()).created, *created);
}
