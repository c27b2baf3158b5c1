//! `infersight store stats|flush|compact`: store maintenance from the command line (what
//! `serve` also does in the background); prints the store's answer as one JSON line.

use infersight_store::StorageBackend;
use serde_json::json;

use crate::args::Common;
use crate::config::Config;
use crate::exit::CliError;
use crate::wiring;

#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub action: StoreAction,
}

#[derive(Debug, Clone, Copy, clap::Subcommand)]
pub enum StoreAction {
    /// Print store statistics (JSON).
    Stats,
    /// Flush the memtable to Parquet segments.
    Flush,
    /// Merge small segments and apply retention.
    Compact,
}

pub async fn run(args: StoreArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    tokio::task::spawn_blocking(move || store_action(config, args.action))
        .await
        .map_err(|e| CliError::failed(format!("store task: {e}")))?
}

fn store_action(config: Config, action: StoreAction) -> Result<i32, CliError> {
    let store = wiring::open_existing_store(&config)?;
    let fail = |e: infersight_store::StoreError| CliError::failed(e.to_string());
    let report = match action {
        StoreAction::Stats => serde_json::to_value(store.stats()).unwrap_or_default(),
        StoreAction::Flush => {
            serde_json::to_value(store.flush().map_err(fail)?).unwrap_or_default()
        }
        StoreAction::Compact => {
            let compaction = store.compact().map_err(fail)?;
            let retention = store
                .apply_retention(infersight_model::time::now_ns())
                .map_err(fail)?;
            json!({ "compaction": compaction, "retention": retention })
        }
    };
    store.close().map_err(fail)?;
    println!("{report}");
    Ok(0)
}
