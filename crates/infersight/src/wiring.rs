//! Wiring: turns the resolved configuration into running parts (store, pipeline stages,
//! attribute mapper) so every command builds them the same way.

use std::sync::Arc;

use infersight_model::TableBatch;
use infersight_model::mapping::AttributeMapper;
use infersight_server::{Counters, Transform, TransformError};
use infersight_store::Store;

use crate::config::Config;
use crate::exit::CliError;

/// The pipeline stages every record passes before the store (redaction first). Stage counters
/// are published to `counters` after every run so `/metrics` shows them.
pub fn build_transform(config: &Config, counters: Arc<Counters>) -> Result<Transform, CliError> {
    let mut pipeline = infersight_pipeline::Pipeline::from_config(&config.stages)
        .map_err(|e| CliError::usage(format!("stages: {e}")))?;
    Ok(Box::new(move |batches: Vec<TableBatch>| {
        let result = pipeline.run(batches).map_err(|e| TransformError {
            kind: e.kind(),
            message: e.to_string(),
        });
        for (stage, c) in pipeline.counters() {
            let labels = [("stage", stage)];
            counters.set_counter(
                "infersight_stage_received_rows_total",
                "rows received by a stage",
                &labels,
                c.received_rows,
            );
            counters.set_counter(
                "infersight_stage_emitted_rows_total",
                "rows a stage passed on",
                &labels,
                c.emitted_rows,
            );
            counters.set_counter(
                "infersight_stage_failed_rows_total",
                "rows a stage failed to process",
                &labels,
                c.failed_rows,
            );
            for (reason, n) in &c.dropped_rows {
                counters.set_counter(
                    "infersight_stage_dropped_rows_total",
                    "rows not accepted by a stage, by reason",
                    &[("stage", stage), ("reason", reason)],
                    *n,
                );
            }
            for (name, n) in &c.detail {
                counters.set_counter(
                    "infersight_stage_detail_total",
                    "stage-specific counters (e.g. redactions per detector)",
                    &[("stage", stage), ("counter", name)],
                    *n,
                );
            }
        }
        result
    }))
}

pub fn mapper(config: &Config) -> Arc<AttributeMapper> {
    Arc::new(AttributeMapper::new(&config.aliases()))
}

/// Opens an existing store for reading commands: a mistyped `--data` is an error, not an empty
/// result.
pub fn open_existing_store(config: &Config) -> Result<Arc<Store>, CliError> {
    if !config.store.data_dir.join("catalog.json").exists()
        && !config.store.data_dir.join("wal").is_dir()
    {
        return Err(CliError::usage(format!(
            "no store at {} (set --data, or ingest something first)",
            config.store.data_dir.display()
        )));
    }
    open_store(config)
}

pub fn open_store(config: &Config) -> Result<Arc<Store>, CliError> {
    Store::open(config.store_options()).map(Arc::new).map_err(|e| {
        let hint = match e {
            infersight_store::StoreError::Locked { .. } => {
                "; another infersight process (serve?) holds it: stop it, or query it over HTTP with --server"
            }
            _ => "",
        };
        CliError::failed(format!("opening the store: {e}{hint}"))
    })
}
