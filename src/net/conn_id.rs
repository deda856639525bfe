//! A connection's identity: a generational key into the sessions' slab, so an id kept past
//! its connection's close can never reach the connection that reuses the slot.
//!
//! Owns that one type; imports only the slab, so every part of the network layer — the
//! backends' readiness tokens, the sessions, the handler table — may use it.

use std::fmt;

use crate::slab::Key;

/// One connection, for as long as it is open. Copy it freely: once the connection closes,
/// every copy is stale and every operation on it is a no-op, even after the slot is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub(super) Key);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}.{}", self.0.index(), self.0.generation())
    }
}
