//! `trickle`: connect, never log in, and every interval send one ping one byte at a time —
//! one write per byte on a `TCP_NODELAY` socket, so each byte is a segment of its own —
//! reading the echoes. What the server spends on partial packets, against the same bytes
//! sent as whole pings (`ping-only` at the same interval).
//!
//! This module owns the trickle. It must never write two bytes in one call, and never
//! send anything but whole pings (a ping cut short would prove the login deadline instead).

use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use super::super::conn::{ClientError, Conn};
use super::tally::Tally;
use super::{drain, until};

/// Sends `ping` a byte per write every `interval`, reading whatever comes back, until the
/// server closes the connection or the deadline comes.
pub(super) async fn run(
    conn: &mut Conn,
    ping: &[u8],
    interval: Duration,
    deadline: Instant,
    tally: &mut Tally,
) -> Result<(), ClientError> {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    while until(deadline, async { Ok(ticks.tick().await) })
        .await?
        .is_some()
    {
        for byte in ping.chunks(1) {
            if until(deadline, conn.send(byte)).await?.is_none() {
                return Ok(());
            }
            // Each byte its own segment: the socket is TCP_NODELAY, and a yield lets the
            // write leave before the next.
            tokio::task::yield_now().await;
        }
        tally.packets_sent += 1;
        while conn.try_fill()? {
            drain(conn, tally)?;
        }
    }
    Ok(())
}
