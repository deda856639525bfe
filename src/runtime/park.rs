//! The idle park: how the loop blocks when every queue is empty.
//!
//! tokio's own park cannot be replaced, so parking is the loop future returning `Pending`
//! with one deadline armed on the timer that can end it:
//! - a `timerfd` (CLOCK_MONOTONIC) in an `AsyncFd`, always: it wakes within microseconds,
//!   where tokio's sleep is rounded up to whole milliseconds and so wakes ~1 ms late;
//! - a tokio `Sleep` at the same deadline, only while tokio's clock may be paused (or when
//!   there is no timerfd): it is the only timer tokio's paused test clock knows how to
//!   auto-advance to, so `#[tokio::test(start_paused = true)]` runs at the exact boundary.
//!
//! In real time the tokio `Sleep` would be pure cost: the timerfd always ends the park first,
//! and the `Sleep`, still in tokio's timer wheel, made tokio's driver wake the thread once or
//! twice more for nothing (to move it down the wheel's levels, then at its rounded instant) —
//! up to three thread wake-ups per park where one does the work (docs/performance.md). So each park first asks whether the clock moves: two readings of
//! tokio's clock in a row differ in real time (a nanosecond clock), and are equal when it is
//! paused (a paused clock moves only inside tokio's park). Equal readings arm the `Sleep`
//! too, which is always correct, only dearer; so a coarse host clock costs a wake-up, never
//! a hang. The `Sleep` lives in the park's own future (no allocation) and leaves tokio's wheel
//! when the park returns, so it never outlives the deadline it was armed for.
//!
//! Whichever fires first ends the park; so does a notify from another thread (a post or a
//! cross-thread task wake). A park ended by the timerfd has consumed its one expiry; one ended
//! otherwise leaves the timerfd armed, which costs nothing: the next park keeps it when its
//! deadline is the same (an expiry that came in between then ends that park at once, as it
//! should) and re-arms it otherwise (which also forgets such an expiry) before the thread can
//! block again, and [`Park::disarm`] stops it when the loop stops running.
//!
//! **Timer slack.** The kernel lets a normal thread's timed sleeps run up to its timer slack
//! late (50 µs by default) so that it can batch wake-ups. The park's first call sets the loop
//! thread's slack to 1 ns (`PR_SET_TIMERSLACK`): the loop's deadlines are tick boundaries the
//! game sees, so it gives up that batching for itself, and only for itself (the setting is
//! per thread). Measured in `examples/wake_latency` (docs/performance.md, issue 36).
//!
//! **Waking a parked loop** (a post, a cross-thread task wake, a shutdown) goes through the
//! loop future's waker ([`Shared::notify`]): the loop future is tokio's `block_on` future, so
//! the waker is tokio's unpark, one `eventfd` write that ends tokio's `epoll_wait` (no task
//! hop). In general the park cannot block outside tokio: any tokio timer or socket a game
//! awaits on the loop thread is registered with tokio's reactor,
//! whose epoll descriptor tokio does not expose; tokio's
//! timers are not descriptors at all (its driver turns its own wheel into the `epoll_wait`
//! timeout), and no stable tokio API says whether a timer is pending, so a loop task awaiting
//! `tokio::time::sleep` would sleep through it (`l2_a_task_awaiting_a_tokio_timer_wakes_…` in
//! `tests/loop_rules.rs`). A doorbell of the loop's own *in* tokio's reactor (an `eventfd`
//! rung directly by the posting thread) was built and measured: no faster, since tokio's
//! wake path is still all there (docs/performance.md, "wake latency").
//!
//! **The own wait** (`EventLoopBuilder::park_outside_tokio`, off by default) is the narrow
//! case where blocking outside tokio is safe: the loop's own `epoll` with a timerfd for the
//! deadline and a doorbell `eventfd` that the waker slot rings (the slot holds the doorbell's
//! waker instead of tokio's). A post then costs the producer one `eventfd` write and the loop
//! one return from `epoll_wait`, the `eventfd` floor's whole path. It is taken only when
//! (a) tokio's clock runs in real time (a paused clock advances only in tokio's park), and the
//! loop sees nothing that needs tokio's reactor: (b) no slot handlers (their sources may be
//! tokio's), (c) no waker of `run_until`'s future and (d) no clone of a loop task's waker held
//! outside the loop — whatever a tokio timer, socket or channel would wake, it holds such a
//! waker; the task wakers' clones are counted (`Shared::task_wakers_out`), the root's is
//! its `Arc`'s count — and (e) no task of tokio's own on the thread's current-thread runtime.
//! What it cannot see is whatever shares the runtime with the loop's future from outside: a
//! `select!` or a `timeout` around it, a `LocalSet` beside it, a task spawned onto the
//! runtime from another thread while it blocks, a waker made by hand and handed to tokio.
//! Those hold tokio's own waker, not one of the loop's, and would wait for the park's
//! deadline; hence the opt-in, for a loop that has its runtime to itself. A park that is not
//! outside tokio goes through tokio as below, whatever the option.
//!
//! **The thread's reactor** (`reactor.rs`) is the own wait's `epoll`: the timerfd and the
//! doorbell sit in it beside the sockets the `epoll` network backend registers there (and the
//! io_uring ring's descriptor, the ring driven by every turn), so a packet ends the own wait
//! as a post does, and the wait's one `epoll_wait` hands the packet's
//! readiness over (the turn raises the Network slot's signal without a second wake-up). A
//! park through tokio sees those sockets too: the reactor's descriptor is registered with
//! tokio's reactor, and the park turns the reactor when tokio reports it readable. A loop
//! whose owner promises that nothing on its thread waits on tokio's drivers
//! (`EventLoopBuilder::owns_its_thread`, which the shard binary gives on either backend)
//! takes the own wait under (a) and (e) alone, slots and lent wakers notwithstanding.
//!
//! **Why no wake is lost.** The signal is one word (`context.rs`, `Mailbox::signal`): a bit
//! `NOTIFIED`, and a bit per cross-thread queue (posts, remote task wakes). A producer pushes
//! under the queue's mutex and, after unlocking, raises its queue's bit and `NOTIFIED` in one
//! read-modify-write (`fetch_or`) — or skips the raise when a load finds both already up; if
//! `NOTIFIED` was down before its raise, it then wakes the waker. The loop, at the start of
//! an iteration, takes the whole word in one read-modify-write (`swap(0)`, skipped when a
//! load finds it zero) and drains only the queues whose bits it took (locking the queue);
//! it looks at the word once more at the end of the iteration; to park, it (1) registers its
//! waker and then (2) loads the word, returning `Pending` only if it is zero.
//! - *Raise against take.* Read-modify-writes of one atomic word are totally ordered, and
//!   each reads the value the one before it wrote. If the producer's raise comes first, the
//!   loop's `swap` returns its bit, and (release by the raise, acquire by the swap) the push,
//!   made before the raise, is visible to the drain that follows. If the loop's `swap` comes
//!   first, the raise finds `NOTIFIED` down — unless another producer raised it after the
//!   swap, and that one wakes — and the bit it leaves is taken by the next iteration, which
//!   the wake (or the look before parking) brings. The loop keeps a bit it took until its
//!   drain has emptied the queue (a bounded drain can leave some).
//! - *Skipped raise against take.* A producer that skips has loaded both bits up after its
//!   push. Had the drain that follows the `swap` which took those bits locked the queue
//!   before this push, that `swap` would happen before the producer's load (through the
//!   mutex: drain's unlock, producer's lock), and the load could not return the value from
//!   before it. So the skipped producer's bits are a raise whose drain comes after its push.
//!   (This is the one place where the mutex still orders the signal, as it did for the whole
//!   flag before the bits.)
//! - Lowered with a load and a plain store instead of the `swap`, a raise landing between
//!   the two would be erased: a post raised while the loop takes only the task-wake bit
//!   would wait in its queue with its bit gone, its producer having sent no wake.
//! - *Raise against park.* The waker slot (`wake_slot.rs`) orders a wake with (1) by
//!   read-modify-writes on its one state word: either the wake finds the registered waker and
//!   wakes it, or the registration comes after the wake and (2) reads the word the producer
//!   raised before waking, or the two meet in the slot and the registering side wakes its
//!   own waker. (2) is what closes the race; without it a wake that lands between the end of
//!   the iteration and the park is consumed by a poll that then parks anyway.
//! - The own wait keeps (1) and (2), with the doorbell's waker in the slot: a wake after (2)
//!   finds the doorbell and rings it. The doorbell is edge-triggered in the reactor's `epoll`:
//!   every write queues an event, which stays queued until a turn takes it, and no turn runs
//!   between (2) and the wait's `epoll_wait`; so that call returns whether the ring lands
//!   before it or during it. (A queued event whose count was reset meanwhile is dropped by
//!   the kernel when taken: it re-checks the descriptor.) The count is read (reset) only at
//!   the start of the next own wait, before (1): a ring read there came from a raise that is
//!   either already taken or visible to (2), since the raise comes before the ring and the
//!   ring before the read. Only one park's own wait is in a reactor at a time
//!   (`Reactor::take_for_park`), so no other loop's turn can take its edges; a turn of its
//!   own made outside the wait hands them back (`Park::note_park_events`).
//! - A word seen non-zero at (2) means work the next iteration finds, or one iteration for
//!   nothing, never a post left behind. The loop thread's own pushes inside an iteration
//!   raise the bits but issue no wake: the look at the end of the iteration finds them.
//!
//! `tests/loop_rules.rs` (`l1_no_post_is_lost_…`, and `l1_no_post_or_task_wake_is_lost_…`
//! for both queues at once) hammers this: rounds of four producers posting (or waking a
//! task) at once while the loop parks and wakes, every one to run within 10 s of an
//! hour-long park. With (2) removed both fail; with the word lowered by a load and a plain
//! store instead of the `swap` (the window between them widened by a spin), the second fails
//! (checked by hand; see the tests).
//!
//! This module must never decide *whether* to park or for how long: the loop does.

use std::cell::Cell;
use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};

use tokio::io::unix::AsyncFd;
use tokio::time::{Duration, Instant};

use super::context::Shared;
use super::reactor::{Reactor, Turn};

/// Why a park ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A post, cross-thread wake or shutdown arrived.
    Notified,
    /// The deadline passed.
    Deadline,
}

#[derive(Default)]
pub(crate) struct Park {
    /// The thread's reactor's `epoll` as tokio sees it (declared before `reactor`, so that it
    /// leaves tokio's reactor before the reactor can close it), registered at the first park
    /// through tokio that finds sources in the reactor.
    reactor_in_tokio: Option<AsyncFd<ReactorFd>>,
    /// The thread's reactor, taken at the first park (`None` inside if it could not be made).
    reactor: Option<Option<Rc<Reactor>>>,
    timerfd: Option<AsyncFd<TimerFd>>,
    timerfd_tried: bool,
    /// The deadline the timerfd is armed for, while its expiry is not yet consumed.
    armed_for: Option<Instant>,
    /// The loop's own wait, outside tokio's reactor, once it has been asked for (`None`
    /// inside if it could not be set up: then every park goes through tokio).
    own: Option<Option<OwnWait>>,
    /// Parks that blocked in the own wait (for tests).
    #[cfg(test)]
    pub(crate) own_parks: u64,
    /// Counts this park among its thread's (see `impl Drop for Park`).
    _counted: Counted,
}

thread_local! {
    /// Parks alive on this thread: one per event loop.
    static PARKS: Cell<usize> = const { Cell::new(0) };
}

/// A park's place in [`PARKS`], taken when it is made; `Park`'s drop gives it back.
struct Counted(());

impl Default for Counted {
    fn default() -> Self {
        PARKS.with(|p| p.set(p.get() + 1));
        Counted(())
    }
}

impl Park {
    /// Blocks until `deadline` or a notify, whichever comes first: in the loop's own
    /// `epoll_wait` when `outside_tokio` says nothing on this thread needs tokio's reactor
    /// meanwhile and tokio's clock runs in real time (the loop decides both, see
    /// `EventLoopBuilder::park_outside_tokio` and [`clock_may_be_paused`]); as a future
    /// through tokio's park otherwise.
    pub(crate) async fn wait(
        &mut self,
        shared: &Shared,
        deadline: Instant,
        outside_tokio: bool,
    ) -> Woken {
        if outside_tokio && let Some(own) = self.own_wait() {
            let woken = own.wait(shared, deadline);
            #[cfg(test)]
            {
                self.own_parks += 1;
            }
            return woken;
        }
        if let Some(Some(own)) = &mut self.own {
            // The slot may hold the doorbell's waker now; a ring it takes from here on only
            // ends the next own wait at once, so that wait reads the doorbell first.
            own.rung = true;
        }
        self.wait_in_tokio(shared, deadline).await
    }

    /// The own wait, set up on first use; `None` if it cannot be.
    fn own_wait(&mut self) -> Option<&mut OwnWait> {
        if self.own.is_none() {
            self.ensure_timerfd(); // sets the thread's timer slack too
            let reactor = self.reactor().cloned();
            self.own = Some(reactor.and_then(|r| OwnWait::new(r).ok()));
        }
        self.own.as_mut().and_then(Option::as_mut)
    }

    /// The thread's reactor, taken on first use.
    fn reactor(&mut self) -> Option<&Rc<Reactor>> {
        self.reactor
            .get_or_insert_with(|| Reactor::for_this_thread().ok())
            .as_ref()
    }

    /// The thread's reactor, if any source is registered in it.
    fn reactor_with_sources(&mut self) -> Option<Rc<Reactor>> {
        self.reactor().filter(|r| r.has_sources()).cloned()
    }

    /// Turns the thread's reactor without blocking, when it has sources: for an iteration
    /// that does not park (work is pending), which would otherwise see a socket's readiness
    /// only once it parks.
    pub(crate) fn turn_now(&mut self, shared: &Shared) {
        if let Some(reactor) = self.reactor_with_sources()
            && let Ok(turn) = reactor.turn(0, shared.id)
        {
            self.note_park_events(turn);
        }
    }

    /// Keeps the own wait's state true after a turn made outside it saw the own wait's
    /// descriptors: an expired timer must be armed again even for the same deadline, and a
    /// rung doorbell read before the next own wait.
    fn note_park_events(&mut self, turn: Turn) {
        if let Some(Some(own)) = &mut self.own {
            if turn.timer {
                own.armed_for = None;
            }
            if turn.doorbell {
                own.rung = true;
            }
        }
    }

    /// The reactor's `epoll` registered with tokio's reactor, when the reactor has sources:
    /// a park through tokio then ends when one of them has an event.
    fn reactor_in_tokio(&mut self) -> Option<Rc<Reactor>> {
        let reactor = self.reactor_with_sources()?;
        if self.reactor_in_tokio.is_none() {
            let fd = ReactorFd(reactor.fd());
            // SAFETY: the reactor owns the descriptor, and the park holds the reactor (an
            // `Rc`) for longer than this registration (field order), so it stays open and the
            // same descriptor for as long as tokio has it.
            let registered =
                unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) };
            self.reactor_in_tokio = registered
                .inspect_err(|e| {
                    // Only when two loops with sockets share a thread (one registration per
                    // runtime): this one's parks through tokio then see its sockets only
                    // through the other's turns or its own deadline.
                    tracing::warn!(
                        "cannot register the thread's reactor with tokio's ({e}): \
                         run one loop with sockets per thread"
                    );
                })
                .ok();
        }
        self.reactor_in_tokio.as_ref().map(|_| reactor)
    }

    /// Blocks (as a future) until `deadline` or a notify, whichever comes first.
    async fn wait_in_tokio(&mut self, shared: &Shared, deadline: Instant) -> Woken {
        self.ensure_timerfd();
        let with_sleep = self.timerfd.is_none() || clock_may_be_paused();
        let mut sleep = pin!(with_sleep.then(|| tokio::time::sleep_until(deadline)));
        // A park that a notify ended leaves the timerfd armed; the next park, very often for
        // the same deadline, then needs no system call to arm it again.
        if let Some(fd) = &self.timerfd
            && self.armed_for != Some(deadline)
        {
            // At least 1 ns: a deadline that passed since the loop chose it (the thread was
            // descheduled in between) must expire at once, and a zero delay would disarm.
            let after = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_nanos(1));
            let armed = fd.get_ref().arm(after);
            self.armed_for = armed.is_ok().then_some(deadline);
        }
        let reactor = self.reactor_in_tokio();
        // A driver's queued work reaches the kernel before the thread blocks (the own wait's
        // turn does the same); more than one batch and the loop iterates instead of blocking.
        if let Some(reactor) = &reactor
            && reactor.drive_now(shared.id)
        {
            return Woken::Notified;
        }
        let timerfd = self.timerfd.as_ref();
        let in_tokio = self.reactor_in_tokio.as_ref().filter(|_| reactor.is_some());
        let mut fired = false;
        let mut seen = Turn::default();
        let woken = poll_fn(|cx| {
            if shared.register_and_check(cx.waker()) {
                return Poll::Ready(Woken::Notified);
            }
            if let (Some(reactor), Some(epoll)) = (&reactor, in_tokio) {
                while let Poll::Ready(Ok(mut guard)) = epoll.poll_read_ready(cx) {
                    // Cleared after the turn. An event that comes during it queues a new edge
                    // of the reactor's descriptor in tokio's `epoll`, which tokio's next turn
                    // reports, so the clear loses nothing.
                    let turn = reactor.turn(0, shared.id).unwrap_or_default();
                    guard.clear_ready();
                    seen.timer |= turn.timer;
                    seen.doorbell |= turn.doorbell;
                    if turn.sources > 0 {
                        return Poll::Ready(Woken::Notified);
                    }
                }
            }
            if let Some(sleep) = sleep.as_mut().as_pin_mut()
                && sleep.poll(cx).is_ready()
            {
                return Poll::Ready(Woken::Deadline);
            }
            if let Some(fd) = timerfd {
                while let Poll::Ready(Ok(mut guard)) = fd.poll_read_ready(cx) {
                    let expired = guard.get_inner().expired();
                    // Drained either way: the next park waits for a new edge instead of
                    // finding this readiness and reading the timerfd once more for nothing.
                    guard.clear_ready();
                    if expired {
                        fired = true;
                        return Poll::Ready(Woken::Deadline);
                    }
                }
            }
            Poll::Pending
        })
        .await;
        if fired {
            self.armed_for = None;
        }
        self.note_park_events(seen);
        woken
    }

    /// Stops a timerfd left armed by a park that a notify (or the tokio `Sleep`) ended, so
    /// that it cannot wake the thread after the loop stopped running. The loop calls it when
    /// a run ends; while it runs, every park re-arms the timerfd anyway.
    pub(crate) fn disarm(&mut self) {
        if let (Some(fd), Some(_)) = (&self.timerfd, self.armed_for) {
            let _ = fd.get_ref().arm(Duration::ZERO);
            self.armed_for = None;
        }
        if let Some(Some(own)) = &mut self.own {
            own.disarm();
        }
    }

    fn ensure_timerfd(&mut self) {
        if self.timerfd_tried {
            return;
        }
        self.timerfd_tried = true;
        set_thread_timer_slack(LOOP_TIMER_SLACK_NS);
        self.timerfd = TimerFd::new().ok().and_then(|fd| {
            // SAFETY: `TimerFd` owns its descriptor for its whole life and `as_raw_fd`
            // always returns that same descriptor.
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
        });
    }
}

/// The park outside tokio: the `epoll` of the thread's reactor (`reactor.rs`), holding a
/// timerfd for the deadline and a doorbell `eventfd` that the waker slot rings (the same wait
/// as the `eventfd` floor of `examples/wake_latency`) beside the reactor's sources. Both are
/// edge-triggered and neither is read on the way out: the wake goes straight back to the
/// loop, and the next wait reads the doorbell if it rang (and re-arms the timerfd, which
/// resets its count, if it fired). An edge is reported once, to whichever turn takes it; a
/// turn outside the own wait passes what it saw back (`Park::note_park_events`).
struct OwnWait {
    reactor: Rc<Reactor>,
    timer: TimerFd,
    /// The deadline the timerfd is armed for, while its expiry is not yet consumed.
    armed_for: Option<Instant>,
    doorbell: Arc<Doorbell>,
    /// The doorbell as a waker, registered in the loop's waker slot at each own wait.
    waker: Waker,
    /// The doorbell may hold a count that no wait has read yet.
    rung: bool,
}

impl OwnWait {
    fn new(reactor: Rc<Reactor>) -> io::Result<Self> {
        let timer = TimerFd::new()?;
        let doorbell = Arc::new(Doorbell::new()?);
        reactor.take_for_park(timer.as_raw_fd(), doorbell.fd.as_raw_fd())?;
        Ok(OwnWait {
            reactor,
            timer,
            armed_for: None,
            waker: Waker::from(doorbell.clone()),
            doorbell,
            rung: false,
        })
    }

    /// Blocks the thread until `deadline` or a ring of the doorbell. The lost-wake argument
    /// is the tokio park's (module doc): (1) register the waker — here the doorbell's — then
    /// (2) look at the signal; a wake after (2) finds the doorbell in the slot and rings it,
    /// and the ring's edge stays queued in the `epoll` until a turn takes it (none runs in
    /// between), so `epoll_wait` returns whether it comes before the call or during it.
    fn wait(&mut self, shared: &Shared, deadline: Instant) -> Woken {
        if self.rung {
            self.doorbell.read();
            self.rung = false;
        }
        if self.armed_for != Some(deadline) {
            // At least 1 ns, as in the tokio park: zero would disarm.
            let after = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_nanos(1));
            self.armed_for = self.timer.arm(after).is_ok().then_some(deadline);
        }
        if shared.register_and_check(&self.waker) {
            return Woken::Notified;
        }
        // The timerfd bounds the wait. A source's event (a socket of the thread's reactor)
        // ends it too: the turn has set its readiness and raised the loop's signal.
        let turn = self.reactor.turn(-1, shared.id).unwrap_or_default();
        self.rung |= turn.doorbell;
        if turn.timer {
            self.armed_for = None;
            return Woken::Deadline;
        }
        // A ring, a source, a signal or (never seen) an epoll error: the loop looks at its
        // queues and comes back.
        Woken::Notified
    }

    fn disarm(&mut self) {
        if self.armed_for.take().is_some() {
            let _ = self.timer.arm(Duration::ZERO);
        }
    }
}

impl Drop for Park {
    /// The last loop of the thread is going: the thread's reactor hands the kernel what its
    /// driver (the io_uring ring) has queued and lets go of it, since nothing would turn it
    /// now; the ring's sockets, if still held, keep it. While another loop lives on the
    /// thread, its turns go on driving the ring. (Whether this loop ever turned the reactor
    /// does not matter: one that ended in its first iteration may have installed the driver.)
    fn drop(&mut self) {
        let last = PARKS
            .try_with(|p| {
                p.set(p.get() - 1);
                p.get() == 0
            })
            .unwrap_or(true);
        if last && let Some(reactor) = Reactor::existing() {
            reactor.finish_driver();
        }
    }
}

impl Drop for OwnWait {
    fn drop(&mut self) {
        self.reactor
            .release_park(self.timer.as_raw_fd(), self.doorbell.fd.as_raw_fd());
    }
}

/// The reactor's `epoll` descriptor for tokio's reactor, which only ever polls it; the
/// reactor owns and closes it.
struct ReactorFd(RawFd);

impl AsRawFd for ReactorFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// The own wait's doorbell: an `eventfd` that a wake writes to. Owned by the waker (an
/// `Arc`), so a wake from a thread that still holds the waker after the loop is gone writes
/// to a live descriptor.
struct Doorbell {
    fd: OwnedFd,
}

impl Doorbell {
    fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory-safety preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Doorbell {
            // SAFETY: a fresh descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to a descriptor this doorbell owns. It can
        // only fail on a counter at its maximum, which still reads as rung.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the count (non-blocking: an unrung doorbell reads nothing).
    fn read(&self) {
        let mut count: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from a descriptor this doorbell owns.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    }
}

impl Wake for Doorbell {
    fn wake(self: Arc<Self>) {
        self.ring();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ring();
    }
}

/// The loop thread's timer slack, in ns: the smallest the kernel takes (0 would mean "the
/// thread's default").
const LOOP_TIMER_SLACK_NS: libc::c_ulong = 1;

/// Sets the calling thread's timer slack. A refusal (not Linux, a seccomp filter) only leaves
/// the default slack, so it is ignored.
fn set_thread_timer_slack(nanos: libc::c_ulong) {
    // SAFETY: PR_SET_TIMERSLACK takes a plain value and no pointer; it only changes this
    // thread's scheduling attribute.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, nanos, 0, 0, 0) };
}

/// False only if tokio's clock is certainly moving (real time); true if it may be paused.
///
/// A paused clock moves only inside tokio's park (auto-advance) or an awaited `advance`, so
/// two readings in a row on this thread are equal; a running clock is read in nanoseconds,
/// and two readings differ. Equal readings on a running but coarse clock only answer "may be
/// paused", which arms a `Sleep` that was not needed.
pub(crate) fn clock_may_be_paused() -> bool {
    let first = Instant::now();
    Instant::now() == first
}

/// A non-blocking CLOCK_MONOTONIC timerfd.
pub(crate) struct TimerFd {
    fd: OwnedFd,
}

impl TimerFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: timerfd_create has no memory-safety preconditions; the result is checked.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TimerFd {
            // SAFETY: `fd` is a fresh descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Arms the timer `after` from now; `Duration::ZERO` disarms it (a zero it_value is the
    /// kernel's "disarm"), so a caller arming for a deadline that has already passed must
    /// pass at least 1 ns.
    pub(crate) fn arm(&self, after: Duration) -> io::Result<()> {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: libc::c_long::from(after.subsec_nanos() as i32),
            },
        };
        // SAFETY: `spec` is a valid itimerspec and the old-value pointer may be null.
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Blocks the calling thread until the timer expires (for the host probe, never on the
    /// loop).
    pub(crate) fn wait_blocking(&self) -> io::Result<()> {
        loop {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, owned by this frame.
            let rc = unsafe { libc::poll(&mut pfd, 1, -1) };
            if rc < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if self.expired() {
                return Ok(());
            }
        }
    }

    /// Reads (and so clears) the expiry count; true if the timer had expired.
    fn expired(&self) -> bool {
        let mut count = 0u64;
        // SAFETY: reading 8 bytes into a u64 we own, from a descriptor we own.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut count as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        n == 8 && count > 0
    }
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deadline that has already passed when the park arms its timerfd (the loop was
    /// descheduled between choosing the deadline and parking) must end the park at once. On
    /// the real clock no tokio `Sleep` is armed, so if the timerfd were armed with a zero
    /// delay — which disarms a timerfd — nothing would ever end the park: the loop would
    /// hang in `epoll_wait(-1)` with its timers due.
    #[tokio::test]
    async fn a_deadline_already_passed_when_parking_ends_the_park_at_once() {
        let el = crate::EventLoop::builder().build();
        let shared = el.context().shared;
        let mut park = Park::default();
        let passed = Instant::now() - Duration::from_millis(1);
        let woken =
            tokio::time::timeout(Duration::from_secs(5), park.wait(&shared, passed, false)).await;
        assert_eq!(woken, Ok(Woken::Deadline), "the park must not hang");
    }

    /// The own wait ends at its deadline (at once if it has passed: a zero delay would
    /// disarm the timerfd and hang), or at once when the doorbell rings — before the thread
    /// blocked, or while it blocks (from another thread, through the waker).
    #[test]
    fn the_own_wait_ends_at_its_deadline_or_at_a_ring_before_or_during_the_block() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let el = crate::EventLoop::builder().build();
            let shared = el.context().shared;
            let mut own = OwnWait::new(Reactor::for_this_thread().expect("reactor"))
                .expect("epoll, timerfd, eventfd");
            let passed = Instant::now() - Duration::from_millis(1);
            assert_eq!(
                own.wait(&shared, passed),
                Woken::Deadline,
                "a passed deadline"
            );
            let soon = Instant::now() + Duration::from_millis(5);
            assert_eq!(own.wait(&shared, soon), Woken::Deadline);
            assert!(Instant::now() >= soon);

            let hour = Instant::now() + Duration::from_secs(3_600);
            own.doorbell.ring(); // as a wake that found the doorbell in the slot
            assert_eq!(own.wait(&shared, hour), Woken::Notified, "a ring before");
            let waker = own.waker.clone();
            let ringer = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                waker.wake();
            });
            // A missed ring would end this wait at its deadline instead.
            let later = Instant::now() + Duration::from_secs(10);
            assert_eq!(own.wait(&shared, later), Woken::Notified, "a ring during");
            ringer.join().expect("ringer");
        });
    }

    /// One park's own wait per reactor: a second loop's on the same thread is refused (it
    /// parks through tokio instead, so neither can take the other's doorbell or timer
    /// edges), and the first one's going makes room again.
    #[test]
    fn a_second_own_wait_on_one_thread_is_refused_until_the_first_goes() {
        let reactor = Reactor::for_this_thread().expect("reactor");
        let first = OwnWait::new(reactor.clone()).expect("the first own wait");
        let refused = OwnWait::new(reactor.clone())
            .err()
            .expect("a second own wait");
        assert!(
            refused.to_string().contains("another loop's park"),
            "{refused}"
        );
        drop(first);
        OwnWait::new(reactor).expect("room again once the first is gone");
    }

    /// The park gives the loop thread a 1 ns timer slack (the kernel would otherwise let its
    /// timed sleeps run up to 50 µs late), and only that thread.
    #[test]
    fn the_first_park_sets_the_loop_threads_timer_slack_to_1_ns() {
        fn slack() -> i32 {
            // SAFETY: PR_GET_TIMERSLACK takes no pointer and returns the slack.
            unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) }
        }
        let other = std::thread::spawn(slack);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let before = slack();
        assert!(
            before > 1,
            "a normal thread starts with the default slack, got {before}"
        );
        rt.block_on(async {
            let el = crate::EventLoop::builder().build();
            let shared = el.context().shared;
            let mut park = Park::default();
            let soon = Instant::now() + Duration::from_millis(1);
            assert_eq!(park.wait(&shared, soon, false).await, Woken::Deadline);
        });
        assert_eq!(slack(), 1, "the loop thread's slack after its first park");
        assert_eq!(
            other.join().expect("thread"),
            before,
            "another thread keeps its own"
        );
    }
}
