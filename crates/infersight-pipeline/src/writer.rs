//! The one ingest runtime: a [`BatchWriter`] runs a submission through the pipeline stages,
//! publishes the stages' counters to the `/metrics` registry, and appends the result to the
//! store (any [`BatchAppend`]). `serve`'s ingest queue and `infersight ingest` both write through
//! it, so "stages, then the store" is written once. It is also where every row gets its org
//! (`infersight_model::org`): whatever the stages emit (rows, templates, redaction counts) is
//! stamped with the submitter's org, overwriting anything the rows claimed.

use std::sync::Arc;

use infersight_model::TableBatch;
use infersight_model::append::{AppendError, Appended, BatchAppend, Durability};
use infersight_model::org::stamp_org;
use infersight_model::telemetry::{Counters, catalog};

use crate::{Pipeline, PipelineError};

/// Why a write failed: a stage rejected or failed the submission, or the append failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Stage(#[from] PipelineError),
    #[error(transparent)]
    Append(#[from] AppendError),
}

/// Pipeline stages → store append → counters.
pub struct BatchWriter {
    pipeline: Pipeline,
    sink: Arc<dyn BatchAppend>,
    counters: Arc<Counters>,
}

impl BatchWriter {
    pub fn new(pipeline: Pipeline, sink: Arc<dyn BatchAppend>, counters: Arc<Counters>) -> Self {
        BatchWriter {
            pipeline,
            sink,
            counters,
        }
    }

    /// Runs the stages over one submission of `org` and stamps every batch they emit with
    /// `org`; the stages' cumulative counters are published afterwards whatever the outcome.
    pub fn transform(
        &mut self,
        org: &str,
        batches: Vec<TableBatch>,
    ) -> Result<Vec<TableBatch>, PipelineError> {
        let result = self.pipeline.run(batches);
        self.publish_stage_counters();
        result?
            .iter()
            .map(|batch| stamp_org(batch, org).map_err(PipelineError::from))
            .collect()
    }

    /// One append of already transformed batches, counted as the `store` stage's emitted or
    /// failed rows.
    pub fn append(
        &self,
        batches: &[TableBatch],
        durability: Durability,
    ) -> Result<Appended, AppendError> {
        let rows: u64 = batches.iter().map(|b| b.batch.num_rows() as u64).sum();
        let result = self.sink.append_batches(batches, durability);
        let metric = match result {
            Ok(_) => &catalog::STAGE_EMITTED_ROWS,
            Err(_) => &catalog::STAGE_FAILED_ROWS,
        };
        self.counters.add(metric, &[("stage", "store")], rows);
        result
    }

    /// Stages, append, then a flush when the memtable is over its limits (bulk loads keep
    /// memory flat that way): `infersight ingest`'s path.
    pub fn write(
        &mut self,
        org: &str,
        batches: Vec<TableBatch>,
        durability: Durability,
    ) -> Result<Appended, WriteError> {
        let out = self.transform(org, batches)?;
        let appended = self.append(&out, durability)?;
        self.sink.flush_if_full()?;
        Ok(appended)
    }

    fn publish_stage_counters(&self) {
        let counters = &self.counters;
        for (stage, c) in self.pipeline.counters() {
            let labels = [("stage", stage)];
            counters.set_counter(&catalog::STAGE_RECEIVED_ROWS, &labels, c.received_rows);
            counters.set_counter(&catalog::STAGE_EMITTED_ROWS, &labels, c.emitted_rows);
            counters.set_counter(&catalog::STAGE_FAILED_ROWS, &labels, c.failed_rows);
            for (reason, n) in &c.dropped_rows {
                let labels = [("stage", stage), ("reason", *reason)];
                counters.set_counter(&catalog::STAGE_DROPPED_ROWS, &labels, *n);
            }
            for (name, n) in &c.detail {
                let labels = [("stage", stage), ("counter", *name)];
                counters.set_counter(&catalog::STAGE_DETAIL, &labels, *n);
            }
        }
    }
}
