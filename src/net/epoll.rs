//! The epoll backend: readiness from the loop thread's own reactor.
//!
//! Sockets are registered, edge-triggered, in the `epoll` of the loop thread's reactor
//! (`runtime/reactor.rs`), not in tokio's: the loop can then park in that `epoll` itself and
//! a packet costs it one return from `epoll_wait` and no tokio driver turn. The Network phase
//! calls `recv`/`send` directly on the socket; when the kernel has nothing more, the
//! connection waits for its next event, which the reactor turns into a wake of its token. No
//! task per connection, no copy beyond the one into the phase's buffer.
//!
//! Must never block or spawn: everything happens inside the phase that calls it.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::task::{Poll, Waker};

use socket2::SockAddr;

use super::backend::{
    Accept, Accepted, Acceptor, Backend, ReadOutcome, Screen, Transport, accept_and_close,
};
use super::shared::Piece;
use crate::runtime::reactor::{Reactor, Registration};

/// Pieces handed to one `sendmsg`: a connection's output rarely has more queued (a reply, an
/// iteration's shared groups); what is left goes in the next call.
const IOV_BATCH: usize = 32;

/// Readiness through the loop thread's own `epoll`.
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
        listener.set_nonblocking(true)?;
        let registration = Reactor::for_this_thread()?.register(listener.as_raw_fd(), waker)?;
        Ok(Box::new(EpollAcceptor {
            registration,
            listener,
        }))
    }
}

/// The listening socket, registered for readiness only: connections are taken with `accept4`
/// directly, so one refused by the screen is closed before anything else has seen it.
struct EpollAcceptor {
    /// Before `listener`: it leaves the `epoll` before the socket closes.
    registration: Registration,
    listener: std::net::TcpListener,
}

impl Acceptor for EpollAcceptor {
    fn poll_accept(&mut self, screen: Screen<'_>) -> Poll<io::Result<Accept>> {
        if !self.registration.readable() {
            return Poll::Pending;
        }
        let (socket, peer) = match accept(self.listener.as_raw_fd()) {
            Ok(accepted) => accepted,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // The backlog is empty: the next connection is the listener's next event.
                self.registration.clear_readable();
                return Poll::Pending;
            }
            Err(e) => return Poll::Ready(Err(e)),
        };
        if !screen(peer) {
            drop(socket); // closes it: nothing else was done for it
            return Poll::Ready(Ok(Accept::Refused));
        }
        // Registered with the reactor only once it has a token. TCP_NODELAY came from the
        // listener (Linux copies it to accepted sockets): no socket option per connection.
        let accepted = Accepted::new(move |waker| attach(socket, waker));
        Poll::Ready(Ok(Accept::Admitted(accepted, peer)))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    fn shed_one(&mut self) -> bool {
        // Straight to the socket: the connection is only to be closed. The socket is
        // non-blocking: an empty backlog is EAGAIN, not a wait.
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

/// One accepted connection on the loop thread's reactor.
///
/// **Reads stop at a short read.** The Network phase reads a connection until it would block.
/// Reading until the kernel says `EAGAIN` costs one empty `recv` per arrival (half of all
/// reads at 1,000 ping clients), so a read that returned fewer bytes than it asked for ends
/// the connection's turn: the socket's receive queue was empty when it returned, and its
/// readable bit is cleared. This is safe because the socket is registered edge-triggered
/// (`EPOLLET`): every segment that arrives afterwards queues a new event, which the next turn
/// of the reactor makes a wake of this connection's token. Nothing can arrive unseen between
/// the read and the clearing either: events are handled only by turns on this same thread. A
/// close or an error is sticky (the reactor never clears it), so a peer that sends its last
/// bytes and its close together still reads as closed on the next `read`. Tested in this
/// module.
struct EpollConn {
    /// Before `socket`: it leaves the `epoll` before the socket closes.
    registration: Registration,
    socket: OwnedFd,
}

impl EpollConn {
    fn new(socket: OwnedFd, waker: Waker) -> io::Result<EpollConn> {
        let registration = Reactor::for_this_thread()?.register(socket.as_raw_fd(), waker)?;
        Ok(EpollConn {
            registration,
            socket,
        })
    }

    /// Hands `slices` to the kernel as one send; `Ok(0)` (and the writable bit cleared) when
    /// the socket takes nothing now.
    fn send(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        if !self.registration.writable() {
            return Ok(0);
        }
        loop {
            let sent = match slices {
                [one] => {
                    // SAFETY: sends from a live slice of `one.len()` bytes on a socket we own.
                    unsafe {
                        libc::send(
                            self.socket.as_raw_fd(),
                            one.as_ptr().cast(),
                            one.len(),
                            libc::MSG_NOSIGNAL,
                        )
                    }
                }
                _ => {
                    // SAFETY: a zeroed msghdr is valid (no name, no control data).
                    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                    // `IoSlice` is ABI-compatible with `iovec` on Unix (std guarantees it).
                    msg.msg_iov = slices.as_ptr().cast_mut().cast();
                    msg.msg_iovlen = slices.len() as _;
                    // SAFETY: `msg` points at `slices`, alive for the call; the socket is ours.
                    unsafe { libc::sendmsg(self.socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) }
                }
            };
            if sent >= 0 {
                return Ok(sent as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => {
                    self.registration.clear_writable();
                    return Ok(0);
                }
                _ => return Err(e),
            }
        }
    }
}

impl Transport for EpollConn {
    /// One `recv` of at most `max` bytes, or none while the socket is known to be drained
    /// (see [`EpollConn`]): a read that brings fewer bytes than asked clears the readable
    /// bit, so the caller's next `read` answers `WouldBlock` without a system call instead
    /// of asking the kernel for the `EAGAIN`.
    fn read(&mut self, buf: &mut Vec<u8>, max: usize) -> ReadOutcome {
        // Zero bytes read is how the peer's close reads: asking for none would look the same.
        debug_assert!(max > 0, "a read of nothing cannot tell data from a close");
        if !self.registration.readable() {
            return ReadOutcome::WouldBlock;
        }
        // Room for `max` more (nothing when the caller made room already: a partial packet's
        // buffer is reserved at its declared size), and the kernel writes into the spare
        // capacity directly: no zeroing of `max` bytes to receive a few.
        buf.reserve(max);
        let start = buf.len();
        loop {
            let spare = &mut buf.spare_capacity_mut()[..max];
            // SAFETY: receives at most `max` bytes into spare capacity of at least `max`.
            let n =
                unsafe { libc::recv(self.socket.as_raw_fd(), spare.as_mut_ptr().cast(), max, 0) };
            if n > 0 {
                let n = n as usize;
                // SAFETY: the kernel initialised the first `n` (≤ `max`) spare bytes.
                unsafe { buf.set_len(start + n) };
                if n < max {
                    self.registration.clear_readable();
                }
                return ReadOutcome::Data(n);
            }
            if n == 0 {
                return ReadOutcome::Closed;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => {
                    self.registration.clear_readable();
                    return ReadOutcome::WouldBlock;
                }
                _ => return ReadOutcome::Failed(e),
            }
        }
    }

    fn discard_output(&mut self) {
        // SO_LINGER 0: the close resets the connection and frees its send queue.
        let _ = socket2::SockRef::from(&self.socket).set_linger(Some(std::time::Duration::ZERO));
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.send(&[IoSlice::new(data)])
    }

    /// One `sendmsg` of up to [`IOV_BATCH`] pieces: shared frames go to the kernel straight
    /// from their one buffer. A single piece (a reply) goes with a plain `send`: a vector
    /// costs the kernel more around the same TCP work (importing it), which was 7.9 % of the
    /// loop thread against tokio_echo's 3.2 % for its `sendto` at 1,000 ping clients.
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
        if count == 0 {
            return Ok(0);
        }
        self.send(&slices[..count])
    }
}

/// The transport of an accepted connection: registered with the thread's reactor, or, if the
/// kernel refuses that, one that fails its first read with the reason (the socket is closed
/// at once; no other connection is touched).
fn attach(socket: OwnedFd, waker: Waker) -> Box<dyn Transport> {
    match EpollConn::new(socket, waker) {
        Ok(conn) => Box::new(conn),
        Err(e) => Box::new(Unregistered(e.kind(), e.to_string())),
    }
}

/// A connection the reactor could not take (the kernel refused the registration: out of
/// memory, or over `fs.epoll.max_user_watches`): its first read fails with that error, so the
/// server closes it and says why.
struct Unregistered(io::ErrorKind, String);

impl Transport for Unregistered {
    fn read(&mut self, _buf: &mut Vec<u8>, _max: usize) -> ReadOutcome {
        ReadOutcome::Failed(self.error())
    }

    fn write(&mut self, _data: &[u8]) -> io::Result<usize> {
        Err(self.error())
    }
}

impl Unregistered {
    fn error(&self) -> io::Error {
        io::Error::new(
            self.0,
            format!("registering with the loop's epoll: {}", self.1),
        )
    }
}

#[cfg(test)]
mod tests {
    //! The drained-on-short-read rule against a real loopback socket: what it skips, and that
    //! it loses nothing (data or a close that arrives after the short read); writes that
    //! fill the socket wait for its writable edge. The thread's reactor is turned by hand
    //! here, as the loop's park turns it.

    use std::io::{Read, Write};
    use std::net::Shutdown;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::runtime::wake_slot::WakeCount as Woken;

    /// A client socket and the server end as an [`EpollConn`] on this thread's reactor, and
    /// the counter its waker raises.
    fn pair() -> (std::net::TcpStream, EpollConn, Arc<Woken>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        server.set_nonblocking(true).expect("non-blocking");
        let (waker, woken) = Woken::waker();
        let conn = EpollConn::new(OwnedFd::from(server), waker).expect("register");
        (client, conn, woken)
    }

    /// Turns the thread's reactor until `woken` counts a new wake (10 s at most: real time,
    /// never close to it).
    fn turn_until_woken(woken: &Woken) {
        let reactor = Reactor::for_this_thread().expect("reactor");
        let before = woken.count();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while woken.count() == before {
            assert!(
                std::time::Instant::now() < deadline,
                "the waker was never raised: a readiness edge was lost"
            );
            reactor.turn(100, 0).expect("turn");
        }
    }

    /// Reads, waiting for the connection's waker whenever the read would block.
    fn read_woken(
        conn: &mut EpollConn,
        woken: &Woken,
        buf: &mut Vec<u8>,
        max: usize,
    ) -> ReadOutcome {
        loop {
            match conn.read(buf, max) {
                ReadOutcome::WouldBlock => turn_until_woken(woken),
                outcome => return outcome,
            }
        }
    }

    #[test]
    fn data_arriving_after_a_short_read_is_read_on_the_next_edge() {
        let (mut client, mut conn, woken) = pair();
        let mut buf = Vec::new();
        client.write_all(b"hello").expect("write");
        let first = read_woken(&mut conn, &woken, &mut buf, 64);
        assert!(matches!(first, ReadOutcome::Data(5)), "{first:?}");

        // More arrives while the reactor has not turned. The short read (5 of 64) cleared the
        // readiness, so this read skips the socket — an empty read otherwise, or this data.
        client.write_all(b"world!!").expect("write");
        let skipped = conn.read(&mut buf, 64);
        assert!(matches!(skipped, ReadOutcome::WouldBlock), "{skipped:?}");

        // ... and the edge that data made wakes the connection, and it is read.
        let second = read_woken(&mut conn, &woken, &mut buf, 64);
        assert!(matches!(second, ReadOutcome::Data(7)), "{second:?}");
        assert_eq!(buf, b"helloworld!!");
    }

    #[test]
    fn a_close_sent_with_the_last_bytes_still_reads_as_closed() {
        let (mut client, mut conn, woken) = pair();
        let mut buf = Vec::new();
        client.write_all(b"bye").expect("write");
        client.shutdown(Shutdown::Write).expect("shutdown");
        // Both arrive before the connection looks: one edge brings bytes and close together.
        std::thread::sleep(Duration::from_millis(50));
        turn_until_woken(&woken);
        let last = read_woken(&mut conn, &woken, &mut buf, 64);
        assert!(matches!(last, ReadOutcome::Data(3)), "{last:?}");
        let closed = conn.read(&mut buf, 64);
        assert!(matches!(closed, ReadOutcome::Closed), "{closed:?}");
        assert_eq!(buf, b"bye");
    }

    #[test]
    fn a_full_read_keeps_reading_until_the_socket_is_drained() {
        let (mut client, mut conn, woken) = pair();
        let mut buf = Vec::new();
        client.write_all(&[7; 10]).expect("write");
        let first = read_woken(&mut conn, &woken, &mut buf, 4);
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

    /// A reply (one piece) goes out with a plain `send`, several pieces with one `sendmsg`:
    /// either way every byte arrives, in order, and the count returned is what was taken.
    #[test]
    fn one_piece_and_several_pieces_both_arrive_whole_and_in_order() {
        use crate::net::shared::SharedFrames;

        let (mut client, mut conn, _woken) = pair();
        let shared = SharedFrames::new(b"SHARED");
        let one = [Piece::Bytes(b"reply")];
        assert_eq!(conn.write_pieces(&mut one.iter().cloned()).expect("one"), 5);
        let several = [
            Piece::Bytes(b"<"),
            Piece::Shared(&shared, 1..5),
            Piece::Bytes(b">"),
        ];
        assert_eq!(
            conn.write_pieces(&mut several.iter().cloned())
                .expect("several"),
            6
        );
        let alone = [Piece::Shared(&shared, 0..6)];
        assert_eq!(
            conn.write_pieces(&mut alone.iter().cloned())
                .expect("alone"),
            6
        );
        assert_eq!(conn.write_pieces(&mut std::iter::empty()).expect("none"), 0);
        let mut got = vec![0; 17];
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        client.read_exact(&mut got).expect("read");
        assert_eq!(got, b"reply<HARE>SHARED");
    }

    /// A socket that takes nothing more answers `Ok(0)` once (the kernel's `EAGAIN`), then
    /// nothing without a system call until the peer reads and the writable edge wakes the
    /// connection; every byte arrives.
    #[test]
    fn a_full_socket_waits_for_its_writable_edge_and_loses_nothing() {
        let (mut client, mut conn, woken) = pair();
        let chunk = vec![9u8; 64 * 1024];
        let mut sent = 0;
        loop {
            match conn.write(&chunk).expect("write") {
                0 => break,
                n => sent += n,
            }
        }
        assert!(!conn.registration.writable(), "EAGAIN clears the bit");
        assert_eq!(conn.write(&chunk).expect("write"), 0);
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; sent + 5];
            client.read_exact(&mut got).expect("read");
            got
        });
        let mut tail = &b"tail!"[..];
        while !tail.is_empty() {
            match conn.write(tail).expect("write") {
                0 => turn_until_woken(&woken),
                n => tail = &tail[n..],
            }
        }
        let got = reader.join().expect("reader");
        assert!(got[..sent].iter().all(|&b| b == 9));
        assert_eq!(&got[sent..], b"tail!");
    }

    /// A descriptor the kernel will not register (`epoll` refuses a regular file, as it would
    /// a connection over `fs.epoll.max_user_watches`) becomes a transport that fails its read
    /// and write naming the refusal, so the server closes that connection and says why; a
    /// connection attached beside it reads as usual.
    #[test]
    fn a_refused_registration_fails_only_that_connection_naming_why() {
        let file = std::fs::File::open(std::env::current_exe().expect("exe")).expect("open");
        let mut refused = attach(OwnedFd::from(file), Woken::waker().0);
        let ReadOutcome::Failed(e) = refused.read(&mut Vec::new(), 64) else {
            panic!("a refused registration must fail the read");
        };
        assert!(
            e.to_string().contains("registering with the loop's epoll"),
            "{e}"
        );
        assert!(refused.write(b"x").is_err());

        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        server.set_nonblocking(true).expect("non-blocking");
        let (waker, woken) = Woken::waker();
        let mut fine = attach(OwnedFd::from(server), waker);
        client.write_all(b"ok").expect("write");
        let mut buf = Vec::new();
        let read = loop {
            match fine.read(&mut buf, 64) {
                ReadOutcome::WouldBlock => turn_until_woken(&woken),
                outcome => break outcome,
            }
        };
        assert!(matches!(read, ReadOutcome::Data(2)), "{read:?}");
    }

    /// The listener: connections are taken while its bit is set, an empty backlog clears it,
    /// and the next connection's edge wakes the acceptor.
    #[test]
    fn the_acceptor_waits_for_its_next_edge_after_an_empty_backlog() {
        let (waker, woken) = Woken::waker();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut acceptor = Epoll.listen(listener, waker).expect("listen");
        let mut screen = |_| true;
        assert!(acceptor.poll_accept(&mut screen).is_pending());
        let addr = acceptor.local_addr().expect("addr");
        let _client = std::net::TcpStream::connect(addr).expect("connect");
        turn_until_woken(&woken);
        let accepted = acceptor.poll_accept(&mut screen);
        assert!(
            matches!(accepted, Poll::Ready(Ok(Accept::Admitted(_, _)))),
            "the connection is taken"
        );
        assert!(acceptor.poll_accept(&mut screen).is_pending());
    }
}
