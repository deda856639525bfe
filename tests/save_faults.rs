//! World saves when things go wrong, on the real binary: SIGKILL at random moments (many of
//! them in the middle of a save), a full disk, a read-only filesystem, a file size limit, and
//! `save` typed while a save is writing. Whatever happens, `Saves/` stays a complete save that
//! loads, a failed save says why and leaves the previous one in place, the shard keeps
//! running, and no half-written temp directory survives the next start.
//!
//! The disk-full and read-only tests mount a small tmpfs: they need root or CAP_SYS_ADMIN and
//! fail without it (unless `SHARDLOOP_ALLOW_SKIP=1`). The file size limit needs no privileges.
//!
//! Bounds are generous (tens of seconds): these tests check behaviour, not speed.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use shardloop::persist::file::Kind;
use shardloop::persist::layout::BACKUP_MARKER;
use shardloop::persist::{self, Layout, Manifest, Replaced, Snapshot};
use shardloop::world;

mod common;
use common::binary::temp_dirs;
use common::tmpfs::Tmpfs;

const PATIENCE: Duration = Duration::from_secs(30);

/// A world whose save takes tens of milliseconds (about 1.8 MB on disk).
const MEDIUM: (u32, u32) = (60_000, 10_000);
/// A world whose save is quick and small (about 0.6 MB on disk).
const SMALL: (u32, u32) = (20_000, 3_000);

// ---------------------------------------------------------------------------------------
// The binary, its console and its log.

/// The binary on `data_dir` with a generated world of `size`, no startup probe, no `loop:`
/// lines, autosave off, any free port, and no config file (it runs in `cwd`, which must not
/// hold a `config/` directory).
fn shardloop(cwd: &Path, data_dir: &Path, size: (u32, u32)) -> Command {
    let mut cmd = common::binary::shardloop(cwd, size);
    cmd.env("SHARD_AUTOSAVE__WARNING", "0s")
        .arg("--data-dir")
        .arg(data_dir);
    cmd
}

/// Lines of one output stream of the child, read by a thread; `seen` keeps all of them.
struct Lines {
    rx: Receiver<String>,
    seen: Vec<String>,
    /// Lines before this one have been looked at by `next_matching`.
    cursor: usize,
    closed: bool,
}

impl Lines {
    fn read(stream: impl Read + Send + 'static) -> Lines {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines {
            rx,
            seen: Vec::new(),
            cursor: 0,
            closed: false,
        }
    }

    /// The next line not looked at yet for which `pred` holds, waiting until `deadline`.
    /// `None` on timeout or when the stream closed first.
    fn next_matching(&mut self, deadline: Instant, pred: impl Fn(&str) -> bool) -> Option<String> {
        loop {
            while self.cursor < self.seen.len() {
                let line = &self.seen[self.cursor];
                self.cursor += 1;
                if pred(line) {
                    return Some(line.clone());
                }
            }
            if self.closed {
                return None;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => self.closed = true,
            }
        }
    }

    /// Takes whatever has arrived, without waiting.
    fn pull(&mut self) {
        while let Ok(line) = self.rx.try_recv() {
            self.seen.push(line);
        }
    }

    /// Takes everything until the stream closes (the child has exited), or `deadline`.
    fn pull_to_end(&mut self, deadline: Instant) {
        while !self.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Timeout) => return,
                Err(RecvTimeoutError::Disconnected) => self.closed = true,
            }
        }
    }

    fn any(&self, needle: &str) -> bool {
        self.seen.iter().any(|l| l.contains(needle))
    }
}

/// A running `shardloop`: console on its stdin/stdout, log on its stderr. Killed (SIGKILL)
/// when dropped while still running, so a failing test leaves no process behind.
struct Shard {
    child: Child,
    stdin: Option<ChildStdin>,
    log: Lines,
    out: Lines,
}

impl Shard {
    /// Starts `cmd` and waits for "shard ready".
    fn start(mut cmd: Command) -> Shard {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start shardloop");
        let stdin = child.stdin.take();
        let log = Lines::read(child.stderr.take().unwrap());
        let out = Lines::read(child.stdout.take().unwrap());
        let mut shard = Shard {
            child,
            stdin,
            log,
            out,
        };
        shard.wait_log("shard ready", |l| l.contains("shard ready"));
        shard
    }

    /// Sends one console line.
    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("the console is still ours");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .unwrap_or_else(|e| panic!("console write `{line}`: {e}\n{}", self.dump()));
    }

    /// Waits for the next log line (after those already waited for) matching `pred`.
    fn wait_log(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        match self.log.next_matching(deadline, pred) {
            Some(line) => line,
            None => panic!("no log line for {what}\n{}", self.dump()),
        }
    }

    /// Waits for the next console output line matching `pred`.
    fn wait_out(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        match self.out.next_matching(deadline, pred) {
            Some(line) => line,
            None => panic!("no console answer for {what}\n{}", self.dump()),
        }
    }

    /// Waits for the next "world saved" or "world save failed" line.
    fn wait_save_outcome(&mut self) -> String {
        self.wait_log("the end of a save", |l| {
            l.contains("world saved") || l.contains("world save failed")
        })
    }

    /// Asks `status` and checks the shard answers it; returns the `saves` line.
    fn status(&mut self) -> String {
        self.send("status");
        self.wait_out("`status` (verdict)", |l| l.starts_with("verdict"));
        self.wait_out("`status` (saves)", |l| l.starts_with("saves"))
    }

    /// SIGKILL, and waits for the process to be gone.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL shardloop");
        self.child.wait().expect("reap shardloop");
        self.log.pull();
    }

    /// Waits for the process to exit by itself, then for the rest of its log.
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for shardloop") {
                self.log.pull_to_end(deadline);
                self.out.pull_to_end(deadline);
                return status;
            }
            if Instant::now() > deadline {
                panic!("shardloop did not exit\n{}", self.dump());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Everything the shard printed so far, for failure messages.
    fn dump(&mut self) -> String {
        self.log.pull();
        self.out.pull();
        if self.log.closed || matches!(self.child.try_wait(), Ok(Some(_))) {
            // It is exiting: give it and the reader threads a moment for the last words.
            self.log
                .pull_to_end(Instant::now() + Duration::from_secs(2));
            for _ in 0..200 {
                if let Ok(Some(_)) = self.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let status = self.child.try_wait().ok().flatten();
        format!(
            "exit status: {status:?}\n--- log ---\n{}\n--- console ---\n{}",
            self.log.seen.join("\n"),
            self.out.seen.join("\n")
        )
    }
}

impl Drop for Shard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `key=value` of a log line, as a number.
fn field(line: &str, key: &str) -> Option<u64> {
    let prefix = format!("{key}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(prefix.as_str()))
        .and_then(|v| v.parse().ok())
}

/// The save log lines in order: 'S' started, 'D' done (saved), 'F' failed.
fn save_events(lines: &[String]) -> String {
    lines
        .iter()
        .filter_map(|l| {
            if l.contains("world save started") {
                Some('S')
            } else if l.contains("world saved") {
                Some('D')
            } else if l.contains("world save failed") {
                Some('F')
            } else {
                None
            }
        })
        .collect()
}

/// Saves never overlap: started, ended, started, ended ...
fn assert_saves_alternate(events: &str, log: &[String]) {
    for (i, c) in events.chars().enumerate() {
        let expected = if i % 2 == 0 { "S" } else { "DF" };
        assert!(
            expected.contains(c),
            "save lines do not alternate (event {i} of {events}):\n{}",
            log.join("\n")
        );
    }
}

// ---------------------------------------------------------------------------------------
// What is on disk.

/// `dir` holds a complete save: its manifest reads and every data file it lists has the
/// size the manifest says (cheap: nothing is decoded).
fn complete_save(dir: &Path) -> Result<Manifest, String> {
    let manifest = Manifest::read(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for kind in Kind::ALL {
        let path = dir.join(kind.file_name());
        let listed = manifest
            .file(kind)
            .ok_or_else(|| format!("{}: {kind} not listed", dir.display()))?;
        let len = std::fs::metadata(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .len();
        if len != listed.bytes {
            return Err(format!(
                "{}: {len} bytes, the manifest says {}",
                path.display(),
                listed.bytes
            ));
        }
    }
    Ok(manifest)
}

/// The directories under `Backups/Automatic/`.
fn backups(data_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(data_dir.join("Backups").join("Automatic")) else {
        return Vec::new();
    };
    // `.deleting-*` are backups an archive rollup is deleting (it renames them first).
    let mut dirs: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    dirs.sort();
    dirs
}

/// Loads `Saves/` with the library, panicking with the reason if it does not load.
fn load_saves(data_dir: &Path) -> persist::Loaded {
    persist::load(&data_dir.join("Saves")).unwrap_or_else(|e| panic!("Saves/ does not load: {e}"))
}

/// A small deterministic PRNG (SplitMix64), so the kill moments are the same every run.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------------------------------
// A tmpfs of our own.

fn statvfs(path: &Path) -> libc::statvfs {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path and a zeroed out-struct that outlive the call.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut st), 0, "statvfs {path:?}");
        st
    }
}

// statvfs's field types differ between platforms (u64 here, u32 on some): keep the casts.
#[allow(clippy::unnecessary_cast)]
/// Fills the filesystem of `dir` with a ballast file so that `pages_left` blocks stay free.
fn fill_leaving(dir: &Path, pages_left: u64) -> PathBuf {
    let st = statvfs(dir);
    let fill = (st.f_bavail as u64).saturating_sub(pages_left) * st.f_bsize as u64;
    let ballast = dir.join("ballast");
    std::fs::write(&ballast, vec![0u8; fill as usize]).expect("write the ballast");
    let left = statvfs(dir).f_bavail as u64;
    assert_eq!(left, pages_left, "free blocks after the ballast");
    ballast
}

#[allow(clippy::unnecessary_cast)]
/// Uses up inodes of the filesystem of `dir` with empty files so that `left` stay free.
fn use_inodes_leaving(dir: &Path, left: u64) {
    let ballast = dir.join("ballast");
    std::fs::create_dir(&ballast).unwrap();
    let free = statvfs(dir).f_favail as u64;
    for i in 0..free.saturating_sub(left) {
        std::fs::File::create(ballast.join(i.to_string())).expect("an inode ballast file");
    }
    assert_eq!(
        statvfs(dir).f_favail as u64,
        left,
        "free inodes after the ballast"
    );
}

// ---------------------------------------------------------------------------------------
// 1. SIGKILL, again and again.

#[test]
fn sigkill_at_random_moments_never_leaves_a_save_that_will_not_load() {
    const ROUNDS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let busy = |mut cmd: Command| {
        cmd.env("SHARD_AUTOSAVE__ENABLED", "true")
            .env("SHARD_AUTOSAVE__FREQUENCY", "1s");
        cmd
    };

    // Round 0: a first save to load, from a generated world.
    let mut shard = Shard::start(busy(shardloop(dir.path(), &data, MEDIUM)));
    assert!(shard.log.any("generated the world"), "{}", shard.dump());
    shard.send("save");
    shard.wait_log("the first save", |l| l.contains("world saved"));
    shard.kill();
    drop(shard);

    let mut rng = SplitMix64(0x5A7E_F00D);
    let (mut killed_mid_save, mut recovered_rounds, mut removed_unfinished) = (0, 0, 0);
    let mut recovery_lines = Vec::new();
    for round in 1..=ROUNDS {
        let mut shard = Shard::start(busy(shardloop(dir.path(), &data, MEDIUM)));
        assert!(
            shard.log.any("loaded the world save") && !shard.log.any("generated the world"),
            "round {round}: the start must load the previous save\n{}",
            shard.dump()
        );
        let recoveries: Vec<String> = shard
            .log
            .seen
            .iter()
            .filter(|l| l.contains("after an interrupted save"))
            .cloned()
            .collect();
        if !recoveries.is_empty() {
            recovered_rounds += 1;
        }
        removed_unfinished += recoveries
            .iter()
            .filter(|l| l.contains("removed unfinished"))
            .count();
        recovery_lines.extend(recoveries);

        // Keep the saver busy: `save` every 100 ms on top of the 1 s autosave, so most kills
        // land in the middle of writing, syncing or swapping.
        let mut console = shard.stdin.take().unwrap();
        std::thread::spawn(move || {
            while console.write_all(b"save\n").is_ok() {
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        std::thread::sleep(Duration::from_millis(rng.below(1500)));
        // Every other round, also wait for a save to be writing its files (a temp dir
        // exists): much of a save is sorting before it and syncing after, so chance alone
        // would leave few kills inside the write.
        if round % 2 == 0 {
            let deadline = Instant::now() + PATIENCE;
            while temp_dirs(&data).is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
        shard.log.pull();
        if save_events(&shard.log.seen).ends_with('S') {
            killed_mid_save += 1;
        }
        shard.kill();
        assert_saves_alternate(&save_events(&shard.log.seen), &shard.log.seen);
        assert!(
            !shard.log.any("world save failed"),
            "round {round}: a save failed\n{}",
            shard.dump()
        );

        // At every instant `Saves/` is a complete save, even before startup recovery.
        if let Err(e) = complete_save(&data.join("Saves")) {
            panic!(
                "round {round}: after SIGKILL, Saves/ is not a complete save: {e}\n{}",
                shard.dump()
            );
        }
    }

    // A last start: it loads, and recovery left no temp directory behind.
    let mut shard = Shard::start(shardloop(dir.path(), &data, MEDIUM));
    assert!(
        shard.log.any("loaded the world save") && !shard.log.any("generated the world"),
        "{}",
        shard.dump()
    );
    recovery_lines.extend(
        shard
            .log
            .seen
            .iter()
            .filter(|l| l.contains("after an interrupted save"))
            .cloned(),
    );
    let left = temp_dirs(&data);
    assert!(left.is_empty(), "temp dirs after startup: {left:?}");

    // A clean stop takes a final save; the library loads exactly what it logged.
    shard.send("shutdown");
    let status = shard.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", shard.dump());
    // Backups are checked once the shard has exited: while it runs, its archive rollup may
    // rename a backup away (to delete it) between listing it and reading its files.
    let backups = backups(&data);
    assert!(!backups.is_empty(), "20 rounds of saves left no backup");
    let mut unmarked = Vec::new();
    for backup in &backups {
        assert!(
            backup.join("manifest.toml").is_file(),
            "a backup without a manifest: {}",
            backup.display()
        );
        if let Err(e) = complete_save(backup) {
            panic!("an incomplete backup: {e}");
        }
        if !backup.join(BACKUP_MARKER).exists() {
            unmarked.push(backup.clone());
        }
    }

    let saved = shard
        .log
        .seen
        .iter()
        .rev()
        .find(|l| l.contains("world saved"))
        .cloned()
        .unwrap_or_else(|| panic!("no final save\n{}", shard.dump()));
    let items = field(&saved, "items").expect("items= in the saved line");
    let mobiles = field(&saved, "mobiles").expect("mobiles= in the saved line");
    let loaded = load_saves(&data);
    assert_eq!(loaded.manifest.items, items, "{saved}");
    assert_eq!(loaded.world.item_count() as u64, items, "{saved}");
    assert_eq!(loaded.manifest.mobiles, mobiles, "{saved}");
    assert!(
        items > MEDIUM.0 as u64 / 2,
        "the world lost most of its items: {items}"
    );

    eprintln!(
        "{ROUNDS} kills: {killed_mid_save} while a save was writing (by the log); \
         {recovered_rounds} starts recovered something ({removed_unfinished} unfinished temp \
         dirs removed); {} backups, {} without {BACKUP_MARKER}: {unmarked:?}\n{}",
        backups.len(),
        unmarked.len(),
        recovery_lines.join("\n")
    );
    // The test is about kills in the middle of saves: make sure it made some.
    assert!(
        recovered_rounds >= ROUNDS / 4,
        "only {recovered_rounds} kills left something to recover:\n{}",
        recovery_lines.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// 2. A full disk and a read-only filesystem.

enum Fault {
    DiskFull,
    ReadOnly,
}

/// On a tmpfs: a first save, then the fault, `save` fails naming it and changes nothing,
/// the shard keeps answering, then the fault goes away and `save` works again.
fn save_survives(fault: Fault) {
    let Some(fs) = Tmpfs::mount_or_skip("size=8m") else {
        return;
    };
    let data = fs.mnt.join("data");
    let mut cmd = shardloop(fs.cwd(), &data, SMALL);
    // No disk reserve: this is the full disk that only an operator can free.
    cmd.env("SHARD_WORLD__DISK_RESERVE", "0");
    let mut shard = Shard::start(cmd);
    shard.send("save");
    let first = shard.wait_save_outcome();
    assert!(first.contains("world saved"), "{}", shard.dump());
    let before = complete_save(&data.join("Saves")).expect("the first save");

    let (expected, ballast) = match fault {
        Fault::DiskFull => ("No space left on device", Some(fill_leaving(&fs.mnt, 0))),
        Fault::ReadOnly => {
            fs.remount("ro");
            ("Read-only file system", None)
        }
    };
    shard.send("save");
    let failed = shard.wait_save_outcome();
    assert!(
        failed.contains("world save failed") && failed.contains(expected),
        "expected a failure naming `{expected}`, got: {failed}\n{}",
        shard.dump()
    );
    assert!(
        failed.contains("ERROR"),
        "an error, not a warning: {failed}"
    );

    // Still running, and it says so.
    let saves = shard.status();
    assert!(saves.contains("2 since start"), "{saves}");
    assert!(
        shard.child.try_wait().unwrap().is_none(),
        "{}",
        shard.dump()
    );
    // Nothing changed on disk.
    let loaded = load_saves(&data);
    assert_eq!(loaded.manifest, before, "Saves/ is still the first save");
    assert_eq!(
        temp_dirs(&data),
        Vec::<PathBuf>::new(),
        "temp dirs left behind"
    );
    assert!(backups(&data).is_empty(), "a failed save made a backup");

    // The fault goes away: the next save works.
    match fault {
        Fault::DiskFull => std::fs::remove_file(ballast.unwrap()).unwrap(),
        Fault::ReadOnly => fs.remount("rw"),
    }
    shard.send("save");
    let saved = shard.wait_save_outcome();
    assert!(saved.contains("world saved"), "{saved}\n{}", shard.dump());
    let after = load_saves(&data).manifest;
    assert!(after.created > before.created, "a newer save is in place");
    let backups = backups(&data);
    assert_eq!(backups.len(), 1, "{backups:?}");
    assert_eq!(Manifest::read(&backups[0]).unwrap(), before);
    assert!(backups[0].join(BACKUP_MARKER).exists());
    assert_eq!(temp_dirs(&data), Vec::<PathBuf>::new());

    shard.send("shutdown");
    let status = shard.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", shard.dump());
    assert_saves_alternate(&save_events(&shard.log.seen), &shard.log.seen);
    assert_eq!(save_events(&shard.log.seen), "SDSFSDSD");
}

#[test]
fn a_full_disk_fails_the_save_and_keeps_the_previous_one() {
    save_survives(Fault::DiskFull);
}

#[test]
fn a_read_only_filesystem_fails_the_save_and_keeps_the_previous_one() {
    save_survives(Fault::ReadOnly);
}

/// Waits until `path` is a file of `bytes` allocated bytes (the disk reserve being made).
fn wait_for_reserve(shard: &mut Shard, path: &Path, bytes: u64) {
    use std::os::unix::fs::MetadataExt;
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(meta) = std::fs::metadata(path)
            && meta.len() == bytes
            && meta.blocks() * 512 >= bytes
        {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "no {bytes}-byte reserve at {}\n{}",
                path.display(),
                shard.dump()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_full_disk_spends_the_reserve_saves_again_and_recovers_without_a_restart() {
    let Some(fs) = Tmpfs::mount_or_skip("size=16m") else {
        return;
    };
    let data = fs.mnt.join("data");
    // A reserve of 1 MiB: room for one more save of this world (about 0.6 MB), not two.
    const RESERVE: u64 = 1 << 20;
    let mut cmd = shardloop(fs.cwd(), &data, SMALL);
    cmd.env("SHARD_WORLD__DISK_RESERVE", RESERVE.to_string())
        // Nothing else frees space meanwhile: no backup is deleted during the test.
        .env("SHARD_ARCHIVE__ENABLED", "false")
        .env("SHARD_ARCHIVE__KEEP_BACKUPS", "10");
    let mut shard = Shard::start(cmd);
    let reserve = data.join("disk-reserve");
    wait_for_reserve(&mut shard, &reserve, RESERVE);
    shard.send("save");
    let first = shard.wait_save_outcome();
    assert!(first.contains("world saved"), "{}", shard.dump());
    let before = complete_save(&data.join("Saves")).expect("the first save");

    // The disk fills up. The save gives up the reserve and is written again, at once.
    let ballast = fill_leaving(&fs.mnt, 0);
    let full = Instant::now();
    shard.send("save");
    let warned = shard.wait_log("the reserve given up", |l| {
        l.contains("deleted the disk reserve")
    });
    assert!(
        warned.contains("WARN") && warned.contains("No space left on device"),
        "{warned}"
    );
    let outcome = shard.wait_save_outcome();
    let saved_on_reserve = full.elapsed();
    assert!(
        outcome.contains("world saved"),
        "{outcome}\n{}",
        shard.dump()
    );
    assert!(!reserve.exists(), "the reserve was spent");
    let rescued = load_saves(&data).manifest;
    assert!(
        rescued.sequence > before.sequence,
        "a newer save is in place"
    );
    assert!(
        backups(&data)
            .iter()
            .any(|b| Manifest::read(b).is_ok_and(|m| m == before))
    );
    // Logged by the save, before it ends: no room to make the reserve again.
    let no_room = shard
        .log
        .seen
        .iter()
        .find(|l| l.contains("no room on this disk for the disk reserve"));
    assert!(
        no_room.is_some_and(|l| l.contains("WARN")),
        "{}",
        shard.dump()
    );

    // The reserve is spent and the disk still full: the next save fails cleanly, the shard
    // runs on.
    shard.send("save");
    let failed = shard.wait_save_outcome();
    assert!(
        failed.contains("world save failed") && failed.contains("No space left on device"),
        "{failed}\n{}",
        shard.dump()
    );
    let saves = shard.status();
    assert!(saves.contains("3 since start"), "{saves}");
    assert_eq!(
        load_saves(&data).manifest,
        rescued,
        "the failed save changed nothing"
    );
    assert_eq!(temp_dirs(&data), Vec::<PathBuf>::new());

    // The operator makes room: the next save succeeds without a restart, and the reserve is
    // made again right after it.
    std::fs::remove_file(&ballast).unwrap();
    let room = Instant::now();
    shard.send("save");
    let saved = shard.wait_save_outcome();
    let saved_after_room = room.elapsed();
    assert!(saved.contains("world saved"), "{saved}\n{}", shard.dump());
    assert!(load_saves(&data).manifest.sequence > rescued.sequence);
    wait_for_reserve(&mut shard, &reserve, RESERVE);
    eprintln!(
        "disk full -> saved on the reserve in {saved_on_reserve:?}; room made -> saved in \
         {saved_after_room:?} (manual `save`, {SMALL:?} world)"
    );

    shard.send("shutdown");
    let status = shard.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", shard.dump());
    assert_eq!(save_events(&shard.log.seen), "SDSDSFSDSD");
}

/// A save on a filesystem that runs out at one step or another (`left` free blocks or
/// inodes before it starts), through the library: what must hold whatever the step.
fn check_save_with_little_room(
    fs: &Tmpfs,
    left: u64,
    starve: impl Fn(&Path, u64),
) -> Result<bool, String> {
    fs.clear();
    let root = fs.mnt.clone();
    let layout = Layout::new(&root, root.join("Saves"));
    let world = world::generate(7, 3000, 400);
    let t1: Timestamp = "2026-12-03T10:00:00Z".parse().unwrap();
    let t2: Timestamp = "2026-12-03T11:00:00Z".parse().unwrap();
    let first = persist::save::write(&layout, Snapshot::take(&world, t1, |_| true), 1)
        .map_err(|e| format!("the first save: {e}"))?
        .manifest;
    starve(&root, left);

    let outcome = persist::save::write(&layout, Snapshot::take(&world, t2, |_| true), 1);
    let mut wrong = Vec::new();
    let current = Manifest::read(&layout.saves);
    let backups = backups(&root);
    let temps = temp_dirs(&root);
    let kept = current.as_ref().is_ok_and(|m| *m == first)
        || backups
            .iter()
            .chain(&temps)
            .any(|b| Manifest::read(b).is_ok_and(|m| m == first));
    if !kept {
        wrong.push("the previous save is gone (neither Saves/ nor a backup)".to_owned());
    }
    // The one temp dir allowed: the previous save, intact, when the save reports that it
    // could not move it to Backups/ (the next start does).
    let left_at = match &outcome {
        Ok(saved) => match &saved.replaced {
            Replaced::LeftAt { path, .. } => Some(path.clone()),
            _ => None,
        },
        Err(_) => None,
    };
    let stray: Vec<_> = temps
        .iter()
        .filter(|t| Some(*t) != left_at.as_ref())
        .collect();
    if !stray.is_empty() {
        wrong.push(format!("temp dirs left: {stray:?}"));
    }
    let ok = outcome.is_ok();
    match outcome {
        Ok(saved) => {
            if current.as_ref().ok() != Some(&saved.manifest) {
                wrong.push(format!("reported saved, but Saves/ holds {current:?}"));
            }
            match &saved.replaced {
                Replaced::BackedUp(b) if Manifest::read(b).is_ok_and(|m| m == first) => {
                    if !b.join(BACKUP_MARKER).exists() {
                        wrong.push(format!("backup {} has no marker", b.display()));
                    }
                }
                // Intact where the save says; the next start moves it (tests/persist.rs).
                Replaced::LeftAt { path, .. } if Manifest::read(path).is_ok_and(|m| m == first) => {
                }
                other => wrong.push(format!("replaced save {other:?} is not the previous one")),
            }
        }
        Err(e) => {
            if e.source.raw_os_error() != Some(libc::ENOSPC) {
                wrong.push(format!("not ENOSPC: {e}"));
            }
            match &current {
                Ok(m) if *m == first => {}
                Ok(m) => wrong.push(format!(
                    "reported `{e}`, but Saves/ holds the NEW save (created {})",
                    m.created
                )),
                Err(r) => wrong.push(format!("reported `{e}`, but Saves/ does not read: {r}")),
            }
        }
    }
    if let Err(e) = persist::load(&layout.saves) {
        wrong.push(format!("Saves/ does not load: {e}"));
    }
    match wrong.is_empty() {
        true => Ok(ok),
        false => Err(wrong.join("; ")),
    }
}

/// Runs `check_save_with_little_room` for every amount of room from none to enough.
fn sweep(fs: &Tmpfs, what: &str, max: u64, starve: impl Fn(&Path, u64)) {
    let mut problems = Vec::new();
    let mut succeeded = Vec::new();
    for left in 0..=max {
        match check_save_with_little_room(fs, left, &starve) {
            Ok(true) => succeeded.push(left),
            Ok(false) => {}
            Err(e) => problems.push(format!("{left} free {what}: {e}")),
        }
    }
    assert!(
        problems.is_empty(),
        "saves on a nearly full filesystem:\n{}",
        problems.join("\n")
    );
    assert!(
        succeeded.contains(&max),
        "with {max} free {what} the save should succeed"
    );
}

#[test]
fn a_disk_filling_up_at_any_step_of_a_save_loses_nothing_and_reports_the_truth() {
    let Some(fs) = Tmpfs::mount_or_skip("size=4m") else {
        return;
    };
    // A save of the 3000-item world takes about 25 pages; sweep beyond it.
    sweep(&fs, "blocks", 40, |root, left| {
        fill_leaving(root, left);
    });
}

#[test]
fn running_out_of_inodes_at_any_step_of_a_save_loses_nothing_and_reports_the_truth() {
    let Some(fs) = Tmpfs::mount_or_skip("size=4m,nr_inodes=64") else {
        return;
    };
    // A second save needs 8 inodes: temp dir, 4 files, Backups/, Automatic/, the marker.
    sweep(&fs, "inodes", 10, use_inodes_leaving);
}

// ---------------------------------------------------------------------------------------
// 3. A file size limit (no mount, no privileges needed).

#[test]
fn a_file_size_limit_fails_the_save_and_the_shard_survives_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A first save, without the limit (the final save of a clean stop).
    let mut shard = Shard::start(shardloop(dir.path(), &data, SMALL));
    shard.send("shutdown");
    assert_eq!(shard.wait_exit().code(), Some(0), "{}", shard.dump());
    let before = complete_save(&data.join("Saves")).expect("the first save");
    assert!(
        before.file(Kind::Items).unwrap().bytes > 64 * 1024,
        "items.bin must outgrow the limit"
    );

    // Now with `ulimit -f 64` (KiB): items.bin cannot be written.
    let mut cmd = shardloop(dir.path(), &data, SMALL);
    // SAFETY: setrlimit(2) is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 64 * 1024,
                rlim_max: 64 * 1024,
            };
            match libc::setrlimit(libc::RLIMIT_FSIZE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let mut shard = Shard::start(cmd);
    assert!(shard.log.any("loaded the world save"), "{}", shard.dump());
    shard.send("save");
    let failed = shard.wait_save_outcome();
    assert!(
        failed.contains("world save failed") && failed.contains("File too large"),
        "{failed}\n{}",
        shard.dump()
    );
    assert!(failed.contains("items.bin"), "names the file: {failed}");
    // SIGXFSZ did not kill it: it answers, and nothing changed.
    let saves = shard.status();
    assert!(saves.contains("1 since start"), "{saves}");
    assert_eq!(load_saves(&data).manifest, before);
    assert_eq!(temp_dirs(&data), Vec::<PathBuf>::new());

    // The final save fails too: exit 1, saying so, and the first save is still the one.
    shard.send("shutdown");
    let status = shard.wait_exit();
    assert_eq!(status.code(), Some(1), "{}", shard.dump());
    assert!(shard.log.any("the final save failed"), "{}", shard.dump());
    assert_eq!(load_saves(&data).manifest, before);
    assert_eq!(temp_dirs(&data), Vec::<PathBuf>::new());
    assert!(backups(&data).is_empty());
}

// ---------------------------------------------------------------------------------------
// 4. `save` while a save is writing.

#[test]
fn save_requests_during_a_save_fold_into_one_more_save() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut shard = Shard::start(shardloop(dir.path(), &data, MEDIUM));
    // One write: the console answers lines that arrive together in one turn of the loop, so
    // the second and third find the first save writing however slow this machine is.
    shard
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"save\nsave\nsave\n")
        .unwrap();
    shard.wait_out("the first `save`", |l| {
        l.starts_with("saving the world now")
    });
    for n in 2..=3 {
        shard.wait_out(&format!("`save` number {n}"), |l| {
            l.starts_with("a save is writing; one more will start")
        });
    }
    shard.wait_log("the first save", |l| l.contains("world saved"));
    shard.wait_log("the queued save", |l| l.contains("world saved"));
    // Long enough for a third save to have started and ended if one were coming.
    std::thread::sleep(Duration::from_millis(1500));
    let saves = shard.status();
    assert!(saves.contains("2 since start"), "{saves}");
    assert!(!saves.contains("writing now"), "{saves}");
    shard.log.pull();
    assert_eq!(
        save_events(&shard.log.seen),
        "SDSD",
        "three requests: one save and one queued\n{}",
        shard.dump()
    );

    shard.send("shutdown");
    let status = shard.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", shard.dump());
    // And the final save after them: still one at a time.
    assert_eq!(save_events(&shard.log.seen), "SDSDSD", "{}", shard.dump());
    let backups = backups(&data);
    assert_eq!(
        backups.len(),
        2,
        "each save but the first replaced one: {backups:?}"
    );
    for b in &backups {
        complete_save(b).unwrap();
        assert!(b.join(BACKUP_MARKER).exists(), "{}", b.display());
    }
}

// ---------------------------------------------------------------------------------------
// 5. Connections and the descriptors a save needs.

/// The open-file limit (soft and hard) of the command's process, set between fork and exec.
fn with_open_file_limit(cmd: &mut Command, limit: u64) {
    // SAFETY: setrlimit(2) is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
}

#[test]
fn connections_can_never_take_the_descriptors_a_save_needs() {
    // The whole process may hold 320 descriptors: 192 connections and the 128 the shard keeps.
    const LIMIT: u64 = 320;
    const MAX_CONNECTIONS: u64 = LIMIT - shardloop::shard::RESERVED_DESCRIPTORS;
    const CLIENTS: usize = 400;
    assert!(common::fd_limit::raise_to(2 * CLIENTS as u64 + 100));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut cmd = shardloop(dir.path(), &data, SMALL);
    cmd.env(
        "SHARD_NETWORK__MAX_CONNECTIONS",
        MAX_CONNECTIONS.to_string(),
    )
    .env("SHARD_NETWORK__MAX_PER_IP", "10000")
    .env("SHARD_NETWORK__MAX_PRELOGIN", MAX_CONNECTIONS.to_string())
    .env("SHARD_NETWORK__CONNECT_RATE", "0");
    with_open_file_limit(&mut cmd, LIMIT);
    let mut shard = Shard::start(cmd);
    let addr: std::net::SocketAddr = shard
        .log
        .seen
        .iter()
        .find_map(|l| {
            l.contains("listening for players")
                .then(|| l.split_whitespace().find_map(|w| w.strip_prefix("addr=")))
                .flatten()
        })
        .expect("a listening line")
        .parse()
        .unwrap();
    // More clients than the shard may hold: it holds its maximum, and as none of them logs in,
    // each newcomer past it takes the place of the oldest.
    let clients: Vec<std::net::TcpStream> = (0..CLIENTS)
        .map(|_| std::net::TcpStream::connect(addr).expect("connects"))
        .collect();
    // Wait until every client was taken, the first ones closed to make room.
    let over = CLIENTS as u64 - MAX_CONNECTIONS;
    let want_open = format!("open      {MAX_CONNECTIONS} connections");
    let want_closed = format!("{over} evicted before login");
    let deadline = Instant::now() + PATIENCE;
    let (open, closed) = loop {
        shard.send("netstats");
        let open = shard.wait_out("`netstats`", |l| l.starts_with("open "));
        let closed = shard.wait_out("`netstats` closes", |l| l.starts_with("closed "));
        if (open.contains(&want_open) && closed.contains(&want_closed)) || Instant::now() > deadline
        {
            break (open, closed);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(open.contains(&want_open), "{open}\n{}", shard.dump());
    assert!(closed.contains(&want_closed), "{closed}\n{}", shard.dump());
    // Every descriptor a connection may have is taken: the save still gets its own.
    shard.send("save");
    let outcome = shard.wait_save_outcome();
    assert!(
        outcome.contains("world saved"),
        "{outcome}\n{}",
        shard.dump()
    );
    drop(clients);
    shard.send("shutdown");
    let status = shard.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", shard.dump());
}
