//! The authorization matrix: the API router is built as `serve` builds it, its routes are read
//! from the router itself (not from the table), every one must have a row in
//! `routes::ROUTES`, and every route is called by every kind of caller (none, a malformed
//! header, an unknown token, an expired one, each role) and answers 401 / 403 / the handler as
//! the table declares. A new route without a declared role fails here.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use infersight_model::telemetry::Counters;
use infersight_model::time::now_ns;
use infersight_query::{AccessAudit, QueryEngine};
use infersight_report::ReportConfig;
use infersight_store::{StorageBackend, Store, StoreOptions};
use tower::ServiceExt;

use super::routes::{Audit, ROUTES};
use super::*;
use crate::api::ApiState;
use crate::reports::ReportService;

/// The paths of a built router, read from its `Debug` form (axum lists each route's path
/// there); its fallback's internal catch-all is left out.
fn router_paths(router: &axum::Router) -> BTreeSet<String> {
    format!("{router:?}")
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|quoted| quoted.starts_with('/') && !quoted.contains("__private__axum"))
        .map(str::to_string)
        .collect()
}

struct Caller {
    label: &'static str,
    authorization: Option<String>,
    role: Option<Role>,
}

struct Fixture {
    dir: tempfile::TempDir,
    router: axum::Router,
    callers: Vec<Caller>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store: Arc<dyn StorageBackend> = Arc::new(Store::open(StoreOptions::new(&data)).unwrap());
    let engine = QueryEngine::new(store.clone())
        .with_access_audit(Arc::new(AccessAudit::for_data_dir(&data)));
    let state = ApiState {
        engine: Arc::new(engine),
        store,
        counters: Arc::new(Counters::new()),
        max_query_rows: 1000,
        max_dimension_cardinality: 100,
        alerts: None,
        actions: None,
        reports: Some(Arc::new(ReportService::new(&data, ReportConfig::default()))),
    };
    let tokens_file = dir.path().join("tokens.json");
    let mut file = TokenFile::default();
    let now = now_ns();
    let mut callers = vec![
        Caller {
            label: "no token",
            authorization: None,
            role: None,
        },
        Caller {
            label: "malformed header",
            authorization: Some("Basic YWRtaW46YWRtaW4=".into()),
            role: None,
        },
        Caller {
            label: "unknown token",
            authorization: Some(format!("Bearer {}", tokens::generate_token().unwrap())),
            role: None,
        },
    ];
    let expired = file
        .create(
            "expired",
            Role::Admin,
            vec![],
            Some(now - 1_000_000_000),
            now - 2_000_000_000,
        )
        .unwrap();
    callers.push(Caller {
        label: "expired admin token",
        authorization: Some(format!("Bearer {expired}")),
        role: None,
    });
    for role in Role::ALL {
        let token = file
            .create(
                &format!("{role}-token"),
                role,
                vec![],
                Some(now + 3_600_000_000_000),
                now,
            )
            .unwrap();
        callers.push(Caller {
            label: role.name(),
            authorization: Some(format!("Bearer {token}")),
            role: Some(role),
        });
    }
    file.write(&tokens_file).unwrap();
    let auth = Auth::open(AuthSettings {
        tokens_file: Some(tokens_file),
        trusted_proxies: Vec::new(),
        proxy_role: Role::Viewer,
    })
    .unwrap();
    let router = crate::api::router_with_auth(state, Arc::new(auth));
    Fixture {
        dir,
        router,
        callers,
    }
}

/// A request that reaches the route's handler with a well-formed body.
fn sample(method: &str, path: &str, authorization: Option<&str>) -> Request<Body> {
    let uri = path
        .replace("{id}", "no-such-incident")
        .replace("{name}", "app.js");
    let body = match path {
        "/api/v1/query" => r#"{"sql": "SELECT 1 AS one"}"#,
        "/api/v1/incidents/{id}/confirm" => r#"{"note": "restarted the pod"}"#,
        _ if method == "POST" => "{}",
        _ => "",
    };
    let uri = match path {
        "/api/v1/sli" => format!("{uri}?sli=e2e_ms&since=-15m"),
        _ => uri,
    };
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(value) = authorization {
        request = request.header(header::AUTHORIZATION, value);
    }
    request.body(Body::from(body)).unwrap()
}

async fn send(router: &axum::Router, request: Request<Body>) -> (StatusCode, bool, String) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let challenged = response.headers().contains_key(header::WWW_AUTHENTICATE);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        challenged,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn error_kind(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .map(|v| v["error"]["kind"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

#[test]
fn every_route_of_the_router_declares_its_role() {
    let f = fixture();
    let built = router_paths(&f.router);
    assert!(
        built.len() >= 10,
        "could not read the router's paths: {built:?}"
    );
    let declared: BTreeSet<String> = ROUTES.iter().map(|r| r.path.to_string()).collect();
    let undeclared: Vec<_> = built.difference(&declared).collect();
    assert!(
        undeclared.is_empty(),
        "routes without a role: add them to auth::routes::ROUTES: {undeclared:?}"
    );
    let stale: Vec<_> = declared.difference(&built).collect();
    assert!(
        stale.is_empty(),
        "rows of routes the router does not have: {stale:?}"
    );
    // and the reader really reads: a route added outside the table is seen
    let extra = f.router.clone().route(
        "/api/v1/undeclared",
        axum::routing::get(|| async { "data" }),
    );
    assert!(router_paths(&extra).contains("/api/v1/undeclared"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_every_caller_as_declared() {
    let f = fixture();
    let mut failures = Vec::new();
    for rule in ROUTES {
        for caller in &f.callers {
            let request = sample(rule.method, rule.path, caller.authorization.as_deref());
            let (status, challenged, body) = send(&f.router, request).await;
            let what = format!(
                "{} {} as {}: {status} {body}",
                rule.method, rule.path, caller.label
            );
            let right = match (rule.access, caller.role) {
                (Access::Public, _) => {
                    status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN
                }
                (Access::Role(_), None) => {
                    status == StatusCode::UNAUTHORIZED
                        && challenged
                        && error_kind(&body) == "unauthenticated"
                }
                (Access::Role(required), Some(role)) if role.grants(required) => {
                    // reached the handler: not refused, and not the gate's own errors
                    !matches!(status.as_u16(), 401 | 403 | 405)
                        && !body.contains("declares no role")
                }
                (Access::Role(_), Some(_)) => {
                    status == StatusCode::FORBIDDEN && error_kind(&body) == "forbidden"
                }
            };
            if !right {
                failures.push(what);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} wrong answers:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // who did what is in the access audit: by token name, refusals included
    let audit = std::fs::read_to_string(f.dir.path().join("data/audit/access.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let calls = |actor: &str, what: &str, outcome: &str| {
        lines
            .iter()
            .filter(|l| l["actor"] == actor && l["what"] == what && l["outcome"] == outcome)
            .count()
    };
    assert_eq!(
        calls(
            "operator-token",
            "POST /api/v1/incidents/no-such-incident/confirm",
            "not_found"
        ),
        1,
        "{audit}"
    );
    assert_eq!(
        calls(
            "viewer-token",
            "POST /api/v1/incidents/no-such-incident/confirm",
            "forbidden"
        ),
        1,
        "{audit}"
    );
    assert_eq!(
        calls("viewer-token", "GET /api/v1/incidents", "ok"),
        1,
        "{audit}"
    );
    assert_eq!(
        calls("analyst-token", "POST /api/v1/rca", "ok"),
        1,
        "{audit}"
    );
    // SQL is audited by its handler (tables and columns), once per call, by token name
    let sql = lines
        .iter()
        .filter(|l| l["surface"] == "api_query" && l["actor"] == "admin-token")
        .count();
    assert_eq!(sql, 1, "{audit}");
    // the gate's lines: every call of a `Call` route by a token holder, and every refusal of
    // a token holder on an audited route; nothing for unauthenticated callers
    let expected: usize = ROUTES
        .iter()
        .map(|rule| match (rule.audit, rule.access) {
            (Audit::No, _) | (_, Access::Public) => 0,
            (audit, Access::Role(required)) => Role::ALL
                .iter()
                .filter(|role| audit == Audit::Call || !role.grants(required))
                .count(),
        })
        .sum();
    let lines_of_api = lines.iter().filter(|l| l["surface"] == "api").count();
    assert_eq!(lines_of_api, expected, "{audit}");
    assert!(!audit.contains("ist_"), "no token in the audit");
}

#[tokio::test]
async fn a_route_inside_the_gate_without_a_row_is_refused_not_served() {
    let auth = Arc::new(Auth::disabled());
    let gate = super::middleware::ApiGate { auth, audit: None };
    let router = axum::Router::new()
        .route(
            "/api/v1/undeclared",
            axum::routing::get(|| async { "secret" }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .layer(axum::middleware::from_fn_with_state(gate, api_gate));
    let (status, _, body) = send(&router, sample("GET", "/api/v1/undeclared", None)).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(!body.contains("secret"));
    let (status, _, body) = send(&router, sample("DELETE", "/healthz", None)).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");
}

/// The UI's login: a good token is answered with who it is and an `HttpOnly; SameSite=Strict`
/// session cookie, which then authenticates requests without a header (as that token, with its
/// role); a bad token gets 401 and no cookie; a header wins over the cookie; logging out clears
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_sets_a_session_cookie_that_authenticates_as_its_token() {
    let f = fixture();
    let viewer = f
        .callers
        .iter()
        .find(|c| c.role == Some(Role::Viewer))
        .and_then(|c| c.authorization.as_deref())
        .and_then(|a| a.strip_prefix("Bearer "))
        .unwrap()
        .to_string();
    let login = |token: &str| {
        Request::builder()
            .method("POST")
            .uri("/api/v1/session")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(json_body(token)))
            .unwrap()
    };
    let response = f.router.clone().oneshot(login(&viewer)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let cookie = response
        .headers()
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let pair = cookie.split(';').next().unwrap().to_string();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let me: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(me["name"], "viewer-token", "{me}");
    assert_eq!(me["role"], "viewer", "{me}");

    let with_cookie = |method: &str, path: &str, cookie: &str, authorization: Option<&str>| {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::COOKIE, cookie);
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        request.body(Body::empty()).unwrap()
    };
    let (status, _, body) = send(
        &f.router,
        with_cookie("GET", "/api/v1/incidents", &pair, None),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _, body) = send(
        &f.router,
        with_cookie("GET", "/api/v1/session", &pair, None),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("viewer-token"), "{body}");
    // the cookie is the viewer's: no SQL
    let query = Request::builder()
        .method("POST")
        .uri("/api/v1/query")
        .header(header::COOKIE, &pair)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"sql": "SELECT 1 AS one"}"#))
        .unwrap();
    let (status, _, body) = send(&f.router, query).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // a header wins over the cookie
    let (status, _, _) = send(
        &f.router,
        with_cookie(
            "GET",
            "/api/v1/incidents",
            &pair,
            Some("Bearer ist_unknown"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // a bad token: 401, no cookie; a forged cookie: 401
    let response = f
        .router
        .clone()
        .oneshot(login("ist_not_a_token"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers().get(header::SET_COOKIE).is_none());
    let (status, _, _) = send(
        &f.router,
        with_cookie(
            "GET",
            "/api/v1/incidents",
            "infersight_token=ist_forged",
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // logging out clears the cookie
    let response = f
        .router
        .clone()
        .oneshot(with_cookie("DELETE", "/api/v1/session", &pair, None))
        .await
        .unwrap();
    let cleared = response
        .headers()
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(
        cleared.starts_with("infersight_token=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
}

fn json_body(token: &str) -> String {
    serde_json::json!({ "token": token }).to_string()
}
