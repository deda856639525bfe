//! The process's CPU time, the figure idle-cost claims are made in: user plus system time of
//! every thread, from `getrusage`. Read by the `loop:` status line and by `loadgen`.
//!
//! Owns that one reading. Never blocks (one system call).

use std::time::Duration;

/// Process CPU time (user + system, all threads) so far.
#[must_use]
pub fn process_cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_SELF is always valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    let micros = |tv: libc::timeval| {
        Duration::from_secs(tv.tv_sec.max(0) as u64)
            + Duration::from_micros(tv.tv_usec.max(0) as u64)
    };
    micros(usage.ru_utime) + micros(usage.ru_stime)
}
