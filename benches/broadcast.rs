//! Broadcast benchmark: what the Deltas phase costs per move, when players crowd together
//! and when they are spread out, with the sector index against the linear scan it replaced.
//!
//! Peers, in the same run, on the same shard and the same moves:
//! - `sector_index` (ours): `game::deltas_handler`, whose `Players::in_range` reads only the
//!   sectors around the mover.
//! - `linear_scan` (the reference): the Deltas handler as it was, moves only (this bench makes
//!   no speech), with the old `in_range`: every player of a `BTreeMap` table, in serial
//!   order, filtered by range. The table is a copy of the old one, kept in step with the
//!   moves; its rows have the old rows' size.
//!
//! Scenarios (`<layout>_<players>`):
//! - `crowd_N`: N players logged in on names whose start spot falls in one 18 × 18-tile
//!   square across a sector corner (2 × 2 sectors), so every player sees every other: a
//!   move goes to N − 1 players whatever the lookup.
//! - `spread_N`: N players walked out from their start spots to seeded random spots all over
//!   Felucca (6144 × 4096 tiles): a move goes to almost nobody.
//!
//! The shard is the real one, minus the world's game logic: an `EventLoop` with the Network
//! and Flush slots of a `Net` on loopback, one TCP client per player that logged in with the
//! login packet. A move is the real move handler (`demo::packets::PACKETS`) called for a player —
//! east, then back west on its next turn, so crowds stay put. One measured step: `BATCH`
//! players move (not timed), then the Deltas phase runs (timed) until the world's queues are
//! empty, then the loop flushes and the clients read and count every packet (not timed): the
//! count of `0x82` and `0x85` packets must equal the moves and, for each mover, the players
//! then within range but itself (counted by brute force).
//!
//! A second group times the lookup alone, without sending: `in_range_per_lookup`, who is in
//! range of successive players' spots, through `Players::in_range` against the old scan.
//!
//! Running: `cargo bench --bench broadcast` runs the criterion groups `deltas_per_move`
//! (time per move) and `in_range_per_lookup`, then prints a summary (median of `REPS` runs
//! per scenario and peer, interleaved, with the ratios; and, timed apart from the Deltas
//! phase, the Flush phase of the same steps, where work the fan-out leaves for later shows).
//! `-- summary` prints only the summary. `cargo test --bench broadcast` (and `cargo test
//! --benches`) runs a quick pass on small scenarios with the same packet-count checks, plus
//! each criterion benchmark once.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::hint::black_box;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, SamplingMode};
use demo::packets::{PACKETS, client, serial_xy, server, start_location};
use shardloop::EventLoop;
use shardloop::game::{self, Packet, PacketHandler, Players, VIEW_RANGE};
use shardloop::net::{BackendKind, ConnId, Limits, Net, frame};
use shardloop::runtime::Phase;
use shardloop::world::{DELTAS_PER_ITERATION, Delta, Location, MapId, Serial, World};
use tokio::runtime::Runtime;

/// The demo game, as the binary compiles it.
#[path = "../src/demo/mod.rs"]
mod demo;
mod support;
use support::median;

/// Players moved per Deltas phase.
const BATCH: usize = 64;
/// Runs per scenario and peer behind each summary figure.
const REPS: usize = 5;
/// Moves per summary run.
const SUMMARY_MOVES: usize = 20 * BATCH;
/// The crowd's square, on Felucca: tiles 1592–1609 both ways, across the corner the four
/// sectors around (1600, 1600) share, so the crowd stands in 2 × 2 sectors.
const CROWD_FROM: (u16, u16) = (1592, 1592);
const CROWD_SIDE: u16 = 18;
/// Seed of the spread layout's spots.
const SEED: u64 = 0x5eed_b40a_dca5_7001;
/// How long the shard may take to log a hundred players in or deliver one step's packets.
const DELIVERY: Duration = Duration::from_secs(60);
/// How long the clients wait for a missing packet once nothing more arrives.
const STALL: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, PartialEq)]
enum Layout {
    Crowd,
    Spread,
}

#[derive(Clone, Copy)]
struct Scenario {
    layout: Layout,
    players: usize,
}

impl Scenario {
    fn name(self) -> String {
        let layout = match self.layout {
            Layout::Crowd => "crowd",
            Layout::Spread => "spread",
        };
        format!("{layout}_{}", self.players)
    }
}

/// The scenarios of `cargo bench`, and the small ones of `cargo test`.
fn scenarios(full_size: bool) -> [Scenario; 3] {
    let (few, many) = if full_size { (100, 1000) } else { (10, 40) };
    [
        Scenario {
            layout: Layout::Crowd,
            players: few,
        },
        Scenario {
            layout: Layout::Crowd,
            players: many,
        },
        Scenario {
            layout: Layout::Spread,
            players: many,
        },
    ]
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Peer {
    SectorIndex,
    LinearScan,
}

const PEERS: [Peer; 2] = [Peer::SectorIndex, Peer::LinearScan];

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::SectorIndex => "sector_index",
            Peer::LinearScan => "linear_scan",
        }
    }
}

// ---------------------------------------------------------------------------------------
// The reference: the player table and the Deltas handler before the sector index.

/// A row of the old player table: the same fields and size as the old `Player` (its speech
/// allowance was a `u32` and an `Instant`).
struct OldPlayer {
    conn: ConnId,
    at: Location,
    _speech: (u32, tokio::time::Instant),
}

type OldTable = Rc<RefCell<BTreeMap<Serial, OldPlayer>>>;

/// The old `Players::in_range`: every player, filtered by range.
fn old_in_range(
    table: &BTreeMap<Serial, OldPlayer>,
    at: Location,
) -> impl Iterator<Item = (Serial, ConnId)> + '_ {
    table
        .iter()
        .filter(move |(_, p)| p.at.distance(&at).is_some_and(|d| d <= VIEW_RANGE))
        .map(|(serial, p)| (*serial, p.conn))
}

/// The old Deltas handler's move path: drain the world's mobile changes, then send each
/// move to everyone in range but the mover.
fn linear_scan(world: Rc<RefCell<World>>, table: OldTable, net: Net) -> impl FnMut() -> bool {
    let mut moved: Vec<(Serial, Location)> = Vec::new();
    move || {
        let pending = world.borrow_mut().drain_changes(
            DELTAS_PER_ITERATION,
            |change| match change.location {
                Some(at) if change.delta.contains(Delta::MOVED) => moved.push((change.serial, at)),
                _ => {}
            },
            |_, _| {},
        );
        let table = table.borrow();
        net.with_sessions(|sessions| {
            for (serial, at) in moved.drain(..) {
                let packet = serial_xy(serial.0, at.x, at.y);
                for (player, conn) in old_in_range(&table, at) {
                    if player != serial {
                        sessions.send_packet(conn, server::MOBILE_MOVED, &[&packet]);
                    }
                }
            }
        });
        pending
    }
}

// ---------------------------------------------------------------------------------------
// The shard and its clients.

/// Lets the loop run one more iteration (its Flush, then its Network phase) and goes on.
struct NextIteration(bool);

impl Future for NextIteration {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The event loop with the server's Network and Flush slots, on its runtime.
struct Shard {
    runtime: Runtime,
    event_loop: EventLoop,
}

impl Shard {
    /// Runs the loop until `done` says so (checked once per iteration).
    fn pump(&mut self, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + DELIVERY;
        self.runtime.block_on(self.event_loop.run_until(async move {
            while !done() {
                assert!(
                    Instant::now() < deadline,
                    "the shard did not deliver in time"
                );
                NextIteration(false).await;
            }
        }));
    }
}

/// Bytes of the login answer: its header and the serial and spot it carries.
const LOGIN_ANSWER: usize = frame::HEADER_LEN + 8;

/// A client's login answer, read a piece at a time without blocking.
#[derive(Clone, Copy)]
struct Answer {
    bytes: [u8; LOGIN_ANSWER],
    filled: usize,
}

impl Default for Answer {
    fn default() -> Self {
        Answer {
            bytes: [0; LOGIN_ANSWER],
            filled: 0,
        }
    }
}

impl Answer {
    /// Reads what `stream` has of the answer so far; whether it is whole.
    fn read_from(&mut self, stream: &mut TcpStream) -> bool {
        while self.filled < LOGIN_ANSWER {
            match stream.read(&mut self.bytes[self.filled..]) {
                Ok(0) => panic!("the shard closed a client before its login answer"),
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("a login answer: {e}"),
            }
        }
        true
    }
}

/// Packets the clients were sent (or should have been), by kind.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Tally {
    move_ok: u64,
    mobile_moved: u64,
}

/// One player's connection, read without blocking.
struct Client {
    stream: TcpStream,
    /// The tail of a packet not wholly read yet.
    partial: Vec<u8>,
}

impl Client {
    /// Reads what has arrived and counts the whole packets in it.
    fn read(&mut self, tally: &mut Tally, buf: &mut [u8]) {
        loop {
            match self.stream.read(buf) {
                Ok(0) => panic!("the shard closed a client's connection"),
                Ok(n) => self.partial.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("a client's read failed: {e}"),
            }
        }
        let mut at = 0;
        while let Some(header) = self.partial.get(at..at + frame::HEADER_LEN) {
            let len = usize::from(u16::from_be_bytes([header[1], header[2]]));
            if self.partial.len() < at + len {
                break;
            }
            match header[0] {
                server::MOVE_OK => tally.move_ok += 1,
                server::MOBILE_MOVED => tally.mobile_moved += 1,
                id => panic!("unexpected packet 0x{id:02x}"),
            }
            at += len;
        }
        self.partial.drain(..at);
    }
}

/// A shard with `players` logged in, laid out as a scenario says, and both peers' Deltas
/// handlers.
struct Bed {
    shard: Shard,
    world: Rc<RefCell<World>>,
    players: Rc<RefCell<Players>>,
    net: Net,
    walk: PacketHandler,
    clients: Vec<Client>,
    /// Each client's player and its connection, by client index.
    who: Vec<(Serial, ConnId)>,
    table: OldTable,
    ours: Box<dyn FnMut() -> bool>,
    reference: Box<dyn FnMut() -> bool>,
    /// Who moves next (round robin), and whether each player is east of its home.
    next: usize,
    east: Vec<bool>,
    expected: Tally,
    received: Tally,
    /// Moves and their broadcasts in measured steps only (not the spreading walk).
    measured: Tally,
    buf: Vec<u8>,
    /// Time spent in the loop's Flush phase so far (the slot wrapped in a clock): not part
    /// of any Deltas figure.
    flushing: Rc<Cell<Duration>>,
}

impl Bed {
    fn new(scenario: Scenario) -> Bed {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        // One host, bots moving flat out: no admission or flood limit gets in the way.
        let net = Net::new(Limits {
            max_connections: 2 * scenario.players,
            max_per_ip: usize::MAX,
            max_per_ipv6_prefix: usize::MAX,
            max_prelogin: usize::MAX,
            connect_rate: None,
            send_buffer_size: 16 << 20,
            outbound_budget: usize::MAX,
            idle_timeout: Duration::ZERO,
            login_timeout: Duration::ZERO,
            ping_rate: None,
            ..Limits::default()
        });
        let world = Rc::new(RefCell::new(World::new(1)));
        let no_limits = demo::Rates {
            moves: None,
            speech: None,
        };
        let players = demo::install_packets(&net, world.clone(), no_limits);
        let flushing: Rc<Cell<Duration>> = Rc::default();
        let event_loop = {
            let _runtime = runtime.enter();
            EventLoop::builder()
                .slot(Phase::Network, net.network_slot())
                .slot(Phase::Flush, timed(net.flush_slot(), flushing.clone()))
                .build()
        };
        let table: OldTable = Rc::default();
        let walk = PACKETS
            .iter()
            .find(|(id, ..)| *id == client::MOVE)
            .map(|&(.., handler)| handler)
            .expect("a move handler");
        let mut bed = Bed {
            shard: Shard {
                runtime,
                event_loop,
            },
            ours: Box::new(game::deltas_handler(
                world.clone(),
                players.clone(),
                net.clone(),
                demo::packets::DELTAS,
            )),
            reference: Box::new(linear_scan(world.clone(), table.clone(), net.clone())),
            world,
            players,
            net,
            walk,
            clients: Vec::new(),
            who: Vec::new(),
            table,
            next: 0,
            east: vec![false; scenario.players],
            expected: Tally::default(),
            received: Tally::default(),
            measured: Tally::default(),
            buf: vec![0; 64 * 1024],
            flushing,
        };
        bed.log_in(&names(scenario));
        if scenario.layout == Layout::Spread {
            bed.spread_out();
        }
        bed
    }

    /// Connects one client per name and logs it in, a hundred at a time.
    fn log_in(&mut self, names: &[String]) {
        let net = self.net.clone();
        let mut addr = None;
        self.shard.pump(|| {
            let listen = ["127.0.0.1:0".parse().unwrap()];
            addr = Some(net.listen(&*BackendKind::Epoll.backend(), &listen).unwrap()[0]);
            true
        });
        let addr = addr.unwrap();
        for chunk in names.chunks(100) {
            let mut streams = Vec::new();
            for name in chunk {
                let mut stream = TcpStream::connect(addr).expect("connects");
                stream.set_nodelay(true).unwrap();
                stream
                    .write_all(&frame::packet(client::LOGIN, &[name.as_bytes()]))
                    .unwrap();
                stream.set_nonblocking(true).unwrap();
                streams.push(stream);
            }
            let want = self.clients.len() + chunk.len();
            let players = &self.players;
            self.shard.pump(|| players.borrow().len() == want);
            // The answers are read while the loop keeps running: a Flush phase that meets its
            // time budget (a loaded host) leaves some of them for the next iteration, which a
            // blocking read after the pump would wait for in vain.
            let mut answers = vec![Answer::default(); streams.len()];
            self.shard.pump(|| {
                streams
                    .iter_mut()
                    .zip(&mut answers)
                    .all(|(stream, answer)| answer.read_from(stream))
            });
            for (stream, answer) in streams.into_iter().zip(answers) {
                self.welcome(stream, answer.bytes);
            }
        }
        // Logging in queued an `ADDED` change per player: not part of any measured phase.
        self.world.borrow_mut().drain_deltas(usize::MAX);
    }

    /// Files a client's player, from its login answer `ok`, in the old table.
    fn welcome(&mut self, stream: TcpStream, ok: [u8; LOGIN_ANSWER]) {
        assert_eq!(ok[0], server::LOGIN_OK);
        let serial = Serial(u32::from_be_bytes([ok[3], ok[4], ok[5], ok[6]]));
        let x = u16::from_be_bytes([ok[7], ok[8]]);
        let y = u16::from_be_bytes([ok[9], ok[10]]);
        let conn = self.conn_of(serial);
        self.table.borrow_mut().insert(
            serial,
            OldPlayer {
                conn,
                at: Location::new(x, y, 0, MapId::FELUCCA),
                _speech: (0, tokio::time::Instant::now()),
            },
        );
        self.clients.push(Client {
            stream,
            partial: Vec::new(),
        });
        self.who.push((serial, conn));
    }

    /// The connection `serial` logged in on.
    fn conn_of(&self, serial: Serial) -> ConnId {
        let players = self.players.borrow();
        let conns: Vec<ConnId> = self.net.with_sessions(|s| s.ids().collect());
        conns
            .into_iter()
            .find(|&conn| players.player(conn) == Some(serial))
            .expect("a logged-in player")
    }

    /// Player `i` takes one step (`direction` 0–7) through the move handler.
    fn step(&mut self, i: usize, direction: u8) {
        let (serial, conn) = self.who[i];
        let world = &mut *self.world.borrow_mut();
        self.net.with_sessions(|sessions| {
            let mut packet = Packet {
                world,
                players: &mut self.players.borrow_mut(),
                sessions,
                conn,
            };
            (self.walk)(&mut packet, &[direction, 0]).expect("a valid move");
        });
        let at = world.mobile(serial).expect("the player").location;
        self.table.borrow_mut().get_mut(&serial).expect("a row").at = at;
        self.expected.move_ok += 1;
    }

    /// Walks every player to a seeded random spot on Felucca, then forgets those moves.
    fn spread_out(&mut self) {
        let (w, h) = MapId::FELUCCA.size().unwrap();
        let mut rng = SplitMix(SEED);
        let targets: Vec<(u16, u16)> = (0..self.who.len())
            .map(|_| (rng.below(w), rng.below(h)))
            .collect();
        for round in 1.. {
            let mut walked = false;
            for (i, &target) in targets.iter().enumerate() {
                let at = self.table.borrow()[&self.who[i].0].at;
                if let Some(direction) = toward((at.x, at.y), target) {
                    self.step(i, direction);
                    walked = true;
                }
            }
            if round % 256 == 0 || !walked {
                self.world.borrow_mut().drain_deltas(usize::MAX);
                self.deliver();
            }
            if !walked {
                break;
            }
        }
    }

    /// `moves` moves in steps of up to `BATCH`, each followed by `peer`'s Deltas phase;
    /// the time spent in those phases.
    fn run(&mut self, peer: Peer, moves: usize) -> Duration {
        let mut spent = Duration::ZERO;
        let mut left = moves;
        while left > 0 {
            let batch = left.min(BATCH).min(self.who.len());
            let movers = self.move_some(batch);
            let broadcasts = self.expect_broadcasts(&movers);
            self.measured.move_ok += batch as u64;
            self.measured.mobile_moved += broadcasts;
            let deltas = match peer {
                Peer::SectorIndex => &mut self.ours,
                Peer::LinearScan => &mut self.reference,
            };
            let began = Instant::now();
            while deltas() {}
            spent += began.elapsed();
            self.deliver();
            left -= batch;
        }
        spent
    }

    /// The next `batch` players in turn step east, or back west; who moved.
    fn move_some(&mut self, batch: usize) -> Vec<usize> {
        let movers: Vec<usize> = (0..batch)
            .map(|k| (self.next + k) % self.who.len())
            .collect();
        self.next = (self.next + batch) % self.who.len();
        for &i in &movers {
            let direction = if self.east[i] { 6 } else { 2 };
            self.east[i] = !self.east[i];
            self.step(i, direction);
        }
        movers
    }

    /// Each mover's step goes to every player then within range but itself; how many
    /// packets that makes.
    fn expect_broadcasts(&mut self, movers: &[usize]) -> u64 {
        let table = self.table.borrow();
        let mut broadcasts = 0;
        for &i in movers {
            let at = table[&self.who[i].0].at;
            broadcasts += old_in_range(&table, at).count() as u64 - 1;
        }
        self.expected.mobile_moved += broadcasts;
        broadcasts
    }

    /// Lets the loop flush and the clients read until every expected packet arrived, or
    /// nothing more arrives for [`STALL`]; then the counts must match exactly.
    fn deliver(&mut self) {
        let (clients, received, buf, expected) = (
            &mut self.clients,
            &mut self.received,
            &mut self.buf,
            self.expected,
        );
        let mut last = (*received, Instant::now());
        self.shard.pump(|| {
            for c in clients.iter_mut() {
                c.read(received, buf);
            }
            if *received != last.0 {
                last = (*received, Instant::now());
            }
            let all = received.move_ok >= expected.move_ok
                && received.mobile_moved >= expected.mobile_moved;
            all || last.1.elapsed() > STALL
        });
        assert_eq!(self.received, self.expected, "packets the clients read");
    }

    /// `n` lookups of the players in range of successive players' spots, as `peer` makes
    /// them, sending nothing; their time.
    fn look_up(&self, peer: Peer, n: usize) -> Duration {
        let table = self.table.borrow();
        let players = self.players.borrow();
        let spots: Vec<Location> = (0..n)
            .map(|k| table[&self.who[k % self.who.len()].0].at)
            .collect();
        let began = Instant::now();
        for &at in &spots {
            match peer {
                Peer::SectorIndex => players.in_range(at).for_each(|p| {
                    black_box(p);
                }),
                Peer::LinearScan => old_in_range(&table, at).for_each(|p| {
                    black_box(p);
                }),
            }
        }
        began.elapsed()
    }

    /// Players a measured move was sent to, on average so far.
    fn audience(&self) -> f64 {
        self.measured.mobile_moved as f64 / self.measured.move_ok as f64
    }
}

/// `slot`, adding the time each call takes to `spent`.
fn timed(
    mut slot: impl FnMut() -> bool + 'static,
    spent: Rc<Cell<Duration>>,
) -> impl FnMut() -> bool + 'static {
    move || {
        let began = Instant::now();
        let pending = slot();
        spent.set(spent.get() + began.elapsed());
        pending
    }
}

/// Login names for a scenario: for a crowd, names whose start spot is in the crowd's square.
fn names(scenario: Scenario) -> Vec<String> {
    let prefix = scenario.name();
    let all = (0..).map(|k| format!("{prefix}-{k}"));
    let (x0, y0) = CROWD_FROM;
    let in_crowd = |name: &String| {
        let at = start_location(name);
        (x0..x0 + CROWD_SIDE).contains(&at.x) && (y0..y0 + CROWD_SIDE).contains(&at.y)
    };
    match scenario.layout {
        Layout::Crowd => all.filter(in_crowd).take(scenario.players).collect(),
        Layout::Spread => all.take(scenario.players).collect(),
    }
}

/// The direction (0 = north, clockwise) of one step from `from` toward `to`.
fn toward(from: (u16, u16), to: (u16, u16)) -> Option<u8> {
    const DIRECTIONS: [[Option<u8>; 3]; 3] = [
        [Some(7), Some(0), Some(1)],
        [Some(6), None, Some(2)],
        [Some(5), Some(4), Some(3)],
    ];
    let axis = |a: u16, b: u16| 1 + (i32::from(b) - i32::from(a)).signum();
    DIRECTIONS[axis(from.1, to.1) as usize][axis(from.0, to.0) as usize]
}

/// SplitMix64: the layout's spots, the same on every run.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: u16) -> u16 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % u64::from(n)) as u16
    }
}

// ---------------------------------------------------------------------------------------
// Criterion, the quick pass and the summary.

/// `deltas_per_move`: the Deltas phase; `in_range_per_lookup`: the lookup alone.
fn bench(c: &mut Criterion, beds: &mut [(Scenario, Bed)]) {
    let mut group = c.benchmark_group("deltas_per_move");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    every_peer(&mut group, beds, |bed, peer, moves| bed.run(peer, moves));
    group.finish();
    let mut group = c.benchmark_group("in_range_per_lookup");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(2));
    every_peer(&mut group, beds, |bed, peer, lookups| {
        bed.look_up(peer, lookups)
    });
    group.finish();
}

/// One benchmark per scenario and peer; `measure(bed, peer, n)` times `n` iterations.
fn every_peer(
    group: &mut BenchmarkGroup<'_, WallTime>,
    beds: &mut [(Scenario, Bed)],
    measure: impl Fn(&mut Bed, Peer, usize) -> Duration,
) {
    for (scenario, bed) in beds.iter_mut() {
        for peer in PEERS {
            group.bench_function(BenchmarkId::new(peer.name(), scenario.name()), |b| {
                b.iter_custom(|n| measure(bed, peer, n as usize))
            });
        }
    }
}

/// Every peer on every scenario for a few steps, with the packet counts checked, and the
/// layouts checked: a crowd's moves reach everyone else, a spread's almost nobody.
fn quick_pass(beds: &mut [(Scenario, Bed)]) {
    for (scenario, bed) in beds.iter_mut() {
        for peer in PEERS {
            bed.run(peer, 2 * BATCH);
        }
        let per_move = bed.audience();
        let others = (scenario.players - 1) as f64;
        match scenario.layout {
            Layout::Crowd => assert_eq!(per_move, others, "{}", scenario.name()),
            Layout::Spread => assert!(per_move < 1.0, "{}: {per_move}", scenario.name()),
        }
    }
    println!("broadcast: quick pass ok (packet counts and layouts checked)");
}

/// Median ns per move (Deltas phase, and apart the Flush phase of the same steps) and per
/// lookup of `REPS` runs per scenario and peer, runs interleaved.
fn summary(beds: &mut [(Scenario, Bed)]) {
    let mut ns: HashMap<(String, Peer, &str), Vec<f64>> = HashMap::new();
    for _ in 0..REPS {
        for (scenario, bed) in beds.iter_mut() {
            for peer in PEERS {
                let flushed = bed.flushing.get();
                let moves = bed.run(peer, SUMMARY_MOVES);
                let flush = bed.flushing.get() - flushed;
                let lookups = bed.look_up(peer, SUMMARY_MOVES);
                for (what, spent) in [("move", moves), ("flush", flush), ("lookup", lookups)] {
                    let per = spent.as_secs_f64() * 1e9 / SUMMARY_MOVES as f64;
                    ns.entry((scenario.name(), peer, what))
                        .or_default()
                        .push(per);
                }
            }
        }
    }
    let med = |scenario: &Scenario, peer, what| median(ns[&(scenario.name(), peer, what)].clone());
    println!();
    println!(
        "broadcast summary: median of {REPS} runs of {SUMMARY_MOVES} moves (Deltas phase) \
         and as many lookups (in_range alone), runs interleaved; ns"
    );
    println!();
    println!(
        "| scenario | packets per move | sector_index per move | linear_scan per move | \
         linear / index | sector_index per packet | lookup: sector_index | lookup: linear_scan |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (scenario, bed) in beds.iter() {
        let (ours, reference) = (
            med(scenario, Peer::SectorIndex, "move"),
            med(scenario, Peer::LinearScan, "move"),
        );
        let audience = bed.audience();
        println!(
            "| {} | {audience:.1} | {ours:.0} | {reference:.0} | {:.2}× | {} | {:.0} | {:.0} |",
            scenario.name(),
            reference / ours,
            if audience >= 1.0 {
                format!("{:.1}", ours / audience)
            } else {
                "–".into()
            },
            med(scenario, Peer::SectorIndex, "lookup"),
            med(scenario, Peer::LinearScan, "lookup"),
        );
    }
    println!();
    println!("Flush phase of the same steps (not in the figures above): median ns per move");
    println!();
    println!("| scenario | sector_index: Flush per move | linear_scan: Flush per move |");
    println!("|---|---:|---:|");
    for (scenario, _) in beds.iter() {
        println!(
            "| {} | {:.0} | {:.0} |",
            scenario.name(),
            med(scenario, Peer::SectorIndex, "flush"),
            med(scenario, Peer::LinearScan, "flush"),
        );
    }
    let [few, many, _] = [beds[0].0, beds[1].0, beds[2].0];
    println!();
    for peer in PEERS {
        println!(
            "{}: {} / {} per move = {:.2}× (target ≤ 2×)",
            peer.name(),
            many.name(),
            few.name(),
            med(&many, peer, "move") / med(&few, peer, "move")
        );
    }
}

fn main() {
    let (mut criterion, run) = support::invocation();
    // Each player is two descriptors (client and server side).
    let players: usize = scenarios(run.full_size).iter().map(|s| s.players).sum();
    let _ = shardloop::host::fd_limit::raise(2 * players as u64 + 256);
    let mut beds: Vec<(Scenario, Bed)> = scenarios(run.full_size)
        .into_iter()
        .map(|s| (s, Bed::new(s)))
        .collect();
    if !run.full_size {
        quick_pass(&mut beds);
    }
    bench(&mut criterion, &mut beds);
    criterion.final_summary();
    if run.summary {
        summary(&mut beds);
    }
}
