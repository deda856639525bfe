//! The io_uring backend: one raw ring per loop thread, completion-based.
//!
//! io_uring does not say "ready"; it completes an operation on a buffer the kernel held for
//! its whole flight. So every connection keeps one multishot receive armed, which takes a
//! buffer from a pool the ring's connections share (`pool.rs`, a provided-buffer ring) for
//! each segment it receives, and an outbox with at most one send in flight;
//! `Transport::read` copies out of the buffers the connection holds (giving each back to the
//! pool once copied), `Transport::write_pieces` puts output into the outbox — a connection's
//! own bytes copied, frames shared by many connections by reference (`outbox.rs`), sent with
//! one `sendmsg` over several entries. Neither ever waits for the kernel.
//!
//! # Receiving
//!
//! One multishot receive (`IORING_RECV_MULTISHOT`, Linux 6.0) stays armed on a connection
//! across packets: no entry is submitted per packet, and the kernel never arms a poll per
//! packet for a receive that finds its socket empty. The receive ends (a completion without
//! `IORING_CQE_F_MORE`) on a close (result 0), an error, the pool running out of buffers
//! (`ENOBUFS`), or when the kernel chooses to; it is re-armed (counted in [`RecvStats`]):
//!
//! * out of buffers: the connection waits on the ring's starved list, and each buffer given
//!   back re-arms one waiting connection, oldest first (re-arming at once would fail at once,
//!   in a spin). The bytes wait in the socket meanwhile: nothing is lost.
//! * holding [`HELD_LIMIT`] buffers the loop has not read yet: the receive is cancelled, and
//!   `read` re-arms it once the connection holds fewer. (A soft limit: the kernel may fill a
//!   few more, up to what the socket holds, before the cancellation reaches it.) One connection flooding the shard
//!   cannot take the pool from the others; its bytes wait in its socket (TCP's own
//!   back-pressure), as they did with a buffer per connection.
//! * ended by the kernel with data: re-armed at once.
//!
//! Where the kernel refuses the pool (registration failing before Linux 5.19, or the first
//! multishot receive failing with `EINVAL` before 6.0), the ring falls back, with a warning,
//! to one single-shot receive per packet into a [`RECV_BUFFER`] of the connection's own.
//!
//! The ring belongs to the loop thread (created by the first `listen`, shared by every
//! listener and connection on that thread, gone with the last of them). Something must do
//! all the talking to the kernel: when the ring has completions, drain them into the
//! connections' buffers and raise their wakers (so the loop's `Signal` sees them like epoll
//! readiness), and whenever the loop queued work (a receive re-armed by `read`, a send queued
//! by `write`), submit it, `SUBMIT_BATCH` (32) entries per `io_uring_enter`. The kernel does
//! real work inside that call (the sends, and the receives that completed meanwhile), so one
//! pass does one batch and, with more left, lets the loop iterate (timers first) before the
//! next.
//!
//! # Who drives the ring
//!
//! * **The loop's reactor**, on a thread that runs an event loop (the shard). The ring's
//!   descriptor is a source of the thread's reactor (`runtime/reactor.rs`) and the ring its
//!   [`Driver`]: every turn of the reactor runs a pass before it waits (so the Flush phase's
//!   sends reach the kernel before the thread sleeps, and a turn with a batch left does not
//!   block) and one after (to complete what the wait brought). The loop turns its reactor on
//!   every iteration, parked or not, so no task of tokio's is involved and a loop on io_uring
//!   can park in its own wait (`EventLoopBuilder::owns_its_thread`). A closed connection's
//!   linger deadline is a loop timer, whose wake-up turns the reactor.
//! * **A local task of tokio's**, anywhere else (the backend's own tests): tokio's reactor
//!   watches the descriptor, and the task runs a pass when it is readable or the loop queued
//!   work, then yields behind the loop while work is left.
//!
//! Owns: the ring, the driver, the sockets and their buffers. Every buffer is bounded (the
//! shared receive pool, at most `HELD_LIMIT` (16) of its buffers per connection,
//! `OUTBOX_LIMIT` (64 KiB) of output, `ACCEPT_QUEUE` (64) accepted connections), so a flood
//! or a slow peer costs back-pressure, not memory.
//!
//! Must never parse packets, never block the phase that calls it, and never free or move a
//! buffer the kernel may still write to or read from.
//!
//! # A dead ring
//!
//! `io_uring_enter` failing with anything but EINTR, EAGAIN or EBUSY (which mean "try again")
//! kills the ring: every connection on it fails (`read` and `write` return a
//! [`BackendFailed`] error, "io_uring ring failed: …", which the server closes them with and
//! counts as its own disconnect kind), its listeners fail their accepts, nothing is submitted
//! any more (the driver goes idle instead of retrying in a spin), the thread forgets the ring,
//! and the fault is reported to the loop ([`crate::runtime::report_fault`]), which stops the
//! shard with a final save. Stopping, not falling back to epoll: the ring is the process's only
//! path to its sockets, an error the kernel gives for it that it does not document as
//! transient (EBADF, EFAULT, EIO…) means this process or kernel is in a state nobody tested,
//! and every player was disconnected by it already; a restart by the service manager (on a
//! fresh ring, or with `network.backend = "epoll"`) is the predictable way back, while the last
//! save is taken. The dead ring's buffers and sockets are leaked (sockets shut down first, so
//! peers see the close): the kernel may still hold them, and the process is stopping.
//!
//! # Invariants
//!
//! * **A slot with an operation in flight is never freed.** The kernel holds raw pointers into
//!   a connection's receive and send buffers (heap allocations that never move while the
//!   operation flies) until its completion arrives. Dropping a transport or an acceptor only
//!   marks the slot closed and cancels what is in flight; the slot (buffers, socket) is freed
//!   when the last completion for it has been seen. Dropping the ring with operations still
//!   in flight shuts every socket down and waits for them, and leaks the buffers if the kernel
//!   does not answer in time.
//! * **user_data names an operation precisely**: slot index, slot generation and operation
//!   kind. A slot's generation changes when it is freed, so a completion that does not match
//!   its slot's current generation is stale and ignored (by the first invariant it cannot
//!   happen, but it is checked, never assumed). A multishot receive counts as in flight
//!   until its last completion (the one without `IORING_CQE_F_MORE`).
//! * At most one receive, one send and one accept per slot are in flight (and, for a listener
//!   out of descriptors, one poll instead of the accept).
//! * **A pool buffer a completion handed over goes back to the pool exactly once**: when
//!   `read` has copied its last byte out, or at once if its connection is closed or gone.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::mem;
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use socket2::{SockAddr, SockAddrStorage, SockRef, socklen_t};
use tokio::io::unix::AsyncFd;
use tokio::time::{Instant, Sleep};

use super::backend::{
    Accept, Accepted, Acceptor, Backend, BackendFailed, ReadOutcome, Screen, Transport,
    accept_and_close,
};
use super::shared::Piece;
use crate::runtime::reactor::{Driver, Drove, Reactor, Registration};
use outbox::Outbox;
use pool::Pool;

// What a connection's `write` accepted, until the kernel takes it.
mod outbox;
// The receive buffers the ring's connections share.
mod pool;
use crate::slab::{Key, Slab};

/// A connection's own receive buffer, in the single-shot fallback only (see "Receiving" in the
/// module docs): every idle connection then keeps a receive in flight into it, so it is most
/// of what an idle connection costs. With the pool, a connection has none.
const RECV_BUFFER: usize = 4 * 1024;
/// Pool buffers one connection may hold unread before its receive is paused: 16 KiB, what the
/// server reads from a connection at once, so one `read` takes all of them.
const HELD_LIMIT: usize = 16;
/// Bytes `write` accepts before the kernel has taken them.
const OUTBOX_LIMIT: usize = 64 * 1024;
/// Accepted connections waiting for `poll_accept` before the listener stops accepting.
const ACCEPT_QUEUE: usize = 64;
/// How long a closed connection may keep sending what `write` accepted.
const LINGER: Duration = if cfg!(test) {
    Duration::from_millis(200)
} else {
    Duration::from_secs(5)
};
/// Submission queue entries. When the queue is full, a batch is submitted on the spot, so this
/// bounds only the backlog, not the connections.
const SQ_ENTRIES: u32 = 1024;
/// Entries handed to the kernel per `io_uring_enter`. The kernel does a send's work inside that
/// call (on loopback, and for any peer on this host, the receiver's side too), and runs the
/// receives that completed since the last call: 10–15 µs per entry, measured, on the loop's
/// thread. Submitting a whole queue at once kept timers waiting for milliseconds; this batch
/// costs under half a millisecond, and the loop runs an iteration (timers first) between two
/// batches.
const SUBMIT_BATCH: u32 = 32;
/// Completion queue entries: room for a receive and a send of a few thousand connections
/// completing together (the kernel keeps any overflow, but more slowly).
const CQ_ENTRIES: u32 = 8 * 1024;
/// `io_uring_enter`'s flag "also reap completions" (linux/io_uring.h); the crate keeps its copy
/// private.
const IORING_ENTER_GETEVENTS: u32 = 1;
/// How long dropping the ring waits for the kernel to give back buffers.
const DROP_WAIT: Duration = Duration::from_secs(1);
/// Submits `push` tries to make room in a full submission queue before it gives up with an
/// error (the kernel answering "busy, try again" that many times in a row).
const PUSH_ATTEMPTS: usize = 4;

thread_local! {
    /// Fault injection: the error (errno) the next `io_uring_enter` on this thread fails with.
    static FAIL_NEXT_ENTER: std::cell::Cell<Option<i32>> = const { std::cell::Cell::new(None) };
}

#[cfg(test)]
thread_local! {
    /// Tests: the pool the next ring of this thread gets, buffers and bytes each (`None`:
    /// refused, as a kernel before 5.19 refuses it). Taken by the ring it applies to.
    static NEXT_POOL: std::cell::Cell<Option<Option<(u16, u32)>>> =
        const { std::cell::Cell::new(None) };
    /// Tests: while set, every multishot receive armed on this thread is answered `EINVAL`,
    /// as a kernel before 6.0 answers it (a no-op stands in for it, its result replaced).
    static REFUSE_MULTISHOT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// FAULT INJECTION, for tests only: the next `io_uring_enter` of this thread's ring fails with
/// `errno` instead of entering the kernel (EBADF or EIO kill the ring; EAGAIN, EBUSY and EINTR
/// are retried). Nothing a client sends and no configuration key reaches it.
#[cfg(any(test, doc, feature = "testkit"))]
pub(crate) fn inject_enter_failure(errno: i32) {
    FAIL_NEXT_ENTER.with(|f| f.set(Some(errno)));
}

/// The io_uring backend. On an event loop's thread the loop's reactor drives the ring;
/// elsewhere use it on a current-thread runtime that can `spawn_local` (the one
/// [`crate::net::BackendKind::block_on`] builds), where its driver is a local task.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Uring;

/// Can this process create an io_uring, with the features this backend relies on? Cheap
/// (one 8-entry ring, closed at once); the error says why not.
pub(crate) fn probe() -> io::Result<()> {
    let ring: IoUring = IoUring::new(8).map_err(explain_setup_error)?;
    // Without fast poll, an idle socket receive parks a kernel worker thread: one per
    // connection. It also implies accept, send, recv and cancel (Linux 5.7).
    if !ring.params().is_feature_fast_poll() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel's io_uring lacks IORING_FEAT_FAST_POLL (Linux 5.7 or later needed)",
        ));
    }
    Ok(())
}

/// Adds the likely cause to an `io_uring_setup` error.
fn explain_setup_error(e: io::Error) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::ENOSYS) => {
            "no io_uring_setup: a kernel older than 5.1, built without CONFIG_IO_URING, \
             or a seccomp filter hiding it"
        }
        Some(libc::EPERM) => match io_uring_disabled_sysctl().as_deref() {
            Some("2") => "disabled system-wide by sysctl kernel.io_uring_disabled = 2",
            Some("1") => {
                "sysctl kernel.io_uring_disabled = 1 allows only members of \
                 kernel.io_uring_group"
            }
            _ => {
                "refused, most likely by a seccomp profile (container runtimes' default \
                 profiles block io_uring)"
            }
        },
        Some(libc::ENOMEM) => "no memory for the ring (RLIMIT_MEMLOCK, before Linux 5.12)",
        Some(libc::EMFILE | libc::ENFILE) => "out of file descriptors",
        _ => return e,
    };
    io::Error::new(e.kind(), format!("{e}: {why}"))
}

fn io_uring_disabled_sysctl() -> Option<String> {
    let value = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok()?;
    Some(value.trim().to_owned())
}

impl Backend for Uring {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn listen(&self, listener: TcpListener, waker: Waker) -> io::Result<Box<dyn Acceptor>> {
        let ring = Ring::for_this_thread()?;
        // io_uring parks an operation on a busy socket by itself; a blocking socket keeps the
        // kernel from answering EAGAIN instead on kernels that honour O_NONBLOCK there.
        listener.set_nonblocking(false)?;
        let local = listener.local_addr()?;
        let key = ring.borrow_mut().add_listener(listener, waker);
        Ok(Box::new(UringAcceptor { ring, key, local }))
    }

    fn transport_output_limit(&self) -> usize {
        OUTBOX_LIMIT
    }
}

// ---------------------------------------------------------------------------------------------
// Operations and slots

/// What an operation in flight is, encoded in its user_data with its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Recv = 1,
    Send = 2,
    Accept = 3,
    /// A cancellation request; its own completion says nothing we need.
    Cancel = 4,
    /// A listener's wait for a connection while the process is out of descriptors (an accept
    /// would fail at once, without waiting).
    Poll = 5,
}

/// Slot indices fit in 24 bits of user_data, beside 8 bits of operation and 32 of generation.
const MAX_SLOTS: usize = 1 << 24;

/// Stores `value` in a slot whose key fits in a user_data (see [`MAX_SLOTS`]).
fn insert<T>(slab: &mut Slab<T>, value: T) -> Key {
    assert!(
        (slab.next_key().index() as usize) < MAX_SLOTS,
        "more than 2^24 io_uring slots"
    );
    slab.insert(value)
}

fn user_data(op: Op, key: Key) -> u64 {
    (u64::from(key.generation()) << 32) | (u64::from(key.index()) << 8) | op as u64
}

fn decode(user_data: u64) -> Option<(Op, Key)> {
    let op = match user_data & 0xff {
        1 => Op::Recv,
        2 => Op::Send,
        3 => Op::Accept,
        4 => Op::Cancel,
        5 => Op::Poll,
        _ => return None,
    };
    let key = Key::from_parts(
        ((user_data >> 8) & 0xff_ffff) as u32,
        (user_data >> 32) as u32,
    );
    Some((op, key))
}

/// One connection's socket and buffers.
struct Conn {
    socket: OwnedFd,
    /// The loop's waker; `None` once the transport was dropped (the slot is closing).
    waker: Option<Waker>,
    /// Single-shot fallback only (empty, unallocated, with the pool): the kernel writes here
    /// while `recv_in_flight`. Boxed: it must not move.
    recv: Box<[u8]>,
    /// Received, not yet read: `recv[start..end]`.
    start: usize,
    end: usize,
    /// Pool buffers a multishot receive filled, not yet read, oldest first.
    held: VecDeque<Held>,
    recv_in_flight: bool,
    /// Waiting on the ring's starved list for a buffer to re-arm its receive with.
    starved: bool,
    /// Its receive was cancelled for holding [`HELD_LIMIT`] buffers; the cancellation has
    /// not completed yet.
    pausing: bool,
    /// The peer closed its side.
    eof: bool,
    read_error: Option<io::Error>,
    /// The loop got `WouldBlock` and is owed a wake when data arrives.
    want_read: bool,
    /// Output `write` accepted, in order: the kernel reads its first entries while
    /// `send_in_flight`, and nothing touches those then.
    outbox: Outbox,
    send_in_flight: bool,
    write_error: Option<io::Error>,
    /// A write failure was reported: every later `write` fails too.
    write_failed: bool,
    /// The loop got `Ok(0)` and is owed a wake when there is room.
    want_write: bool,
    /// Closed, and the linger is over: send nothing more.
    given_up: bool,
}

impl Conn {
    fn new(socket: OwnedFd, waker: Waker) -> Conn {
        Conn {
            socket,
            waker: Some(waker),
            recv: Box::default(),
            start: 0,
            end: 0,
            held: VecDeque::new(),
            recv_in_flight: false,
            starved: false,
            pausing: false,
            eof: false,
            read_error: None,
            // The server reads right after attaching; a first wake costs nothing.
            want_read: true,
            outbox: Outbox::default(),
            send_in_flight: false,
            write_error: None,
            write_failed: false,
            want_write: false,
            given_up: false,
        }
    }

    /// Bytes accepted by `write` and not yet taken by the kernel.
    fn queued(&self) -> usize {
        self.outbox.queued()
    }

    /// Nothing in flight and the transport gone: the slot may be freed.
    fn finished(&self) -> bool {
        self.waker.is_none() && !self.recv_in_flight && !self.send_in_flight
    }

    fn wake(&self) {
        if let Some(waker) = &self.waker {
            waker.wake_by_ref();
        }
    }

    /// Open, nothing armed, nothing stopping a receive, and room for what it brings: the
    /// pool's buffers under [`HELD_LIMIT`], its own buffer (the fallback's) read out.
    fn may_arm_recv(&self) -> bool {
        self.waker.is_some()
            && !self.recv_in_flight
            && !self.starved
            && !self.eof
            && self.read_error.is_none()
            && self.held.len() < HELD_LIMIT
            && self.start == self.end
    }
}

/// Bytes a multishot receive put in pool buffer `bid`, of which `read` took the first
/// `taken`.
struct Held {
    bid: u16,
    len: u32,
    taken: u32,
}

/// How often the multishot receives had to be armed again (see "Receiving" in the module
/// docs). A receive armed once per connection shows as all zeros.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct RecvStats {
    /// Receives ended by an empty pool (`ENOBUFS`).
    exhausted: u64,
    /// Receives cancelled for a connection holding [`HELD_LIMIT`] buffers.
    paused: u64,
    /// Receives armed again on an open connection, for any of the reasons.
    rearmed: u64,
}

/// One listening socket and the connections it accepted for `poll_accept`.
struct Listener {
    socket: TcpListener,
    /// The acceptor's waker; `None` once it was dropped (the slot is closing).
    waker: Option<Waker>,
    accept_in_flight: bool,
    /// Accepted (or failed) and not yet taken by `poll_accept`, with their peers' addresses.
    queue: VecDeque<io::Result<(OwnedFd, SocketAddr)>>,
    /// Where the kernel writes the peer's address of the accept in flight. Boxed: it must not
    /// move while the accept flies (the slot itself moves when the slab grows).
    peer: Box<PeerSlot>,
    /// No accept is armed until `poll_accept` drains the queue: it was full, or accept
    /// failed and the server's retry should pace the next attempt.
    paused: bool,
    /// The last accept failed for want of a descriptor: the next one waits for a connection
    /// with a poll first (an accept would fail at once, waiting or not).
    starved: bool,
    poll_in_flight: bool,
}

/// An accept's address buffer and its length, filled in by the kernel.
struct PeerSlot {
    storage: SockAddrStorage,
    len: socklen_t,
}

impl PeerSlot {
    fn new() -> PeerSlot {
        PeerSlot {
            storage: SockAddrStorage::zeroed(),
            len: 0,
        }
    }

    /// Makes room for the next accept's address; the pointers to hand the kernel.
    fn arm(&mut self) -> (*mut libc::sockaddr, *mut socklen_t) {
        self.storage = SockAddrStorage::zeroed();
        self.len = self.storage.size_of();
        (
            (&raw mut self.storage).cast::<libc::sockaddr>(),
            &raw mut self.len,
        )
    }

    /// The address the kernel wrote for the accept that completed (`None`: not an IP peer,
    /// which a TCP listener never has).
    fn take(&mut self) -> Option<SocketAddr> {
        let storage = mem::replace(&mut self.storage, SockAddrStorage::zeroed());
        // SAFETY: the kernel wrote an address of the family it names and set `len` to its
        // length (the storage was zeroed before, so a short write leaves no garbage).
        unsafe { SockAddr::new(storage, self.len) }.as_socket()
    }
}

// ---------------------------------------------------------------------------------------------
// The ring

/// The ring's descriptor, for tokio's reactor (the ring owns it).
struct RingFd(RawFd);

impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

thread_local! {
    /// The loop thread's ring, while anything uses it.
    static THREAD_RING: RefCell<Weak<RefCell<Ring>>> = const { RefCell::new(Weak::new()) };
}

/// Held by the driver task: when the task ends, or is dropped with its runtime, the thread
/// no longer offers its ring (a ring whose driver is gone would never complete anything), and
/// the next `listen` creates another.
struct ForgetRing(Weak<RefCell<Ring>>);

impl Drop for ForgetRing {
    fn drop(&mut self) {
        // `try_with`: the thread may be exiting, its thread-locals gone already.
        let _ = THREAD_RING.try_with(|r| {
            let mut current = r.borrow_mut();
            if current.ptr_eq(&self.0) {
                *current = Weak::new();
            }
        });
    }
}

struct Ring {
    /// Declared first, so dropped first: deregistered before the ring's descriptor closes.
    /// tokio's reactor watches the ring for the driver task; `None` when the loop drives it.
    readable: Option<AsyncFd<RingFd>>,
    /// The loop thread's reactor watches the ring (see "Who drives the ring" in the module
    /// docs); `None` when the driver task does.
    in_reactor: Option<Registration>,
    uring: IoUring,
    conns: Slab<Conn>,
    listeners: Slab<Listener>,
    /// Receives, sends and accepts pushed and not yet completed (cancellations not counted).
    in_flight: usize,
    /// Completions taken out of the queue to make room for a submission, not yet handled.
    backlog: Vec<cqueue::Entry>,
    /// The driver task, and whether it was woken since it last ran.
    driver: Option<Waker>,
    driver_woken: bool,
    /// Closed connections still sending, oldest first, with their deadlines.
    lingering: VecDeque<(Instant, Key)>,
    linger_timer: Pin<Box<Sleep>>,
    /// Loop-driven: the deadline the last loop timer started for a lingering connection is
    /// due at (the loop then turns its reactor, which drives the ring).
    linger_wake: Option<Instant>,
    /// The ring failed (see "A dead ring" in the module docs): why, as every socket on it is
    /// told.
    dead: Option<BackendFailed>,
    /// Driver runs so far (a dead ring must not add to them in a spin).
    runs: u64,
    /// The receive buffers the connections share; `None`: the kernel refused them, and each
    /// connection receives into its own buffer, one single-shot receive per packet.
    pool: Option<Pool>,
    /// The kernel took the pool but not a multishot receive (`EINVAL`, before Linux 6.0):
    /// receives are single-shot from then on.
    multishot_refused: bool,
    /// A multishot receive has brought data on this ring (so a later `EINVAL` is not the
    /// kernel refusing the operation).
    multishot_works: bool,
    /// Connections whose receive ran out of pool buffers, oldest first, each re-armed when a
    /// buffer comes back (an entry whose connection is gone or no longer starved is skipped).
    starved: VecDeque<Key>,
    recv_stats: RecvStats,
    /// Tests: entries queued so far.
    #[cfg(test)]
    pushed: u64,
    /// Tests: connections whose receive is a stand-in to be answered `EINVAL`
    /// (`REFUSE_MULTISHOT`).
    #[cfg(test)]
    refused: Vec<Key>,
    /// Tests: when each connection slot was freed.
    #[cfg(test)]
    freed: Vec<Instant>,
}

type SharedRing = Rc<RefCell<Ring>>;

impl Ring {
    /// The ring of the loop thread, created (with its driver) if there is none: on a thread
    /// that runs an event loop, driven by the loop's reactor; elsewhere by a task of tokio's.
    fn for_this_thread() -> io::Result<SharedRing> {
        if let Some(ring) = THREAD_RING.with(|r| r.borrow().upgrade()) {
            return Ok(ring);
        }
        if crate::runtime::LoopContext::try_current().is_some() {
            return Ring::driven_by_the_loop();
        }
        let ring = Rc::new(RefCell::new(Ring::new(true)?));
        THREAD_RING.with(|r| *r.borrow_mut() = Rc::downgrade(&ring));
        let driven = Rc::clone(&ring);
        let forget = ForgetRing(Rc::downgrade(&ring));
        tokio::task::spawn_local(async move {
            let _forget = forget;
            while poll_fn(|cx| Ring::drive(&driven, cx)).await {
                // Work is left. `yield_now` defers this task's wake until tokio has polled its
                // reactor, which also wakes a loop that yielded with work pending: so the loop
                // (the runtime's `block_on` future) iterates, timers first, between two
                // batches. A plain self-wake would not do: tokio polls `block_on` only when its
                // run queue is empty (or every 61 tasks), and the driver would keep it full.
                tokio::task::yield_now().await;
            }
        });
        Ok(ring)
    }

    /// A ring the loop thread's reactor drives (see "Who drives the ring" in the module docs):
    /// its descriptor registered there, the ring installed as the reactor's driver.
    fn driven_by_the_loop() -> io::Result<SharedRing> {
        let reactor = Reactor::for_this_thread()?;
        let ring = Rc::new(RefCell::new(Ring::new(false)?));
        let fd = ring.borrow().uring.as_raw_fd();
        // The waker has nothing to do: the turn that sees the ring's event drives it.
        let registration = reactor.register(fd, Waker::noop().clone())?;
        ring.borrow_mut().in_reactor = Some(registration);
        let driver: Rc<dyn Driver> = Rc::new(LoopDriver(Rc::clone(&ring)));
        reactor.set_driver(driver);
        THREAD_RING.with(|r| *r.borrow_mut() = Rc::downgrade(&ring));
        Ok(ring)
    }

    /// A ring, watched by tokio's reactor if `in_tokio` (else its creator registers it).
    fn new(in_tokio: bool) -> io::Result<Ring> {
        let uring = Ring::build_uring()?;
        let pool = Ring::register_pool(&uring);
        let readable = if in_tokio {
            let fd = RingFd(uring.as_raw_fd());
            // SAFETY: the descriptor stays open while the `AsyncFd` exists: `readable` is
            // dropped before `uring`, which owns it (field order of `Ring`).
            Some(unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }?)
        } else {
            None
        };
        Ok(Ring {
            readable,
            in_reactor: None,
            uring,
            conns: Slab::new(),
            listeners: Slab::new(),
            in_flight: 0,
            backlog: Vec::new(),
            driver: None,
            driver_woken: false,
            lingering: VecDeque::new(),
            linger_timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            linger_wake: None,
            dead: None,
            runs: 0,
            pool,
            multishot_refused: false,
            multishot_works: false,
            starved: VecDeque::new(),
            recv_stats: RecvStats::default(),
            #[cfg(test)]
            pushed: 0,
            #[cfg(test)]
            refused: Vec::new(),
            #[cfg(test)]
            freed: Vec::new(),
        })
    }

    /// The receive pool, or `None` (with a warning saying so) where the kernel refuses it.
    fn register_pool(uring: &IoUring) -> Option<Pool> {
        #[cfg(not(test))]
        let registered = Pool::register(uring, pool::BUFFERS, pool::BUFFER_SIZE);
        #[cfg(test)]
        let registered = match NEXT_POOL.with(std::cell::Cell::take) {
            None => Pool::register(uring, pool::BUFFERS, pool::BUFFER_SIZE),
            Some(Some((count, size))) => Pool::register(uring, count, size),
            Some(None) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        };
        match registered {
            Ok(pool) => Some(pool),
            Err(e) => {
                tracing::warn!(
                    "io_uring: the kernel refused a provided-buffer ring ({e}; Linux 5.19 or \
                     later needed): each connection receives into a {RECV_BUFFER}-byte buffer \
                     of its own, one receive submitted per packet"
                );
                None
            }
        }
    }

    /// Receives are multishot, into the pool (else single-shot, into each connection's own
    /// buffer).
    fn pooled(&self) -> bool {
        self.pool.is_some() && !self.multishot_refused
    }

    /// A ring that does not interrupt the loop thread to complete an operation
    /// (`COOP_TASKRUN`, Linux 5.19): the kernel finishes receives when the thread next
    /// enters it, in a batch, instead of sending it an interrupt per socket that became
    /// readable, which cost about a fifth of the round trips in the 1000-client ping test.
    /// Older kernels refuse the flag (EINVAL) and get a plain ring.
    fn build_uring() -> io::Result<IoUring> {
        let mut builder = IoUring::builder();
        builder.setup_cqsize(CQ_ENTRIES).setup_clamp();
        let cooperative = builder.clone().setup_coop_taskrun().build(SQ_ENTRIES);
        match cooperative {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => builder.build(SQ_ENTRIES),
            other => other,
        }
        .map_err(explain_setup_error)
    }

    /// The driver task's body: one bounded pass (see [`Ring::run`]). `Ready(true)` when it left
    /// work for the next pass, `Ready(false)` once nothing uses the ring and nothing is in
    /// flight, `Pending` (woken by the reactor, a push or the linger timer) otherwise.
    fn drive(ring: &SharedRing, cx: &mut Context<'_>) -> Poll<bool> {
        let (more, idle, dead) = {
            let mut this = ring.borrow_mut();
            let more = this.run(cx);
            (
                more,
                this.in_flight == 0 && this.uring.submission().is_empty(),
                this.dead.is_some(),
            )
        };
        if dead {
            // The ring may have died inside this very run, which then reported `more` and
            // left `driver_woken` set: clear it, or the pushes that follow (each socket
            // going) would not wake this task to see the last one go.
            ring.borrow_mut().driver_woken = false;
            // A later `listen` on this thread gets a fresh ring, not this one.
            forget_ring(ring);
            // Nothing will complete: end once the last socket on it is gone.
            return match Rc::strong_count(ring) {
                1 => Poll::Ready(false),
                _ => Poll::Pending,
            };
        }
        if more {
            Poll::Ready(true)
        } else if idle && Rc::strong_count(ring) == 1 {
            Poll::Ready(false)
        } else {
            Poll::Pending
        }
    }

    /// Completes what the kernel finished, submits one batch, and completes what that batch
    /// finished at once (sends to sockets with room complete inside the submit). True if
    /// entries or completions are left for the next pass.
    fn run(&mut self, cx: &mut Context<'_>) -> bool {
        self.runs += 1;
        // Work queued while this runs is submitted by this run or the next: no wake needed.
        self.driver_woken = true;
        if !self
            .driver
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            self.driver = Some(cx.waker().clone());
        }
        // Readiness first, then the queue: a completion after the drain is a new edge.
        if let Some(readable) = &self.readable {
            while let Poll::Ready(Ok(mut guard)) = readable.poll_read_ready(cx) {
                guard.clear_ready();
            }
        }
        if self.dead.is_some() {
            // Nothing more is submitted; the driver waits (woken only by a push) for the last
            // socket to go.
            self.driver_woken = false;
            return false;
        }
        self.expire_lingering(Some(cx));
        let more = self.pass(true).more;
        // With more, the task runs again without being woken: pushes need not wake it.
        self.driver_woken = more;
        more
    }

    /// One bounded pass of either driver: completes what the kernel finished and, if
    /// `submit`, submits one batch and completes what that batch finished at once (sends to
    /// sockets with room complete inside the submit).
    fn pass(&mut self, submit: bool) -> Pass {
        let mut completed = self.complete_all();
        if submit && self.submit_batch() {
            completed |= self.complete_all();
        }
        Pass {
            completed,
            more: self.has_completions() || !self.uring.submission().is_empty(),
        }
    }

    /// Wakes the driver (once per run): there is work to submit.
    fn kick(&mut self) {
        if !self.driver_woken {
            self.driver_woken = true;
            if let Some(driver) = &self.driver {
                driver.wake_by_ref();
            }
        }
    }

    fn has_completions(&mut self) -> bool {
        !self.backlog.is_empty() || !self.uring.completion().is_empty()
    }

    /// Hands up to [`SUBMIT_BATCH`] queued entries to the kernel. True if there were any. An
    /// error that is not "try again" kills the ring.
    fn submit_batch(&mut self) -> bool {
        if self.uring.submission().is_empty() {
            return false;
        }
        if let Err(e) = self.enter_batch_or_make_room() {
            self.die(&e);
        }
        true
    }

    /// Marks the ring dead after `io_uring_enter` failed with `e` (see "A dead ring" in the
    /// module docs): every socket on it fails with the reason, which is logged once and
    /// reported to the loop. Returns the error the sockets get.
    fn die(&mut self, e: &io::Error) -> io::Error {
        if let Some(dead) = &self.dead {
            return dead.to_io();
        }
        let failed = BackendFailed(format!("io_uring ring failed: io_uring_enter: {e}"));
        let mut closing = 0;
        for conn in self.conns.values_mut() {
            if conn.waker.is_some() {
                closing += 1;
                conn.read_error = Some(failed.to_io());
                conn.wake();
            }
        }
        for listener in self.listeners.values_mut() {
            if let Some(waker) = &listener.waker {
                listener.queue.push_back(Err(failed.to_io()));
                listener.paused = true;
                waker.wake_by_ref();
            }
        }
        tracing::error!(
            connections = closing,
            listeners = self.listeners.len(),
            "{failed}: its connections close and nothing more is submitted to it"
        );
        let error = failed.to_io();
        self.dead = Some(failed.clone());
        crate::runtime::report_fault(failed.0);
        error
    }

    /// [`Ring::enter_batch`], taking a full completion queue (EBUSY), a kernel short of memory
    /// for a moment (EAGAIN) and a signal (EINTR) as "try again": completions are moved to the
    /// backlog to make room. An error is a real failure.
    fn enter_batch_or_make_room(&mut self) -> io::Result<()> {
        match self.enter_batch() {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EBUSY | libc::EAGAIN | libc::EINTR)
                ) =>
            {
                self.move_completions_to_backlog();
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// `io_uring_enter` for the oldest [`SUBMIT_BATCH`] queued entries; the rest stay queued,
    /// in order, for the next call. Asks for completions too when the completion queue has
    /// overflowed, so the kernel flushes its overflow list.
    fn enter_batch(&mut self) -> io::Result<usize> {
        if let Some(errno) = FAIL_NEXT_ENTER.with(std::cell::Cell::take) {
            return Err(io::Error::from_raw_os_error(errno));
        }
        let queue = self.uring.submission(); // reads the kernel's head: what is still queued
        let to_submit = u32::try_from(queue.len()).map_or(SUBMIT_BATCH, |n| n.min(SUBMIT_BATCH));
        let flags = if queue.cq_overflow() {
            IORING_ENTER_GETEVENTS
        } else {
            0
        };
        drop(queue);
        // SAFETY: no argument is passed, and every queued entry's buffers are kept alive by
        // the module's first invariant.
        unsafe {
            self.uring
                .submitter()
                .enter::<libc::sigset_t>(to_submit, 0, flags, None)
        }
    }

    /// Queues `entry` for the next submit. When the queue is full, a batch is submitted on the
    /// spot to make room, [`PUSH_ATTEMPTS`] times at most. An error means the entry was not
    /// queued: the queue stayed full, or the ring is dead (or died submitting); the caller
    /// undoes what it armed.
    ///
    /// # Safety
    ///
    /// Every buffer `entry` points to must stay valid, and unmoved, until its completion has
    /// been handled (the module's first invariant).
    unsafe fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        if let Some(dead) = &self.dead {
            let error = dead.to_io();
            // The driver ends the ring once the last socket is gone: let it look.
            self.kick();
            return Err(error);
        }
        for _ in 0..PUSH_ATTEMPTS {
            // SAFETY: the caller guarantees the buffers outlive the operation.
            if unsafe { self.uring.submission().push(entry) }.is_ok() {
                #[cfg(test)]
                {
                    self.pushed += 1;
                }
                self.kick();
                return Ok(());
            }
            if let Err(e) = self.enter_batch_or_make_room() {
                return Err(self.die(&e));
            }
        }
        Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!(
                "the io_uring submission queue is full ({SQ_ENTRIES} entries) and the kernel \
                 took none of it in {PUSH_ATTEMPTS} tries"
            ),
        ))
    }

    /// Takes completions out of the kernel's queue without handling them (a push may not
    /// touch connections: its caller is in the middle of changing one).
    fn move_completions_to_backlog(&mut self) {
        self.backlog.extend(self.uring.completion());
    }

    /// Handles every completion. True if there were any.
    ///
    /// A handler that re-arms (an accept, a send) pushes, and a push on a full submission
    /// queue may move completions to the backlog to make room: each round takes the backlog
    /// again before the queue, so those are handled too, in the order the kernel gave them.
    /// Dropping one would leave its operation in flight forever (a listener that never
    /// accepts again, a slot never freed).
    fn complete_all(&mut self) -> bool {
        let mut any = false;
        let mut batch = mem::take(&mut self.backlog);
        loop {
            batch.append(&mut self.backlog);
            batch.extend(self.uring.completion());
            if batch.is_empty() {
                break;
            }
            any = true;
            for entry in batch.drain(..) {
                self.complete(entry.user_data(), entry.result(), entry.flags());
            }
        }
        // Both empty now (the last round took the backlog and found nothing): keep the
        // batch's allocation.
        self.backlog = batch;
        any
    }

    fn complete(&mut self, user_data: u64, result: i32, flags: u32) {
        let Some((op, key)) = decode(user_data) else {
            debug_assert!(false, "unknown user_data {user_data:#x}");
            return;
        };
        if op == Op::Cancel {
            return;
        }
        // A multishot receive's completions but the last say more are coming.
        if !cqueue::more(flags) {
            self.in_flight -= 1;
        }
        #[cfg(test)]
        let result = match self
            .refused
            .iter()
            .position(|&k| op == Op::Recv && k == key)
        {
            Some(i) => {
                self.refused.swap_remove(i);
                -libc::EINVAL
            }
            None => result,
        };
        let found = match op {
            Op::Recv => self.received(key, result, flags),
            Op::Send => self.sent(key, result),
            Op::Accept => self.accepted(key, result),
            Op::Poll => self.polled(key),
            Op::Cancel => unreachable!(),
        };
        debug_assert!(found, "a stale completion: {op:?} for {key:?}");
    }

    /// Arms a cancellation of the operation `op` on `key`. When it cannot be queued, the
    /// socket is shut down instead, which completes whatever is in flight on it just as well.
    fn cancel(&mut self, op: Op, key: Key) {
        let entry = opcode::AsyncCancel::new(user_data(op, key))
            .build()
            .user_data(user_data(Op::Cancel, key));
        // SAFETY: a cancellation points to no buffer.
        if unsafe { self.push(&entry) }.is_ok() {
            return;
        }
        let socket = match op {
            Op::Accept | Op::Poll => self
                .listeners
                .get_mut(key)
                .map(|l| SockRef::from(&l.socket)),
            _ => self.conns.get_mut(key).map(|c| SockRef::from(&c.socket)),
        };
        if let Some(socket) = socket {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// Makes the thread forget `ring` if it is the one it offers.
fn forget_ring(ring: &SharedRing) {
    let _ = THREAD_RING.try_with(|r| {
        let mut current = r.borrow_mut();
        if std::ptr::eq(current.as_ptr(), Rc::as_ptr(ring)) {
            *current = Weak::new();
        }
    });
}

impl Drop for Ring {
    /// Gives back no buffer the kernel may still use (see [`Ring::quiesce`]); leaks what is
    /// still unanswered.
    fn drop(&mut self) {
        let RecvStats {
            exhausted,
            paused,
            rearmed,
        } = self.recv_stats;
        tracing::debug!(
            exhausted,
            paused,
            rearmed,
            "io_uring ring closed; its receives ran out of buffers, were paused and re-armed \
             this often"
        );
        if !self.quiesce() {
            tracing::warn!(
                in_flight = self.in_flight,
                "io_uring operations outlived their ring; leaking their buffers"
            );
            mem::forget(mem::replace(&mut self.conns, Slab::new()));
            mem::forget(mem::replace(&mut self.listeners, Slab::new()));
            mem::forget(self.pool.take());
        } else if self.pool.is_some() {
            // Nothing is in flight: the kernel lets go of the pool before its memory goes.
            // Failing, the ring's descriptor (closed right after) lets go of it too.
            let _ = self.uring.submitter().unregister_buf_ring(pool::GROUP);
        }
    }
}

impl Ring {
    /// Ends everything in flight: shuts every socket down (which completes whatever is in
    /// flight on it) and waits up to [`DROP_WAIT`] for those completions, without handling
    /// them. True if nothing is in flight any more.
    fn quiesce(&mut self) -> bool {
        if self.in_flight == 0 {
            return true;
        }
        for conn in self.conns.values_mut() {
            let _ = SockRef::from(&conn.socket).shutdown(Shutdown::Both);
        }
        for listener in self.listeners.values_mut() {
            let _ = SockRef::from(&listener.socket).shutdown(Shutdown::Both);
        }
        if self.dead.is_some() {
            return false; // it would answer nothing: no point waiting
        }
        let deadline = std::time::Instant::now() + DROP_WAIT;
        let mut done: Vec<cqueue::Entry> = mem::take(&mut self.backlog);
        loop {
            for entry in done.drain(..) {
                if decode(entry.user_data()).is_some_and(|(op, _)| op != Op::Cancel)
                    && !cqueue::more(entry.flags())
                {
                    self.in_flight -= 1;
                }
            }
            if self.in_flight == 0 || std::time::Instant::now() >= deadline {
                return self.in_flight == 0;
            }
            self.wait_a_little();
            done.extend(self.uring.completion());
        }
    }

    /// Submits and waits up to 10 ms for a completion.
    fn wait_a_little(&mut self) {
        const WAIT: Duration = Duration::from_millis(10);
        if self.uring.params().is_feature_ext_arg() {
            let wait = types::Timespec::from(WAIT);
            let args = types::SubmitArgs::new().timespec(&wait);
            let _ = self.uring.submitter().submit_with_args(1, &args);
        } else {
            let _ = self.uring.submit();
            std::thread::sleep(WAIT);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Accepting

impl Ring {
    fn add_listener(&mut self, socket: TcpListener, waker: Waker) -> Key {
        let key = insert(
            &mut self.listeners,
            Listener {
                socket,
                waker: Some(waker),
                accept_in_flight: false,
                queue: VecDeque::new(),
                peer: Box::new(PeerSlot::new()),
                paused: false,
                starved: false,
                poll_in_flight: false,
            },
        );
        self.arm_accept(key);
        key
    }

    fn arm_accept(&mut self, key: Key) {
        let Some(listener) = self.listeners.get_mut(key) else {
            return;
        };
        if listener.accept_in_flight || listener.poll_in_flight {
            // Armed already: a ring that died pauses its listeners with their accept still
            // in flight, and the server's retry comes here before that accept completes; or
            // waiting for a connection to shed.
            return;
        }
        if listener.starved {
            self.arm_poll(key);
            return;
        }
        listener.accept_in_flight = true;
        let fd = types::Fd(listener.socket.as_raw_fd());
        // The peer's address comes with the connection: the server screens it before anything
        // else is done for the connection, and no getpeername is needed.
        let (addr, len) = listener.peer.arm();
        let entry = opcode::Accept::new(fd, addr, len)
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(user_data(Op::Accept, key));
        self.in_flight += 1;
        // SAFETY: the address buffer is boxed in the listener's slot and untouched while the
        // accept is in flight; the listening socket lives in the same slot, which is not freed
        // while the accept is in flight.
        if let Err(e) = unsafe { self.push(&entry) } {
            self.not_armed(key, e);
        }
    }

    /// The accept or poll just counted in flight for `key` could not be queued: nothing is in
    /// flight for the listener, which is paused; the acceptor gets `e`, and the server
    /// retries on its timer.
    fn not_armed(&mut self, key: Key, e: io::Error) {
        self.in_flight -= 1;
        let Some(listener) = self.listeners.get_mut(key) else {
            return;
        };
        listener.accept_in_flight = false;
        listener.poll_in_flight = false;
        listener.paused = true;
        listener.queue.push_back(Err(e));
        if let Some(waker) = &listener.waker {
            waker.wake_by_ref();
        }
    }

    /// Out of descriptors: waits for a connection to come (the listener readable), as epoll
    /// does, instead of an accept that would fail at once. The connection is then accepted,
    /// or shed by the server if descriptors are still short.
    fn arm_poll(&mut self, key: Key) {
        let Some(listener) = self.listeners.get_mut(key) else {
            return;
        };
        listener.poll_in_flight = true;
        let fd = types::Fd(listener.socket.as_raw_fd());
        let entry = opcode::PollAdd::new(fd, libc::POLLIN as u32)
            .build()
            .user_data(user_data(Op::Poll, key));
        self.in_flight += 1;
        // SAFETY: no buffer; the listening socket lives in its slot, which is not freed while
        // the poll is in flight.
        if let Err(e) = unsafe { self.push(&entry) } {
            self.not_armed(key, e);
        }
    }

    /// A connection is waiting (or the poll was cancelled): accept it.
    fn polled(&mut self, key: Key) -> bool {
        let Some(listener) = self.listeners.get_mut(key) else {
            return false;
        };
        listener.poll_in_flight = false;
        if listener.waker.is_none() {
            if !listener.accept_in_flight {
                self.listeners.remove(key);
            }
            return true;
        }
        listener.starved = false;
        self.arm_accept(key);
        true
    }

    fn accepted(&mut self, key: Key, result: i32) -> bool {
        let Some(listener) = self.listeners.get_mut(key) else {
            return false;
        };
        listener.accept_in_flight = false;
        let accepted = if result >= 0 {
            // SAFETY: a successful accept returns a new descriptor that nothing else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(result) })
        } else {
            Err(io::Error::from_raw_os_error(-result))
        };
        let Some(waker) = listener.waker.clone() else {
            drop(accepted); // the acceptor is gone: so is what it accepted
            if !listener.poll_in_flight {
                self.listeners.remove(key);
            }
            return true;
        };
        listener.starved = accepted
            .as_ref()
            .is_err_and(|e| matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)));
        let again = match accepted.map(|socket| (socket, listener.peer.take())) {
            Err(e) if is_transient(&e) => true, // that one connection is gone
            // Not an IP peer: closed (dropped) at once.
            Ok((_, None)) => true,
            Ok((socket, Some(peer))) => {
                // Nothing is done for it here: the server screens its address first.
                listener.queue.push_back(Ok((socket, peer)));
                listener.queue.len() < ACCEPT_QUEUE
            }
            Err(e) => {
                listener.queue.push_back(Err(e));
                false
            }
        };
        // The server drains the queue until `Pending`: only a first entry owes it a wake.
        if listener.queue.len() == 1 {
            waker.wake();
        }
        listener.paused = !again;
        if again {
            self.arm_accept(key);
        }
        true
    }
}

/// An accept error about one connection (reset before it was taken), not the listener.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

struct UringAcceptor {
    ring: SharedRing,
    key: Key,
    local: SocketAddr,
}

impl Acceptor for UringAcceptor {
    fn poll_accept(&mut self, screen: Screen<'_>) -> Poll<io::Result<Accept>> {
        let mut ring = self.ring.borrow_mut();
        let listener = ring
            .listeners
            .get_mut(self.key)
            .expect("an acceptor's slot");
        match listener.queue.pop_front() {
            Some(Ok((socket, peer))) => {
                if !screen(peer) {
                    drop(socket); // closes it: no receive was armed, nothing set
                    return Poll::Ready(Ok(Accept::Refused));
                }
                let ring = Rc::clone(&self.ring);
                let accepted = Accepted::new(move |waker| attach(ring, socket, waker));
                Poll::Ready(Ok(Accept::Admitted(accepted, peer)))
            }
            Some(Err(e)) => Poll::Ready(Err(e)),
            None => {
                // Drained: a paused listener may go on. After an error this is the server's
                // retry, so a failing accept (out of descriptors) is not retried in a spin.
                if mem::take(&mut listener.paused) {
                    ring.arm_accept(self.key);
                }
                Poll::Pending
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    /// Out of descriptors the ring's accept fails (EMFILE, before it looks at the backlog)
    /// and pauses the listener. With no accept in flight, the listening socket is made
    /// non-blocking for one `accept4` that takes a waiting connection off the backlog and
    /// closes it, as epoll does. The listener then waits for the next connection with a poll,
    /// not a timer (`Ring::arm_poll`): one that comes is accepted, or shed the same way.
    fn shed_one(&mut self) -> bool {
        let ring = self.ring.borrow();
        let Some(listener) = ring.listeners.get(self.key) else {
            return false;
        };
        if listener.accept_in_flight || ring.dead.is_some() {
            return false; // the kernel may be accepting on it: no second accept beside it
        }
        let socket = &listener.socket;
        if socket.set_nonblocking(true).is_err() {
            return false;
        }
        let shed = accept_and_close(socket.as_raw_fd());
        // Blocking again, as the ring's accepts want it (see `Uring::listen`).
        let _ = socket.set_nonblocking(false);
        drop(ring);
        if !shed {
            // None waiting: wait for the next with a poll now, not after the server's retry.
            let mut ring = self.ring.borrow_mut();
            if let Some(listener) = ring.listeners.get_mut(self.key)
                && listener.queue.is_empty()
            {
                listener.paused = false;
                listener.starved = true;
                ring.arm_accept(self.key);
            }
        }
        shed
    }
}

impl Drop for UringAcceptor {
    fn drop(&mut self) {
        let mut ring = self.ring.borrow_mut();
        let Some(listener) = ring.listeners.get_mut(self.key) else {
            return;
        };
        listener.waker = None;
        listener.queue.clear(); // closes accepted, unclaimed connections
        let (accepting, polling) = (listener.accept_in_flight, listener.poll_in_flight);
        if !accepting && !polling {
            ring.listeners.remove(self.key);
            return;
        }
        // Refuses new connections at once; what is in flight completes (EINVAL, or
        // cancelled) and the slot goes with the last of it.
        let _ = SockRef::from(&listener.socket).shutdown(Shutdown::Both);
        if accepting {
            ring.cancel(Op::Accept, self.key);
        }
        if polling {
            ring.cancel(Op::Poll, self.key);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Connections

fn attach(ring: SharedRing, socket: OwnedFd, waker: Waker) -> Box<dyn Transport> {
    let key = {
        let mut this = ring.borrow_mut();
        let key = insert(&mut this.conns, Conn::new(socket, waker));
        this.arm_recv(key);
        key
    };
    Box::new(UringConn { ring, key })
}

impl Ring {
    /// Arms `key`'s receive: multishot into the pool, or single-shot into its own buffer.
    fn arm_recv(&mut self, key: Key) {
        let pooled = self.pooled();
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        debug_assert!(conn.may_arm_recv());
        conn.recv_in_flight = true;
        let fd = types::Fd(conn.socket.as_raw_fd());
        let entry = if pooled {
            opcode::RecvMulti::new(fd, pool::GROUP).build()
        } else {
            if conn.recv.is_empty() {
                conn.recv = vec![0; RECV_BUFFER].into_boxed_slice();
            }
            conn.start = 0;
            conn.end = 0;
            opcode::Recv::new(fd, conn.recv.as_mut_ptr(), conn.recv.len() as u32).build()
        }
        .user_data(user_data(Op::Recv, key));
        #[cfg(test)]
        let entry = if pooled && REFUSE_MULTISHOT.with(std::cell::Cell::get) {
            self.refused.push(key);
            opcode::Nop::new()
                .build()
                .user_data(user_data(Op::Recv, key))
        } else {
            entry
        };
        self.in_flight += 1;
        // SAFETY: a multishot receive writes only into pool buffers the kernel holds (the
        // pool stays registered until nothing is in flight, or is leaked); a single-shot one
        // into `recv`, a boxed slice in the slot, untouched while `recv_in_flight`. The slot
        // is not freed before the last completion.
        if let Err(e) = unsafe { self.push(&entry) } {
            // Not armed: the next `read` reports the error and the server closes the
            // connection.
            self.in_flight -= 1;
            if let Some(conn) = self.conns.get_mut(key) {
                conn.recv_in_flight = false;
                conn.read_error = Some(e);
                conn.wake();
            }
        }
    }

    /// Arms `key`'s receive again after one ended, if nothing stops it (counted).
    fn rearm_recv(&mut self, key: Key) {
        if self.conns.get(key).is_some_and(Conn::may_arm_recv) {
            self.recv_stats.rearmed += 1;
            self.arm_recv(key);
        }
    }

    /// Arms a send of the outbox's first entries (one `sendmsg`). On an error nothing is in
    /// flight and every later `write` fails: the caller reports it.
    fn arm_send(&mut self, key: Key) -> io::Result<()> {
        let Some(conn) = self.conns.get_mut(key) else {
            return Ok(());
        };
        debug_assert!(!conn.send_in_flight);
        let Some(message) = conn.outbox.arm() else {
            return Ok(());
        };
        conn.send_in_flight = true;
        let entry = opcode::SendMsg::new(types::Fd(conn.socket.as_raw_fd()), message)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(user_data(Op::Send, key));
        self.in_flight += 1;
        // SAFETY: the message header, its iovecs and the bytes they point to (own buffers and
        // shared frames the outbox holds a reference to) neither move, change nor go away
        // while `send_in_flight` (the outbox's rule), and the slot is not freed before the
        // completion.
        let pushed = unsafe { self.push(&entry) };
        if pushed.is_err() {
            self.in_flight -= 1;
            if let Some(conn) = self.conns.get_mut(key) {
                conn.send_in_flight = false;
                conn.write_failed = true;
                conn.outbox.abandon();
                conn.outbox.discard_unsent();
            }
        }
        pushed
    }

    fn received(&mut self, key: Key, result: i32, flags: u32) -> bool {
        let ended = !cqueue::more(flags);
        // A buffer the kernel filled is ours, whatever became of the connection.
        let buffer = cqueue::buffer_select(flags);
        if let (Some(bid), Some(pool)) = (buffer, self.pool.as_mut()) {
            pool.lend(bid);
        }
        let Some(conn) = self.conns.get_mut(key) else {
            self.give_back(buffer);
            return false;
        };
        if ended {
            conn.recv_in_flight = false;
        }
        let paused = ended && mem::take(&mut conn.pausing);
        if conn.waker.is_none() {
            self.give_back(buffer);
            self.free_if_finished(key);
            return true;
        }
        match (result, buffer) {
            (n @ 1.., Some(bid)) => self.hold(key, bid, n as u32, ended),
            (n @ 1.., None) => conn.end = n as usize,
            (0, _) => {
                conn.eof = true;
                self.give_back(buffer);
            }
            (e, _) => {
                self.give_back(buffer);
                self.receive_failed(key, -e, paused);
            }
        }
        if ended && self.pooled() {
            self.rearm_recv(key);
        }
        if let Some(conn) = self.conns.get_mut(key)
            && (conn.eof || conn.read_error.is_some() || mem::take(&mut conn.want_read))
        {
            conn.wake();
        }
        true
    }

    /// `key` holds pool buffer `bid` with `len` bytes received. At [`HELD_LIMIT`] its
    /// receive, still armed, is cancelled: `read` arms it again once there is room.
    fn hold(&mut self, key: Key, bid: u16, len: u32, ended: bool) {
        self.multishot_works = true;
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        conn.held.push_back(Held { bid, len, taken: 0 });
        if !ended && !conn.pausing && conn.held.len() >= HELD_LIMIT {
            conn.pausing = true;
            self.recv_stats.paused += 1;
            self.cancel(Op::Recv, key);
        }
    }

    /// A receive on open connection `key` failed with `errno`; `paused`: `hold` had asked
    /// for it to be cancelled.
    fn receive_failed(&mut self, key: Key, errno: i32, paused: bool) {
        // Every receive armed before the first answer fails so: all fall back.
        let refused = errno == libc::EINVAL && self.pool.is_some() && !self.multishot_works;
        // Buffers given back since the kernel found the pool empty (completions are handled
        // in the kernel's order, so the buffers it had lent are counted already).
        let refilled = self.pool.as_ref().is_some_and(|p| p.lent() < p.count());
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        match errno {
            // The pool had a buffer again by the time this was handled: `received` re-arms.
            libc::ENOBUFS if refilled => self.recv_stats.exhausted += 1,
            // The pool is empty: wait for a buffer to come back (see `feed_starved`).
            libc::ENOBUFS => {
                conn.starved = true;
                self.starved.push_back(key);
                self.recv_stats.exhausted += 1;
                tracing::debug!(
                    times = self.recv_stats.exhausted,
                    waiting = self.starved.len(),
                    held = self.pool.as_ref().map_or(0, Pool::lent),
                    "io_uring: the receive pool ran out of buffers"
                );
            }
            // The cancellation `hold` asked for: `read` re-arms.
            libc::ECANCELED if paused => {}
            libc::EINVAL if refused => {
                // Registered the pool but knows no multishot receive: before Linux 6.0.
                if !mem::replace(&mut self.multishot_refused, true) {
                    tracing::warn!(
                        "io_uring: the kernel refused a multishot receive (EINVAL; Linux 6.0 \
                         or later needed): receives are single-shot, one submitted per packet"
                    );
                }
                self.arm_recv(key);
            }
            errno => conn.read_error = Some(io::Error::from_raw_os_error(errno)),
        }
    }

    /// Returns a buffer a completion handed over (if any) to the pool, and re-arms a starved
    /// receive with it.
    fn give_back(&mut self, buffer: Option<u16>) {
        if let (Some(bid), Some(pool)) = (buffer, self.pool.as_mut()) {
            pool.give_back(bid);
            self.feed_starved(1);
        }
    }

    /// Re-arms up to `buffers` receives that ran out of buffers, oldest first: one per
    /// buffer that came back, so a receive armed finds a buffer (arming them all at once
    /// would fail them all again, in a spin, while the pool is short).
    fn feed_starved(&mut self, mut buffers: usize) {
        while buffers > 0
            && let Some(key) = self.starved.pop_front()
        {
            let Some(conn) = self.conns.get_mut(key) else {
                continue; // gone
            };
            if !mem::take(&mut conn.starved) {
                continue;
            }
            if conn.may_arm_recv() {
                buffers -= 1;
                self.recv_stats.rearmed += 1;
                self.arm_recv(key);
            }
        }
    }

    /// Moves up to `max` bytes `key` received into `buf`: from the pool buffers it holds
    /// (each given back once read out), then from its own buffer; re-arms its receive if it
    /// ended for want of room. How many bytes.
    fn take_received(&mut self, key: Key, buf: &mut Vec<u8>, max: usize) -> usize {
        let Some(conn) = self.conns.get_mut(key) else {
            return 0;
        };
        let mut n = 0;
        let mut returned = 0;
        while n < max
            && let Some(front) = conn.held.front_mut()
        {
            let pool = self.pool.as_mut().expect("held buffers come from the pool");
            let bytes = &pool.bytes(front.bid, front.len as usize)[front.taken as usize..];
            let take = bytes.len().min(max - n);
            buf.extend_from_slice(&bytes[..take]);
            n += take;
            front.taken += take as u32;
            if front.taken == front.len {
                pool.give_back(front.bid);
                conn.held.pop_front();
                returned += 1;
            }
        }
        if n < max && conn.start < conn.end {
            let take = (max - n).min(conn.end - conn.start);
            buf.extend_from_slice(&conn.recv[conn.start..conn.start + take]);
            conn.start += take;
            n += take;
        }
        let pooled = self.pooled();
        self.feed_starved(returned);
        if n > 0 && self.conns.get(key).is_some_and(Conn::may_arm_recv) {
            if pooled {
                self.rearm_recv(key);
            } else {
                self.arm_recv(key); // the fallback's next single-shot receive
            }
        }
        n
    }

    fn sent(&mut self, key: Key, result: i32) -> bool {
        let Some(conn) = self.conns.get_mut(key) else {
            return false;
        };
        conn.send_in_flight = false;
        if result < 0 {
            // Nothing more goes out on this connection.
            conn.write_error = Some(io::Error::from_raw_os_error(-result));
            conn.outbox.abandon();
            conn.outbox.discard_unsent();
            conn.wake();
            self.free_if_finished(key);
            return true;
        }
        conn.outbox.sent(result as usize);
        if conn.given_up {
            self.free_if_finished(key);
            return true;
        }
        let more = !conn.outbox.is_empty();
        if conn.queued() < OUTBOX_LIMIT && mem::take(&mut conn.want_write) {
            conn.wake();
        }
        if more {
            if let Err(e) = self.arm_send(key) {
                self.fail_write(key, e);
            }
        } else {
            self.free_if_finished(key);
        }
        true
    }

    /// A send could not be armed: the next `write` reports `e` (a closed connection's slot
    /// goes, as nothing is in flight for it any more).
    fn fail_write(&mut self, key: Key, e: io::Error) {
        if let Some(conn) = self.conns.get_mut(key) {
            conn.write_error = Some(e);
            conn.wake();
        }
        self.free_if_finished(key);
    }

    /// Frees a closed connection's slot (closing its socket) once nothing is in flight.
    fn free_if_finished(&mut self, key: Key) {
        if self.conns.get_mut(key).is_some_and(|conn| conn.finished()) {
            self.conns.remove(key);
            #[cfg(test)]
            self.freed.push(Instant::now());
        }
    }

    /// Closes the transport's side of `key`: the receive is cancelled at once, output already
    /// accepted may still go out for [`LINGER`].
    fn close_conn(&mut self, key: Key) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        conn.waker = None;
        let (receiving, sending) = (conn.recv_in_flight, conn.send_in_flight);
        let discarded = conn.given_up;
        // Nobody will read them: back to the pool, for the connections that will.
        for held in mem::take(&mut conn.held) {
            self.give_back(Some(held.bid));
        }
        if receiving {
            self.cancel(Op::Recv, key);
        }
        if sending && discarded {
            // Its output was discarded (`Transport::discard_output`): no linger.
            self.cancel(Op::Send, key);
        } else if sending {
            let deadline = Instant::now() + LINGER;
            self.lingering.push_back((deadline, key));
            if self.in_reactor.is_some() {
                // Loop-driven: a loop timer, started now, while the iteration that closed it
                // has yet to choose how long to park.
                self.wake_the_loop_at(deadline);
            } else {
                // The driver task arms the linger timer when it runs: make it run, even when
                // nothing else (a receive's cancellation) is submitted for this connection.
                self.kick();
            }
        }
        self.free_if_finished(key);
    }

    /// Gives up on the lingering connections whose time is over. `cx`: the driver task's, whose
    /// timer wakes it at the next deadline; `None` when the loop drives the ring, and a timer
    /// of the loop's wakes it instead (its park then turns the reactor, which drives the ring).
    /// True if a loop timer was started: the loop must choose its park's deadline again.
    fn expire_lingering(&mut self, mut cx: Option<&mut Context<'_>>) -> bool {
        while let Some(&(deadline, key)) = self.lingering.front() {
            if deadline > Instant::now() {
                let Some(cx) = cx.as_deref_mut() else {
                    return self.wake_the_loop_at(deadline);
                };
                if self.linger_timer.deadline() != deadline {
                    self.linger_timer.as_mut().reset(deadline);
                }
                if self.linger_timer.as_mut().poll(cx).is_pending() {
                    return false;
                }
                // The timer says it is due: take it.
            }
            self.lingering.pop_front();
            let Some(conn) = self.conns.get_mut(key) else {
                continue; // done sending, and freed, in time
            };
            conn.given_up = true;
            if conn.send_in_flight {
                self.cancel(Op::Send, key);
            }
        }
        false
    }

    /// Makes sure a loop timer wakes the loop at `deadline` (or before, for an earlier
    /// deadline, whose pass then starts the next timer). True if it started one. Its callback
    /// does nothing: that the loop wakes, and so turns its reactor, is the point.
    fn wake_the_loop_at(&mut self, deadline: Instant) -> bool {
        let pending = self
            .linger_wake
            .is_some_and(|at| at <= deadline && at > Instant::now());
        if pending || crate::runtime::LoopContext::try_current().is_none() {
            return false;
        }
        self.linger_wake = Some(deadline);
        // From the loop's logical now, which a timer counts from, so it is never due early.
        let after = deadline.saturating_duration_since(crate::timer::now());
        let _ = crate::timer::after(after).start(|| {});
        true
    }
}

/// What one pass of a driver did.
struct Pass {
    /// Completions were handled (their wakers raised).
    completed: bool,
    /// Entries or completions are left for the next pass.
    more: bool,
}

/// The loop's reactor's hold on its thread's ring (see "Who drives the ring" in the module
/// docs): each turn of the reactor drives the ring one pass.
struct LoopDriver(SharedRing);

impl Driver for LoopDriver {
    fn drive(&self, submit: bool) -> Drove {
        let unused = Rc::strong_count(&self.0) == 1;
        let mut ring = self.0.borrow_mut();
        if ring.dead.is_some() {
            drop(ring);
            // A later `listen` on this thread gets a fresh ring, not this one.
            forget_ring(&self.0);
            // Nothing will complete: it goes once the last socket on it is gone.
            return if unused { Drove::Done } else { Drove::Idle };
        }
        ring.runs += 1;
        let timer_started = ring.expire_lingering(None);
        let pass = ring.pass(submit);
        if pass.completed || pass.more || timer_started {
            Drove::Busy
        } else if unused && ring.in_flight == 0 {
            Drove::Done
        } else {
            Drove::Idle
        }
    }
}

impl Drop for LoopDriver {
    /// The reactor let go (the ring was done, the thread's last loop went, or a new ring's
    /// driver replaced this dead one's): the thread no longer offers this ring, which nothing
    /// would drive now; the next `listen` makes another. Sockets still on this one keep it
    /// until they go.
    fn drop(&mut self) {
        forget_ring(&self.0);
    }
}

/// The loop's handle on a connection. Dropping it closes the connection: the receive stops at
/// once, output `write` accepted still goes out (for at most [`LINGER`]).
struct UringConn {
    ring: SharedRing,
    key: Key,
}

impl Transport for UringConn {
    fn discard_output(&mut self) {
        let mut ring = self.ring.borrow_mut();
        let Some(conn) = ring.conns.get_mut(self.key) else {
            return;
        };
        // Closed with a reset: the kernel drops the socket's send queue at once.
        let _ = SockRef::from(&conn.socket).set_linger(Some(Duration::ZERO));
        // No linger for what `write` accepted: the send in flight is cancelled on close.
        conn.given_up = true;
        conn.outbox.discard_unsent();
    }

    fn read(&mut self, buf: &mut Vec<u8>, max: usize) -> ReadOutcome {
        let mut ring = self.ring.borrow_mut();
        // A receive re-armed here is submitted by the driver before the loop parks.
        let n = ring.take_received(self.key, buf, max);
        if n > 0 {
            return ReadOutcome::Data(n);
        }
        let conn = ring.conns.get_mut(self.key).expect("a transport's slot");
        if let Some(e) = conn.read_error.take() {
            conn.eof = true;
            return ReadOutcome::Failed(e);
        }
        if conn.eof {
            return ReadOutcome::Closed;
        }
        conn.want_read = true;
        ReadOutcome::WouldBlock
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.write_pieces(&mut std::iter::once(Piece::Bytes(data)))
    }

    /// Takes what fits in the outbox: own bytes copied, shared frames by reference (the
    /// kernel reads them from their one buffer).
    fn write_pieces(&mut self, pieces: &mut dyn Iterator<Item = Piece<'_>>) -> io::Result<usize> {
        let mut ring = self.ring.borrow_mut();
        if let Some(dead) = &ring.dead {
            return Err(dead.to_io());
        }
        let conn = ring.conns.get_mut(self.key).expect("a transport's slot");
        if let Some(e) = conn.write_error.take() {
            conn.write_failed = true;
            return Err(e);
        }
        if conn.write_failed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "an earlier write on this connection failed",
            ));
        }
        let room = OUTBOX_LIMIT.saturating_sub(conn.queued());
        let n = conn.outbox.take(pieces, room);
        if n == 0 {
            // Full (a spurious wake, were nothing offered, costs nothing).
            conn.want_write = true;
            return Ok(0);
        }
        if !conn.send_in_flight {
            ring.arm_send(self.key)?; // submitted by the driver before the loop parks
        }
        Ok(n)
    }
}

impl Drop for UringConn {
    fn drop(&mut self) {
        self.ring.borrow_mut().close_conn(self.key);
    }
}

#[cfg(test)]
mod tests;
