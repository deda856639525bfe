//! Listening sockets, built with socket2 so the options a game server needs are set before
//! `listen`: address reuse (a restarted shard binds at once, without waiting out TIME_WAIT),
//! a deep backlog (a login rush after a restart), and the kernel buffer sizes.
//!
//! Owns binding only; accepted sockets get `TCP_NODELAY` from their backend.

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
    // Accepted sockets inherit these from the listener.
    socket.set_tcp_nodelay(true).map_err(named)?;
    socket
        .set_send_buffer_size(send_buffer_size as usize)
        .map_err(named)?;
    socket.set_nonblocking(true).map_err(named)?;
    socket.bind(&addr.into()).map_err(named)?;
    socket.listen(BACKLOG).map_err(named)?;
    Ok(socket.into())
}
