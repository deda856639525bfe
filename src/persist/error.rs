//! The persistence error: which operation failed, at which step, on which path, and the
//! operating system's own error.
//!
//! Every failure of a save, an archive rollup or prune, or the autosave override file is a
//! [`PersistError`]. Data that is not what it should be (a corrupt file, an archive that does
//! not read back as written) is reported the same way, with an [`io::ErrorKind::InvalidData`]
//! source, so a caller tells a full disk from bad data by the source alone:
//!
//! ```
//! # use shardloop::persist::PersistError;
//! fn out_of_room(e: &PersistError) -> bool {
//!     e.source.raw_os_error() == Some(libc::ENOSPC)
//! }
//! ```
//!
//! The source sits behind an [`Arc`] because an outcome is shared: every caller awaiting the
//! same save gets a copy, notices are cloned to their listeners, and the shard's final report
//! is `Clone`; `io::Error` itself cannot be cloned without losing its OS error code.
//!
//! Owns the error's shape and wording. Must never decide what to do about an error (retry,
//! log, tell players): the callers do.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What was being done when a [`PersistError`] happened. It decides how the error opens, and
/// what it promises about the data already on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Writing a world save.
    Save,
    /// An archive rollup.
    Rollup,
    /// Retention and age pruning on their own (the console's `prunearchives`).
    Prune,
    /// Reading or writing `autosave.toml`, the console's autosave cadence.
    AutosaveOverride,
}

impl Operation {
    /// How an error of this operation opens.
    fn failed(self) -> &'static str {
        match self {
            Operation::Save => "world save failed",
            Operation::Rollup => "archive rollup failed",
            Operation::Prune => "pruning archives failed",
            Operation::AutosaveOverride => "autosave override failed",
        }
    }

    /// What stays true after a failure, for the operator reading the log.
    fn promise(self) -> Option<&'static str> {
        match self {
            Operation::Save => Some("the previous save is intact"),
            Operation::Rollup => {
                Some("every backup an archive still needs is kept, the next run tries again")
            }
            Operation::Prune | Operation::AutosaveOverride => None,
        }
    }
}

/// A persistence operation that failed: the operation, the step (`"writing"`, `"syncing"`,
/// ...), the file or directory that step worked on, and why.
///
/// Displays as `<operation> failed while <step> <path>: <source>[; <what is on disk>]`
/// (what is still true after any failure of the operation, or [`on_disk`](Self::on_disk)
/// when set), e.g. `world save failed while writing /data/.tmp-save-1-0-0/items.bin: No
/// space left on device (os error 28); the previous save is intact`.
#[derive(Debug, Clone)]
pub struct PersistError {
    /// The operation that failed (a world save, a rollup, a restore, ...).
    pub operation: Operation,
    /// What the operation was doing, as a verb phrase that reads well before the path.
    pub step: &'static str,
    /// The file or directory the failing step worked on.
    pub path: PathBuf,
    /// The OS error (`kind()`, `raw_os_error()`), or `InvalidData` for data that is wrong.
    pub source: Arc<io::Error>,
    /// What is on disk after this failure, when it is not what the operation promises after
    /// every failure (a save that failed only after it was put in place): said instead.
    /// (Behind an `Arc`, a thin pointer, like `source`: errors travel in `Result`s and are
    /// cloned to every listener.)
    pub on_disk: Option<Arc<String>>,
}

impl PersistError {
    /// The failure of `operation` while `step` on `path`, for the OS's reason `source`.
    pub fn new(
        operation: Operation,
        step: &'static str,
        path: impl Into<PathBuf>,
        source: io::Error,
    ) -> PersistError {
        PersistError {
            operation,
            step,
            path: path.into(),
            source: Arc::new(source),
            on_disk: None,
        }
    }

    /// The same error, saying `what` is on disk instead of the operation's usual promise.
    pub fn with_on_disk(mut self, what: impl Into<String>) -> PersistError {
        self.on_disk = Some(Arc::new(what.into()));
        self
    }

    /// A function that wraps an `io::Error` of `step` on `path`, for `map_err`.
    pub fn at(
        operation: Operation,
        step: &'static str,
        path: &Path,
    ) -> impl FnOnce(io::Error) -> PersistError {
        move |source| PersistError::new(operation, step, path, source)
    }

    /// The data was wrong rather than the filesystem: `reason` says how.
    pub fn invalid_data(
        operation: Operation,
        step: &'static str,
        path: impl Into<PathBuf>,
        reason: impl Into<String>,
    ) -> PersistError {
        let source = io::Error::new(io::ErrorKind::InvalidData, reason.into());
        PersistError::new(operation, step, path, source)
    }

    /// The filesystem or the quota is full: retrying before someone makes room fails the
    /// same way.
    pub fn is_out_of_space(&self) -> bool {
        matches!(
            self.source.raw_os_error(),
            Some(libc::ENOSPC | libc::EDQUOT)
        )
    }

    /// The data read was wrong (as opposed to the filesystem failing).
    pub fn is_invalid_data(&self) -> bool {
        self.source.kind() == io::ErrorKind::InvalidData
    }
}

impl fmt::Display for PersistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} while {} {}: {}",
            self.operation.failed(),
            self.step,
            self.path.display(),
            self.source
        )?;
        match self
            .on_disk
            .as_deref()
            .map(String::as_str)
            .or(self.operation.promise())
        {
            Some(promise) => write!(f, "; {promise}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for PersistError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_the_operation_step_path_cause_and_promise() {
        let full = io::Error::from_raw_os_error(libc::ENOSPC);
        let e = PersistError::new(Operation::Save, "writing", "/d/items.bin", full);
        let text = e.to_string();
        assert!(
            text.starts_with("world save failed while writing /d/items.bin: No space left"),
            "{text}"
        );
        assert!(text.ends_with("; the previous save is intact"), "{text}");
        assert!(e.is_out_of_space() && !e.is_invalid_data());
    }

    #[test]
    fn bad_data_is_told_apart_from_a_failing_disk() {
        let e = PersistError::invalid_data(
            Operation::AutosaveOverride,
            "parsing",
            "/d/autosave.toml",
            "`frequency` is missing",
        );
        assert!(e.is_invalid_data() && !e.is_out_of_space());
        assert_eq!(e.source.raw_os_error(), None);
        assert_eq!(
            e.to_string(),
            "autosave override failed while parsing /d/autosave.toml: `frequency` is missing"
        );
        let cloned = e.clone();
        assert!(
            Arc::ptr_eq(&cloned.source, &e.source),
            "clones share the source"
        );
    }
}
