//! Opening a client's TCP connection: to which server, from which local address, with how
//! big a receive buffer. Each is set on the socket (socket2) before it connects.
//!
//! This module owns the socket options a connection starts with. It must never pick an
//! address itself: callers pass addresses `loopback::check` has already allowed.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpSocket, TcpStream};

/// How to open one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dial {
    pub(super) to: SocketAddr,
    /// The local address to send from; `None` lets the kernel pick.
    pub(super) from: Option<IpAddr>,
    /// `SO_RCVBUF` in bytes (the kernel doubles it, for its bookkeeping); `None` keeps the
    /// system's default and its autotuning.
    pub(super) recv_buffer: Option<usize>,
}

impl Dial {
    pub(super) fn new(to: SocketAddr) -> Dial {
        Dial {
            to,
            from: None,
            recv_buffer: None,
        }
    }

    /// Connects. Errors keep their kind (a refusal stays `ConnectionRefused`) and say which
    /// step failed, and from which source; the caller knows the destination.
    pub(super) async fn connect(self) -> io::Result<TcpStream> {
        let socket = self.socket()?;
        let connected = TcpSocket::from_std_stream(socket.into())
            .connect(self.to)
            .await;
        match self.from {
            Some(_) => connected.map_err(|e| self.context("connecting", &e)),
            // As plain as before sources existed: `cannot connect to ADDR: <why>`.
            None => connected,
        }
    }

    fn socket(&self) -> io::Result<Socket> {
        let domain = Domain::for_address(self.to);
        let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))
            .map_err(|e| self.context("creating a socket", &e))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| self.context("making the socket non-blocking", &e))?;
        if let Some(size) = self.recv_buffer {
            // Before connect: the window the handshake offers is sized from it.
            socket
                .set_recv_buffer_size(size)
                .map_err(|e| self.context("setting SO_RCVBUF", &e))?;
        }
        if let Some(ip) = self.from {
            bind_address_no_port(&socket).map_err(|e| self.context("binding", &e))?;
            socket
                .bind(&SocketAddr::new(ip, 0).into())
                .map_err(|e| self.context("binding", &e))?;
        }
        Ok(socket)
    }

    /// `e`, with what was being done, and from which source.
    fn context(&self, doing: &str, e: &io::Error) -> io::Error {
        let from = self
            .from
            .map_or_else(String::new, |ip| format!(" from {ip}"));
        io::Error::new(e.kind(), format!("{doing}{from}: {e}"))
    }
}

/// `IP_BIND_ADDRESS_NO_PORT`: the bind takes the address only, and the port is picked at
/// connect time for that destination. Without it each bind would hold a port of its own,
/// and churning connections would run out of them while the old ones sit in TIME_WAIT.
fn bind_address_no_port(socket: &Socket) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: the descriptor is the open socket `socket` borrows; `on` is a live c_int and
    // the length passed is its size, which is what IP_BIND_ADDRESS_NO_PORT reads.
    let done = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match done {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake_shard::refusing_port;
    use super::*;
    use socket2::SockRef;
    use tokio::net::TcpListener;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    }

    #[test]
    fn a_connection_sends_from_its_source_with_the_buffer_asked() {
        runtime().block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("a listener");
            let to = listener.local_addr().expect("its address");
            let small = Dial {
                to,
                from: Some("127.0.0.3".parse().expect("an IP")),
                recv_buffer: Some(4096),
            };
            let stream = small.connect().await.expect("connected");
            let (_, peer) = listener.accept().await.expect("accepted");
            assert_eq!(peer.ip().to_string(), "127.0.0.3");
            let small_buffer = SockRef::from(&stream)
                .recv_buffer_size()
                .expect("SO_RCVBUF");
            // Linux doubles the value asked; the default is tcp_rmem's (128 KiB here).
            assert!(small_buffer <= 16 * 1024, "{small_buffer}");
            let plain = Dial::new(to).connect().await.expect("connected");
            let default = SockRef::from(&plain).recv_buffer_size().expect("SO_RCVBUF");
            assert!(default > small_buffer, "{default} vs {small_buffer}");
        });
    }

    #[test]
    fn a_refusal_keeps_its_kind_and_names_the_source() {
        runtime().block_on(async {
            let (_held, to) = refusing_port();
            let dial = Dial {
                from: Some("127.0.0.2".parse().expect("an IP")),
                ..Dial::new(to)
            };
            let refused = dial.connect().await.expect_err("nobody listens");
            assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
            let shown = refused.to_string();
            assert!(shown.starts_with("connecting from 127.0.0.2: "), "{shown}");
        });
    }
}
