//! The server's read path driven by hand, with no socket: one connection whose transport
//! hands over a set number of bytes per read from memory (a [`Wire`]), so that a test can
//! trickle a packet a byte per read, and a benchmark can time the read path alone — no
//! syscall, no wake-up — per trickled byte and per whole ping ([`ReadPath`], in the test kit).
//!
//! This module owns that transport and the one-connection server on it. It must never be
//! built into a release binary (tests and the `testkit` feature only), nor reach past what
//! the Network and Flush phases do for one connection: `read`, then `flush`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use super::*;
use crate::net::backend::Transport;

/// Bytes to be read, how many one `read` may hand over at most (a segment's worth), and
/// whether one arrived since the last read (`segments` more reads hand over data, then
/// `WouldBlock`, as a socket reads what the kernel has).
#[derive(Default)]
pub(crate) struct Wire {
    pub(crate) bytes: VecDeque<u8>,
    pub(crate) per_read: usize,
    pub(crate) segments: usize,
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

/// The packet id [`server`] records: not one the engine knows.
pub(crate) const BIG: u8 = 0x31;

/// The payload lengths of the `BIG` packets handled, in order.
pub(crate) type Handled = Rc<RefCell<Vec<usize>>>;

/// A server under `limits` whose one connection reads from the returned wire (one byte per
/// read until told otherwise); packet `BIG` is recorded, pings are answered.
pub(crate) fn server(limits: Limits) -> (Net, ConnId, Rc<RefCell<Wire>>, Handled) {
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
    let peer: SocketAddr = "127.0.0.2:1".parse().expect("an address");
    let state = NetState::new(
        Box::new(Trickle(wire.clone())),
        peer,
        Keys::of(peer.ip()),
        Instant::now(),
    );
    let conn = ConnId(net.0.borrow_mut().sessions.conns.insert(state));
    (net, conn, wire, got)
}

/// The read path of one connection, for a benchmark: each [`ReadPath::read_once`] is one
/// read of one segment and the flush after it, as the Network and Flush phases do it, with
/// the socket replaced by memory. Made by [`ReadPath::trickled`] (8 KiB packets, a byte per
/// read) or [`ReadPath::whole_pings`] (a 19-byte ping per read, answered); no flood limit.
pub struct ReadPath {
    net: Net,
    conn: ConnId,
    wire: Rc<RefCell<Wire>>,
    packet: Vec<u8>,
}

impl std::fmt::Debug for ReadPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadPath")
            .field("packet_len", &self.packet.len())
            .field("per_read", &self.wire.borrow().per_read)
            .finish_non_exhaustive()
    }
}

impl ReadPath {
    /// Packets of 8 KiB (the default `max_packet`, header included) sent a byte per read:
    /// what a trickling client costs the read path.
    #[must_use]
    pub fn trickled() -> ReadPath {
        ReadPath::new(frame::packet(BIG, &[&[7; 8189]]), 1)
    }

    /// Pings with a 16-byte payload, one whole ping per read, each answered: the peer of
    /// [`ReadPath::trickled`].
    #[must_use]
    pub fn whole_pings() -> ReadPath {
        let ping = frame::packet(frame::PING, &[&[1; 16]]);
        let per_read = ping.len();
        ReadPath::new(ping, per_read)
    }

    fn new(packet: Vec<u8>, per_read: usize) -> ReadPath {
        let (net, conn, wire, _) = server(Limits {
            ping_rate: None,
            ..Limits::default()
        });
        wire.borrow_mut().per_read = per_read;
        ReadPath {
            net,
            conn,
            wire,
            packet,
        }
    }

    /// Puts at least `reads` reads' worth of whole packets on the wire (run before timing).
    pub fn load(&mut self, reads: usize) {
        let mut wire = self.wire.borrow_mut();
        let wanted = wire.bytes.len() + reads * wire.per_read;
        while wire.bytes.len() < wanted {
            wire.bytes.extend(&self.packet);
        }
    }

    /// One segment arrives, is read and handled, and the output is flushed.
    pub fn read_once(&mut self) {
        self.wire.borrow_mut().segments = 1;
        let mut server = self.net.0.borrow_mut();
        server.read(self.conn);
        server.flush();
    }
}
