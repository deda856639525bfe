//! Game-owned configuration sections: a game built on the engine declares its own typed table
//! (`[demo]`, `[lantern]`), read through the same layers as the engine's keys.
//!
//! Owns the [`Section`] trait a game implements, its type-erased declaration ([`SectionSpec`],
//! carried by [`LoadOptions::sections`](super::LoadOptions::sections)), the checks on a
//! declaration (name, collisions, renames), turning a section into its defaults and back out
//! of the merged layers, and the loaded values kept inside [`Config`] (never serialized with
//! it) that [`Config::section`] reads.
//!
//! It must never know any particular game's section, read a file or the environment itself,
//! or load a section any other way than the engine's keys: the layers, the environment
//! typing, the provenance and the errors are `load.rs`'s and `report.rs`'s, shared by both.

use std::any::{TypeId, type_name};
use std::collections::BTreeMap;
use std::fmt;

use figment::Figment;
use figment::error::Kind;
use figment::value::{Num, Value};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Config;
use super::error::{ConfigError, SectionFault};

/// A game's own configuration table.
///
/// Implement it on a struct with `#[serde(default, deny_unknown_fields)]`, so that a key the
/// file or environment leaves out takes its default and a misspelt key is an error (exactly
/// as for the engine's sections), push [`SectionSpec::of::<S>()`](SectionSpec::of) onto
/// [`LoadOptions::sections`](super::LoadOptions::sections) before [`Config::load`], and read
/// it with [`Config::section`]:
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use shardloop::config::{Config, ConfigFile, LoadOptions, Section, SectionSpec};
///
/// #[derive(Debug, Clone, Serialize, Deserialize)]
/// #[serde(default, deny_unknown_fields)]
/// struct Lantern {
///     /// Light radius, in tiles.
///     radius: u32,
/// }
///
/// impl Default for Lantern {
///     fn default() -> Self {
///         Lantern { radius: 5 }
///     }
/// }
///
/// impl Section for Lantern {
///     const NAME: &'static str = "lantern";
///
///     fn check(&self) -> Result<(), (&'static str, String)> {
///         if self.radius > 20 {
///             return Err(("radius", "must be at most 20".to_owned()));
///         }
///         Ok(())
///     }
/// }
///
/// let options = LoadOptions {
///     file: ConfigFile::None,
///     env: vec![("SHARD_LANTERN__RADIUS".to_owned(), "7".to_owned())],
///     sections: vec![SectionSpec::of::<Lantern>()],
///     ..LoadOptions::default()
/// };
/// let config = Config::load(&options).expect("valid").config;
/// assert_eq!(config.section::<Lantern>().radius, 7);
/// ```
pub trait Section:
    Serialize + DeserializeOwned + Default + Clone + fmt::Debug + Send + Sync + 'static
{
    /// The table's name: `[NAME]` in the file, `SHARD_<NAME>__<KEY>` in the environment.
    /// Lowercase ASCII letters, digits and `_`: it starts with a letter, and `_` is never
    /// doubled nor last (else the variable's name would not split back into section and
    /// key). Neither an engine section's name nor another declared section's.
    const NAME: &'static str;

    /// Keys this section took over from elsewhere: (old dotted key, key in this section),
    /// e.g. `("network.move_rate", "move_rate")`. Setting an old key in the file, the
    /// environment or on the command line is a [`ConfigError::Renamed`] naming the old key,
    /// where it was set, and the new dotted key ("network.move_rate (config/shard.toml line
    /// 40) moved to demo.move_rate: rename it"); an old key only the built-in defaults set is
    /// fine. Defaults to none.
    const RENAMED: &'static [(&'static str, &'static str)] = &[];

    /// Checks the types alone cannot make (ranges, one key against another).
    /// `Err((key within this section, reason))` becomes [`ConfigError::Invalid`] for
    /// `NAME.key` with its value and where it was set. Defaults to none.
    fn check(&self) -> Result<(), (&'static str, String)> {
        Ok(())
    }
}

/// A declared section, type-erased, as [`LoadOptions`](super::LoadOptions) carries it:
/// `SectionSpec::of::<Lantern>()`.
#[derive(Clone)]
pub struct SectionSpec {
    name: &'static str,
    renamed: &'static [(&'static str, &'static str)],
    type_id: TypeId,
    type_name: &'static str,
    defaults: fn() -> Option<Value>,
    extract: fn(&Figment) -> Result<Value, Failure>,
}

impl SectionSpec {
    /// The declaration of section `S`.
    pub fn of<S: Section>() -> SectionSpec {
        SectionSpec {
            name: S::NAME,
            renamed: S::RENAMED,
            type_id: TypeId::of::<S>(),
            type_name: type_name::<S>(),
            defaults: || Value::serialize(S::default()).ok(),
            extract: extract::<S>,
        }
    }

    /// The section's table name, `S::NAME`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// `S::RENAMED`.
    pub(super) fn renamed(&self) -> &'static [(&'static str, &'static str)] {
        self.renamed
    }

    /// `S::default()` as a table, for the defaults layer.
    pub(super) fn defaults(&self) -> Result<Value, ConfigError> {
        match (self.defaults)() {
            Some(table @ Value::Dict(..)) => Ok(table),
            _ => Err(self.fault(SectionFault::NotATable)),
        }
    }

    /// The section as loaded from the merged layers (`NAME` and the keys under it), checked,
    /// and serialized back.
    pub(super) fn extract(&self, figment: &Figment) -> Result<Value, Failure> {
        (self.extract)(figment)
    }

    fn fault(&self, fault: SectionFault) -> ConfigError {
        ConfigError::Section {
            name: self.name.to_owned(),
            fault,
        }
    }
}

impl fmt::Debug for SectionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SectionSpec")
            .field("name", &self.name)
            .field("type", &self.type_name)
            .field("renamed", &self.renamed)
            .finish()
    }
}

/// Why a declared section did not load, before provenance turns it into a [`ConfigError`].
#[derive(Debug)]
pub(super) enum Failure {
    /// A serde error, its path from the top (`["lantern", "tokn"]`); boxed, as figment's
    /// error is large.
    Figment(Box<figment::Error>),
    /// `Section::check` refused the dotted `key` (`lantern.radius`).
    Check { key: String, reason: String },
    /// The loaded value does not serialize back to a table.
    Fault(ConfigError),
}

fn extract<S: Section>(figment: &Figment) -> Result<Value, Failure> {
    // A section is a table: `lantern = 5` must not read as "all defaults" (focusing on a
    // value that is no table yields an empty one).
    match figment.find_value(S::NAME) {
        Ok(Value::Dict(..)) => {}
        Ok(other) => {
            let kind = Kind::InvalidType(other.to_actual(), "a table of keys".to_owned());
            let error = figment::Error::from(kind).with_path(S::NAME);
            return Err(Failure::Figment(Box::new(error)));
        }
        Err(e) => return Err(Failure::Figment(Box::new(e))),
    }
    // `extract_inner` would append NAME to the error's path (figment 0.10); focusing first
    // gives the path within the section, and NAME goes in front.
    let section: S = figment.focus(S::NAME).extract().map_err(|mut e| {
        e.path.insert(0, S::NAME.to_owned());
        Failure::Figment(Box::new(e))
    })?;
    section.check().map_err(|(key, reason)| Failure::Check {
        key: format!("{}.{key}", S::NAME),
        reason,
    })?;
    match Value::serialize(&section) {
        Ok(table @ Value::Dict(..)) => Ok(table),
        _ => Err(Failure::Fault(ConfigError::Section {
            name: S::NAME.to_owned(),
            fault: SectionFault::NotATable,
        })),
    }
}

/// Refuses a declaration that cannot work: a bad name, a name the engine or another declared
/// section has (`engine`: the engine's section names), a malformed rename.
pub(super) fn check_declared(specs: &[SectionSpec], engine: &[String]) -> Result<(), ConfigError> {
    for (i, spec) in specs.iter().enumerate() {
        if !valid_name(spec.name) {
            return Err(spec.fault(SectionFault::BadName));
        }
        if engine.iter().any(|name| name == spec.name) {
            return Err(spec.fault(SectionFault::EngineSection));
        }
        if specs[..i].iter().any(|other| other.name == spec.name) {
            return Err(spec.fault(SectionFault::DeclaredTwice));
        }
        for &(old, new) in spec.renamed {
            let itself = old
                .strip_prefix(spec.name)
                .and_then(|rest| rest.strip_prefix('.'))
                == Some(new);
            if !valid_key(old) || !valid_key(new) || itself {
                return Err(spec.fault(SectionFault::BadRename {
                    old: old.to_owned(),
                    new: new.to_owned(),
                }));
            }
        }
    }
    Ok(())
}

/// `[a-z][a-z0-9]*(_[a-z0-9]+)*`.
fn valid_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.contains("__")
        && !name.ends_with('_')
}

/// A dotted key: one or more non-empty parts.
fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.split('.').all(|part| !part.is_empty())
}

/// The declared sections' loaded values, inside [`Config`] (`#[serde(skip)]`: `Config`'s
/// serialized form, and so the engine's part of the report, never holds them).
///
/// Only a section whose value differs from its default is kept: [`Config::section`] gives
/// the default for a section not kept, so two configurations are equal exactly when every
/// section reads the same from both (a configuration loaded with all sections at their
/// defaults equals `Config::default()`).
#[derive(Clone, Default)]
pub(super) struct Sections(BTreeMap<&'static str, Stored>);

/// One section's value, and which type it was loaded as.
#[derive(Clone)]
struct Stored {
    type_id: TypeId,
    value: Value,
}

impl Sections {
    /// Keeps `value`, section `spec` as loaded, unless it is the section's default.
    pub(super) fn keep(&mut self, spec: &SectionSpec, value: Value) {
        if (spec.defaults)().is_some_and(|default| same(&default, &value)) {
            self.0.remove(spec.name);
            return;
        }
        let stored = Stored {
            type_id: spec.type_id,
            value,
        };
        self.0.insert(spec.name, stored);
    }

    /// Section `S` as kept, if it was loaded as `S` and differs from its default.
    fn get<S: Section>(&self) -> Option<S> {
        let stored = self.0.get(S::NAME)?;
        (stored.type_id == TypeId::of::<S>())
            .then(|| stored.value.deserialize().ok())
            .flatten()
    }
}

impl fmt::Debug for Sections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(name, stored)| (name, &stored.value)))
            .finish()
    }
}

impl PartialEq for Sections {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|((a, x), (b, y))| {
                a == b && x.type_id == y.type_id && same(&x.value, &y.value)
            })
    }
}

/// [`same`] is reflexive (floats compare by their bits), so equality is an equivalence.
impl Eq for Sections {}

/// Structural equality of two values, ignoring figment's tags; floats are equal when their
/// bits are (NaN equals itself), so that [`Sections`] can be `Eq`.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Num(_, x), Value::Num(_, y)) => match (float(*x), float(*y)) {
            (Some(x), Some(y)) => x.to_bits() == y.to_bits(),
            (None, None) => x == y,
            _ => false,
        },
        (Value::Dict(_, x), Value::Dict(_, y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((k, v), (l, w))| k == l && same(v, w))
        }
        (Value::Array(_, x), Value::Array(_, y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w))
        }
        _ => a == b,
    }
}

fn float(n: Num) -> Option<f64> {
    match n {
        Num::F32(f) => Some(f64::from(f)),
        Num::F64(f) => Some(f),
        _ => None,
    }
}

impl Config {
    /// The section `S` as loaded (defaults < file < environment < flags, checked), or
    /// `S::default()` when this configuration was not loaded with `S` declared (a `Config`
    /// built by hand in a test, or `Config::default()`).
    pub fn section<S: Section>(&self) -> S {
        self.sections.get::<S>().unwrap_or_default()
    }

    /// Sets section `S` to `value`, as if it had been loaded so — for a test or a tool that
    /// builds its `Config` by hand. `value` is not checked (`Section::check` runs when a
    /// configuration is loaded); a value that cannot be written as a table is ignored.
    pub fn set_section<S: Section>(&mut self, value: S) {
        if let Ok(table) = Value::serialize(&value) {
            self.sections.keep(&SectionSpec::of::<S>(), table);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_set_by_hand_reads_back_and_its_default_leaves_the_config_default() {
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(default)]
        struct Glow {
            lumens: u32,
        }
        impl Default for Glow {
            fn default() -> Glow {
                Glow { lumens: 40 }
            }
        }
        impl Section for Glow {
            const NAME: &'static str = "glow";
        }
        let mut config = Config::default();
        config.set_section(Glow { lumens: 90 });
        assert_eq!(config.section::<Glow>(), Glow { lumens: 90 });
        assert_ne!(config, Config::default());
        config.set_section(Glow::default());
        assert_eq!(config.section::<Glow>(), Glow::default());
    }

    #[test]
    fn names_split_back_out_of_variables() {
        for name in ["lantern", "demo", "a", "game2", "my_game", "x1_y2"] {
            assert!(valid_name(name), "{name}");
        }
        for name in [
            "",
            "Lantern",
            "_x",
            "x_",
            "my__game",
            "2d",
            "lan-tern",
            "lantern.x",
        ] {
            assert!(!valid_name(name), "{name}");
        }
    }

    #[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Selfish {
        key: u32,
    }

    impl Section for Selfish {
        const NAME: &'static str = "selfish";
        const RENAMED: &'static [(&'static str, &'static str)] = &[("selfish.key", "key")];
    }

    #[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Gappy {
        key: u32,
    }

    impl Section for Gappy {
        const NAME: &'static str = "gappy";
        const RENAMED: &'static [(&'static str, &'static str)] = &[("network..x", "key")];
    }

    #[test]
    fn malformed_renames_are_refused() {
        for spec in [SectionSpec::of::<Selfish>(), SectionSpec::of::<Gappy>()] {
            let err = check_declared(std::slice::from_ref(&spec), &[]).expect_err("refused");
            assert!(
                matches!(
                    err,
                    ConfigError::Section {
                        fault: SectionFault::BadRename { .. },
                        ..
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn equality_is_reflexive_even_for_nan() {
        let nan = Value::from(f64::NAN);
        assert!(same(&nan, &nan));
        assert!(!same(&Value::from(1.0), &Value::from(2.0)));
        assert!(same(&Value::from(3u32), &Value::from(3u32)));
        let a = Value::serialize(vec![1u8, 2]).expect("serializes");
        let b = Value::serialize(vec![1u8, 3]).expect("serializes");
        assert!(same(&a, &a) && !same(&a, &b));
    }
}
