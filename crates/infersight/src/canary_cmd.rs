//! `infersight canary`: the canary gate over stored requests (exit 0 pass, 1 block).

use crate::cli::Common;
use crate::exit::CliError;

#[derive(Debug, clap::Args)]
pub struct CanaryArgs {
    #[command(flatten)]
    pub common: Common,
}

pub async fn run(args: CanaryArgs) -> Result<i32, CliError> {
    let _config = crate::commands::resolve(&args.common)?;
    Err(CliError::failed("not built yet".to_string()))
}
