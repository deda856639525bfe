//! Durations as humantime strings (`"2ms"`, `"1h 30m"`): parsed with humantime, written back
//! in days/h/m/s/ms/us/ns (never months or years, whose lengths humantime approximates).

use std::fmt;
use std::time::Duration;

use serde::Serializer;
use serde::de::{self, Deserializer, Visitor};

const HINT: &str = "write a duration with a unit, such as \"0ms\", \"8ms\", \"1s\" or \"1h 30m\"";

/// Formats `d` so that humantime parses it back exactly: `"0s"`, `"8ms"`, `"1h 30m"`, `"60d"`.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_owned();
    }
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    let parts = [
        (secs / 86_400, "d"),
        (secs / 3600 % 24, "h"),
        (secs / 60 % 60, "m"),
        (secs % 60, "s"),
        (u64::from(nanos / 1_000_000), "ms"),
        (u64::from(nanos / 1000 % 1000), "us"),
        (u64::from(nanos % 1000), "ns"),
    ];
    let words: Vec<String> = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    words.join(" ")
}

pub(crate) fn serialize<S: Serializer>(d: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format_duration(*d))
}

pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    deserializer.deserialize_any(DurationVisitor)
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(HINT)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        let text = text.trim();
        if let Ok(n) = text.parse::<u64>() {
            return self.visit_u64(n);
        }
        humantime::parse_duration(text)
            .map_err(|e| E::custom(format!("not a duration ({e}); {HINT}")))
    }

    /// A bare `0` is unambiguous; any other bare number lacks its unit.
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Duration, E> {
        if n == 0 {
            return Ok(Duration::ZERO);
        }
        Err(E::custom(format!("a number without a unit; {HINT}")))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Duration, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::custom(format!("a negative number; {HINT}"))),
        }
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Duration, E> {
        Err(E::custom(format!("a number without a unit; {HINT}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_round_trip_through_humantime() {
        for d in [
            Duration::ZERO,
            Duration::from_millis(8),
            Duration::from_secs(1),
            Duration::from_secs(5400),
            Duration::from_secs(60 * 86_400),
            Duration::new(3661, 2_003_004),
        ] {
            let text = format_duration(d);
            assert_eq!(humantime::parse_duration(&text).ok(), Some(d), "{text}");
        }
        assert_eq!(format_duration(Duration::from_secs(60 * 86_400)), "60d");
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h 30m");
    }
}
