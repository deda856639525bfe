//! The hostile modes end to end, against the in-process fake shard: what each sends (seen by
//! the fake), what it reports, the server's closes and their lifetimes, the source addresses,
//! the loopback-only refusal and the flags. Real-time bounds are seconds; no speed is
//! asserted.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use crate::demo::packets::client;
use clap::Parser;
use shardloop::net::frame;
use tokio::time::Instant;

use super::AttackReport;
use crate::tools::loadgen::end_to_end::{Cli, args};
use crate::tools::loadgen::fake_shard::{Close, FakeShard, Peer, refusing_port, unanswering_port};
use crate::tools::loadgen::{self, LoadgenArgs, LoadgenError, Mode, Report};

/// Runs a hostile mode against `fake` with `flags` (and no ramp) and returns its report.
fn attack(fake: &FakeShard, mode: &str, flags: &str) -> AttackReport {
    run(fake.addr, mode, flags)
}

/// Runs a hostile mode against `addr` with `flags`, split at spaces, and no ramp.
pub(super) fn run(addr: SocketAddr, mode: &str, flags: &str) -> AttackReport {
    let addr = addr.to_string();
    let mut all = vec!["--connect", &addr, "--mode", mode, "--ramp", "0s"];
    all.extend(flags.split_whitespace());
    match loadgen::run(&args(&all)).expect("a report") {
        Report::Attack(report) => report,
        Report::Load(report) => panic!("a hostile mode made a load report: {report}"),
    }
}

/// Asserts that the server closed every connection made, `eof` of them with an end of stream
/// and `reset` with a reset, each after a time in `lived`, and that nothing else went wrong.
pub(super) fn assert_closed(
    report: &AttackReport,
    (eof, reset): (u64, u64),
    lived: Range<Duration>,
) {
    let closed = (report.made, report.closed_eof, report.closed_reset);
    assert_eq!(closed, (eof + reset, eof, reset), "{report}");
    assert_eq!((report.open_at_end, report.errors), (0, 0), "{report}");
    let lifetimes = [
        report.lifetime_min,
        report.lifetime_median,
        report.lifetime_max,
    ];
    assert!(lifetimes.is_sorted(), "{report}");
    assert!(
        lived.contains(&lifetimes[0]) && lived.contains(&lifetimes[2]),
        "{report}"
    );
}

/// `n` milliseconds.
pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Waits until the fake has seen `n` connections, each of them gone (closed by the client).
fn all_gone(fake: &FakeShard, n: u64) -> Vec<Peer> {
    fake.wait_for(&format!("{n} connections closed by loadgen"), |peers| {
        peers.len() as u64 == n && peers.iter().all(|p| p.gone.is_some())
    })
}

#[test]
fn idle_connects_and_sends_nothing_until_the_deadline() {
    let fake = FakeShard::start();
    let began = Instant::now();

    let report = attack(&fake, "idle", "--connections 3 --duration 1s");

    assert_eq!((report.attempted, report.made), (3, 3), "{report}");
    assert_eq!(
        (report.open_at_end, report.closed_by_server()),
        (3, 0),
        "{report}"
    );
    assert_eq!((report.packets_sent, report.bytes_sent), (0, 0), "{report}");
    assert_eq!(report.errors, 0, "{report}");
    for peer in all_gone(&fake, 3) {
        assert_eq!(peer.bytes, 0, "{peer:?}");
        let held = peer.gone.expect("gone") - began;
        assert!(held >= Duration::from_secs(1), "let go after {held:?}");
    }
    let shown = report.to_string();
    assert!(
        shown.starts_with("loadgen: idle, 3 connections from any local address"),
        "{shown}"
    );
    assert!(
        shown.contains("closed by the server 0 (eof 0  reset 0)"),
        "{shown}"
    );
    assert!(shown.contains("open at the end 3"), "{shown}");
}

/// Runs `mode` (a mode that only pings: 2 clients, 1 s, a ping every 100 ms) and checks what
/// the fake shard read: whole pings and nothing else, at least two from each client (the first
/// goes at once, the next after 100 ms), as many as the report says were sent. Returns the
/// report and the pings read.
fn only_pings(mode: &str) -> (AttackReport, u64) {
    let fake = FakeShard::start();

    let report = attack(
        &fake,
        mode,
        "--connections 2 --duration 1s --interval 100ms",
    );

    assert_eq!(
        (report.made, report.open_at_end, report.errors),
        (2, 2, 0),
        "{report}"
    );
    let peers = all_gone(&fake, 2);
    let pings: u64 = peers.iter().map(|p| p.count(frame::PING)).sum();
    for peer in &peers {
        assert!(peer.count(frame::PING) >= 2, "{peer:?}");
        assert_eq!(peer.packets.len(), 1, "only whole pings: {peer:?}");
    }
    assert_eq!(report.packets_sent, pings, "{report}");
    (report, pings)
}

#[test]
fn ping_only_sends_pings_and_never_a_login() {
    let (report, pings) = only_pings("ping-only");
    assert!(
        (1..=pings).contains(&report.packets_received),
        "echoes read: {report}"
    );
}

#[test]
fn trickle_sends_whole_pings_a_byte_at_a_time_and_never_a_login() {
    only_pings("trickle");
}

#[test]
fn crowd_logs_in_on_one_spot_and_spends_its_burst_each_interval() {
    let fake = FakeShard::start();

    let report = attack(
        &fake,
        "crowd",
        "--connections 2 --duration 1s --interval 300ms --burst 5",
    );

    assert_eq!((report.made, report.errors), (2, 0), "{report}");
    assert_eq!(
        (report.logins_sent, report.logins_answered),
        (2, 2),
        "{report}"
    );
    let peers = all_gone(&fake, 2);
    for peer in &peers {
        assert_eq!(peer.first, Some(client::LOGIN), "{peer:?}");
        let moves = peer.count(client::MOVE);
        assert!(moves >= 10 && moves % 5 == 0, "whole bursts: {peer:?}");
        assert_eq!(peer.count(client::SAY), 0, "no --say: {peer:?}");
    }
    let sent: u64 = peers.iter().map(|p| p.count(client::MOVE)).sum();
    assert_eq!(report.packets_sent, 2 + sent, "logins and moves: {report}");

    // With --say, each burst ends with its lines, in the same write.
    let fake = FakeShard::start();
    let report = attack(
        &fake,
        "crowd",
        "--connections 2 --duration 1s --interval 300ms --burst 5 --say 2",
    );
    assert_eq!((report.made, report.errors), (2, 0), "{report}");
    let peers = all_gone(&fake, 2);
    for peer in &peers {
        let (moves, lines) = (peer.count(client::MOVE), peer.count(client::SAY));
        assert!(moves >= 10 && moves % 5 == 0, "whole bursts: {peer:?}");
        assert_eq!(lines * 5, moves * 2, "two lines a burst: {peer:?}");
    }
    let sent: u64 = peers
        .iter()
        .map(|p| p.count(client::MOVE) + p.count(client::SAY))
        .sum();
    assert_eq!(report.packets_sent, 2 + sent, "{report}");
    let names = super::crowd::names(3);
    let spots: Vec<_> = names
        .iter()
        .map(|n| crate::demo::packets::start_location(n))
        .collect();
    for at in &spots {
        assert!(
            at.distance(&spots[0]).is_some_and(|d| d < 16),
            "{names:?}: {spots:?}"
        );
    }
    // Walkers `--in-crowd` start in the same square, under names of their own.
    let walkers = super::names_in_crowd("walker", 2);
    for name in &walkers {
        let at = crate::demo::packets::start_location(name);
        assert!(
            at.distance(&spots[0]).is_some_and(|d| d < 16),
            "{name}: {at:?}"
        );
        assert!(!names.contains(name), "{name}");
    }
}

#[test]
fn move_flood_logs_in_then_sends_moves_without_waiting_for_answers() {
    let fake = FakeShard::start();

    // One flooder: a second one's login could wait behind the first one's flood on a busy
    // machine, and this test is about what one connection does.
    let report = attack(&fake, "move-flood", "--connections 1 --duration 1s");

    assert_eq!(
        (report.made, report.open_at_end, report.errors),
        (1, 1, 0),
        "{report}"
    );
    assert_eq!(
        (report.logins_sent, report.logins_answered),
        (1, 1),
        "{report}"
    );
    let peers = all_gone(&fake, 1);
    let mut moves = 0;
    for peer in &peers {
        assert_eq!(peer.first, Some(client::LOGIN), "{peer:?}");
        assert_eq!(peer.count(client::LOGIN), 1, "{peer:?}");
        assert_eq!(peer.packets.len(), 2, "logins and moves only: {peer:?}");
        // A closed loop would send one move and wait for its answer; the first write of a
        // flood alone is 1024 moves, which any socket's send buffer takes.
        assert!(peer.count(client::MOVE) >= 1024, "{peer:?}");
        moves += peer.count(client::MOVE);
    }
    assert!(report.packets_sent > moves, "{report}");
    // The answers were read: the login's, then two packets per move.
    assert!(report.packets_received > 2, "{report}");
    assert!(
        report.to_string().contains("logins sent 1  answered 1"),
        "{report}"
    );
}

#[test]
fn slow_reader_never_reads_so_the_servers_output_backs_up() {
    const PUSH: usize = 4 << 20;
    let fake = FakeShard::pushing(PUSH);

    let report = attack(&fake, "slow-reader", "--duration 1500ms --interval 10ms");

    assert_eq!((report.made, report.errors), (1, 0), "{report}");
    assert_eq!(
        (report.logins_sent, report.logins_answered),
        (1, 0),
        "{report}"
    );
    assert_eq!(
        (report.packets_received, report.bytes_received),
        (0, 0),
        "{report}"
    );
    let peers = fake.wait_for("the push stalled", |p| p.iter().all(|p| p.pushed.is_some()));
    let pushed = peers[0].pushed.expect("pushed");
    // 4 KiB asked (8 KiB granted) of receive buffer, plus the fake's 32 KiB of send buffer:
    // 28 KiB got through on the development host, 147 KiB with the default receive buffer.
    assert!(pushed < 64 * 1024, "{pushed} bytes went through");
    let peer = &all_gone(&fake, 1)[0];
    assert_eq!(peer.first, Some(client::LOGIN), "{peer:?}");
    assert!(peer.count(frame::PING) >= 1, "{peer:?}");

    // The same push to a client that reads goes through in full: the measure tells them apart.
    let reading = FakeShard::pushing(PUSH);
    let report = attack(&reading, "idle", "--duration 1500ms");
    let peers = reading.wait_for("the push done", |p| p.iter().all(|p| p.pushed.is_some()));
    assert_eq!(peers[0].pushed, Some(PUSH as u64), "{report}");
    assert_eq!(report.bytes_received, PUSH as u64, "{report}");
}

#[test]
fn a_server_closing_idle_connections_is_counted_with_their_lifetimes() {
    let fake = FakeShard::closing(ms(300), Close::Eof);

    let report = attack(
        &fake,
        "idle",
        "--connections 3 --duration 5s --no-reconnect",
    );

    // Every client stopped when its connection was closed, not at the deadline.
    assert_closed(&report, (3, 0), ms(290)..ms(5_000));
    assert!(report.duration < Duration::from_secs(5), "{report}");
    let shown = report.to_string();
    assert!(
        shown.contains("closed by the server 3 (eof 3  reset 0)"),
        "{shown}"
    );
    assert!(shown.contains("lifetime until closed: min "), "{shown}");
}

#[test]
fn a_reset_is_told_from_an_end_of_stream() {
    let fake = FakeShard::closing(ms(300), Close::Reset);

    let report = attack(
        &fake,
        "ping-only",
        "--connections 2 --duration 5s --interval 50ms --no-reconnect",
    );

    assert_closed(&report, (0, 2), ms(290)..ms(5_000));
}

#[test]
fn a_slow_reader_learns_of_the_close_at_its_next_send() {
    // The fake closes with a FIN, but the slow reader never reads it: its next ping reaches a
    // closed socket, which answers with a reset.
    let fake = FakeShard::closing(ms(300), Close::Eof);

    let report = attack(
        &fake,
        "slow-reader",
        "--duration 5s --interval 20ms --no-reconnect",
    );

    assert_closed(&report, (0, 1), ms(290)..ms(5_000));
}

#[test]
fn every_hostile_mode_connects_again_when_the_server_closes_it_unless_told_not_to() {
    // (mode, its flags): each sends or waits its own way, and each sees the close its way
    // (a slow reader at its next send, as a reset).
    let modes = [
        ("idle", ""),
        ("ping-only", "--interval 50ms"),
        ("move-flood", ""),
        ("slow-reader", "--interval 20ms"),
        ("trickle", "--interval 50ms"),
        ("crowd", "--interval 100ms --burst 2"),
    ];
    for (mode, flags) in modes {
        let fake = FakeShard::closing(ms(150), Close::Eof);
        let report = attack(&fake, mode, &format!("{flags} --duration 1500ms"));
        // One client; after each close by the server the next connection, to the end.
        assert!(report.made >= 3, "{mode}: {report}");
        assert_eq!(report.attempted, report.made, "{mode}: {report}");
        assert_eq!(report.reconnects, report.made - 1, "{mode}: {report}");
        assert_eq!(
            report.closed_by_server() + report.open_at_end,
            report.made,
            "{mode}: {report}"
        );
        assert!(report.open_at_end <= 1, "{mode}: {report}");
        assert_eq!(report.errors, 0, "{mode}: {report}");
        assert!(
            report
                .to_string()
                .contains(&format!("\n  reconnects {}\n", report.reconnects)),
            "{mode}: {report}"
        );
        // The fake saw every one of them.
        let seen = fake.wait_for("every connection", |p| p.len() as u64 == report.made);
        assert_eq!(seen.len() as u64, report.made, "{mode}");

        let fake = FakeShard::closing(ms(150), Close::Eof);
        let once = attack(
            &fake,
            mode,
            &format!("{flags} --duration 1500ms --no-reconnect"),
        );
        assert_eq!(
            (once.made, once.reconnects, once.closed_by_server()),
            (1, 0, 1),
            "{mode}: {once}"
        );
        assert!(once.duration < ms(1_500), "{mode}: {once}");
    }
}

/// Which class every connect of a churn run ends in.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Refusal {
    /// None: the server answered each connection.
    None,
    /// Closed before it answered: by end of stream or by reset. Which of the two is a race
    /// when the server closes with an end of stream: a ping that reached it first makes its
    /// close a reset, and a ping sent after its close is answered with one.
    ClosedAtOnce,
    /// `ECONNREFUSED`.
    Refused,
    /// No answer within `--connect-timeout`.
    Unanswered,
}

#[test]
fn churn_counts_each_class_of_refusal_it_provokes() {
    let answering = FakeShard::start();
    let closing_eof = FakeShard::closing(Duration::ZERO, Close::Eof);
    let closing_reset = FakeShard::closing(Duration::ZERO, Close::Reset);
    let (_refusing, refused_at) = refusing_port();
    let (_full, unanswered_at) = unanswering_port();
    // (where, the class, whether every close is a reset)
    let cases = [
        (answering.addr, Refusal::None, false),
        (closing_eof.addr, Refusal::ClosedAtOnce, false),
        (closing_reset.addr, Refusal::ClosedAtOnce, true),
        (refused_at, Refusal::Refused, false),
        (unanswered_at, Refusal::Unanswered, false),
    ];
    for (addr, expected, resets) in cases {
        let report = run(
            addr,
            "churn",
            "--connections 2 --duration 1s --churn-ping --connect-timeout 200ms",
        );
        let r = &report;
        // Every class but the expected one is empty; a connection or a connect cut short by
        // the deadline (one per client at most) is in none.
        let classes = [
            (Refusal::None, r.hung_up),
            (Refusal::ClosedAtOnce, r.closed_at_once()),
            (Refusal::Refused, r.refused),
            (Refusal::Unanswered, r.timed_out),
        ];
        for (class, n) in classes {
            match class == expected {
                true => assert!(n >= 2, "{expected:?}: {report}"),
                false => assert_eq!(n, 0, "{expected:?}, not {class:?}: {report}"),
            }
        }
        if resets {
            assert_eq!(r.closed_at_once_eof, 0, "{report}");
        }
        // Closed at once is a close by the server too, with its lifetime.
        assert_eq!(r.closed_by_server(), r.closed_at_once(), "{report}");
        let counted = classes.iter().map(|(_, n)| n).sum::<u64>();
        let cut = r.open_at_end + r.connecting_at_end;
        assert_eq!(counted + cut, r.attempted, "{expected:?}: {report}");
        assert!(cut <= 2, "{expected:?}: {report}");
        assert_eq!(r.refusals(), counted - r.hung_up, "{expected:?}: {report}");
        assert_eq!(r.errors, 0, "{expected:?}: {report}");
        assert!(
            report
                .to_string()
                .contains(&format!("  refusals provoked {}: ", r.refusals())),
            "{report}"
        );
    }
}

#[test]
fn churn_connects_again_and_again() {
    let fake = FakeShard::start();

    let report = attack(&fake, "churn", "--connections 2 --duration 1s");

    assert!(report.made > 2, "no reconnect: {report}");
    assert_eq!(report.hung_up, report.made, "{report}");
    // Only a connect cut short by the deadline can be missing, one per client at most.
    assert_eq!(
        report.attempted,
        report.made + report.connecting_at_end,
        "{report}"
    );
    assert!(report.connecting_at_end <= 2, "{report}");
    assert_eq!((report.packets_sent, report.errors), (0, 0), "{report}");
    assert!(report.connects_per_sec > 0.0, "{report}");
    let peers = all_gone(&fake, report.made);
    assert!(peers.iter().all(|p| p.bytes == 0), "sent something");
}

#[test]
fn churn_with_a_ping_sends_exactly_one_per_connection() {
    let fake = FakeShard::start();

    let report = attack(&fake, "churn", "--connections 2 --duration 1s --churn-ping");

    assert!(report.made > 2, "no reconnect: {report}");
    assert_eq!(report.errors, 0, "{report}");
    assert_eq!(report.hung_up + report.open_at_end, report.made, "{report}");
    // A connection cut by the deadline may not have sent its ping, or had its echo.
    assert!(report.open_at_end <= 2, "{report}");
    let peers = all_gone(&fake, report.made);
    for peer in &peers {
        assert!(
            peer.count(frame::PING) <= 1 && peer.packets.len() <= 1,
            "{peer:?}"
        );
    }
    let pinged = peers.iter().filter(|p| p.count(frame::PING) == 1).count() as u64;
    assert_eq!(report.packets_sent, pinged, "{report}");
    assert!(pinged >= report.hung_up, "{report}");
}

#[test]
fn connections_go_out_from_every_source_in_turn() {
    let fake = FakeShard::start();

    let report = attack(
        &fake,
        "idle",
        "--connections 4 --duration 300ms --sources 127.0.0.2,127.0.0.3",
    );

    assert_eq!((report.made, report.errors), (4, 0), "{report}");
    assert_eq!(report.sources, "127.0.0.2, 127.0.0.3");
    assert_eq!(
        by_source(&all_gone(&fake, 4)),
        ["127.0.0.2 ×2", "127.0.0.3 ×2"]
    );

    let ranged = FakeShard::start();
    let report = attack(
        &ranged,
        "churn",
        "--connections 3 --duration 300ms --source-range 127.0.0.4-127.0.0.6",
    );
    assert_eq!(report.sources, "127.0.0.4-127.0.0.6");
    let seen = by_source(&all_gone(&ranged, report.made));
    let sources: Vec<_> = seen.iter().filter_map(|s| s.split(' ').next()).collect();
    assert_eq!(sources, ["127.0.0.4", "127.0.0.5", "127.0.0.6"], "{seen:?}");
}

/// How many connections came from each source address: `["127.0.0.2 ×2", ...]`.
fn by_source(peers: &[Peer]) -> Vec<String> {
    let mut counts = BTreeMap::<String, usize>::new();
    for peer in peers {
        *counts.entry(peer.addr.ip().to_string()).or_default() += 1;
    }
    counts.iter().map(|(ip, n)| format!("{ip} ×{n}")).collect()
}

#[test]
fn a_refused_connect_is_a_finding_not_a_failure() {
    let (_held, addr) = refusing_port();

    let report = run(addr, "idle", "--connections 3");

    assert_eq!(
        (report.attempted, report.refused, report.made),
        (3, 3, 0),
        "{report}"
    );
    assert_eq!(report.errors, 0, "{report}");
    assert!(report.to_string().contains("refused 3"), "{report}");
}

#[test]
fn addresses_outside_loopback_are_refused_before_any_connect() {
    // 0.0.0.0 is outside 127.0.0.0/8, yet a connect to it reaches this host: had the rule
    // let it through, the fake (on 127.0.0.1) would see the connection.
    let fake = FakeShard::start();
    let (any, local) = (format!("0.0.0.0:{}", fake.addr.port()), fake.addr);
    for flags in [
        format!("--connect {any} --mode idle"),
        format!("--connect {any} --mode ping"),
        format!("--connect {local} --mode churn --sources 127.0.0.2,10.0.0.1"),
        format!("--connect {local} --mode churn --source-range 127.255.255.254-128.0.0.1"),
    ] {
        let all = line(&format!("{flags} --duration 1s --ramp 0s"));
        let refused = loadgen::run(&all).expect_err("outside loopback");
        assert!(
            matches!(refused, LoadgenError::NotLoopback { .. }),
            "{flags}: {refused:?}"
        );
        let shown = refused.to_string();
        assert!(shown.contains("is not a loopback address"), "{shown}");
        assert!(shown.contains("127.0.0.0/8 or ::1"), "{shown}");
    }
    let mixed = line("--connect [::1]:9 --sources 127.0.0.2 --mode idle");
    assert!(matches!(
        loadgen::run(&mixed),
        Err(LoadgenError::SourceFamily { .. })
    ));
    std::thread::sleep(Duration::from_millis(100));
    assert!(fake.peers().is_empty(), "connected: {:?}", fake.peers());
}

/// `loadgen`'s flags from one line, split at spaces.
fn line(flags: &str) -> LoadgenArgs {
    args(&flags.split_whitespace().collect::<Vec<_>>())
}

#[test]
fn hostile_flags_parse_with_their_defaults() {
    for (name, expected) in [
        ("idle", Mode::Idle),
        ("ping-only", Mode::PingOnly),
        ("move-flood", Mode::MoveFlood),
        ("slow-reader", Mode::SlowReader),
        ("churn", Mode::Churn),
        ("trickle", Mode::Trickle),
        ("crowd", Mode::Crowd),
    ] {
        let parsed = line(&format!("--connect 127.0.0.1:2593 --mode {name}"));
        assert_eq!(parsed.mode, expected);
        assert!(parsed.mode.is_hostile());
        assert_eq!(parsed.mode.to_string(), name);
    }
    assert!(!Mode::Ping.is_hostile() && !Mode::Walk.is_hostile());
    let ping_only = line("--connect 127.0.0.1:2593 --mode ping-only");
    assert_eq!(ping_only.interval(), Duration::from_secs(30));
    assert!(ping_only.sources.is_empty() && ping_only.source_range.is_none());
    assert!(!ping_only.churn_ping && !ping_only.no_reconnect);
    assert_eq!(ping_only.connect_timeout, Duration::from_secs(10));
    let slow = line("--connect 127.0.0.1:2593 --mode slow-reader");
    assert_eq!(slow.interval(), Duration::from_millis(1));
    let trickle = line("--connect 127.0.0.1:2593 --mode trickle");
    assert_eq!(trickle.interval(), Duration::from_millis(10));
    let crowd = line("--connect 127.0.0.1:2593 --mode crowd");
    assert_eq!(
        (crowd.interval(), crowd.burst, crowd.say),
        (Duration::from_secs(2), 20, 0)
    );
    let ping = line("--connect 127.0.0.1:2593 --interval 5ms");
    assert_eq!(ping.interval, Some(Duration::from_millis(5)));
    let given = line(
        "--connect 127.0.0.1:2593 --mode ping-only --interval 2s --sources 127.0.0.2,127.0.0.3 \
         --churn-ping",
    );
    assert_eq!(given.interval(), Duration::from_secs(2));
    assert_eq!(given.sources.len(), 2);
    assert!(given.churn_ping);
    let range = line("--connect 127.0.0.1:2593 --source-range 127.0.0.2-127.0.0.9");
    assert_eq!(
        range.source_range.map(|r| r.to_string()).as_deref(),
        Some("127.0.0.2-127.0.0.9")
    );
    for bad in [
        "--interval 0s",
        "--connect-timeout 0s",
        "--say 101",
        "--mode flood",
        "--sources 127.0.0.2,nope",
        "--source-range 127.0.0.9-127.0.0.2",
        "--sources 127.0.0.2 --source-range 127.0.0.2-127.0.0.3",
    ] {
        let argv = ["loadgen", "--connect", "127.0.0.1:2593"]
            .into_iter()
            .chain(bad.split_whitespace());
        assert!(Cli::try_parse_from(argv).is_err(), "{bad} accepted");
    }
}
