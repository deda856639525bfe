//! The log queue (`shardloop::logs`): a sink that is stuck for good never holds up the thread
//! that logs — lines past the queue's bound are dropped and counted, and the drop watch reports
//! them — while a sink that keeps up gets every line, in order.

use std::io::{self, Write};
use std::sync::mpsc;
use std::time::Duration;

use shardloop::logs;
use tracing_appender::non_blocking::{ErrorCounter, WorkerGuard};

mod common;
use common::capture::Capture;

/// A sink whose every write waits until the test lets go of it (drops the sender).
struct Stuck(mpsc::Receiver<()>);

impl Write for Stuck {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = self.0.recv();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs `f` with lines going to `writer` as the shard's subscriber writes them.
fn logging_to<W>(writer: W, f: impl FnOnce())
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    let subscriber = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
}

/// Logs `n` numbered lines through `writer`.
fn log_lines<W>(writer: W, n: usize)
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    logging_to(writer, || {
        for i in 0..n {
            tracing::info!("line {i}");
        }
    });
}

/// `n` lines logged into a queue of `capacity` before a sink stuck for good: the queue's drop
/// counter, what lets the sink go (drop it), and the queue (drop it after).
fn log_to_stuck_sink(capacity: usize, n: usize) -> (ErrorCounter, mpsc::Sender<()>, WorkerGuard) {
    let (release, stuck) = mpsc::channel();
    let (writer, queue) = logs::queue(Stuck(stuck), capacity);
    let dropped = writer.error_counter();
    log_lines(writer, n);
    (dropped, release, queue)
}

#[test]
fn a_stuck_sink_never_blocks_the_thread_that_logs_and_every_lost_line_is_counted() {
    // Logging waiting on the sink would wait forever: this turns that into a failure.
    let _watchdog = common::deadline::watchdog(Duration::from_secs(60), "logging to a stuck sink");
    let (dropped, release, queue) = log_to_stuck_sink(100, 1000);
    // 100 lines wait in the queue, and the queue's thread may have taken one more to the sink.
    let lost = dropped.dropped_lines();
    assert!((899..=900).contains(&lost), "{lost} lines dropped");
    drop(release);
    drop(queue);
}

#[test]
fn a_sink_that_keeps_up_gets_every_line_in_order() {
    let sink = Capture::default();
    let (writer, queue) = logs::queue(sink.clone(), logs::QUEUE_LINES);
    let dropped = writer.error_counter();
    log_lines(writer, 5000);
    drop(queue); // writes out what is queued
    let lines = sink.lines();
    assert_eq!(lines.len(), 5000);
    for (i, line) in lines.iter().enumerate() {
        assert!(line.ends_with(&format!("line {i}")), "line {i}: {line}");
    }
    assert_eq!(dropped.dropped_lines(), 0);
}

#[test]
fn the_drop_watch_reports_what_was_dropped_when_it_stops() {
    let _watchdog = common::deadline::watchdog(Duration::from_secs(60), "the drop watch");
    let (dropped, release, queue) = log_to_stuck_sink(10, 50);
    let lost = dropped.dropped_lines();
    assert!(lost >= 39, "{lost}");

    let report = Capture::default();
    logging_to(report.clone(), || {
        // An hour: the one report seen here is the one made on stopping.
        let watch = logs::Watch::start(dropped.clone(), Duration::from_secs(3600)).unwrap();
        drop(watch);
    });
    let lines = report.lines();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("WARN"), "{}", lines[0]);
    assert!(
        lines[0].contains(&format!(
            "{lost} log lines dropped: the log sink (stderr) is too slow"
        )),
        "{}",
        lines[0]
    );
    drop(release);
    drop(queue);
}

#[test]
fn the_drop_watch_stays_quiet_when_nothing_was_dropped() {
    let sink = Capture::default();
    let (writer, queue) = logs::queue(sink.clone(), 100);
    let report = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(report.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        drop(logs::Watch::start(writer.error_counter(), Duration::from_secs(3600)).unwrap());
    });
    drop(queue);
    assert_eq!(report.text(), "");
    assert_eq!(logs::dropped(), 0, "nothing installed in this process");
}
