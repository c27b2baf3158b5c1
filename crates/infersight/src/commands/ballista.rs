//! `infersight ballista scheduler|executor`: the processes of an Apache DataFusion Ballista
//! cluster that query nodes (`[query.ballista] scheduler`) send large statements to, embedded in
//! this binary with what infersight's plans need (`infersight_query::ballista`). Executors read
//! the bucket's segments with the `[storage]` settings of the same configuration. Needs the
//! `cluster` feature.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::args::Common;
use crate::exit::CliError;

#[derive(Debug, clap::Args)]
pub struct BallistaArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub process: BallistaProcess,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum BallistaProcess {
    /// Run a scheduler: query nodes submit plans to it, executors register with it.
    Scheduler {
        /// Address of its gRPC service.
        #[arg(long, default_value = "127.0.0.1:50050")]
        bind: SocketAddr,
        /// The host name executors and query nodes reach it at [default: the bind address].
        #[arg(long)]
        external_host: Option<String>,
    },
    /// Run an executor: it registers with the scheduler and runs the tasks of submitted plans,
    /// reading segments from the bucket of [storage].
    Executor {
        /// The scheduler's host:port.
        #[arg(long, default_value = "127.0.0.1:50050")]
        scheduler: String,
        /// Address of its Flight service (other executors fetch shuffle data there).
        #[arg(long, default_value = "127.0.0.1:50051")]
        bind: SocketAddr,
        /// Port of its gRPC service, on the bind address's host.
        #[arg(long, default_value_t = 50052)]
        grpc_port: u16,
        /// The host name the scheduler and other executors reach it at [default: the bind
        /// address].
        #[arg(long)]
        external_host: Option<String>,
        /// Tasks at once [default: one per core].
        #[arg(long, default_value_t = 0)]
        concurrency: usize,
        /// Shuffle files [default: <data>/ballista-executor-<port>].
        #[arg(long)]
        work_dir: Option<PathBuf>,
    },
}

pub async fn run(args: BallistaArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    let errors = config.storage.validate();
    if !errors.is_empty() {
        return Err(CliError::usage(errors.join("; ")));
    }
    run_process(&config, args.process).await
}

#[cfg(feature = "cluster")]
async fn run_process(
    config: &crate::config::Config,
    process: BallistaProcess,
) -> Result<i32, CliError> {
    use infersight_query::ballista::{
        ExecutorSettings, SchedulerSettings, run_executor, run_scheduler,
    };
    let bucket = bucket(config)?;
    let ended = match process {
        BallistaProcess::Scheduler {
            bind,
            external_host,
        } => {
            tracing::info!(%bind, "Ballista scheduler starting");
            let settings = SchedulerSettings {
                bind,
                external_host,
            };
            run_scheduler(settings, bucket).await
        }
        BallistaProcess::Executor {
            scheduler,
            bind,
            grpc_port,
            external_host,
            concurrency,
            work_dir,
        } => {
            let (scheduler_host, scheduler_port) = host_port(&scheduler)?;
            if bucket.is_none() {
                tracing::warn!(
                    "no storage.url: this executor reads only files on its own disk, and query \
                     nodes send plans over a bucket's segments"
                );
            }
            let work_dir = work_dir.unwrap_or_else(|| {
                config
                    .store
                    .data_dir
                    .join(format!("ballista-executor-{}", bind.port()))
            });
            tracing::info!(%bind, %scheduler, work_dir = %work_dir.display(), "Ballista executor starting");
            let settings = ExecutorSettings {
                scheduler_host,
                scheduler_port,
                bind,
                grpc_port,
                external_host,
                concurrency,
                work_dir,
            };
            run_executor(settings, bucket).await
        }
    };
    ended
        .map(|()| 0)
        .map_err(|error| CliError::failed(format!("ballista: {error}").replace('\n', " ")))
}

#[cfg(not(feature = "cluster"))]
async fn run_process(
    _config: &crate::config::Config,
    _process: BallistaProcess,
) -> Result<i32, CliError> {
    Err(CliError::usage(
        "this build has no Ballista support: build with `--features cluster`",
    ))
}

/// The bucket of `[storage]`, opened as query nodes register it; `None` without one.
#[cfg(feature = "cluster")]
fn bucket(
    config: &crate::config::Config,
) -> Result<Option<infersight_store::RemoteSegments>, CliError> {
    let Some(settings) = config.storage.bucket() else {
        return Ok(None);
    };
    let bucket = infersight_cluster::Bucket::open(&settings)
        .map_err(|error| CliError::usage(format!("storage: {error}")))?;
    Ok(Some(infersight_store::RemoteSegments {
        url: bucket.url,
        store: bucket.store,
        prefix: bucket.prefix.to_string(),
    }))
}

/// `host:port` of `--scheduler`.
#[cfg(feature = "cluster")]
fn host_port(address: &str) -> Result<(String, u16), CliError> {
    crate::config::ballista_host_port(address)
        .ok_or_else(|| CliError::usage(format!("--scheduler: `{address}` is not host:port")))
}
