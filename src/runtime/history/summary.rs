//! The last N seconds in one screen, for the console's `loopstats`: each phase's share of the
//! wall time and its worst second, every value of the counts table over the window (peaks with
//! the second they peaked in), and the worst offenders with their sites and when they ran.

use std::fmt;
use std::time::Duration;

use super::{LoopSecond, Offender, Site};
use crate::runtime::Phase;
use crate::runtime::telemetry::{Kind, Reading, SECONDS, SecondCounts, Value};

/// Values of the counts table per line of the summary.
const COUNTS_PER_LINE: usize = 4;

/// Something that peaked in one second, and which second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Worst<T> {
    /// What peaked.
    pub value: T,
    /// That second's wall-clock start, seconds since the Unix epoch.
    pub unix_second: u64,
    /// That second's start in the loop's uptime, whole seconds.
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

/// One phase over the window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PhaseSummary {
    /// Time spent in the phase over the window.
    pub total: Duration,
    /// Its worst second, as a share of that second's wall time (0–1): the highest share, or
    /// for [`Phase::Sleep`] the lowest (a loop that stops sleeping is the busy one).
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
    /// Per [`Phase`], indexed by `Phase as usize`.
    pub parts: [PhaseSummary; Phase::COUNT],
    /// Run-queue wait over the window (a share of [`Phase::Stolen`]).
    pub run_queue_wait: Duration,
    /// The counts over the window ([`SecondCounts::add`]): counts and times summed, peaks the
    /// largest, levels the newest second's.
    pub counts: SecondCounts,
    /// For each peak and level of [`SECONDS`] (indexed like it; `None` for the others), its
    /// highest second.
    pub peaks: [Option<Worst<Value>>; SECONDS.len()],
    /// The longest timer callback of the window, and when.
    pub worst_timer: Option<Worst<Offender<Site>>>,
    /// The longest task poll.
    pub worst_task: Option<Worst<Offender<Site>>>,
    /// The longest posted closure.
    pub worst_posted: Option<Worst<Offender<Site>>>,
    /// The longest packet handler, with its packet id.
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
        for phase in Phase::ALL {
            let summary = &mut self.parts[phase as usize];
            summary.total += second.spent(phase);
            let beats = if phase == Phase::Sleep { less } else { greater };
            Worst::offer(&mut summary.worst, second.share(phase), second, beats);
        }
        self.run_queue_wait += second.run_queue_wait;
        self.counts.add(&second.counts);
        for (row, peak) in SECONDS.iter().zip(&mut self.peaks) {
            if matches!(row.kind, Kind::Peak | Kind::Level) {
                Worst::offer(peak, (row.get)(&second.counts), second, greater);
            }
        }
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

    /// The highest second of the peak or level `field` of [`SECONDS`] (`"max_wheel_lag"`);
    /// `None` for a count, an unknown field, or an empty window.
    #[must_use]
    pub fn peak(&self, field: &str) -> Option<Worst<Value>> {
        let index = SECONDS.iter().position(|row| row.field == field)?;
        self.peaks[index]
    }

    /// `phase`'s share of the window's wall time, 0–1.
    #[must_use]
    pub fn share(&self, phase: Phase) -> f64 {
        if self.wall.is_zero() {
            return 0.0;
        }
        self.parts[phase as usize].total.as_secs_f64() / self.wall.as_secs_f64()
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
        for part in Phase::ALL {
            let summary = &self.parts[part as usize];
            write!(f, "{:<14} {:>6.2} %", part.name(), self.share(part) * 100.0)?;
            // A part that never ran has no worst second worth a line.
            let worst = summary
                .worst
                .filter(|w| part == Phase::Sleep || w.value > 0.0);
            if let Some(worst) = &worst {
                let which = if part == Phase::Sleep {
                    "lowest"
                } else {
                    "highest"
                };
                write!(f, "  {which} {:.1} % {}", worst.value * 100.0, at(worst))?;
            }
            if part == Phase::Stolen && !self.wall.is_zero() {
                let wait = self.run_queue_wait.as_secs_f64() / self.wall.as_secs_f64();
                write!(f, "; run-queue wait {:.2} %", wait * 100.0)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }

    /// Every value of [`SECONDS`], four to a line: `label value`, a peak with its second.
    fn fmt_counts(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, row) in SECONDS.iter().enumerate() {
            let sep = if i % COUNTS_PER_LINE == 0 { "" } else { " · " };
            write!(f, "{sep}{} ", row.label)?;
            let value = (row.get)(&self.counts);
            match (row.kind, self.peaks[i]) {
                (Kind::Count, _) => write!(f, "{value}")?,
                (Kind::Time, _) => f.write_str(&ms(Reading::from_value(value)))?,
                (Kind::Peak, Some(w)) if !w.value.is_zero() => {
                    write!(f, "{} {}", ms(Reading::from_value(w.value)), at(&w))?;
                }
                (Kind::Peak, _) => f.write_str("none")?,
                (Kind::Level, peak) => {
                    let highest = peak.map_or(value, |w| w.value);
                    write!(f, "{value} (peak {highest})")?;
                }
            }
            if i % COUNTS_PER_LINE == COUNTS_PER_LINE - 1 || i + 1 == SECONDS.len() {
                writeln!(f)?;
            }
        }
        Ok(())
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
