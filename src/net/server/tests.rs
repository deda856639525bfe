//! The read path against a transport that hands over a given number of bytes per read: a
//! packet trickled a byte per read is accumulated in its connection's buffer in place.

use std::cell::RefCell;
use std::rc::Rc;

use super::read_path::{BIG, server};
use super::*;
use crate::net::backend::Transport;

/// The connection's partial-packet buffer: where it is, how big, how full.
fn held(net: &Net, conn: ConnId) -> (*const u8, usize, usize) {
    let server = net.0.borrow();
    let recv = &server.sessions.conns.get(conn.0).unwrap().recv;
    (recv.as_ptr(), recv.capacity(), recv.len())
}

#[tokio::test]
async fn a_packet_trickled_a_byte_per_read_grows_its_buffer_once_and_is_never_moved() {
    let (net, conn, wire, got) = server(Limits::default());
    let packet = frame::packet(BIG, &[&[7; 8000]]);
    wire.borrow_mut().bytes.extend(&packet);
    let mut buffers = Vec::new();
    for _ in 0..packet.len() - 1 {
        // One byte per turn (a segment per readiness), as a trickler sends them.
        wire.borrow_mut().segments = 1;
        net.0.borrow_mut().read(conn);
        buffers.push(held(&net, conn));
    }
    // The header's 3 bytes take a buffer of 3; from then on it is the declared length, in
    // one place, filled a byte at a time.
    for (i, &(_, capacity, len)) in buffers.iter().enumerate() {
        assert_eq!(len, i + 1);
        let expected = if len < frame::HEADER_LEN {
            frame::HEADER_LEN
        } else {
            packet.len()
        };
        assert_eq!(capacity, expected, "after {len} bytes");
    }
    let after_header: Vec<_> = buffers[frame::HEADER_LEN - 1..]
        .iter()
        .map(|b| b.0)
        .collect();
    assert!(
        after_header.windows(2).all(|w| w[0] == w[1]),
        "the buffer moved while the packet was filled in"
    );
    assert!(got.borrow().is_empty());
    wire.borrow_mut().segments = 1;
    net.0.borrow_mut().read(conn);
    assert_eq!(*got.borrow(), vec![8000], "the packet, whole, once");
    assert_eq!(held(&net, conn).1, 0, "a drained buffer is freed");
}

#[tokio::test]
async fn packets_around_a_trickled_one_are_split_as_usual() {
    let (net, conn, wire, got) = server(Limits::default());
    let mut bytes = frame::packet(BIG, &[&[1; 10]]);
    bytes.extend(frame::packet(BIG, &[&[2; 300]]));
    bytes.extend(frame::packet(BIG, &[&[3; 20]]));
    bytes.extend(frame::packet(BIG, &[]));
    wire.borrow_mut().bytes.extend(&bytes);
    // Reads of 7 bytes: packets split anywhere, several in one read.
    wire.borrow_mut().per_read = 7;
    for _ in 0..100 {
        wire.borrow_mut().segments = 1;
        net.0.borrow_mut().read(conn);
    }
    assert_eq!(*got.borrow(), vec![10, 300, 20, 0]);
    assert_eq!(held(&net, conn).1, 0);
    assert_eq!(net.stats().faults, 0);
}

#[tokio::test]
async fn a_partial_packet_nothing_arrives_for_is_shrunk_to_its_bytes_by_the_sweep() {
    let (net, conn, wire, _) = server(Limits::default());
    let packet = frame::packet(BIG, &[&[7; 8000]]);
    wire.borrow_mut().bytes.extend(&packet[..10]);
    for _ in 0..10 {
        wire.borrow_mut().segments = 1;
        net.0.borrow_mut().read(conn);
    }
    assert_eq!(
        held(&net, conn).1,
        packet.len(),
        "reserved at the declared length"
    );
    // The first sweep sees bytes arrived since the last: nothing shrinks.
    net.0.borrow_mut().sweep_deadlines();
    assert_eq!(held(&net, conn).1, packet.len());
    // A whole sweep period without a byte: only what it holds stays allocated.
    net.0.borrow_mut().sweep_deadlines();
    assert_eq!(held(&net, conn).1, 10);
    // More comes: it grows once to the declared length again, and the packet completes.
    wire.borrow_mut().bytes.extend(&packet[10..]);
    wire.borrow_mut().per_read = 100;
    wire.borrow_mut().segments = usize::MAX;
    net.0.borrow_mut().read(conn);
    assert_eq!(held(&net, conn).1, 0, "handled and freed");
}

/// Each write: when (the loop's clock) and what.
type Writes = Rc<RefCell<Vec<(Instant, Vec<u8>)>>>;

/// A transport that takes every write and notes when each one happened.
struct Clocked(Writes);

impl Transport for Clocked {
    fn read(&mut self, _: &mut Vec<u8>, _: usize) -> ReadOutcome {
        ReadOutcome::WouldBlock
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().push((Instant::now(), data.to_vec()));
        Ok(data.len())
    }

    fn write_pieces(
        &mut self,
        pieces: &mut dyn Iterator<Item = crate::net::Piece<'_>>,
    ) -> io::Result<usize> {
        let bytes: Vec<u8> = pieces.flat_map(|p| p.bytes().to_vec()).collect();
        self.write(&bytes)
    }
}

/// Lets the loop run one more iteration, then goes on.
struct NextIteration(bool);

impl std::future::Future for NextIteration {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A server on a loop of its own (its Network and Flush phases), and a way to add connections
/// whose writes land, with the time of each, in `writes`.
fn looped() -> (Net, crate::EventLoop, Writes) {
    use crate::runtime::Phase;
    let net = Net::new(Limits::default());
    let event_loop = crate::EventLoop::builder()
        .slot(Phase::Network, net.network_slot())
        .slot(Phase::Flush, net.flush_slot())
        .build();
    (net, event_loop, Rc::new(RefCell::new(Vec::new())))
}

/// A connection from 127.0.0.2 that records its writes in `writes`.
fn connect(net: &Net, writes: &Writes) -> ConnId {
    let peer: SocketAddr = "127.0.0.2:1".parse().unwrap();
    let state = NetState::new(
        Box::new(Clocked(writes.clone())),
        peer,
        Keys::of(peer.ip()),
        Instant::now(),
    );
    ConnId(net.0.borrow_mut().sessions.conns.insert(state))
}

#[tokio::test(start_paused = true)]
async fn broadcast_output_is_written_once_per_tick_and_a_reply_at_once() {
    use crate::net::SharedFrames;
    let (net, mut event_loop, writes) = looped();
    let conn = connect(&net, &writes);
    let moved = frame::packet(0x20, &[b"moved"]);
    let shared = SharedFrames::new(&moved);
    let reply = frame::packet(0x21, &[b"yours"]);
    let tick = Duration::from_millis(8);
    event_loop
        .run_until(async {
            timer::pause(3).await; // resumes on the first boundary
            let queued_at = timer::now();
            // Ten iterations in a row each queue a broadcast: none is written yet.
            for _ in 0..10 {
                net.with_sessions(|s| s.send_shared(conn, &shared, 0..shared.len(), 1));
                NextIteration(false).await;
            }
            assert!(writes.borrow().is_empty(), "broadcasts wait for the tick");
            // At the next boundary, all ten go in one write.
            timer::pause(20).await;
            {
                let writes = writes.borrow();
                assert_eq!(writes.len(), 1, "one write for the tick");
                let (at, bytes) = &writes[0];
                assert_eq!(*bytes, moved.repeat(10));
                let since_epoch = *at - timer::epoch();
                assert_eq!(since_epoch.as_nanos() % tick.as_nanos(), 0, "on a boundary");
                assert!(*at > queued_at && *at - queued_at <= tick, "within a tick");
            }
            // A broadcast, then a reply to this player: both go at once, in order.
            let now = Instant::now();
            net.with_sessions(|s| {
                s.send_shared(conn, &shared, 0..shared.len(), 1);
                s.send_packet(conn, 0x21, &[b"yours"]);
            });
            NextIteration(false).await;
            let writes = writes.borrow();
            assert_eq!(writes.len(), 2, "the reply did not wait");
            assert_eq!(writes[1].0, now, "written in the same iteration");
            assert_eq!(writes[1].1, [moved.as_slice(), &reply].concat());
        })
        .await;
    assert_eq!(
        net.stats().bytes_out as usize,
        11 * moved.len() + reply.len()
    );
}

#[tokio::test(start_paused = true)]
async fn a_flush_phase_writes_at_most_its_cap_and_the_rest_go_first_in_the_next_iterations() {
    let (net, mut event_loop, writes) = looped();
    let count = 2 * FLUSH_PER_ITERATION + 88;
    let conns: Vec<ConnId> = (0..count).map(|_| connect(&net, &writes)).collect();
    event_loop
        .run_until(async {
            timer::pause(3).await;
            let started = Instant::now();
            // A reply to each, in one iteration: due in this iteration's Flush phase.
            net.with_sessions(|s| {
                for (i, &conn) in conns.iter().enumerate() {
                    s.send_packet(conn, 0x21, &[&(i as u32).to_le_bytes()]);
                }
            });
            NextIteration(false).await;
            let first: Vec<_> = (0..FLUSH_PER_ITERATION).map(numbered).collect();
            assert_eq!(written(&writes), first, "the cap, in the order queued");
            // A reply queued now goes after the ones left waiting.
            let late = conns[0];
            net.with_sessions(|s| s.send_packet(late, 0x21, &[b"late"]));
            NextIteration(false).await;
            NextIteration(false).await;
            let mut all: Vec<_> = (0..count).map(numbered).collect();
            all.push(frame::packet(0x21, &[b"late"]));
            assert_eq!(
                written(&writes),
                all,
                "every one once, the waiting ones first"
            );
            assert!(
                writes.borrow().iter().all(|(at, _)| *at == started),
                "iterations back to back, no park in between"
            );
        })
        .await;
    // Past the cap: 344 in the first pass; 88 and the late reply in the second.
    let deferred = (count - FLUSH_PER_ITERATION) + (count - 2 * FLUSH_PER_ITERATION + 1);
    assert_eq!(net.stats().flushes_deferred, deferred as u64);
}

thread_local! {
    /// The stand-in budget clock's time since `BUDGET_EPOCH`: moved by [`Slow`]'s writes only.
    static BUDGET_ELAPSED: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
    static BUDGET_EPOCH: Stamp = Stamp::now();
}

/// The Flush budget's clock in these tests: it moves only when a [`Slow`] transport writes,
/// so what a phase writes depends on the writes' stated cost, not on this machine's speed.
/// (Costs are a microsecond over the round figures: readings are whole counter ticks, and a
/// cost of exactly the budget could land a tick either side of it.)
fn budget_clock() -> Stamp {
    BUDGET_EPOCH.with(|epoch| epoch.add(BUDGET_ELAPSED.with(std::cell::Cell::get)))
}

const MICRO: Duration = Duration::from_micros(1);

/// A transport whose every write takes `cost` on the budget's clock (and is recorded).
struct Slow {
    writes: Writes,
    cost: Duration,
}

impl Transport for Slow {
    fn read(&mut self, _: &mut Vec<u8>, _: usize) -> ReadOutcome {
        ReadOutcome::WouldBlock
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        BUDGET_ELAPSED.with(|elapsed| elapsed.set(elapsed.get() + self.cost));
        self.writes
            .borrow_mut()
            .push((Instant::now(), data.to_vec()));
        Ok(data.len())
    }

    fn write_pieces(
        &mut self,
        pieces: &mut dyn Iterator<Item = crate::net::Piece<'_>>,
    ) -> io::Result<usize> {
        let bytes: Vec<u8> = pieces.flat_map(|p| p.bytes().to_vec()).collect();
        self.write(&bytes)
    }
}

/// `count` connections whose writes each cost `cost` of the Flush budget, on a server whose
/// budget runs on [`budget_clock`]; each connection counts as accepted (for shutdown).
fn slow_connections(net: &Net, writes: &Writes, count: usize, cost: Duration) -> Vec<ConnId> {
    let mut server = net.0.borrow_mut();
    server.clock = budget_clock;
    let peer: SocketAddr = "127.0.0.2:1".parse().unwrap();
    (0..count)
        .map(|_| {
            let transport = Slow {
                writes: writes.clone(),
                cost,
            };
            let state = NetState::new(
                Box::new(transport),
                peer,
                Keys::of(peer.ip()),
                Instant::now(),
            );
            let conn = ConnId(server.sessions.conns.insert(state));
            server.sessions.arrived(conn);
            conn
        })
        .collect()
}

/// What was written, in order.
fn written(writes: &Writes) -> Vec<Vec<u8>> {
    writes.borrow().iter().map(|(_, b)| b.clone()).collect()
}

/// Reply `i`: a packet carrying its number.
fn numbered(i: usize) -> Vec<u8> {
    frame::packet(0x21, &[&(i as u32).to_le_bytes()])
}

#[tokio::test(start_paused = true)]
async fn a_flush_phase_stops_at_its_time_budget_and_the_rest_go_first_in_the_next_iterations() {
    let (net, mut event_loop, writes) = looped();
    // Four writes spend the budget: the phase stops before the fifth.
    let conns = slow_connections(&net, &writes, 10, FLUSH_BUDGET / 4 + MICRO);
    event_loop
        .run_until(async {
            timer::pause(3).await;
            let started = Instant::now();
            net.with_sessions(|s| {
                for (i, &conn) in conns.iter().enumerate() {
                    s.send_packet(conn, 0x21, &[&(i as u32).to_le_bytes()]);
                }
            });
            NextIteration(false).await;
            let first: Vec<_> = (0..4).map(numbered).collect();
            assert_eq!(
                written(&writes),
                first,
                "the budget's worth, in the order queued"
            );
            assert_eq!(net.stats().flush_budget_stops, 1);
            // A reply queued now goes after the ones left waiting.
            net.with_sessions(|s| s.send_packet(conns[0], 0x21, &[b"late"]));
            NextIteration(false).await;
            let second: Vec<_> = (0..8).map(numbered).collect();
            assert_eq!(written(&writes), second, "the next four, first in line");
            NextIteration(false).await;
            let mut all: Vec<_> = (0..10).map(numbered).collect();
            all.push(frame::packet(0x21, &[b"late"]));
            assert_eq!(
                written(&writes),
                all,
                "every one once, the waiting ones first"
            );
            assert!(
                writes.borrow().iter().all(|(at, _)| *at == started),
                "iterations back to back, no park in between"
            );
        })
        .await;
    let stats = net.stats();
    assert_eq!(
        stats.flush_budget_stops, 2,
        "the third phase fit in its budget"
    );
    // Left over: six by the first phase; the last two and the late reply by the second.
    assert_eq!(stats.flushes_deferred, 6 + 3);
    assert_eq!(stats.bytes_out as usize, all_bytes(&writes));
}

/// Every byte the transports took.
fn all_bytes(writes: &Writes) -> usize {
    writes.borrow().iter().map(|(_, b)| b.len()).sum()
}

#[tokio::test(start_paused = true)]
async fn a_write_longer_than_the_budget_still_leaves_a_connection_written_per_phase() {
    let (net, mut event_loop, writes) = looped();
    let conns = slow_connections(&net, &writes, 3, FLUSH_BUDGET * 3 + MICRO);
    event_loop
        .run_until(async {
            timer::pause(3).await;
            net.with_sessions(|s| {
                for (i, &conn) in conns.iter().enumerate() {
                    s.send_packet(conn, 0x21, &[&(i as u32).to_le_bytes()]);
                }
            });
            for phase in 1..=3 {
                NextIteration(false).await;
                let so_far: Vec<_> = (0..phase).map(numbered).collect();
                assert_eq!(written(&writes), so_far, "one connection in phase {phase}");
            }
        })
        .await;
    let stats = net.stats();
    assert_eq!(
        (stats.flush_budget_stops, stats.flushes_deferred),
        (2, 2 + 1)
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_writes_every_connection_past_the_budget() {
    let (net, mut event_loop, writes) = looped();
    // Every write spends the whole budget: shutdown's Flush turns write one connection each.
    let conns = slow_connections(&net, &writes, 5, FLUSH_BUDGET + MICRO);
    event_loop
        .run_until(async {
            timer::pause(3).await;
            net.with_sessions(|s| {
                for (i, &conn) in conns.iter().enumerate() {
                    s.send_packet(conn, 0x21, &[&(i as u32).to_le_bytes()]);
                }
            });
            net.stop();
        })
        .await;
    let all: Vec<_> = (0..5).map(numbered).collect();
    assert_eq!(
        written(&writes),
        all,
        "everything queued went out, in order"
    );
    let stats = net.stats();
    assert_eq!(stats.connections, 0);
    assert_eq!(stats.flush_budget_stops, 4);
    assert_eq!(stats.bytes_out as usize, all_bytes(&writes));
}

#[tokio::test(start_paused = true)]
async fn a_full_socket_the_flush_skips_still_takes_its_deferred_ranges_into_its_queue() {
    use crate::net::SharedFrames;
    let (net, _event_loop, writes) = looped();
    let conn = connect(&net, &writes);
    let mut server = net.0.borrow_mut();
    // A first reply the long way makes the connection's gate live.
    assert!(server.sessions.send_packet(conn, 0x21, &[b"hi"]));
    server.flush();
    let moved = frame::packet(0x20, &[b"moved"]);
    let shared = SharedFrames::new(&moved);
    let s = &mut server.sessions;
    let g = s.share(shared.clone());
    let whole = s.prepare(g, 0..shared.len(), 1);
    assert!(s.send_prepared(conn, &whole));
    s.unshare(g);
    let queued = |server: &Server| server.sessions.conns.get(conn.0).unwrap().pending_output();
    assert_eq!(queued(&server), 0, "deferred: not in its queue yet");
    // Its socket said "full": the Flush phase does not write it, but the deferred range
    // joins its queue there, so the deferral does not wait for a reader that does not read.
    server.sessions.conns.get_mut(conn.0).unwrap().write_blocked = true;
    server.sessions.queue_flush(conn);
    server.flush();
    assert_eq!(queued(&server), moved.len());
    assert_eq!(
        server.sessions.pending_output(conn),
        moved.len(),
        "counted once"
    );
    assert_eq!(written(&writes).len(), 1, "nothing written while full");
    // Writable again: it goes out after the reply.
    server.sessions.conns.get_mut(conn.0).unwrap().write_blocked = false;
    server.sessions.queue_flush(conn);
    server.flush();
    assert_eq!(written(&writes), [frame::packet(0x21, &[b"hi"]), moved]);
    assert_eq!(server.sessions.outbound, 0);
    assert_eq!(shared.holders(), 1, "nothing holds the group once written");
}

thread_local! {
    /// Readings taken of [`counted_clock`] on this thread.
    static CLOCK_READS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The budget clock, counting its readings.
fn counted_clock() -> Stamp {
    CLOCK_READS.with(|n| n.set(n.get() + 1));
    budget_clock()
}

/// Most iterations of a busy loop have nothing to flush: the phase then costs no clock read
/// (it read one for its budget every iteration before).
#[tokio::test]
async fn a_flush_phase_with_nothing_queued_reads_no_clock() {
    let (net, _event_loop, writes) = looped();
    let conns = slow_connections(&net, &writes, 1, MICRO);
    let mut server = net.0.borrow_mut();
    server.clock = counted_clock;
    server.flush();
    assert_eq!(CLOCK_READS.with(std::cell::Cell::get), 0, "nothing queued");
    server.sessions.send_packet(conns[0], 0x21, &[b"reply"]);
    server.flush();
    assert_eq!(written(&writes).len(), 1, "the reply went out");
    assert!(
        CLOCK_READS.with(std::cell::Cell::get) > 0,
        "a phase with output reads the budget's clock"
    );
}
