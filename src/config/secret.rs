//! A configuration value that is a secret (`metrics.token`): read like any string, but never
//! shown — its `Debug` says only whether it is set, `check-config` prints `"(redacted)"` in its
//! place ([`super::Loaded::report`]), and a value of the wrong type is refused without being
//! quoted back.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// What `check-config` and `Debug` print instead of a secret that is set.
pub const REDACTED: &str = "(redacted)";

/// A secret string; empty = not set.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// A secret holding `value`.
    #[must_use]
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that needs it; `None` when not set.
    #[must_use]
    pub fn expose(&self) -> Option<&str> {
        (!self.0.is_empty()).then_some(self.0.as_str())
    }

    /// Not set (empty).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.is_empty() {
            true => f.write_str("Secret(unset)"),
            false => write!(f, "Secret{REDACTED}"),
        }
    }
}

/// Serialized as itself: the configuration's layers round-trip through serde. Whatever shows
/// a configuration to a person redacts it ([`super::Loaded::report`]).
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Secret, D::Error> {
        deserializer.deserialize_any(SecretVisitor)
    }
}

struct SecretVisitor;

/// Refuses a value that is not a string without quoting it (the usual serde message would, for
/// the scalars below; serde's own messages for the rest — lists, tables, 128-bit numbers —
/// name only the type).
fn not_a_string<E: de::Error>(what: &str) -> E {
    E::custom(format!(
        "found {what}, expected a string (the value is not shown)"
    ))
}

impl<'de> Visitor<'de> for SecretVisitor {
    type Value = Secret;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Secret, E> {
        Ok(Secret(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Secret, E> {
        Ok(Secret(v))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Secret, E> {
        Err(not_a_string("a boolean"))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Secret, E> {
        Err(not_a_string("a number"))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Secret, E> {
        Err(not_a_string("a number"))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Secret, E> {
        Err(not_a_string("a number"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let secret = Secret::new("hunter2-hunter2-hunter2");
        assert_eq!(format!("{secret:?}"), "Secret(redacted)");
        assert_eq!(format!("{:?}", Secret::default()), "Secret(unset)");
        assert_eq!(secret.expose(), Some("hunter2-hunter2-hunter2"));
        assert_eq!(Secret::default().expose(), None);
    }
}
