//! `infersight serve`: binds the OTLP gRPC, OTLP HTTP and API listeners, starts the ingest queue
//! and the Prometheus scrapers, and on shutdown stops accepting and scraping, drains the queue and
//! closes the store (flushing everything).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use infersight_model::mapping::AttributeMapper;
use infersight_query::QueryEngine;
use infersight_store::StorageBackend;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::actions::ActionRunner;
use crate::alerts::AlertManager;
use crate::api::{self, ApiState};
use crate::queue::IngestQueue;
use infersight_ingest::receivers::ReceiverState;
use infersight_ingest::receivers::Sink;
use infersight_ingest::receivers::held::{self, HeldRequests};
use infersight_ingest::receivers::otlp_grpc::{self, GrpcReceiver};
use infersight_ingest::receivers::otlp_http;
use infersight_ingest::receivers::prom_scrape::{self, ScrapeTarget};
use infersight_model::telemetry::Counters;
use infersight_pipeline::BatchWriter;

#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub listen: IpAddr,
    pub otlp_grpc_port: u16,
    pub otlp_http_port: u16,
    pub api_port: u16,
    pub max_body_bytes: usize,
    pub queue_capacity: usize,
    /// Exports decoded and converted at once; 0: two per core.
    pub decode_threads: usize,
    pub max_query_rows: usize,
    pub max_dimension_cardinality: usize,
    /// Memory, time, response bytes and per-caller concurrency of `POST /api/v1/query`.
    pub query_limits: infersight_query::QueryLimits,
    /// What this node does in a cluster (`crate::role`); `All` on a single node.
    pub role: crate::role::Role,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{server} server failed: {message}")]
    Server {
        server: &'static str,
        message: String,
    },
    #[error("closing the store: {0}")]
    Close(#[from] infersight_store::StoreError),
}

/// Addresses actually bound (ports 0 resolve to the ones the OS picked).
#[derive(Debug, Clone, Copy)]
pub struct BoundAddrs {
    /// `None` on a node whose role receives nothing (`query`, `compact`).
    pub otlp_grpc: Option<SocketAddr>,
    pub otlp_http: Option<SocketAddr>,
    pub api: SocketAddr,
}

async fn bind(ip: IpAddr, port: u16) -> Result<TcpListener, ServeError> {
    let addr = SocketAddr::new(ip, port);
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Runs until `shutdown` resolves. `on_bound` is called once every listener is bound.
/// Scrapes no Prometheus target; see [`serve_with_scrape`].
pub async fn serve(
    settings: ServeSettings,
    store: Arc<dyn StorageBackend>,
    writer: BatchWriter,
    mapper: Arc<AttributeMapper>,
    counters: Arc<Counters>,
    on_bound: impl FnOnce(BoundAddrs),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_with(
        settings,
        ServeExtras::default(),
        store,
        writer,
        mapper,
        counters,
        on_bound,
        shutdown,
    )
    .await
}

/// What `serve` runs besides the receivers and the API; empty by default.
#[derive(Debug, Default)]
pub struct ServeExtras {
    /// Prometheus `/metrics` endpoints of engines and exporters, scraped into the ingest queue.
    pub scrape_targets: Vec<ScrapeTarget>,
    /// SLOs evaluated every `slo_eval_interval` (alerts, webhook, `/api/v1/slo`, `/metrics`).
    pub alerts: Option<Arc<AlertManager>>,
    pub slo_eval_interval: Option<std::time::Duration>,
    /// Automatic-action policies, evaluated every `ActionRunner::eval_interval` (audit trail,
    /// webhook, `GET /api/v1/actions`, `/metrics`).
    pub actions: Option<Arc<ActionRunner>>,
    /// Stored incidents and their reports (`/api/v1/incidents`, and `POST /api/v1/rca` stores
    /// every verdict); `None`: no incident routes.
    pub reports: Option<Arc<crate::reports::ReportService>>,
    /// The access audit `POST /api/v1/query` records every statement in; `None`: none.
    pub access_audit: Option<Arc<infersight_query::AccessAudit>>,
    /// Where incident transitions go (Alertmanager, the signed webhook: `crate::notify`); SLO
    /// alerts already hold it. `None`: nowhere.
    pub notifier: Option<Arc<dyn infersight_model::notice::IncidentNotifier>>,
    /// The watcher (`infersight_rca::watch`): detections on a fixed step open incidents by
    /// themselves, stored with `reports`' incidents and handed to `notifier`. `None`: off.
    pub watch: Option<infersight_rca::watch::WatchSettings>,
    /// The file that says request rows may be held (`crate::held`): found at a start, the rows
    /// a crash took are rebuilt from stored spans; removed at a clean shutdown. `None`: held
    /// rows are lost with a crash (their spans are stored).
    pub held_requests_mark: Option<std::path::PathBuf>,
    /// Authentication of every listener (`crate::auth`), its tokens file re-read on change and
    /// on SIGHUP. `None`: off, every caller is an anonymous admin.
    pub auth: Option<Arc<crate::auth::Auth>>,
    /// TLS on every listener (`crate::tls`), its files re-read on change and on SIGHUP.
    /// `None`: plain TCP.
    pub tls: Option<Arc<crate::tls::Tls>>,
    /// Where the API's and the watcher's statements may run instead of here (a Ballista
    /// cluster: `infersight_query::ballista`). `None`: always here.
    pub plan_route: Option<Arc<dyn infersight_query::PlanRoute>>,
}

/// [`serve`] with [`ServeExtras`]: scrapers feeding the same ingest queue, the SLO evaluation
/// loop and the automatic-action loop, all stopped on shutdown.
#[allow(clippy::too_many_arguments)]
pub async fn serve_with(
    settings: ServeSettings,
    extras: ServeExtras,
    store: Arc<dyn StorageBackend>,
    writer: BatchWriter,
    mapper: Arc<AttributeMapper>,
    counters: Arc<Counters>,
    on_bound: impl FnOnce(BoundAddrs),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let listeners = Listeners::bind(&settings).await?;
    let addrs = listeners.addrs;
    let (queue, worker) = IngestQueue::start(writer, settings.queue_capacity, counters.clone());
    let queue = queue.with_backpressure(Arc::clone(&store));
    let (stop_tx, stop_rx) = watch::channel(false);
    let scrape_stop = stop_tx.subscribe();
    let stop = Stop(stop_rx);
    if let Some(auth) = &extras.auth {
        // ends at the stop signal; it holds no queue handle
        let audit = extras.access_audit.clone();
        crate::auth::spawn_reloader(
            auth.clone(),
            crate::auth::RELOAD_POLL,
            stop.stopped(),
            audit.clone(),
        );
        if let Some(oidc) = auth.oidc().cloned() {
            // the provider's key set, again every refresh interval and on SIGHUP; a fetch
            // that brings the same keys changes nothing and is not audited
            crate::periodic::spawn_reloader(
                "the OIDC key set",
                oidc.refresh_interval(),
                stop.stopped(),
                audit,
                move |_| {
                    let changed = oidc.reload()?;
                    Ok(changed.map(|keys| format!(" ({keys} keys)")))
                },
            );
        }
    }
    if let Some(auth) = &extras.auth
        && !auth.storage_quota().is_empty()
        && settings.role.receives()
    {
        spawn_storage_count(auth.clone(), store.clone(), &stop);
    }
    if let Some(tls) = &extras.tls {
        crate::tls::spawn_reloader(
            tls.clone(),
            crate::tls::RELOAD_POLL,
            stop.stopped(),
            extras.access_audit.clone(),
        );
    }
    let receiver_state = receiver_state(&settings, &queue, mapper, counters.clone());
    let held_mark = match settings.role.receives() {
        true => mark_held_requests(&extras, &store, &receiver_state).await,
        false => None,
    };
    let queries = settings.role.answers_queries();
    let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel::<&'static str>();
    let api_app = api_app(&settings, &extras, &store, counters);
    let running = Running {
        servers: spawn_servers(
            listeners,
            (&receiver_state, extras.auth.clone()),
            (api_app, extras.tls.clone()),
            &stop,
            ended_tx,
        ),
        alert_task: queries
            .then(|| spawn_alert_loop(&extras, &store, &stop))
            .flatten(),
        action_task: queries
            .then(|| spawn_action_loop(&extras, &store, &stop))
            .flatten(),
        watch_task: queries
            .then(|| spawn_watch_loop(&extras, &store, &stop))
            .flatten(),
        scrapers: spawn_scrapers(
            if settings.role.receives() {
                extras.scrape_targets
            } else {
                Vec::new()
            },
            &settings,
            &receiver_state,
            scrape_stop,
        ),
        held_requests: HeldRequests::spawn(&receiver_state, held::DEFAULT_TICK, stop.stopped()),
        held_mark,
        worker,
    };
    // Only the servers, scrapers and the held-request release may hold queue handles now, so
    // the worker exits once they stop.
    drop(receiver_state);
    drop(queue);
    on_bound(addrs);

    // Run until asked to stop, or until a server ends on its own (then stop the rest too).
    let ended_early = tokio::select! {
        _ = shutdown => None,
        Some(name) = ended_rx.recv() => Some(name),
    };
    if let Some(name) = ended_early {
        tracing::error!(
            server = name,
            "a server stopped unexpectedly; shutting down"
        );
    }
    tracing::info!("shutting down: draining receivers, flushing the store");
    let _ = stop_tx.send(true);
    let first_error = running.finish().await;
    let store_for_close = store.clone();
    tokio::task::spawn_blocking(move || store_for_close.close())
        .await
        .map_err(|e| ServeError::Server {
            server: "store",
            message: e.to_string(),
        })??;
    if let Some(error) = first_error {
        return Err(error);
    }
    if let Some(name) = ended_early {
        return Err(ServeError::Server {
            server: name,
            message: "stopped unexpectedly".into(),
        });
    }
    Ok(())
}

/// The listeners, bound before anything starts, and their addresses: the API's always, the
/// two OTLP ones when the node's role receives.
struct Listeners {
    grpc: Option<TcpListener>,
    http: Option<TcpListener>,
    api: TcpListener,
    addrs: BoundAddrs,
}

impl Listeners {
    async fn bind(settings: &ServeSettings) -> Result<Listeners, ServeError> {
        let (grpc, http) = match settings.role.receives() {
            true => (
                Some(bind(settings.listen, settings.otlp_grpc_port).await?),
                Some(bind(settings.listen, settings.otlp_http_port).await?),
            ),
            false => (None, None),
        };
        let api = bind(settings.listen, settings.api_port).await?;
        let local = |l: &TcpListener, port| {
            l.local_addr()
                .unwrap_or(SocketAddr::new(settings.listen, port))
        };
        let addrs = BoundAddrs {
            otlp_grpc: grpc.as_ref().map(|l| local(l, settings.otlp_grpc_port)),
            otlp_http: http.as_ref().map(|l| local(l, settings.otlp_http_port)),
            api: local(&api, settings.api_port),
        };
        Ok(Listeners {
            grpc,
            http,
            api,
            addrs,
        })
    }
}

/// Before the receivers open: the rows a crash of the last run took are rebuilt and stored, and
/// this run's mark is set (`crate::held`). Returns the mark to clear at a clean shutdown; `None`
/// when there is none or it could not be handled (then it stays for the next start).
async fn mark_held_requests(
    extras: &ServeExtras,
    store: &Arc<dyn StorageBackend>,
    receiver_state: &ReceiverState,
) -> Option<std::path::PathBuf> {
    let mark = extras.held_requests_mark.clone()?;
    match crate::held::recover_and_mark(&mark, store, receiver_state).await {
        Ok(recovered) => {
            if recovered.unclean {
                tracing::warn!(
                    rows = recovered.rows,
                    "the last run did not shut down cleanly: request rows it held were rebuilt \
                     from their stored spans"
                );
            }
            Some(mark)
        }
        Err(error) => {
            tracing::error!(%error, "request rows held by the last run were not rebuilt");
            None
        }
    }
}

/// The stop signal every server and loop waits for.
struct Stop(watch::Receiver<bool>);

impl Stop {
    /// Resolves once the stop signal is sent.
    fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }
}

/// What the OTLP receivers and the scrapers share: the queue as their sink, and the in-flight
/// permits.
fn receiver_state(
    settings: &ServeSettings,
    queue: &IngestQueue,
    mapper: Arc<AttributeMapper>,
    counters: Arc<Counters>,
) -> ReceiverState {
    let sink: Arc<dyn Sink> = Arc::new(queue.clone());
    // Work in progress before the queue is bounded too: a request holds a permit while its body
    // is read, decoded and converted.
    let in_flight = Arc::new(tokio::sync::Semaphore::new(
        settings.queue_capacity.saturating_mul(2).max(2),
    ));
    ReceiverState {
        sink,
        mapper,
        span_tree: Default::default(),
        counters,
        max_body_bytes: settings.max_body_bytes,
        in_flight,
        decoders: infersight_ingest::receivers::decoder_permits(settings.decode_threads),
    }
}

/// The API's router over the store, a query engine (with the access audit, if any) and the
/// extras' alerts, actions and incident reports.
fn api_app(
    settings: &ServeSettings,
    extras: &ServeExtras,
    store: &Arc<dyn StorageBackend>,
    counters: Arc<Counters>,
) -> axum::Router {
    let mut engine = QueryEngine::new(store.clone()).with_limits(settings.query_limits);
    if let Some(audit) = extras.access_audit.clone() {
        engine = engine.with_access_audit(audit);
    }
    if let Some(route) = extras.plan_route.clone() {
        engine = engine.with_route(route);
    }
    let auth = extras
        .auth
        .clone()
        .unwrap_or_else(|| Arc::new(crate::auth::Auth::disabled()));
    let state = ApiState {
        store: store.clone(),
        engine: Arc::new(engine),
        counters,
        max_query_rows: settings.max_query_rows,
        max_dimension_cardinality: settings.max_dimension_cardinality,
        alerts: extras.alerts.clone(),
        actions: extras.actions.clone(),
        reports: extras.reports.clone(),
    };
    api::router_for_role(state, auth, settings.role)
}

/// A server's task: what it returned, or why it failed.
type ServerTask = tokio::task::JoinHandle<Result<(), String>>;

/// Starts the OTLP HTTP, API and OTLP gRPC servers, each reporting on `ended` when it stops;
/// the receivers behind `auth`'s ingest gates when it is on, every listener behind `tls` when
/// it is set.
fn spawn_servers(
    listeners: Listeners,
    (receiver_state, auth): (&ReceiverState, Option<Arc<crate::auth::Auth>>),
    (api_app, tls): (axum::Router, Option<Arc<crate::tls::Tls>>),
    stop: &Stop,
    ended: tokio::sync::mpsc::UnboundedSender<&'static str>,
) -> Vec<(&'static str, ServerTask)> {
    use crate::tls::ListenerKind;
    let http_app = crate::auth::middleware::guard_otlp_http(
        otlp_http::router(receiver_state.clone()),
        auth.clone(),
    );
    let http_task = listeners.http.map(|tcp| {
        let (stop, accept_stop) = (stop.stopped(), stop.stopped());
        let tls = tls.clone();
        watch_server("otlp http", ended.clone(), async move {
            match tls {
                Some(tls) => {
                    let listener = tls.listen(tcp, ListenerKind::OtlpHttp, accept_stop);
                    axum::serve(listener, http_app)
                        .with_graceful_shutdown(stop)
                        .await
                }
                None => {
                    axum::serve(tcp, http_app)
                        .with_graceful_shutdown(stop)
                        .await
                }
            }
        })
    });
    let api_task = watch_server("api", ended.clone(), {
        let (stop, accept_stop) = (stop.stopped(), stop.stopped());
        let tls = tls.clone();
        let tcp = listeners.api;
        async move {
            // the peer address reaches the query handler for the access audit
            match tls {
                Some(tls) => {
                    let listener = tls.listen(tcp, ListenerKind::Api, accept_stop);
                    axum::serve(listener, crate::tls::with_peer_address(api_app))
                        .with_graceful_shutdown(stop)
                        .await
                }
                None => {
                    let app = api_app.into_make_service_with_connect_info::<SocketAddr>();
                    axum::serve(tcp, app).with_graceful_shutdown(stop).await
                }
            }
        }
    });
    let grpc_routes = crate::auth::middleware::guard_otlp_grpc(
        otlp_grpc::routes(GrpcReceiver {
            state: receiver_state.clone(),
        }),
        auth,
    );
    let grpc_task = listeners.grpc.map(|tcp| {
        let (stop, accept_stop) = (stop.stopped(), stop.stopped());
        watch_server("otlp grpc", ended, async move {
            let server = tonic::transport::Server::builder().add_routes(grpc_routes);
            match tls {
                Some(tls) => {
                    let listener = tls.listen(tcp, ListenerKind::OtlpGrpc, accept_stop);
                    server
                        .serve_with_incoming_shutdown(listener.into_incoming(), stop)
                        .await
                }
                None => {
                    server
                        .serve_with_incoming_shutdown(
                            tonic::transport::server::TcpIncoming::from(tcp),
                            stop,
                        )
                        .await
                }
            }
        })
    });
    [
        http_task.map(|task| ("otlp http", task)),
        Some(("api", api_task)),
        grpc_task.map(|task| ("otlp grpc", task)),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The SLO evaluation loop, when there are SLOs.
fn spawn_alert_loop(
    extras: &ServeExtras,
    store: &Arc<dyn StorageBackend>,
    stop: &Stop,
) -> Option<tokio::task::JoinHandle<()>> {
    extras.alerts.clone().map(|manager| {
        tokio::spawn(crate::alerts::run_alert_loop(
            manager,
            store.clone(),
            extras
                .slo_eval_interval
                .unwrap_or(std::time::Duration::from_secs(30)),
            stop.stopped(),
        ))
    })
}

/// The automatic-action loop, when there are policies.
fn spawn_action_loop(
    extras: &ServeExtras,
    store: &Arc<dyn StorageBackend>,
    stop: &Stop,
) -> Option<tokio::task::JoinHandle<()>> {
    extras.actions.clone().map(|runner| {
        tokio::spawn(crate::actions::run_action_loop(
            runner,
            store.clone(),
            stop.stopped(),
        ))
    })
}

/// The watcher's loop, when it is on: first the incidents a previous run left open are
/// resumed and re-notified (`crate::resume`), then one step every `step_ns` on the wall clock
/// (the first at once; a late step delays the next), each step's failure logged, until `stop`.
/// An incident it opens gets the automatic actions taken since its onset. Its blocking parts run
/// on blocking threads inside the step; ingest never waits for it.
fn spawn_watch_loop(
    extras: &ServeExtras,
    store: &Arc<dyn StorageBackend>,
    stop: &Stop,
) -> Option<tokio::task::JoinHandle<()>> {
    let settings = extras.watch.clone()?;
    let incidents = extras.reports.as_ref().map(|r| r.incidents().clone());
    let interval =
        std::time::Duration::from_nanos(u64::try_from(settings.step_ns).unwrap_or(30_000_000_000));
    let watcher = match infersight_rca::watch::Watcher::new(
        settings,
        incidents.clone(),
        extras.notifier.clone(),
    ) {
        Ok(watcher) => watcher,
        Err(error) => {
            tracing::error!(%error, "the watcher is off: bad settings");
            return None;
        }
    };
    let mut engine = QueryEngine::new(store.clone());
    if let Some(route) = extras.plan_route.clone() {
        engine = engine.with_route(route);
    }
    if extras.auth.as_ref().is_some_and(|auth| auth.is_enabled()) {
        return spawn_org_watch_loop(extras, engine, interval, stop);
    }
    let shutdown = stop.stopped();
    let notifier = extras.notifier.clone();
    let actions = extras.actions.clone();
    Some(tokio::spawn(async move {
        let mut watcher = match &incidents {
            Some(store) => {
                match crate::resume::resume_blocking(store.clone(), watcher, notifier).await {
                    Some(watcher) => watcher,
                    None => return,
                }
            }
            None => watcher,
        };
        let recorder = incidents.map(crate::timeline::IncidentRecorder::new);
        let mut ticks = crate::periodic::Ticks::new(interval, shutdown);
        while ticks.next().await {
            let now = infersight_model::time::now_ns();
            match watcher.step(&engine, now).await {
                Ok(outcome) => {
                    record_earlier_actions(recorder.as_ref(), actions.as_ref(), &outcome).await;
                }
                Err(error) => tracing::warn!(%error, "watch step failed"),
            }
        }
    }))
}

/// Counts every org's stored bytes for the storage limits now, then every
/// [`crate::auth::limits::STORAGE_POLL`] until the stop (the catalog's per-org counts: no
/// segment is read).
fn spawn_storage_count(auth: Arc<crate::auth::Auth>, store: Arc<dyn StorageBackend>, stop: &Stop) {
    auth.storage_quota().record(&store.stats().orgs);
    tokio::spawn(crate::periodic::run_every(
        crate::auth::limits::STORAGE_POLL,
        "counting each org's stored bytes",
        stop.stopped(),
        move || auth.storage_quota().record(&store.stats().orgs),
    ));
}

/// [`spawn_watch_loop`] with authentication on: one watcher per org (`crate::org_watch`), so
/// each org's incidents are its own; the incidents resolved lately are re-sent once first
/// (`crate::resume::resume` without a watcher), each org's open one when its watcher starts.
/// The automatic actions (one runner over every org's rows) are not recorded on an org's
/// incidents.
fn spawn_org_watch_loop(
    extras: &ServeExtras,
    engine: QueryEngine,
    interval: std::time::Duration,
    stop: &Stop,
) -> Option<tokio::task::JoinHandle<()>> {
    let settings = extras.watch.clone()?;
    let incidents = extras.reports.as_ref().map(|r| r.incidents().clone());
    let notifier = extras.notifier.clone();
    let mut watchers =
        match crate::org_watch::OrgWatchers::new(settings, incidents.clone(), notifier.clone()) {
            Ok(watchers) => watchers,
            Err(error) => {
                tracing::error!(%error, "the watcher is off: bad settings");
                return None;
            }
        };
    let shutdown = stop.stopped();
    Some(tokio::spawn(async move {
        if let Some(store) = incidents {
            let now = infersight_model::time::now_ns();
            let resent = tokio::task::spawn_blocking(move || {
                crate::resume::resume(&store, None, notifier.as_deref(), now)
            });
            if let Err(error) = resent.await {
                tracing::warn!(%error, "re-sending the incidents of the previous run failed");
            }
        }
        let mut ticks = crate::periodic::Ticks::new(interval, shutdown);
        while ticks.next().await {
            let now = infersight_model::time::now_ns();
            let outcomes = match watchers.step(&engine, now).await {
                Ok(outcomes) => outcomes,
                Err(error) => {
                    tracing::warn!(%error, "watch step failed: cannot list the orgs");
                    continue;
                }
            };
            for (org, outcome) in outcomes {
                if let Err(error) = outcome {
                    tracing::warn!(%error, org, "watch step failed");
                }
            }
        }
    }))
}

/// Records on each incident the step opened the automatic actions taken since its onset.
async fn record_earlier_actions(
    recorder: Option<&crate::timeline::IncidentRecorder>,
    actions: Option<&Arc<ActionRunner>>,
    outcome: &infersight_rca::watch::StepOutcome,
) {
    let (Some(recorder), Some(actions)) = (recorder, actions) else {
        return;
    };
    let opened: Vec<String> = outcome
        .transitions
        .iter()
        .filter(|t| t.change == infersight_model::notice::Transition::Opened)
        .filter_map(|t| t.report.incident_id.clone())
        .collect();
    if opened.is_empty() {
        return;
    }
    let entries = actions.recent();
    let recorder = recorder.clone();
    let task = tokio::task::spawn_blocking(move || {
        for id in opened {
            match recorder.store().get(&id) {
                Ok(incident) => recorder.actions_before(&incident, &entries),
                Err(error) => tracing::warn!(incident = %id, %error, "cannot read a new incident"),
            }
        }
    });
    if let Err(error) = task.await {
        tracing::warn!(%error, "recording earlier actions failed");
    }
}

/// The Prometheus scrapers, feeding the ingest queue until `stop`.
fn spawn_scrapers(
    scrape_targets: Vec<ScrapeTarget>,
    settings: &ServeSettings,
    receiver_state: &ReceiverState,
    stop: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    if !scrape_targets.is_empty() {
        tracing::info!(
            targets = scrape_targets.len(),
            "scraping Prometheus targets"
        );
    }
    prom_scrape::spawn_scrapers(
        scrape_targets,
        settings.max_body_bytes,
        receiver_state.clone(),
        stop,
    )
}

/// Everything `serve` started, waited for at shutdown.
struct Running {
    servers: Vec<(&'static str, ServerTask)>,
    alert_task: Option<tokio::task::JoinHandle<()>>,
    action_task: Option<tokio::task::JoinHandle<()>>,
    watch_task: Option<tokio::task::JoinHandle<()>>,
    scrapers: Vec<tokio::task::JoinHandle<()>>,
    /// Request rows held for spans of their request still to come (`ingest::otlp::correlate`).
    held_requests: HeldRequests,
    /// Cleared once every held row is stored (`crate::held`).
    held_mark: Option<std::path::PathBuf>,
    /// The ingest queue's worker thread.
    worker: std::thread::JoinHandle<()>,
}

impl Running {
    /// Once the stop signal is sent: waits for the scrapers, the loops, the servers and then the
    /// queue worker (which drains the queue). Returns the first server error.
    async fn finish(self) -> Option<ServeError> {
        // Scrapers end at the stop signal (an abandoned fetch holds no queue handle).
        for scraper in self.scrapers {
            if let Err(e) = scraper.await {
                tracing::error!(error = %e, "a scrape task failed");
            }
        }
        if let Some(task) = self.alert_task
            && let Err(e) = task.await
        {
            tracing::error!(error = %e, "the slo evaluation task failed");
        }
        // an evaluation in progress finishes (its decision is audited) before the store closes
        if let Some(task) = self.action_task
            && let Err(e) = task.await
        {
            tracing::error!(error = %e, "the action evaluation task failed");
        }
        // a step in progress ends (its incident write done) before the store closes
        if let Some(task) = self.watch_task
            && let Err(e) = task.await
        {
            tracing::error!(error = %e, "the watch task failed");
        }
        let mut first_error = None;
        for (name, task) in self.servers {
            let result = task.await.map_err(|e| e.to_string()).and_then(|r| r);
            if let Err(message) = result {
                first_error.get_or_insert(ServeError::Server {
                    server: name,
                    message,
                });
            }
        }
        // No export comes any more: the rows still held go in before the queue closes.
        if self.held_requests.finish().await
            && let Some(mark) = &self.held_mark
        {
            crate::held::clear_mark(mark);
        }
        // Every queue handle is gone once the servers stopped: the worker drains and exits.
        let worker = self.worker;
        let _ = tokio::task::spawn_blocking(move || worker.join()).await;
        first_error
    }
}

/// Spawns a server future and reports on `ended` when it finishes, whatever the reason.
fn watch_server<E: std::fmt::Display>(
    name: &'static str,
    ended: tokio::sync::mpsc::UnboundedSender<&'static str>,
    server: impl Future<Output = Result<(), E>> + Send + 'static,
) -> tokio::task::JoinHandle<Result<(), String>> {
    tokio::spawn(async move {
        let result = server.await.map_err(|e| e.to_string());
        let _ = ended.send(name);
        result
    })
}
