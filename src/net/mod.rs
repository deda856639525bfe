//! Networking: players' TCP connections, handled inline on the loop thread.
//!
//! A [`Net`] server owns the listeners (`listener.rs`, built with socket2) and the open
//! connections ([`Sessions`]); a [`Backend`] moves the bytes — tokio's epoll reactor, or
//! io_uring where compiled in and allowed. Packets are framed as described in
//! `docs/protocol.md` ([`frame`]) and handed to the handlers game code registered
//! ([`Net::handle`]) in the loop's Network phase; what they send goes out in the Flush phase.
//!
//! Why inline: a packet handler is game logic, and game logic runs on one thread in one
//! order. Handing packets to other tasks would put tokio's scheduler in charge of that order.
//!
//! Networking must never read the configuration: it takes plain settings ([`Limits`],
//! [`BackendKind`]), which the config builds from `[network]`.

mod admission;
pub(crate) mod backend;
mod ban_filter;
mod churn;
mod conn_id;
mod epoll;
pub mod frame;
mod handlers;
mod kind;
mod listener;
pub(crate) mod rate;
pub(crate) mod reason;
mod server;
mod session;
mod shared;
mod throttle;
#[cfg(all(target_os = "linux", feature = "io-uring"))]
pub(crate) mod uring;

pub use backend::Backend;
pub(crate) use churn::log_at;
pub use churn::{Churn, ONE_BY_ONE};
pub use conn_id::ConnId;
pub use handlers::{Access, BadPacket};
pub use kind::{BackendKind, IoUringUnavailable, io_uring_available};
// The io_uring backend's tests bind their listeners through it.
#[cfg(test)]
pub(crate) use listener::bind;
pub use rate::Rate;
pub(crate) use server::bind_all;
pub use server::{Limits, Net, NetStats};
pub use session::{Disconnect, Sessions};
pub use shared::{Piece, SharedFrames};

/// Whom a connection from an address counts against for `network.max_per_ip` — its host: an
/// IPv4 address, or an IPv6 /64 (an IPv4 address carried in IPv6 — mapped, 6to4, Teredo,
/// NAT64 — counts as itself: `admission::Host::of`) — as an opaque key, so that another
/// listener (the metrics endpoint) groups its connections by the same notion of a host as the
/// game port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct HostKey(admission::Host);

/// The host a connection from `ip` counts against ([`HostKey`]).
#[must_use]
pub(crate) fn host_key(ip: std::net::IpAddr) -> HostKey {
    HostKey(admission::Host::of(ip))
}
