//! A test that cannot run on this host fails, loudly, unless skipping was asked for.
//!
//! A skipped test that passes makes a green run say more than was checked: without root the
//! disk-full tests would vanish, without io_uring half the network suite would. So a missing
//! capability is a failure by default, and a developer on a host that lacks it opts in to
//! skipping with `SHARDLOOP_ALLOW_SKIP=1`. `.ci/run` never sets it.
//!
//! Each skip is also appended, one line, to the file named by `SHARDLOOP_SKIP_LOG` when that
//! is set: `scripts/test` counts them there, since libtest reports a skipped test as passed.

use std::fmt::Display;
use std::io::Write;

/// The environment variable that turns "cannot run here" from a failure into a skip.
pub const ALLOW_SKIP: &str = "SHARDLOOP_ALLOW_SKIP";

/// The environment variable naming the file each skip is recorded in (set by `scripts/test`).
pub const SKIP_LOG: &str = "SHARDLOOP_SKIP_LOG";

/// True when this run may skip tests that cannot run here.
pub fn allowed() -> bool {
    std::env::var_os(ALLOW_SKIP).is_some_and(|v| v == "1")
}

/// Says that the calling test cannot run here because of `why`: prints a `skipped:` line
/// when [`ALLOW_SKIP`] is set (the caller then returns), and fails the test otherwise.
#[track_caller]
pub fn cannot_run(why: impl Display) {
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    if allowed() {
        // Both streams: cargo shows stdout only for failures unless --nocapture.
        eprintln!("skipped: {why} ({ALLOW_SKIP}=1)");
        println!("skipped: {why} ({ALLOW_SKIP}=1)");
        record(&test, &why);
        return;
    }
    panic!(
        "this test cannot run here: {why}. On a host that cannot provide it, \
         {ALLOW_SKIP}=1 skips it (CI never does)"
    );
}

/// Appends "test<TAB>why" to the skip log, if there is one. A write that fails is reported,
/// not ignored: the count at the end of `scripts/test` would otherwise be short.
fn record(test: &str, why: &impl Display) {
    let Some(path) = std::env::var_os(SKIP_LOG) else {
        return;
    };
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{test}\t{why}"));
    if let Err(e) = appended {
        panic!("cannot record a skip in {}: {e}", path.to_string_lossy());
    }
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
