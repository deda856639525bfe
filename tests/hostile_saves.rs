//! Hostile saves against the real binary: a save of the default world (or of a small one)
//! changed the way an attacker would — a count no file can hold, an oversized manifest, a
//! data file larger than the manifest says, a 100k-deep container chain, a spawner asking for
//! 65535 spawns, a mobile off the map — makes the shard exit 2 with a message naming the
//! file, the entity and the limit, and leaves every byte on disk as it was. And crash
//! recovery orders saves by their sequence number, not by a clock that can lie.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;
use std::time::Duration;

use shardloop::persist::{self, Layout, Snapshot};
use shardloop::world::{self, Item, Location, MapId, Serial};

mod common;
use common::binary::shardloop;
use common::deadline::run_within;

/// Generous: a refused start takes well under a second.
const PATIENCE: Duration = Duration::from_secs(60);
const CREATED: &str = "2026-12-03T10:00:00Z";

/// A save of the default world (190,728 items, 33,158 mobiles), written once per test run
/// through the library's saver: what a shard writes. Copied for each test.
fn default_save() -> &'static Path {
    static SAVE: OnceLock<tempfile::TempDir> = OnceLock::new();
    SAVE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let world = world::generate_default(world::DEFAULT_SEED);
        write_save(dir.path(), Snapshot::take(&world, stamp(CREATED), |_| true));
        dir
    })
    .path()
}

fn stamp(text: &str) -> jiff::Timestamp {
    text.parse().unwrap()
}

/// Writes `snapshot` as `data_dir/Saves` (whatever it holds: no check is made on writing).
fn write_save(data_dir: &Path, snapshot: Snapshot) -> persist::Saved {
    let layout = Layout::new(data_dir, data_dir.join("Saves"));
    persist::save::write(&layout, snapshot, 2).unwrap()
}

/// A data directory holding a copy of the default world's save.
fn copy_of_default() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let saves = dir.path().join("Saves");
    std::fs::create_dir(&saves).unwrap();
    for entry in std::fs::read_dir(default_save().join("Saves")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), saves.join(entry.file_name())).unwrap();
    }
    dir
}

/// A data directory holding a save of a small generated world, changed by `hostile` first.
fn small_save_with(hostile: impl FnOnce(&mut Snapshot)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let world = world::generate(21, 3000, 400);
    let mut snapshot = Snapshot::take(&world, stamp(CREATED), |_| true);
    hostile(&mut snapshot);
    write_save(dir.path(), snapshot);
    dir
}

/// Every file under `dir`, relative, sorted, with its bytes — except the shard's lock file,
/// which every start creates (it is not part of any save).
fn tree(dir: &Path) -> Vec<common::tree::Entry> {
    common::tree::data(dir)
}

/// Starts the shard on `data_dir`; returns what it printed once it exited.
fn start(data_dir: &Path) -> Output {
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = shardloop(cwd.path(), (100, 10));
    cmd.arg("--data-dir").arg(data_dir);
    run_within(&mut cmd, PATIENCE)
}

/// Starts the shard on `data_dir` and checks it refuses to start: exit 2, every text in
/// `says` in its message, and nothing on disk changed.
fn refused_at_start(data_dir: &Path, says: &[&str]) {
    let before = tree(data_dir);
    let out = start(data_dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit 2, not a crash: {stderr}");
    for text in says {
        assert!(stderr.contains(text), "expected {text:?} in: {stderr}");
    }
    assert!(
        stderr.contains("Nothing was changed or deleted"),
        "the promise is made: {stderr}"
    );
    assert!(tree(data_dir) == before, "nothing on disk changed");
}

fn edit_manifest(data_dir: &Path, f: impl FnOnce(String) -> String) {
    let path = data_dir.join("Saves").join("manifest.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, f(text)).unwrap();
}

#[test]
fn a_count_no_file_could_hold_is_refused_before_anything_is_allocated() {
    let data = copy_of_default();
    edit_manifest(data.path(), |text| {
        let line = format!("items = {}", world::DEFAULT_ITEMS);
        assert!(text.contains(&line), "{text}");
        text.replace(&line, "items = 9223372036854775807")
    });
    refused_at_start(
        data.path(),
        &[
            "manifest.toml",
            "`[counts] items = 9223372036854775807` cannot be true",
            "one takes at least 22 bytes",
        ],
    );
}

#[test]
fn a_manifest_over_its_size_cap_is_refused() {
    let data = copy_of_default();
    edit_manifest(data.path(), |text| text + &"# padding\n".repeat(7000));
    refused_at_start(data.path(), &["manifest.toml", "65536-byte cap"]);
}

#[test]
fn a_data_file_longer_than_the_manifest_says_is_refused_before_it_is_read() {
    let data = copy_of_default();
    let items = data.path().join("Saves").join("items.bin");
    let mut bytes = std::fs::read(&items).unwrap();
    bytes.extend(std::iter::repeat_n(0u8, 4096));
    std::fs::write(&items, bytes).unwrap();
    refused_at_start(
        data.path(),
        &["items.bin", "bytes on disk; the manifest says"],
    );
}

#[test]
fn a_100k_deep_container_chain_is_refused_with_the_depth_limit() {
    let data = small_save_with(|snapshot| {
        let mut parent = None;
        let first = snapshot.next_item_serial.0;
        for i in 0..100_000 {
            let mut bag = Item::new(Serial(first + i), 0x0E75);
            bag.container = true;
            match parent {
                Some(p) => bag.parent = Some(p),
                None => {
                    bag.location = Location::new(1000, 1000, 0, MapId::FELUCCA);
                    bag.decays = true;
                }
            }
            parent = Some(bag.serial);
            snapshot.items.push(bag);
        }
        snapshot.next_item_serial = Serial(first + 100_000);
    });
    refused_at_start(
        data.path(),
        &["items.bin", "item 0x", "sits more than 32 containers deep"],
    );
}

#[test]
fn a_spawner_asking_for_65535_spawns_is_refused_naming_it() {
    let mut serial = None;
    let data = small_save_with(|snapshot| {
        let spawner = snapshot
            .spawners
            .first_mut()
            .expect("the world has spawners");
        spawner.max = 65535;
        serial = Some(spawner.serial);
    });
    let named = format!("spawner {}", serial.unwrap());
    refused_at_start(
        data.path(),
        &[
            "spawners.bin",
            &named,
            "65535 spawns alive; the limit is 256",
        ],
    );
}

#[test]
fn a_mobile_off_the_map_is_refused_naming_it() {
    let mut serial = None;
    let data = small_save_with(|snapshot| {
        let mobile = snapshot.mobiles.first_mut().unwrap();
        mobile.location = Location::new(60_000, 5, 0, MapId::FELUCCA);
        serial = Some(mobile.serial);
    });
    let named = format!("mobile {}", serial.unwrap());
    refused_at_start(
        data.path(),
        &[
            "mobiles.bin",
            &named,
            "(60000, 5, 0) on map 0",
            "outside the map bounds",
        ],
    );
}

#[test]
fn restoring_an_archive_with_a_hostile_count_is_refused_not_a_crash() {
    if !common::tools::need(&["tar"]) {
        return;
    }
    let data = copy_of_default();
    let hostile = tempfile::tempdir().unwrap();
    let saves = hostile.path().join("Saves");
    std::fs::create_dir(&saves).unwrap();
    for entry in std::fs::read_dir(data.path().join("Saves")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), saves.join(entry.file_name())).unwrap();
    }
    edit_manifest(hostile.path(), |text| {
        text.replace(
            &format!("mobiles = {}", world::DEFAULT_MOBILES),
            "mobiles = 9223372036854775807",
        )
    });
    let archive = hostile.path().join("hostile.tar");
    let tar = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(hostile.path())
        .arg("Saves")
        .status()
        .expect("run tar");
    assert!(tar.success());

    let before = tree(data.path());
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = shardloop(cwd.path(), (100, 10));
    cmd.arg("--data-dir")
        .arg(data.path())
        .arg("restore")
        .arg(&archive);
    let out = run_within(&mut cmd, PATIENCE);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "refused, not a panic: {stderr}");
    assert!(
        stderr.contains("`[counts] mobiles = 9223372036854775807` cannot be true"),
        "{stderr}"
    );
    assert!(
        tree(data.path()) == before,
        "nothing changed, no temp copy left"
    );
    assert!(archive.is_file(), "the archive stays where it was");
}

/// Sets the sequence number in the manifest of the save in `dir`.
fn set_sequence(dir: &Path, sequence: u64) {
    let path = dir.join("manifest.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let at = text.find("sequence = ").unwrap();
    let end = at + text[at..].find('\n').unwrap();
    let text = format!("{}sequence = {sequence}{}", &text[..at], &text[end..]);
    std::fs::write(&path, text).unwrap();
}

/// A data directory whose `Saves/` holds a save of sequence `current` created `now`, and a
/// complete save left under a temp name (as a crash in the middle of a swap leaves it) of
/// sequence `left` created `left_created`. Returns it and the temp directory's path.
fn interrupted_swap(current: (u64, &str), left: (u64, &str)) -> (tempfile::TempDir, PathBuf) {
    let data = tempfile::tempdir().unwrap();
    let world = world::generate(8, 500, 50);
    write_save(
        data.path(),
        Snapshot::take(&world, stamp(current.1), |_| true),
    );
    set_sequence(&data.path().join("Saves"), current.0);
    let scratch = tempfile::tempdir().unwrap();
    write_save(
        scratch.path(),
        Snapshot::take(&world, stamp(left.1), |_| true),
    );
    let temp = data.path().join(".tmp-save-999-0-0");
    std::fs::rename(scratch.path().join("Saves"), &temp).unwrap();
    set_sequence(&temp, left.0);
    (data, temp)
}

/// Runs the startup recovery through the binary: `shardloop restore` does exactly what a
/// start does first, then refuses the missing archive named (exit 2).
fn recover_through_the_binary(data_dir: &Path) -> String {
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = shardloop(cwd.path(), (100, 10));
    cmd.arg("--data-dir")
        .arg(data_dir)
        .arg("restore")
        .arg(data_dir.join("no-such-archive.tar"));
    let out = run_within(&mut cmd, PATIENCE);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn current(data_dir: &Path) -> persist::Manifest {
    persist::Manifest::read(&data_dir.join("Saves")).unwrap()
}

#[test]
fn recovery_keeps_the_newer_save_when_the_older_one_is_dated_in_the_future() {
    // The older save (sequence 4) carries a date in 2099: ordering by the clock would put it
    // back in place of the newer one.
    let (data, temp) = interrupted_swap((5, "2026-12-03T10:00:00Z"), (4, "2099-01-01T00:00:00Z"));
    let said = recover_through_the_binary(data.path());
    let now = current(data.path());
    assert_eq!(
        (now.sequence, now.created),
        (5, stamp("2026-12-03T10:00:00Z"))
    );
    assert!(!temp.exists());
    let backup = data.path().join("Backups/Automatic/2099-01-01-00-00-00");
    assert!(backup.join("backup.complete").is_file(), "{said}");
    assert_eq!(persist::Manifest::read(&backup).unwrap().sequence, 4);
}

#[test]
fn recovery_finishes_the_swap_of_a_newer_save_dated_before_the_current_one() {
    // The clock stepped back an hour between the two saves: the newer one (sequence 6) looks
    // older by its date, and must still win.
    let (data, temp) = interrupted_swap((5, "2026-12-03T10:00:00Z"), (6, "2026-12-03T09:00:00Z"));
    let said = recover_through_the_binary(data.path());
    assert!(said.contains("(sequence 6) in place"), "{said}");
    let now = current(data.path());
    assert_eq!(
        (now.sequence, now.created),
        (6, stamp("2026-12-03T09:00:00Z"))
    );
    assert!(!temp.exists());
    let backup = data.path().join("Backups/Automatic/2026-12-03-10-00-00");
    assert_eq!(persist::Manifest::read(&backup).unwrap().sequence, 5);
}

#[test]
fn each_save_is_one_after_the_save_it_replaces() {
    let data = tempfile::tempdir().unwrap();
    let world = world::generate(8, 500, 50);
    let first = write_save(
        data.path(),
        Snapshot::take(&world, stamp(CREATED), |_| true),
    );
    assert_eq!(first.manifest.sequence, 1, "the first save of a new world");
    set_sequence(&data.path().join("Saves"), 41);
    // Even dated earlier (a clock stepped back), the next save follows the one it replaces.
    let next = write_save(
        data.path(),
        Snapshot::take(&world, stamp("2020-01-01T00:00:00Z"), |_| true),
    );
    assert_eq!(next.manifest.sequence, 42);
    assert_eq!(current(data.path()).sequence, 42);
}
