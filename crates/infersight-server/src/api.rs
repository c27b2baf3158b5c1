//! The HTTP API (`:7070`): health, the pipeline's own Prometheus metrics, SQL over the store,
//! dimension discovery, SLI series from rollups; SLO / alert / automatic-action state and store
//! statistics are `process_state`'s, the incident and report routes live in `incidents`, and
//! both are merged here. Handlers
//! stay thin: the query engine, the alert manager, the action runner and the report service do
//! the work.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use infersight_explore::{SliRequest, SliRequestText};
use infersight_model::ErrorKind;
use infersight_model::time::now_ns;
use infersight_query::{AccessContext, AuditStatus, OutputFormat, Surface};
use infersight_store::{StorageBackend, TimeRange};
use serde::Deserialize;
use serde_json::json;

use infersight_model::telemetry::{Counters, catalog};

use crate::errors::ApiJson;
pub use crate::state::{ApiError, ApiState};
use crate::state::{Scope, read_engine};

/// The API with authentication off (every caller an anonymous admin); see [`router_with_auth`].
pub fn router(state: ApiState) -> Router {
    router_with_auth(state, std::sync::Arc::new(crate::auth::Auth::disabled()))
}

/// The API behind `auth`'s gate: every route's role is declared in `auth::routes::ROUTES`, and
/// the gate authenticates, authorizes and audits each call before the handler runs.
pub fn router_with_auth(state: ApiState, auth: Arc<crate::auth::Auth>) -> Router {
    router_for_role(state, auth, crate::role::Role::All)
}

/// [`router_with_auth`] for a node of `role`: one that does not answer queries keeps
/// /healthz, /metrics and /api/v1/stats, and answers every other path 404 naming its role.
pub fn router_for_role(
    state: ApiState,
    auth: Arc<crate::auth::Auth>,
    role: crate::role::Role,
) -> Router {
    let gate = crate::auth::middleware::ApiGate {
        auth: Arc::clone(&auth),
        audit: state.engine.access_audit().cloned(),
    };
    if !role.answers_queries() {
        return Router::new()
            .route("/healthz", get(healthz))
            .route("/metrics", get(metrics))
            .route("/api/v1/stats", get(crate::process_state::stats))
            .method_not_allowed_fallback(crate::errors::method_not_allowed)
            .fallback(move |uri: axum::http::Uri| async move {
                crate::errors::json_error(
                    axum::http::StatusCode::NOT_FOUND,
                    format!(
                        "{} is not served by this node: it runs the `{role}` role ({})",
                        uri.path(),
                        role.elsewhere()
                    ),
                )
            })
            .layer(axum::middleware::from_fn(crate::errors::json_error_bodies))
            .layer(axum::middleware::from_fn_with_state(
                gate,
                crate::auth::api_gate,
            ))
            .layer(axum::Extension(auth))
            .with_state(state);
    }
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/api/v1/query", post(query))
        .route("/api/v1/dimensions", get(dimensions))
        .route("/api/v1/sli", get(sli))
        .route("/api/v1/sli/derived", get(derived_slis))
        .route("/api/v1/rca", post(rca))
        .route("/api/v1/slo", get(crate::process_state::slo_status))
        .route("/api/v1/alerts", get(crate::process_state::alerts))
        .route("/api/v1/actions", get(crate::process_state::actions))
        .route("/api/v1/stats", get(crate::process_state::stats))
        .route("/api/v1/freshness", get(freshness))
        .route(
            "/api/v1/session",
            post(crate::auth::session::login)
                .delete(crate::auth::session::logout)
                .get(crate::auth::session::whoami),
        )
        .route(
            "/api/v1/session/methods",
            get(crate::auth::oidc_login::methods),
        )
        .route(
            "/api/v1/session/oidc/login",
            get(crate::auth::oidc_login::begin),
        )
        .route(
            crate::auth::oidc_login::CALLBACK_PATH,
            get(crate::auth::oidc_login::callback),
        )
        .merge(crate::incidents::routes())
        .merge(crate::ui::routes())
        // after every route: a known path asked with another method answers 405 with a JSON
        // body, an unknown one 404; the layer gives any other error answer its JSON body
        .method_not_allowed_fallback(crate::errors::method_not_allowed)
        .fallback(crate::errors::not_found)
        .layer(axum::middleware::from_fn(crate::errors::json_error_bodies))
        .layer(axum::middleware::from_fn_with_state(
            gate,
            crate::auth::api_gate,
        ))
        // the login checks tokens against the same tokens file
        .layer(axum::Extension(auth))
        .with_state(state)
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// Store gauges are refreshed at scrape time so `/metrics` is always current.
pub fn refresh_store_gauges(counters: &Counters, store: &dyn StorageBackend) {
    let stats = store.stats();
    for (table, t) in &stats.tables {
        let name = table.name();
        counters.set_gauge(
            &catalog::STORE_MEMTABLE_ROWS,
            &[("table", name)],
            t.memtable_rows as f64,
        );
        counters.set_gauge(
            &catalog::STORE_SEGMENTS,
            &[("table", name)],
            t.segments as f64,
        );
        counters.set_gauge(
            &catalog::STORE_SEGMENT_ROWS,
            &[("table", name)],
            t.segment_rows as f64,
        );
        counters.set_gauge(
            &catalog::STORE_SEGMENT_BYTES,
            &[("table", name)],
            t.segment_bytes as f64,
        );
        for (tier, usage) in [("hot", t.hot), ("warm", t.warm), ("cold", t.cold)] {
            let labels = [("table", name), ("tier", tier)];
            let segments = usage.segments as f64;
            counters.set_gauge(&catalog::STORE_TIER_SEGMENTS, &labels, segments);
            let bytes = usage.bytes as f64;
            counters.set_gauge(&catalog::STORE_TIER_SEGMENT_BYTES, &labels, bytes);
        }
    }
    let (rows, bytes): (Vec<_>, Vec<_>) = (stats.orgs.iter())
        .map(|(org, u)| {
            (
                (org.as_str(), u.rows as f64),
                (org.as_str(), u.bytes as f64),
            )
        })
        .unzip();
    counters.set_gauges(&catalog::STORE_ORG_ROWS, "org", &rows);
    counters.set_gauges(&catalog::STORE_ORG_BYTES, "org", &bytes);
    counters.set_gauge(&catalog::STORE_WAL_BYTES, &[], stats.wal_bytes as f64);
    counters.set_gauge(
        &catalog::STORE_MEMTABLE_BYTES,
        &[],
        stats.memtable_bytes as f64,
    );
    counters.set_gauge(&catalog::STORE_APPENDS, &[], stats.appends as f64);
    counters.set_gauge(&catalog::STORE_FSYNCS, &[], stats.fsyncs as f64);
    counters.set_gauge(&catalog::STORE_FLUSHES, &[], stats.flushes as f64);
    counters.set_gauge(&catalog::STORE_COMPACTIONS, &[], stats.compactions as f64);
    let quarantine = &stats.quarantine;
    for (kind, count) in [
        ("segment", quarantine.segments),
        ("rollup", quarantine.rollups),
        ("wal", quarantine.wal_files),
    ] {
        counters.set_counter(&catalog::STORE_QUARANTINED, &[("kind", kind)], count);
    }
    counters.set_counter(
        &catalog::STORE_WAL_REGIONS_DROPPED,
        &[],
        quarantine.wal_regions_dropped,
    );
    if let Some(cache) = &stats.bucket_cache {
        for (result, count) in [
            ("hit", cache.hits),
            ("disk_hit", cache.disk_hits),
            ("miss", cache.misses),
            ("bypass", cache.bypassed),
        ] {
            counters.set_counter(
                &catalog::STORE_BUCKET_CACHE_READS,
                &[("result", result)],
                count,
            );
        }
        counters.set_counter(&catalog::STORE_BUCKET_CACHE_EVICTIONS, &[], cache.evictions);
        counters.set_gauge(
            &catalog::STORE_BUCKET_CACHE_BYTES,
            &[],
            cache.cached_bytes as f64,
        );
        counters.set_gauge(
            &catalog::STORE_BUCKET_CACHE_DISK_BYTES,
            &[],
            cache.disk_bytes as f64,
        );
    }
}

/// The process's own metrics, then the SLIs of the caller's orgs. The process's counters
/// (records received, pipeline, queue, deliveries), the store's gauges and the SLO and action
/// series count every org's data, so only a caller who may see every org gets them
/// (`process_state`); any other gets its orgs' SLIs and a comment saying so.
async fn metrics(
    State(state): State<ApiState>,
    scope: Scope,
    caller: crate::process_state::Caller,
) -> Response {
    let every_org = crate::process_state::sees_every_org(&scope, &caller);
    let mut text = if every_org {
        refresh_store_gauges(&state.counters, &*state.store);
        if let Some(route) = state.engine.route() {
            for (place, count) in route.counts() {
                state
                    .counters
                    .set_counter(&catalog::QUERY_PLANS, &[("route", place)], count);
            }
        }
        state.counters.render()
    } else {
        crate::process_state::ORGS_ONLY_METRICS.to_string()
    };
    let store = Arc::clone(read_engine(&state, scope).store());
    // SLIs come from rollups (blocking reads); a store without rollups just has none
    if let Ok(Ok(sli_text)) =
        tokio::task::spawn_blocking(move || crate::sli_metrics::render(store.as_ref(), now_ns()))
            .await
    {
        text.push_str(&sli_text);
    }
    if let Some(alerts) = state.alerts.as_ref().filter(|_| every_org) {
        text.push_str(&alerts.render_metrics());
    }
    if let Some(actions) = state.actions.as_ref().filter(|_| every_org) {
        text.push_str(&actions.render_metrics());
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeParams {
    since: Option<String>,
    until: Option<String>,
}

async fn derived_slis(
    State(state): State<ApiState>,
    scope: Scope,
    params: Result<Query<RangeParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(p) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let range =
        parse_range(p.since.as_deref(), p.until.as_deref()).map_err(ApiError::bad_request)?;
    Ok(Json(
        infersight_explore::derived_slis(&read_engine(&state, scope), range).await?,
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RcaBody {
    since: Option<String>,
    until: Option<String>,
    baseline_since: Option<String>,
    baseline_until: Option<String>,
}

async fn rca(
    State(state): State<ApiState>,
    scope: Scope,
    ApiJson(body): ApiJson<RcaBody>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let request = infersight_rca::RcaRequest::from_bounds(
        (body.since.as_deref(), body.until.as_deref()),
        (
            body.baseline_since.as_deref(),
            body.baseline_until.as_deref(),
        ),
        now_ns(),
    )
    .map_err(ApiError::bad_request)?;
    let engine = read_engine(&state, scope);
    // Every verdict is stored, so it can be reported on, confirmed or rejected later.
    let report = match &state.reports {
        Some(reports) => reports.analyse_and_record(&engine, request).await?.report,
        None => {
            let mut report = infersight_rca::analyse(&engine, request).await?;
            // the same "not enough data" answer as a stored verdict's
            infersight_rca::incidents::quality::check(&engine, &mut report).await?;
            report
        }
    };
    let value = serde_json::to_value(&report).map_err(|e| ApiError {
        kind: ErrorKind::Internal,
        message: e.to_string(),
    })?;
    Ok(Json(value))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryBody {
    sql: String,
    #[serde(default)]
    format: Option<String>,
}

/// Runs one SQL statement for the UI or a script. Every statement, answered, failed or refused, is
/// recorded in the access audit (when the engine has one) with the caller's identity (the auth
/// gate's [`Identity`](crate::auth::Identity): a token's name, or the user a trusted proxy
/// names) and the peer address pseudonymized;
/// a failed audit write is warned about and counted, and the answer is still returned. The
/// engine's `[query]` limits hold: a caller ([`caller_key`]) already running its share of
/// statements gets 429 with `Retry-After`; memory, time and response bytes end a statement with
/// a 400 naming the limit. A client that disconnects drops this future, and with it the
/// statement's work.
async fn query(
    State(state): State<ApiState>,
    peer: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    identity: Option<axum::Extension<crate::auth::Identity>>,
    scope: Scope,
    ApiJson(body): ApiJson<QueryBody>,
) -> Result<Response, ApiError> {
    // checked first, so a request that cannot be answered reads nothing
    let format = match body.format.as_deref() {
        None | Some("json") => OutputFormat::Json,
        Some("csv") => OutputFormat::Csv,
        Some("table") => OutputFormat::Table,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown format `{other}`; use json, csv or table"
            )));
        }
    };
    let Some(_slot) = state
        .engine
        .try_caller_slot(&caller_key(identity.as_ref(), peer.as_ref()))
    else {
        return Ok(too_many_queries(state.engine.limits()));
    };
    let context = AccessContext {
        actor: identity.map_or_else(
            || crate::auth::ANONYMOUS.to_string(),
            |axum::Extension(identity)| identity.name,
        ),
        client: state.engine.access_audit().and_then(|audit| {
            peer.map(|axum::Extension(ConnectInfo(addr))| audit.client_label(addr.ip()))
        }),
        surface: Surface::ApiQuery,
        what: None,
    };
    let engine = read_engine(&state, scope);
    let audited = engine
        .sql_audited(&body.sql, Some(state.max_query_rows), &context)
        .await;
    count_audit_write(&state, &audited.audit);
    let output = audited.result?;
    let (content_type, body) = match format {
        OutputFormat::Json => ("application/json", output.to_json_text()?),
        OutputFormat::Csv => (
            "text/csv; charset=utf-8",
            output.try_render(OutputFormat::Csv)?,
        ),
        OutputFormat::Table => (
            "text/plain; charset=utf-8",
            output.try_render(OutputFormat::Table)?,
        ),
    };
    if let Some(limits) = state.engine.limits()
        && body.len() > limits.max_response_bytes
    {
        return Err(limits.response_too_large().into());
    }
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// Whose share of concurrent statements a request uses: an authenticated identity's (a token,
/// a trusted proxy's user), else its peer address's.
fn caller_key(
    identity: Option<&axum::Extension<crate::auth::Identity>>,
    peer: Option<&axum::Extension<ConnectInfo<SocketAddr>>>,
) -> String {
    match (identity, peer) {
        (Some(axum::Extension(identity)), _) if identity.via != crate::auth::Via::Open => {
            format!("identity:{}", identity.name)
        }
        (_, Some(axum::Extension(ConnectInfo(addr)))) => format!("peer:{}", addr.ip()),
        _ => "unknown".to_string(),
    }
}

/// 429 with `Retry-After` for a caller already running as many statements as it may.
fn too_many_queries(limits: Option<&infersight_query::QueryLimits>) -> Response {
    let limit = limits.map_or(0, |limits| limits.max_concurrent_per_caller);
    let message = format!(
        "this caller already runs {limit} queries, the most it may at once \
         (query.max_concurrent_per_caller); retry when one has ended"
    );
    (
        axum::http::StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "1")],
        Json(json!({ "error": { "kind": "unavailable", "message": message } })),
    )
        .into_response()
}

/// `infersight_audit_writes_total{outcome="ok"|"failed"}` from the audit's own counts, and a
/// warning for a line that could not be written.
fn count_audit_write(state: &ApiState, status: &AuditStatus) {
    if let AuditStatus::Failed(error) = status {
        tracing::warn!(%error, "access audit not written; the query is answered anyway");
    }
    let Some(audit) = state.engine.access_audit() else {
        return;
    };
    for (outcome, value) in [("ok", audit.writes_ok()), ("failed", audit.writes_failed())] {
        state
            .counters
            .set_counter(&catalog::AUDIT_WRITES, &[("outcome", outcome)], value);
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DimensionParams {
    since: Option<String>,
    until: Option<String>,
    max_cardinality: Option<usize>,
    max_values: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SliParams {
    sli: String,
    /// Comma-separated quantiles (`0.5,0.99` or `p50,p99`).
    q: Option<String>,
    /// Comma-separated dimensions.
    by: Option<String>,
    /// Comma-separated `dimension=value` filters.
    filter: Option<String>,
    since: Option<String>,
    until: Option<String>,
    step: Option<String>,
}

async fn sli(
    State(state): State<ApiState>,
    scope: Scope,
    caller: crate::state::Caller,
    params: Result<Query<SliParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(p) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if !crate::state::sees_personal(&caller) {
        personal_dimension_refused(p.by.as_deref(), p.filter.as_deref())?;
    }
    let text = SliRequestText {
        sli: &p.sli,
        q: p.q.as_deref(),
        by: p.by.as_deref(),
        filter: p.filter.as_deref(),
        since: p.since.as_deref(),
        until: p.until.as_deref(),
        step: p.step.as_deref(),
    };
    let request = SliRequest::parse(&text, now_ns()).map_err(ApiError::bad_request)?;
    let answer = infersight_explore::sli(&read_engine(&state, scope), request).await?;
    Ok(Json(answer.to_json()))
}

/// A viewer's SLIs by or filtered on a personal attribute (a tenant, a session, a user) would
/// list its values: refused, naming the role that may.
fn personal_dimension_refused(by: Option<&str>, filter: Option<&str>) -> Result<(), ApiError> {
    let by = by.unwrap_or_default().split(',');
    let filtered = (filter.unwrap_or_default().split(','))
        .map(|pair| pair.split_once('=').map_or(pair, |(key, _)| key));
    match by
        .chain(filtered)
        .map(str::trim)
        .find(|key| infersight_report::privacy::is_personal_key(key))
    {
        Some(key) => Err(ApiError::bad_request(format!(
            "`{key}` is a personal attribute: SLIs by or filtered on it need the analyst role"
        ))),
        None => Ok(()),
    }
}

/// A query's `since`/`until`, relative times counting back from now.
fn parse_range(since: Option<&str>, until: Option<&str>) -> Result<TimeRange, String> {
    infersight_model::time::parse_range(since, until, now_ns())
}

async fn dimensions(
    State(state): State<ApiState>,
    scope: Scope,
    params: Result<Query<DimensionParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let range = parse_range(params.since.as_deref(), params.until.as_deref())
        .map_err(ApiError::bad_request)?;
    let max_cardinality = params
        .max_cardinality
        .unwrap_or(state.max_dimension_cardinality);
    let dims = infersight_explore::discover_dimensions(
        &read_engine(&state, scope),
        range,
        max_cardinality,
        params.max_values.unwrap_or(20),
    )
    .await?;
    let list: Vec<_> = dims
        .iter()
        .map(|d| {
            json!({
                "name": d.name,
                "source": d.source,
                "distinct_values": d.distinct_values,
                "total_rows": d.total_rows,
                "values": d.values.iter().map(|(v, n)| json!({"value": v, "count": n})).collect::<Vec<_>>(),
                "kind": d.kind,
            })
        })
        .collect();
    Ok(Json(json!({ "dimensions": list })))
}

/// When the store last received data, overall and per source, and which sources stopped
/// (`infersight_explore::freshness`).
async fn freshness(
    State(state): State<ApiState>,
    scope: Scope,
) -> Result<Json<infersight_explore::Freshness>, ApiError> {
    Ok(Json(
        infersight_explore::freshness(&read_engine(&state, scope), now_ns()).await?,
    ))
}
