//! A client's TCP connection to the server under load: connect, log in, send, and read the
//! server's packets one by one; and why a client stops early.
//!
//! This module owns the socket, its receive buffer and the count of bytes each way. It must
//! never lose bytes when a read or a write is cancelled: both race timers in `select!`.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use crate::demo::packets::{client, server};
use shardloop::net::frame::{self, Frame, FrameError};
use tokio::io::{AsyncRead, Interest, ReadBuf, Ready};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::Window;
use super::dial::Dial;

/// Largest packet accepted from the server: anything its 16-bit length field can say.
const MAX_PACKET: usize = u16::MAX as usize;
/// How much room each read offers at least.
const READ_CHUNK: usize = 4096;
/// A connect or a login that takes longer than this fails that client.
pub(super) const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why one client stopped early.
#[derive(Debug)]
pub(super) enum ClientError {
    Io(io::Error),
    Closed,
    Timeout(&'static str),
    Frame(FrameError),
    BadEcho,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "{e}"),
            ClientError::Closed => f.write_str("connection closed by the server"),
            ClientError::Timeout(what) => write!(f, "{what} took over {SETUP_TIMEOUT:?}"),
            ClientError::Frame(e) => write!(f, "bad packet from the server: {e}"),
            ClientError::BadEcho => f.write_str("ping echo differs from the ping sent"),
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

/// The login packet for `name`.
pub(super) fn login_packet(name: &str) -> Vec<u8> {
    frame::packet(client::LOGIN, &[name.as_bytes()])
}

/// A client's connection and its receive buffer.
pub(super) struct Conn {
    stream: TcpStream,
    /// Bytes written to the socket, and read from it.
    pub(super) sent: u64,
    pub(super) received: u64,
    /// Allocated (and zeroed) once; grows only for a packet bigger than itself. Reads go
    /// straight into its unused tail: the `io-util` copy helpers are not compiled in.
    buf: Vec<u8>,
    /// Where the next unread packet starts in `buf`.
    head: usize,
    /// Where the bytes read end in `buf`.
    tail: usize,
}

impl Conn {
    /// Connects as `dial` says, giving up after `SETUP_TIMEOUT`.
    pub(super) async fn connect(dial: &Dial) -> Result<Conn, ClientError> {
        let stream = tokio::time::timeout(SETUP_TIMEOUT, dial.connect())
            .await
            .map_err(|_| ClientError::Timeout("connecting"))??;
        Conn::new(stream)
    }

    pub(super) fn new(stream: TcpStream) -> Result<Conn, ClientError> {
        // Requests are small and each waits for its answer: never hold one back.
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            sent: 0,
            received: 0,
            buf: vec![0; READ_CHUNK],
            head: 0,
            tail: 0,
        })
    }

    /// Logs in as `name` and waits for the server's `0x81`, handing the id of every other
    /// packet to `unasked`.
    pub(super) async fn login(
        &mut self,
        name: &str,
        unasked: impl FnMut(u8),
    ) -> Result<(), ClientError> {
        self.send(&login_packet(name)).await?;
        self.logged_in(unasked).await
    }

    /// Waits for the server's `0x81` to a login sent, handing the id of every other packet
    /// to `unasked`.
    pub(super) async fn logged_in(
        &mut self,
        mut unasked: impl FnMut(u8),
    ) -> Result<(), ClientError> {
        let accepted = async {
            loop {
                while let Some(packet) = self.pop()? {
                    if packet.id == server::LOGIN_OK {
                        return Ok(());
                    }
                    unasked(packet.id);
                }
                self.fill().await?;
            }
        };
        tokio::time::timeout(SETUP_TIMEOUT, accepted)
            .await
            .map_err(|_| ClientError::Timeout("logging in"))?
    }

    /// Waits for the window to open, reading and dropping whatever the server sends.
    pub(super) async fn wait_for_start(
        &mut self,
        mut window: watch::Receiver<Option<Window>>,
        mut unasked: impl FnMut(u8),
    ) -> Result<Window, ClientError> {
        loop {
            tokio::select! {
                opened = window.wait_for(Option::is_some) => {
                    // The coordinator holds the sender until every client has returned.
                    return opened.ok().and_then(|w| *w).ok_or(ClientError::Closed);
                }
                read = self.fill() => {
                    read?;
                    while let Some(packet) = self.pop()? {
                        unasked(packet.id);
                    }
                }
            }
        }
    }

    /// Reads until the echo of `ping` arrives, handing the id of anything else to `unasked`.
    pub(super) async fn echo_of(
        &mut self,
        ping: &[u8],
        mut unasked: impl FnMut(u8),
    ) -> Result<(), ClientError> {
        loop {
            while let Some(packet) = self.pop()? {
                if packet.id != client::PING {
                    unasked(packet.id);
                } else if packet.bytes == ping {
                    return Ok(());
                } else {
                    return Err(ClientError::BadEcho);
                }
            }
            self.fill().await?;
        }
    }

    /// Writes all of `bytes`. Requests are small: this almost never waits.
    pub(super) async fn send(&mut self, mut bytes: &[u8]) -> Result<(), ClientError> {
        while !bytes.is_empty() {
            match self.try_send(bytes)? {
                0 => self.stream.writable().await?,
                n => bytes = &bytes[n..],
            }
        }
        Ok(())
    }

    /// Writes as much of `bytes` as the socket takes now, without waiting: 0 when it is full.
    pub(super) fn try_send(&mut self, bytes: &[u8]) -> Result<usize, ClientError> {
        match self.stream.try_write(bytes) {
            Ok(0) if !bytes.is_empty() => Err(ClientError::Closed),
            Ok(n) => {
                self.sent += n as u64;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits until the socket can be read or written (or has closed). Cancel-safe.
    pub(super) async fn ready(&self) -> Result<Ready, ClientError> {
        Ok(self
            .stream
            .ready(Interest::READABLE | Interest::WRITABLE)
            .await?)
    }

    /// Reads once, whatever has arrived. Cancel-safe: nothing is lost if the future is
    /// dropped, so it can race a timer in `select!`.
    pub(super) async fn fill(&mut self) -> Result<(), ClientError> {
        let space = self.space();
        // `poll_read`, not `readable` + `try_read`: after a short read it forgets the
        // readiness itself, which saves a `read` that would only say EWOULDBLOCK: one
        // syscall in three per round trip.
        let mut space = ReadBuf::new(&mut self.buf[space..]);
        std::future::poll_fn(|cx| Pin::new(&mut self.stream).poll_read(cx, &mut space)).await?;
        let read = space.filled().len();
        self.filled(read)
    }

    /// Reads once what has arrived, without waiting: `false` when nothing had.
    pub(super) fn try_fill(&mut self) -> Result<bool, ClientError> {
        let space = self.space();
        match self.stream.try_read(&mut self.buf[space..]) {
            Ok(read) => self.filled(read).map(|()| true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Moves the unread bytes to the front, makes room for a read, and says where it starts.
    fn space(&mut self) -> usize {
        self.buf.copy_within(self.head..self.tail, 0);
        self.tail -= self.head;
        self.head = 0;
        if self.tail == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        self.tail
    }

    /// Takes in a read of `n` bytes; a read of none is the server's end of the stream.
    fn filled(&mut self, n: usize) -> Result<(), ClientError> {
        if n == 0 {
            return Err(ClientError::Closed);
        }
        self.tail += n;
        self.received += n as u64;
        Ok(())
    }

    /// The next whole packet already read, if any.
    pub(super) fn pop(&mut self) -> Result<Option<Frame<'_>>, ClientError> {
        let at = self.head;
        let len = match frame::split(&self.buf[at..self.tail], MAX_PACKET) {
            Ok(Some(packet)) => packet.bytes.len(),
            Ok(None) => return Ok(None),
            Err(e) => return Err(ClientError::Frame(e)),
        };
        self.head += len;
        let bytes = &self.buf[at..at + len];
        Ok(Some(Frame {
            id: bytes[0],
            bytes,
        }))
    }
}
