//! What the clients saw, added up, and the report made of it.
//!
//! This module owns the counting. It must never measure anything itself: the clients and the
//! coordinator hand it what they saw.

use crate::demo::packets::server;

use super::histogram::Histogram;
use super::{LoadReport, LoadgenError, Plan, Tool};

/// What one client saw, and what all of them saw once merged.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) rtt: Histogram,
    speech: u64,
    moved: u64,
    other: u64,
    pub(super) late_ticks: u64,
    pub(super) skipped_moves: u64,
    pub(super) connected: u32,
    errors: u32,
    first_error: Option<(u32, String)>,
}

impl Outcome {
    /// Counts a packet the client did not wait for.
    pub(super) fn unasked(&mut self, id: u8) {
        match id {
            server::SPEECH => self.speech += 1,
            server::MOBILE_MOVED => self.moved += 1,
            _ => self.other += 1,
        }
    }

    pub(super) fn fail(&mut self, id: u32, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert((id, error));
    }

    /// Adds client `id`'s outcome (a panicked client counts as an error).
    pub(super) fn merge(&mut self, id: u32, client: Result<Outcome, tokio::task::JoinError>) {
        let client = client.unwrap_or_else(|e| {
            let mut failed = Outcome::default();
            failed.fail(id, format!("client task failed: {e}"));
            failed
        });
        self.rtt.merge(&client.rtt);
        self.speech += client.speech;
        self.moved += client.moved;
        self.other += client.other;
        self.late_ticks += client.late_ticks;
        self.skipped_moves += client.skipped_moves;
        self.connected += client.connected;
        self.errors += client.errors;
        if self.first_error.is_none() {
            self.first_error = client.first_error;
        }
    }

    pub(super) fn report(self, plan: Plan, tool: &Tool) -> Result<LoadReport, LoadgenError> {
        if self.connected == 0 {
            let reason = self.first_error.map_or_else(String::new, |(_, e)| e);
            return Err(LoadgenError::Connect {
                addr: plan.addr,
                reason,
            });
        }
        let round_trips = self.rtt.count();
        Ok(LoadReport {
            mode: plan.mode,
            connections: plan.clients,
            connected: self.connected,
            setup: tool.setup,
            duration: tool.duration,
            round_trips,
            round_trips_per_sec: round_trips as f64 / tool.duration.as_secs_f64().max(1e-9),
            rtt_p50: self.rtt.percentile(0.50),
            rtt_p99: self.rtt.percentile(0.99),
            rtt_max: self.rtt.max(),
            errors: self.errors,
            first_error: self.first_error.map(|(id, e)| format!("client {id}: {e}")),
            speech: self.speech,
            moved: self.moved,
            other: self.other,
            late_ticks: self.late_ticks,
            skipped_moves: self.skipped_moves,
            cpu: tool.cpu,
            lag_p99: tool.lag.percentile(0.99),
            lag_max: tool.lag.max(),
        })
    }
}
