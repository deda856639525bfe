//! A test that cannot run on this host fails, loudly, unless skipping was asked for.
//!
//! A skipped test that passes makes a green run say more than was checked: without root the
//! disk-full tests would vanish, without io_uring half the network suite would. So a missing
//! capability is a failure by default, and a developer on a host that lacks it opts in to
//! skipping with `SHARDLOOP_ALLOW_SKIP=1`. `.ci/run` never sets it.

use std::fmt::Display;

/// The environment variable that turns "cannot run here" from a failure into a skip.
pub const ALLOW_SKIP: &str = "SHARDLOOP_ALLOW_SKIP";

/// True when this run may skip tests that cannot run here.
pub fn allowed() -> bool {
    std::env::var_os(ALLOW_SKIP).is_some_and(|v| v == "1")
}

/// Says that the calling test cannot run here because of `why`: prints a `skipped:` line
/// when [`ALLOW_SKIP`] is set (the caller then returns), and fails the test otherwise.
#[track_caller]
pub fn cannot_run(why: impl Display) {
    if allowed() {
        // Both streams: cargo shows stdout only for failures unless --nocapture.
        eprintln!("skipped: {why} ({ALLOW_SKIP}=1)");
        println!("skipped: {why} ({ALLOW_SKIP}=1)");
        return;
    }
    panic!(
        "this test cannot run here: {why}. It needs that to check what it claims; on a host \
         that cannot provide it, set {ALLOW_SKIP}=1 to skip it (CI never does)"
    );
}

/// `Some(value)`, or [`cannot_run`] with the error and `None`.
#[track_caller]
pub fn or_skip<T, E: Display>(result: Result<T, E>, what: &str) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(e) => {
            cannot_run(format!("{what}: {e}"));
            None
        }
    }
}
