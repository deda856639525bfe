//! The limits a network server enforces: plain settings, built by the shard from `[network]`
//! and read by the server, its admission screen and its sessions.
//!
//! A file of its own so that every part of the network reads the same settings without
//! importing the server that applies them.

use std::time::Duration;

use super::rate::Rate;

/// The limits a server enforces. The shard builds them from `[network]` (the config's
/// `From<&NetworkConfig>`); tests and benches write them out, or start from
/// [`Limits::default`] (the shard's defaults).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once. Past it, a new connection makes room by closing the oldest
    /// one that has not logged in; when every one has, the new one is closed at once.
    pub max_connections: usize,
    /// Connections one host (an IPv4 address, an IPv6 /64; 6to4, Teredo and IPv4-mapped
    /// addresses count as their IPv4 address) may hold open at once.
    pub max_per_ip: usize,
    /// Connections one IPv6 prefix of [`Limits::ipv6_prefix`] bits may hold open at once, all
    /// its /64s together.
    pub max_per_ipv6_prefix: usize,
    /// The length, in bits, of the IPv6 prefix counted by `max_per_ipv6_prefix` and given one
    /// connect rate (32 ..= 64; /56 is what a home line usually gets).
    pub ipv6_prefix: u8,
    /// Connections one IPv4 prefix of [`Limits::ipv4_prefix`] bits may hold open at once;
    /// `None`: no such cap.
    pub max_per_ipv4_prefix: Option<usize>,
    /// The length, in bits, of the IPv4 prefix counted by `max_per_ipv4_prefix` (8 ..= 32).
    pub ipv4_prefix: u8,
    /// Connections that have not logged in yet that may be open at once (at least 1). Past
    /// it, a new connection makes room by closing the oldest of them, so connections that
    /// never log in can never hold the slots players need.
    pub max_prelogin: usize,
    /// How fast one source (an IPv4 address, an IPv6 prefix of `ipv6_prefix` bits) may
    /// connect; a connect beyond it is closed at once. `None`: as fast as it likes.
    pub connect_rate: Option<Rate>,
    /// How long a source that keeps connecting far beyond `connect_rate` (more than a whole
    /// burst of refused connects owed) is refused on sight: each listener's kernel filter
    /// drops its connects unanswered (up to 256 sources per address family; the rest are
    /// closed at accept). Zero: never banned, only refused.
    pub connect_ban: Duration,
    /// Largest packet accepted from a client, bytes, header included (3 ..= 65535); a
    /// larger length field disconnects the sender.
    pub max_packet: usize,
    /// Unsent output one connection may hold, bytes; past it the connection is disconnected
    /// at once (it is not reading).
    pub send_buffer_size: usize,
    /// Unsent output a connection may keep for at most `send_soft_timeout`, bytes (Redis's
    /// soft `client-output-buffer-limit`): one whose output stays above it for longer is
    /// disconnected, so a reader that keeps just under `send_buffer_size` is not kept
    /// forever. 0: no soft limit.
    pub send_soft_limit: usize,
    /// How long a connection's unsent output may stay above `send_soft_limit` (checked once a
    /// second).
    pub send_soft_timeout: Duration,
    /// The kernel send buffer asked for each client socket, bytes (`SO_SNDBUF`, set on the
    /// listeners and inherited by what they accept; Linux doubles the request, capped by
    /// `net.core.wmem_max`). What the kernel grants is counted in the outbound budget for
    /// every socket left full.
    pub socket_send_buffer: usize,
    /// Output across all connections, bytes — unsent, plus the kernel send buffer (and the
    /// backend's own output buffer) of every socket left full: past it, the connection holding
    /// the most is disconnected, so slow readers cannot grow the process without bound.
    pub outbound_budget: usize,
    /// A connection that completes no packet for this long (after login) is closed. Zero:
    /// never.
    pub idle_timeout: Duration,
    /// A connection must log in within this long of connecting, whatever it sends meanwhile.
    /// Zero: no deadline.
    pub login_timeout: Duration,
    /// How fast a connection may ping; `None`: as fast as it likes (benchmarks).
    pub ping_rate: Option<Rate>,
}

impl Default for Limits {
    /// The shard's defaults (`config/shard.toml`).
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            max_per_ip: 16,
            max_per_ipv6_prefix: 32,
            ipv6_prefix: 56,
            max_per_ipv4_prefix: None,
            ipv4_prefix: 24,
            max_prelogin: 256,
            connect_rate: Some(Rate {
                per_sec: 4,
                burst: 16,
            }),
            connect_ban: Duration::from_secs(60),
            max_packet: 8192,
            send_buffer_size: 256 * 1024,
            send_soft_limit: 64 * 1024,
            send_soft_timeout: Duration::from_secs(10),
            socket_send_buffer: 64 * 1024,
            outbound_budget: 64 << 20,
            idle_timeout: Duration::from_secs(120),
            login_timeout: Duration::from_secs(30),
            ping_rate: Some(Rate {
                per_sec: 4,
                burst: 16,
            }),
        }
    }
}
