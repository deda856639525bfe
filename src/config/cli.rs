//! The configuration flags every `shardloop` subcommand shares, as a clap `Args` struct the
//! binary flattens into its parser, so that the flag names match the sources errors name.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::error::ConfigError;
use super::load::{ConfigFile, LoadOptions, Overrides, process_env};

/// `--config`, `--data-dir`, `--listen`, `--idle-wait`: `#[command(flatten)]` this.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ConfigArgs {
    /// Configuration file [default: config/shard.toml, used only if present]. A file named
    /// here must exist.
    #[arg(long, value_name = "PATH", global = true)]
    pub config: Option<PathBuf>,

    /// Data directory: saves, backups, archives and logs live under it
    /// (server.data_dir, default ./data).
    #[arg(long, value_name = "DIR", global = true)]
    pub data_dir: Option<PathBuf>,

    /// Address to accept clients on; repeat for several (replaces network.listen).
    #[arg(long, value_name = "ADDR", global = true)]
    pub listen: Vec<SocketAddr>,

    /// Longest idle block, e.g. "0ms" (never sleep) or "1s" (server.idle_wait).
    #[arg(long, value_name = "DURATION", global = true, value_parser = parse_duration)]
    pub idle_wait: Option<Duration>,
}

impl ConfigArgs {
    /// The config file: the `--config` path (required), else [`ConfigFile::default`].
    pub fn config_file(&self) -> ConfigFile {
        match &self.config {
            Some(path) => ConfigFile::Required(path.clone()),
            None => ConfigFile::default(),
        }
    }

    /// The command-line layer.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            idle_wait: self.idle_wait,
            listen: self.listen.clone(),
            data_dir: self.data_dir.clone(),
        }
    }

    /// Options for [`super::Config::load`] with the process's `SHARD_*` environment and no
    /// game section: the caller pushes its own onto [`LoadOptions::sections`].
    pub fn load_options(&self) -> Result<LoadOptions, ConfigError> {
        Ok(LoadOptions {
            file: self.config_file(),
            env: process_env()?,
            overrides: self.overrides(),
            sections: Vec::new(),
        })
    }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e}; write a duration with a unit, such as \"0ms\" or \"1s\""))
}
