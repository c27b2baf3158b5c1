//! [`ParseStage`]: runs [`parse_line`] on the `body` of every `logs` row, fills `log_class`,
//! merges the parsed fields into `attrs` (never overwriting a key the receiver set), appends a
//! `metrics` batch with the samples of statistics lines (same `ts` and `worker` as their row), and
//! a `requests` batch with one row per TGI / SGLang request-completion line (see `requests.rs`).
//!
//! Request rows from log lines are off by default (`requests_from_logs`): engines that also
//! export traces would have every request counted twice, since raw log lines carry no span id.
//! A request line whose log record has a `span_id` gives no row: it is correlated with a traced
//! span, that span becomes the request row itself (in `normalize`), and a row from the line too
//! would count the request twice. Such lines are counted (`request_lines_traced`).
//!
//! Prompt and response text split out of mixed lines is redacted here already, and the body of
//! such rows is redacted too, so personal data never depends on the order of later stages.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray, TimestampNanosecondArray};
use arrow::record_batch::RecordBatch;
use infersight_model::{MetricRecord, RequestRecord, Table, TableBatch};
use serde_json::{Map, Value};

use super::config::ParseConfig;
use super::lines::{LogClass, parse_line};
use super::requests::{LogRowContext, parse_request_line};
use crate::error::PipelineError;
use crate::stage::Stage;
use crate::stages::redact::{RedactConfig, Redactor};

pub struct ParseStage {
    config: ParseConfig,
    redactor: Redactor,
    rows_by_class: BTreeMap<&'static str, u64>,
    metric_samples: u64,
    request_rows: u64,
    request_rows_mismatched: u64,
    request_lines_traced: u64,
    /// Request lines seen while `requests_from_logs` is off.
    request_lines_ignored: u64,
}

/// What [`ParseStage::parse_batch`] made of one `logs` batch.
struct ParsedBatch {
    logs: RecordBatch,
    metrics: Vec<MetricRecord>,
    requests: Vec<RequestRecord>,
    /// Rows of `requests` whose latency phases contradict each other.
    requests_mismatched: u64,
    /// Request lines skipped because their log record belongs to a traced span.
    request_lines_traced: u64,
}

impl std::fmt::Debug for ParseStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParseStage")
            .field("config", &self.config)
            .field("metric_samples", &self.metric_samples)
            .field("request_rows", &self.request_rows)
            .finish()
    }
}

fn string_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray, PipelineError> {
    let column = batch
        .column_by_name(name)
        .ok_or_else(|| PipelineError::Column {
            table: "logs",
            column: name.to_string(),
            reason: "missing".into(),
        })?;
    column
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| PipelineError::Column {
            table: "logs",
            column: name.to_string(),
            reason: format!("expected utf8, found {}", column.data_type()),
        })
}

/// A string column the stage can do without (`None` when the batch has no such column).
fn optional_string_column<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<Option<&'a StringArray>, PipelineError> {
    batch
        .column_by_name(name)
        .map(|_| string_column(batch, name))
        .transpose()
}

fn optional(array: &StringArray, row: usize) -> Option<&str> {
    (!array.is_null(row)).then(|| array.value(row))
}

fn column_value(column: Option<&StringArray>, row: usize) -> Option<&str> {
    column.and_then(|column| optional(column, row))
}

impl ParseStage {
    pub fn new(config: &ParseConfig) -> Result<Self, PipelineError> {
        Ok(Self {
            config: config.clone(),
            redactor: Redactor::new(&RedactConfig::default())?,
            rows_by_class: BTreeMap::new(),
            metric_samples: 0,
            request_rows: 0,
            request_rows_mismatched: 0,
            request_lines_traced: 0,
            request_lines_ignored: 0,
        })
    }

    /// Leaves prompt and response text to an enabled `redact` stage that runs after this one:
    /// its per-path rules (mask, keyed hash, drop) and its audit then cover them too, instead of
    /// finding them already masked here.
    pub fn deferring_redaction(mut self) -> Self {
        self.config.redact_text = false;
        self
    }

    fn redact(&self, text: &str) -> String {
        if self.config.redact_text {
            self.redactor.redact(text).into_owned()
        } else {
            text.to_string()
        }
    }

    fn parse_batch(&mut self, batch: &RecordBatch) -> Result<ParsedBatch, PipelineError> {
        let bodies = string_column(batch, "body")?;
        let classes = string_column(batch, "log_class")?;
        let attrs = string_column(batch, "attrs")?;
        let workers = string_column(batch, "worker")?;
        let services = optional_string_column(batch, "service")?;
        let trace_ids = optional_string_column(batch, "trace_id")?;
        let span_ids = optional_string_column(batch, "span_id")?;
        let request_ids = optional_string_column(batch, "request_id")?;
        let timestamps = batch
            .column_by_name("ts")
            .and_then(|ts| ts.as_any().downcast_ref::<TimestampNanosecondArray>());
        let rows = batch.num_rows();
        let mut new_bodies: Vec<Option<String>> = Vec::with_capacity(rows);
        let mut new_classes: Vec<Option<String>> = Vec::with_capacity(rows);
        let mut new_attrs: Vec<String> = Vec::with_capacity(rows);
        let mut metrics = Vec::new();
        let mut requests = Vec::new();
        let mut requests_mismatched = 0;
        let mut request_lines_traced = 0;
        for row in 0..rows {
            let attrs_text = optional(attrs, row).unwrap_or("{}");
            let Some(body) = optional(bodies, row) else {
                new_bodies.push(None);
                new_classes.push(optional(classes, row).map(str::to_string));
                new_attrs.push(attrs_text.to_string());
                continue;
            };
            let parsed = parse_line(body);
            if let Some(ts) = timestamps.filter(|ts| !ts.is_null(row))
                && let Some(request) = parse_request_line(body)
            {
                if !self.config.requests_from_logs {
                    if self.request_lines_ignored == 0 {
                        tracing::info!(
                            "engine request lines (TGI / SGLang) seen in logs; set stages.parse.requests_from_logs = true to turn them into requests rows, if these engines do not also export traces"
                        );
                    }
                    self.request_lines_ignored += 1;
                } else if column_value(span_ids, row).is_some() {
                    request_lines_traced += 1;
                } else if let Some((record, mismatched)) = request.into_record(&LogRowContext {
                    ts_ns: ts.value(row),
                    service: column_value(services, row),
                    worker: optional(workers, row),
                    trace_id: column_value(trace_ids, row),
                    request_id: column_value(request_ids, row),
                }) {
                    requests_mismatched += u64::from(mismatched);
                    requests.push(record);
                }
            }
            let class = optional(classes, row)
                .map(str::to_string)
                .unwrap_or_else(|| parsed.class.as_str().to_string());
            *self.rows_by_class.entry(parsed.class.as_str()).or_default() += 1;
            let mut fields = parsed.fields;
            let mut body_out = body.to_string();
            if let Some(prompt) = &parsed.prompt {
                fields.insert("prompt".into(), Value::String(self.redact(prompt)));
            }
            if let Some(response) = &parsed.response {
                fields.insert("response".into(), Value::String(self.redact(response)));
            }
            if parsed.prompt.is_some() || parsed.response.is_some() {
                body_out = self.redact(body);
            }
            if let Some(logits) = &parsed.logits {
                fields.insert(
                    "logits_top_k_ids".into(),
                    serde_json::json!(logits.top_k_ids),
                );
                let key = if logits.logprobs {
                    "logits_top_k_logprobs"
                } else {
                    "logits_top_k_probs"
                };
                fields.insert(key.into(), serde_json::json!(logits.top_k_probs));
            }
            new_attrs.push(merge_attrs(attrs_text, fields));
            new_bodies.push(Some(body_out));
            new_classes.push(Some(class));
            if self.config.emit_metrics && parsed.class != LogClass::System {
                let ts = timestamps.map_or(0, |ts| if ts.is_null(row) { 0 } else { ts.value(row) });
                for sample in parsed.metrics {
                    let labels: Map<String, Value> = sample
                        .labels
                        .into_iter()
                        .map(|(k, v)| (k, Value::String(v)))
                        .collect();
                    metrics.push(MetricRecord {
                        ts,
                        name: Some(sample.name),
                        source_name: Some(sample.source_name),
                        kind: Some("gauge".into()),
                        value: Some(sample.value),
                        worker: optional(workers, row).map(str::to_string),
                        engine: Some(sample.engine.to_string()),
                        labels: Value::Object(labels).to_string(),
                        ..Default::default()
                    });
                }
            }
        }
        let schema = batch.schema();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        columns[schema.index_of("body")?] = Arc::new(StringArray::from(new_bodies));
        columns[schema.index_of("log_class")?] = Arc::new(StringArray::from(new_classes));
        columns[schema.index_of("attrs")?] = Arc::new(StringArray::from(new_attrs));
        Ok(ParsedBatch {
            logs: RecordBatch::try_new(schema, columns)?,
            metrics,
            requests,
            requests_mismatched,
            request_lines_traced,
        })
    }
}

/// The row's attrs object with the parsed fields added (existing keys win; non-object attrs are
/// kept under `_attrs`).
fn merge_attrs(attrs: &str, fields: Map<String, Value>) -> String {
    if fields.is_empty() {
        return attrs.to_string();
    }
    let mut object = match serde_json::from_str::<Value>(attrs) {
        Ok(Value::Object(object)) => object,
        Ok(other) => Map::from_iter([("_attrs".to_string(), other)]),
        Err(_) => Map::from_iter([("_attrs".to_string(), Value::String(attrs.to_string()))]),
    };
    for (key, value) in fields {
        object.entry(key).or_insert(value);
    }
    Value::Object(object).to_string()
}

impl Stage for ParseStage {
    fn name(&self) -> &'static str {
        "parse"
    }

    fn process(
        &mut self,
        batch: TableBatch,
        out: &mut Vec<TableBatch>,
    ) -> Result<(), PipelineError> {
        if !self.config.enabled || batch.table != Table::Logs {
            out.push(batch);
            return Ok(());
        }
        let parsed = self.parse_batch(&batch.batch)?;
        self.metric_samples += parsed.metrics.len() as u64;
        self.request_rows += parsed.requests.len() as u64;
        self.request_rows_mismatched += parsed.requests_mismatched;
        self.request_lines_traced += parsed.request_lines_traced;
        out.push(TableBatch {
            table: Table::Logs,
            batch: parsed.logs,
        });
        if !parsed.metrics.is_empty() {
            out.push(TableBatch {
                table: Table::Metrics,
                batch: MetricRecord::to_batch(&parsed.metrics),
            });
        }
        if !parsed.requests.is_empty() {
            out.push(TableBatch {
                table: Table::Requests,
                batch: RequestRecord::to_batch(&parsed.requests),
            });
        }
        Ok(())
    }

    fn stats(&self) -> BTreeMap<&'static str, u64> {
        let mut stats = BTreeMap::from([
            ("metric_samples", self.metric_samples),
            ("request_rows", self.request_rows),
            ("request_rows_mismatched", self.request_rows_mismatched),
            ("request_lines_traced", self.request_lines_traced),
            ("request_lines_ignored", self.request_lines_ignored),
        ]);
        for class in [
            LogClass::PromptInput,
            LogClass::InferenceMetrics,
            LogClass::ResponseOutput,
            LogClass::EngineStats,
            LogClass::Access,
            LogClass::System,
        ] {
            stats.insert(
                class_counter(class),
                self.rows_by_class.get(class.as_str()).copied().unwrap_or(0),
            );
        }
        stats
    }
}

fn class_counter(class: LogClass) -> &'static str {
    match class {
        LogClass::PromptInput => "rows_prompt_input",
        LogClass::InferenceMetrics => "rows_inference_metrics",
        LogClass::ResponseOutput => "rows_response_output",
        LogClass::EngineStats => "rows_engine_stats",
        LogClass::Access => "rows_access",
        LogClass::System => "rows_system",
    }
}
