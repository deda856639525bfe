//! Listening sockets, built with socket2 so the options a game server needs are set before
//! `listen`: address reuse (a restarted shard binds at once, without waiting out TIME_WAIT),
//! a deep backlog (a login rush after a restart), and the kernel buffer sizes.
//!
//! Owns binding only. `TCP_NODELAY` is set here, on the listening socket: Linux copies it to
//! every accepted socket, so no connection costs a `setsockopt` (and a refused one costs
//! nothing but its accept and close).

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};

/// Pending connections the kernel queues before the shard accepts them.
pub(crate) const BACKLOG: i32 = 1024;

/// A bound, listening, non-blocking socket on `addr`, ready to hand to a backend. The error
/// names the address.
pub(crate) fn bind(addr: SocketAddr, send_buffer_size: u32) -> io::Result<std::net::TcpListener> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"));
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(named)?;
    socket.set_reuse_address(true).map_err(named)?;
    if addr.is_ipv6() {
        // `[::]` then means IPv6 only; list `0.0.0.0` too for both families.
        socket.set_only_v6(true).map_err(named)?;
    }
    // Accepted sockets inherit these from the listener (a test below checks that of TCP_NODELAY).
    socket.set_tcp_nodelay(true).map_err(named)?;
    socket
        .set_send_buffer_size(send_buffer_size as usize)
        .map_err(named)?;
    socket.set_nonblocking(true).map_err(named)?;
    socket.bind(&addr.into()).map_err(named)?;
    socket.listen(BACKLOG).map_err(named)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn accepted_sockets_inherit_tcp_nodelay_from_the_listener() {
        let listener = super::bind("127.0.0.1:0".parse().unwrap(), 64 * 1024).unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        listener.set_nonblocking(false).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(
            accepted.nodelay().unwrap(),
            "the kernel did not copy TCP_NODELAY: set it per connection again"
        );
    }
}
