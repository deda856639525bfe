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
mod limits;
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
pub use limits::Limits;
#[cfg(test)]
pub(crate) use listener::bind;
pub use rate::Rate;
pub use reason::Disconnect;
pub(crate) use server::bind_all;
#[cfg(any(test, doc, feature = "testkit"))]
pub(crate) use server::read_path;
pub use server::{FLUSH_BUDGET, FLUSH_PER_ITERATION, Net, NetStats};
pub use session::Sessions;
pub(crate) use session::{GroupId, Prepared};
pub use shared::{Piece, SharedFrames};

/// Whom a connection from an address counts against, as the game port's admission counts:
/// its host (an IPv4 address, or an IPv6 /64; an IPv4 address carried in IPv6 — mapped, 6to4,
/// Teredo, NAT64 — counts as itself) and its prefix (the IPv6 prefix of `ipv6_prefix` bits;
/// the IPv4 /`ipv4_prefix` while `max_per_ipv4_prefix` is on). Opaque, so that another
/// listener (the metrics endpoint) groups its connections by the same rules as the game port
/// without copying them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct HostKey {
    host: admission::Host,
    prefix: Option<admission::Prefix>,
}

impl HostKey {
    /// Whether `other` is the same host.
    pub(crate) fn same_host(&self, other: &HostKey) -> bool {
        self.host == other.host
    }

    /// Whether `other` counts against the same prefix (never, if this one has none).
    pub(crate) fn same_prefix(&self, other: &HostKey) -> bool {
        self.prefix.is_some() && self.prefix == other.prefix
    }
}

/// The game port's grouping rules ([`HostKey`]) under `limits`, for another listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostKeys(admission::KeyRules);

impl HostKeys {
    /// The rules `limits` configure (`ipv6_prefix`, `ipv4_prefix`, `max_per_ipv4_prefix`).
    pub(crate) fn new(limits: &Limits) -> HostKeys {
        HostKeys(admission::KeyRules::new(limits))
    }

    /// The key a connection from `ip` counts against.
    #[must_use]
    pub(crate) fn of(&self, ip: std::net::IpAddr) -> HostKey {
        let keys = self.0.keys(ip);
        HostKey {
            host: keys.host,
            prefix: keys.prefix,
        }
    }
}
