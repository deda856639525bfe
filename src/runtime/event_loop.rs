//! `EventLoop`: one iteration runs the phases in a fixed order, then parks if nothing is left.
//!
//! ```text
//! 1 Timers   read the clock once; turn the wheel through every elapsed tick; run callbacks,
//!            wake pauses
//! 2 Network  slot handlers (filled by the shard)
//! 3 Tasks    poll woken local tasks, in wake order, each at most once
//! 4 Posted   run closures from other threads, FIFO, bounded
//! 5 Deltas   slot handlers
//! 6 Flush    slot handlers
//! 7 Park     only if all of the above left nothing pending
//! ```
//!
//! With the loop profile ([`super::profile`]) each phase boundary is one clock read, and the
//! time between iterations is the park (sleep) or a poll of the reactors, the loop thread's
//! own and tokio's (network).
//!
//! The loop is one future, driven by a current-thread tokio runtime. It never hands game
//! futures to tokio: tokio provides the clock, the reactor and the blocking pool, and the
//! loop decides what runs and in which order.
//!
//! Every phase runs under `catch_unwind`. Timer callbacks, tasks and posted closures are
//! guarded one by one and the loop goes on (T10); a panic that escapes a phase itself — a bug
//! in the wheel, a slot handler, the executor or the future passed to `run_until` — stops the
//! loop at once, mid-iteration, and for good: [`EventLoop::try_run_until`] returns it as a
//! [`Fault`] (message and site), and the owner decides what to save (see [`super::fault`]).

use std::collections::VecDeque;
use std::fmt;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use tokio::task::coop::unconstrained;
use tokio::time::{Duration, Instant};

use super::context::{Clock, Core, LoopContext, Posted, install, uninstall};
use super::executor::{PREFETCH_AHEAD, RootWaker};
use super::fault::{self, Fault, INJECTED_PANIC};
use super::fire::fire;
use super::health::{self, Health};
use super::history::Site;
use super::panic::catch;
use super::park::{self, Park, Woken};
use super::phase::Phase;
use super::profile::{ENABLED as PROFILING, Kind};
use super::spin::Spin;
use super::stats::{Counters, LagHistogram};
use super::telemetry::LoopStats;
use super::thread_wakes;
use super::watch::Doing;

/// Default longest idle block (rule L2: a park ends at the next due tick or after this,
/// whichever is first). The loop wakes for due ticks, posts and I/O anyway, so a park the cap
/// ends finds nothing to do: the cap is a bound, not a heartbeat. Five seconds is longer than
/// the gaps between a world's due ticks (a world with tolerant timers fires a couple of ticks a
/// second), so at idle almost every wake-up is a fired tick; a 1 s cap ended about one park in
/// twelve with nothing due.
pub const DEFAULT_IDLE_WAIT: Duration = Duration::from_secs(5);
/// Default of [`EventLoopBuilder::spin_before_park`].
pub const DEFAULT_SPIN_BEFORE_PARK: Duration = Duration::from_micros(50);
/// Default tick: timer resolution.
pub const DEFAULT_TICK: Duration = Duration::from_millis(8);
/// Default late wakes per second tolerated before sleeping backs off.
pub const DEFAULT_LATE_WAKE_THRESHOLD: u32 = 1;
/// Default share of sleeps (percent) that must be late, too, before sleeping backs off.
pub const DEFAULT_LATE_WAKE_PERCENT: u32 = 25;
/// Posted closures run per iteration at most; the rest wait for the next iteration.
const POSTED_PER_ITERATION: usize = 4096;

/// What the Posted phase did in one iteration.
struct PostedRun {
    /// Closures run.
    ran: usize,
    /// Closures left for the next iteration.
    pending: bool,
}

/// A slot handler: does its bounded share of work and returns true if it left work pending
/// (which keeps the loop from parking).
type Handler = Box<dyn FnMut() -> bool>;

/// The shard's handlers, one list per phase that takes them, each in the order added. Kept
/// apart by phase so that a phase with none costs the loop one length check: no scan of the
/// others' handlers, no watchdog store, no profile clock read (a wake that only brings a post
/// goes through Network on its way to Posted).
#[derive(Default)]
struct Slots {
    network: Vec<Handler>,
    deltas: Vec<Handler>,
    flush: Vec<Handler>,
}

impl Slots {
    /// The handlers of `phase`; a phase without a slot has none.
    fn of(&mut self, phase: Phase) -> &mut [Handler] {
        match phase {
            Phase::Network => &mut self.network,
            Phase::Deltas => &mut self.deltas,
            Phase::Flush => &mut self.flush,
            _ => &mut [],
        }
    }

    fn push(&mut self, phase: Phase, handler: Handler) {
        match phase {
            Phase::Network => self.network.push(handler),
            Phase::Deltas => self.deltas.push(handler),
            Phase::Flush => self.flush.push(handler),
            _ => unreachable!("only Network, Deltas and Flush take handlers"),
        }
    }

    fn len(&self) -> usize {
        self.network.len() + self.deltas.len() + self.flush.len()
    }
}

/// The startup host probe: given the tick, whether idle sleeps can be trusted.
type Probe = Box<dyn FnOnce(Duration) -> bool>;

/// Configures an [`EventLoop`]. Defaults equal the configuration defaults.
#[must_use]
pub struct EventLoopBuilder {
    idle_wait: Duration,
    late_wake_threshold: u32,
    late_wake_percent: u32,
    tick: Duration,
    probe_host: Option<Probe>,
    spin_before_park: Duration,
    park_outside_tokio: bool,
    owns_its_thread: bool,
    handlers: Slots,
}

impl fmt::Debug for EventLoopBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventLoopBuilder")
            .field("idle_wait", &self.idle_wait)
            .field("late_wake_threshold", &self.late_wake_threshold)
            .field("late_wake_percent", &self.late_wake_percent)
            .field("tick", &self.tick)
            .field("probe_host", &self.probe_host.is_some())
            .field("park_outside_tokio", &self.park_outside_tokio)
            .field("owns_its_thread", &self.owns_its_thread)
            .field("handlers", &self.handlers.len())
            .finish()
    }
}

impl Default for EventLoopBuilder {
    fn default() -> Self {
        EventLoopBuilder {
            idle_wait: DEFAULT_IDLE_WAIT,
            late_wake_threshold: DEFAULT_LATE_WAKE_THRESHOLD,
            late_wake_percent: DEFAULT_LATE_WAKE_PERCENT,
            tick: DEFAULT_TICK,
            probe_host: None,
            spin_before_park: DEFAULT_SPIN_BEFORE_PARK,
            park_outside_tokio: false,
            owns_its_thread: false,
            handlers: Slots::default(),
        }
    }
}

impl EventLoopBuilder {
    /// Longest idle block; `Duration::ZERO` never sleeps (spins, turning the thread's reactor
    /// and, unless the loop owns its thread, yielding to tokio).
    pub fn idle_wait(mut self, idle_wait: Duration) -> Self {
        self.idle_wait = idle_wait;
        self
    }

    /// Late wakes per second the host may have before sleeping backs off.
    pub fn late_wake_threshold(mut self, threshold: u32) -> Self {
        self.late_wake_threshold = threshold;
        self
    }

    /// Share of sleeps (percent) that must also be late before sleeping backs off.
    pub fn late_wake_percent(mut self, percent: u32) -> Self {
        self.late_wake_percent = percent;
        self
    }

    /// Timer resolution (default 8 ms). Must not be zero.
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// Run the startup host probe (25 short real sleeps) when the loop first runs.
    pub fn probe_host(mut self, probe: bool) -> Self {
        self.probe_host = probe.then(|| Box::new(health::probe) as Probe);
        self
    }

    /// Runs `probe` as the startup host probe in place of the real one: it gets the tick and
    /// answers whether idle sleeps can be trusted (`false` = never sleep). For tests that
    /// need a known verdict whatever host they run on.
    pub fn probe_host_with(mut self, probe: impl FnOnce(Duration) -> bool + 'static) -> Self {
        self.probe_host = Some(Box::new(probe));
        self
    }

    /// After the loop was woken by something from outside (a packet, a connection, a post),
    /// it keeps polling this long before it parks, so that the next packet of a busy client
    /// finds it awake. Parking and being woken costs the host about as much as this spin (tens
    /// of microseconds on a VM), so spinning first costs at most twice the cheaper of the two
    /// and saves the wake-up latency whenever the next event comes soon. Timer wake-ups do not
    /// start a spin; zero turns it off. Measured in real time, so a paused test clock is fine.
    ///
    /// This is an upper bound: the loop spins only while recent spins paid, i.e. while most
    /// events came within half of this after the previous one; with many clients whose
    /// packets come at random, it parks instead and tries one spin again every 32 events.
    pub fn spin_before_park(mut self, spin: Duration) -> Self {
        self.spin_before_park = spin;
        self
    }

    /// Lets the idle park block in an `epoll_wait` of the loop's own (a timerfd and a doorbell
    /// `eventfd`) instead of returning to tokio's park, whenever the loop can see that nothing
    /// of its own needs tokio's reactor meanwhile: tokio's clock runs in real time, the loop
    /// has no slot handlers (their sources may be tokio's), no waker of `run_until`'s future or
    /// of a loop task is held outside the loop (a tokio timer, socket or channel a task
    /// awaits holds one), and the thread's runtime is a current-thread one with no task of
    /// its own. Otherwise that park goes through tokio as usual. A post then wakes the loop
    /// with one `eventfd` write and nothing of tokio's on either side (docs/performance.md,
    /// "wake latency"). Off by default.
    ///
    /// Turn it on only for a loop that has its thread's runtime to itself, because what
    /// shares the runtime with the loop future is out of the loop's sight: nothing may be
    /// combined with the loop's future in its `block_on` (no `select!` with a signal, no
    /// `tokio::time::timeout` around it), run beside it on a `LocalSet`, or be spawned onto
    /// the runtime from another thread, and loop code must not hand tokio a waker made by
    /// hand (a source of that kind belongs in a slot, which turns this off). Any of those
    /// would wait for the park's deadline, up to `idle_wait`.
    pub fn park_outside_tokio(mut self, on: bool) -> Self {
        self.park_outside_tokio = on;
        self
    }

    /// Promises that nothing on the loop's thread waits on tokio's drivers: no tokio socket,
    /// timer (`tokio::time`) or signal is awaited by `run_until`'s future, a loop task or a
    /// slot handler, and nothing is combined with the loop's future in its `block_on` (see
    /// [`park_outside_tokio`](Self::park_outside_tokio)). Everything the loop waits on is
    /// then its own: posts, task wakes (from any thread: a tokio channel or `Notify` is
    /// fine), its timers, and the sources of the thread's reactor, where the network
    /// backends register their sockets (`epoll`) or their ring (io_uring, driven by the
    /// reactor's turns). The loop then parks in its own wait whenever tokio's clock runs in
    /// real time and the thread's runtime has no task of tokio's own, slot handlers or not,
    /// and an iteration that does not park skips tokio's `yield_now` (it turns the thread's
    /// reactor instead). Off by default; the shard binary turns it on.
    ///
    /// A broken promise is a delay, not a hang: after every tick that fires a timer and
    /// every park that ends at its deadline the loop lets tokio's driver turn once, so what
    /// tokio would have woken waits until then, at most `idle_wait`.
    pub fn owns_its_thread(mut self, on: bool) -> Self {
        self.owns_its_thread = on;
        self
    }

    /// Adds a handler to a phase that takes them ([`Phase::has_slot`]: Network, Deltas,
    /// Flush); handlers of one phase run in the order added.
    ///
    /// # Panics
    /// For a phase the runtime runs itself (Timers, Tasks, Posted, and the parts of the wall
    /// time that are not phases of an iteration).
    #[track_caller]
    pub fn slot(mut self, phase: Phase, handler: impl FnMut() -> bool + 'static) -> Self {
        assert!(
            phase.has_slot(),
            "EventLoopBuilder::slot: the {phase} phase takes no handlers (only Network, Deltas \
             and Flush do)"
        );
        self.handlers.push(phase, Box::new(handler));
        self
    }

    /// Builds the loop and makes it this thread's loop. Does no I/O. The epoch (tick 0) is
    /// `tokio::time::Instant::now()` at this call (T12).
    ///
    /// # Panics
    /// If the tick is zero.
    pub fn build(self) -> EventLoop {
        assert!(
            !self.tick.is_zero(),
            "EventLoopBuilder::tick must be greater than zero (the default is 8 ms)"
        );
        let epoch = Instant::now();
        let health = Health::new(
            epoch,
            self.late_wake_threshold,
            self.late_wake_percent,
            self.idle_wait.is_zero(),
        );
        let core = Core::new(
            Clock {
                epoch,
                tick: self.tick,
            },
            health,
            self.park_outside_tokio,
        );
        // Thread wake-ups count from here (stats are read on this, the loop's, thread).
        core.counters
            .switches_at_build
            .set(thread_wakes::voluntary_switches());
        install(&core);
        fault::install_site_hook();
        EventLoop {
            core,
            broken: None,
            idle_wait: self.idle_wait,
            probe_host: self.probe_host,
            spin: Spin::new(self.spin_before_park),
            park_outside_tokio: self.park_outside_tokio,
            owns_its_thread: self.owns_its_thread,
            tokio_turn_owed: false,
            wakes_seen: 0,
            handlers: self.handlers,
            posted: VecDeque::new(),
            park: Park::default(),
            idle_part: Phase::Sleep,
            iteration_began: epoch,
            posts_waiting: false,
            last_sleep: None,
        }
    }
}

/// The game loop. Build one per thread, then `run()` or `run_until(..)` it on a
/// current-thread tokio runtime (`enable_all`).
pub struct EventLoop {
    core: Rc<Core>,
    /// A panic escaped a phase: the loop never iterates again.
    broken: Option<Fault>,
    idle_wait: Duration,
    probe_host: Option<Probe>,
    /// The spin before parking: its window and whether it pays (see `spin.rs`).
    spin: Spin,
    /// [`EventLoopBuilder::park_outside_tokio`].
    park_outside_tokio: bool,
    /// [`EventLoopBuilder::owns_its_thread`].
    owns_its_thread: bool,
    /// A tick fired or a park ended at its deadline since tokio's driver last turned: under
    /// [`EventLoopBuilder::owns_its_thread`] the loop yields to tokio once before it next
    /// idles, so that a broken promise (a tokio timer or socket awaited on the loop thread)
    /// is delayed to the next tick or deadline, at most `idle_wait`, never hung.
    tokio_turn_owed: bool,
    /// `wakes_issued` when the loop last looked: a change means an outside event came.
    wakes_seen: u64,
    handlers: Slots,
    posted: VecDeque<Posted>,
    park: Park,
    /// What the time since the last iteration was, for the profile: a park, or a poll of the
    /// reactors (the thread's own, and tokio's unless the loop owns its thread).
    idle_part: Phase,
    /// The clock reading the current iteration began with: the park's own reading, minus
    /// this, is what the iteration worked (no clock read of its own).
    iteration_began: Instant,
    /// The signal said the post queue was pushed to, and the loop has not emptied it since:
    /// the Posted phase takes the queue's lock only while this is set.
    posts_waiting: bool,
    /// The last park, not yet given to the health record (that is done at the end of the
    /// iteration the park's wake started).
    last_sleep: Option<SleepRecord>,
}

/// One park, as the health record takes it.
#[derive(Clone, Copy)]
struct SleepRecord {
    late: bool,
    asked: Duration,
    overshoot: Duration,
}

impl fmt::Debug for EventLoop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventLoop")
            .field("tick", &self.core.clock.tick)
            .field("idle_wait", &self.idle_wait)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for EventLoop {
    fn default() -> Self {
        Self::new()
    }
}

impl EventLoop {
    /// A loop with the default settings.
    pub fn new() -> EventLoop {
        Self::builder().build()
    }

    /// A builder with the defaults (the configuration's: 8 ms tick, 1 s idle wait, ...): set
    /// what differs, then [`build`](EventLoopBuilder::build).
    pub fn builder() -> EventLoopBuilder {
        EventLoopBuilder::default()
    }

    /// A handle for other threads (and for shutdown).
    #[must_use]
    pub fn context(&self) -> LoopContext {
        LoopContext {
            shared: self.core.shared.clone(),
        }
    }

    /// The production counters since the loop was built (also `runtime::stats()` on the
    /// loop thread).
    #[must_use]
    pub fn stats(&self) -> LoopStats {
        self.core.stats()
    }

    /// The wheel lags recorded since the previous call (also `runtime::take_lag_window()`).
    pub fn take_lag_window(&mut self) -> LagHistogram {
        self.core.counters.lag_window.take()
    }

    /// Runs the loop until [`LoopContext::shutdown`], then runs what was already posted and
    /// returns. Timers and tasks stay for a later `run_until`.
    ///
    /// # Panics
    /// If a panic escapes a phase (see [`EventLoop::try_run_until`]): this one says where.
    pub async fn run(&mut self) {
        let ran = unconstrained(self.run_inner(std::future::pending::<()>(), true)).await;
        if let Err(fault) = ran {
            panic!("{fault}");
        }
        // Accepted before shutdown: delivered, not lost, and in the order they were posted —
        // what the loop already took from the shared queue was posted before what is still in it.
        let mut rest = std::mem::take(&mut self.posted);
        rest.extend(self.core.shared.clear_posted());
        for job in rest {
            self.run_posted_job(job);
        }
    }

    /// Runs the loop until `future` completes — at the end of that iteration (L3) — and
    /// returns its output. `future` runs on the loop like a task and may be `!Send`.
    ///
    /// # Panics
    /// If a panic escapes a phase (see [`EventLoop::try_run_until`]): this one says where.
    pub async fn run_until<F: Future>(&mut self, future: F) -> F::Output {
        match self.try_run_until(future).await {
            Ok(output) => output,
            Err(fault) => panic!("{fault}"),
        }
    }

    /// [`EventLoop::run_until`], except that a panic escaping a phase (outside the guarded
    /// callbacks, tasks and posts) ends it with a [`Fault::Panic`] naming the phase, the
    /// message and the site, instead of unwinding through the caller. The loop then stops
    /// for good: `future` is dropped, and every later run returns the same fault at once.
    /// What the loop's state is worth after that is the caller's call (the shard saves the
    /// world as the panic left it, and stops).
    pub async fn try_run_until<F: Future>(&mut self, future: F) -> Result<F::Output, Fault> {
        match unconstrained(self.run_inner(future, false)).await? {
            Some(output) => Ok(output),
            None => unreachable!("run_inner only stops early when asked to stop on shutdown"),
        }
    }

    /// The fault that stopped this loop for good, if one did.
    #[must_use]
    pub fn fault(&self) -> Option<&Fault> {
        self.broken.as_ref()
    }

    /// Iterates until `future` completes or, with `until_closed`, the loop is shut down.
    ///
    /// Callers run it `unconstrained`: tokio's cooperative budget (128 resource polls per
    /// task poll) would otherwise start failing the socket polls of the Network and Flush
    /// phases part-way through an iteration with artificial `Pending`s. The loop needs no
    /// such push: it hands control back to tokio at the end of every iteration, and bounds
    /// each phase itself.
    async fn run_inner<F: Future>(
        &mut self,
        future: F,
        until_closed: bool,
    ) -> Result<Option<F::Output>, Fault> {
        if let Some(fault) = &self.broken {
            return Err(fault.clone());
        }
        if let Some(probe) = self.probe_host.take()
            && !probe(self.core.clock.tick)
        {
            self.core.health.borrow_mut().set_unsupported();
        }
        install(&self.core);
        let mut future = pin!(future);
        let root = RootWaker::new(self.core.shared.clone());
        let root_waker = Waker::from(root.clone());
        self.core.executor.schedule_root();
        loop {
            let mut output = None;
            let iterated = self.iterate(&mut || {
                let mut cx = Context::from_waker(&root_waker);
                if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                    output = Some(out);
                }
            });
            let pending = match iterated {
                Ok(pending) => pending,
                Err(fault) => {
                    self.core.shared.set_running(false);
                    self.park.disarm();
                    self.broken = Some(fault.clone());
                    return Err(fault);
                }
            };
            if output.is_some() || (until_closed && self.core.shared.is_closed()) {
                self.core.shared.set_running(false);
                self.park.disarm();
                return Ok(output);
            }
            // The root's own count and `root_waker`'s: a third is a clone held elsewhere.
            let root_lent = Arc::strong_count(&root) > 2;
            self.idle_part = self.idle(pending, root_lent).await;
        }
    }

    /// One iteration of the phases. Returns true if work is left pending, or the fault of a
    /// panic that escaped a phase (the phases after it did not run).
    fn iterate(&mut self, poll_root: &mut dyn FnMut()) -> Result<bool, Fault> {
        let core = self.core.clone();
        core.shared.set_running(true);
        Counters::bump(&core.counters.totals.iterations);
        // Anything pushed from now on raises the signal again, so nothing is missed. A queue
        // whose bit was down is not looked at (its lock not taken) in this iteration.
        let signalled = core.shared.take_signal();
        self.posts_waiting |= signalled.posted();
        if PROFILING {
            core.profile
                .iteration_start(self.idle_part, || core.stats());
        }
        // What a profiled phase does at its end: one clock read. A phase that found nothing
        // to run (no tick due, no ready task, no posted closure) skips it: the time it took
        // to look (a wheel poll, which may move a level's timers down one level; two queue
        // checks) goes to the next phase, and the iteration costs a read less.
        let end = |part: Phase, ran: bool| {
            if PROFILING && ran {
                core.profile.phase_end(part);
            }
        };
        let now = Instant::now();
        self.iteration_began = now;

        let timers = self.guarded(Phase::Timers, |this| this.run_timers(now));
        core.wake_time.set(None);
        let fired = timers?;
        self.tokio_turn_owed |= fired;
        core.logical_now.set(now);
        end(Phase::Timers, fired);

        let mut pending = false;
        if !self.handlers.network.is_empty() {
            pending |= self.guarded(Phase::Network, |this| this.run_slot(Phase::Network))?;
            end(Phase::Network, true);
        }
        // No task ready and no wake from another thread: the phase would find nothing, so it
        // is not entered (a wake that only brings a post goes straight on to Posted, without
        // the phase's code and the profile's lines that it would touch to poll nothing).
        if signalled.remote() || core.executor.has_ready() {
            let polled = self.guarded(Phase::Tasks, |_| {
                core.executor
                    .run_ready(&core, poll_root, signalled.remote())
            })?;
            end(Phase::Tasks, polled);
        }
        let posted = self.guarded(Phase::Posted, Self::run_posted)?;
        pending |= posted.pending;
        end(Phase::Posted, posted.ran > 0);
        if !self.handlers.deltas.is_empty() || core.faults.panic_injected() {
            pending |= self.guarded(Phase::Deltas, |this| {
                if this.core.faults.take_injected_panic() {
                    panic!("{INJECTED_PANIC}");
                }
                this.run_slot(Phase::Deltas)
            })?;
            end(Phase::Deltas, true);
        }
        if !self.handlers.flush.is_empty() {
            pending |= self.guarded(Phase::Flush, |this| this.run_slot(Phase::Flush))?;
            end(Phase::Flush, true);
        }

        self.guarded(Phase::Sleep, |this| {
            let mut health = this.core.health.borrow_mut();
            // The park's record, kept until the work its wake brought was done (see `idle`).
            if let Some(sleep) = this.last_sleep.take() {
                health.record_sleep(sleep.late, sleep.asked, sleep.overshoot);
            }
            health.sample(now)
        })?;
        Ok(pending
            || self.posts_waiting
            || core.executor.has_ready()
            || core.shared.queues_signalled())
    }

    /// Runs one phase; a panic that escapes it becomes the loop's [`Fault`], logged with its
    /// site and counted.
    fn guarded<T>(&mut self, phase: Phase, run: impl FnOnce(&mut Self) -> T) -> Result<T, Fault> {
        self.core.shared.now().enter(Some(phase));
        catch(|| run(self)).map_err(|message| {
            self.core.counters.count_panic();
            let fault = Fault::Panic {
                phase,
                message,
                site: fault::take_site(),
            };
            tracing::error!("{fault}; the loop stops");
            fault
        })
    }

    /// Phase 1: every tick boundary up to the clock reading, in order, in one pass. True if
    /// a tick fired.
    fn run_timers(&mut self, now: Instant) -> bool {
        let core = &*self.core;
        let clock = core.clock;
        let target = clock.tick_at(now);
        let mut current_tick = None;
        // Each callback's time runs from the previous clock read to the next (see profile).
        // Without the profile it is never read: the stored mark costs no clock read.
        let mut since = core.profile.mark();
        let mut save_before = core.profile.save_total();
        loop {
            let expired = {
                let mut wheel = core.wheel.borrow_mut();
                let expired = wheel.poll(target);
                // Many pauses of one tick wake as many cold tasks: start loading one a few
                // entries on now, so its block is in cache when its wake comes.
                if let Some(later) = wheel.upcoming(PREFETCH_AHEAD) {
                    later.prefetch();
                }
                expired
            };
            let Some(expired) = expired else { break };
            if current_tick != Some(expired.tick) {
                current_tick = Some(expired.tick);
                let boundary = clock.boundary(expired.tick);
                core.logical_now.set(boundary);
                core.wake_time.set(Some(boundary));
                self.account_tick(boundary);
            }
            let ran = fire(core, expired.key);
            if PROFILING && let Some(site) = ran {
                core.profile
                    .ran(Kind::Timer, &mut since, &mut save_before, Site::from(site));
            }
        }
        current_tick.is_some()
    }

    fn account_tick(&self, boundary: Instant) {
        let c = &self.core.counters;
        Counters::bump(&c.totals.ticks_fired);
        let lag = Instant::now().saturating_duration_since(boundary);
        let tick = self.core.clock.tick;
        if lag >= tick {
            Counters::bump(&c.totals.late_ticks);
        }
        if lag >= tick * 2 {
            Counters::bump(&c.totals.very_late_ticks);
        }
        if lag > c.totals.max_wheel_lag.get() {
            c.totals.max_wheel_lag.set(lag);
        }
        if PROFILING {
            self.core.profile.lagged(lag);
        }
        c.record_lag(lag);
    }

    fn run_slot(&mut self, phase: Phase) -> bool {
        let mut pending = false;
        for handler in self.handlers.of(phase) {
            pending |= handler();
        }
        pending
    }

    /// Phase 4: posted closures, FIFO, at most [`POSTED_PER_ITERATION`].
    fn run_posted(&mut self) -> PostedRun {
        if self.posted.is_empty() && self.posts_waiting {
            let (taken, more) = self
                .core
                .shared
                .take_posted(&mut self.posted, POSTED_PER_ITERATION);
            self.posts_waiting = more;
            Counters::add(&self.core.counters.totals.posts, taken);
        }
        let profile = &self.core.profile;
        let mut since = profile.mark(); // read only with the profile (see run_timers)
        let mut save_before = profile.save_total();
        let mut ran = 0;
        while ran < POSTED_PER_ITERATION {
            let Some(job) = self.posted.pop_front() else {
                break;
            };
            ran += 1;
            let site = self.run_posted_job(job);
            if PROFILING {
                profile.ran(Kind::Posted, &mut since, &mut save_before, Site::from(site));
            }
        }
        PostedRun {
            ran,
            pending: !self.posted.is_empty() || self.posts_waiting,
        }
    }

    /// Runs one posted closure; returns where it was posted.
    fn run_posted_job(&self, job: Posted) -> &'static std::panic::Location<'static> {
        let site = job.site();
        let now = self.core.shared.now();
        now.run(Doing::Posted(site));
        let ran = catch(|| job.run());
        now.run(Doing::Nothing);
        if let Err(why) = ran {
            self.core.counters.count_panic();
            tracing::error!(posted_at = %site, "a posted closure panicked: {why}; the loop goes on");
        }
        site
    }

    /// Phase 7: park until the next due boundary (capped by `idle_wait`) or a notify — or,
    /// with work pending or sleeping off, just let tokio run its reactor once. Returns which
    /// of the two it was, as a profile part.
    async fn idle(&mut self, pending: bool, root_lent: bool) -> Phase {
        let core = self.core.clone();
        let now = Instant::now();
        let worked = now.saturating_duration_since(self.iteration_began);
        core.counters.record_iteration(worked);
        if PROFILING {
            core.profile.iterated(worked);
        }
        let spinning = self.in_spin_window();
        let tokio_unused = self.tokio_unused();
        if pending
            || spinning
            || self.idle_wait.is_zero()
            || !core.health.borrow_mut().may_sleep(now)
        {
            core.shared.set_running(false);
            // The thread's reactor first: its sockets are not tokio's to turn.
            self.park.turn_now(&core.shared);
            if !tokio_unused || std::mem::take(&mut self.tokio_turn_owed) {
                tokio::task::yield_now().await;
            }
            return Phase::Network;
        }
        let next_due = core
            .wheel
            .borrow()
            .next_due()
            .map(|t| core.clock.boundary(t));
        let cap = now
            .checked_add(self.idle_wait)
            .unwrap_or(now + Duration::from_secs(86_400 * 365));
        let deadline = next_due.map_or(cap, |due| due.min(cap));
        if deadline <= now {
            return Phase::Network;
        }
        Counters::bump(&core.counters.totals.sleeps);
        core.shared.set_running(false);
        if tokio_unused && std::mem::take(&mut self.tokio_turn_owed) {
            // Once per fired tick or deadline: see `tokio_turn_owed`.
            tokio::task::yield_now().await;
        }
        let outside_tokio = tokio_unused
            || (self.park_outside_tokio
                && !root_lent
                && self.tokio_not_needed()
                && !park::clock_may_be_paused());
        let woken = self.park.wait(&core.shared, deadline, outside_tokio).await;
        self.tokio_turn_owed |= woken == Woken::Deadline;
        let overshoot = match woken {
            Woken::Deadline => Instant::now().saturating_duration_since(deadline),
            Woken::Notified => Duration::ZERO,
        };
        let late = overshoot >= core.clock.tick;
        if late {
            Counters::bump(&core.counters.totals.late_wakes);
        }
        // A park a notify ended has no overshoot, and the record keeps the largest.
        if PROFILING && !overshoot.is_zero() {
            core.profile.slept(overshoot);
        }
        // Recorded at the end of the iteration this wake starts, with the health sample that
        // reads it: the health record is cold after a park, and a post should not wait for it.
        self.last_sleep = Some(SleepRecord {
            late,
            asked: deadline.saturating_duration_since(now),
            overshoot,
        });
        Phase::Sleep
    }

    /// Tests: the parks taken in the loop's own wait so far.
    #[cfg(test)]
    pub(crate) fn own_parks(&self) -> u64 {
        self.park.own_parks
    }

    /// Whether tokio has nothing to do on this thread meanwhile, as far as the loop can tell
    /// under [`EventLoopBuilder::owns_its_thread`]'s promise: its clock runs in real time (a
    /// paused clock moves only in tokio's park) and the thread's runtime has no task of its
    /// own.
    fn tokio_unused(&self) -> bool {
        self.owns_its_thread && !park::clock_may_be_paused() && no_tokio_task_here()
    }

    /// Whether nothing the loop can see needs tokio's reactor while it parks (with
    /// `run_until`'s waker held by nobody else and tokio's clock running in real time, which
    /// the caller checks): no slot handlers, no task waker held outside the loop, and no task
    /// of tokio's own on this thread's current-thread runtime. See
    /// [`EventLoopBuilder::park_outside_tokio`].
    fn tokio_not_needed(&self) -> bool {
        self.handlers.len() == 0 && self.core.shared.task_wakers_out() == 0 && no_tokio_task_here()
    }

    /// Whether to keep polling instead of parking: asks the spin rule (`spin.rs`), telling it
    /// whether an outside event woke the loop since it last looked (see
    /// [`EventLoopBuilder::spin_before_park`]).
    fn in_spin_window(&mut self) -> bool {
        if !self.spin.configured() {
            return false;
        }
        let wakes = self.core.shared.wakes_issued_total();
        let event = wakes != self.wakes_seen;
        self.wakes_seen = wakes;
        self.spin.keep_polling(std::time::Instant::now(), event)
    }
}

/// Whether this thread's tokio runtime is a current-thread one with no task of its own.
fn no_tokio_task_here() -> bool {
    tokio::runtime::Handle::try_current().is_ok_and(|rt| {
        rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread
            && rt.metrics().num_alive_tasks() == 0
    })
}

impl Drop for EventLoop {
    fn drop(&mut self) {
        self.core.shared.close();
        // Posts never run are dropped one by one: a capture that panics in its own `Drop`
        // must not skip the rest of this drop (the loop would stay installed as the thread's
        // loop, with its tasks alive). The first such panic is raised again once the loop is
        // taken down, unless the thread is unwinding already.
        let mut first_panic = None;
        let unrun = self.core.shared.clear_posted();
        for job in unrun.into_iter().chain(self.posted.drain(..)) {
            if let Err(why) = catch(|| drop(job)) {
                first_panic.get_or_insert(why);
            }
        }
        // Tasks are dropped while the loop is still this thread's loop: their pauses and
        // timers clean up after themselves.
        self.core.executor.clear();
        self.core.shared.close_remote_wakes();
        uninstall(&self.core);
        if let Some(why) = first_panic
            && !std::thread::panicking()
        {
            std::panic::resume_unwind(Box::new(why));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Runs `run` on a thread of its own, on a current-thread runtime of its own with nothing
    /// else on it (what `park_outside_tokio` asks for), and fails if it takes over 30 s: a
    /// loop parked in its own wait when it should not be would sleep through what it awaits
    /// (an hour's `idle_wait` in these tests). A tokio timeout around the loop could not
    /// tell: its timer is tokio's.
    fn alone<R, Fut>(run: impl FnOnce() -> Fut + Send + 'static) -> R
    where
        R: Send + 'static,
        Fut: Future<Output = R>,
    {
        let (done, result) = mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let _ = done.send(rt.block_on(run()));
        });
        result
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the loop ended within 30 s")
    }

    /// A loop allowed its own wait parked in it at least `wakes` times; one not allowed, never.
    fn assert_own_parks(allowed: bool, own_parks: u64, wakes: u64) {
        if allowed {
            assert!(own_parks >= wakes, "parked outside tokio {own_parks} times");
        } else {
            assert_eq!(own_parks, 0);
        }
    }

    fn outside(on: bool) -> EventLoopBuilder {
        EventLoop::builder()
            .idle_wait(Duration::from_secs(3_600))
            .spin_before_park(Duration::ZERO)
            .park_outside_tokio(on)
    }

    /// Posts a loop never ran — it was dropped with them queued — drop their captures once
    /// each, whether stored in the queue's entry or boxed (too big for it), and never run.
    #[tokio::test(start_paused = true)]
    async fn posts_never_run_are_dropped_once_with_the_loop() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Counted(Arc<AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (ran, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let el = EventLoop::new();
        let ctx = el.context();
        let (r, counted) = (ran.clone(), Counted(dropped.clone()));
        ctx.post(move || {
            let _keep = &counted;
            r.fetch_add(1, Ordering::SeqCst);
        })
        .expect("the loop is alive");
        let (r, counted, ballast) = (ran.clone(), Counted(dropped.clone()), [1u8; 64]);
        ctx.post(move || {
            let _keep = &counted;
            r.fetch_add(ballast.len(), Ordering::SeqCst);
        })
        .expect("the loop is alive");
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "queued, not dropped");
        drop(el);
        assert_eq!(ran.load(Ordering::SeqCst), 0, "never run");
        assert_eq!(dropped.load(Ordering::SeqCst), 2, "each dropped once");
        assert_eq!(ctx.post(|| {}), Err(super::super::LoopClosed));
    }

    #[test]
    fn a_post_whose_capture_panics_in_drop_does_not_keep_the_dropped_loop_installed() {
        use std::sync::Arc;
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("a capture's drop panicked");
            }
        }
        let later = Arc::new(());
        let el = EventLoop::new();
        let ctx = el.context();
        let bomb = Bomb;
        ctx.post(move || drop(bomb)).expect("the loop is alive");
        let held = later.clone();
        ctx.post(move || drop(held)).expect("the loop is alive");
        assert!(
            LoopContext::try_current().is_some(),
            "installed while alive"
        );
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(el)));
        let payload = dropped.expect_err("the capture's panic is raised again");
        assert_eq!(
            crate::runtime::panic::panic_text(&*payload),
            "a capture's drop panicked"
        );
        assert!(
            LoopContext::try_current().is_none(),
            "the loop was taken down despite the panic"
        );
        assert_eq!(
            Arc::strong_count(&later),
            1,
            "the post after it was dropped too"
        );
    }

    /// Five posts to a bare loop that may park outside tokio: each wakes it from its own
    /// wait; with the option off, no park is its own.
    #[test]
    fn posts_wake_a_loop_parked_in_its_own_wait() {
        for on in [true, false] {
            let (ran, own_parks) = alone(move || async move {
                let mut el = outside(on).build();
                let ctx = el.context();
                let poster = std::thread::spawn(move || {
                    let (tx, rx) = mpsc::channel();
                    for _ in 0..5 {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        let tx = tx.clone();
                        ctx.post(move || tx.send(()).expect("waiting"))
                            .expect("running");
                        rx.recv().expect("the post ran");
                    }
                    ctx.shutdown();
                });
                el.run().await;
                poster.join().expect("poster");
                (el.stats().posts, el.park.own_parks)
            });
            assert_eq!(ran, 5);
            assert_own_parks(on, own_parks, 5);
        }
    }

    /// What the loop can see needs tokio keeps the park in tokio, and what it awaits wakes it
    /// (else each would sleep for the hour and fail the 30 s bound): a task's waker held by a
    /// tokio timer, `run_until`'s own waker held by one, and a task of tokio's own on the
    /// runtime (which ends the loop when its timer fires).
    #[test]
    fn the_park_stays_in_tokio_while_tokio_holds_a_loop_waker_or_runs_a_task() {
        let own_parks = alone(|| async {
            let mut parks = Vec::new();
            // A task's waker, held by a tokio timer.
            let mut el = outside(true).build();
            let ctx = el.context();
            drop(crate::runtime::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                ctx.shutdown();
            }));
            el.run().await;
            parks.push(el.park.own_parks);
            drop(el);
            // `run_until`'s waker, held by a tokio timer.
            let mut el = outside(true).build();
            el.run_until(tokio::time::sleep(Duration::from_millis(50)))
                .await;
            parks.push(el.park.own_parks);
            drop(el);
            // A task of tokio's own.
            let mut el = outside(true).build();
            let ctx = el.context();
            let tokio_task = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                ctx.shutdown();
            });
            el.run().await;
            tokio_task.await.expect("tokio's task");
            parks.push(el.park.own_parks);
            parks
        });
        assert_eq!(own_parks, [0, 0, 0]);
    }

    /// Clones of task wakers are counted only by a loop that may park outside tokio (the
    /// count's one reader): there a clone held by a tokio timer reads 1 while the task waits
    /// and 0 once the timer has woken it and let go; a loop without the option counts nothing.
    #[test]
    fn task_wakers_are_counted_only_by_a_loop_that_may_park_outside_tokio() {
        for on in [true, false] {
            let (waiting, after) = alone(move || async move {
                let mut el = outside(on).build();
                let shared = el.core.shared.clone();
                let (tx, rx) = std::sync::mpsc::channel();
                let task = crate::runtime::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    tx.send(()).expect("the root waits");
                });
                let seen = shared.clone();
                let waiting = el
                    .run_until(async move {
                        // Loop time: parks in tokio (the clone is out), not in the task's way.
                        crate::timer::pause_for(Duration::from_millis(30)).await;
                        seen.task_wakers_out()
                    })
                    .await;
                el.run_until(task).await.expect("the task finished");
                rx.recv().expect("the task ran");
                (waiting, shared.task_wakers_out())
            });
            assert_eq!(
                waiting,
                usize::from(on),
                "clones out while the task waits (on: {on})"
            );
            assert_eq!(after, 0, "none once the timer let go (on: {on})");
        }
    }

    /// A slot handler's sources are tokio's (sockets, the ring): a loop with one never parks
    /// outside tokio.
    #[test]
    fn a_loop_with_a_slot_handler_parks_in_tokio() {
        let own_parks = alone(|| async {
            let mut el = outside(true).slot(Phase::Network, || false).build();
            let ctx = el.context();
            let poster = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                ctx.post(|| {}).expect("running");
                std::thread::sleep(std::time::Duration::from_millis(20));
                ctx.shutdown();
            });
            el.run().await;
            poster.join().expect("poster");
            el.park.own_parks
        });
        assert_eq!(own_parks, 0);
    }

    /// A socket of the thread's reactor wakes the loop, in its own wait under the promise
    /// that it owns its thread (slot handlers and all), through tokio's park otherwise: a
    /// Network slot echoes each of 20 pings, each sent to a parked loop (an hour's park:
    /// a lost wake fails the 30 s bound).
    #[test]
    fn a_socket_of_the_threads_reactor_wakes_the_loop_in_either_park() {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        use std::sync::Arc;
        use std::task::Wake;

        struct WakeLoop(LoopContext);
        impl Wake for WakeLoop {
            fn wake(self: Arc<Self>) {
                self.0.wake();
            }
        }
        for owns in [true, false] {
            let (echoed, own_parks) = alone(move || async move {
                let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
                let addr = listener.local_addr().expect("addr");
                let client = std::thread::spawn(move || {
                    let mut socket = std::net::TcpStream::connect(addr).expect("connect");
                    let mut byte = [0u8; 1];
                    for i in 0..20u8 {
                        // Long enough for the loop to park between pings.
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        socket.write_all(&[i]).expect("ping");
                        socket.read_exact(&mut byte).expect("echo");
                        assert_eq!(byte[0], i);
                    }
                    20
                });
                let (server, _) = listener.accept().expect("accept");
                server.set_nonblocking(true).expect("non-blocking");
                let cell = Rc::new(std::cell::RefCell::new(None));
                let slot_cell = cell.clone();
                let server_fd = server.as_raw_fd();
                let echoed = Rc::new(std::cell::RefCell::new(0));
                let counted = echoed.clone();
                let mut el = EventLoop::builder()
                    .idle_wait(Duration::from_secs(3_600))
                    .spin_before_park(Duration::ZERO)
                    .owns_its_thread(owns)
                    .slot(Phase::Network, move || {
                        let cell = slot_cell.borrow();
                        let Some(reg) = cell.as_ref() else {
                            return false;
                        };
                        let reg: &crate::runtime::reactor::Registration = reg;
                        if reg.readable() {
                            let mut byte = [0u8; 1];
                            // SAFETY: reads one byte into a live buffer from an open socket.
                            let n =
                                unsafe { libc::recv(server_fd, byte.as_mut_ptr().cast(), 1, 0) };
                            if n == 1 {
                                // SAFETY: sends one byte from a live buffer on an open socket.
                                unsafe { libc::send(server_fd, byte.as_ptr().cast(), 1, 0) };
                                *counted.borrow_mut() += 1;
                                if *counted.borrow() == 20 {
                                    crate::LoopContext::current().shutdown();
                                }
                                return true;
                            }
                            reg.clear_readable();
                        }
                        false
                    })
                    .build();
                let waker = std::task::Waker::from(Arc::new(WakeLoop(el.context())));
                let reactor = crate::runtime::reactor::Reactor::for_this_thread().expect("reactor");
                *cell.borrow_mut() = Some(reactor.register(server_fd, waker).expect("register"));
                el.run().await;
                assert_eq!(client.join().expect("client"), 20);
                let echoed = *echoed.borrow();
                // The registration leaves the epoll before its socket closes.
                drop(cell.borrow_mut().take());
                drop(server);
                (echoed, el.park.own_parks)
            });
            assert_eq!(echoed, 20);
            assert_own_parks(owns, own_parks, 20);
        }
    }

    /// A loop that owns its thread still lets tokio's driver turn after a park that ended at
    /// its deadline: a tokio timer awaited against the promise ends late (at the 300 ms
    /// deadline), not never (it would hang past the 30 s bound).
    #[test]
    fn a_broken_promise_to_own_the_thread_is_a_delay_not_a_hang() {
        let (took, own_parks) = alone(|| async {
            let mut el = EventLoop::builder()
                .idle_wait(Duration::from_millis(300))
                .spin_before_park(Duration::ZERO)
                .owns_its_thread(true)
                .build();
            let began = std::time::Instant::now();
            el.run_until(tokio::time::sleep(Duration::from_millis(50)))
                .await;
            (began.elapsed(), el.park.own_parks)
        });
        assert!(own_parks >= 1, "parked in its own wait");
        assert!(took >= std::time::Duration::from_millis(50), "{took:?}");
    }

    /// Only tokio's park advances a paused clock: with it paused, the loop parks in tokio
    /// (and the hour-long park ends at once, auto-advanced, at its due timer).
    #[tokio::test(start_paused = true)]
    async fn a_paused_clock_keeps_the_park_in_tokio() {
        let mut el = outside(true).build();
        el.run_until(crate::timer::pause_for(Duration::from_secs(600)))
            .await;
        assert!(el.stats().sleeps >= 1);
        assert_eq!(el.park.own_parks, 0);
    }
}
