//! `move-flood`: log in, then write moves as fast as the socket takes them, reading and
//! dropping whatever the server answers.
//!
//! This module owns the flood. It must never wait for an answer before the next move (that
//! would be `walk`), and never stop reading: a flooder that stopped reading would be closed
//! for its full send buffer instead of for its flood, and prove the wrong limit.

use crate::demo::packets::client;
use shardloop::net::frame;
use tokio::time::Instant;

use super::super::conn::{ClientError, Conn};
use super::tally::Tally;
use super::{drain, log_in, until};

/// Moves in the buffer written round and round: a multiple of 256, so the sequence numbers
/// run on across the wrap.
const BATCH: usize = 1024;
/// One move, header included: `[0x02][len 5][direction][seq]`.
const MOVE_LEN: u64 = (frame::HEADER_LEN + 2) as u64;

/// Logs in as `name`, then floods until the server closes the connection or the deadline.
pub(super) async fn move_flood(
    conn: &mut Conn,
    name: &str,
    deadline: Instant,
    tally: &mut Tally,
) -> Result<(), ClientError> {
    if !log_in(conn, name, deadline, tally).await? {
        return Ok(());
    }
    flood(conn, deadline, tally).await
}

/// Writes moves whenever the socket has room and reads whenever there is something to read.
async fn flood(conn: &mut Conn, deadline: Instant, tally: &mut Tally) -> Result<(), ClientError> {
    let moves = moves();
    let mut at = 0;
    let mut written: u64 = 0;
    // `ready` takes from tokio's cooperative budget: a socket that always has room still
    // yields to the other clients now and then.
    while let Some(ready) = until(deadline, conn.ready()).await? {
        if ready.is_readable() && conn.try_fill()? {
            drain(conn, tally)?;
        }
        if ready.is_writable() {
            let n = conn.try_send(&moves[at..])?;
            at = (at + n) % moves.len();
            let whole_before = written / MOVE_LEN;
            written += n as u64;
            tally.packets_sent += written / MOVE_LEN - whole_before;
        }
    }
    Ok(())
}

/// `BATCH` moves turning clockwise, with sequence numbers 0, 1, 2, ...
fn moves() -> Vec<u8> {
    let mut out = Vec::with_capacity(BATCH * MOVE_LEN as usize);
    for i in 0..BATCH {
        frame::put(&mut out, client::MOVE, &[&[(i % 8) as u8, i as u8]]);
    }
    out
}
