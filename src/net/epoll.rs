//! The epoll backend: tokio's reactor, readiness-based.
//!
//! The Network phase calls `read`/`write` directly on the socket (`try_read`/`try_write`);
//! when the kernel has nothing more, the connection's waker is registered with tokio's reactor
//! and raised on the next readiness edge. No task per connection, no copy beyond the one into
//! the phase's buffer. Works on every platform tokio supports; always compiled in.
//!
//! Must never block or spawn: everything happens inside the phase that calls it.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::task::{Context, Poll, Waker};

use socket2::SockAddr;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;

use super::backend::{
    Accept, Accepted, Acceptor, Backend, ReadOutcome, Screen, Transport, accept_and_close,
};
use super::shared::Piece;

/// Pieces handed to one `writev`: a connection's output rarely has more queued (a reply, an
/// iteration's shared groups); what is left goes in the next call.
const IOV_BATCH: usize = 32;

/// tokio's epoll reactor.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Epoll;

impl Backend for Epoll {
    fn name(&self) -> &'static str {
        "epoll"
    }

    fn listen(
        &self,
        listener: std::net::TcpListener,
        waker: Waker,
    ) -> io::Result<Box<dyn Acceptor>> {
        // SAFETY: the listener owns its descriptor, which stays open (and the same) for as
        // long as the `AsyncFd` owns the listener.
        let listener = unsafe { AsyncFd::register_with_interest(listener, Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(Box::new(EpollAcceptor { listener, waker }))
    }
}

/// The listening socket, registered with tokio's reactor for readiness only: connections are
/// taken with `accept4` directly, so one refused by the screen is closed before tokio, or
/// anything else, has seen it.
struct EpollAcceptor {
    listener: AsyncFd<std::net::TcpListener>,
    waker: Waker,
}

impl Acceptor for EpollAcceptor {
    fn poll_accept(&mut self, screen: Screen<'_>) -> Poll<io::Result<Accept>> {
        let mut cx = Context::from_waker(&self.waker);
        loop {
            let mut ready = match self.listener.poll_read_ready(&mut cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(ready)) => ready,
            };
            // `WouldBlock` clears the readiness; the next poll registers the waker.
            let Ok(accepted) = ready.try_io(|listener| accept(listener.as_raw_fd())) else {
                continue;
            };
            let (socket, peer) = accepted?;
            if !screen(peer) {
                drop(socket); // closes it: nothing else was done for it
                return Poll::Ready(Ok(Accept::Refused));
            }
            // Registered with the reactor only now. TCP_NODELAY came from the listener (Linux
            // copies it to accepted sockets): no socket option per connection.
            let stream = TcpStream::from_std(std::net::TcpStream::from(socket))?;
            let accepted = Accepted::new(move |waker| {
                Box::new(EpollConn { stream, waker }) as Box<dyn Transport>
            });
            return Poll::Ready(Ok(Accept::Admitted(accepted, peer)));
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.get_ref().local_addr()
    }

    fn shed_one(&mut self) -> bool {
        // Straight to the socket: the connection is only to be closed, so there is nothing to
        // register with tokio's reactor, and no readiness bookkeeping to depend on. The socket
        // is non-blocking: an empty backlog is EAGAIN, not a wait.
        accept_and_close(self.listener.as_raw_fd())
    }
}

/// `accept4` on the non-blocking listening socket `listener`: the connection (non-blocking,
/// close-on-exec) and its peer's address, with no allocation and no other system call. A peer
/// that is not an IP address (impossible for a TCP listener) is closed and reported as an
/// aborted connection.
fn accept(listener: RawFd) -> io::Result<(OwnedFd, SocketAddr)> {
    // SAFETY: accept4 writes at most `len` bytes of address into the zeroed storage
    // `try_init` lends it and sets `len` to the address's length, as `try_init` requires.
    let (fd, addr) = unsafe {
        SockAddr::try_init(|storage, len| {
            let fd = libc::accept4(
                listener,
                storage.cast(),
                len,
                libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            );
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(fd)
            }
        })
    }?;
    // SAFETY: a descriptor accept4 just returned, owned by nothing else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    match addr.as_socket() {
        Some(peer) => Ok((socket, peer)),
        None => Err(io::Error::from(io::ErrorKind::ConnectionAborted)),
    }
}

struct EpollConn {
    stream: TcpStream,
    waker: Waker,
}

impl Transport for EpollConn {
    fn read(&mut self, buf: &mut Vec<u8>, max: usize) -> ReadOutcome {
        let mut cx = Context::from_waker(&self.waker);
        // Room for `max` more (nothing when the caller made room already: a partial packet's
        // buffer is reserved at its declared size), and the kernel writes into the spare
        // capacity directly: no zeroing of `max` bytes to receive a few.
        buf.reserve(max);
        loop {
            // Ready first, then try: a `WouldBlock` clears tokio's readiness, and the next
            // `poll_read_ready` registers the waker for the next edge.
            match self.stream.poll_read_ready(&mut cx) {
                Poll::Pending => return ReadOutcome::WouldBlock,
                Poll::Ready(Err(e)) => return ReadOutcome::Failed(e),
                Poll::Ready(Ok(())) => {}
            }
            let start = buf.len();
            let spare = &mut buf.spare_capacity_mut()[..max];
            let result = self.stream.try_io(Interest::READABLE, || {
                socket2::SockRef::from(&self.stream).recv(spare)
            });
            if let Ok(n) = result {
                // SAFETY: `recv` initialised the first `n` bytes of the spare capacity (it
                // returns how many it wrote, at most `max`, all within the capacity).
                unsafe { buf.set_len(start + n) };
            }
            match result {
                Ok(0) => return ReadOutcome::Closed,
                Ok(n) => return ReadOutcome::Data(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return ReadOutcome::Failed(e),
            }
        }
    }

    fn discard_output(&mut self) {
        // SO_LINGER 0: the close resets the connection and frees its send queue.
        let _ = socket2::SockRef::from(&self.stream).set_linger(Some(std::time::Duration::ZERO));
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut cx = Context::from_waker(&self.waker);
        loop {
            match self.stream.poll_write_ready(&mut cx) {
                Poll::Pending => return Ok(0),
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Ready(Ok(())) => {}
            }
            match self.stream.try_write(data) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }

    /// One `writev` of up to [`IOV_BATCH`] pieces: shared frames go to the kernel straight
    /// from their one buffer.
    fn write_pieces(&mut self, pieces: &mut dyn Iterator<Item = Piece<'_>>) -> io::Result<usize> {
        let held: [Option<Piece<'_>>; IOV_BATCH] = std::array::from_fn(|_| pieces.next());
        let mut slices = [IoSlice::new(&[]); IOV_BATCH];
        let mut count = 0;
        for piece in held.iter().flatten() {
            slices[count] = IoSlice::new(piece.bytes());
            count += 1;
        }
        if count == 0 {
            return Ok(0);
        }
        let mut cx = Context::from_waker(&self.waker);
        loop {
            match self.stream.poll_write_ready(&mut cx) {
                Poll::Pending => return Ok(0),
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Ready(Ok(())) => {}
            }
            match self.stream.try_write_vectored(&slices[..count]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }
}
