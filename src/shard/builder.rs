//! Building a shard with your own game on it: [`Shard::builder`] takes the games (each made
//! from the configuration once it is loaded), checks them together, and gives a [`Shard`]
//! to run — as a library call ([`Shard::run`]) or as a whole process ([`ShardBuilder::main`],
//! what `cargo run --example town_crier` does).
//!
//! Owns the order games are made and checked in; must never start anything before
//! [`Shard::run`] (building does no I/O).

use std::future::Future;
use std::net::TcpListener;
use std::process::ExitCode;

use crate::config::{Config, Section, SectionSpec};
use crate::game::{BuildError, Game, Games};
use crate::net::BackendKind;

use super::console::commands::COMMANDS;
use super::{Console, ShardError, Stopped};

/// Makes a game from the shard's configuration.
type MakeGame = Box<dyn FnOnce(&Config) -> Game>;

/// A shard's games, before they are checked. Build it with [`Shard::builder`].
#[must_use = "a builder does nothing until it is built and run"]
pub struct ShardBuilder {
    games: Vec<MakeGame>,
    listeners: Option<Vec<TcpListener>>,
    /// The games' own configuration sections, read with the engine's.
    pub(super) sections: Vec<SectionSpec>,
}

/// A shard ready to run: its configuration and its checked games.
#[must_use = "a shard does nothing until it runs"]
pub struct Shard {
    pub(super) config: Config,
    pub(super) games: Games,
    /// Sockets bound by the caller, used instead of binding `network.listen`.
    pub(super) listeners: Option<Vec<TcpListener>>,
    /// The loop may promise that it owns its thread (`EventLoopBuilder::owns_its_thread`):
    /// set by [`super::run_process`], which knows what its stop future waits on; a caller's
    /// own `stop` may be anything, a tokio timer included.
    pub(super) owns_its_thread: bool,
}

impl Shard {
    /// A shard with no game yet: add yours with [`ShardBuilder::game`].
    pub fn builder() -> ShardBuilder {
        ShardBuilder {
            games: Vec::new(),
            listeners: None,
            sections: Vec::new(),
        }
    }

    /// The configuration it was built with.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs the shard with the epoll backend until `stop` completes or the console says
    /// `shutdown` (see the [`super`] module for startup and shutdown). Call it on a current-thread
    /// tokio runtime.
    pub async fn run(
        self,
        console: Console,
        stop: impl Future<Output = ()>,
    ) -> Result<Stopped, ShardError> {
        self.run_with(BackendKind::Epoll, console, stop).await
    }

    /// [`Shard::run`] with the network backend `backend`; run it on the runtime that backend
    /// needs ([`BackendKind::block_on`]).
    pub async fn run_with(
        self,
        backend: BackendKind,
        console: Console,
        stop: impl Future<Output = ()>,
    ) -> Result<Stopped, ShardError> {
        super::run_shard(self, backend, console, stop).await
    }
}

impl ShardBuilder {
    /// Adds a game, made from the configuration when the shard is built: a function
    /// `fn(&Config) -> Game`, or a closure (`|_| my_game()`). Games are started in the order added.
    pub fn game(mut self, make: impl FnOnce(&Config) -> Game + 'static) -> ShardBuilder {
        self.games.push(Box::new(make));
        self
    }

    /// Reads the game's own configuration section `S` (`[S::NAME]` in the file,
    /// `SHARD_<NAME>__<KEY>` in the environment) with the engine's: checked at startup (a bad
    /// key exits 2 naming it and its source), listed by `check-config`, and handed to the
    /// games as `config.section::<S>()`. Without it, a `[S::NAME]` table is an unknown key.
    pub fn section<S: Section>(mut self) -> ShardBuilder {
        self.sections.push(SectionSpec::of::<S>());
        self
    }

    /// Serves on `listeners` (bound by the caller, e.g. to learn a port 0's number first)
    /// instead of binding `network.listen`.
    pub fn listeners(mut self, listeners: Vec<TcpListener>) -> ShardBuilder {
        self.listeners = Some(listeners);
        self
    }

    /// Makes the games from `config` and checks them together: two handlers for one packet
    /// id, a handler for ping, or a console command whose name is taken is an error naming
    /// both registrations. Does no I/O.
    pub fn build(self, config: &Config) -> Result<Shard, BuildError> {
        let games = self.games.into_iter().map(|make| make(config)).collect();
        let built_in: Vec<&'static str> = COMMANDS.iter().map(|c| c.name).collect();
        Ok(Shard {
            config: config.clone(),
            games: Games::check(games, &built_in)?,
            listeners: self.listeners,
            owns_its_thread: false,
        })
    }

    /// Runs the shard as a whole process with the command line every shard binary has:
    /// `run` (the default: the configuration from `config/shard.toml`, `SHARD_*` variables
    /// and the flags `--config`, `--data-dir`, `--listen`, `--idle-wait`, `--log-format`;
    /// logs on stderr, the console on stdin, SIGINT/SIGTERM to stop), `check-config` (the
    /// effective configuration, the games' sections included, and where each value came
    /// from) and `restore` (an archive put in place, or `--list`). Call it from `main`; the
    /// exit code is the process's.
    pub fn main(self) -> ExitCode {
        super::launch::main_with(self, |tool: NoTools| match tool {})
    }

    /// [`ShardBuilder::main`] with the binary's own subcommands `T` beside the shard's (a
    /// `#[derive(clap::Subcommand)]` enum): when one of them is named, `tools` runs it and
    /// its exit code is the process's. The `shardloop` binary adds its operator tools this
    /// way (`probe-host`, `loadgen`, `chart`). The names `run`, `check-config`, `restore` and
    /// `help` are the shard's: a tool may not take one. `--help` describes the binary as a
    /// shard on shardloop, and `--version` is shardloop's.
    pub fn main_with<T: clap::Subcommand>(self, tools: impl FnOnce(T) -> ExitCode) -> ExitCode {
        super::launch::main_with(self, tools)
    }
}

/// No subcommands of the binary's own: [`ShardBuilder::main`].
enum NoTools {}

impl clap::FromArgMatches for NoTools {
    fn from_arg_matches(_: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Err(clap::Error::new(clap::error::ErrorKind::InvalidSubcommand))
    }

    fn update_from_arg_matches(&mut self, _: &clap::ArgMatches) -> Result<(), clap::Error> {
        match *self {}
    }
}

impl clap::Subcommand for NoTools {
    fn augment_subcommands(command: clap::Command) -> clap::Command {
        command
    }

    fn augment_subcommands_for_update(command: clap::Command) -> clap::Command {
        command
    }

    fn has_subcommand(_: &str) -> bool {
        false
    }
}
