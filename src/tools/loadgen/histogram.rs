//! The round-trip and lag histogram: small, fixed error, any run length.
//!
//! This module owns bucketing and percentiles. It must never grow with the number of values
//! recorded, only with the largest one.

use std::time::Duration;

use tokio::time::Instant;

/// A log-linear histogram of microsecond values: exact below 128 µs, then 64 buckets per
/// power of two (each bucket ≤ 1/64 of its values wide). It grows only up to the largest
/// value seen: about 8 KiB for values up to a second.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Histogram {
    counts: Vec<u64>,
    total: u64,
    /// Exact, in µs; `min` means nothing while `total` is 0.
    min: u64,
    max: u64,
}

impl Histogram {
    const SUB_BITS: u32 = 6;
    const SUB: u64 = 1 << Self::SUB_BITS;
    /// Values are clamped here (about 12 days): the top bucket's bound must fit in a u64.
    const CEILING: u64 = 1 << 40;

    /// Records the time since `sent`, unless it is now past `end` (outside the window).
    pub(super) fn record_until(&mut self, sent: Instant, end: Instant) {
        let now = Instant::now();
        if now <= end {
            self.record(now - sent);
        }
    }

    pub(super) fn record(&mut self, value: Duration) {
        let micros = u64::try_from(value.as_micros())
            .unwrap_or(u64::MAX)
            .min(Self::CEILING);
        let index = Self::index(micros);
        if self.counts.len() <= index {
            self.counts.resize(index + 1, 0);
        }
        self.counts[index] += 1;
        self.min = if self.total == 0 {
            micros
        } else {
            self.min.min(micros)
        };
        self.total += 1;
        self.max = self.max.max(micros);
    }

    fn index(micros: u64) -> usize {
        if micros < Self::SUB {
            return micros as usize;
        }
        // In [2^h, 2^(h+1)), keep the top SUB_BITS + 1 bits: shift = h - SUB_BITS.
        let shift = 63 - micros.leading_zeros() - Self::SUB_BITS;
        (u64::from(shift) * Self::SUB + (micros >> shift)) as usize
    }

    /// The largest value that falls in bucket `index`.
    fn highest(index: usize) -> u64 {
        let index = index as u64;
        if index < Self::SUB {
            return index;
        }
        let shift = index / Self::SUB - 1;
        let top_bits = index - shift * Self::SUB;
        ((top_bits + 1) << shift) - 1
    }

    pub(super) fn count(&self) -> u64 {
        self.total
    }

    /// The smallest value recorded; zero when empty.
    pub(super) fn min(&self) -> Duration {
        Duration::from_micros(self.min)
    }

    pub(super) fn max(&self) -> Duration {
        Duration::from_micros(self.max)
    }

    /// The value below which a share `q` of the values lie (nearest rank, rounded up to its
    /// bucket's top, never above the maximum). Zero when empty.
    pub(super) fn percentile(&self, q: f64) -> Duration {
        let rank = ((q * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Duration::from_micros(Self::highest(index).min(self.max));
            }
        }
        self.max()
    }

    pub(super) fn merge(&mut self, other: &Histogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.min = match (self.total, other.total) {
            (_, 0) => self.min,
            (0, _) => other.min,
            _ => self.min.min(other.min),
        };
        self.total += other.total;
        self.max = self.max.max(other.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_contiguous_and_tight() {
        for micros in [
            0,
            1,
            63,
            64,
            127,
            128,
            129,
            1_000,
            65_535,
            1 << 30,
            Histogram::CEILING,
        ] {
            let index = Histogram::index(micros);
            assert!(Histogram::highest(index) >= micros, "{micros}");
            let width = Histogram::highest(index) - micros;
            assert!(width <= micros / 64, "{micros}: bucket too wide");
            if index > 0 {
                assert!(Histogram::highest(index - 1) < micros, "{micros}");
            }
        }
    }

    #[test]
    fn percentiles_are_ordered_and_bounded_by_the_max() {
        let mut h = Histogram::default();
        for micros in 1..=1000 {
            h.record(Duration::from_micros(micros));
        }
        let (p50, p99) = (h.percentile(0.5), h.percentile(0.99));
        assert!(p50 <= p99 && p99 <= h.max());
        assert!((500..=508).contains(&p50.as_micros()), "{p50:?}");
        assert!((990..=1000).contains(&p99.as_micros()), "{p99:?}");
        assert_eq!(h.max(), Duration::from_micros(1000));
        assert_eq!(h.min(), Duration::from_micros(1));
        assert_eq!(Histogram::default().percentile(0.5), Duration::ZERO);
    }

    #[test]
    fn merged_histograms_count_both() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        a.record(Duration::from_micros(10));
        b.record(Duration::from_millis(10));
        a.merge(&b);
        assert_eq!((a.count(), a.max()), (2, Duration::from_millis(10)));
        assert_eq!(a.min(), Duration::from_micros(10));
        let mut empty = Histogram::default();
        empty.merge(&b);
        assert_eq!(empty.min(), Duration::from_millis(10));
    }
}
