//! A save that fails half way through writing leaves nothing half-written, and the next save
//! is complete.
//!
//! The failure is real: the process's file-size limit (`RLIMIT_FSIZE`) is lowered so that
//! the save's first data file fits and the second is cut off by the kernel (`EFBIG`) in the
//! middle of its write. The limit is the whole process's, so this file holds this one test.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use shardloop::persist::{self, Clock, Layout, Notice, Saver, SaverConfig, Snapshot};
use shardloop::world::{self, Item, Location, MapId, Mobile, World};
use shardloop::{EventLoop, timer};

/// Sets the soft limit on the size of any file this process writes.
fn limit_file_size(bytes: libc::rlim_t) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads into a local of the right type.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) };
    assert_eq!(read, 0);
    limit.rlim_cur = bytes.min(limit.rlim_max);
    // SAFETY: sets this process's own soft limit from a valid struct.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &limit) };
    assert_eq!(set, 0);
}

fn everything_under(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

fn copy(world: &World) -> Snapshot {
    let mut s = Snapshot::take(world, "2026-12-05T08:00:00Z".parse().unwrap(), |_| true);
    s.sort();
    s
}

fn loaded(saves: &Path) -> Snapshot {
    copy(&persist::load(saves).unwrap().world)
}

fn assert_same(got: Snapshot, want: &Snapshot) {
    assert_eq!(got.items, want.items);
    assert_eq!(got.mobiles, want.mobiles);
    assert_eq!(got.spawners, want.spawners);
    assert_eq!(got.next_item_serial, want.next_item_serial);
}

fn add_rock(world: &mut World) {
    let mut rock = Item::new(world.new_item_serial(), 0x1363);
    rock.location = Location {
        map: MapId::FELUCCA,
        x: 10,
        y: 10,
        z: 0,
    };
    world.add_item(rock).unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_save_cut_off_mid_write_leaves_the_last_save_and_the_next_one_is_complete() {
    // SAFETY: ignoring a signal process-wide; the kernel then fails the write with EFBIG
    // instead of killing the process.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    // Items (22 bytes each) ~66 KB; mobiles (~45 bytes each) ~135 KB.
    let world = Rc::new(RefCell::new(world::generate(9, 3_000, 3_000)));
    let failures = Rc::new(RefCell::new(0));
    let seen = failures.clone();
    let saver = Saver::new(
        world.clone(),
        SaverConfig {
            layout: layout.clone(),
            threads: 1,
            clock: Clock::System,
            keep: Box::new(|_: &Mobile| true),
            notices: Box::new(move |n: &Notice| {
                if matches!(n, Notice::Failed(_)) {
                    *seen.borrow_mut() += 1;
                }
            }),
        },
    );
    let mut event_loop = EventLoop::new();
    let (w, saves) = (world.clone(), layout.saves.clone());
    let root = dir.path().to_path_buf();
    event_loop
        .run_until(async move {
            saver.save().await.unwrap();
            let first = copy(&w.borrow());
            let before = everything_under(&root);
            let first_files = everything_under(&saves);
            let items_bin = std::fs::metadata(saves.join("items.bin")).unwrap().len();
            let mobiles_bin = std::fs::metadata(saves.join("mobiles.bin")).unwrap().len();
            assert!(items_bin + 4096 < mobiles_bin, "{items_bin} {mobiles_bin}");

            add_rock(&mut w.borrow_mut());
            limit_file_size(items_bin + 4096);
            let failed = saver.save().await.unwrap_err();
            limit_file_size(libc::RLIM_INFINITY);
            let said = failed.to_string();
            assert!(said.contains("mobiles.bin"), "{said}");
            assert_eq!(everything_under(&root), before, "nothing left behind");
            assert_eq!(everything_under(&saves), first_files);
            assert_same(loaded(&saves), &first);

            timer::pause(100).await;
            add_rock(&mut w.borrow_mut());
            let report = saver.save().await.unwrap();
            let second = copy(&w.borrow());
            assert_eq!(report.items, second.items.len() as u64);
            assert_same(loaded(&saves), &second);
            assert_eq!(persist::load(&saves).unwrap().manifest.sequence, 2);
        })
        .await;
    assert_eq!(*failures.borrow(), 1);
}
