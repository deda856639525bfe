//! Archive rollups: which periods get an archive and from which backup, that every format
//! opens with the standard tools and holds a loadable save, retention, backup deletion only
//! once archived, retention 0 deleting nothing, files that do not verify as archives set
//! aside (and their periods archived again), backups that are not whole quarantined, a run
//! that is interrupted or fails losing nothing and going on past what failed, retention
//! ordered by the save sequence through clock jumps, and backups kept to `keep_backups` with
//! archives off. The full-disk and
//! read-only tests mount a tmpfs (root or CAP_SYS_ADMIN; without it they fail unless
//! `SHARDLOOP_ALLOW_SKIP=1`).

use std::path::{Path, PathBuf};
use std::process::Command;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use shardloop::config::Compression;
use shardloop::persist::archive::rollup::{self, Plan};
use shardloop::persist::archive::{Format, check, format};
use shardloop::persist::{self, Layout, Manifest, Snapshot};
use shardloop::world::{self, World};

mod common;
use common::backups::backup;
use common::tmpfs::Tmpfs;

fn world() -> World {
    world::generate(5, 2000, 300)
}

fn plan(root: &Path, compression: Compression) -> Plan {
    Plan {
        dir: root.join("Archives"),
        format: Format::from(compression),
        level: 3,
        zone: TimeZone::UTC,
        retention: [24, 30, 12],
        keep_backups: 2,
        max_age: None,
        limits: Default::default(),
        remote: None,
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// The manifest inside an archive (its creation time tells which backup it holds).
fn created_in(archive: &Path) -> Timestamp {
    let dir = tempfile::tempdir().unwrap();
    extract(archive, dir.path());
    Manifest::read(dir.path()).unwrap().created
}

/// The standard tools [`extract`] runs, checked up front by the tests that use it.
const EXTRACTORS: &[&str] = &["tar", "zstd", "gzip", "unzip"];

/// Extracts with the standard tool for its format.
fn extract(archive: &Path, into: &Path) {
    let name = archive.to_string_lossy().into_owned();
    let mut cmd = match Format::from_name(&name).unwrap() {
        Format::TarZst => {
            let mut c = Command::new("tar");
            c.args(["-I", "zstd", "-xf"])
                .arg(archive)
                .arg("-C")
                .arg(into);
            c
        }
        Format::TarGz => {
            let mut c = Command::new("tar");
            c.arg("-xzf").arg(archive).arg("-C").arg(into);
            c
        }
        Format::Tar => {
            let mut c = Command::new("tar");
            c.arg("-xf").arg(archive).arg("-C").arg(into);
            c
        }
        Format::Zip => {
            let mut c = Command::new("unzip");
            c.arg("-q").arg(archive).arg("-d").arg(into);
            c
        }
    };
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const NOW: &str = "2026-12-01T01:45:00Z";

/// Backups over two days, two months and three hours; the hour of `NOW` is current.
fn history(layout: &Layout, world: &World) {
    for at in [
        "2026-11-30T22:10:00Z",
        "2026-11-30T22:50:00Z",
        "2026-11-30T23:20:00Z",
        "2026-12-01T00:10:00Z",
        "2026-12-01T01:05:00Z",
        "2026-12-01T01:40:00Z",
    ] {
        backup(layout, world, at);
    }
}

#[test]
fn each_past_period_gets_its_newest_backup_and_archived_backups_go() {
    if !common::tools::need(EXTRACTORS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    history(&layout, &world);
    let plan = plan(dir.path(), Compression::Zstd);

    let report = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    let hourly = plan.dir.join("Hourly");
    assert_eq!(
        names(&hourly),
        [
            "2026-11-30-22.tar.zst",
            "2026-11-30-23.tar.zst",
            "2026-12-01-00.tar.zst"
        ],
        "past hours only: 01 is the current hour"
    );
    assert_eq!(names(&plan.dir.join("Daily")), ["2026-11-30.tar.zst"]);
    assert_eq!(names(&plan.dir.join("Monthly")), ["2026-11.tar.zst"]);
    assert_eq!(report.written.len(), 5);
    assert_eq!(
        created_in(&hourly.join("2026-11-30-22.tar.zst")),
        "2026-11-30T22:50:00Z".parse().unwrap(),
        "the newest backup of the hour"
    );
    assert_eq!(
        created_in(&plan.dir.join("Daily/2026-11-30.tar.zst")),
        "2026-11-30T23:20:00Z".parse().unwrap()
    );
    // The two newest backups stay; every other one is in an archive now.
    assert_eq!(
        names(&layout.backups),
        ["2026-12-01-01-05-00", "2026-12-01-01-40-00"]
    );

    // A second run finds nothing to do.
    let again = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    assert!(
        again.written.is_empty() && again.deleted_backups.is_empty(),
        "{again:?}"
    );
}

#[test]
fn every_format_opens_with_the_standard_tools_and_holds_a_loadable_save() {
    if !common::tools::need(EXTRACTORS) {
        return;
    }
    for compression in [
        Compression::Zstd,
        Compression::Gzip,
        Compression::Zip,
        Compression::None,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), dir.path().join("Saves"));
        let world = world();
        backup(&layout, &world, "2026-11-30T22:10:00Z");
        let plan = plan(dir.path(), compression);
        rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
        let format = Format::from(compression);
        let archive = plan
            .dir
            .join(format!("Hourly/2026-11-30-22{}", format.extension()));
        let out = tempfile::tempdir().unwrap();
        extract(&archive, out.path());
        assert_eq!(
            names(out.path()),
            ["items.bin", "manifest.toml", "mobiles.bin", "spawners.bin"],
            "{compression:?}: the save's files at the archive root"
        );
        assert_eq!(
            persist::load(out.path()).unwrap().world,
            world,
            "{compression:?}"
        );
    }
}

#[test]
fn retention_keeps_the_newest_and_the_rest_are_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    for hour in 10..16 {
        backup(&layout, &world, &format!("2026-12-01T{hour}:30:00Z"));
    }
    let mut plan = plan(dir.path(), Compression::None);
    plan.retention = [2, 0, 0];
    let report = rollup::run(&layout, &plan, "2026-12-01T16:10:00Z".parse().unwrap()).unwrap();
    assert_eq!(
        names(&plan.dir.join("Hourly")),
        ["2026-12-01-14.tar", "2026-12-01-15.tar"]
    );
    assert_eq!(report.written.len(), 2);
    assert!(names(&plan.dir.join("Daily")).is_empty());
    // Hours 10-13 will never be archived (retention), so their backups may go too.
    assert_eq!(
        names(&layout.backups),
        ["2026-12-01-14-30-00", "2026-12-01-15-30-00"]
    );

    // A later hour pushes the oldest archive out.
    backup(&layout, &world, "2026-12-01T16:30:00Z");
    let report = rollup::run(&layout, &plan, "2026-12-01T17:05:00Z".parse().unwrap()).unwrap();
    assert_eq!(
        names(&plan.dir.join("Hourly")),
        ["2026-12-01-15.tar", "2026-12-01-16.tar"]
    );
    assert_eq!(report.pruned.len(), 1);
}

#[test]
fn pruning_by_age_deletes_old_archives() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    backup(&layout, &world, "2026-10-01T10:00:00Z");
    backup(&layout, &world, "2026-11-30T10:00:00Z");
    let mut plan = plan(dir.path(), Compression::None);
    plan.retention = [0, 30, 0];
    rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    assert_eq!(
        names(&plan.dir.join("Daily")),
        ["2026-10-01.tar", "2026-11-30.tar"]
    );
    plan.max_age = Some(std::time::Duration::from_secs(30 * 86_400));
    let pruned = rollup::prune(&plan, NOW.parse().unwrap()).unwrap();
    assert_eq!(pruned.len(), 1);
    assert_eq!(names(&plan.dir.join("Daily")), ["2026-11-30.tar"]);
}

#[test]
fn a_crashed_runs_temp_file_is_cleaned_and_the_run_completed() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    history(&layout, &world);
    let plan = plan(dir.path(), Compression::Zstd);
    let hourly = plan.dir.join("Hourly");
    std::fs::create_dir_all(&hourly).unwrap();
    // What a kill in the middle of writing leaves: a temp file, no final name.
    std::fs::write(
        hourly.join(".tmp-999-2026-11-30-22.tar.zst"),
        b"half an archive",
    )
    .unwrap();

    rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    assert_eq!(names(&hourly).len(), 3, "{:?}", names(&hourly));
    assert!(names(&hourly).iter().all(|n| !n.starts_with(".tmp-")));
    for name in names(&hourly) {
        let path = hourly.join(&name);
        format::list(&path, Format::TarZst, Default::default()).unwrap();
    }
}

#[test]
fn a_failed_archive_keeps_its_backup_and_the_rest_of_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    history(&layout, &world);
    let plan = plan(dir.path(), Compression::Zstd);
    // The daily archive cannot take its final name: a directory is in its way. The hourly
    // archives come before it, the monthly one after it.
    let obstacle = plan.dir.join("Daily/2026-11-30.tar.zst");
    std::fs::create_dir_all(&obstacle).unwrap();

    let err = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("2026-11-30.tar.zst"),
        "names the archive: {text}"
    );
    assert!(
        text.contains("every backup an archive still needs is kept"),
        "{text}"
    );
    assert_eq!(err.partial.failed.len(), 1, "{:?}", err.partial.failed);
    assert_eq!(names(&plan.dir.join("Hourly")).len(), 3);
    assert_eq!(
        names(&plan.dir.join("Monthly")),
        ["2026-11.tar.zst"],
        "the run went on past the failed archive"
    );
    assert_eq!(
        names(&plan.dir.join("Daily")),
        ["2026-11-30.tar.zst"],
        "no temp file left"
    );
    // Backups were still tidied: the one the daily archive needs stays, with the newest two.
    assert_eq!(
        names(&layout.backups),
        [
            "2026-11-30-23-20-00",
            "2026-12-01-01-05-00",
            "2026-12-01-01-40-00"
        ]
    );

    std::fs::remove_dir(&obstacle).unwrap();
    let report = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    assert_eq!(report.written.len(), 1, "the daily archive, now");
    assert_eq!(
        created_in_manifest(&plan.dir.join("Daily/2026-11-30.tar.zst")),
        "2026-11-30T23:20:00Z".parse().unwrap()
    );
    assert_eq!(names(&layout.backups).len(), 2);
}

/// The creation time of the save inside an archive, read with the library (no outside tool).
fn created_in_manifest(archive: &Path) -> Timestamp {
    let format = Format::from_name(&archive.to_string_lossy()).unwrap();
    check::verify(archive, format, Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", archive.display()))
        .created
}

/// Every period (of a kind that is on) among `before`'s backups that has no archive still has
/// its newest backup: nothing a missing archive needs was deleted.
fn no_backup_lost(plan: &Plan, before: &[rollup::Backup]) {
    for period in rollup::Period::ALL {
        if plan.retention[period as usize] == 0 {
            continue;
        }
        let mut newest = std::collections::BTreeMap::new();
        for b in before {
            newest.insert(period.key(b.created, &plan.zone), &b.path);
        }
        for (key, path) in newest {
            let archived = Format::ALL.iter().any(|f| {
                let name = format!("{key}{}", f.extension());
                plan.dir.join(period.dir_name()).join(name).is_file()
            });
            assert!(
                archived || path.is_dir(),
                "{} was deleted, but the {period} archive {key} does not exist",
                path.display()
            );
        }
    }
}

#[test]
fn a_backup_missing_a_file_is_quarantined_and_the_rest_of_the_rollup_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    history(&layout, &world);
    let plan = plan(dir.path(), Compression::Zstd);
    // The newest backup of hour 22 has lost a data file.
    let broken = layout.backups.join("2026-11-30-22-50-00");
    std::fs::remove_file(broken.join("items.bin")).unwrap();

    let report = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    let quarantine = dir.path().join("Backups/Quarantined");
    assert_eq!(report.quarantined.len(), 1, "{:?}", report.quarantined);
    let (moved, why) = &report.quarantined[0];
    assert_eq!(*moved, quarantine.join("2026-11-30-22-50-00"));
    assert!(why.contains("items.bin is missing"), "{why}");
    assert!(
        moved.join("manifest.toml").is_file(),
        "moved whole, not deleted"
    );
    // Every other archive was written; hour 22 from its other backup.
    assert_eq!(report.written.len(), 5, "{report:?}");
    assert_eq!(
        created_in_manifest(&plan.dir.join("Hourly/2026-11-30-22.tar.zst")),
        "2026-11-30T22:10:00Z".parse().unwrap()
    );
    // Retention and backup deletion ran as on any good day.
    assert_eq!(
        names(&layout.backups),
        ["2026-12-01-01-05-00", "2026-12-01-01-40-00"]
    );
    // The quarantined backup is left alone from now on.
    let again = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    assert!(
        again.quarantined.is_empty() && again.written.is_empty(),
        "{again:?}"
    );
    assert_eq!(names(&quarantine), ["2026-11-30-22-50-00"]);
}

#[test]
fn a_kind_whose_directory_cannot_be_written_stops_only_its_own_archives() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    history(&layout, &world);
    let before = rollup::backups(&layout).unwrap();
    let plan = plan(dir.path(), Compression::Zstd);
    // `Archives/Hourly` is a file: no hourly archive can be written (as with EACCES on it).
    std::fs::create_dir_all(&plan.dir).unwrap();
    std::fs::write(plan.dir.join("Hourly"), b"not a directory").unwrap();

    let err = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap_err();
    // Each hourly archive failed (and the cleaning and retention of that directory).
    let failed = &err.partial.failed;
    let writes = failed.iter().filter(|e| e.step == "writing").count();
    assert_eq!(writes, 3, "{failed:?}");
    assert!(
        err.to_string().contains("more failures in this run"),
        "{err}"
    );
    assert_eq!(names(&plan.dir.join("Daily")), ["2026-11-30.tar.zst"]);
    assert_eq!(names(&plan.dir.join("Monthly")), ["2026-11.tar.zst"]);
    // The backups the hourly archives need stay; the rest are tidied as usual.
    no_backup_lost(&plan, &before);
    assert_eq!(
        names(&layout.backups),
        [
            "2026-11-30-22-50-00",
            "2026-11-30-23-20-00",
            "2026-12-01-00-10-00",
            "2026-12-01-01-05-00",
            "2026-12-01-01-40-00"
        ]
    );
}

fn no_temp_files(plan: &Plan) {
    for kind in ["Hourly", "Daily", "Monthly"] {
        let left: Vec<_> = names(&plan.dir.join(kind))
            .into_iter()
            .filter(|n| n.starts_with(".tmp-"))
            .collect();
        assert!(left.is_empty(), "{kind}: {left:?}");
    }
}

#[test]
fn a_full_disk_during_a_rollup_keeps_every_backup_it_needs_and_the_next_run_finishes() {
    let Some(fs) = Tmpfs::mount_or_skip("size=2m") else {
        return;
    };
    let layout = Layout::new(fs.mnt.as_path(), fs.mnt.as_path().join("Saves"));
    let world = world();
    history(&layout, &world);
    let before = rollup::backups(&layout).unwrap();
    let plan = plan(fs.mnt.as_path(), Compression::None);
    // Leave about one archive's worth of room: the rollup runs out part-way.
    let ballast = fs.mnt.as_path().join("ballast");
    let free = {
        // SAFETY: statvfs is a plain C struct of integers: all zero bytes is a valid value.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        let c = std::ffi::CString::new(fs.mnt.as_path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path and a statvfs to fill.
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        st.f_bavail as u64 * st.f_bsize as u64
    };
    std::fs::write(&ballast, vec![0u8; (free - 100_000) as usize]).unwrap();

    let err = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    assert_eq!(
        err.partial.failed.len(),
        1,
        "no more archives tried on a full disk: {:?}",
        err.partial.failed
    );
    assert!(
        err.partial
            .deleted_backups
            .contains(&layout.backups.join("2026-11-30-22-10-00")),
        "backups were still tidied after the disk filled: {:?}",
        err.partial
    );
    no_backup_lost(&plan, &before);
    no_temp_files(&plan);

    std::fs::remove_file(&ballast).unwrap();
    rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    assert_eq!(names(&plan.dir.join("Hourly")).len(), 3);
    assert_eq!(names(&layout.backups).len(), 2);
}

#[test]
fn a_read_only_disk_during_a_rollup_keeps_every_backup_and_the_next_run_finishes() {
    let Some(fs) = Tmpfs::mount_or_skip("size=8m") else {
        return;
    };
    let layout = Layout::new(fs.mnt.as_path(), fs.mnt.as_path().join("Saves"));
    let world = world();
    history(&layout, &world);
    let plan = plan(fs.mnt.as_path(), Compression::Zstd);
    fs.remount("ro");
    let err = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap_err();
    assert!(err.to_string().contains("Read-only"), "{err}");
    fs.remount("rw");
    assert_eq!(names(&layout.backups).len(), 6);
    no_temp_files(&plan);
    rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    assert_eq!(names(&plan.dir.join("Daily")), ["2026-11-30.tar.zst"]);
}

#[test]
fn retention_0_makes_no_archives_of_that_kind_and_deletes_none_that_exist() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    history(&layout, &world);
    let mut plan = plan(dir.path(), Compression::None);
    rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    let hourly = names(&plan.dir.join("Hourly"));
    assert_eq!(hourly.len(), 3);

    // Hourly archives switched off, pruning by age on: the ones made before stay.
    plan.retention = [0, 30, 12];
    plan.max_age = Some(std::time::Duration::from_secs(3600));
    backup(&layout, &world, "2026-12-01T03:10:00Z");
    let later: Timestamp = "2026-12-02T05:00:00Z".parse().unwrap();
    let report = rollup::run(&layout, &plan, later).unwrap();
    assert!(
        report
            .written
            .iter()
            .all(|w| w.period != rollup::Period::Hourly)
    );
    assert!(
        report
            .pruned
            .iter()
            .all(|p| !p.starts_with(plan.dir.join("Hourly")))
    );
    assert_eq!(names(&plan.dir.join("Hourly")), hourly);
    let pruned = rollup::prune(&plan, later).unwrap();
    assert!(
        pruned
            .iter()
            .all(|p| !p.starts_with(plan.dir.join("Hourly")))
    );
    assert_eq!(names(&plan.dir.join("Hourly")), hourly);
}

#[test]
fn files_named_like_archives_that_do_not_verify_are_set_aside_and_their_periods_archived() {
    if !common::tools::need(EXTRACTORS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    history(&layout, &world);
    let plan = plan(dir.path(), Compression::Zstd);
    let (hourly, daily, monthly) = (
        plan.dir.join("Hourly"),
        plan.dir.join("Daily"),
        plan.dir.join("Monthly"),
    );
    for d in [&hourly, &daily, &monthly] {
        std::fs::create_dir_all(d).unwrap();
    }
    // Empty; truncated (a real archive of another backup, cut in half); another format
    // under this one's name; an archive of something that is not this save's files.
    std::fs::write(hourly.join("2026-11-30-22.tar.zst"), b"").unwrap();
    let real = dir.path().join("real.tar.zst");
    let newest = rollup::backups(&layout).unwrap().pop().unwrap().path;
    let files: Vec<(String, PathBuf)> =
        ["manifest.toml", "items.bin", "mobiles.bin", "spawners.bin"]
            .iter()
            .map(|n| (n.to_string(), newest.join(n)))
            .collect();
    let sources: Vec<(String, &Path)> = files
        .iter()
        .map(|(n, p)| (n.clone(), p.as_path()))
        .collect();
    format::write(&real, Format::TarZst, 3, &sources).unwrap();
    let bytes = std::fs::read(&real).unwrap();
    std::fs::write(
        hourly.join("2026-11-30-23.tar.zst"),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    format::write(&daily.join("2026-11-30.tar.zst"), Format::Zip, 3, &sources).unwrap();
    format::write(
        &monthly.join("2026-11.tar.zst"),
        Format::TarZst,
        3,
        &sources[1..],
    )
    .unwrap();

    let report = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    let mut aside: Vec<String> = report
        .set_aside
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    aside.sort();
    assert_eq!(
        aside,
        [
            "2026-11-30-22.tar.zst.unverified",
            "2026-11-30-23.tar.zst.unverified",
            "2026-11-30.tar.zst.unverified",
            "2026-11.tar.zst.unverified",
        ],
        "{:?}",
        report.set_aside
    );
    // Each period archived again, from its own backup, and the new archives verify.
    assert_eq!(report.written.len(), 5);
    for w in &report.written {
        shardloop::persist::archive::check::verify(&w.path, Format::TarZst, plan.limits).unwrap();
    }
    assert_eq!(
        created_in(&hourly.join("2026-11-30-22.tar.zst")),
        "2026-11-30T22:50:00Z".parse().unwrap()
    );
    // The files set aside are kept, never counted as archives (nor pruned).
    assert_eq!(names(&hourly).len(), 5);
    assert_eq!(names(&layout.backups).len(), 2);
    let again = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    assert!(again.set_aside.is_empty() && again.written.is_empty());
}

// ---------------------------------------------------------------------------------------
// Clock jumps: retention orders by the save sequence, not the clock or file names.

/// Saves `world` as the shard does, created at `at`: the save it replaces becomes a backup
/// named by its creation time, and each save's sequence is one more than the last.
fn save_at(layout: &Layout, world: &World, at: &str) -> Manifest {
    let snapshot = Snapshot::take(world, at.parse().unwrap(), |_| true);
    persist::save::write(layout, snapshot, 1).unwrap().manifest
}

/// The sequences of the backups left, oldest first.
fn sequences(layout: &Layout) -> Vec<u64> {
    rollup::backups(layout)
        .unwrap()
        .iter()
        .map(|b| b.sequence)
        .collect()
}

#[test]
fn a_clock_stepped_back_keeps_the_newest_backups_and_archives_by_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    // Three saves an hour apart, then the clock is stepped back three hours: the next saves
    // are named earlier than the ones before them.
    for at in [
        "2026-12-01T10:00:00Z",
        "2026-12-01T11:00:00Z",
        "2026-12-01T12:00:00Z",
        "2026-12-01T09:00:00Z",
        "2026-12-01T09:10:00Z",
        "2026-12-01T09:20:00Z",
    ] {
        save_at(&layout, &world, at);
    }
    assert_eq!(
        sequences(&layout),
        [1, 2, 3, 4, 5],
        "oldest first, by sequence"
    );
    let mut plan = plan(dir.path(), Compression::None);
    plan.retention = [3, 30, 12];

    rollup::run(&layout, &plan, "2026-12-01T09:25:00Z".parse().unwrap()).unwrap();
    // The two newest backups are the last two saves (sequences 4 and 5), though their names
    // are the earliest: a file-name order would have deleted them first.
    assert_eq!(
        names(&layout.backups),
        ["2026-12-01-09-00-00", "2026-12-01-09-10-00"]
    );
    assert_eq!(sequences(&layout), [4, 5]);
    assert_eq!(
        names(&plan.dir.join("Hourly")),
        [
            "2026-12-01-10.tar",
            "2026-12-01-11.tar",
            "2026-12-01-12.tar"
        ]
    );

    // An hour later on the stepped-back clock: hour 09 is past, and its archive (of the save
    // of sequence 6) is the newest, though its name is the earliest. Retention (3 hourly)
    // deletes the archive of the oldest save, hour 10, not the new one.
    save_at(&layout, &world, "2026-12-01T10:00:00Z");
    let report = rollup::run(&layout, &plan, "2026-12-01T10:05:00Z".parse().unwrap()).unwrap();
    assert_eq!(report.written.len(), 1, "{report:?}");
    assert_eq!(
        names(&plan.dir.join("Hourly")),
        [
            "2026-12-01-09.tar",
            "2026-12-01-11.tar",
            "2026-12-01-12.tar"
        ]
    );
    let hour_9 = plan.dir.join("Hourly/2026-12-01-09.tar");
    let inside = check::verify(&hour_9, Format::Tar, plan.limits).unwrap();
    assert_eq!(inside.sequence, 6, "hour 09's newest save");
    assert_eq!(sequences(&layout), [5, 6]);
}

#[test]
fn a_clock_jumping_forward_past_max_age_deletes_at_most_one_archive_a_run_never_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    for day in 24..=30 {
        save_at(&layout, &world, &format!("2026-11-{day}T12:00:00Z"));
    }
    let mut plan = plan(dir.path(), Compression::None);
    plan.retention = [0, 30, 0];
    plan.max_age = Some(std::time::Duration::from_secs(30 * 86_400));
    rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    let daily = plan.dir.join("Daily");
    let days: Vec<String> = (24..30).map(|d| format!("2026-11-{d}.tar")).collect();
    assert_eq!(names(&daily), days);

    // The clock jumps a year ahead. Ages count from the newest archive, not from the clock:
    // nothing is older than 30 days than it, so nothing goes.
    let jumped: Timestamp = "2027-12-01T01:45:00Z".parse().unwrap();
    assert!(rollup::prune(&plan, jumped).unwrap().is_empty());
    let report = rollup::run(&layout, &plan, jumped).unwrap();
    assert!(report.pruned.is_empty(), "{report:?}");
    assert_eq!(names(&daily), days);

    // A save on the jumped clock, archived a day later: now every older archive is more
    // than 30 days older than the newest one. One run deletes one of them (the oldest), the
    // rest wait, and the newest is never deleted by age.
    save_at(&layout, &world, "2027-12-01T02:00:00Z");
    save_at(&layout, &world, "2027-12-02T02:00:00Z");
    let later: Timestamp = "2027-12-02T03:00:00Z".parse().unwrap();
    let report = rollup::run(&layout, &plan, later).unwrap();
    assert_eq!(report.written.len(), 2, "11-30 and 2027-12-01: {report:?}");
    assert_eq!(
        report.pruned,
        [daily.join("2026-11-24.tar")],
        "one archive a run, the oldest"
    );
    assert_eq!(report.aged_out_later, 6);
    for left in (1..=6).rev() {
        let pruned = rollup::prune(&plan, later).unwrap();
        assert_eq!(pruned.len(), 1, "{pruned:?}");
        assert_eq!(names(&daily).len(), left);
    }
    assert_eq!(names(&daily), ["2027-12-01.tar"], "the newest is kept");
    assert!(rollup::prune(&plan, later).unwrap().is_empty());
}

#[test]
fn with_archives_off_backups_are_still_kept_to_keep_backups() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let layout = Layout::new(&data, data.join("Saves"));
    let world = world();
    for hour in 10..16 {
        save_at(&layout, &world, &format!("2026-12-01T{hour}:00:00Z"));
    }
    assert_eq!(sequences(&layout), [1, 2, 3, 4, 5]);
    let mut cmd = common::binary::shardloop(dir.path(), (2000, 300));
    cmd.args(["--clock-start", "2026-12-01T16:30:00Z", "--data-dir"])
        .arg(&data)
        .env("SHARD_NETWORK__LISTEN", "[]")
        .env("SHARD_ARCHIVE__ENABLED", "false")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "shutdown").unwrap();
    }
    let out = common::deadline::output_within(child, std::time::Duration::from_secs(60));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{log}", out.status);
    assert!(log.contains("loaded the world save"), "{log}");
    // The final save made a sixth backup; the newest two are kept, and no archive was made.
    assert_eq!(sequences(&layout), [5, 6], "{log}");
    for kind in ["Hourly", "Daily", "Monthly"] {
        assert!(
            names(&data.join("Archives").join(kind)).is_empty(),
            "{kind}"
        );
    }
}
