//! The operator console: line commands read from stdin, run on the loop, answered on stdout.
//!
//! Three parts, so that nothing blocks the loop:
//! - a *reader* thread does the blocking reads, cuts lines (at most [`MAX_LINE`] bytes),
//!   parses them and sends the result over a channel;
//! - a loop *task* receives each command and runs it with the shard's handler — on the loop
//!   thread, so the handler may look at the world directly;
//! - a *printer* thread writes the answers, so a slow terminal or pipe never stalls a tick.
//!
//! Bad input — garbage, a line over 64 KiB, bytes that are not UTF-8 — gets one error line and
//! changes nothing. A closed stdin (`</dev/null`, a service manager) just ends the reader.
//!
//! This module knows the command *language*; what `status` says is the shard's business.

use std::fmt;
use std::io::{self, BufRead, Write};
use std::sync::mpsc as std_mpsc;
use std::thread;
use std::time::Duration;

use tokio::sync::mpsc;

/// The longest console line accepted, in bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// A console command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Help,
    Status,
    DumpTimers,
    LoopStats,
    /// Save the world now (or right after the save that is writing).
    Save,
    /// Change the autosave cadence; `warning` unchanged when `None`.
    SaveFrequency {
        every: Duration,
        warning: Option<Duration>,
    },
    /// Turn autosave on or off until restart; `None` shows the schedule.
    Autosave(Option<bool>),
    /// Run an archive rollup now.
    Archive,
    /// Archives per kind, the last rollup, the next.
    ArchiveStatus,
    /// Apply archive retention and age pruning now.
    PruneArchives,
    Shutdown,
}

impl Command {
    /// Every command (arguments as placeholders) with its usage and one-line description.
    pub const ALL: [(Command, &'static str, &'static str); 11] = [
        (Command::Help, "help", "list the commands"),
        (
            Command::Status,
            "status",
            "verdict, uptime, entity counts, live timers, saves, last loop: line",
        ),
        (
            Command::DumpTimers,
            "dumptimers",
            "live timers grouped by the line that started them",
        ),
        (
            Command::LoopStats,
            "loopstats",
            "the loop's production counters since start",
        ),
        (Command::Save, "save", "save the world now"),
        (
            Command::SaveFrequency {
                every: Duration::ZERO,
                warning: None,
            },
            "savefrequency",
            "<every> [warning]: autosave cadence, e.g. `savefrequency 30m 1m` (kept across \
             restarts in <data_dir>/autosave.toml)",
        ),
        (
            Command::Autosave(None),
            "autosave",
            "[on|off]: show the autosave schedule, or turn it on/off until restart",
        ),
        (
            Command::Archive,
            "archive",
            "roll backups up into hourly/daily/monthly archives now",
        ),
        (
            Command::ArchiveStatus,
            "archivestatus",
            "archives per kind (count, bytes), the last rollup, the next",
        ),
        (
            Command::PruneArchives,
            "prunearchives",
            "apply archive retention (and archive.prune's max_age) now",
        ),
        (
            Command::Shutdown,
            "shutdown",
            "finish the current iteration, save the world and stop cleanly",
        ),
    ];

    /// Parses one line (without its newline). Command names are case-insensitive; surrounding
    /// blanks ignored.
    pub fn parse(line: &[u8]) -> Result<Option<Command>, ConsoleError> {
        let text = std::str::from_utf8(line).map_err(|_| ConsoleError::NotUtf8)?;
        let mut words = text.split_whitespace();
        let Some(word) = words.next() else {
            return Ok(None);
        };
        let args: Vec<&str> = words.collect();
        let (template, name, _) = Self::ALL
            .iter()
            .find(|(_, name, _)| name.eq_ignore_ascii_case(word))
            .ok_or_else(|| ConsoleError::Unknown(abbreviate(text.trim())))?;
        let bad = |reason: String| ConsoleError::BadArguments {
            command: name,
            reason,
        };
        let command = match template {
            Command::SaveFrequency { .. } => parse_frequency(&args).map_err(bad)?,
            Command::Autosave(_) => match args.as_slice() {
                [] => Command::Autosave(None),
                [switch] if switch.eq_ignore_ascii_case("on") => Command::Autosave(Some(true)),
                [switch] if switch.eq_ignore_ascii_case("off") => Command::Autosave(Some(false)),
                _ => return Err(bad("expected `on` or `off`".into())),
            },
            command if args.is_empty() => *command,
            _ => return Err(bad("takes no arguments".into())),
        };
        Ok(Some(command))
    }

    /// The text of `help`.
    #[must_use]
    pub fn help() -> String {
        let mut out = String::from("commands:\n");
        for (_, name, what) in Self::ALL {
            out.push_str(&format!("  {name:<13} {what}\n"));
        }
        out
    }
}

/// Why a console line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsoleError {
    NotUtf8,
    TooLong,
    Unknown(String),
    BadArguments {
        command: &'static str,
        reason: String,
    },
}

impl fmt::Display for ConsoleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsoleError::NotUtf8 => f.write_str("error: the line is not valid UTF-8; ignored"),
            ConsoleError::TooLong => write!(
                f,
                "error: the line is longer than {} KiB; ignored",
                MAX_LINE / 1024
            ),
            ConsoleError::Unknown(word) => write!(
                f,
                "error: unknown command '{word}'; type 'help' for the list"
            ),
            ConsoleError::BadArguments { command, reason } => {
                write!(f, "error: {command}: {reason}; nothing changed")
            }
        }
    }
}

impl std::error::Error for ConsoleError {}

fn parse_frequency(args: &[&str]) -> Result<Command, String> {
    let duration = |text: &str| {
        humantime::parse_duration(text)
            .map_err(|e| format!("{:?} is not a duration: {e}", abbreviate(text)))
    };
    match args {
        [every] => Ok(Command::SaveFrequency {
            every: duration(every)?,
            warning: None,
        }),
        [every, warning] => Ok(Command::SaveFrequency {
            every: duration(every)?,
            warning: Some(duration(warning)?),
        }),
        _ => Err("usage: savefrequency <every> [warning], e.g. `savefrequency 30m 1m`".into()),
    }
}

/// At most 40 characters of what the operator typed, for error messages.
fn abbreviate(word: &str) -> String {
    match word.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &word[..cut]),
        None => word.to_owned(),
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
/// called on the loop thread: `handler` runs there, once per command, and returns the answer.
pub fn start<H>(
    input: impl BufRead + Send + 'static,
    output: impl Write + Send + 'static,
    handler: H,
) -> io::Result<Printer>
where
    H: FnMut(Command) -> String + 'static,
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
        handler,
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

type Parsed = Result<Option<Command>, ConsoleError>;

fn read_commands(mut input: impl BufRead, lines: &mpsc::UnboundedSender<Parsed>) {
    let mut buf = Vec::new();
    loop {
        let parsed = match read_line(&mut input, &mut buf) {
            Ok(Some(Ok(()))) => Command::parse(&buf),
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
    mut lines: mpsc::UnboundedReceiver<Parsed>,
    print: std_mpsc::Sender<Print>,
    mut handler: H,
) where
    H: FnMut(Command) -> String,
{
    while let Some(parsed) = lines.recv().await {
        let answer = match parsed {
            Ok(Some(command)) => handler(command),
            Ok(None) => continue,
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

    #[test]
    fn parses_commands_and_refuses_garbage() {
        assert_eq!(Command::parse(b"  STATUS "), Ok(Some(Command::Status)));
        assert_eq!(Command::parse(b"dumptimers"), Ok(Some(Command::DumpTimers)));
        assert_eq!(Command::parse(b"   "), Ok(None));
        assert_eq!(Command::parse(b"\xff\xfe"), Err(ConsoleError::NotUtf8));
        let err = Command::parse(b"rm -rf /").unwrap_err();
        assert_eq!(
            err.to_string(),
            "error: unknown command 'rm -rf /'; type 'help' for the list"
        );
        let long = "z".repeat(500);
        let err = Command::parse(long.as_bytes()).unwrap_err().to_string();
        assert!(err.len() < 120, "{err}");
    }

    #[test]
    fn save_commands_take_their_arguments_and_refuse_bad_ones() {
        let min = |m: u64| Duration::from_secs(60 * m);
        assert_eq!(Command::parse(b"save"), Ok(Some(Command::Save)));
        assert_eq!(
            Command::parse(b"SaveFrequency 30m 1m"),
            Ok(Some(Command::SaveFrequency {
                every: min(30),
                warning: Some(min(1))
            }))
        );
        assert_eq!(
            Command::parse(b"savefrequency 2h"),
            Ok(Some(Command::SaveFrequency {
                every: min(120),
                warning: None
            }))
        );
        assert_eq!(
            Command::parse(b"autosave off"),
            Ok(Some(Command::Autosave(Some(false))))
        );
        assert_eq!(
            Command::parse(b"autosave"),
            Ok(Some(Command::Autosave(None)))
        );
        for bad in [
            &b"savefrequency"[..],
            b"savefrequency soon",
            b"savefrequency 1h 1m 1s",
        ] {
            let err = Command::parse(bad).unwrap_err().to_string();
            assert!(
                err.starts_with("error: savefrequency:") && err.ends_with("nothing changed"),
                "{err}"
            );
        }
        let err = Command::parse(b"autosave maybe").unwrap_err().to_string();
        assert!(err.contains("`on` or `off`"), "{err}");
        let err = Command::parse(b"save now please").unwrap_err().to_string();
        assert!(err.contains("takes no arguments"), "{err}");
    }

    #[test]
    fn help_lists_every_command() {
        let help = Command::help();
        for (_, name, _) in Command::ALL {
            assert!(help.contains(name));
        }
    }
}
