//! The network server and the demo protocol over real sockets, run twice: once on the epoll
//! backend and once on io_uring (where the kernel refuses a ring those fail, unless
//! `SHARDLOOP_ALLOW_SKIP=1`).
//!
//! The loop runs on the test thread; every client is a plain blocking socket on its own
//! thread, so nothing but the server's own signals can wake the loop. Timing bounds are
//! generous except where the issue sets one (a parked loop answers within 50 ms: the best of
//! three tries must make it, and none may take seconds).

use std::cell::RefCell;
use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::rc::Rc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use shardloop::game::{self, Players};
use shardloop::net::frame;
use shardloop::net::{Access, BackendKind, Disconnect, Limits, Net, NetStats, Rate};
use shardloop::world::{Location, MapId, Mobile, World};
use shardloop::{EventLoop, timer};

mod common;
use common::capture::Capture as Logs;
use common::client::TIMEOUT;
use common::client::{closed_by_server, connect, connect_from, login, ping, recv, recv_id, send};
use common::demo::packets::{client, serial_xy, server, start_location};
use common::demo::{self as demo, Rates};

static SERIAL: Mutex<()> = Mutex::new(());

/// Held by the test that leaves the process no descriptor for its whole run, and by tests
/// while they raise the open-file limit: a raise in the middle of that test would give its
/// server descriptors back. Taken before [`SERIAL`], never while holding it.
static FD_LIMIT: Mutex<()> = Mutex::new(());

/// [`common::fd_limit::raise_to`], never while a test has lowered the limit.
fn raise_fd_limit(want: u64) -> bool {
    let _limit = FD_LIMIT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    common::fd_limit::raise_to(want)
}

/// Every test client comes from 127.0.0.1, connects and pings as fast as it likes, and need
/// not log in, unless a test sets a limit to trip it.
fn limits() -> Limits {
    Limits {
        max_connections: 64,
        max_per_ip: usize::MAX,
        max_per_ipv6_prefix: usize::MAX,
        max_prelogin: usize::MAX,
        connect_rate: None,
        idle_timeout: Duration::from_secs(60),
        login_timeout: Duration::from_secs(60),
        ping_rate: None,
        ..Limits::default()
    }
}

/// What a test can reach on the loop thread.
struct Env {
    addr: SocketAddr,
    /// Every address listened on: `addr` first, then the others the test asked for.
    addrs: Vec<SocketAddr>,
    net: Net,
    world: Rc<RefCell<World>>,
    players: Rc<RefCell<Players>>,
}

/// What the server did, read after the test body.
struct Outcome<T> {
    value: T,
    stats: NetStats,
    logs: String,
    /// Runs of a 10 ms timer during the body: the loop's timers kept going.
    timer_runs: u64,
    mobiles_after: usize,
    players_after: usize,
}

/// Runs `body` on a loop serving the demo protocol on `kind` at 127.0.0.1, with a 10 ms timer
/// alongside (unless `idle_wait` is long: then nothing but the network may wake the loop);
/// None when the backend is unavailable here.
fn serve<T, F>(
    kind: BackendKind,
    limits: Limits,
    idle_wait: Duration,
    body: impl FnOnce(Env) -> F,
) -> Option<Outcome<T>>
where
    F: Future<Output = T>,
{
    serve_on(kind, limits, idle_wait, &["127.0.0.1:0"], body)
}

/// [`serve`], listening on `listen` (ports 0).
fn serve_on<T, F>(
    kind: BackendKind,
    limits: Limits,
    idle_wait: Duration,
    listen: &'static [&'static str],
    body: impl FnOnce(Env) -> F,
) -> Option<Outcome<T>>
where
    F: Future<Output = T>,
{
    // One at a time: the memory test reads the process's RSS, the thousand-connection tests
    // would each need 2000 descriptors at once, and the out-of-descriptors tests leave none
    // (not even for the io_uring probe below).
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if kind == BackendKind::IoUring
        && let Err(why) = shardloop::net::io_uring_available()
    {
        common::skip::cannot_run(format!("io_uring unavailable here ({why})"));
        return None;
    }
    // Every client read has a timeout; this catches whatever else could hang.
    let _watchdog = common::deadline::watchdog(Duration::from_secs(120), "a tests/net.rs server");
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let outcome = tracing::subscriber::with_default(subscriber, || {
        kind.block_on(async move {
            let world = Rc::new(RefCell::new(World::new(7)));
            let net = Net::new(limits);
            let players = demo::install_packets(&net, world.clone(), Rates::default());
            let builder = EventLoop::builder().idle_wait(idle_wait);
            let deltas = demo::packets::DELTAS;
            let mut event_loop =
                game::wire(builder, &net, world.clone(), players.clone(), deltas).build();
            let runs = Rc::new(RefCell::new(0u64));
            let env_net = net.clone();
            let (w, p) = (world.clone(), players.clone());
            let counter = runs.clone();
            let value = event_loop
                .run_until(async move {
                    // Not with a long idle_wait: the loop must park for real there.
                    let ticker = (idle_wait < Duration::from_secs(1)).then(|| {
                        timer::every(Duration::from_millis(10))
                            .start(move || *counter.borrow_mut() += 1)
                    });
                    let listen: Vec<SocketAddr> =
                        listen.iter().map(|a| a.parse().unwrap()).collect();
                    let addrs = env_net
                        .listen(&*kind.backend(), &listen)
                        .unwrap_or_else(|e| panic!("binds {listen:?}: {e}"));
                    let value = body(Env {
                        addr: addrs[0],
                        addrs,
                        net: env_net.clone(),
                        world: w,
                        players: p,
                    })
                    .await;
                    // Let disconnects that are under way land before counting.
                    settle(&env_net).await;
                    if let Some(ticker) = ticker {
                        ticker.cancel();
                    }
                    value
                })
                .await;
            let stats = net.stats();
            net.stop();
            let timer_runs = *runs.borrow();
            let mobiles_after = world.borrow().mobile_count();
            let players_after = players.borrow().len();
            Outcome {
                value,
                stats,
                logs: String::new(),
                timer_runs,
                mobiles_after,
                players_after,
            }
        })
    });
    let mut outcome = outcome.expect("the runtime starts");
    outcome.logs = logs.text();
    Some(outcome)
}

impl<T> Outcome<T> {
    /// The one log line about `peer`'s disconnect, which must give `reason`.
    fn one_disconnect_line(&self, peer: SocketAddr, reason: &str) -> &str {
        let peer = peer.to_string();
        let lines: Vec<&str> = self
            .logs
            .lines()
            .filter(|l| l.contains("disconnected") && l.contains(&peer))
            .collect();
        assert_eq!(lines.len(), 1, "{reason}: {}", self.logs);
        assert!(lines[0].contains(reason), "{reason}: {}", lines[0]);
        lines[0]
    }
}

/// Waits (on the loop) until no connection is open, up to a few seconds.
async fn settle(net: &Net) {
    let deadline = Instant::now() + TIMEOUT;
    while net.stats().connections > 0 && Instant::now() < deadline {
        timer::pause(10).await;
    }
}

/// Runs `f` on its own thread; the loop awaits its result without blocking.
fn on_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> impl Future<Output = T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    async move { rx.await.expect("the client thread panicked") }
}

// ---- a blocking test client -------------------------------------------------------------

/// Two names whose players start within sight of each other.
fn neighbours() -> (String, String) {
    let names: Vec<String> = (0..4000).map(|i| format!("p{i}")).collect();
    for (i, a) in names.iter().enumerate() {
        for b in &names[i + 1..] {
            let (la, lb) = (start_location(a), start_location(b));
            if la.distance(&lb).is_some_and(|d| d <= game::VIEW_RANGE - 2) {
                return (a.clone(), b.clone());
            }
        }
    }
    panic!("no two start locations within sight");
}

// ---- shared frames ---------------------------------------------------------------------

/// A packet of the test's own, sent to one client alone.
const OWN: u8 = 0x7A;
/// A packet of the shared frames.
const SHARED: u8 = 0x7B;
/// Packets in the shared frames, and rounds of the test.
const SHARED_PACKETS: usize = 40;
const SHARED_ROUNDS: usize = 30;

/// The shared frames (packet k: 3000 bytes of k) and each packet's bytes in them.
fn shared_frames() -> (shardloop::net::SharedFrames, Vec<std::ops::Range<usize>>) {
    let mut frames = Vec::new();
    let mut ranges = Vec::new();
    for k in 0..SHARED_PACKETS {
        let start = frames.len();
        frame::put(&mut frames, SHARED, &[&[k as u8; 3000]]);
        ranges.push(start..frames.len());
    }
    (shardloop::net::SharedFrames::new(&frames), ranges)
}

/// What a client reads in round `round`: its own packet, then shared packets from
/// `round % 10` on.
fn shared_round(round: usize) -> Vec<(u8, Vec<u8>)> {
    let mut packets = vec![(OWN, round.to_be_bytes().to_vec())];
    packets.extend((round % 10..SHARED_PACKETS).map(|k| (SHARED, vec![k as u8; 3000])));
    packets
}

// ---- the suite, once per backend ------------------------------------------------------

macro_rules! suite {
    ($module:ident, $kind:expr) => {
        mod $module {
            use super::*;
            const KIND: BackendKind = $kind;

            #[test]
            fn ping_is_echoed_byte_for_byte_whole_pipelined_and_in_pieces() {
                let Some(out) = serve(KIND, limits(), Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut s = connect(env.addr);
                        for len in [0, 1, 17, frame::MAX_PING_PAYLOAD] {
                            let payload: Vec<u8> = (0..len as u8).collect();
                            ping(&mut s, &payload);
                        }
                        // Three pings in one write, then one ping a byte at a time.
                        let mut burst = Vec::new();
                        for n in 0..3u8 {
                            frame::put(&mut burst, client::PING, &[&[n; 5]]);
                        }
                        s.write_all(&burst).unwrap();
                        for n in 0..3u8 {
                            assert_eq!(recv(&mut s), (client::PING, vec![n; 5]));
                        }
                        for byte in frame::packet(client::PING, &[b"slow"]) {
                            s.write_all(&[byte]).unwrap();
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        assert_eq!(recv(&mut s), (client::PING, b"slow".to_vec()));
                    })
                }) else {
                    return;
                };
                assert_eq!(out.stats.packets_in, 8);
                assert_eq!(out.stats.faults, 0, "{}", out.logs);
            }

            #[test]
            fn a_refusal_is_written_out_before_the_close_and_nothing_after_it_is_read() {
                const REFUSE: u8 = 0x30;
                const REFUSED: u8 = 0xB0;
                let Some(out) = serve(KIND, limits(), Duration::from_millis(2), |env| {
                    env.net
                        .handle(REFUSE, "refuse", Access::Always, |sessions, conn, _| {
                            sessions.send_packet(conn, REFUSED, &[b"not today"]);
                            sessions.close_after_flush(conn, Disconnect::normal("refused"));
                            Ok(())
                        });
                    on_thread(move || {
                        let mut s = connect(env.addr);
                        // The refusal and a ping behind it in one write: the ping is never
                        // read, so never answered.
                        let mut burst = frame::packet(REFUSE, &[]);
                        frame::put(&mut burst, client::PING, &[b"late"]);
                        s.write_all(&burst).unwrap();
                        assert_eq!(recv(&mut s), (REFUSED, b"not today".to_vec()));
                        assert!(closed_by_server(&mut s), "closed after the answer");
                    })
                }) else {
                    return;
                };
                assert_eq!(out.stats.packets_in, 1, "{}", out.logs);
                assert_eq!(out.stats.faults, 0, "{}", out.logs);
                assert!(out.logs.contains("reason=refused"), "{}", out.logs);
            }

            #[test]
            fn shared_frames_and_own_packets_arrive_in_order_and_only_the_stuck_reader_is_closed() {
                // The stuck reader passes the send limit within a few rounds; the reader is
                // never more than two rounds behind (under 400 kB), however slowly it runs.
                let limits = Limits {
                    send_buffer_size: 1 << 20,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| async move {
                    let read = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
                    let progress = read.clone();
                    let reader = small_receive_buffer(env.addr);
                    let stuck = small_receive_buffer(env.addr);
                    let stuck_addr = stuck.local_addr().unwrap();
                    while env.net.stats().connections < 2 {
                        timer::pause(1).await;
                    }
                    let conns: Vec<(SocketAddr, shardloop::net::ConnId)> = env
                        .net
                        .with_sessions(|s| s.ids().map(|c| (s.peer(c).unwrap(), c)).collect());
                    let stuck_conn = conns.iter().find(|(p, _)| *p == stuck_addr).unwrap().1;
                    let reading = on_thread(move || {
                        let mut reader = reader;
                        for round in 0..SHARED_ROUNDS {
                            for expected in shared_round(round) {
                                assert_eq!(recv(&mut reader), expected, "round {round}");
                            }
                            progress.store(round + 1, std::sync::atomic::Ordering::Release);
                        }
                    });
                    let (frames, ranges) = shared_frames();
                    for round in 0..SHARED_ROUNDS {
                        while read.load(std::sync::atomic::Ordering::Acquire) + 2 < round {
                            timer::pause(1).await;
                        }
                        let (from, to) = (round % 10, SHARED_PACKETS);
                        env.net.with_sessions(|s| {
                            for &(_, conn) in &conns {
                                s.send_packet(conn, OWN, &[&round.to_be_bytes()]);
                                let range = ranges[from].start..ranges[to - 1].end;
                                s.send_shared(conn, &frames, range, (to - from) as u64);
                            }
                        });
                        timer::pause(1).await;
                    }
                    reading.await;
                    assert!(!env.net.with_sessions(|s| s.is_open(stuck_conn)));
                    drop(stuck);
                }) else {
                    return;
                };
                assert_eq!(out.stats.send_overflows, 1, "{}", out.logs);
                assert_eq!(out.stats.disconnects, 2, "{}", out.logs);
                assert_eq!(out.stats.faults, 1, "only the stuck one: {}", out.logs);
            }

            #[test]
            fn a_spinning_loop_serves_too() {
                // idle_wait 0: the loop never parks, and io_uring must still get its I/O out.
                let Some(out) = serve(KIND, limits(), Duration::ZERO, |env| {
                    on_thread(move || {
                        let mut s = connect(env.addr);
                        for n in 0..50u8 {
                            ping(&mut s, &[n; 8]);
                        }
                    })
                }) else {
                    return;
                };
                assert_eq!(out.stats.packets_in, 50);
            }

            #[test]
            fn a_parked_loop_answers_a_ping_and_a_new_connection_at_once() {
                let Some(out) = serve(KIND, limits(), Duration::from_secs(10), |env| {
                    on_thread(move || {
                        let mut pings = Vec::new();
                        let mut accepts = Vec::new();
                        let mut s = connect(env.addr);
                        ping(&mut s, b"warm up");
                        for _ in 0..3 {
                            // Long enough for the loop to park on its 10 s idle_wait.
                            std::thread::sleep(Duration::from_millis(100));
                            pings.push(ping(&mut s, b"are you there"));
                            std::thread::sleep(Duration::from_millis(100));
                            // A new connection is served only once it is accepted.
                            let began = Instant::now();
                            let mut fresh = connect(env.addr);
                            ping(&mut fresh, b"hello");
                            accepts.push(began.elapsed());
                        }
                        (pings, accepts)
                    })
                }) else {
                    return;
                };
                let (pings, accepts) = out.value;
                for times in [&pings, &accepts] {
                    let best = times.iter().min().unwrap();
                    assert!(*best < Duration::from_millis(50), "{times:?}");
                    assert!(
                        times.iter().all(|t| *t < Duration::from_secs(2)),
                        "{times:?}"
                    );
                }
            }

            #[test]
            fn a_parked_loop_is_woken_by_each_ping_not_by_a_later_event() {
                // Each ping comes after a pause long enough for the loop to park (10 s
                // idle_wait, no timer), so its answer waits on the backend's wake reaching
                // tokio's reactor. A wake that lands late rather than never is what this
                // catches: the deferred io_uring ring (commit 4256d41) had its eventfd
                // signalled by the kernel one RCU grace period after the data came (4 to
                // 20 ms on Linux 6.18 at HZ 250), so every ping here took that long, while
                // either backend answers within a fraction of a millisecond. A loaded host
                // makes some pings slow, never most: the median is the check, with room, and
                // a whole attempt is tried again (up to three) — a late wake fails every
                // attempt, a busy moment of the host only one.
                let mut attempts = Vec::new();
                for _ in 0..3 {
                    let Some(out) = serve(KIND, limits(), Duration::from_secs(10), |env| {
                        on_thread(move || {
                            let mut s = connect(env.addr);
                            ping(&mut s, b"warm up");
                            (0..21u8)
                                .map(|n| {
                                    std::thread::sleep(Duration::from_millis(20));
                                    ping(&mut s, &[n; 8])
                                })
                                .collect::<Vec<_>>()
                        })
                    }) else {
                        return;
                    };
                    assert_eq!(out.stats.packets_in, 22);
                    let mut times = out.value;
                    times.sort();
                    if times[times.len() / 2] < Duration::from_millis(3) {
                        return;
                    }
                    attempts.push(times);
                }
                panic!("every attempt's median round trip was 3 ms or more: {attempts:?}");
            }

            #[test]
            fn a_thousand_connections_ping_pong_at_once() {
                const N: usize = 1000;
                if !raise_fd_limit(2 * N as u64 + 200) {
                    return;
                }
                let limits = Limits {
                    max_connections: N,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut clients: Vec<TcpStream> =
                            (0..N).map(|_| connect(env.addr)).collect();
                        for round in 0..3u8 {
                            for (i, s) in clients.iter_mut().enumerate() {
                                send(s, client::PING, &[round, (i % 256) as u8]);
                            }
                            for (i, s) in clients.iter_mut().enumerate() {
                                assert_eq!(recv(s), (client::PING, vec![round, (i % 256) as u8]));
                            }
                        }
                    })
                }) else {
                    return;
                };
                assert_eq!(out.stats.accepted, N as u64);
                assert_eq!(out.stats.packets_in, 3 * N as u64);
                assert_eq!(out.stats.faults, 0);
            }

            #[test]
            fn an_idle_connection_costs_at_most_16_kib() {
                const N: usize = 1000;
                if !raise_fd_limit(2 * N as u64 + 200) {
                    return;
                }
                let limits = Limits {
                    max_connections: N + 10,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| async move {
                    let addr = env.addr;
                    // Warm up: the allocator's pools and the connection table exist already.
                    on_thread(move || {
                        let mut warm: Vec<TcpStream> = (0..50).map(|_| connect(addr)).collect();
                        warm.iter_mut().for_each(ping_ok);
                    })
                    .await;
                    settle(&env.net).await;
                    let before = resident_bytes();
                    let clients = on_thread(move || {
                        let mut clients: Vec<TcpStream> = (0..N).map(|_| connect(addr)).collect();
                        clients.iter_mut().for_each(ping_ok);
                        clients
                    })
                    .await;
                    timer::pause(100).await;
                    let after = resident_bytes();
                    assert_eq!(env.net.stats().connections, N);
                    drop(clients);
                    // Signed: a fall in RSS is a disturbed measurement, not a free connection.
                    (after as i64 - before as i64) / N as i64
                }) else {
                    return;
                };
                eprintln!("{KIND:?}: {} bytes resident per idle connection", out.value);
                assert!(
                    out.value > 0,
                    "RSS did not grow with {N} connections ({} bytes each): nothing was measured",
                    out.value
                );
                assert!(out.value <= 16 * 1024, "{} bytes per connection", out.value);
            }

            #[test]
            fn login_move_say_and_logout_reach_the_right_players() {
                let (a, b) = neighbours();
                let Some(out) = serve(KIND, limits(), Duration::from_millis(2), |env| {
                    let addr = env.addr;
                    let world = env.world.clone();
                    let players = env.players.clone();
                    async move {
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        let (npc_tx, npc_rx) = std::sync::mpsc::channel::<u32>();
                        let client = on_thread(move || {
                            let mut sa = connect(addr);
                            let mut sb = connect(addr);
                            let (serial_a, x, y) = login(&mut sa, &a);
                            let (serial_b, ..) = login(&mut sb, &b);
                            assert_ne!(serial_a, serial_b);
                            // A steps east: A gets its confirmation, B sees A move.
                            send(&mut sa, client::MOVE, &[2, 7]);
                            let ok = recv_id(&mut sa, server::MOVE_OK);
                            let mut expect = vec![7];
                            expect.extend((x + 1).to_be_bytes());
                            expect.extend(y.to_be_bytes());
                            assert_eq!(ok, expect);
                            let moved = recv_id(&mut sb, server::MOBILE_MOVED);
                            assert_eq!(moved, serial_xy(serial_a, x + 1, y));
                            // A speaks: both hear it.
                            send(&mut sa, client::SAY, "hail".as_bytes());
                            let mut heard = serial_a.to_be_bytes().to_vec();
                            heard.extend(b"hail");
                            assert_eq!(recv_id(&mut sa, server::SPEECH), heard);
                            assert_eq!(recv_id(&mut sb, server::SPEECH), heard);
                            let _ = tx.send((x, y));
                            // An NPC next to A barks: A hears it as 0x84 too.
                            let npc = npc_rx.recv_timeout(TIMEOUT).unwrap();
                            let bark = recv_id(&mut sa, server::SPEECH);
                            assert_eq!(&bark[..4], npc.to_be_bytes());
                            assert_eq!(&bark[4..], b"Welcome!");
                            send(&mut sa, client::LOGOUT, &[]);
                            assert!(closed_by_server(&mut sa));
                            sb // B stays connected until the check below
                        });
                        let (x, y) = rx.await.unwrap();
                        let npc = {
                            let mut world = world.borrow_mut();
                            let serial = world.new_mobile_serial();
                            let mut mobile = Mobile::new(serial, "a guard", 0x190);
                            mobile.is_npc = true;
                            mobile.location = Location::new(x, y + 1, 0, MapId::FELUCCA);
                            world.add_mobile(mobile).unwrap();
                            world.say(serial, "Welcome!");
                            serial
                        };
                        npc_tx.send(npc.0).unwrap();
                        let sb = client.await;
                        assert_eq!(players.borrow().len(), 1, "B is still in");
                        drop(sb);
                    }
                }) else {
                    return;
                };
                assert_eq!(out.players_after, 0);
                assert_eq!(out.mobiles_after, 1, "only the NPC stays in the world");
                assert!(out.logs.contains("logged out"), "{}", out.logs);
                assert_eq!(out.stats.faults, 0, "{}", out.logs);
            }

            /// Sends `bad` on one connection after logging in (if `name`); that connection is
            /// closed with one log line naming its peer and `reason`, while a bystander keeps
            /// being answered and the timer keeps running.
            fn rejects(limits: Limits, login_first: bool, bad: Vec<u8>, reason: &'static str) {
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut bystander = connect(env.addr);
                        login(&mut bystander, "bystander");
                        let mut s = connect(env.addr);
                        let peer = s.local_addr().unwrap();
                        if login_first {
                            login(&mut s, "offender");
                        }
                        s.write_all(&bad).unwrap();
                        assert!(closed_by_server(&mut s), "{reason}: not disconnected");
                        ping(&mut bystander, b"still here");
                        std::thread::sleep(Duration::from_millis(50));
                        ping(&mut bystander, b"still here");
                        peer
                    })
                }) else {
                    return;
                };
                let line = out.one_disconnect_line(out.value, reason);
                assert!(line.contains("WARN"), "{line}");
                assert_eq!(out.stats.faults, 1);
                assert!(out.timer_runs > 0);
                // Everyone's gone afterwards (the bystander hung up): nothing left behind.
                assert_eq!((out.players_after, out.mobiles_after), (0, 0));
                assert_eq!(out.stats.connections, 0);
            }

            #[test]
            fn unknown_packet_id() {
                rejects(
                    limits(),
                    false,
                    frame::packet(0x7f, &[b"?"]),
                    "unknown packet id 0x7f",
                );
            }

            #[test]
            fn length_below_the_header() {
                rejects(limits(), false, vec![client::PING, 0, 2], "length 2");
            }

            #[test]
            fn length_above_max_packet() {
                let limits = Limits {
                    max_packet: 100,
                    ..limits()
                };
                rejects(limits, false, vec![client::SAY, 0, 101], "length 101");
            }

            #[test]
            fn ping_payload_too_long() {
                rejects(
                    limits(),
                    false,
                    frame::packet(client::PING, &[&[0; 65]]),
                    "ping payload",
                );
            }

            #[test]
            fn login_name_not_utf8() {
                rejects(
                    limits(),
                    false,
                    frame::packet(client::LOGIN, &[&[0xff, 0xfe]]),
                    "UTF-8",
                );
            }

            #[test]
            fn login_name_too_long() {
                rejects(
                    limits(),
                    false,
                    frame::packet(client::LOGIN, &[&[b'a'; 31]]),
                    "name of 31 bytes",
                );
            }

            #[test]
            fn speech_flood() {
                // A burst is allowed, as much again is dropped, one more is abuse.
                let burst = Rates::default().speech.unwrap().burst;
                let mut flood = Vec::new();
                for _ in 0..=2 * burst {
                    frame::put(&mut flood, client::SAY, &[b"buy my wares"]);
                }
                rejects(limits(), true, flood, "flood: packet 0x03 (say)");
            }

            #[test]
            fn moves_beyond_the_rate_are_dropped_and_the_mover_stays() {
                let burst = Rates::default().moves.unwrap().burst;
                let extra = 5;
                let Some(out) = serve(KIND, limits(), Duration::from_millis(2), move |env| {
                    on_thread(move || {
                        let mut s = connect(env.addr);
                        login(&mut s, "runner");
                        let mut moves = Vec::new();
                        for seq in 0..burst + extra {
                            frame::put(&mut moves, client::MOVE, &[&[2, seq as u8]]);
                        }
                        s.write_all(&moves).unwrap();
                        // The ping's echo comes after every answer to the moves.
                        send(&mut s, client::PING, b"after");
                        let mut answered = 0;
                        loop {
                            match recv(&mut s) {
                                (client::PING, _) => break,
                                (server::MOVE_OK, _) => answered += 1,
                                _ => {}
                            }
                        }
                        answered
                    })
                }) else {
                    return;
                };
                assert_eq!(
                    out.value, burst,
                    "a burst of moves answered, the rest dropped"
                );
                assert_eq!(out.stats.flood_dropped, u64::from(extra));
                assert_eq!((out.stats.faults, out.stats.flood_disconnects), (0, 0));
            }

            #[test]
            fn a_host_over_max_per_ip_is_refused_and_other_hosts_are_not() {
                let limits = Limits {
                    max_per_ip: 3,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut held: Vec<TcpStream> = (0..3)
                            .map(|_| connect_from(env.addr, [127, 0, 0, 2]))
                            .collect();
                        for s in &mut held {
                            ping(s, b"in");
                        }
                        let mut fourth = connect_from(env.addr, [127, 0, 0, 2]);
                        assert!(closed_by_server(&mut fourth), "the fourth from one host");
                        let mut other = connect_from(env.addr, [127, 0, 0, 3]);
                        ping(&mut other, b"another host");
                        for s in &mut held {
                            ping(s, b"still in");
                        }
                    })
                }) else {
                    return;
                };
                assert_eq!(out.stats.refused_per_ip, 1);
                assert_eq!(
                    out.stats.accepted, 4,
                    "the refused one is not counted as accepted"
                );
                assert_eq!(out.stats.faults, 0);
            }

            #[test]
            fn pinging_without_logging_in_does_not_keep_a_connection_past_the_login_deadline() {
                let limits = Limits {
                    login_timeout: Duration::from_secs(1),
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut player = connect(env.addr);
                        login(&mut player, "player");
                        let mut lurker = connect(env.addr);
                        let peer = lurker.local_addr().unwrap();
                        let began = Instant::now();
                        // Ping every 200 ms until the server hangs up (or 20 s pass).
                        let closed = loop {
                            if began.elapsed() > Duration::from_secs(20) {
                                break false;
                            }
                            if lurker
                                .write_all(&frame::packet(client::PING, &[b"hi"]))
                                .is_err()
                            {
                                break true;
                            }
                            let mut buf = [0; 16];
                            match lurker.read(&mut buf) {
                                Ok(0) | Err(_) => break true,
                                Ok(_) => std::thread::sleep(Duration::from_millis(200)),
                            }
                        };
                        let lived = began.elapsed();
                        ping(&mut player, b"logged in players stay");
                        (closed, lived, peer)
                    })
                }) else {
                    return;
                };
                let (closed, lived, peer) = out.value;
                assert!(closed, "never closed: pings must not count before login");
                assert!(
                    lived >= Duration::from_secs(1),
                    "closed before the deadline: {lived:?}"
                );
                out.one_disconnect_line(peer, "login timeout");
                assert_eq!(out.stats.login_timeouts, 1);
            }

            #[test]
            fn a_slow_reader_is_evicted_when_the_outbound_budget_runs_out() {
                let limits = Limits {
                    send_buffer_size: 1 << 20,
                    outbound_budget: 64 * 1024,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut reader = connect(env.addr);
                        let mut slow = small_receive_buffer(env.addr);
                        let peer = slow.local_addr().unwrap();
                        slow.set_write_timeout(Some(TIMEOUT)).unwrap();
                        let ping = frame::packet(client::PING, &[&[0; 64]]);
                        for _ in 0..100_000 {
                            match slow.write_all(&ping) {
                                Ok(()) => {}
                                Err(e) if hung_up(&e) => break,
                                Err(e) => panic!("neither read nor hung up: {e}"),
                            }
                        }
                        ping_ok(&mut reader);
                        peer
                    })
                }) else {
                    return;
                };
                out.one_disconnect_line(out.value, "outbound budget");
                assert_eq!(out.stats.outbound_evictions, 1);
                assert_eq!(out.stats.faults, 1, "only the slow reader");
            }

            #[test]
            fn move_with_a_bad_direction() {
                rejects(
                    limits(),
                    true,
                    frame::packet(client::MOVE, &[&[8, 0]]),
                    "direction 8",
                );
            }

            #[test]
            fn move_before_login() {
                rejects(
                    limits(),
                    false,
                    frame::packet(client::MOVE, &[&[0, 0]]),
                    "before login",
                );
            }

            #[test]
            fn say_before_login() {
                rejects(
                    limits(),
                    false,
                    frame::packet(client::SAY, &[b"hi"]),
                    "before login",
                );
            }

            #[test]
            fn a_client_that_never_reads() {
                let limits = Limits {
                    send_buffer_size: 4096,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut bystander = connect(env.addr);
                        let s = small_receive_buffer(env.addr);
                        let peer = s.local_addr().unwrap();
                        let mut s = s;
                        s.set_write_timeout(Some(TIMEOUT)).unwrap();
                        let ping = frame::packet(client::PING, &[&[0; 64]]);
                        // Write pings, never read: the echoes pile up on the server. A write
                        // fails only once the server hung up; one that blocks for seconds
                        // means the server stopped reading without hanging up.
                        for _ in 0..20_000 {
                            match s.write_all(&ping) {
                                Ok(()) => {}
                                Err(e) if hung_up(&e) => break,
                                Err(e) => panic!("neither read nor hung up: {e}"),
                            }
                        }
                        ping_ok(&mut bystander);
                        peer
                    })
                }) else {
                    return;
                };
                out.one_disconnect_line(out.value, "send buffer overflow");
                assert_eq!(out.stats.faults, 1);
                assert_eq!(out.stats.connections, 0);
            }

            #[test]
            fn a_slowloris_client_times_out() {
                let limits = Limits {
                    idle_timeout: Duration::from_secs(2),
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut bystander = connect(env.addr);
                        // Logged in: only then do its pings count as activity.
                        login(&mut bystander, "bystander");
                        let mut s = connect(env.addr);
                        let peer = s.local_addr().unwrap();
                        let began = Instant::now();
                        // A 200-byte say, one byte a second: never a whole packet.
                        let mut trickle = vec![client::SAY, 0, 200]
                            .into_iter()
                            .chain(std::iter::repeat(b'z'));
                        s.set_read_timeout(Some(Duration::from_millis(1000)))
                            .unwrap();
                        let mut buf = [0; 16];
                        let closed = loop {
                            if began.elapsed() > Duration::from_secs(10) {
                                break false;
                            }
                            if s.write_all(&[trickle.next().unwrap()]).is_err() {
                                break true;
                            }
                            match s.read(&mut buf) {
                                Ok(0) => break true,
                                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break true,
                                _ => {}
                            }
                            // Keep the bystander's own idle clock fresh.
                            ping_ok(&mut bystander);
                        };
                        assert!(closed, "still open after 10 s");
                        assert!(began.elapsed() >= Duration::from_secs(2), "cut off early");
                        ping_ok(&mut bystander);
                        peer
                    })
                }) else {
                    return;
                };
                out.one_disconnect_line(out.value, "idle timeout");
                assert_eq!(out.stats.faults, 1, "{}", out.logs);
            }

            #[test]
            fn connections_over_the_limit_are_closed_at_once_when_every_one_logged_in() {
                let limits = Limits {
                    max_connections: 2,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut a = connect(env.addr);
                        let mut b = connect(env.addr);
                        login(&mut a, "a");
                        login(&mut b, "b");
                        let mut c = connect(env.addr);
                        assert!(closed_by_server(&mut c));
                        ping_ok(&mut a);
                        ping_ok(&mut b);
                    })
                }) else {
                    return;
                };
                assert_eq!(out.stats.refused, 1);
                assert_eq!(out.stats.prelogin_evictions, 0);
                assert!(out.logs.contains("refused a connection"), "{}", out.logs);
            }

            #[test]
            fn a_packet_trickled_a_byte_per_segment_is_handled_whole_between_other_traffic() {
                const BLOB: u8 = 0x32;
                let Some(out) = serve(KIND, limits(), Duration::from_millis(2), |env| {
                    // Answers a blob with its length and the sum of its bytes.
                    env.net
                        .handle(BLOB, "blob", Access::Always, |sessions, conn, payload| {
                            let sum: u32 = payload.iter().map(|&b| u32::from(b)).sum();
                            let len = payload.len() as u32;
                            sessions.send_packet(
                                conn,
                                BLOB,
                                &[&len.to_be_bytes(), &sum.to_be_bytes()],
                            );
                            Ok(())
                        });
                    on_thread(move || {
                        let answer = |len: usize, sum: u32| {
                            let mut a = (len as u32).to_be_bytes().to_vec();
                            a.extend(sum.to_be_bytes());
                            (BLOB, a)
                        };
                        let mut bystander = connect_from(env.addr, [127, 0, 0, 3]);
                        let mut s = connect_from(env.addr, [127, 0, 0, 2]);
                        // 3000 bytes, one per write (TCP_NODELAY: a segment each, unless
                        // the kernel coalesces what the server has not read yet); the
                        // bystander is served meanwhile.
                        let payload: Vec<u8> = (0..2997u32).map(|i| (i % 251) as u8).collect();
                        let sum: u32 = payload.iter().map(|&b| u32::from(b)).sum();
                        for (i, byte) in frame::packet(BLOB, &[&payload]).into_iter().enumerate() {
                            s.write_all(&[byte]).unwrap();
                            if i % 300 == 0 {
                                ping_ok(&mut bystander);
                            }
                        }
                        assert_eq!(recv(&mut s), answer(2997, sum));
                        // Then whole packets, several in one write, and a packet split
                        // across two writes: each read right.
                        let mut burst = frame::packet(BLOB, &[&[1; 10]]);
                        frame::put(&mut burst, BLOB, &[&[2; 500]]);
                        let tail = frame::packet(BLOB, &[&[3; 40]]);
                        burst.extend_from_slice(&tail[..20]);
                        s.write_all(&burst).unwrap();
                        std::thread::sleep(Duration::from_millis(20));
                        s.write_all(&tail[20..]).unwrap();
                        assert_eq!(recv(&mut s), answer(10, 10));
                        assert_eq!(recv(&mut s), answer(500, 1000));
                        assert_eq!(recv(&mut s), answer(40, 120));
                        ping_ok(&mut bystander);
                    })
                }) else {
                    return;
                };
                assert_eq!(out.stats.faults, 0, "{}", out.logs);
            }

            #[test]
            fn only_a_reader_whose_output_stays_over_the_soft_limit_is_cut_off() {
                const SOFT_TIMEOUT: Duration = Duration::from_secs(2);
                // 150 kB of echoes: past the soft limit and what the kernel (a small send
                // buffer) and io_uring (64 KiB in flight) take, far under the hard limit.
                const PINGS: usize = 2_240;
                let limits = Limits {
                    send_buffer_size: 256 * 1024,
                    send_soft_limit: 8 * 1024,
                    send_soft_timeout: SOFT_TIMEOUT,
                    socket_send_buffer: 4096,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let burst: Vec<u8> = (0..PINGS)
                            .flat_map(|_| frame::packet(client::PING, &[&[0; 64]]))
                            .collect();
                        let mut bystander = connect(env.addr);
                        ping_ok(&mut bystander);
                        // The offender: sends the burst and never reads.
                        let mut offender = small_receive_buffer_from(env.addr, [127, 0, 0, 2]);
                        let peer = offender.local_addr().unwrap();
                        let began = Instant::now();
                        offender.write_all(&burst).unwrap();
                        // Another host does the same, but reads its echoes within 300 ms.
                        let mut catching_up = small_receive_buffer_from(env.addr, [127, 0, 0, 3]);
                        catching_up.write_all(&burst).unwrap();
                        std::thread::sleep(Duration::from_millis(300));
                        for _ in 0..PINGS {
                            assert_eq!(recv(&mut catching_up).0, client::PING);
                        }
                        // The offender's connection is reset once its output has stayed over
                        // the soft limit for the timeout: a small ping every 100 ms finds out
                        // without reading (each adds 3 bytes of echo, far under the limit).
                        let closed = loop {
                            if began.elapsed() > Duration::from_secs(15) {
                                break false;
                            }
                            std::thread::sleep(Duration::from_millis(100));
                            match offender.write_all(&frame::packet(client::PING, &[])) {
                                Ok(()) => {}
                                Err(e) if hung_up(&e) => break true,
                                Err(e) => panic!("neither written nor hung up: {e}"),
                            }
                        };
                        let lived = began.elapsed();
                        ping_ok(&mut catching_up);
                        ping_ok(&mut bystander);
                        (closed, lived, peer)
                    })
                }) else {
                    return;
                };
                let (closed, lived, peer) = out.value;
                assert!(closed, "still open after 15 s: {}", out.logs);
                assert!(
                    lived >= SOFT_TIMEOUT,
                    "cut off after {lived:?}, before the timeout"
                );
                out.one_disconnect_line(peer, "send soft limit");
                assert_eq!(out.stats.send_soft_overflows, 1);
                assert_eq!(out.stats.faults, 1, "only the offender: {}", out.logs);
            }

            #[test]
            fn a_full_socket_counts_its_kernel_send_buffer_in_the_outbound_budget() {
                const BUDGET: usize = 256 * 1024;
                let limits = Limits {
                    send_buffer_size: 1 << 20,
                    send_soft_limit: 0,
                    socket_send_buffer: 64 * 1024,
                    outbound_budget: BUDGET,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| async move {
                    let addr = env.addr;
                    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                    let finished = done.clone();
                    let client = on_thread(move || {
                        let mut bystander = connect_from(addr, [127, 0, 0, 3]);
                        ping_ok(&mut bystander);
                        let mut slow = small_receive_buffer_from(addr, [127, 0, 0, 2]);
                        let peer = slow.local_addr().unwrap();
                        slow.set_write_timeout(Some(TIMEOUT)).unwrap();
                        let batch: Vec<u8> = (0..100)
                            .flat_map(|_| frame::packet(client::PING, &[&[0; 64]]))
                            .collect();
                        // 6.7 kB of echoes a batch, a batch every 10 ms, never read.
                        let began = Instant::now();
                        let hung_up = loop {
                            if began.elapsed() > Duration::from_secs(20) {
                                break false;
                            }
                            match slow.write_all(&batch) {
                                Ok(()) => std::thread::sleep(Duration::from_millis(10)),
                                Err(e) if hung_up(&e) => break true,
                                Err(e) => panic!("neither read nor hung up: {e}"),
                            }
                        };
                        ping_ok(&mut bystander);
                        finished.store(true, std::sync::atomic::Ordering::Release);
                        (hung_up, peer)
                    });
                    // Meanwhile, on the loop: the most unsent output seen, and the charge.
                    let (mut most_unsent, mut charge) = (0, 0);
                    while !done.load(std::sync::atomic::Ordering::Acquire) {
                        most_unsent = most_unsent.max(env.net.unsent_bytes());
                        charge = env.net.full_sockets().1;
                        timer::pause(2).await;
                    }
                    let (hung_up, peer) = client.await;
                    (hung_up, peer, most_unsent, charge)
                }) else {
                    return;
                };
                let (hung_up, peer, most_unsent, charge) = out.value;
                assert!(hung_up, "the slow reader was never cut off: {}", out.logs);
                out.one_disconnect_line(peer, "outbound budget");
                assert_eq!(out.stats.outbound_evictions, 1);
                assert_eq!(out.stats.faults, 1, "only the slow reader: {}", out.logs);
                // Linux grants twice the 64 KiB asked for; io_uring adds what it holds.
                assert!(charge >= 128 * 1024, "a full socket counts {charge} bytes");
                // Evicted for its unsent bytes and its socket's buffer together, long before
                // its unsent bytes alone reached the budget.
                assert!(
                    most_unsent < BUDGET - charge / 2,
                    "{most_unsent} bytes unsent before the eviction (budget {BUDGET}, a full \
                     socket {charge})"
                );
            }

            /// 40 connects refused in a row: past the first few, one summary line a second
            /// instead of a line each.
            #[test]
            fn a_connect_flood_is_summed_up() {
                const FLOOD: usize = 40;
                let limits = Limits {
                    max_connections: 1,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| async move {
                    let addr = env.addr;
                    let held = on_thread(move || {
                        let mut held = connect(addr);
                        login(&mut held, "held");
                        for _ in 0..FLOOD {
                            assert!(closed_by_server(&mut connect(addr)));
                        }
                        held
                    })
                    .await;
                    timer::pause(1_500).await; // the second's summary is due
                    drop(held);
                }) else {
                    return;
                };
                assert_eq!(out.stats.refused, FLOOD as u64);
                let lines = |s: &str| out.logs.lines().filter(|l| l.contains(s)).count();
                let one_by_one = lines("refused a connection");
                assert!(
                    (1..FLOOD).contains(&one_by_one),
                    "{one_by_one} lines: {}",
                    out.logs
                );
                assert!(
                    lines("refused (") >= 1 && lines("too many connections)") >= 1,
                    "no summary: {}",
                    out.logs
                );
            }

            /// One host connecting far faster than `connect_rate`: a burst gets in, the rest is
            /// refused, then the host is banned: the listener's kernel filter drops its
            /// connects unanswered, however slowly they come. A player on another host logs in
            /// meanwhile, and a newcomer on a third after.
            #[test]
            fn a_connect_flood_is_refused_then_banned_and_other_hosts_players_log_in() {
                const FLOOD: usize = 60;
                let limits = Limits {
                    connect_rate: Some(Rate {
                        per_sec: 1,
                        burst: 4,
                    }),
                    connect_ban: Duration::from_secs(600),
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let flooder = [127, 0, 0, 2];
                        let mut player = connect_from(env.addr, [127, 0, 0, 3]);
                        // Flat out: the kernel completes connects before the server takes
                        // them, so the ban may come after the last of these.
                        let mut flood = Vec::new();
                        let mut unanswered = false;
                        while flood.len() < FLOOD && !unanswered {
                            match connect_within(env.addr, flooder) {
                                Some(s) => flood.push(s),
                                None => unanswered = true,
                            }
                        }
                        let made = flood.len();
                        if !unanswered {
                            // Its close comes once the server took every one of them: the
                            // flooder is banned by then, and the next connect gets no answer.
                            let last = flood.last_mut().unwrap();
                            assert!(closed_by_server(last), "the last of the flood refused");
                            unanswered = connect_within(env.addr, flooder).is_none();
                        }
                        login(&mut player, "player");
                        // Slower than the rate now: still banned, still unanswered.
                        std::thread::sleep(Duration::from_millis(1500));
                        let slow = connect_within(env.addr, flooder);
                        let mut newcomer = connect_from(env.addr, [127, 0, 0, 4]);
                        login(&mut newcomer, "newcomer");
                        ping_ok(&mut player);
                        // Those of the flood that got in are served as usual.
                        flood.retain_mut(still_open);
                        flood.iter_mut().for_each(ping_ok);
                        (made, flood.len(), unanswered, slow.is_none())
                    })
                }) else {
                    return;
                };
                let (made, admitted, unanswered, slow_dropped) = out.value;
                let (n, admitted) = (out.stats, admitted as u64);
                assert!(
                    unanswered,
                    "the listener's filter drops the banned source: {n:?}"
                );
                assert!(slow_dropped, "a banned source gets no answer, however slow");
                assert!(admitted >= 4, "the burst gets in: {admitted}");
                assert_eq!(n.accepted, admitted + 2, "the flood's and the two players");
                assert_eq!(n.bans, 1);
                assert_eq!(n.banned, 1);
                assert!(n.refused_rate >= 5, "a burst's worth, then the ban: {n:?}");
                assert_eq!(
                    n.refused_rate + n.refused_banned + admitted,
                    made as u64,
                    "every other connect of the flooder that was made was refused: {n:?}"
                );
                assert_eq!(n.faults, 0, "{}", out.logs);
                // Its own line ("banned a source"), or past the churn's budget the summary's
                // count ("1 banned now").
                assert!(out.logs.contains("banned"), "{}", out.logs);
            }

            /// A refused connect is closed before any work is done for it: the loop thread
            /// allocates nothing for it (the log's few lines a second aside).
            #[test]
            fn a_refused_connect_costs_the_loop_no_allocation() {
                const REFUSED: usize = 500;
                let limits = Limits {
                    max_per_ip: 1,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| async move {
                    let addr = env.addr;
                    let from = [127, 0, 0, 2];
                    let held = on_thread(move || {
                        let mut held = connect_from(addr, from);
                        ping_ok(&mut held);
                        // Warm up: the refusal's kind is known, buffers have their room.
                        for _ in 0..20 {
                            assert!(closed_by_server(&mut connect_from(addr, from)));
                        }
                        held
                    })
                    .await;
                    let flood = on_thread(move || {
                        for _ in 0..REFUSED {
                            assert!(closed_by_server(&mut connect_from(addr, from)));
                        }
                    });
                    let before = allocations();
                    flood.await;
                    let spent = allocations() - before;
                    drop(held);
                    spent
                }) else {
                    return;
                };
                assert_eq!(out.stats.refused_per_ip, REFUSED as u64 + 20);
                eprintln!(
                    "{KIND:?}: {} allocations on the loop thread for {REFUSED} refused connects",
                    out.value
                );
                assert!(
                    out.value < 100,
                    "{} allocations on the loop thread for {REFUSED} refused connects",
                    out.value
                );
            }

            #[test]
            fn an_ipv6_prefix_over_its_cap_is_refused_and_ipv4_hosts_are_not() {
                if let Err(why) = std::net::TcpListener::bind("[::1]:0") {
                    common::skip::cannot_run(format!("no IPv6 loopback (::1) here: {why}"));
                    return;
                }
                let limits = Limits {
                    max_per_ip: 10,
                    max_per_ipv6_prefix: 3,
                    ..limits()
                };
                let listen = &["127.0.0.1:0", "[::1]:0"];
                let Some(out) = serve_on(KIND, limits, Duration::from_millis(2), listen, |env| {
                    let v6 = env.addrs[1];
                    on_thread(move || {
                        // ::1 is one /64 and one /56: its fourth connection is over the /56's.
                        let mut held: Vec<TcpStream> = (0..3).map(|_| connect(v6)).collect();
                        held.iter_mut().for_each(ping_ok);
                        let mut fourth = connect(v6);
                        assert!(closed_by_server(&mut fourth), "the fourth from one /56");
                        let mut v4 = connect_from(env.addr, [127, 0, 0, 2]);
                        ping_ok(&mut v4);
                        held.iter_mut().for_each(ping_ok);
                    })
                }) else {
                    return;
                };
                assert_eq!(out.stats.refused_per_ipv6_prefix, 1);
                assert_eq!(out.stats.refused_per_ip, 0);
                assert_eq!(out.stats.accepted, 4);
                assert!(
                    out.logs
                        .contains("too many connections from one IPv6 prefix"),
                    "{}",
                    out.logs
                );
            }

            #[test]
            fn an_ipv4_24_over_its_cap_is_refused_and_other_24s_are_not() {
                let limits = Limits {
                    max_per_ip: 10,
                    max_per_ipv4_prefix: Some(2),
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut held = vec![
                            connect_from(env.addr, [127, 0, 0, 2]),
                            connect_from(env.addr, [127, 0, 0, 3]),
                        ];
                        held.iter_mut().for_each(ping_ok);
                        let mut third = connect_from(env.addr, [127, 0, 0, 4]);
                        assert!(closed_by_server(&mut third), "a third host of 127.0.0.0/24");
                        let mut other = connect_from(env.addr, [127, 0, 1, 2]);
                        ping_ok(&mut other);
                        held.iter_mut().for_each(ping_ok);
                    })
                }) else {
                    return;
                };
                assert_eq!(out.stats.refused_per_ipv4_prefix, 1);
                assert_eq!(out.stats.accepted, 3);
            }

            /// Eight lurkers from eight hosts, four allowed not logged in: each newcomer
            /// closes the oldest lurker, so a player always gets in and logs in, and the
            /// lurkers that came last stay.
            #[test]
            fn lurkers_from_many_hosts_never_keep_a_player_out_the_oldest_make_room() {
                const LURKERS: u8 = 8;
                let limits = Limits {
                    max_prelogin: 4,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut lurkers: Vec<TcpStream> = (0..LURKERS)
                            .map(|i| {
                                let mut s = connect_from(env.addr, [127, 0, 0, 2 + i]);
                                ping_ok(&mut s);
                                s
                            })
                            .collect();
                        let first = lurkers[0].local_addr().unwrap();
                        let mut player = connect_from(env.addr, [127, 0, 0, 20]);
                        login(&mut player, "player");
                        for (i, s) in lurkers.iter_mut().enumerate() {
                            if i < 5 {
                                assert!(closed_by_server(s), "lurker {i} made room");
                            } else {
                                ping_ok(s);
                            }
                        }
                        ping_ok(&mut player);
                        first
                    })
                }) else {
                    return;
                };
                assert_eq!(out.stats.prelogin_evictions, 5);
                assert_eq!(out.stats.refused_total(), 0);
                out.one_disconnect_line(out.value, "evicted before login");
            }

            /// A full server makes room for a newcomer by closing the oldest connection that
            /// has not logged in; once every connection has logged in, a newcomer is refused.
            #[test]
            fn a_full_server_closes_the_oldest_lurker_and_refuses_only_when_all_logged_in() {
                let limits = Limits {
                    max_connections: 4,
                    ..limits()
                };
                let Some(out) = serve(KIND, limits, Duration::from_millis(2), |env| {
                    on_thread(move || {
                        let mut players = vec![connect(env.addr), connect(env.addr)];
                        login(&mut players[0], "p0");
                        login(&mut players[1], "p1");
                        let mut lurkers = vec![connect(env.addr), connect(env.addr)];
                        lurkers.iter_mut().for_each(ping_ok);
                        for name in ["p2", "p3"] {
                            let mut s = connect(env.addr);
                            login(&mut s, name);
                            players.push(s);
                        }
                        lurkers
                            .iter_mut()
                            .for_each(|s| assert!(closed_by_server(s)));
                        let mut fifth = connect(env.addr);
                        assert!(closed_by_server(&mut fifth), "every one logged in: refused");
                        players.iter_mut().for_each(ping_ok);
                    })
                }) else {
                    return;
                };
                assert_eq!(out.stats.prelogin_evictions, 2);
                assert_eq!(out.stats.refused, 1);
                assert_eq!(out.players_after, 0);
            }

            #[test]
            fn out_of_descriptors_new_connections_are_closed_at_once_not_left_in_the_backlog() {
                out_of_descriptors(KIND);
            }
        }
    };
}

/// A connection from the loopback address `from`, or `None` if the connect is not answered
/// within half a second (the listener's filter dropped it).
fn connect_within(addr: SocketAddr, from: [u8; 4]) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    match socket.connect_timeout(&addr.into(), Duration::from_millis(500)) {
        Ok(()) => {
            let stream: TcpStream = socket.into();
            stream.set_read_timeout(Some(TIMEOUT)).unwrap();
            Some(stream)
        }
        Err(e) if e.kind() == io::ErrorKind::TimedOut => None,
        Err(e) => panic!("connect from {from:?}: {e}"),
    }
}

/// A connection the server has not closed (within 100 ms).
fn still_open(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0; 16];
    let open = match stream.read(&mut buf) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
    };
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    open
}

/// Whether the server answers a ping on `stream` (false: it closed the connection instead).
fn answers_a_ping(stream: &mut TcpStream) -> bool {
    if stream
        .write_all(&frame::packet(client::PING, &[b"ok"]))
        .is_err()
    {
        return false;
    }
    let mut echo = [0; 5];
    match stream.read_exact(&mut echo) {
        Ok(()) => {
            assert_eq!(echo, [client::PING, 0, 5, b'o', b'k']);
            true
        }
        Err(e) if hung_up(&e) || e.kind() == io::ErrorKind::UnexpectedEof => false,
        Err(e) => panic!("neither answered nor closed: {e}"),
    }
}

/// Counts every thread's allocations, each on its own thread: the loop runs on the test's.
struct Counting;

thread_local! {
    static ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Allocations made on this thread so far.
fn allocations() -> u64 {
    ALLOCATIONS.with(std::cell::Cell::get)
}

fn count_one() {
    // `try_with`: a thread that is exiting has no counter left.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every call goes to the system allocator unchanged; counting touches only a
// thread-local integer, which needs no allocation.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A write error that says the other side closed the connection.
fn hung_up(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}

fn ping_ok(stream: &mut TcpStream) {
    ping(stream, b"ok");
}

/// A client socket with a small receive buffer, so that what the server sends backs up fast.
fn small_receive_buffer(addr: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&addr.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream
}

/// A client socket from the loopback address `from` (another host) with a small receive
/// buffer, so that what the server sends backs up fast.
fn small_receive_buffer_from(addr: SocketAddr, from: [u8; 4]) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket
        .bind(&SocketAddr::from((from, 0)).into())
        .expect("bind a loopback source address");
    socket.connect(&addr.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// This process's resident set, from `/proc/self/statm`.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    pages * page
}

suite!(epoll, BackendKind::Epoll);
suite!(io_uring, BackendKind::IoUring);

// ---- out of descriptors (it lowers this process's own limit) ----------------------------

/// Leaves this process no free descriptor number below the soft limit: fills every hole below
/// the highest open descriptor (the limit caps descriptor *numbers*, and a new descriptor takes
/// the lowest free one) and returns the fillers and the limit to set, one above the highest.
fn no_free_descriptor() -> (Vec<std::fs::File>, u64) {
    let open = || -> Vec<u64> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect()
    };
    let highest = open().into_iter().max().unwrap();
    let mut fillers = Vec::new();
    loop {
        let file = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file) as u64;
        if fd > highest {
            break; // no hole was left: this one is past the highest
        }
        fillers.push(file);
    }
    (fillers, highest + 1)
}

fn set_soft_fd_limit(soft: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = soft;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

/// New connections while the process has no descriptor left: each is taken off the backlog
/// with the spare descriptor and closed at once, none is left hanging.
///
/// The first client meets the accept that was waiting when the limit dropped. epoll sheds it
/// like the others; the io_uring ring queued that accept under the old limit (the kernel reads
/// the limit when an accept is queued), so there it may be served instead, never left
/// hanging either.
fn out_of_descriptors(kind: BackendKind) {
    const CLIENTS: usize = 3;
    let _limit = FD_LIMIT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(out) = serve(kind, limits(), Duration::from_millis(2), |env| async move {
        // The client sockets exist before the limit drops: connecting needs no descriptor.
        let sockets: Vec<socket2::Socket> = (0..=CLIENTS)
            .map(|_| {
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap()
            })
            .collect();
        let mut before = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct passed in.
        let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut before) };
        assert_eq!(read, 0);
        // Not one descriptor more may be opened: every accept fails with EMFILE.
        let (fillers, limit) = no_free_descriptor();
        set_soft_fd_limit(limit);
        let addr = env.addr;
        let closed = on_thread(move || {
            let connected = |socket: socket2::Socket| {
                socket.connect(&addr.into()).unwrap();
                let stream: TcpStream = socket.into();
                stream.set_read_timeout(Some(TIMEOUT)).unwrap();
                stream
            };
            let mut sockets = sockets.into_iter();
            // Every client stays open until all are checked: closing one would free a
            // descriptor number for the server.
            let mut first = connected(sockets.next().unwrap());
            let first_served = answers_a_ping(&mut first);
            let mut streams = vec![first];
            let mut closed = Vec::new();
            for socket in sockets {
                let mut stream = connected(socket);
                closed.push(closed_by_server(&mut stream));
                streams.push(stream);
            }
            (first_served, closed)
        })
        .await;
        set_soft_fd_limit(before.rlim_cur);
        drop(fillers);
        // With descriptors back, a new client is served as usual.
        on_thread(move || ping_ok(&mut connect(addr))).await;
        closed
    }) else {
        return;
    };
    let (first_served, closed) = out.value;
    assert_eq!(
        closed,
        vec![true; CLIENTS],
        "each was closed, none left hanging"
    );
    if kind == BackendKind::Epoll {
        assert!(
            !first_served,
            "epoll accepts only now: the first is shed too"
        );
    }
    let first = u64::from(first_served);
    assert_eq!(out.stats.shed, CLIENTS as u64 + 1 - first);
    assert_eq!(
        out.stats.accepted,
        1 + first,
        "only the client after the limit was restored (and a first one served)"
    );
    assert!(out.logs.contains("out of file descriptors"), "{}", out.logs);
}
