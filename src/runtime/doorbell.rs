//! The loop's doorbell: an `eventfd` that other threads write to wake a parked loop.
//!
//! Owned by the loop's [`Shared`](super::context::Shared) half, so it stays open for as long
//! as any thread may ring it (a `LoopContext` can outlive the loop): a write never lands on a
//! descriptor number that was closed and reused. The park listens to it through tokio's
//! reactor (`park.rs`, which says why and what the ordering of a wake is).
//!
//! This module must never decide when to ring or when to listen: the signal and the park do.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A non-blocking `eventfd`.
#[derive(Debug)]
pub(crate) struct Doorbell {
    fd: OwnedFd,
}

impl Doorbell {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory-safety preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Doorbell {
            // SAFETY: `fd` is a fresh descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Rings: adds one to the counter, which makes the descriptor readable. False if the
    /// kernel refused (a counter at its maximum, which `drain` keeps from happening): the
    /// caller then wakes the loop another way.
    pub(crate) fn ring(&self) -> bool {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to a descriptor this value owns.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        n == 8
    }

    /// Resets the counter to zero (nothing to do if nobody rang).
    pub(crate) fn drain(&self) {
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a u64 we own, from a descriptor this value owns.
        let _ = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut count as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

impl AsRawFd for Doorbell {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(bell: &Doorbell) -> bool {
        let mut pfd = libc::pollfd {
            fd: bell.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, owned by this frame; a zero timeout never blocks.
        let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
        rc == 1 && pfd.revents & libc::POLLIN != 0
    }

    #[test]
    fn a_ring_makes_it_readable_until_drained() {
        let bell = Doorbell::new().expect("eventfd");
        assert!(!readable(&bell), "quiet when new");
        assert!(bell.ring());
        assert!(bell.ring());
        assert!(readable(&bell), "rung");
        bell.drain();
        assert!(!readable(&bell), "one drain takes every ring");
    }
}
