//! Rollups: one archive per past hour, day and month that has backups, retention, and the
//! deletion of backups that archives have made redundant.
//!
//! A run, in order:
//! 1. remove what a crashed run left: temp files in the archive directories, backups it was
//!    deleting (renamed `.deleting-*` first, so a half-deleted backup never looks complete);
//!    then check each archive file of a period that still has backups (the ones whose
//!    existence would stop that period being archived and let its backups be deleted):
//!    one that does not verify as a complete archive of a save (`check::verify`: empty,
//!    truncated, another format, no manifest, a data file not as its manifest records) is
//!    renamed `<name>.unverified`, with a warning, and its period is archived again. A kind
//!    whose files cannot be checked (or set aside) is left alone for this run: nothing of it
//!    is written or pruned, and its backups are kept as if it had no archive at all;
//! 2. for each kind (hourly, daily, monthly) with a retention above 0, and each *past* period
//!    among the newest `retention` periods that have backups and no archive yet: pack that
//!    period's newest complete backup into a temp file, fsync it, read it back and compare
//!    every entry's size and CRC-32 with what was written, and only then rename it to
//!    `<Kind>/<period><ext>`. A backup that is not whole (its manifest does not read, a data
//!    file it lists is missing or not the size it records) is moved to
//!    `Backups/Quarantined/` with a warning, and the period's next newest backup is packed
//!    instead. A write that fails skips its period (whose backup is then kept) and the run
//!    goes on; after a full or read-only disk no more archives are attempted this run;
//! 3. retention: keep the newest `retention` archives of each kind (and, with `prune`, none
//!    older than `max_age`); a kind whose retention is 0 is off: none are made, and the ones
//!    that exist are kept (never deleted, by count or by age); with archives going off-site
//!    (`Plan::remote`), an archive is deleted only once its copy there is verified
//!    (`mark::is_off_site`), and kept until then;
//! 4. delete the backups that are neither among the newest `keep_backups` nor still needed
//!    by an archive that does not exist yet (one that failed to be written included).
//!
//! "Newest" is the save sequence (`manifest.toml`'s `sequence`, one more per save), never the
//! wall clock or a file name: a clock stepped back does not make the newest backups look
//! oldest, nor new archives look older than the ones before them. Ages for `max_age` are
//! measured against the newest archive of the kind (by sequence), and never past `now`: a
//! clock jumping forward does not age every archive at once. Whatever the clock says, the
//! newest archive of a kind is never deleted by age, and one run deletes at most
//! [`MAX_AGED_OUT_PER_RUN`] archives of each kind by age (the rest wait for later runs, with a
//! warning).
//!
//! So a crash or a full disk at any point loses nothing: no partial archive carries a final
//! name (the rename comes after the verification), no backup is deleted before the archives
//! that need it exist, and the next run picks up where this one stopped. A step that fails
//! never stops the steps that do not depend on it: one bad backup, a kind directory that
//! cannot be written or a full disk still let retention and backup deletion run.
//!
//! Period boundaries are in the configured time zone; backup names are UTC times.
//!
//! Owns the run. Must never read the configuration (it gets a [`Plan`]), never run on the loop
//! thread (it is blocking disk work), nor two at once (the `Archiver` runs one at a time; the
//! data-directory lock keeps other processes out).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;

use super::bounded::Limits;
use super::check::{self, CheckError};
use super::format::{self, Entry, Format};
use super::mark;
pub use super::period::Period;
use super::remote::RemoteUrl;
use crate::persist::error::{Operation, PersistError};
use crate::persist::file::Kind;
use crate::persist::fsio;
use crate::persist::layout::{self, BACKUP_MARKER, Layout, TEMP_PREFIX};
use crate::persist::manifest::{self, Manifest};

/// What a rollup needs to know: plain settings (the configuration's `[archive]` builds one).
#[derive(Debug, Clone)]
pub struct Plan {
    /// `Archives/` (with `Hourly/`, `Daily/`, `Monthly/` under it).
    pub dir: PathBuf,
    /// The format new archives are written in (existing ones keep theirs).
    pub format: Format,
    /// The compression level for `format` (zstd 1 ..= 22, gzip and zip 0 ..= 9; ignored for
    /// plain tar).
    pub level: i32,
    /// The time zone period boundaries are counted in (a day starts at its midnight).
    pub zone: TimeZone,
    /// Archives kept per kind, in [`Period::ALL`] order; 0 = that kind is off.
    pub retention: [u32; 3],
    /// Newest automatic backups kept once archived; older ones are deleted unless an archive
    /// still to be written needs them.
    pub keep_backups: u32,
    /// With `prune`: archives whose period started longer ago than this are deleted.
    pub max_age: Option<Duration>,
    /// Limits of any read of an archive (as a restore's): checking an archive found in
    /// place, reading back one just written.
    pub limits: Limits,
    /// Where archives also go off-site (`[archive.remote]`), if they do: retention then
    /// deletes an archive only once its copy there is verified.
    pub remote: Option<RemoteUrl>,
}

impl Plan {
    fn retention(&self, period: Period) -> usize {
        self.retention[period as usize] as usize
    }

    fn kind_dir(&self, period: Period) -> PathBuf {
        self.dir.join(period.dir_name())
    }
}

/// A complete backup: a directory of `Backups/Automatic/` with its marker. Backups order by
/// their save's sequence first (0 when the manifest does not say or does not read), then by
/// creation time, then by path: the newest backup is the last save made, whatever the clock.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Backup {
    /// The `sequence` of its manifest (0 if it has none or it does not read).
    pub sequence: u64,
    /// When the save in it was taken (its directory name, a UTC time).
    pub created: Timestamp,
    /// Its directory under `Backups/Automatic/`.
    pub path: PathBuf,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Archives written: kind, path, bytes of input, bytes of archive, time taken.
    pub written: Vec<Written>,
    /// Archives deleted by retention (more than a kind keeps) or by `max_age`.
    pub pruned: Vec<PathBuf>,
    /// Backups deleted: not among the newest `keep_backups`, and archived (or never to be).
    pub deleted_backups: Vec<PathBuf>,
    /// Archive files that did not verify, renamed out of the way: (new path, why).
    pub set_aside: Vec<(PathBuf, CheckError)>,
    /// Backups that are not whole, moved to `Backups/Quarantined/`: (new path, why).
    pub quarantined: Vec<(PathBuf, String)>,
    /// Archives older than `max_age` left for a later run: one run deletes at most
    /// [`MAX_AGED_OUT_PER_RUN`] of each kind by age.
    pub aged_out_later: usize,
    /// What failed, in order; each failure skipped only the work that depended on it.
    pub failed: Vec<PersistError>,
    /// Archives retention would have deleted, kept until their off-site copy is verified.
    pub held: Vec<PathBuf>,
    /// The whole run, wall-clock time.
    pub took: Duration,
}

/// One archive a run wrote (and read back to check).
#[derive(Debug, Clone)]
pub struct Written {
    /// Its kind.
    pub period: Period,
    /// The archive file.
    pub path: PathBuf,
    /// Bytes of the backup's files that went into it.
    pub input_bytes: u64,
    /// Bytes of the archive file.
    pub archive_bytes: u64,
    /// Writing and verifying it, wall-clock time.
    pub took: Duration,
}

/// A run in which something failed: the first failure (nothing was lost), and everything the
/// run did, the other failures included ([`Report::failed`]).
#[derive(Debug, Clone)]
pub struct RollupError {
    /// What failed: the step, the path and the OS's reason.
    pub error: PersistError,
    /// What the run did (boxed: errors stay small to pass around).
    pub partial: Box<Report>,
}

impl fmt::Display for RollupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)?;
        match self.partial.failed.len() {
            0 | 1 => Ok(()),
            n => write!(f, " ({} more failures in this run)", n - 1),
        }
    }
}

impl std::error::Error for RollupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// One full run at `now`. Blocking. `Err` when anything failed; the run still did all the
/// work that did not depend on what failed ([`RollupError::partial`]).
pub fn run(layout: &Layout, plan: &Plan, now: Timestamp) -> Result<Report, RollupError> {
    let began = Instant::now();
    let mut report = Report::default();
    run_steps(layout, plan, now, &mut report);
    report.took = began.elapsed();
    finish(report)
}

/// `Ok(report)` if nothing in it failed, else the first failure with the whole report.
fn finish(report: Report) -> Result<Report, RollupError> {
    match report.failed.first() {
        None => Ok(report),
        Some(error) => Err(RollupError {
            error: error.clone(),
            partial: Box::new(report),
        }),
    }
}

/// Steps 1 to 4 of the module docs, recording in `report` what each did and what failed.
fn run_steps(layout: &Layout, plan: &Plan, now: Timestamp, report: &mut Report) {
    let backups_dir = layout.backups.as_path();
    let failed = &mut report.failed;
    for period in Period::ALL {
        let kind_dir = plan.kind_dir(period);
        note(
            failed,
            clean_temp_files(&kind_dir),
            "cleaning temp files in",
            &kind_dir,
        );
    }
    let cleaned = clean_deletions(layout);
    note(
        failed,
        cleaned,
        "finishing interrupted deletions in",
        backups_dir,
    );
    // Without the list, no backup is archived or deleted (none is known); retention still runs.
    let listed = backups(layout);
    let mut backups = note(failed, listed, "listing backups in", backups_dir).unwrap_or_default();
    let mut trusted = [true; 3];
    for period in Period::ALL {
        let checked = set_aside_unverified(plan, period, &backups, &mut report.set_aside);
        let kind_dir = plan.kind_dir(period);
        if note(failed, checked, "checking the archives in", &kind_dir).is_none() {
            trusted[period as usize] = false;
        }
    }
    write_due(layout, plan, now, &trusted, &mut backups, report);
    let (pruned, later, failed) =
        prune_kinds(plan, now, &trusted, Operation::Rollup, &mut report.held);
    report.pruned = pruned;
    report.aged_out_later = later;
    report.failed.extend(failed);
    let deleted = delete_redundant_backups(plan, &backups, now, &trusted);
    report.deleted_backups = deleted.done;
    if let Some(e) = deleted.error {
        report
            .failed
            .push(fail("deleting archived backups in", backups_dir)(e));
    }
}

/// `result`'s value, or `None` with its error (of `step` on `path`) added to `failed`.
fn note<T>(
    failed: &mut Vec<PersistError>,
    result: io::Result<T>,
    step: &'static str,
    path: &Path,
) -> Option<T> {
    result.map_err(|e| failed.push(fail(step, path)(e))).ok()
}

/// Wraps an `io::Error` of `step` on `path` as the rollup's failure.
fn fail(step: &'static str, path: &Path) -> impl FnOnce(io::Error) -> PersistError {
    PersistError::at(Operation::Rollup, step, path)
}

/// Step 2: the archives due, each from its period's newest whole backup. A backup that is not
/// whole is quarantined (and taken out of `backups`); a write that fails is noted and skips
/// its period; a full or read-only disk ends the writing for this run.
fn write_due(
    layout: &Layout,
    plan: &Plan,
    now: Timestamp,
    trusted: &[bool; 3],
    backups: &mut Vec<Backup>,
    report: &mut Report,
) {
    let mut quarantined = BTreeSet::new();
    'kinds: for period in Period::ALL {
        if !trusted[period as usize] {
            continue;
        }
        for (key, candidates) in due(plan, period, backups, now) {
            let target = archive_path(plan, period, &key);
            for backup in candidates {
                if quarantined.contains(&backup.path) {
                    continue;
                }
                match whole(&backup.path) {
                    Ok(None) => {}
                    Ok(Some(why)) => {
                        match quarantine(layout, &backup.path) {
                            Ok(moved) => report.quarantined.push((moved, why)),
                            Err(e) => {
                                report.failed.push(fail("quarantining", &backup.path)(e));
                                break;
                            }
                        }
                        quarantined.insert(backup.path.clone());
                        continue;
                    }
                    Err(e) => {
                        report.failed.push(fail("reading", &backup.path)(e));
                        break;
                    }
                }
                match write_archive(plan, period, backup, &target) {
                    Ok(written) => report.written.push(written),
                    Err(e) => {
                        let stop = ends_every_write(&e);
                        report.failed.push(fail("writing", &target)(e));
                        if stop {
                            break 'kinds;
                        }
                    }
                }
                break;
            }
        }
    }
    backups.retain(|b| !quarantined.contains(&b.path));
}

/// A full disk (or quota) or a read-only filesystem: every other archive would fail alike.
fn ends_every_write(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC | libc::EDQUOT | libc::EROFS)
    )
}

/// Retention and age pruning only (the console's `prunearchives`). Every kind is pruned
/// that can be; `Err` names the first that could not (with the others' deletions done).
pub fn prune(plan: &Plan, now: Timestamp) -> Result<Vec<PathBuf>, PersistError> {
    prune_run(plan, now)
        .map(|report| report.pruned)
        .map_err(|e| e.error)
}

/// [`prune`], reported as a run is ([`run`]).
pub fn prune_run(plan: &Plan, now: Timestamp) -> Result<Report, RollupError> {
    let began = Instant::now();
    let mut held = Vec::new();
    let (pruned, aged_out_later, failed) =
        prune_kinds(plan, now, &[true; 3], Operation::Prune, &mut held);
    finish(Report {
        pruned,
        held,
        aged_out_later,
        failed,
        took: began.elapsed(),
        ..Report::default()
    })
}

/// Step 3 on each kind marked in `kinds`: (archives deleted, archives older than `max_age`
/// left for a later run by the bound, failures of `operation`). A kind that fails does not
/// stop the others.
fn prune_kinds(
    plan: &Plan,
    now: Timestamp,
    kinds: &[bool; 3],
    operation: Operation,
    kept: &mut Vec<PathBuf>,
) -> (Vec<PathBuf>, usize, Vec<PersistError>) {
    let (mut pruned, mut later, mut failed) = (Vec::new(), 0, Vec::new());
    for period in Period::ALL.into_iter().filter(|p| kinds[*p as usize]) {
        let kind_dir = plan.kind_dir(period);
        match apply_retention(plan, period, now, &mut later, kept) {
            Ok(p) => pruned.extend(p),
            Err(e) => failed.push(PersistError::at(
                operation,
                "applying retention in",
                &kind_dir,
            )(e)),
        }
    }
    (pruned, later, failed)
}

/// Complete automatic backups, oldest first: by sequence, then creation time (see [`Backup`]).
pub fn backups(layout: &Layout) -> io::Result<Vec<Backup>> {
    let entries = layout::entries(&layout.backups)?;
    let mut found = Vec::new();
    for entry in entries {
        let path = entry.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if let Some(created) = backup_time(&name)
            && path.join(BACKUP_MARKER).is_file()
        {
            let sequence = Manifest::read(&path).map_or(0, |m| m.sequence);
            found.push(Backup {
                sequence,
                created,
                path,
            });
        }
    }
    found.sort();
    Ok(found)
}

/// `2026-12-03-10-00-00` (UTC, maybe with a `-N` suffix) → that instant.
fn backup_time(name: &str) -> Option<Timestamp> {
    let base = name.get(..19)?;
    let civil = DateTime::strptime(layout::BACKUP_TIME_FORMAT, base).ok()?;
    civil
        .to_zoned_datetime(TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp())
}

/// The past periods of `period` that should have an archive and do not, each with its
/// backups newest first (the first whole one is packed).
fn due<'a>(
    plan: &Plan,
    period: Period,
    backups: &'a [Backup],
    now: Timestamp,
) -> Vec<(String, Vec<&'a Backup>)> {
    retained(plan, period, backups, now)
        .into_iter()
        .filter(|(key, _)| existing_archive(plan, period, key).is_none())
        .map(|(key, mut all)| {
            all.reverse();
            (key, all)
        })
        .collect()
}

/// The past periods (not the current one at `now`) whose archive retention keeps: the newest
/// `retention` periods that have backups, newest by their newest backup's sequence (so a
/// clock stepped back does not push new periods out). Each with its backups, oldest first.
fn retained<'a>(
    plan: &Plan,
    period: Period,
    backups: &'a [Backup],
    now: Timestamp,
) -> Vec<(String, Vec<&'a Backup>)> {
    let current = period.key(now, &plan.zone);
    let mut periods: Vec<(String, Vec<&Backup>)> = by_period(plan, period, backups)
        .into_iter()
        .filter(|(key, _)| *key != current)
        .collect();
    periods.sort_by(|(_, a), (_, b)| a.last().cmp(&b.last()));
    let skip = periods.len().saturating_sub(plan.retention(period));
    periods.split_off(skip)
}

/// The backups of each period of `period`, by period key; each list oldest first.
fn by_period<'a>(
    plan: &Plan,
    period: Period,
    backups: &'a [Backup],
) -> BTreeMap<String, Vec<&'a Backup>> {
    let mut periods: BTreeMap<String, Vec<&Backup>> = BTreeMap::new();
    for backup in backups {
        let key = period.key(backup.created, &plan.zone);
        periods.entry(key).or_default().push(backup);
    }
    periods
}

/// Each period's newest backup, by period key.
fn newest_per_period<'a>(
    plan: &Plan,
    period: Period,
    backups: &'a [Backup],
) -> BTreeMap<String, &'a Backup> {
    by_period(plan, period, backups)
        .into_iter()
        .filter_map(|(key, all)| all.last().map(|newest| (key, *newest)))
        .collect()
}

fn archive_path(plan: &Plan, period: Period, key: &str) -> PathBuf {
    plan.kind_dir(period)
        .join(format!("{key}{}", plan.format.extension()))
}

/// The archive of this period in any format (switching formats must not archive twice).
/// A file here counts once it has passed step 1's check (or was written by this run).
fn existing_archive(plan: &Plan, period: Period, key: &str) -> Option<PathBuf> {
    candidates(plan, period, key)
        .map(|(_, path)| path)
        .find(|p| p.is_file())
}

/// The names this period's archive may have, one per format.
fn candidates(plan: &Plan, period: Period, key: &str) -> impl Iterator<Item = (Format, PathBuf)> {
    let dir = plan.kind_dir(period);
    Format::ALL
        .into_iter()
        .map(move |f| (f, dir.join(format!("{key}{}", f.extension()))))
}

/// Packs `backup` into `target`: temp file, fsync, verify, rename, fsync the directory.
fn write_archive(
    plan: &Plan,
    period: Period,
    backup: &Backup,
    target: &Path,
) -> io::Result<Written> {
    let began = Instant::now();
    std::fs::create_dir_all(plan.kind_dir(period))?;
    let files = save_files(&backup.path)?;
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    let sources: Vec<(String, &Path)> = files
        .iter()
        .map(|(n, p)| (n.clone(), p.as_path()))
        .collect();
    let replacement = fsio::Replacement::new(
        target,
        &format!("{TEMP_PREFIX}{}-{name}", std::process::id()),
    );
    let written =
        replacement.write(|file| format::write_to(file, plan.format, plan.level, &sources))?;
    verify(
        &format::list(replacement.temp(), plan.format, plan.limits)?,
        &written,
    )?;
    replacement.commit()?;
    Ok(Written {
        period,
        path: target.to_owned(),
        input_bytes: written.iter().map(|e| e.bytes).sum(),
        archive_bytes: std::fs::metadata(target)?.len(),
        took: began.elapsed(),
    })
}

/// An archive is renamed into place only if it reads back entry for entry as it was written.
fn verify(read_back: &[Entry], written: &[Entry]) -> io::Result<()> {
    if read_back == written {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("verification failed: the archive reads back as {read_back:?}, not {written:?}"),
    ))
}

/// Whether the backup in `dir` is whole: its manifest reads, and every data file it lists is
/// there with the size it records. `Ok(Some(why))` when it is not; `Err` when the disk would
/// not say (the backup may be fine).
fn whole(dir: &Path) -> io::Result<Option<String>> {
    let manifest = match Manifest::read(dir) {
        Ok(m) => m,
        Err(e) => return Ok(Some(format!("its {}: {e}", manifest::FILE_NAME))),
    };
    for kind in Kind::ALL {
        let name = kind.file_name();
        let Some(listed) = manifest.file(kind) else {
            return Ok(Some(format!("its {} lists no {name}", manifest::FILE_NAME)));
        };
        match std::fs::metadata(dir.join(name)) {
            Ok(meta) if meta.is_file() && meta.len() == listed.bytes => {}
            Ok(meta) => {
                return Ok(Some(format!(
                    "{name} is {} bytes; its {} records {}",
                    meta.len(),
                    manifest::FILE_NAME,
                    listed.bytes
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Some(format!("{name} is missing")));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Where backups that are not whole go, beside `Backups/Automatic/`.
pub const QUARANTINE_DIR: &str = "Quarantined";

/// Moves a backup that is not whole to `Backups/Quarantined/<name>` (`-2`, `-3`… if taken),
/// where no rollup packs or deletes it; returns where it went.
fn quarantine(layout: &Layout, backup: &Path) -> io::Result<PathBuf> {
    let dir = quarantine_dir(layout);
    std::fs::create_dir_all(&dir)?;
    let name = backup.file_name().unwrap_or_default().to_string_lossy();
    let mut target = dir.join(&*name);
    let mut n = 1;
    while std::fs::symlink_metadata(&target).is_ok() {
        n += 1;
        target = dir.join(format!("{name}-{n}"));
    }
    std::fs::rename(backup, &target)?;
    fsio::sync_dir(&dir)?;
    fsio::sync_dir(&layout.backups)?;
    Ok(target)
}

/// `Backups/Quarantined/`: the sibling of `Backups/Automatic/`.
pub fn quarantine_dir(layout: &Layout) -> PathBuf {
    layout.backups.with_file_name(QUARANTINE_DIR)
}

/// Suffix of an archive file set aside because it did not verify.
pub const UNVERIFIED: &str = ".unverified";

/// Step 1's check for one kind (if it is on): every archive file of a period that has backups
/// is verified; one that fails is renamed `<name>.unverified` (`-2`, `-3`… if taken), so that
/// it no longer counts as the period's archive. Each is recorded in `set_aside`, with why.
fn set_aside_unverified(
    plan: &Plan,
    period: Period,
    backups: &[Backup],
    set_aside: &mut Vec<(PathBuf, CheckError)>,
) -> io::Result<()> {
    if plan.retention(period) == 0 {
        return Ok(());
    }
    let before = set_aside.len();
    for key in newest_per_period(plan, period, backups).keys() {
        for (format, path) in candidates(plan, period, key) {
            if !path.is_file() {
                continue;
            }
            if let Err(why) = check::verify(&path, format, plan.limits) {
                let aside = unverified_name(&path);
                std::fs::rename(&path, &aside)?;
                set_aside.push((aside, why));
            }
        }
    }
    if set_aside.len() > before {
        fsio::sync_dir(&plan.kind_dir(period))?;
    }
    Ok(())
}

/// `<name>.unverified`, or `<name>.unverified-2`… if taken (never a name retention or a
/// restore would take for an archive: it does not end in an archive extension).
fn unverified_name(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut aside = path.with_file_name(format!("{name}{UNVERIFIED}"));
    let mut n = 1;
    while std::fs::symlink_metadata(&aside).is_ok() {
        n += 1;
        aside = path.with_file_name(format!("{name}{UNVERIFIED}-{n}"));
    }
    aside
}

/// The files of a save, in a fixed order: the manifest, then the data files.
fn save_files(dir: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let mut files = vec![manifest::FILE_NAME.to_owned()];
    files.extend(Kind::ALL.iter().map(|k| k.file_name().to_owned()));
    files
        .into_iter()
        .map(|name| {
            let path = dir.join(&name);
            if path.is_file() {
                Ok((name, path))
            } else {
                Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} is missing from the backup", path.display()),
                ))
            }
        })
        .collect()
}

/// Removes what a crashed run left: `.tmp-*` files in a kind's directory.
fn clean_temp_files(kind_dir: &Path) -> io::Result<()> {
    for (name, path) in files_in(kind_dir)? {
        if name.starts_with(TEMP_PREFIX) {
            std::fs::remove_file(path)?;
        }
    }
    Ok(())
}

/// (name, path) of the plain files in `dir`; none if it does not exist.
fn files_in(dir: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let entries = layout::entries(dir)?;
    let mut files = Vec::new();
    for entry in entries {
        if entry.file_type()?.is_file() {
            files.push((
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            ));
        }
    }
    files.sort();
    Ok(files)
}

/// The archives of one kind: (period key, path), by period key.
pub fn archives(plan: &Plan, period: Period) -> io::Result<Vec<(String, PathBuf)>> {
    let mut found: Vec<(String, PathBuf)> = files_in(&plan.kind_dir(period))?
        .into_iter()
        .filter(|(name, _)| !name.starts_with(TEMP_PREFIX))
        .filter_map(|(name, path)| {
            let format = Format::from_name(&name)?;
            Some((format.stem(&name).to_owned(), path))
        })
        .filter(|(key, _)| period.start(key, &plan.zone).is_some())
        .collect();
    found.sort();
    Ok(found)
}

/// An archive as retention sees it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    /// The sequence of the save inside (0 if its manifest does not say or cannot be read).
    sequence: u64,
    /// When its period started.
    start: Timestamp,
    path: PathBuf,
}

/// The archives of one kind, oldest first: by the sequence of the save each holds, then by
/// period. Reads each one's manifest only (within the plan's limits).
fn by_sequence(plan: &Plan, period: Period) -> io::Result<Vec<Held>> {
    let mut held: Vec<Held> = archives(plan, period)?
        .into_iter()
        .filter_map(|(key, path)| {
            let start = period.start(&key, &plan.zone)?;
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let sequence = Format::from_name(&name)
                .and_then(|format| check::manifest(&path, format, plan.limits).ok())
                .and_then(|text| Manifest::parse(&text).ok())
                .map_or(0, |m| m.sequence);
            Some(Held {
                sequence,
                start,
                path,
            })
        })
        .collect();
    held.sort();
    Ok(held)
}

/// Most archives of one kind a run deletes by age (`max_age`); the rest wait for later runs.
/// A clock jumping forward ages every archive at once: this, and never deleting a kind's
/// newest archive, keeps such a jump from wiping the history in one go.
pub const MAX_AGED_OUT_PER_RUN: usize = 1;

/// Step 3 for one kind: the oldest archives (by sequence) beyond its retention, and with
/// `max_age` those whose period started longer than that before the newest archive's (or
/// before `now`, if earlier), never the newest and at most [`MAX_AGED_OUT_PER_RUN`] of them
/// (the others are counted in `later`). A kind whose retention is 0 is left alone. An archive
/// still to be verified off-site goes to `kept` instead of being deleted.
fn apply_retention(
    plan: &Plan,
    period: Period,
    now: Timestamp,
    later: &mut usize,
    kept: &mut Vec<PathBuf>,
) -> io::Result<Vec<PathBuf>> {
    let keep = plan.retention(period);
    if keep == 0 {
        // The kind is off: what exists stays (it is the operator's to delete).
        return Ok(Vec::new());
    }
    if plan.max_age.is_none() && archives(plan, period)?.len() <= keep {
        // Nothing to delete: no need to read which save each archive holds.
        return Ok(Vec::new());
    }
    let all = by_sequence(plan, period)?;
    let surplus = all.len().saturating_sub(keep);
    let reference = all.last().map_or(now, |newest| newest.start.min(now));
    let mut deleted = Vec::new();
    let mut aged_out = 0;
    for (i, held) in all.iter().enumerate() {
        let newest = i + 1 == all.len();
        let too_old = !newest
            && plan.max_age.is_some_and(|age| {
                reference.duration_since(held.start).as_secs_f64() > age.as_secs_f64()
            });
        let by_count = i < surplus;
        if !by_count {
            if !too_old {
                continue;
            }
            if aged_out == MAX_AGED_OUT_PER_RUN {
                *later += 1;
                continue;
            }
            aged_out += 1;
        }
        if !may_delete(plan, &held.path) {
            kept.push(held.path.clone());
            continue;
        }
        std::fs::remove_file(&held.path)?;
        deleted.push(held.path.clone());
    }
    if !deleted.is_empty() {
        fsio::sync_dir(&plan.kind_dir(period))?;
    }
    Ok(deleted)
}

/// What step 4 deleted, and the error that stopped it, if one did.
struct Deleted {
    done: Vec<PathBuf>,
    error: Option<io::Error>,
}

/// Retention may delete `archive`: archives do not go off-site, or its copy there is verified.
fn may_delete(plan: &Plan, archive: &Path) -> bool {
    plan.remote
        .as_ref()
        .is_none_or(|url| mark::is_off_site(url, archive))
}

/// Deletes the backups that are neither among the newest `keep_backups` (by sequence) nor the
/// newest of a period whose archive is still to be written (the current period's included).
/// A kind that is not `trusted` (its archives could not be checked) counts as having none.
fn delete_redundant_backups(
    plan: &Plan,
    backups: &[Backup],
    now: Timestamp,
    trusted: &[bool; 3],
) -> Deleted {
    let mut needed: BTreeSet<&Path> = backups
        .iter()
        .rev()
        .take(plan.keep_backups as usize)
        .map(|b| b.path.as_path())
        .collect();
    for period in Period::ALL {
        if plan.retention(period) == 0 {
            continue;
        }
        let trust = trusted[period as usize];
        let archived = |key: &str| trust && existing_archive(plan, period, key).is_some();
        let current = period.key(now, &plan.zone);
        if let Some(newest) = newest_per_period(plan, period, backups).get(&current) {
            needed.insert(newest.path.as_path());
        }
        for (key, all) in retained(plan, period, backups, now) {
            if let Some(newest) = all.last().filter(|_| !archived(&key)) {
                needed.insert(newest.path.as_path());
            }
        }
    }
    let mut done = Vec::new();
    for backup in backups {
        if !needed.contains(backup.path.as_path()) {
            if let Err(e) = delete_backup(&backup.path) {
                return Deleted {
                    done,
                    error: Some(e),
                };
            }
            done.push(backup.path.clone());
        }
    }
    Deleted { done, error: None }
}

/// Prefix of a backup being deleted.
const DELETING: &str = ".deleting-";

/// Renames the backup out of the way first (one atomic step), then deletes it: a crash
/// half-way leaves a `.deleting-*` directory the next run removes, never a backup that looks
/// complete but has lost files.
fn delete_backup(path: &Path) -> io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let doomed = path.with_file_name(format!("{DELETING}{name}"));
    std::fs::rename(path, &doomed)?;
    std::fs::remove_dir_all(&doomed)
}

/// Finishes deletions a crash interrupted.
fn clean_deletions(layout: &Layout) -> io::Result<()> {
    for entry in layout::entries(&layout.backups)? {
        if entry.file_name().to_string_lossy().starts_with(DELETING) {
            std::fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_keys_and_starts_follow_the_zone() {
        let at: Timestamp = "2026-12-03T23:30:00Z".parse().unwrap();
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        assert_eq!(Period::Hourly.key(at, &TimeZone::UTC), "2026-12-03-23");
        assert_eq!(Period::Hourly.key(at, &berlin), "2026-12-04-00");
        assert_eq!(Period::Daily.key(at, &berlin), "2026-12-04");
        assert_eq!(Period::Monthly.key(at, &berlin), "2026-12");
        let start = Period::Daily.start("2026-12-04", &berlin).unwrap();
        assert_eq!(start, "2026-12-03T23:00:00Z".parse().unwrap());
        assert_eq!(Period::Hourly.start("2026-12-04-xx", &berlin), None);
        assert_eq!(
            backup_time("2026-12-03-10-00-00-2"),
            Some("2026-12-03T10:00:00Z".parse().unwrap())
        );
        assert_eq!(backup_time("Restored-2026"), None);
    }
}
