//! One DataFusion [`TableProvider`] per canonical table, reading a
//! [`ScanSnapshot`](infersight_store::ScanSnapshot) of the store: the `ts` filters of a query
//! become the [`TimeRange`] the store prunes segments with, and the plan is the union of a Parquet
//! scan over the remaining segment files and an in-memory scan of the memtable. The store
//! guarantees a row is never in both, so the union never double counts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Result, project_schema};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::datasource::memory::{DataSourceExec, MemorySourceConfig};
use datafusion::datasource::object_store::ObjectStoreUrl;
use datafusion::datasource::physical_plan::{FileGroup, FileScanConfigBuilder, ParquetSource};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::object_store::ObjectMeta;
use datafusion::object_store::path::Path as ObjectPath;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::union::UnionExec;
use infersight_model::Table;
use infersight_store::{SegmentMeta, StorageBackend, TimeRange};

use crate::range::time_range_from_filters;

/// What the last scan of one table read, so callers (and tests) can see pruning at work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// The time range extracted from the query's filters and handed to the store.
    pub range: TimeRange,
    /// Parquet segment files in the plan.
    pub segments_scanned: usize,
    /// Segments skipped because their time range lies outside `range` (by the store or here).
    pub segments_pruned: usize,
    pub memtable_batches: usize,
    pub memtable_rows: usize,
}

/// Last scan statistics per table, shared by the engine and its providers.
#[derive(Debug, Default)]
pub(crate) struct ScanStatsRegistry {
    last: Mutex<HashMap<Table, ScanStats>>,
}

impl ScanStatsRegistry {
    pub(crate) fn record(&self, table: Table, stats: ScanStats) {
        self.last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(table, stats);
    }

    pub(crate) fn get(&self, table: Table) -> Option<ScanStats> {
        self.last
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&table)
            .copied()
    }
}

/// A canonical table served from a [`StorageBackend`].
pub struct StoreTable {
    table: Table,
    schema: SchemaRef,
    store: Arc<dyn StorageBackend>,
    stats: Arc<ScanStatsRegistry>,
}

impl std::fmt::Debug for StoreTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreTable")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl StoreTable {
    pub(crate) fn new(
        table: Table,
        store: Arc<dyn StorageBackend>,
        stats: Arc<ScanStatsRegistry>,
    ) -> Self {
        Self {
            table,
            schema: table.schema(),
            store,
            stats,
        }
    }

    /// Takes the snapshot and stats its segment files on a blocking thread: the store may wait on
    /// a lock held by a flush, and a scan over a long range touches many files.
    async fn prepare(&self, range: TimeRange) -> Result<PreparedScan> {
        let store = Arc::clone(&self.store);
        let table = self.table;
        tokio::task::spawn_blocking(move || {
            let snapshot = store
                .snapshot(table, range)
                .map_err(|error| DataFusionError::External(Box::new(error)))?;
            debug_assert_eq!(snapshot.table, table);
            // Defensive second pruning pass: a backend returning extra segments would cost reads,
            // not correctness, but the statistics should say what was actually read.
            let (segments, extra): (Vec<SegmentMeta>, Vec<SegmentMeta>) = snapshot
                .segments
                .into_iter()
                .partition(|segment| range.overlaps(segment.min_ts_ns, segment.max_ts_ns));
            Ok(PreparedScan {
                files: segments
                    .iter()
                    .map(partitioned_file)
                    .collect::<Result<_>>()?,
                segments_pruned: snapshot.segments_pruned + extra.len(),
                memtable: snapshot
                    .memtable
                    .into_iter()
                    .filter(|b| b.num_rows() > 0)
                    .collect(),
            })
        })
        .await
        .map_err(|join| DataFusionError::Internal(format!("snapshot task failed: {join}")))?
    }

    fn parquet_plan(
        &self,
        state: &dyn Session,
        files: Vec<PartitionedFile>,
        projection: Option<&Vec<usize>>,
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let group_count = files.len().min(state.config().target_partitions().max(1));
        let mut groups: Vec<Vec<PartitionedFile>> = vec![Vec::new(); group_count];
        for (index, file) in files.into_iter().enumerate() {
            groups[index % group_count].push(file);
        }

        // No predicate here: DataFusion's physical `FilterPushdown` rule pushes the query's
        // filters through the union into this source (setting one here as well would apply it
        // twice), where they prune row groups and pages by their statistics.
        let source = ParquetSource::new(Arc::clone(&self.schema))
            .with_table_parquet_options(state.table_options().parquet.clone());
        let config =
            FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), Arc::new(source))
                .with_file_groups(groups.into_iter().map(FileGroup::new).collect())
                .with_projection_indices(projection.cloned())?
                .with_limit(limit)
                .build();
        Ok(DataSourceExec::from_data_source(config))
    }

    fn memtable_plan(
        &self,
        state: &dyn Session,
        batches: Vec<RecordBatch>,
        projection: Option<&Vec<usize>>,
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let partition_count = batches.len().min(state.config().target_partitions().max(1));
        let mut partitions: Vec<Vec<RecordBatch>> = vec![Vec::new(); partition_count];
        for (index, batch) in batches.into_iter().enumerate() {
            partitions[index % partition_count].push(batch);
        }
        let source = MemorySourceConfig::try_new(
            &partitions,
            Arc::clone(&self.schema),
            projection.cloned(),
        )?
        .with_limit(limit);
        Ok(DataSourceExec::from_data_source(source))
    }
}

/// A snapshot reduced to what the plan reads.
struct PreparedScan {
    files: Vec<PartitionedFile>,
    segments_pruned: usize,
    memtable: Vec<RecordBatch>,
}

fn partitioned_file(segment: &SegmentMeta) -> Result<PartitionedFile> {
    let location = ObjectPath::from_absolute_path(&segment.path).map_err(|error| {
        DataFusionError::Internal(format!("segment path {}: {error}", segment.path.display()))
    })?;
    // The catalog's byte count may predate a rewrite; the file itself is the truth.
    let size = std::fs::metadata(&segment.path)
        .map(|metadata| metadata.len())
        .map_err(|error| {
            DataFusionError::IoError(std::io::Error::new(
                error.kind(),
                format!("segment {}: {error}", segment.path.display()),
            ))
        })?;
    Ok(PartitionedFile::new_from_meta(ObjectMeta {
        location,
        last_modified: chrono::DateTime::UNIX_EPOCH,
        size,
        e_tag: None,
        version: None,
    }))
}

#[async_trait]
impl TableProvider for StoreTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        // Every filter is offered to the scan (time range, row-group pruning) but DataFusion keeps
        // applying all of them: segments and row groups are pruned, not rows.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let range = time_range_from_filters(filters);
        let PreparedScan {
            files,
            segments_pruned,
            memtable,
        } = self.prepare(range).await?;
        self.stats.record(
            self.table,
            ScanStats {
                range,
                segments_scanned: files.len(),
                segments_pruned,
                memtable_batches: memtable.len(),
                memtable_rows: memtable.iter().map(RecordBatch::num_rows).sum(),
            },
        );

        let mut inputs: Vec<Arc<dyn ExecutionPlan>> = Vec::with_capacity(2);
        if !files.is_empty() {
            inputs.push(self.parquet_plan(state, files, projection, limit)?);
        }
        if !memtable.is_empty() {
            inputs.push(self.memtable_plan(state, memtable, projection, limit)?);
        }
        if inputs.is_empty() {
            let projected = project_schema(&self.schema, projection)?;
            return Ok(Arc::new(EmptyExec::new(projected)));
        }
        UnionExec::try_new(inputs)
    }
}
