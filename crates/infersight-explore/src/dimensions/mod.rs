//! Dimension discovery: which attributes of `requests` are low-cardinality enough to slice
//! latency by. Root-cause localization searches combinations of these, so the set is discovered
//! from the data (named columns and every scalar key of `attrs`), not hard-coded.
//!
//! This module runs the scan: one streaming scan of the range, each partition of it on its own
//! worker: a task decodes the partition's batches and counts each on a blocking thread while it
//! decodes the next; the workers' counters are merged at the end, with the same result as one
//! pass over all rows. How a batch is counted, and the bound on what counting holds, is
//! [`count`]'s.

use std::sync::Arc;

use futures::StreamExt;
use infersight_model::Table;
use infersight_query::{BatchStream, QueryEngine, QueryError};
use infersight_store::TimeRange;
use serde::Serialize;

use count::{AttrKeyAdmission, Discovery};

mod count;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

/// Named string columns of `requests` that can be dimensions.
pub const STRING_COLUMNS: &[&str] = &[
    "tenant",
    "session_id",
    "service",
    "runtime",
    "worker",
    "device",
    "model",
    "model_version",
    "lora_adapters",
    "kv_cache_policy",
    "finish_reason",
    "status",
    "error_type",
];

/// Numeric columns of `requests` that behave like settings; their values are reported as text.
pub const SETTING_COLUMNS: &[&str] = &["batch_size", "max_tokens"];

const ATTRS_COLUMN: &str = "attrs";

/// At most this many distinct `attrs` keys are tracked per discovery; later new keys are ignored.
pub const MAX_ATTR_KEYS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DimensionSource {
    /// A named column of `requests`.
    Column,
    /// A top-level key of the `attrs` JSON column.
    Attrs,
}

impl DimensionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            DimensionSource::Column => "column",
            DimensionSource::Attrs => "attrs",
        }
    }
}

impl std::fmt::Display for DimensionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What slicing by a dimension's values can tell: a categorical dimension splits the rows into
/// groups worth comparing; a constant one (one value) splits nothing; a continuous one (a score,
/// a measured quantity: many distinct numbers) has values too fine to compare one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DimensionKind {
    Categorical,
    Constant,
    Continuous,
}

/// A dimension whose values are all numbers is continuous from this many distinct values on: a
/// setting (batch size, a GPU index, an HTTP status) takes few values, a score or a measured
/// quantity takes hundreds.
pub const CONTINUOUS_MIN_DISTINCT: u64 = 50;

impl DimensionKind {
    /// The kind of a dimension with `distinct_values` values, `all_numeric` when every one of
    /// them reads as a finite number.
    pub fn of(distinct_values: u64, all_numeric: bool) -> DimensionKind {
        if distinct_values <= 1 {
            DimensionKind::Constant
        } else if all_numeric && distinct_values >= CONTINUOUS_MIN_DISTINCT {
            DimensionKind::Continuous
        } else {
            DimensionKind::Categorical
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DimensionKind::Categorical => "categorical",
            DimensionKind::Constant => "constant",
            DimensionKind::Continuous => "continuous",
        }
    }
}

/// Whether a value reads as a finite number (`12`, `0.25`, `-3e2`).
pub fn is_numeric_value(value: &str) -> bool {
    value.trim().parse::<f64>().is_ok_and(f64::is_finite)
}

/// A candidate dimension and its value distribution in the requested range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dimension {
    /// Column name, or the `attrs` key (e.g. `llm.lora.adapters`).
    pub name: String,
    pub source: DimensionSource,
    /// Distinct non-null values.
    pub distinct_values: u64,
    /// Rows carrying a non-null value of the attribute.
    pub total_rows: u64,
    /// The most frequent values with their row counts, by count descending then value ascending.
    pub values: Vec<(String, u64)>,
    /// Categorical, constant or continuous, judged on every distinct value (not only `values`).
    pub kind: DimensionKind,
}

/// Low-cardinality attributes of `requests` in `range`, the candidate dimensions for
/// root-cause localization and the explore view; see [`Dimension`].
pub async fn discover_dimensions(
    engine: &QueryEngine,
    range: TimeRange,
    max_cardinality: usize,
    max_values: usize,
) -> Result<Vec<Dimension>, QueryError> {
    let columns = scanned_columns();
    let streams = engine
        .scan_partitions(Table::Requests, range, &columns)
        .await?;
    let discovery = discover_partitions(streams, max_cardinality).await?;
    Ok(discovery.finish(max_values))
}

/// The `requests` columns discovery reads (for the access audit of its callers).
pub fn scanned_columns() -> Vec<&'static str> {
    STRING_COLUMNS
        .iter()
        .chain(SETTING_COLUMNS)
        .copied()
        .chain([ATTRS_COLUMN])
        .collect()
}

/// Counts every partition's stream on its own worker and merges the workers' counters.
async fn discover_partitions(
    streams: Vec<BatchStream>,
    max_cardinality: usize,
) -> Result<Discovery, QueryError> {
    let admission = Arc::new(AttrKeyAdmission::default());
    let mut workers = tokio::task::JoinSet::new();
    for stream in streams {
        let discovery = Discovery::new(max_cardinality, Arc::clone(&admission));
        workers.spawn(discover_partition(stream, discovery));
    }
    let mut merged = Discovery::new(max_cardinality, admission);
    while let Some(worker) = workers.join_next().await {
        merged.merge(worker.map_err(worker_failed)??);
    }
    Ok(merged)
}

async fn discover_partition(
    mut stream: BatchStream,
    discovery: Discovery,
) -> Result<Discovery, QueryError> {
    // Counting a batch takes milliseconds of CPU, so it runs on a blocking thread, while this
    // task decodes the partition's next batch.
    let mut counting = tokio::task::spawn_blocking(move || Ok(discovery));
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let mut discovery = counting.await.map_err(worker_failed)??;
        counting = tokio::task::spawn_blocking(move || {
            discovery.observe(&batch)?;
            Ok::<_, QueryError>(discovery)
        });
    }
    counting.await.map_err(worker_failed)?
}

fn worker_failed(error: tokio::task::JoinError) -> QueryError {
    QueryError::Internal(format!("dimension discovery worker failed: {error}"))
}
