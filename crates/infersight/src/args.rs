//! Command-line flags shared by the subcommands (clap `Args`, flattened into each command's own
//! arguments in `commands/`): where the configuration and the store are, and `--format`. Flags
//! override the configuration file and the environment; `--data` and `--config` are accepted by
//! every command that touches the store.

use std::path::PathBuf;

use clap::Args;

use crate::config::{self, Config};
use crate::exit::CliError;
use crate::output::OutputFormat;

#[derive(Debug, Clone, Args)]
pub struct Common {
    /// TOML configuration file (see `infersight validate`).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Store directory [default: ./infersight-data or the config's store.data_dir].
    #[arg(long, global = true)]
    pub data: Option<PathBuf>,
    /// Where flushed segments go: s3://bucket/prefix or file:///dir [default: the config's
    /// storage.url, else the store directory].
    #[arg(long, global = true, value_name = "URL")]
    pub storage: Option<String>,
}

impl Common {
    /// The configuration of this run: defaults < file < environment < flags.
    pub fn resolve(&self) -> Result<Config, CliError> {
        let mut config = config::load(self.config.as_deref(), &environment())?;
        if let Some(data) = &self.data {
            config.store.data_dir = data.clone();
        }
        if let Some(url) = &self.storage {
            config.storage.url = url.clone();
            let errors = config.storage.validate();
            if !errors.is_empty() {
                return Err(CliError::usage(errors.join("; ")));
            }
        }
        Ok(config)
    }
}

/// `--format table|csv|json`, table by default. Commands whose flag says more in `--help` set
/// its help with `mut_arg("format", …)`.
#[derive(Debug, Clone, Copy, Args)]
pub struct FormatArgs {
    #[arg(long, value_enum, default_value = "table")]
    pub format: OutputFormat,
}

/// The `INFERSIGHT__…` variables of the environment (the configuration's second layer).
pub fn environment() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with(config::ENV_PREFIX))
        .collect()
}
