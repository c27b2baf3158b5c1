//! One DataFusion [`TableProvider`] per canonical table, reading a
//! [`ScanSnapshot`](infersight_store::ScanSnapshot) of the store: the `ts` filters of a query
//! become the [`TimeRange`] the store prunes segments with, and the plan is the union of a Parquet
//! scan over the remaining segment files and an in-memory scan of the memtable. The store
//! guarantees a row is never in both, so the union never double counts. Segments in a bucket
//! (`SegmentMeta::location`) are read by their key through the object store the engine
//! registered for the store's bucket URL ([`StorageBackend::remote_segments`]). A provider of a session
//! scoped to some orgs (`scope::OrgScope`) filters that union by the `org` column before handing
//! on a single row. Every page a scan reads is checked against its segment's page checksums
//! (`checked_reader`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::DFSchema;
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
use datafusion::physical_plan::expressions::Column;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::union::UnionExec;
use infersight_model::Table;
use infersight_model::org::ORG_COLUMN;
use infersight_store::{SegmentMeta, StorageBackend, TimeRange};

use crate::checked_reader::{CheckedReaderFactory, SegmentFile};
use crate::range::time_range_from_filters;
use crate::scope::OrgScope;

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
    scope: OrgScope,
}

impl std::fmt::Debug for StoreTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreTable")
            .field("table", &self.table)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl StoreTable {
    pub(crate) fn new(
        table: Table,
        store: Arc<dyn StorageBackend>,
        stats: Arc<ScanStatsRegistry>,
        scope: OrgScope,
    ) -> Self {
        Self {
            table,
            schema: table.schema(),
            store,
            stats,
            scope,
        }
    }

    /// `plan` (the table's rows, projected by `projection` plus the `org` column at its end
    /// when `added_org`) reduced to the scope's rows and then to `projection`.
    fn filter_to_scope(
        &self,
        state: &dyn Session,
        plan: Arc<dyn ExecutionPlan>,
        predicate: datafusion::logical_expr::Expr,
        added_org: bool,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let schema = plan.schema();
        let df_schema = DFSchema::try_from(schema.as_ref().clone())?;
        let predicate = state.create_physical_expr(predicate, &df_schema)?;
        let filtered: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(predicate, plan)?);
        if !added_org {
            return Ok(filtered);
        }
        // drop the org column the filter needed and the query did not ask for
        let kept = schema.fields().len() - 1;
        let columns: Vec<(Arc<dyn datafusion::physical_plan::PhysicalExpr>, String)> = schema
            .fields()
            .iter()
            .take(kept)
            .enumerate()
            .map(|(index, field)| {
                (
                    Arc::new(Column::new(field.name(), index))
                        as Arc<dyn datafusion::physical_plan::PhysicalExpr>,
                    field.name().clone(),
                )
            })
            .collect();
        Ok(Arc::new(ProjectionExec::try_new(columns, filtered)?))
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
            let (remote, local): (Vec<SegmentMeta>, Vec<SegmentMeta>) = segments
                .into_iter()
                .partition(|segment| segment.location.is_some());
            let bucket_url = match (remote.is_empty(), store.remote_segments()) {
                (true, _) => None,
                (false, Some(bucket)) => Some(ObjectStoreUrl::parse(&bucket.url)?),
                (false, None) => {
                    return Err(DataFusionError::Internal(
                        "the store lists segments in a bucket but names no bucket".into(),
                    ));
                }
            };
            let files: Vec<PartitionedFile> =
                local.iter().map(partitioned_file).collect::<Result<_>>()?;
            let bucket_files: Vec<PartitionedFile> = remote.iter().map(bucket_file).collect();
            let segments = (files.iter().zip(&local))
                .map(|(file, meta)| {
                    let segment = SegmentFile {
                        id: meta.id,
                        local: Some(meta.path.clone()),
                    };
                    (file.object_meta.location.clone(), segment)
                })
                .chain((bucket_files.iter().zip(&remote)).map(|(file, meta)| {
                    let segment = SegmentFile {
                        id: meta.id,
                        local: None,
                    };
                    (file.object_meta.location.clone(), segment)
                }))
                .collect();
            Ok(PreparedScan {
                files,
                segments: Arc::new(segments),
                bucket_files: bucket_url.map(|url| (url, bucket_files)),
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
        url: ObjectStoreUrl,
        files: Vec<PartitionedFile>,
        segments: &Arc<HashMap<ObjectPath, SegmentFile>>,
        projection: Option<&Vec<usize>>,
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let group_count = files.len().min(state.config().target_partitions().max(1));
        let mut groups: Vec<Vec<PartitionedFile>> = vec![Vec::new(); group_count];
        for (index, file) in files.into_iter().enumerate() {
            groups[index % group_count].push(file);
        }

        // every page read is checked against the segment's page checksums
        let readers = CheckedReaderFactory::new(
            state.runtime_env().object_store(&url)?,
            Arc::clone(&self.store),
            Arc::clone(segments),
            state.runtime_env().cache_manager.get_file_metadata_cache(),
        );
        // No predicate here: DataFusion's physical `FilterPushdown` rule pushes the query's
        // filters through the union into this source (setting one here as well would apply it
        // twice), where they prune row groups and pages by their statistics.
        let source = ParquetSource::new(Arc::clone(&self.schema))
            .with_table_parquet_options(state.table_options().parquet.clone())
            .with_parquet_file_reader_factory(Arc::new(readers));
        let config = FileScanConfigBuilder::new(url, Arc::new(source))
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
    /// Local segment files.
    files: Vec<PartitionedFile>,
    /// Segments in the store's bucket, under the URL its object store is registered for.
    bucket_files: Option<(ObjectStoreUrl, Vec<PartitionedFile>)>,
    /// Every file's segment id and whether it is local, by location (see `checked_reader`).
    segments: Arc<HashMap<ObjectPath, SegmentFile>>,
    segments_pruned: usize,
    memtable: Vec<RecordBatch>,
}

fn partitioned_file(segment: &SegmentMeta) -> Result<PartitionedFile> {
    let location = ObjectPath::from_absolute_path(&segment.path).map_err(|error| {
        DataFusionError::Internal(format!("segment path {}: {error}", segment.path.display()))
    })?;
    // The catalog's byte count may predate a rewrite; the file itself is the truth. Its size
    // and time of change also tell the metadata cache whether a footer it holds is this file's.
    let metadata = std::fs::metadata(&segment.path).map_err(|error| {
        DataFusionError::IoError(std::io::Error::new(
            error.kind(),
            format!("segment {}: {error}", segment.path.display()),
        ))
    })?;
    let last_modified = metadata
        .modified()
        .map_or(chrono::DateTime::UNIX_EPOCH, chrono::DateTime::from);
    Ok(PartitionedFile::new_from_meta(ObjectMeta {
        location,
        last_modified,
        size: metadata.len(),
        e_tag: None,
        version: None,
    }))
}

/// A segment in a bucket, by its key; its size is the one the catalog recorded (the object is
/// written once and its checksum was taken then).
fn bucket_file(segment: &SegmentMeta) -> PartitionedFile {
    PartitionedFile::new_from_meta(ObjectMeta {
        location: ObjectPath::from(segment.location.as_deref().unwrap_or_default()),
        last_modified: chrono::DateTime::UNIX_EPOCH,
        size: segment.bytes,
        e_tag: None,
        version: None,
    })
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
        let predicate = self.scope.predicate();
        // a scoped scan reads the org column too (last), and no row limit reaches the sources:
        // rows of other orgs must not use up the limit before the filter
        let (projection, limit, added_org) = match (&predicate, projection) {
            (None, _) => (projection.cloned(), limit, false),
            (Some(_), None) => (None, None, false),
            (Some(_), Some(columns)) => {
                let org = self.schema.index_of(ORG_COLUMN)?;
                if columns.contains(&org) {
                    (Some(columns.clone()), None, false)
                } else {
                    let mut with_org = columns.clone();
                    with_org.push(org);
                    (Some(with_org), None, true)
                }
            }
        };
        let projection = projection.as_ref();
        let PreparedScan {
            files,
            bucket_files,
            segments,
            segments_pruned,
            memtable,
        } = self.prepare(range).await?;
        let bucket_count = bucket_files.as_ref().map_or(0, |(_, files)| files.len());
        self.stats.record(
            self.table,
            ScanStats {
                range,
                segments_scanned: files.len() + bucket_count,
                segments_pruned,
                memtable_batches: memtable.len(),
                memtable_rows: memtable.iter().map(RecordBatch::num_rows).sum(),
            },
        );

        let mut inputs: Vec<Arc<dyn ExecutionPlan>> = Vec::with_capacity(3);
        if !files.is_empty() {
            let url = ObjectStoreUrl::local_filesystem();
            inputs.push(self.parquet_plan(state, url, files, &segments, projection, limit)?);
        }
        if let Some((url, files)) = bucket_files.filter(|(_, files)| !files.is_empty()) {
            inputs.push(self.parquet_plan(state, url, files, &segments, projection, limit)?);
        }
        if !memtable.is_empty() {
            inputs.push(self.memtable_plan(state, memtable, projection, limit)?);
        }
        let plan: Arc<dyn ExecutionPlan> = if inputs.is_empty() {
            let projected = project_schema(&self.schema, projection)?;
            Arc::new(EmptyExec::new(projected))
        } else {
            UnionExec::try_new(inputs)?
        };
        match predicate {
            Some(predicate) => self.filter_to_scope(state, plan, predicate, added_org),
            None => Ok(plan),
        }
    }
}
