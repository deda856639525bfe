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
//! hop). The park cannot block outside tokio: the sockets of both network backends (and the
//! io_uring ring), and any tokio timer or socket a game awaits on the loop thread, are
//! registered with tokio's reactor, whose epoll descriptor tokio does not expose. Nor can it
//! do so only when tokio has nothing registered: tokio's timers are not descriptors at all
//! (its driver turns its own wheel into the `epoll_wait` timeout), and no stable tokio API
//! says whether a timer is pending, so a loop task awaiting `tokio::time::sleep` would sleep
//! through it (`l2_a_task_awaiting_a_tokio_timer_wakes_…` in `tests/loop_rules.rs`); parking
//! on the io_uring ring with a poll on tokio's descriptor fails the same way, besides needing
//! a descriptor tokio keeps to itself. The most it could save is tokio's own wake path,
//! which `examples/wake_latency` sizes as its `Notify` floor over the `eventfd` floor
//! (docs/performance.md, "wake latency"). A doorbell
//! of the loop's own (an `eventfd` in tokio's reactor, rung directly by the posting thread)
//! was built and measured against this path in the same runs: no faster (the time above the
//! `eventfd` floor is spent on the loop thread after the wake, see docs/performance.md,
//! "wake latency"), so the wake stays tokio's unpark, which a paused clock needs anyway
//! (tokio auto-advances when its driver finds nothing to do, and only an unpark stops that).
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

use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::pin;
use std::task::Poll;

use tokio::io::unix::AsyncFd;
use tokio::time::{Duration, Instant};

use super::context::Shared;

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
    timerfd: Option<AsyncFd<TimerFd>>,
    timerfd_tried: bool,
    /// The deadline the timerfd is armed for, while its expiry is not yet consumed.
    armed_for: Option<Instant>,
}

impl Park {
    /// Blocks (as a future) until `deadline` or a notify, whichever comes first.
    pub(crate) async fn wait(&mut self, shared: &Shared, deadline: Instant) -> Woken {
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
        let timerfd = self.timerfd.as_ref();
        let mut fired = false;
        let woken = poll_fn(|cx| {
            if shared.register_and_check(cx.waker()) {
                return Poll::Ready(Woken::Notified);
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
fn clock_may_be_paused() -> bool {
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
        let woken = tokio::time::timeout(Duration::from_secs(5), park.wait(&shared, passed)).await;
        assert_eq!(woken, Ok(Woken::Deadline), "the park must not hang");
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
            assert_eq!(park.wait(&shared, soon).await, Woken::Deadline);
        });
        assert_eq!(slack(), 1, "the loop thread's slack after its first park");
        assert_eq!(
            other.join().expect("thread"),
            before,
            "another thread keeps its own"
        );
    }
}
