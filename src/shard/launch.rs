//! A shard as a whole process: the configuration from the usual layers, logs on stderr, the
//! console on stdin, SIGINT/SIGTERM to stop, and the process exit code. The binary's `run`
//! and every custom shard's `main` ([`super::ShardBuilder::main`]) come through here.
//!
//! Owns the process around the shard; must never hold game or world state itself.

use std::future::Future;
use std::process::ExitCode;

use clap::Parser;

use crate::config::{Config, ConfigArgs, ConfigError};
use crate::logs;

use super::{Console, Shard, ShardBuilder};

/// The flags of a custom shard's process.
#[derive(Debug, Parser)]
#[command(about = "A game shard on shardloop")]
struct Flags {
    #[command(flatten)]
    config: ConfigArgs,

    /// Log line format: pretty or json; RUST_LOG filters (default "info").
    #[arg(long, default_value = "pretty", value_parser = ["pretty", "json"])]
    log_format: String,
}

/// [`ShardBuilder::main`]: flags, configuration, logs, then [`run_process`].
pub(super) fn main(builder: ShardBuilder) -> ExitCode {
    let flags = Flags::parse();
    let loaded = match flags
        .config
        .load_options()
        .and_then(|options| Config::load(&options))
    {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(ConfigError::EXIT_CODE as u8);
        }
    };
    let format = match flags.log_format.as_str() {
        "json" => logs::Format::Json,
        _ => logs::Format::Pretty,
    };
    // Held to the end: dropping it writes out the lines still queued.
    let _logs = logs::init(format);
    if let Some(warning) = loaded.ignored_env_warning() {
        tracing::warn!("{warning}");
    }
    match builder.build(&loaded.config) {
        Ok(shard) => run_process(shard),
        Err(e) => {
            tracing::error!("cannot build the shard: {e}");
            ExitCode::from(2)
        }
    }
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
/// The first one starts a clean stop (with its final save). A second one while that runs
/// exits at once, after saying so: the save being written is abandoned, and the previous one
/// in `Saves/` is what the next start loads (a half-written save is never loaded).
fn stop_signals() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        tokio::spawn(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            tracing::warn!(
                "second stop signal: exiting now without the final save; the last complete \
                 save in Saves/ is what the next start loads"
            );
            logs::exit(130);
        });
    })
}
