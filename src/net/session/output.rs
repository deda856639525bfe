//! One connection's unsent output: a queue of chunks, each either bytes of its own (packets
//! queued for it alone, appended to the chunk at the back) or a range of [`SharedFrames`]
//! (packets encoded once for many connections, held by reference).
//!
//! Owns the order (chunks go out exactly as queued), partial writes (a write may stop inside
//! any chunk, and the next one starts where it stopped) and the memory rules: written chunks
//! are dropped at once, a chunk of its own being written slowly while it grows never keeps
//! more than its unsent bytes again in written ones, and a drained queue keeps one buffer of
//! at most [`KEEP_CAPACITY`] for the next reply. Must never touch a socket or know a limit:
//! `Sessions` does the accounting.

use std::collections::VecDeque;
use std::ops::Range;

use super::super::shared::{Piece, SharedFrames};

/// A drained buffer of its own keeps its allocation up to this size (a busy connection would
/// otherwise reallocate on every packet); larger ones are freed.
pub(crate) const KEEP_CAPACITY: usize = 4 * 1024;
/// A drained chunk queue keeps its allocation up to this many entries.
const KEEP_CHUNKS: usize = 8;

/// Queued output, oldest first.
#[derive(Default)]
pub(crate) struct Output {
    chunks: VecDeque<Chunk>,
    /// Bytes queued and not yet written.
    len: usize,
    /// The buffer of the last own chunk written out, kept for the next one.
    spare: Vec<u8>,
}

enum Chunk {
    /// `bytes[from..]` still to write.
    Own { bytes: Vec<u8>, from: usize },
    /// `frames[range]` still to write; `range.start` moves as it is written.
    Shared {
        frames: SharedFrames,
        range: Range<usize>,
    },
}

impl Chunk {
    fn left(&self) -> usize {
        match self {
            Chunk::Own { bytes, from } => bytes.len() - from,
            Chunk::Shared { range, .. } => range.len(),
        }
    }
}

impl Output {
    /// Bytes queued and not yet written.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends bytes of its own: `write` appends exactly `len` bytes to the buffer it is given
    /// (the back chunk when that is its own, else a new one).
    pub(crate) fn push_own(&mut self, len: usize, write: impl FnOnce(&mut Vec<u8>)) {
        if !matches!(self.chunks.back(), Some(Chunk::Own { .. })) {
            let bytes = std::mem::take(&mut self.spare);
            self.chunks.push_back(Chunk::Own { bytes, from: 0 });
        }
        let Some(Chunk::Own { bytes, .. }) = self.chunks.back_mut() else {
            unreachable!("an own chunk is at the back");
        };
        let before = bytes.len();
        write(bytes);
        debug_assert_eq!(bytes.len() - before, len, "the writer wrote what it said");
        self.len += bytes.len() - before;
    }

    /// Appends `frames[range]` by reference; it continues the back chunk when that is the
    /// same frames up to `range.start`.
    pub(crate) fn push_shared(&mut self, frames: &SharedFrames, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        self.len += range.len();
        if let Some(Chunk::Shared {
            frames: back,
            range: back_range,
        }) = self.chunks.back_mut()
            && back.same(frames)
            && back_range.end == range.start
        {
            back_range.end = range.end;
            return;
        }
        self.chunks.push_back(Chunk::Shared {
            frames: frames.clone(),
            range,
        });
    }

    /// What is still to write, in order, as pieces a transport writes.
    pub(crate) fn pieces(&self) -> impl Iterator<Item = Piece<'_>> {
        self.chunks.iter().map(|chunk| match chunk {
            Chunk::Own { bytes, from } => Piece::Bytes(&bytes[*from..]),
            Chunk::Shared { frames, range } => Piece::Shared(frames, range.clone()),
        })
    }

    /// `n` bytes from the front were written (at most [`Output::len`]): the chunks written
    /// whole are dropped, the one the write stopped in starts after what went.
    pub(crate) fn advance(&mut self, mut n: usize) {
        assert!(n <= self.len, "wrote {n} of {} bytes queued", self.len);
        self.len -= n;
        while n > 0 {
            let front = self.chunks.front_mut().expect("n bytes queued");
            let left = front.left();
            if n < left {
                match front {
                    Chunk::Own { from, .. } => *from += n,
                    Chunk::Shared { range, .. } => range.start += n,
                }
                break;
            }
            n -= left;
            self.retire_front();
        }
        self.compact_front();
        if self.chunks.is_empty() && self.chunks.capacity() > KEEP_CHUNKS {
            self.chunks = VecDeque::new();
        }
    }

    /// Drops the written front chunk; its buffer becomes the spare if small enough.
    fn retire_front(&mut self) {
        if let Some(Chunk::Own { mut bytes, .. }) = self.chunks.pop_front()
            && bytes.capacity() <= KEEP_CAPACITY
            && bytes.capacity() > self.spare.capacity()
        {
            bytes.clear();
            self.spare = bytes;
        }
    }

    /// An own chunk at the front partly written forgets its written prefix once that is the
    /// larger half, so a client that reads about as fast as it is sent to never leaves a
    /// growing trail of written bytes behind its unsent ones. The move costs at most what
    /// was written.
    fn compact_front(&mut self) {
        if let Some(Chunk::Own { bytes, from }) = self.chunks.front_mut()
            && *from > 0
            && *from >= bytes.len() - *from
        {
            bytes.drain(..*from);
            *from = 0;
        }
    }

    /// Drops everything queued and every buffer.
    pub(crate) fn clear(&mut self) {
        *self = Output::default();
    }

    /// Everything queued, as one run of bytes, taken out (a detached connection's output, for
    /// the test kit).
    #[cfg(any(test, doc, feature = "testkit"))]
    pub(crate) fn take_bytes(&mut self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        for piece in self.pieces() {
            out.extend_from_slice(piece.bytes());
        }
        self.clear();
        out
    }

    /// The bytes the queue's buffers hold, written or not (own chunks' buffers as allocated;
    /// shared frames not counted): for tests of the memory rules.
    #[cfg(test)]
    pub(crate) fn own_capacity(&self) -> usize {
        let chunks: usize = self
            .chunks
            .iter()
            .map(|c| match c {
                Chunk::Own { bytes, .. } => bytes.capacity(),
                Chunk::Shared { .. } => 0,
            })
            .sum();
        chunks + self.spare.capacity()
    }

    /// Chunks queued.
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> usize {
        self.chunks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(out: &Output) -> Vec<u8> {
        out.pieces().flat_map(|p| p.bytes().to_vec()).collect()
    }

    fn own(out: &mut Output, data: &[u8]) {
        out.push_own(data.len(), |b| b.extend_from_slice(data));
    }

    #[test]
    fn own_and_shared_chunks_go_out_in_the_order_queued_across_partial_writes() {
        let shared = SharedFrames::new(b"SSSSSSSSSS");
        let mut out = Output::default();
        own(&mut out, b"ab");
        out.push_shared(&shared, 0..4);
        own(&mut out, b"cd");
        own(&mut out, b"ef");
        out.push_shared(&shared, 6..10);
        assert_eq!(out.chunks(), 4, "own bytes after own bytes join one chunk");
        let mut expected = b"abSSSScdefSSSS".to_vec();
        assert_eq!(bytes(&out), expected);
        // Writes that stop anywhere: before, inside and exactly at a chunk's end.
        for step in [1, 2, 3, 1, 4, 3] {
            out.advance(step);
            expected.drain(..step);
            assert_eq!(bytes(&out), expected);
            assert_eq!(out.len(), expected.len());
        }
        assert_eq!(out.len(), 0);
        assert_eq!(out.chunks(), 0);
        assert_eq!(shared.holders(), 1, "written chunks let go of the frames");
    }

    #[test]
    fn a_shared_range_continuing_the_back_one_joins_it() {
        let shared = SharedFrames::new(b"0123456789");
        let other = SharedFrames::new(b"0123456789");
        let mut out = Output::default();
        out.push_shared(&shared, 0..3);
        out.push_shared(&shared, 3..5);
        assert_eq!(out.chunks(), 1);
        out.push_shared(&shared, 6..8);
        out.push_shared(&other, 8..9);
        assert_eq!(
            out.chunks(),
            3,
            "a gap, or other frames, is a chunk of its own"
        );
        assert_eq!(bytes(&out), b"01234678");
    }

    #[test]
    fn a_slowly_written_own_chunk_never_keeps_more_than_twice_its_unsent_bytes() {
        let mut out = Output::default();
        // A slow reader: each round 1000 bytes are queued and 990 written.
        for _ in 0..1000 {
            own(&mut out, &[7; 1000]);
            out.advance(990);
            assert!(out.own_capacity() <= 2 * (2 * out.len() + 1000));
        }
        assert_eq!(out.len(), 10_000);
        assert!(out.own_capacity() < 50_000, "{}", out.own_capacity());
    }

    #[test]
    fn a_drained_queue_keeps_one_small_buffer_and_frees_a_large_one() {
        let mut out = Output::default();
        own(&mut out, &[1; 100]);
        out.advance(100);
        let kept = out.own_capacity();
        assert!((100..=KEEP_CAPACITY).contains(&kept), "{kept}");
        own(&mut out, &[1; 100_000]);
        out.advance(100_000);
        assert_eq!(out.own_capacity(), 0, "the large buffer was freed");
        own(&mut out, &[1; 100]);
        out.advance(100);
        assert!(out.own_capacity() <= KEEP_CAPACITY);
    }
}
