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
//!
//! **Hostile modes** (`idle`, `ping-only`, `move-flood`, `slow-reader`, `churn`, `trickle`,
//! `crowd`) are not measurements but attacks, for proving the shard's admission and flood
//! limits: they count what the server did to them (refused, closed, after how long), and
//! connect again when it closes them (`--no-reconnect`: not). `attack` runs them.
//!
//! **Loopback only.** Every run, whatever the mode, talks to an address in 127.0.0.0/8 or to
//! `::1`, from such an address (`--sources`, `--source-range`: one machine posing as many
//! hosts); anything else is refused before a socket exists (`loopback`).
//!
//! **Where things are.** This file is the coordinator: the flags, the run, the window and the
//! lag probe. A client's loop is in `client`, its socket in `conn`, opened by `dial`; what
//! they saw is added up in `outcome` and printed by `report`; `histogram` holds the RTTs and
//! lags.

mod attack;
mod client;
mod conn;
mod dial;
mod histogram;
mod loopback;
mod outcome;
mod report;

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use shardloop::host::fd_limit::{self, FdLimitError};
use shardloop::host::process_cpu_time;
use shardloop::net::frame;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, MissedTickBehavior};

use client::{Ready, run_client};
use histogram::Histogram;
pub use loopback::SourceRange;
use loopback::Sources;
use outcome::Outcome;
pub use report::{LoadReport, Report};

/// File descriptors kept free beyond one per connection (stdio, epoll, runtime, libraries).
const FD_HEADROOM: u64 = 64;

/// What each client does in a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Ping, wait for the echo, repeat: the server's bare per-packet cost.
    Ping,
    /// Log in, then move every 250 ms (and now and then say something): game traffic.
    Walk,
    /// Hostile: connect, never log in, never send a byte; hold the slot.
    Idle,
    /// Hostile: connect, never log in, ping every --interval (30s): pings are not a login.
    PingOnly,
    /// Hostile: log in, then send moves as fast as the socket takes them; answers are dropped.
    MoveFlood,
    /// Hostile: a 4 KiB receive buffer, log in, ping every --interval (1ms), never read.
    SlowReader,
    /// Hostile: connect and hang up in a loop (with --churn-ping, one ping first).
    Churn,
    /// Hostile: connect, never log in, and every --interval (10ms) send one ping one byte
    /// per segment (one write per byte, TCP_NODELAY), reading the echoes.
    Trickle,
    /// Hostile: log in on one spot (names chosen so every bot starts within one 16-tile
    /// square), then every --interval (2s) spend the whole move burst (--burst moves, east
    /// and back west, so the crowd stays put) and say --say lines, reading and dropping what
    /// the server sends.
    Crowd,
}

impl Mode {
    /// Whether this mode attacks the server rather than measuring it.
    #[must_use]
    pub fn is_hostile(self) -> bool {
        !matches!(self, Mode::Ping | Mode::Walk)
    }

    /// The time between pings when `--interval` is not given.
    fn default_interval(self) -> Duration {
        match self {
            // Fast enough to pile up the server's echoes in seconds (with a small
            // `network.send_buffer_size`), slow enough not to be a flood of its own.
            Mode::SlowReader => Duration::from_millis(1),
            Mode::Trickle => Duration::from_millis(10),
            // The demo's move burst (20) refills in 2 s at its rate (10 a second).
            Mode::Crowd => Duration::from_secs(2),
            _ => Duration::from_secs(30),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Ping => "ping",
            Mode::Walk => "walk",
            Mode::Idle => "idle",
            Mode::PingOnly => "ping-only",
            Mode::MoveFlood => "move-flood",
            Mode::SlowReader => "slow-reader",
            Mode::Churn => "churn",
            Mode::Trickle => "trickle",
            Mode::Crowd => "crowd",
        })
    }
}

/// `shardloop loadgen`'s command line.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadgenArgs {
    /// Address of the server to load: the shard, or `examples/tokio_echo.rs`. Loopback only
    /// (127.0.0.0/8 or ::1).
    #[arg(long, value_name = "ADDR")]
    pub connect: SocketAddr,

    /// Clients to run, each on its own TCP connection.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,

    /// How long to measure, once every client is set up ("500ms", "10s", "1m"). Hostile
    /// modes: how long to go on once the ramp is over; then every connection is closed.
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

    /// Send from these local addresses, connections taken round robin
    /// ("127.0.0.2,127.0.0.3"). Loopback only.
    #[arg(
        long,
        value_name = "IP,...",
        value_delimiter = ',',
        conflicts_with = "source_range"
    )]
    pub sources: Vec<IpAddr>,

    /// Send from every IPv4 address from FIRST to LAST, connections taken round robin
    /// ("127.0.0.2-127.0.0.9"). Loopback only.
    #[arg(long, value_name = "FIRST-LAST", value_parser = SourceRange::parse)]
    pub source_range: Option<SourceRange>,

    /// Time between pings (ping: at most one per client per this long, default flat out;
    /// ping-only 30s; slow-reader 1ms; trickle 10ms), or between move bursts (crowd: 2s).
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub interval: Option<Duration>,

    /// crowd: moves per burst, each bot (the demo's `move_burst`).
    #[arg(long, value_name = "MOVES", default_value_t = 20,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub burst: u32,

    /// crowd: lines of speech each bot says with each burst (sent after its moves, in the
    /// same write; the demo's `speech_rate` is 5 a second, bursts of 10).
    #[arg(long, value_name = "LINES", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=100))]
    pub say: u32,

    /// walk: log in within the crowd's square (names chosen as `crowd` chooses its bots',
    /// from another series, `walker0`, ...), so the walkers stand among a crowd run beside
    /// them and get its moves and speech.
    #[arg(long)]
    pub in_crowd: bool,

    /// churn: on each connection, send one ping and wait for its echo before hanging up.
    #[arg(long)]
    pub churn_ping: bool,

    /// Hostile modes but churn: when the server closes a connection, stop instead of
    /// connecting again (what loadgen did before it reconnected: older measurements).
    #[arg(long)]
    pub no_reconnect: bool,

    /// Hostile modes: give up on a connect not answered within this long (a SYN the server
    /// drops, e.g. from a banned source, is never answered).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = positive_duration)]
    pub connect_timeout: Duration,
}

impl LoadgenArgs {
    /// The time between pings: `--interval`, or the mode's default.
    #[must_use]
    pub fn interval(&self) -> Duration {
        self.interval
            .unwrap_or_else(|| self.mode.default_interval())
    }
}

/// A humantime duration above zero (a zero period would be a busy loop).
fn positive_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if d.is_zero() => Err("must be above zero".to_owned()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// Why a run could not produce a report.
#[derive(Debug)]
pub enum LoadgenError {
    /// The open-files limit cannot be read (`getrlimit`).
    FileLimit(io::Error),
    /// More connections than the open-files limit allows, even raised to its hard limit.
    TooManyConnections { needed: u64, limit: u64 },
    /// The tokio runtime would not start.
    Runtime(io::Error),
    /// Not one client could be set up: the first client's failure.
    Connect { addr: SocketAddr, reason: String },
    /// An address outside loopback: `loadgen` never sends there.
    NotLoopback { flag: &'static str, addr: IpAddr },
    /// A source address of the other family than the server's.
    SourceFamily { source: IpAddr, connect: SocketAddr },
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
            LoadgenError::NotLoopback { flag, addr } => write!(
                f,
                "{flag}: {addr} is not a loopback address; loadgen only sends to and from {}",
                loopback::ALLOWED
            ),
            LoadgenError::SourceFamily { source, connect } => write!(
                f,
                "--sources/--source-range: {source} cannot reach {connect} (one is IPv4, the \
                 other IPv6)"
            ),
        }
    }
}

impl std::error::Error for LoadgenError {}

impl LoadgenError {
    /// Why `needed` descriptors are not available, in this tool's terms.
    fn from_fd_limit(needed: u64, error: FdLimitError) -> LoadgenError {
        match error {
            FdLimitError::Read(e) => LoadgenError::FileLimit(e),
            // Short even raised as far as it goes, or not raisable: the limit in force.
            FdLimitError::BelowWanted { limit, .. } | FdLimitError::Raise { limit, .. } => {
                LoadgenError::TooManyConnections {
                    needed,
                    limit: limit.soft,
                }
            }
        }
    }
}

/// Runs the load described by `args` on a runtime of its own, and reports what it measured.
/// Blocks for about `ramp + duration`. Refuses addresses outside loopback before anything
/// else; a load mode fails if nothing could be measured at all, a hostile mode reports
/// whatever happened, refusals included.
pub fn run(args: &LoadgenArgs) -> Result<Report, LoadgenError> {
    let sources = Sources::from_flags(&args.sources, args.source_range);
    loopback::check(args.connect, &sources)?;
    let needed = u64::from(args.connections) + FD_HEADROOM;
    fd_limit::raise(needed).map_err(|e| LoadgenError::from_fd_limit(needed, e))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(LoadgenError::Runtime)?;
    if args.mode.is_hostile() {
        let attack = attack::Attack::new(args, sources);
        return Ok(Report::Attack(runtime.block_on(attack.run())));
    }
    runtime.block_on(drive(args, &sources)).map(Report::Load)
}

/// What every client shares.
#[derive(Debug, Clone, Copy)]
struct Plan {
    addr: SocketAddr,
    mode: Mode,
    clients: u32,
    payload: usize,
    ramp: Duration,
    /// ping: at most one ping per this long per client (`--interval`); `None`: flat out.
    interval: Option<Duration>,
    /// walk: log in within the crowd's square (`--in-crowd`).
    in_crowd: bool,
}

/// The measurement window, the same for every client.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

/// Starts the clients, opens the window once all are set up, and adds up what they saw.
async fn drive(args: &LoadgenArgs, sources: &Sources) -> Result<LoadReport, LoadgenError> {
    let plan = Plan {
        addr: args.connect,
        mode: args.mode,
        clients: args.connections,
        payload: usize::from(args.payload),
        ramp: args.ramp,
        interval: args.interval,
        in_crowd: args.in_crowd,
    };
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let (window_tx, window_rx) = watch::channel(None);
    let setup_began = Instant::now();
    let clients: Vec<_> = (0..plan.clients)
        .map(|id| {
            let ready = Ready(Some(ready_tx.clone()));
            let source = sources.nth(u64::from(id));
            tokio::spawn(run_client(id, plan, source, ready, window_rx.clone()))
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

#[cfg(test)]
mod end_to_end;
#[cfg(test)]
mod fake_shard;
