//! `infersight actions`: prints the audit trail of the automatic actions `serve` decided.

use crate::cli::Common;
use crate::exit::CliError;

#[derive(Debug, clap::Args)]
pub struct ActionsArgs {
    #[command(flatten)]
    pub common: Common,
}

pub async fn run(args: ActionsArgs) -> Result<i32, CliError> {
    let _config = crate::commands::resolve(&args.common)?;
    Err(CliError::failed("not built yet".to_string()))
}
