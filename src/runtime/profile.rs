//! The loop's per-second profile: where each second of the loop thread's wall time went, and
//! the [`History`] of the last 15 minutes of such seconds.
//!
//! How it measures, and what it costs:
//! - One read of the profile's clock (a [`Stamp`]: the CPU's time-stamp counter, ~16 ns on the
//!   development VM against 30–40 ns for `Instant`) per phase boundary. Marks are chained —
//!   each read ends one part and starts the next — so every nanosecond of wall time lands in
//!   exactly one part and the parts add up to the wall time by construction.
//! - Timer callbacks, task polls and posted closures reuse the chain: one read after each,
//!   which ends it and starts the next, so the worst offender of each kind costs one read per
//!   callback, not two.
//! - The save snapshot is timed where it runs (inside some phase) and taken out of that phase.
//! - Once per second, when the record closes: the thread's CPU clock
//!   (`CLOCK_THREAD_CPUTIME_ID`) and its run-queue wait (`/proc/thread-self/schedstat`, opened
//!   once, read with `pread`). *Stolen* is the time the loop was not parked and yet not on a
//!   CPU: run-queue wait, host steal (and, which the loop must never do, blocking in a phase).
//!   It is taken out of the work parts in proportion, so the record still adds up.
//!
//! The time between iterations goes to [`Phase::Sleep`] when the loop parked, and to
//! [`Phase::Network`] when it only let tokio poll its reactor (the spin before parking, or
//! pending work): that poll is the loop's I/O.
//!
//! This module only measures and keeps records; it must never allocate after the loop is built
//! (the ring is allocated once), read a file on any path but the once-per-second close, or run
//! game code (the shard's per-second hook aside, run at an iteration's start, outside phases).

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::history::{History, LoopSecond, Offender, Site};
use super::panic::catch;
use super::phase::Phase;
use super::stamp::Stamp;
use super::telemetry::LoopStats;

/// Whether the loop profiles itself: the `loop-profiling` cargo feature, on by default (it
/// costs under 1 % of loop CPU at 1000 ping clients: `docs/performance.md`, "Loop profile").
/// Compiled out, every call site is behind this constant and compiles to nothing.
pub(crate) const ENABLED: bool = cfg!(feature = "loop-profiling");

/// How long one record covers, at least.
const SECOND: Duration = Duration::from_secs(1);

/// Called when a second closes, to add what only the shard knows (packets, players, the
/// worst packet handler).
pub(crate) type SecondHook = Box<dyn FnMut(&mut LoopSecond)>;

/// The loop's profile, owned by its `Core`.
pub(crate) struct Profile {
    state: RefCell<State>,
    /// Save snapshot time since the loop was built: a callback's time excludes the snapshot
    /// it ran.
    save_total: Cell<Duration>,
    /// Save snapshot time inside the phase in progress, taken out of it when it ends.
    save_in_phase: Cell<Duration>,
    history: RefCell<History>,
    hook: RefCell<Option<SecondHook>>,
    /// Totals of every closed second, for the `loop:` line.
    stolen_total: Cell<Duration>,
    run_queue_total: Cell<Duration>,
    /// Per [`Kind`]: a run of at most this many counter ticks cannot beat the open second's
    /// worst of that kind (`None`: none ran yet this second). Lets [`Profile::ran`] skip the
    /// conversion and the record for the common, unremarkable run (see there).
    bars: [Cell<Option<u64>>; KINDS],
}

struct State {
    /// Loop start, real and Unix time.
    start: Stamp,
    unix_start: Duration,
    second_start: Stamp,
    /// The last phase boundary.
    mark: Stamp,
    current: LoopSecond,
    /// The loop's counters, the thread's CPU time and run-queue wait when the second started.
    base_stats: LoopStats,
    base_cpu: Duration,
    base_run_queue: Duration,
    schedstat: Option<File>,
}

impl Profile {
    pub(crate) fn new() -> Profile {
        let now = Stamp::now();
        let schedstat = if ENABLED {
            File::open("/proc/thread-self/schedstat").ok()
        } else {
            None
        };
        let base_run_queue = schedstat.as_ref().map_or(Duration::ZERO, run_queue_wait);
        Profile {
            state: RefCell::new(State {
                start: now,
                unix_start: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default(),
                second_start: now,
                mark: now,
                current: LoopSecond::default(),
                base_stats: LoopStats::default(),
                base_cpu: thread_cpu_time(),
                base_run_queue,
                schedstat,
            }),
            save_total: Cell::new(Duration::ZERO),
            save_in_phase: Cell::new(Duration::ZERO),
            history: RefCell::new(if ENABLED {
                History::new()
            } else {
                History::unused()
            }),
            hook: RefCell::new(None),
            stolen_total: Cell::new(Duration::ZERO),
            run_queue_total: Cell::new(Duration::ZERO),
            bars: Default::default(),
        }
    }

    /// The start of an iteration: what happened since the last boundary was `idle` (sleep,
    /// or a reactor poll); closes every second that ended meanwhile. `stats` gives the
    /// counters a closing record needs.
    pub(crate) fn iteration_start(&self, idle: Phase, stats: impl Fn() -> LoopStats) -> Stamp {
        let now = Stamp::now();
        let mut closed = 0usize;
        loop {
            let mut state = self.state.borrow_mut();
            let boundary = state.second_start.add(SECOND);
            if now < boundary {
                let took = now.since(state.mark);
                state.current.add(idle, took);
                state.mark = now;
                return now;
            }
            // A very long park would close thousands of empty seconds: the ring keeps only
            // CAPACITY of them anyway. The rest of the gap is skipped, not added to the record
            // that opens now (which would then hold far more than its second).
            closed += 1;
            if closed > History::CAPACITY {
                (state.second_start, state.mark) = (now, now);
                continue;
            }
            // Work that ran past the boundary stays in its record: the cut is at the later
            // of the boundary and the last mark.
            let cut = boundary.max(state.mark);
            let took = cut.since(state.mark);
            state.current.add(idle, took);
            state.mark = cut;
            drop(state);
            self.close(cut, &stats);
        }
    }

    /// Ends a phase (or the health sample) at a fresh clock read, returned for chaining.
    pub(crate) fn phase_end(&self, part: Phase) -> Stamp {
        let now = Stamp::now();
        let mut state = self.state.borrow_mut();
        let took = now
            .since(state.mark)
            .saturating_sub(self.save_in_phase.replace(Duration::ZERO));
        state.current.add(part, took);
        state.mark = now;
        now
    }

    /// The last boundary: where a phase that times its callbacks starts its chain.
    pub(crate) fn mark(&self) -> Stamp {
        self.state.borrow().mark
    }

    /// Ends one timed run that started at `*since`: offers it as the worst of its kind and
    /// moves `*since` to now. Save snapshot time inside the run does not count.
    ///
    /// This runs after every task poll and callback, so its common case is kept to the clock
    /// read and one comparison: a run whose raw counter ticks are within the kind's bar
    /// (`bars`) is no longer than the worst already recorded, with or without a save taken
    /// out of it, so it could not replace it (`Offender::offer` keeps the earlier one on a
    /// tie) and is not converted to a duration at all.
    #[inline]
    pub(crate) fn ran(
        &self,
        kind: Kind,
        since: &mut Stamp,
        save_before: &mut Duration,
        site: Site,
    ) {
        let now = Stamp::now();
        let start = std::mem::replace(since, now);
        let bar = &self.bars[kind as usize];
        if bar.get().is_some_and(|bar| now.ticks_since(start) <= bar) {
            *save_before = self.save_total.get();
            return;
        }
        self.offer(kind, now.since(start), save_before, site);
    }

    /// [`Profile::ran`]'s record: the run took `raw` (saves inside it included).
    #[cold]
    fn offer(&self, kind: Kind, raw: Duration, save_before: &mut Duration, site: Site) {
        let save = self.save_total.get();
        let took = raw.saturating_sub(save.saturating_sub(*save_before));
        *save_before = save;
        let mut state = self.state.borrow_mut();
        let worst = &mut state.current.worst;
        let slot = match kind {
            Kind::Timer => &mut worst.timer,
            Kind::Task => &mut worst.task,
            Kind::Posted => &mut worst.posted,
        };
        Offender::offer(slot, took, site);
        let recorded = slot.as_ref().map_or(took, |worst| worst.took);
        self.bars[kind as usize].set(Some(Stamp::ticks_within(recorded)));
    }

    /// Save snapshot time so far (see [`Profile::ran`]).
    pub(crate) fn save_total(&self) -> Duration {
        self.save_total.get()
    }

    /// A save snapshot took `took`, inside the phase in progress.
    pub(crate) fn saved(&self, took: Duration) {
        self.save_total.set(self.save_total.get() + took);
        self.save_in_phase.set(self.save_in_phase.get() + took);
        self.state.borrow_mut().current.add(Phase::Save, took);
    }

    /// A park returned `overshoot` after its deadline.
    pub(crate) fn slept(&self, overshoot: Duration) {
        let mut state = self.state.borrow_mut();
        let max = &mut state.current.counts.max_sleep_overshoot;
        *max = (*max).max(overshoot);
    }

    /// An iteration's phases took `worked`.
    pub(crate) fn iterated(&self, worked: Duration) {
        let mut state = self.state.borrow_mut();
        let max = &mut state.current.counts.longest_iteration;
        *max = (*max).max(worked);
    }

    /// A fired tick was processed `lag` after its boundary.
    pub(crate) fn lagged(&self, lag: Duration) {
        let mut state = self.state.borrow_mut();
        let max = &mut state.current.counts.max_wheel_lag;
        *max = (*max).max(lag);
    }

    pub(crate) fn set_hook(&self, hook: SecondHook) {
        *self.hook.borrow_mut() = Some(hook);
    }

    pub(crate) fn history(&self) -> std::cell::Ref<'_, History> {
        self.history.borrow()
    }

    /// Stolen time and run-queue wait of every closed second.
    pub(crate) fn totals(&self) -> (Duration, Duration) {
        (self.stolen_total.get(), self.run_queue_total.get())
    }

    /// Closes the record at `cut`: counts, CPU, stolen time, the shard's hook; pushes it.
    fn close(&self, cut: Stamp, stats: &dyn Fn() -> LoopStats) {
        let now_stats = stats();
        let mut record = {
            let mut state = self.state.borrow_mut();
            let cpu = thread_cpu_time();
            let run_queue = state
                .schedstat
                .as_ref()
                .map_or(Duration::ZERO, run_queue_wait);
            let mut record = std::mem::take(&mut state.current);
            // The new record has no worst yet: every kind's next run is recorded.
            for bar in &self.bars {
                bar.set(None);
            }
            let since_start = state.second_start.since(state.start);
            record.uptime_second = since_start.as_secs();
            record.unix_second = (state.unix_start + since_start).as_secs();
            record.wall = cut.since(state.second_start);
            record.counts.count(&state.base_stats, &now_stats);
            let on_cpu = cpu.saturating_sub(state.base_cpu);
            let rq = run_queue.saturating_sub(state.base_run_queue);
            take_stolen(&mut record, on_cpu, rq);
            state.base_stats = now_stats;
            state.base_cpu = cpu;
            state.base_run_queue = run_queue;
            state.second_start = cut;
            record
        };
        self.run_hook(&mut record);
        self.stolen_total
            .set(self.stolen_total.get() + record.spent(Phase::Stolen));
        self.run_queue_total
            .set(self.run_queue_total.get() + record.run_queue_wait);
        self.history.borrow_mut().push(record);
    }

    fn run_hook(&self, record: &mut LoopSecond) {
        let Some(mut hook) = self.hook.borrow_mut().take() else {
            return;
        };
        match catch(|| hook(record)) {
            Ok(()) => {
                let mut slot = self.hook.borrow_mut();
                if slot.is_none() {
                    *slot = Some(hook);
                }
            }
            Err(why) => tracing::error!(
                "the per-second profile hook panicked: {why}; it is dropped, the loop goes on"
            ),
        }
    }
}

/// Which kind of timed run [`Profile::ran`] ended.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Timer,
    Task,
    Posted,
}

/// How many [`Kind`]s there are.
const KINDS: usize = 3;

/// Stolen = (wall − sleep) − on-CPU, taken out of the work parts in proportion to their
/// size, so that the record still adds up to its wall time; run-queue wait is the measured
/// share of it.
fn take_stolen(record: &mut LoopSecond, on_cpu: Duration, run_queue: Duration) {
    let work: u128 = Phase::ALL
        .iter()
        .filter(|p| p.is_work())
        .map(|&p| record.spent(p).as_nanos())
        .sum();
    let stolen = work.saturating_sub(on_cpu.as_nanos());
    if stolen == 0 || work == 0 {
        return;
    }
    let mut taken = 0u128;
    let mut largest = (0u128, Phase::Timers);
    for part in Phase::ALL.into_iter().filter(|p| p.is_work()) {
        let spent = record.spent(part).as_nanos();
        let cut = spent * stolen / work;
        taken += cut;
        record.parts[part as usize] = nanos(spent - cut);
        if spent - cut > largest.0 {
            largest = (spent - cut, part);
        }
    }
    // Rounding: the last few nanoseconds come out of the largest part.
    let rest = stolen - taken;
    let part = largest.1;
    record.parts[part as usize] = nanos(record.spent(part).as_nanos().saturating_sub(rest));
    record.parts[Phase::Stolen as usize] = nanos(stolen);
    record.run_queue_wait = run_queue.min(nanos(stolen));
}

fn nanos(n: u128) -> Duration {
    Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX))
}

/// The calling thread's CPU time (zero if the clock cannot be read).
pub(crate) fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec owned by this frame.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// The thread's run-queue wait so far: the second field of its schedstat, in nanoseconds.
fn run_queue_wait(file: &File) -> Duration {
    let mut buf = [0u8; 96];
    let n = file.read_at(&mut buf, 0).unwrap_or(0);
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|text| text.split_ascii_whitespace().nth(1))
        .and_then(|field| field.parse().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

// Without the feature the history records nothing.
#[cfg(all(test, feature = "loop-profiling"))]
mod tests {
    use super::*;

    /// The worst task poll of a second, and its site, as `ran` records it when most runs
    /// take the path that skips the record.
    #[test]
    fn the_worst_run_is_kept_whichever_path_each_run_takes() {
        let profile = Profile::new();
        let site = |line| Site {
            file: "tasks.rs",
            line,
            column: 1,
        };
        let mut save_before = Duration::ZERO;
        let mut run = |took_ms: u64, line: u32| {
            let now = Stamp::now();
            // A machine up for less than a few ms cannot go that far back: nothing to test.
            let Some(mut since) = now.checked_sub(Duration::from_millis(took_ms)) else {
                return false;
            };
            profile.ran(Kind::Task, &mut since, &mut save_before, site(line));
            true
        };
        let worst = |profile: &Profile| {
            let state = profile.state.borrow();
            state.current.worst.task.map(|w| (w.site.line, w.took))
        };
        if !run(2, 1) {
            return;
        }
        for (ms, line) in [(1, 2), (2, 3), (0, 4), (1, 5)] {
            run(ms, line);
        }
        let (line, took) = worst(&profile).expect("a task ran");
        assert_eq!(
            line, 1,
            "shorter runs and a tie keep the first 2 ms run ({took:?})"
        );
        assert!(took >= Duration::from_millis(2), "{took:?}");
        run(5, 6);
        assert_eq!(
            worst(&profile).map(|(line, _)| line),
            Some(6),
            "a longer run wins"
        );

        // A new second starts with no worst: its first run is recorded, however short.
        profile.close(Stamp::now(), &LoopStats::default);
        assert_eq!(worst(&profile), None);
        run(0, 7);
        assert_eq!(worst(&profile).map(|(line, _)| line), Some(7));
        let history = profile.history();
        let closed = history
            .last(1)
            .next()
            .map(|s| s.worst.task.map(|w| w.site.line));
        assert_eq!(closed, Some(Some(6)), "the closed second kept its worst");
    }

    #[test]
    fn a_park_longer_than_the_history_leaves_no_gap_in_the_record_that_follows() {
        let profile = Profile::new();
        let gap = Duration::from_secs(2 * History::CAPACITY as u64);
        {
            let mut state = profile.state.borrow_mut();
            // A machine up for less than the gap cannot go that far back: nothing to test.
            let Some(then) = state.mark.checked_sub(gap) else {
                return;
            };
            (state.second_start, state.mark) = (then, then);
        }
        profile.iteration_start(Phase::Sleep, LoopStats::default);
        assert_eq!(profile.history().len(), History::CAPACITY);
        let state = profile.state.borrow();
        let open = state.current.spent(Phase::Sleep);
        assert!(
            open < SECOND,
            "the open record holds {open:?} of sleep (the skipped seconds)"
        );
    }
}
