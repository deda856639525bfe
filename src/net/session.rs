//! Connections as the game sees them: one [`NetState`] per accepted socket, all of them in
//! [`Sessions`], each addressed by a generational [`ConnId`].
//!
//! Owns the per-connection buffers and the rules that bound them. Both buffers start empty
//! and unallocated, so an idle connection costs its socket plus this struct: the receive
//! buffer holds only the tail of a packet that arrived in pieces, the send buffer only what
//! the socket has not taken yet, and each is freed once it drains. A client that stops
//! reading cannot make the shard hoard memory for it: past `send_buffer_size` queued bytes
//! it is disconnected.
//!
//! This module must never touch a socket's readiness or parse packets: the server does that.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::net::SocketAddr;

use tokio::time::Instant;

use super::admission::Keys;
use super::backend::Transport;
use super::churn::Churn;
use super::conn_id::ConnId;
use super::frame;
use super::rate::{Bucket, Rate, Verdict};
use super::reason::kind_of;
use crate::slab::Slab;

// Connections with no socket, for the test kit's handler harness (tests only).
#[cfg(any(test, doc, feature = "testkit"))]
mod detached;

/// A buffer that drained keeps its allocation up to this size (a busy connection would
/// otherwise reallocate on every packet); larger ones are freed.
const KEEP_CAPACITY: usize = 4 * 1024;

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

/// One open connection.
pub(super) struct NetState {
    pub transport: Box<dyn Transport>,
    pub peer: SocketAddr,
    /// What the connection counts against: its host, its prefix, its connect rate.
    pub keys: Keys,
    /// When it was accepted: the login deadline counts from here.
    pub connected: Instant,
    /// Allowances of the rate-limited packet kinds it has sent, by packet id (a handful at
    /// most, so a short list).
    pub buckets: Vec<(u8, Bucket)>,
    /// The unparsed tail of the last read (part of a packet); empty and unallocated otherwise.
    pub recv: Vec<u8>,
    /// Output the socket has not taken yet; `send[sent..]` is still to write.
    pub send: Vec<u8>,
    pub sent: usize,
    pub logged_in: bool,
    /// When the last complete packet arrived: the idle timeout counts from here, so a client
    /// trickling bytes without ever finishing a packet still times out.
    pub last_packet: Instant,
    /// Set once the connection is condemned; it is dropped at the end of the phase.
    pub closing: Option<Disconnect>,
    /// Set by [`Sessions::close_after_flush`]: nothing more is read, and once its queued
    /// output is written the connection closes with this reason.
    pub linger: Option<Disconnect>,
    /// The socket said "full"; it signals when writable again.
    pub write_blocked: bool,
    pub queued_flush: bool,
    /// In the server's read queue.
    pub queued_read: bool,
}

impl NetState {
    pub(crate) fn new(
        transport: Box<dyn Transport>,
        peer: SocketAddr,
        keys: Keys,
        now: Instant,
    ) -> NetState {
        NetState {
            transport,
            peer,
            keys,
            connected: now,
            buckets: Vec::new(),
            recv: Vec::new(),
            send: Vec::new(),
            sent: 0,
            logged_in: false,
            last_packet: now,
            closing: None,
            linger: None,
            write_blocked: false,
            queued_flush: false,
            queued_read: false,
        }
    }

    /// Takes a token for packet `id` from its bucket (full when first used).
    pub(crate) fn take_token(&mut self, id: u8, rate: Rate) -> Verdict {
        let now = Instant::now();
        let at = match self.buckets.iter().position(|(b, _)| *b == id) {
            Some(at) => at,
            None => {
                self.buckets.push((id, Bucket::full(rate, now)));
                self.buckets.len() - 1
            }
        };
        self.buckets[at].1.take(rate, now)
    }

    /// Still read from: neither condemned nor closing after a flush. The one test of "its
    /// packets are still taken", for the read loop and [`Sessions::is_open`] alike.
    pub(crate) fn reads_input(&self) -> bool {
        self.closing.is_none() && self.linger.is_none()
    }

    /// Bytes queued and not yet written.
    pub(crate) fn pending_output(&self) -> usize {
        self.send.len() - self.sent
    }

    /// Forgets the written prefix: all of it once everything is out (then frees an oversized
    /// buffer), or by moving the unsent tail to the front once the prefix is the larger half
    /// — so a client that reads about as fast as it is sent to never leaves a growing trail
    /// of written bytes behind its unsent ones. The move costs at most what was written.
    pub(crate) fn compact_send(&mut self) {
        if self.sent == self.send.len() {
            self.send.clear();
            self.sent = 0;
            release_if_large(&mut self.send);
        } else if self.sent >= self.send.len() - self.sent {
            self.send.drain(..self.sent);
            self.sent = 0;
        }
    }
}

/// Frees `buf`'s allocation if it is empty and bigger than what a busy connection reuses.
pub(super) fn release_if_large(buf: &mut Vec<u8>) {
    if buf.is_empty() && buf.capacity() > KEEP_CAPACITY {
        *buf = Vec::new();
    }
}

/// Every open connection. Packet handlers get `&mut Sessions` to answer, broadcast, log a
/// client in or throw it out.
pub struct Sessions {
    pub(super) conns: Slab<NetState>,
    send_limit: usize,
    /// Unsent output across every connection, bytes, and the most it may be.
    pub(super) outbound: usize,
    outbound_budget: usize,
    /// Connections disconnected for the outbound budget, and for their own send limit.
    pub(super) evictions: u64,
    pub(super) overflows: u64,
    /// Packets queued to connections since start.
    pub(super) packets_out: u64,
    /// Connections with output queued since the last Flush phase.
    pub(super) to_flush: Vec<ConnId>,
    /// Connections condemned since they were last reaped.
    pub(super) to_close: Vec<ConnId>,
    /// Open connections that have not logged in (condemned ones until they are reaped).
    pub(super) prelogin: usize,
    /// Connections in the order they were accepted, for finding the oldest that has not
    /// logged in: entries of connections that logged in or closed since are skipped when met,
    /// and dropped in one pass when they outnumber the live ones.
    arrivals: VecDeque<ConnId>,
    /// How many connections come and go, for the log.
    pub(super) churn: Churn,
}

impl Sessions {
    pub(crate) fn new(send_limit: usize, outbound_budget: usize) -> Sessions {
        Sessions {
            conns: Slab::new(),
            send_limit,
            outbound: 0,
            outbound_budget,
            evictions: 0,
            overflows: 0,
            packets_out: 0,
            to_flush: Vec::new(),
            to_close: Vec::new(),
            prelogin: 0,
            arrivals: VecDeque::new(),
            churn: Churn::new(),
        }
    }

    /// Connection churn: the level at which to log a connection's comings and goings.
    #[must_use]
    pub fn churn(&self) -> &Churn {
        &self.churn
    }

    /// Open connections (including ones condemned this phase).
    #[must_use]
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// No connection is open.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.conns.len() == 0
    }

    /// Whether `conn` is open, not condemned and not closing after a flush: whether its
    /// packets are still read.
    #[must_use]
    pub fn is_open(&self, conn: ConnId) -> bool {
        self.conns.get(conn.0).is_some_and(NetState::reads_input)
    }

    /// The client's address.
    #[must_use]
    pub fn peer(&self, conn: ConnId) -> Option<SocketAddr> {
        self.conns.get(conn.0).map(|s| s.peer)
    }

    /// Whether a game logged `conn` in ([`Sessions::set_logged_in`]): every registered packet
    /// is then accepted from it, and its idle deadline runs instead of the login one.
    #[must_use]
    pub fn is_logged_in(&self, conn: ConnId) -> bool {
        self.conns.get(conn.0).is_some_and(|s| s.logged_in)
    }

    /// From now on every registered packet is accepted from `conn`, not only the ones
    /// allowed before login.
    pub fn set_logged_in(&mut self, conn: ConnId) {
        if let Some(state) = self.conns.get_mut(conn.0)
            && !state.logged_in
        {
            state.logged_in = true;
            self.prelogin -= 1;
        }
    }

    /// `conn` was just accepted: it counts as not logged in until it does.
    pub(super) fn arrived(&mut self, conn: ConnId) {
        self.prelogin += 1;
        self.arrivals.push_back(conn);
        if self.arrivals.len() > 2 * self.prelogin + 1024 {
            let conns = &self.conns;
            self.arrivals
                .retain(|c| conns.get(c.0).is_some_and(|s| !s.logged_in));
        }
    }

    /// The oldest connection that has not logged in and is still read from (one closing
    /// already frees its slot anyway), taken off the arrivals; `None` if there is none.
    pub(super) fn oldest_prelogin(&mut self) -> Option<ConnId> {
        while let Some(conn) = self.arrivals.pop_front() {
            if self
                .conns
                .get(conn.0)
                .is_some_and(|s| !s.logged_in && s.reads_input())
            {
                return Some(conn);
            }
        }
        None
    }

    /// Queues one packet for `conn`; it goes out in this iteration's Flush phase. False if
    /// the connection is gone or condemned. A client whose queued output would pass
    /// `send_buffer_size` is disconnected instead: it is not reading. When all connections'
    /// unsent output would pass the outbound budget, the one holding the most is
    /// disconnected first (usually the slowest reader, rarely `conn` itself).
    pub fn send_packet(&mut self, conn: ConnId, id: u8, parts: &[&[u8]]) -> bool {
        let len = frame::HEADER_LEN + parts.iter().map(|p| p.len()).sum::<usize>();
        self.queue_output(conn, len, 1, |out| frame::put(out, id, parts))
    }

    /// Queues `frames`, whole packets already framed one after the other (`packets` of
    /// them), for `conn` in one copy: what [`Sessions::send_packet`] would queue for each,
    /// under the same send limit and outbound budget. The fan-out of world changes sends
    /// each player its iteration's packets this way.
    pub fn send_frames(&mut self, conn: ConnId, frames: &[u8], packets: u64) -> bool {
        self.queue_output(conn, frames.len(), packets, |out| {
            out.extend_from_slice(frames);
        })
    }

    /// Bytes queued for `conn` and not yet written (0 for a connection that is gone).
    #[must_use]
    pub fn pending_output(&self, conn: ConnId) -> usize {
        self.conns.get(conn.0).map_or(0, NetState::pending_output)
    }

    /// The most output one connection may hold unsent (`network.send_buffer_size`).
    #[must_use]
    pub fn send_limit(&self) -> usize {
        self.send_limit
    }

    /// Queues `len` bytes (`packets` packets) that `write` appends to `conn`'s output,
    /// after the send limit and the outbound budget have had their say.
    fn queue_output(
        &mut self,
        conn: ConnId,
        len: usize,
        packets: u64,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> bool {
        let Some(state) = self.conns.get(conn.0) else {
            return false;
        };
        if state.closing.is_some() {
            return false;
        }
        let queued = state.pending_output();
        if queued + len > self.send_limit {
            let limit = self.send_limit;
            self.overflows += 1;
            self.close(
                conn,
                Disconnect::fault(format!(
                    "send buffer overflow: {queued} bytes unsent, limit {limit} \
                     (network.send_buffer_size); the client is not reading"
                )),
            );
            return false;
        }
        while self.outbound + len > self.outbound_budget {
            let Some(hog) = self.largest_backlog() else {
                break;
            };
            self.evict(hog);
            if hog == conn {
                return false;
            }
        }
        let Some(state) = self.conns.get_mut(conn.0) else {
            return false;
        };
        write(&mut state.send);
        self.packets_out += packets;
        self.outbound += len;
        self.queue_flush(conn);
        true
    }

    /// The open connection with the most unsent output, if any has some.
    fn largest_backlog(&self) -> Option<ConnId> {
        self.conns
            .iter()
            .filter(|(_, s)| s.closing.is_none() && s.pending_output() > 0)
            .max_by_key(|(_, s)| s.pending_output())
            .map(|(key, _)| ConnId(key))
    }

    fn evict(&mut self, conn: ConnId) {
        let held = self.conns.get(conn.0).map_or(0, NetState::pending_output);
        let budget = self.outbound_budget;
        self.evictions += 1;
        self.close(
            conn,
            Disconnect::fault(format!(
                "outbound budget: all connections together hold {budget} bytes unsent \
                 (network.outbound_budget) and this one the most, {held}"
            )),
        );
    }

    /// Puts `conn` in the next Flush phase's list, once.
    pub(super) fn queue_flush(&mut self, conn: ConnId) {
        if let Some(state) = self.conns.get_mut(conn.0)
            && !state.queued_flush
        {
            state.queued_flush = true;
            self.to_flush.push(conn);
        }
    }

    /// Condemns `conn`: nothing more is read from or sent to it, and it is closed (with one
    /// log line naming the peer and `why`) at the end of the current phase. Later calls keep
    /// the first reason.
    pub fn close(&mut self, conn: ConnId, why: Disconnect) {
        if let Some(state) = self.conns.get_mut(conn.0)
            && state.closing.is_none()
        {
            state.closing = Some(why);
            // Nothing more is written to it: its output stops counting at once, so one
            // eviction is enough to make room.
            self.outbound -= state.pending_output();
            state.send = Vec::new();
            state.sent = 0;
            self.to_close.push(conn);
        }
    }

    /// Closes `conn` once what is queued for it has been written: an answer to a refused
    /// login reaches the client, then the connection closes with `why`. Nothing more is read
    /// from it meanwhile; more may still be queued, and goes out first. A client that does
    /// not read meets the usual bounds (`send_buffer_size`, the outbound budget, the idle
    /// timeout), so a lingering connection cannot be held open.
    pub fn close_after_flush(&mut self, conn: ConnId, why: Disconnect) {
        if let Some(state) = self.conns.get_mut(conn.0)
            && state.reads_input()
        {
            state.linger = Some(why);
            self.queue_flush(conn);
        }
    }

    /// Every open connection, in slot order.
    pub fn ids(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.conns
            .iter()
            .filter(|(_, s)| s.closing.is_none())
            .map(|(key, _)| ConnId(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;
    impl Transport for Nothing {
        fn read(&mut self, _: &mut Vec<u8>, _: usize) -> super::super::backend::ReadOutcome {
            super::super::backend::ReadOutcome::WouldBlock
        }
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Ok(0)
        }
    }

    #[tokio::test]
    async fn a_partly_written_send_buffer_never_keeps_more_than_twice_its_unsent_bytes() {
        let peer = "127.0.0.1:1".parse().unwrap();
        let keys = Keys::of(std::net::IpAddr::from([127, 0, 0, 1]));
        let mut state = NetState::new(Box::new(Nothing), peer, keys, Instant::now());
        // A slow reader: each round 1000 bytes are queued and 990 written.
        for _ in 0..1000 {
            state.send.extend_from_slice(&[7; 1000]);
            state.sent += 990;
            state.compact_send();
            assert!(state.send.len() <= 2 * state.pending_output() + 1000);
        }
        assert_eq!(state.pending_output(), 10_000);
        assert!(state.send.len() < 25_000, "{}", state.send.len());
    }
}
