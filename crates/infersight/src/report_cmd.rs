//! `infersight report`: builds the report of a stored incident (or of a fresh RCA) and writes it as
//! JSON, Markdown or HTML.

use crate::cli::Common;
use crate::exit::CliError;

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub common: Common,
}

pub async fn run(args: ReportArgs) -> Result<i32, CliError> {
    let _config = crate::commands::resolve(&args.common)?;
    Err(CliError::failed("not built yet".to_string()))
}
