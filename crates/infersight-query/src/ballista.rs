//! Large scans on an Apache DataFusion Ballista cluster (feature `ballista`). The query node
//! plans every statement itself ([`crate::route`]); [`BallistaRoute`] then submits the finished
//! physical plan of a statement that reads enough of the bucket's segments to a Ballista
//! scheduler (`execute_physical_plan`) and streams the answer back. Plans that read rows only
//! this node holds (memtable batches, segments on its own disk) and small plans run here, and so
//! does every plan while the scheduler cannot be reached, and every plan whose job or result
//! stream the cluster fails: logged and counted, never an error.
//!
//! [`run_scheduler`] and [`run_executor`] embed Ballista's scheduler and executor
//! (`infersight ballista scheduler|executor`) with what infersight's plans need: the `json_get`
//! function (in the scheduler's session, which decodes submitted plans, and in the executors'
//! function registry) and the bucket's object store (in every executor's runtime, under the
//! bucket's URL, as the query node registered it).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use ballista_core::execution_plans::execute_physical_plan;
use ballista_core::extension::SessionConfigExt;
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::start_server;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::datasource::memory::{DataSourceExec, MemorySourceConfig};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::SessionState;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion::prelude::SessionConfig;
use datafusion_proto::protobuf::PhysicalPlanNode;
use infersight_store::RemoteSegments;
use serde::Serialize;

use crate::route::PlanRoute;
use crate::udf::{JSON_GET, json_get_udf};

/// When plans go to the cluster (`[query.ballista]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSettings {
    /// The scheduler's gRPC address: `host:port` or `http://host:port`.
    pub scheduler: String,
    /// A plan goes to the cluster when it reads at least this many bytes of segments...
    pub min_bytes: u64,
    /// ...or at least this many segments; 0: only `min_bytes` counts (`min_bytes` 0: every
    /// plan over the bucket's segments).
    pub min_segments: usize,
    /// Longest a plan may take on the cluster before it runs here instead (a job the cluster
    /// never finishes must not hold a statement for ever).
    pub timeout: std::time::Duration,
}

/// How many plans went where since start (`/metrics`).
#[derive(Debug, Default)]
struct Counters {
    submitted: AtomicU64,
    in_process: AtomicU64,
    fallbacks: AtomicU64,
}

/// A copy of the route's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RouteCounts {
    /// Plans the cluster accepted (a job that then failed mid-way is also a fallback).
    pub submitted: u64,
    /// Plans run here by choice: small, or reading rows only this node holds.
    pub in_process: u64,
    /// Plans meant for the cluster that ran here because submitting them failed, the cluster
    /// gave no answer in time, or its result stream failed before its last row.
    pub fallbacks: u64,
}

/// Sends large plans over the bucket's segments to a Ballista scheduler.
#[derive(Debug)]
pub struct BallistaRoute {
    scheduler_url: String,
    settings: RouteSettings,
    /// The bucket's URL and this store's key prefix in it: what every executor can read.
    bucket: Option<(String, String)>,
    session_id: String,
    counters: Counters,
}

/// What a physical plan reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanReads {
    /// Only segments in the bucket: `segments` objects, `bytes` in all.
    Bucket { segments: usize, bytes: u64 },
    /// Something only this node can read (the reason).
    Here(&'static str),
}

impl BallistaRoute {
    /// A route for a query node whose store keeps its segments in `bucket` (`None`: every plan
    /// reads this node's own disk and runs here).
    pub fn new(settings: RouteSettings, bucket: Option<&RemoteSegments>) -> BallistaRoute {
        let scheduler_url = if settings.scheduler.contains("://") {
            settings.scheduler.clone()
        } else {
            format!("http://{}", settings.scheduler)
        };
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        BallistaRoute {
            scheduler_url,
            settings,
            bucket: bucket.map(|bucket| (bucket.url.clone(), bucket.prefix.clone())),
            session_id: format!("infersight-{}-{started}", std::process::id()),
            counters: Counters::default(),
        }
    }

    pub fn counts(&self) -> RouteCounts {
        RouteCounts {
            submitted: self.counters.submitted.load(Ordering::Relaxed),
            in_process: self.counters.in_process.load(Ordering::Relaxed),
            fallbacks: self.counters.fallbacks.load(Ordering::Relaxed),
        }
    }

    /// What `plan` reads, as far as the cluster is concerned.
    pub fn plan_reads(&self, plan: &Arc<dyn ExecutionPlan>) -> PlanReads {
        let mut reads = PlanReads::Bucket {
            segments: 0,
            bytes: 0,
        };
        let walked = plan.apply(|node| {
            if node.is::<BoundedWindowAggExec>() || node.is::<WindowAggExec>() {
                reads = PlanReads::Here(
                    "a window function (Ballista 55 loses the order of its partitions in a shuffle)",
                );
                return Ok(TreeNodeRecursion::Stop);
            }
            let Some(source) = node.downcast_ref::<DataSourceExec>() else {
                return Ok(TreeNodeRecursion::Continue);
            };
            let source = source.data_source();
            let here = if source.is::<MemorySourceConfig>() {
                Some("rows not flushed yet (memtable)")
            } else if let Some(files) = source.downcast_ref::<FileScanConfig>() {
                self.bucket_files(files, &mut reads)
            } else {
                Some("a source other than Parquet segments")
            };
            Ok(match here {
                Some(reason) => {
                    reads = PlanReads::Here(reason);
                    TreeNodeRecursion::Stop
                }
                None => TreeNodeRecursion::Continue,
            })
        });
        match walked {
            Ok(_) => reads,
            Err(_) => PlanReads::Here("a plan that could not be walked"),
        }
    }

    /// Adds the files of `scan` to `reads`; the reason they are not all in the bucket, if so.
    fn bucket_files(&self, scan: &FileScanConfig, reads: &mut PlanReads) -> Option<&'static str> {
        let Some((url, prefix)) = &self.bucket else {
            return Some("segments on this node's disk (no bucket)");
        };
        if scan.object_store_url.as_str() != ObjectUrl::normalize(url) {
            return Some("segments on this node's disk");
        }
        for file in scan.file_groups.iter().flat_map(|group| group.files()) {
            // a `file://` bucket shares the local filesystem's URL: only keys under its
            // directory are the bucket's
            if !under_prefix(file.object_meta.location.as_ref(), prefix) {
                return Some("segments on this node's disk");
            }
            if let PlanReads::Bucket { segments, bytes } = reads {
                *segments += 1;
                *bytes += file.object_meta.size;
            }
        }
        None
    }

    /// Whether plans reading `reads` go to the cluster.
    fn goes_to_cluster(&self, reads: PlanReads) -> bool {
        match reads {
            PlanReads::Bucket { segments, bytes } => {
                let by_segments =
                    self.settings.min_segments > 0 && segments >= self.settings.min_segments;
                segments > 0 && (bytes >= self.settings.min_bytes || by_segments)
            }
            PlanReads::Here(_) => false,
        }
    }

    async fn submit(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        config: &SessionConfig,
    ) -> Result<SendableRecordBatchStream> {
        let config = config.clone().upgrade_for_ballista();
        let ballista = config.ballista_config();
        let codec = config.ballista_physical_extension_codec();
        execute_physical_plan::<PhysicalPlanNode>(
            self.scheduler_url.clone(),
            &ballista,
            Arc::clone(plan),
            codec.as_ref(),
            self.session_id.clone(),
            config,
        )
        .await
    }
}

#[async_trait]
impl PlanRoute for BallistaRoute {
    fn takes(&self, plan: &Arc<dyn ExecutionPlan>) -> bool {
        let reads = self.plan_reads(plan);
        let takes = self.goes_to_cluster(reads);
        if !takes {
            self.counters.in_process.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(?reads, "statement runs here");
        }
        takes
    }

    async fn execute(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        config: &SessionConfig,
    ) -> Option<Result<SendableRecordBatchStream>> {
        let timeout = self.settings.timeout;
        let submitted = tokio::time::timeout(timeout, self.submit(plan, config))
            .await
            .unwrap_or_else(|_| {
                Err(DataFusionError::Execution(format!(
                    "no answer within {timeout:?}"
                )))
            });
        match submitted {
            Ok(stream) => {
                self.counters.submitted.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(scheduler = %self.scheduler_url, "statement runs on the cluster");
                Some(Ok(idle_limited(stream, timeout)))
            }
            Err(error) => {
                self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    scheduler = %self.scheduler_url,
                    %error,
                    "the Ballista cluster did not take the statement; it runs on this node"
                );
                None
            }
        }
    }

    fn failed(&self, error: &DataFusionError) {
        self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            scheduler = %self.scheduler_url,
            %error,
            "the Ballista cluster failed the statement before its last row; it runs again on this node"
        );
    }

    fn counts(&self) -> Vec<(&'static str, u64)> {
        let counts = BallistaRoute::counts(self);
        vec![
            ("cluster", counts.submitted),
            ("here", counts.in_process),
            ("fallback", counts.fallbacks),
        ]
    }
}

/// `stream`, failing once it has sent nothing for `idle`: the rows of a finished job are
/// fetched from the executors as they are read, and an executor that stops answering must not
/// hold the statement for ever.
fn idle_limited(
    stream: SendableRecordBatchStream,
    idle: std::time::Duration,
) -> SendableRecordBatchStream {
    let schema = stream.schema();
    let guarded = futures::stream::unfold(Some(stream), move |stream| async move {
        let mut stream = stream?;
        match tokio::time::timeout(idle, futures::StreamExt::next(&mut stream)).await {
            Ok(Some(item)) => Some((item, Some(stream))),
            Ok(None) => None,
            Err(_) => Some((
                Err(DataFusionError::Execution(format!(
                    "the Ballista cluster sent no rows for {idle:?}"
                ))),
                None,
            )),
        }
    });
    Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, guarded))
}

/// Whether `key` is under the directory `prefix` (every key is under an empty one).
fn under_prefix(key: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || key
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Object store URLs as DataFusion prints them (`s3://bucket/`, `file:///`).
struct ObjectUrl;

impl ObjectUrl {
    fn normalize(url: &str) -> String {
        match datafusion::datasource::object_store::ObjectStoreUrl::parse(url) {
            Ok(parsed) => parsed.as_str().to_string(),
            Err(_) => url.to_string(),
        }
    }
}

/// The embedded scheduler's settings.
#[derive(Debug, Clone)]
pub struct SchedulerSettings {
    pub bind: SocketAddr,
    /// The host executors and clients reach it at (default: the bind address).
    pub external_host: Option<String>,
}

/// Runs a Ballista scheduler until the process ends; its sessions know `json_get` (submitted
/// plans are decoded there) and the bucket's object store.
pub async fn run_scheduler(
    settings: SchedulerSettings,
    bucket: Option<RemoteSegments>,
) -> Result<()> {
    let host = settings
        .external_host
        .clone()
        .unwrap_or_else(|| settings.bind.ip().to_string());
    let mut config = SchedulerConfig::default()
        .with_hostname(host.clone())
        .with_port(settings.bind.port())
        .with_scheduler_id(format!("{host}:{}", settings.bind.port()))
        .with_override_session_builder(Arc::new(move |config: SessionConfig| {
            session_state(config, bucket.as_ref())
        }));
    config.bind_host = settings.bind.ip().to_string();
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .map_err(ballista_error)?;
    start_server(cluster, settings.bind, Arc::new(config))
        .await
        .map_err(ballista_error)
}

/// A scheduler session: Ballista's defaults, `json_get` and the bucket's object store.
fn session_state(config: SessionConfig, bucket: Option<&RemoteSegments>) -> Result<SessionState> {
    let mut state = ballista_core::utils::default_session_builder(config)?;
    datafusion::execution::FunctionRegistry::register_udf(&mut state, Arc::new(json_get_udf()))?;
    if let Some(bucket) = bucket {
        register_bucket(state.runtime_env(), bucket)?;
    }
    Ok(state)
}

fn register_bucket(
    runtime: &Arc<datafusion::execution::runtime_env::RuntimeEnv>,
    bucket: &RemoteSegments,
) -> Result<()> {
    let url = datafusion::datasource::object_store::ObjectStoreUrl::parse(&bucket.url)?;
    runtime.register_object_store(url.as_ref(), Arc::clone(&bucket.store));
    Ok(())
}

/// The embedded executor's settings.
#[derive(Debug, Clone)]
pub struct ExecutorSettings {
    /// The scheduler's host and port.
    pub scheduler_host: String,
    pub scheduler_port: u16,
    /// The address of the executor's Flight service (shuffle reads); its gRPC service listens
    /// on `grpc_port` of the same host.
    pub bind: SocketAddr,
    pub grpc_port: u16,
    /// The host the scheduler and other executors reach it at (default: the bind address).
    pub external_host: Option<String>,
    /// Tasks run at once (0: one per core).
    pub concurrency: usize,
    /// Where shuffle files go.
    pub work_dir: PathBuf,
}

/// Runs a Ballista executor until it is told to stop (SIGTERM, Ctrl-C or its scheduler); its
/// tasks know `json_get` and read the bucket's segments.
pub async fn run_executor(
    settings: ExecutorSettings,
    bucket: Option<RemoteSegments>,
) -> Result<()> {
    std::fs::create_dir_all(&settings.work_dir).map_err(|error| {
        DataFusionError::Execution(format!(
            "executor work directory {}: {error}",
            settings.work_dir.display()
        ))
    })?;
    let work_dir = settings.work_dir.display().to_string();
    // every function a query node's session has (Ballista's default registry lacks the nested
    // ones, `array_element` among them), and `json_get`
    let mut functions = BallistaFunctionRegistry::from(
        &datafusion::execution::SessionStateBuilder::new()
            .with_default_features()
            .build(),
    );
    functions
        .scalar_functions
        .insert(JSON_GET.to_string(), Arc::new(json_get_udf()));
    let temp_dir = work_dir.clone();
    let runtime_producer: ballista_core::RuntimeProducer = Arc::new(move |_config| {
        let runtime = RuntimeEnvBuilder::new()
            .with_temp_file_path(temp_dir.clone())
            .build_arc()?;
        if let Some(bucket) = &bucket {
            register_bucket(&runtime, bucket)?;
        }
        Ok(runtime)
    });
    let config = ExecutorProcessConfig {
        bind_host: settings.bind.ip().to_string(),
        port: settings.bind.port(),
        grpc_port: settings.grpc_port,
        external_host: settings.external_host,
        scheduler_host: settings.scheduler_host,
        scheduler_port: settings.scheduler_port,
        vcores: settings.concurrency,
        work_dir: Some(work_dir),
        print_thread_info: false,
        override_function_registry: Some(Arc::new(functions)),
        override_runtime_producer: Some(runtime_producer),
        ..ExecutorProcessConfig::default()
    };
    start_executor_process(Arc::new(config))
        .await
        .map_err(ballista_error)
}

fn ballista_error(error: ballista_core::error::BallistaError) -> DataFusionError {
    DataFusionError::External(Box::new(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(min_bytes: u64, min_segments: usize) -> BallistaRoute {
        BallistaRoute::new(
            RouteSettings {
                scheduler: "127.0.0.1:50050".into(),
                min_bytes,
                min_segments,
                timeout: std::time::Duration::from_secs(1),
            },
            None,
        )
    }

    #[test]
    fn plans_go_to_the_cluster_by_their_bytes_or_their_segments() {
        let reads = |segments, bytes| PlanReads::Bucket { segments, bytes };
        let by_bytes = route(1 << 30, 0);
        assert!(
            !by_bytes.goes_to_cluster(reads(500, 1 << 20)),
            "segments 0: bytes only"
        );
        assert!(by_bytes.goes_to_cluster(reads(2, 1 << 30)));
        let by_either = route(1 << 30, 64);
        assert!(by_either.goes_to_cluster(reads(64, 1 << 20)));
        assert!(!by_either.goes_to_cluster(reads(63, 1 << 20)));
        let every = route(0, 0);
        assert!(every.goes_to_cluster(reads(1, 10)));
        assert!(
            !every.goes_to_cluster(reads(0, 0)),
            "a plan reading no segment stays"
        );
        assert!(!every.goes_to_cluster(PlanReads::Here("memtable")));
    }

    #[test]
    fn a_file_buckets_keys_are_those_under_its_directory() {
        assert!(under_prefix(
            "data/bucket/segments/x.parquet",
            "data/bucket"
        ));
        assert!(!under_prefix(
            "data/bucket-x/segments/x.parquet",
            "data/bucket"
        ));
        assert!(!under_prefix("data/bucket", "data/bucket"));
        assert!(under_prefix("segments/x.parquet", ""));
    }
}
