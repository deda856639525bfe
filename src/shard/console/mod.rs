//! The operator console: line commands read from stdin, run on the loop, answered on stdout.
//!
//! Three parts, so that nothing blocks the loop:
//! - a *reader* thread does the blocking reads, cuts lines (at most [`MAX_LINE`] bytes),
//!   checks they are UTF-8 and sends them over a channel;
//! - a loop *task* answers each line with the shard's command table ([`language`],
//!   `commands`) — on the loop thread, so a command may look at the world directly;
//! - a *printer* thread writes the answers, so a slow terminal or pipe never stalls a tick.
//!
//! Bad input — garbage, a line over 64 KiB, bytes that are not UTF-8 — gets one error line and
//! changes nothing. A closed stdin (`</dev/null`, a service manager) just ends the reader.
//!
//! This module owns the console's threads and its plumbing; what the commands are is
//! `commands`' business. It must never block the loop thread.

pub(super) mod cadence_file;
pub(super) mod commands;
pub mod language;
pub(super) mod loopstats;

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

    /// Commands read line by line from `input`, answers written to `output`, each on a thread
    /// of its own (a blocking reader never stalls the loop).
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

/// Cuts a byte stream into console lines, whatever chunks it arrives in. A line longer than
/// [`MAX_LINE`] is skipped to its end and reported as [`ConsoleError::TooLong`] without being
/// kept; a last line without a newline counts at the end of input.
#[derive(Default)]
struct Cutter {
    /// The line so far (empty once it is known to be too long).
    partial: Vec<u8>,
    too_long: bool,
    /// Bytes of an unfinished line have arrived.
    started: bool,
}

impl Cutter {
    /// Takes `bytes`; every line they complete goes to `out`, in order.
    fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<Line>) {
        while !bytes.is_empty() {
            self.started = true;
            match bytes.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    self.keep(&bytes[..end]);
                    out.push(self.finish_line());
                    bytes = &bytes[end + 1..];
                }
                None => {
                    self.keep(bytes);
                    bytes = &[];
                }
            }
        }
    }

    /// End of input: an unterminated last line is a line.
    fn end(&mut self, out: &mut Vec<Line>) {
        if self.started {
            out.push(self.finish_line());
        }
    }

    fn keep(&mut self, chunk: &[u8]) {
        if self.too_long {
            return;
        }
        self.partial.extend_from_slice(chunk);
        if self.partial.len() > MAX_LINE {
            self.too_long = true;
            self.partial = Vec::new();
        }
    }

    fn finish_line(&mut self) -> Line {
        self.started = false;
        if std::mem::take(&mut self.too_long) {
            return Err(ConsoleError::TooLong);
        }
        let mut line = std::mem::take(&mut self.partial);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        String::from_utf8(line).map_err(|_| ConsoleError::NotUtf8)
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

    /// Prints `answer` after what was answered before it: for work a command started that
    /// answers later, from any thread. False if the printer is gone.
    pub fn say(&self, answer: String) -> bool {
        self.tx.send(Print::Answer(answer)).is_ok()
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

/// Reads `input` until it ends, sending the lines of each read as one batch: lines that
/// arrive together (typed or pasted at once, or written in one go by a script) are answered
/// together, in one turn of the loop, with nothing else of the game in between.
fn read_commands(mut input: impl BufRead, lines: &mpsc::UnboundedSender<Vec<Line>>) {
    let mut cutter = Cutter::default();
    loop {
        let mut batch = Vec::new();
        let read = match input.fill_buf() {
            Ok([]) => None,
            Ok(bytes) => {
                cutter.feed(bytes, &mut batch);
                Some(bytes.len())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!("console input failed: {e}; the console is closed");
                return;
            }
        };
        match read {
            Some(n) => input.consume(n),
            None => cutter.end(&mut batch), // end of input: a headless shard has no console
        }
        if !batch.is_empty() && lines.send(batch).is_err() {
            return; // the loop is gone
        }
        if read.is_none() {
            return;
        }
    }
}

async fn run_commands<H>(
    mut lines: mpsc::UnboundedReceiver<Vec<Line>>,
    print: std_mpsc::Sender<Print>,
    mut answer: H,
) where
    H: FnMut(&str) -> Option<String>,
{
    while let Some(batch) = lines.recv().await {
        for line in batch {
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

    /// The lines of `input` fed in chunks of `chunk` bytes, as text.
    fn cut(input: &[u8], chunk: usize) -> Vec<Result<String, ConsoleError>> {
        let mut cutter = Cutter::default();
        let mut out = Vec::new();
        for piece in input.chunks(chunk) {
            cutter.feed(piece, &mut out);
        }
        cutter.end(&mut out);
        out
    }

    fn lines(input: &[u8]) -> Vec<Result<Vec<u8>, ConsoleError>> {
        let whole = cut(input, input.len().max(1));
        // Any chunking cuts the same lines.
        for chunk in [1, 7, 4096] {
            assert_eq!(cut(input, chunk), whole, "chunks of {chunk}");
        }
        whole
            .into_iter()
            .map(|l| l.map(String::into_bytes))
            .collect()
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

    #[test]
    fn bytes_that_are_not_utf8_are_refused_by_line() {
        assert_eq!(
            lines(b"ok\n\xff\xfe\nok\n"),
            vec![
                Ok(b"ok".to_vec()),
                Err(ConsoleError::NotUtf8),
                Ok(b"ok".to_vec())
            ]
        );
    }
}
