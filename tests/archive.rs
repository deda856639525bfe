//! Archive rollups: which periods get an archive and from which backup, that every format
//! opens with the standard tools and holds a loadable save, retention, backup deletion only
//! once archived, retention 0 deleting nothing, files that do not verify as archives set
//! aside (and their periods archived again), and a run that is interrupted or fails losing
//! nothing. The full-disk and
//! read-only tests mount a tmpfs (root or CAP_SYS_ADMIN; without it they fail unless
//! `SHARDLOOP_ALLOW_SKIP=1`).

use std::path::{Path, PathBuf};
use std::process::Command;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use shardloop::config::Compression;
use shardloop::persist::archive::rollup::{self, Plan};
use shardloop::persist::archive::{Format, format};
use shardloop::persist::{self, Layout, Manifest};
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
fn a_failed_run_deletes_no_backup_and_the_next_run_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path(), dir.path().join("Saves"));
    let world = world();
    history(&layout, &world);
    let plan = plan(dir.path(), Compression::Zstd);
    // The daily archive cannot take its final name: a directory is in its way. The hourly
    // archives come first and are written.
    let obstacle = plan.dir.join("Daily/2026-11-30.tar.zst");
    std::fs::create_dir_all(&obstacle).unwrap();

    let err = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap_err();
    assert!(err.to_string().contains("no backup was deleted"), "{err}");
    assert_eq!(names(&layout.backups).len(), 6, "every backup kept");
    assert_eq!(names(&plan.dir.join("Hourly")).len(), 3);
    assert_eq!(
        names(&plan.dir.join("Daily")),
        ["2026-11-30.tar.zst"],
        "no temp file left"
    );

    std::fs::remove_dir(&obstacle).unwrap();
    let report = rollup::run(&layout, &plan, NOW.parse().unwrap()).unwrap();
    assert_eq!(
        report.written.len(),
        2,
        "the daily and monthly archives, now"
    );
    assert_eq!(names(&layout.backups).len(), 2);
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
fn a_full_disk_during_a_rollup_keeps_every_backup_and_the_next_run_finishes() {
    let Some(fs) = Tmpfs::mount_or_skip("size=2m") else {
        return;
    };
    let layout = Layout::new(fs.mnt.as_path(), fs.mnt.as_path().join("Saves"));
    let world = world();
    history(&layout, &world);
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
    assert_eq!(names(&layout.backups).len(), 6, "every backup kept");
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
