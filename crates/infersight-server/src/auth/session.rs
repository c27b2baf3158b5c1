//! The UI's login: a browser cannot add `Authorization` to the links it follows (a report, an
//! export), so the UI logs in once with a token (`POST /api/v1/session`), which the server checks
//! and hands back as an `HttpOnly; SameSite=Strict` cookie; the API gate then takes that cookie's
//! token where a request has no `Authorization` header (the header wins when both are sent).
//! `SameSite=Strict` keeps the cookie off requests other sites start, so a page elsewhere cannot
//! act with it; `HttpOnly` keeps it from scripts. `GET /api/v1/session` says who is logged in
//! (the UI shows it); `DELETE /api/v1/session` logs out. With authentication off the session is
//! the anonymous admin's and there is nothing to log in to.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Extension};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::middleware::json_error;
use super::{Auth, Identity, Refusal, Via};
use infersight_model::time::now_ns;

/// The cookie holding a logged-in browser's token.
pub use super::header::SESSION_COOKIE as COOKIE;
/// How long a browser keeps the cookie (the token's own expiry still applies).
const COOKIE_MAX_AGE_S: u64 = 12 * 3600;

/// What `GET /api/v1/session` and a login answer: who the caller is.
fn describe(identity: &Identity, auth_on: bool) -> serde_json::Value {
    json!({
        "name": identity.name,
        "role": identity.role.name(),
        "orgs": identity.tenants,
        "authentication": auth_on,
        "via": match identity.via {
            Via::Open => "open",
            Via::Token => "token",
            Via::Proxy => "proxy",
        },
    })
}

/// `POST /api/v1/session` `{"token": "ist_…"}`: checks the token as the gate would and sets the
/// session cookie; 401 for an unknown, revoked or expired token, 400 for a body without one.
pub async fn login(
    Extension(auth): Extension<Arc<Auth>>,
    connect: Option<Extension<ConnectInfo<SocketAddr>>>,
    body: axum::body::Bytes,
) -> Response {
    let token = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["token"].as_str().map(str::trim).map(str::to_string))
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "expected a JSON body {\"token\": \"<an API token>\"}",
        );
    };
    if !auth.is_enabled() {
        return json_error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "authentication is off: there is nothing to log in to",
        );
    }
    let peer = connect.map(|Extension(ConnectInfo(addr))| addr.ip());
    let header = format!("Bearer {token}");
    match auth.authenticate(Some(header.as_bytes()), |_| None, peer, now_ns()) {
        Ok(identity) => {
            tracing::info!(name = %identity.name, "UI login");
            let cookie = session_cookie(&token, COOKIE_MAX_AGE_S);
            let mut response = axum::Json(describe(&identity, true)).into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(Refusal::Unauthenticated(message)) => {
            tracing::info!(%message, "UI login refused");
            json_error(StatusCode::UNAUTHORIZED, "unauthenticated", &message)
        }
        Err(Refusal::Forbidden(message) | Refusal::TooManyRequests(message, _)) => {
            json_error(StatusCode::FORBIDDEN, "forbidden", &message)
        }
    }
}

/// The session cookie holding `token` for `max_age_s` (at most [`COOKIE_MAX_AGE_S`]).
pub(super) fn session_cookie(token: &str, max_age_s: u64) -> String {
    let max_age_s = max_age_s.min(COOKIE_MAX_AGE_S);
    format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_s}")
}

/// `DELETE /api/v1/session`: the browser drops its cookie.
pub async fn logout() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("infersight_token=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    response
}

/// `GET /api/v1/session`: the caller the gate identified (by header, cookie or proxy).
pub async fn whoami(
    Extension(auth): Extension<Arc<Auth>>,
    Extension(identity): Extension<Identity>,
) -> Response {
    axum::Json(describe(&identity, auth.is_enabled())).into_response()
}
