//! The [`Stage`] trait every pipeline step implements, the per-stage [`StageCounters`], and the
//! [`Pipeline`] that runs batches through the stages in order.
//!
//! Stages are synchronous and batch-at-a-time: receivers (async) hand over whole batches, the
//! pipeline runs on a blocking thread, and the store receives what the last stage emitted.
//! Every stage counts what it received, emitted, dropped (by reason) and failed, because an
//! observability engine must be observable itself.

use std::collections::BTreeMap;

use infersight_model::TableBatch;

use crate::error::PipelineError;

/// One step of the pipeline: takes a batch, appends zero or more batches to `out`.
///
/// A stage may rewrite rows (redact), drop rows (sample) or emit batches of another table
/// (template). It must not append anything to `out` when it returns an error.
pub trait Stage: Send {
    /// The registry name of the stage (`redact`), used as the counters' label.
    fn name(&self) -> &'static str;

    fn process(
        &mut self,
        batch: TableBatch,
        out: &mut Vec<TableBatch>,
    ) -> Result<(), PipelineError>;

    /// Rows dropped since the last call, by low-cardinality reason; the pipeline folds them into
    /// [`StageCounters::dropped_rows`]. Stages that never drop keep the default.
    fn take_dropped(&mut self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Cumulative stage-specific counters (e.g. redaction hits per detector), copied into
    /// [`StageCounters::detail`].
    fn stats(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::new()
    }
}

/// What one stage did since the pipeline was built. All counts are rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageCounters {
    pub received_rows: u64,
    pub emitted_rows: u64,
    /// Rows the stage dropped on purpose, by reason.
    pub dropped_rows: BTreeMap<&'static str, u64>,
    /// Rows of batches on which the stage returned an error; they were not passed on.
    pub failed_rows: u64,
    /// Stage-specific counters, from [`Stage::stats`].
    pub detail: BTreeMap<&'static str, u64>,
}

/// The stages in order, each with its counters.
pub struct Pipeline {
    stages: Vec<Box<dyn Stage>>,
    counters: Vec<StageCounters>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.stages.iter().map(|stage| stage.name()).collect();
        f.debug_struct("Pipeline").field("stages", &names).finish()
    }
}

impl Pipeline {
    pub fn new(stages: Vec<Box<dyn Stage>>) -> Self {
        let counters = vec![StageCounters::default(); stages.len()];
        Self { stages, counters }
    }

    pub fn stage_names(&self) -> Vec<&'static str> {
        self.stages.iter().map(|stage| stage.name()).collect()
    }

    /// Runs every batch through every stage in order and returns what the last stage emitted.
    ///
    /// On the first stage error the offending batch's rows are counted as failed and the error is
    /// returned; nothing of this call is handed on, so unredacted data can never slip through a
    /// failing stage. The caller answers the sender with a retryable error.
    pub fn run(&mut self, batches: Vec<TableBatch>) -> Result<Vec<TableBatch>, PipelineError> {
        let mut current = batches;
        for (stage, counters) in self.stages.iter_mut().zip(self.counters.iter_mut()) {
            let mut out = Vec::with_capacity(current.len());
            for batch in current {
                let rows = batch.batch.num_rows() as u64;
                counters.received_rows += rows;
                let emitted_before = out.len();
                if let Err(error) = stage.process(batch, &mut out) {
                    counters.failed_rows += rows;
                    out.truncate(emitted_before);
                    tracing::warn!(stage = stage.name(), rows, %error, "pipeline stage failed");
                    return Err(error);
                }
                counters.emitted_rows += out[emitted_before..]
                    .iter()
                    .map(|b| b.batch.num_rows() as u64)
                    .sum::<u64>();
            }
            for (reason, rows) in stage.take_dropped() {
                *counters.dropped_rows.entry(reason).or_default() += rows;
            }
            current = out;
        }
        Ok(current)
    }

    /// A snapshot of every stage's counters, in pipeline order.
    pub fn counters(&self) -> Vec<(&'static str, StageCounters)> {
        self.stages
            .iter()
            .zip(&self.counters)
            .map(|(stage, counters)| {
                let mut counters = counters.clone();
                counters.detail = stage.stats();
                (stage.name(), counters)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StagesConfig;
    use infersight_model::{LogRecord, Table};

    fn logs(n: usize) -> TableBatch {
        let records: Vec<LogRecord> = (0..n)
            .map(|i| LogRecord {
                ts: i as i64,
                body: Some(format!("line {i}")),
                ..Default::default()
            })
            .collect();
        TableBatch {
            table: Table::Logs,
            batch: LogRecord::to_batch(&records),
        }
    }

    /// Keeps the first `keep` rows of every batch and reports the rest as dropped.
    struct Head {
        keep: usize,
        dropped: u64,
    }

    impl Stage for Head {
        fn name(&self) -> &'static str {
            "head"
        }
        fn process(
            &mut self,
            batch: TableBatch,
            out: &mut Vec<TableBatch>,
        ) -> Result<(), PipelineError> {
            let rows = batch.batch.num_rows();
            let keep = rows.min(self.keep);
            self.dropped += (rows - keep) as u64;
            out.push(TableBatch {
                table: batch.table,
                batch: batch.batch.slice(0, keep),
            });
            Ok(())
        }
        fn take_dropped(&mut self) -> Vec<(&'static str, u64)> {
            vec![("over_limit", std::mem::take(&mut self.dropped))]
        }
    }

    struct Fail;

    impl Stage for Fail {
        fn name(&self) -> &'static str {
            "fail"
        }
        fn process(
            &mut self,
            _: TableBatch,
            out: &mut Vec<TableBatch>,
        ) -> Result<(), PipelineError> {
            out.push(logs(1)); // must be discarded by the pipeline
            Err(PipelineError::Stage {
                stage: "fail",
                reason: "boom".into(),
            })
        }
    }

    #[test]
    fn counters_track_received_emitted_and_dropped() {
        let mut pipeline = Pipeline::new(vec![Box::new(Head {
            keep: 2,
            dropped: 0,
        })]);
        let out = pipeline.run(vec![logs(5), logs(1)]).unwrap();
        assert_eq!(out.iter().map(|b| b.batch.num_rows()).sum::<usize>(), 3);
        let counters = pipeline.counters();
        assert_eq!(counters[0].0, "head");
        assert_eq!(counters[0].1.received_rows, 6);
        assert_eq!(counters[0].1.emitted_rows, 3);
        assert_eq!(counters[0].1.dropped_rows.get("over_limit"), Some(&3));
        assert_eq!(counters[0].1.failed_rows, 0);
    }

    #[test]
    fn a_failing_stage_counts_failed_rows_and_passes_nothing_on() {
        let mut pipeline = Pipeline::new(vec![
            Box::new(Head {
                keep: 10,
                dropped: 0,
            }),
            Box::new(Fail),
        ]);
        let error = pipeline.run(vec![logs(4)]).unwrap_err();
        assert_eq!(error.to_string(), "stage `fail` failed: boom");
        let counters = pipeline.counters();
        assert_eq!(counters[0].1.emitted_rows, 4);
        assert_eq!(counters[1].1.received_rows, 4);
        assert_eq!(counters[1].1.emitted_rows, 0);
        assert_eq!(counters[1].1.failed_rows, 4);
    }

    #[test]
    fn from_config_builds_the_default_stages() {
        let pipeline = Pipeline::from_config(&StagesConfig::default()).unwrap();
        assert_eq!(
            pipeline.stage_names(),
            vec!["parse", "redact", "template", "label"]
        );
        let mut config = StagesConfig::default();
        config.order.push("nope".into());
        let error = Pipeline::from_config(&config).unwrap_err();
        assert!(
            error.to_string().contains("unknown stage `nope`"),
            "{error}"
        );
    }
}
