//! The process's open-file limit, for tests that hold thousands of sockets: the library's
//! `host::fd_limit`, under the loud-skip rule.

use shardloop::host::fd_limit;

use super::skip;

/// Raises the soft `RLIMIT_NOFILE` to at least `want`. When the hard limit does not allow
/// it, the test cannot run here: see [`skip::cannot_run`]; returns whether it may go on.
#[track_caller]
pub fn raise_to(want: u64) -> bool {
    skip::or_skip(fd_limit::raise(want), "too few file descriptors").is_some()
}
