//! [`Period`]: the three kinds of archive (hourly, daily, monthly), the directory each lives
//! in, and how a moment in a time zone names its period. Rollup, retention, the uploader and
//! the bucket's keys all count in periods; this file takes nothing from any of them.
//!
//! Owns the periods' names and boundaries. Must never touch a file.

use std::fmt;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;

/// The three kinds of archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Period {
    /// One archive per clock hour (`Hourly/2026-12-03-10.tar.zst`).
    Hourly,
    /// One archive per calendar day (`Daily/2026-12-03.tar.zst`).
    Daily,
    /// One archive per calendar month (`Monthly/2026-12.tar.zst`).
    Monthly,
}

impl Period {
    /// Every kind, shortest period first: the order of a [`Plan`](super::Plan)'s `retention`.
    pub const ALL: [Period; 3] = [Period::Hourly, Period::Daily, Period::Monthly];

    /// The directory under the archive directory.
    pub fn dir_name(self) -> &'static str {
        match self {
            Period::Hourly => "Hourly",
            Period::Daily => "Daily",
            Period::Monthly => "Monthly",
        }
    }

    /// The period holding `at` in `zone`, as its archive name (`2026-12-03-10`, `2026-12-03`,
    /// `2026-12`).
    pub fn key(self, at: Timestamp, zone: &TimeZone) -> String {
        let format = match self {
            Period::Hourly => "%Y-%m-%d-%H",
            Period::Daily => "%Y-%m-%d",
            Period::Monthly => "%Y-%m",
        };
        at.to_zoned_datetime(zone.clone())
            .strftime(format)
            .to_string()
    }

    /// When the period named `key` starts, in `zone`.
    pub fn start(self, key: &str, zone: &TimeZone) -> Option<Timestamp> {
        let mut parts = key.split('-').map(|p| p.parse::<i16>().ok());
        let year = parts.next()??;
        let month = parts.next()?? as i8;
        let (day, hour) = match self {
            Period::Monthly => (1, 0),
            Period::Daily => (parts.next()?? as i8, 0),
            Period::Hourly => (parts.next()?? as i8, parts.next()?? as i8),
        };
        let civil = DateTime::new(year, month, day, hour, 0, 0, 0).ok()?;
        civil
            .to_zoned_datetime(zone.clone())
            .ok()
            .map(|z| z.timestamp())
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Period::Hourly => "hourly",
            Period::Daily => "daily",
            Period::Monthly => "monthly",
        })
    }
}
