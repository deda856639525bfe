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
    /// Resident set size, bytes (`/proc/self/statm`); `None` where it cannot be read.
    pub resident_bytes: Option<u64>,
    /// Open file descriptors (entries of `/proc/self/fd`); `None` where it cannot be read.
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

/// Open descriptors. Since Linux 6.2 the size `stat` reports for `/proc/self/fd` is that count
/// (a few microseconds); older kernels report 0, and then the directory's entries are counted
/// (about half a millisecond per scrape at a thousand client sockets).
fn open_fds() -> Option<u64> {
    match std::fs::metadata("/proc/self/fd").ok()?.len() {
        0 => counted_fds(),
        n => Some(n),
    }
}

/// Entries of `/proc/self/fd` (the directory's own descriptor, open while it is read, is
/// left out).
fn counted_fds() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some((entries.count() as u64).saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_fds_follows_descriptors_opened_and_closed() {
        let before = open_fds().expect("/proc is mounted");
        let files: Vec<std::fs::File> = (0..200)
            .map(|_| std::fs::File::open("/proc/self/statm").unwrap())
            .collect();
        let during = open_fds().unwrap();
        drop(files);
        // Other tests open and close descriptors concurrently: bound loosely.
        assert!(during >= before + 100, "{before} -> {during}");
        let (counted, stat) = (counted_fds().unwrap(), open_fds().unwrap());
        assert!(
            counted.abs_diff(stat) < 50,
            "both ways count the same descriptors: {counted} and {stat}"
        );
    }
}
