//! Why a connection closes ([`Disconnect`]), and the kind of a free-text reason: its stable
//! part, by which disconnects and refusals are counted ("idle timeout", "bad packet",
//! "unknown packet id").
//!
//! A reason starts with what happened and goes on with details that vary — ids, sizes,
//! addresses, an error's own text. The kind keeps the start and drops the rest, so reasons
//! that differ only in their details count together. It must never keep a number, so the
//! kinds seen stay few however many connections come and go.

use std::borrow::Cow;
use std::io;

use super::backend::BackendFailed;

/// Why a connection is going away. Faults (the client broke the protocol or a limit) are
/// logged as warnings, ordinary ends (logout, the peer hung up) as info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disconnect {
    /// Why, in words, as the log line shows it (`"idle timeout (120 s)"`, `"bad packet: ..."`);
    /// its stable start is the [`kind`](Self::kind) the churn summary counts.
    pub reason: String,
    /// The client broke the protocol or a limit (logged as a warning, counted in
    /// [`NetStats::faults`](super::NetStats::faults)); false for an ordinary end.
    pub fault: bool,
    /// The kind, when given ([`Disconnect::with_kind`]); else it is read from `reason`.
    kind: Option<&'static str>,
}

impl Disconnect {
    /// The client did something wrong.
    pub fn fault(reason: impl Into<String>) -> Disconnect {
        Disconnect {
            reason: reason.into(),
            fault: true,
            kind: None,
        }
    }

    /// An ordinary end.
    pub fn normal(reason: impl Into<String>) -> Disconnect {
        Disconnect {
            reason: reason.into(),
            fault: false,
            kind: None,
        }
    }

    /// The same, counted as `kind` in the churn summary instead of the kind read from the
    /// reason.
    #[must_use]
    pub fn with_kind(self, kind: &'static str) -> Disconnect {
        Disconnect {
            kind: Some(kind),
            ..self
        }
    }

    /// What the disconnect is counted as when many are summed up: the kind given, or the
    /// stable start of the reason: before any `:`, `,` or `;`, without numbers or asides in
    /// parentheses (`"idle timeout"`, `"bad packet"`, `"packet before login"`).
    #[must_use]
    pub fn kind(&self) -> Cow<'_, str> {
        self.owned_kind()
    }

    /// [`Disconnect::kind`], owned or static: what a tally keeps.
    pub(super) fn owned_kind(&self) -> Cow<'static, str> {
        self.kind
            .map_or_else(|| Cow::Owned(kind_of(&self.reason)), Cow::Borrowed)
    }
}

/// The reason a connection closes on when `op` ("read", "write") failed with `e`: the
/// backend's own reason when the backend itself failed (`"io_uring ring failed: …"`, its own
/// kind, so those closes count apart), else `"<op> failed: <e>"`.
#[must_use]
pub(crate) fn io_failed(op: &str, e: &io::Error) -> String {
    match BackendFailed::of(e) {
        Some(failed) => failed.to_string(),
        None => format!("{op} failed: {e}"),
    }
}

/// The reason a client is cut off for a packet id no handler takes.
#[must_use]
pub(crate) fn unknown_packet(id: u8) -> String {
    format!("unknown packet id 0x{id:02x}")
}

/// The reason a client is cut off for a logged-in-only packet (`name`) sent before login.
#[must_use]
pub(crate) fn before_login(id: u8, name: &str) -> String {
    format!("packet 0x{id:02x} ({name}) before login")
}

/// The reason a client is cut off when the handler of packet `id` (`name`) refused it.
#[must_use]
pub(crate) fn bad_packet(id: u8, name: &str, why: impl std::fmt::Display) -> String {
    format!("bad packet 0x{id:02x} ({name}): {why}")
}

/// The part of `reason` before its first `:`, `,` or `;`, without parenthesised asides and
/// without the words that hold a digit, its words one space apart; `"other"` if that leaves
/// nothing.
///
/// `"bad packet 0x01 (login): name of 31 bytes"` → `"bad packet"`;
/// `"packet 0x02 (move) before login"` → `"packet before login"`.
#[must_use]
pub(crate) fn kind_of(reason: &str) -> String {
    let head = reason.split([':', ',', ';']).next().unwrap_or_default();
    let mut words = String::with_capacity(head.len());
    for word in outside_parentheses(head)
        .split_whitespace()
        .filter(|w| !w.chars().any(|c| c.is_ascii_digit()))
    {
        if !words.is_empty() {
            words.push(' ');
        }
        words.push_str(word);
    }
    if words.is_empty() {
        words.push_str("other");
    }
    words
}

/// `text` with every `( … )` aside replaced by a space.
fn outside_parentheses(text: &str) -> String {
    let mut depth = 0usize;
    text.chars()
        .map(|c| match c {
            '(' => {
                depth += 1;
                ' '
            }
            ')' => {
                depth = depth.saturating_sub(1);
                ' '
            }
            _ if depth > 0 => ' ',
            _ => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::kind_of;

    #[test]
    fn the_servers_reasons_group_by_what_happened() {
        for (reason, kind) in [
            ("unknown packet id 0x7f", "unknown packet id"),
            ("packet 0x02 (move) before login", "packet before login"),
            (
                "bad packet 0x01 (login): name of 31 bytes, expected 1 to 30",
                "bad packet",
            ),
            (
                "packet 0x73 declares length 2, below the 3-byte header",
                "packet declares length",
            ),
            (
                "send buffer overflow: 4050 bytes unsent, limit 4096 (network.send_buffer_size)",
                "send buffer overflow",
            ),
            (
                "idle timeout: no complete packet for 2m (network.idle_timeout)",
                "idle timeout",
            ),
            (
                "read failed: Connection reset by peer (os error 104)",
                "read failed",
            ),
            ("the login handler panicked", "the login handler panicked"),
            ("closed by the client", "closed by the client"),
            ("logged out", "logged out"),
            (
                "too many connections: 64 open already (network.max_connections)",
                "too many connections",
            ),
            ("too many from 10.0.0.1 (limit 4)", "too many from"),
        ] {
            assert_eq!(kind_of(reason), kind, "{reason}");
        }
    }

    #[test]
    fn a_failed_backend_is_its_own_kind_and_other_errors_name_the_operation() {
        let dead = super::BackendFailed(
            "io_uring ring failed: io_uring_enter: Bad file descriptor (os error 9)".into(),
        )
        .to_io();
        assert_eq!(
            kind_of(&super::io_failed("read", &dead)),
            "io_uring ring failed"
        );
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(
            super::io_failed("write", &reset),
            format!("write failed: {reset}")
        );
        assert_eq!(kind_of(&super::io_failed("write", &reset)), "write failed");
    }

    #[test]
    fn nothing_stable_is_other() {
        assert_eq!(kind_of(""), "other");
        assert_eq!(kind_of("404 (x)"), "other");
        assert_eq!(kind_of(": all detail"), "other");
    }
}
