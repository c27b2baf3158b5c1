//! `infersight mapping`: prints the attribute and metric-name mapping tables (Markdown) that
//! normalization applies at ingest.

use crate::exit::CliError;

pub fn run() -> Result<i32, CliError> {
    print!("{}", infersight_model::mapping::mapping_markdown());
    Ok(0)
}
