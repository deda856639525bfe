//! A test player: a real TCP client of the demo protocol's framing, async, for the test kit.
//!
//! Owns one connection and what it has read but not yet handed out. Every wait is bounded in
//! game time ([`EXPECT_WITHIN`]), so a test that expects what never comes fails with the
//! packets it did get, instead of hanging.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::game::packets::{client, server};
use crate::net::frame;
use crate::world::{Location, MapId, Serial};

/// How much game time [`TestPlayer::expect`] waits before it fails the test.
pub const EXPECT_WITHIN: Duration = Duration::from_secs(60);

/// One connected client.
pub struct TestPlayer {
    stream: TcpStream,
    serial: Option<Serial>,
    at: Option<Location>,
    /// Packet ids skipped while waiting for another (for the failure message).
    skipped: Vec<u8>,
}

impl TestPlayer {
    pub(super) async fn connect(addr: SocketAddr) -> TestPlayer {
        let stream = TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the test shard at {addr}: {e}"));
        stream.set_nodelay(true).expect("TCP_NODELAY");
        TestPlayer {
            stream,
            serial: None,
            at: None,
            skipped: Vec::new(),
        }
    }

    /// Logs in as `name` and waits for the answer.
    ///
    /// # Panics
    /// When the shard refuses.
    pub async fn login(&mut self, name: &str) {
        self.send(client::LOGIN, name.as_bytes()).await;
        let ok = self.expect(server::LOGIN_OK).await;
        let word = |i: usize| u16::from_be_bytes([ok[i], ok[i + 1]]);
        self.serial = Some(Serial(u32::from_be_bytes([ok[0], ok[1], ok[2], ok[3]])));
        self.at = Some(Location::new(word(4), word(6), 0, MapId::FELUCCA));
    }

    /// The player's mobile, once logged in.
    ///
    /// # Panics
    /// Before [`login`](Self::login).
    #[must_use]
    pub fn serial(&self) -> Serial {
        self.serial.expect("the player has not logged in")
    }

    /// Where the shard placed the player at login.
    ///
    /// # Panics
    /// Before [`login`](Self::login).
    #[must_use]
    pub fn location(&self) -> Location {
        self.at.expect("the player has not logged in")
    }

    /// Sends packet `id` with `payload`.
    pub async fn send(&mut self, id: u8, payload: &[u8]) {
        let packet = frame::packet(id, &[payload]);
        self.stream
            .write_all(&packet)
            .await
            .unwrap_or_else(|e| panic!("sending packet 0x{id:02x}: {e}"));
    }

    /// Says `text` (the demo's `SAY` packet).
    pub async fn say(&mut self, text: &str) {
        self.send(client::SAY, text.as_bytes()).await;
    }

    /// The payload of the next packet `id`, skipping others, within [`EXPECT_WITHIN`] of game
    /// time.
    ///
    /// # Panics
    /// When it does not come in time, or the connection closes.
    pub async fn expect(&mut self, id: u8) -> Vec<u8> {
        match self.next_of(id, EXPECT_WITHIN).await {
            Some(payload) => payload,
            None => panic!(
                "no packet 0x{id:02x} within {EXPECT_WITHIN:?} of game time (skipped: {})",
                self.skipped_text()
            ),
        }
    }

    /// The payload of the next packet `id`, skipping others, if one comes within `within`.
    pub async fn next_of(&mut self, id: u8, within: Duration) -> Option<Vec<u8>> {
        self.skipped.clear();
        let wait = async {
            loop {
                let (got, payload) = self.read_packet().await?;
                if got == id {
                    return Some(payload);
                }
                self.skipped.push(got);
            }
        };
        tokio::time::timeout(within, wait).await.ok().flatten()
    }

    /// Fails the test if a packet `id` arrives within `within` of game time.
    ///
    /// # Panics
    /// When one does.
    pub async fn expect_none(&mut self, id: u8, within: Duration) {
        if let Some(payload) = self.next_of(id, within).await {
            panic!("packet 0x{id:02x} arrived within {within:?}: {payload:?}");
        }
    }

    /// True once the shard has closed the connection, within `within` of game time.
    pub async fn closed_within(&mut self, within: Duration) -> bool {
        let drain = async {
            let mut buf = [0; 1024];
            loop {
                match self.stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(within, drain).await.is_ok()
    }

    async fn read_packet(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut header = [0; frame::HEADER_LEN];
        self.stream.read_exact(&mut header).await.ok()?;
        let len = usize::from(u16::from_be_bytes([header[1], header[2]]));
        let mut payload = vec![0; len.saturating_sub(frame::HEADER_LEN)];
        self.stream.read_exact(&mut payload).await.ok()?;
        Some((header[0], payload))
    }

    fn skipped_text(&self) -> String {
        match self.skipped.as_slice() {
            [] => "nothing".into(),
            ids => ids
                .iter()
                .map(|id| format!("0x{id:02x}"))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}
