//! [`QueryEngine`]: one DataFusion session over a store, with the six canonical tables and the
//! `json_get` UDF registered. It only reads: statements that would change the catalog, the
//! session or data are rejected before they are planned into anything executable.
//!
//! An engine may carry the [`AccessAudit`]: [`QueryEngine::sql_audited`] then records which
//! tables and columns each statement read (from its optimized logical plan), for whom.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::tree_node::TreeNode;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext, col, lit};
use datafusion::scalar::ScalarValue;
use futures::{Stream, StreamExt};
use infersight_model::{ErrorKind, Table};
use infersight_store::{StorageBackend, TimeRange};

use crate::audit::{
    AccessAudit, AccessContext, AccessRecord, AccessedData, AuditStatus, AuditedQuery,
    TrackedAccess, accessed_data, sha256_hex,
};
use crate::error::QueryError;
use crate::output::QueryOutput;
use crate::provider::{ScanStats, ScanStatsRegistry, StoreTable};
use crate::range::TS_COLUMN;
use crate::udf::json_get_udf;

/// The record batches of one partition of a scan, in order; see [`QueryEngine::scan_partitions`].
pub type BatchStream = Pin<Box<dyn Stream<Item = Result<RecordBatch, QueryError>> + Send>>;

const READ_ONLY_MESSAGE: &str = "only SELECT/EXPLAIN/SHOW/DESCRIBE queries are allowed";

/// SQL over the canonical tables of one store.
pub struct QueryEngine {
    context: SessionContext,
    stats: Arc<ScanStatsRegistry>,
    pub(crate) store: Arc<dyn StorageBackend>,
    /// Where [`QueryEngine::sql_audited`] and [`QueryEngine::record_access`] write; `None`: they
    /// run the query and record nothing.
    access_audit: Option<Arc<AccessAudit>>,
    /// What every statement read since [`QueryEngine::with_access_tracking`] (reports).
    tracker: Option<Mutex<TrackedAccess>>,
}

impl std::fmt::Debug for QueryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryEngine").finish_non_exhaustive()
    }
}

impl QueryEngine {
    pub fn new(store: Arc<dyn StorageBackend>) -> QueryEngine {
        let target_partitions = std::thread::available_parallelism()
            .map(|cores| cores.get())
            .unwrap_or(1);
        let config = SessionConfig::new()
            .with_target_partitions(target_partitions)
            .with_information_schema(true);
        let context = SessionContext::new_with_config(config);
        context.register_udf(json_get_udf());
        let stats = Arc::new(ScanStatsRegistry::default());
        for table in Table::ALL {
            let provider = StoreTable::new(table, Arc::clone(&store), Arc::clone(&stats));
            context
                .register_table(table.name(), Arc::new(provider))
                .expect("a fresh session accepts the six canonical table names");
        }
        QueryEngine {
            context,
            stats,
            store,
            access_audit: None,
            tracker: None,
        }
    }

    /// Records audited accesses to `audit` ([`QueryEngine::sql_audited`]).
    /// The storage backend the engine reads (the rollups behind SLIs and root-cause analysis).
    pub fn store(&self) -> &Arc<dyn StorageBackend> {
        &self.store
    }

    pub fn with_access_audit(mut self, audit: Arc<AccessAudit>) -> QueryEngine {
        self.access_audit = Some(audit);
        self
    }

    pub fn access_audit(&self) -> Option<&Arc<AccessAudit>> {
        self.access_audit.as_ref()
    }

    /// Collects the tables and columns of every statement this engine plans from now on, for a
    /// caller that runs many (a report) and audits them as one access; see
    /// [`QueryEngine::tracked_access`]. Costs one extra optimizer pass per statement.
    pub fn with_access_tracking(mut self) -> QueryEngine {
        self.tracker = Some(Mutex::new(TrackedAccess::default()));
        self
    }

    /// What the statements planned since [`QueryEngine::with_access_tracking`] read (empty
    /// without tracking).
    pub fn tracked_access(&self) -> TrackedAccess {
        self.tracker
            .as_ref()
            .map(|tracker| {
                tracker
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
            })
            .unwrap_or_default()
    }

    /// Runs one read-only SQL statement and collects its result.
    pub async fn sql(&self, sql: &str) -> Result<QueryOutput, QueryError> {
        self.run(sql, None).await
    }

    /// The tables and columns `sql` would read, without running it (see [`accessed_data`]).
    pub async fn accessed_data(&self, sql: &str) -> Result<AccessedData, QueryError> {
        let state = self.context.state();
        let plan = state.create_logical_plan(sql).await?;
        Ok(plan_access(&state, &plan))
    }

    /// Runs `sql` like [`QueryEngine::sql`] (or [`QueryEngine::sql_limited`] with `max_rows`)
    /// and appends one line to the attached audit: `context`'s actor, the tables and columns the
    /// plan read, the rows returned, the outcome and the SQL's SHA-256, never the SQL. A
    /// statement that fails after planning is recorded with its error kind; one that does not
    /// plan read nothing and is not. The result never depends on the audit: see
    /// [`AuditedQuery::audit`] for whether the line was written.
    pub async fn sql_audited(
        &self,
        sql: &str,
        max_rows: Option<usize>,
        context: &AccessContext,
    ) -> AuditedQuery {
        let audited = self.access_audit.is_some();
        let (access, result) = self.run_with_access(sql, max_rows, audited).await;
        let result = match max_rows {
            Some(max_rows) => result.and_then(|output| check_row_limit(output, max_rows)),
            None => result,
        };
        let audit = match access {
            Some(access) if audited => {
                let rows = result
                    .as_ref()
                    .map_or(0, |output| output.row_count() as u64);
                let outcome = result.as_ref().map(|_| ()).map_err(QueryError::kind);
                let query_hash = sha256_hex(sql.as_bytes());
                self.record_access(context, &access, rows, outcome, Some(query_hash))
                    .await
            }
            _ => AuditStatus::NotRecorded,
        };
        AuditedQuery { result, audit }
    }

    /// Appends one access to the attached audit (on a blocking thread); for accesses that are
    /// not one statement, such as a report. `NotRecorded` without an audit.
    pub async fn record_access(
        &self,
        context: &AccessContext,
        accessed: &AccessedData,
        rows: u64,
        outcome: Result<(), ErrorKind>,
        query_hash: Option<String>,
    ) -> AuditStatus {
        let Some(audit) = self.access_audit.clone() else {
            return AuditStatus::NotRecorded;
        };
        let record = AccessRecord::new(context, accessed, rows, outcome, query_hash);
        let path = audit.path().to_path_buf();
        match tokio::task::spawn_blocking(move || audit.append(&record)).await {
            Ok(Ok(())) => AuditStatus::Recorded,
            Ok(Err(error)) => AuditStatus::Failed(error),
            Err(join_error) => AuditStatus::Failed(crate::audit::AuditError {
                path,
                source: std::io::Error::other(join_error.to_string()),
            }),
        }
    }

    /// Like [`QueryEngine::sql`], but fails with `BadRequest` once the result would exceed
    /// `max_rows`, without materializing more than `max_rows + 1` rows (the HTTP API uses it).
    pub async fn sql_limited(&self, sql: &str, max_rows: usize) -> Result<QueryOutput, QueryError> {
        let output = self.run(sql, Some(max_rows)).await?;
        check_row_limit(output, max_rows)
    }

    async fn run(&self, sql: &str, max_rows: Option<usize>) -> Result<QueryOutput, QueryError> {
        self.run_with_access(sql, max_rows, false).await.1
    }

    /// Plans and runs `sql`; with `want_access` (or tracking on) also answers what the plan
    /// reads, `None` when it did not plan.
    async fn run_with_access(
        &self,
        sql: &str,
        max_rows: Option<usize>,
        want_access: bool,
    ) -> (Option<AccessedData>, Result<QueryOutput, QueryError>) {
        let started = Instant::now();
        let state = self.context.state();
        let plan = match state.create_logical_plan(sql).await {
            Ok(plan) => plan,
            Err(error) => return (None, Err(error.into())),
        };
        let access = (want_access || self.tracker.is_some()).then(|| plan_access(&state, &plan));
        let result = self.execute(plan, max_rows, started).await;
        if let (Some(tracker), Some(access)) = (&self.tracker, &access) {
            let mut tracked = tracker.lock().unwrap_or_else(PoisonError::into_inner);
            tracked.accessed.merge(access);
            tracked.statements += 1;
            if let Ok(output) = &result {
                tracked.rows += output.row_count() as u64;
            }
        }
        (access, result)
    }

    async fn execute(
        &self,
        plan: LogicalPlan,
        max_rows: Option<usize>,
        started: Instant,
    ) -> Result<QueryOutput, QueryError> {
        ensure_read_only(&plan)?;
        let mut frame = self.context.execute_logical_plan(plan).await?;
        // EXPLAIN/SHOW/DESCRIBE outputs are small; a limit on them would change their meaning.
        if let Some(max) = max_rows
            && !matches!(
                frame.logical_plan(),
                LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) | LogicalPlan::DescribeTable(_)
            )
        {
            frame = frame.limit(0, Some(max.saturating_add(1)))?;
        }
        let schema = Arc::clone(frame.schema().inner());
        let batches = frame.collect().await?;
        Ok(QueryOutput {
            schema,
            batches,
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// What the most recent scan of `table` read (segments scanned and pruned, memtable rows);
    /// `None` before the first query touching it.
    pub fn last_scan_stats(&self, table: Table) -> Option<ScanStats> {
        self.stats.get(table)
    }

    /// `columns` of `table` in `range`, as one stream per partition of the scan plan (the
    /// store's segments and memtable spread over the session's target partitions), for callers
    /// that process rows in parallel without SQL, such as dimension discovery. Each stream can
    /// be drained on its own task; together they hold every row in `range` exactly once.
    pub async fn scan_partitions(
        &self,
        table: Table,
        range: TimeRange,
        columns: &[&str],
    ) -> Result<Vec<BatchStream>, QueryError> {
        let mut frame = self.context.table(table.name()).await?;
        if let Some(since) = range.since_ns {
            frame = frame.filter(col(TS_COLUMN).gt_eq(ts_literal(since)))?;
        }
        if let Some(until) = range.until_ns {
            frame = frame.filter(col(TS_COLUMN).lt(ts_literal(until)))?;
        }
        let streams = frame
            .select_columns(columns)?
            .execute_stream_partitioned()
            .await?;
        Ok(streams
            .into_iter()
            .map(|stream| {
                Box::pin(stream.map(|batch| batch.map_err(QueryError::from))) as BatchStream
            })
            .collect())
    }
}

/// A `ts` bound as the canonical tables store it (nanoseconds, UTC).
fn ts_literal(ns: i64) -> datafusion::prelude::Expr {
    lit(ScalarValue::TimestampNanosecond(
        Some(ns),
        Some("UTC".into()),
    ))
}

/// `BadRequest` once a result exceeds `max_rows` (the plan fetched at most one row more).
fn check_row_limit(output: QueryOutput, max_rows: usize) -> Result<QueryOutput, QueryError> {
    if output.row_count() > max_rows {
        return Err(QueryError::BadRequest(format!(
            "the query returns more than {max_rows} rows; add a LIMIT or aggregate"
        )));
    }
    Ok(output)
}

/// What `plan` reads: the scans of the optimized plan (projection push-down has narrowed each
/// to the columns the query uses anywhere), plus any table the optimizer removed (`WHERE false`)
/// without columns. When optimizing fails, the unoptimized scans: every column of every table
/// named, over-reporting rather than missing a read.
fn plan_access(state: &SessionState, plan: &LogicalPlan) -> AccessedData {
    let as_planned = accessed_data(plan);
    match state.optimize(plan) {
        Ok(optimized) => {
            let mut accessed = accessed_data(&optimized);
            accessed.tables.extend(as_planned.tables);
            accessed
        }
        Err(_) => as_planned,
    }
}

/// Rejects DDL, DML, COPY and session statements (SET, PREPARE, transactions) anywhere in the
/// plan, including under EXPLAIN (EXPLAIN ANALYZE executes its input).
fn ensure_read_only(plan: &LogicalPlan) -> Result<(), QueryError> {
    let writes = plan.exists(|node| {
        Ok(matches!(
            node,
            LogicalPlan::Ddl(_)
                | LogicalPlan::Dml(_)
                | LogicalPlan::Copy(_)
                | LogicalPlan::Statement(_)
        ))
    })?;
    if writes {
        Err(QueryError::BadRequest(READ_ONLY_MESSAGE.to_string()))
    } else {
        Ok(())
    }
}
