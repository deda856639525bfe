//! Admission: how many connections one host may hold open.
//!
//! A host is a source address — an IPv4 address, or an IPv6 /64 (one subscriber usually gets
//! a whole /64, so counting single IPv6 addresses would let one machine open millions). An
//! IPv4 address mapped into IPv6 (`::ffff:a.b.c.d`, what a dual-stack listener reports) counts
//! as that IPv4 address.
//!
//! Owns the per-host counts. Must never refuse by itself: the server asks, refuses, and tells
//! it when a connection closes.

use std::collections::HashMap;
use std::net::IpAddr;

/// Who a connection counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Host {
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 address.
    V6Net(u64),
}

impl Host {
    pub(super) fn of(ip: IpAddr) -> Host {
        match ip {
            IpAddr::V4(v4) => Host::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Host::V4(v4.octets()),
                None => Host::V6Net((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// Open connections per host.
#[derive(Debug, Default)]
pub(super) struct PerHost {
    open: HashMap<Host, u32>,
}

impl PerHost {
    /// Counts a new connection from `host` unless it holds `max` already; false then.
    pub(super) fn admit(&mut self, host: Host, max: usize) -> bool {
        let open = self.open.entry(host).or_default();
        if *open as usize >= max {
            return false;
        }
        *open += 1;
        true
    }

    /// A connection from `host` closed.
    pub(super) fn release(&mut self, host: Host) {
        if let Some(open) = self.open.get_mut(&host) {
            *open -= 1;
            if *open == 0 {
                self.open.remove(&host);
            }
        }
    }

    /// Hosts with a connection open.
    pub(super) fn hosts(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Host::of(a), Host::of(b));
        assert_ne!(Host::of(a), Host::of(c));
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(Host::of(mapped), Host::of("10.1.2.3".parse().unwrap()));
    }

    #[test]
    fn a_host_is_capped_and_released() {
        let mut per_host = PerHost::default();
        let host = Host::of("127.0.0.2".parse().unwrap());
        let other = Host::of("127.0.0.3".parse().unwrap());
        assert!(per_host.admit(host, 2));
        assert!(per_host.admit(host, 2));
        assert!(!per_host.admit(host, 2), "the third is refused");
        assert!(per_host.admit(other, 2), "another host is not affected");
        per_host.release(host);
        assert!(per_host.admit(host, 2));
        per_host.release(host);
        per_host.release(host);
        per_host.release(other);
        assert_eq!(per_host.hosts(), 0, "no entry stays behind");
    }
}
