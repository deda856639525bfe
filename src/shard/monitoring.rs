//! The shard's side of the metrics endpoint ([`crate::metrics`]): binding `metrics.listen` at
//! startup, and the [`Sources`] that give the endpoint the world, the network and saving as
//! this shard wires them.
//!
//! Owns that wiring only. The closures it builds run on the loop and only copy (the endpoint
//! calls them once a second to publish, and for each status page); the history source copies
//! the seconds asked for — for the publish, only those new since the last one (none in a build
//! without the `loop-profiling` profile, which keeps no history).

use std::cell::RefCell;
use std::rc::Rc;

use crate::config::Config;
use crate::game::Players;
use crate::metrics::probe::ArchiveFacts;
use crate::metrics::{self, MetricsServer, PersistFacts, SaveLog, Settings, Sources, WorldCounts};
use crate::net::Net;
use crate::persist::Saver;
use crate::persist::archive::Archiver;
use crate::persist::archive::upload::Uploader;
use crate::runtime;
use crate::timer;
use crate::world::World;

use super::ShardError;

/// Binds `metrics.listen` when it is set: a bad or busy address stops the shard (exit 2).
pub(super) fn bind(config: &Config) -> Result<Option<std::net::TcpListener>, ShardError> {
    config
        .metrics
        .listen_addr()
        .map(metrics::bind)
        .transpose()
        .map_err(ShardError::Metrics)
}

/// What the sources read, borrowed from the shard's wiring.
pub(super) struct Wiring<'a> {
    pub world: &'a Rc<RefCell<World>>,
    pub net: &'a Net,
    pub players: &'a Rc<RefCell<Players>>,
    pub saver: &'a Saver,
    pub archiver: &'a Option<Archiver>,
    pub offsite: &'a Option<Uploader>,
    pub save_log: &'a Rc<SaveLog>,
}

impl Wiring<'_> {
    pub(super) fn sources(self) -> Sources {
        let net = self.net.clone();
        let (world, players) = (self.world.clone(), self.players.clone());
        let (saver, archiver, offsite, save_log) = (
            self.saver.clone(),
            self.archiver.clone(),
            self.offsite.clone(),
            self.save_log.clone(),
        );
        Sources {
            net: Box::new(move || net.stats()),
            world: Box::new(move || {
                let world = world.borrow();
                WorldCounts {
                    items: world.item_count() as u64,
                    mobiles: world.mobile_count() as u64,
                    players: players.borrow().len() as u64,
                    live_timers: timer::live() as u64,
                }
            }),
            // The seconds after `after` (all for `None`), oldest first; empty in a build
            // without the `loop-profiling` profile.
            history: Box::new(|after| {
                runtime::with_history(|history| {
                    history
                        .iter()
                        .filter(|s| after.is_none_or(|a| s.uptime_second > a))
                        .copied()
                        .collect()
                })
            }),
            persist: Box::new(move || PersistFacts {
                last_save: save_log.last(),
                saving: saver.is_writing(),
                archive: archiver.as_ref().map(|a| ArchiveFacts {
                    runs: a.runs(),
                    running: a.is_running(),
                    last: a.last(),
                }),
                offsite: offsite.as_ref().map(Uploader::status),
            }),
        }
    }
}

/// Starts the endpoint on `listener` (on the loop thread).
pub(super) fn start(
    config: &Config,
    listener: std::net::TcpListener,
    sources: Sources,
    save_log: &SaveLog,
) -> Result<MetricsServer, ShardError> {
    let settings = Settings {
        disk_dirs: vec![
            ("saves", config.save_path()),
            ("backups", config.server.data_dir.join("Backups")),
            ("archives", config.archive_path()),
        ],
        token: config.metrics.token().map(metrics::BearerToken::new),
        hosts: crate::net::Limits::from(&config.network),
        ..Settings::default()
    };
    MetricsServer::start(listener, sources, save_log.metrics(), settings)
        .map_err(ShardError::Metrics)
}
