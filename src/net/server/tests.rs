//! The read path against a transport that hands over a given number of bytes per read: a
//! packet trickled a byte per read is accumulated in its connection's buffer in place.

use super::read_path::{BIG, server};
use super::*;

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
