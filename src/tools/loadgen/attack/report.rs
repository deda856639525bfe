//! What a hostile run found, and how it is printed.
//!
//! This module owns the hostile report's figures and their wording, which tests and operators
//! read: one `label value` pair per figure, so a test can assert on the text as well as on the
//! fields. It must never merge the server's closes into the errors: a close is the finding.

use std::fmt;
use std::time::Duration;

use super::super::Mode;
use super::super::report::Micros;

/// What the server did to a hostile run's connections.
///
/// Every connection made ends exactly one way: `closed_eof + closed_reset + hung_up +
/// open_at_end` plus those among `errors` that were made.
#[derive(Debug, Clone, PartialEq)]
pub struct AttackReport {
    pub mode: Mode,
    /// Clients asked for: each holds one connection at a time.
    pub connections: u32,
    /// The local addresses the connections came from, as given.
    pub sources: String,
    /// From the first client's start to the last one's end: `ramp + duration`, or less when
    /// the server closed every connection before.
    pub duration: Duration,
    pub attempted: u64,
    pub made: u64,
    /// Connects the server refused (`ECONNREFUSED`).
    pub refused: u64,
    /// Connects not answered within `--connect-timeout` (the server dropped the SYN: a
    /// banned source, a full backlog).
    pub timed_out: u64,
    /// Connects still waiting for an answer when the deadline came: `attempted` is `made +
    /// refused + timed_out + connecting_at_end` plus the connects among `errors`.
    pub connecting_at_end: u64,
    /// `move-flood`, `slow-reader`: logins sent, and answered (a slow reader never reads the
    /// answer).
    pub logins_sent: u64,
    pub logins_answered: u64,
    /// Connections the server closed: with an end of stream, or a reset.
    pub closed_eof: u64,
    pub closed_reset: u64,
    /// `churn`: connections this tool closed itself.
    pub hung_up: u64,
    /// `churn`: connections the server closed before sending a byte — refused at accept —
    /// by end of stream and by reset (counted in `closed_eof` and `closed_reset` too). Only
    /// with `--churn-ping` is every one seen (see `attack::churn`).
    pub closed_at_once_eof: u64,
    pub closed_at_once_reset: u64,
    /// Whether clients connected again when the server closed them (not `--no-reconnect`).
    pub reconnect: bool,
    /// Connections opened again after the server closed the previous one.
    pub reconnects: u64,
    /// Connections still open at the deadline (then closed by this tool).
    pub open_at_end: u64,
    /// How long the connections the server closed lived, from connect to the close seen
    /// (zero when it closed none).
    pub lifetime_min: Duration,
    pub lifetime_median: Duration,
    pub lifetime_max: Duration,
    pub packets_sent: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub bytes_received: u64,
    /// Connections made per second of the run (what `churn` is about).
    pub connects_per_sec: f64,
    /// Connects that failed other than by a refusal or a timeout, and connections that
    /// ended other than by the server's close: what the run did not expect.
    pub errors: u64,
    pub first_error: Option<String>,
}

impl AttackReport {
    /// Connections the server closed, either way.
    #[must_use]
    pub fn closed_by_server(&self) -> u64 {
        self.closed_eof + self.closed_reset
    }

    /// `churn`: connections the server closed before sending a byte, either way.
    #[must_use]
    pub fn closed_at_once(&self) -> u64 {
        self.closed_at_once_eof + self.closed_at_once_reset
    }

    /// Every refusal seen: refused connects, connects left unanswered, connections closed
    /// at once (`churn`'s count of what it provoked).
    #[must_use]
    pub fn refusals(&self) -> u64 {
        self.refused + self.timed_out + self.closed_at_once()
    }
}

impl fmt::Display for AttackReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "loadgen: {}, {} connections from {}, {:.1} s",
            self.mode,
            self.connections,
            self.sources,
            self.duration.as_secs_f64()
        )?;
        writeln!(
            f,
            "  connects attempted {}  made {}  refused {}  timed out {}  still connecting at \
             the end {}  ({:.1} made/s)",
            self.attempted,
            self.made,
            self.refused,
            self.timed_out,
            self.connecting_at_end,
            self.connects_per_sec
        )?;
        if matches!(self.mode, Mode::MoveFlood | Mode::SlowReader) {
            writeln!(
                f,
                "  logins sent {}  answered {}",
                self.logins_sent, self.logins_answered
            )?;
        }
        writeln!(
            f,
            "  closed by the server {} (eof {}  reset {})  hung up {}  open at the end {}",
            self.closed_by_server(),
            self.closed_eof,
            self.closed_reset,
            self.hung_up,
            self.open_at_end
        )?;
        self.fmt_lifetimes(f)?;
        self.fmt_refusals_or_reconnects(f)?;
        writeln!(
            f,
            "  sent {} packets {} bytes  received {} packets {} bytes",
            self.packets_sent, self.bytes_sent, self.packets_received, self.bytes_received
        )?;
        write!(f, "  errors {}", self.errors)?;
        if let Some(first) = &self.first_error {
            write!(f, " (first: {first})")?;
        }
        Ok(())
    }
}

impl AttackReport {
    /// `churn`: the refusals it provoked, by class; other modes: their reconnects.
    fn fmt_refusals_or_reconnects(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mode == Mode::Churn {
            return writeln!(
                f,
                "  refusals provoked {}: closed at once {} (eof {}  reset {})  refused {}  \
                 unanswered {}",
                self.refusals(),
                self.closed_at_once(),
                self.closed_at_once_eof,
                self.closed_at_once_reset,
                self.refused,
                self.timed_out
            );
        }
        match self.reconnect {
            true => writeln!(f, "  reconnects {}", self.reconnects),
            false => writeln!(f, "  reconnects off (--no-reconnect)"),
        }
    }

    fn fmt_lifetimes(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.closed_by_server() == 0 {
            return writeln!(f, "  lifetime until closed: none closed");
        }
        writeln!(
            f,
            "  lifetime until closed: min {}  median {}  max {}",
            Micros(self.lifetime_min),
            Micros(self.lifetime_median),
            Micros(self.lifetime_max)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> AttackReport {
        AttackReport {
            mode: Mode::MoveFlood,
            connections: 4,
            sources: "127.0.0.2, 127.0.0.3".to_owned(),
            duration: Duration::from_millis(2_500),
            attempted: 4,
            made: 3,
            refused: 1,
            timed_out: 0,
            connecting_at_end: 0,
            logins_sent: 3,
            logins_answered: 3,
            closed_eof: 1,
            closed_reset: 1,
            hung_up: 0,
            closed_at_once_eof: 0,
            closed_at_once_reset: 0,
            reconnect: true,
            reconnects: 2,
            open_at_end: 1,
            lifetime_min: Duration::from_millis(300),
            lifetime_median: Duration::from_millis(300),
            lifetime_max: Duration::from_millis(1_250),
            packets_sent: 900,
            bytes_sent: 4_500,
            packets_received: 3,
            bytes_received: 33,
            connects_per_sec: 1.2,
            errors: 0,
            first_error: None,
        }
    }

    #[test]
    fn every_figure_is_printed_with_its_label() {
        let shown = report().to_string();
        let expected = "\
loadgen: move-flood, 4 connections from 127.0.0.2, 127.0.0.3, 2.5 s
  connects attempted 4  made 3  refused 1  timed out 0  still connecting at the end 0  (1.2 made/s)
  logins sent 3  answered 3
  closed by the server 2 (eof 1  reset 1)  hung up 0  open at the end 1
  lifetime until closed: min 300.0 ms  median 300.0 ms  max 1.25 s
  reconnects 2
  sent 900 packets 4500 bytes  received 3 packets 33 bytes
  errors 0";
        assert_eq!(shown, expected);
    }

    #[test]
    fn no_close_no_lifetimes_and_no_login_line_for_modes_that_never_log_in() {
        let idle = AttackReport {
            mode: Mode::Idle,
            closed_eof: 0,
            closed_reset: 0,
            errors: 1,
            first_error: Some("connection 3: boom".to_owned()),
            ..report()
        };
        let shown = idle.to_string();
        assert!(
            shown.contains("  lifetime until closed: none closed\n"),
            "{shown}"
        );
        assert!(!shown.contains("logins"), "{shown}");
        assert!(
            shown.ends_with("errors 1 (first: connection 3: boom)"),
            "{shown}"
        );
    }

    #[test]
    fn churn_shows_its_refusals_by_class_and_other_modes_their_reconnects() {
        let churn = AttackReport {
            mode: Mode::Churn,
            refused: 1,
            timed_out: 4,
            closed_eof: 7,
            closed_at_once_eof: 6,
            closed_at_once_reset: 1,
            ..report()
        };
        let shown = churn.to_string();
        assert!(
            shown.contains(
                "\n  refusals provoked 12: closed at once 7 (eof 6  reset 1)  refused 1  \
                 unanswered 4\n"
            ),
            "{shown}"
        );
        assert!(!shown.contains("reconnects"), "{shown}");
        let off = AttackReport {
            reconnect: false,
            reconnects: 0,
            ..report()
        };
        let shown = off.to_string();
        assert!(
            shown.contains("\n  reconnects off (--no-reconnect)\n"),
            "{shown}"
        );
        assert!(!shown.contains("refusals"), "{shown}");
    }
}
