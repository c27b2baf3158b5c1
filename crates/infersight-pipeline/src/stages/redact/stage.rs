//! [`RedactStage`]: applies the [`Redactor`] to every free-text and JSON column of the canonical
//! tables. Identifier and label columns (`model`, `worker`, `trace_id` …) are left alone: they are
//! the dimensions root-cause localization works on, and they carry no user content.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::record_batch::RecordBatch;
use infersight_model::{Table, TableBatch};

use super::config::{DetectorName, RedactConfig};
use super::redactor::Redactor;
use crate::error::PipelineError;
use crate::stage::Stage;

/// How a column's values are redacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ColumnKind {
    /// Free text; a value that looks like a JSON object or array is redacted as JSON.
    Text,
    /// A JSON document (`attrs`, `labels`, `params`).
    Json,
}

/// The columns this stage rewrites, per table.
fn redacted_columns(table: Table) -> &'static [(&'static str, ColumnKind)] {
    use ColumnKind::{Json, Text};
    match table {
        Table::Logs => &[("body", Text), ("params", Json), ("attrs", Json)],
        Table::Requests => &[("error_type", Text), ("attrs", Json)],
        Table::Spans => &[("name", Text), ("status_message", Text), ("attrs", Json)],
        Table::Metrics => &[("labels", Json)],
        Table::Templates => &[("template", Text)],
        Table::Tokens => &[],
    }
}

pub struct RedactStage {
    redactor: Redactor,
    rows_redacted: u64,
}

impl std::fmt::Debug for RedactStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedactStage")
            .field("redactor", &self.redactor)
            .field("rows_redacted", &self.rows_redacted)
            .finish()
    }
}

impl RedactStage {
    pub fn new(config: &RedactConfig) -> Result<Self, PipelineError> {
        Ok(Self {
            redactor: Redactor::new(config)?,
            rows_redacted: 0,
        })
    }

    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Rows in which at least one column changed, since construction.
    pub fn rows_redacted(&self) -> u64 {
        self.rows_redacted
    }

    fn redact_batch(
        &self,
        table: Table,
        batch: &RecordBatch,
    ) -> Result<(RecordBatch, Vec<bool>), PipelineError> {
        let mut row_changed = vec![false; batch.num_rows()];
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        let mut any_changed = false;
        for &(name, kind) in redacted_columns(table) {
            // A column absent from this batch's schema has nothing to redact.
            let Ok(index) = batch.schema().index_of(name) else {
                continue;
            };
            let values = columns[index]
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| PipelineError::Column {
                    table: table.name(),
                    column: name.to_string(),
                    reason: format!(
                        "expected utf8 for redaction, found {}",
                        columns[index].data_type()
                    ),
                })?;
            if let Some(redacted) = self.redact_column(values, kind, &mut row_changed) {
                columns[index] = Arc::new(redacted);
                any_changed = true;
            }
        }
        let batch = if any_changed {
            RecordBatch::try_new(batch.schema(), columns)?
        } else {
            batch.clone()
        };
        Ok((batch, row_changed))
    }

    /// The redacted column, or `None` when no value changed (the input array is reused).
    fn redact_column(
        &self,
        values: &StringArray,
        kind: ColumnKind,
        row_changed: &mut [bool],
    ) -> Option<StringArray> {
        let mut changed: Vec<(usize, String)> = Vec::new();
        for (row, value) in values.iter().enumerate() {
            let Some(value) = value else { continue };
            let redacted = match kind {
                ColumnKind::Json => self.redactor.redact_json(value),
                ColumnKind::Text if looks_like_json(value) => self.redactor.redact_json(value),
                ColumnKind::Text => self.redactor.redact(value),
            };
            if let std::borrow::Cow::Owned(redacted) = redacted
                && redacted != value
            {
                row_changed[row] = true;
                changed.push((row, redacted));
            }
        }
        if changed.is_empty() {
            return None;
        }
        let mut changed = changed.into_iter().peekable();
        let rebuilt: StringArray = values
            .iter()
            .enumerate()
            .map(|(row, value)| match changed.peek() {
                Some((changed_row, _)) if *changed_row == row => changed.next().map(|(_, v)| v),
                _ => value.map(str::to_string),
            })
            .collect();
        debug_assert_eq!(rebuilt.null_count(), values.null_count());
        Some(rebuilt)
    }
}

fn looks_like_json(value: &str) -> bool {
    let trimmed = value.trim();
    (trimmed.starts_with('{') && trimmed.ends_with('}'))
        || (trimmed.starts_with('[') && trimmed.ends_with(']'))
}

impl Stage for RedactStage {
    fn name(&self) -> &'static str {
        "redact"
    }

    fn process(
        &mut self,
        batch: TableBatch,
        out: &mut Vec<TableBatch>,
    ) -> Result<(), PipelineError> {
        if !self.redactor.is_enabled() || redacted_columns(batch.table).is_empty() {
            out.push(batch);
            return Ok(());
        }
        let (redacted, row_changed) = self.redact_batch(batch.table, &batch.batch)?;
        let rows = row_changed.iter().filter(|&&changed| changed).count() as u64;
        if rows > 0 {
            tracing::debug!(table = %batch.table, rows, "redacted rows");
        }
        self.rows_redacted += rows;
        out.push(TableBatch {
            table: batch.table,
            batch: redacted,
        });
        Ok(())
    }

    fn stats(&self) -> BTreeMap<&'static str, u64> {
        let hits = self.redactor.hits();
        let mut stats = BTreeMap::from([("rows_redacted", self.rows_redacted)]);
        for detector in DetectorName::ALL {
            stats.insert(hit_counter_name(Some(detector)), hits[detector.as_str()]);
        }
        stats.insert(hit_counter_name(None), hits["custom"]);
        stats
    }
}

/// `hits_<detector>`; `None` is the shared counter of the custom patterns.
fn hit_counter_name(detector: Option<DetectorName>) -> &'static str {
    match detector {
        Some(DetectorName::Email) => "hits_email",
        Some(DetectorName::Phone) => "hits_phone",
        Some(DetectorName::CnId) => "hits_cn_id",
        Some(DetectorName::Card) => "hits_card",
        Some(DetectorName::Ip) => "hits_ip",
        Some(DetectorName::ApiKey) => "hits_api_key",
        Some(DetectorName::Bearer) => "hits_bearer",
        Some(DetectorName::Jwt) => "hits_jwt",
        None => "hits_custom",
    }
}
