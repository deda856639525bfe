//! `shardloop loadgen`: a load client that measures a server's round-trip time and
//! throughput from the outside, over real TCP connections.
//!
//! **What it measures.** N clients, one TCP connection each, run *closed loops*: a client
//! sends one request, waits for its answer, records the round-trip time (RTT) and only then
//! sends the next. So throughput is what the server (plus the network stack and this tool)
//! sustains at N requests in flight, and every RTT is a real request's wait, never a queue
//! the tool piled up itself.
//!
//! - `ping`: each request is a `0x73` ping carrying the client's sequence number; the answer
//!   is the identical frame echoed back. This is the server's bare per-packet cost.
//! - `walk`: each client logs in as `bot{i}`, then every 250 ms sends a move (random
//!   direction, incrementing sequence) and times it to the `0x82` carrying that sequence;
//!   about one move in twenty also says something. The 250 ms schedules are staggered across
//!   clients so the server sees a steady stream, not a burst every 250 ms. The `0x84` speech
//!   and `0x85` moves the server pushes are read, counted and dropped: a client that stopped
//!   reading would overflow its send buffer on the server and be disconnected.
//!
//! **How.** Connections are opened spread over `--ramp`; the measurement window of
//! `--duration` starts once every client is set up (connected, and logged in for `walk`), so
//! connection setup never counts. RTTs are kept in a small log-linear histogram (µs
//! resolution, ≤ 1.6 % bucket error, a few KiB per client whatever the run length). A client
//! whose connection fails or is closed is counted as an error; the others carry on.
//!
//! **Runtime.** One current-thread tokio runtime drives every client. Measured on the
//! 2-core host against `examples/tokio_echo.rs` (release builds, 5 s runs, alternating):
//! 1000 ping clients made 78–90 k round trips/s with p99 17–21 ms, against 72–79 k/s and
//! p99 28–40 ms for a 2-worker multi-thread runtime; 100 clients made 116–143 k/s with p99
//! 1.2–2.0 ms, against 116–120 k/s and p99 4.4 ms. Either way this process used about one
//! core and the echo server most of the other: the box, not the runtime, is the limit, and a
//! second worker only adds cross-thread wake-ups and work stealing (hence its worse tail).
//! (The library's tokio features have no `rt-multi-thread` anyway.) On a bigger host, if the
//! report says this tool was saturated, run several `loadgen` processes side by side.
//!
//! **What it must never do** is be the bottleneck silently: a measuring tool that is slower
//! than what it measures reports its own limits as the server's. On loopback it shares the
//! CPU with the server, and most of its time is the kernel's (each send also delivers the
//! packet to the server's socket), so it can be. The report therefore shows the tool's own
//! CPU use and its own scheduling delay (how long a client whose answer has arrived waits
//! for the runtime's one thread), and in `walk` mode how often a client fell behind its
//! schedule: a tick that fired late (this tool was too busy) or a move skipped because the
//! previous one was still unanswered (the server was slow). When the tool may have set the
//! figures, the report ends with a warning saying so.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, MissedTickBehavior};

use shardloop::host::fd_limit::{self, FdLimitError};
use shardloop::net::frame::{self, Frame, FrameError, client, server};
use shardloop::status::process_cpu_time;
use shardloop::world::rng::Rng;

/// File descriptors kept free beyond one per connection (stdio, epoll, runtime, libraries).
const FD_HEADROOM: u64 = 64;
/// Largest packet accepted from the server: anything its 16-bit length field can say.
const MAX_PACKET: usize = u16::MAX as usize;
/// How much room each read offers at least.
const READ_CHUNK: usize = 4096;
/// A connect or a login that takes longer than this fails that client.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a walking client moves.
const WALK_PERIOD: Duration = Duration::from_millis(250);
/// A walk tick this late means this tool, not the server, was too busy to keep up.
const LATE_TICK: Duration = Duration::from_millis(25);
/// Share of moves, in percent, followed by a say.
const SAY_PERCENT: u64 = 5;

/// What each client does in a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Ping, wait for the echo, repeat: the server's bare per-packet cost.
    Ping,
    /// Log in, then move every 250 ms (and now and then say something): game traffic.
    Walk,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Ping => "ping",
            Mode::Walk => "walk",
        })
    }
}

/// `shardloop loadgen`'s command line.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadgenArgs {
    /// Address of the server to load: the shard, or `examples/tokio_echo.rs`.
    #[arg(long, value_name = "ADDR")]
    pub connect: SocketAddr,

    /// Clients to run, each on its own TCP connection.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,

    /// How long to measure, once every client is set up ("500ms", "10s", "1m").
    #[arg(long, value_name = "DURATION", default_value = "10s",
          value_parser = humantime::parse_duration)]
    pub duration: Duration,

    /// What each client does.
    #[arg(long, value_enum, default_value_t = Mode::Ping)]
    pub mode: Mode,

    /// Ping payload in bytes (0–64); it starts with the client's sequence number.
    #[arg(long, value_name = "BYTES", default_value_t = 16,
          value_parser = clap::value_parser!(u8).range(0..=frame::MAX_PING_PAYLOAD as i64))]
    pub payload: u8,

    /// Spread connection setup over this long ("0s": all at once).
    #[arg(long, value_name = "DURATION", default_value = "1s",
          value_parser = humantime::parse_duration)]
    pub ramp: Duration,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub mode: Mode,
    /// Clients asked for.
    pub connections: u32,
    /// Clients set up: connected (and, in `walk` mode, logged in).
    pub connected: u32,
    /// From the first connect to the last client set up.
    pub setup: Duration,
    /// The measurement window: round trips are counted only if they start and end in it.
    /// As asked, or shorter if every client failed before its end.
    pub duration: Duration,
    pub round_trips: u64,
    pub round_trips_per_sec: f64,
    pub rtt_p50: Duration,
    pub rtt_p99: Duration,
    pub rtt_max: Duration,
    /// Clients that failed to set up or lost their connection.
    pub errors: u32,
    /// The first failure, as `client N: what happened`.
    pub first_error: Option<String>,
    /// `0x84` speech packets received (setup included).
    pub speech: u64,
    /// `0x85` mobile-moved packets received (setup included).
    pub moved: u64,
    /// Packets received that the mode neither asked for nor expects.
    pub other: u64,
    /// `walk`: ticks that fired more than 25 ms late, this tool being too busy.
    pub late_ticks: u64,
    /// `walk`: moves not sent because the previous one was still unanswered.
    pub skipped_moves: u64,
    /// CPU time this process used during the window, in cores (1.0 = one core all the time).
    /// The runtime has one thread, so near 1.0 this tool is the bottleneck.
    pub cpu: f64,
    /// This tool's own delay, sampled every 10 ms: how long a task that is ready to run
    /// waits for the runtime's one thread. Every RTT includes about this much of the tool.
    pub lag_p99: Duration,
    pub lag_max: Duration,
}

impl Report {
    /// This tool's own CPU use above which its figures are its ceiling, not the server's.
    const SATURATED_CPU: f64 = 0.9;

    /// Whether this tool, not the server, may have set the figures: its thread was busy
    /// all the time, a walk tick fired late, or its own delay is as big as a typical RTT.
    #[must_use]
    pub fn loadgen_saturated(&self) -> bool {
        self.cpu >= Self::SATURATED_CPU
            || self.late_ticks > 0
            || (self.round_trips > 0 && self.lag_p99 >= self.rtt_p50)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "loadgen: {}, {}/{} connections, {:.1} s (setup {})",
            self.mode,
            self.connected,
            self.connections,
            self.duration.as_secs_f64(),
            Micros(self.setup),
        )?;
        writeln!(
            f,
            "  round trips {} ({:.1}/s)",
            self.round_trips, self.round_trips_per_sec
        )?;
        writeln!(
            f,
            "  rtt p50 {}  p99 {}  max {}",
            Micros(self.rtt_p50),
            Micros(self.rtt_p99),
            Micros(self.rtt_max)
        )?;
        if self.mode == Mode::Walk || self.speech + self.moved + self.other > 0 {
            writeln!(
                f,
                "  received 0x84 ×{}  0x85 ×{}  other ×{}",
                self.speech, self.moved, self.other
            )?;
        }
        if self.mode == Mode::Walk {
            writeln!(
                f,
                "  behind schedule: {} late ticks (loadgen busy), {} skipped moves (server slow)",
                self.late_ticks, self.skipped_moves
            )?;
        }
        writeln!(
            f,
            "  loadgen lag p99 {}  max {}  cpu {:.2} cores (1 thread)",
            Micros(self.lag_p99),
            Micros(self.lag_max),
            self.cpu
        )?;
        write!(f, "  errors {}", self.errors)?;
        if let Some(first) = &self.first_error {
            write!(f, " (first: {first})")?;
        }
        if self.loadgen_saturated() {
            write!(
                f,
                "\n  warning: loadgen was saturated: these figures are partly its own limits"
            )?;
        }
        Ok(())
    }
}

/// Why a run could not produce a report.
#[derive(Debug)]
pub enum LoadgenError {
    /// The open-files limit cannot be read, or changed back (`getrlimit`).
    FileLimit(io::Error),
    /// More connections than the open-files limit allows, even raised to its hard limit.
    TooManyConnections { needed: u64, limit: u64 },
    /// The tokio runtime would not start.
    Runtime(io::Error),
    /// Not one client could be set up: the first client's failure.
    Connect { addr: SocketAddr, reason: String },
}

impl fmt::Display for LoadgenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadgenError::FileLimit(e) => write!(f, "cannot read RLIMIT_NOFILE: {e}"),
            LoadgenError::TooManyConnections { needed, limit } => write!(
                f,
                "{needed} file descriptors needed (connections + {FD_HEADROOM}) but \
                 RLIMIT_NOFILE allows {limit}: raise the hard limit (ulimit -Hn, LimitNOFILE=)"
            ),
            LoadgenError::Runtime(e) => write!(f, "cannot start the tokio runtime: {e}"),
            LoadgenError::Connect { addr, reason } => {
                write!(f, "cannot connect to {addr}: {reason}")
            }
        }
    }
}

impl std::error::Error for LoadgenError {}

/// Runs the load described by `args` on a runtime of its own, and reports what it measured.
/// Blocks for about `ramp + duration`. Fails only if nothing could be measured at all.
pub fn run(args: &LoadgenArgs) -> Result<Report, LoadgenError> {
    raise_fd_limit(u64::from(args.connections) + FD_HEADROOM)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LoadgenError::Runtime)?;
    runtime.block_on(drive(args))
}

/// Raises the soft open-files limit so that `needed` descriptors fit, or says how many do.
fn raise_fd_limit(needed: u64) -> Result<(), LoadgenError> {
    match fd_limit::raise(needed) {
        Ok(_) => Ok(()),
        Err(FdLimitError::Read(e)) => Err(LoadgenError::FileLimit(e)),
        // Short even when raised as far as it goes, or not raisable: the limit in force.
        Err(FdLimitError::BelowWanted { limit, .. } | FdLimitError::Raise { limit, .. }) => {
            Err(LoadgenError::TooManyConnections {
                needed,
                limit: limit.soft,
            })
        }
    }
}

/// What every client shares.
#[derive(Debug, Clone, Copy)]
struct Plan {
    addr: SocketAddr,
    mode: Mode,
    clients: u32,
    payload: usize,
    ramp: Duration,
}

/// The measurement window, the same for every client.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

/// Starts the clients, opens the window once all are set up, and adds up what they saw.
async fn drive(args: &LoadgenArgs) -> Result<Report, LoadgenError> {
    let plan = Plan {
        addr: args.connect,
        mode: args.mode,
        clients: args.connections,
        payload: usize::from(args.payload),
        ramp: args.ramp,
    };
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let (window_tx, window_rx) = watch::channel(None);
    let setup_began = Instant::now();
    let clients: Vec<_> = (0..plan.clients)
        .map(|id| {
            let ready = Ready(Some(ready_tx.clone()));
            tokio::spawn(run_client(id, plan, ready, window_rx.clone()))
        })
        .collect();
    drop(ready_tx);
    // Every client reports once, set up or failed (`Ready` reports on drop), so this ends.
    let mut set_up = 0;
    while let Some(ok) = ready_rx.recv().await {
        set_up += u32::from(ok);
    }
    let setup = setup_began.elapsed();
    // With no client to measure, an empty window: the error comes at once, not `duration` on.
    let duration = if set_up == 0 {
        Duration::ZERO
    } else {
        args.duration
    };

    let cpu_before = process_cpu_time();
    let start = Instant::now();
    window_tx.send_replace(Some(Window {
        start,
        end: start + duration,
    }));
    let (stop_lag, stopped) = oneshot::channel();
    let lag = tokio::spawn(probe_lag(stopped));
    let mut total = Outcome::default();
    for (id, client) in (0..).zip(clients) {
        total.merge(id, client.await);
    }
    // Every client is done: at the end of the window, or earlier if they all failed.
    let _ = stop_lag.send(());
    let tool = Tool {
        setup,
        // Shorter than asked only if every client failed before the end.
        duration: start.elapsed().min(duration),
        cpu: process_cpu_time().saturating_sub(cpu_before).as_secs_f64()
            / start.elapsed().as_secs_f64().max(1e-9),
        // The probe only sleeps and yields: it cannot panic, so a JoinError is unreachable.
        lag: lag.await.unwrap_or_default(),
    };
    total.report(plan, &tool)
}

/// How often the lag probe samples.
const LAG_SAMPLE: Duration = Duration::from_millis(10);

/// Samples this tool's own scheduling delay until `stop`: a yield puts the probe at the back
/// of the run queue, behind every client ready at that moment, so the time to its next poll
/// is what a client whose answer just arrived waits before it can take it. (A spawned task,
/// not part of `drive`: the runtime polls its main future out of turn.)
async fn probe_lag(mut stop: oneshot::Receiver<()>) -> Histogram {
    let mut lag = Histogram::default();
    let mut samples = tokio::time::interval(LAG_SAMPLE);
    samples.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return lag,
            _ = samples.tick() => {}
        }
        let yielded = Instant::now();
        tokio::task::yield_now().await;
        lag.record(yielded.elapsed());
    }
}

/// What the run measured of this tool itself.
struct Tool {
    setup: Duration,
    duration: Duration,
    cpu: f64,
    lag: Histogram,
}

/// Tells the coordinator whether a client is set up, exactly once, even if it failed.
struct Ready(Option<mpsc::UnboundedSender<bool>>);

impl Ready {
    fn signal(&mut self, set_up: bool) {
        if let Some(tx) = self.0.take() {
            // The coordinator outlives every client, so this cannot fail while it matters.
            let _ = tx.send(set_up);
        }
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        self.signal(false);
    }
}

/// Why one client stopped early.
#[derive(Debug)]
enum ClientError {
    Io(io::Error),
    Closed,
    Timeout(&'static str),
    Frame(FrameError),
    BadEcho,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "{e}"),
            ClientError::Closed => f.write_str("connection closed by the server"),
            ClientError::Timeout(what) => write!(f, "{what} took over {SETUP_TIMEOUT:?}"),
            ClientError::Frame(e) => write!(f, "bad packet from the server: {e}"),
            ClientError::BadEcho => f.write_str("ping echo differs from the ping sent"),
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

/// What one client saw, and what all of them saw once merged.
#[derive(Debug, Default)]
struct Outcome {
    rtt: Histogram,
    speech: u64,
    moved: u64,
    other: u64,
    late_ticks: u64,
    skipped_moves: u64,
    connected: u32,
    errors: u32,
    first_error: Option<(u32, String)>,
}

impl Outcome {
    /// Counts a packet the client did not wait for.
    fn unasked(&mut self, id: u8) {
        match id {
            server::SPEECH => self.speech += 1,
            server::MOBILE_MOVED => self.moved += 1,
            _ => self.other += 1,
        }
    }

    fn fail(&mut self, id: u32, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert((id, error));
    }

    /// Adds client `id`'s outcome (a panicked client counts as an error).
    fn merge(&mut self, id: u32, client: Result<Outcome, tokio::task::JoinError>) {
        let client = client.unwrap_or_else(|e| {
            let mut failed = Outcome::default();
            failed.fail(id, format!("client task failed: {e}"));
            failed
        });
        self.rtt.merge(&client.rtt);
        self.speech += client.speech;
        self.moved += client.moved;
        self.other += client.other;
        self.late_ticks += client.late_ticks;
        self.skipped_moves += client.skipped_moves;
        self.connected += client.connected;
        self.errors += client.errors;
        if self.first_error.is_none() {
            self.first_error = client.first_error;
        }
    }

    fn report(self, plan: Plan, tool: &Tool) -> Result<Report, LoadgenError> {
        if self.connected == 0 {
            let reason = self.first_error.map_or_else(String::new, |(_, e)| e);
            return Err(LoadgenError::Connect {
                addr: plan.addr,
                reason,
            });
        }
        let round_trips = self.rtt.count();
        Ok(Report {
            mode: plan.mode,
            connections: plan.clients,
            connected: self.connected,
            setup: tool.setup,
            duration: tool.duration,
            round_trips,
            round_trips_per_sec: round_trips as f64 / tool.duration.as_secs_f64().max(1e-9),
            rtt_p50: self.rtt.percentile(0.50),
            rtt_p99: self.rtt.percentile(0.99),
            rtt_max: self.rtt.max(),
            errors: self.errors,
            first_error: self.first_error.map(|(id, e)| format!("client {id}: {e}")),
            speech: self.speech,
            moved: self.moved,
            other: self.other,
            late_ticks: self.late_ticks,
            skipped_moves: self.skipped_moves,
            cpu: tool.cpu,
            lag_p99: tool.lag.percentile(0.99),
            lag_max: tool.lag.max(),
        })
    }
}

/// One client from connect to the end of the window; failures become part of its outcome.
async fn run_client(
    id: u32,
    plan: Plan,
    mut ready: Ready,
    window: watch::Receiver<Option<Window>>,
) -> Outcome {
    let mut outcome = Outcome::default();
    if let Err(e) = client(id, plan, &mut ready, window, &mut outcome).await {
        outcome.fail(id, e.to_string());
    }
    outcome
}

async fn client(
    id: u32,
    plan: Plan,
    ready: &mut Ready,
    window: watch::Receiver<Option<Window>>,
    seen: &mut Outcome,
) -> Result<(), ClientError> {
    let delay = plan.ramp.mul_f64(f64::from(id) / f64::from(plan.clients));
    tokio::time::sleep(delay).await;
    let mut conn = Conn::connect(plan.addr).await?;
    if plan.mode == Mode::Walk {
        conn.login(id, seen).await?;
    }
    seen.connected = 1;
    ready.signal(true);
    let window = conn.wait_for_start(window, seen).await?;
    match plan.mode {
        Mode::Ping => ping(&mut conn, id, plan.payload, window, seen).await,
        Mode::Walk => walk(&mut conn, id, plan.clients, window, seen).await,
    }
}

/// Ping mode: one ping in flight at a time until the window ends.
async fn ping(
    conn: &mut Conn,
    id: u32,
    payload_len: usize,
    window: Window,
    seen: &mut Outcome,
) -> Result<(), ClientError> {
    // The payload is the sequence number (as many low bytes as fit), then the client's id:
    // a stale or misrouted echo cannot pass for the one awaited.
    let mut payload = [0; frame::MAX_PING_PAYLOAD];
    payload.fill(id as u8);
    let payload = &mut payload[..payload_len];
    let mut ping = Vec::with_capacity(frame::HEADER_LEN + payload_len);
    for seq in 0_u64.. {
        let stamp = payload.len().min(8);
        payload[..stamp].copy_from_slice(&seq.to_be_bytes()[8 - stamp..]);
        ping.clear();
        frame::put(&mut ping, client::PING, &[payload]);
        let sent = Instant::now();
        if sent >= window.end {
            break;
        }
        conn.send(&ping).await?;
        let echo = tokio::time::timeout_at(window.end, conn.echo_of(&ping, seen)).await;
        let Ok(echo) = echo else { break };
        echo?;
        seen.rtt.record_until(sent, window.end);
    }
    Ok(())
}

/// Walk mode: a move every 250 ms, staggered across clients, timed to its `0x82`.
async fn walk(
    conn: &mut Conn,
    id: u32,
    clients: u32,
    window: Window,
    seen: &mut Outcome,
) -> Result<(), ClientError> {
    let offset = WALK_PERIOD.mul_f64(f64::from(id) / f64::from(clients));
    let mut ticks = tokio::time::interval_at(window.start + offset, WALK_PERIOD);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut walker = Walker::new(id);
    let end = tokio::time::sleep_until(window.end);
    tokio::pin!(end);
    loop {
        tokio::select! {
            biased;
            () = &mut end => break,
            due = ticks.tick() => {
                if let Some(packets) = walker.tick(due, seen) {
                    conn.send(packets).await?;
                }
            }
            read = conn.fill() => {
                read?;
                while let Some(packet) = conn.pop()? {
                    walker.answer(packet, window.end, seen);
                }
            }
        }
    }
    // Polite, not required: the server drops the player when the connection closes anyway.
    let _ = conn.send(&frame::packet(client::LOGOUT, &[])).await;
    Ok(())
}

/// One walking client's schedule and its move in flight.
struct Walker {
    rng: Rng,
    seq: u8,
    /// The move awaiting its `0x82`: its sequence number and when it was sent.
    in_flight: Option<(u8, Instant)>,
    speech: Vec<u8>,
    out: Vec<u8>,
}

impl Walker {
    fn new(id: u32) -> Walker {
        Walker {
            rng: Rng::derive(0x10AD_6E11, u64::from(id)),
            seq: 0,
            in_flight: None,
            speech: format!("hail from bot{id}").into_bytes(),
            out: Vec::new(),
        }
    }

    /// The packets to send at the tick due at `due`, or `None` to skip it.
    fn tick(&mut self, due: Instant, seen: &mut Outcome) -> Option<&[u8]> {
        let now = Instant::now();
        if now.duration_since(due) > LATE_TICK {
            seen.late_ticks += 1;
        }
        if self.in_flight.is_some() {
            // Closed loop: never a second move in flight, the server is behind.
            seen.skipped_moves += 1;
            return None;
        }
        self.seq = self.seq.wrapping_add(1);
        let direction = self.rng.below(8) as u8;
        self.out.clear();
        frame::put(&mut self.out, client::MOVE, &[&[direction, self.seq]]);
        if self.rng.percent(SAY_PERCENT) {
            frame::put(&mut self.out, client::SAY, &[&self.speech]);
        }
        self.in_flight = Some((self.seq, now));
        Some(&self.out)
    }

    /// Handles a packet from the server: the awaited `0x82`, or one to count and drop.
    fn answer(&mut self, packet: Frame<'_>, end: Instant, seen: &mut Outcome) {
        match (packet.id, self.in_flight) {
            (server::MOVE_OK, Some((seq, sent))) if packet.payload().first() == Some(&seq) => {
                self.in_flight = None;
                seen.rtt.record_until(sent, end);
            }
            (server::MOVE_OK, _) => {}
            (id, _) => seen.unasked(id),
        }
    }
}

/// A client's connection and its receive buffer.
struct Conn {
    stream: TcpStream,
    /// Allocated (and zeroed) once; grows only for a packet bigger than itself. Reads go
    /// straight into its unused tail: the `io-util` copy helpers are not compiled in.
    buf: Vec<u8>,
    /// Where the next unread packet starts in `buf`.
    head: usize,
    /// Where the bytes read end in `buf`.
    tail: usize,
}

impl Conn {
    async fn connect(addr: SocketAddr) -> Result<Conn, ClientError> {
        let stream = tokio::time::timeout(SETUP_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| ClientError::Timeout("connecting"))??;
        // Requests are small and each waits for its answer: never hold one back.
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: vec![0; READ_CHUNK],
            head: 0,
            tail: 0,
        })
    }

    /// Logs in as `bot{id}` and waits for the server's `0x81`.
    async fn login(&mut self, id: u32, seen: &mut Outcome) -> Result<(), ClientError> {
        let name = format!("bot{id}");
        self.send(&frame::packet(client::LOGIN, &[name.as_bytes()]))
            .await?;
        let accepted = async {
            loop {
                while let Some(packet) = self.pop()? {
                    if packet.id == server::LOGIN_OK {
                        return Ok(());
                    }
                    seen.unasked(packet.id);
                }
                self.fill().await?;
            }
        };
        tokio::time::timeout(SETUP_TIMEOUT, accepted)
            .await
            .map_err(|_| ClientError::Timeout("logging in"))?
    }

    /// Waits for the window to open, reading and dropping whatever the server sends.
    async fn wait_for_start(
        &mut self,
        mut window: watch::Receiver<Option<Window>>,
        seen: &mut Outcome,
    ) -> Result<Window, ClientError> {
        loop {
            tokio::select! {
                opened = window.wait_for(Option::is_some) => {
                    // The coordinator holds the sender until every client has returned.
                    return opened.ok().and_then(|w| *w).ok_or(ClientError::Closed);
                }
                read = self.fill() => {
                    read?;
                    while let Some(packet) = self.pop()? {
                        seen.unasked(packet.id);
                    }
                }
            }
        }
    }

    /// Reads until the echo of `ping` arrives, counting anything else.
    async fn echo_of(&mut self, ping: &[u8], seen: &mut Outcome) -> Result<(), ClientError> {
        loop {
            while let Some(packet) = self.pop()? {
                if packet.id != client::PING {
                    seen.unasked(packet.id);
                } else if packet.bytes == ping {
                    return Ok(());
                } else {
                    return Err(ClientError::BadEcho);
                }
            }
            self.fill().await?;
        }
    }

    /// Writes all of `bytes`. Requests are small: this almost never waits.
    async fn send(&mut self, mut bytes: &[u8]) -> Result<(), ClientError> {
        while !bytes.is_empty() {
            match self.stream.try_write(bytes) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.stream.writable().await?,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Reads once, whatever has arrived. Cancel-safe: nothing is lost if the future is
    /// dropped, so it can race a timer in `select!`.
    async fn fill(&mut self) -> Result<(), ClientError> {
        self.buf.copy_within(self.head..self.tail, 0);
        self.tail -= self.head;
        self.head = 0;
        if self.tail == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        // `poll_read`, not `readable` + `try_read`: after a short read it forgets the
        // readiness itself, which saves a `read` that would only say EWOULDBLOCK: one
        // syscall in three per round trip.
        let mut space = ReadBuf::new(&mut self.buf[self.tail..]);
        std::future::poll_fn(|cx| Pin::new(&mut self.stream).poll_read(cx, &mut space)).await?;
        match space.filled().len() {
            0 => Err(ClientError::Closed),
            n => {
                self.tail += n;
                Ok(())
            }
        }
    }

    /// The next whole packet already read, if any.
    fn pop(&mut self) -> Result<Option<Frame<'_>>, ClientError> {
        let at = self.head;
        let len = match frame::split(&self.buf[at..self.tail], MAX_PACKET) {
            Ok(Some(packet)) => packet.bytes.len(),
            Ok(None) => return Ok(None),
            Err(e) => return Err(ClientError::Frame(e)),
        };
        self.head += len;
        let bytes = &self.buf[at..at + len];
        Ok(Some(Frame {
            id: bytes[0],
            bytes,
        }))
    }
}

/// A log-linear histogram of microsecond values: exact below 128 µs, then 64 buckets per
/// power of two (each bucket ≤ 1/64 of its values wide). It grows only up to the largest
/// value seen: about 8 KiB for values up to a second.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Histogram {
    const SUB_BITS: u32 = 6;
    const SUB: u64 = 1 << Self::SUB_BITS;
    /// Values are clamped here (about 12 days): the top bucket's bound must fit in a u64.
    const CEILING: u64 = 1 << 40;

    /// Records the time since `sent`, unless it is now past `end` (outside the window).
    fn record_until(&mut self, sent: Instant, end: Instant) {
        let now = Instant::now();
        if now <= end {
            self.record(now - sent);
        }
    }

    fn record(&mut self, value: Duration) {
        let micros = u64::try_from(value.as_micros())
            .unwrap_or(u64::MAX)
            .min(Self::CEILING);
        let index = Self::index(micros);
        if self.counts.len() <= index {
            self.counts.resize(index + 1, 0);
        }
        self.counts[index] += 1;
        self.total += 1;
        self.max = self.max.max(micros);
    }

    fn index(micros: u64) -> usize {
        if micros < Self::SUB {
            return micros as usize;
        }
        // In [2^h, 2^(h+1)), keep the top SUB_BITS + 1 bits: shift = h - SUB_BITS.
        let shift = 63 - micros.leading_zeros() - Self::SUB_BITS;
        (u64::from(shift) * Self::SUB + (micros >> shift)) as usize
    }

    /// The largest value that falls in bucket `index`.
    fn highest(index: usize) -> u64 {
        let index = index as u64;
        if index < Self::SUB {
            return index;
        }
        let shift = index / Self::SUB - 1;
        let top_bits = index - shift * Self::SUB;
        ((top_bits + 1) << shift) - 1
    }

    fn count(&self) -> u64 {
        self.total
    }

    fn max(&self) -> Duration {
        Duration::from_micros(self.max)
    }

    /// The value below which a share `q` of the values lie (nearest rank, rounded up to its
    /// bucket's top, never above the maximum). Zero when empty.
    fn percentile(&self, q: f64) -> Duration {
        let rank = ((q * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Duration::from_micros(Self::highest(index).min(self.max));
            }
        }
        self.max()
    }

    fn merge(&mut self, other: &Histogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }
}

/// A duration shown with the unit that suits it: `80 µs`, `3.1 ms`, `1.25 s`.
struct Micros(Duration);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self.0.as_micros();
        if micros < 1_000 {
            write!(f, "{micros} µs")
        } else if micros < 1_000_000 {
            write!(f, "{:.1} ms", micros as f64 / 1e3)
        } else {
            write!(f, "{:.2} s", micros as f64 / 1e6)
        }
    }
}

#[cfg(test)]
mod end_to_end;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_contiguous_and_tight() {
        for micros in [
            0,
            1,
            63,
            64,
            127,
            128,
            129,
            1_000,
            65_535,
            1 << 30,
            Histogram::CEILING,
        ] {
            let index = Histogram::index(micros);
            assert!(Histogram::highest(index) >= micros, "{micros}");
            let width = Histogram::highest(index) - micros;
            assert!(width <= micros / 64, "{micros}: bucket too wide");
            if index > 0 {
                assert!(Histogram::highest(index - 1) < micros, "{micros}");
            }
        }
    }

    #[test]
    fn percentiles_are_ordered_and_bounded_by_the_max() {
        let mut h = Histogram::default();
        for micros in 1..=1000 {
            h.record(Duration::from_micros(micros));
        }
        let (p50, p99) = (h.percentile(0.5), h.percentile(0.99));
        assert!(p50 <= p99 && p99 <= h.max());
        assert!((500..=508).contains(&p50.as_micros()), "{p50:?}");
        assert!((990..=1000).contains(&p99.as_micros()), "{p99:?}");
        assert_eq!(h.max(), Duration::from_micros(1000));
        assert_eq!(Histogram::default().percentile(0.5), Duration::ZERO);
    }

    #[test]
    fn merged_histograms_count_both() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        a.record(Duration::from_micros(10));
        b.record(Duration::from_millis(10));
        a.merge(&b);
        assert_eq!((a.count(), a.max()), (2, Duration::from_millis(10)));
    }

    #[test]
    fn durations_print_in_a_fitting_unit() {
        let show = |d| Micros(d).to_string();
        assert_eq!(show(Duration::from_micros(80)), "80 µs");
        assert_eq!(show(Duration::from_micros(3_100)), "3.1 ms");
        assert_eq!(show(Duration::from_millis(1_250)), "1.25 s");
    }
}
