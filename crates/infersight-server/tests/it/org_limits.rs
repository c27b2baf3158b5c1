//! Per-org limits (issue 22): through the OTLP/HTTP gate, an org past its `[auth.orgs.<org>]`
//! rate gets 429 with `Retry-After` (what OTLP exporters retry on), while another org keeps
//! exporting; through the API gate, an org running its `max_concurrent_queries` statements gets
//! 429 for the next one while another org's run; an org whose rows take its
//! `max_storage_bytes` in segments gets 429 for its exports until it stores less, and sees its
//! usage against the limit in `/api/v1/stats`.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use infersight_server::auth::OrgLimitConfig;
use tower::ServiceExt;

use super::orgs::{ACME, GLOBEX, export, exports, server_with};

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
            ingest_exports_per_s: Some(0.01),
            ingest_burst: Some(2),
            ..OrgLimitConfig::default()
        },
    );
    let server = server_with(&orgs);
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

/// `POST /api/v1/query` as `token`: status, `Retry-After` and body.
async fn query(router: &axum::Router, token: &str) -> (StatusCode, Option<String>, String) {
    let request = Request::builder()
        .method("POST")
        .uri("/api/v1/query")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::from(
            r#"{"sql": "SELECT count(*) AS n FROM requests"}"#,
        ))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_string());
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        retry_after,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test]
async fn an_org_running_its_most_statements_gets_429_and_the_others_do_not() {
    let mut orgs = BTreeMap::new();
    orgs.insert(
        ACME.to_string(),
        OrgLimitConfig {
            max_concurrent_queries: Some(1),
            ..OrgLimitConfig::default()
        },
    );
    let server = server_with(&orgs);
    let (_, _, acme) = &server.tokens[0];
    let (_, _, globex) = &server.tokens[1];
    assert_eq!(query(&server.api, acme).await.0, StatusCode::OK);
    // a statement of acme's still running (its slot held as the gate holds it)
    let running = server
        .auth
        .admit_query(&infersight_query::OrgScope::org(ACME))
        .unwrap();
    let (status, retry_after, body) = query(&server.api, acme).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert!(
        body.contains("auth.orgs.acme.max_concurrent_queries"),
        "{body}"
    );
    let (status, _, body) = query(&server.api, globex).await;
    assert_eq!(status, StatusCode::OK, "another org is not held up: {body}");
    // the admin reads every org and is not limited by one
    assert_eq!(query(&server.api, &server.admin).await.0, StatusCode::OK);
    drop(running);
    assert_eq!(query(&server.api, acme).await.0, StatusCode::OK);
}

/// `GET /api/v1/stats` as `token`: the body.
async fn stats(router: &axum::Router, token: &str) -> serde_json::Value {
    let request = Request::builder()
        .uri("/api/v1/stats")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn an_org_storing_its_limit_gets_429_until_it_stores_less_and_the_others_do_not() {
    let bodies = exports("");
    let mut orgs = BTreeMap::new();
    orgs.insert(
        ACME.to_string(),
        OrgLimitConfig {
            max_storage_bytes: Some(10_000),
            retention: Some("1h".into()),
            ..OrgLimitConfig::default()
        },
    );
    let server = server_with(&orgs);
    let (_, acme, acme_analyst) = &server.tokens[0];
    let (_, globex, _) = &server.tokens[1];
    let count = || {
        use infersight_store::StorageBackend;
        server
            .auth
            .storage_quota()
            .record(&server.store.stats().orgs);
    };
    // under its limit until what it sent is flushed and counted (as `serve` counts every few
    // seconds): the limit is on stored bytes, not on what is in flight
    for body in &bodies[..bodies.len() / 2] {
        assert_eq!(
            export(&server.otlp, acme, None, body.clone()).await,
            StatusCode::OK
        );
    }
    use infersight_store::StorageBackend;
    server.store.flush().unwrap();
    count();
    let stored = server.store.stats().orgs[ACME];
    assert!(
        stored.bytes >= 10_000,
        "the half scenario stores {stored:?}"
    );
    let (status, retry_after) = empty_export(&server.otlp, acme).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let seconds: u64 = retry_after.expect("Retry-After").parse().unwrap();
    assert!(seconds >= 5, "{seconds}");
    let refused = export(&server.otlp, acme, None, bodies[bodies.len() - 1].clone()).await;
    assert_eq!(refused, StatusCode::TOO_MANY_REQUESTS);
    // another org, without a limit, exports on
    for body in &bodies[..3] {
        assert_eq!(
            export(&server.otlp, globex, None, body.clone()).await,
            StatusCode::OK
        );
    }
    // the org sees its usage against its limit
    let seen = stats(&server.api, acme_analyst).await;
    assert_eq!(seen["storage"][ACME]["bytes"], stored.bytes, "{seen}");
    assert_eq!(seen["storage"][ACME]["rows"], stored.rows, "{seen}");
    assert_eq!(seen["storage"][ACME]["limit_bytes"], 10_000, "{seen}");
    assert!(seen["storage"].get(GLOBEX).is_none(), "{seen}");
    // the admin sees every org's usage (once globex's rows are flushed)
    server.store.flush().unwrap();
    let all = stats(&server.api, &server.admin).await;
    assert_eq!(all["orgs"][ACME]["bytes"], stored.bytes, "{all}");
    assert!(all["orgs"][GLOBEX]["rows"].as_u64().unwrap() > 0, "{all}");
    // its own retention made room (globex keeps its rows): counted again, acme exports again
    let removed = server
        .store
        .apply_retention(infersight_model::time::now_ns() + 2 * 3_600 * 1_000_000_000)
        .unwrap();
    assert_eq!(removed.rows_removed, stored.rows, "{removed:?}");
    count();
    assert!(!server.store.stats().orgs.contains_key(ACME));
    assert_eq!(
        empty_export(&server.otlp, acme).await,
        (StatusCode::OK, None)
    );
}
