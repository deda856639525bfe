//! What hostile clients saw, counted, and how one connection's end is classified.
//!
//! This module owns the counting and the difference between the server closing a
//! connection (an end of stream, or a reset) and anything else going wrong. It must never
//! count a close by the server as an error: being closed is what an attack is there to see.

use std::io;
use std::time::Duration;

use tokio::time::Instant;

use super::super::conn::{ClientError, Conn};
use super::super::histogram::Histogram;
use super::{Attack, AttackReport};

/// What one client saw, and what all of them saw once merged.
#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) attempted: u64,
    pub(super) made: u64,
    /// Connects the server refused (`ECONNREFUSED`).
    pub(super) refused: u64,
    /// Connects with no answer within `--connect-timeout`.
    pub(super) timed_out: u64,
    /// Connects still waiting for an answer when the deadline came.
    pub(super) connecting_at_end: u64,
    pub(super) logins_sent: u64,
    pub(super) logins_answered: u64,
    eof: u64,
    reset: u64,
    /// Connections closed by this tool before the deadline (churn).
    hung_up: u64,
    /// churn: connections the server closed before sending a byte, by end of stream and by
    /// reset (also in `eof` and `reset`).
    at_once_eof: u64,
    at_once_reset: u64,
    /// Connections opened again after the server closed the previous one.
    pub(super) reconnects: u64,
    open_at_end: u64,
    /// From connect to the server's close, for connections the server closed.
    lifetimes: Histogram,
    pub(super) packets_sent: u64,
    pub(super) packets_received: u64,
    bytes_sent: u64,
    bytes_received: u64,
    /// Connects that failed otherwise, and connections that ended neither at the deadline
    /// nor by the server's close.
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    /// Counts a failure this tool did not expect.
    pub(super) fn failed(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }

    /// Counts how a connection made at `born` ended: `Ok` if it was still open at the
    /// deadline, else the error that ended it.
    pub(super) fn ended(&mut self, conn: &Conn, born: Instant, how: Result<(), ClientError>) {
        self.bytes(conn);
        match (server_close(&how), how) {
            (_, Ok(())) => self.open_at_end += 1,
            (Some(Close::Eof), _) => self.closed(born, |t| &mut t.eof),
            (Some(Close::Reset), _) => self.closed(born, |t| &mut t.reset),
            (None, Err(e)) => self.failed(e.to_string()),
        }
    }

    /// Counts a connection the server closed before sending anything (`churn`: a refusal).
    pub(super) fn closed_at_once(&mut self, how: Close) {
        match how {
            Close::Eof => self.at_once_eof += 1,
            Close::Reset => self.at_once_reset += 1,
        }
    }

    /// Counts a connection the server accepted and reset before this side saw its connect
    /// complete: made, and closed at once by reset, after no time at all.
    pub(super) fn reset_at_connect(&mut self) {
        self.made += 1;
        self.closed(Instant::now(), |t| &mut t.reset);
        self.closed_at_once(Close::Reset);
    }

    /// Counts a connection this tool closed itself before the deadline.
    pub(super) fn hung_up(&mut self, conn: &Conn) {
        self.bytes(conn);
        self.hung_up += 1;
    }

    fn bytes(&mut self, conn: &Conn) {
        self.bytes_sent += conn.sent;
        self.bytes_received += conn.received;
    }

    fn closed(&mut self, born: Instant, how: fn(&mut Tally) -> &mut u64) {
        *how(self) += 1;
        self.lifetimes.record(born.elapsed());
    }

    /// Adds a client's tally (a panicked client counts as an error).
    pub(super) fn merge(&mut self, client: Result<Tally, tokio::task::JoinError>) {
        let client = client.unwrap_or_else(|e| {
            let mut failed = Tally::default();
            failed.failed(format!("client task failed: {e}"));
            failed
        });
        self.attempted += client.attempted;
        self.made += client.made;
        self.refused += client.refused;
        self.timed_out += client.timed_out;
        self.connecting_at_end += client.connecting_at_end;
        self.logins_sent += client.logins_sent;
        self.logins_answered += client.logins_answered;
        self.eof += client.eof;
        self.reset += client.reset;
        self.hung_up += client.hung_up;
        self.at_once_eof += client.at_once_eof;
        self.at_once_reset += client.at_once_reset;
        self.reconnects += client.reconnects;
        self.open_at_end += client.open_at_end;
        self.packets_sent += client.packets_sent;
        self.packets_received += client.packets_received;
        self.bytes_sent += client.bytes_sent;
        self.bytes_received += client.bytes_received;
        self.errors += client.errors;
        if self.first_error.is_none() {
            self.first_error = client.first_error;
        }
        self.lifetimes.merge(&client.lifetimes);
    }

    /// The report of a run of `attack` that took `ran`.
    pub(super) fn report(self, attack: &Attack, ran: Duration) -> AttackReport {
        AttackReport {
            mode: attack.mode,
            connections: attack.clients,
            sources: attack.sources.to_string(),
            duration: ran,
            attempted: self.attempted,
            made: self.made,
            refused: self.refused,
            timed_out: self.timed_out,
            connecting_at_end: self.connecting_at_end,
            logins_sent: self.logins_sent,
            logins_answered: self.logins_answered,
            closed_eof: self.eof,
            closed_reset: self.reset,
            hung_up: self.hung_up,
            closed_at_once_eof: self.at_once_eof,
            closed_at_once_reset: self.at_once_reset,
            reconnect: attack.reconnect,
            reconnects: self.reconnects,
            open_at_end: self.open_at_end,
            lifetime_min: self.lifetimes.min(),
            lifetime_median: self.lifetimes.percentile(0.5),
            lifetime_max: self.lifetimes.max(),
            packets_sent: self.packets_sent,
            bytes_sent: self.bytes_sent,
            packets_received: self.packets_received,
            bytes_received: self.bytes_received,
            connects_per_sec: self.made as f64 / ran.as_secs_f64().max(1e-9),
            errors: self.errors,
            first_error: self.first_error,
        }
    }
}

/// How the server closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Close {
    /// An end of stream.
    Eof,
    /// A reset (or a write after one).
    Reset,
}

/// How the server closed the connection that ended `how`, if it did.
pub(super) fn server_close<T>(how: &Result<T, ClientError>) -> Option<Close> {
    match how {
        Err(ClientError::Closed) => Some(Close::Eof),
        Err(ClientError::Io(e)) if is_reset(e) => Some(Close::Reset),
        _ => None,
    }
}

/// Whether `e` is the server resetting the connection (or a write after it had).
fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}
