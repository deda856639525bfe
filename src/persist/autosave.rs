//! Autosave: a loop task that warns players, then saves, at the times `schedule` aligns to
//! the clock; and the console's changes to it.
//!
//! Each round computes the next save time from the clock *now*: a shard that stalled (or was
//! suspended) past a save time saves once and then finds the next aligned time, instead of
//! running every missed save back to back. A change of settings (`savefrequency`,
//! `autosave on|off`) interrupts the wait and the round starts over with the new values.
//!
//! `savefrequency` persists its values in `<data_dir>/autosave.toml`, which overrides the
//! configuration's `[autosave] frequency` and `warning` at the next start (the shard logs it
//! when it does; deleting the file goes back to the configuration). `autosave on|off` lasts
//! until restart: `autosave.enabled` decides at startup, so a shard is never left not saving
//! by a console command someone forgot.
//!
//! Owns the schedule loop and the override file. Must never save by itself (the [`Saver`]
//! does) nor block the loop.

use std::cell::Cell;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use tokio::sync::Notify;

use super::clock::Clock;
use super::error::{Operation, PersistError};
use super::fsio;
use super::saver::{Notice, Saver};
use super::schedule::{self, MAX_FREQUENCY};
use crate::timer;

/// The file `savefrequency` writes, under the data directory.
pub const OVERRIDE_FILE: &str = "autosave.toml";
/// Longest single timer wait: the wall clock is re-read at least this often, so a clock
/// step (NTP, a suspended VM) moves the schedule with it.
const RECHECK: Duration = Duration::from_secs(60);

/// Frequency and warning of autosaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cadence {
    /// How often the world is saved.
    pub every: Duration,
    /// How long before each save players are warned. Zero = no warning.
    pub warning: Duration,
}

impl Cadence {
    /// Checks a cadence from the console or the override file.
    pub fn new(every: Duration, warning: Duration) -> Result<Cadence, CadenceError> {
        if every < Duration::from_secs(1) || every > MAX_FREQUENCY {
            return Err(CadenceError::Frequency { every });
        }
        if warning >= every {
            return Err(CadenceError::Warning { warning, every });
        }
        Ok(Cadence { every, warning })
    }
}

/// A cadence [`Cadence::new`] refuses, with the figures at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CadenceError {
    /// The frequency is under 1 s or over 24 h.
    Frequency {
        /// The frequency asked for.
        every: Duration,
    },
    /// The warning is not shorter than the frequency.
    Warning {
        /// The warning asked for.
        warning: Duration,
        /// The frequency it must be shorter than.
        every: Duration,
    },
}

impl fmt::Display for CadenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let human = humantime::format_duration;
        match *self {
            CadenceError::Frequency { every } => {
                write!(f, "frequency {} must be between 1s and 24h", human(every))
            }
            CadenceError::Warning { warning, every } => write!(
                f,
                "warning {} must be shorter than the frequency {}",
                human(warning),
                human(every)
            ),
        }
    }
}

impl std::error::Error for CadenceError {}

/// The autosave schedule; clones share it. Lives on the loop thread.
#[derive(Clone)]
pub struct Autosave {
    inner: Rc<Inner>,
}

struct Inner {
    saver: Saver,
    clock: Clock,
    zone: TimeZone,
    enabled: Cell<bool>,
    cadence: Cell<Cadence>,
    changed: Notify,
    stopped: Cell<bool>,
    /// The save time being waited for, for `status`.
    next: Cell<Option<Timestamp>>,
    notices: Box<dyn Fn(&Notice)>,
}

impl Autosave {
    /// Starts the schedule as a loop task. `notices` hears the warnings (save notices come
    /// from the saver).
    pub fn start(
        saver: Saver,
        clock: Clock,
        zone: TimeZone,
        enabled: bool,
        cadence: Cadence,
        notices: Box<dyn Fn(&Notice)>,
    ) -> Autosave {
        let inner = Rc::new(Inner {
            saver,
            clock,
            zone,
            enabled: Cell::new(enabled),
            cadence: Cell::new(cadence),
            changed: Notify::new(),
            stopped: Cell::new(false),
            next: Cell::new(None),
            notices,
        });
        let task = inner.clone();
        // Detached: it ends when `stop` is called (or with the loop).
        drop(crate::spawn(async move { task.run().await }));
        Autosave { inner }
    }

    /// Ends the schedule (shutdown takes its own final save).
    pub fn stop(&self) {
        self.inner.stopped.set(true);
        self.inner.changed.notify_one();
    }

    /// Turns autosave on or off until the next restart (the console's `autosave on|off`).
    pub fn set_enabled(&self, on: bool) {
        self.inner.enabled.set(on);
        self.inner.changed.notify_one();
    }

    /// Changes the cadence from the next scheduled save on (the console's `savefrequency`).
    pub fn set_cadence(&self, cadence: Cadence) {
        self.inner.cadence.set(cadence);
        self.inner.changed.notify_one();
    }

    /// Whether autosave is on.
    pub fn enabled(&self) -> bool {
        self.inner.enabled.get()
    }

    /// The cadence in force.
    pub fn cadence(&self) -> Cadence {
        self.inner.cadence.get()
    }

    /// The next autosave, when enabled.
    pub fn next(&self) -> Option<Timestamp> {
        self.inner.next.get().filter(|_| self.enabled())
    }
}

impl Inner {
    async fn run(self: Rc<Inner>) {
        while !self.stopped.get() {
            let Cadence { every, warning } = self.cadence.get();
            let at = schedule::next_save(self.clock.now(), every, &self.zone);
            self.next.set(Some(at));
            if !warning.is_zero() {
                let warn_at = at - jiff::SignedDuration::try_from(warning).unwrap_or_default();
                if warn_at > self.clock.now() {
                    if !self.sleep_until(warn_at).await {
                        continue;
                    }
                    if self.enabled.get() {
                        let left = self.clock.now().duration_until(at);
                        let left = Duration::try_from(left).unwrap_or_default();
                        (self.notices)(&Notice::Warning(round_to_seconds(left)));
                    }
                }
            }
            if !self.sleep_until(at).await {
                continue;
            }
            if self.enabled.get() && !self.stopped.get() {
                // Failures are reported by the saver; the next round tries again.
                let _ = self.saver.save().await;
            }
        }
    }

    /// Waits until the clock reads `at`; false if the settings changed first.
    async fn sleep_until(&self, at: Timestamp) -> bool {
        loop {
            let left = self.clock.now().duration_until(at);
            let Ok(left) = Duration::try_from(left) else {
                return true; // `at` has passed
            };
            if left.is_zero() {
                return true;
            }
            tokio::select! {
                biased;
                () = self.changed.notified() => return false,
                () = timer::pause_for(left.min(RECHECK)) => {}
            }
        }
    }
}

fn round_to_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs_f64().round() as u64)
}

/// `<data_dir>/autosave.toml`.
pub fn override_path(data_dir: &Path) -> PathBuf {
    data_dir.join(OVERRIDE_FILE)
}

/// Writes the console's cadence where the next start finds it (atomically: a temp file,
/// fsynced, renamed over the old one).
pub fn store_override(data_dir: &Path, cadence: Cadence) -> Result<PathBuf, PersistError> {
    let path = override_path(data_dir);
    let text = format!(
        "# Written by the console command `savefrequency`. It overrides [autosave] frequency\n\
         # and warning of the configuration; delete this file to use the configuration's.\n\
         frequency = \"{}\"\nwarning = \"{}\"\n",
        humantime::format_duration(cadence.every),
        humantime::format_duration(cadence.warning),
    );
    fsio::replace(&path, &format!("{OVERRIDE_FILE}.tmp"), text.as_bytes()).map_err(
        PersistError::at(Operation::AutosaveOverride, "replacing", &path),
    )?;
    Ok(path)
}

/// The cadence `savefrequency` stored, if any. A file that cannot be used is an error
/// naming it (`InvalidData` when it reads but makes no sense); the caller keeps the
/// configuration's values and says so.
pub fn read_override(data_dir: &Path) -> Result<Option<Cadence>, PersistError> {
    let path = override_path(data_dir);
    let text = match std::fs::read_to_string(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        other => other.map_err(PersistError::at(
            Operation::AutosaveOverride,
            "reading",
            &path,
        ))?,
    };
    parse_override(&text).map(Some).map_err(|reason| {
        let source = io::Error::new(io::ErrorKind::InvalidData, reason);
        PersistError::new(Operation::AutosaveOverride, "parsing", &path, source)
    })
}

/// The cadence in the override file's text, or what is wrong with it.
fn parse_override(text: &str) -> Result<Cadence, OverrideError> {
    let doc: toml::Table = text.parse().map_err(OverrideError::Toml)?;
    let duration = |key: &'static str| -> Result<Duration, OverrideError> {
        let value = doc
            .get(key)
            .and_then(|v| v.as_str())
            .ok_or(OverrideError::Missing { key })?;
        humantime::parse_duration(value).map_err(|source| OverrideError::Duration {
            key,
            value: value.to_owned(),
            source,
        })
    };
    Ok(Cadence::new(duration("frequency")?, duration("warning")?)?)
}

/// What is wrong with the text of [`OVERRIDE_FILE`]. [`read_override`] reports it as the
/// `InvalidData` source of its [`PersistError`] (`source.get_ref()` downcasts to it); the
/// text names the key at fault, not the file (the `PersistError` does).
#[derive(Debug)]
#[non_exhaustive]
pub enum OverrideError {
    /// Not TOML at all.
    Toml(toml::de::Error),
    /// `frequency` or `warning` is not there, or not a string.
    Missing {
        /// `"frequency"` or `"warning"`.
        key: &'static str,
    },
    /// `frequency` or `warning` is not a duration (`"30m"`, `"1h"`).
    Duration {
        /// `"frequency"` or `"warning"`.
        key: &'static str,
        /// The text the file holds.
        value: String,
        /// Why it is not a duration.
        source: humantime::DurationError,
    },
    /// Both are durations, but not a cadence [`Cadence::new`] accepts.
    Cadence(CadenceError),
}

impl fmt::Display for OverrideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OverrideError::Toml(e) => write!(f, "not valid TOML: {e}"),
            OverrideError::Missing { key } => write!(f, "`{key}` is missing or not a string"),
            OverrideError::Duration { key, value, source } => {
                write!(f, "`{key}` = {value:?}: {source}")
            }
            OverrideError::Cadence(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for OverrideError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OverrideError::Toml(e) => Some(e),
            OverrideError::Missing { .. } => None,
            OverrideError::Duration { source, .. } => Some(source),
            OverrideError::Cadence(e) => Some(e),
        }
    }
}

impl From<CadenceError> for OverrideError {
    fn from(e: CadenceError) -> OverrideError {
        OverrideError::Cadence(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_file_round_trips_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_override(dir.path()).unwrap(), None);
        let c = Cadence::new(Duration::from_secs(1800), Duration::from_secs(60)).unwrap();
        store_override(dir.path(), c).unwrap();
        assert_eq!(read_override(dir.path()).unwrap(), Some(c));
        std::fs::write(override_path(dir.path()), "frequency = \"soon\"\n").unwrap();
        let e = read_override(dir.path()).unwrap_err();
        assert!(e.is_invalid_data(), "{e}");
        let why = e
            .source
            .get_ref()
            .and_then(|s| s.downcast_ref::<OverrideError>());
        assert!(
            matches!(
                why,
                Some(OverrideError::Duration {
                    key: "frequency",
                    ..
                })
            ),
            "{why:?}"
        );
        let e = e.to_string();
        assert!(e.contains("autosave.toml") && e.contains("soon"), "{e}");
        std::fs::write(override_path(dir.path()), "frequency = \"1h\"\n").unwrap();
        let e = read_override(dir.path()).unwrap_err().to_string();
        assert!(e.ends_with("`warning` is missing or not a string"), "{e}");
        let text = "frequency = \"1m\"\nwarning = \"1m\"\n";
        std::fs::write(override_path(dir.path()), text).unwrap();
        let e = read_override(dir.path()).unwrap_err().to_string();
        assert!(
            e.ends_with("warning 1m must be shorter than the frequency 1m"),
            "{e}"
        );
    }

    #[test]
    fn a_cadence_must_make_sense() {
        let s = Duration::from_secs;
        let e = Cadence::new(s(60), s(60)).unwrap_err();
        assert_eq!(
            e,
            CadenceError::Warning {
                warning: s(60),
                every: s(60)
            }
        );
        assert_eq!(
            e.to_string(),
            "warning 1m must be shorter than the frequency 1m"
        );
        assert!(Cadence::new(s(0), s(0)).is_err());
        let e = Cadence::new(s(25 * 3600), s(0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "frequency 1day 1h must be between 1s and 24h"
        );
        assert!(Cadence::new(s(3600), s(60)).is_ok());
    }
}
