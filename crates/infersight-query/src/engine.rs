//! [`QueryEngine`]: one DataFusion session over a store, with the six canonical tables and the
//! `json_get` UDF registered. It only reads: statements that would change the catalog, the
//! session or data are rejected before they are planned into anything executable.

use std::sync::Arc;
use std::time::Instant;

use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use infersight_model::Table;
use infersight_store::{StorageBackend, TimeRange};

use crate::dimensions::{Dimension, discover_dimensions};
use crate::error::QueryError;
use crate::output::QueryOutput;
use crate::provider::{ScanStats, ScanStatsRegistry, StoreTable};
use crate::sli::{SliAnswer, SliRequest, answer_sli};
use crate::udf::json_get_udf;

const READ_ONLY_MESSAGE: &str = "only SELECT/EXPLAIN/SHOW/DESCRIBE queries are allowed";

/// SQL over the canonical tables of one store.
pub struct QueryEngine {
    context: SessionContext,
    stats: Arc<ScanStatsRegistry>,
    pub(crate) store: Arc<dyn StorageBackend>,
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
        }
    }

    /// Runs one read-only SQL statement and collects its result.
    pub async fn sql(&self, sql: &str) -> Result<QueryOutput, QueryError> {
        self.run(sql, None).await
    }

    /// Like [`QueryEngine::sql`], but fails with `BadRequest` once the result would exceed
    /// `max_rows`, without materializing more than `max_rows + 1` rows (the HTTP API uses it).
    pub async fn sql_limited(&self, sql: &str, max_rows: usize) -> Result<QueryOutput, QueryError> {
        let output = self.run(sql, Some(max_rows)).await?;
        let rows: usize = output.batches.iter().map(|b| b.num_rows()).sum();
        if rows > max_rows {
            return Err(QueryError::BadRequest(format!(
                "the query returns more than {max_rows} rows; add a LIMIT or aggregate"
            )));
        }
        Ok(output)
    }

    async fn run(&self, sql: &str, max_rows: Option<usize>) -> Result<QueryOutput, QueryError> {
        let started = Instant::now();
        let state = self.context.state();
        let plan = state.create_logical_plan(sql).await?;
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

    /// Low-cardinality attributes of `requests` in `range`, the candidate dimensions for
    /// root-cause localization; see [`Dimension`].
    pub async fn dimensions(
        &self,
        range: TimeRange,
        max_cardinality: usize,
        max_values: usize,
    ) -> Result<Vec<Dimension>, QueryError> {
        discover_dimensions(&self.context, range, max_cardinality, max_values).await
    }

    /// An SLI series from the store's rollups (no raw-row scan); runs on a blocking thread.
    pub async fn sli(&self, request: SliRequest) -> Result<SliAnswer, QueryError> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || answer_sli(store.as_ref(), &request))
            .await
            .map_err(|e| QueryError::Internal(format!("sli task failed: {e}")))?
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
