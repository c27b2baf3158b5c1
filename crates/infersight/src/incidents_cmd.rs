//! `infersight incidents`: lists, shows, confirms and rejects stored RCA verdicts.

use crate::cli::Common;
use crate::exit::CliError;

#[derive(Debug, clap::Args)]
pub struct IncidentsArgs {
    #[command(flatten)]
    pub common: Common,
}

pub async fn run(args: IncidentsArgs) -> Result<i32, CliError> {
    let _config = crate::commands::resolve(&args.common)?;
    Err(CliError::failed("not built yet".to_string()))
}
