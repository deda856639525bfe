//! Flood limits: a token bucket per connection and packet kind, the policy [`Rate`] states.
//!
//! Owns the arithmetic only: which packets are limited and what happens to a dropped one is
//! the server's business. Must never read the clock itself (the caller passes `now`).

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

/// How fast one kind of packet may come in.
///
/// Policy, the same for every limited packet: a client may send `per_sec` packets of a kind a
/// second, and save up to `burst` of them. A packet beyond that is **dropped and counted**,
/// not handled — a lagging client that bunches a few moves loses a few moves, nothing more.
/// Each dropped packet is a debt the refill pays back first; a client that runs up more debt
/// than a whole burst (it keeps sending at well over the rate) is **disconnected**: that is
/// not lag, it is abuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Packets a second, sustained. Must be at least 1.
    pub per_sec: u32,
    /// Packets that may come at once after a quiet spell. Must be at least 1.
    pub burst: u32,
}

impl Rate {
    /// The limit two configuration keys describe: `per_sec` packets a second in bursts of
    /// `burst`, or `None` (no limit) when `per_sec` is 0 — how every `*_rate` key reads.
    #[must_use]
    pub fn from_keys(per_sec: u32, burst: u32) -> Option<Rate> {
        (per_sec > 0).then_some(Rate { per_sec, burst })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s, bursts of {}", self.per_sec, self.burst)
    }
}

/// What the bucket says about one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Allow,
    /// Over the rate: drop it.
    Drop,
    /// Over the rate by more than a whole burst: disconnect.
    Abuse,
}

/// One connection's allowance for one packet kind. Starts full.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bucket {
    /// Tokens in millipackets; below zero is debt from dropped packets.
    milli: i64,
    refilled: Instant,
}

impl Bucket {
    #[must_use]
    pub(crate) fn full(rate: Rate, now: Instant) -> Bucket {
        Bucket {
            milli: i64::from(rate.burst) * 1000,
            refilled: now,
        }
    }

    /// Takes one packet's token at `now`.
    pub(crate) fn take(&mut self, rate: Rate, now: Instant) -> Verdict {
        self.refill(rate, now);
        self.milli -= 1000;
        if self.milli >= 0 {
            Verdict::Allow
        } else if self.milli < -i64::from(rate.burst) * 1000 {
            Verdict::Abuse
        } else {
            Verdict::Drop
        }
    }

    /// Whether it would be full at `now`: nothing owed, a whole burst saved up.
    #[must_use]
    pub(crate) fn is_full(&self, rate: Rate, now: Instant) -> bool {
        let mut probe = *self;
        probe.refill(rate, now);
        probe.milli >= i64::from(rate.burst) * 1000
    }

    fn refill(&mut self, rate: Rate, now: Instant) {
        let elapsed = now.saturating_duration_since(self.refilled);
        // Whole milliseconds only: the remainder stays for the next refill, so nothing is
        // lost to rounding however often packets come.
        let ms = elapsed.as_millis().min(u128::from(u32::MAX)) as i64;
        let cap = i64::from(rate.burst) * 1000;
        self.milli = (self.milli + ms * i64::from(rate.per_sec)).min(cap);
        self.refilled += Duration::from_millis(ms as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Rate = Rate {
        per_sec: 10,
        burst: 5,
    };

    #[tokio::test(start_paused = true)]
    async fn a_burst_passes_then_excess_is_dropped_then_abuse_disconnects() {
        let now = Instant::now();
        let mut bucket = Bucket::full(RATE, now);
        let verdicts: Vec<Verdict> = (0..11).map(|_| bucket.take(RATE, now)).collect();
        assert_eq!(&verdicts[..5], [Verdict::Allow; 5]);
        assert_eq!(&verdicts[5..10], [Verdict::Drop; 5]);
        assert_eq!(verdicts[10], Verdict::Abuse);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_at_the_rate_is_never_dropped() {
        let mut now = Instant::now();
        let mut bucket = Bucket::full(RATE, now);
        for _ in 0..1000 {
            now += Duration::from_millis(100);
            assert_eq!(bucket.take(RATE, now), Verdict::Allow);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_refill_pays_back_debt_first_and_stops_at_the_burst() {
        let now = Instant::now();
        let mut bucket = Bucket::full(RATE, now);
        for _ in 0..7 {
            bucket.take(RATE, now);
        }
        // Two packets of debt: 200 ms pays them back, then tokens accrue.
        let later = now + Duration::from_millis(300);
        assert_eq!(bucket.take(RATE, later), Verdict::Allow);
        assert_eq!(bucket.take(RATE, later), Verdict::Drop);
        // An hour of quiet saves up one burst, no more.
        let much_later = later + Duration::from_secs(3600);
        let allowed = (0..20)
            .filter(|_| bucket.take(RATE, much_later) == Verdict::Allow)
            .count();
        assert_eq!(allowed, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn fractions_of_a_token_are_kept_across_refills() {
        let rate = Rate {
            per_sec: 3,
            burst: 1,
        };
        let mut now = Instant::now();
        let mut bucket = Bucket::full(rate, now);
        assert_eq!(bucket.take(rate, now), Verdict::Allow);
        // 3/s: a token every 333.3 ms; polled every 1 ms it still comes after 334 ms.
        let mut waited = 0;
        loop {
            now += Duration::from_millis(1);
            waited += 1;
            let mut probe = bucket;
            if probe.take(rate, now) == Verdict::Allow {
                break;
            }
        }
        assert_eq!(waited, 334);
    }
}
