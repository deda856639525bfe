//! A test player: a real TCP client of the engine's framing, async, for the test kit. It
//! speaks a game's protocol through that game's [`Login`] and the packets a test sends.
//!
//! Owns one connection and what it has read but not yet handed out. Every wait is bounded in
//! game time ([`EXPECT_WITHIN`]), so a test that expects what never comes fails with the
//! packets it did get, instead of hanging.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::net::frame;
use crate::world::{Location, Serial};

/// How a game's client logs in, for [`TestPlayer::login`] and the kit's `Running::login`:
/// the game's own login packet and answer.
#[derive(Clone, Copy, Debug)]
pub struct Login {
    /// The login packet for a name: its id and payload.
    pub request: fn(&str) -> (u8, Vec<u8>),
    /// The id of the packet that says the login was accepted.
    pub accepted: u8,
    /// The player's serial and spot, read from that packet's payload; `None` when the
    /// payload does not hold them (the test fails, naming it).
    pub read: fn(&[u8]) -> Option<(Serial, Location)>,
}

/// How much game time [`TestPlayer::expect`] waits before it fails the test.
pub const EXPECT_WITHIN: Duration = Duration::from_secs(60);

/// One connected client.
pub struct TestPlayer {
    stream: TcpStream,
    login: Option<Login>,
    serial: Option<Serial>,
    at: Option<Location>,
    /// Packet ids skipped while waiting for another (for the failure message).
    skipped: Vec<u8>,
}

impl TestPlayer {
    /// A new connection to `addr`, not logged in, that logs in with `login` (if any).
    ///
    /// # Panics
    /// When it cannot connect.
    pub async fn connect(addr: SocketAddr, login: Option<Login>) -> TestPlayer {
        let stream = TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the test shard at {addr}: {e}"));
        stream.set_nodelay(true).expect("TCP_NODELAY");
        TestPlayer {
            stream,
            login,
            serial: None,
            at: None,
            skipped: Vec::new(),
        }
    }

    /// Logs in as `name` with the game's [`Login`] and waits for the answer.
    ///
    /// # Panics
    /// When the test shard has no login (`TestShard::with_login`), or the shard refuses.
    pub async fn login(&mut self, name: &str) {
        let login = self.login.expect(
            "this test player has no login: give the test shard one (TestShard::with_login)",
        );
        let (id, payload) = (login.request)(name);
        self.send(id, &payload).await;
        let ok = self.expect(login.accepted).await;
        let (serial, at) = (login.read)(&ok).unwrap_or_else(|| {
            panic!(
                "the login answer 0x{:02x} does not hold a player: {ok:?}",
                login.accepted
            )
        });
        self.serial = Some(serial);
        self.at = Some(at);
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
