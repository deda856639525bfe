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
//!    renamed `<name>.unverified`, with a warning, and its period is archived again;
//! 2. for each kind (hourly, daily, monthly) with a retention above 0, and each *past* period
//!    among the newest `retention` periods that have backups and no archive yet: pack that
//!    period's newest complete backup into a temp file, fsync it, read it back and compare
//!    every entry's size and CRC-32 with what was written, and only then rename it to
//!    `<Kind>/<period><ext>`;
//! 3. retention: keep the newest `retention` archives of each kind (and, with `prune`, none
//!    older than `max_age`); a kind whose retention is 0 is off: none are made, and the ones
//!    that exist are kept (never deleted, by count or by age); with archives going off-site
//!    (`Plan::remote`), an archive is deleted only once its copy there is verified
//!    (`upload::is_off_site`), and kept until then;
//! 4. only if every archive of step 2 was written: delete the backups that are neither among
//!    the newest `keep_backups` nor still needed by an archive that does not exist yet.
//!
//! So a crash or a full disk at any point loses nothing: no partial archive carries a final
//! name (the rename comes after the verification), no backup is deleted before the archives
//! that need it exist, and the next run picks up where this one stopped.
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
use super::remote::RemoteUrl;
use super::upload;
use crate::persist::error::{Operation, PersistError};
use crate::persist::file::Kind;
use crate::persist::fsio;
use crate::persist::layout::{self, BACKUP_MARKER, Layout, TEMP_PREFIX};
use crate::persist::manifest;

/// The three kinds of archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Period {
    /// One archive per clock hour (`Hourly/2026-12-03-10.tar.zst`).
    Hourly,
    /// One archive per calendar day (`Daily/2026-12-03.tar.zst`).
    Daily,
    /// One archive per calendar month (`Monthly/2026-12.tar.zst`).
    Monthly,
}

impl Period {
    /// Every kind, shortest period first: the order of a [`Plan`]'s `retention`.
    pub const ALL: [Period; 3] = [Period::Hourly, Period::Daily, Period::Monthly];

    /// The directory under the archive directory.
    pub fn dir_name(self) -> &'static str {
        match self {
            Period::Hourly => "Hourly",
            Period::Daily => "Daily",
            Period::Monthly => "Monthly",
        }
    }

    /// The period holding `at` in `zone`, as its archive name (`2026-12-03-10`, `2026-12-03`,
    /// `2026-12`).
    pub fn key(self, at: Timestamp, zone: &TimeZone) -> String {
        let format = match self {
            Period::Hourly => "%Y-%m-%d-%H",
            Period::Daily => "%Y-%m-%d",
            Period::Monthly => "%Y-%m",
        };
        at.to_zoned_datetime(zone.clone())
            .strftime(format)
            .to_string()
    }

    /// When the period named `key` starts, in `zone`.
    pub fn start(self, key: &str, zone: &TimeZone) -> Option<Timestamp> {
        let mut parts = key.split('-').map(|p| p.parse::<i16>().ok());
        let year = parts.next()??;
        let month = parts.next()?? as i8;
        let (day, hour) = match self {
            Period::Monthly => (1, 0),
            Period::Daily => (parts.next()?? as i8, 0),
            Period::Hourly => (parts.next()?? as i8, parts.next()?? as i8),
        };
        let civil = DateTime::new(year, month, day, hour, 0, 0, 0).ok()?;
        civil
            .to_zoned_datetime(zone.clone())
            .ok()
            .map(|z| z.timestamp())
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Period::Hourly => "hourly",
            Period::Daily => "daily",
            Period::Monthly => "monthly",
        })
    }
}

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

/// A complete backup: a directory of `Backups/Automatic/` with its marker.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Backup {
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
    /// Backups deleted: archived, and not among the newest `keep_backups`.
    pub deleted_backups: Vec<PathBuf>,
    /// Archive files that did not verify, renamed out of the way: (new path, why).
    pub set_aside: Vec<(PathBuf, CheckError)>,
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

/// A run that stopped: what it was doing and why (nothing was lost), and what it had done.
#[derive(Debug, Clone)]
pub struct RollupError {
    /// What failed: the step, the path and the OS's reason.
    pub error: PersistError,
    /// What the run had done before it stopped (boxed: errors stay small to pass around).
    pub partial: Box<Report>,
}

impl fmt::Display for RollupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for RollupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// One full run at `now`. Blocking.
pub fn run(layout: &Layout, plan: &Plan, now: Timestamp) -> Result<Report, RollupError> {
    let began = Instant::now();
    let mut report = Report::default();
    let result = run_steps(layout, plan, now, &mut report);
    report.took = began.elapsed();
    match result {
        Ok(()) => Ok(report),
        Err(error) => Err(RollupError {
            error,
            partial: Box::new(report),
        }),
    }
}

/// Steps 1 to 4 of the module docs, recording in `report` what each did.
fn run_steps(
    layout: &Layout,
    plan: &Plan,
    now: Timestamp,
    report: &mut Report,
) -> Result<(), PersistError> {
    let backups_dir = layout.backups.as_path();
    clean_temp_files(plan).map_err(fail("cleaning temp files in", &plan.dir))?;
    clean_deletions(layout).map_err(fail("finishing interrupted deletions in", backups_dir))?;
    let backups = backups(layout).map_err(fail("listing backups in", backups_dir))?;
    set_aside_unverified(plan, &backups, &mut report.set_aside)
        .map_err(fail("checking the archives in", &plan.dir))?;
    for period in Period::ALL {
        for (key, backup) in due(plan, period, &backups, now) {
            let target = archive_path(plan, period, &key);
            let written =
                write_archive(plan, period, &backup, &target).map_err(fail("writing", &target))?;
            report.written.push(written);
        }
    }
    report.pruned = apply_retention(plan, now, &mut report.held)
        .map_err(fail("applying retention in", &plan.dir))?;
    report.deleted_backups = delete_redundant_backups(plan, &backups, now)
        .map_err(fail("deleting archived backups in", backups_dir))?;
    Ok(())
}

/// Wraps an `io::Error` of `step` on `path` as the rollup's failure.
fn fail(step: &'static str, path: &Path) -> impl FnOnce(io::Error) -> PersistError {
    PersistError::at(Operation::Rollup, step, path)
}

/// Retention and age pruning only (the console's `prunearchives`).
pub fn prune(plan: &Plan, now: Timestamp) -> Result<Vec<PathBuf>, PersistError> {
    apply_retention(plan, now, &mut Vec::new()).map_err(PersistError::at(
        Operation::Prune,
        "applying retention in",
        &plan.dir,
    ))
}

/// Complete automatic backups, oldest first.
pub fn backups(layout: &Layout) -> io::Result<Vec<Backup>> {
    let entries = layout::entries(&layout.backups)?;
    let mut found = Vec::new();
    for entry in entries {
        let path = entry.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if let Some(created) = backup_time(&name)
            && path.join(BACKUP_MARKER).is_file()
        {
            found.push(Backup { created, path });
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

/// The past periods of `period` that should have an archive and do not: among the newest
/// `retention` past periods with backups; each with its newest backup.
fn due(plan: &Plan, period: Period, backups: &[Backup], now: Timestamp) -> Vec<(String, Backup)> {
    let current = period.key(now, &plan.zone);
    newest_per_period(plan, period, backups)
        .into_iter()
        .rev()
        .filter(|(key, _)| *key != current)
        .take(plan.retention(period))
        .filter(|(key, _)| existing_archive(plan, period, key).is_none())
        .map(|(key, backup)| (key, backup.clone()))
        .collect()
}

/// Each period's newest backup, by period (oldest first).
fn newest_per_period<'a>(
    plan: &Plan,
    period: Period,
    backups: &'a [Backup],
) -> BTreeMap<String, &'a Backup> {
    let mut newest = BTreeMap::new();
    for backup in backups {
        // Oldest first, so each later backup of a period replaces the one before.
        newest.insert(period.key(backup.created, &plan.zone), backup);
    }
    newest
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

/// Suffix of an archive file set aside because it did not verify.
pub const UNVERIFIED: &str = ".unverified";

/// Step 1's check: every archive file of a period (of a kind that is on) that has backups is
/// verified; one that fails is renamed `<name>.unverified` (`-2`, `-3`… if taken), so that
/// it no longer counts as the period's archive. Each is recorded in `set_aside`, with why.
fn set_aside_unverified(
    plan: &Plan,
    backups: &[Backup],
    set_aside: &mut Vec<(PathBuf, CheckError)>,
) -> io::Result<()> {
    for period in Period::ALL {
        if plan.retention(period) == 0 {
            continue;
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

/// Removes what a crashed run left: `.tmp-*` files in the kind directories.
fn clean_temp_files(plan: &Plan) -> io::Result<()> {
    for period in Period::ALL {
        for (name, path) in files_in(&plan.kind_dir(period))? {
            if name.starts_with(TEMP_PREFIX) {
                std::fs::remove_file(path)?;
            }
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

/// The archives of one kind: (period key, path), oldest first.
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

/// Deletes what retention does not keep; an archive still to be verified off-site goes to
/// `held` instead.
fn apply_retention(
    plan: &Plan,
    now: Timestamp,
    held: &mut Vec<PathBuf>,
) -> io::Result<Vec<PathBuf>> {
    let mut deleted = Vec::new();
    for period in Period::ALL {
        let keep = plan.retention(period);
        if keep == 0 {
            // The kind is off: what exists stays (it is the operator's to delete).
            continue;
        }
        let all = archives(plan, period)?;
        let surplus = all.len().saturating_sub(keep);
        let before = deleted.len();
        for (i, (key, path)) in all.iter().enumerate() {
            let too_old = plan.max_age.is_some_and(|age| {
                let start = period.start(key, &plan.zone).unwrap_or(now);
                now.duration_since(start).as_secs_f64() > age.as_secs_f64()
            });
            let doomed = i < surplus || too_old;
            if doomed && !may_delete(plan, path) {
                held.push(path.clone());
            } else if doomed {
                std::fs::remove_file(path)?;
                deleted.push(path.clone());
            }
        }
        if deleted.len() > before {
            fsio::sync_dir(&plan.kind_dir(period))?;
        }
    }
    Ok(deleted)
}

/// Retention may delete `archive`: archives do not go off-site, or its copy there is verified.
fn may_delete(plan: &Plan, archive: &Path) -> bool {
    plan.remote
        .as_ref()
        .is_none_or(|url| upload::is_off_site(url, archive))
}

/// Deletes the backups that are neither among the newest `keep_backups` nor the newest of a
/// period whose archive is still to be written (the current period's included).
fn delete_redundant_backups(
    plan: &Plan,
    backups: &[Backup],
    now: Timestamp,
) -> io::Result<Vec<PathBuf>> {
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
        let newest = newest_per_period(plan, period, backups);
        let current = period.key(now, &plan.zone);
        let retained: Vec<&String> = newest
            .keys()
            .rev()
            .filter(|k| **k != current)
            .take(plan.retention(period))
            .collect();
        for (key, backup) in &newest {
            let wanted = *key == current || retained.contains(&key);
            if wanted && existing_archive(plan, period, key).is_none() {
                needed.insert(backup.path.as_path());
            }
        }
    }
    let mut deleted = Vec::new();
    for backup in backups {
        if !needed.contains(backup.path.as_path()) {
            delete_backup(&backup.path)?;
            deleted.push(backup.path.clone());
        }
    }
    Ok(deleted)
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
