//! The implementation of dimension discovery before the parallel, allocation-free one (test
//! only), kept verbatim as the reference the tests compare against: one pass over the batches in
//! order, `serde_json::Map` per row.

use std::collections::HashMap;

use arrow::array::{Array, Int64Array, RecordBatch, StringArray};

use super::count::{ID_MIN_ROWS, as_utf8};
use super::{
    ATTRS_COLUMN, Dimension, DimensionKind, DimensionSource, MAX_ATTR_KEYS, SETTING_COLUMNS,
    STRING_COLUMNS, is_numeric_value,
};
use infersight_query::QueryError;
use infersight_query::value_text;

#[derive(Debug, Default)]
struct Counter {
    counts: HashMap<String, u64>,
    total_rows: u64,
    too_many: bool,
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
        let all_numeric = self.counts.keys().all(|value| is_numeric_value(value));
        let mut values: Vec<(String, u64)> = self.counts.into_iter().collect();
        values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        values.truncate(max_values);
        Some(Dimension {
            name,
            source,
            distinct_values,
            total_rows: self.total_rows,
            values,
            kind: DimensionKind::of(distinct_values, all_numeric),
        })
    }
}

pub(super) struct Discovery {
    max_cardinality: usize,
    columns: Vec<(&'static str, Counter)>,
    attrs: HashMap<String, Counter>,
}

impl Discovery {
    pub(super) fn new(max_cardinality: usize) -> Self {
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

    pub(super) fn observe(&mut self, batch: &RecordBatch) -> Result<(), QueryError> {
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

    pub(super) fn observe_attrs(&mut self, text: &str) {
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

    pub(super) fn finish(self, max_values: usize) -> Vec<Dimension> {
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
