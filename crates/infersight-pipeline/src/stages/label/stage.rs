//! [`LabelStage`]: fills `label` and `label_confidence` of every `logs` row (null when no rule
//! matched), keeping labels a receiver already set, and flags new-and-frequent templates: a
//! template first seen after the warm-up that collects `new_template_min_count` unlabeled rows
//! gets [`NEW_TEMPLATE_LABEL`] on its following rows, so "something we never saw is suddenly
//! everywhere" is queryable like any fault label.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Float64Array, StringArray};
use arrow::record_batch::RecordBatch;
use infersight_model::{Table, TableBatch};
use serde_json::Value;

use super::config::LabelConfig;
use super::rules::{LabelRules, NEW_TEMPLATE_LABEL, RowView, default_rules};
use crate::error::PipelineError;
use crate::stage::Stage;

/// Confidence of the new-template flag: it says "look here", not what is wrong.
const NEW_TEMPLATE_CONFIDENCE: f64 = 0.5;

#[derive(Debug, Default)]
struct TemplateSeen {
    new: bool,
    unlabeled: u64,
    flagged: bool,
}

#[derive(Debug)]
pub struct LabelStage {
    config: LabelConfig,
    rules: LabelRules,
    rows_seen: u64,
    templates: HashMap<String, TemplateSeen>,
    rows_labeled: u64,
    rows_flagged_new: u64,
    templates_flagged: u64,
}

const ROW_COLUMNS: &[&str] = &[
    "severity",
    "service",
    "worker",
    "log_class",
    "request_id",
    "trace_id",
];

fn string_column<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a StringArray> {
    batch
        .column_by_name(name)?
        .as_any()
        .downcast_ref::<StringArray>()
}

impl LabelStage {
    pub fn new(config: &LabelConfig) -> Result<Self, PipelineError> {
        let mut rules = if config.default_rules {
            default_rules()
        } else {
            Vec::new()
        };
        if let Some(path) = &config.rules_file {
            rules.extend(LabelRules::read_file(path)?);
        }
        rules.extend(config.rules.iter().cloned());
        Ok(Self {
            config: config.clone(),
            rules: LabelRules::new(rules)?,
            rows_seen: 0,
            templates: HashMap::new(),
            rows_labeled: 0,
            rows_flagged_new: 0,
            templates_flagged: 0,
        })
    }

    pub fn rules(&self) -> &LabelRules {
        &self.rules
    }

    /// Template ids flagged as new and frequent so far.
    pub fn flagged_templates(&self) -> Vec<&str> {
        let mut flagged: Vec<&str> = self
            .templates
            .iter()
            .filter(|(_, seen)| seen.flagged)
            .map(|(id, _)| id.as_str())
            .collect();
        flagged.sort_unstable();
        flagged
    }

    fn label_batch(&mut self, batch: &RecordBatch) -> Result<RecordBatch, PipelineError> {
        let missing = |column: &str| PipelineError::Column {
            table: "logs",
            column: column.to_string(),
            reason: "missing or not utf8".into(),
        };
        let bodies = string_column(batch, "body").ok_or_else(|| missing("body"))?;
        let template_ids = string_column(batch, "template_id");
        let existing_labels = string_column(batch, "label").ok_or_else(|| missing("label"))?;
        let existing_confidence = batch
            .column_by_name("label_confidence")
            .and_then(|c| c.as_any().downcast_ref::<Float64Array>())
            .ok_or_else(|| missing("label_confidence"))?;
        let attrs = string_column(batch, "attrs");
        let row_columns: Vec<(&str, &StringArray)> = ROW_COLUMNS
            .iter()
            .filter_map(|&name| string_column(batch, name).map(|array| (name, array)))
            .collect();
        let rows = batch.num_rows();
        let mut labels: Vec<Option<String>> = Vec::with_capacity(rows);
        let mut confidences: Vec<Option<f64>> = Vec::with_capacity(rows);
        for row in 0..rows {
            self.rows_seen += 1;
            if !existing_labels.is_null(row) {
                labels.push(Some(existing_labels.value(row).to_string()));
                confidences.push(
                    (!existing_confidence.is_null(row)).then(|| existing_confidence.value(row)),
                );
                continue;
            }
            let body = if bodies.is_null(row) {
                ""
            } else {
                bodies.value(row)
            };
            let template_id =
                template_ids.and_then(|ids| (!ids.is_null(row)).then(|| ids.value(row)));
            let parsed_attrs: std::cell::OnceCell<Option<serde_json::Map<String, Value>>> =
                std::cell::OnceCell::new();
            let field = |key: &str| -> Option<String> {
                if let Some((_, array)) = row_columns.iter().find(|(name, _)| *name == key) {
                    return (!array.is_null(row)).then(|| array.value(row).to_string());
                }
                let object = parsed_attrs.get_or_init(|| {
                    let text = attrs.and_then(|a| (!a.is_null(row)).then(|| a.value(row)))?;
                    match serde_json::from_str::<Value>(text) {
                        Ok(Value::Object(object)) => Some(object),
                        _ => None,
                    }
                });
                match object.as_ref()?.get(key)? {
                    Value::String(text) => Some(text.clone()),
                    Value::Null => None,
                    other => Some(other.to_string()),
                }
            };
            let view = RowView {
                body,
                template_id,
                field: &field,
            };
            let lowered = body.to_lowercase();
            let matched = self
                .rules
                .classify(&view, &lowered)
                .map(|(l, c)| (l.to_string(), c));
            let warm = self.rows_seen <= self.config.warmup_rows;
            let result = match matched {
                Some(found) => {
                    self.rows_labeled += 1;
                    Some(found)
                }
                None => template_id.and_then(|id| {
                    let seen =
                        self.templates
                            .entry(id.to_string())
                            .or_insert_with(|| TemplateSeen {
                                new: !warm,
                                ..TemplateSeen::default()
                            });
                    if !seen.new {
                        return None;
                    }
                    seen.unlabeled += 1;
                    if seen.unlabeled >= self.config.new_template_min_count {
                        if !seen.flagged {
                            seen.flagged = true;
                            self.templates_flagged += 1;
                        }
                        self.rows_flagged_new += 1;
                        Some((NEW_TEMPLATE_LABEL.to_string(), NEW_TEMPLATE_CONFIDENCE))
                    } else {
                        None
                    }
                }),
            };
            match result {
                Some((label, confidence)) => {
                    labels.push(Some(label));
                    confidences.push(Some(confidence));
                }
                None => {
                    labels.push(None);
                    confidences.push(None);
                }
            }
        }
        let schema = batch.schema();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        columns[schema.index_of("label")?] = Arc::new(StringArray::from(labels));
        columns[schema.index_of("label_confidence")?] = Arc::new(Float64Array::from(confidences));
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

impl Stage for LabelStage {
    fn name(&self) -> &'static str {
        "label"
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
        let labeled = self.label_batch(&batch.batch)?;
        out.push(TableBatch {
            table: Table::Logs,
            batch: labeled,
        });
        Ok(())
    }

    fn stats(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::from([
            ("rows_labeled", self.rows_labeled),
            ("rows_flagged_new_template", self.rows_flagged_new),
            ("templates_flagged_new", self.templates_flagged),
        ])
    }
}
