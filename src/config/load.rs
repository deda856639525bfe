//! The layers (defaults < file < `SHARD_` environment < command line), built from the load
//! options and merged with figment, for the engine's sections and the game's declared ones
//! alike (`section.rs`). A layer and the config file are in `layer.rs`; which layer supplied
//! what is kept in `report.rs`.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use figment::value::{Dict, Value};
use figment::{Figment, Metadata};

use super::error::{ConfigError, ENV_PREFIX, Origin};
use super::layer::{CLI_NAME, ENV_NAME, FileSource, Layer};
use super::report::{Loaded, Provenance};
use super::section::{self, Failure, SectionSpec};
use super::{Config, format_duration};

/// The config file used when none is named: optional (missing means built-in defaults).
pub const DEFAULT_CONFIG_PATH: &str = "config/shard.toml";

const DEFAULTS_NAME: &str = "built-in defaults";

/// Which config file to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigFile {
    /// Read it if it exists; a missing file means built-in defaults.
    Optional(PathBuf),
    /// Named explicitly (`--config PATH`): a missing file is an error.
    Required(PathBuf),
    /// Read no file.
    None,
}

impl Default for ConfigFile {
    /// [`DEFAULT_CONFIG_PATH`], optional.
    fn default() -> Self {
        ConfigFile::Optional(PathBuf::from(DEFAULT_CONFIG_PATH))
    }
}

/// Values given on the command line; they win over every other layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--idle-wait` → `server.idle_wait`.
    pub idle_wait: Option<Duration>,
    /// `--listen` (repeatable) → `network.listen`; empty = no override.
    pub listen: Vec<SocketAddr>,
    /// `--data-dir` → `server.data_dir`.
    pub data_dir: Option<PathBuf>,
}

/// Everything [`Config::load`] reads. Tests build it by hand; the binary uses
/// [`super::ConfigArgs::load_options`].
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// The config file.
    pub file: ConfigFile,
    /// Environment variables as (name, value); only those starting with [`ENV_PREFIX`] are
    /// used, so passing the whole environment is fine. See [`process_env`].
    pub env: Vec<(String, String)>,
    /// Command-line values.
    pub overrides: Overrides,
    /// The game's own sections ([`SectionSpec::of`]), read through the same layers: each
    /// one's defaults under its name, then `[NAME]` in the file, then `SHARD_<NAME>__<KEY>`.
    /// Empty: the engine's sections only, and a `[NAME]` table is an unknown key.
    pub sections: Vec<SectionSpec>,
}

/// The process's `SHARD_*` variables. A non-UTF-8 name or value is an error only in a
/// variable that is, or may be, configuration: one of the engine's sections, or any name
/// shaped `SHARD_<NAME>__<KEY>` (a game's sections are declared after the environment is
/// read, so any such name may be one). Any other `SHARD_*` variable is passed on (lossily)
/// to be ignored.
pub fn process_env() -> Result<Vec<(String, String)>, ConfigError> {
    let sections = Known::engine();
    let mut vars = Vec::new();
    for (name, value) in std::env::vars_os() {
        if !name.as_encoded_bytes().starts_with(ENV_PREFIX.as_bytes()) {
            continue;
        }
        let lossy = name.to_string_lossy().into_owned();
        match (name.into_string(), value.into_string()) {
            (Ok(name), Ok(value)) => vars.push((name, value)),
            _ if matches!(classify(&lossy, &sections), EnvName::Ignored)
                && !game_shaped(&lossy) =>
            {
                vars.push((lossy, String::new()));
            }
            _ => {
                return Err(ConfigError::Env {
                    var: lossy,
                    reason: "not valid UTF-8".to_owned(),
                });
            }
        }
    }
    Ok(vars)
}

/// What a `SHARD_*` variable's name makes it.
#[derive(Debug, PartialEq, Eq)]
enum EnvName {
    /// `SHARD_<SECTION>__<KEY>` for a known section: the dotted key's parts, lowercase.
    Config(Vec<String>),
    /// A known section, but no key in the form `__KEY` (`SHARD_SERVER__`, `SHARD_SERVER____X`).
    Malformed,
    /// Not configuration: no `__` at all, or an unknown first part. Orchestrators inject
    /// such names (a Kubernetes Service named `shard` gives every pod `SHARD_PORT` and
    /// `SHARD_SERVICE_HOST`), so they are listed in one warning, never refused.
    Ignored,
}

/// What a `SHARD_*` name can be configuration of.
struct Known {
    /// The sections: the top-level tables of the defaults (the engine's and the declared).
    sections: Vec<String>,
    /// Keys declared sections took over (`Section::RENAMED`), as paths: set under their old
    /// names they are configuration (a rename error), whatever their first part.
    old_keys: Vec<Vec<String>>,
}

impl Known {
    /// The engine's sections, no game section.
    fn engine() -> Known {
        Known::new(&defaults_layer().dict, &[])
    }

    /// The sections of `defaults`, and the old keys of the `declared` sections.
    fn new(defaults: &Dict, declared: &[SectionSpec]) -> Known {
        let old_keys = declared
            .iter()
            .flat_map(SectionSpec::renamed)
            .map(|(old, _)| old.split('.').map(str::to_owned).collect())
            .collect();
        Known {
            sections: sections(defaults),
            old_keys,
        }
    }
}

/// `SHARD_<NAME>__<KEY>` with a name a game section could have: a first part of ASCII
/// letters, digits and `_` (any case: variables are upper case), a non-empty rest.
fn game_shaped(var: &str) -> bool {
    let Some((name, key)) = var
        .strip_prefix(ENV_PREFIX)
        .and_then(|rest| rest.split_once("__"))
    else {
        return false;
    };
    !name.is_empty()
        && !key.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn classify(var: &str, known: &Known) -> EnvName {
    let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
        return EnvName::Ignored;
    };
    let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
    if known.old_keys.contains(&path) {
        return EnvName::Config(path);
    }
    if path.len() < 2 || !known.sections.contains(&path[0]) {
        return EnvName::Ignored;
    }
    if path.iter().any(String::is_empty) {
        return EnvName::Malformed;
    }
    EnvName::Config(path)
}

/// The configuration's sections: the top-level tables of the defaults.
fn sections(defaults: &Dict) -> Vec<String> {
    defaults
        .iter()
        .filter(|(_, value)| value.as_dict().is_some())
        .map(|(name, _)| name.clone())
        .collect()
}

pub(crate) fn load(options: &LoadOptions) -> Result<Loaded, ConfigError> {
    let declared = &options.sections;
    let mut defaults = defaults_layer();
    section::check_declared(declared, &sections(&defaults.dict))?;
    for spec in declared {
        defaults
            .dict
            .insert(spec.name().to_owned(), spec.defaults()?);
    }
    let file = read_file(&options.file)?;
    let known = Known::new(&defaults.dict, declared);
    let env = env_layer(&options.env, &defaults.dict, &known)?;
    let cli = cli_layer(&options.overrides)?;
    let mut layers = vec![defaults];
    layers.extend(file.as_ref().map(FileSource::layer));
    layers.extend([env.keyed.layer, cli.layer]);
    // Every value, for the sections, the renames and the report; and the engine's alone, for
    // `Config`, which refuses any table it does not have.
    let names: Vec<&str> = declared.iter().map(SectionSpec::name).collect();
    let figment = merged(&layers, &[]);
    let engine = merged(&layers, &names);
    let provenance = Provenance {
        file,
        env: env.keyed.keys,
        ignored_env: env.ignored,
        cli: cli.keys,
        declared: names,
    };
    check_renamed(declared, &figment, &provenance)?;
    let mut config: Config = engine
        .extract()
        .map_err(|e| provenance.figment_error(&engine, e))?;
    config.check().map_err(|e| provenance.invalid(&engine, e))?;
    let mut sections = Vec::new();
    for spec in declared {
        let value = spec.extract(&figment).map_err(|failure| match failure {
            Failure::Figment(e) => provenance.figment_error(&figment, *e),
            Failure::Check { key, reason } => provenance.invalid_at(&figment, &key, reason),
            Failure::Fault(e) => e,
        })?;
        config.sections.keep(spec, value.clone());
        sections.push((spec.name(), value));
    }
    Ok(Loaded {
        config,
        figment,
        provenance,
        sections,
    })
}

/// The layers merged in order, without the top-level tables named in `without`.
fn merged(layers: &[Layer], without: &[&str]) -> Figment {
    layers.iter().fold(Figment::new(), |figment, layer| {
        let mut layer = layer.clone();
        layer
            .dict
            .retain(|name, _| !without.contains(&name.as_str()));
        figment.merge(layer)
    })
}

/// An old key of a declared section (`Section::RENAMED`) set anywhere but in the built-in
/// defaults is an error naming where, and the key it is now.
fn check_renamed(
    declared: &[SectionSpec],
    figment: &Figment,
    provenance: &Provenance,
) -> Result<(), ConfigError> {
    for spec in declared {
        for (old, new) in spec.renamed() {
            if !figment.contains(old) {
                continue;
            }
            let origin = provenance.origin(figment, old);
            if origin != Origin::Default {
                return Err(ConfigError::Renamed {
                    key: (*old).to_owned(),
                    origin,
                    new_key: format!("{}.{new}", spec.name()),
                });
            }
        }
    }
    Ok(())
}

fn defaults_layer() -> Layer {
    let dict = match Value::serialize(Config::default()) {
        Ok(Value::Dict(_, dict)) => dict,
        _ => Dict::new(), // unreachable: Config serializes to a table
    };
    Layer {
        metadata: Metadata::named(DEFAULTS_NAME),
        dict,
    }
}

/// Reads the config file `file` names: `None` when there is none, or an optional one is
/// missing; an error naming the path for a required one that is missing, an unreadable one
/// or bad TOML.
fn read_file(file: &ConfigFile) -> Result<Option<FileSource>, ConfigError> {
    let (path, required) = match file {
        ConfigFile::Optional(path) => (path, false),
        ConfigFile::Required(path) => (path, true),
        ConfigFile::None => return Ok(None),
    };
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !required => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ConfigError::MissingFile { path: path.clone() });
        }
        Err(error) => {
            return Err(ConfigError::Read {
                path: path.clone(),
                error,
            });
        }
    };
    FileSource::parse(path.clone(), text).map(Some)
}

/// A layer plus, for each dotted key it sets, the variable or flag that set it.
struct Keyed {
    layer: Layer,
    keys: BTreeMap<String, String>,
}

/// The environment layer, and the `SHARD_*` names that are not configuration.
struct EnvLayer {
    keyed: Keyed,
    /// Sorted, for one stable warning.
    ignored: Vec<String>,
}

fn env_layer(
    vars: &[(String, String)],
    defaults: &Dict,
    known: &Known,
) -> Result<EnvLayer, ConfigError> {
    let mut dict = Dict::new();
    let mut keys = BTreeMap::new();
    let mut ignored = Vec::new();
    for (var, text) in vars {
        if !var.starts_with(ENV_PREFIX) {
            continue;
        }
        let path = match classify(var, known) {
            EnvName::Config(path) => path,
            EnvName::Ignored => {
                ignored.push(var.clone());
                continue;
            }
            EnvName::Malformed => {
                return Err(ConfigError::Env {
                    var: var.clone(),
                    reason: "not a config key: use SHARD_<SECTION>__<KEY>, e.g. \
                             SHARD_SERVER__IDLE_WAIT"
                        .to_owned(),
                });
            }
        };
        let value = env_value(text, find(defaults, &path));
        insert(&mut dict, &path, value);
        keys.insert(path.join("."), var.clone());
    }
    ignored.sort();
    ignored.dedup();
    let layer = Layer {
        metadata: Metadata::named(ENV_NAME),
        dict,
    };
    Ok(EnvLayer {
        keyed: Keyed { layer, keys },
        ignored,
    })
}

/// An environment value, typed by the key's default: text for string keys (so that
/// `SHARD_SERVER__DATA_DIR=2024` stays a path), a list for list keys (`[..]` or
/// comma-separated), else parsed as figment's `Env` does (numbers, booleans).
fn env_value(text: &str, default: Option<&Value>) -> Value {
    let parsed = || -> Value {
        match text.parse() {
            Ok(value) => value,
            Err(never) => match never {},
        }
    };
    match default {
        Some(Value::String(..)) => Value::from(text.to_owned()),
        Some(Value::Array(..)) => match parsed() {
            list @ Value::Array(..) => list,
            _ => text
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| Value::from(item.to_owned()))
                .collect::<Vec<_>>()
                .into(),
        },
        _ => parsed(),
    }
}

/// The value at `path` in `dict`, if any.
fn find<'a>(dict: &'a Dict, path: &[String]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let value = dict.get(first)?;
    match (rest.is_empty(), value) {
        (true, value) => Some(value),
        (false, Value::Dict(_, inner)) => find(inner, rest),
        (false, _) => None,
    }
}

fn cli_layer(overrides: &Overrides) -> Result<Keyed, ConfigError> {
    let mut dict = Dict::new();
    let mut keys = BTreeMap::new();
    let mut set = |key: &str, flag: &str, value: Value| {
        let path: Vec<String> = key.split('.').map(str::to_owned).collect();
        insert(&mut dict, &path, value);
        keys.insert(key.to_owned(), flag.to_owned());
    };
    if let Some(idle_wait) = overrides.idle_wait {
        set(
            "server.idle_wait",
            "--idle-wait",
            format_duration(idle_wait).into(),
        );
    }
    if !overrides.listen.is_empty() {
        let addrs: Vec<Value> = overrides
            .listen
            .iter()
            .map(|a| a.to_string().into())
            .collect();
        set("network.listen", "--listen", addrs.into());
    }
    if let Some(dir) = &overrides.data_dir {
        let Some(text) = dir.to_str() else {
            return Err(ConfigError::Invalid {
                key: "server.data_dir".to_owned(),
                value: Some(format!("{:?}", dir.display().to_string())),
                origin: Origin::Cli {
                    flag: "--data-dir".to_owned(),
                },
                reason: "not valid UTF-8".to_owned(),
            });
        };
        set("server.data_dir", "--data-dir", text.into());
    }
    let layer = Layer {
        metadata: Metadata::named(CLI_NAME),
        dict,
    };
    Ok(Keyed { layer, keys })
}

/// Sets `path` in `dict` to `value`, creating tables on the way (a scalar in the way is
/// replaced: the later variable wins, as in figment's own `Env`).
fn insert(dict: &mut Dict, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut table = dict;
    for key in parents {
        let entry = table
            .entry(key.clone())
            .or_insert_with(|| Value::from(Dict::new()));
        if entry.as_dict().is_none() {
            *entry = Value::from(Dict::new());
        }
        let Value::Dict(_, inner) = entry else {
            return;
        };
        table = inner;
    }
    table.insert(last.clone(), value);
}
