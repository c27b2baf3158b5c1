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
//! combinations (further rows fold into `other`, as in the store). Where more keys qualify than
//! the budget holds, it goes to the most present keys that split the rows in a way no earlier
//! dimension does (a `host.name` that is the worker under another name takes no place a
//! `service.version` needs).
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
    chosen.into_iter().map(|(_, key)| key).collect()
}

/// At most [`MAX_ATTRIBUTE_DIMENSIONS`] of the `candidates` (in their order), the budget spent on
/// keys that split the rows in a way no earlier dimension does: a key whose values map one to
/// one onto those of a `base` column or of a key kept before it (`host.name` beside `worker`, an
/// organisation id beside `tenant`) is left out, where more candidates qualify than the budget
/// holds (otherwise `windows` drops such keys from the leaves, at no extra reading). A missing
/// value counts as a value of its own.
fn within_budget(
    batches: &[RecordBatch],
    base: &[String],
    candidates: Vec<String>,
) -> Result<Vec<String>, QueryError> {
    if candidates.len() <= MAX_ATTRIBUTE_DIMENSIONS {
        return Ok(candidates);
    }
    // per column (the base columns present, then the candidates), each row's value as an id
    let mut entries: Vec<AttrsEntry<'_>> = Vec::new();
    let mut texts = ValueTexts::default();
    let present: Vec<&String> = base
        .iter()
        .filter(|d| batches.iter().any(|b| b.column_by_name(d).is_some()))
        .collect();
    let mut columns: Vec<Interned> = (0..present.len() + candidates.len())
        .map(|_| Interned::default())
        .collect();
    for batch in batches {
        let with_keys = with_attribute_columns(batch, &candidates, &mut entries, &mut texts)?;
        let names = present
            .iter()
            .map(|s| s.as_str())
            .chain(candidates.iter().map(String::as_str));
        for (column, name) in columns.iter_mut().zip(names) {
            column.push_column(&with_keys, name);
        }
    }
    let (base_columns, key_columns) = columns.split_at(present.len());
    let mut kept: Vec<usize> = Vec::new();
    for (k, column) in key_columns.iter().enumerate() {
        let redundant = base_columns
            .iter()
            .chain(kept.iter().map(|&j| &key_columns[j]))
            .any(|earlier| column.same_split(earlier));
        if redundant {
            tracing::debug!(key = %candidates[k], "attribute key left out: an earlier dimension splits the rows alike");
        } else {
            kept.push(k);
            if kept.len() == MAX_ATTRIBUTE_DIMENSIONS {
                break;
            }
        }
    }
    Ok(kept.into_iter().map(|k| candidates[k].clone()).collect())
}

/// One column's value per row, as ids of its distinct values (a missing value is one too).
#[derive(Default)]
struct Interned {
    ids: Vec<u32>,
    of: HashMap<String, u32>,
    missing: Option<u32>,
    distinct: u32,
}

impl Interned {
    /// Appends the ids of column `name` of `batch`: a string column's values, any other
    /// column's (a rollup's integer `batch_size`) as their text; a column that is absent or
    /// cannot be written as text has only missing values.
    fn push_column(&mut self, batch: &RecordBatch, name: &str) {
        let as_text = batch
            .column_by_name(name)
            .and_then(|c| match c.data_type() {
                DataType::Utf8 => Some(Arc::clone(c)),
                _ => arrow::compute::cast(c, &DataType::Utf8).ok(),
            });
        let column = as_text.as_ref().and_then(|c| c.as_string_opt::<i32>());
        for row in 0..batch.num_rows() {
            let value = column.filter(|c| c.is_valid(row)).map(|c| c.value(row));
            let known = match value {
                Some(text) => self.of.get(text).copied(),
                None => self.missing,
            };
            let id = known.unwrap_or_else(|| {
                let id = self.distinct;
                self.distinct += 1;
                match value {
                    Some(text) => {
                        self.of.insert(text.to_string(), id);
                    }
                    None => self.missing = Some(id),
                }
                id
            });
            self.ids.push(id);
        }
    }

    /// Whether the two columns' values map one to one, row by row.
    fn same_split(&self, other: &Interned) -> bool {
        let mut to_other = vec![u32::MAX; self.distinct as usize];
        let mut from_other = vec![u32::MAX; other.distinct as usize];
        for (&a, &b) in self.ids.iter().zip(&other.ids) {
            let (forward, back) = (&mut to_other[a as usize], &mut from_other[b as usize]);
            if (*forward != u32::MAX && *forward != b) || (*back != u32::MAX && *back != a) {
                return false;
            }
            (*forward, *back) = (b, a);
        }
        true
    }
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
    let keys = within_budget(batches, base, discover(batches))?;
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

    /// Rows over `worker` and `tenant` with `attrs`: per row, a pod and a tenant, seeded.
    fn rows(seed: u64, n: usize, attrs: impl Fn(usize, usize, usize) -> String) -> RecordBatch {
        let mut rng = infersight_model::rng::SplitMix64::new(seed);
        let (mut workers, mut tenants, mut texts) = (Vec::new(), Vec::new(), Vec::new());
        for row in 0..n {
            let (pod, tenant) = (rng.below(8), rng.below(5));
            workers.push(format!("pod-{pod}"));
            tenants.push(format!("tenant-{tenant}"));
            texts.push(attrs(row, pod, tenant));
        }
        let column = |v: Vec<String>| Arc::new(arrow::array::StringArray::from(v)) as ArrayRef;
        let schema = Schema::new(
            ["worker", "tenant", "attrs"]
                .map(|name| Field::new(name, DataType::Utf8, true))
                .to_vec(),
        );
        RecordBatch::try_new(
            Arc::new(schema),
            vec![column(workers), column(tenants), column(texts)],
        )
        .unwrap()
    }

    #[test]
    fn the_budget_goes_to_keys_that_split_the_rows_anew() {
        let base = ["worker".to_string(), "tenant".to_string()];
        // eight keys of their own (a.0 … a.6 by pod and row, zone by pod pairs), a second name
        // for the pod and for the tenant, and the version a rollout set on half the pods:
        // eleven qualify, the budget holds eight
        let batch = rows(7, 4000, |row, pod, tenant| {
            let mut attrs: Vec<String> = (0..7)
                .map(|i| format!("\"a.{i}\": \"v{}\"", (row / (i + 1) + pod) % 3))
                .collect();
            attrs.push(format!("\"zone\": \"z{}\"", pod / 2));
            attrs.push(format!("\"host.name\": \"node-{pod}\""));
            attrs.push(format!("\"org.id\": \"org-{tenant}\""));
            attrs.push(format!("\"service.version\": \"r{}\"", 1 + (pod % 2)));
            format!("{{{}}}", attrs.join(", "))
        });
        let batches = vec![batch];
        let candidates = discover(&batches);
        assert_eq!(candidates.len(), 11, "{candidates:?}");
        let kept = within_budget(&batches, &base, candidates.clone()).unwrap();
        assert_eq!(kept.len(), MAX_ATTRIBUTE_DIMENSIONS);
        assert!(kept.contains(&"service.version".to_string()), "{kept:?}");
        assert!(!kept.contains(&"host.name".to_string()), "{kept:?}");
        assert!(!kept.contains(&"org.id".to_string()), "{kept:?}");
        // the order is the candidates' order
        let order: Vec<&String> = candidates.iter().filter(|c| kept.contains(c)).collect();
        assert_eq!(kept.iter().collect::<Vec<_>>(), order);
        // within the budget, nothing is left out (the leaves drop a second name later)
        let few: Vec<String> = candidates
            .into_iter()
            .filter(|c| c != "zone" && !c.starts_with("a."))
            .collect();
        assert_eq!(within_budget(&batches, &base, few.clone()).unwrap(), few);
    }

    /// A key that is an integer rollup column under another name (a batch size an engine
    /// reports as its own setting) takes no place in the budget either.
    #[test]
    fn a_key_one_to_one_with_an_integer_column_is_left_out_over_the_budget() {
        // the setting is on every row, the eight keys of their own on 19 rows in 20: taken by
        // presence, the setting would come first
        let mut batch = rows(11, 3000, |row, pod, _| {
            let mut attrs: Vec<String> = (0..8)
                .filter(|_| row % 20 != 0)
                .map(|i| format!("\"a.{i}\": \"v{}\"", (row / (i + 1) + pod) % 3))
                .collect();
            attrs.push(format!("\"engine.max_num_seqs\": \"{}\"", 64 << (pod % 3)));
            format!("{{{}}}", attrs.join(", "))
        });
        // the batch size by pod, as the rollup reads it: Int64
        let workers = batch.column_by_name("worker").unwrap().as_string::<i32>();
        let sizes: Vec<i64> = (0..batch.num_rows())
            .map(|row| {
                let pod: i64 = workers.value(row)["pod-".len()..].parse().unwrap();
                64 << (pod % 3)
            })
            .collect();
        let mut fields = batch.schema().fields().to_vec();
        fields.push(Arc::new(Field::new("batch_size", DataType::Int64, true)));
        let mut columns = batch.columns().to_vec();
        columns.push(Arc::new(arrow::array::Int64Array::from(sizes)) as ArrayRef);
        batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
        let batches = vec![batch];
        let candidates = discover(&batches);
        assert_eq!(candidates.len(), 9, "{candidates:?}");
        let base = ["worker", "tenant", "batch_size"].map(String::from);
        let kept = within_budget(&batches, &base, candidates).unwrap();
        assert!(
            !kept.contains(&"engine.max_num_seqs".to_string()),
            "{kept:?}"
        );
        assert_eq!(kept.len(), MAX_ATTRIBUTE_DIMENSIONS, "{kept:?}");
    }

    #[test]
    fn one_to_one_is_both_ways_and_a_missing_value_is_a_value() {
        let column = |values: &[Option<&str>]| {
            let array = arrow::array::StringArray::from(values.to_vec());
            let schema = Schema::new(vec![Field::new("c", DataType::Utf8, true)]);
            let batch =
                RecordBatch::try_new(Arc::new(schema), vec![Arc::new(array) as ArrayRef]).unwrap();
            let mut interned = Interned::default();
            interned.push_column(&batch, "c");
            interned
        };
        let pod = column(&[Some("p1"), Some("p2"), Some("p3"), None, Some("p1")]);
        let host = column(&[Some("n1"), Some("n2"), Some("n3"), Some("gw"), Some("n1")]);
        let zone = column(&[Some("z1"), Some("z1"), Some("z2"), Some("z2"), Some("z1")]);
        let absent = column(&[Some("n1"), Some("n2"), Some("n3"), None, None]);
        assert!(pod.same_split(&host) && host.same_split(&pod));
        // coarser one way: a function of the pod, not the pod
        assert!(!pod.same_split(&zone) && !zone.same_split(&pod));
        assert!(!pod.same_split(&absent));
    }

    #[test]
    fn sample_strides_share_no_factor_with_ten() {
        assert_eq!(sample_stride(1), 3);
        assert_eq!(sample_stride(4), 7);
        assert_eq!(sample_stride(9), 9);
        assert_eq!(sample_stride(10), 11);
    }
}
