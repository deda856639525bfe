//! What `[archive]` hands persistence: the rollup [`Plan`], the restore [`Limits`], the
//! archive [`Format`] that `archive.compression` names, and the off-site [`Remote`] of
//! `[archive.remote]`.
//!
//! Persistence defines these plain settings and never reads the configuration; this is the
//! one place that turns the operator's keys into them.
//!
//! Owns the mapping from `[archive]` keys to persistence settings. Must never validate
//! (`ArchiveConfig::check` does) nor touch the disk.

use std::path::PathBuf;

use jiff::tz::TimeZone;

use super::{ArchiveConfig, Compression, RemoteConfig};
use crate::persist::archive::remote::{Backoff, Remote, RemoteUrl};
use crate::persist::archive::restore::{DEFAULT_MAX_ENTRIES, Limits};
use crate::persist::archive::{Format, Plan};

impl ArchiveConfig {
    /// The rollup plan for archives in `dir` (`archive.dir` resolved), with periods in `zone`.
    pub fn plan(&self, dir: PathBuf, zone: TimeZone) -> Plan {
        Plan {
            dir,
            format: self.compression.into(),
            level: self.level,
            zone,
            retention: [
                self.hourly_retention,
                self.daily_retention,
                self.monthly_retention,
            ],
            keep_backups: self.keep_backups,
            max_age: self.prune.then_some(self.max_age),
            limits: self.restore_limits(),
            remote: self.remote.remote().map(|r| r.url),
        }
    }

    /// How much any archive read may unpack to (`archive.max_restore_bytes`): a restore, the
    /// startup drop-in, `restore --list`, a rollup checking an archive.
    pub fn restore_limits(&self) -> Limits {
        Limits {
            max_bytes: self.max_restore_bytes,
            max_entries: DEFAULT_MAX_ENTRIES,
        }
    }
}

impl RemoteConfig {
    /// The off-site settings, `None` when `url` is empty (off). The object store's own
    /// settings (credentials, region) come from the `AWS_*` environment when a client is
    /// built (`Store::open`).
    pub fn remote(&self) -> Option<Remote> {
        let url = RemoteUrl::parse(self.url.trim()).ok()?;
        Some(self.remote_at(url))
    }

    /// The settings for another bucket or prefix through this section's endpoint (a restore
    /// of `s3://bucket/key` names its own, whether or not `url` is set).
    pub fn remote_at(&self, url: RemoteUrl) -> Remote {
        let endpoint = self.endpoint.trim();
        Remote {
            endpoint: (!endpoint.is_empty()).then(|| endpoint.to_owned()),
            allow_http: self.allow_http,
            retry: Backoff {
                first: self.retry_initial,
                max: self.retry_max,
            },
            ..Remote::new(url)
        }
    }
}

impl From<Compression> for Format {
    fn from(compression: Compression) -> Format {
        match compression {
            Compression::Zstd => Format::TarZst,
            Compression::Gzip => Format::TarGz,
            Compression::Zip => Format::Zip,
            Compression::None => Format::Tar,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_plan_and_limits_carry_every_key() {
        let config = ArchiveConfig {
            compression: Compression::Gzip,
            level: 7,
            hourly_retention: 1,
            daily_retention: 2,
            monthly_retention: 3,
            keep_backups: 4,
            prune: true,
            max_age: Duration::from_secs(60),
            max_restore_bytes: 5 << 20,
            ..ArchiveConfig::default()
        };
        let plan = config.plan(PathBuf::from("/a"), TimeZone::UTC);
        assert_eq!(plan.dir, PathBuf::from("/a"));
        assert_eq!((plan.format, plan.level), (Format::TarGz, 7));
        assert_eq!((plan.retention, plan.keep_backups), ([1, 2, 3], 4));
        assert_eq!(plan.max_age, Some(Duration::from_secs(60)));
        assert_eq!(plan.limits, config.restore_limits());
        let unpruned = ArchiveConfig {
            prune: false,
            ..config.clone()
        };
        assert_eq!(unpruned.plan(PathBuf::new(), TimeZone::UTC).max_age, None);
        let limits = config.restore_limits();
        assert_eq!(limits.max_bytes, 5 << 20);
        assert_eq!(limits.max_entries, DEFAULT_MAX_ENTRIES);
    }

    #[test]
    fn the_remote_settings_carry_every_key_and_are_off_when_the_url_is_empty() {
        let config = ArchiveConfig::default();
        assert_eq!(config.remote.remote(), None);
        assert_eq!(config.plan(PathBuf::new(), TimeZone::UTC).remote, None);
        let config = ArchiveConfig {
            remote: RemoteConfig {
                url: "s3://bkt/shard-1/".into(),
                endpoint: "http://127.0.0.1:9000".into(),
                allow_http: true,
                retry_initial: Duration::from_millis(50),
                retry_max: Duration::from_secs(2),
            },
            ..ArchiveConfig::default()
        };
        let remote = config.remote.remote().unwrap();
        assert_eq!(remote.url.to_string(), "s3://bkt/shard-1");
        assert_eq!(remote.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert!(remote.allow_http);
        let retry = (remote.retry.first, remote.retry.max);
        assert_eq!(retry, (Duration::from_millis(50), Duration::from_secs(2)));
        let plan = config.plan(PathBuf::new(), TimeZone::UTC);
        assert_eq!(plan.remote, Some(remote.url));
    }

    #[test]
    fn each_compression_names_its_format() {
        let formats: Vec<Format> = [
            Compression::Zstd,
            Compression::Gzip,
            Compression::Zip,
            Compression::None,
        ]
        .into_iter()
        .map(Format::from)
        .collect();
        assert_eq!(formats, Format::ALL);
    }
}
