//! Attribute dimensions: the store's rollups keep only their named columns, so a regression on a
//! value of an attribute the mapping table does not know (a team's own KV-policy or LoRA-set key,
//! resource attributes such as `cloud.region`, `service.version`, `k8s.deployment.name`) would be
//! invisible to localization. Once the windows are chosen, [`attribute_rollup`] reads the raw
//! `requests` rows of the baseline and incident windows (one SQL scan), finds every
//! low-cardinality scalar key of `attrs` (span and resource attributes alike, no configuration)
//! and builds a rollup of those rows over the rollup's columns *and* these keys, which
//! `windows` localizes like the stored rollups.
//!
//! Budget (stated, so the cost is bounded whatever the data): at most
//! [`MAX_ATTRIBUTE_DIMENSIONS`] keys, each with 2 to [`MAX_ATTRIBUTE_VALUES`] distinct values and
//! present on at least [`MIN_PRESENT_SHARE`] of the rows; at most [`MAX_TRACKED_KEYS`] keys are
//! counted; at most [`MAX_SCANNED_ROWS`] rows are read (beyond, a deterministic sample of every
//! `k`-th nanosecond residue of `ts`); the rollup keeps at most [`MAX_COMBINATIONS`]
//! combinations (further rows fold into `other`, as in the store).
//!
//! What is not a dimension: keys that are canonical `requests` columns; keys whose name says
//! they are an outcome (`status`, `error`, `exception`, `finish`, `response`, `result`,
//! `outcome` as a name part: blaming "status=500" for errors explains nothing); measurements
//! (a non-integer number among the values); integer values that vary among the requests of one
//! worker (per-request counters such as preemptions, unlike per-process settings such as a
//! batch size); arrays and objects. A key that splits the rows exactly as an earlier dimension
//! does (a second name for the model, a scope version equal to the service version) is left out
//! in favour of the earlier one, columns first.
//!
//! Sampled rows (head-sampled traces, each row carrying its weight under
//! [`SAMPLE_WEIGHT_KEY`]): the rollup counts each row by its weight, as the store's do, so
//! counts, shares and excess estimate the traffic; the same rows are also counted once per row
//! ([`AttributeRollup::observed_rows`]), so localization judges each leaf's significance on
//! the rows it actually holds (a 10 % sample of a slice is a tenth of its requests), not on
//! the estimate. The weight key itself is no dimension.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringBuilder};
use arrow::datatypes::{DataType, Field, Schema};
use infersight_model::attrs::{AttrsEntry, AttrsValue, ValueTexts, read_attrs};
use infersight_model::normalize::SAMPLE_WEIGHT_KEY;
use infersight_model::{RequestRecord, Table};
use infersight_query::{QueryEngine, QueryError};
use infersight_rollup::{LatencySli, Rollup, RollupSpec};
use infersight_store::TimeRange;

/// Most attribute keys added as dimensions.
pub const MAX_ATTRIBUTE_DIMENSIONS: usize = 8;
/// Most distinct values of an attribute dimension (more: an identifier or a measurement).
pub const MAX_ATTRIBUTE_VALUES: usize = 32;
/// A key must be present on at least this share of the scanned rows.
pub const MIN_PRESENT_SHARE: f64 = 0.01;
/// Most distinct keys counted; later new keys are ignored.
pub const MAX_TRACKED_KEYS: usize = 512;
/// Most rows read; beyond, a deterministic sample.
pub const MAX_SCANNED_ROWS: u64 = 1_000_000;
/// Combination budget of the attribute rollup.
pub const MAX_COMBINATIONS: usize = 20_000;

/// Name parts that mark an attribute as an outcome of the request, not where it ran or who sent it.
const OUTCOME_NAME_PARTS: &[&str] = &[
    "status",
    "error",
    "errors",
    "exception",
    "finish",
    "response",
    "result",
    "outcome",
];

/// Rows of the windows rolled up over the store's dimensions and the attribute dimensions.
pub(crate) struct AttributeRollup {
    pub(crate) rollup: Rollup,
    /// The attribute keys added (after the store's dimensions), in rollup order.
    pub(crate) keys: Vec<String>,
    /// When rows carry sampling weights ([`SAMPLE_WEIGHT_KEY`]): the same rows rolled up over
    /// the same dimensions counting each row once, so each leaf's observed rows (and with the
    /// weighted rollup, its sampling weight) are known; `None` when every row counts once.
    pub(crate) observed_rows: Option<Rollup>,
}

/// Reads the raw rows of `range` and rolls them up over `base_dimensions` and the attribute
/// dimensions found in them; `None` when no attribute qualifies and no row is sampled (see the
/// module doc).
pub(crate) async fn attribute_rollup(
    engine: &QueryEngine,
    range: TimeRange,
    base_dimensions: &[String],
) -> Result<Option<AttributeRollup>, QueryError> {
    let batches = read_rows(engine, range, base_dimensions).await?;
    let base = base_dimensions.to_vec();
    tokio::task::spawn_blocking(move || roll_up(&batches, &base))
        .await
        .map_err(|e| QueryError::Internal(format!("attribute rollup task failed: {e}")))?
}

/// The columns a rollup reads, plus `attrs`, of the rows in `range` (sampled beyond the budget).
async fn read_rows(
    engine: &QueryEngine,
    range: TimeRange,
    base_dimensions: &[String],
) -> Result<Vec<RecordBatch>, QueryError> {
    let mut filters = Vec::new();
    if let Some(since) = range.since_ns {
        filters.push(format!("ts >= to_timestamp_nanos({since})"));
    }
    if let Some(until) = range.until_ns {
        filters.push(format!("ts < to_timestamp_nanos({until})"));
    }
    let table = Table::Requests.name();
    let where_clause = if filters.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", filters.join(" AND "))
    };
    let count = engine
        .sql(&format!("SELECT count(*) AS n FROM {table}{where_clause}"))
        .await?;
    let rows = count
        .batches
        .first()
        .and_then(|b| {
            b.column(0)
                .as_primitive_opt::<arrow::datatypes::Int64Type>()
        })
        .filter(|c| !c.is_empty())
        .map_or(0, |c| c.value(0).max(0) as u64);
    if rows > MAX_SCANNED_ROWS {
        filters.push(format!(
            "CAST(ts AS BIGINT) % {} = 0",
            sample_stride(rows.div_ceil(MAX_SCANNED_ROWS))
        ));
    }
    let schema = RequestRecord::schema();
    let mut columns: Vec<String> = vec!["ts".into()];
    columns.extend(
        base_dimensions
            .iter()
            .filter(|d| schema.field_with_name(d).is_ok())
            .cloned(),
    );
    columns.extend(LatencySli::ALL.iter().map(|s| s.column().to_string()));
    for name in [
        "status",
        "finish_reason",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "attrs",
    ] {
        if !columns.iter().any(|c| c == name) {
            columns.push(name.into());
        }
    }
    let projection: Vec<String> = columns.iter().map(|c| format!("\"{c}\"")).collect();
    let where_clause = if filters.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", filters.join(" AND "))
    };
    let sql = format!(
        "SELECT {} FROM {table}{where_clause}",
        projection.join(", ")
    );
    Ok(engine.sql(&sql).await?.batches)
}

/// The smallest stride of at least `at_least` that shares no factor with 10, so timestamps
/// written in whole micro- or milliseconds still spread over its residues.
fn sample_stride(at_least: u64) -> u64 {
    let mut stride = at_least.max(2);
    while stride.is_multiple_of(2) || stride.is_multiple_of(5) {
        stride += 1;
    }
    stride
}

/// What one key's values looked like over the scanned rows.
#[derive(Default)]
struct KeyStats {
    /// Distinct values, until there are more than [`MAX_ATTRIBUTE_VALUES`].
    values: HashSet<String>,
    too_many: bool,
    rows: u64,
    /// A value that is a non-integer number, an array or an object.
    measurement: bool,
    /// Every value an integer (or boolean) so far.
    integral: bool,
    /// The value seen first per worker, for integer keys; `varies` once one differs.
    per_worker: HashMap<String, String>,
    varies_within_worker: bool,
}

impl KeyStats {
    /// No value seen yet: integral until a text value arrives.
    fn unseen() -> KeyStats {
        KeyStats {
            integral: true,
            ..KeyStats::default()
        }
    }

    fn count(&mut self, value: &AttrsValue<'_>, text: &str, worker: &str) {
        self.rows += 1;
        match value {
            AttrsValue::NotScalar => self.measurement = true,
            AttrsValue::Number(token) if token.parse::<f64>().is_ok_and(|n| n.fract() != 0.0) => {
                self.measurement = true;
            }
            AttrsValue::Scalar(serde_json::Value::Number(n))
                if n.as_f64().is_some_and(|n| n.fract() != 0.0) =>
            {
                self.measurement = true;
            }
            AttrsValue::Text(_) => self.integral = false,
            _ => {}
        }
        if self.integral && !self.varies_within_worker {
            match self.per_worker.get(worker) {
                Some(first) => self.varies_within_worker = first != text,
                None => {
                    self.per_worker.insert(worker.to_string(), text.to_string());
                }
            }
        }
        if !self.too_many && !self.values.contains(text) {
            if self.values.len() >= MAX_ATTRIBUTE_VALUES {
                self.too_many = true;
                self.values.clear();
            } else {
                self.values.insert(text.to_string());
            }
        }
    }

    fn qualifies(&self, scanned_rows: u64) -> bool {
        let ruled_out = self.too_many
            || self.measurement
            || self.values.len() < 2
            || (self.integral && self.varies_within_worker);
        !ruled_out && self.rows as f64 >= MIN_PRESENT_SHARE * scanned_rows as f64 && self.rows >= 20
    }
}

/// True when a part of `key` (split at `.`, `_`, `-`) names an outcome of the request.
fn is_outcome_key(key: &str) -> bool {
    key.split(['.', '_', '-'])
        .any(|part| OUTCOME_NAME_PARTS.contains(&part.to_ascii_lowercase().as_str()))
}

/// Counts the keys of `attrs` over the rows, and chooses the attribute dimensions.
fn discover(batches: &[RecordBatch]) -> Vec<String> {
    let schema = RequestRecord::schema();
    let mut stats: HashMap<String, KeyStats> = HashMap::new();
    let mut entries: Vec<AttrsEntry<'_>> = Vec::new();
    let mut texts = ValueTexts::default();
    let mut scanned = 0_u64;
    for batch in batches {
        let Some(attrs) = string_column(batch, "attrs") else {
            continue;
        };
        let worker = string_column(batch, "worker");
        for row in 0..batch.num_rows() {
            scanned += 1;
            if !attrs.is_valid(row) || !read_attrs(attrs.value(row), &mut entries) {
                continue;
            }
            let worker = worker
                .filter(|w| w.is_valid(row))
                .map_or("", |w| w.value(row));
            for (key, value) in &entries {
                let key = key.as_ref();
                if stats.len() >= MAX_TRACKED_KEYS && !stats.contains_key(key) {
                    continue;
                }
                let text = match value {
                    AttrsValue::NotScalar => "",
                    other => match texts.text(other) {
                        Some(text) => text,
                        None => continue,
                    },
                };
                let text = text.to_string();
                stats
                    .entry(key.to_string())
                    .or_insert_with(KeyStats::unseen)
                    .count(value, &text, worker);
            }
        }
    }
    let mut chosen: Vec<(u64, String)> = stats
        .into_iter()
        .filter(|(key, s)| {
            schema.field_with_name(key).is_err()
                && key != SAMPLE_WEIGHT_KEY
                && !is_outcome_key(key)
                && s.qualifies(scanned)
        })
        .map(|(key, s)| (s.rows, key))
        .collect();
    // the most present first, then by name (deterministic)
    chosen.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    chosen
        .into_iter()
        .map(|(_, key)| key)
        .take(MAX_ATTRIBUTE_DIMENSIONS)
        .collect()
}

fn string_column<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a arrow::array::StringArray> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_string_opt::<i32>())
}

/// The rollup of the rows over `base` and the attribute dimensions; `None` when none qualifies
/// and no row is sampled (sampled rows are rolled up over `base` alone then, for their weights).
fn roll_up(
    batches: &[RecordBatch],
    base: &[String],
) -> Result<Option<AttributeRollup>, QueryError> {
    let keys = discover(batches);
    let sampled = batches.iter().any(carries_sample_weights);
    if keys.is_empty() && !sampled {
        return Ok(None);
    }
    let mut dimensions = base.to_vec();
    dimensions.extend(keys.iter().cloned());
    let spec = RollupSpec {
        dimensions,
        max_combinations: MAX_COMBINATIONS,
    };
    let mut rollup = Rollup::new(&spec);
    let mut observed_rows = sampled.then(|| Rollup::new(&spec));
    let mut entries: Vec<AttrsEntry<'_>> = Vec::new();
    let mut texts = ValueTexts::default();
    let rollup_error =
        |e: infersight_rollup::RollupError| QueryError::Internal(format!("attribute rollup: {e}"));
    for batch in batches {
        let with_keys = with_attribute_columns(batch, &keys, &mut entries, &mut texts)?;
        rollup.add_requests(&with_keys).map_err(rollup_error)?;
        if let Some(rows) = observed_rows.as_mut() {
            rows.add_requests(&placement_only(&with_keys, &spec.dimensions)?)
                .map_err(rollup_error)?;
        }
    }
    Ok(Some(AttributeRollup {
        rollup,
        keys,
        observed_rows,
    }))
}

/// Whether any row of `batch` carries a sampling weight (one search over the `attrs` text).
fn carries_sample_weights(batch: &RecordBatch) -> bool {
    string_column(batch, "attrs").is_some_and(|attrs| {
        std::str::from_utf8(attrs.values().as_slice())
            .is_ok_and(|text| text.contains(SAMPLE_WEIGHT_KEY))
    })
}

/// `batch` with only `ts` and the `dimensions` columns: rolled up, each row counts once.
fn placement_only(batch: &RecordBatch, dimensions: &[String]) -> Result<RecordBatch, QueryError> {
    let schema = batch.schema();
    let indices: Vec<usize> = std::iter::once("ts")
        .chain(dimensions.iter().map(String::as_str))
        .filter_map(|name| schema.index_of(name).ok())
        .collect();
    batch
        .project(&indices)
        .map_err(|e| QueryError::Internal(format!("attribute rollup rows: {e}")))
}

/// `batch` with one string column per key, its value of the key in `attrs` (null when absent).
fn with_attribute_columns<'a>(
    batch: &'a RecordBatch,
    keys: &[String],
    entries: &mut Vec<AttrsEntry<'a>>,
    texts: &mut ValueTexts,
) -> Result<RecordBatch, QueryError> {
    let mut builders: Vec<StringBuilder> = keys.iter().map(|_| StringBuilder::new()).collect();
    let attrs = string_column(batch, "attrs");
    for row in 0..batch.num_rows() {
        let parsed = attrs
            .filter(|a| a.is_valid(row))
            .is_some_and(|a| read_attrs(a.value(row), entries));
        for (key, builder) in keys.iter().zip(&mut builders) {
            let value = parsed
                .then(|| entries.iter().rev().find(|(name, _)| name == key))
                .flatten()
                .and_then(|(_, value)| texts.text(value));
            builder.append_option(value);
        }
    }
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    for (key, mut builder) in keys.iter().zip(builders) {
        fields.push(Field::new(key, DataType::Utf8, true));
        columns.push(Arc::new(builder.finish()));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| QueryError::Internal(format!("attribute columns: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_keys_are_recognized_by_a_name_part() {
        for key in [
            "http.response.status_code",
            "error.type",
            "gen_ai.response.finish_reasons",
            "rpc.grpc.status_code",
            "exception.type",
            "llm.Result",
        ] {
            assert!(is_outcome_key(key), "{key}");
        }
        for key in [
            "cloud.region",
            "service.version",
            "k8s.deployment.name",
            "team.kv_mode",
            "responder_pool", // a part, not a prefix
        ] {
            assert!(!is_outcome_key(key), "{key}");
        }
    }

    #[test]
    fn sample_strides_share_no_factor_with_ten() {
        assert_eq!(sample_stride(1), 3);
        assert_eq!(sample_stride(4), 7);
        assert_eq!(sample_stride(9), 9);
        assert_eq!(sample_stride(10), 11);
    }
}
