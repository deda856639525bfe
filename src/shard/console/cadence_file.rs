//! `savefrequency`'s override file (`autosave.toml`), written off the loop: the loop changes
//! the cadence at once and hands the file to a blocking-pool thread, which writes it (a temp
//! file, fsynced, renamed) and speaks up only if it fails.
//!
//! Writes may finish out of order, so each carries a number and the newest wins: a write older
//! than one already on disk is skipped, and the file always ends with the cadence typed last.
//!
//! This module must never touch the disk on the loop thread.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::persist::autosave::{self, Cadence};

use super::Printer;

/// The override writer; clones share it.
#[derive(Debug, Clone, Default)]
pub(in crate::shard) struct CadenceFile {
    /// The number of the newest write started (the loop's side: never waits).
    started: Arc<AtomicU64>,
    /// The number of the newest written, locked while writing (the writers' side).
    written: Arc<Mutex<u64>>,
}

impl CadenceFile {
    /// Writes `cadence` under `data_dir` off the loop; a failure is logged and printed.
    /// Returns where it goes.
    pub(in crate::shard) fn keep(
        &self,
        data_dir: PathBuf,
        cadence: Cadence,
        printer: Option<Printer>,
    ) -> PathBuf {
        let number = self.started.fetch_add(1, Ordering::Relaxed) + 1;
        let path = autosave::override_path(&data_dir);
        let written = self.written.clone();
        tokio::task::spawn_blocking(move || {
            let mut written = written.lock().unwrap_or_else(PoisonError::into_inner);
            if *written > number {
                return; // a newer cadence is already on disk
            }
            match autosave::store_override(&data_dir, cadence) {
                Ok(_) => *written = number,
                Err(e) => {
                    let answer = format!(
                        "savefrequency: the cadence is NOT kept across restarts (cannot write \
                         the override file: {e}); it applies until the shard stops"
                    );
                    tracing::warn!("{answer}");
                    if let Some(printer) = printer {
                        printer.say(answer);
                    }
                }
            }
        });
        path
    }
}
