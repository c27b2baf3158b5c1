//! The web UI: a handful of hand-written HTML/CSS/JS (ES modules, no build step, no toolchain)
//! embedded in the binary with `include_str!` and served by `infersight serve` on the API port.
//! `/` is the single page; every view's state lives in its query string (`/?page=heatmap&…`), so
//! any view can be shared as a URL. The pages read only the public JSON API (`/api/v1/…`); data
//! no endpoint gives (heatmap cells, breakdowns, requests, logs) comes from SQL over
//! `POST /api/v1/query`.
//!
//! Every answer carries a strict Content-Security-Policy: scripts, styles and fetches only from
//! this origin, no inline script or style, frames only of this origin (the incident report).

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

#[cfg(test)]
mod tests;

/// The policy of every UI answer. `img-src data:` is for the empty favicon; `frame-src 'self'`
/// for the incident report, which is served by the API.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

/// One embedded file: its name under `/ui/`, content type and text.
pub struct Asset {
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// An [`Asset`] of `assets/<name>` with its content type.
macro_rules! asset {
    ($name:literal, $content_type:expr) => {
        Asset {
            name: $name,
            content_type: $content_type,
            body: include_str!(concat!("assets/", $name)),
        }
    };
}

/// Every asset under `/ui/`, in one list so the router test can walk it.
pub const ASSETS: &[Asset] = &[
    asset!("app.css", CSS),
    asset!("logs.css", CSS),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("charts.js", JS),
    asset!("overview.js", JS),
    asset!("heatmap.js", JS),
    asset!("incidents.js", JS),
    asset!("explore.js", JS),
    asset!("compare.js", JS),
    asset!("logs.js", JS),
    asset!("request.js", JS),
];

const INDEX_HTML: &str = include_str!("assets/index.html");

/// The UI's routes, to merge into the API router (they need no state).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/ui/{name}", get(asset))
}

async fn index() -> Response {
    respond("text/html; charset=utf-8", INDEX_HTML)
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(asset) => respond(asset.content_type, asset.body),
        None => (StatusCode::NOT_FOUND, "no such UI asset\n").into_response(),
    }
}

fn respond(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Embedded assets change only with the binary; revalidating is cheap and avoids stale UIs.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
