//! The API's views of the process's own, whole-fleet state, after the auth gate and beside the
//! handlers of `api`: SLO and alert state (`alerts`), automatic actions (`actions`), the store's
//! statistics and its gauges on `/metrics`. That state is computed over every org's rows (one
//! alert manager, one action runner, one store), so it is shown whole only to a caller who may
//! see every org: authentication off, or an `admin` token (which may mint a token of any org).
//! Any other caller (issue 22, tenants) gets empty SLO, alert and action lists saying why, the
//! row counts of its own orgs instead of the store's statistics, and `/metrics` without the
//! store's gauges and the SLO and action series.

use axum::Json;
use axum::extract::State;
use infersight_model::time::now_ns;
use infersight_query::OrgScope;
use serde_json::json;

use crate::auth::{Identity, Role};
use crate::state::{ApiError, ApiState, Scope, read_engine, scope_of};

/// The caller's identity, as the auth gate put it on the request.
pub(crate) type Caller = Option<axum::Extension<Identity>>;

/// What a caller who may not see every org is told in place of the whole-fleet state.
const WHOLE_FLEET: &str = "evaluated over every org's rows: shown only with authentication \
                           off or to an admin token";

/// Whether the caller may see state computed over every org's rows.
pub(crate) fn sees_every_org(scope: &Scope, caller: &Caller) -> bool {
    let all = scope
        .as_ref()
        .is_some_and(|axum::Extension(scope)| *scope == OrgScope::All);
    let admin = caller
        .as_ref()
        .is_some_and(|axum::Extension(identity)| identity.role == Role::Admin);
    all || admin
}

/// `GET /api/v1/slo`.
pub(crate) async fn slo_status(
    State(state): State<ApiState>,
    scope: Scope,
    caller: Caller,
) -> Json<serde_json::Value> {
    if !sees_every_org(&scope, &caller) {
        return Json(json!({ "slos": [], "scope": WHOLE_FLEET }));
    }
    Json(
        state
            .alerts
            .as_ref()
            .map_or_else(|| json!({ "slos": [] }), |a| a.slo_json()),
    )
}

/// `GET /api/v1/alerts`.
pub(crate) async fn alerts(
    State(state): State<ApiState>,
    scope: Scope,
    caller: Caller,
) -> Json<serde_json::Value> {
    if !sees_every_org(&scope, &caller) {
        return Json(json!({ "alerts": [], "scope": WHOLE_FLEET }));
    }
    Json(
        state
            .alerts
            .as_ref()
            .map_or_else(|| json!({ "alerts": [] }), |a| a.alerts_json()),
    )
}

/// `GET /api/v1/actions`: the policies' state (breach streaks, actions in effect, cooldowns)
/// and the recent audit entries, oldest first.
pub(crate) async fn actions(
    State(state): State<ApiState>,
    scope: Scope,
    caller: Caller,
) -> Json<serde_json::Value> {
    if !sees_every_org(&scope, &caller) {
        return Json(json!({ "policies": [], "recent": [], "scope": WHOLE_FLEET }));
    }
    Json(state.actions.as_ref().map_or_else(
        || json!({ "policies": [], "recent": [] }),
        |a| a.state_json(now_ns()),
    ))
}

/// `GET /api/v1/stats`: the store's statistics, or for a caller who may not see every org the
/// rows of its orgs per table (`{"orgs": […], "tables": {"requests": {"rows": n}, …}}`,
/// counted through the scoped engine) and what each of its orgs stores in segments against its
/// storage limit (`"storage": {"acme": {"rows", "bytes", "limit_bytes"}}`).
pub(crate) async fn stats(
    State(state): State<ApiState>,
    scope: Scope,
    caller: Caller,
    auth: Option<axum::Extension<std::sync::Arc<crate::auth::Auth>>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if sees_every_org(&scope, &caller) {
        return Ok(Json(
            serde_json::to_value(state.store.stats()).unwrap_or_default(),
        ));
    }
    let orgs = scope_of(scope.clone()).orgs().map(<[String]>::to_vec);
    let engine = read_engine(&state, scope);
    let mut tables = serde_json::Map::new();
    for table in infersight_model::tables::Table::ALL {
        let name = table.name();
        let output = engine
            .sql(&format!("SELECT count(*) AS n FROM {name}"))
            .await?;
        let rows = output
            .to_json_value()?
            .pointer("/rows/0/n")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        tables.insert(name.to_string(), json!({ "rows": rows }));
    }
    let stored = state.store.stats().orgs;
    let mut storage = serde_json::Map::new();
    for org in orgs.iter().flatten() {
        let usage = stored.get(org).copied().unwrap_or_default();
        let limit =
            (auth.as_ref()).and_then(|axum::Extension(auth)| auth.storage_quota().usage(org));
        storage.insert(
            org.clone(),
            json!({ "rows": usage.rows, "bytes": usage.bytes, "limit_bytes": limit.map(|(_, l)| l) }),
        );
    }
    Ok(Json(json!({
        "orgs": orgs,
        "tables": tables,
        "storage": storage,
        "scope": format!("rows of these orgs only; the store's own statistics are {WHOLE_FLEET}"),
    })))
}

/// What `/metrics` says first to a caller who may not see every org: the process's counters
/// and the store's gauges count every org's data (their volumes, errors, deliveries), so only
/// the caller's orgs' SLIs follow.
pub(crate) const ORGS_ONLY_METRICS: &str = "# infersight: the SLIs of your orgs only; the \
process's counters and the store's gauges count every org's data and are served with \
authentication off or to an admin token\n";
