//! The ceiling the shard's networking is compared against: a bare tokio echo server for the
//! shard's ping packet, with no event loop, no game and no per-packet bookkeeping.
//!
//! ```sh
//! cargo run --release --example tokio_echo -- [ADDR]     # default 127.0.0.1:2594
//! cargo run --release -- loadgen --connect 127.0.0.1:2594 --connections 1000
//! ```
//!
//! It prints `listening on ADDR` once bound, then serves until killed. One current-thread
//! runtime, like the shard; one task per connection, which reads what has arrived, frames
//! it with the shard's own `frame::split`, and writes every `0x73` ping back identically in
//! one write per read (TCP_NODELAY on). Other packets are ignored; a malformed frame closes
//! the connection, as the shard does. Whatever `shardloop loadgen` measures here is the cost
//! of tokio plus the kernel: the shard cannot beat it, and the gap is its own overhead.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Duration;

use shardloop::net::frame;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

const DEFAULT_ADDR: &str = "127.0.0.1:2594";
/// The shard's default `network.max_packet`.
const MAX_PACKET: usize = 8192;
/// How much room each read offers at least.
const READ_CHUNK: usize = 16 * 1024;

fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    let addr: SocketAddr = match arg.as_deref().unwrap_or(DEFAULT_ADDR).parse() {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("usage: tokio_echo [ADDR]  (default {DEFAULT_ADDR}): {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let served = runtime.and_then(|runtime| runtime.block_on(serve(addr)));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tokio_echo: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(addr: SocketAddr) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("listening on {}", listener.local_addr()?);
    serve_listener(listener).await
}

/// Accepts and echoes forever on a bound listener (`benches/net.rs` runs this in-process).
pub async fn serve_listener(listener: TcpListener) -> io::Result<()> {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(async move {
                    // Any error ends this connection only; closing it is the whole reaction.
                    let _ = echo(stream).await;
                });
            }
            Err(e) => {
                // Out of file descriptors, say: back off instead of spinning on the error.
                eprintln!("tokio_echo: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Echoes the pings of one connection until it closes or sends a malformed frame.
async fn echo(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    // Reads land in the unused tail of `input` (allocated once; it grows only for a packet
    // bigger than itself); whole frames are consumed, a partial one moves to the front.
    let mut input = vec![0; READ_CHUNK];
    let mut filled = 0;
    let mut output = Vec::with_capacity(READ_CHUNK);
    loop {
        if filled == input.len() {
            input.resize(input.len() * 2, 0);
        }
        // `poll_read` forgets the socket's readiness after a short read, sparing the
        // `read` that `readable` + `try_read` would make only to hear EWOULDBLOCK.
        let mut space = ReadBuf::new(&mut input[filled..]);
        std::future::poll_fn(|cx| Pin::new(&mut stream).poll_read(cx, &mut space)).await?;
        match space.filled().len() {
            0 => return Ok(()),
            n => filled += n,
        }
        let used = pings(&input[..filled], &mut output)?;
        input.copy_within(used..filled, 0);
        filled -= used;
        write_all(&stream, &output).await?;
        output.clear();
    }
}

/// Appends the whole ping frames at the front of `input` to `output`; returns the bytes
/// framed (a trailing partial frame waits for the next read).
fn pings(input: &[u8], output: &mut Vec<u8>) -> io::Result<usize> {
    let mut used = 0;
    while let Some(packet) = frame::split(&input[used..], MAX_PACKET)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
    {
        if packet.id == frame::PING {
            output.extend_from_slice(packet.bytes);
        }
        used += packet.bytes.len();
    }
    Ok(used)
}

async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match stream.try_write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
