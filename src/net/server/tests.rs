//! The read path against a transport that hands over a given number of bytes per read: a
//! packet trickled a byte per read is accumulated in its connection's buffer in place.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use super::*;
use crate::net::admission::Keys;
use crate::net::backend::Transport;

/// Bytes to be read, how many one `read` may hand over at most (a segment's worth), and
/// whether one arrived since the last read (`segments` more reads hand over data, then
/// `WouldBlock`, as a socket reads what the kernel has).
#[derive(Default)]
struct Wire {
    bytes: VecDeque<u8>,
    per_read: usize,
    segments: usize,
}

/// A transport reading from a shared [`Wire`]; it takes every write.
struct Trickle(Rc<RefCell<Wire>>);

impl Transport for Trickle {
    fn read(&mut self, buf: &mut Vec<u8>, max: usize) -> ReadOutcome {
        let mut wire = self.0.borrow_mut();
        let n = wire.per_read.min(max).min(wire.bytes.len());
        if n == 0 || wire.segments == 0 {
            return ReadOutcome::WouldBlock;
        }
        wire.segments -= 1;
        buf.extend(wire.bytes.drain(..n));
        ReadOutcome::Data(n)
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        Ok(data.len())
    }
}

const BIG: u8 = 0x31;

/// The payload lengths of the `BIG` packets handled, in order.
type Handled = Rc<RefCell<Vec<usize>>>;

/// A server whose one connection reads from the returned wire; packet `BIG` is recorded.
fn server(limits: Limits) -> (Net, ConnId, Rc<RefCell<Wire>>, Handled) {
    let net = Net::new(limits);
    let got = Rc::new(RefCell::new(Vec::new()));
    let seen = got.clone();
    net.handle(BIG, "big", Access::Always, move |_, _, payload| {
        seen.borrow_mut().push(payload.len());
        Ok(())
    });
    let wire = Rc::new(RefCell::new(Wire {
        per_read: 1,
        ..Wire::default()
    }));
    let peer: SocketAddr = "127.0.0.2:1".parse().unwrap();
    let state = NetState::new(
        Box::new(Trickle(wire.clone())),
        peer,
        Keys::of(peer.ip()),
        Instant::now(),
    );
    let conn = ConnId(net.0.borrow_mut().sessions.conns.insert(state));
    (net, conn, wire, got)
}

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

/// Not a check: the read path's own cost (no syscall, no wake-up) per trickled byte of
/// 8 KiB packets, and per whole ping read and answered, for `docs/performance.md`:
/// `cargo test --release --lib -- --ignored read_path_cost --nocapture`.
#[tokio::test]
#[ignore = "a measurement, run by hand"]
async fn read_path_cost() {
    const ROUNDS: usize = 5;
    let per_read = |trickle: bool| {
        let (net, conn, wire, _) = server(Limits {
            ping_rate: None,
            ..Limits::default()
        });
        let packet = match trickle {
            true => frame::packet(BIG, &[&[7; 8189]]),
            false => frame::packet(frame::PING, &[&[1; 16]]),
        };
        let reads = 64 * 8192;
        let mut bytes = Vec::with_capacity(reads);
        while bytes.len() < reads * if trickle { 1 } else { packet.len() } {
            bytes.extend_from_slice(&packet);
        }
        wire.borrow_mut().bytes.extend(bytes);
        wire.borrow_mut().per_read = if trickle { 1 } else { packet.len() };
        let began = std::time::Instant::now();
        for _ in 0..reads {
            wire.borrow_mut().segments = 1;
            let mut server = net.0.borrow_mut();
            server.read(conn);
            server.flush();
        }
        began.elapsed().as_nanos() as f64 / reads as f64
    };
    for (name, trickle) in [
        ("trickled byte of an 8 KiB packet", true),
        ("whole ping", false),
    ] {
        let mut runs: Vec<f64> = (0..ROUNDS).map(|_| per_read(trickle)).collect();
        runs.sort_by(f64::total_cmp);
        println!(
            "read path per {name}: median {:.0} ns (runs {:.0?})",
            runs[ROUNDS / 2],
            runs
        );
    }
}
