//! An in-process fake shard for `loadgen`'s tests, on a thread and a runtime of its own.
//!
//! It answers like the shard minus the world (pings echoed, login → `0x81`, move → `0x85`
//! and `0x82`, say → `0x84`, logout or an unknown id → close) and records, per connection,
//! who connected and what it sent. On request it closes every connection a while after
//! accepting it (with an end of stream or a reset; after no while at all, before reading a
//! byte, as the shard refuses at accept), and pushes bytes at each client first,
//! writing until the client's window stops it, to see whether the client reads.
//!
//! Besides, `refusing_port`: a port where nobody listens; `unanswering_port`: one whose SYNs
//! go unanswered.
//!
//! This module owns the fake and its records. It must never be built outside tests, nor
//! leave a test without a bound: every wait on it gives up after `WAIT`.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use crate::demo::packets::{client, serial_xy, server};
use shardloop::net::frame;
use socket2::SockRef;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// How long a test waits for the fake to have seen what it expects.
const WAIT: Duration = Duration::from_secs(10);
/// A push stops when the client's window has stayed shut this long: generous, because a
/// client that does read may be descheduled on a busy host.
const STALL: Duration = Duration::from_secs(1);
/// The fake's send buffer while it pushes, small so that what a push gets through is the
/// client's receive window and not the fake's own buffer (the kernel doubles it).
const PUSH_SEND_BUFFER: usize = 16 * 1024;

/// How the fake treats each connection, besides answering.
#[derive(Debug, Clone, Copy, Default)]
struct Behaviour {
    /// Close each connection this long after accepting it, this way.
    close_after: Option<(Duration, Close)>,
    /// Before answering anything, write up to this many bytes of `0x84` speech.
    push: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Close {
    /// Close the socket: the client reads an end of stream.
    Eof,
    /// Close it with `SO_LINGER` 0: the client gets a reset.
    Reset,
}

/// What the fake saw of one connection.
#[derive(Debug, Clone)]
pub(super) struct Peer {
    pub(super) addr: SocketAddr,
    /// Packets received, by id, and the first one's id.
    pub(super) packets: BTreeMap<u8, u64>,
    pub(super) first: Option<u8>,
    pub(super) bytes: u64,
    /// When the client's end of stream (or an error) came; `None` while it is connected, or
    /// if the fake closed first.
    pub(super) gone: Option<Instant>,
    /// How much of the push the client's window let through.
    pub(super) pushed: Option<u64>,
}

impl Peer {
    pub(super) fn count(&self, id: u8) -> u64 {
        self.packets.get(&id).copied().unwrap_or(0)
    }
}

type Peers = Arc<Mutex<Vec<Peer>>>;

/// A running fake shard; it lives until the test process ends.
pub(super) struct FakeShard {
    pub(super) addr: SocketAddr,
    peers: Peers,
}

impl FakeShard {
    /// A fake that only answers.
    pub(super) fn start() -> FakeShard {
        FakeShard::with(Behaviour::default())
    }

    /// A fake that closes each connection `after` accepting it, `how`.
    pub(super) fn closing(after: Duration, how: Close) -> FakeShard {
        FakeShard::with(Behaviour {
            close_after: Some((after, how)),
            ..Behaviour::default()
        })
    }

    /// A fake that first pushes `bytes` at each client.
    pub(super) fn pushing(bytes: usize) -> FakeShard {
        FakeShard::with(Behaviour {
            push: bytes,
            ..Behaviour::default()
        })
    }

    fn with(behaviour: Behaviour) -> FakeShard {
        let listener = StdListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("bound address");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let peers = Peers::default();
        let recorded = Arc::clone(&peers);
        thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("fake shard runtime");
            runtime.block_on(accept(listener, recorded, behaviour));
        });
        FakeShard { addr, peers }
    }

    /// What the fake has seen so far.
    pub(super) fn peers(&self) -> Vec<Peer> {
        lock(&self.peers).clone()
    }

    /// Waits until `done` holds for the peers and returns them; fails the test, showing
    /// them, if it does not within `WAIT`.
    pub(super) fn wait_for(&self, what: &str, done: impl Fn(&[Peer]) -> bool) -> Vec<Peer> {
        let give_up = std::time::Instant::now() + WAIT;
        loop {
            let peers = self.peers();
            if done(&peers) {
                return peers;
            }
            assert!(
                std::time::Instant::now() < give_up,
                "the fake shard never saw {what}: {peers:#?}"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A port that refuses every connection: bound but not listening. The socket returned holds
/// it (no other test can take it meanwhile) and must live while the port is used.
pub(super) fn refusing_port() -> (socket2::Socket, SocketAddr) {
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
    (socket, addr)
}

/// A port that never answers a connect: listening with its accept queue full (a backlog of
/// 0, filled by connections that are never accepted), so the kernel drops every new SYN, as
/// it drops a banned source's. What is returned holds the port and the queue; keep it.
pub(super) fn unanswering_port() -> (Vec<socket2::Socket>, SocketAddr) {
    let (listener, addr) = refusing_port();
    listener.listen(0).expect("listen");
    let mut held = vec![listener];
    for _ in 0..8 {
        let filler = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a TCP socket");
        let answered = filler
            .connect_timeout(&addr.into(), Duration::from_millis(200))
            .is_ok();
        held.push(filler);
        if !answered {
            return (held, addr);
        }
    }
    panic!("{addr} still answers with its backlog full");
}

fn lock(peers: &Peers) -> std::sync::MutexGuard<'_, Vec<Peer>> {
    // A test that panicked while holding it has failed already: its records still stand.
    peers.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn accept(listener: StdListener, peers: Peers, behaviour: Behaviour) {
    let listener = TcpListener::from_std(listener).expect("tokio listener");
    while let Ok((stream, addr)) = listener.accept().await {
        let me = Record::new(&peers, addr);
        tokio::spawn(serve(stream, me, behaviour));
    }
}

/// One connection's entry in the records.
struct Record {
    peers: Peers,
    index: usize,
}

impl Record {
    fn new(peers: &Peers, addr: SocketAddr) -> Record {
        let mut all = lock(peers);
        all.push(Peer {
            addr,
            packets: BTreeMap::new(),
            first: None,
            bytes: 0,
            gone: None,
            pushed: None,
        });
        Record {
            peers: Arc::clone(peers),
            index: all.len() - 1,
        }
    }

    fn update(&self, change: impl FnOnce(&mut Peer)) {
        change(&mut lock(&self.peers)[self.index]);
    }
}

async fn serve(stream: TcpStream, me: Record, behaviour: Behaviour) {
    if behaviour.push > 0 {
        let pushed = push(&stream, behaviour.push).await;
        me.update(|peer| peer.pushed = Some(pushed));
    }
    let Some((after, how)) = behaviour.close_after else {
        let _ = answer(&stream, &me).await;
        me.update(|peer| peer.gone = Some(Instant::now()));
        return;
    };
    if after.is_zero() {
        // Closed at accept, nothing read or answered: the shard's refusal.
        if how == Close::Reset {
            let _ = SockRef::from(&stream).set_linger(Some(Duration::ZERO));
        }
        return;
    }
    if tokio::time::timeout(after, answer(&stream, &me))
        .await
        .is_ok()
    {
        me.update(|peer| peer.gone = Some(Instant::now()));
    } else if how == Close::Reset {
        let _ = SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    }
    // Dropping the stream closes it: a reset with linger 0, else an end of stream.
}

/// Writes up to `total` bytes of speech until the client's window stays shut for `STALL`,
/// and says how many went out.
async fn push(stream: &TcpStream, total: usize) -> u64 {
    let _ = SockRef::from(stream).set_send_buffer_size(PUSH_SEND_BUFFER);
    let speech = frame::packet(server::SPEECH, &[&[b'x'; 4093]]);
    let mut written = 0;
    while written < total {
        let at = written % speech.len();
        let room = tokio::time::timeout(STALL, stream.writable()).await;
        if !matches!(room, Ok(Ok(()))) {
            break;
        }
        let end = speech.len().min(at + total - written);
        match stream.try_write(&speech[at..end]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    written as u64
}

/// Answers the client's packets until it hangs up (or sends logout, or an unknown id).
async fn answer(stream: &TcpStream, me: &Record) -> io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        // `readable` of a socket that always has data never returns `Pending`: without this a
        // flood would keep this task running, and the close timer behind it would never fire.
        tokio::task::consume_budget().await;
        stream.readable().await?;
        match stream.try_read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                me.update(|peer| peer.bytes += n as u64);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
        let (used, out, go_on) = answers(&buf, me)?;
        buf.drain(..used);
        write_all(stream, &out).await?;
        if !go_on {
            return Ok(());
        }
    }
}

/// The answers to the whole packets at the front of `buf`, recorded: how many bytes they
/// took, the bytes to send back, and whether to go on.
fn answers(buf: &[u8], me: &Record) -> io::Result<(usize, Vec<u8>, bool)> {
    let mut used = 0;
    let mut out = Vec::new();
    let mut seen = Vec::new();
    let mut go_on = true;
    while let Some(packet) = frame::split(&buf[used..], 8192).map_err(io::Error::other)? {
        used += packet.bytes.len();
        seen.push(packet.id);
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
            _ => {
                go_on = false;
                break;
            }
        }
    }
    me.update(|peer| {
        for id in seen {
            peer.first.get_or_insert(id);
            *peer.packets.entry(id).or_default() += 1;
        }
    });
    Ok((used, out, go_on))
}

async fn write_all(stream: &TcpStream, mut rest: &[u8]) -> io::Result<()> {
    while !rest.is_empty() {
        stream.writable().await?;
        match stream.try_write(rest) {
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
