//! `churn`: connect and hang up in a loop, as fast as the server lets it, counting connects
//! and the refusals it provoked.
//!
//! What a client can tell of a refusal, and how each is counted: a connect answered by a
//! reset (`ECONNREFUSED`: nobody listens, or the backlog refuses) is `refused`; a connect not
//! answered within `--connect-timeout` (the server drops the SYN: a banned source, a full
//! backlog) is `timed_out`; a connection the server accepts and closes before sending
//! anything (admission refusing it at accept) is `closed at once`, by end of stream or by
//! reset (a reset that comes before this side has seen its connect complete included).
//!
//! The last is seen only if the close arrives before the hang-up: with `--churn-ping` the
//! client waits for the echo, so a refusal always arrives first and every one is counted;
//! without it, the client looks once (without waiting) just before hanging up, so a refusal
//! still on its way is counted as a hang-up: a lower bound. Whether a close at once is an
//! end of stream or a reset is the server's and the timing's: a server that closes with data
//! unread (the ping got there first) resets, and one that closed before the ping came
//! answers the ping with a reset that may be read before the end of stream; the total is
//! what counts.
//!
//! This module owns one churning client's loop. It must never hold more than one connection
//! at a time (a client is one descriptor), nor go on past the deadline.

use tokio::time::Instant;

use super::super::conn::{ClientError, Conn};
use super::tally::{Tally, server_close};
use super::{Attack, Opening, send, until};

/// Client `id`'s loop: its `k`th connection is the run's `id + k · clients`th, so the
/// sources are taken round robin across all clients.
pub(super) async fn churn(attack: &Attack, id: u32, deadline: Instant, tally: &mut Tally) {
    let ping = attack.ping(id);
    for round in 0_u64.. {
        if Instant::now() >= deadline {
            break;
        }
        let n = u64::from(id) + round * u64::from(attack.clients);
        if let Opening::Made(mut conn) = attack.open(n, deadline, tally).await {
            let born = Instant::now();
            let ping = attack.churn_ping.then_some(&ping[..]);
            let said = match said(&mut conn, ping, deadline, tally).await {
                // One look, without waiting, for a close already there.
                Ok(true) => conn.try_fill().map(|_| true),
                other => other,
            };
            match said {
                Ok(true) => tally.hung_up(&conn),
                Ok(false) => tally.ended(&conn, born, Ok(())),
                Err(e) => {
                    let how = Err(e);
                    if conn.received == 0
                        && let Some(close) = server_close(&how)
                    {
                        tally.closed_at_once(close);
                    }
                    tally.ended(&conn, born, how);
                }
            }
        }
        // A refused connect returns at once: let the other clients have the thread.
        tokio::task::yield_now().await;
    }
}

/// Sends `ping`, if any, and waits for its echo: `Ok(false)` if the deadline came first.
async fn said(
    conn: &mut Conn,
    ping: Option<&[u8]>,
    deadline: Instant,
    tally: &mut Tally,
) -> Result<bool, ClientError> {
    let Some(ping) = ping else { return Ok(true) };
    if !send(conn, ping, deadline, tally).await? {
        return Ok(false);
    }
    let echo = conn.echo_of(ping, |_| tally.packets_received += 1);
    if until(deadline, echo).await?.is_none() {
        return Ok(false);
    }
    tally.packets_received += 1;
    Ok(true)
}
