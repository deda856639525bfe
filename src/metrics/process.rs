//! The process as the kernel sees it: CPU time, resident memory, open and allowed
//! descriptors, read from `getrusage`, `/proc/self` and `getrlimit` at each scrape.
//!
//! Owns those readings only. Runs on the HTTP thread, never on the loop; a reading that fails
//! (no `/proc`) is reported as absent, never as zero.

use std::time::Duration;

use crate::host::{fd_limit, process_cpu_time};

/// One reading.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessFacts {
    /// User + system time of every thread.
    pub cpu: Duration,
    pub resident_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    /// The soft open-file limit.
    pub max_fds: Option<u64>,
}

/// Reads the process's figures now.
pub fn read() -> ProcessFacts {
    ProcessFacts {
        cpu: process_cpu_time(),
        resident_bytes: resident_bytes(),
        open_fds: open_fds(),
        max_fds: fd_limit::current().ok().map(|l| l.soft),
    }
}

/// Resident set size: the second field of `/proc/self/statm`, in pages.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).ok().map(|page| pages * page)
}

/// Entries of `/proc/self/fd` (the directory's own descriptor, open while it is read, is
/// left out).
fn open_fds() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some((entries.count() as u64).saturating_sub(1))
}
