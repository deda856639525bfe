//! Save outcomes as they happen, for `/metrics` and the status page: how many saves ended
//! (and how), how long they took and held the loop, when the last one succeeded, and why the
//! failures failed.
//!
//! The shard hands every save [`Notice`] to [`SaveLog::record`] on the loop. The Prometheus
//! metrics it updates are atomics shared with the HTTP thread (no lock, no wait); the last
//! save's summary stays on the loop and travels in a probe's [`super::Snapshot`]. It must
//! never block: a notice costs a few atomic adds.

use std::cell::RefCell;

use jiff::Timestamp;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use crate::persist::{Notice, PersistError};

/// Save durations, seconds: a small world saves in well under a second, a big one in tens.
const DURATION_BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
/// Loop stalls for the snapshot, seconds: milliseconds matter here.
const STALL_BUCKETS: [f64; 9] = [0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];

/// A save failure's labels: what kind of error, and which step of the save hit it (a fixed
/// set of words chosen by the saver, so the series stay few).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// What kind of error: `out_of_space`, `invalid_data` or `io` ([`cause`]).
    pub cause: &'static str,
    /// The step of the save that failed, as the saver names it (its `PersistError::step`).
    pub step: &'static str,
}

/// A save's outcome label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `ok` or `failed`.
    pub outcome: &'static str,
}

/// The save metrics, shared with the HTTP thread (clones share the same atomics).
#[derive(Debug, Clone)]
pub struct SaveMetrics {
    saves: Family<OutcomeLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    duration: Histogram,
    stall: Histogram,
    last_success: Gauge<f64, AtomicU64>,
    last_bytes: Gauge,
}

impl Default for SaveMetrics {
    fn default() -> Self {
        let saves: Family<OutcomeLabels, Counter> = Family::default();
        // Both outcomes exist from the start, so `rate()` and alerts see a zero, not nothing.
        for outcome in ["ok", "failed"] {
            let _ = saves.get_or_create(&OutcomeLabels { outcome });
        }
        SaveMetrics {
            saves,
            failures: Family::default(),
            duration: Histogram::new(DURATION_BUCKETS),
            stall: Histogram::new(STALL_BUCKETS),
            last_success: Gauge::default(),
            last_bytes: Gauge::default(),
        }
    }
}

impl SaveMetrics {
    /// Adds these families to `registry` (under its prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "saves",
            "World saves finished since start, by outcome",
            self.saves.clone(),
        );
        registry.register(
            "save_failures",
            "Failed world saves by cause (out_of_space, invalid_data, io) and the step that failed",
            self.failures.clone(),
        );
        registry.register_with_unit(
            "save_duration",
            "Time from a save's snapshot to the save in place",
            Unit::Seconds,
            self.duration.clone(),
        );
        registry.register_with_unit(
            "save_loop_stall",
            "Time the loop was held to copy the world for a save",
            Unit::Seconds,
            self.stall.clone(),
        );
        registry.register_with_unit(
            "save_last_success_timestamp",
            "When the last successful save was created, Unix time (0: none since start)",
            Unit::Seconds,
            self.last_success.clone(),
        );
        registry.register_with_unit(
            "save_size",
            "Size of the last successful save",
            Unit::Bytes,
            self.last_bytes.clone(),
        );
    }
}

/// The last save, as the status page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LastSave {
    /// When it ended (success: the save's `created` time; failure: when it was reported).
    pub at: Timestamp,
    /// `Ok(seconds taken)` or `Err(why)`.
    pub outcome: Result<f64, String>,
}

/// The loop side: records notices into the shared metrics and keeps the last outcome.
#[derive(Debug, Default)]
pub struct SaveLog {
    metrics: SaveMetrics,
    last: RefCell<Option<LastSave>>,
}

impl SaveLog {
    /// The metrics the HTTP thread encodes.
    pub fn metrics(&self) -> SaveMetrics {
        self.metrics.clone()
    }

    /// The last save's outcome, if one ended since start.
    pub fn last(&self) -> Option<LastSave> {
        self.last.borrow().clone()
    }

    /// Counts a save notice (warnings and "saving" are not outcomes and are ignored).
    pub fn record(&self, notice: &Notice) {
        let m = &self.metrics;
        match notice {
            Notice::Saved(report) => {
                m.saves
                    .get_or_create(&OutcomeLabels { outcome: "ok" })
                    .inc();
                m.duration.observe(report.took.as_secs_f64());
                m.stall.observe(report.stall.as_secs_f64());
                m.last_success
                    .set(report.created.as_millisecond() as f64 / 1e3);
                m.last_bytes
                    .set(i64::try_from(report.bytes).unwrap_or(i64::MAX));
                *self.last.borrow_mut() = Some(LastSave {
                    at: report.created,
                    outcome: Ok(report.took.as_secs_f64()),
                });
            }
            Notice::Failed(error) => {
                m.saves
                    .get_or_create(&OutcomeLabels { outcome: "failed" })
                    .inc();
                m.failures
                    .get_or_create(&FailureLabels {
                        cause: cause(error),
                        step: error.step,
                    })
                    .inc();
                *self.last.borrow_mut() = Some(LastSave {
                    at: Timestamp::now(),
                    outcome: Err(error.to_string()),
                });
            }
            Notice::Warning(_) | Notice::Saving => {}
        }
    }
}

/// A failure's cause label: what an operator does about it differs for each.
pub fn cause(error: &PersistError) -> &'static str {
    if error.is_out_of_space() {
        "out_of_space"
    } else if error.is_invalid_data() {
        "invalid_data"
    } else {
        "io"
    }
}
