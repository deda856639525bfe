//! The `shardloop` binary: parse the command line, load the configuration (nothing starts
//! if it is bad: one message, exit code 2), set up logging, and run the chosen command.
//!
//! - `shardloop [run]`: the shard, on a current-thread tokio runtime, until SIGINT/SIGTERM
//!   or `shutdown` on the console; exit 0 after a clean stop, 1 if its final save failed, 70
//!   after a stop on a fault (a panic that escaped a loop phase, a dead io_uring ring: the
//!   final save was attempted, and the log says whether it was written).
//! - `shardloop check-config`: the effective configuration and where each value came from.
//! - `shardloop probe-host`: how well this host sleeps, wakes and reads its clocks.
//! - `shardloop restore PATH`: put the save in an archive in place (the shard must be
//!   stopped); exit 0, or 2 naming the archive and the reason with every file where it was.
//!   `shardloop restore --list`: the backups and archives, with their entity counts.
//! - `shardloop loadgen --connect ADDR ...`: a load client for a running shard (or
//!   `examples/tokio_echo.rs`) on this machine; prints round trips/s and RTT percentiles, or
//!   in a hostile mode (`idle`, `ping-only`, `move-flood`, `slow-reader`, `churn`) what the
//!   server did to its connections.
//! - `shardloop chart FILE.csv [-o OUT.svg]`: draw a `loopstats csv` history as an SVG chart
//!   (beside the CSV by default); exit 2 naming the file, line and column when the CSV is bad.
//!
//! The two operator tools are the binary's own modules ([`tools`]), not the library's.

mod tools;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use shardloop::config::{Config, ConfigArgs, ConfigError, Loaded};
use shardloop::persist::archive::restore;
use shardloop::persist::{Layout, lock::ShardLocks};
use shardloop::runtime::history::read_csv;
use shardloop::shard::chart;
use shardloop::{logs, shard};

use tools::loadgen::{self, LoadgenArgs};
use tools::probe_host;

/// The core of a game shard: one thread, one deterministic event loop.
#[derive(Debug, Parser)]
#[command(name = "shardloop", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,

    #[command(flatten)]
    config: ConfigArgs,

    /// Log line format; RUST_LOG filters (default "info").
    #[arg(long, value_enum, default_value_t = LogFormat::Pretty, global = true)]
    log_format: LogFormat,

    /// For tests: the wall clock reads this instant (RFC 3339) at startup and advances from
    /// there, so autosave and archive periods do not depend on when a test runs.
    #[arg(long, hide = true, value_name = "TIMESTAMP")]
    clock_start: Option<jiff::Timestamp>,

    /// FAULT INJECTION, for tests only: DURATION after "ready", a loop phase panics as a bug
    /// would, and the shard stops on the fault (final save, exit code 70). Hidden; no
    /// configuration file or variable can set it.
    #[arg(long, hide = true, value_name = "DURATION", value_parser = humantime::parse_duration)]
    fault_inject_phase_panic: Option<std::time::Duration>,
}

#[derive(Debug, Clone, Subcommand)]
enum Cmd {
    /// Run the shard (the default).
    Run,
    /// Print the effective configuration and the source of each value, then exit.
    CheckConfig,
    /// Measure this host's clocks, sleeps and wake-ups, and grade each against a reference.
    ProbeHost,
    /// Load a running server on loopback with N clients (ping or walk) and report round trips
    /// and RTT, or attack it (idle, ping-only, move-flood, slow-reader, churn) and report
    /// what it did to the connections.
    Loadgen(LoadgenArgs),
    /// Put the save in an archive in place (the shard must be stopped), or list backups and
    /// archives.
    Restore(RestoreArgs),
    /// Draw the chart of a `loopstats csv` file: where the loop thread's time went, second by
    /// second, with the wheel lag.
    Chart(ChartArgs),
}

#[derive(Debug, Clone, clap::Args)]
struct ChartArgs {
    /// The CSV that `loopstats csv` wrote.
    #[arg(value_name = "FILE.csv")]
    csv: PathBuf,

    /// Where to write the SVG; by default beside the CSV, with the extension `.svg`.
    #[arg(short, long, value_name = "OUT.svg")]
    output: Option<PathBuf>,
}

#[derive(Debug, Clone, clap::Args)]
struct RestoreArgs {
    /// The archive (.tar.zst, .tar.gz/.tgz, .zip or .tar) holding one save, at its root or
    /// in one top folder. The current save moves to Backups/Restored-<time>/, the archive
    /// to Archives/Restored/.
    #[arg(
        value_name = "PATH",
        required_unless_present = "list",
        conflicts_with = "list"
    )]
    path: Option<PathBuf>,

    /// List the backups and archives, with size and entity counts.
    #[arg(long)]
    list: bool,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.clone().unwrap_or(Cmd::Run) {
        Cmd::Loadgen(args) => match loadgen::run(&args) {
            Ok(report) => {
                println!("{report}");
                // A run where clients failed is not a clean measurement: say so to scripts.
                match report.errors() {
                    0 => ExitCode::SUCCESS,
                    _ => ExitCode::FAILURE,
                }
            }
            Err(e) => {
                eprintln!("shardloop loadgen: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Chart(args) => chart_command(&args),
        Cmd::ProbeHost => {
            println!("{}", probe_host::report(&probe_host::run()));
            ExitCode::SUCCESS
        }
        Cmd::CheckConfig => match load_config(&cli.config) {
            Ok(loaded) => {
                print!("{}", loaded.report());
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Cmd::Restore(args) => match load_config(&cli.config) {
            Ok(loaded) => {
                if let Some(warning) = loaded.ignored_env_warning() {
                    eprintln!("shardloop restore: {warning}");
                }
                restore_command(&loaded.config, &args)
            }
            Err(code) => code,
        },
        Cmd::Run => match load_config(&cli.config) {
            Ok(mut loaded) => {
                // Held to the end: dropping it writes out the lines still queued.
                let _logs = logs::init(cli.log_format.into());
                if let Some(warning) = loaded.ignored_env_warning() {
                    tracing::warn!("{warning}");
                }
                if let Some(start) = cli.clock_start {
                    tracing::warn!(%start, "--clock-start: the wall clock is pinned (a test flag)");
                    loaded.config.time.clock_start = Some(start);
                }
                if let Some(after) = cli.fault_inject_phase_panic {
                    tracing::warn!(
                        "--fault-inject-phase-panic: a loop phase will panic {} after ready (a \
                         fault-injection test flag)",
                        humantime::format_duration(after)
                    );
                    loaded.config.server.fault_inject_phase_panic = Some(after);
                }
                run(&loaded.config)
            }
            Err(code) => code,
        },
    }
}

/// The configuration, or the exit code after printing why it is unusable.
fn load_config(args: &ConfigArgs) -> Result<Loaded, ExitCode> {
    args.load_options()
        .and_then(|options| Config::load(&options))
        .map_err(|e| {
            eprintln!("shardloop: {e}");
            ExitCode::from(ConfigError::EXIT_CODE as u8)
        })
}

/// `shardloop restore`: exit 0 when done, 2 when the restore was refused or failed (every
/// file where it was, unless the message says otherwise), 1 for anything else.
fn restore_command(config: &Config, args: &RestoreArgs) -> ExitCode {
    const REFUSED: u8 = 2;
    let data_dir = &config.server.data_dir;
    let layout = Layout::new(data_dir, config.save_path());
    let archives = config.archive_path();
    let Some(archive) = args.path.as_deref().filter(|_| !args.list) else {
        // Listing only reads, so it works while the shard runs.
        let limits = config.archive.restore_limits();
        return match restore::list(data_dir, &layout, &archives, limits) {
            Ok(listed) => {
                println!("{}", restore::Table(&listed));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "shardloop restore --list: cannot list {}: {e}",
                    data_dir.display()
                );
                ExitCode::FAILURE
            }
        };
    };
    if let Err(e) = std::fs::create_dir_all(data_dir) {
        eprintln!(
            "shardloop restore: cannot create {}: {e}",
            data_dir.display()
        );
        return ExitCode::FAILURE;
    }
    // Held until the restore is done: the shard must not swap saves underneath it.
    // A restore creates none of the other directories: it locks those that exist.
    let mut dirs = config.written_dirs();
    dirs.retain(|(dir, _)| dir == data_dir || dir.is_dir());
    let _locks = match ShardLocks::acquire(&dirs) {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!(
                "shardloop restore: cannot restore {}: {e}; stop the shard first. Nothing was \
                 changed",
                archive.display()
            );
            return ExitCode::from(REFUSED);
        }
    };
    // What a start would do first: finish or clean up after an interrupted save or restore,
    // so the restore starts from a settled data directory.
    match layout.recover() {
        Ok(done) => done
            .iter()
            .for_each(|line| println!("after an interruption: {line}")),
        Err(e) => {
            eprintln!(
                "shardloop restore: cannot recover {}: {e}",
                layout.root().display()
            );
            return ExitCode::FAILURE;
        }
    }
    match restore::restore(&layout, &archives, archive, config.archive.restore_limits()) {
        Ok(restored) => {
            println!("{restored}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shardloop restore: {e}");
            ExitCode::from(REFUSED)
        }
    }
}

/// `shardloop chart`: exit 0 with the SVG written, 2 when the CSV cannot be read or is not a
/// loopstats CSV (the message names the file, line and column), 1 when the SVG cannot be
/// written.
fn chart_command(args: &ChartArgs) -> ExitCode {
    const BAD_INPUT: u8 = 2;
    let csv = &args.csv;
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| csv.with_extension("svg"));
    if output == *csv {
        eprintln!(
            "shardloop chart: {} would be overwritten by the chart; name another with -o",
            csv.display()
        );
        return ExitCode::from(BAD_INPUT);
    }
    let seconds = match std::fs::File::open(csv)
        .map_err(|e| format!("cannot open: {e}"))
        .and_then(|file| read_csv(file).map_err(|e| e.to_string()))
    {
        Ok(seconds) => seconds,
        Err(e) => {
            eprintln!("shardloop chart: {}: {e}; no chart written", csv.display());
            return ExitCode::from(BAD_INPUT);
        }
    };
    let name = csv.file_name().unwrap_or(csv.as_os_str()).to_string_lossy();
    let svg = match chart::svg(&seconds, &format!("shardloop loop thread: {name}")) {
        Ok(svg) => svg,
        Err(e) => {
            eprintln!("shardloop chart: {}: {e}; no chart written", csv.display());
            return ExitCode::from(BAD_INPUT);
        }
    };
    match std::fs::write(&output, svg) {
        Ok(()) => {
            println!("{} seconds drawn to {}", seconds.len(), output.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shardloop chart: cannot write {}: {e}", output.display());
            ExitCode::FAILURE
        }
    }
}

/// `shardloop run`: the demo game on the shard, as a process.
fn run(config: &Config) -> ExitCode {
    match shard::Shard::builder().game(shard::demo_game).build(config) {
        Ok(shard) => shard::run_process(shard),
        Err(e) => {
            tracing::error!("cannot build the shard: {e}");
            ExitCode::from(2)
        }
    }
}
