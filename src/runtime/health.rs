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

use super::verdict::Verdict;

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
        // Every backoff at warn: an operator who greps warnings must see the host misbehave
        // from the first one, not only once it has happened three times in a row.
        tracing::warn!(
            backoff = self.backoffs_in_row,
            late = s.late,
            sleeps = s.sleeps,
            asked = ?s.asked,
            overshoot = ?s.overshoot,
            ?suspension,
            "the host returned idle sleeps late two seconds in a row ({} of {} sleeps in the \
             last second; worst: asked {:?}, overshot by {:?}); suspending sleep for {:?}",
            s.late,
            s.sleeps,
            s.asked,
            s.overshoot,
            suspension
        );
        if suspension == MAX_SUSPENSION && !self.ceiling_reported {
            self.ceiling_reported = true;
            tracing::error!(
                "sleep backoff reached its {}s ceiling: this host does not schedule the \
                 process promptly. Give the shard a dedicated CPU, or set \
                 server.idle_wait = \"0ms\" to spin instead of sleeping",
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

    /// A `tracing` writer into a shared buffer: what the binary's subscriber would print.
    #[derive(Clone, Default)]
    struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Log {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Log {
        type Writer = Log;
        fn make_writer(&'a self) -> Log {
            self.clone()
        }
    }

    impl Log {
        /// A subscriber formatting every level as the binary does, without the time, into
        /// this buffer.
        fn subscriber(&self) -> impl tracing::Subscriber + use<> {
            tracing_subscriber::fmt()
                .with_writer(self.clone())
                .with_ansi(false)
                .without_time()
                .with_max_level(tracing::Level::TRACE)
                .finish()
        }

        fn lines(&self) -> Vec<String> {
            let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
            text.lines().map(str::to_owned).collect()
        }
    }

    /// The backoff's words are what operators grep for and what debugging.md quotes, so the
    /// test reads the line as the log subscriber formats it, not the format string.
    #[test]
    fn every_backoff_logs_one_warn_line_that_debugging_md_quotes() {
        let log = Log::default();
        let subscriber = log.subscriber();
        tracing::subscriber::with_default(subscriber, || {
            let mut now = Instant::now();
            let mut h = Health::new(now, 1, 25, false);
            for _ in 0..7 {
                second(&mut h, &mut now, 10, 10);
                second(&mut h, &mut now, 10, 10);
                now += h.suspended_for(now).expect("suspended");
                assert!(h.may_sleep(now));
            }
        });
        let lines = log.lines();
        let first = "WARN shardloop::runtime::health: the host returned idle sleeps late two \
                     seconds in a row (10 of 10 sleeps in the last second; worst: asked 8ms, \
                     overshot by 9ms); suspending sleep for 5s backoff=1 late=10 sleeps=10 \
                     asked=8ms overshoot=9ms suspension=5s";
        assert_eq!(
            lines.first().map(|l| l.trim_start()),
            Some(first),
            "{lines:#?}"
        );
        let backoffs: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("suspending sleep for"))
            .collect();
        assert_eq!(backoffs.len(), 7, "one line per backoff: {lines:#?}");
        for line in &backoffs {
            assert!(line.trim_start().starts_with("WARN "), "{line}");
            assert!(line.contains(" in the last second; "), "{line}");
            assert!(!line.trim_start().contains("  "), "a run of spaces: {line}");
        }
        assert!(
            backoffs[6].contains("suspending sleep for 120s backoff=7 "),
            "{backoffs:#?}"
        );
        let ceiling = "ERROR shardloop::runtime::health: sleep backoff reached its 120s ceiling: \
                       this host does not schedule the process promptly. Give the shard a \
                       dedicated CPU, or set server.idle_wait = \"0ms\" to spin instead of \
                       sleeping";
        let errors: Vec<&str> = lines
            .iter()
            .map(|l| l.trim_start())
            .filter(|l| l.starts_with("ERROR"))
            .collect();
        assert_eq!(errors, [ceiling], "the ceiling is reported once");
        assert_eq!(lines.len(), 8, "nothing else is logged: {lines:#?}");

        assert_quoted(&[first, ceiling]);
    }

    /// A probe with a zero tick finds every sleep late: the error path, on any host.
    #[test]
    fn the_probe_refusal_is_the_error_line_debugging_md_quotes() {
        let log = Log::default();
        let subscriber = log.subscriber();
        let trusted = tracing::subscriber::with_default(subscriber, || probe(Duration::ZERO));
        assert!(!trusted);
        let lines = log.lines();
        let [line] = lines.as_slice() else {
            panic!("one line: {lines:#?}")
        };
        let refusal = "ERROR shardloop::runtime::health: startup probe: this host overshoots a \
                       1 ms sleep by a tick or more; the loop will never sleep (verdict: \
                       spinning, host unsupported) median=";
        assert!(line.trim_start().starts_with(refusal), "{line}");
        assert!(line.ends_with(" tick=0ns"), "{line}");
        assert_quoted(&[refusal]);
    }

    /// Fails unless docs/debugging.md holds each line's text after its target.
    fn assert_quoted(lines: &[&str]) {
        let guide = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/debugging.md");
        let guide = std::fs::read_to_string(guide).expect("docs/debugging.md");
        for line in lines {
            let message = line.split_once(": ").expect("a target").1;
            assert!(
                guide.contains(message),
                "docs/debugging.md must quote the emitted text:\n{message}"
            );
        }
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
