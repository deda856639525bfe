//! The loop's counters, declared once: `loop_telemetry!`'s one invocation at the bottom of
//! this file is the table, and every output is generated from it —
//!
//! - [`LoopStats`], the totals since the loop was built, with its `Display` (the console's
//!   `loopstats`) and [`LoopStats::since`] (the `loop:` status line's interval);
//! - the cells the loop bumps (`Totals`);
//! - [`SecondCounts`], what one second of the profile holds, with its per-second deltas and its
//!   sums over a window (the `loopstats` summary);
//! - [`TOTALS`] and [`SECONDS`], descriptors that the CSV columns, the Prometheus families and
//!   the documentation tests walk.
//!
//! Adding a counter is one row here plus its increment. A row says the counter's field, its
//! [`Kind`], its label for people, then `total` — in [`LoopStats`], with a Prometheus family
//! `("name", "help")`, or `()` for none, or `-` when the loop keeps no total — and `second` —
//! in each profiled second with a CSV column `("column", "what it holds")`, or `-`.
//!
//! A counter that has a total and a second, of kind [`Kind::Count`] or [`Kind::Time`], is
//! counted per second as the change of its total; every other per-second value is recorded
//! into the second directly (a peak by the profile, packets and players by the shard's hook).
//!
//! This module owns names, types and arithmetic; it must never read a clock or format for one
//! output in particular (the outputs own their layout).

use std::cell::Cell;
use std::fmt;
use std::time::Duration;

use super::verdict::Verdict;

/// How a counter adds up, and how it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Events (`u64`): summed over time; a Prometheus counter; a whole number in the CSV.
    Count,
    /// Time spent (`Duration`): summed; a Prometheus counter in seconds; whole µs in the CSV.
    Time,
    /// The largest of something (`Duration`): the maximum over time; a Prometheus gauge in
    /// seconds; whole µs in the CSV.
    Peak,
    /// A level at one moment (`u64`, players now): the latest over time, and its peak; a gauge.
    Level,
}

impl Kind {
    /// Whether its CSV column holds whole microseconds (else a plain whole number).
    #[must_use]
    pub fn is_time(self) -> bool {
        matches!(self, Kind::Time | Kind::Peak)
    }
}

/// One counter's value: a number or a duration, as its [`Kind`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Value {
    /// A [`Kind::Count`] or [`Kind::Level`].
    Number(u64),
    /// A [`Kind::Time`] or [`Kind::Peak`].
    Time(Duration),
}

impl Value {
    /// The value as a number: durations in whole microseconds (what the CSV keeps).
    #[must_use]
    pub fn as_number(self) -> u64 {
        match self {
            Value::Number(n) => n,
            Value::Time(d) => u64::try_from(d.as_micros()).unwrap_or(u64::MAX),
        }
    }

    /// Whether it is zero.
    #[must_use]
    pub fn is_zero(self) -> bool {
        match self {
            Value::Number(n) => n == 0,
            Value::Time(d) => d.is_zero(),
        }
    }
}

/// Numbers as they are, durations to the microsecond (`1.234ms`): the console's style.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Number(n) => write!(f, "{n}"),
            Value::Time(d) => write!(f, "{d:.3?}"),
        }
    }
}

/// The two types a counter can have, to and from [`Value`] (used by the generated accessors).
pub(crate) trait Reading: Copy {
    fn value(self) -> Value;
    fn from_value(value: Value) -> Self;
    /// `self - earlier`, never below zero.
    fn minus(self, earlier: Self) -> Self;
    /// `self + more`, never past the top.
    fn plus(self, more: Self) -> Self;
}

impl Reading for u64 {
    fn value(self) -> Value {
        Value::Number(self)
    }
    fn from_value(value: Value) -> u64 {
        value.as_number()
    }
    fn minus(self, earlier: u64) -> u64 {
        self.saturating_sub(earlier)
    }
    fn plus(self, more: u64) -> u64 {
        self.saturating_add(more)
    }
}

impl Reading for Duration {
    fn value(self) -> Value {
        Value::Time(self)
    }
    fn from_value(value: Value) -> Duration {
        match value {
            Value::Time(d) => d,
            Value::Number(micros) => Duration::from_micros(micros),
        }
    }
    fn minus(self, earlier: Duration) -> Duration {
        self.saturating_sub(earlier)
    }
    fn plus(self, more: Duration) -> Duration {
        self.saturating_add(more)
    }
}

/// A Prometheus family: its name after `shardloop_` (and before the unit and `_total`
/// suffixes `prometheus-client` adds), and its help text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// `loop_iterations` for `shardloop_loop_iterations_total`.
    pub name: &'static str,
    /// The `# HELP` text.
    pub help: &'static str,
}

/// A counter the loop keeps a total of, in [`LoopStats`].
#[derive(Debug, Clone, Copy)]
pub struct Total {
    /// Its field in [`LoopStats`].
    pub field: &'static str,
    /// Its label for people (the console).
    pub label: &'static str,
    /// How it adds up.
    pub kind: Kind,
    /// Its `/metrics` family, if it has one.
    pub metric: Option<Metric>,
    /// Reads it from a snapshot.
    pub get: fn(&LoopStats) -> Value,
}

/// A value each profiled second holds, in [`SecondCounts`] and in its CSV column.
#[derive(Debug, Clone, Copy)]
pub struct PerSecond {
    /// Its field in [`SecondCounts`].
    pub field: &'static str,
    /// Its label for people (the `loopstats` summary).
    pub label: &'static str,
    /// How it adds up over seconds.
    pub kind: Kind,
    /// Its CSV column.
    pub column: &'static str,
    /// What the column holds, as `docs/loopstats-csv.md` says it.
    pub doc: &'static str,
    /// Reads it from a second.
    pub get: fn(&SecondCounts) -> Value,
    /// Writes it into a second.
    pub set: fn(&mut SecondCounts, Value),
}

/// Generates the counter types and descriptors from the table (see the module doc). Each
/// output is one `@` rule; `@keep_total` and `@keep_second` filter the rows a rule takes.
macro_rules! loop_telemetry {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident : $kind:ident, $label:literal, total $total:tt, second $second:tt;
    )*) => {
        loop_telemetry!(@keep_total stats [] $( [$(#[doc = $doc])* $name $kind $label $total $second] )*);
        loop_telemetry!(@keep_second seconds [] $( [$(#[doc = $doc])* $name $kind $label $total $second] )*);
    };

    // Filters: keep the rows whose `total` (or `second`) is not `-`, hand them to `@$out`.
    (@keep_total $out:ident [$($kept:tt)*]) => { loop_telemetry!(@$out $($kept)*); };
    (@keep_total $out:ident [$($kept:tt)*]
        [$(#[$a:meta])* $name:ident $kind:ident $label:literal - $second:tt] $($rest:tt)*) => {
        loop_telemetry!(@keep_total $out [$($kept)*] $($rest)*);
    };
    (@keep_total $out:ident [$($kept:tt)*] [$($row:tt)*] $($rest:tt)*) => {
        loop_telemetry!(@keep_total $out [$($kept)* [$($row)*]] $($rest)*);
    };
    (@keep_second $out:ident [$($kept:tt)*]) => { loop_telemetry!(@$out $($kept)*); };
    (@keep_second $out:ident [$($kept:tt)*]
        [$(#[$a:meta])* $name:ident $kind:ident $label:literal $total:tt -] $($rest:tt)*) => {
        loop_telemetry!(@keep_second $out [$($kept)*] $($rest)*);
    };
    (@keep_second $out:ident [$($kept:tt)*] [$($row:tt)*] $($rest:tt)*) => {
        loop_telemetry!(@keep_second $out [$($kept)* [$($row)*]] $($rest)*);
    };

    (@ty Count) => { u64 };
    (@ty Time) => { Duration };
    (@ty Peak) => { Duration };
    (@ty Level) => { u64 };
    (@metric ()) => { None };
    (@metric ($name:literal, $help:literal)) => { Some(Metric { name: $name, help: $help }) };

    // The totals: LoopStats, its cells, its descriptors, its interval.
    (@stats $([$(#[$a:meta])* $name:ident $kind:ident $label:literal $total:tt $second:tt])*) => {
        /// A snapshot of the loop's production counters since it was built.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct LoopStats {
            $( $(#[$a])* pub $name: loop_telemetry!(@ty $kind), )*
            /// How the loop treats idle time right now.
            pub verdict: Verdict,
        }

        /// Every counter of [`LoopStats`], in the order of the table.
        pub const TOTALS: [Total; [$(stringify!($name)),*].len()] = [$(
            Total {
                field: stringify!($name),
                label: $label,
                kind: Kind::$kind,
                metric: loop_telemetry!(@metric $total),
                get: |s| Reading::value(s.$name),
            },
        )*];

        /// The totals the loop keeps as it runs, one cell each (loop thread only). The ones
        /// that come from elsewhere (wakes from the shared state, the verdict from health,
        /// stolen time from the profile) are filled in by the snapshot and never bumped.
        #[derive(Default)]
        pub(crate) struct Totals {
            $( pub(crate) $name: Cell<loop_telemetry!(@ty $kind)>, )*
        }

        impl Totals {
            /// The cells as a [`LoopStats`] (verdict: the default).
            pub(crate) fn snapshot(&self) -> LoopStats {
                LoopStats { $( $name: self.$name.get(), )* verdict: Verdict::default() }
            }
        }

        impl LoopStats {
            /// What changed between `earlier` and this snapshot: counts and times as
            /// differences, peaks and the verdict as they are now.
            #[must_use]
            pub fn since(&self, earlier: &LoopStats) -> LoopStats {
                let mut change = *self;
                $( loop_telemetry!(@since change self earlier $name $kind); )*
                change
            }
        }
    };
    (@since $change:ident $now:ident $was:ident $name:ident Count) => {
        $change.$name = Reading::minus($now.$name, $was.$name)
    };
    (@since $change:ident $now:ident $was:ident $name:ident Time) => {
        $change.$name = Reading::minus($now.$name, $was.$name)
    };
    (@since $change:ident $now:ident $was:ident $name:ident $kind:ident) => {};

    // The seconds: SecondCounts, its descriptors, deltas and sums.
    (@seconds $([$(#[$a:meta])* $name:ident $kind:ident $label:literal $total:tt ($column:literal, $doc:literal)])*) => {
        /// What the loop counted in one profiled second (a part of a
        /// [`LoopSecond`](super::history::LoopSecond)).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct SecondCounts {
            $( $(#[$a])* pub $name: loop_telemetry!(@ty $kind), )*
        }

        /// Every value of [`SecondCounts`], in the order of the table and of the CSV columns.
        pub const SECONDS: [PerSecond; [$(stringify!($name)),*].len()] = [$(
            PerSecond {
                field: stringify!($name),
                label: $label,
                kind: Kind::$kind,
                column: $column,
                doc: $doc,
                get: |s| Reading::value(s.$name),
                set: |s, v| s.$name = Reading::from_value(v),
            },
        )*];

        impl SecondCounts {
            /// Sets the values counted from totals: the change from `earlier` to `now`.
            pub(crate) fn count(&mut self, earlier: &LoopStats, now: &LoopStats) {
                $( loop_telemetry!(@count self earlier now $name $kind $total); )*
            }

            /// Adds `later` (a second after the ones added so far): counts and times summed,
            /// peaks as the larger, levels as the later.
            pub fn add(&mut self, later: &SecondCounts) {
                $( loop_telemetry!(@add self later $name $kind); )*
            }
        }
    };
    (@count $s:ident $was:ident $now:ident $name:ident Count ($($m:tt)*)) => {
        $s.$name = Reading::minus($now.$name, $was.$name)
    };
    (@count $s:ident $was:ident $now:ident $name:ident Time ($($m:tt)*)) => {
        $s.$name = Reading::minus($now.$name, $was.$name)
    };
    (@count $s:ident $was:ident $now:ident $name:ident $kind:ident $total:tt) => {};
    (@add $s:ident $later:ident $name:ident Peak) => { $s.$name = $s.$name.max($later.$name) };
    (@add $s:ident $later:ident $name:ident Level) => { $s.$name = $later.$name };
    (@add $s:ident $later:ident $name:ident $kind:ident) => {
        $s.$name = Reading::plus($s.$name, $later.$name)
    };
}

loop_telemetry! {
    /// Loop iterations run.
    iterations: Count, "iterations",
        total ("loop_iterations", "Loop iterations run"),
        second ("iterations", "loop iterations");
    /// Idle blocks (the loop parked with every queue empty).
    sleeps: Count, "idle sleeps",
        total ("loop_sleeps", "Idle sleeps: the loop parked with every queue empty"),
        second ("sleeps", "idle sleeps (parks)");
    /// Times the loop thread blocked and was woken: its voluntary context switches since the
    /// loop was built (`getrusage(RUSAGE_THREAD)`, read when the snapshot was taken). The loop
    /// blocks only in its idle park, so at idle this tracks `sleeps`; a thread that wakes
    /// more often than the loop is paying for wake-ups that do no work.
    thread_wakeups: Count, "thread wake-ups",
        total ("loop_thread_wakeups",
            "Times the loop thread blocked and was woken (its voluntary context switches)"),
        second -;
    /// The most a sleep overran its deadline.
    max_sleep_overshoot: Peak, "max sleep overshoot",
        total -,
        second ("max_overshoot_us", "the most one sleep overran its deadline");
    /// Idle blocks that returned one tick or more after their deadline.
    late_wakes: Count, "late wakes",
        total ("loop_late_wakes", "Idle sleeps that came back a tick or more after their deadline"),
        second ("late_wakes", "sleeps that came back one tick or more late");
    /// Tick boundaries processed that had at least one due timer.
    ticks_fired: Count, "fired ticks",
        total ("loop_ticks_fired", "Tick boundaries processed that had a due timer"),
        second ("ticks_fired", "tick boundaries processed that had a due timer");
    /// Of those, ticks processed one tick or more after their boundary.
    late_ticks: Count, "late ticks",
        total ("loop_late_ticks", "Fired ticks processed a tick or more after their boundary"),
        second -;
    /// Of those, ticks processed two ticks (16 ms by default) or more after their boundary.
    very_late_ticks: Count, "ticks late >= 2 ticks",
        total ("loop_very_late_ticks",
            "Fired ticks processed two ticks or more after their boundary"),
        second -;
    /// The largest processing time − boundary of a fired tick.
    max_wheel_lag: Peak, "max wheel lag",
        total ("loop_max_wheel_lag", "The largest wheel lag since start"),
        second ("max_wheel_lag_us", "the largest processing time minus boundary of a fired tick");
    /// The most work one iteration did: the wall time from its clock reading to the one that
    /// follows its phases (before the park, or before tokio's reactor runs), so parking and
    /// sleeping are not in it, but time the thread was descheduled mid-iteration is. An
    /// iteration over two ticks is one that delays every timer behind it.
    longest_iteration: Peak, "longest iteration",
        total ("loop_longest_iteration",
            "The longest one loop iteration worked (parking excluded) since start"),
        second ("longest_iteration_us", "the longest one loop iteration worked, parking excluded");
    /// Closures posted by `LoopContext::post` (and `spawn`, which posts) that the loop has
    /// taken to run (counted by the loop, so a post still queued is not in it yet).
    posts: Count, "posts",
        total ("loop_posts", "Closures posted to the loop, counted as the loop takes them to run"),
        second ("posts", "closures posted to the loop (counted as the loop takes them to run)");
    /// Wakes sent to a possibly parked loop by posts and cross-thread task wakes.
    wakes_issued: Count, "wakes issued",
        total ("loop_wakes_issued", "Wakes sent to a possibly parked loop"),
        second ("wakes_issued", "wakes sent to a possibly parked loop");
    /// Wakes not needed: the loop was running, or already signalled. Derived by the loop:
    /// posts, cross-thread task wakes and parked-loop task wakes, less the wakes they issued.
    wakes_elided: Count, "wakes elided",
        total ("loop_wakes_elided", "Wakes not needed: the loop was running or already signalled"),
        second ("wakes_elided", "wakes not needed (the loop was running or already signalled)");
    /// Times sleeping was suspended because the host returned sleeps late.
    backoffs: Count, "sleep backoffs",
        total ("loop_sleep_backoffs",
            "Times sleeping was suspended because the host returned sleeps late"),
        second -;
    /// Wall time the loop was neither parked nor on a CPU (run-queue wait, host steal), over
    /// the seconds the profile has closed; zero without the profile.
    stolen: Time, "stolen", total (), second -;
    /// The part of `stolen` measured as run-queue wait.
    run_queue_wait: Time, "run-queue wait", total (), second -;
    /// Panics caught in timer callbacks and tasks.
    panics: Count, "panics caught",
        total ("loop_panics", "Panics caught in timer callbacks and tasks"),
        second -;
    /// Packets handled (the shard's hook).
    packets_in: Count, "packets in", total -, second ("packets_in", "packets handled");
    /// Packets queued to players (the shard's hook).
    packets_out: Count, "packets out", total -, second ("packets_out", "packets queued to players");
    /// Players logged in at the end of the second (the shard's hook).
    players: Level, "players",
        total -,
        second ("players", "players logged in at the end of the second");
}

/// One counter per line, `label  value`, then the verdict: the console's `loopstats`.
impl fmt::Display for LoopStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for total in &TOTALS {
            writeln!(f, "{:<22} {}", total.label, (total.get)(self))?;
        }
        write!(f, "{:<22} {}", "verdict", self.verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_read_and_write_the_field_they_name() {
        let mut second = SecondCounts::default();
        for (i, row) in SECONDS.iter().enumerate() {
            let value = match row.kind {
                Kind::Count | Kind::Level => Value::Number(i as u64 + 1),
                Kind::Time | Kind::Peak => Value::Time(Duration::from_micros(i as u64 + 1)),
            };
            (row.set)(&mut second, value);
            assert_eq!((row.get)(&second), value, "{}", row.field);
        }
        let debug = format!("{second:?}");
        for (i, row) in SECONDS.iter().enumerate() {
            let shown = match row.kind {
                Kind::Count | Kind::Level => format!("{}: {}", row.field, i + 1),
                Kind::Time | Kind::Peak => format!("{}: {}µs", row.field, i + 1),
            };
            assert!(debug.contains(&shown), "{shown} in {debug}");
        }
    }

    #[test]
    fn an_interval_subtracts_counts_and_keeps_peaks() {
        let was = LoopStats {
            iterations: 10,
            stolen: Duration::from_millis(3),
            max_wheel_lag: Duration::from_millis(2),
            ..LoopStats::default()
        };
        let now = LoopStats {
            iterations: 25,
            stolen: Duration::from_millis(5),
            max_wheel_lag: Duration::from_millis(2),
            verdict: Verdict::SleepSuspended,
            ..LoopStats::default()
        };
        let change = now.since(&was);
        assert_eq!(change.iterations, 15);
        assert_eq!(change.stolen, Duration::from_millis(2));
        assert_eq!(change.max_wheel_lag, Duration::from_millis(2));
        assert_eq!(change.verdict, Verdict::SleepSuspended);
        assert_eq!(was.since(&now).iterations, 0, "never below zero");
    }

    #[test]
    fn a_second_counts_the_change_of_totals_and_a_window_adds_seconds_up() {
        let was = LoopStats {
            posts: 4,
            wakes_elided: 1,
            ..LoopStats::default()
        };
        let now = LoopStats {
            posts: 9,
            wakes_elided: 7,
            max_wheel_lag: Duration::from_secs(1),
            ..LoopStats::default()
        };
        let mut second = SecondCounts::default();
        second.count(&was, &now);
        assert_eq!((second.posts, second.wakes_elided), (5, 6));
        assert_eq!(
            second.max_wheel_lag,
            Duration::ZERO,
            "a peak is recorded into the second, not taken from the total"
        );
        let mut window = second;
        let later = SecondCounts {
            posts: 1,
            players: 3,
            max_wheel_lag: Duration::from_millis(4),
            ..SecondCounts::default()
        };
        window.add(&later);
        assert_eq!(window.posts, 6);
        assert_eq!(window.players, 3);
        assert_eq!(window.max_wheel_lag, Duration::from_millis(4));
    }

    #[test]
    fn the_console_lists_every_total_then_the_verdict() {
        let text = LoopStats::default().to_string();
        let labels: Vec<&str> = text.lines().map(|l| l[..22].trim_end()).collect();
        let expected: Vec<&str> = TOTALS.iter().map(|t| t.label).chain(["verdict"]).collect();
        assert_eq!(labels, expected);
    }
}
