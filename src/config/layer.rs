//! One layer of the configuration as figment merges it: its values under one name (figment tags
//! every value with the provider that gave it, which is how an error names its source), the
//! names the environment and command-line layers go by, and the config file read from disk,
//! kept with its text so that a key can be found by line.
//!
//! `load.rs` builds the layers and merges them; `report.rs` reads back which layer supplied a
//! value. Both take these from here, and this file takes nothing from either.

use std::path::PathBuf;

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map};
use figment::{Metadata, Profile, Provider, Source};

use super::error::ConfigError;
use super::toml_lines;

// The environment and command-line layers' metadata names: provenance (`report.rs`) matches
// on them.
/// The name of the `SHARD_` environment layer.
pub(super) const ENV_NAME: &str = "SHARD_ environment";
/// The name of the command-line layer.
pub(super) const CLI_NAME: &str = "command line";

/// One layer's values under one name; figment tags every value with its provider.
#[derive(Clone)]
pub(super) struct Layer {
    pub(super) metadata: Metadata,
    pub(super) dict: Dict,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

/// The config file's text, kept to locate keys by line.
#[derive(Debug, Clone)]
pub(super) struct FileSource {
    pub(super) path: PathBuf,
    pub(super) text: String,
    dict: Dict,
}

impl FileSource {
    /// The file at `path`, whose contents are `text`: an error naming the path and line when
    /// it is not TOML.
    pub(super) fn parse(path: PathBuf, text: String) -> Result<Self, ConfigError> {
        let dict = Toml::from_str::<Dict>(&text).map_err(|e| {
            let (line, message) = toml_lines::syntax_error(&e.to_string());
            ConfigError::Syntax {
                path: path.clone(),
                line,
                message,
            }
        })?;
        Ok(FileSource { path, text, dict })
    }

    pub(super) fn layer(&self) -> Layer {
        Layer {
            metadata: Metadata::named(self.path.display().to_string())
                .source(Source::File(self.path.clone())),
            dict: self.dict.clone(),
        }
    }
}
