//! The drop watch: a thread that tells the operator, in the log, how many lines the log queue
//! dropped because the sink was too slow.
//!
//! It looks at the queue's drop counter once per period and logs one warning when the count
//! rose, and once more when it stops (so drops in the last moments before exit are reported
//! too). The warning goes through the same queue: if that is still full, the warning is dropped
//! and counted as well, and the next one says so. It must never log when nothing was dropped,
//! and never run on the loop thread.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::Dispatch;
use tracing_appender::non_blocking::ErrorCounter;

/// The name of the watch's thread.
const THREAD: &str = "shardloop-logwatch";

/// The running watch; dropping it makes a last report and waits for the thread to end.
pub struct Watch {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    /// Watches `dropped`, reporting through the subscriber that is the caller's default now.
    pub fn start(dropped: ErrorCounter, every: Duration) -> std::io::Result<Watch> {
        let (stop, stopped) = mpsc::channel();
        let dispatch = tracing::dispatcher::get_default(Dispatch::clone);
        let thread = std::thread::Builder::new()
            .name(THREAD.into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    watch(&dropped, every, &stopped);
                });
            })?;
        Ok(Watch {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        drop(self.stop.take()); // wakes the thread at once
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reports once per `every` until `stop` is dropped, then once more.
fn watch(dropped: &ErrorCounter, every: Duration, stop: &mpsc::Receiver<()>) {
    let mut reported = 0;
    loop {
        let stopping = stop.recv_timeout(every) != Err(RecvTimeoutError::Timeout);
        reported = report(dropped.dropped_lines(), reported);
        if stopping {
            return;
        }
    }
}

/// Logs the lines dropped since `reported` were, if any; the new count reported.
fn report(total: usize, reported: usize) -> usize {
    let dropped = total - reported;
    if dropped > 0 {
        tracing::warn!(
            dropped,
            total,
            "{dropped} log lines dropped: the log sink (stderr) is too slow; {total} since start"
        );
    }
    total
}
