//! One load client: connect (and log in for `walk`), wait for the measurement window, then
//! ping or walk in a closed loop until the window ends.
//!
//! This module owns a client's schedule and what it counts. It must never put a second
//! request in flight before the first is answered: a closed loop measures the server, a
//! pile-up would measure this tool's own queue.

use std::net::IpAddr;
use std::time::Duration;

use crate::demo::packets::{client, server};
use shardloop::net::frame::{self, Frame};
use shardloop::world::rng::Rng;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};

use super::conn::{ClientError, Conn};
use super::dial::Dial;
use super::outcome::Outcome;
use super::{Mode, Plan, Window};

/// How often a walking client moves.
const WALK_PERIOD: Duration = Duration::from_millis(250);
/// A walk tick this late means this tool, not the server, was too busy to keep up.
const LATE_TICK: Duration = Duration::from_millis(25);
/// Share of moves, in percent, followed by a say.
const SAY_PERCENT: u64 = 5;

/// Tells the coordinator whether a client is set up, exactly once, even if it failed.
pub(super) struct Ready(pub(super) Option<mpsc::UnboundedSender<bool>>);

impl Ready {
    fn signal(&mut self, set_up: bool) {
        if let Some(tx) = self.0.take() {
            // The coordinator outlives every client, so this cannot fail while it matters.
            let _ = tx.send(set_up);
        }
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        self.signal(false);
    }
}

/// One client from connect (from `source`, if given) to the end of the window; failures
/// become part of its outcome.
pub(super) async fn run_client(
    id: u32,
    plan: Plan,
    source: Option<IpAddr>,
    mut ready: Ready,
    window: watch::Receiver<Option<Window>>,
) -> Outcome {
    let mut outcome = Outcome::default();
    let dial = Dial {
        from: source,
        ..Dial::new(plan.addr)
    };
    if let Err(e) = client(id, plan, dial, &mut ready, window, &mut outcome).await {
        outcome.fail(id, e.to_string());
    }
    outcome
}

async fn client(
    id: u32,
    plan: Plan,
    dial: Dial,
    ready: &mut Ready,
    window: watch::Receiver<Option<Window>>,
    seen: &mut Outcome,
) -> Result<(), ClientError> {
    let delay = plan.ramp.mul_f64(f64::from(id) / f64::from(plan.clients));
    tokio::time::sleep(delay).await;
    let mut conn = Conn::connect(&dial).await?;
    if plan.mode == Mode::Walk {
        conn.login(&walker_name(id, plan.in_crowd), |packet| {
            seen.unasked(packet)
        })
        .await?;
    }
    seen.connected = 1;
    ready.signal(true);
    let window = conn
        .wait_for_start(window, |packet| seen.unasked(packet))
        .await?;
    match plan.mode {
        Mode::Ping => ping(&mut conn, id, &plan, window, seen).await,
        Mode::Walk => walk(&mut conn, id, plan.clients, window, seen).await,
        hostile => unreachable!("{hostile} is not a load mode: attack::run runs it"),
    }
}

/// Walker `id`'s name: `bot{id}`, or with `--in-crowd` the `id`th name of the `walker`
/// series that starts in the crowd's square.
fn walker_name(id: u32, in_crowd: bool) -> String {
    match in_crowd {
        false => format!("bot{id}"),
        true => super::attack::names_in_crowd("walker", id + 1)
            .pop()
            .unwrap_or_else(|| format!("bot{id}")),
    }
}

/// Ping mode: one ping in flight at a time until the window ends; with `--interval`, at
/// most one per interval (a ping answered late is followed at once, not twice).
async fn ping(
    conn: &mut Conn,
    id: u32,
    plan: &Plan,
    window: Window,
    seen: &mut Outcome,
) -> Result<(), ClientError> {
    let payload_len = plan.payload;
    let mut ticks = plan.interval.map(|every| {
        let mut ticks = tokio::time::interval_at(window.start, every);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticks
    });
    // The payload is the sequence number (as many low bytes as fit), then the client's id:
    // a stale or misrouted echo cannot pass for the one awaited.
    let mut payload = [0; frame::MAX_PING_PAYLOAD];
    payload.fill(id as u8);
    let payload = &mut payload[..payload_len];
    let mut ping = Vec::with_capacity(frame::HEADER_LEN + payload_len);
    for seq in 0_u64.. {
        let stamp = payload.len().min(8);
        payload[..stamp].copy_from_slice(&seq.to_be_bytes()[8 - stamp..]);
        ping.clear();
        frame::put(&mut ping, client::PING, &[payload]);
        if let Some(ticks) = &mut ticks
            && tokio::time::timeout_at(window.end, ticks.tick())
                .await
                .is_err()
        {
            break;
        }
        let sent = Instant::now();
        if sent >= window.end {
            break;
        }
        conn.send(&ping).await?;
        let echo = conn.echo_of(&ping, |packet| seen.unasked(packet));
        let echo = tokio::time::timeout_at(window.end, echo).await;
        let Ok(echo) = echo else { break };
        echo?;
        seen.rtt.record_until(sent, window.end);
    }
    Ok(())
}

/// Walk mode: a move every 250 ms, staggered across clients, timed to its `0x82`.
async fn walk(
    conn: &mut Conn,
    id: u32,
    clients: u32,
    window: Window,
    seen: &mut Outcome,
) -> Result<(), ClientError> {
    let offset = WALK_PERIOD.mul_f64(f64::from(id) / f64::from(clients));
    let mut ticks = tokio::time::interval_at(window.start + offset, WALK_PERIOD);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut walker = Walker::new(id);
    let end = tokio::time::sleep_until(window.end);
    tokio::pin!(end);
    loop {
        tokio::select! {
            biased;
            () = &mut end => break,
            due = ticks.tick() => {
                if let Some(packets) = walker.tick(due, seen) {
                    conn.send(packets).await?;
                }
            }
            read = conn.fill() => {
                read?;
                while let Some(packet) = conn.pop()? {
                    walker.answer(packet, window.end, seen);
                }
            }
        }
    }
    // Polite, not required: the server drops the player when the connection closes anyway.
    let _ = conn.send(&frame::packet(client::LOGOUT, &[])).await;
    Ok(())
}

/// One walking client's schedule and its move in flight.
struct Walker {
    rng: Rng,
    seq: u8,
    /// The move awaiting its `0x82`: its sequence number and when it was sent.
    in_flight: Option<(u8, Instant)>,
    speech: Vec<u8>,
    out: Vec<u8>,
}

impl Walker {
    fn new(id: u32) -> Walker {
        Walker {
            rng: Rng::derive(0x10AD_6E11, u64::from(id)),
            seq: 0,
            in_flight: None,
            speech: format!("hail from bot{id}").into_bytes(),
            out: Vec::new(),
        }
    }

    /// The packets to send at the tick due at `due`, or `None` to skip it.
    fn tick(&mut self, due: Instant, seen: &mut Outcome) -> Option<&[u8]> {
        let now = Instant::now();
        if now.duration_since(due) > LATE_TICK {
            seen.late_ticks += 1;
        }
        if self.in_flight.is_some() {
            // Closed loop: never a second move in flight, the server is behind.
            seen.skipped_moves += 1;
            return None;
        }
        self.seq = self.seq.wrapping_add(1);
        let direction = self.rng.below(8) as u8;
        self.out.clear();
        frame::put(&mut self.out, client::MOVE, &[&[direction, self.seq]]);
        if self.rng.percent(SAY_PERCENT) {
            frame::put(&mut self.out, client::SAY, &[&self.speech]);
        }
        self.in_flight = Some((self.seq, now));
        Some(&self.out)
    }

    /// Handles a packet from the server: the awaited `0x82`, or one to count and drop.
    fn answer(&mut self, packet: Frame<'_>, end: Instant, seen: &mut Outcome) {
        match (packet.id, self.in_flight) {
            (server::MOVE_OK, Some((seq, sent))) if packet.payload().first() == Some(&seq) => {
                self.in_flight = None;
                seen.rtt.record_until(sent, end);
            }
            (server::MOVE_OK, _) => {}
            (id, _) => seen.unasked(id),
        }
    }
}
