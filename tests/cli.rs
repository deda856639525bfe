//! The `shardloop` binary as an operator meets it: bad configuration stops it before anything
//! starts, `check-config` explains values, and a running shard answers its console, stops on
//! `shutdown` or SIGTERM with exit code 0, and logs JSON on request.
//!
//! Bounds are generous (tens of seconds): these tests check behaviour, not speed.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(60);

mod common;

/// The binary with a small world (see `common::binary::shardloop`), in `dir`.
fn shardloop(dir: &Path) -> Command {
    common::binary::shardloop(dir, (2_000, 300))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Waits for the child to exit, killing it after [`PATIENCE`].
fn finish(child: Child) -> Output {
    common::deadline::output_within(child, PATIENCE)
}

#[test]
fn a_bad_value_exits_2_naming_key_and_source_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let output = common::deadline::run_within(
        shardloop(dir.path())
            .env("SHARD_SERVER__IDLE_WAIT", "soon")
            .arg("run"),
        PATIENCE,
    );
    assert_eq!(output.status.code(), Some(2));
    let err = text(&output.stderr);
    assert!(err.contains("server.idle_wait"), "{err}");
    assert!(err.contains("SHARD_SERVER__IDLE_WAIT"), "{err}");
    assert!(err.contains("soon"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one message: {err}");
    assert!(!dir.path().join("data").exists(), "nothing started");
}

#[test]
fn a_missing_config_file_named_on_the_command_line_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let output = common::deadline::run_within(
        shardloop(dir.path()).args(["--config", "nowhere.toml"]),
        PATIENCE,
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("nowhere.toml"));
}

#[test]
fn check_config_shows_each_value_and_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let output = common::deadline::run_within(
        shardloop(dir.path())
            .env("SHARD_SERVICE_HOST", "10.0.0.7")
            .args(["check-config", "--idle-wait", "250ms"]),
        PATIENCE,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let out = text(&output.stdout);
    let line = |key: &str| {
        out.lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("{key} missing:\n{out}"))
            .to_owned()
    };
    assert!(line("server.idle_wait = ").contains("--idle-wait"), "{out}");
    assert!(
        line("world.generate.items = ").contains("SHARD_WORLD__GENERATE__ITEMS"),
        "{out}"
    );
    assert!(line("server.tick = ").contains("default"), "{out}");
    assert!(
        line("# ignored 1 SHARD_*").contains("SHARD_SERVICE_HOST"),
        "{out}"
    );
}

#[test]
fn console_commands_then_shutdown_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = shardloop(dir.path())
        // What a Kubernetes Service named `shard` puts in every pod: not configuration.
        .env("SHARD_PORT", "tcp://10.0.0.7:2593")
        .env("SHARD_SERVICE_HOST", "10.0.0.7")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"status\n\xff\nloopstats\nshutdown\n")
        .unwrap();
    let output = finish(child);

    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let out = text(&output.stdout);
    assert!(out.contains("world     2000 items, 300 mobiles"), "{out}");
    assert!(out.contains("not valid UTF-8"), "{out}");
    assert!(out.contains("iterations"), "{out}");
    assert!(out.contains("shutting down"), "{out}");
    let err = text(&output.stderr);
    assert!(err.contains("shard ready"), "{err}");
    // The binary's loop parks in its own epoll on the default backend, console and all.
    let ready = err
        .lines()
        .find(|l| l.contains("shard ready"))
        .unwrap_or("");
    assert!(ready.contains("own_epoll"), "{ready}");
    assert!(err.contains("shard stopped cleanly"), "{err}");
    let ignored = err
        .lines()
        .filter(|l| l.contains("not configuration"))
        .collect::<Vec<_>>();
    assert_eq!(ignored.len(), 1, "one warning: {err}");
    assert!(
        ignored[0].contains("SHARD_PORT, SHARD_SERVICE_HOST"),
        "{err}"
    );
    assert!(
        dir.path().join("data").is_dir(),
        "default --data-dir is ./data"
    );
}

#[test]
fn headless_shard_stops_on_sigterm_with_json_logs() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = shardloop(dir.path());
    cmd.args(["run", "--log-format", "json"]);
    let (child, mut seen, rest) = start_until_ready(cmd);
    // SAFETY: kill(2) on the child we spawned, which is still running.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = finish(child).status;
    // Until the reader thread sees EOF and hangs up.
    seen.extend(rest.iter());

    assert_eq!(status.code(), Some(0), "{seen:#?}");
    assert!(seen.iter().any(|l| l.contains("shard stopped cleanly")));
    for line in &seen {
        assert!(
            line.starts_with('{') && line.ends_with('}'),
            "not a JSON log line: {line}"
        );
    }
}

/// Runs the binary until it logs "shard ready"; returns it, its log lines so far, and the
/// receiver of the rest.
fn start_until_ready(mut cmd: Command) -> (Child, Vec<String>, mpsc::Receiver<String>) {
    let (mut child, lines_rx) = common::binary::spawn_logged(&mut cmd);
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("shard ready")) {
        match lines_rx.recv_timeout(PATIENCE) {
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!("never became ready; logs so far: {seen:#?}");
            }
        }
    }
    (child, seen, lines_rx)
}

#[test]
fn players_play_on_the_binary_with_either_backend() {
    use std::io::Read;
    use std::net::TcpStream;
    for backend in ["epoll", "io_uring"] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = shardloop(dir.path());
        cmd.env("SHARD_NETWORK__BACKEND", backend);
        let (child, mut seen, rest) = start_until_ready(cmd);
        let listening = seen
            .iter()
            .find(|l| l.contains("listening for players"))
            .unwrap_or_else(|| panic!("no listening line: {seen:#?}"))
            .clone();
        let addr = listening
            .split_whitespace()
            .find_map(|w| w.strip_prefix("addr="))
            .expect("addr= in the listening line");
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream.write_all(&[0x73, 0, 5, b'h', b'i']).unwrap();
        let mut echo = [0; 5];
        stream.read_exact(&mut echo).unwrap();
        assert_eq!(&echo, &[0x73, 0, 5, b'h', b'i']);
        stream
            .write_all(&[0x01, 0, 7, b'T', b'e', b's', b't'])
            .unwrap();
        let mut login_ok = [0; 11];
        stream.read_exact(&mut login_ok).unwrap();
        assert_eq!(login_ok[..3], [0x81, 0, 11]);

        // SAFETY: kill(2) on the child we spawned, which is still running.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = finish(child).status;
        // Until the reader thread sees EOF and hangs up.
        seen.extend(rest.iter());
        assert_eq!(status.code(), Some(0), "{seen:#?}");
        let ran = if backend == "io_uring" && shardloop::net::io_uring_available().is_err() {
            "epoll" // refused here: one warning, then epoll
        } else {
            backend
        };
        assert!(listening.contains(&format!("backend={ran}")), "{listening}");
        let logged = |s: &str| seen.iter().any(|l| l.contains(s));
        assert!(logged("logged in"), "{seen:#?}");
        assert!(logged("server shutting down"), "{seen:#?}");
    }
}

#[test]
fn an_address_in_use_stops_the_shard_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let output = common::deadline::run_within(
        shardloop(dir.path())
            .args(["--listen", &addr])
            .stdin(Stdio::null()),
        PATIENCE,
    );
    assert_eq!(output.status.code(), Some(1));
    let err = text(&output.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert!(err.contains("--listen"), "{err}");
}

#[test]
fn a_max_connections_over_the_open_file_limit_stops_the_start_with_exit_2() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = shardloop(dir.path());
    cmd.env("SHARD_NETWORK__MAX_CONNECTIONS", "1000");
    // SAFETY: setrlimit(2) is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 256,
                rlim_max: 256,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let output = common::deadline::run_within(&mut cmd, PATIENCE);
    let err = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(err.contains("network.max_connections = 1000"), "{err}");
    assert!(err.contains("the open-file limit is 256"), "{err}");
    assert!(!dir.path().join("data").exists(), "nothing started: {err}");
}

#[test]
fn probe_host_prints_a_verdict_for_each_primitive() {
    let dir = tempfile::tempdir().unwrap();
    let output = common::deadline::run_within(shardloop(dir.path()).arg("probe-host"), PATIENCE);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let out = text(&output.stdout);
    for probe in [
        "monotonic clock read",
        "wall clock read",
        "1 ms sleep, std",
        "1 ms sleep, tokio",
        "2 ms sleep, std",
        "2 ms sleep, tokio",
        "cross-thread wake",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(probe))
            .unwrap_or_else(|| panic!("no `{probe}` line in:\n{out}"));
        assert!(
            ["normal", "SLOW", "TRAPPING"]
                .iter()
                .any(|g| line.contains(g)),
            "{line}"
        );
    }
    assert!(
        out.lines().any(|l| l.starts_with("verdict: ")),
        "no verdict line in:\n{out}"
    );
}

/// Reads log lines until one contains `what`; panics with the log after [`PATIENCE`].
fn wait_for(lines: &mpsc::Receiver<String>, seen: &mut Vec<String>, what: &str) {
    while !seen.iter().any(|l| l.contains(what)) {
        match lines.recv_timeout(PATIENCE) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("no {what:?} in the log: {seen:#?}"),
        }
    }
}

#[test]
fn a_stop_signal_takes_a_final_save_that_the_next_start_loads() {
    let dir = tempfile::tempdir().unwrap();
    let (child, mut seen, rest) = start_until_ready(shardloop(dir.path()));
    assert!(seen.iter().any(|l| l.contains("generated the world")));
    // SAFETY: kill(2) on the child we spawned, which is still running.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = finish(child).status;
    seen.extend(rest.iter());
    assert_eq!(status.code(), Some(0), "{seen:#?}");
    let saved = seen
        .iter()
        .position(|l| l.contains("world saved"))
        .expect("a final save");
    let stopped = seen
        .iter()
        .position(|l| l.contains("shard stopped cleanly"))
        .unwrap();
    assert!(saved < stopped, "{seen:#?}");

    let (child, seen, _rest) = start_until_ready(shardloop(dir.path()));
    assert!(
        seen.iter().any(|l| l.contains("loaded the world save")),
        "{seen:#?}"
    );
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(finish(child).status.code(), Some(0));
}

#[test]
fn a_second_ctrl_c_exits_at_once_without_the_final_save_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = shardloop(dir.path());
    // A world big enough that its save takes a good fraction of a second: the second
    // signal lands while it is being written.
    cmd.env("SHARD_WORLD__GENERATE__ITEMS", "2000000")
        .env("SHARD_WORLD__GENERATE__MOBILES", "300000");
    let (child, mut seen, rest) = start_until_ready(cmd);
    // SAFETY: kill(2) on the child we spawned, which is still running.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    wait_for(&rest, &mut seen, "taking the final world save");
    // SAFETY: as above; it is still writing its final save.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = finish(child).status;
    seen.extend(rest.iter());
    assert_eq!(status.code(), Some(130), "{seen:#?}");
    assert!(
        seen.iter()
            .any(|l| l.contains("exiting now without the final save")),
        "{seen:#?}"
    );
    assert!(!seen.iter().any(|l| l.contains("world saved")), "{seen:#?}");

    // Nothing half-written is ever loaded: with no save before, the next start generates,
    // and whatever the interrupted save left is cleaned up.
    let (child, seen, _rest) = start_until_ready(shardloop(dir.path()));
    assert!(
        seen.iter().any(|l| l.contains("generated the world")),
        "{seen:#?}"
    );
    let data = dir.path().join("data");
    let leftovers: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = finish(child);
}

#[test]
fn a_corrupt_save_stops_the_start_with_exit_2_naming_the_file_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The log receiver is dropped at once, so the shard's stderr closes under it: its
    // shutdown and final save must not care (tracing's own error report would panic).
    let (child, _, _) = start_until_ready(shardloop(dir.path()));
    // SAFETY: kill(2) on the child we spawned, which is still running.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(
        finish(child).status.code(),
        Some(0),
        "a closed stderr must not stop the shard"
    );
    let items = dir.path().join("data/Saves/items.bin");
    let mut bytes = std::fs::read(&items).unwrap();
    bytes.truncate(bytes.len() - 100);
    std::fs::write(&items, &bytes).unwrap();
    let listing = |d: &Path| {
        let mut names: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let before = listing(&dir.path().join("data/Saves"));

    let out = finish(
        shardloop(dir.path())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let log = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{log}");
    // Truncated: caught by its size on disk against the manifest, before it is read.
    assert!(
        log.contains("items.bin") && log.contains("bytes on disk; the manifest says"),
        "{log}"
    );
    assert!(!log.contains("shard ready"), "{log}");
    assert_eq!(listing(&dir.path().join("data/Saves")), before);
    assert_eq!(
        std::fs::read(&items).unwrap(),
        bytes,
        "the damaged file is left as it was"
    );
}

#[test]
fn a_second_shard_sharing_any_written_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared-archives");
    let mut first = shardloop(dir.path());
    first
        .args(["run", "--data-dir", "a"])
        .env("SHARD_ARCHIVE__DIR", &shared);
    let (first, _, _) = start_until_ready(first);

    // Another data directory, the same archive directory.
    let output = common::deadline::run_within(
        shardloop(dir.path())
            .args(["run", "--data-dir", "b"])
            .env("SHARD_ARCHIVE__DIR", &shared),
        PATIENCE,
    );
    let err = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains("archive directory"), "{err}");
    assert!(err.contains(&format!("pid {}", first.id())), "{err}");

    // Another data directory, saves beside the first one's.
    let output = common::deadline::run_within(
        shardloop(dir.path())
            .args(["run", "--data-dir", "c"])
            .env("SHARD_WORLD__SAVE_DIR", dir.path().join("a/OtherSaves")),
        PATIENCE,
    );
    let err = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains("save directory's parent"), "{err}");
    assert!(
        !dir.path().join("a/OtherSaves").exists(),
        "the refused shard wrote nothing there"
    );

    // SAFETY: kill(2) on the child we spawned, which is still running.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    assert_eq!(finish(first).status.code(), Some(0));
}
