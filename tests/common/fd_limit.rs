//! The process's open-file limit, for tests that hold thousands of sockets.

use super::skip;

/// Raises the soft `RLIMIT_NOFILE` to at least `want`. When the hard limit does not allow
/// it, the test cannot run here: see [`skip::cannot_run`]; returns whether it may go on.
#[track_caller]
pub fn raise_to(want: u64) -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if read != 0 {
        skip::cannot_run(format!(
            "cannot read RLIMIT_NOFILE: {}",
            std::io::Error::last_os_error()
        ));
        return false;
    }
    if limit.rlim_cur >= want {
        return true;
    }
    if limit.rlim_max < want {
        skip::cannot_run(format!(
            "RLIMIT_NOFILE hard limit {} < {want} descriptors",
            limit.rlim_max
        ));
        return false;
    }
    limit.rlim_cur = want;
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        skip::cannot_run(format!(
            "cannot raise RLIMIT_NOFILE to {want}: {}",
            std::io::Error::last_os_error()
        ));
        return false;
    }
    true
}
