//! Output encoded once for many connections: [`SharedFrames`], and the [`Piece`]s a transport
//! is handed to write (a connection's own bytes, or a range of shared frames).
//!
//! A crowd's move goes to every player around it. Copying its bytes into each player's send
//! buffer made the fan-out linear in the audience by memcpy; queued as a shared buffer, it
//! costs each recipient a reference count and a queue entry, and the bytes are copied once,
//! by the kernel, out of the one buffer (a vectored write).
//!
//! Owns nothing but the types. Must never be shared across threads: the count is an `Rc`,
//! like everything else the loop thread owns.

use std::fmt;
use std::ops::Range;
use std::rc::Rc;

/// Whole packets, framed one after the other ([`crate::net::frame::put`]), encoded once and
/// queued by reference to every connection that gets them
/// ([`Sessions::send_shared`](crate::net::Sessions::send_shared)). A clone is a reference
/// count; the bytes never change.
#[derive(Clone)]
pub struct SharedFrames(Rc<[u8]>);

impl SharedFrames {
    /// A shared copy of `frames` (the one copy they get).
    #[must_use]
    pub fn new(frames: &[u8]) -> SharedFrames {
        SharedFrames(Rc::from(frames))
    }

    /// The bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// How many bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No bytes at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `self` and `other` are the same buffer (not merely equal bytes).
    #[must_use]
    pub fn same(&self, other: &SharedFrames) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }

    /// Queues (connections, backend buffers) holding these frames now, this handle included.
    #[must_use]
    pub fn holders(&self) -> usize {
        Rc::strong_count(&self.0)
    }
}

impl fmt::Debug for SharedFrames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedFrames({} bytes)", self.0.len())
    }
}

/// A run of a connection's output, handed to its transport to write.
#[derive(Debug, Clone)]
pub enum Piece<'a> {
    /// The connection's own bytes. A transport that must keep them past the call copies them.
    Bytes(&'a [u8]),
    /// `frames[range]`. A transport that must keep them past the call keeps a clone of
    /// `frames` (a reference count), not a copy.
    Shared(&'a SharedFrames, Range<usize>),
}

impl Piece<'_> {
    /// The bytes of the piece.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        match self {
            Piece::Bytes(bytes) => bytes,
            Piece::Shared(frames, range) => &frames.as_bytes()[range.clone()],
        }
    }
}
