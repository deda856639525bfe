//! The hostile modes: clients that misbehave on purpose, to prove the shard's admission
//! control, flood limits and descriptor budget from the outside.
//!
//! - `idle` connects and never sends a byte (`silent`): it holds a slot.
//! - `ping-only` connects and pings every `--interval`, never logging in (`silent`): a ping
//!   before login must not count as activity.
//! - `move-flood` logs in, then writes moves as fast as the socket takes them, reading and
//!   dropping the answers (`flood`).
//! - `slow-reader` opens its socket with a 4 KiB receive buffer, logs in without waiting for
//!   the answer and pings every `--interval`, never reading (`slow_reader`): the server's
//!   output to it backs up.
//! - `churn` connects and hangs up in a loop, with `--churn-ping` after one ping and its echo
//!   (`churn`).
//!
//! Each of `--connections` clients starts within `--ramp` and stops at one deadline for the
//! run, `ramp + duration` after its start. When the server closes its connection, a client
//! connects again at once and starts its mode over (counted as a reconnect), as an attacker
//! would; with `--no-reconnect` it stops there instead (as before reconnects existed, so
//! older measurements can be rerun). A connect that fails (refused, or unanswered within
//! `--connect-timeout`) ends the client either way: only `churn` keeps connecting then.
//! Connections go out from `--sources` round robin (a client's `k`th connection is the
//! run's `id + k · clients`th). What happened is added up in `tally` and printed by
//! `report`: connects made or refused, closes by the server (end of stream or reset) and
//! after how long, reconnects, bytes and packets each way, and for `churn` the refusals it
//! provoked by class.
//!
//! This module owns the run, one connection's life and the deadline. It must never outlive
//! the deadline (every wait is bounded by it) nor send to an address `loopback` has not
//! allowed (the coordinator checks before `Attack` exists).

mod churn;
mod crowd;
#[cfg(test)]
mod end_to_end;
mod flood;
#[cfg(test)]
mod real_shard;
mod report;
mod silent;
mod slow_reader;
mod tally;
mod trickle;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use shardloop::net::frame;
use tokio::time::Instant;

use super::conn::{ClientError, Conn, login_packet};
use super::dial::Dial;
use super::loopback::Sources;
use super::{LoadgenArgs, Mode};
/// The first `n` names of `series` that start in the crowd's square (`walk --in-crowd`).
pub(super) use crowd::names_in_square as names_in_crowd;
pub use report::AttackReport;
use tally::{Close, Tally, server_close};

/// What every hostile client shares.
#[derive(Debug, Clone)]
pub(super) struct Attack {
    mode: Mode,
    to: SocketAddr,
    clients: u32,
    sources: Sources,
    ramp: Duration,
    duration: Duration,
    interval: Duration,
    payload: usize,
    churn_ping: bool,
    /// Connect again when the server closes a connection (not churn's: it always does).
    reconnect: bool,
    connect_timeout: Duration,
    burst: u32,
    /// crowd: lines said with each burst.
    say: u32,
    /// crowd: each bot's name, by client id.
    crowd: Arc<Vec<String>>,
}

impl Attack {
    /// The attack `args` describe, from `sources` (already checked against the rule).
    pub(super) fn new(args: &LoadgenArgs, sources: Sources) -> Attack {
        Attack {
            mode: args.mode,
            to: args.connect,
            clients: args.connections,
            sources,
            ramp: args.ramp,
            duration: args.duration,
            interval: args.interval(),
            payload: usize::from(args.payload),
            churn_ping: args.churn_ping,
            reconnect: !args.no_reconnect,
            connect_timeout: args.connect_timeout,
            burst: args.burst,
            say: args.say,
            crowd: Arc::new(if args.mode == Mode::Crowd {
                crowd::names(args.connections)
            } else {
                Vec::new()
            }),
        }
    }

    /// Runs every client to the deadline and adds up what the server did to them.
    pub(super) async fn run(self) -> AttackReport {
        let start = Instant::now();
        let deadline = start + self.ramp + self.duration;
        let clients: Vec<_> = (0..self.clients)
            .map(|id| {
                let attack = self.clone();
                tokio::spawn(async move { attack.client(id, start, deadline).await })
            })
            .collect();
        let mut total = Tally::default();
        for client in clients {
            total.merge(client.await);
        }
        total.report(&self, start.elapsed())
    }

    /// Client `id`: its share of the ramp, then its mode until `deadline`.
    async fn client(&self, id: u32, start: Instant, deadline: Instant) -> Tally {
        let mut tally = Tally::default();
        let delay = self.ramp.mul_f64(f64::from(id) / f64::from(self.clients));
        tokio::time::sleep_until(start + delay).await;
        if self.mode == Mode::Churn {
            churn::churn(self, id, deadline, &mut tally).await;
        } else {
            self.connections(id, deadline, &mut tally).await;
        }
        tally
    }

    /// Client `id`'s connections, one at a time: the next once the server has closed the
    /// last (with `reconnect`), until a connect fails or the deadline comes.
    async fn connections(&self, id: u32, deadline: Instant, tally: &mut Tally) {
        for round in 0_u64.. {
            let n = u64::from(id) + round * u64::from(self.clients);
            let closed = match self.open(n, deadline, tally).await {
                Opening::Made(mut conn) => {
                    let born = Instant::now();
                    let how = self.misbehave(&mut conn, id, deadline, tally).await;
                    let closed = server_close(&how).is_some();
                    tally.ended(&conn, born, how);
                    closed
                }
                Opening::ResetAtOnce => true,
                Opening::Failed => false,
            };
            if !closed || !self.reconnect || Instant::now() >= deadline {
                return;
            }
            tally.reconnects += 1;
            // A server that closes at once would make this a busy loop of one client.
            tokio::task::yield_now().await;
        }
    }

    /// One connection's mode, until the deadline (`Ok`) or the server closes it.
    async fn misbehave(
        &self,
        conn: &mut Conn,
        id: u32,
        deadline: Instant,
        tally: &mut Tally,
    ) -> Result<(), ClientError> {
        let ping = self.ping(id);
        match self.mode {
            Mode::Idle => silent::idle(conn, deadline, tally).await,
            Mode::PingOnly => silent::ping_only(conn, &ping, self.interval, deadline, tally).await,
            Mode::MoveFlood => {
                flood::move_flood(conn, &format!("flood{id}"), deadline, tally).await
            }
            Mode::SlowReader => {
                let name = format!("slow{id}");
                slow_reader::run(conn, &name, &ping, self.interval, deadline, tally).await
            }
            Mode::Trickle => trickle::run(conn, &ping, self.interval, deadline, tally).await,
            Mode::Crowd => {
                let name = &self.crowd[id as usize];
                let burst = crowd::Burst {
                    moves: self.burst,
                    lines: self.say,
                };
                crowd::run(conn, name, burst, self.interval, deadline, tally).await
            }
            load => unreachable!("{load} is not a hostile mode: loadgen::drive runs it"),
        }
    }

    /// Opens the run's `n`th connection, counting the attempt and its outcome.
    async fn open(&self, n: u64, deadline: Instant, tally: &mut Tally) -> Opening {
        tally.attempted += 1;
        let timeout = Instant::now() + self.connect_timeout;
        let connecting = self.dial(n).connect();
        let Ok(made) = tokio::time::timeout_at(deadline.min(timeout), connecting).await else {
            if timeout <= deadline {
                tally.timed_out += 1;
            } else {
                tally.connecting_at_end += 1;
            }
            return Opening::Failed;
        };
        let opened = made.map_err(ClientError::Io).and_then(Conn::new);
        if server_close(&opened) == Some(Close::Reset) {
            // Accepted and reset before this side saw its connect complete.
            tally.reset_at_connect();
            return Opening::ResetAtOnce;
        }
        match opened {
            Ok(conn) => {
                tally.made += 1;
                Opening::Made(conn)
            }
            Err(ClientError::Io(e)) if e.kind() == io::ErrorKind::ConnectionRefused => {
                tally.refused += 1;
                Opening::Failed
            }
            Err(e) => {
                tally.failed(format!("connection {n} to {}: {e}", self.to));
                Opening::Failed
            }
        }
    }

    /// How to open the run's `n`th connection: from its source, round robin.
    fn dial(&self, n: u64) -> Dial {
        Dial {
            from: self.sources.nth(n),
            recv_buffer: (self.mode == Mode::SlowReader).then_some(slow_reader::RECV_BUFFER),
            ..Dial::new(self.to)
        }
    }

    /// Client `id`'s ping: `--payload` bytes of its id.
    fn ping(&self, id: u32) -> Vec<u8> {
        let payload = vec![id as u8; self.payload];
        frame::packet(frame::PING, &[&payload])
    }
}

/// How opening a connection went.
enum Opening {
    Made(Conn),
    /// Made, but reset by the server before the connect was seen to complete (counted made,
    /// and closed at once by reset).
    ResetAtOnce,
    /// Not made: refused, unanswered, cut by the deadline, or failed otherwise.
    Failed,
}

/// `work`'s result, or `None` if `deadline` came first (and `work` was dropped halfway: the
/// connection is done with then).
async fn until<T>(
    deadline: Instant,
    work: impl Future<Output = Result<T, ClientError>>,
) -> Result<Option<T>, ClientError> {
    match tokio::time::timeout_at(deadline, work).await {
        Ok(done) => done.map(Some),
        Err(_) => Ok(None),
    }
}

/// Sends one packet, counting it: `false` if the deadline came first.
async fn send(
    conn: &mut Conn,
    packet: &[u8],
    deadline: Instant,
    tally: &mut Tally,
) -> Result<bool, ClientError> {
    let sent = until(deadline, conn.send(packet)).await?.is_some();
    tally.packets_sent += u64::from(sent);
    Ok(sent)
}

/// Sends a login as `name`, counting it: `false` if the deadline came first.
async fn send_login(
    conn: &mut Conn,
    name: &str,
    deadline: Instant,
    tally: &mut Tally,
) -> Result<bool, ClientError> {
    let sent = send(conn, &login_packet(name), deadline, tally).await?;
    tally.logins_sent += u64::from(sent);
    Ok(sent)
}

/// Logs in as `name` and waits for the login's answer, counting both (and any packet read
/// meanwhile): `false` if the deadline came first.
async fn log_in(
    conn: &mut Conn,
    name: &str,
    deadline: Instant,
    tally: &mut Tally,
) -> Result<bool, ClientError> {
    if !send_login(conn, name, deadline, tally).await? {
        return Ok(false);
    }
    let answered = conn.logged_in(|_| tally.packets_received += 1);
    if until(deadline, answered).await?.is_none() {
        return Ok(false);
    }
    tally.logins_answered += 1;
    tally.packets_received += 1;
    Ok(true)
}

/// Counts and drops every whole packet already read.
fn drain(conn: &mut Conn, tally: &mut Tally) -> Result<(), ClientError> {
    while conn.pop()?.is_some() {
        tally.packets_received += 1;
    }
    Ok(())
}
