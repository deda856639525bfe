//! The `shardloop` binary as the tests start it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_shardloop");

/// The binary, quiet and deterministic: it runs in `cwd` (which must hold no `config/`, so no
/// config file is read), with `RUST_LOG` unset, no startup probe, no `loop:` lines, autosave
/// off (it follows the wall clock), a generated world of `items` and `mobiles` when there is
/// no save, and listening on a free loopback port (the log's `listening for players` line
/// names it). Flags and variables added by the caller override these.
pub fn shardloop(cwd: &Path, (items, mobiles): (u32, u32)) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.current_dir(cwd)
        .env_remove("RUST_LOG")
        .env("SHARD_SERVER__PROBE_HOST", "false")
        .env("SHARD_SERVER__LOOP_STATS_INTERVAL", "0s")
        .env("SHARD_NETWORK__LISTEN", "[\"127.0.0.1:0\"]")
        .env("SHARD_WORLD__GENERATE__ITEMS", items.to_string())
        .env("SHARD_WORLD__GENERATE__MOBILES", mobiles.to_string())
        .env("SHARD_AUTOSAVE__ENABLED", "false");
    cmd
}

/// The temp directories and files (`.tmp-*`) in `root`, sorted; none when `root` does not
/// exist yet.
pub fn temp_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .map(|e| e.unwrap())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(shardloop::persist::layout::TEMP_PREFIX)
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// Spawns `cmd` with stdin and stdout closed and its log (stderr) read line by line on a
/// thread; the receiver hangs up when the child closes stderr.
pub fn spawn_logged(cmd: &mut Command) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines(child.stderr.take().unwrap());
    (child, lines)
}

/// The lines of `pipe` (a child's stdout or stderr), read on a thread of their own; the
/// receiver hangs up when the pipe closes.
pub fn lines(pipe: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    lines_rx
}
