//! The io_uring backend: tokio-uring, completion-based.
//!
//! io_uring does not say "ready"; it completes an operation on a buffer the kernel held for
//! its whole flight. Such a buffer must be owned by whoever awaits the completion, and that is
//! why this module has tasks where `epoll` has none: per listener one accept task, per
//! connection a reader task (one small buffer, always in flight) and a writer task. They move
//! bytes between the kernel and per-connection queues (`inbox`, `outbox`) and raise the
//! connection's waker; the Network and Flush phases only ever touch the queues, so `read` and
//! `write` never block and never wait for the kernel.
//!
//! Owns: those tasks, their buffers and the sockets. Every queue is bounded (accepted
//! connections, bytes read ahead, bytes waiting to be sent), so a flood or a slow peer costs
//! back-pressure, not memory.
//!
//! Must never parse packets, never block the phase that calls it, and never leave an
//! operation in flight on a socket nobody owns: tokio-uring does not cancel a dropped
//! operation (it keeps it, and its socket, until the kernel completes it), so closing shuts
//! the socket down, which completes whatever is in flight, and the tasks then end by
//! themselves.
//!
//! Everything here runs on the loop thread, inside the runtime [`block_on`] builds.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::mem;
use std::net::{Shutdown, SocketAddr};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use socket2::SockRef;
use tokio::sync::Notify;
use tokio_uring::BufResult;
use tokio_uring::net::{TcpListener, TcpStream};

use super::backend::{Accepted, Acceptor, Backend, ReadOutcome, Transport};

/// The reader's buffer. Every idle connection keeps one read in flight, so this is most of
/// what an idle connection costs.
const READ_BUFFER: usize = 4 * 1024;
/// The reader stops reading ahead once this much waits for the Network phase.
const INBOX_LIMIT: usize = 64 * 1024;
/// Bytes `write` accepts before the writer has handed them to the kernel.
const OUTBOX_LIMIT: usize = 64 * 1024;
/// An emptied queue keeps its allocation up to this size; a larger one is freed, so a burst
/// does not stay on an idle connection.
const RETAIN: usize = 2 * 1024;
/// Accepted connections waiting for `poll_accept` before the accept task pauses.
const ACCEPT_QUEUE: usize = 64;
/// How long a closed connection's writer may keep sending what was already accepted.
const LINGER: Duration = if cfg!(test) {
    Duration::from_millis(200)
} else {
    Duration::from_secs(5)
};
/// Submission queue entries of the ring [`block_on`] builds (tokio-uring's default).
const RING_ENTRIES: u32 = 256;

/// The io_uring backend. Use it on the runtime [`block_on`] runs: its tasks and operations
/// need that runtime (elsewhere, `listen` and `attach` panic).
#[derive(Debug, Default, Clone, Copy)]
pub struct Uring;

/// Can this process create an io_uring, with the features this backend relies on? Cheap
/// (one 8-entry ring, closed at once); the error says why not.
pub fn probe() -> io::Result<()> {
    let ring = tokio_uring::uring_builder()
        .build(8)
        .map_err(explain_setup_error)?;
    // Without fast poll, an idle socket read parks a kernel worker thread: one per connection.
    if !ring.params().is_feature_fast_poll() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel's io_uring lacks IORING_FEAT_FAST_POLL (Linux 5.7 or later needed)",
        ));
    }
    Ok(())
}

/// Runs `future` to completion on a tokio-uring runtime: a current-thread tokio runtime with
/// every driver enabled (time, I/O, signals), a `LocalSet` for `spawn_local`, and the ring.
/// Fails, instead of panicking, when the ring cannot be created.
///
/// tokio-uring hands queued operations to the kernel only when the runtime parks (its
/// `on_thread_park` hook): while the future keeps waking itself (`yield_now` in a loop that
/// never sleeps), reads and writes issued meanwhile wait for the next park. An `EventLoop`
/// on this runtime therefore needs `EventLoopBuilder::yield_through_park(true)`, which the
/// shard sets for this backend.
pub fn block_on<F: Future>(future: F) -> io::Result<F::Output> {
    let mut builder = tokio_uring::builder();
    builder.entries(RING_ENTRIES);
    let runtime = tokio_uring::Runtime::new(&builder).map_err(explain_setup_error)?;
    Ok(runtime.block_on(future))
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

    fn listen(
        &self,
        listener: std::net::TcpListener,
        waker: Waker,
    ) -> io::Result<Box<dyn Acceptor>> {
        Ok(Box::new(start_accepting(listener, waker)?))
    }
}

// ---------------------------------------------------------------------------------------------
// Accepting

type AcceptResult = io::Result<(TcpStream, SocketAddr)>;

/// What the acceptor and its accept task share.
struct AcceptShared {
    /// Accepted connections (and accept errors) not yet taken by `poll_accept`.
    queue: RefCell<VecDeque<AcceptResult>>,
    /// The accept task waits for `resume`: the queue was full, or accept failed and the
    /// server's retry should pace the next attempt.
    paused: Cell<bool>,
    /// The acceptor was dropped: the task ends.
    closed: Cell<bool>,
    resume: Notify,
    /// The acceptor's waker: a connection may be waiting.
    waker: Waker,
}

struct UringAcceptor {
    handle: std::net::TcpListener,
    shared: Rc<AcceptShared>,
}

fn start_accepting(listener: std::net::TcpListener, waker: Waker) -> io::Result<UringAcceptor> {
    // A second descriptor of the same socket answers `local_addr` and shuts the socket
    // down on drop while the accept task owns the first.
    let handle = listener.try_clone()?;
    let shared = Rc::new(AcceptShared {
        queue: RefCell::new(VecDeque::new()),
        paused: Cell::new(false),
        closed: Cell::new(false),
        resume: Notify::new(),
        waker,
    });
    tokio_uring::spawn(accept_loop(
        TcpListener::from_std(listener),
        Rc::clone(&shared),
    ));
    Ok(UringAcceptor { handle, shared })
}

async fn accept_loop(listener: TcpListener, shared: Rc<AcceptShared>) {
    #[cfg(test)]
    let _live = tests::Live::accept_task();
    loop {
        while shared.paused.get() && !shared.closed.get() {
            shared.resume.notified().await;
        }
        if shared.closed.get() {
            return;
        }
        let accepted = listener.accept().await;
        if shared.closed.get() {
            return; // a connection accepted in the meantime is closed with it
        }
        if accepted.as_ref().is_err_and(is_transient) {
            continue; // that one connection is gone; the listener is fine
        }
        if let Ok((stream, _)) = &accepted {
            // Best effort: a socket without it still works, just with Nagle's delays.
            let _ = stream.set_nodelay(true);
        }
        let mut queue = shared.queue.borrow_mut();
        let was_empty = queue.is_empty();
        if accepted.is_err() || queue.len() + 1 >= ACCEPT_QUEUE {
            shared.paused.set(true);
        }
        queue.push_back(accepted);
        drop(queue);
        // The server drains the queue until `Pending`: only a first entry owes it a wake.
        if was_empty {
            shared.waker.wake_by_ref();
        }
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

impl Acceptor for UringAcceptor {
    fn poll_accept(&mut self) -> Poll<io::Result<(Accepted, SocketAddr)>> {
        let next = self.shared.queue.borrow_mut().pop_front();
        match next {
            Some(Ok((stream, peer))) => {
                let accepted = Accepted::new(move |waker| attach(stream, waker));
                Poll::Ready(Ok((accepted, peer)))
            }
            Some(Err(e)) => Poll::Ready(Err(e)),
            None => {
                // Drained: a paused task may go on. After an error this is the server's
                // retry, so a failing accept (out of descriptors) is not retried in a spin.
                if self.shared.paused.replace(false) {
                    self.shared.resume.notify_one();
                }
                Poll::Pending
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.handle.local_addr()
    }
}

impl Drop for UringAcceptor {
    fn drop(&mut self) {
        self.shared.closed.set(true);
        self.shared.queue.borrow_mut().clear(); // closes accepted, unclaimed connections
        // Completes an in-flight accept (with EINVAL): tokio-uring would otherwise keep it,
        // and the listening socket, until the next connection arrived.
        let _ = SockRef::from(&self.handle).shutdown(Shutdown::Both);
        self.shared.resume.notify_one();
    }
}

// ---------------------------------------------------------------------------------------------
// Connections

/// One connection, shared by its transport and its two tasks; the socket closes when the
/// last of them lets go.
struct Conn {
    stream: TcpStream,
    state: RefCell<ConnState>,
    /// Wakes the reader: the inbox has room again, or the connection closed.
    reader_wake: Notify,
    /// Wakes the writer: the outbox has data, or the connection closed.
    writer_wake: Notify,
    #[cfg(test)]
    _live: tests::Live,
}

struct ConnState {
    /// Read from the socket, not yet taken by `Transport::read`.
    inbox: VecDeque<u8>,
    /// The peer closed its side (or a read failure was reported): `read` says `Closed` once
    /// the inbox is empty.
    eof: bool,
    read_error: Option<io::Error>,
    /// The loop got `WouldBlock` and is owed a wake when data arrives.
    want_read: bool,
    /// Accepted by `Transport::write`, not yet handed to the kernel.
    outbox: Vec<u8>,
    /// Handed to the kernel, not yet confirmed written.
    in_flight: usize,
    write_error: Option<io::Error>,
    /// A write failure was reported: every later `write` fails too.
    write_failed: bool,
    /// The loop got `Ok(0)` and is owed a wake when there is room.
    want_write: bool,
    /// The transport was dropped.
    closed: bool,
    waker: Waker,
}

impl Conn {
    /// Wakes the loop if `owed` says it waits for this connection.
    fn wake_if(&self, owed: impl FnOnce(&mut ConnState) -> bool) {
        let waker = {
            let mut state = self.state.borrow_mut();
            if !owed(&mut state) || state.closed {
                return;
            }
            state.waker.clone()
        };
        waker.wake();
    }
}

fn attach(stream: TcpStream, waker: Waker) -> Box<dyn Transport> {
    Box::new(start_conn(stream, waker))
}

/// Starts a connection's tasks; the returned transport is the loop's handle on it.
fn start_conn(stream: TcpStream, waker: Waker) -> UringConn {
    let conn = Rc::new(Conn {
        stream,
        state: RefCell::new(ConnState {
            inbox: VecDeque::new(),
            eof: false,
            read_error: None,
            // The server reads right after attaching; a first wake costs nothing.
            want_read: true,
            outbox: Vec::new(),
            in_flight: 0,
            write_error: None,
            write_failed: false,
            want_write: false,
            closed: false,
            waker,
        }),
        reader_wake: Notify::new(),
        writer_wake: Notify::new(),
        #[cfg(test)]
        _live: tests::Live::conn(),
    });
    tokio_uring::spawn(read_loop(Rc::clone(&conn)));
    tokio_uring::spawn(write_loop(Rc::clone(&conn)));
    UringConn { conn }
}

/// The reader task: keeps one read in flight while the inbox has room.
async fn read_loop(conn: Rc<Conn>) {
    let mut buf = Vec::with_capacity(READ_BUFFER);
    loop {
        if !wait_for_inbox_room(&conn).await {
            return;
        }
        buf.clear(); // tokio-uring reads into the whole capacity, from the start
        let (result, returned) = conn.stream.read(buf).await;
        buf = returned;
        let mut state = conn.state.borrow_mut();
        if state.closed {
            return;
        }
        match result {
            Ok(0) => state.eof = true,
            Ok(n) => state.inbox.extend(&buf[..n]),
            Err(e) => state.read_error = Some(e),
        }
        let done = state.eof || state.read_error.is_some();
        drop(state);
        conn.wake_if(|s| done || mem::take(&mut s.want_read));
        if done {
            return;
        }
    }
}

/// Waits until the inbox is below its limit. False if the connection closed meanwhile.
async fn wait_for_inbox_room(conn: &Conn) -> bool {
    loop {
        {
            let state = conn.state.borrow();
            if state.closed {
                return false;
            }
            if state.inbox.len() < INBOX_LIMIT {
                return true;
            }
        }
        conn.reader_wake.notified().await;
    }
}

/// The writer task: sends the outbox in batches, swapping buffers so `write` can keep
/// appending while a batch is in flight.
async fn write_loop(conn: Rc<Conn>) {
    let mut spare = Vec::new();
    while let Some(batch) = next_batch(&conn, &mut spare).await {
        let (result, mut sent) = write_batch(&conn, batch).await;
        sent.clear();
        if sent.capacity() > RETAIN {
            sent = Vec::new();
        }
        spare = sent;
        conn.state.borrow_mut().in_flight = 0;
        match result {
            Ok(()) => conn.wake_if(|s| mem::take(&mut s.want_write)),
            Err(e) => {
                conn.state.borrow_mut().write_error = Some(e);
                conn.wake_if(|_| true);
                return;
            }
        }
    }
}

/// The outbox's content, swapped for `spare`; `None` once closed with nothing left to send.
async fn next_batch(conn: &Conn, spare: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        {
            let mut state = conn.state.borrow_mut();
            if !state.outbox.is_empty() {
                state.in_flight = state.outbox.len();
                return Some(mem::replace(&mut state.outbox, mem::take(spare)));
            }
            if state.closed {
                return None;
            }
        }
        conn.writer_wake.notified().await;
    }
}

/// Writes all of `batch`. Should the connection close meanwhile, the peer gets [`LINGER`] to
/// take the rest; then the socket is shut down, which completes the write (with an error)
/// rather than leave it, the buffer and the socket in the kernel's hands indefinitely.
async fn write_batch(conn: &Conn, batch: Vec<u8>) -> BufResult<(), Vec<u8>> {
    let write = conn.stream.write_all(batch);
    tokio::pin!(write);
    while !conn.state.borrow().closed {
        tokio::select! {
            biased;
            done = &mut write => return done,
            () = conn.writer_wake.notified() => {}
        }
    }
    match tokio::time::timeout(LINGER, &mut write).await {
        Ok(done) => done,
        Err(_) => {
            let _ = conn.stream.shutdown(Shutdown::Both);
            write.await
        }
    }
}

/// The loop's handle on a connection. Dropping it closes the connection: the reader stops at
/// once, the writer after sending what `write` accepted (at most [`LINGER`]).
struct UringConn {
    conn: Rc<Conn>,
}

impl Transport for UringConn {
    fn read(&mut self, buf: &mut Vec<u8>, max: usize) -> ReadOutcome {
        let mut state = self.conn.state.borrow_mut();
        if !state.inbox.is_empty() {
            let reader_paused = state.inbox.len() >= INBOX_LIMIT;
            let n = max.min(state.inbox.len());
            let (front, back) = state.inbox.as_slices();
            let from_front = n.min(front.len());
            buf.extend_from_slice(&front[..from_front]);
            buf.extend_from_slice(&back[..n - from_front]);
            state.inbox.drain(..n);
            if state.inbox.is_empty() && state.inbox.capacity() > RETAIN {
                state.inbox = VecDeque::new();
            }
            if reader_paused && state.inbox.len() < INBOX_LIMIT {
                self.conn.reader_wake.notify_one();
            }
            return ReadOutcome::Data(n);
        }
        if let Some(e) = state.read_error.take() {
            state.eof = true;
            return ReadOutcome::Failed(e);
        }
        if state.eof {
            return ReadOutcome::Closed;
        }
        state.want_read = true;
        ReadOutcome::WouldBlock
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut state = self.conn.state.borrow_mut();
        if let Some(e) = state.write_error.take() {
            state.write_failed = true;
            return Err(e);
        }
        if state.write_failed {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "an earlier write on this connection failed",
            ));
        }
        let room = OUTBOX_LIMIT.saturating_sub(state.outbox.len() + state.in_flight);
        let n = room.min(data.len());
        if n == 0 {
            state.want_write = !data.is_empty();
            return Ok(0);
        }
        state.outbox.extend_from_slice(&data[..n]);
        // A writer with a batch in flight looks at the outbox when the batch is done.
        if state.in_flight == 0 {
            self.conn.writer_wake.notify_one();
        }
        Ok(n)
    }
}

impl Drop for UringConn {
    fn drop(&mut self) {
        self.conn.state.borrow_mut().closed = true;
        // Completes the reader's in-flight read; the writer may still send what it holds.
        let _ = self.conn.stream.shutdown(Shutdown::Read);
        self.conn.reader_wake.notify_one();
        self.conn.writer_wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;
    use std::thread::LocalKey;

    use tokio::net::TcpStream as Client;
    use tokio::time::Instant;

    use super::*;

    thread_local! {
        // Per thread, and so per test: each test runs its own runtime on its own thread.
        static ACCEPT_TASKS: Cell<usize> = const { Cell::new(0) };
        static CONNS: Cell<usize> = const { Cell::new(0) };
    }

    /// Counts a live accept task or connection while it exists.
    pub(super) struct Live(&'static LocalKey<Cell<usize>>);

    impl Live {
        pub(super) fn accept_task() -> Live {
            Live::count(&ACCEPT_TASKS)
        }

        pub(super) fn conn() -> Live {
            Live::count(&CONNS)
        }

        fn count(counter: &'static LocalKey<Cell<usize>>) -> Live {
            counter.with(|c| c.set(c.get() + 1));
            Live(counter)
        }
    }

    impl Drop for Live {
        fn drop(&mut self) {
            self.0.with(|c| c.set(c.get() - 1));
        }
    }

    fn live(counter: &'static LocalKey<Cell<usize>>) -> usize {
        counter.with(Cell::get)
    }

    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wakes {
        fn count(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting_waker() -> (Waker, Arc<Wakes>) {
        let wakes = Arc::new(Wakes::default());
        (Waker::from(Arc::clone(&wakes)), wakes)
    }

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// Runs a test on the io_uring runtime; skips it where the kernel refuses a ring.
    fn run(test: impl Future<Output = ()>) {
        if let Err(e) = probe() {
            eprintln!("skipped: io_uring unavailable: {e}");
            return;
        }
        block_on(async { tokio::time::timeout(TIMEOUT * 2, test).await })
            .expect("an io_uring runtime")
            .expect("test timed out");
    }

    /// Tries `check` until it yields. Sleeps between tries: the runtime must park to submit
    /// the ring's queued operations (see `block_on`).
    async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(value) = check() {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits for a wake after `seen`.
    async fn woken(wakes: &Wakes, seen: usize, what: &str) {
        eventually(what, || (wakes.count() > seen).then_some(())).await;
    }

    fn listen() -> (UringAcceptor, Arc<Wakes>) {
        let listener = crate::net::bind("127.0.0.1:0".parse().unwrap(), 262_144).unwrap();
        let (waker, wakes) = counting_waker();
        (start_accepting(listener, waker).unwrap(), wakes)
    }

    /// The next connection; a `Pending` must be followed by a wake.
    async fn accept(acceptor: &mut UringAcceptor, wakes: &Wakes) -> (Accepted, SocketAddr) {
        loop {
            let seen = wakes.count();
            match acceptor.poll_accept() {
                Poll::Ready(accepted) => return accepted.unwrap(),
                Poll::Pending => woken(wakes, seen, "the acceptor's waker").await,
            }
        }
    }

    struct Pair {
        client: Client,
        conn: Box<dyn Transport>,
        wakes: Arc<Wakes>,
        _acceptor: UringAcceptor,
    }

    async fn connected() -> Pair {
        let (mut acceptor, accept_wakes) = listen();
        let addr = acceptor.local_addr().unwrap();
        let client = Client::connect(addr).await.unwrap();
        let (accepted, peer) = accept(&mut acceptor, &accept_wakes).await;
        assert_eq!(peer, client.local_addr().unwrap());
        let (waker, wakes) = counting_waker();
        Pair {
            client,
            conn: accepted.attach(waker),
            wakes,
            _acceptor: acceptor,
        }
    }

    /// Reads `len` bytes; a `WouldBlock` must be followed by a wake.
    async fn read_exactly(conn: &mut dyn Transport, wakes: &Wakes, len: usize) -> Vec<u8> {
        let mut got = Vec::new();
        while got.len() < len {
            let seen = wakes.count();
            match conn.read(&mut got, 16 * 1024) {
                ReadOutcome::Data(n) => assert!(n > 0),
                ReadOutcome::WouldBlock => woken(wakes, seen, "a read wake").await,
                other => panic!("read: {other:?}"),
            }
        }
        got
    }

    /// `read` until it says something other than `Data` or `WouldBlock`.
    async fn read_to_end(conn: &mut dyn Transport, wakes: &Wakes) -> (Vec<u8>, ReadOutcome) {
        let mut got = Vec::new();
        loop {
            let seen = wakes.count();
            match conn.read(&mut got, 16 * 1024) {
                ReadOutcome::Data(_) => {}
                ReadOutcome::WouldBlock => woken(wakes, seen, "a read wake").await,
                end => return (got, end),
            }
        }
    }

    // The client side, with tokio's readiness API (this crate has no `io-util` feature).

    async fn send(client: &Client, mut data: &[u8]) {
        while !data.is_empty() {
            client.writable().await.unwrap();
            match client.try_write(data) {
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("client write: {e}"),
            }
        }
    }

    /// Reads once, waiting for readiness; 0 is EOF.
    async fn receive(client: &Client, buf: &mut [u8]) -> usize {
        loop {
            client.readable().await.unwrap();
            match client.try_read(buf) {
                Ok(n) => return n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("client read: {e}"),
            }
        }
    }

    /// Reads until EOF or `limit` bytes.
    async fn receive_up_to(client: &Client, limit: usize) -> Vec<u8> {
        let mut got = vec![0; limit];
        let mut len = 0;
        while len < limit {
            match receive(client, &mut got[len..]).await {
                0 => break,
                n => len += n,
            }
        }
        got.truncate(len);
        got
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn setup_errors_say_why() {
        let explained = |errno| explain_setup_error(io::Error::from_raw_os_error(errno));
        assert!(
            explained(libc::ENOSYS)
                .to_string()
                .contains("kernel older than 5.1")
        );
        let eperm = explained(libc::EPERM);
        assert_eq!(eperm.kind(), io::ErrorKind::PermissionDenied);
        assert!(
            eperm.to_string().contains("io_uring_disabled")
                || eperm.to_string().contains("seccomp")
        );
        assert_eq!(
            explained(libc::EIO).to_string(),
            io::Error::from_raw_os_error(libc::EIO).to_string()
        );
    }

    #[test]
    fn block_on_runs_tokios_drivers() {
        run(async {
            // tokio's time, I/O and signal drivers all run inside tokio-uring's runtime.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let _ = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let kind = tokio::signal::unix::SignalKind::window_change();
            let _ = tokio::signal::unix::signal(kind).unwrap();
        });
    }

    #[test]
    fn client_bytes_wake_the_loop_and_read_returns_them() {
        run(async {
            let mut pair = connected().await;
            let mut buf = Vec::new();
            assert!(matches!(
                pair.conn.read(&mut buf, 1024),
                ReadOutcome::WouldBlock
            ));
            send(&pair.client, b"hello").await;
            let got = read_exactly(&mut *pair.conn, &pair.wakes, 5).await;
            assert_eq!(got, b"hello");
        });
    }

    #[test]
    fn read_takes_at_most_max() {
        run(async {
            let mut pair = connected().await;
            send(&pair.client, b"abcdef").await;
            let mut buf = b"x".to_vec();
            let seen = pair.wakes.count();
            woken(&pair.wakes, seen, "data").await;
            assert!(matches!(pair.conn.read(&mut buf, 4), ReadOutcome::Data(4)));
            assert_eq!(buf, b"xabcd");
            let rest = read_exactly(&mut *pair.conn, &pair.wakes, 2).await;
            assert_eq!(rest, b"ef");
        });
    }

    #[test]
    fn written_bytes_reach_the_client() {
        run(async {
            let mut pair = connected().await;
            assert_eq!(pair.conn.write(b"world").unwrap(), 5);
            assert_eq!(receive_up_to(&pair.client, 5).await, b"world");
        });
    }

    #[test]
    fn a_full_outbox_says_zero_and_wakes_when_it_drains() {
        run(async {
            let mut pair = connected().await;
            let data = pattern(1 << 20);
            let client = pair.client;
            let len = data.len();
            let receiver = tokio::task::spawn_local(async move {
                // Let the sender fill every buffer first.
                tokio::time::sleep(Duration::from_millis(50)).await;
                receive_up_to(&client, len).await
            });
            let mut sent = 0;
            let mut fulls = 0;
            while sent < data.len() {
                let seen = pair.wakes.count();
                match pair.conn.write(&data[sent..]).unwrap() {
                    0 => {
                        fulls += 1;
                        woken(&pair.wakes, seen, "a write wake").await;
                    }
                    n => {
                        assert!(n <= OUTBOX_LIMIT);
                        sent += n;
                    }
                }
            }
            assert!(fulls > 0, "1 MiB never filled the outbox");
            assert!(receiver.await.unwrap() == data, "bytes lost or reordered");
        });
    }

    #[test]
    fn the_inbox_stops_growing_at_its_limit() {
        run(async {
            let (acceptor, accept_wakes) = listen();
            let client = Client::connect(acceptor.local_addr().unwrap())
                .await
                .unwrap();
            let (stream, _) = loop {
                let seen = accept_wakes.count();
                if let Some(next) = acceptor.shared.queue.borrow_mut().pop_front() {
                    break next.unwrap();
                }
                woken(&accept_wakes, seen, "a connection").await;
            };
            let (waker, wakes) = counting_waker();
            let mut conn = start_conn(stream, waker);
            let data = pattern(1 << 20);
            let expected = data.clone();
            let sender = tokio::task::spawn_local(async move {
                send(&client, &data).await;
                client
            });
            // Unread, the inbox fills up to its limit plus one read, and stays there.
            let inbox = || conn.conn.state.borrow().inbox.len();
            eventually("a full inbox", || (inbox() >= INBOX_LIMIT).then_some(())).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(inbox() < INBOX_LIMIT + READ_BUFFER, "inbox at {}", inbox());
            let got = read_exactly(&mut conn, &wakes, expected.len()).await;
            assert!(got == expected, "bytes lost or reordered");
            drop(sender.await.unwrap());
        });
    }

    #[test]
    fn client_close_reads_closed_after_the_data() {
        run(async {
            let mut pair = connected().await;
            send(&pair.client, b"bye").await;
            drop(pair.client);
            let (got, end) = read_to_end(&mut *pair.conn, &pair.wakes).await;
            assert_eq!(got, b"bye");
            assert!(matches!(end, ReadOutcome::Closed), "{end:?}");
            assert!(matches!(
                pair.conn.read(&mut Vec::new(), 1),
                ReadOutcome::Closed
            ));
        });
    }

    #[test]
    fn dropping_the_transport_closes_the_socket_and_ends_its_tasks() {
        run(async {
            let pair = connected().await;
            assert_eq!(live(&CONNS), 1);
            drop(pair.conn);
            assert_eq!(receive(&pair.client, &mut [0; 16]).await, 0);
            eventually("the tasks to end", || (live(&CONNS) == 0).then_some(())).await;
        });
    }

    #[test]
    fn dropping_the_transport_still_sends_what_write_accepted() {
        run(async {
            let mut pair = connected().await;
            let data = pattern(OUTBOX_LIMIT);
            assert_eq!(pair.conn.write(&data).unwrap(), data.len());
            drop(pair.conn);
            let got = receive_up_to(&pair.client, 2 * data.len()).await;
            assert!(got == data, "got {} of {} bytes", got.len(), data.len());
        });
    }

    #[test]
    fn a_peer_that_never_reads_gets_linger_then_the_connection_is_gone() {
        run(async {
            let (mut acceptor, accept_wakes) = listen();
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(4096).unwrap();
            let client = socket
                .connect(acceptor.local_addr().unwrap())
                .await
                .unwrap();
            let (accepted, _) = accept(&mut acceptor, &accept_wakes).await;
            let (waker, wakes) = counting_waker();
            let mut conn = accepted.attach(waker);
            // Fill every buffer on the way: full, and no wake comes.
            let chunk = pattern(OUTBOX_LIMIT);
            loop {
                let seen = wakes.count();
                if conn.write(&chunk).unwrap() > 0 {
                    continue;
                }
                let wait = tokio::time::timeout(
                    Duration::from_millis(50),
                    woken(&wakes, seen, "a write wake"),
                );
                if wait.await.is_err() {
                    break;
                }
            }
            let closed_at = Instant::now();
            drop(conn);
            eventually("the writer to give up", || {
                (live(&CONNS) == 0).then_some(())
            })
            .await;
            assert!(closed_at.elapsed() >= LINGER);
            drop(client);
        });
    }

    #[test]
    fn many_connections_leave_nothing_behind() {
        run(async {
            let (mut acceptor, accept_wakes) = listen();
            let addr = acceptor.local_addr().unwrap();
            for i in 0..100 {
                let client = Client::connect(addr).await.unwrap();
                let (accepted, _) = accept(&mut acceptor, &accept_wakes).await;
                let (waker, _) = counting_waker();
                let mut conn = accepted.attach(waker);
                if i % 2 == 0 {
                    drop(client); // client first
                } else {
                    assert_eq!(conn.write(b"x").unwrap(), 1);
                    assert_eq!(receive(&client, &mut [0]).await, 1);
                }
                drop(conn);
            }
            eventually("every connection to close", || {
                (live(&CONNS) == 0).then_some(())
            })
            .await;
            assert_eq!(live(&ACCEPT_TASKS), 1);
            drop(acceptor);
            eventually("the accept task to end", || {
                (live(&ACCEPT_TASKS) == 0).then_some(())
            })
            .await;
            let refused = Client::connect(addr).await.unwrap_err();
            assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
        });
    }

    #[test]
    fn a_connection_flood_waits_in_a_bounded_queue() {
        run(async {
            let (mut acceptor, accept_wakes) = listen();
            let addr = acceptor.local_addr().unwrap();
            let mut clients = Vec::new();
            for _ in 0..ACCEPT_QUEUE + 36 {
                clients.push(Client::connect(addr).await.unwrap());
            }
            let shared = Rc::clone(&acceptor.shared);
            let queued = || shared.queue.borrow().len();
            eventually("a full queue", || (queued() >= ACCEPT_QUEUE).then_some(())).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(queued(), ACCEPT_QUEUE);
            for _ in 0..clients.len() {
                accept(&mut acceptor, &accept_wakes).await;
            }
            assert_eq!(queued(), 0);
        });
    }

    #[test]
    fn dropping_an_unattached_connection_closes_it() {
        run(async {
            let (mut acceptor, accept_wakes) = listen();
            let client = Client::connect(acceptor.local_addr().unwrap())
                .await
                .unwrap();
            let (accepted, _) = accept(&mut acceptor, &accept_wakes).await;
            drop(accepted);
            assert_eq!(receive(&client, &mut [0]).await, 0);
            assert_eq!(live(&CONNS), 0);
        });
    }
}
