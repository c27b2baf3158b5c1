//! [`RedactStage`]: applies the [`Redactor`] to every free-text and JSON column of the canonical
//! tables, and emits the redaction audit (`redactions` rows) next to each batch it changed.
//!
//! Identifier and label columns (`model`, `worker`, `trace_id` …) are left alone: they are the
//! dimensions root-cause localization works on, and they carry no user content.
//!
//! The audit rows travel in the same stage output as the redacted rows, so the sink stores them
//! in the same append (one WAL record): no audit for data that was not stored, none lost for data
//! that was.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray, TimestampNanosecondArray};
use arrow::record_batch::RecordBatch;
use infersight_model::{RedactionRecord, Table, TableBatch};

use super::config::{DetectorName, RedactAction, RedactConfig};
use super::detectors::Source;
use super::redactor::{AuditEvent, Decider, FieldOutcome, Redactor};
use crate::error::PipelineError;
use crate::stage::Stage;

/// Width of the audit's time buckets: one row per minute and (path, rule, detector, action).
pub const AUDIT_BUCKET_NS: i64 = 60_000_000_000;

/// Longest attribute path kept in the audit; longer paths are cut at a character boundary.
const AUDIT_PATH_MAX_BYTES: usize = 200;

/// How a column's values are redacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ColumnKind {
    /// Free text; a value that looks like a JSON object or array is redacted as JSON.
    Text,
    /// A JSON document (`attrs`, `labels`, `params`).
    Json,
}

/// The columns this stage rewrites, per table (kept in step with `config::REDACTED_TABLE_COLUMNS`,
/// which rule paths are checked against).
fn redacted_columns(table: Table) -> &'static [(&'static str, ColumnKind)] {
    use ColumnKind::{Json, Text};
    match table {
        Table::Logs => &[("body", Text), ("params", Json), ("attrs", Json)],
        Table::Requests => &[("error_type", Text), ("attrs", Json)],
        Table::Spans => &[("name", Text), ("status_message", Text), ("attrs", Json)],
        Table::Metrics => &[("labels", Json)],
        Table::Templates => &[("template", Text)],
        // `tokens` holds no text; `redactions` is this stage's own output and holds no values
        Table::Tokens | Table::Redactions => &[],
    }
}

/// One audit count being collected: minute, column, attribute path, rule, detector, action.
type AuditKey = (
    i64,
    &'static str,
    Option<String>,
    Decider,
    Option<Source>,
    RedactAction,
);

pub struct RedactStage {
    redactor: Redactor,
    rows_redacted: u64,
    audit_rows: u64,
    /// Where new rules come from while the stage runs (`serve` on SIGHUP); `None`: fixed.
    reload: Option<Arc<RedactReload>>,
    /// The reload generation the running rules come from.
    generation: u64,
    /// Counters of the rules replaced so far (a reload does not reset `/metrics`).
    carried: BTreeMap<&'static str, u64>,
}

/// New rules for a running [`RedactStage`]: [`RedactReload::replace`] hands over a built
/// [`Redactor`]; the stage takes it before the next batch it redacts, so no batch is redacted
/// half with the old rules and half with the new.
#[derive(Default)]
pub struct RedactReload {
    pending: std::sync::Mutex<Option<Redactor>>,
    generation: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for RedactReload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedactReload")
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

impl RedactReload {
    /// Queues `redactor` for the stage (a newer call before the stage took it wins).
    pub fn replace(&self, redactor: Redactor) {
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *pending = Some(redactor);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// How many replacements were queued.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    fn take(&self) -> Option<Redactor> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
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
        Ok(Self::from_redactor(Redactor::new(config)?))
    }

    /// The stage around an already built redactor (e.g. one from [`Redactor::with_secret`]).
    pub fn from_redactor(redactor: Redactor) -> Self {
        Self {
            redactor,
            rows_redacted: 0,
            audit_rows: 0,
            reload: None,
            generation: 0,
            carried: BTreeMap::new(),
        }
    }

    /// Takes new rules from `reload` whenever it has some.
    pub fn reloaded_by(mut self, reload: Arc<RedactReload>) -> Self {
        self.generation = reload.generation();
        self.reload = Some(reload);
        self
    }

    /// Switches to the rules `reload` holds, if it holds newer ones; the old rules' counters
    /// carry over.
    fn take_reloaded(&mut self) {
        let Some(reload) = &self.reload else {
            return;
        };
        let generation = reload.generation();
        if generation == self.generation {
            return;
        }
        self.generation = generation;
        if let Some(redactor) = reload.take() {
            for (name, value) in self.redactor_counters() {
                *self.carried.entry(name).or_insert(0) += value;
            }
            self.redactor = redactor;
            tracing::info!(generation, "redaction rules replaced");
        }
    }

    /// The redactor's own counters under their stage stat names.
    fn redactor_counters(&self) -> Vec<(&'static str, u64)> {
        let hits = self.redactor.hits();
        let mut counters = vec![
            ("values_hashed", self.redactor.hashed()),
            ("values_dropped", self.redactor.dropped()),
            (hit_counter_name(None), hits["custom"]),
        ];
        for detector in DetectorName::ALL {
            counters.push((hit_counter_name(Some(detector)), hits[detector.as_str()]));
        }
        counters
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
        audit: &mut BTreeMap<AuditKey, u64>,
    ) -> Result<(RecordBatch, Vec<bool>), PipelineError> {
        let mut row_changed = vec![false; batch.num_rows()];
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        let mut any_changed = false;
        let ts = batch
            .column_by_name("ts")
            .and_then(|c| c.as_any().downcast_ref::<TimestampNanosecondArray>());
        for &(name, kind) in redacted_columns(table) {
            // A column absent from this batch's schema has nothing to redact.
            let Ok(index) = batch.schema().index_of(name) else {
                continue;
            };
            let nullable = batch.schema().field(index).is_nullable();
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
            let column = Column {
                name,
                kind,
                nullable,
                rules: self.redactor.column_rules(table.name(), name),
            };
            if let Some(redacted) = self.redact_column(values, &column, ts, &mut row_changed, audit)
            {
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
        column: &Column,
        ts: Option<&TimestampNanosecondArray>,
        row_changed: &mut [bool],
        audit: &mut BTreeMap<AuditKey, u64>,
    ) -> Option<StringArray> {
        let mut changed: Vec<(usize, Option<String>)> = Vec::new();
        // The last value that came back unchanged without any audit event. Redaction of a value
        // depends only on the value and the column, and such a call moved no counter, so an equal
        // value that follows (a span name, a status message) needs no second call.
        let mut last_clean: Option<&str> = None;
        for (row, value) in values.iter().enumerate() {
            let Some(value) = value else { continue };
            if last_clean == Some(value) {
                continue;
            }
            let as_json = column.kind == ColumnKind::Json || looks_like_json(value);
            let mut events = 0usize;
            let mut record = |event: AuditEvent<'_>| {
                events += 1;
                let bucket = ts.filter(|ts| !ts.is_null(row)).map_or(0, |ts| {
                    ts.value(row).div_euclid(AUDIT_BUCKET_NS) * AUDIT_BUCKET_NS
                });
                let key = (
                    bucket,
                    column.name,
                    event.key_path.map(str::to_string),
                    event.decider,
                    event.detector,
                    event.action,
                );
                *audit.entry(key).or_default() += 1;
            };
            let outcome = self
                .redactor
                .redact_field(value, as_json, &column.rules, &mut record);
            let replacement = match outcome {
                FieldOutcome::Value(Cow::Borrowed(_)) => {
                    if events == 0 {
                        last_clean = Some(value);
                    }
                    continue;
                }
                FieldOutcome::Value(Cow::Owned(redacted)) if redacted == value => continue,
                FieldOutcome::Value(Cow::Owned(redacted)) => Some(redacted),
                FieldOutcome::Dropped if column.nullable => None,
                FieldOutcome::Dropped if column.kind == ColumnKind::Json => Some("{}".into()),
                FieldOutcome::Dropped => Some(String::new()),
            };
            row_changed[row] = true;
            changed.push((row, replacement));
        }
        if changed.is_empty() {
            return None;
        }
        let mut changed = changed.into_iter().peekable();
        let rebuilt: StringArray = values
            .iter()
            .enumerate()
            .map(|(row, value)| match changed.peek() {
                Some((changed_row, _)) if *changed_row == row => {
                    changed.next().and_then(|(_, v)| v)
                }
                _ => value.map(str::to_string),
            })
            .collect();
        Some(rebuilt)
    }

    /// The audit counts of one input batch as `redactions` rows.
    fn audit_batch(&self, table: Table, audit: BTreeMap<AuditKey, u64>) -> RecordBatch {
        let records: Vec<RedactionRecord> = audit
            .into_iter()
            .map(
                |((bucket, column, key_path, decider, detector, action), count)| {
                    let mut path = format!("{table}.{column}");
                    if let Some(key_path) = key_path {
                        // keys are stored unredacted in the data, but the audit never adds a copy
                        // of anything a detector would find
                        path.push('.');
                        path.push_str(&self.redactor.redact_quietly(&key_path));
                        truncate_at_char_boundary(&mut path, AUDIT_PATH_MAX_BYTES);
                    }
                    RedactionRecord {
                        ts: bucket,
                        source_table: Some(table.name().to_string()),
                        source_column: Some(column.to_string()),
                        path: Some(path),
                        rule: Some(self.redactor.decider_name(decider).to_string()),
                        detector: detector.map(|s| self.redactor.source_name(s).into_owned()),
                        action: Some(action.as_str().to_string()),
                        count: Some(i64::try_from(count).unwrap_or(i64::MAX)),
                        // stamped by the writer with the submitter's org
                        org: None,
                    }
                },
            )
            .collect();
        RedactionRecord::to_batch(&records)
    }
}

/// A column being redacted, with the path rules that can apply to it.
struct Column {
    name: &'static str,
    kind: ColumnKind,
    nullable: bool,
    rules: Vec<usize>,
}

fn truncate_at_char_boundary(text: &mut String, max_bytes: usize) {
    if text.len() > max_bytes {
        let mut end = max_bytes;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
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
        self.take_reloaded();
        if !self.redactor.is_enabled() || redacted_columns(batch.table).is_empty() {
            out.push(batch);
            return Ok(());
        }
        let mut audit = BTreeMap::new();
        let (redacted, row_changed) = self.redact_batch(batch.table, &batch.batch, &mut audit)?;
        let rows = row_changed.iter().filter(|&&changed| changed).count() as u64;
        if rows > 0 {
            tracing::debug!(table = %batch.table, rows, "redacted rows");
        }
        self.rows_redacted += rows;
        out.push(TableBatch {
            table: batch.table,
            batch: redacted,
        });
        if !audit.is_empty() {
            let audit = self.audit_batch(batch.table, audit);
            self.audit_rows += audit.num_rows() as u64;
            out.push(TableBatch {
                table: Table::Redactions,
                batch: audit,
            });
        }
        Ok(())
    }

    fn stats(&self) -> BTreeMap<&'static str, u64> {
        let mut stats = BTreeMap::from([
            ("rows_redacted", self.rows_redacted),
            ("audit_rows", self.audit_rows),
        ]);
        for (name, value) in self.redactor_counters() {
            stats.insert(name, value + self.carried.get(name).copied().unwrap_or(0));
        }
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
