//! Trickled packets against whole packets: what the same stream of segments costs the loop.
//!
//! ```sh
//! cargo run --release --example trickle                     # epoll, 10 s per mode, 3 rounds
//! cargo run --release --example trickle -- io_uring 20 5    # backend, seconds per mode, rounds
//! cargo run --release --example trickle -- epoll 10 3 0     # ... and spin_before_park, in µs
//! ```
//!
//! The shard's network server (`shardloop::net::Net`, the default limits but for the flood
//! limit, the per-host cap and the login deadline, which would cut the clients off) runs on
//! an event loop on the main thread. 16 client connections, on a thread of their own, each
//! send one TCP segment every millisecond (`TCP_NODELAY`, one `write` each, on an absolute
//! schedule): 16,000 segments a second. Two modes, taking turns, each round:
//!
//! - **trickle**: each segment is one byte of a packet that declares 8,192 bytes
//!   (`max_packet`), packet after packet: each connection holds a partial packet for 8,192
//!   segments at a time, which is what a slowloris attacker does before login.
//! - **whole packets** (the peer): each segment is a whole ping (16 bytes of payload), which
//!   the server answers (another thread drains the answers).
//!
//! Measured on the loop thread: its CPU time (`CLOCK_THREAD_CPUTIME_ID`, user + system) over
//! the window, per second and per segment sent, and its iterations. The loop polls for
//! `spin_before_park` (the shard's default, 50 µs) after each outside event before it parks:
//! at a segment burst every millisecond that is most of its iterations and a good part of its
//! CPU, the same in both modes; with the spin off (`0`) the figures are the segments' own
//! cost, each paid with a wake-up. The attacker's cost is a
//! segment either way; the target (issue 33) is that a trickled segment costs the loop no more
//! than a whole packet (±20 %). Before partial packets were accumulated in place, each
//! trickled byte copied the packet so far out of the connection's buffer and back into a
//! fresh allocation (and the epoll read zeroed 16 KiB to receive it).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use shardloop::EventLoop;
use shardloop::net::{Access, BackendKind, Limits, Net, frame};
use shardloop::runtime::Phase;

/// Client connections.
const CONNECTIONS: usize = 16;
/// Each connection sends a segment this often.
const PERIOD: Duration = Duration::from_millis(1);
/// The trickled packet's id: the server handles it and answers nothing.
const BLOB: u8 = 0x31;
/// The trickled packet's declared length: the default `max_packet`.
const BLOB_LEN: usize = 8192;
/// A whole ping's payload.
const PING_PAYLOAD: usize = 16;
/// Settling time before each window is measured (connections made, the first packets in).
const WARM_UP: Duration = Duration::from_millis(500);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Trickle,
    Whole,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Trickle => "trickle, 1 byte a segment",
            Mode::Whole => "whole packets (peer)",
        }
    }
}

/// One window's figures.
#[derive(Clone, Copy, Debug)]
struct Window {
    /// Loop thread CPU time over the window.
    cpu: Duration,
    /// Loop iterations over the window.
    iterations: u64,
    /// Segments the clients sent over the window.
    segments: u64,
    /// How long the window lasted.
    wall: Duration,
}

impl Window {
    fn cpu_percent(&self) -> f64 {
        100.0 * self.cpu.as_secs_f64() / self.wall.as_secs_f64()
    }

    fn ns_per_segment(&self) -> f64 {
        self.cpu.as_nanos() as f64 / self.segments.max(1) as f64
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = match args.first().map(String::as_str) {
        None | Some("epoll") => BackendKind::Epoll,
        Some("io_uring") => BackendKind::IoUring,
        Some(other) => panic!("unknown backend {other:?}: epoll or io_uring"),
    };
    let seconds: u64 = args.get(1).map_or(10, |s| s.parse().expect("seconds"));
    let rounds: usize = args.get(2).map_or(3, |s| s.parse().expect("rounds"));
    let spin = args
        .get(3)
        .map_or(shardloop::runtime::DEFAULT_SPIN_BEFORE_PARK, |s| {
            Duration::from_micros(s.parse().expect("spin_before_park, µs"))
        });
    let window = Duration::from_secs(seconds);
    println!(
        "{kind:?}: {CONNECTIONS} connections, a segment each every {PERIOD:?}, {seconds} s per \
         mode, {rounds} rounds, spin_before_park {spin:?}"
    );
    let mut results: Vec<(Mode, Window)> = Vec::new();
    for round in 0..rounds {
        // Alternate which mode goes first, so drift on the host favours neither.
        let order = match round % 2 {
            0 => [Mode::Trickle, Mode::Whole],
            _ => [Mode::Whole, Mode::Trickle],
        };
        for mode in order {
            let w = measure(kind, mode, window, spin);
            println!(
                "round {round}  {:<28} loop CPU {:6.2} %  {:7.0} ns/segment  {:9} segments  \
                 {:8} iterations",
                mode.name(),
                w.cpu_percent(),
                w.ns_per_segment(),
                w.segments,
                w.iterations
            );
            results.push((mode, w));
        }
    }
    let median = |mode: Mode, f: fn(&Window) -> f64| {
        let mut v: Vec<f64> = results
            .iter()
            .filter(|(m, _)| *m == mode)
            .map(|(_, w)| f(w))
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (trickle, whole) = (
        median(Mode::Trickle, Window::ns_per_segment),
        median(Mode::Whole, Window::ns_per_segment),
    );
    println!(
        "median: trickle {:.2} % CPU, {trickle:.0} ns/segment; whole packets {:.2} % CPU, \
         {whole:.0} ns/segment; trickle / whole = {:.2}",
        median(Mode::Trickle, Window::cpu_percent),
        median(Mode::Whole, Window::cpu_percent),
        trickle / whole
    );
}

/// Runs one window of `mode` against a fresh server on `kind`, the loop spinning `spin`
/// before it parks.
fn measure(kind: BackendKind, mode: Mode, window: Duration, spin: Duration) -> Window {
    let measured = kind.block_on(async move {
        let net = Net::new(Limits {
            max_connections: 4 * CONNECTIONS,
            max_per_ip: usize::MAX,
            ping_rate: None,
            login_timeout: Duration::from_secs(3600),
            idle_timeout: Duration::from_secs(3600),
            ..Limits::default()
        });
        net.handle(BLOB, "blob", Access::Always, |_, _, _| Ok(()));
        let mut event_loop = EventLoop::builder()
            .spin_before_park(spin)
            .slot(Phase::Network, net.network_slot())
            .slot(Phase::Flush, net.flush_slot())
            .build();
        let stats = event_loop.stats();
        let served = event_loop
            .run_until(async {
                let listen = ["127.0.0.1:0".parse().unwrap()];
                let addr = net.listen(&*kind.backend(), &listen).expect("binds")[0];
                let stop = Arc::new(AtomicBool::new(false));
                let sent = Arc::new(AtomicU64::new(0));
                let clients = {
                    let (stop, sent) = (stop.clone(), sent.clone());
                    thread::spawn(move || clients(addr, mode, &stop, &sent))
                };
                tokio::time::sleep(WARM_UP).await;
                let began = (thread_cpu(), Instant::now(), sent.load(Ordering::Acquire));
                tokio::time::sleep(window).await;
                let ended = (thread_cpu(), Instant::now(), sent.load(Ordering::Acquire));
                stop.store(true, Ordering::Release);
                // The client thread only sleeps and writes: joining it does not hold the loop.
                clients.join().expect("the client thread");
                net.stop();
                (ended.0 - began.0, ended.1 - began.1, ended.2 - began.2)
            })
            .await;
        let iterations = event_loop.stats().iterations - stats.iterations;
        (served, iterations)
    });
    let ((cpu, wall, segments), iterations) = measured.expect("the runtime starts");
    Window {
        cpu,
        iterations,
        segments,
        wall,
    }
}

/// The clients: connect, then send a segment per connection every [`PERIOD`] until `stop`,
/// counting them in `sent`.
fn clients(addr: SocketAddr, mode: Mode, stop: &AtomicBool, sent: &AtomicU64) {
    let mut streams: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| {
            let s = TcpStream::connect(addr).expect("connects");
            s.set_nodelay(true).unwrap();
            s
        })
        .collect();
    // Whole pings are answered: a thread drains the answers.
    let drain = (mode == Mode::Whole).then(|| {
        let readers: Vec<TcpStream> = streams.iter().map(|s| s.try_clone().unwrap()).collect();
        for r in &readers {
            r.set_nonblocking(true).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let handle = thread::spawn(move || {
            let mut buf = [0u8; 64 * 1024];
            let mut readers = readers;
            while !stopped.load(Ordering::Acquire) {
                for r in &mut readers {
                    while let Ok(n) = r.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                    }
                }
                thread::sleep(Duration::from_millis(1));
            }
        });
        (stop, handle)
    });
    let blob = frame::packet(BLOB, &[&vec![7u8; BLOB_LEN - frame::HEADER_LEN]]);
    let ping = frame::packet(frame::PING, &[&[1u8; PING_PAYLOAD]]);
    let mut next = Instant::now();
    let mut at = 0usize; // the trickle's position in its packet
    while !stop.load(Ordering::Acquire) {
        for s in &mut streams {
            let sent = match mode {
                Mode::Trickle => s.write_all(&blob[at..at + 1]),
                Mode::Whole => s.write_all(&ping),
            };
            sent.expect("the server keeps the connection");
        }
        at = (at + 1) % blob.len();
        sent.fetch_add(CONNECTIONS as u64, Ordering::Release);
        next += PERIOD;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
    }
    if let Some((stop, handle)) = drain {
        stop.store(true, Ordering::Release);
        handle.join().unwrap();
    }
}

/// This thread's CPU time (user + system).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct it is given; the clock id is valid on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
