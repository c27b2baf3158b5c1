//! The UI's login through an identity provider (issue 22), through the API router against a
//! provider on 127.0.0.1 (`infersight_testkit::oidc_provider`, endpoints discovered): the
//! login page learns the method; a login goes to the provider with PKCE, comes back with a code,
//! and the callback sets the session cookie to the ID token, whose claims name the caller, role
//! and orgs. Refused, each with its page: the provider's denial (its text escaped), a state
//! cookie of another browser, a replayed callback, an ID token of another login's nonce, a
//! wrong client secret; without `redirect_url` there is no such login.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use infersight_server::auth::oidc::{Oidc, OidcConfig};
use infersight_server::auth::{Auth, AuthSettings, Role, TokenFile};
use infersight_testkit::oidc_provider::{Behaviour, OidcProvider};
use tower::ServiceExt;

/// What one request to the router answered.
struct Answer {
    status: StatusCode,
    location: Option<String>,
    cookies: Vec<String>,
    body: String,
}

async fn get(api: &axum::Router, uri: &str, cookie: Option<&str>) -> Answer {
    let mut request = Request::builder().uri(uri);
    if let Some(cookie) = cookie {
        request = request.header(header::COOKIE, cookie);
    }
    let response = api
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let header_text = |v: &header::HeaderValue| v.to_str().unwrap().to_string();
    let location = response.headers().get(header::LOCATION).map(header_text);
    let cookies = (response.headers().get_all(header::SET_COOKIE).iter())
        .map(header_text)
        .collect();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    Answer {
        status,
        location,
        cookies,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// The `name=value` of the cookie `name` a response sets.
fn set_cookie(answer: &Answer, name: &str) -> Option<String> {
    (answer.cookies.iter())
        .find(|c| c.starts_with(&format!("{name}=")))
        .map(|c| c.split(';').next().unwrap().to_string())
}

/// The API behind authentication with `[auth.oidc]` of `provider` (login on when `secret`
/// says how: `Some(None)` a public client, `Some(Some(s))` a confidential one).
async fn api(
    provider: &OidcProvider,
    secret: Option<Option<&str>>,
) -> (axum::Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokens_file = dir.path().join("tokens.json");
    TokenFile::default().write(&tokens_file).unwrap();
    let mut config = OidcConfig {
        issuer: provider.url.clone(),
        audience: "infersight".into(),
        jwks_url: format!("{}/jwks", provider.url),
        ..OidcConfig::default()
    };
    if let Some(secret) = secret {
        config.redirect_url = "https://infersight.example/api/v1/session/oidc/callback".into();
        if let Some(secret) = secret {
            let path = dir.path().join("client-secret");
            std::fs::write(&path, format!("{secret}\n")).unwrap();
            config.client_secret_file = path.display().to_string();
        }
    }
    let settings = config.settings().unwrap().unwrap();
    // the key set and the discovery document are fetched at start, blocking
    let oidc = tokio::task::spawn_blocking(move || Oidc::open(settings))
        .await
        .unwrap()
        .unwrap();
    let auth = Auth::open(AuthSettings {
        tokens_file: Some(tokens_file),
        trusted_proxies: Vec::new(),
        proxy_role: Role::Viewer,
    })
    .unwrap()
    .with_oidc(oidc);
    let store: Arc<dyn infersight_store::StorageBackend> = Arc::new(
        infersight_store::Store::open(infersight_store::StoreOptions::new(dir.path().join("data")))
            .unwrap(),
    );
    let state = infersight_server::api::ApiState {
        engine: Arc::new(infersight_query::QueryEngine::new(store.clone())),
        store,
        counters: Arc::new(infersight_model::telemetry::Counters::new()),
        max_query_rows: 1000,
        max_dimension_cardinality: 100,
        alerts: None,
        actions: None,
        reports: None,
    };
    (
        infersight_server::api::router_with_auth(state, Arc::new(auth)),
        dir,
    )
}

/// The browser's part: follows the login to the provider and back; the callback's path and
/// query, and the state cookie the login set.
async fn to_provider_and_back(api: &axum::Router) -> (String, String) {
    let begun = get(api, "/api/v1/session/oidc/login", None).await;
    assert_eq!(begun.status, StatusCode::SEE_OTHER, "{}", begun.body);
    let state_cookie = set_cookie(&begun, "infersight_oidc_state").expect("a state cookie");
    let authorize = begun.location.unwrap();
    let back = tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .max_redirects(0)
            .http_status_as_error(false)
            .build()
            .into();
        let response = agent.get(&authorize).call().unwrap();
        assert_eq!(response.status(), 302, "{authorize}");
        response.headers()["location"].to_str().unwrap().to_string()
    })
    .await
    .unwrap();
    let callback = back
        .strip_prefix("https://infersight.example")
        .unwrap_or_else(|| panic!("back elsewhere: {back}"))
        .to_string();
    (callback, state_cookie)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_logs_in_through_the_provider_and_each_forged_step_is_refused() {
    let provider = OidcProvider::start(Behaviour::default());
    let (router, _dir) = api(&provider, Some(None)).await;
    let methods = get(&router, "/api/v1/session/methods", None).await;
    let methods: serde_json::Value = serde_json::from_str(&methods.body).unwrap();
    assert_eq!(
        methods["oidc"]["issuer"],
        provider.url.as_str(),
        "{methods}"
    );

    // a login: to the provider with PKCE and back with a code
    let (callback, state_cookie) = to_provider_and_back(&router).await;
    assert!(
        callback.starts_with("/api/v1/session/oidc/callback?code="),
        "{callback}"
    );
    let done = get(&router, &callback, Some(&state_cookie)).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(
        done.body.contains("Logged in as oidc:alice"),
        "{}",
        done.body
    );
    let session = set_cookie(&done, "infersight_token").expect("the session cookie");
    let attributes = done
        .cookies
        .iter()
        .find(|c| c.starts_with("infersight_token="))
        .unwrap();
    assert!(
        attributes.contains("HttpOnly") && attributes.contains("SameSite=Strict"),
        "{attributes}"
    );
    let max_age: u64 = attributes
        .split("Max-Age=")
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (500..=600).contains(&max_age),
        "the session ends with the ID token: {max_age}"
    );
    // who is logged in: the ID token's claims
    let who = get(&router, "/api/v1/session", Some(&session)).await;
    assert_eq!(who.status, StatusCode::OK, "{}", who.body);
    let who: serde_json::Value = serde_json::from_str(&who.body).unwrap();
    assert_eq!(
        (who["name"].as_str(), who["role"].as_str()),
        (Some("oidc:alice"), Some("analyst"))
    );
    assert_eq!(who["orgs"], serde_json::json!(["acme"]));
    assert_eq!(provider.issued(), 1);

    // the same callback again: its state is used
    let replayed = get(&router, &callback, Some(&state_cookie)).await;
    assert_eq!(replayed.status, StatusCode::BAD_REQUEST);
    assert!(replayed.body.contains("used already"), "{}", replayed.body);

    // a code slipped into another browser: its state cookie does not match
    let (callback, _) = to_provider_and_back(&router).await;
    let (_, other_browser) = to_provider_and_back(&router).await;
    let forged = get(&router, &callback, Some(&other_browser)).await;
    assert_eq!(forged.status, StatusCode::BAD_REQUEST);
    assert!(
        forged.body.contains("not started in this browser"),
        "{}",
        forged.body
    );
    assert!(set_cookie(&forged, "infersight_token").is_none());

    // the provider denies: its words shown, escaped
    provider.set(|b| b.deny = true);
    let (callback, state_cookie) = to_provider_and_back(&router).await;
    let denied = get(&router, &callback, Some(&state_cookie)).await;
    assert_eq!(denied.status, StatusCode::UNAUTHORIZED);
    assert!(
        denied
            .body
            .contains("access_denied &lt;b&gt;not you&lt;/b&gt;"),
        "{}",
        denied.body
    );

    // an ID token of another login's nonce
    provider.set(|b| {
        b.deny = false;
        b.wrong_nonce = true;
    });
    let (callback, state_cookie) = to_provider_and_back(&router).await;
    let replayed_token = get(&router, &callback, Some(&state_cookie)).await;
    assert_eq!(replayed_token.status, StatusCode::UNAUTHORIZED);
    assert!(
        replayed_token.body.contains("nonce"),
        "{}",
        replayed_token.body
    );
    assert!(set_cookie(&replayed_token, "infersight_token").is_none());

    // an ID token without an infersight role: the provider knows the user, infersight does not
    provider.set(|b| {
        b.wrong_nonce = false;
        b.role = "nobody".into();
    });
    let (callback, state_cookie) = to_provider_and_back(&router).await;
    let no_role = get(&router, &callback, Some(&state_cookie)).await;
    assert_eq!(no_role.status, StatusCode::FORBIDDEN, "{}", no_role.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confidential_client_sends_its_secret_and_without_a_redirect_there_is_no_login() {
    let provider = OidcProvider::start(Behaviour {
        client_secret: Some("s3cret:&=".into()),
        ..Behaviour::default()
    });
    let (router, _dir) = api(&provider, Some(Some("s3cret:&="))).await;
    let (callback, state_cookie) = to_provider_and_back(&router).await;
    let done = get(&router, &callback, Some(&state_cookie)).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);

    // the provider wants another secret: the exchange fails with its answer
    provider.set(|b| b.client_secret = Some("rotated".into()));
    let (callback, state_cookie) = to_provider_and_back(&router).await;
    let refused = get(&router, &callback, Some(&state_cookie)).await;
    assert_eq!(refused.status, StatusCode::BAD_GATEWAY);
    assert!(refused.body.contains("invalid_client"), "{}", refused.body);

    // JWT bearer tokens only: no login method, no login route
    let (tokens_only, _dir) = api(&provider, None).await;
    let methods = get(&tokens_only, "/api/v1/session/methods", None).await;
    let methods: serde_json::Value = serde_json::from_str(&methods.body).unwrap();
    assert_eq!(methods["oidc"], serde_json::Value::Null, "{methods}");
    assert_eq!(methods["token"], true);
    let begun = get(&tokens_only, "/api/v1/session/oidc/login", None).await;
    assert_eq!(begun.status, StatusCode::NOT_FOUND);
    assert!(begun.body.contains("redirect_url"), "{}", begun.body);
}
