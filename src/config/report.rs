//! Provenance: which layer (and which line, variable or flag) supplied each value, used by
//! [`Loaded::report`] and to name the source in every [`ConfigError`].

use std::collections::BTreeMap;
use std::path::Path;

use figment::error::Kind;
use figment::value::{Dict, Num, Value};
use figment::{Figment, Source};

use super::error::{ConfigError, Origin};
use super::layer::{CLI_NAME, ENV_NAME, FileSource};
use super::{Config, Invalid, REDACTED, toml_lines};

/// The engine's sections in the order of `config/shard.toml`, for the report (declared game
/// sections follow them, in the order they were declared).
const SECTIONS: [&str; 7] = [
    "server", "network", "world", "autosave", "archive", "time", "metrics",
];

/// The keys whose values are secrets ([`super::Secret`]): the report and every error show
/// `"(redacted)"` for them when they are set.
const SECRETS: [&str; 1] = ["metrics.token"];

/// `value` as the report and the errors show the value of `key`: TOML-style, or
/// `"(redacted)"` for a secret that is set (whatever its type).
fn shown(key: &str, value: &Value) -> String {
    match value {
        Value::String(_, s) if s.is_empty() => render(value),
        _ if SECRETS.contains(&key) => format!("{REDACTED:?}"),
        _ => render(value),
    }
}

/// The effective configuration, with where each value came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The effective configuration.
    pub config: Config,
    pub(super) figment: Figment,
    pub(super) provenance: Provenance,
    /// Every declared game section as loaded, in declaration order (its name, its table).
    pub(super) sections: Vec<(&'static str, Value)>,
}

/// One key of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Dotted key, e.g. `server.idle_wait`.
    pub key: String,
    /// Effective value, TOML-style (`"1s"`, `25`, `["127.0.0.1:2593"]`).
    pub value: String,
    /// Where it came from.
    pub origin: Origin,
}

impl Loaded {
    /// The config file that was read, if any.
    pub fn file(&self) -> Option<&Path> {
        self.provenance.file.as_ref().map(|f| f.path.as_path())
    }

    /// Where the value of the dotted `key` came from; `None` for an unknown key.
    pub fn origin(&self, key: &str) -> Option<Origin> {
        self.figment
            .contains(key)
            .then(|| self.provenance.origin(&self.figment, key))
    }

    /// Every key with its effective value and origin: the engine's sections in file order,
    /// then the declared game sections in the order they were declared; keys sorted within
    /// each section. A secret that is set shows as `"(redacted)"`.
    pub fn entries(&self) -> Vec<Entry> {
        let mut leaves = Vec::new();
        if let Ok(Value::Dict(_, dict)) = Value::serialize(&self.config) {
            flatten("", &dict, &mut leaves);
        }
        let rank = |key: &str| {
            let section = key.split('.').next().unwrap_or("");
            SECTIONS.iter().position(|s| *s == section)
        };
        leaves.sort_by(|(a, _), (b, _)| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
        for (name, value) in &self.sections {
            let mut section = Vec::new();
            if let Value::Dict(_, dict) = value {
                flatten(name, dict, &mut section);
            }
            section.sort_by(|(a, _), (b, _)| a.cmp(b));
            leaves.extend(section);
        }
        leaves
            .into_iter()
            .map(|(key, value)| Entry {
                origin: self.provenance.origin(&self.figment, &key),
                value: shown(&key, &value),
                key,
            })
            .collect()
    }

    /// `SHARD_*` variables that are not configuration (no `SECTION__KEY` form, or an unknown
    /// section), sorted. They were ignored; [`Loaded::ignored_env_warning`] says so.
    pub fn ignored_env(&self) -> &[String] {
        &self.provenance.ignored_env
    }

    /// One warning naming every ignored `SHARD_*` variable, or `None` when there are none. A
    /// name that looks like a mistyped config variable (`SHARD_SERVER_IDLE_WAIT`) gets a hint.
    pub fn ignored_env_warning(&self) -> Option<String> {
        let ignored = self.ignored_env();
        if ignored.is_empty() {
            return None;
        }
        let sections = self.provenance.sections();
        let names: Vec<String> = ignored
            .iter()
            .map(|var| with_hint(var, &sections))
            .collect();
        Some(format!(
            "ignored {} SHARD_* environment variable(s) that are not configuration (only \
             SHARD_<SECTION>__<KEY> for the sections {} is): {}",
            ignored.len(),
            sections.join(", "),
            names.join(", ")
        ))
    }

    /// One line per key, `section.key = value   (source)`, for `shardloop check-config`,
    /// then the ignored-variables warning as a `#` comment, if any.
    pub fn report(&self) -> String {
        let entries = self.entries();
        let lines: Vec<(String, String)> = entries
            .iter()
            .map(|e| (format!("{} = {}", e.key, e.value), e.origin.to_string()))
            .collect();
        let width = lines.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
        let mut report: String = lines
            .iter()
            .map(|(line, origin)| format!("{line:<width$}   ({origin})\n"))
            .collect();
        if let Some(warning) = self.ignored_env_warning() {
            report.push_str(&format!("# {warning}\n"));
        }
        report
    }
}

/// `var`, with a hint when it is one underscore short of a config variable of `sections`.
fn with_hint(var: &str, sections: &[&str]) -> String {
    let rest = var.strip_prefix(super::error::ENV_PREFIX).unwrap_or(var);
    let near_miss = sections.iter().find_map(|section| {
        let tail = rest.to_ascii_lowercase();
        let key = tail.strip_prefix(section)?.strip_prefix('_')?;
        (!key.is_empty() && !key.starts_with('_')).then(|| {
            format!(
                "SHARD_{}__{}",
                section.to_ascii_uppercase(),
                key.to_ascii_uppercase()
            )
        })
    });
    match near_miss {
        Some(meant) => format!("{var} (did you mean {meant}?)"),
        None => var.to_owned(),
    }
}

/// Where the layers came from, to name the source of any value.
#[derive(Debug, Clone)]
pub(super) struct Provenance {
    /// The config file read, if any.
    pub(super) file: Option<FileSource>,
    /// Dotted key → the `SHARD_` variable that set it.
    pub(super) env: BTreeMap<String, String>,
    /// `SHARD_*` variables that are not configuration (sorted): ignored, listed in a warning.
    pub(super) ignored_env: Vec<String>,
    /// Dotted key → the flag that set it.
    pub(super) cli: BTreeMap<String, String>,
    /// The declared game sections' names, in declaration order.
    pub(super) declared: Vec<&'static str>,
}

impl Provenance {
    /// Every section's name: the engine's in file order, then the declared ones.
    fn sections(&self) -> Vec<&'static str> {
        SECTIONS.iter().chain(&self.declared).copied().collect()
    }

    /// Where the value at the dotted `key` of `figment` came from.
    pub(super) fn origin(&self, figment: &Figment, key: &str) -> Origin {
        let Some(metadata) = figment.find_metadata(key) else {
            return Origin::Default;
        };
        if let (Some(Source::File(_)), Some(file)) = (&metadata.source, &self.file) {
            return Origin::File {
                path: file.path.clone(),
                line: toml_lines::line_of(&file.text, key),
            };
        }
        match metadata.name.as_ref() {
            ENV_NAME => Origin::Env {
                var: setter(&self.env, key),
            },
            CLI_NAME => Origin::Cli {
                flag: setter(&self.cli, key),
            },
            _ => Origin::Default,
        }
    }

    /// A serde error from figment → one message naming key, value and source.
    pub(super) fn figment_error(&self, figment: &Figment, error: figment::Error) -> ConfigError {
        let (key, index) = split_index(&error.path);
        let display_key = match index {
            Some(i) => format!("{key}[{i}]"),
            None => key.clone(),
        };
        let value = figment
            .find_value(&key)
            .ok()
            .and_then(|v| match (index, v) {
                (Some(i), Value::Array(_, items)) => items.get(i).map(|v| shown(&key, v)),
                (None, v) => Some(shown(&key, &v)),
                _ => None,
            });
        let origin = self.origin(figment, &key);
        if let Kind::UnknownField(_, expected) = &error.kind {
            return ConfigError::UnknownKey {
                key: display_key,
                value,
                origin,
                expected: expected.iter().map(|s| (*s).to_owned()).collect(),
            };
        }
        ConfigError::Invalid {
            key: display_key,
            value,
            origin,
            reason: reason(&error.kind),
        }
    }

    /// A range/cross-field check failure → the same shape of message.
    pub(super) fn invalid(&self, figment: &Figment, invalid: Invalid) -> ConfigError {
        self.invalid_at(figment, invalid.key, invalid.reason)
    }

    /// The dotted `key` is out of range (`reason`) → the same shape of message.
    pub(super) fn invalid_at(&self, figment: &Figment, key: &str, reason: String) -> ConfigError {
        ConfigError::Invalid {
            key: key.to_owned(),
            value: figment.find_value(key).ok().map(|v| shown(key, &v)),
            origin: self.origin(figment, key),
            reason,
        }
    }
}

/// The variable or flag that set `key`, or the one that set the table containing it.
fn setter(keys: &BTreeMap<String, String>, key: &str) -> String {
    let mut prefix = key;
    loop {
        if let Some(name) = keys.get(prefix) {
            return name.clone();
        }
        match prefix.rsplit_once('.') {
            Some((parent, _)) => prefix = parent,
            None => return String::from("?"),
        }
    }
}

/// `["network", "listen", "1"]` → (`network.listen`, Some(1)).
fn split_index(path: &[String]) -> (String, Option<usize>) {
    let position = path.iter().position(|p| p.parse::<usize>().is_ok());
    let (keys, rest) = path.split_at(position.unwrap_or(path.len()));
    let index = rest.first().and_then(|p| p.parse().ok());
    (keys.join("."), index)
}

fn reason(kind: &Kind) -> String {
    match kind {
        Kind::Message(message) => message.clone(),
        Kind::UnknownVariant(_, expected) => format!("expected one of: {}", expected.join(", ")),
        Kind::InvalidType(actual, expected) => {
            format!("expected {}, found {actual}", expected_text(expected))
        }
        Kind::InvalidValue(_, expected) => format!("expected {}", expected_text(expected)),
        other => other.to_string(),
    }
}

/// serde's expectation in operator words (no Rust type names).
fn expected_text(expected: &str) -> String {
    let text = match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number, 0 or more",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "a boolean" => "true or false",
        "a sequence" => "a list, such as [\"0.0.0.0:2593\"]",
        other if other.starts_with("struct ") => "a table of keys",
        other => other,
    };
    text.to_owned()
}

/// Leaves of `dict` as (dotted key, value).
fn flatten(prefix: &str, dict: &Dict, out: &mut Vec<(String, Value)>) {
    for (key, value) in dict {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            Value::Dict(_, inner) => flatten(&path, inner, out),
            leaf => out.push((path, leaf.clone())),
        }
    }
}

/// A value written as TOML would: `"1s"`, `25`, `true`, `["a", "b"]`.
fn render(value: &Value) -> String {
    match value {
        Value::String(_, s) => format!("{s:?}"),
        Value::Char(_, c) => format!("{:?}", c.to_string()),
        Value::Bool(_, b) => b.to_string(),
        Value::Num(_, n) => render_num(*n),
        Value::Empty(..) => "none".to_owned(),
        Value::Array(_, items) => {
            let items: Vec<String> = items.iter().map(render).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Dict(_, dict) => {
            let items: Vec<String> = dict
                .iter()
                .map(|(k, v)| format!("{k} = {}", render(v)))
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
    }
}

fn render_num(n: Num) -> String {
    match (n.to_u128(), n.to_i128()) {
        (Some(u), _) => u.to_string(),
        (None, Some(i)) => i.to_string(),
        _ => n
            .to_f64()
            .map_or_else(|| format!("{n:?}"), |f| f.to_string()),
    }
}
