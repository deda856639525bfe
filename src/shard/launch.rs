//! A shard as a whole process: the command line every shard binary shares (`run`,
//! `check-config`, `restore`), the configuration from the usual layers, logs on stderr, the
//! console on stdin, SIGINT/SIGTERM to stop, and the process exit code. The `shardloop`
//! binary and every game's own `main` ([`super::ShardBuilder::main`]) come through here.
//!
//! Owns the process around the shard; must never hold game or world state itself.

use std::future::Future;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::config::{Config, ConfigArgs, ConfigError, Loaded};
use crate::logs;

use super::restore::{RestoreArgs, restore_command};
use super::{Console, Shard, ShardBuilder};

/// The command line of a shard binary.
#[derive(Debug, Parser)]
#[command(
    version,
    about = "A game shard on shardloop: one thread, one deterministic event loop."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<ShardCommand>,

    #[command(flatten)]
    config: ConfigArgs,

    /// Log line format; RUST_LOG filters (default "info").
    #[arg(long, value_enum, default_value_t = LogFormat::Pretty, global = true)]
    log_format: LogFormat,

    /// Start a new world even though `Saves/` holds no save while backups or archives do
    /// (without it the shard refuses: the data directory may be the wrong one, or unmounted).
    #[arg(long, global = true)]
    new_world: bool,

    /// For tests: the wall clock reads this instant (RFC 3339) at startup and advances from
    /// there, so autosave and archive periods do not depend on when a test runs.
    #[arg(long, hide = true, value_name = "TIMESTAMP")]
    clock_start: Option<jiff::Timestamp>,

    /// FAULT INJECTION, for tests only: DURATION after "ready", a loop phase panics as a bug
    /// would, and the shard stops on the fault (final save, exit code 70). Hidden, and only in
    /// builds with the `testkit` feature (the binary cargo builds for this crate's tests); no
    /// configuration file or variable can set it.
    #[cfg(any(test, feature = "testkit"))]
    #[arg(long, hide = true, value_name = "DURATION", value_parser = humantime::parse_duration)]
    fault_inject_phase_panic: Option<std::time::Duration>,
}

/// The subcommands every shard binary has.
#[derive(Debug, Clone, Subcommand)]
enum ShardCommand {
    /// Run the shard (the default).
    Run,
    /// Print the effective configuration and the source of each value, then exit.
    CheckConfig,
    /// Put the save in an archive in place (the shard must be stopped), or list backups and
    /// archives.
    Restore(RestoreArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// One human-readable line per event.
    Pretty,
    /// One JSON object per line, for log collectors.
    Json,
}

impl From<LogFormat> for logs::Format {
    fn from(format: LogFormat) -> logs::Format {
        match format {
            LogFormat::Pretty => logs::Format::Pretty,
            LogFormat::Json => logs::Format::Json,
        }
    }
}

/// [`ShardBuilder::main_with`]: the command line, then the binary's own `tools` or one of
/// the shard's subcommands.
pub(super) fn main_with<T: Subcommand>(
    builder: ShardBuilder,
    tools: impl FnOnce(T) -> ExitCode,
) -> ExitCode {
    let command = T::augment_subcommands(Cli::command());
    let matches = command.get_matches();
    if let Some((name, _)) = matches.subcommand()
        && T::has_subcommand(name)
    {
        return match T::from_arg_matches(&matches) {
            Ok(tool) => tools(tool),
            Err(e) => e.exit(),
        };
    }
    match Cli::from_arg_matches(&matches) {
        Ok(cli) => shard_command(builder, cli),
        Err(e) => e.exit(),
    }
}

fn shard_command(builder: ShardBuilder, cli: Cli) -> ExitCode {
    let loaded = match load_config(&builder, &cli.config) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    match cli.command.unwrap_or(ShardCommand::Run) {
        ShardCommand::CheckConfig => {
            print!("{}", loaded.report());
            if let Some(note) = super::offsite::check_config_note(&loaded.config) {
                println!("# {note}");
            }
            ExitCode::SUCCESS
        }
        ShardCommand::Restore(args) => {
            if let Some(warning) = loaded.ignored_env_warning() {
                eprintln!("shardloop restore: {warning}");
            }
            restore_command(&loaded.config, &args)
        }
        ShardCommand::Run => {
            // Held to the end: dropping it writes out the lines still queued.
            let _logs = logs::init(cli.log_format.into());
            if let Some(warning) = loaded.ignored_env_warning() {
                tracing::warn!("{warning}");
            }
            let mut config = loaded.config;
            if let Some(start) = cli.clock_start {
                tracing::warn!(%start, "--clock-start: the wall clock is pinned (a test flag)");
                config.time.clock_start = Some(start);
            }
            if cli.new_world {
                config.server.new_world = true;
            }
            #[cfg(any(test, feature = "testkit"))]
            if let Some(after) = cli.fault_inject_phase_panic {
                tracing::warn!(
                    "--fault-inject-phase-panic: a loop phase will panic {} after ready (a \
                     fault-injection test flag)",
                    humantime::format_duration(after)
                );
                config.server.fault_inject_phase_panic = Some(after);
            }
            match builder.build(&config) {
                Ok(shard) => run_process(shard),
                Err(e) => {
                    tracing::error!("cannot build the shard: {e}");
                    ExitCode::from(ConfigError::EXIT_CODE as u8)
                }
            }
        }
    }
}

/// The configuration with the builder's game sections, or the exit code after printing why
/// it is unusable.
fn load_config(builder: &ShardBuilder, args: &ConfigArgs) -> Result<Loaded, ExitCode> {
    args.load_options()
        .and_then(|mut options| {
            options.sections.extend(builder.sections.iter().cloned());
            Config::load(&options)
        })
        .map_err(|e| {
            eprintln!("shardloop: {e}");
            ExitCode::from(ConfigError::EXIT_CODE as u8)
        })
}

/// Runs `shard` on the runtime its backend needs, with the console on stdin and
/// SIGINT/SIGTERM as the stop request, and turns the outcome into the exit code: 0 after a
/// clean stop with its final save, the error's code otherwise
/// ([`super::ShardError::exit_code`]).
pub fn run_process(shard: Shard) -> ExitCode {
    let config = shard.config();
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        data_dir = %config.server.data_dir.display(),
        idle_wait = ?config.server.idle_wait,
        "shardloop starting"
    );
    // A file size limit (ulimit -f) makes a too-large write fail with EFBIG, which a save
    // reports and survives; by default SIGXFSZ would kill the shard instead.
    // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let backend = config.network.backend_kind();
    // The stop signals are watched on a thread of their own (below), so nothing on the loop
    // thread waits on tokio's drivers.
    let mut shard = shard;
    shard.owns_its_thread = true;
    let stopped = backend.block_on(async {
        let stop = stop_signals().map_err(|e| {
            tracing::error!("cannot listen for SIGINT/SIGTERM: {e}");
            ExitCode::FAILURE
        })?;
        shard
            .run_with(backend, Console::stdio(), stop)
            .await
            .map_err(|e| {
                tracing::error!("{e}");
                ExitCode::from(e.exit_code())
            })
    });
    match stopped {
        Ok(Ok(stopped)) => match stopped.final_save {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!("the final save failed ({e}): the last save on disk is older");
                ExitCode::FAILURE
            }
        },
        Ok(Err(code)) => code,
        Err(e) => {
            tracing::error!("cannot start the {} runtime: {e}", backend.name());
            ExitCode::FAILURE
        }
    }
}

/// Ctrl-C (SIGINT), or SIGTERM from a service manager. Both are registered before this
/// returns, so a signal that arrives once the shard says "ready" is never missed.
///
/// They are watched on a thread of their own, with its own small tokio runtime, and the first
/// one completes the returned future from there (a cross-thread wake of the loop, like a
/// post): the loop thread then has no tokio driver to wait on, and can park in its own wait.
///
/// The first one starts a clean stop (with its final save). A second one while that runs
/// exits at once, after saying so: the save being written is abandoned, and the previous one
/// in `Saves/` is what the next start loads (a half-written save is never loaded).
fn stop_signals() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (registered, ready) = std::sync::mpsc::channel::<std::io::Result<()>>();
    std::thread::Builder::new()
        .name("shard-signals".into())
        .spawn(move || {
            let watch = async {
                let interrupt = signal(SignalKind::interrupt())?;
                let terminate = signal(SignalKind::terminate())?;
                Ok::<_, std::io::Error>((interrupt, terminate))
            };
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = registered.send(Err(e));
                    return;
                }
            };
            runtime.block_on(async move {
                let (mut interrupt, mut terminate) = match watch.await {
                    Ok(signals) => signals,
                    Err(e) => {
                        let _ = registered.send(Err(e));
                        return;
                    }
                };
                let _ = registered.send(Ok(()));
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
                let _ = stop.send(());
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
                tracing::warn!(
                    "second stop signal: exiting now without the final save; the last \
                     complete save in Saves/ is what the next start loads"
                );
                logs::exit(130);
            });
        })?;
    ready
        .recv()
        .map_err(|_| std::io::Error::other("the signal thread ended before registering"))??;
    Ok(async move {
        // Only a first signal completes it: a thread that is gone never stops the shard, but
        // says so, since SIGINT/SIGTERM then no longer bring a clean stop.
        if stopped.await.is_err() {
            tracing::error!(
                "the stop-signal thread ended: SIGINT/SIGTERM no longer stop the shard cleanly; \
                 use the console's `shutdown`"
            );
            std::future::pending::<()>().await;
        }
    })
}
