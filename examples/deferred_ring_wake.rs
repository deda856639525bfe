//! How soon a thread parked in `epoll_wait` learns that a socket's receive on its io_uring ring
//! can complete, for each way the ring can tell it (docs/performance.md, "The deferred ring's
//! late wake-up").
//!
//! No shard, no tokio: one ring, one receive armed on a loopback socket (the kernel polls the
//! socket for it), a plain epoll set watching the one descriptor the mode names, and a second
//! thread that writes 4 bytes to the peer 5 ms after each round starts. The main thread blocks
//! in `epoll_wait` until the descriptor fires, then enters the ring to collect the receive;
//! each round's time is from the write to the receive's completion. 40 rounds.
//!
//! Modes:
//! - `eventfd` (default): `SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG` with a registered
//!   eventfd, as commit 4256d41 set it up. The kernel queues the receive's work on the ring and
//!   signals the eventfd for it.
//! - `ringfd`: the same ring, its own descriptor watched (the kernel does not wake it for
//!   queued work: rounds end on the 1 s `epoll_wait` timeout).
//! - `coop`: a `COOP_TASKRUN` ring, its own descriptor watched (what `main` runs).
//! - `unix`: as `eventfd`, on a Unix socket pair instead of TCP loopback (the data's wake-up
//!   then comes from the writer's system call, not from network softirq processing).
//! - `count`: as `eventfd`, and 2 ms after each write prints the eventfd's count (read
//!   without blocking, after a read that emptied it) and the ring's `IORING_SQ_TASKRUN` flag.
//!
//! ```sh
//! cargo run --release --example deferred_ring_wake -- eventfd
//! ```

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use io_uring::{IoUring, opcode, types};

const ROUNDS: usize = 40;
/// `io_uring_enter` flag: run the ring's queued work and reap completions.
const IORING_ENTER_GETEVENTS: u32 = 1;

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "eventfd".into());
    let mut ring = build_ring(&mode);
    // SAFETY: plain system call; the descriptor it returns is new and ours alone.
    let eventfd = unsafe { OwnedFd::from_raw_fd(libc::eventfd(0, libc::EFD_NONBLOCK)) };
    ring.submitter()
        .register_eventfd(eventfd.as_raw_fd())
        .expect("register_eventfd");
    let watched = match mode.as_str() {
        "ringfd" | "coop" => ring.as_raw_fd(),
        _ => eventfd.as_raw_fd(),
    };
    let epoll = epoll_watching(watched);
    let (server, client) = socket_pair(mode == "unix");
    let (written_tx, written_rx) = mpsc::channel::<Instant>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    std::thread::spawn(move || writer(client, &go_rx, &written_tx));

    let mut buf = [0u8; 64];
    let mut times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let recv = opcode::Recv::new(types::Fd(server.as_raw_fd()), buf.as_mut_ptr(), 64)
            .build()
            .user_data(1);
        // SAFETY: `buf` outlives the receive: the round waits for its completion below.
        unsafe { ring.submission().push(&recv).expect("a free entry") };
        ring.submit().expect("submit");
        wait(&epoll, 0); // forget the readiness our own submit caused
        if mode == "count" {
            drain(&eventfd);
        }
        go_tx.send(()).expect("the writer runs");
        if mode == "count" {
            std::thread::sleep(Duration::from_millis(7));
            // SAFETY: the ring is alive; the flag word is only read.
            let queued = unsafe { ring.submission_shared().taskrun() };
            println!(
                "2 ms after the write: eventfd count {}, IORING_SQ_TASKRUN {queued}",
                drain(&eventfd)
            );
        }
        loop {
            wait(&epoll, 1000);
            // GETEVENTS, nothing to submit, wait for nothing: runs the ring's queued work.
            // SAFETY: no argument is passed.
            unsafe {
                ring.submitter()
                    .enter::<libc::sigset_t>(0, 0, IORING_ENTER_GETEVENTS, None)
                    .expect("enter");
            }
            if ring.completion().next().is_some() {
                break;
            }
        }
        times.push(written_rx.recv().expect("a write time").elapsed());
    }
    times.sort();
    println!(
        "{mode}: write to completion p50 {:?}, p90 {:?}, max {:?} ({ROUNDS} rounds)",
        times[ROUNDS / 2],
        times[ROUNDS * 9 / 10],
        times[ROUNDS - 1]
    );
}

fn build_ring(mode: &str) -> IoUring {
    let mut builder = IoUring::builder();
    if mode == "coop" {
        builder.setup_coop_taskrun();
    } else {
        builder
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag();
    }
    builder
        .build(64)
        .expect("an io_uring ring (Linux 6.1 for the deferred one)")
}

/// An epoll set watching `fd` for input, edge-triggered (as tokio registers it).
fn epoll_watching(fd: RawFd) -> OwnedFd {
    // SAFETY: plain system call; the descriptor it returns is new and ours alone.
    let epoll = unsafe { OwnedFd::from_raw_fd(libc::epoll_create1(libc::EPOLL_CLOEXEC)) };
    let mut event = libc::epoll_event {
        events: (libc::EPOLLIN | libc::EPOLLET) as u32,
        u64: 1,
    };
    // SAFETY: both descriptors are open; `event` is a valid epoll_event.
    let added = unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) };
    assert_eq!(added, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
    epoll
}

fn wait(epoll: &OwnedFd, timeout_ms: i32) {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
    // SAFETY: `events` holds 4 entries, as passed.
    unsafe { libc::epoll_wait(epoll.as_raw_fd(), events.as_mut_ptr(), 4, timeout_ms) };
}

/// The eventfd's count, reset to 0 (0 when it was 0).
fn drain(eventfd: &OwnedFd) -> u64 {
    let mut count = 0u64;
    // SAFETY: reads 8 bytes into `count`; a non-blocking eventfd at 0 fails with EAGAIN.
    unsafe { libc::read(eventfd.as_raw_fd(), (&raw mut count).cast(), 8) };
    count
}

/// The receiving end and the writing end: TCP on loopback, or a Unix socket pair.
fn socket_pair(unix: bool) -> (OwnedFd, Box<dyn Write + Send>) {
    if unix {
        let (a, b) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
        return (a.into(), Box::new(b));
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let client =
        std::net::TcpStream::connect(listener.local_addr().expect("an address")).expect("connect");
    client.set_nodelay(true).expect("nodelay");
    let (server, _) = listener.accept().expect("accept");
    (server.into(), Box::new(client))
}

/// Per round: waits 5 ms (long enough for the main thread to block), notes the time, writes.
fn writer(
    mut client: Box<dyn Write + Send>,
    go: &mpsc::Receiver<()>,
    written: &mpsc::Sender<Instant>,
) {
    while go.recv().is_ok() {
        std::thread::sleep(Duration::from_millis(5));
        let _ = written.send(Instant::now());
        client.write_all(b"ping").expect("write");
    }
}
