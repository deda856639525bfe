//! The clients that never log in: `idle` sends nothing at all, `ping-only` sends nothing
//! but pings. Both hold a connection slot for as long as the server lets them.
//!
//! This module owns what those two send. It must never send a login or any packet but a
//! ping: the server rules they test are about connections that never log in. They read, but
//! only to see the server's close (and to count anything it sends them anyway).

use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use super::super::conn::{ClientError, Conn};
use super::tally::Tally;
use super::{drain, send, until};

/// `idle`: reads until the server closes the connection or the deadline comes.
pub(super) async fn idle(
    conn: &mut Conn,
    deadline: Instant,
    tally: &mut Tally,
) -> Result<(), ClientError> {
    while until(deadline, conn.fill()).await?.is_some() {
        drain(conn, tally)?;
    }
    Ok(())
}

/// `ping-only`: `ping` at once and then every `interval`, reading the echoes, until the
/// server closes the connection or the deadline comes.
pub(super) async fn ping_only(
    conn: &mut Conn,
    ping: &[u8],
    interval: Duration,
    deadline: Instant,
    tally: &mut Tally,
) -> Result<(), ClientError> {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let end = tokio::time::sleep_until(deadline);
    tokio::pin!(end);
    loop {
        tokio::select! {
            biased;
            () = &mut end => return Ok(()),
            read = conn.fill() => {
                read?;
                drain(conn, tally)?;
            }
            _ = ticks.tick() => {
                if !send(conn, ping, deadline, tally).await? {
                    return Ok(());
                }
            }
        }
    }
}
