//! [`TemplateStage`]: fills `template_id` and `params` of every `logs` row from its `body`, and
//! emits a `templates` batch with the templates that were created or changed by the batch.
//!
//! Bodies reaching the pipeline are message content (receivers split headers), so they are mined
//! as they are. The store is saved to its directory whenever a batch created a template and after
//! every compaction, so template ids survive a restart. Rows keep the id of the template they were
//! mined into: rows mined before a compaction split their template carry the parent's id (still
//! valid, listed as the children's `split_from`), later rows the child's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray, TimestampNanosecondArray};
use arrow::record_batch::RecordBatch;
use infersight_model::{Table, TableBatch, TemplateRecord};

use super::config::TemplateConfig;
use super::miner::ClusterRef;
use super::store::TemplateStore;
use crate::error::PipelineError;
use crate::stage::Stage;

pub struct TemplateStage {
    config: TemplateConfig,
    store: TemplateStore,
    rows_mined: u64,
    templates_created: u64,
    templates_split: u64,
    compactions: u64,
}

impl std::fmt::Debug for TemplateStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateStage")
            .field("rows_mined", &self.rows_mined)
            .field("templates", &self.store.miner().live_clusters())
            .finish()
    }
}

impl TemplateStage {
    /// Builds the stage, loading the store from `config.store_dir` when set.
    pub fn new(config: &TemplateConfig) -> Result<Self, PipelineError> {
        let store = match &config.store_dir {
            Some(dir) => TemplateStore::open(dir, config.miner.clone())?,
            None => TemplateStore::new(config.miner.clone()),
        };
        Ok(Self {
            config: config.clone(),
            store,
            rows_mined: 0,
            templates_created: 0,
            templates_split: 0,
            compactions: 0,
        })
    }

    pub fn store(&self) -> &TemplateStore {
        &self.store
    }

    /// Saves the store now (also done automatically); a no-op without a directory.
    pub fn flush(&self) -> Result<(), PipelineError> {
        if self.store.dir().is_some() {
            self.store.save()?;
        }
        Ok(())
    }

    fn mine_batch(
        &mut self,
        batch: &RecordBatch,
    ) -> Result<(RecordBatch, BTreeSet<u32>, bool), PipelineError> {
        let column = |name: &str| {
            batch
                .schema()
                .index_of(name)
                .map_err(|_| PipelineError::Column {
                    table: "logs",
                    column: name.to_string(),
                    reason: "missing".into(),
                })
        };
        let body_index = column("body")?;
        let template_index = column("template_id")?;
        let params_index = column("params")?;
        let bodies = batch
            .column(body_index)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| PipelineError::Column {
                table: "logs",
                column: "body".into(),
                reason: format!(
                    "expected utf8, found {}",
                    batch.column(body_index).data_type()
                ),
            })?;
        let timestamps = batch
            .column_by_name("ts")
            .and_then(|ts| ts.as_any().downcast_ref::<TimestampNanosecondArray>());
        let clusters_before = self.store.miner().clusters.len();
        let mut touched = BTreeSet::new();
        let mut template_ids: Vec<Option<String>> = Vec::with_capacity(bodies.len());
        let mut params: Vec<Option<String>> = Vec::with_capacity(bodies.len());
        for row in 0..bodies.len() {
            if bodies.is_null(row) {
                template_ids.push(None);
                params.push(None);
                continue;
            }
            let body = bodies.value(row);
            let ts = timestamps.and_then(|ts| (!ts.is_null(row)).then(|| ts.value(row)));
            let cluster: ClusterRef = self.store.mine(body, ts);
            let live = self.store.miner().resolve(cluster);
            touched.insert(live.0);
            template_ids.push(Some(self.store.miner().template_id(live).to_string()));
            let values: Vec<serde_json::Value> = self
                .store
                .miner()
                .params(live, body)
                .into_iter()
                .map(|(value, kind)| serde_json::json!({"value": value, "type": kind.as_str()}))
                .collect();
            params.push(Some(serde_json::Value::Array(values).to_string()));
        }
        self.rows_mined += template_ids.iter().flatten().count() as u64;
        let created = self.store.miner().clusters.len() - clusters_before;
        self.templates_created += created as u64;
        let mut compacted = false;
        if self.store.miner().lines_since_compact() >= self.config.miner.compact_every_lines {
            let compaction = self.store.miner_mut().compact();
            self.compactions += 1;
            self.templates_split += compaction.split.len() as u64;
            // Split parents and children changed (counts, new templates) but are not emitted
            // now: the writer stamps this batch's rows with its submitter's org, and they may
            // be made of other orgs' lines (issue 22). Each is emitted with the next batch
            // whose lines touch it.
            compacted = true;
        }
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        columns[template_index] = Arc::new(StringArray::from(template_ids));
        columns[params_index] = Arc::new(StringArray::from(params));
        let rebuilt = RecordBatch::try_new(batch.schema(), columns)?;
        Ok((rebuilt, touched, created > 0 || compacted))
    }

    fn templates_batch(&self, touched: &BTreeSet<u32>, now: i64) -> RecordBatch {
        let miner = self.store.miner();
        let records: Vec<TemplateRecord> = touched
            .iter()
            .map(|&index| {
                let cluster = &miner.clusters[index as usize];
                let types: Vec<&str> = cluster
                    .param_types
                    .iter()
                    .flatten()
                    .map(|kind| kind.as_str())
                    .collect();
                TemplateRecord {
                    ts: cluster.last_seen.unwrap_or(now),
                    template_id: Some(cluster.id.clone()),
                    template: Some(miner.render(&cluster.tokens)),
                    first_seen: cluster.first_seen,
                    last_seen: cluster.last_seen,
                    count: Some(cluster.count as i64),
                    param_types: serde_json::json!(types).to_string(),
                    // stamped by the writer with the submitter's org
                    org: None,
                }
            })
            .collect();
        TemplateRecord::to_batch(&records)
    }
}

impl Stage for TemplateStage {
    fn name(&self) -> &'static str {
        "template"
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
        let (mined, touched, changed) = self.mine_batch(&batch.batch)?;
        if changed {
            self.flush()?;
        }
        let now = infersight_model::tables::ts_range(&mined).map_or(0, |(_, max)| max);
        out.push(TableBatch {
            table: Table::Logs,
            batch: mined,
        });
        if self.config.emit_templates && !touched.is_empty() {
            out.push(TableBatch {
                table: Table::Templates,
                batch: self.templates_batch(&touched, now),
            });
        }
        Ok(())
    }

    fn stats(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::from([
            ("rows_mined", self.rows_mined),
            ("templates_created", self.templates_created),
            ("templates_live", self.store.miner().live_clusters() as u64),
            ("templates_split", self.templates_split),
            ("compactions", self.compactions),
        ])
    }
}
