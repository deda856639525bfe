//! Where `loadgen` may send traffic: the server it loads (`--connect`) and the local addresses
//! it sends from (`--sources`, `--source-range`), which all lie on loopback.
//!
//! This module owns the loopback-only rule, the two source flags' values and the round robin
//! over them. It must never let an address outside 127.0.0.0/8 or `::1` through: `loadgen`
//! includes an attack client, and it is only ever pointed at a shard on this machine. Every
//! address is checked before the first socket exists.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use super::LoadgenError;

/// What the rule allows, as the error messages say it.
pub(super) const ALLOWED: &str = "127.0.0.0/8 or ::1";

/// `--source-range FIRST-LAST`: every IPv4 address from `first` to `last`, both included.
/// (IPv6 has one loopback address, so a range is IPv4 only.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceRange {
    first: Ipv4Addr,
    last: Ipv4Addr,
}

impl SourceRange {
    /// Parses `FIRST-LAST` (clap's value parser). The rule itself is checked later, with the
    /// other addresses, so that every refusal reads the same.
    pub fn parse(text: &str) -> Result<SourceRange, String> {
        let (first, last) = text
            .split_once('-')
            .ok_or_else(|| format!("{text:?} is not FIRST-LAST, e.g. 127.0.0.2-127.0.0.9"))?;
        let ip = |part: &str| {
            part.trim()
                .parse::<Ipv4Addr>()
                .map_err(|e| format!("{part:?} in {text:?}: {e} (the range is IPv4 only)"))
        };
        let (first, last) = (ip(first)?, ip(last)?);
        if first > last {
            return Err(format!("{text:?} ends before it starts"));
        }
        Ok(SourceRange { first, last })
    }
}

impl fmt::Display for SourceRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// The local addresses connections are sent from, taken in turn. Cheap to clone: one per
/// churning client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sources {
    /// No flag: the kernel picks the address (127.0.0.1 towards a 127.0.0.1 server).
    Any,
    List(Arc<[IpAddr]>),
    Range(SourceRange),
}

impl Sources {
    /// The sources the flags name: `--sources` if given, else `--source-range`, else any.
    pub(super) fn from_flags(list: &[IpAddr], range: Option<SourceRange>) -> Sources {
        match (list, range) {
            ([], None) => Sources::Any,
            ([], Some(range)) => Sources::Range(range),
            (list, _) => Sources::List(list.into()),
        }
    }

    /// The source of connection `n` (counting every connection of the run), round robin;
    /// `None` lets the kernel pick.
    pub(super) fn nth(&self, n: u64) -> Option<IpAddr> {
        match self {
            Sources::Any => None,
            Sources::List(list) => Some(list[(n % list.len() as u64) as usize]),
            Sources::Range(SourceRange { first, last }) => {
                let (first, last) = (u32::from(*first), u32::from(*last));
                let count = u64::from(last - first) + 1;
                Some(Ipv4Addr::from(first + (n % count) as u32).into())
            }
        }
    }

    /// The addresses the rule must see: for a range its two ends, since 127.0.0.0/8 is one
    /// block and holds everything between two of its addresses.
    fn to_check(&self) -> Vec<IpAddr> {
        match self {
            Sources::Any => Vec::new(),
            Sources::List(list) => list.to_vec(),
            Sources::Range(range) => vec![range.first.into(), range.last.into()],
        }
    }
}

impl fmt::Display for Sources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sources::Any => f.write_str("any local address"),
            Sources::Range(range) => write!(f, "{range}"),
            Sources::List(list) => {
                for (i, ip) in list.iter().enumerate() {
                    let comma = if i == 0 { "" } else { ", " };
                    write!(f, "{comma}{ip}")?;
                }
                Ok(())
            }
        }
    }
}

/// Refuses a run that would send to, or from, anything but loopback, or mix the families
/// (a socket sends from an address of its destination's family).
pub(super) fn check(connect: SocketAddr, sources: &Sources) -> Result<(), LoadgenError> {
    if !connect.ip().is_loopback() {
        return Err(LoadgenError::NotLoopback {
            flag: "--connect",
            addr: connect.ip(),
        });
    }
    for ip in sources.to_check() {
        if !ip.is_loopback() {
            return Err(LoadgenError::NotLoopback {
                flag: "--sources/--source-range",
                addr: ip,
            });
        }
        if ip.is_ipv4() != connect.is_ipv4() {
            return Err(LoadgenError::SourceFamily {
                source: ip,
                connect,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("a socket address")
    }

    fn list(ips: &[&str]) -> Sources {
        let ips: Vec<IpAddr> = ips.iter().map(|ip| ip.parse().expect("an IP")).collect();
        Sources::from_flags(&ips, None)
    }

    #[test]
    fn only_loopback_targets_and_sources_pass() {
        assert!(check(addr("127.0.0.1:2593"), &Sources::Any).is_ok());
        assert!(check(addr("127.255.0.9:2593"), &list(&["127.0.0.2", "127.1.2.3"])).is_ok());
        assert!(check(addr("[::1]:2593"), &list(&["::1"])).is_ok());
        for target in [
            "10.0.0.1:2593",
            "0.0.0.0:2593",
            "[::]:2593",
            "[::ffff:7f00:1]:2593",
        ] {
            let refused = check(addr(target), &Sources::Any);
            assert!(
                matches!(
                    refused,
                    Err(LoadgenError::NotLoopback {
                        flag: "--connect",
                        ..
                    })
                ),
                "{target}: {refused:?}"
            );
        }
        let outside = check(addr("127.0.0.1:2593"), &list(&["127.0.0.2", "192.168.1.5"]));
        assert!(
            matches!(outside, Err(LoadgenError::NotLoopback { addr, .. }) if addr.to_string() == "192.168.1.5"),
            "{outside:?}"
        );
    }

    #[test]
    fn a_range_must_lie_inside_loopback_and_match_the_family() {
        let range = |text| Sources::Range(SourceRange::parse(text).expect("a range"));
        let to = addr("127.0.0.1:2593");
        assert!(check(to, &range("127.0.0.2-127.0.0.9")).is_ok());
        assert!(check(to, &range("126.255.255.255-127.0.0.1")).is_err());
        assert!(check(to, &range("127.255.255.255-128.0.0.0")).is_err());
        let mixed = check(addr("[::1]:2593"), &range("127.0.0.2-127.0.0.3"));
        assert!(
            matches!(mixed, Err(LoadgenError::SourceFamily { .. })),
            "{mixed:?}"
        );
    }

    #[test]
    fn sources_are_taken_round_robin() {
        let range = Sources::Range(SourceRange::parse("127.0.0.2-127.0.0.4").expect("a range"));
        let picked: Vec<String> = (0..5)
            .map(|n| range.nth(n).expect("a source").to_string())
            .collect();
        assert_eq!(
            picked,
            [
                "127.0.0.2",
                "127.0.0.3",
                "127.0.0.4",
                "127.0.0.2",
                "127.0.0.3"
            ]
        );
        let two = list(&["127.0.0.3", "127.0.0.2"]);
        assert_eq!(
            two.nth(4).map(|ip| ip.to_string()).as_deref(),
            Some("127.0.0.3")
        );
        assert_eq!(two.to_string(), "127.0.0.3, 127.0.0.2");
        assert_eq!(Sources::Any.nth(7), None);
    }

    #[test]
    fn a_range_is_first_dash_last_in_order() {
        let parsed = SourceRange::parse("127.0.0.2-127.0.0.9").expect("a range");
        assert_eq!(parsed.to_string(), "127.0.0.2-127.0.0.9");
        for bad in ["127.0.0.2", "127.0.0.9-127.0.0.2", "::1-::2", "127.0.0.2-x"] {
            assert!(SourceRange::parse(bad).is_err(), "{bad} accepted");
        }
    }
}
