//! Framing: how bytes on a connection become packets and packets become bytes.
//!
//! Every packet, both ways, is `[id: u8][len: u16 big-endian][payload]`, where `len` is the
//! whole packet's length including its 3 header bytes (see `docs/protocol.md`). This module
//! owns that layout and the ping id, and nothing else: it never touches a socket and never
//! decides what a packet means.

use std::fmt;

/// Bytes before the payload: the id and the 16-bit length.
pub const HEADER_LEN: usize = 3;

/// The ping packet's id, both ways: 0–64 bytes of payload, answered with the identical
/// frame. The only id the network layer knows: every other is the game's.
pub const PING: u8 = 0x73;

/// Largest ping payload a client may send.
pub const MAX_PING_PAYLOAD: usize = 64;

/// One whole packet, borrowed from the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The packet id: the first byte of the header.
    pub id: u8,
    /// The whole packet, header included (what a ping echoes back).
    pub bytes: &'a [u8],
}

impl<'a> Frame<'a> {
    /// The bytes after the header.
    #[must_use]
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[HEADER_LEN..]
    }
}

/// Why the bytes at the front of a buffer are not a packet. Either error ends the connection:
/// after a bad length nothing that follows can be framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The length field is below the header's own 3 bytes.
    TooShort {
        /// The packet id in the header.
        id: u8,
        /// The length field, bytes (header included).
        len: u16,
    },
    /// The length field is above `network.max_packet`.
    TooLong {
        /// The packet id in the header.
        id: u8,
        /// The length field, bytes (header included).
        len: u16,
        /// The largest packet accepted, bytes (`network.max_packet`).
        max: usize,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FrameError::TooShort { id, len } => write!(
                f,
                "packet 0x{id:02x} declares length {len}, below the 3-byte header"
            ),
            FrameError::TooLong { id, len, max } => write!(
                f,
                "packet 0x{id:02x} declares length {len}, above network.max_packet ({max})"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

/// The packet at the front of `buf`: `Ok(None)` while it is incomplete (read more), an error
/// as soon as its header is impossible (no need to wait for a body that cannot be valid).
pub fn split(buf: &[u8], max_packet: usize) -> Result<Option<Frame<'_>>, FrameError> {
    let Some(len) = declared_len(buf, max_packet)? else {
        return Ok(None);
    };
    Ok(buf.get(..len).map(|bytes| Frame { id: buf[0], bytes }))
}

/// How many more bytes the packet at the front of `buf` needs to be whole: `Ok(0)` when it is
/// whole already, the rest of the 3-byte header while that is incomplete, else the rest of
/// the length the header declares. An impossible header is the error [`split`] gives.
pub(crate) fn missing(buf: &[u8], max_packet: usize) -> Result<usize, FrameError> {
    match declared_len(buf, max_packet)? {
        Some(len) => Ok(len.saturating_sub(buf.len())),
        None => Ok(HEADER_LEN - buf.len()),
    }
}

/// The whole length the packet at the front of `buf` declares, header included, once its
/// header is in (`None` before); an impossible header is the error [`split`] gives.
pub(crate) fn declared_len(buf: &[u8], max_packet: usize) -> Result<Option<usize>, FrameError> {
    let [id, hi, lo, ..] = *buf else {
        return Ok(None);
    };
    let len = u16::from_be_bytes([hi, lo]);
    if usize::from(len) < HEADER_LEN {
        return Err(FrameError::TooShort { id, len });
    }
    if usize::from(len) > max_packet {
        return Err(FrameError::TooLong {
            id,
            len,
            max: max_packet,
        });
    }
    Ok(Some(usize::from(len)))
}

/// Appends one packet built from payload `parts` to `out`.
///
/// # Panics
/// If the packet would exceed 65 535 bytes: callers build packets of bounded size.
pub fn put(out: &mut Vec<u8>, id: u8, parts: &[&[u8]]) {
    let len = HEADER_LEN + parts.iter().map(|p| p.len()).sum::<usize>();
    let len = u16::try_from(len).expect("a packet is at most 65535 bytes");
    out.reserve(usize::from(len));
    out.push(id);
    out.extend_from_slice(&len.to_be_bytes());
    for part in parts {
        out.extend_from_slice(part);
    }
}

/// One packet built from payload `parts`, as its own buffer.
#[must_use]
pub fn packet(id: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    put(&mut out, id, parts);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_whole_packets_and_waits_for_partial_ones() {
        let mut buf = packet(PING, &[b"hi"]);
        buf.extend(packet(0x04, &[]));
        let first = split(&buf, 8192).unwrap().unwrap();
        assert_eq!((first.id, first.payload()), (PING, &b"hi"[..]));
        let rest = &buf[first.bytes.len()..];
        assert_eq!(split(rest, 8192).unwrap().unwrap().bytes, &[0x04, 0, 3]);
        assert_eq!(split(&buf[..4], 8192), Ok(None));
        assert_eq!(split(&buf[..2], 8192), Ok(None));
        assert_eq!(split(&[], 8192), Ok(None));
    }

    #[test]
    fn missing_counts_the_header_then_the_declared_length() {
        let ping = packet(PING, &[b"hello"]);
        assert_eq!(missing(&[], 8192), Ok(3));
        assert_eq!(missing(&ping[..2], 8192), Ok(1));
        assert_eq!(missing(&ping[..3], 8192), Ok(5));
        assert_eq!(missing(&ping[..7], 8192), Ok(1));
        assert_eq!(missing(&ping, 8192), Ok(0));
        let mut two = ping.clone();
        two.extend_from_slice(&ping[..4]);
        assert_eq!(missing(&two, 8192), Ok(0), "a whole packet is at the front");
        assert_eq!(declared_len(&ping[..3], 8192), Ok(Some(8)));
        assert_eq!(
            missing(&[0x73, 0x20, 0x01], 8192),
            Err(FrameError::TooLong {
                id: 0x73,
                len: 8193,
                max: 8192
            })
        );
    }

    #[test]
    fn impossible_lengths_are_errors_before_the_body_arrives() {
        assert_eq!(
            split(&[0x73, 0, 2], 8192),
            Err(FrameError::TooShort { id: 0x73, len: 2 })
        );
        assert_eq!(
            split(&[0x73, 0x20, 0x01], 8192),
            Err(FrameError::TooLong {
                id: 0x73,
                len: 8193,
                max: 8192
            })
        );
        assert!(split(&[0x73, 0x20, 0x00], 8192).unwrap().is_none());
    }
}
