//! The log queue: a bounded, lossy line queue between whoever logs and a slow sink, drained by
//! a thread of its own.
//!
//! Logging a line copies it into the queue and returns; the queue's thread writes it to the
//! sink. When the sink falls behind and the queue is full, new lines are dropped, not waited
//! for, and counted (`NonBlocking::error_counter`). The queue must never make the caller wait,
//! whatever the sink does — not even for a sink blocked forever.

use std::io::{self, Write};

use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};

/// Lines the queue holds for a sink that fell behind (about 3 MB at 200 bytes a line); the
/// ones logged past it are dropped and counted.
pub const QUEUE_LINES: usize = 16 * 1024;

/// The name of the queue's thread.
const THREAD: &str = "shardloop-log";

/// `sink` behind a queue of at most `lines` lines. Log through the returned writer (it is a
/// `MakeWriter`); dropping the guard writes out what is queued, waiting for the sink at most
/// about a second, and stops the thread.
pub fn queue<W: Write + Send + 'static>(sink: W, lines: usize) -> (NonBlocking, WorkerGuard) {
    NonBlockingBuilder::default()
        .buffered_lines_limit(lines)
        .lossy(true)
        .thread_name(THREAD)
        .finish(QuietFlush(sink))
}

/// A sink whose failed flush is not reported: the queue's thread would report it with
/// `eprintln!`, which panics when the sink is the very stderr that just failed.
struct QuietFlush<W>(W);

impl<W: Write> Write for QuietFlush<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        // A sink that cannot flush lost those lines already; nobody is left to tell.
        let _ = self.0.flush();
        Ok(())
    }
}
