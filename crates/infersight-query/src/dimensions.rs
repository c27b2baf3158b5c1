//! Dimension discovery: which attributes of `requests` are low-cardinality enough to slice
//! latency by. Root-cause localization searches combinations of these, so the set is discovered
//! from the data (named columns and every scalar key of `attrs`), not hard-coded.
//!
//! One streaming scan of the range counts values per attribute. Memory stays bounded: an
//! attribute stops tracking values once it exceeds `max_cardinality` (it is excluded anyway), and
//! at most [`MAX_ATTR_KEYS`] distinct `attrs` keys are tracked.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::prelude::{SessionContext, col, lit};
use datafusion::scalar::ScalarValue;
use futures::StreamExt;
use infersight_model::Table;
use infersight_store::TimeRange;
use serde::Serialize;

use crate::error::QueryError;
use crate::range::TS_COLUMN;
use crate::udf::value_text;

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

/// An attribute whose every distinct value equals its row count is an id (request ids, uuids),
/// not a dimension, once there are more rows than this.
const ID_MIN_ROWS: u64 = 20;

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
}

/// Value counts of one attribute, capped at `max_cardinality + 1` distinct values.
#[derive(Debug, Default)]
struct Counter {
    counts: HashMap<String, u64>,
    total_rows: u64,
    /// More distinct values than allowed were seen; `counts` was dropped.
    too_many: bool,
    /// The attribute held an array or object at least once.
    not_scalar: bool,
}

impl Counter {
    fn add(&mut self, value: &str, max_cardinality: usize) {
        self.total_rows += 1;
        if self.too_many {
            return;
        }
        if let Some(count) = self.counts.get_mut(value) {
            *count += 1;
            return;
        }
        if self.counts.len() >= max_cardinality {
            self.too_many = true;
            self.counts = HashMap::new();
            return;
        }
        self.counts.insert(value.to_string(), 1);
    }

    fn into_dimension(
        self,
        name: String,
        source: DimensionSource,
        max_values: usize,
    ) -> Option<Dimension> {
        let distinct_values = self.counts.len() as u64;
        let is_id = distinct_values == self.total_rows && self.total_rows > ID_MIN_ROWS;
        if self.too_many || self.not_scalar || self.total_rows == 0 || is_id {
            return None;
        }
        let mut values: Vec<(String, u64)> = self.counts.into_iter().collect();
        values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        values.truncate(max_values);
        Some(Dimension {
            name,
            source,
            distinct_values,
            total_rows: self.total_rows,
            values,
        })
    }
}

struct Discovery {
    max_cardinality: usize,
    columns: Vec<(&'static str, Counter)>,
    attrs: HashMap<String, Counter>,
}

impl Discovery {
    fn new(max_cardinality: usize) -> Self {
        let columns = STRING_COLUMNS
            .iter()
            .chain(SETTING_COLUMNS)
            .map(|name| (*name, Counter::default()))
            .collect();
        Self {
            max_cardinality,
            columns,
            attrs: HashMap::new(),
        }
    }

    fn observe(&mut self, batch: &RecordBatch) -> Result<(), QueryError> {
        let max_cardinality = self.max_cardinality;
        for (name, counter) in &mut self.columns {
            let Some(column) = batch.column_by_name(name) else {
                continue;
            };
            if let Some(integers) = column.as_any().downcast_ref::<Int64Array>() {
                for value in integers.iter().flatten() {
                    counter.add(&value.to_string(), max_cardinality);
                }
            } else {
                let strings = as_utf8(column)?;
                let strings = strings
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .expect("utf8");
                for value in strings.iter().flatten() {
                    counter.add(value, max_cardinality);
                }
            }
        }
        if let Some(column) = batch.column_by_name(ATTRS_COLUMN) {
            let strings = as_utf8(column)?;
            let strings = strings
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("utf8");
            for text in strings.iter().flatten() {
                self.observe_attrs(text);
            }
        }
        Ok(())
    }

    fn observe_attrs(&mut self, text: &str) {
        // Rows whose attrs are not a JSON object contribute nothing (json_get returns NULL too).
        let Ok(object) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
        else {
            return;
        };
        for (key, value) in object {
            if !self.attrs.contains_key(&key) && self.attrs.len() >= MAX_ATTR_KEYS {
                continue;
            }
            let counter = self.attrs.entry(key).or_default();
            match &value {
                serde_json::Value::Array(_) | serde_json::Value::Object(_) => {
                    counter.not_scalar = true
                }
                scalar => {
                    if let Some(text) = value_text(scalar) {
                        counter.add(&text, self.max_cardinality);
                    }
                }
            }
        }
    }

    fn finish(self, max_values: usize) -> Vec<Dimension> {
        let columns = self.columns.into_iter().filter_map(|(name, counter)| {
            counter.into_dimension(name.to_string(), DimensionSource::Column, max_values)
        });
        let attrs = self.attrs.into_iter().filter_map(|(key, counter)| {
            counter.into_dimension(key, DimensionSource::Attrs, max_values)
        });
        let mut dimensions: Vec<Dimension> = columns.chain(attrs).collect();
        dimensions.sort_by(|a, b| a.name.cmp(&b.name).then(a.source.cmp(&b.source)));
        dimensions
    }
}

fn as_utf8(column: &ArrayRef) -> Result<ArrayRef, QueryError> {
    if column.data_type() == &DataType::Utf8 {
        return Ok(Arc::clone(column));
    }
    cast(column, &DataType::Utf8)
        .map_err(|error| QueryError::Internal(format!("reading a dimension column: {error}")))
}

fn ts_literal(ns: i64) -> datafusion::prelude::Expr {
    lit(ScalarValue::TimestampNanosecond(
        Some(ns),
        Some("UTC".into()),
    ))
}

pub(crate) async fn discover_dimensions(
    context: &SessionContext,
    range: TimeRange,
    max_cardinality: usize,
    max_values: usize,
) -> Result<Vec<Dimension>, QueryError> {
    let mut frame = context.table(Table::Requests.name()).await?;
    if let Some(since) = range.since_ns {
        frame = frame.filter(col(TS_COLUMN).gt_eq(ts_literal(since)))?;
    }
    if let Some(until) = range.until_ns {
        frame = frame.filter(col(TS_COLUMN).lt(ts_literal(until)))?;
    }
    let columns: Vec<&str> = STRING_COLUMNS
        .iter()
        .chain(SETTING_COLUMNS)
        .copied()
        .chain([ATTRS_COLUMN])
        .collect();
    let mut stream = frame.select_columns(&columns)?.execute_stream().await?;
    let mut discovery = Discovery::new(max_cardinality);
    while let Some(batch) = stream.next().await {
        discovery.observe(&batch?)?;
    }
    Ok(discovery.finish(max_values))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_excludes_ids_and_high_cardinality() {
        let mut low = Counter::default();
        for i in 0..100 {
            low.add(if i % 3 == 0 { "a" } else { "b" }, 10);
        }
        let dimension = low
            .into_dimension("x".into(), DimensionSource::Column, 1)
            .unwrap();
        assert_eq!(dimension.distinct_values, 2);
        assert_eq!(dimension.total_rows, 100);
        assert_eq!(dimension.values, vec![("b".to_string(), 66)]);

        let mut ids = Counter::default();
        for i in 0..21 {
            ids.add(&i.to_string(), 100);
        }
        assert!(
            ids.into_dimension("id".into(), DimensionSource::Attrs, 5)
                .is_none()
        );

        let mut few_ids = Counter::default();
        for i in 0..20 {
            few_ids.add(&i.to_string(), 100);
        }
        assert!(
            few_ids
                .into_dimension("id".into(), DimensionSource::Attrs, 5)
                .is_some()
        );

        let mut wide = Counter::default();
        for i in 0..50 {
            wide.add(&(i % 11).to_string(), 10);
        }
        assert!(wide.too_many);
        assert_eq!(wide.total_rows, 50);
        assert!(
            wide.into_dimension("w".into(), DimensionSource::Column, 5)
                .is_none()
        );
    }

    #[test]
    fn attrs_with_structured_values_are_not_dimensions() {
        let mut discovery = Discovery::new(10);
        discovery.observe_attrs(r#"{"k":"v","list":[1],"n":2,"nothing":null}"#);
        discovery.observe_attrs("not json");
        let names: Vec<String> = discovery
            .finish(5)
            .into_iter()
            .map(|dimension| dimension.name)
            .collect();
        assert_eq!(names, vec!["k".to_string(), "n".to_string()]);
    }
}
