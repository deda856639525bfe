//! The epoll backend: tokio's reactor, readiness-based.
//!
//! The Network phase calls `read`/`write` directly on the socket (tokio's `poll_read`,
//! `try_write`);
//! when the kernel has nothing more, the connection's waker is registered with tokio's reactor
//! and raised on the next readiness edge. No task per connection, no copy beyond the one into
//! the phase's buffer. Works on every platform tokio supports; always compiled in.
//!
//! Must never block or spawn: everything happens inside the phase that calls it.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use socket2::SockAddr;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, Interest, ReadBuf};
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

/// One accepted connection on tokio's reactor.
///
/// **Reads stop at a short read.** The Network phase reads a connection until it would block.
/// Reading until the kernel says `EAGAIN` costs one empty `read` per arrival (half of all
/// reads at 1,000 ping clients), so, like tokio's own `TcpStream` reads, a read that returned
/// fewer bytes than it asked for ends the connection's turn: the socket's receive queue was
/// empty when it returned. This is safe because mio registers sockets edge-triggered
/// (`EPOLLET`): every segment that arrives afterwards queues a new readiness event, which the
/// reactor turns into a wake of this connection's token. Nothing can arrive unseen between
/// the read and the clearing either: tokio clears only the readiness of the reactor turn the
/// read was made under (a newer event sets it again), and on this current-thread runtime the
/// reactor turns only when the loop yields. A close or an error is not cleared (tokio keeps
/// "read closed" once seen), so a peer that sends its last bytes and its close together still
/// reads as closed on the next `read`. Where tokio's registration is not edge-triggered (not
/// epoll or kqueue) it does not clear on a short read, and the next `read` asks the kernel as
/// before. Tested in this module.
struct EpollConn {
    stream: TcpStream,
    waker: Waker,
}

impl Transport for EpollConn {
    /// One `read` of at most `max` bytes, through tokio's `AsyncRead` for `TcpStream`, which
    /// applies the drained-on-short-read rule (see [`EpollConn`]): a read that brings fewer
    /// bytes than asked clears the readiness, so the caller's next `read` answers
    /// `WouldBlock` without a system call instead of asking the kernel for the `EAGAIN`.
    fn read(&mut self, buf: &mut Vec<u8>, max: usize) -> ReadOutcome {
        // Zero bytes read is how the peer's close reads: asking for none would look the same.
        debug_assert!(max > 0, "a read of nothing cannot tell data from a close");
        let mut cx = Context::from_waker(&self.waker);
        // Room for `max` more (nothing when the caller made room already: a partial packet's
        // buffer is reserved at its declared size), and the kernel writes into the spare
        // capacity directly: no zeroing of `max` bytes to receive a few.
        buf.reserve(max);
        let start = buf.len();
        let mut spare = ReadBuf::uninit(&mut buf.spare_capacity_mut()[..max]);
        // `Pending` registered the waker for the next edge.
        let polled = Pin::new(&mut self.stream).poll_read(&mut cx, &mut spare);
        let n = spare.filled().len();
        match polled {
            Poll::Pending => ReadOutcome::WouldBlock,
            Poll::Ready(Err(e)) => ReadOutcome::Failed(e),
            Poll::Ready(Ok(())) => {
                // SAFETY: `filled` is the part of the spare capacity the read initialised
                // (`ReadBuf` tracks it; at most `max` bytes, all within the capacity).
                unsafe { buf.set_len(start + n) };
                if n == 0 {
                    ReadOutcome::Closed
                } else {
                    ReadOutcome::Data(n)
                }
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
    /// from their one buffer. A single piece (a reply) goes with a plain `send`, as
    /// [`Transport::write`] does: `writev` costs the kernel more around the same TCP work
    /// (importing the vector, the generic file write path), which was 7.9 % of the loop
    /// thread against tokio_echo's 3.2 % for its `sendto` at 1,000 ping clients.
    fn write_pieces(&mut self, pieces: &mut dyn Iterator<Item = Piece<'_>>) -> io::Result<usize> {
        // Taken until the first `None`, not `IOV_BATCH` times: the iterator is behind a `dyn`
        // call and a reply is one piece, so asking 32 times cost more than the one piece
        // (2.6 % of the loop thread at 1,000 ping clients).
        let mut held: [Option<Piece<'_>>; IOV_BATCH] = std::array::from_fn(|_| None);
        for slot in &mut held {
            match pieces.next() {
                Some(piece) => *slot = Some(piece),
                None => break,
            }
        }
        let mut slices = [IoSlice::new(&[]); IOV_BATCH];
        let mut count = 0;
        for piece in held.iter().map_while(Option::as_ref) {
            slices[count] = IoSlice::new(piece.bytes());
            count += 1;
        }
        match count {
            0 => return Ok(0),
            1 => return self.write(&slices[0]),
            _ => {}
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

#[cfg(test)]
mod tests {
    //! The drained-on-short-read rule against a real loopback socket: what it skips, and that
    //! it loses nothing (data or a close that arrives after the short read).

    use std::io::Write;
    use std::net::Shutdown;
    use std::sync::Arc;
    use std::task::Wake;
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::*;

    /// Raises a `Notify` on every wake: what the loop's token signal does, observable.
    struct Woken(Notify);

    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            self.0.notify_one();
        }
    }

    /// A client socket and the server end as an [`EpollConn`] on this runtime's reactor, and
    /// the flag its waker raises.
    fn pair() -> (std::net::TcpStream, EpollConn, Arc<Woken>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        server.set_nonblocking(true).expect("non-blocking");
        let woken = Arc::new(Woken(Notify::new()));
        let conn = EpollConn {
            stream: TcpStream::from_std(server).expect("register"),
            waker: Waker::from(woken.clone()),
        };
        (client, conn, woken)
    }

    /// Reads, waiting for the connection's waker whenever the read would block (10 s at most:
    /// real time, never close to it).
    async fn read_woken(conn: &mut EpollConn, woken: &Woken, buf: &mut Vec<u8>) -> ReadOutcome {
        loop {
            match conn.read(buf, 64) {
                ReadOutcome::WouldBlock => {
                    tokio::time::timeout(Duration::from_secs(10), woken.0.notified())
                        .await
                        .expect("the waker was never raised: a readiness edge was lost");
                }
                outcome => return outcome,
            }
        }
    }

    #[tokio::test]
    async fn data_arriving_after_a_short_read_is_read_on_the_next_edge() {
        let (mut client, mut conn, woken) = pair();
        let mut buf = Vec::new();
        client.write_all(b"hello").expect("write");
        let first = read_woken(&mut conn, &woken, &mut buf).await;
        assert!(matches!(first, ReadOutcome::Data(5)), "{first:?}");

        // More arrives while the reactor has not turned. The short read (5 of 64) cleared the
        // readiness, so this read skips the socket — the old way read it here, or paid an
        // empty read when nothing had come.
        client.write_all(b"world!!").expect("write");
        let skipped = conn.read(&mut buf, 64);
        assert!(matches!(skipped, ReadOutcome::WouldBlock), "{skipped:?}");

        // ... and the edge that data made wakes the connection, and it is read.
        let second = read_woken(&mut conn, &woken, &mut buf).await;
        assert!(matches!(second, ReadOutcome::Data(7)), "{second:?}");
        assert_eq!(buf, b"helloworld!!");
    }

    #[tokio::test]
    async fn a_close_sent_with_the_last_bytes_still_reads_as_closed() {
        let (mut client, mut conn, woken) = pair();
        let mut buf = Vec::new();
        client.write_all(b"bye").expect("write");
        client.shutdown(Shutdown::Write).expect("shutdown");
        let last = read_woken(&mut conn, &woken, &mut buf).await;
        assert!(matches!(last, ReadOutcome::Data(3)), "{last:?}");
        let closed = read_woken(&mut conn, &woken, &mut buf).await;
        assert!(matches!(closed, ReadOutcome::Closed), "{closed:?}");
        assert_eq!(buf, b"bye");
    }

    #[tokio::test]
    async fn a_full_read_keeps_reading_until_the_socket_is_drained() {
        let (mut client, mut conn, woken) = pair();
        let mut buf = Vec::new();
        client.write_all(&[7; 10]).expect("write");
        // Wait for the data, reading 4 of it.
        let first = loop {
            match conn.read(&mut buf, 4) {
                ReadOutcome::WouldBlock => {
                    tokio::time::timeout(Duration::from_secs(10), woken.0.notified())
                        .await
                        .expect("never woken");
                }
                outcome => break outcome,
            }
        };
        assert!(matches!(first, ReadOutcome::Data(4)), "{first:?}");
        // A full read says nothing about what is left: the next reads go to the socket
        // without waiting for a wake.
        let second = conn.read(&mut buf, 4);
        assert!(matches!(second, ReadOutcome::Data(4)), "{second:?}");
        let third = conn.read(&mut buf, 4);
        assert!(matches!(third, ReadOutcome::Data(2)), "{third:?}");
        let drained = conn.read(&mut buf, 4);
        assert!(matches!(drained, ReadOutcome::WouldBlock), "{drained:?}");
        assert_eq!(buf, [7; 10]);
    }

    /// Writes `pieces`, waiting for the connection's waker while the socket is not known to
    /// be writable yet (a fresh registration reads as not ready until the reactor turns).
    async fn write_woken(conn: &mut EpollConn, woken: &Woken, pieces: &[Piece<'_>]) -> usize {
        loop {
            match conn.write_pieces(&mut pieces.iter().cloned()) {
                Ok(0) => tokio::time::timeout(Duration::from_secs(10), woken.0.notified())
                    .await
                    .expect("the waker was never raised: writability was lost"),
                written => return written.expect("write"),
            }
        }
    }

    /// A reply (one piece) goes out with a plain `send`, several pieces with one `writev`:
    /// either way every byte arrives, in order, and the count returned is what was taken.
    #[tokio::test]
    async fn one_piece_and_several_pieces_both_arrive_whole_and_in_order() {
        use std::io::Read;

        use crate::net::shared::SharedFrames;

        let (mut client, mut conn, woken) = pair();
        let shared = SharedFrames::new(b"SHARED");
        let one = [Piece::Bytes(b"reply")];
        assert_eq!(write_woken(&mut conn, &woken, &one).await, 5);
        let several = [
            Piece::Bytes(b"<"),
            Piece::Shared(&shared, 1..5),
            Piece::Bytes(b">"),
        ];
        assert_eq!(write_woken(&mut conn, &woken, &several).await, 6);
        let alone = [Piece::Shared(&shared, 0..6)];
        assert_eq!(write_woken(&mut conn, &woken, &alone).await, 6);
        assert_eq!(conn.write_pieces(&mut std::iter::empty()).expect("none"), 0);
        let mut got = vec![0; 17];
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        client.read_exact(&mut got).expect("read");
        assert_eq!(got, b"reply<HARE>SHARED");
    }
}
