//! `crowd`: bots logged in on one spot, each spending its whole move burst at once every
//! interval — the fan-out's worst case: every move goes to every other bot — and, with
//! `--say`, saying a few lines with each burst, which go to every other bot too.
//!
//! This module owns the crowd's names and moves. It must never stop reading (a bot that
//! stopped would be closed for its send buffer, not measure the fan-out), and its moves go
//! east then back west so the crowd stays on its spot.

use std::time::Duration;

use crate::demo::packets::{START, client, start_location};
use shardloop::net::frame;
use tokio::time::Instant;

use super::super::conn::{ClientError, Conn};
use super::tally::Tally;
use super::{log_in, silent};

/// The crowd's square: bots start within this many tiles of [`START`] both ways, one sector
/// or less.
const SQUARE: u16 = 16;
/// Directions of the demo's moves: east, then west.
const EAST: u8 = 2;
const WEST: u8 = 6;

/// The first `n` names whose start spot falls in the crowd's square: the same names on
/// every run.
pub(super) fn names(n: u32) -> Vec<String> {
    names_in_square("crowd", n)
}

/// The first `n` names `{series}{k}` whose start spot falls in the crowd's square.
pub(in super::super) fn names_in_square(series: &str, n: u32) -> Vec<String> {
    let inside = |name: &str| {
        let at = start_location(name);
        at.x.wrapping_sub(START.x) < SQUARE && at.y.wrapping_sub(START.y) < SQUARE
    };
    (0_u64..)
        .map(|k| format!("{series}{k}"))
        .filter(|name| inside(name))
        .take(n as usize)
        .collect()
}

/// What a bot sends each interval, in one write.
#[derive(Debug, Clone, Copy)]
pub(super) struct Burst {
    /// Moves, east and west in turn.
    pub(super) moves: u32,
    /// Lines of speech after them.
    pub(super) lines: u32,
}

impl Burst {
    /// The write: the moves, then the lines (`name` saying which line of the burst it is).
    fn packets(self, name: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..self.moves {
            let direction = if i % 2 == 0 { EAST } else { WEST };
            frame::put(&mut out, client::MOVE, &[&[direction, i as u8]]);
        }
        for i in 0..self.lines {
            let line = format!("{name} says line {i} to the crowd");
            frame::put(&mut out, client::SAY, &[line.as_bytes()]);
        }
        out
    }

    fn len(self) -> u64 {
        u64::from(self.moves) + u64::from(self.lines)
    }
}

/// Logs in as `name`, then every `interval` sends `burst` in one write, reading whatever
/// comes, until the server closes the connection or the deadline comes.
pub(super) async fn run(
    conn: &mut Conn,
    name: &str,
    burst: Burst,
    interval: Duration,
    deadline: Instant,
    tally: &mut Tally,
) -> Result<(), ClientError> {
    if !log_in(conn, name, deadline, tally).await? {
        return Ok(());
    }
    // The burst goes out as one write every `interval`, as ping-only sends its ping; each
    // write counted once there is `burst.len()` packets here.
    let writes_before = tally.packets_sent;
    let outcome = silent::ping_only(conn, &burst.packets(name), interval, deadline, tally).await;
    let writes = tally.packets_sent - writes_before;
    tally.packets_sent += writes * (burst.len() - 1);
    outcome
}
