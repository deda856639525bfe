//! Off-site archives against a real S3-compatible server (moto in server mode, started by each
//! test on a free loopback port, `common::moto`): an archive a rollup writes goes up with its
//! size and checksum; the store down during a rollup stops nothing, deletes nothing local, and
//! the upload lands once it is back; a data directory lost entirely comes back from the bucket
//! (`shardloop restore s3://…` on an empty directory) with the same world; hostile objects are
//! refused as hostile files are; retention in the bucket deletes only the shard's own surplus.
//!
//! The shard is the binary, on a pinned wall clock (`--clock-start`) so that archive periods
//! do not depend on when the test runs, with quick retries (100 ms doubling to 400 ms). Each
//! test takes a second or two, most of it moto starting.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use jiff::tz::TimeZone;
use object_store::path::Path as ObjectPath;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{Attribute, Attributes, ObjectStore, PutOptions, PutPayload};
use shardloop::config::ArchiveConfig;
use shardloop::persist::archive::Format;
use shardloop::persist::archive::check;
use shardloop::persist::archive::mark;
use shardloop::persist::archive::remote::{self, Cause, Remote, RemoteUrl, Store};
use shardloop::persist::archive::rollup::{self, Period, Plan};
use shardloop::persist::{self, Layout, Manifest, Snapshot};
use shardloop::world::{self, World};

mod common;
use common::backups::backup;
use common::moto::Moto;

/// The shard's wall clock: 01:45 on the 1st, so 30 November's hours, the day and the month
/// are past periods.
const NOW: &str = "2026-12-01T01:45:00Z";
const BUCKET: &str = "shard-backups";
const URL: &str = "s3://shard-backups/shard-1";
/// Generous bounds: these tests check behaviour, not speed.
const PATIENCE: Duration = Duration::from_secs(60);
const UPLOADED: &str = "archive uploaded off-site and verified";

fn world() -> World {
    world::generate(5, 2000, 300)
}

fn url() -> RemoteUrl {
    RemoteUrl::parse(URL).unwrap()
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// `root/data` as a shard leaves it: the current save in `Saves/` and complete automatic
/// backups taken at `times`.
fn data_dir(root: &Path, times: &[&str]) -> PathBuf {
    let data = root.join("data");
    let layout = Layout::new(&data, data.join("Saves"));
    let world = world();
    let created: Timestamp = "2026-12-01T01:30:00Z".parse().unwrap();
    persist::save::write(&layout, Snapshot::take(&world, created, |_| true), 10).unwrap();
    for at in times {
        backup(&layout, &world, at);
    }
    data
}

/// The rollup plan of the shard's defaults for `data`.
fn plan(data: &Path) -> Plan {
    ArchiveConfig::default().plan(data.join("Archives"), TimeZone::UTC)
}

/// The archives on disk: (kind, path), oldest first within each kind.
fn local_archives(data: &Path) -> Vec<(Period, PathBuf)> {
    let plan = plan(data);
    Period::ALL
        .into_iter()
        .flat_map(|p| {
            rollup::archives(&plan, p)
                .unwrap()
                .into_iter()
                .map(move |(_, path)| (p, path))
        })
        .collect()
}

fn names(archives: &[(Period, PathBuf)], period: Period) -> Vec<String> {
    archives
        .iter()
        .filter(|(p, _)| *p == period)
        .map(|(_, path)| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// The test's own view of the bucket (its own client: the shard's is built from its
/// environment).
fn store(moto: &Moto) -> Store {
    Store::wrap(moto.client(BUCKET), &Remote::new(url()))
}

/// Every object name in the bucket, sorted.
fn bucket_keys(moto: &Moto) -> Vec<String> {
    use futures::StreamExt;
    let client = moto.client(BUCKET);
    let mut keys: Vec<String> = block_on(async {
        client
            .list(None)
            .map(|meta| meta.unwrap().location.to_string())
            .collect()
            .await
    });
    keys.sort();
    keys
}

/// Puts `bytes` as `key` directly, with `sha256` as the checksum metadata a shard writes (if
/// given): an object as someone other than the shard's uploader made it.
fn put(client: &Arc<dyn ObjectStore>, key: &str, bytes: Vec<u8>, sha256: Option<String>) {
    let mut attributes = Attributes::new();
    if let Some(sha) = sha256 {
        attributes.insert(Attribute::Metadata(remote::SHA256_KEY.into()), sha.into());
    }
    let options = PutOptions {
        attributes,
        ..PutOptions::default()
    };
    block_on(client.put_opts(
        &ObjectPath::parse(key).unwrap(),
        PutPayload::from(bytes),
        options,
    ))
    .unwrap();
}

fn sha256_of(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, bytes).unwrap();
    remote::sum_file(&path).unwrap().hex()
}

/// The binary in `root` (its data directory `root/data`), on the pinned clock, archives going
/// to [`URL`] on `moto`, with `extra` variables.
fn shardloop(root: &Path, moto: &Moto, extra: &[(&str, &str)]) -> Command {
    let mut cmd = common::binary::shardloop(root, (2_000, 300));
    moto.shard_env(&mut cmd, URL);
    cmd.envs(extra.iter().copied()).args(["--clock-start", NOW]);
    cmd
}

/// A running shard: its console (stdin, stdout) and its log (stderr), read line by line.
struct Running {
    child: Child,
    stdin: ChildStdin,
    log: Receiver<String>,
    out: Receiver<String>,
    seen: Vec<String>,
    answers: Vec<String>,
}

impl Running {
    fn start(mut cmd: Command) -> Running {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Running {
            stdin: child.stdin.take().unwrap(),
            log: common::binary::lines(child.stderr.take().unwrap()),
            out: common::binary::lines(child.stdout.take().unwrap()),
            child,
            seen: Vec::new(),
            answers: Vec::new(),
        }
    }

    /// Reads the log until `count` lines contain `what` in all; panics with the log after
    /// [`PATIENCE`].
    fn wait_for(&mut self, what: &str, count: usize) {
        let began = Instant::now();
        while self.seen.iter().filter(|l| l.contains(what)).count() < count {
            let left = PATIENCE.saturating_sub(began.elapsed());
            match self.log.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => {
                    let _ = self.child.kill();
                    panic!(
                        "no {count} lines with {what:?} in the log: {:#?}",
                        self.seen
                    );
                }
            }
        }
    }

    /// Types `line` on the console.
    fn say(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
    }

    /// Reads the console's output until a line contains `what`; that line and the ones
    /// after it that arrive together.
    fn answer(&mut self, what: &str) -> String {
        let began = Instant::now();
        loop {
            let left = PATIENCE.saturating_sub(began.elapsed());
            match self.out.recv_timeout(left) {
                Ok(line) if line.contains(what) => {
                    let mut text = line;
                    while let Ok(more) = self.out.recv_timeout(Duration::from_millis(200)) {
                        text.push('\n');
                        text.push_str(&more);
                    }
                    self.answers.push(text.clone());
                    return text;
                }
                Ok(line) => self.answers.push(line),
                Err(_) => panic!("no {what:?} on the console: {:#?}", self.answers),
            }
        }
    }

    /// `archivestatus`'s off-site lines, asked again until they contain every one of
    /// `wanted` (the uploader's state reaches the loop a moment after its log line).
    fn offsite_status(&mut self, wanted: &[&str]) -> String {
        let began = Instant::now();
        loop {
            self.say("archivestatus");
            let status = self.answer("off-site s3://shard-backups/shard-1");
            if wanted.iter().all(|w| status.contains(w)) {
                return status;
            }
            assert!(
                began.elapsed() < PATIENCE,
                "archivestatus never said {wanted:?}: {status}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `shutdown` on the console; waits for the exit (killing it after [`PATIENCE`]) and
    /// returns its status and the whole log.
    fn stop(mut self) -> (ExitStatus, Vec<String>) {
        self.say("shutdown");
        let began = Instant::now();
        loop {
            let left = PATIENCE.saturating_sub(began.elapsed());
            match self.log.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!("did not stop: {:#?}", self.seen);
                }
            }
        }
        (self.child.wait().unwrap(), self.seen)
    }
}

fn run(cmd: &mut Command) -> (Output, String) {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::deadline::output_within(child, PATIENCE);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

#[test]
fn an_archive_a_rollup_writes_is_uploaded_with_its_size_and_checksum_and_never_overwritten() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket(BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(
        dir.path(),
        &[
            "2026-11-30T22:10:00Z",
            "2026-11-30T23:20:00Z",
            "2026-12-01T00:10:00Z",
        ],
    );
    let mut shard = Running::start(shardloop(dir.path(), &moto, &[]));
    // 3 hourly, 30 November, November.
    shard.wait_for(UPLOADED, 5);
    shard.offsite_status(&[": 5 uploaded", "0 waiting"]);
    let (exit, log) = shard.stop();
    assert!(exit.success(), "{log:#?}");

    let archives = local_archives(&data);
    assert_eq!(archives.len(), 5, "{archives:?}");
    let store = store(&moto);
    for (period, path) in &archives {
        let name = path.file_name().unwrap().to_string_lossy();
        let key = url().key(*period, &name);
        let sum = remote::sum_file(path).unwrap();
        let stat = block_on(store.stat(&key)).unwrap().expect("uploaded");
        assert_eq!(stat.bytes, sum.bytes, "{key}");
        assert_eq!(stat.sha256.as_deref(), Some(sum.hex().as_str()), "{key}");
        // The manifest its metadata records is the one inside (what `restore --list` shows).
        let inside = check::manifest(path, Format::TarZst, Default::default()).unwrap();
        assert_eq!(
            Manifest::parse(stat.manifest.as_deref().unwrap()).unwrap(),
            Manifest::parse(&inside).unwrap()
        );
        assert!(mark::is_off_site(&url(), path), "{key} not marked");
    }

    // A name is never overwritten: another file under it is refused, the object unchanged.
    let (period, path) = &archives[0];
    let key = url().key(*period, &path.file_name().unwrap().to_string_lossy());
    let other = dir.path().join("other.tar.zst");
    std::fs::write(&other, b"not the archive").unwrap();
    let sum = remote::sum_file(&other).unwrap();
    let refused = block_on(store.upload(&other, &key, &sum, None)).unwrap_err();
    assert_eq!(refused.cause, Cause::Conflict, "{refused}");
    let kept = block_on(store.stat(&key)).unwrap().unwrap();
    assert!(kept.matches(&remote::sum_file(path).unwrap()));
}

/// Deterministic bytes that do not compress.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_large_archive_goes_up_in_parts_over_a_slow_link_and_comes_back_whole() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket(BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("2026-11-30.tar");
    std::fs::write(&big, noise(12 << 20, 7)).unwrap();
    let sum = remote::sum_file(&big).unwrap();
    // Parts of 5 MiB (S3's smallest) from 5 MiB on: three parts; each request on the slow
    // link waits 50 ms first.
    let settings = Remote {
        multipart_bytes: 5 << 20,
        part_bytes: 5 << 20,
        ..Remote::new(url())
    };
    let slow = ThrottleConfig {
        wait_put_per_call: Duration::from_millis(50),
        wait_get_per_call: Duration::from_millis(50),
        ..ThrottleConfig::default()
    };
    let store = Store::wrap(
        Arc::new(ThrottledStore::new(moto.client(BUCKET), slow)),
        &settings,
    );
    let key = url().key(Period::Daily, "2026-11-30.tar");
    block_on(store.upload(&big, &key, &sum, None)).unwrap();
    let stat = block_on(store.stat(&key)).unwrap().unwrap();
    assert!(stat.matches(&sum), "{stat:?}");

    // Taken: a second multipart upload under the name is refused before it starts.
    let other = dir.path().join("other.tar");
    std::fs::write(&other, noise(6 << 20, 9)).unwrap();
    let other_sum = remote::sum_file(&other).unwrap();
    let refused = block_on(store.upload(&other, &key, &other_sum, None)).unwrap_err();
    assert_eq!(refused.cause, Cause::Conflict, "{refused}");

    let back = dir.path().join("back.tar");
    let got = block_on(store.download(&key, &back, 64 << 20)).unwrap();
    assert!(got.checksum_verified);
    assert_eq!(remote::sum_file(&back).unwrap(), sum);
}

#[test]
fn the_store_down_during_a_rollup_deletes_nothing_local_and_the_upload_lands_once_it_is_back() {
    let Some(mut moto) = Moto::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(
        dir.path(),
        &[
            "2026-11-30T20:10:00Z",
            "2026-11-30T21:10:00Z",
            "2026-11-30T22:10:00Z",
            "2026-11-30T23:10:00Z",
        ],
    );
    // Archives of four hours (and the day, the month) already on disk, from an earlier run.
    rollup::run(
        &Layout::new(&data, data.join("Saves")),
        &plan(&data),
        NOW.parse().unwrap(),
    )
    .unwrap();
    let hours = [
        "2026-11-30-20.tar.zst",
        "2026-11-30-21.tar.zst",
        "2026-11-30-22.tar.zst",
        "2026-11-30-23.tar.zst",
    ];
    assert_eq!(names(&local_archives(&data), Period::Hourly), hours);
    moto.stop();

    // Keeping 2 hourly archives: 20 and 21 are surplus, but not off-site yet.
    let mut shard = Running::start(shardloop(
        dir.path(),
        &moto,
        &[("SHARD_ARCHIVE__HOURLY_RETENTION", "2")],
    ));
    shard.wait_for("kept until their off-site copy is verified", 1);
    shard.wait_for("off-site upload failed", 3);
    shard.say("save");
    shard.wait_for("world saved", 1);
    shard.wait_for("off-site upload failed", 4);
    shard.offsite_status(&["failures unreachable", "6 waiting", "failing ("]);
    assert_eq!(
        names(&local_archives(&data), Period::Hourly),
        hours,
        "nothing local deleted while the store is down"
    );
    assert!(
        shard
            .seen
            .iter()
            .any(|l| l.contains("off-site upload failed") && l.contains("unreachable")),
        "{:#?}",
        shard.seen
    );

    // The store is back (empty: moto keeps nothing across a restart).
    moto.restart();
    moto.create_bucket(BUCKET);
    shard.wait_for(UPLOADED, 6);
    shard.wait_for("off-site archive deleted by retention", 2);
    shard.wait_for("archives_pruned=2", 1);
    let (exit, log) = shard.stop();
    assert!(exit.success(), "{log:#?}");

    let uploaded_21 = log
        .iter()
        .position(|l| l.contains(UPLOADED) && l.contains("2026-11-30-21"))
        .expect("21 uploaded");
    let pruned = log
        .iter()
        .position(|l| l.contains("archives_pruned=2"))
        .unwrap();
    assert!(uploaded_21 < pruned, "deleted before its upload: {log:#?}");
    let on_disk = local_archives(&data);
    assert_eq!(names(&on_disk, Period::Hourly), &hours[2..]);
    let keys = bucket_keys(&moto);
    for (period, path) in &on_disk {
        let key = url().key(*period, &path.file_name().unwrap().to_string_lossy());
        assert!(keys.contains(&key), "{key} not in {keys:?}");
        let stat = block_on(store(&moto).stat(&key)).unwrap().unwrap();
        assert!(stat.matches(&remote::sum_file(path).unwrap()), "{key}");
    }
    assert_eq!(keys.len(), 4, "the bucket keeps 2 hourly too: {keys:?}");
}

#[test]
fn a_lost_data_directory_comes_back_from_the_bucket_with_the_same_world() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket(BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(
        dir.path(),
        &["2026-11-30T23:20:00Z", "2026-12-01T00:10:00Z"],
    );
    let mut shard = Running::start(shardloop(dir.path(), &moto, &[]));
    shard.wait_for(UPLOADED, 4);
    let (exit, log) = shard.stop();
    assert!(exit.success(), "{log:#?}");
    let hourly = data.join("Archives/Hourly/2026-12-01-00.tar.zst");
    let archived =
        Manifest::parse(&check::manifest(&hourly, Format::TarZst, Default::default()).unwrap())
            .unwrap();

    // The machine is gone: a new one has an empty directory and the same configuration.
    drop(dir);
    let new = tempfile::tempdir().unwrap();
    let mut list = shardloop(new.path(), &moto, &[]);
    let (out, text) = run(list.args(["restore", "--list"]));
    assert!(out.status.success(), "{text}");
    let object = format!("{URL}/Hourly/2026-12-01-00.tar.zst");
    let row = text
        .lines()
        .find(|l| l.contains(&object))
        .unwrap_or_else(|| panic!("{object} not listed:\n{text}"));
    assert!(row.starts_with("remote"), "{row}");
    assert!(row.contains(" 2000 ") && row.contains(" 300 "), "{row}");
    assert!(text.contains("0 backups, 0 archives, 4 off-site"), "{text}");

    let mut restore = shardloop(new.path(), &moto, &[]);
    let (out, text) = run(restore.args(["restore", &object]));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("its SHA-256 as the object records"), "{text}");
    let restored = Manifest::read(&new.path().join("data/Saves")).unwrap();
    assert_eq!(
        (restored.items, restored.mobiles, restored.spawners),
        (archived.items, archived.mobiles, archived.spawners)
    );
    assert_eq!(restored.files, archived.files, "the save's checksums");
    assert!(
        new.path()
            .join("data/Archives/Restored/2026-12-01-00.tar.zst")
            .is_file()
    );

    let mut shard = Running::start(shardloop(new.path(), &moto, &[]));
    shard.wait_for("shard ready", 1);
    let (exit, log) = shard.stop();
    assert!(exit.success(), "{log:#?}");
    let loaded = log
        .iter()
        .find(|l| l.contains("loaded the world save"))
        .expect("the restored save loaded");
    assert!(
        loaded.contains(&format!("items={}", archived.items))
            && loaded.contains(&format!("mobiles={}", archived.mobiles)),
        "{loaded}"
    );
    assert!(
        log.iter().all(|l| !l.contains("off-site archive deleted")),
        "{log:#?}"
    );
}

/// A `.tar` of `entries` (name, bytes), each a regular file; names are written as given
/// (`..` included).
fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, bytes) in entries {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        builder.append(&h, *bytes).unwrap();
    }
    builder.into_inner().unwrap()
}

fn zstd_of(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap()
}

/// The files of the save in `saves`: (name, bytes).
fn save_files(saves: &Path) -> Vec<(String, Vec<u8>)> {
    ["manifest.toml", "items.bin", "mobiles.bin", "spawners.bin"]
        .iter()
        .map(|n| (n.to_string(), std::fs::read(saves.join(n)).unwrap()))
        .collect()
}

#[test]
fn hostile_objects_in_the_bucket_are_refused_as_hostile_files_are() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket(BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path(), &[]);
    let files = save_files(&data.join("Saves"));
    let entries: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    let client = moto.client(BUCKET);
    let key = |name: &str| format!("shard-1/Hourly/{name}");
    let ours = |bytes: Vec<u8>, name: &str| {
        let sha = sha256_of(&bytes);
        put(&client, &key(name), bytes, Some(sha));
    };

    // A bomb: 2 MiB of zeros beside the save, past a 1 MiB limit (uploaded as a shard would,
    // checksum and all: that makes it no more trusted).
    let zeros = vec![0u8; 2 << 20];
    let mut bomb = entries.clone();
    bomb.push(("pad.bin", &zeros));
    ours(zstd_of(&tar_of(&bomb)), "2026-11-30-01.tar.zst");
    // Larger than a restore downloads at that limit: refused before a byte is read.
    ours(noise(3 << 20, 3), "2026-11-30-02.tar");
    // Traversal.
    let mut traversal = entries.clone();
    traversal.push(("../evil", b"x"));
    ours(tar_of(&traversal), "2026-11-30-03.tar");
    // A manifest that lies about the world's size.
    let manifest = String::from_utf8(files[0].1.clone()).unwrap();
    let lie = manifest.replace("items = 2000", "items = 2001");
    assert_ne!(lie, manifest);
    let mut lying = entries.clone();
    lying[0] = ("manifest.toml", lie.as_bytes());
    ours(tar_of(&lying), "2026-11-30-04.tar");
    // A good archive whose recorded checksum is not its bytes'.
    put(
        &client,
        &key("2026-11-30-05.tar"),
        tar_of(&entries),
        Some(sha256_of(b"something else")),
    );

    let limit = [("SHARD_ARCHIVE__MAX_RESTORE_BYTES", "1048576")];
    let before = common::tree::data(&data);
    for (name, why) in [
        ("2026-11-30-01.tar.zst", "archive.max_restore_bytes"),
        ("2026-11-30-02.tar", "refused before downloading"),
        ("2026-11-30-03.tar", "../evil"),
        ("2026-11-30-04.tar", "does not hold a loadable save"),
        ("2026-11-30-05.tar", "the object records"),
    ] {
        let object = format!("{URL}/Hourly/{name}");
        let mut restore = shardloop(dir.path(), &moto, &limit);
        let (out, text) = run(restore.args(["restore", &object]));
        assert_eq!(out.status.code(), Some(2), "{name}: {text}");
        assert!(text.contains(why), "{name}: no {why:?} in {text}");
        assert!(text.contains("nothing was changed"), "{name}: {text}");
        assert_eq!(common::tree::data(&data), before, "{name} changed the data");
        assert_eq!(common::binary::temp_dirs(&data), Vec::<PathBuf>::new());
        assert!(!dir.path().join("evil").exists() && !data.join("evil").exists());
    }

    // Listing reads metadata only: every one is shown, none downloaded.
    let mut list = shardloop(dir.path(), &moto, &limit);
    let (out, text) = run(list.args(["restore", "--list"]));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("5 off-site"), "{text}");
    assert!(text.contains("no manifest in its metadata"), "{text}");
}

#[test]
fn retention_in_the_bucket_deletes_only_the_shards_own_surplus() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket(BUCKET);
    let client = moto.client(BUCKET);
    let archive = b"an older archive".to_vec();
    let sha = sha256_of(&archive);
    // The shard's own, from before: surplus once two newer ones are up.
    for hour in ["18", "19"] {
        let key = format!("shard-1/Hourly/2026-11-30-{hour}.tar.zst");
        put(&client, &key, archive.clone(), Some(sha.clone()));
    }
    // Not the shard's: no checksum a shard writes, or not named as its archives, or under
    // another prefix.
    let foreign = [
        "shard-1/Hourly/2026-11-30-17.tar.zst",
        "shard-1/Hourly/notes.txt",
        "shard-1/Hourly/2026-11-30-16.tar.zst.bak",
        "shard-1/Elsewhere/2026-11-30-15.tar.zst",
        "shard-1-old/Hourly/2026-11-30-14.tar.zst",
    ];
    for key in foreign {
        let sha = (!key.ends_with("17.tar.zst")).then(|| sha.clone());
        put(&client, key, archive.clone(), sha);
    }

    let dir = tempfile::tempdir().unwrap();
    data_dir(
        dir.path(),
        &["2026-11-30T20:10:00Z", "2026-11-30T21:10:00Z"],
    );
    let mut shard = Running::start(shardloop(
        dir.path(),
        &moto,
        &[("SHARD_ARCHIVE__HOURLY_RETENTION", "2")],
    ));
    // Hourly 20 and 21, the day, the month.
    shard.wait_for(UPLOADED, 4);
    shard.wait_for("off-site archive deleted by retention", 2);
    shard.offsite_status(&["2 deleted by retention"]);
    let (exit, log) = shard.stop();
    assert!(exit.success(), "{log:#?}");

    let keys = bucket_keys(&moto);
    let mut expected: Vec<String> = foreign.iter().map(|k| k.to_string()).collect();
    expected.extend(
        [
            "shard-1/Daily/2026-11-30.tar.zst",
            "shard-1/Hourly/2026-11-30-20.tar.zst",
            "shard-1/Hourly/2026-11-30-21.tar.zst",
            "shard-1/Monthly/2026-11.tar.zst",
        ]
        .map(String::from),
    );
    expected.sort();
    assert_eq!(keys, expected);
    let deleted: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("off-site archive deleted by retention"))
        .collect();
    assert!(
        deleted[0].contains("2026-11-30-18") && deleted[1].contains("2026-11-30-19"),
        "{deleted:#?}"
    );
}

#[test]
fn check_config_shows_the_remote_section_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "wJalrXUtnFEMI-K7MDENG-not-a-real-secret";
    let mut cmd = common::binary::shardloop(dir.path(), (2_000, 300));
    cmd.env("SHARD_ARCHIVE__REMOTE__URL", URL)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEYID")
        .env("AWS_DEFAULT_REGION", "eu-central-1")
        .arg("check-config");
    let (out, text) = run(&mut cmd);
    assert!(out.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("archive.remote.url = \"{URL}\""))),
        "{text}"
    );
    assert!(text.contains("AWS_SECRET_ACCESS_KEY=(redacted)"), "{text}");
    assert!(
        text.contains("AWS_DEFAULT_REGION=\"eu-central-1\""),
        "{text}"
    );
    assert!(
        !text.contains(secret) && !text.contains("AKIAEXAMPLEKEYID"),
        "{text}"
    );

    let mut bad = common::binary::shardloop(dir.path(), (2_000, 300));
    bad.env("SHARD_ARCHIVE__REMOTE__URL", "s3://Not_A_Bucket/x")
        .arg("check-config");
    let (out, text) = run(&mut bad);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("archive.remote.url"), "{text}");
}
