//! The loop profile's clock: a [`Stamp`] is a reading of the CPU's time-stamp counter where
//! the CPU has an invariant one (x86-64 with CPUID's "invariant TSC" bit), and of
//! [`Instant`] elsewhere.
//!
//! Why not [`Instant`] everywhere: the profile reads the clock at every phase boundary and
//! around every packet handler — tens of thousands of reads a second under load — and each
//! read is the profile's whole cost. On the development VM a `clock_gettime` through the
//! vDSO took 30–40 ns and a bare `rdtsc` 16 ns (docs/performance.md, "Loop profile"). An
//! invariant counter ticks at one constant rate on every core, in every power state, which is
//! what makes a difference of two readings a duration; the kernel's own `tsc` clocksource
//! rests on the same guarantee.
//!
//! The rate is measured once per process ([`Stamp::nanos`]): 2 ms of counter ticks against
//! [`Instant`], which puts the error near 1 part in 10⁵ — a 10 ms callback reads within
//! 0.1 µs. A reading taken on another core after the thread moved can be a few ticks behind
//! the last; differences saturate at zero.
//!
//! This module only reads the clock; it must never sleep, allocate or take a lock after the
//! calibration.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A reading of the profile's clock. Only differences of two readings mean anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stamp(u64);

/// Nanoseconds per counter tick, as a 32.32 fixed-point number.
#[derive(Clone, Copy, Debug)]
struct Rate {
    /// Nanoseconds per tick × 2³².
    scaled: u64,
    /// The counter is the time-stamp counter (else: nanoseconds since `EPOCH`).
    tsc: bool,
}

/// The process's rate, measured by the first caller.
static RATE: OnceLock<Rate> = OnceLock::new();
/// Where readings count from when the counter is [`Instant`].
static EPOCH: OnceLock<Instant> = OnceLock::new();

/// How long the calibration watches the counter against [`Instant`].
const CALIBRATION: Duration = Duration::from_millis(2);

impl Stamp {
    /// Reads the clock.
    #[inline]
    pub(crate) fn now() -> Stamp {
        Stamp(read(rate().tsc))
    }

    /// The time from `earlier` to this reading; zero if `earlier` is later.
    #[inline]
    pub(crate) fn since(self, earlier: Stamp) -> Duration {
        Stamp::nanos(self.0.saturating_sub(earlier.0))
    }

    /// Counter ticks from `earlier` to this reading; zero if `earlier` is later. Cheaper than
    /// [`Stamp::since`] (no conversion), for comparisons against [`Stamp::ticks_within`].
    #[inline]
    pub(crate) fn ticks_since(self, earlier: Stamp) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// The most counter ticks that measure strictly less than `d` (or exactly zero, for a
    /// zero `d`): a difference of readings of at most this many ticks is never longer than
    /// `d` by [`Stamp::since`].
    pub(crate) fn ticks_within(d: Duration) -> u64 {
        Stamp::ticks(d).saturating_sub(1)
    }

    /// The reading `d` after this one.
    pub(crate) fn add(self, d: Duration) -> Stamp {
        Stamp(self.0.saturating_add(Stamp::ticks(d)))
    }

    /// The reading `d` before this one, if the counter went back that far.
    #[cfg(all(test, feature = "loop-profiling"))]
    pub(crate) fn checked_sub(self, d: Duration) -> Option<Stamp> {
        self.0.checked_sub(Stamp::ticks(d)).map(Stamp)
    }

    /// `d` in counter ticks, rounded up: `s.add(d).since(s)` is never shorter than `d`.
    fn ticks(d: Duration) -> u64 {
        let scaled = u128::from(rate().scaled.max(1));
        let ticks = (d.as_nanos() << 32).div_ceil(scaled);
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// `ticks` of the counter as a duration.
    fn nanos(ticks: u64) -> Duration {
        let nanos = (u128::from(ticks) * u128::from(rate().scaled)) >> 32;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// The counter, calibrated on first use.
fn rate() -> Rate {
    *RATE.get_or_init(calibrate)
}

/// Reads the counter: the time-stamp counter, or nanoseconds since `EPOCH`.
#[inline]
fn read(tsc: bool) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if tsc {
        // SAFETY: `rdtsc` exists on every x86-64 CPU and has no preconditions; it only reads
        // the counter. Whether its readings are durations is what `calibrate` checked.
        return unsafe { std::arch::x86_64::_rdtsc() };
    }
    let _ = tsc;
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Whether the time-stamp counter ticks at one constant rate on every core and in every
/// power state (CPUID leaf 0x8000_0007, EDX bit 8).
fn invariant_tsc() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // The extended leaf must exist before it is read.
        #[allow(unused_unsafe)]
        // SAFETY: `cpuid` exists on every x86-64 CPU; reading a leaf has no side effects (the
        // intrinsic is `unsafe` only in older toolchains).
        let max = unsafe { std::arch::x86_64::__cpuid(0x8000_0000) }.eax;
        if max < 0x8000_0007 {
            return false;
        }
        #[allow(unused_unsafe)]
        // SAFETY: as above; the leaf exists (checked just now).
        let power = unsafe { std::arch::x86_64::__cpuid(0x8000_0007) };
        power.edx & (1 << 8) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Measures the counter's rate against [`Instant`] over [`CALIBRATION`].
fn calibrate() -> Rate {
    const ONE: u64 = 1 << 32;
    if !invariant_tsc() {
        EPOCH.get_or_init(Instant::now);
        return Rate {
            scaled: ONE,
            tsc: false,
        };
    }
    let (t0, c0) = (Instant::now(), read(true));
    while t0.elapsed() < CALIBRATION {
        std::hint::spin_loop();
    }
    let (t1, c1) = (Instant::now(), read(true));
    let ticks = c1.saturating_sub(c0);
    let nanos = u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX);
    if ticks == 0 {
        // A counter that did not move is no clock: fall back.
        EPOCH.get_or_init(Instant::now);
        return Rate {
            scaled: ONE,
            tsc: false,
        };
    }
    let scaled = (u128::from(nanos) << 32) / u128::from(ticks);
    Rate {
        scaled: u64::try_from(scaled).unwrap_or(u64::MAX),
        tsc: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over a real sleep, the profile's clock agrees with [`Instant`] to within a few
    /// percent (the bound is loose: the two reads of each clock are not simultaneous).
    #[test]
    fn a_stamp_difference_is_a_duration_on_the_instant_scale() {
        let (s0, t0) = (Stamp::now(), Instant::now());
        std::thread::sleep(Duration::from_millis(50));
        let (s1, t1) = (Stamp::now(), Instant::now());
        let stamp = s1.since(s0).as_secs_f64();
        let instant = (t1 - t0).as_secs_f64();
        assert!(
            (stamp / instant - 1.0).abs() < 0.05,
            "stamp {stamp} s against Instant {instant} s"
        );
    }

    /// A second after a reading is a whole second, never a nanosecond short (the profile's
    /// records last at least their second).
    #[test]
    fn adding_a_duration_and_measuring_it_back_loses_nothing() {
        let start = Stamp::now();
        for d in [
            Duration::from_secs(1),
            Duration::from_nanos(1),
            Duration::from_millis(8),
        ] {
            let back = start.add(d).since(start);
            assert!(
                back >= d && back - d < Duration::from_nanos(2),
                "{d:?} came back as {back:?}"
            );
        }
    }

    /// A difference within `ticks_within(d)` never reads longer than `d`, and one tick more
    /// reads at least `d` (the bound is tight, not merely safe).
    #[test]
    fn ticks_within_a_duration_never_measure_longer_than_it() {
        let start = Stamp::now();
        for d in [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_nanos(37),
            Duration::from_micros(5),
            Duration::from_millis(8),
            Duration::from_secs(3),
        ] {
            let within = Stamp::ticks_within(d);
            let measured = Stamp(start.0 + within).since(start);
            assert!(
                measured <= d,
                "{within} ticks read {measured:?}, over {d:?}"
            );
            let next = Stamp(start.0 + within + 1).since(start);
            assert!(next >= d, "{d:?}: one tick over the bound read {next:?}");
        }
    }

    #[test]
    fn a_later_stamp_never_gives_a_negative_duration() {
        let early = Stamp::now();
        let late = Stamp::now();
        assert_eq!(early.since(late), Duration::ZERO);
        assert!(late >= early);
    }
}
