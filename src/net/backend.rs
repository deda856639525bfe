//! The seam between the Network phase and the sockets: a connection is a [`Transport`], a
//! listening socket an [`Acceptor`], and readiness comes back through a [`Signal`].
//!
//! Two backends implement it: `epoll` (the loop thread's own reactor, `runtime/reactor.rs`;
//! readiness-based, the phase itself calls `read`/`write`) and `uring` (a raw io_uring;
//! completion-based, the loop thread's reactor drives its ring, moving bytes between the
//! kernel and per-connection buffers). Either way the phase sees the same thing: a
//! non-blocking `read` that either hands over bytes or says "nothing now, I will signal", and
//! a `write` that takes what it can.
//!
//! This module must never parse packets or know about the world.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Wake, Waker};

use super::conn_id::ConnId;
use super::shared::Piece;
use crate::LoopContext;

/// What one `read` did.
#[derive(Debug)]
pub enum ReadOutcome {
    /// Appended this many bytes (> 0) to the buffer.
    Data(usize),
    /// Nothing to read now; the transport signals its token when there is.
    WouldBlock,
    /// The peer closed its side.
    Closed,
    Failed(io::Error),
}

/// One accepted connection, owned by the Network phase. Dropping it closes the socket.
pub trait Transport {
    /// Appends at most `max` bytes to `buf`. Never blocks.
    fn read(&mut self, buf: &mut Vec<u8>, max: usize) -> ReadOutcome;

    /// Takes as much of `data` as the socket (or the backend's in-flight buffer) accepts now;
    /// `Ok(0)` means "full: I will signal when you may write again". Never blocks.
    fn write(&mut self, data: &[u8]) -> io::Result<usize>;

    /// Takes as much as it can of `pieces`, in order, as one write: `Ok(n)` is how many bytes
    /// from the start of their concatenation it took (it may stop inside any piece); `Ok(0)`
    /// means "full: I will signal when you may write again". Never blocks. A transport that
    /// keeps a shared piece past the call keeps a reference to its frames, not a copy.
    ///
    /// The default writes the first piece alone, through [`Transport::write`].
    fn write_pieces(&mut self, pieces: &mut dyn Iterator<Item = Piece<'_>>) -> io::Result<usize> {
        match pieces.next() {
            Some(piece) => self.write(piece.bytes()),
            None => Ok(0),
        }
    }

    /// Makes the close that dropping it does an abortive one: output the peer has not taken
    /// is discarded and the peer gets a reset, so the socket's send buffer is freed at once
    /// instead of being held by the kernel (or a backend's linger) for a peer that is not
    /// reading. For connections closed for their unsent output. Default: nothing.
    fn discard_output(&mut self) {}
}

/// The error a backend hands every socket once it can no longer move bytes for any of them
/// (a dead io_uring ring): its text is the reason the connections close with, and
/// [`BackendFailed::of`] tells it from an error about one socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BackendFailed(pub String);

impl BackendFailed {
    /// As an `io::Error`, for `read`, `write` and `poll_accept` to return (the io_uring
    /// backend's; epoll never fails as a whole).
    #[cfg(any(test, all(target_os = "linux", feature = "io-uring")))]
    #[must_use]
    pub(crate) fn to_io(&self) -> io::Error {
        io::Error::other(self.clone())
    }

    /// The backend failure `e` carries, if it is one.
    #[must_use]
    pub(crate) fn of(e: &io::Error) -> Option<&BackendFailed> {
        e.get_ref()?.downcast_ref()
    }
}

impl std::fmt::Display for BackendFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BackendFailed {}

/// A socket backend: turns bound listeners into acceptors.
pub trait Backend {
    /// `"epoll"` or `"io_uring"`, for logs.
    fn name(&self) -> &'static str;

    /// Takes over a bound, non-blocking listener. The acceptor raises `waker` whenever a
    /// connection may be waiting.
    fn listen(
        &self,
        listener: std::net::TcpListener,
        waker: Waker,
    ) -> io::Result<Box<dyn Acceptor>>;

    /// Output one connection's transport may hold after `write` took it and before the
    /// kernel has, bytes, when the socket is full: counted in the outbound budget with the
    /// kernel's send buffer. 0 (the default): `write` hands bytes straight to the kernel.
    fn transport_output_limit(&self) -> usize {
        0
    }
}

/// Decides, from the peer's address alone, whether a connection just accepted may stay.
pub(crate) type Screen<'a> = &'a mut dyn FnMut(SocketAddr) -> bool;

/// What one accept brought.
pub enum Accept {
    /// A connection the screen let in, and its peer.
    Admitted(Accepted, SocketAddr),
    /// A connection the screen refused: closed already, with nothing done for it but the
    /// accept itself.
    Refused,
}

/// A listening socket in a backend's hands.
pub trait Acceptor {
    /// The next accepted connection, or `Pending` (the acceptor's waker is raised when one
    /// may be waiting). Never blocks.
    ///
    /// `screen` is asked about every connection right after the kernel hands it over, before
    /// any work is done for it: a refused one is closed at once, never registered with the
    /// reactor or the ring, never given a socket option, and nothing is allocated for it.
    fn poll_accept(&mut self, screen: Screen<'_>) -> Poll<io::Result<Accept>>;

    /// The address actually bound (port 0 resolved).
    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// Takes one waiting connection off the backlog and closes it at once, bypassing the
    /// backend's readiness bookkeeping: the server's way out when it is out of descriptors
    /// (it frees a spare one first). False if none was waiting or the backend cannot.
    fn shed_one(&mut self) -> bool;
}

/// Accepts one connection waiting on the non-blocking listening socket `listener` and closes
/// it at once; false if none was waiting (or the accept failed). The way both backends shed
/// a connection when the process is out of descriptors.
pub(crate) fn accept_and_close(listener: std::os::fd::RawFd) -> bool {
    // SAFETY: accept4 on a listening socket the caller owns (open while it runs); null
    // address pointers are allowed and ask for no address.
    let fd = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` was just returned by accept4 and is owned by nothing else; closing it
    // refuses the connection.
    unsafe { libc::close(fd) };
    true
}

/// A connection the acceptor took but the server has not yet given a token: the server calls
/// [`Accepted::attach`] with the waker of the slot it stores the connection in.
pub struct Accepted(Box<dyn FnOnce(Waker) -> Box<dyn Transport>>);

impl Accepted {
    pub fn new(attach: impl FnOnce(Waker) -> Box<dyn Transport> + 'static) -> Accepted {
        Accepted(Box::new(attach))
    }

    /// Starts the connection: from now on it raises `waker` when it becomes readable or
    /// writable again.
    #[must_use]
    pub fn attach(self, waker: Waker) -> Box<dyn Transport> {
        (self.0)(waker)
    }
}

/// Which source became ready. A connection's token is its generational [`ConnId`], so a
/// signal for a connection that has since closed (and whose slot was reused) is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Token {
    Listener(usize),
    Conn(ConnId),
}

/// Readiness flowing back to the loop: a list of tokens that became ready since the Network
/// phase last looked, and a wake of the loop if it is parked.
///
/// Thread-safe because `Waker` must be, but in practice raised on the loop thread itself,
/// by a turn of the loop thread's reactor (which also drives the io_uring ring).
#[derive(Clone)]
pub(crate) struct Signal {
    inner: Arc<SignalInner>,
}

struct SignalInner {
    ready: Mutex<Vec<Token>>,
    wake_loop: LoopContext,
}

impl Signal {
    pub(crate) fn new(wake_loop: LoopContext) -> Signal {
        Signal {
            inner: Arc::new(SignalInner {
                ready: Mutex::new(Vec::new()),
                wake_loop,
            }),
        }
    }

    /// Marks `token` ready and wakes the loop — once per batch: only the first token since
    /// the Network phase last took them wakes it (the others ride along), so a thousand
    /// sockets becoming readable together cost one wake, not a thousand.
    pub(crate) fn raise(&self, token: Token) {
        let first = {
            let mut ready = lock(&self.inner.ready);
            ready.push(token);
            ready.len() == 1
        };
        if first {
            self.inner.wake_loop.wake();
        }
    }

    /// A waker that raises `token`.
    #[must_use]
    pub(crate) fn waker(&self, token: Token) -> Waker {
        Waker::from(Arc::new(TokenWaker {
            signal: self.clone(),
            token,
        }))
    }

    /// Moves every raised token into `out` (in the order raised; duplicates possible).
    pub(crate) fn take(&self, out: &mut Vec<Token>) {
        out.append(&mut lock(&self.inner.ready));
    }
}

struct TokenWaker {
    signal: Signal,
    token: Token,
}

impl Wake for TokenWaker {
    fn wake(self: Arc<Self>) {
        self.signal.raise(self.token);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.signal.raise(self.token);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A token list stays valid whatever a panicking holder did.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
