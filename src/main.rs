//! The `shardloop` binary: the demo game on the engine, with the command line every shard
//! binary has ([`shardloop::shard::ShardBuilder::main_with`]) and the operator tools of this one.
//!
//! - `shardloop [run]`: the demo shard, on a current-thread tokio runtime, until
//!   SIGINT/SIGTERM or `shutdown` on the console; exit 0 after a clean stop, 1 if its final
//!   save failed, 70 after a stop on a fault (a panic that escaped a loop phase, a dead
//!   io_uring ring: the final save was attempted, and the log says whether it was written).
//!   A bad configuration starts nothing: one message, exit code 2.
//! - `shardloop check-config`: the effective configuration (the demo's `[demo]` section
//!   included) and where each value came from.
//! - `shardloop restore PATH`: put the save in an archive in place (the shard must be
//!   stopped); exit 0, or 2 naming the archive and the reason with every file where it was.
//!   `shardloop restore --list`: the backups and archives, with their entity counts.
//! - `shardloop probe-host`: how well this host sleeps, wakes and reads its clocks.
//! - `shardloop loadgen --connect ADDR ...`: a load client for a running shard (or
//!   `examples/tokio_echo.rs`) on this machine, speaking the demo protocol; prints round
//!   trips/s and RTT percentiles, or in a hostile mode (`idle`, `ping-only`, `move-flood`,
//!   `slow-reader`, `churn`) what the server did to its connections.
//! - `shardloop chart FILE.csv [-o OUT.svg]`: draw a `loopstats csv` history as an SVG chart
//!   (beside the CSV by default); exit 2 naming the file, line and column when the CSV is bad.
//!
//! The first three are the engine's; the operator tools ([`tools`]) and the demo game
//! ([`demo`]) are this binary's own modules, not the library's. The demo reaches the engine
//! only through the library's public API: see `src/demo/mod.rs`.

mod demo;
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use shardloop::runtime::history::{chart, read_csv};
use shardloop::shard::Shard;

use tools::loadgen::{self, LoadgenArgs};
use tools::probe_host;

// This binary's own subcommands, beside the shard's `run`, `check-config` and `restore`
// (a plain comment: a doc comment here would replace the binary's description in --help).
#[derive(Debug, Clone, Subcommand)]
enum Tool {
    /// Measure this host's clocks, sleeps and wake-ups, and grade each against a reference.
    ProbeHost,
    /// Load a running server on loopback with N clients (ping or walk) and report round trips
    /// and RTT, or attack it (idle, ping-only, move-flood, slow-reader, churn) and report
    /// what it did to the connections.
    Loadgen(LoadgenArgs),
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

fn main() -> ExitCode {
    Shard::builder()
        .section::<demo::DemoConfig>()
        .game(demo::demo_game)
        .main_with(tool)
}

fn tool(tool: Tool) -> ExitCode {
    match tool {
        Tool::Loadgen(args) => match loadgen::run(&args) {
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
        Tool::Chart(args) => chart_command(&args),
        Tool::ProbeHost => {
            println!("{}", probe_host::report(&probe_host::run()));
            ExitCode::SUCCESS
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
