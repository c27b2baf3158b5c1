//! `infersight serve`: runs the OTLP receivers (gRPC :4317, HTTP :4318) and the API (:7070)
//! over the store until Ctrl-C or SIGTERM, with background maintenance (flush, compaction,
//! retention), scrapers, SLO alerting and automatic actions as configured; on the way out
//! everything acknowledged is flushed.

use std::net::IpAddr;
use std::sync::Arc;

use infersight_model::telemetry::Counters;
use infersight_server::ServeSettings;
use infersight_store::StorageBackend;

use crate::args::Common;
use crate::config::Config;
use crate::exit::CliError;
use crate::wiring;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: Common,
    /// Address to bind [default: 127.0.0.1].
    #[arg(long)]
    pub listen: Option<IpAddr>,
    /// OTLP gRPC port (0 picks a free one).
    #[arg(long)]
    pub otlp_grpc_port: Option<u16>,
    /// OTLP HTTP port (0 picks a free one).
    #[arg(long)]
    pub otlp_http_port: Option<u16>,
    /// API port (0 picks a free one).
    #[arg(long)]
    pub api_port: Option<u16>,
}

pub async fn run(args: ServeArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    let settings = settings(&args, &config);
    config
        .auth
        .check_listen(settings.listen)
        .map_err(CliError::usage)?;
    let store = tokio::task::block_in_place(|| wiring::open_store(&config))?;
    let maintenance = store.spawn_maintenance(config.durations().maintenance_interval);
    let counters = Arc::new(Counters::new());
    let writer = wiring::batch_writer(&config, store.clone(), counters.clone())?;
    let extras = wiring::serve_extras(&config, &counters, &settings)?;
    let data_dir = config.store.data_dir.display().to_string();
    let result = infersight_server::serve::serve_with(
        settings,
        extras,
        store.clone() as Arc<dyn StorageBackend>,
        writer,
        wiring::mapper(&config),
        counters,
        |addrs| {
            eprintln!(
                "infersight: listening otlp_grpc={} otlp_http={} api={} data={}",
                addrs.otlp_grpc, addrs.otlp_http, addrs.api, data_dir
            );
        },
        shutdown_signal(),
    )
    .await;
    maintenance.stop();
    result.map_err(|e| CliError::failed(e.to_string()))?;
    let flushed_to = match config.storage.url.as_str() {
        "" => config.store.data_dir.display().to_string(),
        bucket => bucket.to_string(),
    };
    eprintln!("infersight: stopped; everything acknowledged is flushed to {flushed_to}");
    Ok(0)
}

/// Flags over the configuration's `[server]` and `[query]` sections.
fn settings(args: &ServeArgs, config: &Config) -> ServeSettings {
    ServeSettings {
        listen: args.listen.unwrap_or_else(|| {
            config
                .server
                .listen
                .parse()
                .unwrap_or(IpAddr::from([127, 0, 0, 1]))
        }),
        otlp_grpc_port: args.otlp_grpc_port.unwrap_or(config.server.otlp_grpc_port),
        otlp_http_port: args.otlp_http_port.unwrap_or(config.server.otlp_http_port),
        api_port: args.api_port.unwrap_or(config.server.api_port),
        max_body_bytes: config.server.max_body_bytes,
        queue_capacity: config.server.queue_capacity,
        max_query_rows: config.query.max_rows,
        max_dimension_cardinality: config.query.max_dimension_cardinality,
        query_limits: config.query.limits(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
