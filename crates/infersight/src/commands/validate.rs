//! `infersight validate CONFIG`: loads a configuration file as every command would (defaults,
//! file, environment) and reports every error at once, one line each (exit 2), or `ok`.

use std::path::PathBuf;

use crate::args::environment;
use crate::config;
use crate::exit::CliError;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The TOML file to check.
    pub config: PathBuf,
}

pub fn run(args: ValidateArgs) -> Result<i32, CliError> {
    let path = args.config;
    match config::load(Some(&path), &environment()) {
        Ok(_) => {
            println!("{}: ok", path.display());
            Ok(0)
        }
        Err(errors) => {
            for e in &errors.0 {
                eprintln!("{}: {e}", path.display());
            }
            Err(CliError::usage(format!(
                "{} has {} error(s)",
                path.display(),
                errors.0.len()
            )))
        }
    }
}
