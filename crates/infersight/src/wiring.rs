//! Wiring: turns the resolved configuration into running parts (store, pipeline stages,
//! attribute mapper, scrape targets) so every command builds them the same way.

use std::net::SocketAddr;
use std::sync::Arc;

use infersight_ingest::receivers::prom_scrape::ScrapeTarget;
use infersight_model::append::BatchAppend;
use infersight_model::mapping::AttributeMapper;
use infersight_model::telemetry::Counters;
use infersight_pipeline::BatchWriter;
use infersight_query::AccessAudit;
use infersight_query::audit::KeyedHasher;
use infersight_store::Store;

use crate::config::Config;
use crate::exit::CliError;

/// The one ingest runtime over `store`: the pipeline stages every record passes before the
/// store (redaction first), whose counters are published to `counters` after every run so
/// `/metrics` shows them.
pub fn batch_writer(
    config: &Config,
    store: Arc<dyn BatchAppend>,
    counters: Arc<Counters>,
) -> Result<BatchWriter, CliError> {
    batch_writer_reloading(config, store, counters, None)
}

/// [`batch_writer`] whose redact stage takes new rules from `redact_reload` (`serve`).
pub fn batch_writer_reloading(
    config: &Config,
    store: Arc<dyn BatchAppend>,
    counters: Arc<Counters>,
    redact_reload: Option<&Arc<infersight_pipeline::RedactReload>>,
) -> Result<BatchWriter, CliError> {
    let mut stages = config.stages.clone();
    // mined templates persist with the store, so template ids survive restarts
    stages.template.store_dir = Some(config.template_store_dir());
    let pipeline = infersight_pipeline::Pipeline::from_config_reloading(&stages, redact_reload)
        .map_err(|e| CliError::usage(format!("stages: {e}")))?;
    Ok(BatchWriter::new(pipeline, store, counters))
}

pub fn mapper(config: &Config) -> Arc<AttributeMapper> {
    Arc::new(AttributeMapper::new(&config.aliases()))
}

/// The `[scrape]` targets `serve` pulls, with their intervals and timeouts (parsed when the
/// configuration was validated; the section's where a target sets none).
pub fn scrape_targets(config: &Config) -> Vec<ScrapeTarget> {
    config
        .scrape
        .targets
        .iter()
        .zip(&config.durations().scrape_targets)
        .map(|(target, &(interval, timeout))| ScrapeTarget {
            url: target.url.clone(),
            job: target.job.clone(),
            worker: target.worker.clone(),
            interval,
            timeout,
            ca_file: target.ca_file.as_ref().map(Into::into),
            bearer_token_file: target.bearer_token_file.as_ref().map(Into::into),
        })
        .collect()
}

/// Opens an existing store for reading commands: a mistyped `--data` is an error, not an empty
/// result.
pub fn open_existing_store(config: &Config) -> Result<Arc<Store>, CliError> {
    // with a bucket, a node's first start has an empty directory and the bucket's segments
    if config.storage.url.is_empty()
        && !config.store.data_dir.join("catalog.json").exists()
        && !config.store.data_dir.join("wal").is_dir()
    {
        return Err(CliError::usage(format!(
            "no store at {} (set --data, or ingest something first)",
            config.store.data_dir.display()
        )));
    }
    open_store(config)
}

pub fn open_store(config: &Config) -> Result<Arc<Store>, CliError> {
    let mut options = config.store_options();
    options.on_delete = Some(deletes_audited(access_audit(config)));
    Store::open(options).map(Arc::new).map_err(|e| {
        let hint = match e {
            infersight_store::StoreError::Locked { .. } => {
                "; another infersight process (serve?) holds it: stop it, or query it over HTTP with --server"
            }
            _ => "",
        };
        // an S3 client's error may carry its causes on several lines
        let message = format!("opening the store: {e}{hint}").replace('\n', " ");
        CliError::failed(message)
    })
}

/// Scrapers, SLO alerting, automatic actions and notifications for `serve`, from the
/// configuration. `counters` is where notifications are counted; `serve` (its listen address
/// and API port, after flags) makes report links when `notify.external_url` is empty.
pub fn serve_extras(
    config: &Config,
    counters: &Arc<Counters>,
    serve: &infersight_server::ServeSettings,
) -> Result<infersight_server::serve::ServeExtras, CliError> {
    let slos = config
        .slos()
        .map_err(|errors| CliError::usage(errors.join("; ")))?;
    let notifier = notifier(config, counters, serve)?;
    let alerts = (!slos.is_empty()).then(|| {
        let webhook = config.alerts.webhook.settings("alerts");
        let manager = infersight_server::alerts::AlertManager::new(slos, webhook);
        Arc::new(match notifier.as_ref().filter(|n| n.takes_slo_alerts()) {
            Some(notifier) => manager.with_notifier(notifier.clone()),
            None => manager,
        })
    });
    let watch = if config.watch.enabled && config.store.rollups {
        Some(
            config
                .watch_settings()
                .map_err(|errors| CliError::usage(errors.join("; ")))?,
        )
    } else {
        None
    };
    Ok(infersight_server::serve::ServeExtras {
        scrape_targets: scrape_targets(config),
        alerts,
        slo_eval_interval: Some(config.durations().alerts_eval_interval),
        actions: action_runner(config)?,
        reports: Some(Arc::new(infersight_server::reports::ReportService::new(
            &config.store.data_dir,
            config.report.clone(),
        ))),
        access_audit: Some(access_audit(config)),
        notifier: notifier.map(|n| n as Arc<dyn infersight_model::notice::IncidentNotifier>),
        watch,
        held_requests_mark: Some(
            config
                .store
                .data_dir
                .join(infersight_server::held::MARK_FILE),
        ),
        auth: Some(auth(config)?),
        tls: tls(config)?,
        // set by `serve` once the store is open (the route needs its bucket)
        plan_route: None,
    })
}

/// `[server.tls]` for `serve`: the certificate and key read now (a bad file stops the start,
/// naming it); `None` when TLS is off.
pub fn tls(config: &Config) -> Result<Option<Arc<infersight_server::tls::Tls>>, CliError> {
    let Some(files) = config
        .server
        .tls
        .files()
        .map_err(|errors| CliError::usage(errors.join("; ")))?
    else {
        return Ok(None);
    };
    let tls =
        infersight_server::tls::Tls::load(files).map_err(|e| CliError::usage(e.to_string()))?;
    tracing::info!("TLS on: every listener needs https (and gRPC over TLS)");
    Ok(Some(tls))
}

/// `[auth]` for `serve`: the tokens file read now (an invalid one stops the start), the trusted
/// proxies; authentication stays off without `auth.tokens_file`.
pub fn auth(config: &Config) -> Result<Arc<infersight_server::auth::Auth>, CliError> {
    let settings = config
        .auth
        .settings()
        .map_err(|errors| CliError::usage(errors.join("; ")))?;
    let mut auth = infersight_server::auth::Auth::open(settings)
        .map_err(|e| CliError::usage(format!("auth: {e}")))?
        .with_ingest_limits(config.auth.ingest_limiter())
        .with_query_limits(config.auth.query_slots())
        .with_storage_limits(config.auth.storage_quota());
    let oidc = config
        .auth
        .oidc_settings()
        .map_err(|errors| CliError::usage(errors.join("; ")))?;
    if let Some(oidc) = oidc {
        auth = auth
            .with_oidc(infersight_server::auth::oidc::Oidc::open(oidc).map_err(CliError::usage)?);
    }
    if auth.is_enabled() {
        tracing::info!("authentication on: every API and OTLP request needs a bearer token");
    }
    Ok(Arc::new(auth))
}

/// `[notify]`'s sinks, started (one delivery thread each); `None` when none is configured.
pub fn notifier(
    config: &Config,
    counters: &Arc<Counters>,
    serve: &infersight_server::ServeSettings,
) -> Result<Option<Arc<infersight_server::notify::Notifier>>, CliError> {
    let default_external_url = format!("http://{}", SocketAddr::new(serve.listen, serve.api_port));
    let Some(settings) = config
        .notify
        .settings(&default_external_url)
        .map_err(CliError::usage)?
    else {
        return Ok(None);
    };
    tracing::info!(
        alertmanagers = settings.alertmanagers.len(),
        signed_webhook = settings.webhook.is_some(),
        "notifications on"
    );
    // each delivery is written on its incident's timeline
    let log: Arc<dyn infersight_server::notify::DeliveryLog> = Arc::new(incident_recorder(config));
    let notifier = infersight_server::notify::Notifier::start_logged(
        &settings,
        Arc::clone(counters),
        Some(log),
    )
    .map_err(|e| CliError::failed(format!("starting the notifier: {e}")))?;
    Ok(Some(Arc::new(notifier)))
}

/// Writes notifications and actions onto the incidents of `store.data_dir`.
fn incident_recorder(config: &Config) -> infersight_server::timeline::IncidentRecorder {
    infersight_server::timeline::IncidentRecorder::new(infersight_rca::IncidentStore::open(
        &config.store.data_dir,
    ))
}

/// Every deletion the store commits (compaction, retention, garbage collection) as one line of
/// the access audit (`surface: maintenance`); a line that cannot be written is warned about.
fn deletes_audited(audit: Arc<AccessAudit>) -> infersight_store::DeleteObserver {
    use infersight_query::audit::{AccessRecord, AccessedData};
    let actor = infersight_query::audit::cli_actor();
    infersight_store::DeleteObserver(Arc::new(move |deleted| {
        let context = infersight_query::AccessContext {
            actor: actor.clone(),
            client: None,
            surface: infersight_query::Surface::Maintenance,
            what: Some(format!(
                "{}: {} segments, {} bytes",
                deleted.what, deleted.segments, deleted.bytes
            )),
        };
        let accessed = AccessedData {
            tables: deleted
                .tables
                .iter()
                .map(|t| t.name().to_string())
                .collect(),
            ..AccessedData::default()
        };
        let record = AccessRecord::new(&context, &accessed, deleted.rows, Ok(()), None);
        if let Err(err) = audit.append(&record) {
            tracing::warn!(%err, "a deletion by the store is missing from the access audit");
        }
    }))
}

/// The access audit of the store in `store.data_dir` (`<data_dir>/audit/access.jsonl`), shared
/// by `serve`, `query` and `report`. Clients are pseudonymized with the redact stage's keyed
/// hash when `stages.redact.secret_env` names a secret, else masked as `<IP>`.
pub fn access_audit(config: &Config) -> Arc<AccessAudit> {
    let audit = AccessAudit::for_data_dir(&config.store.data_dir);
    Arc::new(match client_hasher(config) {
        Some(hasher) => audit.with_client_hasher(hasher),
        None => audit,
    })
}

/// The redact stage's own keyed hash (HMAC-SHA256 under the secret in `stages.redact.secret_env`,
/// same length and checks), so a client address in the audit gets the pseudonym the same
/// address gets in stored data. `None` without a secret; a secret that cannot be read is warned
/// about and the audit masks instead (the pipeline reports it too when its rules need it).
fn client_hasher(config: &Config) -> Option<KeyedHasher> {
    use infersight_pipeline::{PathRule, RedactAction, RedactConfig, Redactor};
    let secret_env = &config.stages.redact.secret_env;
    if secret_env.is_empty() {
        return None;
    }
    // `Redactor` keys its hasher only when a rule hashes: one rule, no detectors to run
    let hashing = RedactConfig {
        detectors: Vec::new(),
        rules: vec![PathRule {
            path: "requests.attrs.client.address".into(),
            action: RedactAction::Hash,
            detectors: None,
        }],
        secret_env: secret_env.clone(),
        ..RedactConfig::default()
    };
    match Redactor::new(&hashing) {
        Ok(redactor) => Some(Arc::new(move |value: &str| redactor.keyed_hash(value))),
        Err(error) => {
            tracing::warn!(%error, "access audit: no keyed hash for clients; they are masked as <IP>");
            None
        }
    }
}

/// The `[actions]` policies with their audit trail under `<data_dir>/actions/`; `None` when
/// no policy is configured. Opening restores cooldowns and actions in effect from the trail.
pub fn action_runner(
    config: &Config,
) -> Result<Option<Arc<infersight_server::actions::ActionRunner>>, CliError> {
    use infersight_server::actions::{ActionRunner, ActionsSettings, audit_path};
    let actions = &config.actions;
    let policies = actions
        .policies(&config.store.rollup_dimensions)
        .map_err(|errors| CliError::usage(errors.join("; ")))?;
    if policies.is_empty() {
        return Ok(None);
    }
    let settings = ActionsSettings {
        policies,
        dry_run: actions.dry_run,
        webhook: actions.webhook(),
        audit_path: audit_path(&config.store.data_dir),
        eval_interval: actions.eval_interval(),
    };
    if settings.dry_run {
        tracing::info!(
            policies = settings.policies.len(),
            "automatic actions run in dry-run: decisions are audited, nothing is sent (set actions.dry_run = false to act)"
        );
    }
    let runner = ActionRunner::open(settings, infersight_model::time::now_ns())
        .map_err(|e| CliError::failed(e.to_string()))?
        .with_incidents(incident_recorder(config));
    Ok(Some(Arc::new(runner)))
}

/// The Ballista route of `[query.ballista]` for engines over `store` (whose bucket the
/// executors read); `None` without a scheduler (validation refuses one in a build without the
/// `cluster` feature).
pub fn plan_route(
    config: &Config,
    store: &dyn infersight_store::StorageBackend,
) -> Option<Arc<dyn infersight_query::PlanRoute>> {
    let ballista = &config.query.ballista;
    if ballista.scheduler.is_empty() {
        return None;
    }
    cluster_route(ballista, store)
}

#[cfg(feature = "cluster")]
fn cluster_route(
    ballista: &crate::config::BallistaConfig,
    store: &dyn infersight_store::StorageBackend,
) -> Option<Arc<dyn infersight_query::PlanRoute>> {
    use infersight_query::ballista::{BallistaRoute, RouteSettings};
    let settings = RouteSettings {
        scheduler: ballista.scheduler.clone(),
        min_bytes: ballista.min_bytes,
        min_segments: ballista.min_segments,
        timeout: std::time::Duration::from_millis(ballista.timeout_ms),
    };
    let bucket = store.remote_segments();
    Some(Arc::new(BallistaRoute::new(settings, bucket.as_ref())))
}

#[cfg(not(feature = "cluster"))]
fn cluster_route(
    _ballista: &crate::config::BallistaConfig,
    _store: &dyn infersight_store::StorageBackend,
) -> Option<Arc<dyn infersight_query::PlanRoute>> {
    None
}
