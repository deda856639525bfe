//! How often the loop thread blocked and was woken: its voluntary context switches, as the
//! kernel counts them (`getrusage(RUSAGE_THREAD)`, `ru_nvcsw`; the same number as
//! `voluntary_ctxt_switches` in `/proc/<pid>/task/<tid>/status`).
//!
//! A thread switches voluntarily each time it blocks, and each block ends in one wake-up, so
//! the count is the thread's wake-ups. The loop blocks only in its idle park, so at idle the
//! count should track the park's returns (`LoopStats::sleeps`) one for one; more means
//! something wakes the thread without ending the park, and each such wake-up costs about as
//! much CPU as a loop wake (~80–100 µs on a VM).
//!
//! This module owns that one reading. It is read when the loop's stats are taken, never per
//! iteration or per park: one system call per snapshot. It must be called on the loop thread
//! (the count is the calling thread's).

/// Voluntary context switches of the calling thread so far; zero where the kernel cannot say.
#[must_use]
pub(crate) fn voluntary_switches() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_THREAD is valid on
        // Linux for the calling thread.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            if libc::getrusage(libc::RUSAGE_THREAD, &mut usage) != 0 {
                return 0;
            }
            usage
        };
        u64::try_from(usage.ru_nvcsw).unwrap_or(0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocking_sleep_is_counted_on_this_thread_only() {
        let before = voluntary_switches();
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let after = voluntary_switches();
        assert!(
            after >= before + 3,
            "three blocking sleeps, but {before} -> {after} voluntary switches"
        );
        // Another thread's blocking is not this thread's.
        let mine = voluntary_switches();
        std::thread::spawn(|| {
            for _ in 0..5 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
        .join()
        .expect("the sleeper ends");
        // `join` itself may block this thread once or twice; five would mean it counted theirs.
        assert!(voluntary_switches() - mine < 5);
    }
}
