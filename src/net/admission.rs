//! Admission: who may connect, how fast, and how many connections each may hold open.
//!
//! Every connection is decided on its source address alone, right after `accept4` and before
//! any per-connection work: nothing is registered, set or allocated for a connection this
//! module refuses, and a refusal is a [`Refusal`] (static text), never a formatted string.
//!
//! **Whom a connection counts against.** A *host* is an IPv4 address or an IPv6 /64 (one
//! subscriber usually gets a whole /64, so counting single IPv6 addresses would let one machine
//! open millions). An IPv6 address that only carries an IPv4 address counts as that IPv4
//! address ([`embedded_ipv4`]): IPv4-mapped (`::ffff:a.b.c.d`, what a dual-stack listener
//! reports), 6to4 (`2002:aabb:ccdd::/48`, where one IPv4 address owns 2^80 addresses),
//! Teredo (`2001:0::/32`, the client's address in the last 32 bits, inverted) and the NAT64
//! well-known prefix (`64:ff9b::/96`). Native IPv6 hosts also count against their *prefix*
//! (`ipv6_prefix` bits, /56 by default: what a home line is given), and IPv4 hosts against
//! their /`ipv4_prefix` (/24) when that cap is on.
//!
//! **Connect rate.** Each IPv4 address and each IPv6 prefix has a token bucket
//! ([`Bucket`], the policy of [`Rate`]): a connect beyond it is refused, and one that keeps
//! coming at well over it (more than a whole burst of refused connects owed) bans the source for
//! `connect_ban`, during which every connect from it is refused on sight. The table of buckets
//! is bounded ([`MAX_TRACKED`]); past it a new source is let through untracked (counted), so a
//! distributed flood wider than that meets the caps below but not the rate: a firewall's job.
//!
//! **Caps.** `max_per_ip` per host, `max_per_ipv6_prefix` per IPv6 prefix,
//! `max_per_ipv4_prefix` per IPv4 prefix (off by default), `max_connections` in all and
//! `max_prelogin` for connections that have not logged in. At either of the last two, a new
//! connection makes room by evicting the oldest connection that has not logged in
//! ([`Screened::Evict`]): a real player logs in within milliseconds of connecting, so it is
//! never the oldest, and lurkers can never hold the slots players need. Only when every open
//! connection has logged in is a new one refused over `max_connections`.
//!
//! Owns the per-host and per-prefix counts, the connect-rate table and its bans. Must never
//! refuse by itself, touch a socket or allocate per refused connection: the server asks,
//! refuses, and tells it when a connection opens and closes.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use tokio::time::Instant;

use super::limits::Limits;
use super::rate::{Bucket, Rate, Verdict};

/// Sources the connect-rate table tracks at most (about 64 bytes each: 4 MiB at most). A new
/// source past it is admitted untracked and counted ([`Admission::untracked`]).
const MAX_TRACKED: usize = 1 << 16;

/// How often the connect-rate table forgets the sources whose bucket has refilled.
const PURGE_EVERY: Duration = Duration::from_secs(10);

/// Who a connection counts against for `max_per_ip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Host {
    /// An IPv4 address (or one carried in an IPv6 address).
    V4(u32),
    /// The first 64 bits of a native IPv6 address.
    V6Net(u64),
}

impl Host {
    pub(crate) fn of(ip: IpAddr) -> Host {
        match ip {
            IpAddr::V4(v4) => Host::V4(v4.to_bits()),
            IpAddr::V6(v6) => match embedded_ipv4(v6) {
                Some(v4) => Host::V4(v4.to_bits()),
                None => Host::V6Net((v6.to_bits() >> 64) as u64),
            },
        }
    }
}

/// The IPv4 address an IPv6 address only carries, if it is such an address: IPv4-mapped
/// (`::ffff:a.b.c.d`), 6to4 (`2002:aabb:ccdd::/48`: the address in bits 16–47), Teredo
/// (`2001:0::/32`: the client's address in the last 32 bits, inverted) or the NAT64
/// well-known prefix (`64:ff9b::/96`: the last 32 bits).
#[must_use]
pub(crate) fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let bits = v6.to_bits();
    let segments = v6.segments();
    match segments {
        [0x2002, ..] => Some(Ipv4Addr::from_bits((bits >> 80) as u32)),
        [0x2001, 0, ..] => Some(Ipv4Addr::from_bits(!(bits as u32))),
        [0x0064, 0xff9b, 0, 0, 0, 0, ..] => Some(Ipv4Addr::from_bits(bits as u32)),
        _ => None,
    }
}

/// A block of addresses, by its first address: an IPv4 prefix (or a whole address), or the
/// first 64 bits of an IPv6 prefix of at most 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Prefix {
    V4(u32),
    V6(u64),
}

/// What one connection counts against: its host, the prefix it is capped by (if any) and the
/// source its connect rate is kept for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keys {
    pub host: Host,
    /// Its IPv6 prefix, or its IPv4 prefix while that cap is on.
    pub prefix: Option<Prefix>,
    /// An IPv4 address, or an IPv6 prefix.
    pub rate: Prefix,
}

impl Keys {
    /// `ip`'s keys under the default prefixes, for a connection no server admitted (the test
    /// kit's connections with no socket).
    #[cfg(any(test, doc, feature = "testkit"))]
    #[must_use]
    pub(crate) fn of(ip: IpAddr) -> Keys {
        Admission::new(&Limits::default()).keys(ip)
    }
}

/// How addresses are grouped: the IPv6 prefix every native IPv6 host counts against, and the
/// IPv4 prefix, while its cap is on. The game port's admission and the metrics endpoint's
/// eviction both take their keys from here (`net::host_keys`), so the two agree on who is
/// one host and one prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyRules {
    /// The first `ipv6_prefix` bits of a /64, as a mask.
    ipv6_mask: u64,
    /// The first `ipv4_prefix` bits of an address, as a mask, while `max_per_ipv4_prefix` is
    /// set; `None`: IPv4 addresses count against no prefix.
    ipv4_mask: Option<u32>,
}

impl KeyRules {
    /// The rules `limits` configure.
    pub(crate) fn new(limits: &Limits) -> KeyRules {
        let v6 = u32::from(limits.ipv6_prefix.clamp(1, 64));
        let v4 = u32::from(limits.ipv4_prefix.clamp(1, 32));
        KeyRules {
            ipv6_mask: u64::MAX << (64 - v6),
            ipv4_mask: limits.max_per_ipv4_prefix.map(|_| u32::MAX << (32 - v4)),
        }
    }

    /// What `ip`'s connections count against.
    #[must_use]
    pub(crate) fn keys(&self, ip: IpAddr) -> Keys {
        let host = Host::of(ip);
        match host {
            Host::V4(address) => Keys {
                host,
                prefix: self.ipv4_mask.map(|mask| Prefix::V4(address & mask)),
                rate: Prefix::V4(address),
            },
            Host::V6Net(net) => {
                let prefix = Prefix::V6(net & self.ipv6_mask);
                Keys {
                    host,
                    prefix: Some(prefix),
                    rate: prefix,
                }
            }
        }
    }
}

/// Why a connection was refused at accept. Its texts are static: refusing allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Every open connection has logged in and there are `max_connections`.
    MaxConnections,
    /// `max_prelogin` connections have not logged in and none can be evicted yet (each is
    /// closing already).
    MaxPrelogin,
    PerHost,
    PerIpv6Prefix,
    PerIpv4Prefix,
    /// Over the connect rate.
    ConnectRate,
    /// Far over the connect rate: this refusal starts a ban.
    Ban,
    /// Refused on sight while banned.
    Banned,
}

impl Refusal {
    /// The reason, as the log line gives it.
    #[must_use]
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::MaxConnections => {
                "too many connections, every one logged in (network.max_connections)"
            }
            Refusal::MaxPrelogin => {
                "too many connections not logged in, all of them closing already \
                 (network.max_prelogin)"
            }
            Refusal::PerHost => "too many connections from one host (network.max_per_ip)",
            Refusal::PerIpv6Prefix => {
                "too many connections from one IPv6 prefix (network.max_per_ipv6_prefix)"
            }
            Refusal::PerIpv4Prefix => {
                "too many connections from one IPv4 prefix (network.max_per_ipv4_prefix)"
            }
            Refusal::ConnectRate => "connecting too fast (network.connect_rate)",
            Refusal::Ban => {
                "connecting far too fast: banned for network.connect_ban (network.connect_rate)"
            }
            Refusal::Banned => "banned for connecting too fast (network.connect_ban)",
        }
    }

    /// What the churn summary counts it as.
    #[must_use]
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Refusal::MaxConnections => "too many connections",
            Refusal::MaxPrelogin => "too many not logged in",
            Refusal::PerHost => "too many from one host",
            Refusal::PerIpv6Prefix => "too many from one IPv6 prefix",
            Refusal::PerIpv4Prefix => "too many from one IPv4 prefix",
            Refusal::ConnectRate => "connecting too fast",
            Refusal::Ban => "banned now",
            Refusal::Banned => "banned",
        }
    }
}

/// The decision about one new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Screened {
    Admit(Keys),
    /// Admit it once the oldest connection that has not logged in is closed to make room.
    Evict(Keys),
    Refuse(Refusal),
}

/// The admission state of one server.
#[derive(Debug)]
pub(crate) struct Admission {
    max_connections: usize,
    max_per_ip: usize,
    max_per_ipv6_prefix: usize,
    max_per_ipv4_prefix: Option<usize>,
    rules: KeyRules,
    max_prelogin: usize,
    per_host: HashMap<Host, u32>,
    per_prefix: HashMap<Prefix, u32>,
    rates: ConnectRates,
}

impl Admission {
    pub(crate) fn new(limits: &Limits) -> Admission {
        Admission {
            max_connections: limits.max_connections,
            max_per_ip: limits.max_per_ip,
            max_per_ipv6_prefix: limits.max_per_ipv6_prefix,
            max_per_ipv4_prefix: limits.max_per_ipv4_prefix,
            rules: KeyRules::new(limits),
            max_prelogin: limits.max_prelogin.max(1),
            per_host: HashMap::new(),
            per_prefix: HashMap::new(),
            rates: ConnectRates::new(limits.connect_rate, limits.connect_ban),
        }
    }

    /// What `ip`'s connections count against.
    #[must_use]
    pub(crate) fn keys(&self, ip: IpAddr) -> Keys {
        self.rules.keys(ip)
    }

    /// Decides about a new connection from `ip` at `now`, with `open` connections open of
    /// which `prelogin` have not logged in. Takes a connect token; counts nothing else (an
    /// admitted connection is counted by [`Admission::admit`]).
    pub(crate) fn screen(
        &mut self,
        ip: IpAddr,
        now: Instant,
        open: usize,
        prelogin: usize,
    ) -> Screened {
        let keys = self.keys(ip);
        if let Err(refusal) = self.rates.check(keys.rate, now) {
            return Screened::Refuse(refusal);
        }
        if count(&self.per_host, &keys.host) >= self.max_per_ip {
            return Screened::Refuse(Refusal::PerHost);
        }
        if let Some(prefix) = keys.prefix {
            let (cap, refusal) = match prefix {
                Prefix::V6(_) => (self.max_per_ipv6_prefix, Refusal::PerIpv6Prefix),
                Prefix::V4(_) => (
                    self.max_per_ipv4_prefix.unwrap_or(usize::MAX),
                    Refusal::PerIpv4Prefix,
                ),
            };
            if count(&self.per_prefix, &prefix) >= cap {
                return Screened::Refuse(refusal);
            }
        }
        if open < self.max_connections && prelogin < self.max_prelogin {
            Screened::Admit(keys)
        } else if prelogin > 0 {
            Screened::Evict(keys)
        } else {
            Screened::Refuse(Refusal::MaxConnections)
        }
    }

    /// Counts an admitted connection.
    pub(crate) fn admit(&mut self, keys: Keys) {
        *self.per_host.entry(keys.host).or_default() += 1;
        if let Some(prefix) = keys.prefix {
            *self.per_prefix.entry(prefix).or_default() += 1;
        }
    }

    /// A connection counted by [`Admission::admit`] closed.
    pub(crate) fn release(&mut self, keys: Keys) {
        uncount(&mut self.per_host, &keys.host);
        if let Some(prefix) = keys.prefix {
            uncount(&mut self.per_prefix, &prefix);
        }
    }

    /// Hosts with a connection open.
    #[must_use]
    pub(crate) fn hosts(&self) -> usize {
        self.per_host.len()
    }

    /// Sources banned at `now`.
    #[must_use]
    pub(crate) fn banned(&self, now: Instant) -> usize {
        self.rates.banned(now)
    }

    /// Connects let through without a rate because the table was full.
    #[must_use]
    pub(crate) fn untracked(&self) -> u64 {
        self.rates.untracked
    }

    /// The sources banned at `now`, the newest ban first.
    pub(crate) fn banned_sources(&self, now: Instant) -> impl Iterator<Item = Prefix> + '_ {
        let ended = self.rates.ended(now);
        self.rates
            .bans
            .iter()
            .skip(ended)
            .rev()
            .map(|(_, source)| *source)
    }

    /// When the first ban still on at `now` ends.
    #[must_use]
    pub(crate) fn next_ban_end(&self, now: Instant) -> Option<Instant> {
        let ended = self.rates.ended(now);
        self.rates.bans.get(ended).map(|(end, _)| *end)
    }

    /// The IPv6 prefix as a mask over an address's first 64 bits.
    #[must_use]
    pub(crate) fn ipv6_mask(&self) -> u64 {
        self.rules.ipv6_mask
    }
}

fn count<K: std::hash::Hash + Eq>(map: &HashMap<K, u32>, key: &K) -> usize {
    map.get(key).map_or(0, |n| *n as usize)
}

fn uncount<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u32>, key: &K) {
    if let Some(open) = map.get_mut(key) {
        *open -= 1;
        if *open == 0 {
            map.remove(key);
        }
    }
}

/// The connect rate of every source seen lately, and its bans.
#[derive(Debug)]
struct ConnectRates {
    rate: Option<Rate>,
    ban: Duration,
    table: HashMap<Prefix, Standing>,
    /// Bans and when they end, in that order (all last `ban`); ended ones are dropped as
    /// they are seen.
    bans: VecDeque<(Instant, Prefix)>,
    next_purge: Option<Instant>,
    untracked: u64,
}

/// One source's connect allowance.
#[derive(Debug, Clone, Copy)]
struct Standing {
    bucket: Bucket,
    banned_until: Option<Instant>,
}

impl ConnectRates {
    fn new(rate: Option<Rate>, ban: Duration) -> ConnectRates {
        ConnectRates {
            rate,
            ban,
            table: HashMap::new(),
            bans: VecDeque::new(),
            next_purge: None,
            untracked: 0,
        }
    }

    /// Takes a connect token for `source` at `now`; the refusal when there is none.
    fn check(&mut self, source: Prefix, now: Instant) -> Result<(), Refusal> {
        let Some(rate) = self.rate else {
            return Ok(());
        };
        self.purge(rate, now);
        while self.bans.front().is_some_and(|(end, _)| *end <= now) {
            self.bans.pop_front();
        }
        if self.table.len() >= MAX_TRACKED && !self.table.contains_key(&source) {
            self.untracked += 1;
            return Ok(());
        }
        let standing = self.table.entry(source).or_insert(Standing {
            bucket: Bucket::full(rate, now),
            banned_until: None,
        });
        if let Some(until) = standing.banned_until {
            if now < until {
                return Err(Refusal::Banned);
            }
            // Served: a fresh start.
            *standing = Standing {
                bucket: Bucket::full(rate, now),
                banned_until: None,
            };
        }
        match standing.bucket.take(rate, now) {
            Verdict::Allow => Ok(()),
            Verdict::Drop => Err(Refusal::ConnectRate),
            Verdict::Abuse if self.ban.is_zero() => Err(Refusal::ConnectRate),
            Verdict::Abuse => {
                let until = now + self.ban;
                standing.banned_until = Some(until);
                self.bans.push_back((until, source));
                Err(Refusal::Ban)
            }
        }
    }

    /// Every [`PURGE_EVERY`], forgets the sources that are neither banned nor owed tokens:
    /// they would start from a full bucket anyway.
    fn purge(&mut self, rate: Rate, now: Instant) {
        if self.next_purge.is_some_and(|at| now < at) {
            return;
        }
        self.next_purge = Some(now + PURGE_EVERY);
        self.table.retain(|_, standing| {
            standing.banned_until.is_some_and(|until| now < until)
                || !standing.bucket.is_full(rate, now)
        });
    }

    fn banned(&self, now: Instant) -> usize {
        self.bans.len() - self.ended(now)
    }

    /// How many of `bans` (the oldest) have ended at `now`.
    fn ended(&self, now: Instant) -> usize {
        self.bans.partition_point(|(end, _)| *end <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn host(text: &str) -> Host {
        Host::of(ip(text))
    }

    fn limits() -> Limits {
        Limits {
            max_connections: 100,
            max_per_ip: 100,
            max_per_ipv6_prefix: 100,
            max_prelogin: 100,
            connect_rate: None,
            ..Limits::default()
        }
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() {
        let a = host("2001:db8:1:2::1");
        assert_eq!(a, host("2001:db8:1:2:ffff::9"));
        assert_ne!(a, host("2001:db8:1:3::1"));
        assert_eq!(host("::ffff:10.1.2.3"), host("10.1.2.3"));
        assert_eq!(host("10.1.2.3"), Host::V4(0x0a01_0203));
    }

    #[test]
    fn six_to_four_teredo_and_nat64_count_as_the_ipv4_address_they_carry() {
        // 6to4: 192.0.2.1 is c000:0201; every subnet and interface id behind it is that host.
        for a in [
            "2002:c000:201::1",
            "2002:c000:201:ffff::2",
            "2002:c000:201:1:2:3:4:5",
        ] {
            assert_eq!(host(a), host("192.0.2.1"), "{a}");
        }
        assert_ne!(host("2002:c000:202::1"), host("192.0.2.1"));
        // Teredo (RFC 4380's example): server 65.54.227.120, client 192.0.2.45 behind a NAT,
        // stored inverted (3fff:fdd2) in the last 32 bits.
        let teredo = "2001:0:4136:e378:8000:63bf:3fff:fdd2";
        assert_eq!(
            embedded_ipv4(teredo.parse().unwrap()),
            Some([192, 0, 2, 45].into())
        );
        assert_eq!(host(teredo), host("192.0.2.45"));
        // The same client through another Teredo server, another mapped port: one host.
        assert_eq!(
            host("2001:0:5ef5:79fd:0:1234:3fff:fdd2"),
            host("192.0.2.45")
        );
        // NAT64's well-known prefix.
        assert_eq!(host("64:ff9b::c000:22d"), host("192.0.2.45"));
        // Not Teredo: 2001:db8::/32 is a native (documentation) prefix.
        assert_eq!(embedded_ipv4("2001:db8::1".parse().unwrap()), None);
        assert_eq!(embedded_ipv4("::1".parse().unwrap()), None);
        assert!(matches!(host("2001:db8::1"), Host::V6Net(_)));
    }

    #[test]
    fn ipv6_prefixes_are_56_by_default_and_configurable() {
        let admission = Admission::new(&limits());
        let keys = |a: &str| admission.keys(ip(a));
        // One /56: 256 /64s, each its own host, one prefix.
        let (a, b) = (keys("2001:db8:0:100::1"), keys("2001:db8:0:1ff::1"));
        assert_ne!(a.host, b.host);
        assert_eq!(a.prefix, b.prefix);
        assert_eq!(a.rate, b.rate, "one connect rate per /56");
        assert_ne!(a.prefix, keys("2001:db8:0:200::1").prefix, "the next /56");
        let prefix = |bits: u8, a: &str| {
            let limits = Limits {
                ipv6_prefix: bits,
                ..limits()
            };
            Admission::new(&limits).keys(ip(a)).prefix
        };
        assert_ne!(
            prefix(64, "2001:db8:0:100::1"),
            prefix(64, "2001:db8:0:101::1")
        );
        assert_eq!(
            prefix(48, "2001:db8:0:100::1"),
            prefix(48, "2001:db8:0:ff00::1")
        );
        // IPv4 has no prefix unless its cap is on; then /24 by default.
        assert_eq!(keys("192.0.2.1").prefix, None);
        let slash24 = Admission::new(&Limits {
            max_per_ipv4_prefix: Some(4),
            ..limits()
        });
        let v4 = |a: &str| slash24.keys(ip(a));
        assert_eq!(v4("192.0.2.1").prefix, v4("192.0.2.254").prefix);
        assert_eq!(v4("192.0.2.1").prefix, v4("::ffff:192.0.2.9").prefix);
        assert_eq!(
            v4("192.0.2.1").prefix,
            v4("2002:c000:263::1").prefix,
            "6to4"
        );
        assert_ne!(v4("192.0.2.1").prefix, v4("192.0.3.1").prefix);
        assert_ne!(v4("192.0.2.1").host, v4("192.0.2.2").host);
    }

    /// Admits from `a` until refused; how many got in.
    fn fill(admission: &mut Admission, a: &str, now: Instant) -> (usize, Screened) {
        let mut n = 0;
        loop {
            match admission.screen(ip(a), now, 0, 0) {
                Screened::Admit(keys) => admission.admit(keys),
                other => return (n, other),
            }
            n += 1;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_is_capped_and_released() {
        let mut admission = Admission::new(&Limits {
            max_per_ip: 2,
            ..limits()
        });
        let now = Instant::now();
        let (n, refused) = fill(&mut admission, "127.0.0.2", now);
        assert_eq!((n, refused), (2, Screened::Refuse(Refusal::PerHost)));
        let other = admission.keys(ip("127.0.0.3"));
        assert_eq!(
            admission.screen(ip("127.0.0.3"), now, 2, 0),
            Screened::Admit(other),
            "another host is not affected"
        );
        let host = admission.keys(ip("127.0.0.2"));
        admission.release(host);
        assert_eq!(
            admission.screen(ip("127.0.0.2"), now, 1, 0),
            Screened::Admit(host)
        );
        admission.release(host);
        assert_eq!(admission.hosts(), 0, "no entry stays behind");
    }

    #[tokio::test(start_paused = true)]
    async fn one_ipv6_prefix_is_capped_across_its_64s_and_the_next_prefix_is_not() {
        let mut admission = Admission::new(&Limits {
            max_per_ip: 2,
            max_per_ipv6_prefix: 5,
            ..limits()
        });
        let now = Instant::now();
        let mut admitted = 0;
        // Three /64s of one /56, two connections each: the /56 holds five.
        for net in [
            "2001:db8:0:100::1",
            "2001:db8:0:101::1",
            "2001:db8:0:1ff::1",
        ] {
            let (n, _) = fill(&mut admission, net, now);
            admitted += n;
        }
        assert_eq!(admitted, 5);
        assert_eq!(
            admission.screen(ip("2001:db8:0:1ab::1"), now, 5, 0),
            Screened::Refuse(Refusal::PerIpv6Prefix)
        );
        assert!(matches!(
            admission.screen(ip("2001:db8:0:200::1"), now, 5, 0),
            Screened::Admit(_)
        ));
        // The 6to4 face of an IPv4 host is capped as that host, not as a /56.
        let (n, refused) = fill(&mut admission, "2002:c000:201::1", now);
        assert_eq!((n, refused), (2, Screened::Refuse(Refusal::PerHost)));
        assert_eq!(
            admission.screen(ip("192.0.2.1"), now, 7, 0),
            Screened::Refuse(Refusal::PerHost)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_ipv4_prefix_cap_is_off_by_default_and_counts_a_24_when_on() {
        let now = Instant::now();
        let mut off = Admission::new(&Limits {
            max_per_ip: 1,
            ..limits()
        });
        for last in 1..=50 {
            assert!(matches!(
                off.screen(ip(&format!("192.0.2.{last}")), now, 0, 0),
                Screened::Admit(_)
            ));
            off.admit(off.keys(ip(&format!("192.0.2.{last}"))));
        }
        let mut on = Admission::new(&Limits {
            max_per_ip: 1,
            max_per_ipv4_prefix: Some(3),
            ..limits()
        });
        for last in 1..=3 {
            let a = ip(&format!("192.0.2.{last}"));
            assert!(matches!(on.screen(a, now, 0, 0), Screened::Admit(_)));
            on.admit(on.keys(a));
        }
        assert_eq!(
            on.screen(ip("192.0.2.200"), now, 3, 0),
            Screened::Refuse(Refusal::PerIpv4Prefix)
        );
        assert!(matches!(
            on.screen(ip("192.0.3.1"), now, 3, 0),
            Screened::Admit(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn full_or_too_many_not_logged_in_evicts_and_only_players_make_it_refuse() {
        let admission = &mut Admission::new(&Limits {
            max_connections: 10,
            max_prelogin: 4,
            ..limits()
        });
        let now = Instant::now();
        let a = ip("127.0.0.2");
        assert!(matches!(admission.screen(a, now, 3, 3), Screened::Admit(_)));
        assert!(matches!(admission.screen(a, now, 4, 4), Screened::Evict(_)));
        assert!(matches!(
            admission.screen(a, now, 10, 1),
            Screened::Evict(_)
        ));
        assert_eq!(
            admission.screen(a, now, 10, 0),
            Screened::Refuse(Refusal::MaxConnections)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_fast_source_is_refused_then_banned_then_forgiven_and_others_are_not_touched() {
        let rate = Rate {
            per_sec: 4,
            burst: 8,
        };
        let ban = Duration::from_secs(60);
        let mut admission = Admission::new(&Limits {
            connect_rate: Some(rate),
            connect_ban: ban,
            ..limits()
        });
        let mut now = Instant::now();
        let flood = ip("127.0.0.2");
        let verdicts: Vec<Screened> = (0..17)
            .map(|_| admission.screen(flood, now, 0, 0))
            .collect();
        assert!(
            verdicts[..8]
                .iter()
                .all(|v| matches!(v, Screened::Admit(_)))
        );
        assert!(
            verdicts[8..16]
                .iter()
                .all(|v| *v == Screened::Refuse(Refusal::ConnectRate))
        );
        assert_eq!(verdicts[16], Screened::Refuse(Refusal::Ban));
        assert_eq!(admission.banned(now), 1);
        let source = admission.keys(flood).rate;
        assert_eq!(admission.banned_sources(now).collect::<Vec<_>>(), [source]);
        assert_eq!(admission.next_ban_end(now), Some(now + ban));
        // Banned: refused on sight, however slowly it comes.
        now += Duration::from_secs(30);
        assert_eq!(
            admission.screen(flood, now, 0, 0),
            Screened::Refuse(Refusal::Banned)
        );
        // Another address, and another /24's host, are not affected.
        assert!(matches!(
            admission.screen(ip("127.0.0.3"), now, 0, 0),
            Screened::Admit(_)
        ));
        // The ban ends: a whole burst again.
        now += Duration::from_secs(31);
        assert_eq!(admission.banned(now), 0);
        assert_eq!(admission.banned_sources(now).count(), 0);
        assert_eq!(admission.next_ban_end(now), None);
        let (n, refused) = {
            let mut n = 0;
            loop {
                match admission.screen(flood, now, 0, 0) {
                    Screened::Admit(_) => n += 1,
                    other => break (n, other),
                }
            }
        };
        assert_eq!((n, refused), (8, Screened::Refuse(Refusal::ConnectRate)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_at_the_connect_rate_is_never_refused_and_without_a_ban_excess_is_only_refused()
     {
        let rate = Rate {
            per_sec: 4,
            burst: 2,
        };
        let mut admission = Admission::new(&Limits {
            connect_rate: Some(rate),
            connect_ban: Duration::ZERO,
            ..limits()
        });
        let mut now = Instant::now();
        for _ in 0..100 {
            now += Duration::from_millis(250);
            assert!(matches!(
                admission.screen(ip("127.0.0.2"), now, 0, 0),
                Screened::Admit(_)
            ));
        }
        for _ in 0..100 {
            assert!(matches!(
                admission.screen(ip("127.0.0.3"), now, 0, 0),
                Screened::Admit(_) | Screened::Refuse(Refusal::ConnectRate)
            ));
        }
        assert_eq!(admission.banned(now), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_table_forgets_quiet_sources_and_is_bounded() {
        let rate = Rate {
            per_sec: 1,
            burst: 1,
        };
        let mut rates = ConnectRates::new(Some(rate), Duration::from_secs(60));
        let mut now = Instant::now();
        for i in 0..MAX_TRACKED as u32 {
            assert_eq!(rates.check(Prefix::V4(i), now), Ok(()));
        }
        // Full: a new source gets in untracked, counted.
        assert_eq!(rates.check(Prefix::V4(u32::MAX), now), Ok(()));
        assert_eq!(rates.untracked, 1);
        // Their buckets refill; the next purge forgets them.
        now += PURGE_EVERY;
        assert_eq!(rates.check(Prefix::V4(u32::MAX), now), Ok(()));
        assert_eq!(rates.table.len(), 1);
    }
}
