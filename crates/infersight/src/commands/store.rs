//! `infersight store stats|flush|compact|migrate`: store maintenance from the command line (what
//! `serve` also does in the background) and the move of a single-node store into a bucket;
//! prints the store's answer as one JSON line.

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

#[derive(Debug, Clone, clap::Subcommand)]
pub enum StoreAction {
    /// Print store statistics (JSON).
    Stats,
    /// Flush the memtable to Parquet segments.
    Flush,
    /// Merge small segments and apply retention.
    Compact,
    /// Move this single-node store's segments into a bucket, committed at once under this
    /// store's node name; then start it with --storage URL (same --data), which removes the
    /// local copies. Endpoint and credentials come from [storage].
    Migrate {
        /// The bucket: s3://bucket/prefix or file:///dir.
        #[arg(long, value_name = "URL")]
        to: String,
    },
}

pub async fn run(args: StoreArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    tokio::task::spawn_blocking(move || store_action(config, args.action))
        .await
        .map_err(|e| CliError::failed(format!("store task: {e}")))?
}

fn store_action(config: Config, action: StoreAction) -> Result<i32, CliError> {
    let target = match &action {
        StoreAction::Migrate { to } => Some(migration_target(&config, to)?),
        _ => None,
    };
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
        StoreAction::Migrate { .. } => {
            let Some(target) = target else {
                return Err(CliError::failed("no migration target"));
            };
            let show = std::io::IsTerminal::is_terminal(&std::io::stderr());
            let bar = match show {
                true => indicatif::ProgressBar::new(0),
                false => indicatif::ProgressBar::hidden(),
            };
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "uploading segments {wide_bar} {pos}/{len}, {elapsed}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            let report = store.migrate_to_bucket(&target, |done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            });
            bar.finish_and_clear();
            serde_json::to_value(report.map_err(fail)?).unwrap_or_default()
        }
    };
    store.close().map_err(fail)?;
    println!("{report}");
    Ok(0)
}

/// The bucket `store migrate --to URL` moves the store into: `[storage]` with `url` replaced
/// (endpoint, credentials, node name), checked like the configuration. The store itself must be
/// local (no `--storage`, no `[storage] url`).
fn migration_target(
    config: &Config,
    to: &str,
) -> Result<infersight_store::RemoteOptions, CliError> {
    if !config.storage.url.is_empty() {
        return Err(CliError::usage(format!(
            "store migrate moves a store on local disk; this one is on {} already (drop --storage / [storage] url)",
            config.storage.url
        )));
    }
    let mut storage = config.storage.clone();
    storage.url = to.to_string();
    let errors = storage.validate();
    if !errors.is_empty() {
        return Err(CliError::usage(errors.join("; ")));
    }
    storage
        .remote(&config.store.data_dir, true)
        .ok_or_else(|| CliError::usage("store migrate: --to is empty"))
}
