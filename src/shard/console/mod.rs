//! The operator console: line commands read from stdin, run on the loop, answered on stdout.
//!
//! Three parts, so that nothing blocks the loop:
//! - a *reader* thread does the blocking reads, cuts lines (at most [`MAX_LINE`] bytes),
//!   checks they are UTF-8 and sends them over a channel;
//! - a loop *task* answers each line with the shard's command table ([`language`],
//!   [`commands`]) — on the loop thread, so a command may look at the world directly;
//! - a *printer* thread writes the answers, so a slow terminal or pipe never stalls a tick.
//!
//! Bad input — garbage, a line over 64 KiB, bytes that are not UTF-8 — gets one error line and
//! changes nothing. A closed stdin (`</dev/null`, a service manager) just ends the reader.
//!
//! This module owns the console's threads and its plumbing; what the commands are is
//! [`commands`]'s business. It must never block the loop thread.

pub(super) mod commands;
pub mod language;

use std::io::{self, BufRead, Write};
use std::sync::mpsc as std_mpsc;
use std::thread;

use tokio::sync::mpsc;

pub use language::{Args, ConsoleError, Spec};

/// The longest console line accepted, in bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// Where console commands come from and answers go. `main` uses [`Console::stdio`]; tests
/// pass in-memory readers and writers; [`Console::none`] runs headless.
pub struct Console {
    pub(super) io: Option<(Box<dyn BufRead + Send>, Box<dyn Write + Send>)>,
}

impl Console {
    /// Commands on stdin, answers on stdout. A closed stdin (`</dev/null`) is fine.
    pub fn stdio() -> Console {
        Console::new(io::BufReader::new(io::stdin()), io::stdout())
    }

    pub fn new(
        input: impl BufRead + Send + 'static,
        output: impl Write + Send + 'static,
    ) -> Console {
        Console {
            io: Some((Box::new(input), Box::new(output))),
        }
    }

    /// No console at all.
    pub fn none() -> Console {
        Console { io: None }
    }
}

/// Reads the next line into `buf` (newline stripped). A line longer than [`MAX_LINE`] is read
/// to its end and reported as [`ConsoleError::TooLong`] without being kept. `Ok(None)` at
/// end of input.
pub fn read_line(
    input: &mut impl BufRead,
    buf: &mut Vec<u8>,
) -> io::Result<Option<Result<(), ConsoleError>>> {
    buf.clear();
    let mut too_long = false;
    let mut saw_any = false;
    loop {
        let available = input.fill_buf()?;
        if available.is_empty() {
            return Ok(saw_any.then_some(if too_long {
                Err(ConsoleError::TooLong)
            } else {
                Ok(())
            }));
        }
        saw_any = true;
        let (chunk, consumed, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        if !too_long {
            buf.extend_from_slice(chunk);
            if buf.len() > MAX_LINE {
                too_long = true;
                buf.clear();
            }
        }
        input.consume(consumed);
        if done {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Some(if too_long {
                Err(ConsoleError::TooLong)
            } else {
                Ok(())
            }));
        }
    }
}

/// Starts the console on `input` (normally stdin) and `output` (normally stdout). Must be
/// called on the loop thread: `answer` runs there, once per line, and returns what to print
/// (`None`: nothing, for a blank line). [`language::answer`] over a command table is the
/// usual `answer`.
pub fn start<H>(
    input: impl BufRead + Send + 'static,
    output: impl Write + Send + 'static,
    answer: H,
) -> io::Result<Printer>
where
    H: FnMut(&str) -> Option<String> + 'static,
{
    let (lines_tx, lines_rx) = mpsc::unbounded_channel();
    let (print_tx, print_rx) = std_mpsc::channel::<Print>();
    thread::Builder::new()
        .name("console-in".into())
        .spawn(move || read_commands(input, &lines_tx))?;
    thread::Builder::new()
        .name("console-out".into())
        .spawn(move || print_answers(output, &print_rx))?;
    drop(crate::spawn(run_commands(
        lines_rx,
        print_tx.clone(),
        answer,
    )));
    Ok(Printer { tx: print_tx })
}

/// The console's output side, kept by the shard so that answers given just before a
/// shutdown are on the screen before the process exits.
#[derive(Debug, Clone)]
pub struct Printer {
    tx: std_mpsc::Sender<Print>,
}

impl Printer {
    /// Waits (blocking, at most `timeout`) until every answer given so far is written and
    /// flushed. False if the printer is gone or slower than `timeout`. For shutdown only:
    /// it blocks the calling thread.
    pub fn flush(&self, timeout: std::time::Duration) -> bool {
        let (done_tx, done_rx) = std_mpsc::channel();
        self.tx.send(Print::Flush(done_tx)).is_ok() && done_rx.recv_timeout(timeout).is_ok()
    }
}

#[derive(Debug)]
enum Print {
    Answer(String),
    /// Acknowledged once everything queued before it is written.
    Flush(std_mpsc::Sender<()>),
}

/// A line as typed, or why it was refused before anyone looked at it.
type Line = Result<String, ConsoleError>;

fn read_commands(mut input: impl BufRead, lines: &mpsc::UnboundedSender<Line>) {
    let mut buf = Vec::new();
    loop {
        let parsed = match read_line(&mut input, &mut buf) {
            Ok(Some(Ok(()))) => {
                String::from_utf8(std::mem::take(&mut buf)).map_err(|_| ConsoleError::NotUtf8)
            }
            Ok(Some(Err(e))) => Err(e),
            Ok(None) => return, // end of input: a headless shard has no console
            Err(e) => {
                tracing::warn!("console input failed: {e}; the console is closed");
                return;
            }
        };
        if lines.send(parsed).is_err() {
            return; // the loop is gone
        }
    }
}

async fn run_commands<H>(
    mut lines: mpsc::UnboundedReceiver<Line>,
    print: std_mpsc::Sender<Print>,
    mut answer: H,
) where
    H: FnMut(&str) -> Option<String>,
{
    while let Some(line) = lines.recv().await {
        let answer = match line {
            Ok(line) => match answer(&line) {
                Some(answer) => answer,
                None => continue,
            },
            Err(e) => e.to_string(),
        };
        if print.send(Print::Answer(answer)).is_err() {
            return;
        }
    }
}

fn print_answers(mut output: impl Write, queue: &std_mpsc::Receiver<Print>) {
    for item in queue {
        match item {
            Print::Answer(answer) => {
                let text = answer.trim_end();
                if writeln!(output, "{text}")
                    .and_then(|()| output.flush())
                    .is_err()
                {
                    return;
                }
            }
            Print::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<Result<Vec<u8>, ConsoleError>> {
        let mut reader = io::BufReader::with_capacity(7, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while let Some(r) = read_line(&mut reader, &mut buf).expect("in-memory read") {
            out.push(r.map(|()| buf.clone()));
        }
        out
    }

    #[test]
    fn cuts_lines_strips_crlf_and_keeps_a_last_unterminated_line() {
        assert_eq!(
            lines(b"help\r\nstatus\n\nlast"),
            vec![
                Ok(b"help".to_vec()),
                Ok(b"status".to_vec()),
                Ok(Vec::new()),
                Ok(b"last".to_vec())
            ]
        );
        assert!(lines(b"").is_empty());
    }

    #[test]
    fn an_over_long_line_is_refused_and_the_next_one_still_works() {
        let mut input = vec![b'x'; MAX_LINE + 1];
        input.extend_from_slice(b"\nstatus\n");
        assert_eq!(
            lines(&input),
            vec![Err(ConsoleError::TooLong), Ok(b"status".to_vec())]
        );
        let exactly = vec![b'y'; MAX_LINE];
        assert_eq!(lines(&exactly), vec![Ok(exactly.clone())]);
    }
}
