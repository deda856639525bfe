//! The network server: listeners, connections and the two phase handlers that drive them.
//!
//! The **Network** phase accepts what the listeners have waiting, then reads every
//! connection that signalled readiness, splits what arrived into packets and calls their
//! handlers — inline, on the loop thread, in the order the connections became ready. The
//! **Flush** phase writes what the handlers (and the Deltas phase) queued. Readiness arrives
//! through a [`Signal`] that also wakes a parked loop, so a packet or a new connection is
//! handled at once, not after `idle_wait`.
//!
//! Every drain is bounded — accepts per listener, bytes per connection — and whatever is left
//! makes the phase report pending work, so the loop comes straight back instead of parking.
//!
//! This module owns sockets and buffers; it must never know what a packet means beyond its
//! header (that is the handler table's business) and never block.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::{Rc, Weak};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use super::admission::{Admission, Keys, Prefix, Refusal, Screened};
use super::backend::{Accept, Accepted, Acceptor, Backend, ReadOutcome, Signal, Token};
use super::ban_filter;
use super::churn::log_at;
use super::conn_id::ConnId;
use super::frame;
use super::handlers::{Access, BadPacket, PacketTable};
use super::limits::Limits;
use super::listener;
use super::rate::{Rate, Verdict};
use super::reason;
use super::reason::Disconnect;
use super::session::{NetState, Sessions};
use super::throttle::Throttle;
use crate::LoopContext;
use crate::runtime::history::Offender;
use crate::runtime::profile::ENABLED as PROFILING;
use crate::runtime::stamp::Stamp;
use crate::runtime::{Doing, catch};
use crate::timer::{self, TimerToken};

/// Connections accepted per listener per iteration; a login rush takes a few iterations
/// instead of starving the timers.
const ACCEPTS_PER_ITERATION: usize = 64;
/// Connections read per iteration. A busy connection costs 10–15 µs of the loop thread's time
/// per iteration, most of it in the kernel sending the answer (on loopback the kernel does the
/// receiver's work then, too), and a timer due meanwhile waits for the next iteration. 16 keeps
/// that wait near a quarter of a millisecond however many players are sending (the median 5 s
/// window's peak wheel lag with 1000 ping clients: 0.22–0.24 ms; 0.36–0.42 ms with 32; 1.35–1.54
/// ms with 128), and costs no measurable throughput (docs/performance.md, "Networking").
const CONNS_PER_ITERATION: usize = 16;
/// Packets handled from one connection per turn: a client flooding small packets gets its
/// share of an iteration, not all of it.
const PACKETS_PER_TURN: usize = 64;
/// Bytes read per `read` call.
const READ_CHUNK: usize = 16 * 1024;
/// Bytes read from one connection per iteration before the next connection's turn.
const READ_BUDGET: usize = 64 * 1024;
/// How often connections are checked against the idle and login deadlines.
const DEADLINE_SWEEP: Duration = Duration::from_secs(1);
/// After an accept error (out of file descriptors, say) the listener is retried this late.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Counters since start, for the console and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Open right now.
    pub connections: usize,
    /// Open right now and not logged in yet.
    pub prelogin: usize,
    /// Hosts with a connection open right now.
    pub hosts: usize,
    /// Connections admitted (those refused or shed at once are counted apart).
    pub accepted: u64,
    /// Accepted and closed at once: `max_connections` are open and every one has logged in.
    pub refused: u64,
    /// Accepted and closed at once: the host holds `max_per_ip` already.
    pub refused_per_ip: u64,
    /// Accepted and closed at once: the IPv6 prefix holds `max_per_ipv6_prefix` already.
    pub refused_per_ipv6_prefix: u64,
    /// Accepted and closed at once: the IPv4 prefix holds `max_per_ipv4_prefix` already.
    pub refused_per_ipv4_prefix: u64,
    /// Accepted and closed at once: `max_prelogin` connections have not logged in, and
    /// every one of them is closing already (none can make room).
    pub refused_prelogin: u64,
    /// Accepted and closed at once: the source connects faster than `connect_rate` (the
    /// refusals that started a ban included).
    pub refused_rate: u64,
    /// Accepted and closed at once: the source is banned (`connect_ban`).
    pub refused_banned: u64,
    /// Sources banned for connecting far beyond `connect_rate`, since start.
    pub bans: u64,
    /// Sources banned right now.
    pub banned: usize,
    /// Connects let through without a connect rate because the table of sources was full
    /// (a flood from more sources than the shard tracks: a firewall's job).
    pub rate_untracked: u64,
    /// Closed to make room for a new connection: the oldest that had not logged in, when
    /// `max_prelogin` had not logged in or `max_connections` were open.
    pub prelogin_evictions: u64,
    /// Accepted and closed at once because the process was out of descriptors (the spare
    /// descriptor let it take the connection off the backlog).
    pub shed: u64,
    /// Closed for not logging in within `login_timeout`.
    pub login_timeouts: u64,
    /// Closed for completing no packet within `idle_timeout`.
    pub idle_timeouts: u64,
    /// Packets dropped for coming faster than their kind's rate.
    pub flood_dropped: u64,
    /// Disconnected for flooding far beyond a rate.
    pub flood_disconnects: u64,
    /// Disconnected for holding the most unsent output when the outbound budget ran out.
    pub outbound_evictions: u64,
    /// Disconnected for passing `send_buffer_size` of unsent output.
    pub send_overflows: u64,
    /// Disconnected for keeping more than `send_soft_limit` unsent for longer than
    /// `send_soft_timeout`.
    pub send_soft_overflows: u64,
    /// Connections closed, for any reason.
    pub disconnects: u64,
    /// Disconnects for breaking the protocol or a limit.
    pub faults: u64,
    /// Whole packets read from clients, those later dropped by a flood limit included.
    pub packets_in: u64,
    /// Packets queued to connections.
    pub packets_out: u64,
    /// Bytes read from clients' sockets.
    pub bytes_in: u64,
    /// Bytes the sockets took from the send buffers.
    pub bytes_out: u64,
    /// Connections whose output a Flush phase left for the next iteration, having written
    /// [`FLUSH_PER_ITERATION`] connections already or spent [`FLUSH_BUDGET`] (a tick's
    /// broadcasts to a crowd).
    pub flushes_deferred: u64,
    /// Flush phases that stopped at [`FLUSH_BUDGET`] with connections still to write (their
    /// connections are counted in `flushes_deferred`).
    pub flush_budget_stops: u64,
}

/// The most connections one Flush phase writes to; the rest go in the next iteration, first.
///
/// A write is a system call of 5–20 µs here (on loopback the sender also pays for the
/// receiver's side), so writing a tick's broadcasts to a crowd of 1,000 in one phase would
/// hold the loop 5–20 ms: every other phase, a due timer included, would wait for it. 256
/// writes bound a phase to a few milliseconds; a crowd's tick then takes four iterations,
/// with the Timers and Network phases running between them, and the cost of the cap is one
/// loop turn (microseconds) of delay for the connections past it.
pub const FLUSH_PER_ITERATION: usize = 256;

/// The most wall time one Flush phase spends writing before it leaves the connections not yet
/// written for the next iteration, first in line, as past [`FLUSH_PER_ITERATION`].
///
/// The count cap alone does not bound the phase's time: 256 writes to a crowd took 4 ms in
/// most iterations here and up to 13 ms of the loop thread's own CPU in a few (a write's cost
/// follows what the receiving side's kernel work costs at that moment, on loopback the
/// sender's), which was every iteration over 16 ms on a quiet machine. The clock (the CPU's
/// time-stamp counter, ~20 ns) is read after each connection written, so a phase ends at most
/// one connection's write past the budget; it always writes at least one connection, so the
/// list drains whatever a write costs. 4 ms is what the cap's 256 writes take in a usual
/// iteration, so the budget cuts only the slow ones: with the other phases (the Network
/// phase's reads under 1 ms, the fan-out's under `FANOUT_PER_ITERATION`) an iteration's own
/// work stays far from 16 ms, and half a tick (8 ms) is left for everything else. Wall time
/// the host takes from the thread (preemption) is outside any budget; it ends the phase at
/// the next connection (docs/performance.md, "A time budget for the Flush phase").
pub const FLUSH_BUDGET: Duration = Duration::from_millis(4);

impl NetStats {
    /// Connections accepted and closed at once, for any reason (out of descriptors included).
    #[must_use]
    pub fn refused_total(&self) -> u64 {
        self.refused
            + self.refused_per_ip
            + self.refused_per_ipv6_prefix
            + self.refused_per_ipv4_prefix
            + self.refused_prelogin
            + self.refused_rate
            + self.refused_banned
            + self.shed
    }
}

/// A handle to the server; clones share it. Lives on the loop thread.
#[derive(Clone)]
pub struct Net(Rc<RefCell<Server>>);

type DisconnectHook = Box<dyn FnMut(&mut Sessions, ConnId)>;

struct Server {
    limits: Limits,
    table: PacketTable,
    sessions: Sessions,
    /// Every disconnect hook, in the order added.
    on_disconnect: Vec<DisconnectHook>,
    signal: Option<Signal>,
    /// The loop the server runs on (from `start`), told which handler runs, for a watchdog.
    on_loop: Option<LoopContext>,
    acceptors: Vec<Box<dyn Acceptor>>,
    /// Each acceptor's listening socket (owned by the acceptor) and whether it is IPv6, for
    /// the kernel's ban filter.
    listener_fds: Vec<(RawFd, bool)>,
    /// Puts the ban filter right when the first ban still on ends; armed only while a source
    /// is banned.
    ban_expiry: Option<TimerToken>,
    filter_errors: Throttle,
    /// Tokens taken from the signal, being processed.
    ready: Vec<Token>,
    /// Connections to read this iteration, and listeners to accept on.
    /// FIFO, each connection at most once (`NetState::queued_read`): the order readiness
    /// arrived in, so no connection waits behind others that keep getting data.
    to_read: VecDeque<ConnId>,
    to_accept: Vec<usize>,
    /// Where reads land and packets are split while a connection holds no partial packet;
    /// its content never outlives one read (a partial packet left at its end moves to the
    /// connection's own buffer).
    scratch: Vec<u8>,
    stats: NetStats,
    /// The longest packet handler since the loop profile last took it (profiled builds).
    worst_handler: Option<Offender<u8>>,
    accept_errors: Throttle,
    /// Who may connect: per-host and per-prefix counts, connect rates and bans.
    admission: Admission,
    /// A descriptor held in reserve: out of descriptors, the server closes it to accept (and
    /// at once close) one waiting connection, so clients are refused instead of left hanging
    /// in the backlog.
    spare: Option<std::fs::File>,
    /// Runs only while connections are open: an empty server adds no wake-ups to an idle
    /// shard.
    sweeper: Option<TimerToken>,
    /// Armed while output waits for the next tick ([`Sessions::send_shared`]): at that
    /// boundary it hands the waiting connections to the Flush phase.
    tick_release: Option<TimerToken>,
    /// The server itself, for the sweeper's callback (weak: dropping every `Net` frees it).
    me: Weak<RefCell<Server>>,
    /// The clock [`FLUSH_BUDGET`] is measured with: [`Stamp::now`], or a test's stand-in.
    clock: fn() -> Stamp,
}

impl Net {
    /// A server with these limits, answering ping; no listener yet ([`Net::start`]).
    pub fn new(limits: Limits) -> Net {
        let mut table = PacketTable::new();
        if let Some(rate) = limits.ping_rate {
            table.limit(frame::PING, rate);
        }
        let admission = Admission::new(&limits);
        Net(Rc::new_cyclic(|me| {
            RefCell::new(Server {
                me: me.clone(),
                sessions: Sessions::new(limits.send_buffer_size, limits.outbound_budget)
                    .with_soft_limit(limits.send_soft_limit),
                limits,
                table,
                on_disconnect: Vec::new(),
                signal: None,
                on_loop: None,
                acceptors: Vec::new(),
                listener_fds: Vec::new(),
                ban_expiry: None,
                filter_errors: Throttle::default(),
                ready: Vec::new(),
                to_read: VecDeque::new(),
                to_accept: Vec::new(),
                scratch: Vec::new(),
                worst_handler: None,
                stats: NetStats::default(),
                accept_errors: Throttle::default(),
                admission,
                spare: open_spare(),
                sweeper: None,
                tick_release: None,
                clock: Stamp::now,
            })
        }))
    }

    /// Registers the handler of packet `id` (replacing any earlier one).
    pub fn handle(
        &self,
        id: u8,
        name: &'static str,
        access: Access,
        handler: impl FnMut(&mut Sessions, ConnId, &[u8]) -> Result<(), BadPacket> + 'static,
    ) {
        self.0
            .borrow_mut()
            .table
            .register(id, name, access, Box::new(handler));
    }

    /// Adds `hook`, run for every connection that closes, whatever the reason, before its id
    /// goes stale (game code logs the player out here). Every hook added runs, in the order
    /// added: a second hook never replaces the first. A hook that panics is logged and the
    /// next one still runs.
    pub fn on_disconnect(&self, hook: impl FnMut(&mut Sessions, ConnId) + 'static) {
        self.0.borrow_mut().on_disconnect.push(Box::new(hook));
    }

    /// Binds every address, in order (the error names the address that failed), then starts
    /// accepting ([`Net::start`]).
    pub fn listen(
        &self,
        backend: &dyn Backend,
        addrs: &[SocketAddr],
    ) -> io::Result<Vec<SocketAddr>> {
        let socket_send_buffer = self.0.borrow().limits.socket_send_buffer;
        self.start(backend, bind_all(addrs, socket_send_buffer)?)
    }

    /// Starts accepting on bound listeners. Call on the loop thread, with the phase slots
    /// installed ([`Net::network_slot`], [`Net::flush_slot`]). Returns the addresses the
    /// listeners are bound to (port 0 resolved).
    pub fn start(
        &self,
        backend: &dyn Backend,
        listeners: Vec<std::net::TcpListener>,
    ) -> io::Result<Vec<SocketAddr>> {
        let signal = Signal::new(LoopContext::current());
        let mut bound = Vec::new();
        let mut acceptors = Vec::new();
        let mut kernel_send_buffer = 0;
        let mut fds = Vec::new();
        for (i, socket) in listeners.into_iter().enumerate() {
            let addr = socket.local_addr()?;
            fds.push((socket.as_raw_fd(), addr.is_ipv6()));
            // What the kernel granted (Linux reports the doubled size it accounts), which
            // the sockets it accepts inherit.
            let granted = socket2::SockRef::from(&socket).send_buffer_size()?;
            kernel_send_buffer = kernel_send_buffer.max(granted);
            let acceptor = backend
                .listen(socket, signal.waker(Token::Listener(i)))
                .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
            bound.push(addr);
            acceptors.push(acceptor);
        }
        let mut server = self.0.borrow_mut();
        server.sessions.socket_charge = kernel_send_buffer + backend.transport_output_limit();
        // The first accept pass (next Network phase) registers the listeners' wakers.
        server.to_accept = (0..acceptors.len()).collect();
        server.acceptors = acceptors;
        server.listener_fds = fds;
        server.signal = Some(signal);
        server.on_loop = Some(LoopContext::current());
        LoopContext::current().wake();
        Ok(bound)
    }

    /// Closes the listeners and every connection (each logged as "server shutting down").
    pub fn stop(&self) {
        let mut server = self.0.borrow_mut();
        if let Some(token) = server.sweeper.take() {
            token.cancel();
        }
        if let Some(token) = server.ban_expiry.take() {
            token.cancel();
        }
        server.listener_fds.clear();
        server.acceptors.clear();
        if let Some(token) = server.tick_release.take() {
            token.cancel();
        }
        // Best effort, never blocking: what the sockets take now still reaches the players,
        // the broadcasts waiting for the tick included.
        server.sessions.release_tick();
        while !server.sessions.to_flush.is_empty() {
            // Past FLUSH_PER_ITERATION or FLUSH_BUDGET, in turns; each turn writes at least
            // one connection, so the list shortens every time.
            server.flush();
        }
        let ids: Vec<ConnId> = server.sessions.ids().collect();
        for conn in ids {
            server
                .sessions
                .close(conn, Disconnect::normal("server shutting down"));
        }
        server.reap();
    }

    /// The Network phase handler. True if work is left for the next iteration.
    pub fn network_slot(&self) -> impl FnMut() -> bool + 'static {
        let net = self.clone();
        move || net.0.borrow_mut().network_phase()
    }

    /// The Flush phase handler.
    pub fn flush_slot(&self) -> impl FnMut() -> bool + 'static {
        let net = self.clone();
        move || {
            let mut server = net.0.borrow_mut();
            server.flush();
            server.reap();
            server.arm_tick_release();
            // Connections past the cap or the budget, or output a disconnect hook queued for
            // others: next iteration, not after a park.
            !server.sessions.to_flush.is_empty()
        }
    }

    /// Access to the connections from outside a packet handler (the Deltas phase, a timer).
    /// Panics if called from inside a packet handler, which has `&mut Sessions` already.
    pub fn with_sessions<R>(&self, f: impl FnOnce(&mut Sessions) -> R) -> R {
        f(&mut self.0.borrow_mut().sessions)
    }

    /// The longest packet handler run since the last call (its packet id), for the loop
    /// profile; `None` when none ran or the build does not profile.
    pub fn take_worst_handler(&self) -> Option<Offender<u8>> {
        self.0.borrow_mut().worst_handler.take()
    }

    /// The counters since the server started, and the connections open now.
    #[must_use]
    pub fn stats(&self) -> NetStats {
        let server = self.0.borrow();
        NetStats {
            connections: server.sessions.len(),
            prelogin: server.sessions.prelogin,
            hosts: server.admission.hosts(),
            banned: server.admission.banned(Instant::now()),
            rate_untracked: server.admission.untracked(),
            flood_dropped: server.stats.flood_dropped,
            outbound_evictions: server.sessions.evictions,
            send_overflows: server.sessions.overflows,
            send_soft_overflows: server.sessions.soft_overflows,
            packets_out: server.sessions.packets_out,
            ..server.stats
        }
    }

    /// The limits it enforces.
    #[must_use]
    pub fn limits(&self) -> Limits {
        self.0.borrow().limits.clone()
    }

    /// Hosts with at least one connection open.
    #[must_use]
    pub fn hosts(&self) -> usize {
        self.0.borrow().admission.hosts()
    }

    /// What the outbound budget counts now, bytes: unsent output across all connections,
    /// plus the socket charge of every socket left full ([`Net::full_sockets`]).
    #[must_use]
    pub fn outbound_bytes(&self) -> usize {
        self.0.borrow().sessions.outbound
    }

    /// Unsent output across all open connections, bytes (without the full sockets' kernel
    /// buffers the budget also counts). Walks every connection: for the console and tests.
    #[must_use]
    pub fn unsent_bytes(&self) -> usize {
        let server = self.0.borrow();
        server
            .sessions
            .conns
            .iter()
            .map(|(key, s)| server.sessions.unsent(key, s))
            .sum()
    }

    /// Sockets the last flush left full, and what each counts in the outbound budget, bytes:
    /// its kernel send buffer as granted, plus the backend's own output buffer (io_uring's).
    #[must_use]
    pub fn full_sockets(&self) -> (usize, usize) {
        let server = self.0.borrow();
        (
            server.sessions.charged_sockets,
            server.sessions.socket_charge,
        )
    }

    /// Limits packet `id` to `rate` per connection (the policy: [`Rate`]).
    pub fn limit_rate(&self, id: u8, rate: Rate) {
        self.0.borrow_mut().table.limit(id, rate);
    }
}

impl Server {
    /// Arms the release of output waiting for the tick, if some waits and it is not armed:
    /// at the next tick boundary (its Timers phase) the waiting connections join the Flush
    /// phase's list, so that iteration writes them. Broadcast output thus goes out at most
    /// once per tick per connection, at most a tick after it was queued.
    fn arm_tick_release(&mut self) {
        if self.tick_release.is_some() || !self.sessions.has_tick_output() {
            return;
        }
        let me = self.me.clone();
        self.tick_release = Some(timer::after(Duration::ZERO).start(move || {
            if let Some(server) = me.upgrade() {
                let mut server = server.borrow_mut();
                server.tick_release = None;
                server.sessions.release_tick();
            }
        }));
    }

    /// Starts the sweep for idle and not-logged-in connections if it is off and there is
    /// something to sweep.
    fn start_sweeper(&mut self) {
        let no_deadline = self.limits.idle_timeout.is_zero()
            && self.limits.login_timeout.is_zero()
            && self.limits.send_soft_limit == 0;
        if self.sweeper.is_some() || no_deadline {
            return;
        }
        let me = self.me.clone();
        self.sweeper = Some(timer::every(DEADLINE_SWEEP).start(move || {
            if let Some(server) = me.upgrade() {
                server.borrow_mut().sweep_deadlines();
            }
        }));
    }

    /// Closes connections idle past the timeout, connections not logged in past the login
    /// deadline and connections over the soft send limit for too long; shrinks the buffer of
    /// a partial packet nothing arrived for since the last sweep to what it holds; stops
    /// itself once no connection is open.
    fn sweep_deadlines(&mut self) {
        let now = Instant::now();
        let (idle, login) = (self.limits.idle_timeout, self.limits.login_timeout);
        let soft = self.limits.send_soft_timeout;
        for state in self.sessions.conns.values_mut() {
            if !std::mem::take(&mut state.received) && state.recv.capacity() > state.recv.len() {
                state.recv.shrink_to_fit();
            }
        }
        let overdue: Vec<(ConnId, Deadline)> = self
            .sessions
            .conns
            .iter()
            .filter(|(_, s)| s.closing.is_none())
            .filter_map(|(key, s)| {
                let missed = if !s.logged_in && !login.is_zero() && now - s.connected > login {
                    Deadline::Login
                } else if !idle.is_zero() && now - s.last_packet > idle {
                    Deadline::Idle
                } else if s.over_soft_since.is_some_and(|since| now - since > soft) {
                    Deadline::SoftLimit
                } else {
                    return None;
                };
                Some((ConnId(key), missed))
            })
            .collect();
        for (conn, missed) in overdue {
            let why = match missed {
                Deadline::Login => {
                    self.stats.login_timeouts += 1;
                    format!(
                        "login timeout: not logged in within {} (network.login_timeout)",
                        humantime::format_duration(login)
                    )
                }
                Deadline::Idle => {
                    self.stats.idle_timeouts += 1;
                    format!(
                        "idle timeout: no complete packet for {} (network.idle_timeout)",
                        humantime::format_duration(idle)
                    )
                }
                Deadline::SoftLimit => {
                    self.sessions.soft_overflow(conn, soft);
                    continue;
                }
            };
            self.sessions.close(conn, Disconnect::fault(why));
        }
        self.reap();
        if self.sessions.is_empty()
            && let Some(token) = self.sweeper.take()
        {
            token.cancel();
        }
    }
}

/// Which deadline a connection missed.
enum Deadline {
    Login,
    Idle,
    /// Its unsent output stayed above `send_soft_limit` for longer than `send_soft_timeout`.
    SoftLimit,
}

/// Binds a listener on every address, in order; the error names the address that failed.
/// Needs no loop: the shard binds before it builds the world, so a port conflict is reported
/// at once.
pub(crate) fn bind_all(
    addrs: &[SocketAddr],
    socket_send_buffer: usize,
) -> io::Result<Vec<std::net::TcpListener>> {
    addrs
        .iter()
        .map(|&addr| listener::bind(addr, socket_send_buffer as u32))
        .collect()
}

impl Server {
    fn network_phase(&mut self) -> bool {
        let Some(signal) = &self.signal else {
            return false;
        };
        let mut ready = std::mem::take(&mut self.ready);
        signal.take(&mut ready);
        for token in ready.drain(..) {
            match token {
                Token::Listener(i) => self.to_accept.push(i),
                Token::Conn(conn) => {
                    let Some(state) = self.sessions.conns.get_mut(conn.0) else {
                        continue; // stale: closed since
                    };
                    if std::mem::take(&mut state.write_blocked) {
                        self.sessions.queue_flush(conn);
                    }
                    self.queue_read(conn);
                }
            }
        }
        self.ready = ready; // keeps its allocation
        let mut pending = self.accept_all();
        pending |= self.read_all();
        self.reap();
        pending
    }

    fn accept_all(&mut self) -> bool {
        let mut listeners = std::mem::take(&mut self.to_accept);
        listeners.sort_unstable();
        listeners.dedup();
        let mut pending = false;
        for &i in &listeners {
            pending |= self.accept(i); // pushes `i` back onto `to_accept` if it has more
        }
        listeners.clear();
        listeners.append(&mut self.to_accept);
        self.to_accept = listeners;
        pending
    }

    /// Accepts up to a budget on listener `i`, each connection screened by admission before
    /// anything is done for it. True if it may have more.
    fn accept(&mut self, i: usize) -> bool {
        let now = Instant::now();
        for _ in 0..ACCEPTS_PER_ITERATION {
            let mut screened = None;
            let polled = {
                let Server {
                    acceptors,
                    admission,
                    sessions,
                    ..
                } = self;
                let Some(acceptor) = acceptors.get_mut(i) else {
                    return false;
                };
                let (open, prelogin) = (sessions.len(), sessions.prelogin);
                acceptor.poll_accept(&mut |peer| {
                    let verdict = admission.screen(peer.ip(), now, open, prelogin);
                    screened = Some((peer, verdict));
                    !matches!(verdict, Screened::Refuse(_))
                })
            };
            match polled {
                Poll::Pending => return false,
                Poll::Ready(Ok(Accept::Refused)) => {
                    if let Some((peer, Screened::Refuse(refusal))) = screened {
                        self.refused(peer, refusal);
                    }
                }
                Poll::Ready(Ok(Accept::Admitted(accepted, peer))) => match screened {
                    Some((_, Screened::Admit(keys))) => self.open(accepted, peer, keys),
                    Some((_, Screened::Evict(keys))) => {
                        if self.evict_oldest_prelogin() {
                            self.open(accepted, peer, keys);
                        } else {
                            drop(accepted); // closes it
                            self.refused(peer, Refusal::MaxPrelogin);
                        }
                    }
                    _ => unreachable!("the acceptor admits only what the screen admitted"),
                },
                Poll::Ready(Err(e)) if is_per_connection(&e) => continue, // that one is gone
                Poll::Ready(Err(e)) if is_out_of_descriptors(&e) => {
                    if self.shed_one(i) {
                        continue;
                    }
                    // Nothing was waiting to be shed. epoll's listener stays ready while accept
                    // fails: look again on a timer rather than spin on the error (the io_uring
                    // listener waits for the next connection meanwhile).
                    self.retry_accept(i);
                    return false;
                }
                Poll::Ready(Err(e)) => {
                    self.accept_errors.log(|suppressed| {
                        tracing::warn!(error = %e, suppressed, "accept failed; retrying shortly");
                    });
                    self.retry_accept(i);
                    return false;
                }
            }
        }
        self.to_accept.push(i);
        true
    }

    /// Starts serving an admitted connection from `peer`.
    fn open(&mut self, accepted: Accepted, peer: SocketAddr, keys: Keys) {
        let signal = self.signal.as_ref().expect("started");
        let conn = ConnId(self.sessions.conns.next_key());
        let transport = accepted.attach(signal.waker(Token::Conn(conn)));
        let state = NetState::new(transport, peer, keys, Instant::now());
        let key = self.sessions.conns.insert(state);
        debug_assert_eq!(key, conn.0);
        self.admission.admit(keys);
        self.sessions.arrived(conn);
        self.stats.accepted += 1;
        self.start_sweeper();
        self.sessions.churn.opened();
        tracing::debug!(%peer, %conn, "connected");
        // Data may have come with the connection: read without waiting for a signal.
        self.queue_read(conn);
    }

    /// Counts and logs a connection from `peer` refused for `refusal` (closed already): one
    /// line each while few, summed up once a second in a flood (`churn.rs`). Nothing is
    /// allocated for it.
    fn refused(&mut self, peer: SocketAddr, refusal: Refusal) {
        let stats = &mut self.stats;
        *match refusal {
            Refusal::MaxConnections => &mut stats.refused,
            Refusal::MaxPrelogin => &mut stats.refused_prelogin,
            Refusal::PerHost => &mut stats.refused_per_ip,
            Refusal::PerIpv6Prefix => &mut stats.refused_per_ipv6_prefix,
            Refusal::PerIpv4Prefix => &mut stats.refused_per_ipv4_prefix,
            Refusal::ConnectRate | Refusal::Ban => &mut stats.refused_rate,
            Refusal::Banned => &mut stats.refused_banned,
        } += 1;
        let level = self.sessions.churn.refused(refusal.kind());
        if refusal == Refusal::Ban {
            stats.bans += 1;
            let ban = humantime::format_duration(self.limits.connect_ban);
            log_at!(level, %peer, %ban, reason = refusal.reason(), "banned a source");
            self.filter_bans();
        } else {
            log_at!(level, %peer, reason = refusal.reason(), "refused a connection");
        }
    }

    /// Puts the sources banned now in every listener's kernel filter (`ban_filter.rs`), so
    /// their connects are dropped before they are connections, and arms the timer that takes
    /// each ban out of it when it ends.
    fn filter_bans(&mut self) {
        let now = Instant::now();
        let banned: Vec<Prefix> = self.admission.banned_sources(now).collect();
        let mask = self.admission.ipv6_mask();
        for &(fd, v6) in &self.listener_fds {
            let program = ban_filter::program(v6, &banned, mask);
            if let Err(e) = ban_filter::attach(fd, &program) {
                self.filter_errors.log(|suppressed| {
                    tracing::warn!(
                        error = %e,
                        suppressed,
                        "cannot update a listener's ban filter: banned sources are refused at \
                         accept instead"
                    );
                });
            }
        }
        if let Some(token) = self.ban_expiry.take() {
            token.cancel();
        }
        if let Some(end) = self.admission.next_ban_end(now) {
            let me = self.me.clone();
            self.ban_expiry = Some(timer::after(end - now).start(move || {
                if let Some(server) = me.upgrade() {
                    server.borrow_mut().filter_bans();
                }
            }));
        }
    }

    /// Closes the oldest connection that has not logged in, to make room for a new one.
    /// False if there is none left to close (all are closing already).
    fn evict_oldest_prelogin(&mut self) -> bool {
        let Some(oldest) = self.sessions.oldest_prelogin() else {
            return false;
        };
        self.stats.prelogin_evictions += 1;
        self.sessions.close(
            oldest,
            Disconnect::fault(
                "evicted before login: the oldest connection not logged in makes room for a \
                 new one (network.max_prelogin, network.max_connections)",
            )
            .with_kind("evicted before login"),
        );
        // Its slot is free once it is gone: now, not at the end of the phase.
        self.reap();
        true
    }

    /// Out of descriptors: frees the spare one to accept a waiting connection on listener `i`
    /// and close it at once, then takes the spare back. False if there is no spare (or the
    /// connection went away), so the caller backs off instead.
    fn shed_one(&mut self, i: usize) -> bool {
        self.accept_errors.log(|suppressed| {
            tracing::error!(
                suppressed,
                "out of file descriptors: closing new connections at once (raise the \
                 open-file limit or lower network.max_connections)"
            );
        });
        if self.spare.take().is_none() {
            return false;
        }
        let shed = self.acceptors.get_mut(i).is_some_and(|a| a.shed_one());
        self.spare = open_spare();
        self.stats.shed += u64::from(shed);
        shed
    }

    /// Raises listener `i` again after [`ACCEPT_RETRY`].
    fn retry_accept(&self, i: usize) {
        let signal = self.signal.clone().expect("started");
        timer::after(ACCEPT_RETRY).start(move || signal.raise(Token::Listener(i)));
    }

    fn queue_read(&mut self, conn: ConnId) {
        if let Some(state) = self.sessions.conns.get_mut(conn.0)
            && !state.queued_read
        {
            state.queued_read = true;
            self.to_read.push_back(conn);
        }
    }

    /// Reads up to [`CONNS_PER_ITERATION`] queued connections, oldest first; one that still
    /// has data goes to the back of the queue. True if any are left for the next iteration.
    fn read_all(&mut self) -> bool {
        for _ in 0..CONNS_PER_ITERATION {
            let Some(conn) = self.to_read.pop_front() else {
                break;
            };
            let Some(state) = self.sessions.conns.get_mut(conn.0) else {
                continue;
            };
            state.queued_read = false;
            if self.read(conn) {
                self.queue_read(conn);
            }
        }
        !self.to_read.is_empty()
    }

    /// Reads `conn` until it would block or its turn is used up (bytes or packets), handling
    /// every complete packet. True if it may have more.
    ///
    /// Where the bytes land depends on what the connection holds. Holding nothing, they are
    /// read into the server's scratch buffer and whole packets are handled from there; a
    /// packet left incomplete at the end of a read is moved, once, into the connection's own
    /// buffer ([`Server::hold`]). Holding part of a packet, the connection reads only the bytes
    /// that packet still lacks, straight into its own buffer (reserved at the declared length
    /// as soon as the header is in): a packet trickled a byte per segment is neither copied
    /// out and back nor reallocated per read. Once whole, it is handled from there and the
    /// buffer is freed, and reads go to the scratch buffer again.
    fn read(&mut self, conn: ConnId) -> bool {
        let mut turn = Turn {
            packets: PACKETS_PER_TURN,
            bytes: 0,
        };
        loop {
            let Some(state) = self.sessions.conns.get_mut(conn.0) else {
                return false;
            };
            // A handler may have closed it, or refused it (closing after a flush): nothing
            // more is taken from the socket either way.
            if !state.reads_input() {
                return false;
            }
            let step = if state.recv.is_empty() {
                self.read_fresh(conn, &mut turn)
            } else {
                self.read_held(conn, &mut turn)
            };
            if let Some(more) = step {
                return more;
            }
        }
    }

    /// One read of `conn`, which holds nothing, into the scratch buffer; its whole packets
    /// are handled and what is left is held by the connection. `None`: read on; else the
    /// turn is over, and whether the connection may have more.
    fn read_fresh(&mut self, conn: ConnId, turn: &mut Turn) -> Option<bool> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let state = self.sessions.conns.get_mut(conn.0)?;
        let step = match state.transport.read(&mut buf, READ_CHUNK) {
            ReadOutcome::Data(n) => {
                turn.bytes += n;
                self.stats.bytes_in += n as u64;
                let done = self.dispatch(conn, &mut buf, &mut turn.packets);
                self.hold(conn, &buf);
                (!done || turn.bytes >= READ_BUDGET).then_some(true)
            }
            outcome => Some(self.read_ended(conn, outcome, "closed by the client")),
        };
        // Kept, not freed: one buffer, at most `READ_CHUNK` long.
        buf.clear();
        self.scratch = buf;
        step
    }

    /// One step of `conn`, which holds part of its input: the whole packets it holds are
    /// handled, else the bytes the packet at its front still lacks are read into its buffer
    /// in place. `None`: read on; else the turn is over, and whether it may have more.
    fn read_held(&mut self, conn: ConnId, turn: &mut Turn) -> Option<bool> {
        let max_packet = self.limits.max_packet;
        let state = self.sessions.conns.get_mut(conn.0)?;
        let mut buf = std::mem::take(&mut state.recv);
        let step = match frame::missing(&buf, max_packet) {
            // Whole (or impossible: `dispatch` closes it, naming the fault).
            Ok(0) | Err(_) => {
                let done = self.dispatch(conn, &mut buf, &mut turn.packets);
                (!done).then_some(true)
            }
            Ok(lacking) => {
                make_room(&mut buf, max_packet);
                match state.transport.read(&mut buf, lacking) {
                    ReadOutcome::Data(n) => {
                        turn.bytes += n;
                        self.stats.bytes_in += n as u64;
                        state.received = true;
                        (turn.bytes >= READ_BUDGET).then_some(true)
                    }
                    outcome => Some(self.read_ended(
                        conn,
                        outcome,
                        "closed by the client in the middle of a packet",
                    )),
                }
            }
        };
        if let Some(state) = self.sessions.conns.get_mut(conn.0)
            && state.closing.is_none()
        {
            // Drained: freed, so a connection between packets holds nothing.
            state.recv = if buf.is_empty() { Vec::new() } else { buf };
        }
        step
    }

    /// A read that brought no data: the connection may have more later (`false`: wait for
    /// its signal), or it closed (`closed` is the reason) or failed.
    fn read_ended(&mut self, conn: ConnId, outcome: ReadOutcome, closed: &'static str) -> bool {
        match outcome {
            ReadOutcome::Data(_) | ReadOutcome::WouldBlock => {}
            ReadOutcome::Closed => self.sessions.close(conn, Disconnect::normal(closed)),
            ReadOutcome::Failed(e) => {
                let why = super::reason::io_failed("read", &e);
                self.sessions.close(conn, Disconnect::normal(why));
            }
        }
        false
    }

    /// Gives `conn` the bytes `rest` left at the end of a read into the scratch buffer — a
    /// packet's start, or whole packets past the turn's packet budget — in a buffer of its
    /// own, sized for the packet at their front (its declared length once the header is in).
    fn hold(&mut self, conn: ConnId, rest: &[u8]) {
        if rest.is_empty() {
            return;
        }
        let max_packet = self.limits.max_packet;
        let Some(state) = self.sessions.conns.get_mut(conn.0) else {
            return;
        };
        if state.closing.is_some() {
            return;
        }
        debug_assert!(state.recv.is_empty());
        let mut held = Vec::with_capacity(rest.len().max(room_for(rest, max_packet)));
        held.extend_from_slice(rest);
        state.recv = held;
        state.received = true;
    }

    /// Handles the complete packets at the front of `buf`, at most `budget` of them, and
    /// drops them from it; the rest stays. False if the budget ran out first.
    fn dispatch(&mut self, conn: ConnId, buf: &mut Vec<u8>, budget: &mut usize) -> bool {
        let mut at = 0;
        let max_packet = self.limits.max_packet;
        let mut done = true;
        // With the loop profile, the clock read that ends one handler's timing starts the
        // next one's (the few nanoseconds of framing between two handlers go to the second):
        // a turn of n packets costs n + 1 reads, not 2n.
        let mut clock: Option<Stamp> = None;
        while self.sessions.is_open(conn) {
            let frame = match frame::split(&buf[at..], max_packet) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => {
                    self.sessions.close(conn, Disconnect::fault(e.to_string()));
                    break;
                }
            };
            if *budget == 0 {
                done = false;
                break;
            }
            *budget -= 1;
            at += frame.bytes.len();
            self.stats.packets_in += 1;
            let logged_in = self.sessions.is_logged_in(conn);
            if logged_in && let Some(state) = self.sessions.conns.get_mut(conn.0) {
                // Before login nothing counts as activity: the login deadline runs regardless.
                state.last_packet = Instant::now();
            }
            let Some(entry) = self.table.get_mut(frame.id) else {
                let why = reason::unknown_packet(frame.id);
                self.sessions.close(conn, Disconnect::fault(why));
                break;
            };
            if entry.access == Access::LoggedIn && !logged_in {
                let why = reason::before_login(frame.id, entry.name);
                self.sessions.close(conn, Disconnect::fault(why));
                break;
            }
            if let Some(rate) = entry.rate {
                let verdict = self
                    .sessions
                    .conns
                    .get_mut(conn.0)
                    .map_or(Verdict::Allow, |state| state.take_token(frame.id, rate));
                match verdict {
                    Verdict::Allow => {}
                    Verdict::Drop => {
                        self.stats.flood_dropped += 1;
                        continue;
                    }
                    Verdict::Abuse => {
                        self.stats.flood_disconnects += 1;
                        let why = format!(
                            "flood: packet 0x{:02x} ({}) far faster than {rate}",
                            frame.id, entry.name
                        );
                        self.sessions.close(conn, Disconnect::fault(why));
                        break;
                    }
                }
            }
            let sessions = &mut self.sessions;
            let began = PROFILING.then(|| *clock.get_or_insert_with(Stamp::now));
            let on_loop = self.on_loop.as_ref();
            on_loop.inspect(|l| l.publish(Doing::Handler(frame.id)));
            let handled = catch(|| (entry.handler)(sessions, conn, frame.payload()));
            on_loop.inspect(|l| l.publish(Doing::Nothing));
            if let Some(began) = began {
                let ended = Stamp::now();
                Offender::offer(&mut self.worst_handler, ended.since(began), frame.id);
                clock = Some(ended);
            }
            let why = match handled {
                Ok(Ok(())) => continue,
                Ok(Err(bad)) => reason::bad_packet(frame.id, entry.name, bad),
                Err(why) => {
                    tracing::error!(
                        packet = format_args!("0x{:02x}", frame.id),
                        "the {} handler panicked: {why}; disconnecting that client",
                        entry.name,
                    );
                    format!("the {} handler panicked", entry.name)
                }
            };
            self.sessions.close(conn, Disconnect::fault(why));
            break;
        }
        buf.drain(..at);
        done
    }

    /// Writes queued output, to at most [`FLUSH_PER_ITERATION`] connections and for at most
    /// [`FLUSH_BUDGET`] (at least one connection is written); the rest stay queued, first in
    /// line for the next iteration's Flush phase (which the pending list makes come without a
    /// park). A full socket signals when writable.
    fn flush(&mut self) {
        if self.sessions.to_flush.is_empty() {
            return; // most iterations of a busy loop: no clock read for nothing
        }
        let mut conns = std::mem::take(&mut self.sessions.to_flush);
        let mut writes = 0;
        let mut done = conns.len();
        let deadline = (self.clock)().add(FLUSH_BUDGET);
        for (at, &conn) in conns.iter().enumerate() {
            let Some(state) = self.sessions.conns.get_mut(conn.0) else {
                continue;
            };
            if state.closing.is_some() || state.write_blocked {
                let blocked = state.closing.is_none();
                state.queued_flush = false;
                self.sessions.unlist_flush(conn);
                if blocked {
                    // Not written now; the ranges deferred for it join its queue all the
                    // same, so a reader that is not reading holds no deferral open.
                    self.sessions.spill(conn);
                }
                continue;
            }
            if writes == FLUSH_PER_ITERATION {
                done = at;
                break;
            }
            // One clock read per connection written (the first excepted): a few tens of ns
            // against a write's microseconds.
            if writes > 0 && (self.clock)() >= deadline {
                self.stats.flush_budget_stops += 1;
                done = at;
                break;
            }
            writes += 1;
            state.queued_flush = false;
            self.sessions.unlist_flush(conn);
            // The ranges the fan-out left on the connection's line or deferred for it join its
            // output queue here, where the write reads that queue anyway.
            self.sessions.spill(conn);
            let Some(state) = self.sessions.conns.get_mut(conn.0) else {
                continue;
            };
            while state.pending_output() > 0 {
                // Every queued chunk in one vectored write where the transport takes them so:
                // shared frames go out of their one buffer, never copied per connection.
                let written = state.transport.write_pieces(&mut state.out.pieces());
                match written {
                    Ok(0) => {
                        state.write_blocked = true;
                        break;
                    }
                    Ok(n) => {
                        state.out.advance(n);
                        self.sessions.outbound -= n;
                        self.stats.bytes_out += n as u64;
                    }
                    Err(e) => {
                        let why = Disconnect::normal(super::reason::io_failed("write", &e));
                        self.sessions.close(conn, why);
                        break;
                    }
                }
            }
            if self.sessions.conns.get(conn.0).is_some() {
                self.sessions.flushed(conn);
                if let Some(state) = self.sessions.conns.get_mut(conn.0)
                    && state.pending_output() == 0
                    && let Some(why) = state.linger.take()
                {
                    self.sessions.close(conn, why);
                }
            }
        }
        if done < conns.len() {
            // Still flagged `queued_flush`: they keep their place ahead of anything queued
            // since (a disconnect hook's output), and nothing queues them twice.
            self.stats.flushes_deferred += (conns.len() - done) as u64;
            conns.drain(..done);
            conns.append(&mut self.sessions.to_flush);
            self.sessions.to_flush = conns;
            return;
        }
        conns.clear();
        if self.sessions.to_flush.is_empty() {
            self.sessions.to_flush = conns;
        }
    }

    /// Drops every condemned connection, one log line each (at `debug` past the churn's
    /// budget: see `churn.rs`).
    fn reap(&mut self) {
        while !self.sessions.to_close.is_empty() {
            let condemned = std::mem::take(&mut self.sessions.to_close);
            for conn in condemned {
                for hook in &mut self.on_disconnect {
                    let sessions = &mut self.sessions;
                    if let Err(why) = catch(|| hook(sessions, conn)) {
                        tracing::error!(
                            %conn,
                            "the disconnect hook panicked: {why}; the connection closes anyway"
                        );
                    }
                }
                self.sessions.forget(conn);
                let Some(mut state) = self.sessions.conns.remove(conn.0) else {
                    continue;
                };
                if state.discard_output {
                    state.transport.discard_output();
                }
                self.admission.release(state.keys);
                if !state.logged_in {
                    self.sessions.prelogin -= 1;
                }
                self.sessions.outbound -= state.pending_output();
                let why = state
                    .closing
                    .unwrap_or_else(|| Disconnect::normal("closed"));
                let peer = state.peer;
                self.stats.disconnects += 1;
                self.stats.faults += u64::from(why.fault);
                let level = self.sessions.churn.closed(&why);
                log_at!(level, %peer, %conn, reason = %why.reason, "disconnected");
            }
        }
    }
}

/// What is left of one connection's turn in the Network phase.
struct Turn {
    /// Packets it may still have handled.
    packets: usize,
    /// Bytes read so far (the turn ends at [`READ_BUDGET`]).
    bytes: usize,
}

/// The room the packet at the front of `buf` needs, bytes: the header's 3 while that is
/// incomplete, then the length the header declares (bounded by `max_packet`); 0 for a header
/// over it (the packet is refused when it is split).
fn room_for(buf: &[u8], max_packet: usize) -> usize {
    match frame::declared_len(buf, max_packet) {
        Ok(Some(len)) => len,
        Ok(None) => frame::HEADER_LEN,
        Err(_) => 0,
    }
}

/// Makes `buf`, which holds the start of a packet, big enough for the whole packet
/// ([`room_for`]), so the reads that complete it never reallocate: it grows at most once past
/// the header.
fn make_room(buf: &mut Vec<u8>, max_packet: usize) {
    let whole = room_for(buf, max_packet);
    if buf.capacity() < whole {
        buf.reserve_exact(whole - buf.len());
    }
}

/// Out of file descriptors, for the process (EMFILE) or the whole system (ENFILE).
fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// The spare descriptor (see `Server::spare`); `None` if even that cannot be had.
fn open_spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// An accept error that concerns only the connection being accepted (it was reset or
/// aborted before we took it): the listener is fine.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

#[cfg(any(test, doc, feature = "testkit"))]
pub(crate) mod read_path;
#[cfg(test)]
mod tests;
