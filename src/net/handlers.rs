//! The packet-handler table: one entry per packet id, registered by game code at startup and
//! called by the Network phase for every complete packet, on the loop thread.
//!
//! A handler gets the payload only (the header is checked already) and `&mut Sessions` to
//! answer or broadcast; it captures whatever game state it needs (the world, usually, as an
//! `Rc<RefCell<World>>`). It rejects a payload by returning [`BadPacket`], which disconnects
//! the sender with that reason. Ping is built in, so that a bare server answers it.
//!
//! This module must never do I/O.

use std::fmt;

use super::conn_id::ConnId;
use super::frame;
use super::rate::Rate;
use super::session::Sessions;

/// Why a payload was refused; the sender is disconnected with this text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadPacket(pub String);

impl BadPacket {
    /// A refusal with `reason`, the text the sender is disconnected with (and the log shows).
    pub fn new(reason: impl Into<String>) -> BadPacket {
        BadPacket(reason.into())
    }
}

impl fmt::Display for BadPacket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// When a packet is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// From any connection (ping, login).
    Always,
    /// Only after the handler of some earlier packet called
    /// [`Sessions::set_logged_in`]; before that it disconnects the client.
    LoggedIn,
}

/// What a packet handler is.
pub(crate) type Handler = Box<dyn FnMut(&mut Sessions, ConnId, &[u8]) -> Result<(), BadPacket>>;

pub(super) struct Entry {
    pub name: &'static str,
    pub access: Access,
    /// How fast a connection may send it; `None`: no limit.
    pub rate: Option<Rate>,
    pub handler: Handler,
}

/// Handlers by packet id.
pub(super) struct PacketTable {
    entries: Vec<Option<Entry>>,
}

impl PacketTable {
    /// A table that answers ping and nothing else.
    pub(crate) fn new() -> PacketTable {
        let mut table = PacketTable {
            entries: (0..=u8::MAX).map(|_| None).collect(),
        };
        table.register(frame::PING, "ping", Access::Always, Box::new(echo_ping));
        table
    }

    /// Sets (or replaces) the handler of packet `id`; a rate set for it stays.
    pub(crate) fn register(
        &mut self,
        id: u8,
        name: &'static str,
        access: Access,
        handler: Handler,
    ) {
        let rate = self.get_mut(id).and_then(|e| e.rate);
        self.entries[usize::from(id)] = Some(Entry {
            name,
            access,
            rate,
            handler,
        });
    }

    /// Limits packet `id` to `rate` per connection. Panics if `id` has no handler: a limit on
    /// a packet nobody handles is a mistake in the caller.
    pub(crate) fn limit(&mut self, id: u8, rate: Rate) {
        let entry = self
            .get_mut(id)
            .unwrap_or_else(|| panic!("a rate for packet 0x{id:02x}, which has no handler"));
        entry.rate = Some(rate);
    }

    pub(crate) fn get_mut(&mut self, id: u8) -> Option<&mut Entry> {
        self.entries[usize::from(id)].as_mut()
    }
}

/// `0x73` ping: the identical frame goes back.
fn echo_ping(sessions: &mut Sessions, conn: ConnId, payload: &[u8]) -> Result<(), BadPacket> {
    if payload.len() > frame::MAX_PING_PAYLOAD {
        return Err(BadPacket::new(format!(
            "ping payload of {} bytes, at most {} allowed",
            payload.len(),
            frame::MAX_PING_PAYLOAD
        )));
    }
    sessions.send_packet(conn, frame::PING, &[payload]);
    Ok(())
}
