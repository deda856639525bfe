//! `loadgen` end to end: ping and walk modes against an in-process fake shard, and the error
//! for a server that is not there. No speed is asserted: the host may be slow or busy.
//!
//! (Unit tests of the binary, which `cargo test` runs: loadgen is not in the library's API.)

use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::thread;

use clap::Parser;
use shardloop::game::packets::{client, serial_xy, server};
use shardloop::net::frame;
use tokio::net::{TcpListener, TcpStream};

use crate::tools::loadgen::{self, LoadgenArgs, LoadgenError, Mode};

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

/// Starts a fake shard on its own thread (and runtime, separate from loadgen's); it lives
/// until the test process ends.
fn fake_shard() -> SocketAddr {
    let listener = StdListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("bound address");
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("fake shard runtime");
        runtime.block_on(async move {
            let listener = TcpListener::from_std(listener).expect("tokio listener");
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream));
            }
        });
    });
    addr
}

/// Answers like the shard, minus the world: pings echoed, login → `0x81`, move → `0x82`
/// with the same seq and a `0x85` besides (as if another mobile moved), say → `0x84`,
/// logout → close.
async fn serve(stream: TcpStream) -> io::Result<()> {
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
            used += packet.bytes.len();
            let xy = serial_xy(7, 1300, 1450);
            match packet.id {
                client::PING => out.extend_from_slice(packet.bytes),
                client::LOGIN => frame::put(&mut out, server::LOGIN_OK, &[&xy]),
                client::MOVE => {
                    frame::put(&mut out, server::MOBILE_MOVED, &[&xy]);
                    frame::put(
                        &mut out,
                        server::MOVE_OK,
                        &[&packet.payload()[1..], &xy[4..]],
                    );
                }
                client::SAY => frame::put(&mut out, server::SPEECH, &[&xy[..4], packet.payload()]),
                _ => return Ok(()),
            }
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
    let addr = fake_shard().to_string();
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
fn walk_mode_times_moves_and_counts_what_the_server_pushes() {
    let addr = fake_shard().to_string();
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

    let report = loadgen::run(&args).expect("a report");

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
    // A socket bound to a port but not listening holds the port (no other test can take
    // it meanwhile) and refuses every connection to it.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .expect("a TCP socket");
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind 127.0.0.1:0");
    let addr = socket
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .expect("the bound address");
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
