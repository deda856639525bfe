//! The idle park: how the loop blocks when every queue is empty.
//!
//! tokio's own park cannot be replaced, so parking is the loop future returning `Pending`
//! with exactly one deadline armed, *twice*:
//! - a tokio `Sleep` at the deadline — the only timer tokio's paused test clock knows how to
//!   auto-advance to, so `#[tokio::test(start_paused = true)]` runs at the exact boundary;
//! - a `timerfd` (CLOCK_MONOTONIC) in an `AsyncFd` — tokio's sleep is rounded up to whole
//!   milliseconds and so wakes ~1 ms late; the timerfd wakes within microseconds.
//!
//! Whichever fires first ends the park; so does a notify from another thread (a post or a
//! cross-thread task wake). After each park the timerfd is disarmed and drained, so a late
//! expiry can never cause a spurious wake later.
//!
//! This module must never decide *whether* to park or for how long: the loop does.

use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::Poll;

use tokio::io::unix::AsyncFd;
use tokio::time::{Duration, Instant, Sleep};

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
    sleep: Option<Pin<Box<Sleep>>>,
    timerfd: Option<AsyncFd<TimerFd>>,
    timerfd_tried: bool,
}

impl Park {
    /// Blocks (as a future) until `deadline` or a notify, whichever comes first.
    pub(crate) async fn wait(&mut self, shared: &Shared, deadline: Instant) -> Woken {
        self.ensure_timerfd();
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                sleep.as_mut().reset(deadline);
                sleep
            }
            None => self
                .sleep
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        if let Some(fd) = &self.timerfd {
            let _ = fd
                .get_ref()
                .arm(deadline.saturating_duration_since(Instant::now()));
        }
        let woken = poll_fn(|cx| {
            if shared.register_and_check(cx.waker()) {
                return Poll::Ready(Woken::Notified);
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Woken::Deadline);
            }
            if let Some(fd) = &self.timerfd {
                while let Poll::Ready(Ok(mut guard)) = fd.poll_read_ready(cx) {
                    if guard.get_inner().expired() {
                        return Poll::Ready(Woken::Deadline);
                    }
                    // Stale readiness (already drained): wait for the next edge.
                    guard.clear_ready();
                }
            }
            Poll::Pending
        })
        .await;
        if let Some(fd) = &self.timerfd {
            let _ = fd.get_ref().arm(Duration::ZERO);
            fd.get_ref().expired();
        }
        woken
    }

    /// Lets tokio run once *through a real park*, without blocking: the timerfd is armed to
    /// expire at once, so the reactor's wait returns immediately. Costs a few syscalls more
    /// than `yield_now`, which tokio services with a zero-timeout poll of its drivers that
    /// skips the runtime's park hooks — and tokio-uring submits queued I/O only from its
    /// park hook. Falls back to `yield_now` without a timerfd.
    pub(crate) async fn yield_through_park(&mut self) {
        self.ensure_timerfd();
        let Some(fd) = &self.timerfd else {
            tokio::task::yield_now().await;
            return;
        };
        let mut armed = false;
        poll_fn(|cx| {
            while let Poll::Ready(Ok(mut guard)) = fd.poll_read_ready(cx) {
                let expired = guard.get_inner().expired();
                guard.clear_ready();
                if armed && expired {
                    return Poll::Ready(());
                }
            }
            // Readiness is clear and our waker registered: only the reactor, polling inside
            // the park, can see the expiry we arm now.
            if !armed {
                armed = true;
                if fd.get_ref().arm(Duration::from_nanos(1)).is_err() {
                    // Nothing would wake us: make it a plain yield instead.
                    cx.waker().wake_by_ref();
                }
            }
            Poll::Pending
        })
        .await;
    }

    fn ensure_timerfd(&mut self) {
        if self.timerfd_tried {
            return;
        }
        self.timerfd_tried = true;
        self.timerfd = TimerFd::new().ok().and_then(|fd| {
            // SAFETY: `TimerFd` owns its descriptor for its whole life and `as_raw_fd`
            // always returns that same descriptor.
            unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
        });
    }
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

    /// Arms the timer `after` from now; `Duration::ZERO` disarms it.
    pub(crate) fn arm(&self, after: Duration) -> io::Result<()> {
        // A zero it_value disarms, so an already-passed deadline is armed as 1 ns.
        let after = if after.is_zero() {
            Duration::ZERO
        } else {
            after.max(Duration::from_nanos(1))
        };
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
