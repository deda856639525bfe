//! The epoll backend: tokio's reactor, readiness-based.
//!
//! The Network phase calls `read`/`write` directly on the socket (`try_read`/`try_write`);
//! when the kernel has nothing more, the connection's waker is registered with tokio's reactor
//! and raised on the next readiness edge. No task per connection, no copy beyond the one into
//! the phase's buffer. Works on every platform tokio supports; always compiled in.
//!
//! Must never block or spawn: everything happens inside the phase that calls it.

use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll, Waker};

use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};

use super::backend::{Accepted, Acceptor, Backend, ReadOutcome, Transport};

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
        Ok(Box::new(EpollAcceptor {
            listener: TcpListener::from_std(listener)?,
            waker,
        }))
    }
}

struct EpollAcceptor {
    listener: TcpListener,
    waker: Waker,
}

impl Acceptor for EpollAcceptor {
    fn poll_accept(&mut self) -> Poll<io::Result<(Accepted, SocketAddr)>> {
        let mut cx = Context::from_waker(&self.waker);
        self.listener.poll_accept(&mut cx).map_ok(|(stream, peer)| {
            let _ = stream.set_nodelay(true);
            let accepted = Accepted::new(move |waker| {
                Box::new(EpollConn { stream, waker }) as Box<dyn Transport>
            });
            (accepted, peer)
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    fn shed_one(&mut self) -> bool {
        use std::os::fd::AsRawFd;
        // Straight to the socket: the connection is only to be closed, so there is nothing to
        // register with tokio's reactor, and no readiness bookkeeping to depend on. The socket
        // is non-blocking: an empty backlog is EAGAIN, not a wait.
        // SAFETY: accept4 on the listening socket this acceptor owns (its descriptor is open
        // while `self` lives); null address pointers are allowed and ask for no address.
        let fd = unsafe {
            libc::accept4(
                self.listener.as_raw_fd(),
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
}
