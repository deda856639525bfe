//! The shard: one configuration, one world, one event loop. This module wires the network
//! server (Network and Flush phases, every game's packets through [`crate::game`]), the
//! world's Deltas phase, the games' start hooks and behaviours, the operator console
//! ([`console`]), saving (`saving.rs`) and the `loop:` status line ([`status`]) onto the
//! loop, runs it until something asks it to stop, and then stops in order.
//!
//! Startup, in order: make sure the data directory exists and take its lock (one shard per
//! data directory); bind every `network.listen` address (one that cannot be bound stops the
//! shard before any real work); finish what a crash left in the data directory
//! (`Layout::recover`); restore an archive dropped into `Saves/`; load `Saves/` (a save that
//! cannot be loaded stops the shard, exit code 2), or when there is none make the world with
//! the game's generator (an empty world without one); build the loop from `[server]`; on the loop, start accepting players, the game logic, the
//! saver and the autosave schedule, the archiver (a first rollup), the off-site uploader
//! (`offsite.rs`, when `[archive.remote]` names a bucket), the status line and the console;
//! log "ready".
//!
//! Shutdown: a stop request (a signal, or `shutdown` on the console) ends the wait; the
//! autosave schedule and the game timers stop; a final save is taken while players are still
//! connected (they hear it) and waited for, as is any archive rollup it started (and, for at
//! most 10 s, a last off-site pass sending what that rollup wrote); then the
//! listeners and connections close (players leave the world), the status line stops with
//! one last `loop:` line, and [`Shard::run`] returns what it did, the final save's outcome
//! included.
//!
//! Faults: a fault reported on the loop ([`runtime::report_fault`], a dead io_uring ring)
//! stops the shard the same way, final save included, and [`Shard::run`] returns
//! [`ShardError::Fault`]. A panic that escapes a loop phase stops the loop itself: nothing
//! more runs on it, so the shard takes the final save straight from the world as the panic
//! left it (snapshot on this thread, written on the blocking pool, players not told), lets the
//! connections drop with the loop, and returns [`ShardError::Fault`] too. Either way the
//! binary exits with [`ShardError::FAULT_EXIT_CODE`].
//!
//! The shard never blocks the loop thread: console reads and writes have their own threads,
//! and where the stop request comes from is the caller's business (`main` passes SIGINT and
//! SIGTERM, a test passes a channel).

mod builder;
pub mod console;
mod launch;
mod monitoring;
mod offsite;
mod restore;
mod saving;
pub mod status;

pub use builder::{Shard, ShardBuilder};
pub use launch::run_process;

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::config::Config;
use crate::game::{self, Behaviours, GameContext, Players};
use crate::net::{self, BackendKind, Limits, Net};
use crate::persist::archive::{self, Archiver, Plan};
use crate::persist::{self, Clock};
use crate::runtime::{self, Fault, LoopStats};
use crate::timer;
use crate::world::{self, World};

pub use console::Console;
use console::commands::Shell;
use status::StatusState;

/// How long shutdown waits for the console's last answers to be written.
const CONSOLE_FLUSH_TIMEOUT: Duration = Duration::from_secs(1);

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
    /// What stopped it: the caller's stop future, or `shutdown` on the console.
    pub reason: StopReason,
    /// The loop's counters at the end.
    pub stats: LoopStats,
    /// From [`Shard::run`] being called to "ready".
    pub startup: Duration,
    /// From "ready" to the end of the shutdown hooks, on tokio's clock (so a test with a
    /// paused clock sees game time).
    pub uptime: Duration,
    /// The save taken at shutdown: its report, or why it failed (the previous save is then
    /// the one on disk).
    pub final_save: Result<persist::Report, persist::PersistError>,
}

/// Why the shard could not start, or had to stop on a fault.
#[derive(Debug)]
pub enum ShardError {
    /// The data directory could not be created.
    DataDir {
        /// The data directory (`server.data_dir`).
        path: PathBuf,
        /// The error creating it.
        source: io::Error,
    },
    /// The console's threads could not be started.
    Console(io::Error),
    /// The watchdog's thread could not be started.
    Watchdog(io::Error),
    /// A `network.listen` address could not be bound (the error names it).
    Listen(io::Error),
    /// The `metrics.listen` address could not be bound, or the endpoint not started (the
    /// error names the key).
    Metrics(io::Error),
    /// Another process holds the data directory (the error says which).
    Locked(io::Error),
    /// What a crash left in the data directory could not be cleaned up.
    Recover {
        /// The directory holding `Saves/` and its temp directories, where recovery ran.
        path: PathBuf,
        /// The error recovery met.
        source: io::Error,
    },
    /// The save in `Saves/` cannot be loaded (the error names the file and the reason).
    Load(persist::LoadError),
    /// An archive dropped into `Saves/` cannot be restored (names it and the reason).
    Restore(archive::restore::RestoreError),
    /// There is no save in `Saves/`, but backups or archives are there: a volume that did
    /// not mount or a wrong `--data-dir`, not a new world. Nothing was changed; `--new-world`
    /// starts one anyway.
    MissingWorld {
        /// The directory that holds no save.
        saves: PathBuf,
        /// Backups found (`Backups/`).
        backups: usize,
        /// Archives found.
        archives: usize,
        /// The newest of them, relative to the data directory.
        newest: String,
    },
    /// The backups and archives could not be listed to tell a missing world from a new one.
    Survey(io::Error),
    /// `[archive.remote]` names a bucket, but its client or the uploader's thread cannot be
    /// set up (why, in operator words).
    Offsite(String),
    /// `network.max_connections` does not fit the open-file limit with the descriptors the
    /// shard keeps for itself (the text says both numbers and what to change).
    Descriptors(String),
    /// The shard stopped itself: a panic escaped a loop phase, or code on the loop reported
    /// that it cannot go on (a dead io_uring ring). The final save was attempted either way.
    Fault {
        /// The fault: the panic and its phase and site, or the reported message.
        fault: Fault,
        /// The final save's `created` time, or why it failed (the previous save is then the
        /// one on disk).
        final_save: Result<jiff::Timestamp, persist::PersistError>,
    },
}

impl ShardError {
    /// The exit code of a stop on a fault: `EX_SOFTWARE` of sysexits.h, "internal software
    /// error". Not 101 (what an uncaught panic exits with, without a final save), so a
    /// service manager or an operator can tell "stopped itself, saved" from "crashed".
    pub const FAULT_EXIT_CODE: u8 = 70;

    /// The process exit code for this error: 2 for a save that cannot be loaded (bad input:
    /// nothing started, nothing changed), [`Self::FAULT_EXIT_CODE`] (70) for a stop on a
    /// fault, 1 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            ShardError::Load(_)
            | ShardError::Restore(_)
            | ShardError::MissingWorld { .. }
            | ShardError::Descriptors(_)
            | ShardError::Offsite(_)
            | ShardError::Metrics(_) => 2,
            ShardError::Fault { .. } => Self::FAULT_EXIT_CODE,
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
            ShardError::Watchdog(e) => {
                write!(f, "cannot start the watchdog (server.watchdog): {e}")
            }
            ShardError::Listen(e) => write!(f, "{e} (network.listen, --listen)"),
            ShardError::Metrics(e) => write!(f, "{e}"),
            ShardError::Locked(e) => write!(f, "{e}"),
            ShardError::Recover { path, source } => write!(
                f,
                "cannot clean up after an interrupted save in {}: {source}",
                path.display()
            ),
            ShardError::Load(e) => write!(f, "{e}"),
            ShardError::Restore(e) => write!(f, "{e}"),
            ShardError::MissingWorld {
                saves,
                backups,
                archives,
                newest,
            } => write!(
                f,
                "no save in {} but {backups} backup(s) and {archives} archive(s) beside it \
                 (newest: {newest}): is the data directory the right one, and mounted \
                 (server.data_dir, --data-dir)? Nothing was changed or deleted. To put a backup or archive \
                 in place: `shardloop restore --list`, then `shardloop restore <name>`; to start \
                 a new world anyway: --new-world",
                saves.display()
            ),
            ShardError::Survey(e) => write!(
                f,
                "cannot list the backups and archives to tell a missing world from a new one: {e}"
            ),
            ShardError::Descriptors(why) => f.write_str(why),
            ShardError::Offsite(why) => write!(f, "off-site archives (archive.remote): {why}"),
            ShardError::Fault { fault, final_save } => {
                write!(f, "the shard stopped on a fault: {fault}; ")?;
                match final_save {
                    Ok(created) => write!(f, "the final save ({created}) is in Saves/"),
                    Err(e) => write!(
                        f,
                        "the final save failed ({e}): the last save on disk is older"
                    ),
                }
            }
        }
    }
}

impl std::error::Error for ShardError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ShardError::DataDir { source, .. }
            | ShardError::Console(source)
            | ShardError::Survey(source)
            | ShardError::Watchdog(source)
            | ShardError::Recover { source, .. }
            | ShardError::Locked(source)
            | ShardError::Listen(source)
            | ShardError::Metrics(source) => Some(source),
            ShardError::Load(e) => Some(e),
            ShardError::Restore(e) => Some(e),
            ShardError::Descriptors(_)
            | ShardError::Offsite(_)
            | ShardError::MissingWorld { .. }
            | ShardError::Fault { .. } => None,
        }
    }
}

async fn run_shard(
    shard: Shard,
    backend: BackendKind,
    console: Console,
    stop: impl Future<Output = ()>,
) -> Result<Stopped, ShardError> {
    let Shard {
        config,
        mut games,
        listeners,
        owns_its_thread,
    } = shard;
    let config = &config;
    let started = Instant::now();
    descriptor_budget(config.network.max_connections)?;
    let data_dir = &config.server.data_dir;
    std::fs::create_dir_all(data_dir).map_err(|source| ShardError::DataDir {
        path: data_dir.clone(),
        source,
    })?;
    // Held until this function returns: no second shard or restore on any directory this
    // one writes (data, saves, archives).
    let _locks =
        persist::lock::ShardLocks::acquire(&config.written_dirs()).map_err(ShardError::Locked)?;
    let network = &config.network;
    let listeners = match listeners {
        Some(bound) => bound,
        None => net::bind_all(&network.listen, network.socket_send_buffer as usize)
            .map_err(ShardError::Listen)?,
    };
    let metrics_listener = monitoring::bind(config)?;
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
    if !layout.saves.exists() && !config.server.new_world {
        refuse_a_missing_world(config, &layout, &archives_dir)?;
    }
    let mut world = match (layout.saves.exists(), games.generator.take()) {
        (true, _) => load_world(&layout)?,
        (false, Some(generate)) => generate(),
        (false, None) => {
            tracing::info!("no save to load and no game generates a world: starting empty");
            World::new(config.world.generate.seed)
        }
    };
    for game in &mut games.games {
        for setup in std::mem::take(&mut game.setups) {
            setup(&mut world);
        }
    }
    let world = Rc::new(RefCell::new(world));
    let net = Net::new(Limits::from(&config.network));
    let players = game::install(&net, world.clone(), &mut games);
    // Both backends' sockets are the loop thread's own: epoll's in its reactor, io_uring's
    // ring driven by that reactor's turns.
    let builder = config
        .server
        .loop_builder()
        .owns_its_thread(owns_its_thread);
    let mut event_loop =
        game::wire(builder, &net, world.clone(), players.clone(), games.deltas).build();
    // One wall clock for autosave, saves and archives (and a save after a fault).
    let clock = config.time.clock();
    let after_panic = FaultSave {
        world: world.clone(),
        players: players.clone(),
        layout: layout.clone(),
        clock,
        threads: config.save_threads(),
    };
    let wired = Wired {
        world,
        games,
        net,
        players,
        backend,
        listeners,
        layout,
        clock,
        metrics_listener,
        park: if owns_its_thread {
            "own_epoll"
        } else {
            "tokio"
        },
    };
    let served = event_loop
        .try_run_until(serve(config, wired, console, stop, started))
        .await;
    // Nothing more runs on this loop: refuse posts instead of queueing them forever.
    event_loop.context().shutdown();
    let serving = match served {
        Ok(serving) => serving?,
        Err(fault) => {
            let final_save = after_panic.save().await;
            return Err(ShardError::Fault { fault, final_save });
        }
    };
    if let Some(fault) = serving.fault {
        return Err(ShardError::Fault {
            fault,
            final_save: serving.final_save.map(|report| report.created),
        });
    }
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

/// With no save in `Saves/`, a new world is only right when there is nothing to lose: any
/// backup or archive means the save went missing (an unmounted volume, a wrong directory),
/// and a new world would soon be saved over it while retention aged the real ones out.
fn refuse_a_missing_world(
    config: &Config,
    layout: &persist::Layout,
    archives_dir: &std::path::Path,
) -> Result<(), ShardError> {
    let limits = config.archive.restore_limits();
    let found = archive::list::list(&config.server.data_dir, layout, archives_dir, limits)
        .map_err(ShardError::Survey)?;
    let newest = found
        .iter()
        .filter_map(|listed| {
            let manifest = listed.manifest.as_ref().ok()?;
            Some((manifest.created, listed.name.clone()))
        })
        .max()
        .map(|(_, name)| name);
    let Some(newest) = newest.or_else(|| found.first().map(|l| l.name.clone())) else {
        return Ok(());
    };
    let backups = found
        .iter()
        .filter(|l| l.kind == archive::list::ListedKind::Backup)
        .count();
    Err(ShardError::MissingWorld {
        saves: layout.saves.clone(),
        backups,
        archives: found.len() - backups,
        newest,
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

struct Serving {
    reason: StopReason,
    /// A fault reported on the loop stopped the shard (`reason` is then meaningless).
    fault: Option<Fault>,
    startup: Duration,
    uptime: Duration,
    final_save: Result<persist::Report, persist::PersistError>,
}

/// The world and the network, as the shard wires them.
struct Wired {
    world: Rc<RefCell<World>>,
    /// Their packets are installed; the rest starts on the loop.
    games: game::Games,
    net: Net,
    players: Rc<RefCell<Players>>,
    backend: BackendKind,
    /// Bound before the world was built; accepting starts on the loop.
    listeners: Vec<std::net::TcpListener>,
    layout: persist::Layout,
    clock: Clock,
    /// The `metrics.listen` socket, bound at startup; served from the loop's wiring on.
    metrics_listener: Option<std::net::TcpListener>,
    /// How the loop parks, for the ready line: `own_epoll` when it owns its thread
    /// (`EventLoopBuilder::owns_its_thread`), `tokio` otherwise.
    park: &'static str,
}

/// What the final save after a phase panic needs: the loop is stopped for good, so the saver
/// (which runs on it) cannot take it.
struct FaultSave {
    world: Rc<RefCell<World>>,
    players: Rc<RefCell<Players>>,
    layout: persist::Layout,
    clock: Clock,
    threads: usize,
}

impl FaultSave {
    /// Saves the world as the panic left it: a snapshot on this thread, written on the
    /// blocking pool. Never panics: a snapshot that panics too is a failed save.
    async fn save(self) -> Result<jiff::Timestamp, persist::PersistError> {
        tracing::warn!(
            "taking the final save of the world as the panic left it: if the panic interrupted \
             a change to the world, that change may be saved half done; the save it replaces \
             goes to Backups/ as usual"
        );
        let snapshot = runtime::catch(|| {
            let players = self.players.borrow();
            let keep = |m: &world::Mobile| !players.is_player(m.serial);
            persist::Snapshot::take(&self.world.borrow(), self.clock.now(), keep)
        })
        .map_err(|why| {
            self.failed(io::Error::other(format!(
                "taking the snapshot panicked: {why}"
            )))
        })?;
        let (layout, threads) = (self.layout.clone(), self.threads);
        let saved = tokio::task::spawn_blocking(move || {
            persist::save::write_in_background(&layout, snapshot, threads)
        })
        .await
        .map_err(|e| self.failed(io::Error::other(format!("the save thread died: {e}"))))??;
        let m = &saved.manifest;
        tracing::info!(
            created = %m.created,
            items = m.items,
            mobiles = m.mobiles,
            took = ?saved.took,
            "final save after the fault written"
        );
        Ok(m.created)
    }

    fn failed(&self, source: io::Error) -> persist::PersistError {
        persist::PersistError::new(
            persist::Operation::Save,
            "saving",
            &self.layout.saves,
            source,
        )
    }
}

/// Hands the loop profile what only the shard knows, as each second closes: packets in and
/// out, players logged in, the longest packet handler.
fn profile_each_second(net: &Net, players: &Rc<RefCell<Players>>) {
    let (net, players) = (net.clone(), players.clone());
    let mut was = net.stats();
    runtime::on_each_second(move |second| {
        let now = net.stats();
        second.counts.packets_in = now.packets_in.saturating_sub(was.packets_in);
        second.counts.packets_out = now.packets_out.saturating_sub(was.packets_out);
        second.counts.players = players.borrow().len() as u64;
        second.worst.handler = net.take_worst_handler();
        was = now;
    });
}

/// Everything that lives on the loop thread, from "start the game" to the shutdown hooks.
async fn serve(
    config: &Config,
    wired: Wired,
    console: Console,
    stop: impl Future<Output = ()>,
    started: Instant,
) -> Result<Serving, ShardError> {
    let listening = start_listening(&wired.net, wired.backend, wired.listeners)?;
    let started_games = start_games(wired.games, &wired.world, &wired.players, &wired.net);
    let clock = wired.clock;
    let rollups = start_archiver(config, &wired.layout, clock);
    // The console and the metrics see archives only when they are on.
    let archiver = config.archive.enabled.then(|| rollups.clone());
    let offsite = offsite::start(config, &archiver, clock)?;
    let save_log = Rc::new(crate::metrics::SaveLog::default());
    let (saver, autosave) = saving::start_saving(
        config,
        clock,
        wired.layout,
        &wired.world,
        &started_games.context,
        Some(rollups.clone()),
        &save_log,
    );
    profile_each_second(&wired.net, &wired.players);
    let metrics = wired
        .metrics_listener
        .map(|listener| {
            let sources = monitoring::Wiring {
                world: &wired.world,
                net: &wired.net,
                players: &wired.players,
                saver: &saver,
                archiver: &archiver,
                offsite: &offsite,
                save_log: &save_log,
            }
            .sources();
            monitoring::start(config, listener, sources, &save_log)
        })
        .transpose()?;
    let status = Rc::new(StatusState::new(config));
    let status_timer = config
        .server
        .loop_stats_interval()
        .map(|every| status::start_status_line(every, &status));
    // Held until the shard returns: dropping it stops the thread.
    let _watchdog = config
        .server
        .watchdog()
        .map(|limit| runtime::Watchdog::start(crate::LoopContext::current(), limit))
        .transpose()
        .map_err(ShardError::Watchdog)?;
    let console_shutdown = Rc::new(Notify::new());
    let mut printer = None;
    if let Some((input, output)) = console.io {
        let shell = Shell {
            world: wired.world,
            net: wired.net.clone(),
            players: wired.players,
            games: started_games.clone(),
            status: status.clone(),
            shutdown: console_shutdown.clone(),
            saver: saver.clone(),
            autosave: autosave.clone(),
            archiver: archiver.clone(),
            offsite: offsite.clone(),
            data_dir: config.server.data_dir.clone(),
            listening: listening.clone(),
            backend: wired.backend.name(),
            printer: Rc::default(),
            loop_csv: console::loopstats::CsvWriter::default(),
            cadence_file: console::cadence_file::CadenceFile::default(),
        };
        let later = shell.printer.clone();
        let started = console::start(input, output, move |line| shell.answer(line))
            .map_err(ShardError::Console)?;
        let _ = later.set(started.clone());
        printer = Some(started);
    }
    let startup = started.elapsed();
    tracing::info!(
        took = ?startup,
        verdict = %runtime::stats().verdict,
        live_timers = timer::live(),
        park = wired.park,
        "shard ready; type `help` for console commands, Ctrl-C to stop"
    );
    let ready = tokio::time::Instant::now();
    #[cfg(any(test, feature = "testkit"))]
    if let Some(after) = config.server.fault_inject_phase_panic {
        tracing::warn!(
            after = %humantime::format_duration(after),
            "FAULT INJECTION (a test flag): a loop phase will panic"
        );
        timer::after(after).start(runtime::fault::inject_phase_panic);
    }

    let (reason, fault) = tokio::select! {
        biased;
        fault = runtime::faulted() => (StopReason::Requested, Some(fault)),
        () = stop => (StopReason::Requested, None),
        () = console_shutdown.notified() => (StopReason::Console, None),
    };
    match &fault {
        Some(fault) => tracing::error!(%fault, "stopping on a fault: running shutdown hooks"),
        None => tracing::info!(%reason, "stopping: running shutdown hooks"),
    }
    autosave.stop();
    started_games.stop();
    // Players are still connected: they hear that the world saves before they are let go.
    tracing::info!("taking the final world save (Ctrl-C again to exit without it)");
    let final_save = saver.save().await;
    if rollups.is_running() {
        tracing::info!("waiting for the archive rollup to finish");
    }
    rollups.idle().await;
    offsite::stop(&offsite).await;
    wired.net.stop();
    drop(metrics); // stops the endpoint's thread
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
        fault,
        startup,
        uptime: ready.elapsed(),
        final_save,
    })
}

/// The games as they run: their console commands, and their state (per-NPC behaviours,
/// what their start hooks left to stop) in the context they share.
pub(crate) struct StartedGames {
    pub(crate) context: GameContext,
    pub(crate) commands: Vec<game::CommandSpec>,
}

impl StartedGames {
    /// Stops the behaviours, then what the start hooks kept.
    fn stop(&self) {
        self.context.stop();
    }
}

/// Starts the games on the loop, in the order they were added: each one's start hooks, then
/// every per-NPC behaviour.
fn start_games(
    games: game::Games,
    world: &Rc<RefCell<World>>,
    players: &Rc<RefCell<Players>>,
    net: &Net,
) -> Rc<StartedGames> {
    let context = GameContext::new(world.clone(), players.clone(), net.clone(), games.deltas);
    let (mut npcs, mut commands) = (Vec::new(), Vec::new());
    for game in games.games {
        for (start, _site) in game.starts {
            start(&context);
        }
        npcs.extend(game.npcs);
        commands.extend(game.commands);
    }
    context.set_behaviours(Behaviours::start(world.clone(), npcs));
    Rc::new(StartedGames { context, commands })
}

/// Descriptors the shard keeps for itself beyond its connections: listeners, the loop's own
/// (epoll or the ring, eventfds, timerfds), stdio and the log writer, the data-dir lock, and
/// the files and directories save and archive threads hold open at once (a save opens a few
/// per writer thread). Connections can never take these: `max_connections` must leave them.
pub const RESERVED_DESCRIPTORS: u64 = 128;

/// Raises the soft open-file limit to the hard one (or at least to what the shard needs, if
/// the kernel refuses more), and refuses to start when `max_connections` plus
/// [`RESERVED_DESCRIPTORS`] does not fit.
fn descriptor_budget(max_connections: u32) -> Result<(), ShardError> {
    use crate::host::fd_limit;
    let needed = u64::from(max_connections) + RESERVED_DESCRIPTORS;
    let current = fd_limit::current().map_err(|e| ShardError::Descriptors(e.to_string()))?;
    // "Unlimited" cannot be set as a soft limit beyond the kernel's nr_open: aim for plenty.
    let want = current.hard.min(needed.max(1 << 20));
    let raised = fd_limit::raise(want).or_else(|_| fd_limit::raise(needed));
    let soft = match &raised {
        Ok(limit) => limit.soft,
        Err(_) => fd_limit::current().map_or(current.soft, |l| l.soft),
    };
    if soft >= needed {
        tracing::debug!(soft, hard = current.hard, "open-file limit");
        return Ok(());
    }
    let why = raised.err().map(|e| format!(" ({e})")).unwrap_or_default();
    Err(ShardError::Descriptors(format!(
        "network.max_connections = {max_connections} needs {needed} file descriptors \
         ({RESERVED_DESCRIPTORS} more are kept for saves, archives, logs and the console) but \
         the open-file limit is {soft} (hard {}): raise it (ulimit -n, systemd LimitNOFILE=) or \
         lower network.max_connections{why}",
        current.hard
    )))
}

/// Starts accepting on the listeners bound at startup; the addresses they are bound to.
fn start_listening(
    net: &Net,
    backend: BackendKind,
    listeners: Vec<std::net::TcpListener>,
) -> Result<Vec<std::net::SocketAddr>, ShardError> {
    let listening = net
        .start(&*backend.backend(), listeners)
        .map_err(ShardError::Listen)?;
    if listening.is_empty() {
        tracing::warn!("no network.listen address: players cannot connect");
    }
    for addr in &listening {
        tracing::info!(%addr, backend = %backend.name(), "listening for players");
    }
    Ok(listening)
}

/// The archiver, with a first rollup requested: whatever earlier runs (or a crash) left to
/// do, before the first save. With archives off (`archive.enabled = false`) it makes and
/// prunes no archive (every kind's retention is 0) but still keeps `Backups/Automatic/` to
/// the newest `keep_backups`: backups must not grow until saves fail.
fn start_archiver(config: &Config, layout: &persist::Layout, clock: Clock) -> Archiver {
    let dir = config.data_path(&config.archive.dir);
    let mut plan: Plan = config
        .archive
        .plan(dir, config.time.zone.time_zone().clone());
    if !config.archive.enabled {
        plan.retention = [0; 3];
    }
    let archiver = Archiver::new(layout.clone(), plan, clock);
    archiver.request();
    archiver
}

pub(crate) fn whole_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}
