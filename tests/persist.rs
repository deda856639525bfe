//! World saves: round trips, byte-identical re-saves, damaged saves refused with the file
//! named, crash leftovers recovered, and the saver's one-at-a-time rule.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use jiff::Timestamp;
use shardloop::EventLoop;
use shardloop::persist::{self, Clock, Layout, Notice, Request, Saver, SaverConfig, Snapshot};
use shardloop::world::{self, Mobile, World};

mod common;
use common::binary::temp_dirs;

const CREATED: &str = "2026-12-03T10:00:00Z";

fn small_world() -> World {
    world::generate(42, 3000, 400)
}

fn layout(root: &Path) -> Layout {
    Layout::new(root, root.join("Saves"))
}

fn save(layout: &Layout, world: &World, created: &str) -> persist::Saved {
    let snapshot = Snapshot::take(world, created.parse().unwrap(), |_| true);
    persist::save::write(layout, snapshot, 2).unwrap()
}

/// Every file under `dir`, relative, sorted, with its bytes.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.push((path.strip_prefix(dir).unwrap().to_path_buf(), bytes));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_saved_world_loads_back_equal_and_saves_to_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    let world = small_world();
    let saved = save(&layout, &world, CREATED);
    assert_eq!(saved.manifest.items, world.item_count() as u64);
    assert_eq!(saved.replaced, persist::Replaced::Nothing);

    let loaded = persist::load(&layout.saves).unwrap();
    assert_eq!(loaded.world, world, "entities, spawners and serial cursors");
    let first = tree(&layout.saves);

    let other = tempfile::tempdir().unwrap();
    let again = self::layout(other.path());
    save(&again, &loaded.world, CREATED);
    assert_eq!(
        tree(&again.saves),
        first,
        "save → load → save is byte-identical"
    );
}

#[test]
fn the_byte_layout_does_not_depend_on_the_number_of_workers() {
    let world = small_world();
    let mut trees = Vec::new();
    for threads in [1, 3] {
        let dir = tempfile::tempdir().unwrap();
        let layout = layout(dir.path());
        let snapshot = Snapshot::take(&world, CREATED.parse().unwrap(), |_| true);
        persist::save::write(&layout, snapshot, threads).unwrap();
        trees.push(tree(&layout.saves));
    }
    assert_eq!(trees[0], trees[1]);
}

#[test]
fn a_new_save_moves_the_old_one_to_backups_with_a_marker() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    let mut world = small_world();
    save(&layout, &world, CREATED);
    let old = tree(&layout.saves);
    let gone = world.mobiles().next().unwrap().serial;
    world.remove_mobile(gone);
    let saved = save(&layout, &world, "2026-12-03T11:00:00Z");

    let backup = saved
        .replaced
        .backup()
        .expect("the first save became a backup")
        .to_owned();
    assert_eq!(backup, layout.backups.join("2026-12-03-10-00-00"));
    assert!(backup.join(persist::layout::BACKUP_MARKER).is_file());
    let mut backed_up = tree(&backup);
    backed_up.retain(|(p, _)| p != Path::new(persist::layout::BACKUP_MARKER));
    assert_eq!(backed_up, old);
    assert_eq!(persist::load(&layout.saves).unwrap().world, world);
    assert_eq!(temp_dirs(dir.path()), Vec::<PathBuf>::new());
}

/// Damages a copy of a good save with `damage`, loads it, and checks the error names `file`
/// and contains `says`, and that loading changed nothing on disk.
fn refused(damage: impl FnOnce(&Path), file: &str, says: &str) {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    save(&layout, &small_world(), CREATED);
    damage(&layout.saves);
    let before = tree(dir.path());
    let err = persist::load(&layout.saves).unwrap_err();
    assert!(err.file.ends_with(file), "{err}");
    assert!(err.reason.contains(says), "expected {says:?} in: {err}");
    assert!(err.to_string().contains(file), "{err}");
    assert_eq!(
        tree(dir.path()),
        before,
        "loading must not change or delete anything"
    );
}

fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_truncated_file_is_refused_naming_it() {
    // Caught by its size on disk before a byte of it is read.
    refused(
        |s| edit(&s.join("items.bin"), |b| b.truncate(b.len() / 2)),
        "items.bin",
        "bytes on disk; the manifest says",
    );
    refused(
        |s| edit(&s.join("spawners.bin"), |b| b.truncate(7)),
        "spawners.bin",
        "is 7 bytes on disk",
    );
}

#[test]
fn a_flipped_bit_is_refused_naming_the_file() {
    refused(
        |s| edit(&s.join("mobiles.bin"), |b| b[100] ^= 1),
        "mobiles.bin",
        "checksum",
    );
}

#[test]
fn a_missing_or_damaged_manifest_is_refused() {
    refused(
        |s| std::fs::remove_file(s.join("manifest.toml")).unwrap(),
        "manifest.toml",
        "cannot read",
    );
    refused(
        |s| edit(&s.join("manifest.toml"), |b| b.truncate(b.len() - 30)),
        "manifest.toml",
        "not valid TOML",
    );
}

#[test]
fn a_file_from_another_save_is_refused() {
    let other = tempfile::tempdir().unwrap();
    let other_layout = layout(other.path());
    save(&other_layout, &world::generate(7, 3000, 400), CREATED);
    let foreign = other_layout.saves.join("items.bin");
    refused(
        |s| {
            std::fs::copy(&foreign, s.join("items.bin")).unwrap();
        },
        "items.bin",
        "does not match the manifest",
    );
}

#[test]
fn a_missing_data_file_is_refused() {
    refused(
        |s| std::fs::remove_file(s.join("mobiles.bin")).unwrap(),
        "mobiles.bin",
        "cannot read",
    );
}

#[test]
fn startup_recovery_removes_unfinished_saves_and_keeps_finished_ones() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    let world = small_world();
    save(&layout, &world, CREATED);

    // An unfinished save: files but no manifest.
    let unfinished = layout.create_temp_dir("save").unwrap();
    std::fs::write(unfinished.join("items.bin"), b"half").unwrap();
    // A replaced save caught between the swap and its move to Backups/: older, complete.
    let older = tempfile::tempdir().unwrap();
    save(&self::layout(older.path()), &world, "2026-12-03T09:00:00Z");
    let caught = layout.create_temp_dir("save").unwrap();
    std::fs::remove_dir(&caught).unwrap();
    std::fs::rename(older.path().join("Saves"), &caught).unwrap();

    let done = layout.recover().unwrap();
    assert_eq!(done.len(), 2, "{done:?}");
    assert_eq!(temp_dirs(dir.path()), Vec::<PathBuf>::new());
    let backup = layout.backups.join("2026-12-03-09-00-00");
    assert!(backup.join("manifest.toml").is_file(), "{done:?}");
    assert_eq!(
        persist::load(&layout.saves).unwrap().manifest.created,
        CREATED.parse::<Timestamp>().unwrap()
    );
}

/// `world` saved as created at `created` in a data directory of its own (kept while the
/// first value lives); returns its `Saves/`.
fn save_elsewhere(world: &World, created: &str) -> (tempfile::TempDir, PathBuf) {
    let elsewhere = tempfile::tempdir().unwrap();
    let layout = layout(elsewhere.path());
    save(&layout, world, created);
    (elsewhere, layout.saves)
}

/// Moves the save in `dir` into a new temp directory of `layout`'s, as a crash during a swap
/// leaves one; returns where.
fn into_temp_dir(layout: &Layout, dir: &Path) -> PathBuf {
    let temp = layout.create_temp_dir("save").unwrap();
    std::fs::remove_dir(&temp).unwrap();
    std::fs::rename(dir, &temp).unwrap();
    temp
}

/// A temp directory whose manifest reads but whose files are not the sizes it names is not a
/// complete save: recovery never puts it in place of a good one (load would refuse it), it
/// removes it as unfinished, saying why.
#[test]
fn startup_recovery_never_promotes_a_temp_save_whose_files_disagree_with_its_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    let world = small_world();
    save(&layout, &world, CREATED);
    // A newer save in a temp directory (as a swap interrupted by a crash leaves it), but with
    // a data file cut short.
    let (_elsewhere, saved) = save_elsewhere(&world, "2026-12-03T11:00:00Z");
    let newer = into_temp_dir(&layout, &saved);
    assert_eq!(layout.order_after_current(&newer).unwrap().sequence, 2);
    let items = newer.join("items.bin");
    let len = std::fs::metadata(&items).unwrap().len();
    std::fs::File::options()
        .write(true)
        .open(&items)
        .unwrap()
        .set_len(len / 2)
        .unwrap();

    let done = layout.recover().unwrap();
    assert_eq!(temp_dirs(dir.path()), Vec::<PathBuf>::new(), "{done:?}");
    assert!(
        matches!(done.as_slice(), [line] if line.starts_with("removed unfinished")
            && line.contains("items.bin: is")),
        "{done:?}"
    );
    let loaded = persist::load(&layout.saves).expect("the good save, still in place");
    assert_eq!(loaded.manifest.sequence, 1);
    assert!(!layout.backups.exists(), "nothing was moved to Backups/");
}

/// With an absolute `world.save_dir` (`/var/lib/world`), the directory holding `Saves/` is
/// shared with other programs: recovery finishes or removes only the temp directories a shard
/// makes, never another program's `.tmp-*`, finished or not.
#[test]
fn startup_recovery_leaves_other_programs_temp_directories_alone() {
    let shared = tempfile::tempdir().unwrap(); // `/var/lib`
    let layout = Layout::new(&shared.path().join("data"), shared.path().join("world"));
    let world = small_world();
    save(&layout, &world, CREATED);
    let theirs: Vec<PathBuf> = [
        ".tmp-apt-1a2b3c",
        ".tmp-12345",
        ".tmp-save-build",
        ".tmp-restored-1-2",
        ".tmp-saves-1-2-3",
    ]
    .iter()
    .map(|name| shared.path().join(name))
    .collect();
    for dir in &theirs {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("state"), b"someone else's").unwrap();
    }
    // One with a manifest, as a save of ours would have.
    std::fs::copy(
        layout.saves.join("manifest.toml"),
        theirs[0].join("manifest.toml"),
    )
    .unwrap();
    let ours = layout.create_temp_dir("save").unwrap();

    let done = layout.recover().unwrap();
    assert_eq!(done, [format!("removed unfinished {}", ours.display())]);
    for dir in &theirs {
        assert_eq!(
            std::fs::read(dir.join("state")).unwrap(),
            b"someone else's",
            "{}",
            dir.display()
        );
    }
    assert_eq!(persist::load(&layout.saves).unwrap().world, world);
}

#[test]
fn startup_recovery_puts_a_finished_save_in_place_when_saves_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    let world = small_world();
    save(&layout, &world, CREATED);
    // A crash between the two renames of the fallback swap: no Saves/, the save in a temp dir.
    let staged = layout.create_temp_dir("save").unwrap();
    std::fs::remove_dir(&staged).unwrap();
    std::fs::rename(&layout.saves, &staged).unwrap();

    layout.recover().unwrap();
    assert_eq!(persist::load(&layout.saves).unwrap().world, world);
    assert_eq!(temp_dirs(dir.path()), Vec::<PathBuf>::new());
}

/// What an operator may drop into `Saves/`: an archive to restore at the next start, a folder
/// of notes. Returns each entry's path relative to `Saves/` with its bytes.
fn drop_into(saves: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    std::fs::write(saves.join("w.tar.zst"), b"an archive to restore").unwrap();
    std::fs::create_dir(saves.join("notes")).unwrap();
    std::fs::write(saves.join("notes/why.txt"), b"kept on purpose").unwrap();
    vec![
        (PathBuf::from("notes/why.txt"), b"kept on purpose".to_vec()),
        (
            PathBuf::from("w.tar.zst"),
            b"an archive to restore".to_vec(),
        ),
    ]
}

/// The files of a save (with a backup's marker), and nothing else.
fn only_save_files(dir: &Path) {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            persist::layout::BACKUP_MARKER,
            "items.bin",
            "manifest.toml",
            "mobiles.bin",
            "spawners.bin"
        ],
        "{}",
        dir.display()
    );
}

/// Files dropped into `Saves/` are not the save's: a save leaves them in `Saves/` instead of
/// sending them to `Backups/` with the save they sat beside (where retention would delete them
/// one day), save after save.
#[test]
fn files_dropped_into_saves_stay_there_and_never_reach_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    let world = small_world();
    save(&layout, &world, CREATED);
    let dropped = drop_into(&layout.saves);

    let mut backups = Vec::new();
    for created in ["2026-12-03T11:00:00Z", "2026-12-03T12:00:00Z"] {
        let saved = save(&layout, &world, created);
        backups.push(saved.replaced.backup().expect("backed up").to_owned());
        let kept: Vec<_> = tree(&layout.saves)
            .into_iter()
            .filter(|(name, _)| dropped.iter().any(|(d, _)| d == name))
            .collect();
        assert_eq!(kept, dropped, "still in Saves/ after the save of {created}");
        assert_eq!(persist::load(&layout.saves).unwrap().world, world);
    }
    for backup in &backups {
        only_save_files(backup);
    }
    // Retention deletes backups: what was dropped is not in them.
    std::fs::remove_dir_all(&layout.backups).unwrap();
    assert_eq!(tree(&layout.saves).len(), 4 + dropped.len());
}

/// A crash right after the swap leaves the replaced save, with what was dropped beside it, in
/// a temp directory: the next start sends the save to `Backups/` and what was dropped back to
/// `Saves/`, beside a file of the same name dropped since (nothing is overwritten).
#[test]
fn startup_recovery_sends_files_left_in_a_replaced_save_back_to_saves() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    let world = small_world();
    save(&layout, &world, CREATED);
    let dropped = drop_into(&layout.saves);
    // The exchange done, the crash before the replaced save moved: it is in a temp directory
    // (older), the newer save in `Saves/`.
    into_temp_dir(&layout, &layout.saves);
    let (_elsewhere, saved) = save_elsewhere(&world, "2026-12-03T11:00:00Z");
    std::fs::rename(saved, &layout.saves).unwrap();
    layout.order_after_current(&layout.saves).unwrap();
    assert_eq!(layout.current_sequence(), 2, "after the old save's 1");
    // Dropped again meanwhile, under the same name.
    std::fs::write(layout.saves.join("w.tar.zst"), b"dropped again").unwrap();

    let done = layout.recover().unwrap();
    assert_eq!(temp_dirs(dir.path()), Vec::<PathBuf>::new(), "{done:?}");
    let [backup] = std::fs::read_dir(&layout.backups)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();
    only_save_files(&backup);
    let in_saves = tree(&layout.saves);
    for (name, bytes) in dropped {
        let name = match name.to_str() {
            Some("w.tar.zst") => PathBuf::from("w.tar.zst.2"),
            _ => name,
        };
        assert!(
            in_saves.contains(&(name.clone(), bytes)),
            "{name:?}: {done:?}"
        );
    }
    assert!(in_saves.contains(&(PathBuf::from("w.tar.zst"), b"dropped again".to_vec())));
    assert_eq!(
        persist::load(&layout.saves).unwrap().manifest.created,
        "2026-12-03T11:00:00Z".parse::<Timestamp>().unwrap()
    );
}

fn saver_on(world: Rc<RefCell<World>>, root: &Path, notices: Rc<RefCell<Vec<String>>>) -> Saver {
    Saver::new(
        world,
        SaverConfig {
            layout: layout(root),
            threads: 1,
            clock: Clock::System,
            keep: Box::new(|_: &Mobile| true),
            notices: Box::new(move |n: &Notice| notices.borrow_mut().push(n.to_string())),
        },
    )
}

#[tokio::test]
async fn requests_during_a_save_fold_into_one_queued_save() {
    let dir = tempfile::tempdir().unwrap();
    let world = Rc::new(RefCell::new(small_world()));
    let notices = Rc::new(RefCell::new(Vec::new()));
    let mut event_loop = EventLoop::builder()
        .idle_wait(Duration::from_millis(5))
        .build();
    let saver_world = world.clone();
    let root = dir.path().to_path_buf();
    let heard = notices.clone();
    event_loop
        .run_until(async move {
            let saver = saver_on(saver_world, &root, heard);
            assert_eq!(saver.request(), Request::Started);
            assert_eq!(saver.request(), Request::Queued);
            assert_eq!(saver.request(), Request::Queued);
            assert!(saver.is_writing());
            saver.idle().await;
            assert_eq!(saver.finished(), 2, "one save and one queued behind it");
            let report = saver.save().await.unwrap();
            assert_eq!(saver.finished(), 3);
            assert_eq!(report.items, 3000);
        })
        .await;
    let heard = notices.borrow();
    assert_eq!(heard.iter().filter(|n| n.contains("is saving")).count(), 3);
    assert_eq!(heard.iter().filter(|n| n.contains("completed")).count(), 3);
    assert_eq!(
        std::fs::read_dir(dir.path().join("Backups/Automatic"))
            .unwrap()
            .count(),
        2
    );
}

#[test]
fn startup_recovery_marks_a_backup_moved_but_not_yet_marked() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    let world = small_world();
    save(&layout, &world, CREATED);
    let saved = save(&layout, &world, "2026-12-03T11:00:00Z");
    let backup = saved.replaced.backup().unwrap().to_owned();
    let marker = backup.join(persist::layout::BACKUP_MARKER);
    std::fs::remove_file(&marker).unwrap(); // a crash between the move and the marker

    let done = layout.recover().unwrap();
    assert!(marker.is_file(), "{done:?}");
    assert_eq!(done.len(), 1, "{done:?}");
    assert!(
        layout.recover().unwrap().is_empty(),
        "nothing left to do the second time"
    );
}

#[test]
fn startup_recovery_treats_an_empty_saves_as_missing() {
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    let world = small_world();
    save(&layout, &world, CREATED);
    // A restore interrupted with its checked save in a temp dir and `Saves/` emptied.
    let staged = layout.create_temp_dir("restored").unwrap();
    std::fs::remove_dir(&staged).unwrap();
    std::fs::rename(&layout.saves, &staged).unwrap();
    std::fs::create_dir(&layout.saves).unwrap();

    layout.recover().unwrap();
    assert_eq!(persist::load(&layout.saves).unwrap().world, world);
    assert_eq!(temp_dirs(dir.path()), Vec::<PathBuf>::new());
}

/// Two writers of one save directory in this process (the autosave still writing when a fault
/// takes the final save) go one after the other: each save orders after the one it replaced,
/// so the one written last is the one in place, and no two saves share a sequence number.
#[test]
fn concurrent_writes_of_one_save_directory_get_distinct_sequences() {
    const WRITERS: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let layout = layout(dir.path());
    let world = world::generate(7, 200, 20);
    let start = std::sync::Barrier::new(WRITERS);
    let mut sequences: Vec<u64> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|_| {
                let (layout, start) = (layout.clone(), &start);
                let snapshot = Snapshot::take(&world, CREATED.parse().unwrap(), |_| true);
                s.spawn(move || {
                    start.wait();
                    persist::save::write(&layout, snapshot, 1)
                        .unwrap()
                        .manifest
                        .sequence
                })
            })
            .collect();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    sequences.sort_unstable();
    assert_eq!(sequences, (1..=WRITERS as u64).collect::<Vec<_>>());
    assert_eq!(
        layout.current_sequence(),
        WRITERS as u64,
        "the last save is in place"
    );
}
