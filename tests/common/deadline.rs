//! Deadlines that turn a hang into a failure.
//!
//! A test that hangs costs the whole CI budget and the submission with it; one that fails
//! after a generous bound costs a minute. Bounds here are seconds to minutes: they catch a
//! stuck test, they never time a fast one.

use std::future::Future;
use std::process::{Child, Output};
use std::sync::mpsc;
use std::time::Duration;

/// Awaits `future` for at most `limit` of tokio's clock, then fails naming `what`.
///
/// Under a paused clock tokio jumps its clock forward when nothing else can run, so a stuck
/// future fails at once there instead of after `limit` of real time.
#[track_caller]
pub fn within<F: Future>(
    limit: Duration,
    what: &str,
    future: F,
) -> impl Future<Output = F::Output> {
    let what = what.to_owned();
    let caller = std::panic::Location::caller();
    async move {
        match tokio::time::timeout(limit, future).await {
            Ok(value) => value,
            Err(_) => panic!("{what} did not finish within {limit:?} ({caller})"),
        }
    }
}

/// Ends the whole test process if it is still alive `limit` from now and the returned guard
/// has not been dropped: for a test blocked where no timeout can reach (a thread join, a
/// blocking read). Prints `what` first, so the failure says which test hung.
#[must_use = "the watchdog is disarmed when the guard drops"]
pub fn watchdog(limit: Duration, what: &str) -> Watchdog {
    let (disarm, armed) = mpsc::channel::<()>();
    let what = what.to_owned();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = armed.recv_timeout(limit) {
            eprintln!("TIMED OUT: {what} was still running after {limit:?}; aborting the tests");
            std::process::abort();
        }
    });
    Watchdog { _disarm: disarm }
}

/// Dropping it disarms its [`watchdog`].
pub struct Watchdog {
    _disarm: mpsc::Sender<()>,
}

/// Waits for `child` to exit and collects its output, killing it (SIGKILL) after `limit`.
/// A killed child shows as a signal in the returned status, so the caller's exit-code check
/// fails with the output in hand.
pub fn output_within(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (done, waiting) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = waiting.recv_timeout(limit) {
            eprintln!("child {pid} still running after {limit:?}: killing it");
            // SAFETY: kill(2) on a pid this test spawned and has not reaped yet (the waiter
            // below reaps it only after it exits, and sends `done` then).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    });
    let output = child.wait_with_output().expect("wait for the child");
    let _ = done.send(());
    output
}

/// Runs `cmd` with no standard input and its output captured, killing it after `limit`:
/// [`std::process::Command::output`] that cannot hang (a shard started by mistake with a
/// closed console would run until stopped).
pub fn run_within(cmd: &mut std::process::Command, limit: Duration) -> Output {
    use std::process::Stdio;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the command");
    output_within(child, limit)
}
