//! `slow-reader`: a client with a 4 KiB receive buffer that logs in and pings every
//! `--interval` but never reads, so what the server sends it piles up on the server.
//!
//! It logs in (without waiting for the answer, which it would have to read) so that it is a
//! player like any other: the server's broadcasts reach it too, on top of its ping echoes.
//!
//! This module owns that client. It must never read from its socket, not even the login's
//! answer. So it sees the server's close only when a later send fails: the server, closing
//! with unread input, resets the connection, and the lifetime counted is up to one interval
//! longer than the real one.

use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use super::super::conn::{ClientError, Conn};
use super::tally::Tally;
use super::{send, send_login};

/// `SO_RCVBUF` asked for, in bytes (the kernel doubles it for its bookkeeping).
pub(super) const RECV_BUFFER: usize = 4096;

/// Logs in as `name`, then sends `ping` every `interval` until a send fails or the deadline.
pub(super) async fn run(
    conn: &mut Conn,
    name: &str,
    ping: &[u8],
    interval: Duration,
    deadline: Instant,
    tally: &mut Tally,
) -> Result<(), ClientError> {
    if !send_login(conn, name, deadline, tally).await? {
        return Ok(());
    }
    let mut ticks = tokio::time::interval_at(Instant::now() + interval, interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        if tokio::time::timeout_at(deadline, ticks.tick())
            .await
            .is_err()
        {
            return Ok(());
        }
        if !send(conn, ping, deadline, tally).await? {
            return Ok(());
        }
    }
}
