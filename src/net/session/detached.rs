//! Connections with no socket behind them, for the test kit's handler harness
//! (`testkit::Harness`): what is sent to one stays queued until the test takes it. Compiled
//! only where the test kit is (the `testkit` feature, or this crate's unit tests).

use std::net::SocketAddr;

use tokio::time::Instant;

use super::super::admission::Keys;
use super::super::backend::{ReadOutcome, Transport};
use super::{ConnId, Disconnect, NetState, Sessions};

impl Sessions {
    /// A connection from `peer` with no socket behind it, for the test kit's handler
    /// harness: what is sent to it stays queued until [`Sessions::take_output`] takes it.
    pub(crate) fn open_detached(&mut self, peer: SocketAddr, now: Instant) -> ConnId {
        let keys = Keys::of(peer.ip());
        let conn = ConnId(
            self.conns
                .insert(NetState::new(Box::new(Detached), peer, keys, now)),
        );
        self.arrived(conn);
        conn
    }

    /// Every count the limits and the tick read, for a test comparing two sessions driven
    /// alike: the outbound budget's count, the packets queued, the connections closed for
    /// their send limit and for the budget, and the connections listed for the tick.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> String {
        format!(
            "outbound {} packets {} overflows {} evictions {} at tick {:?}",
            self.outbound, self.packets_out, self.overflows, self.evictions, self.at_tick
        )
    }

    /// The bytes queued for `conn` and not yet written, taken out (a detached connection's
    /// output, for the test kit).
    pub(crate) fn take_output(&mut self, conn: ConnId) -> Vec<u8> {
        self.spill(conn);
        let Some(state) = self.conns.get_mut(conn.0) else {
            return Vec::new();
        };
        self.outbound -= state.pending_output();
        state.over_soft_since = None;
        let bytes = state.out.take_bytes();
        self.flushed(conn);
        bytes
    }

    /// `conn` is condemned: closed at the end of the phase (not lingering to write an answer).
    pub(crate) fn is_closing(&self, conn: ConnId) -> bool {
        self.conns.get(conn.0).is_some_and(|s| s.closing.is_some())
    }

    /// Why `conn` is closing (now, or once its output is written), if it is.
    pub(crate) fn closing_reason(&self, conn: ConnId) -> Option<&Disconnect> {
        let state = self.conns.get(conn.0)?;
        state.closing.as_ref().or(state.linger.as_ref())
    }
}

/// The transport of a connection with no socket: nothing to read, and it takes nothing, so
/// output stays queued.
struct Detached;

impl Transport for Detached {
    fn read(&mut self, _: &mut Vec<u8>, _: usize) -> ReadOutcome {
        ReadOutcome::WouldBlock
    }

    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Ok(0)
    }
}
