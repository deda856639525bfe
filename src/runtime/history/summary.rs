//! The last N seconds in one screen, for the console's `loopstats`: each part's share of the
//! wall time and its worst second, the counts summed, the worst wheel lag and the worst
//! offenders with their sites and when they ran.

use std::fmt;
use std::time::Duration;

use super::{LoopSecond, Offender, Part, Site};

/// Something that peaked in one second, and which second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Worst<T> {
    pub value: T,
    pub unix_second: u64,
    pub uptime_second: u64,
}

impl<T: Copy> Worst<T> {
    /// Keeps `value` from `second` when `slot` is empty or `beats(value, old)`.
    fn offer(slot: &mut Option<Worst<T>>, value: T, second: &LoopSecond, beats: fn(T, T) -> bool) {
        if slot.is_none_or(|old| beats(value, old.value)) {
            *slot = Some(Worst {
                value,
                unix_second: second.unix_second,
                uptime_second: second.uptime_second,
            });
        }
    }
}

/// One part over the window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PartSummary {
    /// Time spent in the part over the window.
    pub total: Duration,
    /// Its worst second, as a share of that second's wall time (0–1): the highest share, or
    /// for [`Part::Sleep`] the lowest (a loop that stops sleeping is the busy one).
    pub worst: Option<Worst<f64>>,
}

/// The last N seconds of a history, condensed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Summary {
    /// Seconds covered.
    pub seconds: usize,
    /// The oldest and newest second covered.
    pub span: Option<(LoopSecond, LoopSecond)>,
    /// Wall time covered.
    pub wall: Duration,
    /// Per [`Part`], indexed by `Part as usize`.
    pub parts: [PartSummary; Part::COUNT],
    pub run_queue_wait: Duration,
    /// Counts summed over the window.
    pub iterations: u64,
    pub sleeps: u64,
    pub late_wakes: u64,
    pub ticks_fired: u64,
    pub posts: u64,
    pub wakes_issued: u64,
    pub wakes_elided: u64,
    pub packets_in: u64,
    pub packets_out: u64,
    /// Players at the end of the newest second, and the most in any second.
    pub players_now: u64,
    pub players_peak: u64,
    pub max_sleep_overshoot: Option<Worst<Duration>>,
    pub max_wheel_lag: Option<Worst<Duration>>,
    pub worst_timer: Option<Worst<Offender<Site>>>,
    pub worst_task: Option<Worst<Offender<Site>>>,
    pub worst_posted: Option<Worst<Offender<Site>>>,
    pub worst_handler: Option<Worst<Offender<u8>>>,
}

fn longer<S>(a: Offender<S>, b: Offender<S>) -> bool {
    a.took > b.took
}

fn greater<T: PartialOrd>(a: T, b: T) -> bool {
    a > b
}

fn less<T: PartialOrd>(a: T, b: T) -> bool {
    a < b
}

impl Summary {
    /// The summary of `seconds` (oldest first).
    pub fn of<'a>(seconds: impl IntoIterator<Item = &'a LoopSecond>) -> Summary {
        let mut s = Summary::default();
        for second in seconds {
            s.add(second);
        }
        s
    }

    fn add(&mut self, second: &LoopSecond) {
        self.seconds += 1;
        self.span = Some(match self.span {
            None => (*second, *second),
            Some((first, _)) => (first, *second),
        });
        self.wall += second.wall;
        for part in Part::ALL {
            let summary = &mut self.parts[part as usize];
            summary.total += second.spent(part);
            let beats = if part == Part::Sleep { less } else { greater };
            Worst::offer(&mut summary.worst, second.share(part), second, beats);
        }
        self.run_queue_wait += second.run_queue_wait;
        self.add_counts(second);
        let w = &second.worst;
        let offer = |slot: &mut Option<Worst<Offender<Site>>>, o: Option<Offender<Site>>| {
            if let Some(o) = o {
                Worst::offer(slot, o, second, longer);
            }
        };
        offer(&mut self.worst_timer, w.timer);
        offer(&mut self.worst_task, w.task);
        offer(&mut self.worst_posted, w.posted);
        if let Some(o) = w.handler {
            Worst::offer(&mut self.worst_handler, o, second, longer);
        }
    }

    fn add_counts(&mut self, second: &LoopSecond) {
        self.iterations += second.iterations;
        self.sleeps += second.sleeps;
        self.late_wakes += second.late_wakes;
        self.ticks_fired += second.ticks_fired;
        self.posts += second.posts;
        self.wakes_issued += second.wakes_issued;
        self.wakes_elided += second.wakes_elided;
        self.packets_in += second.packets_in;
        self.packets_out += second.packets_out;
        self.players_now = second.players;
        self.players_peak = self.players_peak.max(second.players);
        let overshoot = second.max_sleep_overshoot;
        Worst::offer(&mut self.max_sleep_overshoot, overshoot, second, greater);
        Worst::offer(
            &mut self.max_wheel_lag,
            second.max_wheel_lag,
            second,
            greater,
        );
    }

    /// `part`'s share of the window's wall time, 0–1.
    #[must_use]
    pub fn share(&self, part: Part) -> f64 {
        if self.wall.is_zero() {
            return 0.0;
        }
        self.parts[part as usize].total.as_secs_f64() / self.wall.as_secs_f64()
    }
}

/// A unix second as a UTC time of day, `HH:MM:SS`.
pub(crate) fn time_of_day(unix_second: u64) -> String {
    i64::try_from(unix_second)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(
            || format!("@{unix_second}"),
            |t| t.strftime("%H:%M:%S").to_string(),
        )
}

/// " at HH:MM:SS (uptime N s)".
struct At(u64, u64);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at {} (uptime {} s)", time_of_day(self.0), self.1)
    }
}

fn at<T>(worst: &Worst<T>) -> At {
    At(worst.unix_second, worst.uptime_second)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The screen `loopstats` prints: a header with the window, a table of parts (share of the
/// window, worst second), the counts, and the worst offenders.
impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some((first, last)) = self.span else {
            return f.write_str("no seconds recorded yet");
        };
        writeln!(
            f,
            "last {} s, {}–{} UTC (uptime {}–{} s), wall {:.1} s",
            self.seconds,
            time_of_day(first.unix_second),
            time_of_day(last.unix_second),
            first.uptime_second,
            last.uptime_second,
            self.wall.as_secs_f64()
        )?;
        self.fmt_parts(f)?;
        self.fmt_counts(f)?;
        self.fmt_offenders(f)
    }
}

impl Summary {
    fn fmt_parts(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<14} {:>7}  worst second", "part", "share")?;
        for part in Part::ALL {
            let summary = &self.parts[part as usize];
            write!(f, "{:<14} {:>6.2} %", part.name(), self.share(part) * 100.0)?;
            // A part that never ran has no worst second worth a line.
            let worst = summary
                .worst
                .filter(|w| part == Part::Sleep || w.value > 0.0);
            if let Some(worst) = &worst {
                let which = if part == Part::Sleep {
                    "lowest"
                } else {
                    "highest"
                };
                write!(f, "  {which} {:.1} % {}", worst.value * 100.0, at(worst))?;
            }
            if part == Part::Stolen && !self.wall.is_zero() {
                let wait = self.run_queue_wait.as_secs_f64() / self.wall.as_secs_f64();
                write!(f, "; run-queue wait {:.2} %", wait * 100.0)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }

    fn fmt_counts(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "iterations {} · sleeps {} · late wakes {}",
            self.iterations, self.sleeps, self.late_wakes
        )?;
        if let Some(worst) = self.max_sleep_overshoot.filter(|w| !w.value.is_zero()) {
            write!(f, " (max overshoot {} {})", ms(worst.value), at(&worst))?;
        }
        writeln!(f)?;
        write!(f, "fired ticks {} · max wheel lag ", self.ticks_fired)?;
        match &self.max_wheel_lag {
            Some(worst) => writeln!(f, "{} {}", ms(worst.value), at(worst))?,
            None => writeln!(f, "none")?,
        }
        writeln!(
            f,
            "posts {} · wakes {} issued, {} elided · packets {} in, {} out · players {} (peak {})",
            self.posts,
            self.wakes_issued,
            self.wakes_elided,
            self.packets_in,
            self.packets_out,
            self.players_now,
            self.players_peak
        )
    }

    fn fmt_offenders(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sites = [
            ("timer callback", &self.worst_timer),
            ("task poll", &self.worst_task),
            ("posted closure", &self.worst_posted),
        ];
        for (kind, worst) in sites {
            match worst {
                Some(w) => writeln!(
                    f,
                    "worst {kind:<15} {:>9} {}  {}",
                    ms(w.value.took),
                    at(w),
                    w.value.site
                )?,
                None => writeln!(f, "worst {kind:<15} none")?,
            }
        }
        match &self.worst_handler {
            Some(w) => write!(
                f,
                "worst {:<15} {:>9} {}  packet 0x{:02x}",
                "packet handler",
                ms(w.value.took),
                at(w),
                w.value.site
            ),
            None => write!(f, "worst {:<15} none", "packet handler"),
        }
    }
}
