//! The incidents and report API (what the web UI calls): every verdict of `POST /api/v1/rca` is
//! stored as an incident (`infersight-report`'s `IncidentStore` under `<data>/incidents/`); these
//! routes list and show incidents, render their reports (JSON, Markdown, HTML) and record a
//! person's judgement (confirm / reject), which feeds confirmed incidents back into the knowledge
//! base of later reports.
//!
//! Incident files are small but read and written with blocking i/o, and the knowledge base is an
//! index built in RAM, so both run on blocking threads. The knowledge base is cached:
//! it depends only on the confirmed incidents a report may cite (every confirmed one except the
//! incident itself) and on the user's runbook directory, so a cached one is reused while neither
//! changed, and rebuilt when an incident is confirmed or rejected or a runbook file changes.
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/v1/incidents` | `{"incidents": [summary…]}`, newest first (`Incident::summary`: state, severity, detection time, top cause, …, plus the RCA's `incident_window` and `baseline_window`) |
//! | `GET /api/v1/incidents/{id}` | the incident (`id`, times, `status`, `note`, `rca`, `watch`, `actions`, `notifications`, `related`: incidents of the same event), its merged `timeline` and its `lead` (`infersight_report::lead`: headline with units, do now, first check and confirm SQL, causes with kinds and workers) |
//! | `GET /api/v1/incidents/{id}/report?format=json\|markdown\|html&llm=false` | the report |
//! | `POST /api/v1/incidents/{id}/confirm` `{"note": "…"}` | the updated incident |
//! | `POST /api/v1/incidents/{id}/reject` `{"note": "…"}` (optional) | the updated incident |
//!
//! A caller below `analyst` (a viewer) gets the list, the incident and the report with personal
//! values hidden (`infersight_report::privacy`: tenants, sessions, users, ids; templates cut).

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use infersight_model::ErrorKind;
use infersight_query::OrgScope;
use infersight_rca::incidents::{Incident, IncidentStatus};
use infersight_report::ReportFormat;
use infersight_report::lead::Lead;
use serde::Deserialize;
use serde_json::json;

use crate::reports::{ReportService, blocking};
use crate::state::{ApiError, ApiState, Caller, Scope, read_engine, scope_of, sees_personal};

/// The routes of this module, merged into [`crate::api::router`].
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/api/v1/incidents", get(list))
        .route("/api/v1/incidents/{id}", get(show))
        .route("/api/v1/incidents/{id}/report", get(report))
        .route("/api/v1/incidents/{id}/confirm", post(confirm))
        .route("/api/v1/incidents/{id}/reject", post(reject))
}

fn service(state: &ApiState) -> Result<&Arc<ReportService>, ApiError> {
    state.reports.as_ref().ok_or_else(|| ApiError {
        kind: ErrorKind::NotFound,
        message: "incidents are not kept by this server (it has no report service)".into(),
    })
}

fn incident_id(id: Result<UrlPath<String>, PathRejection>) -> Result<String, ApiError> {
    id.map(|UrlPath(id)| id)
        .map_err(|e| ApiError::bad_request(e.body_text()))
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Json<serde_json::Value>, ApiError> {
    serde_json::to_value(value).map(Json).map_err(|e| ApiError {
        kind: ErrorKind::Internal,
        message: e.to_string(),
    })
}

/// The incident `id` when the caller's orgs may see it (`Incident::visible_in`); another org's
/// answers 404 like one that does not exist.
async fn visible_incident(
    service: &ReportService,
    id: String,
    scope: &OrgScope,
) -> Result<Incident, ApiError> {
    let incident = service.get(id.clone()).await?;
    if incident.visible_in(scope) {
        Ok(incident)
    } else {
        Err(ApiError {
            kind: ErrorKind::NotFound,
            message: format!("no incident `{id}`"),
        })
    }
}

async fn list(
    State(state): State<ApiState>,
    scope: Scope,
    caller: Caller,
) -> Result<Json<serde_json::Value>, ApiError> {
    let scope = scope_of(scope);
    let personal = sees_personal(&caller);
    let incidents = service(&state)?.list().await?;
    let rows: Vec<_> = incidents
        .iter()
        .filter(|incident| incident.visible_in(&scope))
        .map(|incident| {
            let mut row = list_row(incident);
            if !personal {
                infersight_report::privacy::hide_personal(&mut row);
            }
            row
        })
        .collect();
    Ok(Json(json!({ "incidents": rows })))
}

/// An incident's summary with the windows its RCA compared, which the UI's comparison pages
/// offer and default to (one list call instead of one detail call per incident).
fn list_row(incident: &Incident) -> serde_json::Value {
    let mut row = incident.summary();
    row["incident_window"] = json!(incident.rca.incident_window);
    row["baseline_window"] = json!(incident.rca.baseline_window);
    row
}

async fn show(
    State(state): State<ApiState>,
    scope: Scope,
    caller: Caller,
    id: Result<UrlPath<String>, PathRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let id = incident_id(id)?;
    let service = Arc::clone(service(&state)?);
    let engine = read_engine(&state, scope.clone());
    let incident = visible_incident(&service, id, &scope_of(scope)).await?;
    let (incident, knowledge) = {
        let service = Arc::clone(&service);
        blocking(move || {
            // the runbooks of the lead; a knowledge base that cannot be built leaves them out
            let knowledge = match service.knowledge_for(&incident) {
                Ok(base) => base.retrieve(&incident.rca, service.config().retrieval_limit),
                Err(error) => {
                    tracing::warn!(%error, "no runbooks for the incident's lead");
                    Vec::new()
                }
            };
            Ok((incident, knowledge))
        })
        .await?
    };
    let mut shown = to_json(&incident)?;
    // the merged timeline (watcher, actions, notifications, judgement) the UI draws
    shown.0["timeline"] = serde_json::to_value(incident.timeline()).map_err(|e| ApiError {
        kind: ErrorKind::Internal,
        message: e.to_string(),
    })?;
    // what the page shows first: the symptom with units, do now, the first check, the causes
    let lead = match Lead::build(&engine, &incident.rca, &knowledge).await {
        Ok(lead) => lead,
        Err(error) => {
            tracing::warn!(%error, "the lead's workers were not read");
            Lead::of(&incident.rca, &knowledge, &[])
        }
    };
    shown.0["lead"] = to_json(&lead)?.0;
    if !sees_personal(&caller) {
        infersight_report::privacy::hide_personal(&mut shown.0);
    }
    Ok(shown)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportParams {
    /// json (default), markdown (md) or html.
    format: Option<String>,
    /// `false` skips the LLM narrative.
    llm: Option<bool>,
}

async fn report(
    State(state): State<ApiState>,
    scope: Scope,
    caller: Caller,
    id: Result<UrlPath<String>, PathRejection>,
    params: Result<Query<ReportParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let id = incident_id(id)?;
    let Query(params) = params.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let format = ReportFormat::parse(params.format.as_deref().unwrap_or("json"))?;
    let service = service(&state)?;
    let engine = read_engine(&state, scope.clone());
    let id = visible_incident(service, id, &scope_of(scope)).await?.id;
    let report = service
        .report(&engine, id, params.llm.unwrap_or(true))
        .await?;
    let personal = sees_personal(&caller);
    // Rendering draws every chart: CPU work for a blocking thread.
    let text = blocking(move || match personal {
        true => report.render(format),
        false => report.without_personal()?.render(format),
    })
    .await?;
    let content_type = match format {
        ReportFormat::Json => "application/json",
        ReportFormat::Markdown => "text/markdown; charset=utf-8",
        ReportFormat::Html => "text/html; charset=utf-8",
    };
    Ok(([(header::CONTENT_TYPE, content_type)], text).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgementBody {
    note: Option<String>,
}

/// The body of confirm / reject: a JSON object, or nothing at all (no note).
fn judgement(body: &Bytes) -> Result<JudgementBody, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(JudgementBody::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("invalid body (expected {{\"note\": \"…\"}}): {e}"))
    })
}

async fn confirm(
    State(state): State<ApiState>,
    scope: Scope,
    id: Result<UrlPath<String>, PathRejection>,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    let id = incident_id(id)?;
    let id = visible_incident(service(&state)?, id, &scope_of(scope))
        .await?
        .id;
    let note = judgement(&body)?
        .note
        .filter(|note| !note.trim().is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(
                "`note` must say what fixed it (it is shown when the incident is retrieved)",
            )
        })?;
    let incident = service(&state)?
        .set_status(id, IncidentStatus::Confirmed, Some(note))
        .await?;
    to_json(&incident)
}

async fn reject(
    State(state): State<ApiState>,
    scope: Scope,
    id: Result<UrlPath<String>, PathRejection>,
    body: Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    let id = incident_id(id)?;
    let id = visible_incident(service(&state)?, id, &scope_of(scope))
        .await?
        .id;
    let note = judgement(&body)?.note;
    let incident = service(&state)?
        .set_status(id, IncidentStatus::Rejected, note)
        .await?;
    to_json(&incident)
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use infersight_model::telemetry::Counters;
    use infersight_store::{StorageBackend, Store, StoreOptions};
    use tower::ServiceExt;

    use super::*;
    use infersight_query::QueryEngine;
    use infersight_report::ReportConfig;

    struct Fixture {
        _dir: tempfile::TempDir,
        state: ApiState,
    }

    fn fixture(with_reports: bool) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn StorageBackend> =
            Arc::new(Store::open(StoreOptions::new(dir.path().join("data"))).unwrap());
        let reports = with_reports.then(|| {
            Arc::new(ReportService::new(
                &dir.path().join("data"),
                ReportConfig::default(),
            ))
        });
        let state = ApiState {
            engine: Arc::new(QueryEngine::new(store.clone())),
            store,
            counters: Arc::new(Counters::new()),
            max_query_rows: 1000,
            max_dimension_cardinality: 100,
            alerts: None,
            actions: None,
            reports,
        };
        Fixture { _dir: dir, state }
    }

    /// Sends one request through the whole API router; returns status, content type and body.
    async fn call(
        state: &ApiState,
        method: &str,
        uri: &str,
        body: &str,
    ) -> (StatusCode, String, String) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = crate::api::router(state.clone())
            .oneshot(request)
            .await
            .unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            content_type,
            String::from_utf8(bytes.to_vec()).unwrap(),
        )
    }

    fn json_of(body: &str) -> serde_json::Value {
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
    }

    fn error_kind(body: &str) -> String {
        json_of(body)["error"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// A stored verdict (the store is empty: `POST /api/v1/rca` would store none).
    async fn stored(f: &Fixture) -> (String, serde_json::Value) {
        let service = f.state.reports.clone().unwrap();
        let rca = infersight_rca::analyse(&f.state.engine, Default::default())
            .await
            .unwrap();
        let incident = service.create(rca).await.unwrap();
        let mut rca = serde_json::to_value(&incident.rca).unwrap();
        rca["incident_id"] = json!(incident.id);
        (incident.id, rca)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_list_carries_the_windows_each_rca_compared() {
        let f = fixture(true);
        let service = f.state.reports.clone().unwrap();
        let window = |since: &str, until: &str| json!({"since": since, "until": until});
        let rca: infersight_rca::RcaReport = serde_json::from_value(json!({
            "symptom": null, "root_causes": [], "signals": [], "log_evidence": [],
            "suggestions": [], "checklist": [], "fleet_wide": false,
            "incident_window": window("2026-12-02T20:02:00Z", "2026-12-02T20:20:00Z"),
            "baseline_window": window("2026-12-02T19:02:00Z", "2026-12-02T20:02:00Z"),
            "window_source": "brushed", "verdict": "v", "elapsed_ms": 1.0, "timings_ms": {}
        }))
        .unwrap();
        let id = service.create(rca).await.unwrap().id;
        let (status, _, body) = call(&f.state, "GET", "/api/v1/incidents", "").await;
        assert_eq!(status, StatusCode::OK);
        let row = json_of(&body)["incidents"][0].clone();
        assert_eq!(row["id"], json!(id), "{row}");
        assert_eq!(
            row["incident_window"]["since"],
            json!("2026-12-02T20:02:00.000Z"),
            "{row}"
        );
        assert_eq!(
            row["incident_window"]["until"],
            json!("2026-12-02T20:20:00.000Z"),
            "{row}"
        );
        assert_eq!(
            row["baseline_window"]["since"],
            json!("2026-12-02T19:02:00.000Z"),
            "{row}"
        );
        assert_eq!(
            row["baseline_window"]["until"],
            json!("2026-12-02T20:02:00.000Z"),
            "{row}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rca_over_no_data_answers_and_stores_no_incident() {
        let f = fixture(true);
        let (status, _, body) = call(&f.state, "POST", "/api/v1/rca", "{}").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let rca = json_of(&body);
        assert!(rca.get("incident_id").is_none(), "{rca}");
        assert!(
            rca["verdict"]
                .as_str()
                .is_some_and(|v| v.starts_with("not enough data: 0 requests")),
            "{rca}"
        );
        let (_, _, body) = call(&f.state, "GET", "/api/v1/incidents", "").await;
        assert_eq!(json_of(&body)["incidents"], json!([]));
    }

    /// A viewer's and an analyst's token over `state`'s API, behind authentication.
    fn viewer_and_analyst(state: &ApiState, dir: &std::path::Path) -> (Router, String, String) {
        use crate::auth::{Auth, AuthSettings, Role, TokenFile};
        let mut file = TokenFile::default();
        let now = infersight_model::time::now_ns();
        let mut token = |name: &str, role: Role| {
            file.create(name, role, vec![], Some(now + 3_600_000_000_000), now)
                .unwrap()
        };
        let (viewer, analyst) = (
            token("viewer", Role::Viewer),
            token("analyst", Role::Analyst),
        );
        let tokens_file = dir.join("tokens.json");
        file.write(&tokens_file).unwrap();
        let auth = Auth::open(AuthSettings {
            tokens_file: Some(tokens_file),
            trusted_proxies: Vec::new(),
            proxy_role: Role::Viewer,
        })
        .unwrap();
        let router = crate::api::router_with_auth(state.clone(), Arc::new(auth));
        (router, viewer, analyst)
    }

    /// A viewer gets the incident list, the incident and its report (JSON, HTML) with the
    /// customer tenant and the session a verdict names hidden, and no SLIs by tenant; an analyst
    /// gets them whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_viewer_gets_incidents_and_reports_without_personal_values() {
        let f = fixture(true);
        let mut rca = infersight_rca::analyse(&f.state.engine, Default::default())
            .await
            .unwrap();
        rca.root_causes.push(infersight_rca::RootCause {
            rank: 1,
            dimensions: infersight_model::signal::Subject::of([
                ("tenant", "acme-corp"),
                ("model", "llama-3-8b"),
            ]),
            explained_fraction: 0.9,
            score: 12.0,
            evidence: vec!["session_id=sess-77 retried 40 times".into()],
            slice_rate: None,
        });
        rca.verdict = "ttft x3 on tenant=acme-corp & model=llama-3-8b".into();
        // read from the default org's rows, what a token bound to no org reads
        let store = infersight_rca::IncidentStore::open(&f._dir.path().join("data"));
        let orgs = Some(vec![infersight_model::org::DEFAULT_ORG.to_string()]);
        let id = store.create_for_orgs(&rca, orgs).unwrap().id;
        let (router, viewer, analyst) = viewer_and_analyst(&f.state, f._dir.path());
        let get = |uri: String, token: String| {
            let router = router.clone();
            async move {
                let request = Request::builder()
                    .uri(uri)
                    .header(header::AUTHORIZATION, format!("Bearer {token}"))
                    .body(Body::empty())
                    .unwrap();
                let response = router.oneshot(request).await.unwrap();
                let status = response.status();
                let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                    .await
                    .unwrap();
                (status, String::from_utf8_lossy(&bytes).into_owned())
            }
        };
        for uri in [
            "/api/v1/incidents".to_string(),
            format!("/api/v1/incidents/{id}"),
            format!("/api/v1/incidents/{id}/report?format=json&llm=false"),
            format!("/api/v1/incidents/{id}/report?format=html&llm=false"),
        ] {
            let (status, whole) = get(uri.clone(), analyst.clone()).await;
            assert_eq!(status, StatusCode::OK, "{uri}: {whole}");
            assert!(whole.contains("acme-corp"), "analyst: {uri}: {whole}");
            let (status, shown) = get(uri.clone(), viewer.clone()).await;
            assert_eq!(status, StatusCode::OK, "{uri}: {shown}");
            assert!(
                !shown.contains("acme-corp") && !shown.contains("sess-77"),
                "viewer: {uri}: {shown}"
            );
            assert!(shown.contains("llama-3-8b"), "viewer: {uri}: {shown}");
        }
        let by_tenant = "/api/v1/sli?sli=ttft&by=tenant&since=-15m".to_string();
        let (status, body) = get(by_tenant.clone(), viewer.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains("analyst"), "{body}");
        let (status, body) = get(by_tenant, analyst.clone()).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let by_model = "/api/v1/sli?sli=ttft&by=model&filter=tenant=x&since=-15m";
        let (status, _) = get(by_model.to_string(), viewer.clone()).await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "a filter on a tenant lists it too"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rca_stores_an_incident_that_is_listed_reported_and_judged() {
        let f = fixture(true);
        let (id, rca) = stored(&f).await;
        assert!(rca["verdict"].is_string(), "{rca}");

        let (status, _, body) = call(&f.state, "GET", "/api/v1/incidents", "").await;
        assert_eq!(status, StatusCode::OK);
        let list = json_of(&body);
        assert_eq!(list["incidents"][0]["id"], json!(id), "{list}");
        assert_eq!(list["incidents"][0]["status"], json!("open"));
        for key in [
            "created_at",
            "updated_at",
            "note",
            "verdict",
            "symptom",
            "onset",
        ] {
            assert!(list["incidents"][0].get(key).is_some(), "{key} in {list}");
        }
        // the windows the comparison pages offer, as the RCA answered them (none here: no data)
        for key in ["incident_window", "baseline_window"] {
            assert_eq!(list["incidents"][0][key], rca[key], "{key} in {list}");
        }

        let (status, _, body) = call(&f.state, "GET", &format!("/api/v1/incidents/{id}"), "").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(json_of(&body)["rca"]["verdict"], rca["verdict"]);

        for (format, expected) in [
            ("json", "application/json"),
            ("markdown", "text/markdown; charset=utf-8"),
            ("md", "text/markdown; charset=utf-8"),
            ("html", "text/html; charset=utf-8"),
        ] {
            let uri = format!("/api/v1/incidents/{id}/report?format={format}&llm=false");
            let (status, content_type, body) = call(&f.state, "GET", &uri, "").await;
            assert_eq!(status, StatusCode::OK, "{format}: {body}");
            assert_eq!(content_type, expected);
            assert!(body.contains(&id), "{format} report names the incident");
        }
        // json is the default format
        let (status, content_type, body) = call(
            &f.state,
            "GET",
            &format!("/api/v1/incidents/{id}/report"),
            "",
        )
        .await;
        assert_eq!(
            (status, content_type.as_str()),
            (StatusCode::OK, "application/json")
        );
        assert_eq!(json_of(&body)["incident_id"], json!(id));

        let confirm = format!("/api/v1/incidents/{id}/confirm");
        let (status, _, body) = call(&f.state, "POST", &confirm, r#"{"note": "  "}"#).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "an empty note: {body}");
        let (status, _, body) = call(
            &f.state,
            "POST",
            &confirm,
            r#"{"note": "restarted the pod"}"#,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let confirmed = json_of(&body);
        assert_eq!(confirmed["status"], json!("confirmed"));
        assert_eq!(confirmed["note"], json!("restarted the pod"));

        // reject takes no body at all, and keeps the note there was
        let (status, _, body) = call(
            &f.state,
            "POST",
            &format!("/api/v1/incidents/{id}/reject"),
            "",
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let rejected = json_of(&body);
        assert_eq!(rejected["status"], json!("rejected"));
        assert_eq!(rejected["note"], json!("restarted the pod"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_requests_and_unknown_incidents() {
        let f = fixture(true);
        let (id, _) = stored(&f).await;
        let cases = [
            (
                "GET",
                "/api/v1/incidents/inc-19700101T000000Z-0000".to_string(),
                "",
                "not_found",
            ),
            (
                "GET",
                "/api/v1/incidents/..%2Fx".to_string(),
                "",
                "bad_request",
            ),
            (
                "GET",
                "/api/v1/incidents/..%2Fx/report".to_string(),
                "",
                "bad_request",
            ),
            (
                "GET",
                "/api/v1/incidents/inc-19700101T000000Z-0000/report".to_string(),
                "",
                "not_found",
            ),
            (
                "GET",
                format!("/api/v1/incidents/{id}/report?format=pdf"),
                "",
                "bad_request",
            ),
            (
                "GET",
                format!("/api/v1/incidents/{id}/report?llm=maybe"),
                "",
                "bad_request",
            ),
            (
                "GET",
                format!("/api/v1/incidents/{id}/report?colour=red"),
                "",
                "bad_request",
            ),
            (
                "POST",
                format!("/api/v1/incidents/{id}/confirm"),
                "{not json",
                "bad_request",
            ),
            (
                "POST",
                format!("/api/v1/incidents/{id}/confirm"),
                "",
                "bad_request",
            ),
            (
                "POST",
                format!("/api/v1/incidents/{id}/reject"),
                r#"{"notes": "x"}"#,
                "bad_request",
            ),
            (
                "POST",
                format!("/api/v1/incidents/{id}/reject"),
                "[1]",
                "bad_request",
            ),
            (
                "POST",
                "/api/v1/incidents/inc-19700101T000000Z-0000/reject".to_string(),
                "",
                "not_found",
            ),
        ];
        for (method, uri, body, expected) in cases {
            let (status, _, answer) = call(&f.state, method, &uri, body).await;
            assert_eq!(
                error_kind(&answer),
                expected,
                "{method} {uri} {body}: {status} {answer}"
            );
        }
        // nothing was judged by the failed requests
        let (_, _, body) = call(&f.state, "GET", &format!("/api/v1/incidents/{id}"), "").await;
        assert_eq!(json_of(&body)["status"], json!("open"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_a_report_service_the_routes_answer_404_and_rca_stores_nothing() {
        let f = fixture(false);
        let (status, _, body) = call(&f.state, "POST", "/api/v1/rca", "{}").await;
        assert_eq!(status, StatusCode::OK);
        assert!(json_of(&body).get("incident_id").is_none(), "{body}");
        let (status, _, body) = call(&f.state, "GET", "/api/v1/incidents", "").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(
            json_of(&body)["error"]["message"]
                .as_str()
                .unwrap()
                .contains("incidents")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_knowledge_base_is_reused_until_the_confirmed_incidents_change() {
        let f = fixture(true);
        let service = f.state.reports.clone().unwrap();
        let rca = infersight_rca::analyse(&f.state.engine, Default::default())
            .await
            .unwrap();
        let first = service.create(rca.clone()).await.unwrap();
        let second = service.create(rca).await.unwrap();
        let a = service.knowledge_for(&first).unwrap();
        let b = service.knowledge_for(&second).unwrap();
        assert!(
            Arc::ptr_eq(&a, &b),
            "no confirmed incident: one knowledge base"
        );
        service
            .set_status(
                first.id.clone(),
                IncidentStatus::Confirmed,
                Some("fixed".into()),
            )
            .await
            .unwrap();
        let c = service.knowledge_for(&second).unwrap();
        assert!(!Arc::ptr_eq(&a, &c), "a confirmation rebuilds it");
        // the confirmed incident's own report leaves it out: that is the first knowledge base
        let first = service.incidents().get(&first.id).unwrap();
        let d = service.knowledge_for(&first).unwrap();
        assert!(Arc::ptr_eq(&a, &d));
        assert!(Arc::ptr_eq(&c, &service.knowledge_for(&second).unwrap()));
    }

    #[tokio::test]
    async fn incidents_the_watcher_opened_are_listed_with_state_and_detection_time() {
        use infersight_rca::{IncidentState, WatchRecord};
        let f = fixture(true);
        let service = f.state.reports.clone().unwrap();
        let rca = infersight_rca::analyse(&f.state.engine, Default::default())
            .await
            .unwrap();
        let manual = service.create(rca.clone()).await.unwrap();
        let mut record = WatchRecord {
            state: IncidentState::Open,
            onset: "2025-11-29T02:20:00.000Z".into(),
            detected_at: "2025-11-29T02:22:00.000Z".into(),
            resolved_at: None,
            detections: vec!["sli_change (fleet): ttft rose".into()],
            timeline: Vec::new(),
            notice: None,
        };
        let watched = service
            .incidents()
            .create_watched(&rca, record.clone())
            .unwrap();
        let (status, _, body) = call(&f.state, "GET", "/api/v1/incidents", "").await;
        assert_eq!(status, StatusCode::OK);
        let list = json_of(&body);
        let row = |id: &str| {
            list["incidents"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == id)
                .cloned()
                .unwrap()
        };
        let auto = row(&watched.id);
        assert_eq!(auto["origin"], "watch");
        assert_eq!(auto["state"], "open");
        assert_eq!(auto["detected_at"], "2025-11-29T02:22:00.000Z");
        assert_eq!(auto["resolved_at"], serde_json::Value::Null);
        let asked = row(&manual.id);
        assert_eq!(asked["origin"], "rca");
        assert_eq!(asked["state"], serde_json::Value::Null);

        record.state = IncidentState::Resolved;
        record.resolved_at = Some("2025-11-29T02:40:00.000Z".into());
        service
            .incidents()
            .update_watched(&watched.id, &rca, &record)
            .unwrap();
        let (_, _, body) = call(
            &f.state,
            "GET",
            &format!("/api/v1/incidents/{}", watched.id),
            "",
        )
        .await;
        let shown = json_of(&body);
        assert_eq!(shown["watch"]["state"], "resolved", "{shown}");
        assert_eq!(shown["watch"]["resolved_at"], "2025-11-29T02:40:00.000Z");
    }
}
