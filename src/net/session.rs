//! Connections as the game sees them: one [`NetState`] per accepted socket, all of them in
//! [`Sessions`], each addressed by a generational [`ConnId`].
//!
//! Owns the per-connection buffers and the rules that bound them. Both buffers start empty
//! and unallocated, so an idle connection costs its socket plus this struct: the receive
//! buffer holds only a packet that arrived in pieces (the server reads the rest of it into
//! that buffer in place), the output queue only what the socket has not taken yet — bytes of
//! the connection's own, and frames shared with other connections by reference
//! ([`SharedFrames`]) — and each is freed once it drains. A client that stops reading cannot make the shard hoard memory for
//! it: past `send_buffer_size` queued bytes it is disconnected, and so is one that keeps more
//! than `send_soft_limit` queued for longer than `send_soft_timeout` (a reader that keeps
//! just under the hard limit). The outbound budget counts, besides the queued bytes, the
//! kernel's send buffer (and a backend's own output buffer) of every socket that said
//! "full": those bytes are the process's too, only not on its heap. Shared frames count
//! against each connection they are queued to as the bytes it will send.
//!
//! Output is queued to go out *now* (the next Flush phase: replies, anything sent to one
//! player) or *at the tick* ([`Sessions::send_shared`]: the fan-out of world changes), which
//! the server writes at the next tick boundary, so a connection with only broadcast output is
//! written at most once per tick. Queuing output to go now sends what was queued at the tick
//! too, in order. The fan-out's ranges of a group's shared frames ([`Sessions::send_group`])
//! wait on the connection's line (`hot`: one dense cache line per connection slot), and the
//! whole of a group, for everyone who sees all of it ([`Sessions::send_prepared`]), is
//! recorded once for the group with one bit on each recipient's gate (16 dense bytes per
//! slot, with the counts the limits need). Both join the connection's output queue, in the
//! order queued, when it is written or queued anything else. The limits are decided when
//! output is queued, whichever way it waits, so a crowd's recipient costs its gate and not
//! its line or its connection's state. For a run of such recipients the fan-out works the
//! per-group part of those decisions out once ([`Sessions::join_run`]) and each recipient
//! costs one [`JoinRun::join`].
//!
//! This module must never touch a socket's readiness or parse packets: the server does that.

use std::collections::VecDeque;
use std::net::SocketAddr;

use tokio::time::Instant;

use super::admission::Keys;
use super::backend::Transport;
use super::churn::Churn;
use super::conn_id::ConnId;
use super::frame;
use super::rate::{Bucket, Rate, Verdict};
use super::reason::Disconnect;
use super::shared::SharedFrames;
use crate::slab::Slab;

// Connections with no socket, for the test kit's handler harness (tests only).
#[cfg(any(test, doc, feature = "testkit"))]
mod detached;
mod hot;
mod output;

pub(crate) use hot::GroupId;
use hot::{DeferralId, Deferrals, FLUSH, Gate, Groups, Hot, LINED, LIVE, OVER_SOFT, TICK};
pub(super) use output::Output;

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
    /// A packet that arrived in pieces, so far (rarely also whole packets held back when a
    /// turn's packet budget ran out); empty and unallocated otherwise. Reserved at the
    /// packet's declared length once its header is in, so it grows at most once per packet;
    /// the deadline sweep shrinks it to its bytes when nothing arrived for a whole sweep.
    pub recv: Vec<u8>,
    /// Bytes arrived since the last deadline sweep (which shrinks an idle partial packet's
    /// buffer to what it holds).
    pub received: bool,
    /// Output the socket has not taken yet, in order.
    pub out: Output,
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
    /// The last flush left the socket full: its kernel send buffer (and the backend's output
    /// buffer) is counted in the outbound budget ([`Sessions::socket_charge`]).
    pub charged: bool,
    /// Since when its unsent output has been above `send_soft_limit`, while it is.
    pub over_soft_since: Option<Instant>,
    /// Closed for not reading its output: the close resets the connection
    /// ([`Transport::discard_output`]), so the kernel frees its send buffer at once.
    pub discard_output: bool,
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
            received: false,
            out: Output::default(),
            logged_in: false,
            last_packet: now,
            closing: None,
            linger: None,
            write_blocked: false,
            charged: false,
            over_soft_since: None,
            discard_output: false,
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

    /// Bytes in its output queue, not yet written (ranges still on its line or deferred in
    /// [`Sessions`] not counted: [`Sessions::pending_output`] counts them).
    pub(crate) fn pending_output(&self) -> usize {
        self.out.len()
    }
}

/// When queued output goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// In this iteration's Flush phase.
    Now,
    /// In the Flush phase of the iteration that processes the next tick boundary.
    Tick,
}

/// A range of one group's shared frames to queue on many connections, checked once
/// ([`Sessions::prepare`]).
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    g: GroupId,
    range: std::ops::Range<usize>,
    len: usize,
    packets: u64,
    /// The short way of [`Sessions::send_prepared`] takes a connection holding fewer unsent
    /// bytes than this: `len` more then stay within the send limit and the soft limit. 0:
    /// never (an empty range, or ends past a line's u32s).
    below: usize,
    /// Where the range is recorded once for every connection it is deferred to (`None`:
    /// every deferral was in use, and the short way puts it on the connection's line).
    deferral: Option<DeferralId>,
}

/// [`Sessions::send_prepared`] for a run of connections, each joining the prepared range's
/// deferral, with what is the same for all of them worked out once: the budget's room as a
/// count of joins, the deferrals a gate may already hold, the range's bounds. Its one
/// per-connection call, [`JoinRun::join`], takes exactly the connections `send_prepared`
/// would defer, with the same effects on each (its gate, the tick's list, in the same
/// order); it refuses any other, which the caller then sends with `send_prepared` after
/// [`JoinRun::finish`]. Why: in a crowd this is most of the fan-out's work per recipient,
/// and the run's state stays in registers. The joins are filed with the sessions when the
/// run ends, however it ends (`finish`, or a drop on an early return or a panic), so the
/// budget and the deferral's count never miss a join whose gate was already marked.
pub(crate) struct JoinRun<'s> {
    gates: &'s mut [Gate],
    at_tick: &'s mut Vec<ConnId>,
    /// Filed when the run ends: the budget's count, the packets queued, the deferral's
    /// members.
    outbound: &'s mut usize,
    packets_out: &'s mut u64,
    deferrals: &'s mut Deferrals,
    /// `Deferrals::joinable_with` the deferral.
    joinable: u16,
    bit: u16,
    d: DeferralId,
    g: GroupId,
    below: usize,
    len: usize,
    packets: u64,
    /// How many joins the budget has room for.
    room: usize,
    joined: usize,
}

impl JoinRun<'_> {
    /// [`Sessions::send_prepared`] of the run's range to `conn` if it would join the
    /// deferral (true: done); false, and nothing changed, if it would do anything else.
    #[inline(always)]
    pub(crate) fn join(&mut self, conn: ConnId) -> bool {
        let Some(gate) = self.gates.get_mut(conn.0.index() as usize) else {
            return false;
        };
        // `send_prepared`'s short way and its deferral's branch, tested at once.
        if gate.generation != conn.0.generation()
            || gate.flags & (LIVE | OVER_SOFT) != LIVE
            || gate.pending >= self.below
            || self.joined >= self.room
            || gate.deferred & !self.joinable != 0
        {
            return false;
        }
        gate.deferred |= self.bit;
        gate.pending += self.len;
        if gate.flags & (TICK | FLUSH) == 0 {
            gate.flags |= TICK;
            self.at_tick.push(conn);
        }
        self.joined += 1;
        true
    }

    /// Ends the run, filing its joins with the sessions (as its drop does); how many there
    /// were.
    pub(crate) fn finish(self) -> usize {
        self.joined
    }
}

impl Drop for JoinRun<'_> {
    fn drop(&mut self) {
        let n = self.joined;
        // At most one join per connection slot: fewer than 2^32.
        self.deferrals.join_many(self.d, self.g, n as u32);
        *self.outbound += n * self.len;
        *self.packets_out += n as u64 * self.packets;
    }
}

/// Every open connection. Packet handlers get `&mut Sessions` to answer, broadcast, log a
/// client in or throw it out.
pub struct Sessions {
    pub(super) conns: Slab<NetState>,
    send_limit: usize,
    /// `send_soft_limit`: unsent output a connection may keep for at most the soft timeout
    /// (the sweep checks it); 0: no soft limit.
    pub(super) soft_limit: usize,
    /// What the outbound budget counts, bytes: unsent output across every connection, plus
    /// [`Sessions::socket_charge`] for each socket left full; and the most it may be.
    pub(super) outbound: usize,
    outbound_budget: usize,
    /// Counted in the budget for a socket that said "full": its kernel send buffer as the
    /// kernel sized it (`SO_SNDBUF` read back), plus what the backend holds between `write`
    /// and the kernel. 0 until the server knows its listeners.
    pub(super) socket_charge: usize,
    /// Sockets counted at [`Sessions::socket_charge`] now.
    pub(super) charged_sockets: usize,
    /// Connections disconnected for the outbound budget, for their own send limit, and for
    /// staying over the soft limit.
    pub(super) evictions: u64,
    pub(super) overflows: u64,
    pub(super) soft_overflows: u64,
    /// Packets queued to connections since start.
    pub(super) packets_out: u64,
    /// Connections with output queued since the last Flush phase.
    pub(super) to_flush: Vec<ConnId>,
    /// Connections with output queued to go at the next tick ([`Sessions::release_tick`]).
    pub(super) at_tick: Vec<ConnId>,
    /// One gate per connection slot: what queuing a broadcast checks, and the deferred
    /// ranges the connection is owed ([`hot`]); filled the first time its connection is
    /// queued output the long way, and again whenever the slot's generation changes.
    gates: Vec<Gate>,
    /// One line per connection slot: the last ranges queued for it ([`hot`]), as long as
    /// `gates`.
    hot: Vec<Hot>,
    /// The groups of shared frames the lines' and the deferrals' ranges refer to.
    groups: Groups,
    /// Ranges of groups owed to many connections, recorded once ([`hot`]).
    deferrals: Deferrals,
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
            soft_limit: 0,
            outbound: 0,
            outbound_budget,
            socket_charge: 0,
            charged_sockets: 0,
            evictions: 0,
            overflows: 0,
            soft_overflows: 0,
            packets_out: 0,
            to_flush: Vec::new(),
            at_tick: Vec::new(),
            gates: Vec::new(),
            hot: Vec::new(),
            groups: Groups::default(),
            deferrals: Deferrals::default(),
            to_close: Vec::new(),
            prelogin: 0,
            arrivals: VecDeque::new(),
            churn: Churn::new(),
        }
    }

    /// The same, with `send_soft_limit` (0: none).
    #[must_use]
    pub(crate) fn with_soft_limit(self, soft_limit: usize) -> Sessions {
        Sessions { soft_limit, ..self }
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
        self.queue_output(conn, len, 1, Due::Now, |out| {
            out.push_own(len, |buf| frame::put(buf, id, parts));
        })
    }

    /// [`Sessions::send_packet`], to go out with the broadcast output at the next tick
    /// ([`Sessions::send_shared`]) unless something queued to go now takes it along first.
    pub(crate) fn send_packet_at_tick(&mut self, conn: ConnId, id: u8, parts: &[&[u8]]) -> bool {
        let len = frame::HEADER_LEN + parts.iter().map(|p| p.len()).sum::<usize>();
        self.queue_output(conn, len, 1, Due::Tick, |out| {
            out.push_own(len, |buf| frame::put(buf, id, parts));
        })
    }

    /// Queues `frames[range]`, whole packets (`packets` of them) encoded once for many
    /// connections, by reference: `conn` gets a reference count and a queue entry, not a
    /// copy. The bytes count against its send limit and the outbound budget as the bytes it
    /// will send, like any other output.
    ///
    /// Broadcast output: it goes out at the next tick boundary (the Flush phase of the
    /// iteration that processes it), not in this iteration's Flush phase, so a connection
    /// that gets only broadcasts is written at most once per tick however many iterations
    /// queue them. Output queued to go now ([`Sessions::send_packet`]) takes it along, in
    /// order, when it comes first.
    ///
    /// # Panics
    ///
    /// If `range` is not within `frames`.
    pub fn send_shared(
        &mut self,
        conn: ConnId,
        frames: &SharedFrames,
        range: std::ops::Range<usize>,
        packets: u64,
    ) -> bool {
        assert!(range.end <= frames.len(), "a range within the frames");
        let len = range.len();
        self.queue_output(conn, len, packets, Due::Tick, |out| {
            out.push_shared(frames, range);
        })
    }

    /// [`Sessions::send_shared`] of all of `frames` but `hole` (whole packets: a player's own
    /// move in its crowd's moves), as one queued output: the part before the hole, then the
    /// part after it. `packets` counts both parts.
    ///
    /// # Panics
    ///
    /// If `hole` is not within `frames`.
    #[cfg(any(test, doc))] // the fan-out queues by group: `Sessions::send_group_around`
    pub(crate) fn send_shared_around(
        &mut self,
        conn: ConnId,
        frames: &SharedFrames,
        hole: std::ops::Range<usize>,
        packets: u64,
    ) -> bool {
        assert!(
            hole.start <= hole.end && hole.end <= frames.len(),
            "a hole within the frames"
        );
        let len = frames.len() - hole.len();
        self.queue_output(conn, len, packets, Due::Tick, |out| {
            out.push_shared(frames, 0..hole.start);
            out.push_shared(frames, hole.end..frames.len());
        })
    }

    /// Files `frames` as a group the fan-out queues ranges of with [`Sessions::send_group`]:
    /// held once by the table however many connections get ranges of it, until the caller
    /// lets go ([`Sessions::unshare`]) and the last range queued is written or dropped.
    pub(crate) fn share(&mut self, frames: SharedFrames) -> GroupId {
        self.groups.share(frames)
    }

    /// The fan-out is done queuing group `g` ([`Sessions::share`]): its ranges prepared
    /// with [`Sessions::prepare`] take no more connections.
    pub(crate) fn unshare(&mut self, g: GroupId) {
        self.deferrals.close_group(g, &mut self.groups);
        self.groups.release(g);
    }

    /// [`Sessions::send_shared`] of `range` of group `g`'s frames: the same output, limits,
    /// order and tick, but queued on the connection's hot line when it has room and no limit
    /// is near (the connection's state is then not touched until it is written).
    pub(crate) fn send_group(
        &mut self,
        conn: ConnId,
        g: GroupId,
        range: std::ops::Range<usize>,
        packets: u64,
    ) -> bool {
        assert!(
            range.end <= self.groups.frames(g).len(),
            "a range within the frames"
        );
        let len = range.len();
        self.queue_ranges(conn, g, &[range], len, packets)
    }

    /// [`Sessions::send_shared_around`] of group `g`'s frames, the way of
    /// [`Sessions::send_group`].
    pub(crate) fn send_group_around(
        &mut self,
        conn: ConnId,
        g: GroupId,
        hole: std::ops::Range<usize>,
        packets: u64,
    ) -> bool {
        let all = self.groups.frames(g).len();
        assert!(
            hole.start <= hole.end && hole.end <= all,
            "a hole within the frames"
        );
        let len = all - hole.len();
        self.queue_ranges(conn, g, &[0..hole.start, hole.end..all], len, packets)
    }

    /// `range` of group `g`'s frames (`packets` packets), checked once, to queue on many
    /// connections with [`Sessions::send_prepared`]: what the fan-out hands everyone who
    /// sees a whole group. The range is recorded once, in a deferral that connections join
    /// (until the group is let go, [`Sessions::unshare`]).
    pub(crate) fn prepare(
        &mut self,
        g: GroupId,
        range: std::ops::Range<usize>,
        packets: u64,
    ) -> Prepared {
        assert!(
            range.end <= self.groups.frames(g).len(),
            "a range within the frames"
        );
        let len = range.len();
        let cap = match self.soft_limit {
            0 => self.send_limit,
            soft => self.send_limit.min(soft),
        };
        // The short way needs the range's ends in u32s, and a range to queue.
        let short = u32::try_from(range.end).is_ok() && len > 0;
        let below = match cap.checked_sub(len) {
            Some(room) if short => room.saturating_add(1),
            _ => 0,
        };
        let deferral = if below > 0 {
            // Both ends fit in a u32: `short`.
            let (start, end) = (range.start as u32, range.end as u32);
            self.deferrals.open(&mut self.groups, g, start, end)
        } else {
            None
        };
        Prepared {
            g,
            range,
            len,
            packets,
            below,
            deferral,
        }
    }

    /// [`Sessions::send_group`] of a prepared range ([`Sessions::prepare`]): the same output,
    /// limits, order and tick. Its short way is straight-line and reads the connection's
    /// gate only: live, its soft clock not running, holding fewer unsent bytes than the
    /// range's room under both limits (worked out once per range), and the budget's room;
    /// then the connection joins the range's deferral (one bit on its gate), or, when it
    /// cannot, the range goes on its line. Anything else goes the way of `send_group`. The
    /// limits are decided here, as for any output; only where the bytes wait differs.
    #[inline(always)]
    pub(crate) fn send_prepared(&mut self, conn: ConnId, p: &Prepared) -> bool {
        let i = conn.0.index() as usize;
        if let Some(gate) = self.gates.get_mut(i)
            && gate.generation == conn.0.generation()
            && gate.flags & (LIVE | OVER_SOFT) == LIVE
            && gate.pending < p.below
            && self.outbound + p.len <= self.outbound_budget
        {
            if let Some(d) = p.deferral
                && gate.deferred & d.bit() == 0
                // Joining an older deferral than one it holds would put this range before
                // bytes queued earlier (ranges go out in the deferrals' opening order).
                && self.deferrals.newer_than_all(d, gate.deferred)
            {
                gate.deferred |= d.bit();
                self.deferrals.join(d, p.g);
            } else if gate.deferred == 0
                // Both ends fit in a u32 whenever `below` is not 0.
                && let Some(added) =
                    self.hot[i].push_one(p.g, p.range.start as u32, p.range.end as u32)
            {
                gate.flags |= LINED;
                self.groups.hold(p.g, added);
            } else {
                return self.queue_ranges(
                    conn,
                    p.g,
                    std::slice::from_ref(&p.range),
                    p.len,
                    p.packets,
                );
            }
            gate.pending += p.len;
            let list = gate.flags & (TICK | FLUSH) == 0;
            gate.flags |= if list { TICK } else { 0 };
            self.packets_out += p.packets;
            self.outbound += p.len;
            if list {
                self.at_tick.push(conn);
            }
            return true;
        }
        self.queue_ranges(conn, p.g, std::slice::from_ref(&p.range), p.len, p.packets)
    }

    /// A run of [`Sessions::send_prepared`]s of `p` in one go, for the fan-out's tight loop
    /// over the players who see a whole group: `None` when `p` has no deferral (its short
    /// way is then the lines'). See [`JoinRun`].
    pub(crate) fn join_run(&mut self, p: &Prepared) -> Option<JoinRun<'_>> {
        let d = p.deferral?;
        // `outbound + len <= budget` for the k-th join (from 0) of the run is
        // `outbound + (k + 1)·len <= budget`: k below this. `len` > 0 with a deferral.
        let room = self
            .outbound_budget
            .checked_sub(self.outbound)
            .map_or(0, |room| room / p.len);
        let joinable = self.deferrals.joinable_with(d);
        Some(JoinRun {
            gates: &mut self.gates,
            at_tick: &mut self.at_tick,
            outbound: &mut self.outbound,
            packets_out: &mut self.packets_out,
            deferrals: &mut self.deferrals,
            joinable,
            bit: d.bit(),
            d,
            g: p.g,
            below: p.below,
            len: p.len,
            packets: p.packets,
            room,
            joined: 0,
        })
    }

    /// Queues `ranges` of group `g` (`len` bytes, `packets` packets) to go at the tick: on
    /// `conn`'s line when it takes them with no limit in play (under the send limit, the
    /// soft limit and the outbound budget, all checked as [`Sessions::queue_output`] checks
    /// them), after the ranges deferred for it, else the long way.
    fn queue_ranges(
        &mut self,
        conn: ConnId,
        g: GroupId,
        ranges: &[std::ops::Range<usize>],
        len: usize,
        packets: u64,
    ) -> bool {
        let (send_limit, soft_limit) = (self.send_limit, self.soft_limit);
        let room = self.outbound + len <= self.outbound_budget;
        let i = conn.0.index() as usize;
        if let Some(gate) = self.gates.get(i)
            && gate.is_live(conn.0.generation())
            && room
            && gate.pending + len <= send_limit
            && (soft_limit == 0 || gate.flags & OVER_SOFT != 0 || gate.pending + len <= soft_limit)
        {
            if gate.deferred != 0 {
                self.settle(conn);
            }
            let (gate, hot) = (&mut self.gates[i], &mut self.hot[i]);
            if let Some(added) = hot.push(g, ranges) {
                gate.flags |= if hot.is_empty() { 0 } else { LINED };
                gate.pending += len;
                let list = gate.flags & (TICK | FLUSH) == 0;
                gate.flags |= if list { TICK } else { 0 };
                self.groups.hold(g, added);
                self.packets_out += packets;
                self.outbound += len;
                if list {
                    self.at_tick.push(conn);
                }
                return true;
            }
        }
        let frames = self.groups.frames(g).clone();
        self.queue_output(conn, len, packets, Due::Tick, |out| {
            for range in ranges {
                out.push_shared(&frames, range.clone());
            }
        })
    }

    /// A hint: `conn` is about to be queued output with [`Sessions::send_prepared`], so its
    /// gate is worth bringing into cache now (the fan-out hints a few recipients ahead).
    #[inline(always)]
    pub(crate) fn prefetch(&self, conn: ConnId) {
        if let Some(gate) = self.gates.get(conn.0.index() as usize) {
            gate.prefetch();
        }
    }

    /// Puts the ranges deferred for `conn` on its line, oldest first, after the line's own;
    /// when the line runs out of places, the line's ranges and the rest go into its output
    /// queue ([`Sessions::spill`]). Either way they stay ahead of anything queued next.
    fn settle(&mut self, conn: ConnId) {
        let i = conn.0.index() as usize;
        let Some(gate) = self.gates.get_mut(i) else {
            return;
        };
        if !gate.is_live(conn.0.generation()) {
            return;
        }
        while let Some(d) = self.deferrals.oldest(gate.deferred) {
            let (g, range) = self.deferrals.range(d);
            // Deferred ranges' ends fit in a u32 (`Sessions::prepare`).
            let Some(added) = self.hot[i].push_one(g, range.start as u32, range.end as u32) else {
                return self.spill(conn);
            };
            gate.flags |= LINED;
            gate.deferred &= !d.bit();
            self.groups.hold(g, added);
            self.deferrals.leave(d, &mut self.groups);
        }
    }

    /// Moves the ranges on `conn`'s line, then those deferred for it (oldest first), into
    /// its output queue, after what is there: the connection is about to be written, or
    /// queued output the long way. Reads the line only when the gate says it holds ranges.
    pub(super) fn spill(&mut self, conn: ConnId) {
        let i = conn.0.index() as usize;
        let Some(gate) = self.gates.get_mut(i) else {
            return;
        };
        if !gate.is_live(conn.0.generation()) || (gate.flags & LINED == 0 && gate.deferred == 0) {
            return;
        }
        let Some(state) = self.conns.get_mut(conn.0) else {
            return;
        };
        if gate.flags & LINED != 0 {
            for (g, range) in self.hot[i].take() {
                state.out.push_shared(self.groups.frames(g), range);
                self.groups.release(g);
            }
            gate.flags &= !LINED;
        }
        while let Some(d) = self.deferrals.oldest(gate.deferred) {
            let (g, range) = self.deferrals.range(d);
            state.out.push_shared(self.groups.frames(g), range);
            gate.deferred &= !d.bit();
            self.deferrals.leave(d, &mut self.groups);
        }
    }

    /// Fills `conn`'s gate from its state (the first time, or after the slot changed
    /// hands), or brings its counts up to date; `conn` is open and not condemned.
    fn sync_hot(&mut self, conn: ConnId) {
        let Some(state) = self.conns.get(conn.0) else {
            return;
        };
        let i = conn.0.index() as usize;
        if self.gates.len() <= i {
            self.gates.resize(i + 1, Gate::default());
            self.hot.resize(i + 1, Hot::default());
        }
        let gate = &mut self.gates[i];
        if !gate.is_live(conn.0.generation()) {
            // A gate left by a connection that went without `close` may still hold ranges.
            for (g, _) in self.hot[i].take() {
                self.groups.release(g);
            }
            while let Some(d) = self.deferrals.oldest(gate.deferred) {
                gate.deferred &= !d.bit();
                self.deferrals.leave(d, &mut self.groups);
            }
            *gate = Gate::live(conn.0.generation());
        }
        let lined = if gate.flags & LINED != 0 {
            self.hot[i].inline_bytes()
        } else {
            0
        };
        gate.pending = state.pending_output() + lined + self.deferrals.bytes(gate.deferred);
        let mut flags = gate.flags & (LIVE | TICK | LINED);
        flags |= if state.queued_flush { FLUSH } else { 0 };
        flags |= if state.over_soft_since.is_some() {
            OVER_SOFT
        } else {
            0
        };
        gate.flags = flags;
    }

    /// `conn`'s gate, if it is `conn`'s and live.
    fn live_gate(&mut self, conn: ConnId) -> Option<&mut Gate> {
        self.gates
            .get_mut(conn.0.index() as usize)
            .filter(|gate| gate.is_live(conn.0.generation()))
    }

    /// Bytes held for connection `key` outside its output queue: the ranges on its line
    /// and those deferred for it.
    fn held_back(&self, key: crate::slab::Key) -> usize {
        let i = key.index() as usize;
        let Some(gate) = self.gates.get(i).filter(|g| g.is_live(key.generation())) else {
            return 0;
        };
        let lined = if gate.flags & LINED != 0 {
            self.hot[i].inline_bytes()
        } else {
            0
        };
        lined + self.deferrals.bytes(gate.deferred)
    }

    /// `conn`'s gate no longer takes output, and its line and deferrals let go of the
    /// ranges they held for it (dropped, not sent); the bytes those were.
    fn drop_hot(&mut self, conn: ConnId) -> usize {
        let i = conn.0.index() as usize;
        let Some(gate) = self
            .gates
            .get_mut(i)
            .filter(|gate| gate.is_live(conn.0.generation()))
        else {
            return 0;
        };
        let mut bytes = 0;
        for (g, range) in self.hot[i].take() {
            bytes += range.len();
            self.groups.release(g);
        }
        while let Some(d) = self.deferrals.oldest(gate.deferred) {
            bytes += self.deferrals.range(d).1.len();
            gate.deferred &= !d.bit();
            self.deferrals.leave(d, &mut self.groups);
        }
        *gate = Gate::default();
        bytes
    }

    /// `conn` left the slab: its gate and line let go of anything they still hold.
    pub(super) fn forget(&mut self, conn: ConnId) {
        self.drop_hot(conn);
    }

    /// `conn` leaves this iteration's Flush list (its flag in its state is cleared by the
    /// caller).
    pub(super) fn unlist_flush(&mut self, conn: ConnId) {
        if let Some(gate) = self.live_gate(conn) {
            gate.flags &= !FLUSH;
        }
    }

    /// Queues `frames`, whole packets already framed one after the other (`packets` of
    /// them), for `conn` in one copy: what [`Sessions::send_packet`] would queue for each,
    /// under the same send limit and outbound budget. The fan-out of world changes sends
    /// each player its iteration's packets this way.
    pub fn send_frames(&mut self, conn: ConnId, frames: &[u8], packets: u64) -> bool {
        self.queue_output(conn, frames.len(), packets, Due::Now, |out| {
            out.push_own(frames.len(), |buf| buf.extend_from_slice(frames));
        })
    }

    /// [`Sessions::send_frames`], to go out at the next tick like
    /// [`Sessions::send_shared`].
    pub(crate) fn send_frames_at_tick(
        &mut self,
        conn: ConnId,
        frames: &[u8],
        packets: u64,
    ) -> bool {
        self.queue_output(conn, frames.len(), packets, Due::Tick, |out| {
            out.push_own(frames.len(), |buf| buf.extend_from_slice(frames));
        })
    }

    /// Bytes queued for `conn` and not yet written (0 for a connection that is gone).
    #[must_use]
    pub fn pending_output(&self, conn: ConnId) -> usize {
        self.conns
            .get(conn.0)
            .map_or(0, |state| self.unsent(conn.0, state))
    }

    /// What connection `key` (`state`) holds unsent: its output queue, its line and its
    /// deferred ranges.
    pub(super) fn unsent(&self, key: crate::slab::Key, state: &NetState) -> usize {
        state.pending_output() + self.held_back(key)
    }

    /// The most output one connection may hold unsent (`network.send_buffer_size`).
    #[must_use]
    pub fn send_limit(&self) -> usize {
        self.send_limit
    }

    /// Queues `len` bytes (`packets` packets) that `write` appends to `conn`'s output,
    /// after the send limit and the outbound budget have had their say, to go out when `due`
    /// says.
    fn queue_output(
        &mut self,
        conn: ConnId,
        len: usize,
        packets: u64,
        due: Due,
        write: impl FnOnce(&mut Output),
    ) -> bool {
        let Some(state) = self.conns.get(conn.0) else {
            return false;
        };
        if state.closing.is_some() {
            return false;
        }
        // What the line holds and what was deferred go first: the order queued is the order
        // sent.
        self.spill(conn);
        let Some(state) = self.conns.get(conn.0) else {
            return false;
        };
        let queued = state.pending_output();
        if queued + len > self.send_limit {
            let limit = self.send_limit;
            self.overflows += 1;
            self.close_unread(
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
        write(&mut state.out);
        if self.soft_limit > 0
            && state.over_soft_since.is_none()
            && state.pending_output() > self.soft_limit
        {
            state.over_soft_since = Some(Instant::now());
        }
        let queued_flush = state.queued_flush;
        self.sync_hot(conn);
        // Listed for the next tick once (unless it is written in this iteration's Flush phase
        // anyway).
        let gate = &mut self.gates[conn.0.index() as usize];
        let tick = due == Due::Tick && !queued_flush && gate.flags & TICK == 0;
        gate.flags |= if tick { TICK } else { 0 };
        self.packets_out += packets;
        self.outbound += len;
        match due {
            Due::Now => self.queue_flush(conn),
            Due::Tick if tick => self.at_tick.push(conn),
            Due::Tick => {}
        }
        true
    }

    /// Whether output waits for the next tick.
    pub(super) fn has_tick_output(&self) -> bool {
        !self.at_tick.is_empty()
    }

    /// The tick is here: every connection whose output waited for it goes into the next
    /// Flush phase's list (those still holding output).
    pub(super) fn release_tick(&mut self) {
        let waiting = std::mem::take(&mut self.at_tick);
        for &conn in &waiting {
            if let Some(gate) = self.live_gate(conn) {
                gate.flags &= !TICK;
                if gate.pending > 0 {
                    self.queue_flush(conn);
                }
            }
        }
        if self.at_tick.is_empty() {
            let mut waiting = waiting;
            waiting.clear();
            self.at_tick = waiting; // keeps its allocation
        }
    }

    /// What connection `key` holds against the outbound budget: its unsent output, plus the
    /// socket charge while its socket is full.
    fn held(&self, key: crate::slab::Key, state: &NetState) -> usize {
        self.unsent(key, state) + if state.charged { self.socket_charge } else { 0 }
    }

    /// The open connection holding the most against the budget (unsent output, and its full
    /// socket's charge), if any has unsent output.
    fn largest_backlog(&self) -> Option<ConnId> {
        self.conns
            .iter()
            .filter(|&(key, s)| s.closing.is_none() && self.unsent(key, s) > 0)
            .max_by_key(|&(key, s)| self.held(key, s))
            .map(|(key, _)| ConnId(key))
    }

    /// After `conn`'s flush: whether its socket is left full (then its kernel send buffer
    /// counts in the budget, else it stops counting), and whether its unsent output is back
    /// under the soft limit (then its soft timer stops).
    pub(super) fn flushed(&mut self, conn: ConnId) {
        let (charge, soft_limit) = (self.socket_charge, self.soft_limit);
        let Some(state) = self.conns.get_mut(conn.0) else {
            return;
        };
        if state.closing.is_some() {
            return; // `close` took it out of the budget
        }
        if state.pending_output() <= soft_limit {
            state.over_soft_since = None;
        }
        match (state.charged, state.write_blocked) {
            (false, true) => {
                state.charged = true;
                self.charged_sockets += 1;
                self.outbound += charge;
            }
            (true, false) => {
                state.charged = false;
                self.charged_sockets -= 1;
                self.outbound -= charge;
            }
            _ => {}
        }
        if self.live_gate(conn).is_some() {
            self.sync_hot(conn); // what the write took, and the soft clock
        }
    }

    /// Disconnects `conn` for keeping more than the soft limit unsent for longer than
    /// `timeout` (the deadline sweep found it so).
    pub(super) fn soft_overflow(&mut self, conn: ConnId, timeout: std::time::Duration) {
        let limit = self.soft_limit;
        self.soft_overflows += 1;
        self.close_unread(
            conn,
            Disconnect::fault(format!(
                "send soft limit: over {limit} bytes unsent for longer than {} \
                 (network.send_soft_limit, network.send_soft_timeout); the client reads too \
                 slowly",
                humantime::format_duration(timeout)
            )),
        );
    }

    fn evict(&mut self, conn: ConnId) {
        let held = self.conns.get(conn.0).map_or(0, |s| self.held(conn.0, s));
        let budget = self.outbound_budget;
        self.evictions += 1;
        self.close_unread(
            conn,
            Disconnect::fault(format!(
                "outbound budget: all connections together hold {budget} bytes unsent or in \
                 full sockets' kernel buffers (network.outbound_budget) and this one the most, \
                 {held}"
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
            if let Some(gate) = self.live_gate(conn) {
                gate.flags |= FLUSH;
            }
        }
    }

    /// Condemns `conn`: nothing more is read from or sent to it, and it is closed (with one
    /// log line naming the peer and `why`) at the end of the current phase. Later calls keep
    /// the first reason.
    pub fn close(&mut self, conn: ConnId, why: Disconnect) {
        if self.conns.get(conn.0).is_some_and(|s| s.closing.is_none()) {
            // Nothing more is written to it: its line's and deferred ranges, its output, and
            // its full socket stop counting at once, so one eviction is enough to make room.
            self.outbound -= self.drop_hot(conn);
        }
        if let Some(state) = self.conns.get_mut(conn.0)
            && state.closing.is_none()
        {
            state.closing = Some(why);
            self.outbound -= state.pending_output();
            if std::mem::take(&mut state.charged) {
                self.outbound -= self.socket_charge;
                self.charged_sockets -= 1;
            }
            state.over_soft_since = None;
            state.out.clear();
            self.to_close.push(conn);
        }
    }

    /// Condemns `conn` for not reading what is sent to it ([`Sessions::close`]); its socket is
    /// reset rather than closed, so the kernel frees its send buffer at once instead of
    /// holding it for a peer that does not read.
    fn close_unread(&mut self, conn: ConnId, why: Disconnect) {
        self.close(conn, why);
        if let Some(state) = self.conns.get_mut(conn.0) {
            state.discard_output = true;
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

    /// A socket that takes `room` bytes, then says "full".
    struct Room(std::rc::Rc<std::cell::Cell<usize>>);
    impl Transport for Room {
        fn read(&mut self, _: &mut Vec<u8>, _: usize) -> super::super::backend::ReadOutcome {
            super::super::backend::ReadOutcome::WouldBlock
        }
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            let n = data.len().min(self.0.get());
            self.0.set(self.0.get() - n);
            Ok(n)
        }
    }

    /// What the server's flush does for one connection: write until full, then settle.
    fn flush(sessions: &mut Sessions, conn: ConnId) {
        let state = sessions.conns.get_mut(conn.0).unwrap();
        state.write_blocked = false;
        while state.pending_output() > 0 {
            let written = state.transport.write_pieces(&mut state.out.pieces());
            match written.unwrap() {
                0 => {
                    state.write_blocked = true;
                    break;
                }
                n => {
                    state.out.advance(n);
                    sessions.outbound -= n;
                }
            }
        }
        sessions.flushed(conn);
    }

    fn open(sessions: &mut Sessions, room: usize) -> (ConnId, std::rc::Rc<std::cell::Cell<usize>>) {
        let room = std::rc::Rc::new(std::cell::Cell::new(room));
        let peer = "127.0.0.2:1".parse().unwrap();
        let keys = Keys::of(std::net::IpAddr::from([127, 0, 0, 2]));
        let state = NetState::new(Box::new(Room(room.clone())), peer, keys, Instant::now());
        (ConnId(sessions.conns.insert(state)), room)
    }

    #[tokio::test]
    async fn a_full_socket_counts_its_kernel_buffer_until_it_drains_or_closes() {
        let mut sessions = Sessions::new(1 << 20, 1 << 20);
        sessions.socket_charge = 100_000;
        let (conn, room) = open(&mut sessions, 1000);
        assert!(sessions.send_packet(conn, 1, &[&[0; 997]]));
        flush(&mut sessions, conn);
        assert_eq!(
            (sessions.outbound, sessions.charged_sockets),
            (0, 0),
            "all written"
        );
        assert!(sessions.send_packet(conn, 1, &[&[0; 497]]));
        flush(&mut sessions, conn);
        assert_eq!(
            (sessions.outbound, sessions.charged_sockets),
            (500 + 100_000, 1),
            "left full: its unsent bytes and its socket's buffer"
        );
        // Still full: charged once, not again.
        assert!(sessions.send_packet(conn, 1, &[&[0; 97]]));
        flush(&mut sessions, conn);
        assert_eq!(sessions.outbound, 600 + 100_000);
        // The peer reads: everything goes, and so does the charge.
        room.set(10_000);
        flush(&mut sessions, conn);
        assert_eq!((sessions.outbound, sessions.charged_sockets), (0, 0));
        // Full again, then closed: nothing of it stays counted.
        assert!(sessions.send_packet(conn, 1, &[&[0; 20_000]]));
        flush(&mut sessions, conn);
        assert_eq!(sessions.charged_sockets, 1);
        sessions.close(conn, Disconnect::normal("bye"));
        assert_eq!((sessions.outbound, sessions.charged_sockets), (0, 0));
    }

    #[tokio::test]
    async fn the_budget_evicts_the_full_socket_holding_the_most_its_buffer_included() {
        // Budget 150 kB; a full socket counts 100 kB besides its unsent bytes.
        let mut sessions = Sessions::new(1 << 20, 150_000);
        sessions.socket_charge = 100_000;
        let (slow, _) = open(&mut sessions, 0);
        let (busy, _) = open(&mut sessions, 1 << 30);
        assert!(sessions.send_packet(slow, 1, &[&[0; 10_000]]));
        flush(&mut sessions, slow);
        assert_eq!(sessions.outbound, 10_003 + 100_000);
        // A reader that keeps up queues 30 kB (more than the slow one's unsent bytes, less
        // than those and its socket): the slow one goes, the other stays.
        assert!(sessions.send_packet(busy, 1, &[&[0; 30_000]]));
        assert!(sessions.send_packet(busy, 1, &[&[0; 30_000]]));
        assert_eq!(sessions.evictions, 1);
        assert!(!sessions.is_open(slow) && sessions.is_open(busy));
        assert!(
            sessions.conns.get(slow.0).unwrap().discard_output,
            "reset, not closed"
        );
        assert_eq!(sessions.outbound, 2 * 30_003);
    }

    #[tokio::test(start_paused = true)]
    async fn output_over_the_soft_limit_is_timed_from_when_it_crossed_until_it_drains() {
        let mut sessions = Sessions::new(1 << 20, 1 << 20).with_soft_limit(5_000);
        let (conn, room) = open(&mut sessions, 0);
        assert!(sessions.send_packet(conn, 1, &[&[0; 4_000]]));
        flush(&mut sessions, conn);
        let since = |s: &Sessions| s.conns.get(conn.0).unwrap().over_soft_since;
        assert_eq!(since(&sessions), None, "under the soft limit");
        let crossed = Instant::now();
        assert!(sessions.send_packet(conn, 1, &[&[0; 4_000]]));
        assert_eq!(since(&sessions), Some(crossed));
        tokio::time::advance(std::time::Duration::from_secs(3)).await;
        assert!(sessions.send_packet(conn, 1, &[&[0; 100]]));
        flush(&mut sessions, conn);
        assert_eq!(
            since(&sessions),
            Some(crossed),
            "still over: timed from the crossing"
        );
        // Read down to the soft limit: the clock stops.
        room.set(8_006 + 103 - 5_000);
        flush(&mut sessions, conn);
        assert_eq!(since(&sessions), None);
        sessions.soft_overflow(conn, std::time::Duration::from_secs(10));
        assert_eq!(sessions.soft_overflows, 1);
        let why = sessions.conns.get(conn.0).unwrap().closing.clone().unwrap();
        assert_eq!(why.kind(), "send soft limit");
    }

    /// A socket that takes up to `room` bytes per write across every piece offered (a
    /// vectored write that may stop anywhere), and keeps what it took.
    #[derive(Default)]
    struct Wire {
        room: usize,
        got: Vec<u8>,
        writes: usize,
    }

    struct Vectored(std::rc::Rc<std::cell::RefCell<Wire>>);
    impl Transport for Vectored {
        fn read(&mut self, _: &mut Vec<u8>, _: usize) -> super::super::backend::ReadOutcome {
            super::super::backend::ReadOutcome::WouldBlock
        }
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.write_pieces(&mut std::iter::once(Piece::Bytes(data)))
        }
        fn write_pieces(
            &mut self,
            pieces: &mut dyn Iterator<Item = Piece<'_>>,
        ) -> std::io::Result<usize> {
            let mut wire = self.0.borrow_mut();
            let mut took = 0;
            for piece in pieces {
                let n = piece.bytes().len().min(wire.room - took);
                wire.got.extend_from_slice(&piece.bytes()[..n]);
                took += n;
            }
            wire.writes += 1;
            Ok(took)
        }
    }

    use super::super::shared::Piece;

    fn open_wire(
        sessions: &mut Sessions,
        room: usize,
    ) -> (ConnId, std::rc::Rc<std::cell::RefCell<Wire>>) {
        let wire = std::rc::Rc::new(std::cell::RefCell::new(Wire {
            room,
            ..Wire::default()
        }));
        let peer = "127.0.0.2:1".parse().unwrap();
        let keys = Keys::of(std::net::IpAddr::from([127, 0, 0, 2]));
        let state = NetState::new(Box::new(Vectored(wire.clone())), peer, keys, Instant::now());
        (ConnId(sessions.conns.insert(state)), wire)
    }

    /// The packets in `bytes`, as (id, payload).
    fn packets(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while let Ok(Some(f)) = frame::split(rest, usize::from(u16::MAX)) {
            out.push((f.id, f.payload().to_vec()));
            rest = &rest[f.bytes.len()..];
        }
        assert!(rest.is_empty(), "whole packets only");
        out
    }

    #[tokio::test]
    async fn shared_and_own_packets_arrive_in_the_order_queued_through_partial_vectored_writes() {
        let mut sessions = Sessions::new(1 << 20, 1 << 20);
        let mut frames = Vec::new();
        for n in 0..5u8 {
            frame::put(&mut frames, 0x20, &[&[n; 7]]);
        }
        let shared = SharedFrames::new(&frames);
        let each = frames.len() / 5;
        // Two connections get the same frames; one's writes stop every 7 bytes (inside
        // packets and pieces), the other's take everything.
        let (slow, slow_wire) = open_wire(&mut sessions, 7);
        let (fast, fast_wire) = open_wire(&mut sessions, usize::MAX);
        let mut expected = Vec::new();
        for round in 0..3u8 {
            for &conn in &[slow, fast] {
                assert!(sessions.send_packet(conn, 0x10, &[&[round]]));
                assert!(sessions.send_shared(conn, &shared, 0..2 * each, 2));
                assert!(sessions.send_packet(conn, 0x11, &[&[round, round]]));
                assert!(sessions.send_shared(conn, &shared, 3 * each..5 * each, 2));
            }
            expected.push((0x10, vec![round]));
            expected.extend((0..2).map(|n| (0x20, vec![n; 7])));
            expected.push((0x11, vec![round, round]));
            expected.extend((3..5).map(|n| (0x20, vec![n; 7])));
        }
        assert_eq!(
            shared.holders(),
            1 + 2 * 3 * 2,
            "a reference per queued range"
        );
        let queued = sessions.pending_output(slow);
        assert_eq!(queued, sessions.pending_output(fast));
        assert_eq!(sessions.outbound, 2 * queued, "shared bytes count for each");
        flush(&mut sessions, fast);
        assert_eq!(
            fast_wire.borrow().writes,
            1,
            "one vectored write took it all"
        );
        while sessions.pending_output(slow) > 0 {
            flush_once(&mut sessions, slow);
        }
        assert!(slow_wire.borrow().writes >= queued / 7);
        for wire in [&slow_wire, &fast_wire] {
            assert_eq!(packets(&wire.borrow().got), expected);
        }
        assert_eq!(sessions.outbound, 0);
        assert_eq!(shared.holders(), 1, "written ranges let go of the frames");
    }

    /// One write of `conn`'s output, as a socket that takes part of it.
    fn flush_once(sessions: &mut Sessions, conn: ConnId) {
        let state = sessions.conns.get_mut(conn.0).unwrap();
        let written = state.transport.write_pieces(&mut state.out.pieces());
        let n = written.unwrap();
        state.out.advance(n);
        sessions.outbound -= n;
    }

    #[tokio::test]
    async fn shared_frames_around_a_hole_are_everything_but_the_hole_in_order() {
        let mut sessions = Sessions::new(1 << 20, 1 << 20);
        let mut frames = Vec::new();
        for n in 0..4u8 {
            frame::put(&mut frames, 0x20, &[&[n; 5]]);
        }
        let shared = SharedFrames::new(&frames);
        let each = frames.len() / 4;
        let (conn, wire) = open_wire(&mut sessions, usize::MAX);
        // The hole first, inside, last: each leaves the other three packets.
        for skip in [0, 2, 3] {
            let hole = skip * each..(skip + 1) * each;
            assert!(sessions.send_shared_around(conn, &shared, hole, 3));
        }
        assert_eq!(sessions.pending_output(conn), 3 * 3 * each);
        assert_eq!(sessions.outbound, 3 * 3 * each, "the hole is not counted");
        assert_eq!(sessions.at_tick, vec![conn], "listed for the tick once");
        assert_eq!(sessions.packets_out, 9);
        flush(&mut sessions, conn);
        let ids: Vec<u8> = packets(&wire.borrow().got)
            .iter()
            .map(|(_, payload)| payload[0])
            .collect();
        assert_eq!(ids, [1, 2, 3, 0, 1, 3, 0, 1, 2]);
        assert_eq!(shared.holders(), 1, "written ranges let go of the frames");
    }

    #[tokio::test]
    async fn shared_frames_over_the_send_limit_close_only_the_reader_that_does_not_read() {
        let mut sessions = Sessions::new(10_000, 1 << 20);
        let shared = SharedFrames::new(&frame::packet(0x20, &[&[1; 997]]));
        let (reader, _) = open_wire(&mut sessions, usize::MAX);
        let (stuck, _) = open_wire(&mut sessions, 0);
        for _ in 0..20 {
            for conn in [reader, stuck] {
                sessions.send_shared(conn, &shared, 0..shared.len(), 1);
            }
            for conn in [reader, stuck] {
                flush(&mut sessions, conn);
            }
        }
        assert!(sessions.is_open(reader));
        assert!(!sessions.is_open(stuck));
        assert_eq!(sessions.overflows, 1);
        let why = sessions
            .conns
            .get(stuck.0)
            .unwrap()
            .closing
            .clone()
            .unwrap();
        assert_eq!(why.kind(), "send buffer overflow");
        assert_eq!(
            sessions.outbound, 0,
            "the closed one's shared bytes left the budget"
        );
        assert_eq!(shared.holders(), 1, "and its queue let go of the frames");
    }

    #[tokio::test]
    async fn shared_output_waits_for_the_tick_unless_output_to_go_now_takes_it_along() {
        let mut sessions = Sessions::new(1 << 20, 1 << 20);
        let shared = SharedFrames::new(&frame::packet(0x20, &[b"crowd"]));
        let (watcher, _) = open_wire(&mut sessions, usize::MAX);
        let (mover, _) = open_wire(&mut sessions, usize::MAX);
        for _ in 0..3 {
            sessions.send_shared(watcher, &shared, 0..shared.len(), 1);
            sessions.send_shared(mover, &shared, 0..shared.len(), 1);
        }
        assert!(sessions.to_flush.is_empty(), "broadcasts alone wait");
        assert_eq!(sessions.at_tick, vec![watcher, mover], "each listed once");
        // The mover's own answer goes now, with what was queued before it.
        sessions.send_packet(mover, 0x21, &[b"ok"]);
        assert_eq!(sessions.to_flush, vec![mover]);
        flush(&mut sessions, mover);
        sessions.to_flush.clear();
        sessions.conns.get_mut(mover.0).unwrap().queued_flush = false;
        // The tick: only what still holds output is written.
        sessions.release_tick();
        assert_eq!(sessions.to_flush, vec![watcher]);
        assert!(sessions.at_tick.is_empty());
    }

    /// What the server's flush does for a connection whose hot line may hold ranges: they
    /// join the output queue, then the queue is written.
    fn flush_line(sessions: &mut Sessions, conn: ConnId) {
        sessions.spill(conn);
        flush(sessions, conn);
    }

    #[tokio::test]
    async fn ranges_on_a_hot_line_go_out_in_the_order_queued_and_the_group_goes_once_written() {
        let mut sessions = Sessions::new(1 << 20, 1 << 20);
        let mut frames = Vec::new();
        for n in 0..6u8 {
            frame::put(&mut frames, 0x20, &[&[n; 3]]);
        }
        let shared = SharedFrames::new(&frames);
        let each = frames.len() / 6;
        let packet = |k: usize| k * each..(k + 1) * each;
        let (conn, wire) = open_wire(&mut sessions, usize::MAX);
        let g = sessions.share(shared.clone());
        // The first goes the long way and fills the line; the next two wait on the line.
        assert!(sessions.send_group(conn, g, packet(0), 1));
        assert!(sessions.send_group(conn, g, packet(2), 1));
        assert!(sessions.send_group_around(conn, g, packet(3), 5));
        assert_eq!(
            shared.holders(),
            3,
            "ours, the table's and the queued chunk's: ranges on the line hold the group"
        );
        // A packet of its own takes the line's ranges along first; then more ranges than the
        // line holds (four apart from each other, and a fifth).
        assert!(sessions.send_packet(conn, 0x21, &[b"own"]));
        for k in [5, 0, 2, 4, 1, 3] {
            assert!(sessions.send_group(conn, g, packet(k), 1));
        }
        let queued = 13 * each + frame::HEADER_LEN + 3;
        assert_eq!(sessions.pending_output(conn), queued);
        assert_eq!(sessions.outbound, queued);
        assert_eq!(sessions.packets_out, 14);
        assert_eq!(sessions.at_tick, vec![conn], "listed for the tick once");
        assert_eq!(
            sessions.to_flush,
            vec![conn],
            "and for now, by its own packet"
        );
        flush_line(&mut sessions, conn);
        let got: Vec<(u8, u8)> = packets(&wire.borrow().got)
            .iter()
            .map(|(id, payload)| (*id, payload[0]))
            .collect();
        let moves = |ks: &[u8]| ks.iter().map(|&k| (0x20, k)).collect::<Vec<_>>();
        let mut expected = moves(&[0, 2, 0, 1, 2, 4, 5]);
        expected.push((0x21, b'o'));
        expected.extend(moves(&[5, 0, 2, 4, 1, 3]));
        assert_eq!(got, expected);
        assert_eq!((sessions.pending_output(conn), sessions.outbound), (0, 0));
        sessions.unshare(g);
        assert_eq!(
            shared.holders(),
            1,
            "nothing needs the group: the table let go"
        );
        assert_eq!(sessions.groups.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn ranges_on_a_hot_line_meet_the_soft_clock_and_the_send_limit_like_any_output() {
        let mut sessions = Sessions::new(10_000, 1 << 20).with_soft_limit(5_000);
        let shared = SharedFrames::new(&frame::packet(0x20, &[&[1; 997]]));
        let g = sessions.share(shared.clone());
        let (stuck, _) = open_wire(&mut sessions, 0);
        let since = |s: &Sessions| s.conns.get(stuck.0).unwrap().over_soft_since;
        for _ in 0..5 {
            assert!(sessions.send_group(stuck, g, 0..1000, 1));
        }
        assert_eq!(since(&sessions), None, "at the soft limit, not over it");
        assert!(sessions.send_group(stuck, g, 0..1000, 1));
        assert_eq!(
            since(&sessions),
            Some(Instant::now()),
            "over: the clock runs"
        );
        for _ in 0..4 {
            assert!(sessions.send_group(stuck, g, 0..1000, 1));
        }
        assert_eq!(sessions.pending_output(stuck), 10_000, "at the send limit");
        assert!(!sessions.send_group(stuck, g, 0..1000, 1), "past it");
        assert_eq!(sessions.overflows, 1);
        assert!(!sessions.is_open(stuck));
        assert_eq!(
            sessions.outbound, 0,
            "its bytes, on the line or not, left the budget"
        );
        sessions.unshare(g);
        assert_eq!(shared.holders(), 1, "and its ranges let go of the group");
    }

    #[tokio::test]
    async fn the_budget_counts_ranges_on_a_hot_line_and_evicts_the_connection_holding_them() {
        let mut sessions = Sessions::new(1 << 20, 5_000);
        let shared = SharedFrames::new(&frame::packet(0x20, &[&[1; 997]]));
        let g = sessions.share(shared.clone());
        let (slow, _) = open_wire(&mut sessions, 0);
        let (busy, _) = open_wire(&mut sessions, 0);
        for _ in 0..3 {
            assert!(sessions.send_group(slow, g, 0..1000, 1));
        }
        assert_eq!(sessions.outbound, 3_000);
        // 3 000 more would pass the budget: the connection holding the most goes, though
        // most of its bytes are still on its line.
        assert!(sessions.send_packet(busy, 0x21, &[&[0; 2_997]]));
        assert!(sessions.send_packet(busy, 0x21, &[&[0; 997]]));
        assert_eq!(sessions.evictions, 1);
        assert!(!sessions.is_open(slow) && sessions.is_open(busy));
        assert_eq!(sessions.outbound, 4_000);
        sessions.unshare(g);
        assert_eq!(shared.holders(), 1);
    }

    /// What a test compares of two sessions: every count a limit or the tick reads.
    fn seen(sessions: &Sessions, conns: &[ConnId]) -> Vec<String> {
        let per_conn = conns.iter().map(|&c| {
            let since = sessions.conns.get(c.0).and_then(|s| s.over_soft_since);
            (sessions.is_open(c), sessions.pending_output(c), since)
        });
        let slots: Vec<_> = sessions.at_tick.iter().map(|c| c.0.index()).collect();
        vec![
            format!("{:?}", per_conn.collect::<Vec<_>>()),
            format!("at tick {slots:?}"),
            format!(
                "outbound {} packets {} overflows {} evictions {}",
                sessions.outbound, sessions.packets_out, sessions.overflows, sessions.evictions
            ),
        ]
    }

    #[tokio::test(start_paused = true)]
    async fn a_prepared_range_goes_as_send_group_sends_it_under_every_limit() {
        // A send limit, a soft limit and a budget that three connections meet in turn.
        let make = || Sessions::new(10_000, 24_000).with_soft_limit(5_000);
        let (mut plain, mut prepared) = (make(), make());
        let shared = SharedFrames::new(&frame::packet(0x20, &[&[1; 997]]));
        let (ga, gb) = (plain.share(shared.clone()), prepared.share(shared.clone()));
        let a: Vec<_> = (0..3).map(|_| open_wire(&mut plain, 0).0).collect();
        let b: Vec<_> = (0..3).map(|_| open_wire(&mut prepared, 0).0).collect();
        let range = prepared.prepare(gb, 0..1000, 1);
        for round in 0..12 {
            for k in 0..3 {
                let sent = (
                    plain.send_group(a[k], ga, 0..1000, 1),
                    prepared.send_prepared(b[k], &range),
                );
                assert_eq!(sent.0, sent.1, "round {round}, connection {k}");
                assert_eq!(seen(&plain, &a), seen(&prepared, &b), "round {round}, {k}");
            }
        }
        assert!(plain.overflows + plain.evictions > 0, "the limits were met");
        assert!(
            a.iter().all(|&c| !plain.is_open(c)),
            "and every connection went"
        );
        plain.unshare(ga);
        prepared.unshare(gb);
        assert_eq!(shared.holders(), 1, "both let go of the group");
    }

    /// Whether `conn`'s gate owes it deferred ranges and whether its line holds ranges.
    fn waiting(sessions: &Sessions, conn: ConnId) -> (bool, bool) {
        let i = conn.0.index() as usize;
        (sessions.gates[i].deferred != 0, !sessions.hot[i].is_empty())
    }

    #[tokio::test]
    async fn deferred_ranges_and_direct_sends_to_a_connection_go_out_in_the_order_queued() {
        let mut sessions = Sessions::new(1 << 20, 1 << 20);
        let mut frames = Vec::new();
        for n in 0..4u8 {
            frame::put(&mut frames, 0x20, &[&[n; 3]]);
        }
        let (one, two) = (SharedFrames::new(&frames), SharedFrames::new(&frames[..]));
        let each = frames.len() / 4;
        let (conn, wire) = open_wire(&mut sessions, usize::MAX);
        let (other, other_wire) = open_wire(&mut sessions, usize::MAX);
        // A first packet the long way makes the gates live.
        for c in [conn, other] {
            assert!(sessions.send_packet(c, 0x21, &[b"hi"]));
            flush_line(&mut sessions, c);
        }
        let (g1, g2) = (sessions.share(one.clone()), sessions.share(two.clone()));
        let whole1 = sessions.prepare(g1, 0..4 * each, 4);
        let whole2 = sessions.prepare(g2, each..3 * each, 2);
        // Deferred: one bit on the gate, nothing on the line.
        assert!(sessions.send_prepared(conn, &whole1));
        assert!(sessions.send_prepared(other, &whole1));
        assert_eq!(waiting(&sessions, conn), (true, false));
        assert_eq!(sessions.deferrals.len(), 2, "one per prepared range");
        // A packet of its own comes after the deferred range.
        assert!(sessions.send_packet(conn, 0x22, &[b"own"]));
        assert_eq!(
            waiting(&sessions, conn),
            (false, false),
            "taken into its queue"
        );
        // Deferred again, then a range of the first group straight to the line: the line
        // takes the deferred range first.
        assert!(sessions.send_prepared(conn, &whole2));
        assert!(sessions.send_group(conn, g1, 3 * each..4 * each, 1));
        assert_eq!(waiting(&sessions, conn), (false, true));
        // Deferred once more after that; then the same range again, which cannot join the
        // deferral twice and follows it on the line.
        assert!(sessions.send_prepared(conn, &whole2));
        assert!(sessions.send_prepared(conn, &whole2));
        let bytes = 4 * each + (frame::HEADER_LEN + 3) + 2 * each + each + 2 * 2 * each;
        assert_eq!(sessions.pending_output(conn), bytes);
        assert_eq!(
            sessions.outbound,
            bytes + 4 * each,
            "the other's deferred bytes too"
        );
        assert_eq!(sessions.packets_out, 2 + 4 + 4 + 1 + 2 + 1 + 2 + 2);
        sessions.unshare(g1);
        sessions.unshare(g2);
        flush_line(&mut sessions, conn);
        flush_line(&mut sessions, other);
        let got: Vec<(u8, u8)> = packets(&wire.borrow().got)
            .iter()
            .map(|(id, payload)| (*id, payload[0]))
            .collect();
        let moves = |ks: &[u8]| ks.iter().map(|&k| (0x20, k)).collect::<Vec<_>>();
        let mut expected = vec![(0x21, b'h')];
        expected.extend(moves(&[0, 1, 2, 3]));
        expected.push((0x22, b'o'));
        expected.extend(moves(&[1, 2, 3, 1, 2, 1, 2]));
        assert_eq!(got, expected);
        let other_got: Vec<u8> = packets(&other_wire.borrow().got)
            .iter()
            .map(|(_, payload)| payload[0])
            .collect();
        assert_eq!(other_got, [b'h', 0, 1, 2, 3]);
        assert_eq!((sessions.outbound, sessions.deferrals.len()), (0, 0));
        assert_eq!(
            (one.holders(), two.holders()),
            (1, 1),
            "written: nothing holds the groups"
        );
    }

    /// Two deferrals open at once (a group's Said prepared before its Moves, as the
    /// fan-out does when its first whole recipient is a mover), joined by one connection in
    /// the order Moves, Said: the bytes must go out in that order.
    #[tokio::test]
    async fn deferrals_joined_out_of_open_order_go_out_in_join_order() {
        let mut sessions = Sessions::new(1 << 20, 1 << 20);
        let moves = SharedFrames::new(&frame::packet(0x20, &[b"move"]));
        let said = SharedFrames::new(&frame::packet(0x30, &[b"said"]));
        let (first, _) = open_wire(&mut sessions, usize::MAX);
        let (conn, wire) = open_wire(&mut sessions, usize::MAX);
        for c in [first, conn] {
            assert!(sessions.send_packet(c, 0x21, &[b"hi"]));
            flush_line(&mut sessions, c);
        }
        let (gm, gs) = (sessions.share(moves.clone()), sessions.share(said.clone()));
        // The first recipient gets only the whole Said part: Said is prepared first.
        let whole_said = sessions.prepare(gs, 0..said.len(), 1);
        assert!(sessions.send_prepared(first, &whole_said));
        // The next recipient: Moves (prepared now, newer), then Said.
        let whole_moves = sessions.prepare(gm, 0..moves.len(), 1);
        assert!(sessions.send_prepared(conn, &whole_moves));
        assert!(sessions.send_prepared(conn, &whole_said));
        sessions.unshare(gm);
        sessions.unshare(gs);
        flush_line(&mut sessions, conn);
        let got: Vec<u8> = packets(&wire.borrow().got)
            .iter()
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(got, [0x21, 0x20, 0x30], "queued: hi, move, said");
    }

    #[tokio::test]
    async fn a_slot_closed_and_reused_before_the_flush_never_gets_the_old_connections_ranges() {
        let mut sessions = Sessions::new(1 << 20, 1 << 20);
        let shared = SharedFrames::new(&frame::packet(0x20, &[b"crowd"]));
        let (old, _) = open_wire(&mut sessions, usize::MAX);
        assert!(sessions.send_packet(old, 0x21, &[b"hi"]));
        flush_line(&mut sessions, old);
        let g = sessions.share(shared.clone());
        let whole = sessions.prepare(g, 0..shared.len(), 1);
        assert!(sessions.send_prepared(old, &whole));
        assert_eq!(sessions.outbound, shared.len());
        // Closed and dropped as the server reaps it; a new connection takes its slot.
        sessions.close(old, Disconnect::normal("gone"));
        assert_eq!(sessions.outbound, 0, "its deferred bytes left the budget");
        sessions.forget(old);
        sessions.conns.remove(old.0);
        let (new, wire) = open_wire(&mut sessions, usize::MAX);
        assert_eq!(new.0.index(), old.0.index(), "the same slot");
        assert!(!sessions.send_prepared(old, &whole), "the old id is stale");
        assert!(sessions.send_packet(new, 0x21, &[b"new"]));
        assert!(sessions.send_prepared(new, &whole));
        sessions.spill(old); // a stale flush entry: nothing moves
        assert_eq!(sessions.pending_output(new), 6 + shared.len());
        sessions.unshare(g);
        flush_line(&mut sessions, new);
        let got: Vec<(u8, Vec<u8>)> = packets(&wire.borrow().got);
        assert_eq!(
            got,
            [(0x21, b"new".to_vec()), (0x20, b"crowd".to_vec())],
            "its own packet and the range queued for it, once"
        );
        assert_eq!(sessions.deferrals.len(), 0);
        assert_eq!(shared.holders(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn deferred_ranges_meet_every_limit_at_the_same_send_as_ranges_on_a_line() {
        // A fresh group each round, so every short send is deferred: the limits must close
        // the same connections at the same sends as `send_group` does.
        let make = || Sessions::new(10_000, 24_000).with_soft_limit(5_000);
        let (mut plain, mut deferred) = (make(), make());
        let shared = SharedFrames::new(&frame::packet(0x20, &[&[1; 997]]));
        let a: Vec<_> = (0..3).map(|_| open_wire(&mut plain, 0).0).collect();
        let b: Vec<_> = (0..3).map(|_| open_wire(&mut deferred, 0).0).collect();
        let mut most_owed = 0;
        for round in 0..12 {
            let (ga, gb) = (plain.share(shared.clone()), deferred.share(shared.clone()));
            let range = deferred.prepare(gb, 0..1000, 1);
            for k in 0..3 {
                let sent = (
                    plain.send_group(a[k], ga, 0..1000, 1),
                    deferred.send_prepared(b[k], &range),
                );
                assert_eq!(sent.0, sent.1, "round {round}, connection {k}");
                assert_eq!(seen(&plain, &a), seen(&deferred, &b), "round {round}, {k}");
                most_owed = most_owed.max(deferred.deferrals.len());
            }
            plain.unshare(ga);
            deferred.unshare(gb);
        }
        assert!(most_owed > 2, "the short sends were deferred");
        assert!(plain.overflows > 0 && plain.evictions > 0 && plain.soft_overflows == 0);
        assert!(
            b.iter().all(|&c| !deferred.is_open(c)),
            "every connection went"
        );
        assert_eq!((deferred.outbound, deferred.deferrals.len()), (0, 0));
        assert_eq!(shared.holders(), 1, "both let go of every group");
    }

    /// Sends `range` to `conns` the way the fan-out's tight loop does: runs of
    /// [`JoinRun::join`], and each connection a run refuses through `send_prepared`; the
    /// answers, and how many the runs took.
    fn send_in_runs(
        sessions: &mut Sessions,
        conns: &[ConnId],
        range: &Prepared,
    ) -> (Vec<bool>, usize) {
        let (mut sent, mut joined) = (Vec::new(), 0);
        let mut k = 0;
        while k < conns.len() {
            if let Some(mut run) = sessions.join_run(range) {
                while k < conns.len() && run.join(conns[k]) {
                    sent.push(true);
                    k += 1;
                }
                joined += run.finish();
            }
            if let Some(&conn) = conns.get(k) {
                sent.push(sessions.send_prepared(conn, range));
                k += 1;
            }
        }
        (sent, joined)
    }

    #[tokio::test(start_paused = true)]
    async fn runs_of_joins_meet_every_limit_at_the_same_send_as_send_prepared() {
        // Four connections meet the soft limit, the budget's eviction and the send limit in
        // turn; each round opens two deferrals and sends the newer one first, so a gate
        // holding it must not join the older one (it goes on the line instead).
        let make = || Sessions::new(12_000, 16_000).with_soft_limit(5_000);
        let (mut exact, mut runs) = (make(), make());
        let shared = SharedFrames::new(&frame::packet(0x20, &[&[1; 797]]));
        let a: Vec<_> = (0..4).map(|_| open_wire(&mut exact, 0).0).collect();
        let b: Vec<_> = (0..4).map(|_| open_wire(&mut runs, 0).0).collect();
        // A first packet the long way makes the gates live (the fan-out's runs need them).
        for (s, conns) in [(&mut exact, &a), (&mut runs, &b)] {
            for &c in conns {
                assert!(s.send_packet(c, 0x21, &[b"hi"]));
            }
        }
        let (mut joined, mut refused) = (0, 0);
        for round in 0..12 {
            let shares = |s: &mut Sessions| (s.share(shared.clone()), s.share(shared.clone()));
            let ((ea, eb), (ra, rb)) = (shares(&mut exact), shares(&mut runs));
            let older = (exact.prepare(ea, 0..800, 1), runs.prepare(ra, 0..800, 1));
            let newer = (
                exact.prepare(eb, 400..800, 1),
                runs.prepare(rb, 400..800, 1),
            );
            for (step, (e, r)) in [newer, older].into_iter().enumerate() {
                let want: Vec<bool> = a.iter().map(|&c| exact.send_prepared(c, &e)).collect();
                let (got, n) = send_in_runs(&mut runs, &b, &r);
                joined += n;
                refused += got.len() - n;
                assert_eq!(want, got, "round {round}, step {step}");
                assert_eq!(
                    seen(&exact, &a),
                    seen(&runs, &b),
                    "round {round}, step {step}"
                );
                assert_eq!(exact.deferrals.len(), runs.deferrals.len());
            }
            for g in [ea, eb] {
                exact.unshare(g);
            }
            for g in [ra, rb] {
                runs.unshare(g);
            }
        }
        assert!(
            joined > 8 && refused > 8,
            "both ways taken: {joined} joined, {refused} not"
        );
        assert!(
            exact.overflows > 0 && exact.evictions > 0,
            "the limits were met"
        );
        assert!(b.iter().all(|&c| !runs.is_open(c)), "every connection went");
        assert_eq!((runs.outbound, runs.deferrals.len()), (0, 0));
        assert_eq!(shared.holders(), 1, "both let go of every group");
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_dropped_without_finish_still_files_its_joins() {
        // An early return (or a panic) between the joins and `finish` must leave the budget,
        // the packet count and the deferral's members as `finish` would: the gates were
        // already marked, so a join left unfiled would free the range while they point at it.
        let shared = SharedFrames::new(&frame::packet(0x20, &[&[1; 97]]));
        let mut states = Vec::new();
        for finish in [true, false] {
            let mut s = Sessions::new(1 << 20, 1 << 22);
            let conns: Vec<_> = (0..3).map(|_| open_wire(&mut s, 0).0).collect();
            for &c in &conns {
                assert!(s.send_packet(c, 0x21, &[b"hi"]));
            }
            let g = s.share(shared.clone());
            let range = s.prepare(g, 0..100, 1);
            let mut run = s.join_run(&range).expect("room for a run");
            assert!(conns.iter().all(|&c| run.join(c)), "every connection joins");
            if finish {
                assert_eq!(run.finish(), 3);
            } else {
                drop(run);
            }
            states.push(seen(&s, &conns));
            s.unshare(g);
            for &c in &conns {
                s.close(c, Disconnect::normal("bye"));
            }
            assert_eq!((s.outbound, s.deferrals.len()), (0, 0), "finish {finish}");
        }
        assert_eq!(states[0], states[1]);
        assert_eq!(shared.holders(), 1, "both let go of the group");
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_of_joins_lists_for_the_tick_and_stops_at_the_send_limit_to_the_byte() {
        // A range of 800 bytes under a send limit of 4 000: a connection holding 3 200 bytes
        // joins it (4 000 in all), one holding 3 201 does not (4 001, over the limit).
        let shared = SharedFrames::new(&frame::packet(0x20, &[&[1; 797]]));
        let len = shared.len();
        let below = 4_000 - len + 1;
        let drive = |runs: bool| {
            let mut s = Sessions::new(4_000, 1 << 20);
            let conns: Vec<_> = (0..3).map(|_| open_wire(&mut s, usize::MAX).0).collect();
            // The first: live, written, out of both lists (TICK and FLUSH clear).
            assert!(s.send_packet_at_tick(conns[0], 0x21, &[b"hi"]));
            flush(&mut s, conns[0]);
            s.release_tick();
            s.to_flush.clear();
            s.conns.get_mut(conns[0].0).unwrap().queued_flush = false;
            s.unlist_flush(conns[0]);
            assert!(s.at_tick.is_empty());
            // The second one byte under the range's room, the third at it.
            for (&c, pending) in conns[1..].iter().zip([below - 1, below]) {
                let payload = vec![2; pending - frame::HEADER_LEN];
                assert!(s.send_packet_at_tick(c, 0x21, &[&payload]));
                assert_eq!(s.pending_output(c), pending);
            }
            let g = s.share(shared.clone());
            let p = s.prepare(g, 0..len, 1);
            let sent = if runs {
                send_in_runs(&mut s, &conns, &p).0
            } else {
                conns.iter().map(|&c| s.send_prepared(c, &p)).collect()
            };
            let open: Vec<bool> = conns.iter().map(|&c| s.is_open(c)).collect();
            (sent, open, seen(&s, &conns))
        };
        let (exact, runs) = (drive(false), drive(true));
        assert_eq!(exact.0, [true, true, false], "the third over the limit");
        assert_eq!(exact.1, [true, true, false], "and closed");
        assert_eq!(exact, runs);
    }

    #[test]
    fn a_prepared_range_past_a_lines_reach_still_goes_the_long_way() {
        let mut sessions = Sessions::new(1 << 20, 1 << 20);
        let shared = SharedFrames::new(&frame::packet(0x20, &[&[1; 997]]));
        let g = sessions.share(shared.clone());
        let (conn, _) = open_wire(&mut sessions, 0);
        let empty = sessions.prepare(g, 0..0, 0);
        assert_eq!(empty.below, 0, "nothing to queue: never the short way");
        assert!(sessions.send_prepared(conn, &empty));
        let range = sessions.prepare(g, 0..1000, 1);
        for _ in 0..6 {
            assert!(sessions.send_prepared(conn, &range));
        }
        assert_eq!(
            sessions.pending_output(conn),
            6_000,
            "four on the line, two queued"
        );
        assert_eq!(sessions.at_tick, vec![conn], "listed for the tick once");
        sessions.unshare(g);
    }
}
