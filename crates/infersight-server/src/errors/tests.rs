//! Every error the API router can answer has a JSON body with an `error` object: each route asked
//! with methods it does not take (405, with `Allow`), unknown paths (404), a body that is not
//! JSON (415), one over the limit (413), malformed bodies and parameters (400), and a handler
//! that panics (500).

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use axum::routing::get;
use infersight_model::telemetry::Counters;
use infersight_query::QueryEngine;
use infersight_store::{StorageBackend, Store, StoreOptions};
use tower::ServiceExt as _;

use crate::state::ApiState;

/// Every API route and the methods it takes.
const ROUTES: &[(&str, &[&str])] = &[
    ("/healthz", &["GET"]),
    ("/metrics", &["GET"]),
    ("/api/v1/query", &["POST"]),
    ("/api/v1/dimensions", &["GET"]),
    ("/api/v1/sli", &["GET"]),
    ("/api/v1/sli/derived", &["GET"]),
    ("/api/v1/rca", &["POST"]),
    ("/api/v1/slo", &["GET"]),
    ("/api/v1/alerts", &["GET"]),
    ("/api/v1/actions", &["GET"]),
    ("/api/v1/stats", &["GET"]),
    ("/api/v1/incidents", &["GET"]),
    ("/api/v1/incidents/inc-1", &["GET"]),
    ("/api/v1/incidents/inc-1/report", &["GET"]),
    ("/api/v1/incidents/inc-1/confirm", &["POST"]),
    ("/api/v1/incidents/inc-1/reject", &["POST"]),
];

struct Answer {
    status: StatusCode,
    content_type: String,
    allow: String,
    body: serde_json::Value,
    text: String,
}

fn state(dir: &std::path::Path) -> ApiState {
    let store: Arc<dyn StorageBackend> =
        Arc::new(Store::open(StoreOptions::new(dir.join("data"))).unwrap());
    ApiState {
        engine: Arc::new(QueryEngine::new(store.clone())),
        store,
        counters: Arc::new(Counters::new()),
        max_query_rows: 100,
        max_dimension_cardinality: 100,
        alerts: None,
        actions: None,
        reports: None,
    }
}

async fn send(router: &Router, request: Request<Body>) -> Answer {
    let response = router.clone().oneshot(request).await.unwrap();
    let header_of = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (content_type, allow) = (header_of(header::CONTENT_TYPE), header_of(header::ALLOW));
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Answer {
        status,
        content_type,
        allow,
        body: serde_json::from_str(&text).unwrap_or_default(),
        text,
    }
}

fn request(method: &str, uri: &str, content_type: &str, body: Vec<u8>) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body))
        .unwrap()
}

/// The answer is an error with a JSON body whose `error` names `kind` and says something.
fn assert_json_error(what: &str, answer: &Answer, status: StatusCode, kind: &str) {
    assert_eq!(answer.status, status, "{what}: {}", answer.text);
    assert!(
        answer.content_type.starts_with("application/json"),
        "{what}: content type `{}`, body {}",
        answer.content_type,
        answer.text
    );
    assert_eq!(
        answer.body["error"]["kind"], kind,
        "{what}: {}",
        answer.text
    );
    assert!(
        answer.body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{what}: no message in {}",
        answer.text
    );
}

#[tokio::test]
async fn every_route_asked_with_a_wrong_method_and_every_unknown_path_answers_json() {
    let dir = tempfile::tempdir().unwrap();
    let router = crate::api::router(state(dir.path()));
    for (path, methods) in ROUTES {
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            if methods.contains(&method) {
                continue;
            }
            let answer = send(
                &router,
                request(method, path, "application/json", b"{}".into()),
            )
            .await;
            let what = format!("{method} {path}");
            assert_json_error(
                &what,
                &answer,
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
            );
            for allowed in *methods {
                assert!(
                    answer.allow.contains(allowed),
                    "{what}: Allow `{}`",
                    answer.allow
                );
            }
        }
    }
    for path in [
        "/api/v1/nope",
        "/api/v2/query",
        "/api/v1/incidents/inc-1/report/extra",
        "/api",
        "/nope",
    ] {
        for method in ["GET", "POST"] {
            let answer = send(
                &router,
                request(method, path, "application/json", Vec::new()),
            )
            .await;
            assert_json_error(
                &format!("{method} {path}"),
                &answer,
                StatusCode::NOT_FOUND,
                "not_found",
            );
        }
    }
}

#[tokio::test]
async fn rejected_bodies_and_parameters_answer_json_with_their_own_status() {
    let dir = tempfile::tempdir().unwrap();
    let router = crate::api::router(state(dir.path()));
    let sql = br#"{"sql": "SELECT 1"}"#.to_vec();
    let cases: Vec<(&str, Request<Body>, StatusCode, &str)> = vec![
        (
            "a query body declared as text",
            request("POST", "/api/v1/query", "text/plain", sql.clone()),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            "an rca body declared as a form",
            request(
                "POST",
                "/api/v1/rca",
                "application/x-www-form-urlencoded",
                b"a=1".into(),
            ),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            "a query body over the 2 MiB limit",
            request(
                "POST",
                "/api/v1/query",
                "application/json",
                format!(r#"{{"sql": "{}"}}"#, "x".repeat(3 << 20)).into_bytes(),
            ),
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
        ),
        (
            "malformed JSON",
            request(
                "POST",
                "/api/v1/query",
                "application/json",
                b"{not json".into(),
            ),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "a field the body does not take",
            request(
                "POST",
                "/api/v1/rca",
                "application/json",
                br#"{"sincee": "-1h"}"#.into(),
            ),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "an unknown query parameter",
            request(
                "GET",
                "/api/v1/sli?sli=ttft&colour=red",
                "application/json",
                Vec::new(),
            ),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            "incidents without a report service",
            request("GET", "/api/v1/incidents", "application/json", Vec::new()),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ];
    for (what, request, status, kind) in cases {
        let answer = send(&router, request).await;
        assert_json_error(what, &answer, status, kind);
    }
    // a success keeps its own body
    let answer = send(
        &router,
        request("POST", "/api/v1/query", "application/json", sql),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
}

#[tokio::test]
async fn a_handler_that_panics_answers_500_with_a_json_body() {
    async fn boom() -> &'static str {
        panic!("a bug in a handler")
    }
    async fn plain_error() -> (StatusCode, &'static str) {
        (StatusCode::SERVICE_UNAVAILABLE, "busy, try later")
    }
    let router = Router::new()
        .route("/boom", get(boom))
        .route("/plain", get(plain_error))
        .layer(axum::middleware::from_fn(super::json_error_bodies));
    let answer = send(
        &router,
        request("GET", "/boom", "application/json", Vec::new()),
    )
    .await;
    assert_json_error(
        "a panic",
        &answer,
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
    );
    let answer = send(
        &router,
        request("GET", "/plain", "application/json", Vec::new()),
    )
    .await;
    assert_json_error(
        "a text error",
        &answer,
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
    );
    assert_eq!(answer.body["error"]["message"], "busy, try later");
}
