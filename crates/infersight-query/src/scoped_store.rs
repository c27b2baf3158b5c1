//! The store as an org-scoped engine hands it out ([`QueryEngine::store`](crate::QueryEngine::store)
//! of a [`QueryEngine::scoped`](crate::QueryEngine::scoped) engine): the SLI answers, the
//! root-cause engine and the watcher read rollups through `StorageBackend::rollups`, and the
//! store's rollups mix every org's requests (a combination has no org). Here they are rebuilt
//! from the scope's own `requests` rows, read through the scoped session's table providers (the
//! same org filter as SQL), so nothing that reads rollups off a scoped engine sees another org.
//!
//! Cost: a scan of the range's `requests` rows per distinct range asked (cached for the engine's
//! life, one request of the API), instead of merging stored sketches. Appends, flushes and stats
//! go to the store itself; a snapshot lists segment files whole (their rows are every org's:
//! read them through the scoped engine's tables, which filter) and only the scope's memtable rows.

use std::sync::{Arc, Mutex, PoisonError};

use datafusion::arrow::array::{Array, BooleanArray, RecordBatch, StringArray};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::error::ArrowError;
use datafusion::prelude::SessionContext;
use infersight_model::org::{DEFAULT_ORG, ORG_COLUMN};
use infersight_model::{Table, TableBatch};
use infersight_rollup::{Rollup, RollupSpec};
use infersight_store::{
    AppendReceipt, FlushReport, RemoteSegments, ScanSnapshot, StorageBackend, StoreError,
    StoreStats, TimeRange,
};

use crate::range::TS_COLUMN;

const MINUTE_NS: i64 = 60_000_000_000;

/// A store whose rollups and memtable rows are one scope's (see the module doc).
pub(crate) struct ScopedStore {
    inner: Arc<dyn StorageBackend>,
    /// A session whose tables serve only `orgs`' rows.
    context: SessionContext,
    orgs: Vec<String>,
    /// Rollups already built, by the range asked.
    built: Mutex<Vec<(TimeRange, Vec<Arc<Rollup>>)>>,
}

impl ScopedStore {
    /// `context` must be a session scoped to `orgs` (`engine::session` with `OrgScope::Only`).
    pub(crate) fn new(
        inner: Arc<dyn StorageBackend>,
        context: SessionContext,
        orgs: Vec<String>,
    ) -> ScopedStore {
        ScopedStore {
            inner,
            context,
            orgs,
            built: Mutex::new(Vec::new()),
        }
    }

    /// The `requests` rows of the scope in `range` widened to whole minutes (a rollup's cells
    /// are minutes), read on a thread of its own: callers are blocking threads or plain code,
    /// and the store's trait is synchronous.
    fn scoped_requests(&self, range: TimeRange) -> Result<Vec<RecordBatch>, StoreError> {
        let mut conditions = Vec::new();
        if let Some(since) = range.since_ns {
            let minute = since.div_euclid(MINUTE_NS) * MINUTE_NS;
            conditions.push(format!("{TS_COLUMN} >= to_timestamp_nanos({minute})"));
        }
        if let Some(until) = range.until_ns {
            let minute = until.div_euclid(MINUTE_NS).saturating_add(1) * MINUTE_NS;
            conditions.push(format!("{TS_COLUMN} < to_timestamp_nanos({minute})"));
        }
        let mut sql = format!("SELECT * FROM {}", Table::Requests.name());
        if !conditions.is_empty() {
            sql = format!("{sql} WHERE {}", conditions.join(" AND "));
        }
        let context = self.context.clone();
        let read = std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| ArrowError::ExternalError(Box::new(e)))?;
                    runtime
                        .block_on(async move {
                            let frame = context.sql(&sql).await?;
                            frame.collect().await
                        })
                        .map_err(|e| ArrowError::ExternalError(Box::new(e)))
                })
                .join()
        });
        match read {
            Ok(batches) => Ok(batches?),
            Err(_) => Err(StoreError::Arrow(ArrowError::ComputeError(
                "the scoped rollup reader panicked".to_string(),
            ))),
        }
    }

    /// Keeps only the scope's rows of a batch (null org: the default org's).
    fn scoped_batch(&self, batch: &RecordBatch) -> Result<RecordBatch, StoreError> {
        let Some(column) = batch.column_by_name(ORG_COLUMN) else {
            // rows from before the org column: the default org's
            return Ok(if self.orgs.iter().any(|org| org == DEFAULT_ORG) {
                batch.clone()
            } else {
                batch.slice(0, 0)
            });
        };
        let Some(orgs) = column.as_any().downcast_ref::<StringArray>() else {
            return Err(StoreError::Arrow(ArrowError::SchemaError(format!(
                "column {ORG_COLUMN} is {}, not Utf8",
                column.data_type()
            ))));
        };
        let default_seen = self.orgs.iter().any(|org| org == DEFAULT_ORG);
        let keep: BooleanArray = (0..orgs.len())
            .map(|row| {
                Some(if orgs.is_null(row) {
                    default_seen
                } else {
                    self.orgs.iter().any(|org| org == orgs.value(row))
                })
            })
            .collect();
        Ok(filter_record_batch(batch, &keep)?)
    }
}

/// The spec the store builds its rollups with, read off one of them; the combination budget
/// covers all of them at once here (one rollup for the whole range, not one per segment).
fn spec_of(parts: &[Arc<Rollup>]) -> RollupSpec {
    let mut spec = parts.first().map(|part| part.spec()).unwrap_or_default();
    spec.max_combinations = spec.max_combinations.saturating_mul(parts.len().max(1));
    spec
}

impl StorageBackend for ScopedStore {
    fn append(&self, batches: &[TableBatch]) -> Result<AppendReceipt, StoreError> {
        self.inner.append(batches)
    }

    fn append_refusal(&self) -> Option<StoreError> {
        self.inner.append_refusal()
    }

    fn snapshot(&self, table: Table, range: TimeRange) -> Result<ScanSnapshot, StoreError> {
        let mut snapshot = self.inner.snapshot(table, range)?;
        snapshot.memtable = snapshot
            .memtable
            .iter()
            .map(|batch| self.scoped_batch(batch))
            .collect::<Result<_, _>>()?;
        Ok(snapshot)
    }

    fn flush(&self) -> Result<FlushReport, StoreError> {
        self.inner.flush()
    }

    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }

    fn close(&self) -> Result<(), StoreError> {
        self.inner.close()
    }

    fn segment_corrupt(&self, id: u64, reason: String) {
        self.inner.segment_corrupt(id, reason);
    }

    fn rollups(&self, range: TimeRange) -> Result<Vec<Arc<Rollup>>, StoreError> {
        let built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, parts)) = built.iter().find(|(asked, _)| *asked == range) {
            return Ok(parts.clone());
        }
        drop(built);
        // the store's own answer first: its spec, and its refusal when rollups are off
        let spec = spec_of(&self.inner.rollups(range)?);
        let mut rollup = Rollup::new(&spec);
        for batch in self.scoped_requests(range)? {
            rollup
                .add_requests(&batch)
                .map_err(|e| StoreError::Arrow(ArrowError::ComputeError(e.to_string())))?;
        }
        rollup.seal();
        let parts = vec![Arc::new(rollup)];
        self.built
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((range, parts.clone()));
        Ok(parts)
    }

    fn remote_segments(&self) -> Option<RemoteSegments> {
        self.inner.remote_segments()
    }
}
