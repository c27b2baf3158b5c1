//! [`QueryEngine`]: one DataFusion session over a store, with the six canonical tables and the
//! `json_get` UDF registered. It only reads: statements that would change the catalog, the
//! session or data are rejected before they are planned into anything executable.
//!
//! An engine may carry the [`AccessAudit`]: [`QueryEngine::sql_audited`] then records which
//! tables and columns each statement read (from its optimized logical plan), for whom, and every
//! statement it refused. With [`QueryLimits`] ([`QueryEngine::with_limits`]) the same method runs
//! each statement in a memory pool of its own, under a timeout and a response-size cap (see
//! `limits`). The session has no table functions and no file or URL tables: only the canonical
//! tables and `information_schema` can be named.
//!
//! [`QueryEngine::scoped`] makes a session over the same store whose table providers serve only
//! some orgs' rows (see `scope`): the HTTP API builds one per caller.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::tree_node::TreeNode;
use datafusion::datasource::object_store::ObjectStoreUrl;
use datafusion::error::DataFusionError;
use datafusion::execution::cache::cache_manager::{CacheManagerConfig, FileMetadataCache};
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::GreedyMemoryPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
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
use crate::group_views::GroupKeysAsViews;
use crate::limits::{
    CallerPermit, CallerSlots, LimitedEnd, QueryCounters, QueryCounts, QueryLimits,
};
use crate::output::QueryOutput;
use crate::percentile::PercentileCont;
use crate::provider::{ScanStats, ScanStatsRegistry, StoreTable};
use crate::range::TS_COLUMN;
use crate::route::PlanRoute;
use crate::scope::OrgScope;
use crate::scoped_store::ScopedStore;
use crate::udf::json_get_udf;

/// The record batches of one partition of a scan, in order; see [`QueryEngine::scan_partitions`].
pub type BatchStream = Pin<Box<dyn Stream<Item = Result<RecordBatch, QueryError>> + Send>>;

const READ_ONLY_MESSAGE: &str = "only SELECT/EXPLAIN/SHOW/DESCRIBE queries are allowed";

/// SQL over the canonical tables of one store.
pub struct QueryEngine {
    context: SessionContext,
    stats: Arc<ScanStatsRegistry>,
    pub(crate) store: Arc<dyn StorageBackend>,
    /// The store itself, every org's rows: the tables of a scoped session filter what they
    /// read from it (`store` is then a `ScopedStore` over it).
    backend: Arc<dyn StorageBackend>,
    /// Where [`QueryEngine::sql_audited`] and [`QueryEngine::record_access`] write; `None`: they
    /// run the query and record nothing.
    access_audit: Option<Arc<AccessAudit>>,
    /// What every statement read since [`QueryEngine::with_access_tracking`] (reports).
    tracker: Option<Mutex<TrackedAccess>>,
    /// The limits of [`QueryEngine::sql_audited`]; `None`: unlimited.
    limits: Option<QueryLimits>,
    caller_slots: Arc<CallerSlots>,
    counters: Arc<QueryCounters>,
    /// The orgs whose rows the tables serve.
    scope: OrgScope,
    /// Where physical plans may run instead of here (a Ballista cluster); `None`: always here.
    route: Option<Arc<dyn PlanRoute>>,
}

impl std::fmt::Debug for QueryEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryEngine").finish_non_exhaustive()
    }
}

impl QueryEngine {
    /// Every org's rows; see [`QueryEngine::scoped`].
    pub fn new(store: Arc<dyn StorageBackend>) -> QueryEngine {
        let stats = Arc::new(ScanStatsRegistry::default());
        QueryEngine {
            context: session(&store, &stats, &OrgScope::All, None),
            stats,
            backend: Arc::clone(&store),
            store,
            access_audit: None,
            tracker: None,
            limits: None,
            caller_slots: Arc::new(CallerSlots::new(usize::MAX)),
            counters: Arc::new(QueryCounters::default()),
            scope: OrgScope::All,
            route: None,
        }
    }

    /// An engine over the same store, audit, limits, per-caller slots and counters whose
    /// tables serve only `scope`'s rows, whatever the SQL (a fresh session: nothing registered
    /// in this one carries over). Access tracking does not carry over either.
    ///
    /// Its [`QueryEngine::store`] is scoped too: rollups rebuilt from the scope's rows
    /// (`scoped_store`), so SLI answers, the root-cause engine and anything else that reads
    /// rollups off this engine see only the scope's requests.
    pub fn scoped(&self, scope: OrgScope) -> QueryEngine {
        let context = session(
            &self.backend,
            &self.stats,
            &scope,
            Some(self.metadata_cache()),
        );
        let store: Arc<dyn StorageBackend> = match scope.orgs() {
            None => Arc::clone(&self.backend),
            Some(orgs) => Arc::new(ScopedStore::new(
                Arc::clone(&self.backend),
                context.clone(),
                orgs.to_vec(),
            )),
        };
        QueryEngine {
            context,
            stats: Arc::clone(&self.stats),
            store,
            backend: Arc::clone(&self.backend),
            access_audit: self.access_audit.clone(),
            tracker: None,
            limits: self.limits,
            caller_slots: Arc::clone(&self.caller_slots),
            counters: Arc::clone(&self.counters),
            scope,
            route: self.route.clone(),
        }
    }

    /// Lets `route` execute the physical plans of this engine's statements (and of the engines
    /// [`QueryEngine::scoped`] makes from it) where it takes them; it declines the others,
    /// which run here.
    pub fn with_route(mut self, route: Arc<dyn PlanRoute>) -> QueryEngine {
        self.route = Some(route);
        self
    }

    /// Where this engine's plans may run instead of here, if anywhere.
    pub fn route(&self) -> Option<&Arc<dyn PlanRoute>> {
        self.route.as_ref()
    }

    /// The orgs whose rows this engine's tables serve.
    pub fn scope(&self) -> &OrgScope {
        &self.scope
    }

    /// Runs every statement of [`QueryEngine::sql_audited`] under `limits` (memory pool,
    /// timeout, response bytes) and hands out `limits.max_concurrent_per_caller` slots per
    /// caller ([`QueryEngine::try_caller_slot`]).
    pub fn with_limits(mut self, limits: QueryLimits) -> QueryEngine {
        self.caller_slots = Arc::new(CallerSlots::new(limits.max_concurrent_per_caller));
        self.limits = Some(limits);
        self
    }

    pub fn limits(&self) -> Option<&QueryLimits> {
        self.limits.as_ref()
    }

    /// A slot for one more statement of `caller` (a peer address, an identity); `None` when it
    /// already runs as many as the limits allow. Without limits there is always one.
    pub fn try_caller_slot(&self, caller: &str) -> Option<CallerPermit> {
        self.caller_slots.try_acquire(caller)
    }

    /// How the limited statements ended so far, and how many run now.
    pub fn query_counts(&self) -> QueryCounts {
        self.counters.counts()
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

    /// Runs `sql` like [`QueryEngine::sql`] (or [`QueryEngine::sql_limited`] with `max_rows`),
    /// under the engine's [`QueryLimits`] when it has them, and appends one line to the attached
    /// audit: `context`'s actor, the tables and columns the plan read, the rows returned, the
    /// outcome and the SQL's SHA-256, never the SQL. A statement that fails is recorded with its
    /// error kind; one that does not even plan (a file path as a table, an unknown function, a
    /// syntax error) with no tables, so refused attempts show in the audit too. The result never
    /// depends on the audit: see [`AuditedQuery::audit`] for whether the line was written.
    pub async fn sql_audited(
        &self,
        sql: &str,
        max_rows: Option<usize>,
        context: &AccessContext,
    ) -> AuditedQuery {
        let audited = self.access_audit.is_some();
        let (access, result) = self
            .run_with_access(sql, max_rows, audited, self.limits.as_ref())
            .await;
        let result = match max_rows {
            Some(max_rows) => result.and_then(|output| check_row_limit(output, max_rows)),
            None => result,
        };
        let access = match (access, &result) {
            (None, Err(_)) => Some(AccessedData::default()),
            (access, _) => access,
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
        self.run_with_access(sql, max_rows, false, None).await.1
    }

    /// Plans and runs `sql` (under `limits`, if any); with `want_access` (or tracking on) also
    /// answers what the plan reads, `None` when it did not plan.
    async fn run_with_access(
        &self,
        sql: &str,
        max_rows: Option<usize>,
        want_access: bool,
        limits: Option<&QueryLimits>,
    ) -> (Option<AccessedData>, Result<QueryOutput, QueryError>) {
        let started = Instant::now();
        let state = self.context.state();
        let plan = match state.create_logical_plan(sql).await {
            Ok(plan) => plan,
            Err(error) => return (None, Err(error.into())),
        };
        let access = (want_access || self.tracker.is_some()).then(|| plan_access(&state, &plan));
        let result = match limits {
            Some(limits) => self.execute_limited(plan, max_rows, started, limits).await,
            None => self.execute(plan, max_rows, started).await,
        };
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
        collect_plan(
            &self.context,
            plan,
            max_rows,
            started,
            None,
            self.route.as_ref(),
        )
        .await
        .map_err(|error| match error {
            RunError::Engine(error) => QueryError::from(error),
            // no byte cap without limits
            RunError::TooLarge => QueryError::Internal("response cap without limits".into()),
        })
    }

    /// [`QueryEngine::execute`] in a session of its own with `limits`' memory pool, on a task of
    /// its own ([`statement_runtime`]) under `limits`' timeout and byte cap. This future only waits for that task, so
    /// it notices a timeout or a dropped caller (the HTTP client went away) at once, whatever
    /// the plan does; either aborts the task, which drops the plan's streams and with them the
    /// tasks DataFusion spawned. A panic inside DataFusion ends at the task's boundary: the
    /// statement fails, the caller does not.
    async fn execute_limited(
        &self,
        plan: LogicalPlan,
        max_rows: Option<usize>,
        started: Instant,
        limits: &QueryLimits,
    ) -> Result<QueryOutput, QueryError> {
        ensure_read_only(&plan)?;
        let context = self.limited_context(limits)?;
        let running = self.counters.start();
        let max_bytes = limits.max_response_bytes;
        let route = self.route.clone();
        let statement = async move {
            let result = collect_plan(
                &context,
                plan,
                max_rows,
                started,
                Some(max_bytes),
                route.as_ref(),
            )
            .await;
            let end = match &result {
                Err(RunError::TooLarge) => LimitedEnd::ResponseTooLarge,
                Err(RunError::Engine(error)) if is_resources_exhausted(error) => {
                    LimitedEnd::MemoryExceeded
                }
                _ => LimitedEnd::Finished,
            };
            running.end(end);
            result
        };
        let task = AbortOnDrop(match statement_runtime() {
            Some(runtime) => runtime.spawn(statement),
            None => tokio::spawn(statement),
        });
        match tokio::time::timeout(limits.timeout, task).await {
            Err(_elapsed) => {
                // the task is aborted as `task` drops
                self.counters.count(LimitedEnd::TimedOut);
                Err(limits.timed_out())
            }
            Ok(Err(join_error)) => {
                self.counters.count(LimitedEnd::Panicked);
                let reason = match join_error.try_into_panic() {
                    Ok(panic) => panic_message(panic.as_ref()),
                    Err(join_error) => join_error.to_string(),
                };
                Err(QueryError::Internal(format!(
                    "the query engine failed on this statement ({reason}); nothing else was affected"
                )))
            }
            Ok(Ok(Err(RunError::TooLarge))) => Err(limits.response_too_large()),
            Ok(Ok(Err(RunError::Engine(error)))) if is_resources_exhausted(&error) => {
                Err(limits.memory_exceeded())
            }
            Ok(Ok(Err(RunError::Engine(error)))) => Err(error.into()),
            Ok(Ok(Ok(output))) => Ok(output),
        }
    }

    /// The engine's session (catalog, functions, options, object stores) with a runtime of its
    /// own: a memory pool of `limits.memory_limit_bytes` and no spill directory, so a statement
    /// over its memory fails instead of filling the disk.
    fn limited_context(&self, limits: &QueryLimits) -> Result<SessionContext, QueryError> {
        let existing = self.context.runtime_env();
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(GreedyMemoryPool::new(limits.memory_limit_bytes)))
            .with_disk_manager_builder(
                DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
            )
            .with_object_store_registry(Arc::clone(&existing.object_store_registry))
            .with_cache_manager(
                CacheManagerConfig::default().with_file_metadata_cache(Some(self.metadata_cache())),
            )
            .build_arc()?;
        let state = SessionStateBuilder::new_from_existing(self.context.state())
            .with_runtime_env(runtime)
            .with_physical_optimizer_rule(Arc::new(crate::limits::JoinsYield))
            .build();
        Ok(SessionContext::new_with_state(state))
    }

    /// The segments' footers decoded by earlier statements, shared by every statement of this
    /// engine and of the engines scoped from it (`CheckedReaderFactory`): a footer is decoded
    /// once per segment, not once per statement.
    fn metadata_cache(&self) -> Arc<FileMetadataCache> {
        self.context
            .runtime_env()
            .cache_manager
            .get_file_metadata_cache()
    }

    /// How many segment footers the engine holds decoded (shared with its scoped engines).
    pub fn cached_footers(&self) -> usize {
        self.metadata_cache().len()
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

/// A session over `store` with the canonical tables (serving `scope`'s rows), `json_get` and
/// `information_schema`, without table functions; segment footers are cached in
/// `metadata_cache` (another engine's), else in a cache of its own.
fn session(
    store: &Arc<dyn StorageBackend>,
    stats: &Arc<ScanStatsRegistry>,
    scope: &OrgScope,
    metadata_cache: Option<Arc<FileMetadataCache>>,
) -> SessionContext {
    let target_partitions = std::thread::available_parallelism()
        .map(|cores| cores.get())
        .unwrap_or(1);
    let config = SessionConfig::new()
        .with_target_partitions(target_partitions)
        .with_information_schema(true);
    let mut state = SessionStateBuilder::new();
    if let Some(cache) = metadata_cache {
        let runtime = RuntimeEnvBuilder::new()
            .with_cache_manager(CacheManagerConfig::default().with_file_metadata_cache(Some(cache)))
            .build_arc()
            .expect("a runtime with default settings and a given cache builds");
        state = state.with_runtime_env(runtime);
    }
    let state = state
        .with_config(config)
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(GroupKeysAsViews))
        .build();
    let context = SessionContext::new_with_state(state);
    // generate_series/range: unbounded row generators nobody needs over stored telemetry
    for name in context
        .state()
        .table_functions()
        .keys()
        .cloned()
        .collect::<Vec<_>>()
    {
        context.deregister_udtf(&name);
    }
    context.register_udf(json_get_udf());
    // DataFusion's exact percentile with a grouped accumulator that copies less (`percentile`)
    context.register_udaf(PercentileCont::udaf());
    register_bucket(&context, store.as_ref());
    for table in Table::ALL {
        let provider = StoreTable::new(table, Arc::clone(store), Arc::clone(stats), scope.clone());
        context
            .register_table(table.name(), Arc::new(provider))
            .expect("a fresh session accepts the six canonical table names");
    }
    context
}

/// `context`'s session without dynamic filters and without the engine's own physical rewrite
/// ([`GroupKeysAsViews`]), for plans that leave this node. Dynamic filters are filled while a
/// plan runs and tie a join or a top-k to the scans below it inside one process, so they cannot
/// cross to a cluster's executors, and Ballista's scheduler refuses to re-plan a join holding one
/// (its task updates then fail and the job never ends). The executors plan with DataFusion's
/// rules alone.
fn state_for_leaving_plans(context: &SessionContext) -> SessionState {
    let state = context.state();
    let rules = state
        .physical_optimizers()
        .iter()
        .filter(|rule| rule.name() != GroupKeysAsViews::NAME)
        .cloned()
        .collect();
    let mut state = SessionStateBuilder::new_from_existing(state)
        .with_physical_optimizer_rules(rules)
        .build();
    let optimizer = &mut state.config_mut().options_mut().optimizer;
    optimizer.enable_dynamic_filter_pushdown = false;
    optimizer.enable_join_dynamic_filter_pushdown = false;
    optimizer.enable_topk_dynamic_filter_pushdown = false;
    optimizer.enable_aggregate_dynamic_filter_pushdown = false;
    state
}

/// Registers the object store of the store's bucket (when its segments are in one) under the
/// bucket's URL, so scans read the segment objects through the client the store wrote them
/// with. The limited sessions share the registry.
fn register_bucket(context: &SessionContext, store: &dyn StorageBackend) {
    let Some(bucket) = store.remote_segments() else {
        return;
    };
    match ObjectStoreUrl::parse(&bucket.url) {
        Ok(url) => {
            context
                .runtime_env()
                .register_object_store(url.as_ref(), bucket.store);
        }
        // the store built the URL itself (`s3://bucket`, `file://`): never seen
        Err(error) => tracing::error!(url = %bucket.url, %error, "bucket URL not registered"),
    }
}

/// The runtime limited statements run on: worker threads of their own (`infersight-query`, as
/// many as the machine has cores), so statements that keep their threads busy between yields
/// cannot starve the caller's runtime, where their timeouts run and the server answers
/// `/healthz`, ingest and everything else. `None` (the statement runs on the caller's runtime)
/// when its threads cannot be started, which is logged once.
fn statement_runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::OnceLock<Option<tokio::runtime::Runtime>> =
        std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(2, usize::from);
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("infersight-query")
                .enable_all()
                .build()
                .map_err(|error| {
                    tracing::warn!(%error, "no threads of their own for API statements");
                })
                .ok()
        })
        .as_ref()
}

/// A spawned statement that is aborted when its caller stops waiting for it.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Why [`collect_plan`] stopped without an answer.
enum RunError {
    Engine(DataFusionError),
    /// The rows collected exceeded the byte cap.
    TooLarge,
}

impl From<DataFusionError> for RunError {
    fn from(error: DataFusionError) -> Self {
        RunError::Engine(error)
    }
}

/// Runs `plan` in `context` and collects its batches, at most `max_rows + 1` rows (not for
/// EXPLAIN/SHOW/DESCRIBE, whose outputs are small and whose meaning a limit would change); with
/// `max_bytes`, stops as soon as the collected rows hold more Arrow bytes than that. The physical
/// plan runs where `route` takes it, else here.
async fn collect_plan(
    context: &SessionContext,
    plan: LogicalPlan,
    max_rows: Option<usize>,
    started: Instant,
    max_bytes: Option<usize>,
    route: Option<&Arc<dyn PlanRoute>>,
) -> Result<QueryOutput, RunError> {
    let mut frame = context.execute_logical_plan(plan).await?;
    if let Some(max) = max_rows
        && !matches!(
            frame.logical_plan(),
            LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) | LogicalPlan::DescribeTable(_)
        )
    {
        frame = frame.limit(0, Some(max.saturating_add(1)))?;
    }
    let schema = Arc::clone(frame.schema().inner());
    let task = Arc::new(frame.task_ctx());
    let logical = frame.logical_plan().clone();
    let physical = frame.create_physical_plan().await?;
    let routed = match route {
        Some(route) if route.takes(&physical) => {
            let state = state_for_leaving_plans(context);
            let leaving = state.create_physical_plan(&logical).await?;
            let answer = match route.execute(&leaving, state.config()).await {
                Some(Ok(stream)) => drain(stream, max_bytes).await.map(Some),
                Some(Err(error)) => Err(RunError::Engine(error)),
                None => Ok(None),
            };
            match answer {
                // nothing has been returned yet: a cluster that failed mid-way (an executor
                // lost, and the rows it held with it) costs time, not the answer
                Err(RunError::Engine(error)) => {
                    route.failed(&error);
                    None
                }
                done => done?,
            }
        }
        _ => None,
    };
    let batches = match routed {
        Some(batches) => batches,
        None => {
            drain(
                datafusion::physical_plan::execute_stream(physical, task)?,
                max_bytes,
            )
            .await?
        }
    };
    Ok(QueryOutput {
        schema,
        batches,
        elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
    })
}

/// The batches of `stream`; with `max_bytes`, stops as soon as they hold more Arrow bytes.
async fn drain(
    mut stream: datafusion::execution::SendableRecordBatchStream,
    max_bytes: Option<usize>,
) -> Result<Vec<RecordBatch>, RunError> {
    let mut batches = Vec::new();
    let mut bytes = 0usize;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        if let Some(max_bytes) = max_bytes {
            bytes = bytes.saturating_add(batch_bytes(&batch));
            if bytes > max_bytes {
                return Err(RunError::TooLarge);
            }
        }
        batches.push(batch);
    }
    Ok(batches)
}

/// The bytes of the rows `batch` holds (a slice counts its rows, not its parent's buffers).
fn batch_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|column| {
            let data = column.to_data();
            data.get_slice_memory_size()
                .unwrap_or_else(|_| data.get_buffer_memory_size())
        })
        .sum()
}

/// Whether a memory pool refused an allocation somewhere under `error`.
fn is_resources_exhausted(error: &DataFusionError) -> bool {
    matches!(error.find_root(), DataFusionError::ResourcesExhausted(_))
        || error.to_string().contains("Resources exhausted")
}

/// The text of a caught panic.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use datafusion::arrow::datatypes::DataType;
    use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
    use infersight_testkit::store::{TestStore, base_ns, requests};

    use super::*;
    use crate::audit::Surface;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_inside_the_engine_ends_the_statement_not_the_caller() {
        let store = TestStore::new();
        store.append_requests(&requests(base_ns(), 50, "m"));
        let engine = QueryEngine::new(store as Arc<dyn StorageBackend>).with_limits(QueryLimits {
            timeout: Duration::from_secs(10),
            ..QueryLimits::default()
        });
        let boom = create_udf(
            "boom",
            vec![DataType::Float64],
            DataType::Float64,
            Volatility::Immutable,
            Arc::new(
                |_: &[ColumnarValue]| -> datafusion::error::Result<ColumnarValue> {
                    panic!("offset overflow in a test UDF")
                },
            ),
        );
        engine.context.register_udf(boom);
        let context = AccessContext::cli(Surface::CliQuery);
        let error = engine
            .sql_audited("SELECT boom(e2e_ms) FROM requests", None, &context)
            .await
            .result
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Internal, "{error}");
        assert!(error.to_string().contains("offset overflow"), "{error}");
        let counts = engine.query_counts();
        assert_eq!((counts.panicked, counts.running), (1, 0));
        let after = engine
            .sql_audited("SELECT count(*) FROM requests", None, &context)
            .await;
        assert_eq!(after.result.unwrap().row_count(), 1);
    }
}
