//! Loop health: is sleeping when idle safe on this host?
//!
//! A correctly honoured sleep never makes a timer late: the park deadline is the next due
//! boundary. The one way sleeping hurts is the host returning the wait late, so that is the
//! only thing measured — the overshoot of each sleep, one clock read per wake. Work done by
//! the loop (saves, heavy callbacks) never counts, so a backoff means exactly one thing: the
//! host is not scheduling this process promptly.
//!
//! Each second the late wakes of the last second are sampled. Two bad samples in a row
//! (more late wakes than `threshold`, and at least `percent`% of the sleeps) suspend sleeping
//! for min(5 s · 2^k, 120 s), k = backoffs in a row. k falls back to 0 once the loop has slept
//! 60 s without a backoff, counted from the end of the last suspension.
//!
//! This module decides; it never sleeps or spins itself (except [`probe`], run on request).

use tokio::time::{Duration, Instant};

use super::stats::Verdict;

const SAMPLE: Duration = Duration::from_secs(1);
const FIRST_SUSPENSION: Duration = Duration::from_secs(5);
const MAX_SUSPENSION: Duration = Duration::from_secs(120);
const RESET_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Sleeping,
    Suspended { until: Instant },
    SpinningConfigured,
    SpinningUnsupported,
}

/// What one second's sample saw, for the backoff's log line.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    late: u64,
    sleeps: u64,
    /// The sleep that overshot most: what it asked, and by how much it overshot.
    asked: Duration,
    overshoot: Duration,
}

pub(crate) struct Health {
    threshold: u32,
    percent: u32,
    mode: Mode,
    window_start: Instant,
    window_sleeps: u64,
    window_late: u64,
    /// The sleep of the window that overshot most: asked, overshoot.
    window_worst: (Duration, Duration),
    /// The late count, sleeps and worst sleep of the last sample (the one that backs off).
    last_sample: Sample,
    bad_in_row: u32,
    /// k: backoffs in a row.
    backoffs_in_row: u32,
    last_suspension_end: Option<Instant>,
    ceiling_reported: bool,
    pub(crate) backoffs: u64,
}

impl Health {
    pub(crate) fn new(now: Instant, threshold: u32, percent: u32, spin: bool) -> Self {
        Health {
            threshold,
            percent,
            mode: if spin {
                Mode::SpinningConfigured
            } else {
                Mode::Sleeping
            },
            window_start: now,
            window_sleeps: 0,
            window_late: 0,
            window_worst: (Duration::ZERO, Duration::ZERO),
            last_sample: Sample::default(),
            bad_in_row: 0,
            backoffs_in_row: 0,
            last_suspension_end: None,
            ceiling_reported: false,
            backoffs: 0,
        }
    }

    /// The startup probe found sleeping unusable: never sleep.
    pub(crate) fn set_unsupported(&mut self) {
        self.mode = Mode::SpinningUnsupported;
    }

    pub(crate) fn verdict(&self) -> Verdict {
        match self.mode {
            Mode::Sleeping => Verdict::Healthy,
            Mode::Suspended { .. } => Verdict::SleepSuspended,
            Mode::SpinningConfigured => Verdict::SpinningConfigured,
            Mode::SpinningUnsupported => Verdict::SpinningUnsupported,
        }
    }

    /// Whether the loop may park now (ends a suspension whose time is up).
    pub(crate) fn may_sleep(&mut self, now: Instant) -> bool {
        match self.mode {
            Mode::Sleeping => true,
            Mode::Suspended { until } if now >= until => {
                self.mode = Mode::Sleeping;
                self.last_suspension_end = Some(until);
                self.window_start = now;
                self.window_sleeps = 0;
                self.window_late = 0;
                self.window_worst = (Duration::ZERO, Duration::ZERO);
                true
            }
            _ => false,
        }
    }

    /// One sleep of `asked` returned `overshoot` after its deadline; `late` when that is a
    /// tick or more.
    pub(crate) fn record_sleep(&mut self, late: bool, asked: Duration, overshoot: Duration) {
        self.window_sleeps += 1;
        self.window_late += u64::from(late);
        if overshoot > self.window_worst.1 {
            self.window_worst = (asked, overshoot);
        }
    }

    /// Called once per iteration; evaluates a sample each second.
    pub(crate) fn sample(&mut self, now: Instant) {
        if now.saturating_duration_since(self.window_start) < SAMPLE {
            return;
        }
        let bad = self.window_late > u64::from(self.threshold)
            && self.window_late * 100 >= u64::from(self.percent) * self.window_sleeps;
        self.last_sample = Sample {
            late: self.window_late,
            sleeps: self.window_sleeps,
            asked: self.window_worst.0,
            overshoot: self.window_worst.1,
        };
        self.window_start = now;
        self.window_sleeps = 0;
        self.window_late = 0;
        self.window_worst = (Duration::ZERO, Duration::ZERO);
        if !matches!(self.mode, Mode::Sleeping) {
            return;
        }
        self.bad_in_row = if bad { self.bad_in_row + 1 } else { 0 };
        if self.bad_in_row >= 2 {
            self.back_off(now);
        }
    }

    fn back_off(&mut self, now: Instant) {
        self.bad_in_row = 0;
        if self
            .last_suspension_end
            .is_some_and(|end| now.saturating_duration_since(end) >= RESET_AFTER)
        {
            self.backoffs_in_row = 0;
            self.ceiling_reported = false;
        }
        let k = self.backoffs_in_row.min(16);
        let suspension = FIRST_SUSPENSION.saturating_mul(1 << k).min(MAX_SUSPENSION);
        self.backoffs_in_row += 1;
        self.backoffs += 1;
        self.mode = Mode::Suspended {
            until: now + suspension,
        };
        let s = self.last_sample;
        // Every backoff is visible at the default level: the first two at info (a busy host
        // moment), the ones after at warn (the host keeps doing it).
        if self.backoffs_in_row <= 2 {
            tracing::info!(
                backoff = self.backoffs_in_row,
                late = s.late,
                sleeps = s.sleeps,
                asked = ?s.asked,
                overshoot = ?s.overshoot,
                ?suspension,
                "idle sleeps returned late two seconds in a row ({} of {} sleeps in the last;                  worst: asked {:?}, overshot by {:?}); suspending sleep for {:?}",
                s.late,
                s.sleeps,
                s.asked,
                s.overshoot,
                suspension
            );
        } else {
            tracing::warn!(
                backoff = self.backoffs_in_row,
                late = s.late,
                sleeps = s.sleeps,
                asked = ?s.asked,
                overshoot = ?s.overshoot,
                ?suspension,
                "the host keeps returning idle sleeps late ({} of {} sleeps in the last                  second; worst: asked {:?}, overshot by {:?}); suspending sleep for {:?}",
                s.late,
                s.sleeps,
                s.asked,
                s.overshoot,
                suspension
            );
        }
        if suspension == MAX_SUSPENSION && !self.ceiling_reported {
            self.ceiling_reported = true;
            tracing::error!(
                "sleep backoff reached its {}s ceiling: this host does not schedule the \
                 process promptly. Give the shard a dedicated CPU, or set \
                 server.idle_wait = 0ms to spin instead of sleeping",
                MAX_SUSPENSION.as_secs()
            );
        }
    }

    #[cfg(test)]
    fn suspended_for(&self, now: Instant) -> Option<Duration> {
        match self.mode {
            Mode::Suspended { until } => Some(until.saturating_duration_since(now)),
            _ => None,
        }
    }
}

/// The startup probe: 25 short sleeps on the real clock (never tokio's, so a paused test
/// clock is not moved). True when the median overshoot is under one tick.
pub(crate) fn probe(tick: Duration) -> bool {
    let mut overshoots: Vec<std::time::Duration> = (0..25)
        .map(|_| {
            let want = std::time::Duration::from_millis(1);
            let start = std::time::Instant::now();
            std::thread::sleep(want);
            start.elapsed().saturating_sub(want)
        })
        .collect();
    overshoots.sort_unstable();
    let median = overshoots[overshoots.len() / 2];
    if median >= tick {
        tracing::error!(
            ?median,
            ?tick,
            "startup probe: this host overshoots a 1 ms sleep by a tick or more; the loop \
             will never sleep (verdict: spinning, host unsupported)"
        );
        return false;
    }
    tracing::info!(
        ?median,
        ?tick,
        "startup probe: a 1 ms sleep overshoots by {median:?}, under one tick, so idle sleeps \
         can be trusted"
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds one second of `sleeps` sleeps, `late` of them late, and samples.
    fn second(h: &mut Health, now: &mut Instant, sleeps: u64, late: u64) {
        for i in 0..sleeps {
            let overshoot = if i < late {
                Duration::from_millis(9)
            } else {
                Duration::ZERO
            };
            h.record_sleep(i < late, Duration::from_millis(8), overshoot);
        }
        *now += SAMPLE;
        h.may_sleep(*now);
        h.sample(*now);
    }

    #[test]
    fn two_bad_samples_in_a_row_suspend_sleep() {
        let mut now = Instant::now();
        let mut h = Health::new(now, 1, 25, false);
        second(&mut h, &mut now, 10, 5);
        assert_eq!(
            h.verdict(),
            Verdict::Healthy,
            "one bad sample is not enough"
        );
        second(&mut h, &mut now, 10, 0);
        second(&mut h, &mut now, 10, 5);
        assert_eq!(
            h.verdict(),
            Verdict::Healthy,
            "the bad samples must be consecutive"
        );
        second(&mut h, &mut now, 10, 5);
        assert_eq!(h.verdict(), Verdict::SleepSuspended);
        assert_eq!(h.suspended_for(now), Some(Duration::from_secs(5)));
        assert!(!h.may_sleep(now));
    }

    #[test]
    fn few_or_rare_late_wakes_do_not_count() {
        let mut now = Instant::now();
        let mut h = Health::new(now, 1, 25, false);
        for _ in 0..5 {
            second(&mut h, &mut now, 500, 1); // at the threshold, not over it
        }
        for _ in 0..5 {
            second(&mut h, &mut now, 500, 20); // over the threshold but 4 %
        }
        assert_eq!(h.verdict(), Verdict::Healthy);
    }

    #[test]
    fn backoff_doubles_to_a_reachable_ceiling_and_resets_after_60s() {
        let mut now = Instant::now();
        let mut h = Health::new(now, 1, 25, false);
        let mut seen = Vec::new();
        for _ in 0..7 {
            second(&mut h, &mut now, 10, 10);
            second(&mut h, &mut now, 10, 10);
            let s = h.suspended_for(now).expect("suspended");
            seen.push(s.as_secs());
            now += s;
            assert!(h.may_sleep(now), "the suspension ends on time");
        }
        assert_eq!(seen, vec![5, 10, 20, 40, 80, 120, 120]);
        // 60 s of healthy sleeping after the last suspension: k is back to 0.
        for _ in 0..60 {
            second(&mut h, &mut now, 10, 0);
        }
        second(&mut h, &mut now, 10, 10);
        second(&mut h, &mut now, 10, 10);
        assert_eq!(h.suspended_for(now), Some(Duration::from_secs(5)));
    }

    #[test]
    fn spinning_modes_never_sleep() {
        let now = Instant::now();
        let mut h = Health::new(now, 1, 25, true);
        assert!(!h.may_sleep(now));
        assert_eq!(h.verdict(), Verdict::SpinningConfigured);
        let mut h = Health::new(now, 1, 25, false);
        h.set_unsupported();
        assert!(!h.may_sleep(now));
        assert_eq!(h.verdict(), Verdict::SpinningUnsupported);
    }
}
