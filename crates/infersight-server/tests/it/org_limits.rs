//! Per-org ingest limits through the OTLP/HTTP gate (issue 22): an org past its
//! `[auth.orgs.<org>]` rate gets 429 with `Retry-After` (what OTLP exporters retry on), while
//! another org keeps exporting.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use infersight_server::auth::{IngestLimiter, OrgLimitConfig};
use tower::ServiceExt;

use super::orgs::{ACME, server_with};

/// An export with nothing in it, as `token`: its status and `Retry-After`.
async fn empty_export(router: &axum::Router, token: &str) -> (StatusCode, Option<String>) {
    let request = Request::builder()
        .method("POST")
        .uri("/v1/traces")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::from(r#"{"resourceSpans":[]}"#))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_string());
    (response.status(), retry_after)
}

#[tokio::test]
async fn an_org_over_its_ingest_rate_gets_429_and_the_others_do_not() {
    let mut orgs = BTreeMap::new();
    orgs.insert(
        ACME.to_string(),
        OrgLimitConfig {
            ingest_exports_per_s: 0.01,
            ingest_burst: Some(2),
        },
    );
    let server = server_with(IngestLimiter::new(&orgs));
    let (_, acme, _) = &server.tokens[0];
    let (_, globex, _) = &server.tokens[1];
    for _ in 0..2 {
        assert_eq!(
            empty_export(&server.otlp, acme).await,
            (StatusCode::OK, None)
        );
    }
    let (status, retry_after) = empty_export(&server.otlp, acme).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let seconds: u64 = retry_after.expect("Retry-After").parse().unwrap();
    assert!((1..=100).contains(&seconds), "{seconds}");
    for _ in 0..5 {
        assert_eq!(
            empty_export(&server.otlp, globex).await,
            (StatusCode::OK, None)
        );
    }
}
