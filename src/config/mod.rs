//! Shard configuration: the keys, their defaults, how the layers are merged, and the errors
//! and report an operator sees.
//!
//! This module owns the *shape* of the configuration ([`Config`] and its sections), the
//! built-in defaults, the layering (defaults < `config/shard.toml` < `SHARD_` environment <
//! command line, see [`Config::load`]), validation, and the provenance of every value
//! ([`Loaded::report`], for `shardloop check-config`). It also turns its sections into the
//! plain settings each part takes ([`ServerConfig::loop_builder`], `net::Limits::from`,
//! [`NetworkConfig::backend_kind`]): the configuration depends on the parts, never the
//! reverse, so no part ever imports this module. A game adds its own typed tables
//! ([`Section`], declared in [`LoadOptions::sections`]), read through the same layers and
//! reported with the same provenance ([`Config::section`]).
//!
//! It must never start anything, touch the runtime or the network, print, log or exit the
//! process: it reads at most one file (the config file) and, only when the caller asks
//! ([`process_env`]), the process environment. (The one exception is asked for by name:
//! [`NetworkConfig::backend_kind`] lets the network module probe for io_uring, and warn if it
//! is refused.) The binary prints a [`ConfigError`] and exits with [`ConfigError::EXIT_CODE`]
//! (2) before anything is started.
//!
//! ```no_run
//! use shardloop::config::{Config, ConfigError, ConfigFile, LoadOptions, Overrides, process_env};
//!
//! fn load() -> Result<Config, ConfigError> {
//!     let options = LoadOptions {
//!         file: ConfigFile::default(), // config/shard.toml, fine if missing
//!         env: process_env()?,         // SHARD_* variables
//!         overrides: Overrides::default(),
//!         sections: Vec::new(),        // the game's own tables: SectionSpec::of::<S>()
//!     };
//!     Ok(Config::load(&options)?.config)
//! }
//! ```

mod archive;
mod cli;
mod duration;
mod error;
mod layer;
mod load;
mod report;
mod secret;
mod section;
mod toml_lines;
mod zone;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::net::{BackendKind, Limits, Rate};
use crate::runtime::{
    DEFAULT_IDLE_WAIT, DEFAULT_LATE_WAKE_PERCENT, DEFAULT_LATE_WAKE_THRESHOLD,
    DEFAULT_SPIN_BEFORE_PARK, DEFAULT_TICK, EventLoop, EventLoopBuilder,
};

pub use cli::ConfigArgs;
pub use duration::format_duration;
pub use error::ENV_PREFIX;
pub use error::{ConfigError, Origin, SectionFault};
pub use load::{ConfigFile, DEFAULT_CONFIG_PATH, LoadOptions, Overrides, process_env};
pub use report::{Entry, Loaded};
pub use secret::{REDACTED, Secret};
pub use section::{Section, SectionSpec};
pub use zone::Zone;

/// The whole configuration. Every section has defaults; see `docs/configuration.md`. The
/// game's own sections, when declared, are read with [`Config::section`]; they are not part
/// of its serialized form.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The event loop and its health checks.
    pub server: ServerConfig,
    /// Listeners and per-connection limits.
    pub network: NetworkConfig,
    /// Where the world is saved, and the size of a generated world (for a game that generates
    /// its starting world from these keys, as the demo does).
    pub world: WorldConfig,
    /// Periodic world saves.
    pub autosave: AutosaveConfig,
    /// Hourly/daily/monthly archives of saves.
    pub archive: ArchiveConfig,
    /// The time zone used for wall-clock schedules and archive names.
    pub time: TimeConfig,
    /// The HTTP endpoint for Prometheus, orchestrators and a browser (off by default).
    pub metrics: MetricsConfig,
    /// The declared game sections as loaded (see [`Config::section`]).
    #[serde(skip)]
    sections: section::Sections,
}

/// Default of `server.watchdog`: an iteration stuck this long is logged with its site.
pub const DEFAULT_WATCHDOG: Duration = Duration::from_secs(10);

/// `[server]`: the event loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Root of saves, backups, archives and logs (`--data-dir`). Relative to the working dir.
    pub data_dir: PathBuf,
    /// Longest idle block; zero never sleeps (spins).
    #[serde(with = "duration")]
    pub idle_wait: Duration,
    /// After a packet, connection or post woke the loop, poll up to this long before parking
    /// again, while such spins pay (0 ..= 10 ms; zero = park at once).
    #[serde(with = "duration")]
    pub spin_before_park: Duration,
    /// Late wakes per second tolerated before idle sleeping backs off.
    pub late_wake_threshold: u32,
    /// Share of sleeps (percent, 0–100) that must also be late before sleeping backs off.
    pub late_wake_percent: u32,
    /// Timer resolution, 1 ms ..= 1 s.
    #[serde(with = "duration")]
    pub tick: Duration,
    /// Period of the `loop:` status line; zero turns it off.
    #[serde(with = "duration")]
    pub loop_stats_interval: Duration,
    /// Run the startup host probe (25 short sleeps) before the loop first parks.
    pub probe_host: bool,
    /// How long the loop may stay in one iteration before the watchdog logs, at ERROR, the
    /// phase and the code it is stuck in; zero turns the watchdog off.
    #[serde(with = "duration")]
    pub watchdog: Duration,
    /// Not a configuration key: FAULT INJECTION for tests, in builds with the `testkit`
    /// feature only. When set (only through the hidden `--fault-inject-phase-panic` flag of
    /// such a build), a loop phase panics this long after "ready", as a bug would, so that
    /// the fault exit (final save, exit code 70) can be tested on the real binary. No file or
    /// variable sets it: in a file or `SHARD_SERVER__*` it is an unknown key.
    #[cfg(any(test, feature = "testkit"))]
    #[serde(skip)]
    pub(crate) fault_inject_phase_panic: Option<Duration>,
    /// Not a configuration key: set for one start by the `--new-world` flag. With no save in
    /// `Saves/` but backups or archives beside it, the shard refuses to start (a missing
    /// world is not a new one) unless this is set.
    #[serde(skip)]
    pub new_world: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            data_dir: PathBuf::from("./data"),
            idle_wait: DEFAULT_IDLE_WAIT,
            spin_before_park: DEFAULT_SPIN_BEFORE_PARK,
            late_wake_threshold: DEFAULT_LATE_WAKE_THRESHOLD,
            late_wake_percent: DEFAULT_LATE_WAKE_PERCENT,
            tick: DEFAULT_TICK,
            loop_stats_interval: Duration::from_secs(60),
            probe_host: true,
            watchdog: DEFAULT_WATCHDOG,
            #[cfg(any(test, feature = "testkit"))]
            fault_inject_phase_panic: None,
            new_world: false,
        }
    }
}

impl ServerConfig {
    /// An [`EventLoopBuilder`] with this section's loop settings (idle wait, tick, late-wake
    /// limits, probe). Add slot handlers, then `build()`.
    pub fn loop_builder(&self) -> EventLoopBuilder {
        EventLoop::builder()
            .idle_wait(self.idle_wait)
            .spin_before_park(self.spin_before_park)
            .tick(self.tick)
            .late_wake_threshold(self.late_wake_threshold)
            .late_wake_percent(self.late_wake_percent)
            .probe_host(self.probe_host)
    }

    /// `None` when the watchdog is off (`watchdog = "0s"`).
    pub fn watchdog(&self) -> Option<Duration> {
        (!self.watchdog.is_zero()).then_some(self.watchdog)
    }

    /// `None` when the status line is off (`loop_stats_interval = "0s"`).
    pub fn loop_stats_interval(&self) -> Option<Duration> {
        (!self.loop_stats_interval.is_zero()).then_some(self.loop_stats_interval)
    }
}

/// `[network]`: listeners and limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Addresses to accept clients on; empty = no listener.
    pub listen: Vec<SocketAddr>,
    /// Socket backend.
    pub backend: Backend,
    /// Unsent output one connection may hold, bytes (4 KiB ..= 64 MiB); past it, it is
    /// disconnected at once.
    pub send_buffer_size: u32,
    /// Unsent output a connection may keep for at most `send_soft_timeout`, bytes; 0 = no
    /// soft limit, else below `send_buffer_size`.
    pub send_soft_limit: u32,
    /// How long a connection's unsent output may stay above `send_soft_limit` (1 s ..= 1 h).
    #[serde(with = "duration")]
    pub send_soft_timeout: Duration,
    /// The kernel send buffer asked for each client socket (`SO_SNDBUF`), bytes
    /// (4 KiB ..= 64 MiB).
    pub socket_send_buffer: u32,
    /// Largest packet accepted from a client, bytes (3 ..= 65535).
    pub max_packet: u32,
    /// Connections open at once; past it a new one makes room by closing the oldest that has
    /// not logged in, or is closed at once when every one has.
    pub max_connections: u32,
    /// Connections one host (an IPv4 address, an IPv6 /64) may hold open at once.
    pub max_per_ip: u32,
    /// Connections one IPv6 prefix of `ipv6_prefix` bits may hold open at once.
    pub max_per_ipv6_prefix: u32,
    /// The IPv6 prefix length, bits (32 ..= 64), for `max_per_ipv6_prefix` and the connect rate.
    pub ipv6_prefix: u8,
    /// Connections one IPv4 prefix of `ipv4_prefix` bits may hold open at once; 0 = no cap.
    pub max_per_ipv4_prefix: u32,
    /// The IPv4 prefix length, bits (8 ..= 32), for `max_per_ipv4_prefix`.
    pub ipv4_prefix: u8,
    /// Connections not logged in yet that may be open at once (1 ..= `max_connections`).
    pub max_prelogin: u32,
    /// Connects one source (an IPv4 address, an IPv6 prefix) may make a second, sustained;
    /// 0 = no limit (and `connect_burst` and `connect_ban` are ignored).
    pub connect_rate: u32,
    /// Connects one source may make at once after a quiet spell (the bucket's size, ≥ 1).
    pub connect_burst: u32,
    /// How long a source connecting far beyond its rate is refused on sight; zero = never.
    #[serde(with = "duration")]
    pub connect_ban: Duration,
    /// Output across all connections, bytes — unsent, plus the kernel send buffer of every
    /// socket left full; past it the connection holding the most is disconnected.
    pub outbound_budget: u64,
    /// A connection that completes no packet for this long is closed; zero = never.
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// A connection must log in within this long of connecting.
    #[serde(with = "duration")]
    pub login_timeout: Duration,
    /// Pings a connection may send a second, sustained; 0 = no limit (and `ping_burst` is
    /// ignored).
    pub ping_rate: u32,
    /// Pings a connection may send at once after a quiet spell (the bucket's size, ≥ 1).
    pub ping_burst: u32,
}

/// The default listener: the Ultima Online port, on every IPv4 interface.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 2593);

impl Default for NetworkConfig {
    /// The server's own defaults ([`Limits::default`]).
    fn default() -> Self {
        let limits = Limits::default();
        let ping = limits.ping_rate.expect("pings are limited by default");
        let connect = limits
            .connect_rate
            .expect("connects are limited by default");
        NetworkConfig {
            listen: vec![DEFAULT_LISTEN],
            backend: Backend::Auto,
            send_buffer_size: limits.send_buffer_size as u32,
            send_soft_limit: limits.send_soft_limit as u32,
            send_soft_timeout: limits.send_soft_timeout,
            socket_send_buffer: limits.socket_send_buffer as u32,
            max_packet: limits.max_packet as u32,
            max_connections: limits.max_connections as u32,
            max_per_ip: limits.max_per_ip as u32,
            max_per_ipv6_prefix: limits.max_per_ipv6_prefix as u32,
            ipv6_prefix: limits.ipv6_prefix,
            max_per_ipv4_prefix: limits.max_per_ipv4_prefix.unwrap_or(0) as u32,
            ipv4_prefix: limits.ipv4_prefix,
            max_prelogin: limits.max_prelogin as u32,
            connect_rate: connect.per_sec,
            connect_burst: connect.burst,
            connect_ban: limits.connect_ban,
            outbound_budget: limits.outbound_budget as u64,
            idle_timeout: limits.idle_timeout,
            login_timeout: limits.login_timeout,
            ping_rate: ping.per_sec,
            ping_burst: ping.burst,
        }
    }
}

impl NetworkConfig {
    /// `network.backend` resolved to a backend this process can run: `auto` is
    /// [`BackendKind::AUTO`]; `io_uring` probes the kernel (a ring is created and dropped) and
    /// falls back to epoll with a warning when refused ([`BackendKind::io_uring_or_epoll`]).
    /// Call it once, at startup.
    pub fn backend_kind(&self) -> BackendKind {
        match self.backend {
            Backend::Auto => BackendKind::AUTO,
            Backend::Epoll => BackendKind::Epoll,
            Backend::IoUring => BackendKind::io_uring_or_epoll(),
        }
    }
}

/// The server's limits from `[network]`: `Limits::from(&config.network)`.
impl From<&NetworkConfig> for Limits {
    fn from(config: &NetworkConfig) -> Limits {
        Limits {
            max_connections: config.max_connections as usize,
            max_per_ip: config.max_per_ip as usize,
            max_per_ipv6_prefix: config.max_per_ipv6_prefix as usize,
            ipv6_prefix: config.ipv6_prefix,
            max_per_ipv4_prefix: (config.max_per_ipv4_prefix > 0)
                .then_some(config.max_per_ipv4_prefix as usize),
            ipv4_prefix: config.ipv4_prefix,
            max_prelogin: config.max_prelogin as usize,
            connect_rate: Rate::from_keys(config.connect_rate, config.connect_burst),
            connect_ban: config.connect_ban,
            max_packet: config.max_packet as usize,
            send_buffer_size: config.send_buffer_size as usize,
            send_soft_limit: config.send_soft_limit as usize,
            send_soft_timeout: config.send_soft_timeout,
            socket_send_buffer: config.socket_send_buffer as usize,
            outbound_budget: config.outbound_budget as usize,
            idle_timeout: config.idle_timeout,
            login_timeout: config.login_timeout,
            ping_rate: Rate::from_keys(config.ping_rate, config.ping_burst),
        }
    }
}

/// `network.backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// The backend measured best here: epoll (see `docs/configuration.md`).
    #[default]
    Auto,
    /// tokio's epoll reactor.
    Epoll,
    /// io_uring (the optional `io-uring` feature, Linux only).
    IoUring,
}

/// `[world]`: saves and the generated world.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorldConfig {
    /// The current save; relative paths are under `server.data_dir`.
    pub save_dir: PathBuf,
    /// Serialization workers per save; 0 = one per core but the loop's (at least 1).
    pub save_threads: u32,
    /// Bytes kept allocated beside the save (`disk-reserve`) and given up when a save finds
    /// the disk full, so that save still fits; 0 = no reserve, else at least 1 MiB.
    pub disk_reserve: u64,
    /// The world generated when no save exists.
    pub generate: GenerateConfig,
}

impl Default for WorldConfig {
    fn default() -> Self {
        WorldConfig {
            save_dir: PathBuf::from("Saves"),
            save_threads: 0,
            disk_reserve: crate::persist::reserve::DEFAULT_BYTES,
            generate: GenerateConfig::default(),
        }
    }
}

/// `[world.generate]`: the seed and size of `world::generate`'s world, for a game that
/// generates its starting world from them (the demo does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GenerateConfig {
    /// Items generated.
    pub items: u32,
    /// Mobiles (NPCs) generated.
    pub mobiles: u32,
    /// Seed of the generator: same seed, same world.
    pub seed: u64,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            items: 190_728,
            mobiles: 33_158,
            seed: crate::world::DEFAULT_SEED,
        }
    }
}

/// `[autosave]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutosaveConfig {
    /// Save the world periodically.
    pub enabled: bool,
    /// Time between saves (> 0).
    #[serde(with = "duration")]
    pub frequency: Duration,
    /// How long before a save players are warned; zero = no warning. Less than `frequency`.
    #[serde(with = "duration")]
    pub warning: Duration,
}

impl Default for AutosaveConfig {
    fn default() -> Self {
        AutosaveConfig {
            enabled: true,
            frequency: Duration::from_secs(60 * 60),
            warning: Duration::from_secs(60),
        }
    }
}

/// `[archive]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArchiveConfig {
    /// Archive automatic backups hourly, daily and monthly (off: none are made or pruned, but
    /// backups are still kept to `keep_backups`).
    pub enabled: bool,
    /// Where archives go; relative paths are under `server.data_dir`.
    pub dir: PathBuf,
    /// Archive format.
    pub compression: Compression,
    /// Compression level (zstd 1 ..= 22, gzip and zip 0 ..= 9, ignored for none).
    pub level: i32,
    /// Hourly archives kept (newest first); 0 = no hourly archives.
    pub hourly_retention: u32,
    /// Daily archives kept; 0 = no daily archives.
    pub daily_retention: u32,
    /// Monthly archives kept; 0 = no monthly archives.
    pub monthly_retention: u32,
    /// Also delete any archive older than `max_age`.
    pub prune: bool,
    /// Age beyond which `prune` deletes archives (> 0).
    #[serde(with = "duration")]
    pub max_age: Duration,
    /// Newest automatic backups kept, by save sequence (the rest are deleted once archived,
    /// or at once with archives off).
    pub keep_backups: u32,
    /// Largest archive a restore unpacks (or any read of an archive decompresses), in bytes of
    /// extracted files (declared or actual). Default: 384 MiB, ~64x a default world's save.
    pub max_restore_bytes: u64,
    /// Off-site copies of the archives in an S3-compatible bucket (off by default).
    pub remote: RemoteConfig,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        ArchiveConfig {
            enabled: true,
            dir: PathBuf::from("Archives"),
            compression: Compression::Zstd,
            level: 3,
            hourly_retention: 24,
            daily_retention: 30,
            monthly_retention: 12,
            prune: false,
            max_age: Duration::from_secs(60 * 24 * 3600),
            keep_backups: 2,
            max_restore_bytes: crate::persist::archive::bounded::DEFAULT_MAX_RESTORE_BYTES,
            remote: RemoteConfig::default(),
        }
    }
}

/// `[archive.remote]`: where archives go off-site. Credentials and the region come from the
/// standard `AWS_*` environment variables, never from here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemoteConfig {
    /// `s3://bucket/prefix`; empty (the default) = off.
    pub url: String,
    /// The store's address for S3-compatible stores (MinIO, R2…); empty = AWS.
    pub endpoint: String,
    /// Allow a plain `http://` endpoint (a test server on loopback).
    pub allow_http: bool,
    /// The wait before retrying after a failed upload (then twice as long each time).
    #[serde(with = "duration")]
    pub retry_initial: Duration,
    /// The longest wait between retries; they go on for as long as it takes.
    #[serde(with = "duration")]
    pub retry_max: Duration,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            url: String::new(),
            endpoint: String::new(),
            allow_http: false,
            retry_initial: Duration::from_secs(5),
            retry_max: Duration::from_secs(600),
        }
    }
}

/// `archive.compression`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// `.tar.zst`: fastest, smallest.
    #[default]
    Zstd,
    /// `.tar.gz`.
    Gzip,
    /// `.zip`.
    Zip,
    /// `.tar`, uncompressed.
    None,
}

impl Compression {
    /// Valid `archive.level` values for this format (`None`: any, the level is ignored).
    pub fn levels(self) -> Option<std::ops::RangeInclusive<i32>> {
        match self {
            Compression::Zstd => Some(1..=22),
            Compression::Gzip | Compression::Zip => Some(0..=9),
            Compression::None => None,
        }
    }
}

/// `[time]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeConfig {
    /// IANA time zone name (`"Europe/Berlin"`, `"UTC"`) or `"system"`.
    pub zone: Zone,
    /// Not a configuration key: when set (by tests, through the hidden `--clock-start` flag
    /// or directly), the shard's wall clock reads this instant at startup and then advances
    /// with tokio's clock, so a test's autosave schedule, save timestamps and archive periods
    /// never depend on when it runs. `None`: the system clock.
    #[serde(skip)]
    pub clock_start: Option<jiff::Timestamp>,
}

impl TimeConfig {
    /// The wall clock autosave, saves and archives read (see [`TimeConfig::clock_start`]).
    pub fn clock(&self) -> crate::persist::Clock {
        match self.clock_start {
            Some(start) => crate::persist::Clock::following_tokio(start),
            None => crate::persist::Clock::System,
        }
    }
}

/// `[metrics]`: the operators' HTTP endpoint (`/metrics`, `/healthz`, a status page).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address to serve on, e.g. `"127.0.0.1:9593"`; empty (the default) = off.
    pub listen: String,
    /// A bearer token every request but `/healthz` must carry (`Authorization: Bearer …`);
    /// empty (the default) = no authentication. Never logged; `check-config` redacts it.
    pub token: Secret,
}

/// The shortest `metrics.token` accepted, bytes.
pub const MIN_METRICS_TOKEN: usize = 16;
/// The longest `metrics.token` accepted, bytes.
pub const MAX_METRICS_TOKEN: usize = 512;

/// The address `docs/monitoring.md` shows for `metrics.listen` (9593: the game's 2593, +7000).
pub const EXAMPLE_METRICS_LISTEN: &str = "127.0.0.1:9593";

impl MetricsConfig {
    /// The address to serve on, `None` when the endpoint is off.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        // `check` refused anything that does not parse.
        self.listen.trim().parse().ok()
    }

    /// The bearer token, `None` when not set.
    pub fn token(&self) -> Option<&str> {
        self.token.expose()
    }

    fn check(&self) -> Result<(), Invalid> {
        if let Some(token) = self.token() {
            // The reasons never quote the token.
            if !(MIN_METRICS_TOKEN..=MAX_METRICS_TOKEN).contains(&token.len()) {
                return invalid(
                    "metrics.token",
                    format!(
                        "must be {MIN_METRICS_TOKEN} to {MAX_METRICS_TOKEN} characters long (it \
                         has {}): generate one with `openssl rand -hex 32`",
                        token.len()
                    ),
                );
            }
            if !token.bytes().all(is_token_byte) {
                return invalid(
                    "metrics.token",
                    "may hold only letters, digits and - . _ ~ + / = (what an HTTP bearer \
                     token is made of; the value is not shown)",
                );
            }
        }
        let text = self.listen.trim();
        if !text.is_empty() && text.parse::<SocketAddr>().is_err() {
            return invalid(
                "metrics.listen",
                format!(
                    "{text:?} is not an address and port: write one like \"{EXAMPLE_METRICS_LISTEN}\", \
                     or \"\" to turn the endpoint off"
                ),
            );
        }
        Ok(())
    }
}

/// A byte an HTTP bearer token may hold (RFC 6750's `b64token`).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
}

impl Config {
    /// Loads the layered configuration; see the module docs and `docs/configuration.md`.
    pub fn load(options: &LoadOptions) -> Result<Loaded, ConfigError> {
        load::load(options)
    }

    /// The save directory, resolved against `server.data_dir` when relative.
    pub fn save_path(&self) -> PathBuf {
        self.data_path(&self.world.save_dir)
    }

    /// `world.save_threads`, with 0 resolved to one per core but the loop's (at least 1).
    pub fn save_threads(&self) -> usize {
        match self.world.save_threads {
            0 => crate::persist::save::default_threads(),
            n => n as usize,
        }
    }

    /// The archive directory, resolved against `server.data_dir` when relative.
    pub fn archive_path(&self) -> PathBuf {
        self.data_path(&self.archive.dir)
    }

    /// Every directory the shard writes, with what it is to the shard: the data directory,
    /// the one holding `Saves/` and its temp directories, the archive directory. Each is
    /// locked at startup (`persist::lock::ShardLocks`) so that no second shard or restore
    /// shares any of them.
    pub fn written_dirs(&self) -> Vec<(PathBuf, &'static str)> {
        let save_root = self
            .save_path()
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        vec![
            (self.server.data_dir.clone(), "data directory"),
            (save_root, "save directory's parent"),
            (self.archive_path(), "archive directory"),
        ]
    }

    /// `path` under `server.data_dir` when relative, else `path` itself.
    pub fn data_path(&self, path: &Path) -> PathBuf {
        self.server.data_dir.join(path)
    }

    /// Cross-field and range checks that serde types cannot express.
    pub(crate) fn check(&self) -> Result<(), Invalid> {
        self.server.check()?;
        self.network.check()?;
        check_dir("world.save_dir", &self.world.save_dir)?;
        if self.world.save_threads > 256 {
            return invalid(
                "world.save_threads",
                "must be between 0 (automatic) and 256",
            );
        }
        let reserve = self.world.disk_reserve;
        if reserve != 0 && reserve < crate::persist::reserve::MIN_BYTES {
            return invalid(
                "world.disk_reserve",
                format!(
                    "must be 0 (no reserve) or at least {} bytes (1 MiB): a smaller reserve \
                     cannot hold a save",
                    crate::persist::reserve::MIN_BYTES
                ),
            );
        }
        self.autosave.check()?;
        self.archive.check()?;
        self.metrics.check()
    }
}

/// A value that deserialized but is out of range: the key and why.
#[derive(Debug)]
pub(crate) struct Invalid {
    pub key: &'static str,
    pub reason: String,
}

fn invalid(key: &'static str, reason: impl Into<String>) -> Result<(), Invalid> {
    Err(Invalid {
        key,
        reason: reason.into(),
    })
}

fn check_dir(key: &'static str, path: &Path) -> Result<(), Invalid> {
    if path.as_os_str().is_empty() {
        return invalid(key, "must not be empty");
    }
    Ok(())
}

impl ServerConfig {
    fn check(&self) -> Result<(), Invalid> {
        check_dir("server.data_dir", &self.data_dir)?;
        let ticks = Duration::from_millis(1)..=Duration::from_secs(1);
        if !ticks.contains(&self.tick) {
            return invalid("server.tick", "must be between 1ms and 1s");
        }
        if self.late_wake_percent > 100 {
            return invalid("server.late_wake_percent", "must be between 0 and 100");
        }
        if !self.watchdog.is_zero() && self.watchdog < Duration::from_millis(100) {
            return invalid(
                "server.watchdog",
                "must be 0 (off) or at least 100ms (an iteration that long is already a stall)",
            );
        }
        if self.spin_before_park > Duration::from_millis(10) {
            return invalid(
                "server.spin_before_park",
                "must be at most 10ms (it is a short busy-poll, not a sleep; 0 turns it off)",
            );
        }
        Ok(())
    }
}

impl NetworkConfig {
    fn check(&self) -> Result<(), Invalid> {
        for (i, addr) in self.listen.iter().enumerate() {
            if self.listen[..i].contains(addr) {
                return invalid("network.listen", format!("{addr} is listed twice"));
            }
        }
        if !(4096..=64 << 20).contains(&self.send_buffer_size) {
            return invalid(
                "network.send_buffer_size",
                "must be between 4096 and 67108864 bytes (4 KiB to 64 MiB)",
            );
        }
        if self.send_soft_limit != 0 && self.send_soft_limit >= self.send_buffer_size {
            return invalid(
                "network.send_soft_limit",
                "must be 0 (no soft limit) or less than network.send_buffer_size (the hard \
                 limit, which disconnects at once)",
            );
        }
        if self.send_soft_limit != 0
            && !(Duration::from_secs(1)..=Duration::from_secs(3600))
                .contains(&self.send_soft_timeout)
        {
            return invalid(
                "network.send_soft_timeout",
                "must be between 1s and 1h while network.send_soft_limit is set (it is checked \
                 once a second)",
            );
        }
        if !(4096..=64 << 20).contains(&self.socket_send_buffer) {
            return invalid(
                "network.socket_send_buffer",
                "must be between 4096 and 67108864 bytes (4 KiB to 64 MiB)",
            );
        }
        if !(3..=65_535).contains(&self.max_packet) {
            return invalid(
                "network.max_packet",
                "must be between 3 (a bare header) and 65535 bytes (a packet's length field \
                 is 16 bits)",
            );
        }
        if self.max_connections == 0 {
            return invalid("network.max_connections", "must be at least 1");
        }
        if self.max_per_ip == 0 {
            return invalid(
                "network.max_per_ip",
                "must be at least 1 (it caps one host's connections; no host could connect)",
            );
        }
        if self.max_per_ipv6_prefix == 0 {
            return invalid(
                "network.max_per_ipv6_prefix",
                "must be at least 1 (it caps one IPv6 prefix's connections; no IPv6 host \
                 could connect)",
            );
        }
        if !(32..=64).contains(&self.ipv6_prefix) {
            return invalid(
                "network.ipv6_prefix",
                "must be between 32 and 64 bits (a /64 is one subscriber's network, a /56 or \
                 /48 one customer's, a /32 a whole provider's)",
            );
        }
        if !(8..=32).contains(&self.ipv4_prefix) {
            return invalid("network.ipv4_prefix", "must be between 8 and 32 bits");
        }
        if self.max_prelogin == 0 || self.max_prelogin > self.max_connections {
            return invalid(
                "network.max_prelogin",
                format!(
                    "must be between 1 and network.max_connections ({}); a quarter of it is \
                     usual",
                    self.max_connections
                ),
            );
        }
        if self.outbound_budget
            < u64::from(self.send_buffer_size) + 2 * u64::from(self.socket_send_buffer)
        {
            return invalid(
                "network.outbound_budget",
                "must be at least network.send_buffer_size plus twice \
                 network.socket_send_buffer (one connection's own limit and its kernel send \
                 buffer, which Linux doubles)",
            );
        }
        if self.login_timeout.is_zero() {
            return invalid(
                "network.login_timeout",
                "must be greater than 0: without a deadline a socket that never logs in holds \
                 a slot forever",
            );
        }
        if !self.idle_timeout.is_zero() && self.login_timeout > self.idle_timeout {
            return invalid(
                "network.login_timeout",
                "must not be longer than network.idle_timeout",
            );
        }
        if self.ping_rate > 0 && self.ping_burst == 0 {
            return invalid(
                "network.ping_burst",
                "must be at least 1 while its rate is set",
            );
        }
        if self.connect_rate > 0 && self.connect_burst == 0 {
            return invalid(
                "network.connect_burst",
                "must be at least 1 while network.connect_rate is set (0 turns the limit off)",
            );
        }
        Ok(())
    }
}

impl AutosaveConfig {
    fn check(&self) -> Result<(), Invalid> {
        if self.frequency.is_zero() {
            return invalid(
                "autosave.frequency",
                "must be greater than 0 (set autosave.enabled = false to turn autosave off)",
            );
        }
        if self.frequency > crate::persist::schedule::MAX_FREQUENCY {
            return invalid(
                "autosave.frequency",
                "must be at most 24h (saves are aligned to each day's midnight)",
            );
        }
        if self.warning >= self.frequency {
            return invalid(
                "autosave.warning",
                format!(
                    "must be less than autosave.frequency ({})",
                    format_duration(self.frequency)
                ),
            );
        }
        Ok(())
    }
}

impl ArchiveConfig {
    fn check(&self) -> Result<(), Invalid> {
        check_dir("archive.dir", &self.dir)?;
        if let Some(levels) = self.compression.levels()
            && !levels.contains(&self.level)
        {
            let name = serde_name(self.compression);
            return invalid(
                "archive.level",
                format!(
                    "must be between {} and {} for compression = \"{name}\"",
                    levels.start(),
                    levels.end()
                ),
            );
        }
        if self.max_age.is_zero() {
            return invalid("archive.max_age", "must be greater than 0");
        }
        if self.max_restore_bytes < 1 << 20 {
            return invalid(
                "archive.max_restore_bytes",
                "must be at least 1048576 (1 MiB)",
            );
        }
        self.remote.check()
    }
}

impl RemoteConfig {
    fn check(&self) -> Result<(), Invalid> {
        use crate::persist::archive::remote;
        let url = self.url.trim();
        if !url.is_empty()
            && let Err(why) = remote::RemoteUrl::parse(url)
        {
            return invalid("archive.remote.url", why);
        }
        if let Err(why) = remote::check_endpoint(self.endpoint.trim(), self.allow_http) {
            return invalid("archive.remote.endpoint", why);
        }
        if self.retry_initial.is_zero() {
            return invalid("archive.remote.retry_initial", "must be greater than 0");
        }
        if self.retry_max < self.retry_initial {
            return invalid(
                "archive.remote.retry_max",
                format!(
                    "must be at least archive.remote.retry_initial ({})",
                    format_duration(self.retry_initial)
                ),
            );
        }
        Ok(())
    }
}

fn serde_name(compression: Compression) -> &'static str {
    match compression {
        Compression::Zstd => "zstd",
        Compression::Gzip => "gzip",
        Compression::Zip => "zip",
        Compression::None => "none",
    }
}
