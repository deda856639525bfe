//! When autosaves happen: at multiples of the frequency since local midnight.
//!
//! A shard saving every hour saves on the hour, however long ago it booted, so operators
//! (and players) can predict it. "Since midnight" counts real elapsed time from the start of
//! the local day in `time.zone`, and every day starts over at its midnight, so a frequency
//! that does not divide 24 hours (7h: 00:00, 07:00, 14:00, 21:00) and a day of 23 or 25
//! hours (daylight saving) still give a fixed, predictable set of times each day.
//!
//! Owns the arithmetic. Must never sleep, read the clock or save (`autosave` does).

use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

/// The longest `autosave.frequency`: schedules are per day.
pub(crate) const MAX_FREQUENCY: Duration = Duration::from_secs(24 * 3600);

/// The first save time strictly after `now`. `every` is clamped to 1 s ..= 24 h.
pub(crate) fn next_save(now: Timestamp, every: Duration, zone: &TimeZone) -> Timestamp {
    let every = every.clamp(Duration::from_secs(1), MAX_FREQUENCY);
    let every = SignedDuration::try_from(every).expect("at most a day");
    let today = now.to_zoned_datetime(zone.clone());
    let midnight = today
        .start_of_day()
        .expect("every day has a start")
        .timestamp();
    let tomorrow = today
        .tomorrow()
        .and_then(|d| d.start_of_day())
        .map(|z| z.timestamp())
        .unwrap_or(Timestamp::MAX);
    let elapsed = now.duration_since(midnight);
    let done = elapsed.as_nanos() / every.as_nanos();
    let next = midnight
        .checked_add(every * ((done + 1) as i32))
        .unwrap_or(Timestamp::MAX);
    next.min(tomorrow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn an_hourly_save_lands_on_the_hour_whenever_the_shard_started() {
        let utc = TimeZone::UTC;
        for start in [
            "2026-12-03T10:00:00Z",
            "2026-12-03T10:17:42Z",
            "2026-12-03T10:59:59.9Z",
        ] {
            assert_eq!(next_save(at(start), HOUR, &utc), at("2026-12-03T11:00:00Z"));
        }
        assert_eq!(
            next_save(at("2026-12-03T23:30:00Z"), HOUR, &utc),
            at("2026-12-04T00:00:00Z")
        );
    }

    #[test]
    fn a_frequency_that_does_not_divide_the_day_restarts_at_midnight() {
        let utc = TimeZone::UTC;
        let seven = 7 * HOUR;
        assert_eq!(
            next_save(at("2026-12-03T20:00:00Z"), seven, &utc),
            at("2026-12-03T21:00:00Z")
        );
        assert_eq!(
            next_save(at("2026-12-03T21:00:00Z"), seven, &utc),
            at("2026-12-04T00:00:00Z")
        );
    }

    #[test]
    fn alignment_follows_the_configured_zone() {
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        // 10:20 UTC is 11:20 in Berlin in winter: the next 30-minute mark is 11:30 local.
        assert_eq!(
            next_save(at("2026-12-03T10:20:00Z"), HOUR / 2, &berlin),
            at("2026-12-03T10:30:00Z")
        );
        // 6 h in Kolkata (UTC+5:30) is at 00:00, 06:00, ... local, i.e. :30 past in UTC.
        let kolkata = TimeZone::get("Asia/Kolkata").unwrap();
        assert_eq!(
            next_save(at("2026-12-03T01:00:00Z"), 6 * HOUR, &kolkata),
            at("2026-12-03T06:30:00Z")
        );
    }

    #[test]
    fn a_daylight_saving_day_still_starts_over_at_midnight() {
        let berlin = TimeZone::get("Europe/Berlin").unwrap();
        // 2026-03-29 has 23 hours in Berlin: midnight is 23:00 UTC the day before.
        assert_eq!(
            next_save(at("2026-03-29T21:30:00Z"), 2 * HOUR, &berlin),
            at("2026-03-29T22:00:00Z")
        );
        // ...and the new day counts from there: 02:00 local on the 30th is 00:00 UTC.
        assert_eq!(
            next_save(at("2026-03-29T22:00:00Z"), 2 * HOUR, &berlin),
            at("2026-03-30T00:00:00Z")
        );
    }
}
