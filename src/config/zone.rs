//! `time.zone`: an IANA time zone name or `"system"`, checked against jiff's database when
//! the configuration is loaded.

use std::fmt;

use jiff::tz::TimeZone;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// The name that selects the host's own time zone.
pub(crate) const SYSTEM: &str = "system";

/// A validated time zone: the configured name and the zone it resolved to.
#[derive(Clone)]
pub struct Zone {
    name: String,
    zone: TimeZone,
}

impl Zone {
    /// The host's time zone (`"system"`; UTC if the host's cannot be determined).
    pub fn system() -> Zone {
        Zone {
            name: SYSTEM.to_owned(),
            zone: TimeZone::system(),
        }
    }

    /// `"system"` or an IANA name known to jiff's time zone database.
    pub fn parse(name: &str) -> Result<Zone, String> {
        if name == SYSTEM {
            return Ok(Zone::system());
        }
        match TimeZone::get(name) {
            Ok(zone) => Ok(Zone {
                name: name.to_owned(),
                zone,
            }),
            Err(e) => Err(format!(
                "unknown time zone ({e}); expected an IANA name such as \"Europe/Berlin\" \
                 or \"UTC\", or \"system\""
            )),
        }
    }

    /// The name as configured.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The resolved zone.
    pub fn time_zone(&self) -> &TimeZone {
        &self.zone
    }
}

impl Default for Zone {
    /// UTC: the same schedule on every host, whatever its own zone.
    fn default() -> Self {
        Zone::parse("UTC").expect("jiff always knows UTC")
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Zone").field(&self.name).finish()
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl Serialize for Zone {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.name)
    }
}

impl<'de> Deserialize<'de> for Zone {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Zone, D::Error> {
        deserializer.deserialize_str(ZoneVisitor)
    }
}

struct ZoneVisitor;

impl Visitor<'_> for ZoneVisitor {
    type Value = Zone;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an IANA time zone name such as \"Europe/Berlin\", or \"system\"")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Zone, E> {
        Zone::parse(name).map_err(E::custom)
    }
}
