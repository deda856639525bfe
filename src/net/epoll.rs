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
        loop {
            // Ready first, then try: a `WouldBlock` clears tokio's readiness, and the next
            // `poll_read_ready` registers the waker for the next edge.
            match self.stream.poll_read_ready(&mut cx) {
                Poll::Pending => return ReadOutcome::WouldBlock,
                Poll::Ready(Err(e)) => return ReadOutcome::Failed(e),
                Poll::Ready(Ok(())) => {}
            }
            let start = buf.len();
            buf.resize(start + max, 0);
            let result = self.stream.try_read(&mut buf[start..]);
            buf.truncate(start + *result.as_ref().unwrap_or(&0));
            match result {
                Ok(0) => return ReadOutcome::Closed,
                Ok(n) => return ReadOutcome::Data(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return ReadOutcome::Failed(e),
            }
        }
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
