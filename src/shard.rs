//! The shard: one configuration, one world, one event loop. This module wires the network
//! server (Network and Flush phases, the demo protocol of `crate::play`), the world's Deltas
//! phase, the demo game logic, the operator console and the `loop:` status line onto the
//! loop, runs it until something asks it to stop, and then stops in order.
//!
//! Startup, in order: make sure the data directory exists and take its lock (one shard per
//! data directory); bind every `network.listen` address (one that cannot be bound stops the
//! shard before any real work); finish what a crash left in the data directory
//! (`Layout::recover`); restore an archive dropped into `Saves/`; load `Saves/`, or generate
//! the world when there is none (a save that cannot be loaded stops the shard, exit code 2);
//! build the loop from `[server]`; on the loop, start accepting players, the game logic, the
//! saver and the autosave schedule, the archiver (a first rollup), the status line and the
//! console; log "ready".
//!
//! Shutdown: a stop request (a signal, or `shutdown` on the console) ends the wait; the
//! autosave schedule and the game timers stop; a final save is taken while players are still
//! connected (they hear it) and waited for, as is any archive rollup it started; then the
//! listeners and connections close (players leave the world), the status line stops with
//! one last `loop:` line, and [`run`] returns what it did, the final save's outcome included.
//!
//! The shard never blocks the loop thread: console reads and writes have their own threads,
//! and where the stop request comes from is the caller's business (`main` passes SIGINT and
//! SIGTERM, a test passes a channel).

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::io::{self, BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::admin::{self, Command};
use crate::config::{Config, GenerateConfig};
use crate::net::{self, BackendKind, Limits, Net};
use crate::persist::archive::{self, Archiver, Plan};
use crate::persist::{self, Autosave, Cadence, Clock, Notice, Request, Saver, SaverConfig};
use crate::play::{self, Players};
use crate::runtime::{self, LoopStats};
use crate::status::{StatusLine, StatusReporter};
use crate::timer::{self, TimerToken};
use crate::world::{self, GameLogic, World};

/// How long shutdown waits for the console's last answers to be written.
const CONSOLE_FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

/// Where console commands come from and answers go. `main` uses [`Console::stdio`]; tests
/// pass in-memory readers and writers; [`Console::none`] runs headless.
pub struct Console {
    io: Option<(Box<dyn BufRead + Send>, Box<dyn Write + Send>)>,
}

impl Console {
    /// Commands on stdin, answers on stdout. A closed stdin (`</dev/null`) is fine.
    pub fn stdio() -> Console {
        Console::new(io::BufReader::new(io::stdin()), io::stdout())
    }

    pub fn new(
        input: impl BufRead + Send + 'static,
        output: impl Write + Send + 'static,
    ) -> Console {
        Console {
            io: Some((Box::new(input), Box::new(output))),
        }
    }

    /// No console at all.
    pub fn none() -> Console {
        Console { io: None }
    }
}

/// Why the shard stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The caller's stop future completed (SIGINT/SIGTERM in the binary).
    Requested,
    /// `shutdown` on the console.
    Console,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopReason::Requested => "stop requested (signal)",
            StopReason::Console => "shutdown from the console",
        })
    }
}

/// What a clean stop reports.
#[derive(Debug, Clone)]
pub struct Stopped {
    pub reason: StopReason,
    /// The loop's counters at the end.
    pub stats: LoopStats,
    /// From [`run`] being called to "ready".
    pub startup: Duration,
    /// From "ready" to the end of the shutdown hooks, on tokio's clock (so a test with a
    /// paused clock sees game time).
    pub uptime: Duration,
    /// The save taken at shutdown: its report, or why it failed (the previous save is then
    /// the one on disk).
    pub final_save: Result<persist::Report, persist::PersistError>,
}

/// Why the shard could not start.
#[derive(Debug)]
pub enum ShardError {
    /// The data directory could not be created.
    DataDir { path: PathBuf, source: io::Error },
    /// The console's threads could not be started.
    Console(io::Error),
    /// A `network.listen` address could not be bound (the error names it).
    Listen(io::Error),
    /// Another process holds the data directory (the error says which).
    Locked(io::Error),
    /// What a crash left in the data directory could not be cleaned up.
    Recover { path: PathBuf, source: io::Error },
    /// The save in `Saves/` cannot be loaded (the error names the file and the reason).
    Load(persist::LoadError),
    /// An archive dropped into `Saves/` cannot be restored (names it and the reason).
    Restore(archive::restore::RestoreError),
}

impl ShardError {
    /// The process exit code for this error: 2 for a save that cannot be loaded (bad input:
    /// nothing started, nothing changed), 1 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            ShardError::Load(_) | ShardError::Restore(_) => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for ShardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardError::DataDir { path, source } => write!(
                f,
                "cannot create the data directory {} (server.data_dir, --data-dir): {source}",
                path.display()
            ),
            ShardError::Console(e) => write!(f, "cannot start the console: {e}"),
            ShardError::Listen(e) => write!(f, "{e} (network.listen, --listen)"),
            ShardError::Locked(e) => write!(f, "{e}"),
            ShardError::Recover { path, source } => write!(
                f,
                "cannot clean up after an interrupted save in {}: {source}",
                path.display()
            ),
            ShardError::Load(e) => write!(f, "{e}"),
            ShardError::Restore(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ShardError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ShardError::DataDir { source, .. }
            | ShardError::Console(source)
            | ShardError::Recover { source, .. }
            | ShardError::Locked(source)
            | ShardError::Listen(source) => Some(source),
            ShardError::Load(e) => Some(e),
            ShardError::Restore(e) => Some(e),
        }
    }
}

/// Runs the shard until `stop` completes or the console says `shutdown`, with the epoll
/// network backend. Call it on a current-thread tokio runtime; it returns after the shutdown
/// hooks have run.
pub async fn run(
    config: &Config,
    console: Console,
    stop: impl Future<Output = ()>,
) -> Result<Stopped, ShardError> {
    run_with(config, BackendKind::Epoll, console, stop).await
}

/// [`run`] with the network backend `backend`; run it on the runtime that backend needs
/// ([`BackendKind::block_on`]).
pub async fn run_with(
    config: &Config,
    backend: BackendKind,
    console: Console,
    stop: impl Future<Output = ()>,
) -> Result<Stopped, ShardError> {
    let started = Instant::now();
    let data_dir = &config.server.data_dir;
    std::fs::create_dir_all(data_dir).map_err(|source| ShardError::DataDir {
        path: data_dir.clone(),
        source,
    })?;
    // Held until this function returns: no second shard or restore on this data directory.
    let _lock = persist::lock::DataLock::acquire(data_dir).map_err(ShardError::Locked)?;
    let network = &config.network;
    let listeners = net::bind_all(&network.listen, network.send_buffer_size as usize)
        .map_err(ShardError::Listen)?;
    let layout = persist::Layout::new(data_dir, config.save_path());
    for line in layout.recover().map_err(|source| ShardError::Recover {
        path: layout.root().to_owned(),
        source,
    })? {
        tracing::warn!("after an interrupted save: {line}");
    }
    let archives_dir = config.data_path(&config.archive.dir);
    let limits = config.archive.restore_limits();
    if let Some(restored) = archive::restore::restore_dropped(&layout, &archives_dir, limits)
        .map_err(ShardError::Restore)?
    {
        tracing::info!("restored the archive dropped into Saves/: {restored}");
    }
    let world = match layout.saves.exists() {
        true => load_world(&layout)?,
        false => generate_world(&config.world.generate),
    };
    let world = Rc::new(RefCell::new(world));
    let net = Net::new(Limits::from_config(&config.network));
    let players = play::install(&net, world.clone());
    let builder = config.server.loop_builder();
    let mut event_loop = play::wire(builder, &net, world.clone(), players.clone()).build();
    let game = Game {
        world,
        net,
        players,
        backend,
        listeners,
        layout,
    };
    let serving = event_loop
        .run_until(serve(config, game, console, stop, started))
        .await?;
    // Nothing more runs on this loop: refuse posts instead of queueing them forever.
    event_loop.context().shutdown();
    let stats = event_loop.stats();
    tracing::info!(
        reason = %serving.reason,
        uptime = %humantime::format_duration(whole_seconds(serving.uptime)),
        iterations = stats.iterations,
        fired_ticks = stats.ticks_fired,
        late_ticks = stats.late_ticks,
        panics = stats.panics,
        "shard stopped cleanly"
    );
    Ok(Stopped {
        reason: serving.reason,
        stats,
        startup: serving.startup,
        uptime: serving.uptime,
        final_save: serving.final_save,
    })
}

fn load_world(layout: &persist::Layout) -> Result<World, ShardError> {
    let loaded = persist::load(&layout.saves).map_err(ShardError::Load)?;
    let m = &loaded.manifest;
    tracing::info!(
        dir = %layout.saves.display(),
        created = %m.created,
        items = m.items,
        mobiles = m.mobiles,
        spawners = m.spawners,
        bytes = m.data_bytes(),
        took = ?loaded.took,
        "loaded the world save"
    );
    Ok(loaded.world)
}

fn generate_world(plan: &GenerateConfig) -> World {
    let began = Instant::now();
    let world = world::generate(plan.seed, plan.items, plan.mobiles);
    let load = world::idle_load(&world);
    tracing::info!(
        items = world.item_count(),
        mobiles = world.mobile_count(),
        spawners = world.spawner_count(),
        seed = plan.seed,
        took = ?began.elapsed(),
        "no save to load: generated the world; idle timer load {:.1} fires/s from spawners, \
         up to {:.1} fires/s while the first hour's items decay",
        load.spawner_fires_per_sec,
        load.peak_fires_per_sec(),
    );
    world
}

struct Serving {
    reason: StopReason,
    startup: Duration,
    uptime: Duration,
    final_save: Result<persist::Report, persist::PersistError>,
}

/// The world and the network, as the shard wires them.
struct Game {
    world: Rc<RefCell<World>>,
    net: Net,
    players: Rc<RefCell<Players>>,
    backend: BackendKind,
    /// Bound before the world was built; accepting starts on the loop.
    listeners: Vec<std::net::TcpListener>,
    layout: persist::Layout,
}

/// Everything that lives on the loop thread, from "start the game" to the shutdown hooks.
async fn serve(
    config: &Config,
    game: Game,
    console: Console,
    stop: impl Future<Output = ()>,
    started: Instant,
) -> Result<Serving, ShardError> {
    let Game {
        world,
        net,
        players,
        backend,
        listeners,
        layout,
    } = game;
    let listening = net
        .start(&*backend.backend(), listeners)
        .map_err(ShardError::Listen)?;
    if listening.is_empty() {
        tracing::warn!("no network.listen address: players cannot connect");
    }
    for addr in &listening {
        tracing::info!(%addr, backend = %backend.name(), "listening for players");
    }
    let logic = Rc::new(world::start_game_logic(world.clone()));
    // One wall clock for autosave, saves and archives.
    let clock = config.time.clock();
    let archiver = config.archive.enabled.then(|| {
        let dir = config.data_path(&config.archive.dir);
        let plan: Plan = config
            .archive
            .plan(dir, config.time.zone.time_zone().clone());
        let archiver = Archiver::new(layout.clone(), plan, clock);
        // Whatever earlier runs (or a crash) left to do, before the first save.
        archiver.request();
        archiver
    });
    let (saver, autosave) = start_saving(
        config,
        clock,
        layout,
        &world,
        &net,
        &players,
        archiver.clone(),
    );
    let status = Rc::new(StatusState::new(config));
    let status_timer = config
        .server
        .loop_stats_interval()
        .map(|every| start_status_line(every, &status));
    let console_shutdown = Rc::new(Notify::new());
    let mut printer = None;
    if let Some((input, output)) = console.io {
        let shared = ConsoleState {
            world,
            net: net.clone(),
            players,
            logic: logic.clone(),
            status: status.clone(),
            shutdown: console_shutdown.clone(),
            saver: saver.clone(),
            autosave: autosave.clone(),
            archiver: archiver.clone(),
            data_dir: config.server.data_dir.clone(),
            listening: listening.clone(),
            backend: backend.name(),
        };
        printer = Some(
            admin::start(input, output, move |command| shared.answer(command))
                .map_err(ShardError::Console)?,
        );
    }
    let startup = started.elapsed();
    tracing::info!(
        took = ?startup,
        verdict = %runtime::stats().verdict,
        live_timers = timer::live(),
        "shard ready; type `help` for console commands, Ctrl-C to stop"
    );
    let ready = tokio::time::Instant::now();

    let reason = tokio::select! {
        biased;
        () = stop => StopReason::Requested,
        () = console_shutdown.notified() => StopReason::Console,
    };
    tracing::info!(%reason, "stopping: running shutdown hooks");
    autosave.stop();
    logic.stop();
    // Players are still connected: they hear that the world saves before they are let go.
    tracing::info!("taking the final world save (Ctrl-C again to exit without it)");
    let final_save = saver.save().await;
    if let Some(archiver) = &archiver {
        if archiver.is_running() {
            tracing::info!("waiting for the archive rollup to finish");
        }
        archiver.idle().await;
    }
    net.stop();
    if let Some(token) = status_timer {
        token.cancel();
        status.emit();
    }
    if let Some(printer) = printer {
        // The answer to `shutdown` should reach the operator before the process exits.
        printer.flush(CONSOLE_FLUSH_TIMEOUT);
    }
    Ok(Serving {
        reason,
        startup,
        uptime: ready.elapsed(),
        final_save,
    })
}

/// The saver (players left out of saves, notices to players and the log) and the autosave
/// schedule, with the cadence `savefrequency` stored if there is one.
fn start_saving(
    config: &Config,
    clock: Clock,
    layout: persist::Layout,
    world: &Rc<RefCell<World>>,
    net: &Net,
    players: &Rc<RefCell<Players>>,
    archiver: Option<Archiver>,
) -> (Saver, Autosave) {
    let tell = {
        let (net, players) = (net.clone(), players.clone());
        Rc::new(move |notice: &Notice| {
            log_notice(notice);
            play::broadcast(&net, &players.borrow(), &notice.to_string());
            // A new backup may complete a period: roll it up (off the loop).
            if let (Notice::Saved(_), Some(archiver)) = (notice, &archiver) {
                archiver.request();
            }
        })
    };
    let in_world = players.clone();
    let saver_tell = tell.clone();
    let saver = Saver::new(
        world.clone(),
        SaverConfig {
            layout,
            threads: config.save_threads(),
            clock,
            keep: Box::new(move |m| !in_world.borrow().is_player(m.serial)),
            notices: Box::new(move |n| saver_tell(n)),
        },
    );
    let configured = &config.autosave;
    let mut cadence = Cadence {
        every: configured.frequency,
        warning: configured.warning,
    };
    match persist::autosave::read_override(&config.server.data_dir) {
        Ok(None) => {}
        Ok(Some(stored)) => {
            tracing::info!(
                every = %humantime::format_duration(stored.every),
                warning = %humantime::format_duration(stored.warning),
                "autosave cadence from {} (set with `savefrequency`; delete the file to use \
                 [autosave] of the configuration)",
                persist::autosave::OVERRIDE_FILE
            );
            cadence = stored;
        }
        Err(e) => {
            tracing::warn!("ignoring the stored autosave cadence: {e}; using the configuration's")
        }
    }
    let autosave = Autosave::start(
        saver.clone(),
        clock,
        config.time.zone.time_zone().clone(),
        configured.enabled,
        cadence,
        Box::new(move |n| tell(n)),
    );
    (saver, autosave)
}

fn log_notice(notice: &Notice) {
    match notice {
        Notice::Warning(left) => {
            tracing::info!(in_ = %humantime::format_duration(*left), "world save warning sent")
        }
        Notice::Saving => tracing::info!("world save started"),
        Notice::Saved(r) => {
            tracing::info!(
                items = r.items,
                mobiles = r.mobiles,
                bytes = r.bytes,
                loop_stall = ?r.stall,
                took = ?r.took,
                backup = %r.replaced.backup().map_or("none".into(), |p| p.display().to_string()),
                "world saved"
            );
            if let persist::Replaced::LeftAt { path, error } = &r.replaced {
                tracing::warn!(
                    "the save it replaced is intact at {} but not in Backups/ yet ({error}); \
                     the next start moves it",
                    path.display()
                );
            }
        }
        Notice::Failed(e) => tracing::error!("{e}; the next save tries again"),
    }
}

/// The status line's reporter and its last line (which `status` on the console shows).
struct StatusState {
    reporter: RefCell<StatusReporter>,
    last: RefCell<Option<StatusLine>>,
    interval: Option<Duration>,
    started: tokio::time::Instant,
}

impl StatusState {
    fn new(config: &Config) -> StatusState {
        StatusState {
            reporter: RefCell::new(StatusReporter::new(
                config.server.idle_wait,
                runtime::stats(),
            )),
            last: RefCell::new(None),
            interval: config.server.loop_stats_interval(),
            started: tokio::time::Instant::now(),
        }
    }

    /// Samples the interval that ends now and logs its `loop:` line.
    fn emit(&self) {
        let line = self
            .reporter
            .borrow_mut()
            .sample(runtime::stats(), &runtime::take_lag_window());
        tracing::info!("{line}");
        *self.last.borrow_mut() = Some(line);
    }
}

fn start_status_line(every: Duration, status: &Rc<StatusState>) -> TimerToken {
    let status = status.clone();
    timer::every(every).start(move || status.emit())
}

/// What the console's commands can see. Lives on the loop thread.
struct ConsoleState {
    world: Rc<RefCell<World>>,
    net: Net,
    players: Rc<RefCell<Players>>,
    logic: Rc<GameLogic>,
    status: Rc<StatusState>,
    shutdown: Rc<Notify>,
    saver: Saver,
    autosave: Autosave,
    archiver: Option<Archiver>,
    data_dir: PathBuf,
    /// The addresses the listeners are bound to (a configured port 0 resolved), and the
    /// backend serving them.
    listening: Vec<SocketAddr>,
    backend: &'static str,
}

impl ConsoleState {
    fn answer(&self, command: Command) -> String {
        match command {
            Command::Help => Command::help(),
            Command::Status => self.status_report(),
            Command::DumpTimers => timer::dump().to_string(),
            Command::LoopStats => runtime::stats().to_string(),
            Command::Save => match self.saver.request() {
                Request::Started => "saving the world now; the log says when it is on disk".into(),
                Request::Queued => {
                    "a save is writing; one more will start as soon as it ends".into()
                }
            },
            Command::SaveFrequency { every, warning } => self.set_frequency(every, warning),
            Command::Archive => self.with_archiver(|a| match a.request() {
                Request::Started => "archive rollup started; the log says what it wrote".into(),
                Request::Queued => "a rollup is running; one more will follow it".into(),
            }),
            Command::ArchiveStatus => self.with_archiver(|a| {
                archive::archiver::status(a, self.autosave.next(), jiff::Timestamp::now())
            }),
            Command::PruneArchives => self.with_archiver(|a| match a.prune() {
                Request::Started => "pruning archives; the log says what it deleted".into(),
                Request::Queued => {
                    "a rollup is running; it prunes too, and one more follows".into()
                }
            }),
            Command::Autosave(None) => self.autosave_report(),
            Command::Autosave(Some(on)) => {
                self.autosave.set_enabled(on);
                format!(
                    "autosave {} until restart (autosave.enabled decides at start)\n{}",
                    if on { "on" } else { "off" },
                    self.autosave_report()
                )
            }
            Command::Shutdown => {
                self.shutdown.notify_one();
                "shutting down: finishing the current iteration, then the shutdown hooks".into()
            }
        }
    }

    fn with_archiver(&self, f: impl FnOnce(&Archiver) -> String) -> String {
        match &self.archiver {
            Some(archiver) => f(archiver),
            None => "archives are off (archive.enabled = false)".into(),
        }
    }

    fn set_frequency(&self, every: Duration, warning: Option<Duration>) -> String {
        let warning = warning.unwrap_or(self.autosave.cadence().warning);
        let cadence = match Cadence::new(every, warning) {
            Ok(c) => c,
            Err(e) => return format!("error: savefrequency: {e}; nothing changed"),
        };
        self.autosave.set_cadence(cadence);
        let stored = match persist::autosave::store_override(&self.data_dir, cadence) {
            Ok(path) => format!("kept across restarts in {}", path.display()),
            Err(e) => format!("NOT kept across restarts (cannot write the override file: {e})"),
        };
        format!("{}; {stored}", self.autosave_report())
    }

    fn autosave_report(&self) -> String {
        let cadence = self.autosave.cadence();
        let warning = match cadence.warning.is_zero() {
            true => "no warning".to_owned(),
            false => format!(
                "players warned {} before",
                humantime::format_duration(cadence.warning)
            ),
        };
        let next = match self.autosave.next() {
            Some(at) => format!("next at {at}"),
            None if !self.autosave.enabled() => "off".to_owned(),
            None => "next not scheduled yet".to_owned(),
        };
        format!(
            "autosave every {} ({warning}), {next}",
            humantime::format_duration(cadence.every)
        )
    }

    fn status_report(&self) -> String {
        let stats = runtime::stats();
        let world = self.world.borrow();
        let last = match (&*self.status.last.borrow(), self.status.interval) {
            (Some(line), _) => line.to_string(),
            (None, Some(every)) => format!(
                "no loop: line yet (one every {})",
                humantime::format_duration(every)
            ),
            (None, None) => "loop: lines are off (server.loop_stats_interval = 0)".into(),
        };
        let net = self.net.stats();
        let listening = match self.listening.as_slice() {
            [] => "nothing (network.listen is empty)".to_owned(),
            addrs => {
                let addrs: Vec<String> = addrs.iter().map(ToString::to_string).collect();
                format!("{} ({})", addrs.join(", "), self.backend)
            }
        };
        format!(
            "verdict   {}\nuptime    {}\nworld     {} items, {} mobiles, {} spawners\n\
             listening {listening}\n\
             players   {} logged in, {} connections ({} accepted, {} refused, {} faults)\n\
             timers    {} live ({} world timers, {} NPCs barking)\n\
             saves     {} since start{}; {}\nlast      {last}",
            stats.verdict,
            humantime::format_duration(whole_seconds(self.status.started.elapsed())),
            world.item_count(),
            world.mobile_count(),
            world.spawner_count(),
            self.players.borrow().len(),
            net.connections,
            net.accepted,
            net.refused,
            net.faults,
            timer::live(),
            self.logic.world_timers(),
            self.logic.barking(),
            self.saver.finished(),
            if self.saver.is_writing() {
                ", one writing now"
            } else {
                ""
            },
            self.autosave_report(),
        )
    }
}

fn whole_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}
