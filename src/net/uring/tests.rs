//! The backend against real sockets on loopback, on the runtime the shard uses.

use std::sync::Arc;
use std::task::Wake;

use tokio::net::TcpStream as Client;
use tokio::time::Instant;

use super::*;
use crate::runtime::wake_slot::WakeCount as Wakes;

const TIMEOUT: Duration = Duration::from_secs(5);

/// Runs a test on the shard's runtime. Where the kernel refuses a ring the test fails,
/// unless `SHARDLOOP_ALLOW_SKIP=1` lets it skip (as the integration tests' `common::skip`
/// does; `.ci/run` never sets it).
fn run(test: impl Future<Output = ()>) {
    if let Err(e) = probe() {
        assert!(
            std::env::var_os("SHARDLOOP_ALLOW_SKIP").is_some_and(|v| v == "1"),
            "this test cannot run here: io_uring unavailable ({e}); set SHARDLOOP_ALLOW_SKIP=1 \
             to skip it on a host that refuses io_uring (CI never does)"
        );
        eprintln!("skipped: io_uring unavailable: {e} (SHARDLOOP_ALLOW_SKIP=1)");
        return;
    }
    crate::net::BackendKind::IoUring
        .block_on(async { tokio::time::timeout(TIMEOUT * 2, test).await })
        .expect("a runtime")
        .expect("test timed out");
}

/// Tries `check` until it yields, sleeping between tries (the driver runs meanwhile).
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

/// Open connection slots of the thread's ring (0 when there is no ring).
fn open_conns() -> usize {
    THREAD_RING.with(|r| {
        r.borrow()
            .upgrade()
            .map_or(0, |ring| ring.borrow().conns.len())
    })
}

fn ring_alive() -> bool {
    THREAD_RING.with(|r| r.borrow().upgrade().is_some())
}

fn listen() -> (Box<dyn Acceptor>, Arc<Wakes>) {
    let listener = crate::net::bind("127.0.0.1:0".parse().unwrap(), 262_144).unwrap();
    let (waker, wakes) = Wakes::waker();
    (Uring.listen(listener, waker).unwrap(), wakes)
}

/// The next connection; a `Pending` must be followed by a wake.
async fn accept(acceptor: &mut dyn Acceptor, wakes: &Wakes) -> (Accepted, SocketAddr) {
    loop {
        let seen = wakes.count();
        match acceptor.poll_accept(&mut |_| true) {
            Poll::Ready(Ok(Accept::Admitted(accepted, peer))) => return (accepted, peer),
            Poll::Ready(Ok(Accept::Refused)) => panic!("the screen admits every connection"),
            Poll::Ready(Err(e)) => panic!("accept failed: {e}"),
            Poll::Pending => woken(wakes, seen, "the acceptor's waker").await,
        }
    }
}

struct Pair {
    client: Client,
    conn: Box<dyn Transport>,
    wakes: Arc<Wakes>,
    _acceptor: Box<dyn Acceptor>,
}

async fn connected() -> Pair {
    let (mut acceptor, accept_wakes) = listen();
    let addr = acceptor.local_addr().unwrap();
    let client = Client::connect(addr).await.unwrap();
    let (accepted, peer) = accept(&mut *acceptor, &accept_wakes).await;
    assert_eq!(peer, client.local_addr().unwrap());
    let (waker, wakes) = Wakes::waker();
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
        eperm.to_string().contains("io_uring_disabled") || eperm.to_string().contains("seccomp")
    );
    assert_eq!(
        explained(libc::EIO).to_string(),
        io::Error::from_raw_os_error(libc::EIO).to_string()
    );
}

#[test]
fn user_data_round_trips_and_a_freed_slot_goes_stale() {
    let mut slab = Slab::new();
    let first = slab.insert("a");
    for op in [Op::Recv, Op::Send, Op::Accept, Op::Cancel] {
        assert_eq!(decode(user_data(op, first)), Some((op, first)));
    }
    let far = Key::from_parts((MAX_SLOTS - 1) as u32, u32::MAX);
    assert_eq!(decode(user_data(Op::Send, far)), Some((Op::Send, far)));
    assert_eq!(decode(0), None);
    assert_eq!(slab.remove(first), Some("a"));
    let second = slab.insert("b");
    assert_eq!(second.index(), first.index());
    assert!(slab.get_mut(first).is_none(), "a stale key finds nothing");
    assert_eq!(slab.remove(first), None);
    assert_eq!(slab.get_mut(second), Some(&mut "b"));
}

#[test]
fn the_screen_sees_the_peer_and_a_refused_connection_is_closed_without_a_slot() {
    run(async {
        let (mut acceptor, wakes) = listen();
        let addr = acceptor.local_addr().unwrap();
        let refused = Client::connect(addr).await.unwrap();
        let mut seen = Vec::new();
        loop {
            let before = wakes.count();
            match acceptor.poll_accept(&mut |peer| {
                seen.push(peer);
                false
            }) {
                Poll::Ready(Ok(Accept::Refused)) => break,
                Poll::Ready(Ok(Accept::Admitted(..))) => panic!("the screen refused it"),
                Poll::Ready(Err(e)) => panic!("accept failed: {e}"),
                Poll::Pending => woken(&wakes, before, "the acceptor's waker").await,
            }
        }
        assert_eq!(
            seen,
            [refused.local_addr().unwrap()],
            "the peer, from the accept"
        );
        assert_eq!(open_conns(), 0, "no receive armed, no slot taken");
        assert!(
            receive_up_to(&refused, 1).await.is_empty(),
            "closed: end of stream"
        );
        // The next one is admitted and served as usual.
        let client = Client::connect(addr).await.unwrap();
        let (accepted, peer) = accept(&mut *acceptor, &wakes).await;
        assert_eq!(peer, client.local_addr().unwrap());
        let (waker, _) = Wakes::waker();
        let mut conn = accepted.attach(waker);
        assert_eq!(open_conns(), 1);
        assert_eq!(conn.write(b"hi").unwrap(), 2);
        assert_eq!(receive_up_to(&client, 2).await, b"hi");
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
fn a_megabyte_in_arrives_whole_through_one_small_buffer() {
    run(async {
        let mut pair = connected().await;
        let data = pattern(1 << 20);
        let expected = data.clone();
        let client = pair.client;
        let sender = tokio::task::spawn_local(async move {
            send(&client, &data).await;
            client
        });
        let got = read_exactly(&mut *pair.conn, &pair.wakes, expected.len()).await;
        assert!(got == expected, "bytes lost or reordered");
        pair.client = sender.await.unwrap();
    });
}

#[test]
fn written_bytes_reach_the_client() {
    run(async {
        let mut pair = connected().await;
        assert_eq!(pair.conn.write(b"world").unwrap(), 5);
        assert_eq!(pair.conn.write(b"!").unwrap(), 1);
        assert_eq!(receive_up_to(&pair.client, 6).await, b"world!");
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
                    // Let the driver submit, as the loop's park would.
                    tokio::task::yield_now().await;
                }
            }
        }
        assert!(fulls > 0, "1 MiB never filled the outbox");
        assert!(receiver.await.unwrap() == data, "bytes lost or reordered");
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
fn dropping_the_transport_closes_the_socket_and_frees_its_slot() {
    run(async {
        let pair = connected().await;
        assert_eq!(open_conns(), 1);
        drop(pair.conn);
        assert_eq!(receive(&pair.client, &mut [0; 16]).await, 0);
        eventually("the slot to go", || (open_conns() == 0).then_some(())).await;
    });
}

#[test]
fn dropping_the_transport_still_sends_what_write_accepted() {
    run(async {
        let mut pair = connected().await;
        let data = pattern(OUTBOX_LIMIT);
        let mut taken = 0;
        while taken < data.len() {
            taken += pair.conn.write(&data[taken..]).unwrap();
        }
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
        let (accepted, _) = accept(&mut *acceptor, &accept_wakes).await;
        let (waker, wakes) = Wakes::waker();
        let mut conn = accepted.attach(waker);
        // Fill every buffer on the way: full, and no wake comes.
        let chunk = pattern(OUTBOX_LIMIT);
        loop {
            let seen = wakes.count();
            if conn.write(&chunk).unwrap() > 0 {
                tokio::task::yield_now().await;
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
        eventually("the send to be given up", || {
            (open_conns() == 0).then_some(())
        })
        .await;
        assert!(closed_at.elapsed() >= LINGER);
        drop(client);
    });
}

#[test]
fn many_connections_leave_nothing_behind_and_the_ring_goes_last() {
    run(async {
        let (mut acceptor, accept_wakes) = listen();
        let addr = acceptor.local_addr().unwrap();
        for i in 0..100 {
            let client = Client::connect(addr).await.unwrap();
            let (accepted, _) = accept(&mut *acceptor, &accept_wakes).await;
            let (waker, _) = Wakes::waker();
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
            (open_conns() == 0).then_some(())
        })
        .await;
        drop(acceptor);
        eventually("the ring to go", || (!ring_alive()).then_some(())).await;
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
        let queued = || {
            THREAD_RING.with(|r| {
                let ring = r.borrow().upgrade().unwrap();
                let mut ring = ring.borrow_mut();
                ring.listeners
                    .values_mut()
                    .map(|l| l.queue.len())
                    .sum::<usize>()
            })
        };
        eventually("a full queue", || (queued() >= ACCEPT_QUEUE).then_some(())).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(queued(), ACCEPT_QUEUE);
        for _ in 0..clients.len() {
            accept(&mut *acceptor, &accept_wakes).await;
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
        let (accepted, _) = accept(&mut *acceptor, &accept_wakes).await;
        drop(accepted);
        assert_eq!(receive(&client, &mut [0]).await, 0);
        assert_eq!(open_conns(), 0);
    });
}

#[test]
fn a_ring_with_operations_in_flight_gets_their_buffers_back_before_it_goes() {
    run(async {
        let (mut acceptor, accept_wakes) = listen();
        let _client = Client::connect(acceptor.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = accept(&mut *acceptor, &accept_wakes).await;
        let (waker, _) = Wakes::waker();
        let conn = accepted.attach(waker);
        let ring = THREAD_RING.with(|r| r.borrow().upgrade()).unwrap();
        let mut ring = ring.borrow_mut();
        ring.submit_batch();
        // A receive (nothing to read) and the next accept are in flight, with their buffers.
        assert_eq!(ring.in_flight, 2);
        assert!(ring.quiesce());
        assert_eq!(ring.in_flight, 0);
        drop(ring);
        std::mem::forget(conn); // its slot's operations are accounted for already
    });
}

#[test]
fn a_new_runtime_on_the_same_thread_gets_a_new_ring() {
    let leaked = std::cell::Cell::new(None);
    for _ in 0..2 {
        run(async {
            let pair = connected().await;
            // A transport that outlives its runtime keeps its ring, but not for the next one.
            leaked.set(Some(pair.conn));
            std::mem::forget(pair._acceptor);
        });
    }
    // Empty only when the test was skipped (io_uring refused and skipping allowed).
    assert!(leaked.take().is_some() || probe().is_err());
}

/// Queues `n` no-ops whose completions the ring ignores (they are tagged as cancellations),
/// numbered 0.. in their slot index.
fn queue_nops(ring: &mut Ring, n: u32) {
    for index in 0..n {
        let entry = opcode::Nop::new()
            .build()
            .user_data(user_data(Op::Cancel, Key::from_parts(index, 0)));
        // SAFETY: a no-op points to no buffer.
        unsafe { ring.push(&entry) }.expect("a no-op queued");
    }
}

/// A no-op the ring ignores on completion.
fn nop() -> squeue::Entry {
    opcode::Nop::new()
        .build()
        .user_data(user_data(Op::Cancel, Key::from_parts(0, 0)))
}

fn queued(ring: &mut Ring) -> usize {
    ring.uring.submission().len()
}

/// Takes the ring's completions (none of them handled) and returns the no-ops' numbers.
fn completed_nops(ring: &mut Ring) -> Vec<u32> {
    ring.move_completions_to_backlog();
    ring.backlog
        .drain(..)
        .filter_map(|cqe| decode(cqe.user_data()))
        .filter(|(op, _)| *op == Op::Cancel)
        .map(|(_, key)| key.index())
        .collect()
}

#[test]
fn a_submit_hands_the_kernel_one_batch_and_every_entry_exactly_once() {
    run(async {
        let (_acceptor, _) = listen();
        let shared = THREAD_RING.with(|r| r.borrow().upgrade()).unwrap();
        let mut ring = shared.borrow_mut();
        assert_eq!(queued(&mut ring), 1, "the listener's accept");
        ring.submit_batch();
        assert_eq!(queued(&mut ring), 0);

        let total = 2 * SUBMIT_BATCH + 5;
        queue_nops(&mut ring, total);
        assert!(ring.submit_batch());
        let batch = SUBMIT_BATCH as usize;
        assert_eq!(
            queued(&mut ring),
            batch + 5,
            "one batch per submit, the rest kept"
        );
        let mut done = completed_nops(&mut ring);
        assert_eq!(done, (0..SUBMIT_BATCH).collect::<Vec<_>>(), "oldest first");
        ring.submit_batch();
        ring.submit_batch();
        assert_eq!(queued(&mut ring), 0);
        done.extend(completed_nops(&mut ring));
        assert_eq!(
            done,
            (0..total).collect::<Vec<_>>(),
            "each entry once, in order"
        );
    });
}

#[test]
fn the_loop_gets_a_turn_between_two_batches() {
    run(async {
        let (_acceptor, _) = listen();
        let shared = THREAD_RING.with(|r| r.borrow().upgrade()).unwrap();
        // Let the driver submit the accept and go idle.
        eventually("an idle ring", || {
            (queued(&mut shared.borrow_mut()) == 0).then_some(())
        })
        .await;

        queue_nops(&mut shared.borrow_mut(), 3 * SUBMIT_BATCH);
        // This future is the runtime's `block_on`, like the shard's loop: every time it yields,
        // the driver does exactly one batch before it runs again.
        for left in [2, 1, 0] {
            tokio::task::yield_now().await;
            let queued = queued(&mut shared.borrow_mut());
            assert_eq!(queued, left * SUBMIT_BATCH as usize, "one batch per turn");
        }
    });
}

#[test]
fn a_full_submission_queue_is_flushed_by_a_submit_and_then_fails_with_an_error_not_a_panic() {
    run(async {
        let (_acceptor, _) = listen();
        let shared = THREAD_RING.with(|r| r.borrow().upgrade()).unwrap();
        let mut ring = shared.borrow_mut();
        ring.submit_batch(); // the listener's accept
        let capacity = ring.uring.submission().capacity();
        let batch = SUBMIT_BATCH as usize;
        queue_nops(&mut ring, capacity as u32);
        assert_eq!(queued(&mut ring), capacity, "full");

        // One more: a batch goes to the kernel to make room.
        queue_nops(&mut ring, 1);
        assert_eq!(queued(&mut ring), capacity - batch + 1);

        // Full again, and the kernel says "busy" once: retried, still queued.
        queue_nops(&mut ring, batch as u32 - 1);
        inject_enter_failure(libc::EBUSY);
        queue_nops(&mut ring, 1);
        assert_eq!(queued(&mut ring), capacity - batch + 1);
        assert!(ring.dead.is_none());

        // Full again, and the kernel refuses the flush for good: an error, the ring dead.
        queue_nops(&mut ring, batch as u32 - 1);
        inject_enter_failure(libc::EIO);
        // SAFETY: a no-op points to no buffer.
        let e = unsafe { ring.push(&nop()) }.unwrap_err();
        let failed = BackendFailed::of(&e).expect("a backend failure");
        assert!(
            failed
                .0
                .starts_with("io_uring ring failed: io_uring_enter: ")
                && failed
                    .0
                    .contains(&io::Error::from_raw_os_error(libc::EIO).to_string()),
            "{failed}"
        );
        assert_eq!(ring.dead.as_ref(), Some(failed));
        // Later pushes fail at once, without entering the kernel.
        // SAFETY: as above.
        assert!(unsafe { ring.push(&nop()) }.is_err());
        assert_eq!(queued(&mut ring), capacity);
    });
}

#[test]
fn a_dead_ring_fails_its_sockets_with_the_reason_and_goes_idle_instead_of_spinning() {
    run(async {
        let mut pair = connected().await;
        let dead = THREAD_RING.with(|r| r.borrow().upgrade()).unwrap();
        eventually("an idle ring", || {
            (queued(&mut dead.borrow_mut()) == 0).then_some(())
        })
        .await;

        // The send this write queues is where the kernel refuses the ring.
        inject_enter_failure(libc::EBADF);
        let seen = pair.wakes.count();
        assert_eq!(pair.conn.write(b"hello").unwrap(), 5);
        woken(&pair.wakes, seen, "the connection's waker").await;

        let mut buf = Vec::new();
        let ReadOutcome::Failed(e) = pair.conn.read(&mut buf, 100) else {
            panic!("a read on a dead ring must fail");
        };
        // The reason the server closes the connection with, counted as its own kind.
        let reason = crate::net::reason::io_failed("read", &e);
        assert!(reason.contains("Bad file descriptor"), "{reason}");
        assert_eq!(crate::net::reason::kind_of(&reason), "io_uring ring failed");
        assert!(BackendFailed::of(&pair.conn.write(b"more").unwrap_err()).is_some());
        let Poll::Ready(Err(e)) = pair._acceptor.poll_accept(&mut |_| true) else {
            panic!("the listener must fail too");
        };
        assert!(BackendFailed::of(&e).is_some(), "{e}");

        // Idle, not spinning: the driver does not run again by itself.
        let runs = dead.borrow().runs;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(dead.borrow().runs <= runs + 1, "the driver kept running");

        // The thread forgot it: a new listener gets a fresh ring, which works.
        let mut fresh = connected().await;
        let live = THREAD_RING.with(|r| r.borrow().upgrade()).unwrap();
        assert!(!Rc::ptr_eq(&live, &dead));
        assert_eq!(fresh.conn.write(b"ok").unwrap(), 2);
        assert_eq!(receive_up_to(&fresh.client, 2).await, b"ok");

        // The dead ring goes with its last socket, without waiting for answers it cannot get.
        let began = std::time::Instant::now();
        let gone = Rc::downgrade(&dead);
        drop(pair);
        drop(dead);
        eventually("the dead ring to go", || {
            gone.upgrade().is_none().then_some(())
        })
        .await;
        assert!(began.elapsed() < DROP_WAIT, "dropping a dead ring waited");
    });
}

/// A waker that runs `first` (on the thread that wakes it) the first time it is woken, and
/// counts every wake.
struct OnFirstWake {
    first: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
    wakes: Wakes,
}

impl Wake for OnFirstWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let first = self.first.lock().unwrap().take();
        if let Some(first) = first {
            first();
        }
        self.wakes.record();
    }
}

/// A completion handler that re-arms on a full submission queue, with the kernel saying "try
/// again" (EAGAIN), moves the completions that arrived meanwhile to the backlog to make room:
/// they are handled like the others. Dropped, a listener's accept would stay in flight for
/// good (nobody could connect through it again, while the shard looked healthy) and a
/// connection's receive would keep its slot for good.
#[test]
fn completions_a_handler_moves_aside_on_a_full_queue_are_not_lost() {
    run(async {
        // The second listener and a connection of its: their completions are moved aside.
        let (mut second, second_wakes) = listen();
        let second_addr = second.local_addr().unwrap();
        let sender = std::net::TcpStream::connect(second_addr).unwrap();
        let (accepted, _) = accept(&mut *second, &second_wakes).await;
        let (waker, conn_wakes) = Wakes::waker();
        let mut conn = accepted.attach(waker);

        // The first listener: the handler of its accept re-arms it on a full queue. Its waker
        // runs inside that handler, just before the re-arm, on this thread: there the
        // connection's client sends a byte and a second client connects to the second
        // listener (the ring runs on this thread, so the kernel completes the receive and
        // the accept on the way out of those calls), and the kernel's next `io_uring_enter`
        // is told to answer EAGAIN.
        let second_client = Arc::new(std::sync::Mutex::new(None));
        let meanwhile = {
            let second_client = Arc::clone(&second_client);
            let mut sender = sender;
            move || {
                use std::io::Write;
                sender.write_all(b"x").unwrap();
                let client = std::net::TcpStream::connect(second_addr).unwrap();
                *second_client.lock().unwrap() = Some((client, sender));
                inject_enter_failure(libc::EAGAIN);
            }
        };
        let first_wakes = Arc::new(OnFirstWake {
            first: std::sync::Mutex::new(Some(Box::new(meanwhile))),
            wakes: Wakes::default(),
        });
        let listener = crate::net::bind("127.0.0.1:0".parse().unwrap(), 262_144).unwrap();
        let mut first = Uring
            .listen(listener, Waker::from(Arc::clone(&first_wakes)))
            .unwrap();
        let shared = THREAD_RING.with(|r| r.borrow().upgrade()).unwrap();
        eventually("an idle ring", || {
            (queued(&mut shared.borrow_mut()) == 0).then_some(())
        })
        .await;

        let _knock = {
            let mut ring = shared.borrow_mut();
            let capacity = ring.uring.submission().capacity();
            queue_nops(&mut ring, capacity as u32);
            let knock = std::net::TcpStream::connect(first.local_addr().unwrap()).unwrap();
            let deadline = std::time::Instant::now() + TIMEOUT;
            while ring.uring.completion().is_empty() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the first listener's accept never completed"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(ring.complete_all());
            knock
        };
        let moved_aside = second_client.lock().unwrap().take();
        assert!(moved_aside.is_some(), "the handler's wake never ran");

        // Everything completed: the knock, the second client, the byte.
        let (knocked, _) = accept(&mut *first, &first_wakes.wakes).await;
        drop(knocked);
        let (later, _) = accept(&mut *second, &second_wakes).await;
        drop(later);
        assert_eq!(read_exactly(&mut *conn, &conn_wakes, 1).await, b"x");
        // And the second listener still accepts.
        let third = Client::connect(second_addr).await.unwrap();
        let (accepted, peer) = accept(&mut *second, &second_wakes).await;
        assert_eq!(peer, third.local_addr().unwrap());
        drop(accepted);

        // No slot is kept: with the transport gone, so is the connection's slot, and only
        // the two listeners' accepts are in flight.
        drop(conn);
        eventually("the connection's slot to go", || {
            (open_conns() == 0).then_some(())
        })
        .await;
        eventually("only the two accepts in flight", || {
            (shared.borrow().in_flight == 2).then_some(())
        })
        .await;
        drop(moved_aside);
    });
}

// ---------------------------------------------------------------------------------------------
// Multishot receives and the shared pool

/// Runs `f` on the thread's ring.
fn with_ring<T>(f: impl FnOnce(&mut Ring) -> T) -> T {
    let ring = THREAD_RING.with(|r| r.borrow().upgrade()).expect("a ring");
    let mut ring = ring.borrow_mut();
    f(&mut ring)
}

/// Pool buffers the connections hold.
fn lent() -> usize {
    with_ring(|r| r.pool.as_ref().map_or(0, Pool::lent))
}

fn recv_stats() -> RecvStats {
    with_ring(|r| r.recv_stats)
}

/// Bytes the connections hold in pool buffers, unread.
fn held_bytes() -> usize {
    with_ring(|r| {
        r.conns
            .iter()
            .flat_map(|(_, c)| c.held.iter())
            .map(|h| (h.len - h.taken) as usize)
            .sum()
    })
}

fn receiving() -> bool {
    with_ring(|r| r.conns.iter().any(|(_, c)| c.recv_in_flight))
}

/// The key of the ring's only connection.
fn only_conn() -> Key {
    with_ring(|r| {
        let keys: Vec<Key> = r.conns.iter().map(|(key, _)| key).collect();
        assert_eq!(keys.len(), 1, "one connection");
        keys[0]
    })
}

/// The next ring of this thread gets a pool of `count` buffers of `size` bytes.
fn small_pool(count: u16, size: u32) {
    NEXT_POOL.with(|p| p.set(Some(Some((count, size)))));
}

#[test]
fn a_connection_keeps_one_receive_armed_across_packets() {
    run(async {
        let mut pair = connected().await;
        assert!(with_ring(|r| r.pooled()), "this kernel takes the pool");
        let pushed = with_ring(|r| r.pushed);
        for i in 0..20u8 {
            send(&pair.client, &[i; 10]).await;
            let got = read_exactly(&mut *pair.conn, &pair.wakes, 10).await;
            assert_eq!(got, [i; 10]);
        }
        assert_eq!(
            with_ring(|r| r.pushed),
            pushed,
            "no entry is queued per packet"
        );
        assert_eq!(recv_stats(), RecvStats::default());
        assert_eq!(lent(), 0, "every buffer read out went back to the pool");
        assert!(receiving());
    });
}

#[test]
fn bytes_spread_over_several_buffers_read_whole_and_in_order() {
    run(async {
        small_pool(16, 8);
        let mut pair = connected().await;
        let data = pattern(60);
        // A packet's start, held in two buffers before its rest arrives in more.
        send(&pair.client, &data[..13]).await;
        eventually("the start held", || (held_bytes() == 13).then_some(())).await;
        assert_eq!(lent(), 2);
        send(&pair.client, &data[13..]).await;
        eventually("all of it held", || (held_bytes() == 60).then_some(())).await;
        let mut buf = Vec::new();
        // Part of a buffer, then the rest of it and every other buffer in one read.
        let holding = lent();
        assert!(matches!(pair.conn.read(&mut buf, 5), ReadOutcome::Data(5)));
        assert_eq!(lent(), holding, "the buffer read in part is still held");
        assert!(matches!(
            pair.conn.read(&mut buf, 64),
            ReadOutcome::Data(55)
        ));
        assert_eq!(buf, data);
        assert_eq!(lent(), 0);
        assert!(matches!(
            pair.conn.read(&mut buf, 64),
            ReadOutcome::WouldBlock
        ));
        assert_eq!(recv_stats(), RecvStats::default());
    });
}

#[test]
fn an_empty_pool_ends_receives_and_the_buffers_coming_back_rearm_them() {
    run(async {
        small_pool(4, 16);
        let mut a = connected().await;
        let big = pattern(1000);
        send(&a.client, &big).await;
        eventually("the pool to run out", || {
            (recv_stats().exhausted >= 1).then_some(())
        })
        .await;
        assert_eq!(lent(), 4, "the connection holds every buffer");
        assert!(!receiving(), "its receive ended");
        let mut b = connected().await;
        send(&b.client, b"hello").await;
        eventually("the second connection to find the pool empty", || {
            (recv_stats().exhausted >= 2).then_some(())
        })
        .await;
        let got = read_exactly(&mut *a.conn, &a.wakes, big.len()).await;
        assert!(got == big, "bytes lost or reordered");
        let got = read_exactly(&mut *b.conn, &b.wakes, 5).await;
        assert_eq!(got, b"hello");
        let stats = recv_stats();
        assert!(stats.rearmed >= 2, "{stats:?}");
        assert_eq!(lent(), 0);
        with_ring(|r| {
            assert!(r.conns.iter().all(|(_, c)| c.recv_in_flight && !c.starved));
        });
    });
}

#[test]
fn a_connection_holding_its_limit_pauses_its_receive_until_read() {
    run(async {
        small_pool(256, 16);
        let mut pair = connected().await;
        let data = pattern(HELD_LIMIT * 16 * 4);
        send(&pair.client, &data).await;
        eventually("the receive to pause", || {
            (recv_stats().paused == 1 && !receiving()).then_some(())
        })
        .await;
        let held = lent();
        assert!(held >= HELD_LIMIT, "{held} buffers held");
        assert_eq!(recv_stats().exhausted, 0, "the pool was not taken whole");
        let got = read_exactly(&mut *pair.conn, &pair.wakes, data.len()).await;
        assert!(got == data, "bytes lost or reordered");
        assert!(recv_stats().rearmed >= 1);
        // Re-armed: more bytes still arrive.
        send(&pair.client, b"after").await;
        let got = read_exactly(&mut *pair.conn, &pair.wakes, 5).await;
        assert_eq!(got, b"after");
        assert_eq!(lent(), 0);
    });
}

#[test]
fn a_closed_connection_gives_its_buffers_back_and_no_completion_reaches_its_successor() {
    run(async {
        let (mut acceptor, accept_wakes) = listen();
        let addr = acceptor.local_addr().unwrap();

        // Bytes held and never read: back to the pool with the transport.
        let first = Client::connect(addr).await.unwrap();
        let (conn, _) = attach_next(&mut *acceptor, &accept_wakes).await;
        send(&first, b"unread").await;
        eventually("the bytes held", || (lent() > 0).then_some(())).await;
        drop(conn);
        assert_eq!(lent(), 0, "given back at once");
        eventually("the slot to go", || (open_conns() == 0).then_some(())).await;

        // Bytes whose completion is still to come when the transport goes: they race its
        // cancellation.
        let second = Client::connect(addr).await.unwrap();
        let (conn, _) = attach_next(&mut *acceptor, &accept_wakes).await;
        let old = only_conn();
        send(&second, b"late").await;
        drop(conn);
        eventually("the slot to go", || (open_conns() == 0).then_some(())).await;
        assert_eq!(lent(), 0);
        assert_eq!(with_ring(|r| r.in_flight), 1, "only the listener's accept");

        // The next connection gets the slot, under a new generation, and only its own bytes.
        let third = Client::connect(addr).await.unwrap();
        let (mut conn, wakes) = attach_next(&mut *acceptor, &accept_wakes).await;
        let new = only_conn();
        assert_eq!(new.index(), old.index(), "the freed slot is reused");
        assert_ne!(new.generation(), old.generation());
        send(&third, b"new").await;
        let got = read_exactly(&mut *conn, &wakes, 3).await;
        assert_eq!(got, b"new");
        assert!(matches!(
            conn.read(&mut Vec::new(), 64),
            ReadOutcome::WouldBlock
        ));
        drop(first);
        drop(second);
    });
}

#[test]
fn a_kernel_refusing_the_pool_gets_single_shot_receives_into_own_buffers() {
    run(async {
        NEXT_POOL.with(|p| p.set(Some(None)));
        let mut pair = connected().await;
        assert!(with_ring(|r| r.pool.is_none() && !r.pooled()));
        let data = pattern(3 * RECV_BUFFER + 100);
        send(&pair.client, &data).await;
        let got = read_exactly(&mut *pair.conn, &pair.wakes, data.len()).await;
        assert!(got == data, "bytes lost or reordered");
        let pushed = with_ring(|r| r.pushed);
        send(&pair.client, b"x").await;
        let got = read_exactly(&mut *pair.conn, &pair.wakes, 1).await;
        assert_eq!(got, b"x");
        assert_eq!(
            with_ring(|r| r.pushed),
            pushed + 1,
            "one receive submitted for the packet"
        );
        let key = only_conn();
        with_ring(|r| assert_eq!(r.conns.get(key).unwrap().recv.len(), RECV_BUFFER));
    });
}

/// Accepts the next connection and attaches it.
async fn attach_next(
    acceptor: &mut dyn Acceptor,
    accept_wakes: &Wakes,
) -> (Box<dyn Transport>, Arc<Wakes>) {
    let (accepted, _) = accept(acceptor, accept_wakes).await;
    let (waker, wakes) = Wakes::waker();
    (accepted.attach(waker), wakes)
}

#[test]
fn a_pool_refilled_before_its_empty_answer_is_handled_rearms_at_once() {
    run(async {
        small_pool(4, 16);
        let mut a = connected().await;
        send(&a.client, &pattern(64)).await;
        eventually("the pool lent whole", || (lent() == 4).then_some(())).await;
        let exhausted = recv_stats().exhausted;
        // B's receive meets the empty pool inside this submit; its answer is not handled yet
        // (no await between the attach, the submit and the read below).
        let mut b = connected().await;
        with_ring(|r| r.enter_batch()).unwrap();
        // Every buffer comes back before B's answer is seen.
        let mut got = Vec::new();
        assert!(matches!(a.conn.read(&mut got, 1024), ReadOutcome::Data(64)));
        assert_eq!(lent(), 0);
        eventually("B's empty-pool answer", || {
            (recv_stats().exhausted > exhausted).then_some(())
        })
        .await;
        // Re-armed at once, not left waiting for a buffer that already came back.
        send(&b.client, b"hello").await;
        let got = read_exactly(&mut *b.conn, &b.wakes, 5).await;
        assert_eq!(got, b"hello");
        with_ring(|r| {
            assert!(
                r.starved
                    .iter()
                    .all(|&key| r.conns.get(key).is_none_or(|c| !c.starved))
            )
        });
    });
}

#[test]
fn a_kernel_refusing_multishot_receives_falls_back_for_every_connection() {
    run(async {
        REFUSE_MULTISHOT.with(|r| r.set(true));
        let (mut acceptor, accept_wakes) = listen();
        let addr = acceptor.local_addr().unwrap();
        let (client_a, client_b) = (
            Client::connect(addr).await.unwrap(),
            Client::connect(addr).await.unwrap(),
        );
        let (accepted_a, _) = accept(&mut *acceptor, &accept_wakes).await;
        let (accepted_b, _) = accept(&mut *acceptor, &accept_wakes).await;
        // Both receives are armed before either refusal is seen.
        let (waker_a, wakes_a) = Wakes::waker();
        let (waker_b, wakes_b) = Wakes::waker();
        let mut a = accepted_a.attach(waker_a);
        let mut b = accepted_b.attach(waker_b);
        eventually("both refusals", || {
            with_ring(|r| r.refused.is_empty()).then_some(())
        })
        .await;
        assert!(with_ring(|r| r.multishot_refused && !r.pooled()));
        send(&client_a, b"first").await;
        send(&client_b, b"second").await;
        assert_eq!(read_exactly(&mut *a, &wakes_a, 5).await, b"first");
        assert_eq!(read_exactly(&mut *b, &wakes_b, 6).await, b"second");
        with_ring(|r| {
            assert!(r.conns.iter().all(|(_, c)| c.recv.len() == RECV_BUFFER));
        });
        REFUSE_MULTISHOT.with(|r| r.set(false));
    });
}

/// Wakes the event loop of the thread that made it.
struct WakeLoop(crate::LoopContext);

impl Wake for WakeLoop {
    fn wake(self: Arc<Self>) {
        self.0.wake();
    }
}

/// Stops the loop if the test is still running after `TIMEOUT * 4`: a wake lost in the loop's
/// own wait, which the tokio timeout around the test cannot end, then fails the test instead
/// of hanging it. Dropping the returned guard ends the watch.
fn watchdog(ctx: crate::LoopContext) -> std::sync::mpsc::Sender<()> {
    let (guard, watch) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(TIMEOUT * 4) {
            ctx.shutdown();
        }
    });
    guard
}

/// A loop that parks for an hour when it has nothing to do and never spins first, so that
/// every wake-up comes from outside it (a lost one fails the test's bound); in its own wait
/// if `owns`, else through tokio's park.
fn parking_loop(owns: bool) -> crate::runtime::EventLoopBuilder {
    crate::runtime::EventLoop::builder()
        .idle_wait(Duration::from_secs(3_600))
        .spin_before_park(Duration::ZERO)
        .owns_its_thread(owns)
}

/// A waker for this thread's event loop (call it on the loop).
fn loop_waker() -> Waker {
    Waker::from(Arc::new(WakeLoop(crate::LoopContext::current())))
}

/// What the loop's Network slot holds in [`on_a_loops_thread_the_reactor_drives_the_ring`].
#[derive(Default)]
struct Echo {
    listener: Option<TcpListener>,
    acceptor: Option<Box<dyn Acceptor>>,
    conn: Option<Box<dyn Transport>>,
    echoed: usize,
}

impl Echo {
    /// One Network phase: listens (on the loop's thread, so the loop's reactor drives the
    /// ring), accepts the one client, echoes what it sent. Never pending.
    fn phase(&mut self, waker: &Waker) -> bool {
        if let Some(listener) = self.listener.take() {
            self.acceptor = Some(Uring.listen(listener, waker.clone()).expect("listen"));
        }
        let acceptor = self.acceptor.as_mut().expect("listening");
        if self.conn.is_none() {
            match acceptor.poll_accept(&mut |_| true) {
                Poll::Ready(Ok(Accept::Admitted(accepted, _))) => {
                    self.conn = Some(accepted.attach(waker.clone()));
                }
                Poll::Ready(other) => panic!("accept: {:?}", other.err()),
                Poll::Pending => return false,
            }
        }
        let conn = self.conn.as_mut().expect("accepted");
        let mut buf = Vec::new();
        match conn.read(&mut buf, 64) {
            ReadOutcome::Data(n) => {
                assert_eq!(conn.write(&buf).expect("write"), n);
                self.echoed += n;
                if self.echoed == 20 {
                    crate::LoopContext::current().shutdown();
                }
                // Nothing pending, as after a Flush phase: the loop parks next, and the echo
                // must reach the kernel before it blocks. (The client sends one byte and waits
                // for its echo, so nothing more is waiting to be read.)
                false
            }
            ReadOutcome::WouldBlock => false,
            other => panic!("read: {other:?}"),
        }
    }
}

/// On an event loop's thread the ring needs no task of tokio's: the loop's reactor drives it,
/// in the loop's own wait (a loop that owns its thread) and through tokio's park alike. Each
/// of 20 pings comes to a parked loop (an hour's `idle_wait`: a lost wake fails the test's
/// bound), and each echo is queued by the Network phase and must reach the kernel before the
/// loop parks again; the last, queued as the loop stops, when the loop goes. Once the loop is
/// gone the ring is no longer offered to a new `listen`, and once its sockets are gone too, it
/// is gone.
#[test]
fn on_a_loops_thread_the_reactor_drives_the_ring() {
    for owns in [true, false] {
        run(async move {
            let listener = crate::net::bind("127.0.0.1:0".parse().unwrap(), 262_144).unwrap();
            let addr = listener.local_addr().unwrap();
            let client = std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut socket = std::net::TcpStream::connect(addr).expect("connect");
                socket.set_read_timeout(Some(TIMEOUT)).unwrap();
                let mut byte = [0u8; 1];
                for i in 0..20u8 {
                    // Long enough for the loop to park between pings.
                    std::thread::sleep(Duration::from_millis(10));
                    socket.write_all(&[i]).expect("ping");
                    socket.read_exact(&mut byte).expect("echo");
                    assert_eq!(byte[0], i);
                }
            });
            let echo = Rc::new(RefCell::new(Echo {
                listener: Some(listener),
                ..Echo::default()
            }));
            let in_slot = echo.clone();
            let mut el = parking_loop(owns)
                .slot(crate::runtime::Phase::Network, move || {
                    in_slot.borrow_mut().phase(&loop_waker())
                })
                .build();
            let watch = watchdog(el.context());
            el.run().await;
            drop(watch);
            let own_parks = el.own_parks();
            // The last echo was queued by the phase that stopped the loop: the loop hands it
            // to the kernel as it goes.
            let ring = THREAD_RING.with(|r| r.borrow().clone());
            drop(el);
            client.join().expect("client");
            assert_eq!(echo.borrow().echoed, 20);
            if owns {
                assert!(own_parks >= 20, "parked in its own wait {own_parks} times");
            } else {
                assert_eq!(own_parks, 0);
            }
            // Nothing drives the ring once its loop is gone: the thread no longer offers it
            // (the next `listen` makes another), but its sockets keep it until they go.
            assert!(
                !ring_alive(),
                "a ring nobody drives is offered to the next listen"
            );
            assert!(ring.upgrade().is_some(), "the sockets keep the ring");
            drop(echo.borrow_mut().conn.take());
            drop(echo.borrow_mut().acceptor.take());
            assert!(ring.upgrade().is_none(), "the ring outlived its sockets");
        });
    }
}

/// On a loop's thread a closed connection's linger ends by a loop timer: nothing else wakes
/// this loop (an hour's `idle_wait`), yet the connection whose peer never reads is given up
/// after [`LINGER`], not before.
#[test]
fn on_a_loops_thread_a_lingering_connection_is_given_up_on_time() {
    run(async {
        // Small buffers on both ends: most of a full outbox stays unsent.
        let listener = crate::net::bind("127.0.0.1:0".parse().unwrap(), 4096).unwrap();
        let addr = listener.local_addr().unwrap();
        let client =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        client.set_recv_buffer_size(4096).unwrap();
        let listener = RefCell::new(Some(listener));
        let acceptor = RefCell::new(None::<Box<dyn Acceptor>>);
        let freed = Rc::new(RefCell::new(Vec::<Duration>::new()));
        let in_slot = freed.clone();
        let mut el = parking_loop(true)
            .slot(crate::runtime::Phase::Network, move || {
                let waker = loop_waker();
                if let Some(listener) = listener.borrow_mut().take() {
                    let listening = Uring.listen(listener, waker.clone()).expect("listen");
                    *acceptor.borrow_mut() = Some(listening);
                    client.connect(&addr.into()).expect("connect");
                }
                let mut acceptor = acceptor.borrow_mut();
                let Some(listening) = acceptor.as_mut() else {
                    return false;
                };
                let Poll::Ready(Ok(Accept::Admitted(accepted, _))) =
                    listening.poll_accept(&mut |_| true)
                else {
                    return false; // the acceptor's waker brings the loop back
                };
                let mut conn = accepted.attach(waker);
                assert_eq!(conn.write(&pattern(OUTBOX_LIMIT)).unwrap(), OUTBOX_LIMIT);
                // Closed with its output queued, not yet handed to the kernel.
                drop(conn);
                let closed_at = Instant::now();
                // Well after the deadline: had nothing woken the loop at the deadline, this
                // check's own wake-up would be what gives the connection up.
                let out = in_slot.clone();
                let _ = crate::timer::after(LINGER * 4).start(move || {
                    let freed = with_ring(|r| r.freed.clone());
                    *out.borrow_mut() = freed.iter().map(|at| *at - closed_at).collect();
                    crate::LoopContext::current().shutdown();
                });
                false
            })
            .build();
        let watch = watchdog(el.context());
        el.run().await;
        drop(watch);
        let freed = freed.borrow().clone();
        assert_eq!(freed.len(), 1, "one connection slot freed: {freed:?}");
        assert!(
            freed[0] >= LINGER && freed[0] < LINGER * 2,
            "given up {:?} after the close (linger {LINGER:?})",
            freed[0]
        );
    });
}

/// A loop that ends in its first iteration, before it ever turned its reactor, still lets go
/// of the ring it listened on when it goes (else the reactor and the ring would hold each
/// other alive, and the listening socket with them); while another loop lives on the thread,
/// a loop that goes leaves the ring to it.
#[test]
fn the_threads_last_loop_to_go_lets_go_of_the_ring() {
    run(async {
        let listen = || {
            let listener = crate::net::bind("127.0.0.1:0".parse().unwrap(), 262_144).unwrap();
            Uring.listen(listener, loop_waker()).expect("listen")
        };
        let mut first = crate::runtime::EventLoop::builder()
            .owns_its_thread(true)
            .build();
        let acceptor = first.run_until(async move { listen() }).await;
        let ring = THREAD_RING.with(|r| r.borrow().clone());
        assert!(ring_alive());
        // A second loop comes and goes: the first still needs the ring driven.
        drop(crate::runtime::EventLoop::builder().build());
        assert!(
            ring_alive(),
            "another loop's going took the ring from the first"
        );
        drop(first);
        assert!(
            !ring_alive(),
            "the ring outlived the thread's last loop as its offer"
        );
        assert!(ring.upgrade().is_some(), "the acceptor keeps the ring");
        drop(acceptor);
        assert!(ring.upgrade().is_none(), "the ring outlived its sockets");
    });
}
