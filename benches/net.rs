//! Network benchmark: ping round trips through the shard's Network and Flush phases, against
//! the peers the issue names.
//!
//! Two workloads, each peer a server on its own thread and runtime, the client on the bench
//! thread (blocking std sockets, `TCP_NODELAY`, a 16-byte ping payload):
//!
//! - `net_rtt/<peer>`: one client, one ping in flight; one iteration = one round trip.
//!   Peers: `shard_idle_wait_default` (the shard's default `idle_wait`, so the loop parks
//!   between pings and the packet has to wake it) and `shard_idle_wait_0` (the loop spins
//!   and never parks). Target: default within 10 % of spinning (p50).
//! - `net_1000/<peer>`: 1000 connections; one iteration = each sends a ping, then each reads
//!   its echo (1000 round trips, all in flight at once). Peers: `shard_epoll`,
//!   `shard_io_uring` (skipped where the kernel refuses io_uring) and `tokio_echo`
//!   (`examples/tokio_echo.rs`, a bare tokio current-thread echo server: the ceiling).
//!   Target: each shard backend ≥ 0.8× `tokio_echo`'s round trips per second.
//! - `read_path/<peer>`: the server's read path for one connection, with no socket, no
//!   syscall and no wake-up (`testkit::ReadPath`); one iteration = one read of one segment
//!   and the flush after it. `trickled_byte`: 8 KiB packets sent a byte per segment;
//!   its peer `whole_ping`: a whole 19-byte ping per segment, handled and answered. Target
//!   (issue 33, trickled packets): a trickled byte costs no more than a whole ping.
//!
//! The shard servers run the real server (`Net`, the demo protocol's handler table) on an
//! `EventLoop`, exactly as the shard wires them, minus the world.
//!
//! Running: `cargo bench --bench net` runs the criterion groups, then prints a summary table
//! (median of `REPS` interleaved runs per peer, and the ratios). `-- summary` prints only the
//! summary. `cargo test --bench net` runs everything once, small. The machine has 2 cores:
//! server and client have one each, the spinning peer keeps its core at 100 %.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use demo::packets::client;
use shardloop::EventLoop;
use shardloop::net::frame;
use shardloop::net::{BackendKind, Limits, Net};
use shardloop::runtime::{DEFAULT_IDLE_WAIT, Phase};
use shardloop::testkit::ReadPath;

/// The demo game, as the binary compiles it.
#[path = "../src/demo/mod.rs"]
mod demo;
mod support;
use support::median;

#[path = "../examples/tokio_echo.rs"]
#[allow(dead_code)]
mod tokio_echo;

/// Connections of the `net_1000` workload.
const CONNECTIONS: usize = 1000;
/// Connections under `cargo test --bench net`.
const TEST_CONNECTIONS: usize = 50;
/// Runs per peer behind each summary figure.
const REPS: usize = 5;
const PAYLOAD: &[u8; 16] = b"0123456789abcdef";

/// A server on its own thread; dropping it stops the server and joins the thread.
struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The shard's network server on `kind`, with `idle_wait`.
fn shard(kind: BackendKind, idle_wait: Duration) -> Server {
    let (addr_tx, addr_rx) = mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = thread::spawn(move || {
        let served = kind.block_on(async move {
            // Every client comes from 127.0.0.1 and pings flat out: no per-host cap, no flood
            // limit (a throughput measurement, not a shard facing the internet).
            let net = Net::new(Limits {
                max_connections: 2 * CONNECTIONS,
                max_per_ip: usize::MAX,
                max_per_ipv6_prefix: usize::MAX,
                max_prelogin: usize::MAX,
                connect_rate: None,
                ping_rate: None,
                ..Limits::default()
            });
            let world = std::rc::Rc::new(std::cell::RefCell::new(shardloop::world::World::new(1)));
            let no_limits = demo::Rates {
                moves: None,
                speech: None,
            };
            let _players = demo::install_packets(&net, world, no_limits);
            let mut event_loop = EventLoop::builder()
                .idle_wait(idle_wait)
                .slot(Phase::Network, net.network_slot())
                .slot(Phase::Flush, net.flush_slot())
                .build();
            event_loop
                .run_until(async move {
                    let listen = ["127.0.0.1:0".parse().unwrap()];
                    let addr = net.listen(&*kind.backend(), &listen).expect("binds")[0];
                    addr_tx.send(addr).unwrap();
                    let _ = stopped.await;
                    net.stop();
                })
                .await;
        });
        served.expect("the runtime starts");
    });
    Server {
        addr: addr_rx.recv().expect("the server starts"),
        stop: Some(stop),
        thread: Some(thread),
    }
}

/// `examples/tokio_echo.rs` on its own thread.
fn tokio_echo() -> Server {
    let (addr_tx, addr_rx) = mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let thread = thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            tokio::select! {
                _ = tokio_echo::serve_listener(listener) => {}
                _ = stopped => {}
            }
        });
    });
    Server {
        addr: addr_rx.recv().expect("the server starts"),
        stop: Some(stop),
        thread: Some(thread),
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connects");
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// One ping out, its echo back.
fn round_trip(stream: &mut TcpStream, ping: &[u8], echo: &mut [u8]) {
    stream.write_all(ping).unwrap();
    stream.read_exact(echo).unwrap();
    assert_eq!(echo, ping);
}

/// `n` single-client round trips on a fresh connection; their total time.
fn rtt_run(server: &Server, n: u64) -> Duration {
    let mut stream = connect(server.addr);
    let ping = frame::packet(client::PING, &[PAYLOAD]);
    let mut echo = vec![0; ping.len()];
    round_trip(&mut stream, &ping, &mut echo); // connected and accepted
    let began = Instant::now();
    for _ in 0..n {
        round_trip(&mut stream, &ping, &mut echo);
    }
    began.elapsed()
}

/// `rounds` rounds of one ping per connection, all in flight at once; their total time.
fn fan_run(clients: &mut [TcpStream], rounds: u64) -> Duration {
    let ping = frame::packet(client::PING, &[PAYLOAD]);
    let mut echo = vec![0; ping.len()];
    let began = Instant::now();
    for _ in 0..rounds {
        for stream in clients.iter_mut() {
            stream.write_all(&ping).unwrap();
        }
        for stream in clients.iter_mut() {
            stream.read_exact(&mut echo).unwrap();
        }
    }
    began.elapsed()
}

struct Peer {
    name: &'static str,
    start: fn() -> Option<Server>,
}

const RTT_PEERS: &[Peer] = &[
    Peer {
        name: "shard_idle_wait_default",
        start: || Some(shard(BackendKind::Epoll, DEFAULT_IDLE_WAIT)),
    },
    Peer {
        name: "shard_idle_wait_0",
        start: || Some(shard(BackendKind::Epoll, Duration::ZERO)),
    },
];

const FAN_PEERS: &[Peer] = &[
    Peer {
        name: "shard_epoll",
        start: || Some(shard(BackendKind::Epoll, DEFAULT_IDLE_WAIT)),
    },
    Peer {
        name: "shard_io_uring",
        start: || {
            shardloop::net::io_uring_available()
                .ok()
                .map(|()| shard(BackendKind::IoUring, DEFAULT_IDLE_WAIT))
        },
    },
    Peer {
        name: "tokio_echo",
        start: || Some(tokio_echo()),
    },
];

fn bench(c: &mut Criterion, connections: usize) {
    let mut group = c.benchmark_group("net_rtt");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for peer in RTT_PEERS {
        let Some(server) = (peer.start)() else {
            continue;
        };
        group.bench_function(peer.name, |b| b.iter_custom(|n| rtt_run(&server, n)));
    }
    group.finish();

    let mut group = support::whole_run_group(c, "net_1000", connections as u64);
    for peer in FAN_PEERS {
        let Some(server) = (peer.start)() else {
            println!(
                "net_1000/{}: skipped (io_uring unavailable here)",
                peer.name
            );
            continue;
        };
        let mut clients: Vec<TcpStream> = (0..connections).map(|_| connect(server.addr)).collect();
        fan_run(&mut clients, 1); // every connection accepted and warm
        group.bench_function(BenchmarkId::new(peer.name, connections), |b| {
            b.iter_custom(|rounds| fan_run(&mut clients, rounds))
        });
    }
    group.finish();

    let runtime = read_path_runtime();
    let _entered = runtime.enter();
    let mut group = c.benchmark_group("read_path");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (name, make) in READ_PEERS {
        let mut path = make();
        group.bench_function(name, |b| b.iter_custom(|n| read_run(&mut path, n)));
    }
    group.finish();
}

/// A read-path peer: its name, and how to make its path.
type ReadPeer = (&'static str, fn() -> ReadPath);

/// The read-path peers: a trickled byte, and its peer, a whole ping.
const READ_PEERS: [ReadPeer; 2] = [
    ("trickled_byte", ReadPath::trickled),
    ("whole_ping", ReadPath::whole_pings),
];

/// The runtime the read path runs in (it reads tokio's clock; no loop, no reactor work).
fn read_path_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// `n` reads on `path`, loaded beforehand (the loading is not timed).
fn read_run(path: &mut ReadPath, n: u64) -> Duration {
    path.load(n as usize);
    let began = Instant::now();
    for _ in 0..n {
        path.read_once();
    }
    began.elapsed()
}

/// Median ns per read of each read-path peer, runs interleaved, and their ratio.
fn read_path_summary() {
    const READS: u64 = 64 * 8192;
    let runtime = read_path_runtime();
    let _entered = runtime.enter();
    let mut runs = vec![Vec::new(); READ_PEERS.len()];
    for _ in 0..REPS {
        for ((_, make), out) in READ_PEERS.iter().zip(&mut runs) {
            let took = read_run(&mut make(), READS);
            out.push(took.as_secs_f64() * 1e9 / READS as f64);
        }
    }
    println!();
    println!(
        "| read path, one segment per read ({READS} reads a run) | ns per read (median) | min | max |"
    );
    println!("|---|---:|---:|---:|");
    for ((name, _), xs) in READ_PEERS.iter().zip(&runs) {
        let (min, max) = min_max(xs);
        println!(
            "| {name} | {:.0} | {min:.0} | {max:.0} |",
            median(xs.clone())
        );
    }
    if let [trickled, whole] = &runs[..] {
        println!(
            "\ntrickled byte / whole ping: {:.2}× (target ≤ 1)",
            median(trickled.clone()) / median(whole.clone())
        );
    }
}

/// Median round-trip time (µs) per RTT peer and median round trips/s per fan-out peer, runs
/// interleaved between peers so that drift in the machine's load hits all of them alike.
fn summary(connections: usize) {
    const RTT_N: u64 = 2000;
    const FAN_ROUNDS: u64 = 20;
    let rtt_servers: Vec<Server> = RTT_PEERS.iter().filter_map(|p| (p.start)()).collect();
    let mut rtts = vec![Vec::new(); rtt_servers.len()];
    for _ in 0..REPS {
        for (server, out) in rtt_servers.iter().zip(&mut rtts) {
            out.push(rtt_run(server, RTT_N).as_secs_f64() * 1e6 / RTT_N as f64);
        }
    }
    drop(rtt_servers);
    println!();
    println!("net summary: median of {REPS} runs, runs interleaved between peers");
    println!();
    println!("| 1 client, ping-pong | mean RTT per run, µs (median) | min | max |");
    println!("|---|---:|---:|---:|");
    for (peer, xs) in RTT_PEERS.iter().zip(&rtts) {
        let (min, max) = min_max(xs);
        println!(
            "| {} | {:.1} | {min:.1} | {max:.1} |",
            peer.name,
            median(xs.clone())
        );
    }
    if let [default, spin] = &rtts[..] {
        println!(
            "\ndefault idle_wait / idle_wait 0: {:.3}×",
            median(default.clone()) / median(spin.clone())
        );
    }

    let mut fan: Vec<(&str, Server, Vec<TcpStream>, Vec<f64>)> = FAN_PEERS
        .iter()
        .filter_map(|p| (p.start)().map(|s| (p.name, s)))
        .map(|(name, server)| {
            let mut clients: Vec<TcpStream> =
                (0..connections).map(|_| connect(server.addr)).collect();
            fan_run(&mut clients, 1);
            (name, server, clients, Vec::new())
        })
        .collect();
    for _ in 0..REPS {
        for (_, _, clients, out) in fan.iter_mut() {
            let took = fan_run(clients, FAN_ROUNDS);
            out.push((connections as u64 * FAN_ROUNDS) as f64 / took.as_secs_f64());
        }
    }
    let echo = fan
        .iter()
        .find(|(name, ..)| *name == "tokio_echo")
        .map(|(.., xs)| median(xs.clone()))
        .unwrap_or(f64::NAN);
    println!();
    println!(
        "| {connections} clients, ping-pong | round trips/s (median) | min | max | vs tokio_echo |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (name, _, _, xs) in &fan {
        let (min, max) = min_max(xs);
        let m = median(xs.clone());
        println!(
            "| {name} | {m:.0} | {min:.0} | {max:.0} | {:.2}× |",
            m / echo
        );
    }
}

fn min_max(xs: &[f64]) -> (f64, f64) {
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(0.0, f64::max);
    (min, max)
}

fn main() {
    let (mut criterion, run) = support::invocation();
    let connections = if run.full_size {
        CONNECTIONS
    } else {
        TEST_CONNECTIONS
    };
    // Short of descriptors, the connects fail and say so: there is nothing better to do here.
    let _ = shardloop::host::fd_limit::raise(4 * connections as u64 + 256);
    bench(&mut criterion, connections);
    criterion.final_summary();
    if run.summary {
        summary(connections);
        read_path_summary();
    }
}
