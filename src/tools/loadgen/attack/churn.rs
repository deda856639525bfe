//! `churn`: connect and hang up in a loop, as fast as the server lets it, counting connects.
//!
//! This module owns one churning client's loop. It must never hold more than one connection
//! at a time (a client is one descriptor), nor go on past the deadline.

use tokio::time::Instant;

use super::super::conn::{ClientError, Conn};
use super::tally::Tally;
use super::{Attack, send, until};

/// Client `id`'s loop: its `k`th connection is the run's `id + k · clients`th, so the
/// sources are taken round robin across all clients.
pub(super) async fn churn(attack: &Attack, id: u32, deadline: Instant, tally: &mut Tally) {
    let ping = attack.ping(id);
    for round in 0_u64.. {
        if Instant::now() >= deadline {
            break;
        }
        let n = u64::from(id) + round * u64::from(attack.clients);
        if let Some(mut conn) = attack.open(n, deadline, tally).await {
            let born = Instant::now();
            match said(
                &mut conn,
                attack.churn_ping.then_some(&ping[..]),
                deadline,
                tally,
            )
            .await
            {
                Ok(true) => tally.hung_up(&conn),
                Ok(false) => tally.ended(&conn, born, Ok(())),
                Err(e) => tally.ended(&conn, born, Err(e)),
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
