//! `loadgen` end to end: ping mode against an in-process echo server, and the error for a
//! server that is not there. No speed is asserted: the host may be slow or busy.

use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::thread;

use clap::Parser;
use shardloop::loadgen::{self, LoadgenArgs, LoadgenError, Mode};
use shardloop::net::frame::{self, client};
use tokio::net::{TcpListener, TcpStream};

/// `shardloop loadgen`'s flags, parsed as the binary will parse them.
#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    loadgen: LoadgenArgs,
}

fn args(flags: &[&str]) -> LoadgenArgs {
    let argv = std::iter::once("loadgen").chain(flags.iter().copied());
    Cli::try_parse_from(argv).expect("valid flags").loadgen
}

/// Starts a ping echo server on its own thread (and runtime, separate from loadgen's);
/// it lives until the test process ends.
fn echo_server() -> SocketAddr {
    let listener = StdListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("bound address");
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("echo runtime");
        runtime.block_on(async move {
            let listener = TcpListener::from_std(listener).expect("tokio listener");
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(echo(stream));
            }
        });
    });
    addr
}

/// Writes back every ping frame received, until the connection closes.
async fn echo(stream: TcpStream) -> io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        stream.readable().await?;
        match stream.try_read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
        let mut used = 0;
        let mut out = Vec::new();
        while let Some(packet) = frame::split(&buf[used..], 8192).map_err(io::Error::other)? {
            if packet.id == client::PING {
                out.extend_from_slice(packet.bytes);
            }
            used += packet.bytes.len();
        }
        buf.drain(..used);
        let mut rest = &out[..];
        while !rest.is_empty() {
            stream.writable().await?;
            match stream.try_write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[test]
fn ping_mode_measures_round_trips_on_every_connection() {
    let addr = echo_server().to_string();
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

    let report = loadgen::run(&args).expect("a report");

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
fn a_closed_port_is_an_error_naming_the_address() {
    // Bound, then closed at once: nothing listens there now.
    let addr = StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
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
