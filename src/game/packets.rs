//! The demo game's packet ids and payload encodings (`docs/protocol.md`).
//!
//! The network layer knows only framing and ping; what the other ids mean is the game's.
//! Owns the numbers and byte layouts only: no handler logic here.

/// Packet ids, client → server.
pub mod client {
    /// Ping: 0–64 bytes of payload, answered with the identical frame (built into the
    /// server).
    pub use crate::net::frame::PING;
    /// Login: a UTF-8 name of 1–30 bytes.
    pub const LOGIN: u8 = 0x01;
    /// Move: `[direction u8 0–7][seq u8]`.
    pub const MOVE: u8 = 0x02;
    /// Say: UTF-8 text of 1–200 bytes.
    pub const SAY: u8 = 0x03;
    /// Logout: no payload.
    pub const LOGOUT: u8 = 0x04;
}

/// Packet ids, server → client.
pub mod server {
    /// Login accepted: `[serial u32][x u16][y u16]`.
    pub const LOGIN_OK: u8 = 0x81;
    /// Move accepted: `[seq u8][x u16][y u16]`.
    pub const MOVE_OK: u8 = 0x82;
    /// Speech: `[serial u32][UTF-8 text]`.
    pub const SPEECH: u8 = 0x84;
    /// A mobile in range moved: `[serial u32][x u16][y u16]`.
    pub const MOBILE_MOVED: u8 = 0x85;
}

/// `[serial u32][x u16][y u16]`, big-endian: the payload of `LOGIN_OK` and `MOBILE_MOVED`.
#[must_use]
pub fn serial_xy(serial: u32, x: u16, y: u16) -> [u8; 8] {
    let [s0, s1, s2, s3] = serial.to_be_bytes();
    let [x0, x1] = x.to_be_bytes();
    let [y0, y1] = y.to_be_bytes();
    [s0, s1, s2, s3, x0, x1, y0, y1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_xy_is_big_endian() {
        assert_eq!(
            serial_xy(0x0102_0304, 0x0506, 0x0708),
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
    }
}
