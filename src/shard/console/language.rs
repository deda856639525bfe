//! The console's command language: a table of command specs (name, arguments, one line of
//! help, the function that runs it), and how one typed line becomes one answer.
//!
//! A command is one [`Spec`] in a table plus the function it names; lookup, the argument
//! checks every command shares, `help` and the error lines all come from here, so the
//! commands never repeat them. Owns parsing and error texts; must never run anything itself
//! (the functions in the table do) and never block.

use std::fmt;
use std::time::Duration;

use super::MAX_LINE;

/// One console command, answering on a state `S`.
pub struct Spec<S> {
    /// What the operator types (matched case-insensitively).
    pub name: &'static str,
    /// The arguments, for `help`: `""`, or e.g. `"<every> [warning]"`.
    pub args: &'static str,
    /// One line of help.
    pub help: &'static str,
    /// Runs the command: the answer, or why its arguments are refused (nothing changed).
    pub run: fn(&S, Args<'_>) -> Result<String, String>,
}

/// The words after a command's name.
#[derive(Debug, Clone, Copy)]
pub struct Args<'a> {
    words: &'a [&'a str],
}

impl<'a> Args<'a> {
    /// The arguments, split on whitespace, in order (the command's name not among them).
    #[must_use]
    pub fn words(&self) -> &'a [&'a str] {
        self.words
    }

    /// For commands that take no arguments.
    pub fn none(&self) -> Result<(), String> {
        match self.words {
            [] => Ok(()),
            _ => Err("takes no arguments".into()),
        }
    }
}

/// A duration as the operator types it (`30m`, `1h 30m` is two words: use `90m`).
pub fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{:?} is not a duration: {e}", abbreviate(text)))
}

/// Why a console line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsoleError {
    /// The line is not valid UTF-8.
    NotUtf8,
    /// The line is longer than [`MAX_LINE`] bytes (it was skipped, not read).
    TooLong,
    /// No command has this name (the first word, shortened for display).
    Unknown(String),
    /// The command refused its arguments; nothing changed.
    BadArguments {
        /// The command's name.
        command: &'static str,
        /// Why, as the command put it.
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

/// The answer to one typed `line` (without its newline): the command's answer or an error
/// line. `None` for a blank line, which gets no answer.
pub fn answer<S>(commands: &[Spec<S>], state: &S, line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let (name, rest) = words.split_first()?;
    let Some(spec) = commands.iter().find(|c| c.name.eq_ignore_ascii_case(name)) else {
        return Some(ConsoleError::Unknown(abbreviate(line.trim())).to_string());
    };
    Some(match (spec.run)(state, Args { words: rest }) {
        Ok(answer) => answer,
        Err(reason) => ConsoleError::BadArguments {
            command: spec.name,
            reason,
        }
        .to_string(),
    })
}

/// The text of `help`: every command with its arguments and what it does.
#[must_use]
pub fn help<S>(commands: &[Spec<S>]) -> String {
    let mut out = String::from("commands:\n");
    for spec in commands {
        let usage = match spec.args {
            "" => spec.name.to_owned(),
            args => format!("{} {args}", spec.name),
        };
        out.push_str(&format!("  {usage:<28} {}\n", spec.help));
    }
    out
}

/// The first name that two specs of `commands` share (names are case-insensitive), if any.
pub fn duplicate_name<S>(commands: &[Spec<S>]) -> Option<&'static str> {
    commands.iter().enumerate().find_map(|(i, a)| {
        commands[..i]
            .iter()
            .any(|b| b.name.eq_ignore_ascii_case(a.name))
            .then_some(a.name)
    })
}

/// At most 40 characters of what the operator typed, for error messages.
fn abbreviate(word: &str) -> String {
    match word.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &word[..cut]),
        None => word.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    type Seen = RefCell<Vec<String>>;

    fn record(seen: &Seen, args: Args<'_>) -> Result<String, String> {
        seen.borrow_mut().push(args.words().join(" "));
        Ok(format!("ran with {:?}", args.words()))
    }

    fn quiet(_: &Seen, args: Args<'_>) -> Result<String, String> {
        args.none()?;
        Ok("quiet".into())
    }

    const TABLE: &[Spec<Seen>] = &[
        Spec {
            name: "record",
            args: "[words...]",
            help: "remembers its arguments",
            run: record,
        },
        Spec {
            name: "quiet",
            args: "",
            help: "takes nothing",
            run: quiet,
        },
    ];

    #[test]
    fn finds_commands_case_insensitively_and_passes_the_rest() {
        let seen = Seen::default();
        assert_eq!(
            answer(TABLE, &seen, "  RECORD a  b "),
            Some("ran with [\"a\", \"b\"]".into())
        );
        assert_eq!(answer(TABLE, &seen, "   "), None);
        assert_eq!(*seen.borrow(), ["a b"]);
    }

    #[test]
    fn refuses_unknown_commands_and_bad_arguments_with_one_line() {
        let seen = Seen::default();
        assert_eq!(
            answer(TABLE, &seen, "rm -rf /").unwrap(),
            "error: unknown command 'rm -rf /'; type 'help' for the list"
        );
        let long = "z".repeat(500);
        assert!(answer(TABLE, &seen, &long).unwrap().len() < 120);
        assert_eq!(
            answer(TABLE, &seen, "quiet please").unwrap(),
            "error: quiet: takes no arguments; nothing changed"
        );
        assert!(seen.borrow().is_empty());
    }

    #[test]
    fn help_lists_every_command_with_its_arguments() {
        let help = help(TABLE);
        assert!(help.contains("record [words...]"), "{help}");
        assert!(help.contains("takes nothing"), "{help}");
        assert_eq!(duplicate_name(TABLE), None);
    }

    #[test]
    fn durations_are_humantime() {
        assert_eq!(duration("30m"), Ok(Duration::from_secs(1800)));
        assert!(duration("soon").unwrap_err().contains("not a duration"));
    }
}
