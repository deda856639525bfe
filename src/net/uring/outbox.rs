//! One io_uring connection's output between `write` and the kernel: a queue of its own bytes
//! (copied, as `write` must return before the kernel takes them) and shared frames (held by
//! reference: a crowd's broadcast is never copied per connection here either), sent with one
//! `sendmsg` over up to [`IOV_BATCH`] entries at a time.
//!
//! Owns the rule the kernel needs: while a send is in flight, the entries it reads (the first
//! `flying`), the iovec array and the message header neither move, change nor go away. New
//! output only ever goes after them.
//!
//! Must never submit anything: the ring arms the send with [`Outbox::arm`] and reports its
//! completion with [`Outbox::sent`].

use std::collections::VecDeque;
use std::ops::Range;

use crate::net::shared::{Piece, SharedFrames};

/// Entries one `sendmsg` covers.
const IOV_BATCH: usize = 16;
/// A written buffer of its own is kept for the next one up to this size.
const RETAIN: usize = 2 * 1024;

enum Entry {
    Own(Vec<u8>),
    Shared(SharedFrames, Range<usize>),
}

impl Entry {
    fn bytes(&self) -> &[u8] {
        match self {
            Entry::Own(bytes) => bytes,
            Entry::Shared(frames, range) => &frames.as_bytes()[range.clone()],
        }
    }
}

/// What the kernel reads a send's entries through. Boxed in the outbox, so it does not move
/// while the send flies.
struct Message {
    iov: [libc::iovec; IOV_BATCH],
    header: libc::msghdr,
}

/// Output accepted by `write` and not yet taken by the kernel, in order.
#[derive(Default)]
pub(super) struct Outbox {
    entries: VecDeque<Entry>,
    /// Bytes of the front entry the kernel took already.
    front_sent: usize,
    /// Entries the send in flight reads (the first ones); 0: no send in flight.
    flying: usize,
    /// Bytes queued, front entry's sent bytes excluded.
    queued: usize,
    /// A written own buffer, kept for the next.
    spare: Vec<u8>,
    /// Made for the first send, kept for the connection's life.
    message: Option<Box<Message>>,
}

impl Outbox {
    /// Bytes accepted and not yet taken by the kernel.
    pub(super) fn queued(&self) -> usize {
        self.queued
    }

    /// Takes what fits of `pieces` into `room` bytes, in order (the last one perhaps in
    /// part): own bytes copied, shared frames by reference. How many bytes it took.
    pub(super) fn take(
        &mut self,
        pieces: &mut dyn Iterator<Item = Piece<'_>>,
        room: usize,
    ) -> usize {
        let mut taken = 0;
        while taken < room {
            let Some(piece) = pieces.next() else { break };
            let n = piece.bytes().len().min(room - taken);
            match piece {
                Piece::Bytes(bytes) => self.push_own(&bytes[..n]),
                Piece::Shared(frames, range) => {
                    self.push_shared(frames, range.start..range.start + n);
                }
            }
            taken += n;
        }
        self.queued += taken;
        taken
    }

    /// Whether the back entry may still change: it is not read by the send in flight.
    fn back_is_free(&self) -> bool {
        self.entries.len() > self.flying
    }

    fn push_own(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.back_is_free()
            && let Some(Entry::Own(back)) = self.entries.back_mut()
        {
            back.extend_from_slice(bytes);
            return;
        }
        let mut own = std::mem::take(&mut self.spare);
        own.extend_from_slice(bytes);
        self.entries.push_back(Entry::Own(own));
    }

    fn push_shared(&mut self, frames: &SharedFrames, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        if self.back_is_free()
            && let Some(Entry::Shared(back, back_range)) = self.entries.back_mut()
            && back.same(frames)
            && back_range.end == range.start
        {
            back_range.end = range.end;
            return;
        }
        self.entries.push_back(Entry::Shared(frames.clone(), range));
    }

    /// Makes the message of a send of the first entries (the front one from where the kernel
    /// stopped) and marks them in flight; its header, for `IORING_OP_SENDMSG`. `None` when
    /// nothing is queued or a send is in flight already.
    ///
    /// The header, its iovecs and the bytes they point to stay where they are, unchanged,
    /// until [`Outbox::sent`] or [`Outbox::abandon`] says the send is over.
    pub(super) fn arm(&mut self) -> Option<*const libc::msghdr> {
        if self.flying > 0 || self.entries.is_empty() {
            return None;
        }
        let message = self.message.get_or_insert_with(|| {
            Box::new(Message {
                iov: [libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                }; IOV_BATCH],
                // SAFETY: an all-zero msghdr is a valid empty one (no name, no control).
                header: unsafe { std::mem::zeroed() },
            })
        });
        let mut count = 0;
        for (i, entry) in self.entries.iter().take(IOV_BATCH).enumerate() {
            let skip = if i == 0 { self.front_sent } else { 0 };
            let bytes = &entry.bytes()[skip..];
            message.iov[i] = libc::iovec {
                iov_base: bytes.as_ptr().cast_mut().cast(),
                iov_len: bytes.len(),
            };
            count += 1;
        }
        message.header.msg_iov = message.iov.as_mut_ptr();
        message.header.msg_iovlen = count as _;
        self.flying = count;
        Some(&raw const message.header)
    }

    /// The send in flight took `n` bytes: the entries it finished go, the next one starts
    /// where it stopped. Nothing is in flight after.
    pub(super) fn sent(&mut self, mut n: usize) {
        self.flying = 0;
        self.queued -= n;
        while n > 0 {
            let Some(front) = self.entries.front() else {
                break;
            };
            let left = front.bytes().len() - self.front_sent;
            if n < left {
                self.front_sent += n;
                break;
            }
            n -= left;
            self.front_sent = 0;
            if let Some(Entry::Own(mut bytes)) = self.entries.pop_front()
                && bytes.capacity() <= RETAIN
            {
                bytes.clear();
                self.spare = bytes;
            }
        }
    }

    /// The send in flight failed or was cancelled: nothing is in flight any more.
    pub(super) fn abandon(&mut self) {
        self.flying = 0;
    }

    /// Drops every entry no send is reading (all of them when none is in flight): output
    /// that will never go.
    pub(super) fn discard_unsent(&mut self) {
        let keep = self.flying;
        while self.entries.len() > keep {
            if let Some(entry) = self.entries.pop_back() {
                let len = entry.bytes().len();
                let skip = if self.entries.is_empty() {
                    self.front_sent
                } else {
                    0
                };
                self.queued -= len - skip;
            }
        }
        if self.entries.is_empty() {
            self.front_sent = 0;
            self.spare = Vec::new();
        }
    }

    /// Whether nothing is queued.
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // `msg_iovlen` is a `usize` with glibc, an `i32` with musl.
    #[allow(clippy::unnecessary_cast)]
    fn message_bytes(header: *const libc::msghdr) -> Vec<u8> {
        // SAFETY: the header and iovecs `arm` made, read while the outbox is untouched.
        unsafe {
            let header = &*header;
            (0..header.msg_iovlen as usize)
                .flat_map(|i| {
                    let iov = &*header.msg_iov.add(i);
                    std::slice::from_raw_parts(iov.iov_base.cast::<u8>(), iov.iov_len).to_vec()
                })
                .collect()
        }
    }

    #[test]
    fn a_send_covers_the_queue_in_order_and_goes_on_where_the_kernel_stopped() {
        let shared = SharedFrames::new(b"SSSSSS");
        let mut outbox = Outbox::default();
        let pieces = [
            Piece::Bytes(b"ab"),
            Piece::Shared(&shared, 1..5),
            Piece::Bytes(b"cd"),
        ];
        assert_eq!(outbox.take(&mut pieces.clone().into_iter(), 100), 8);
        assert_eq!(shared.holders(), 2, "held by reference");
        let header = outbox.arm().unwrap();
        assert_eq!(message_bytes(header), b"abSSSScd");
        assert!(outbox.arm().is_none(), "one send at a time");
        // Accepted while it flies: goes after, never into an entry being read.
        assert_eq!(outbox.take(&mut [Piece::Bytes(b"ef")].into_iter(), 100), 2);
        assert_eq!(
            message_bytes(header),
            b"abSSSScd",
            "the flying message is unchanged"
        );
        // The kernel took 3 bytes: the next send starts inside the shared entry.
        outbox.sent(3);
        assert_eq!(outbox.queued(), 7);
        assert_eq!(message_bytes(outbox.arm().unwrap()), b"SSScdef");
        outbox.sent(7);
        assert!(outbox.is_empty());
        assert_eq!(shared.holders(), 1, "let go once sent");
    }

    #[test]
    fn take_stops_at_the_room_inside_a_piece() {
        let shared = SharedFrames::new(b"0123456789");
        let mut outbox = Outbox::default();
        let taken = outbox.take(
            &mut [Piece::Bytes(b"ab"), Piece::Shared(&shared, 0..10)].into_iter(),
            6,
        );
        assert_eq!(taken, 6);
        assert_eq!(message_bytes(outbox.arm().unwrap()), b"ab0123");
    }

    #[test]
    fn discarding_keeps_what_the_kernel_is_reading() {
        let mut outbox = Outbox::default();
        outbox.take(&mut [Piece::Bytes(b"abc")].into_iter(), 100);
        let header = outbox.arm().unwrap();
        outbox.take(&mut [Piece::Bytes(b"def")].into_iter(), 100);
        outbox.discard_unsent();
        assert_eq!(message_bytes(header), b"abc");
        assert_eq!(outbox.queued(), 3);
        outbox.sent(3);
        assert!(outbox.is_empty());
    }
}
