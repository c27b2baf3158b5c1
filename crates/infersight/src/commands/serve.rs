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
    /// What this node does in a cluster: all, ingest, query or compact [default: the config's
    /// server.role, all]. Every role but all needs a bucket (--storage or [storage] url).
    #[arg(long)]
    pub role: Option<infersight_server::role::Role>,
}

pub async fn run(args: ServeArgs) -> Result<i32, CliError> {
    let mut config = args.common.resolve()?;
    if let Some(role) = args.role {
        config.server.role = role;
    }
    if let Some(problem) =
        (config.storage.check_role(config.server.role)).or_else(|| config.check_tiers())
    {
        return Err(CliError::usage(problem));
    }
    let settings = settings(&args, &config);
    config
        .auth
        .check_listen(settings.listen)
        .map_err(CliError::usage)?;
    // a stop asked for while the store opens (a long WAL replay) is kept, and served once it is
    // open: a graceful stop that flushes, not the default action
    let stop = shutdown_signal();
    let store = tokio::task::block_in_place(|| wiring::open_store(&config))?;
    let maintenance = store.spawn_maintenance(config.durations().maintenance_interval);
    let counters = Arc::new(Counters::new());
    // the redaction rules follow the configuration file (SIGHUP, or a change seen within 5 s)
    let redact_reload = Arc::new(infersight_pipeline::RedactReload::default());
    let writer = wiring::batch_writer_reloading(
        &config,
        store.clone(),
        counters.clone(),
        Some(&redact_reload),
    )?;
    let redaction_reloader = crate::redaction_reload::spawn(
        args.common.clone(),
        config.stages.redact.clone(),
        redact_reload,
        wiring::access_audit(&config),
    );
    let mut extras = wiring::serve_extras(&config, &counters, &settings)?;
    extras.plan_route = wiring::plan_route(&config, store.as_ref());
    let data_dir = config.store.data_dir.display().to_string();
    let role = config.server.role;
    let result = infersight_server::serve::serve_with(
        settings,
        extras,
        store.clone() as Arc<dyn StorageBackend>,
        writer,
        wiring::mapper(&config),
        counters,
        move |addrs| {
            let or_off = |addr: Option<std::net::SocketAddr>| {
                addr.map_or_else(|| "off".to_string(), |addr| addr.to_string())
            };
            eprintln!(
                "infersight: listening otlp_grpc={} otlp_http={} api={} data={} role={role}",
                or_off(addrs.otlp_grpc),
                or_off(addrs.otlp_http),
                addrs.api,
                data_dir
            );
        },
        stop,
    )
    .await;
    redaction_reloader.abort();
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
        decode_threads: config.server.decode_threads,
        max_query_rows: config.query.max_rows,
        max_dimension_cardinality: config.query.max_dimension_cardinality,
        query_limits: config.query.limits(),
        role: config.server.role,
    }
}

/// The stop signal, SIGINT or SIGTERM. Its handlers are installed when this is called (before the
/// store opens), not when the future is first polled: a supervisor (or a test) that sends SIGTERM
/// during the WAL replay or as soon as the "listening" line appears gets a graceful stop that
/// flushes the store, instead of the default action, which ends the process at once.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        // a handler that cannot be installed never fires (the other one still does)
        let mut interrupt = signal(SignalKind::interrupt()).ok();
        let mut terminate = signal(SignalKind::terminate()).ok();
        async move {
            tokio::select! {
                _ = received(interrupt.as_mut()) => {},
                _ = received(terminate.as_mut()) => {},
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Resolves at the next signal of `stream`; never without one.
#[cfg(unix)]
async fn received(stream: Option<&mut tokio::signal::unix::Signal>) {
    match stream {
        Some(stream) => {
            stream.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::time::Duration;

    /// A SIGTERM that arrives after the handlers are asked for but before anything waits on
    /// them (a supervisor's stop right after the "listening" line) stops the server; with the
    /// handlers installed at the first poll it would end this test binary instead.
    #[tokio::test]
    async fn a_stop_signal_sent_before_the_wait_begins_is_kept() {
        let stop = super::shutdown_signal();
        let pid = std::process::id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        tokio::time::timeout(Duration::from_secs(10), stop)
            .await
            .expect("the SIGTERM sent before the wait began was not seen");
    }
}
