//! What every API handler shares: the state (store, query engine, counters, alert manager,
//! action runner, report service), the caller's org scope and the engine its reads go through,
//! and the one error type, answered as a status and a JSON body.

use std::sync::Arc;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use infersight_model::ErrorKind;
use infersight_model::telemetry::Counters;
use infersight_query::{OrgScope, QueryEngine};
use infersight_report::ReportError;
use infersight_store::StorageBackend;
use serde_json::json;

use crate::actions::ActionRunner;
use crate::alerts::AlertManager;
use crate::reports::ReportService;

#[derive(Clone)]
pub struct ApiState {
    pub store: Arc<dyn StorageBackend>,
    pub engine: Arc<QueryEngine>,
    pub counters: Arc<Counters>,
    pub max_query_rows: usize,
    pub max_dimension_cardinality: usize,
    /// SLO evaluation and alert state; `None` when no SLO is configured.
    pub alerts: Option<Arc<AlertManager>>,
    /// Automatic-action policies and their audit trail; `None` when none is configured.
    pub actions: Option<Arc<ActionRunner>>,
    /// Stored incidents and their reports (`/api/v1/incidents`); `None`: those routes answer
    /// 404 and `POST /api/v1/rca` stores nothing.
    pub reports: Option<Arc<ReportService>>,
}

/// One error type for every API handler: a status and a JSON body naming the problem.
#[derive(Debug)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            kind: ErrorKind::BadRequest,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, kind) = match self.kind {
            ErrorKind::BadRequest => (StatusCode::BAD_REQUEST, "bad_request"),
            ErrorKind::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
            ErrorKind::NotFound => (StatusCode::NOT_FOUND, "not_found"),
            ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ErrorKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        (
            status,
            Json(json!({ "error": { "kind": kind, "message": self.message } })),
        )
            .into_response()
    }
}

impl From<infersight_query::QueryError> for ApiError {
    fn from(e: infersight_query::QueryError) -> Self {
        Self {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl From<ReportError> for ApiError {
    fn from(e: ReportError) -> Self {
        Self {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

/// The caller's org scope, as the auth gate put it on the request.
pub(crate) type Scope = Option<axum::Extension<OrgScope>>;

/// Who calls, as the auth gate put it on the request.
pub(crate) type Caller = Option<axum::Extension<crate::auth::Identity>>;

/// Whether the caller may see personal fields (`infersight_report::privacy`): `analyst` and
/// above, so everyone with authentication off (every caller is then an admin); a `viewer` gets
/// incidents and reports with them hidden. Without an identity, not (fail closed: the gate
/// always sets one).
pub(crate) fn sees_personal(caller: &Caller) -> bool {
    caller
        .as_ref()
        .is_some_and(|axum::Extension(identity)| identity.role.grants(crate::auth::Role::Analyst))
}

/// The orgs the caller reads (the gate always sets them; without, the default org only).
pub(crate) fn scope_of(scope: Scope) -> OrgScope {
    scope.map_or_else(
        || OrgScope::org(infersight_model::org::DEFAULT_ORG),
        |axum::Extension(scope)| scope,
    )
}

/// The engine a read of this request goes through: only the caller's orgs' rows, enforced by
/// the tables themselves, and only their rollups (`QueryEngine::scoped`). The gate always sets
/// the scope; without one, fail closed to the default org.
pub(crate) fn read_engine(state: &ApiState, scope: Scope) -> Arc<QueryEngine> {
    let scope = scope_of(scope);
    if scope == OrgScope::All {
        Arc::clone(&state.engine)
    } else {
        Arc::new(state.engine.scoped(scope))
    }
}
