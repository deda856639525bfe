//! Saving, as the shard runs it: the saver (players' own mobiles left out of saves), the
//! autosave schedule (with the cadence `savefrequency` stored, if any), and what every save
//! notice becomes — a log line, a system message to every player, and after a save a rollup
//! request to the archiver.
//!
//! Owns that wiring only; saving itself is [`crate::persist`]'s. Must never block the loop.

use std::cell::RefCell;
use std::rc::Rc;

use crate::config::Config;
use crate::game::GameContext;
use crate::metrics::SaveLog;
use crate::persist::archive::Archiver;
use crate::persist::{self, Autosave, Cadence, Clock, Notice, Saver, SaverConfig};
use crate::world::World;

/// The saver (players left out of saves, notices to players and the log) and the autosave
/// schedule, with the cadence `savefrequency` stored if there is one. Every save's outcome
/// also goes to `save_log` (the metrics endpoint's save figures).
#[allow(clippy::too_many_arguments)]
pub(super) fn start_saving(
    config: &Config,
    clock: Clock,
    layout: persist::Layout,
    world: &Rc<RefCell<World>>,
    games: &GameContext,
    archiver: Option<Archiver>,
    save_log: &Rc<SaveLog>,
) -> (Saver, Autosave) {
    let tell = {
        let games = games.clone();
        let save_log = save_log.clone();
        Rc::new(move |notice: &Notice| {
            log_notice(notice);
            save_log.record(notice);
            games.broadcast(&notice.to_string());
            // A new backup may complete a period: roll it up (off the loop).
            if let (Notice::Saved(_), Some(archiver)) = (notice, &archiver) {
                archiver.request();
            }
        })
    };
    let in_world = games.players().clone();
    let saver_tell = tell.clone();
    let reserve = persist::reserve::Reserve::new(layout.root(), config.world.disk_reserve);
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
    // The same players `keep` refuses, listed instead of asked of every mobile: a save's
    // snapshot then reads no mobile on the loop.
    let players = games.players().clone();
    saver.leave_out(move || players.borrow().serials().collect());
    if let Some(reserve) = reserve {
        saver.keep_reserve(reserve);
    }
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
