//! [`ConfigError`] (one message naming the key, the value and where it came from),
//! [`Origin`] (where a value came from) and [`SectionFault`] (why a game section cannot be
//! declared).

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Prefix of configuration environment variables; `__` separates section and key. Errors
/// name variables with it, so it lives here, below the loader that reads them.
pub const ENV_PREFIX: &str = "SHARD_";

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default.
    Default,
    /// A config file; `line` is 1-based, `None` when it could not be located.
    File {
        /// The path as given (e.g. `config/shard.toml`).
        path: PathBuf,
        /// The line that sets the key.
        line: Option<usize>,
    },
    /// An environment variable, e.g. `SHARD_SERVER__IDLE_WAIT`.
    Env {
        /// The variable's name.
        var: String,
    },
    /// A command-line flag, e.g. `--idle-wait`.
    Cli {
        /// The flag.
        flag: String,
    },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File {
                path,
                line: Some(line),
            } => write!(f, "{} line {line}", path.display()),
            Origin::File { path, line: None } => write!(f, "{}", path.display()),
            Origin::Env { var } => write!(f, "environment variable {var}"),
            Origin::Cli { flag } => write!(f, "command line {flag}"),
        }
    }
}

/// Why the configuration could not be loaded. `Display` is the one line (or two, for TOML
/// syntax) to show the operator; the binary prints it and exits with [`Self::EXIT_CODE`].
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// A config file named explicitly (`--config PATH`) does not exist.
    MissingFile {
        /// The path given.
        path: PathBuf,
    },
    /// The config file exists but could not be read (permissions, not UTF-8, a directory).
    Read {
        /// The path given.
        path: PathBuf,
        /// The underlying error.
        error: io::Error,
    },
    /// The config file is not valid TOML.
    Syntax {
        /// The path given.
        path: PathBuf,
        /// 1-based line of the error, when the parser said.
        line: Option<usize>,
        /// The parser's description.
        message: String,
    },
    /// A `SHARD_` environment variable that cannot be used at all (bad name, not UTF-8).
    Env {
        /// The variable's name.
        var: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A key no section has.
    UnknownKey {
        /// Dotted key, e.g. `server.idle_wiat`.
        key: String,
        /// The value it was given, TOML-style.
        value: Option<String>,
        /// Where it was set.
        origin: Origin,
        /// The keys valid at that level.
        expected: Vec<String>,
    },
    /// A known key with a value of the wrong type or out of range.
    Invalid {
        /// Dotted key, e.g. `server.idle_wait` (`network.listen[1]` for a list element).
        key: String,
        /// The offending value, TOML-style.
        value: Option<String>,
        /// Where it was set.
        origin: Origin,
        /// What is expected.
        reason: String,
    },
    /// A key that a game section took over (`Section::RENAMED`) set under its old name in
    /// the file, the environment or on the command line.
    Renamed {
        /// The old dotted key, e.g. `network.move_rate`.
        key: String,
        /// Where it was set.
        origin: Origin,
        /// The dotted key it is now, e.g. `demo.move_rate`.
        new_key: String,
    },
    /// A game section that cannot be declared (see `SectionSpec`): a mistake in the game's
    /// code, not in the operator's configuration, found before any value is read.
    Section {
        /// The section's `NAME`.
        name: String,
        /// What is wrong with the declaration.
        fault: SectionFault,
    },
}

/// Why a game section cannot be declared ([`ConfigError::Section`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SectionFault {
    /// `NAME` is not lowercase ASCII letters, digits and single `_` between them, starting
    /// with a letter (so that `SHARD_<NAME>__<KEY>` splits back into section and key).
    BadName,
    /// `NAME` is one of the engine's own sections (`server`, `network`, ...).
    EngineSection,
    /// Another declared section has the same `NAME` (or one section is declared twice).
    DeclaredTwice,
    /// The section's `Default` value does not serialize to a table of keys.
    NotATable,
    /// An entry of `RENAMED` is not (old dotted key, key in this section), or renames a key
    /// of this section to itself.
    BadRename {
        /// The entry's old key.
        old: String,
        /// The entry's key in this section.
        new: String,
    },
}

impl fmt::Display for SectionFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SectionFault::BadName => f.write_str(
                "a section name is lowercase ASCII letters, digits and single '_' between them, \
                 starting with a letter",
            ),
            SectionFault::EngineSection => {
                f.write_str("the engine has a section of that name: choose another")
            }
            SectionFault::DeclaredTwice => f.write_str(
                "it is declared twice (two sections with one name, or one section pushed twice)",
            ),
            SectionFault::NotATable => {
                f.write_str("its default value does not serialize to a table of keys")
            }
            SectionFault::BadRename { old, new } => write!(
                f,
                "RENAMED entry ({old:?}, {new:?}) is not an old dotted key and a key of this \
                 section"
            ),
        }
    }
}

impl ConfigError {
    /// The process exit code for a configuration error: nothing was started.
    pub const EXIT_CODE: i32 = 2;

    /// The dotted key at fault, if the error is about one key.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownKey { key, .. }
            | ConfigError::Invalid { key, .. }
            | ConfigError::Renamed { key, .. } => Some(key),
            _ => None,
        }
    }

    /// Where the faulty value came from, if the error is about one value.
    pub fn origin(&self) -> Option<&Origin> {
        match self {
            ConfigError::UnknownKey { origin, .. }
            | ConfigError::Invalid { origin, .. }
            | ConfigError::Renamed { origin, .. } => Some(origin),
            _ => None,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::MissingFile { path } => write!(
                f,
                "config file {} does not exist (a config file named explicitly must exist)",
                path.display()
            ),
            ConfigError::Read { path, error } => {
                write!(f, "cannot read config file {}: {error}", path.display())
            }
            ConfigError::Syntax {
                path,
                line,
                message,
            } => {
                let origin = Origin::File {
                    path: path.clone(),
                    line: *line,
                };
                write!(f, "{origin}: invalid TOML: {message}")
            }
            ConfigError::Env { var, reason } => {
                write!(f, "environment variable {var}: {reason}")
            }
            ConfigError::UnknownKey {
                key,
                value,
                origin,
                expected,
            } => {
                write!(f, "{origin}: unknown key {key}")?;
                if let Some(value) = value {
                    write!(f, " = {value}")?;
                }
                write!(f, "; valid keys here: {}", expected.join(", "))
            }
            ConfigError::Invalid {
                key,
                value,
                origin,
                reason,
            } => {
                write!(f, "{origin}: {key}")?;
                if let Some(value) = value {
                    write!(f, " = {value}")?;
                }
                write!(f, ": {reason}")
            }
            ConfigError::Renamed {
                key,
                origin,
                new_key,
            } => {
                write!(f, "{key} ({origin}) moved to {new_key}: rename it")?;
                if let Origin::Env { .. } = origin {
                    let var = new_key.replace('.', "__").to_ascii_uppercase();
                    write!(f, " to {}{var}", ENV_PREFIX)?;
                }
                Ok(())
            }
            ConfigError::Section { name, fault } => {
                write!(f, "game section {name:?} cannot be declared: {fault}")
            }
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Read { error, .. } => Some(error),
            _ => None,
        }
    }
}
