//! `loadgen` end to end: ping and walk modes against an in-process fake shard, and the error
//! for a server that is not there. No speed is asserted: the host may be slow or busy.
//! (The hostile modes' tests are in `attack/end_to_end.rs`.)
//!
//! (Unit tests of the binary, which `cargo test` runs: loadgen is not in the library's API.)

use clap::Parser;

use super::fake_shard::{FakeShard, refusing_port};
use crate::tools::loadgen::{self, LoadReport, LoadgenArgs, LoadgenError, Mode, Report};

/// `shardloop loadgen`'s flags, parsed as the binary will parse them.
#[derive(Debug, Parser)]
pub(super) struct Cli {
    #[command(flatten)]
    pub(super) loadgen: LoadgenArgs,
}

pub(super) fn args(flags: &[&str]) -> LoadgenArgs {
    let argv = std::iter::once("loadgen").chain(flags.iter().copied());
    Cli::try_parse_from(argv).expect("valid flags").loadgen
}

/// Runs a load mode and returns its report.
fn load(args: &LoadgenArgs) -> LoadReport {
    match loadgen::run(args).expect("a report") {
        Report::Load(report) => report,
        Report::Attack(report) => panic!("a load mode made an attack report: {report}"),
    }
}

#[test]
fn ping_mode_measures_round_trips_on_every_connection() {
    let addr = FakeShard::start().addr.to_string();
    let args = args(&[
        "--connect",
        &addr,
        "--connections",
        "20",
        "--duration",
        "1s",
        "--ramp",
        "100ms",
        "--payload",
        "64",
    ]);
    assert_eq!(args.mode, Mode::Ping);

    let report = load(&args);

    assert_eq!((report.connections, report.connected), (20, 20));
    assert_eq!(report.errors, 0, "{report}");
    assert!(report.first_error.is_none());
    assert!(report.round_trips > 0, "{report}");
    assert!(report.rtt_p50 <= report.rtt_p99 && report.rtt_p99 <= report.rtt_max);
    assert_eq!(report.speech + report.moved + report.other, 0);
    let shown = report.to_string();
    assert!(
        shown.starts_with("loadgen: ping, 20/20 connections"),
        "{shown}"
    );
    assert!(shown.contains("errors 0"), "{shown}");
}

#[test]
fn walk_mode_times_moves_and_counts_what_the_server_pushes() {
    let addr = FakeShard::start().addr.to_string();
    let args = args(&[
        "--connect",
        &addr,
        "--connections",
        "10",
        "--duration",
        "1s",
        "--ramp",
        "0s",
        "--mode",
        "walk",
    ]);

    let report = load(&args);

    assert_eq!((report.connected, report.errors), (10, 0), "{report}");
    // A move every 250 ms: about 4 per client in 1 s, however slow the host.
    assert!(report.round_trips > 0, "{report}");
    assert!(report.round_trips <= 10 * 5, "{report}");
    assert!(report.moved >= report.round_trips, "{report}");
    assert_eq!(report.other, 0, "{report}");
    assert!(report.rtt_p50 <= report.rtt_p99 && report.rtt_p99 <= report.rtt_max);
    let shown = report.to_string();
    assert!(
        shown.starts_with("loadgen: walk, 10/10 connections"),
        "{shown}"
    );
    assert!(shown.contains("received 0x84"), "{shown}");
}

#[test]
fn a_closed_port_is_an_error_naming_the_address() {
    let (_held, addr) = refusing_port();
    let args = args(&[
        "--connect",
        &addr.to_string(),
        "--connections",
        "3",
        "--duration",
        "1s",
        "--ramp",
        "0s",
    ]);

    let error = loadgen::run(&args).expect_err("nothing to connect to");

    assert!(matches!(error, LoadgenError::Connect { .. }), "{error:?}");
    let shown = error.to_string();
    assert!(
        shown.starts_with(&format!("cannot connect to {addr}: ")),
        "{shown}"
    );
}

#[test]
fn flags_have_the_documented_defaults_and_limits() {
    let defaults = args(&["--connect", "127.0.0.1:2593"]);
    assert_eq!(defaults.connections, 1);
    assert_eq!(defaults.duration, std::time::Duration::from_secs(10));
    assert_eq!(defaults.mode, Mode::Ping);
    assert_eq!(defaults.payload, 16);
    let walk = args(&["--connect", "127.0.0.1:2593", "--mode", "walk"]);
    assert_eq!(walk.mode, Mode::Walk);
    for bad in [
        ["--payload", "65"],
        ["--connections", "0"],
        ["--duration", "ten"],
    ] {
        let argv = ["loadgen", "--connect", "127.0.0.1:2593", bad[0], bad[1]];
        assert!(Cli::try_parse_from(argv).is_err(), "{bad:?} accepted");
    }
}
