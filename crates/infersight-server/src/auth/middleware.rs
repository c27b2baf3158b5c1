//! The gates: axum middleware in front of the API routes and the two OTLP receivers. The API
//! gate finds the matched route in `routes::ROUTES`, authenticates, authorizes, hands the
//! [`Identity`] to the handler (a request extension) and writes the access audit line of the
//! routes that read or change data. Refusals are JSON (`{"error": {"kind", "message"}}`) on the
//! API, OTLP's own error body on OTLP/HTTP and a gRPC status on OTLP/gRPC.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use infersight_model::time::now_ns;
use infersight_query::audit::{AccessAudit, AccessContext, AccessRecord, AccessedData, Surface};
use serde_json::json;

use super::routes::{self, Audit, Lookup};
use super::{Access, Auth, Identity, Refusal, Role, authorize};

/// What the API gate needs: the authenticator and the access audit (if any).
#[derive(Clone)]
pub struct ApiGate {
    pub auth: Arc<Auth>,
    pub audit: Option<Arc<AccessAudit>>,
}

/// The API's error body, as `state::ApiError` writes it.
pub(super) fn json_error(status: StatusCode, kind: &str, message: &str) -> Response {
    let mut response = (
        status,
        Json(json!({ "error": { "kind": kind, "message": message } })),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"infersight\""),
        );
    }
    response
}

fn refusal_response(refusal: &Refusal) -> Response {
    match refusal {
        Refusal::Unauthenticated(message) => {
            json_error(StatusCode::UNAUTHORIZED, "unauthenticated", message)
        }
        Refusal::Forbidden(message) => json_error(StatusCode::FORBIDDEN, "forbidden", message),
        Refusal::TooManyRequests(message, retry_after_s) => {
            let mut response = json_error(StatusCode::TOO_MANY_REQUESTS, "unavailable", message);
            insert_retry_after(&mut response, *retry_after_s);
            response
        }
    }
}

fn insert_retry_after(response: &mut Response, seconds: u64) {
    if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// Authenticates a request from its headers (`Authorization`, else the UI's session cookie:
/// `super::session`) and peer.
fn identify(
    auth: &Auth,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Result<Identity, Refusal> {
    let from_cookie = super::header::cookie_token(headers).map(|token| format!("Bearer {token}"));
    auth.authenticate(
        headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes)
            .or(from_cookie.as_deref().map(str::as_bytes)),
        |name| header_text(headers, name),
        peer.map(|addr| addr.ip()),
        now_ns(),
    )
}

/// The API gate (`Router::layer`, so it runs after routing and sees the matched route).
pub async fn api_gate(State(gate): State<ApiGate>, mut request: Request, next: Next) -> Response {
    // no route matched: the router's own 404
    let Some(path) = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
    else {
        return next.run(request).await;
    };
    let rule = match routes::lookup(request.method(), &path) {
        Lookup::Rule(rule) => rule,
        Lookup::MethodNotListed => {
            return json_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                &format!("{} is not served on {path}", request.method()),
            );
        }
        Lookup::Undeclared => {
            tracing::error!(%path, "a route without a declared role was called; refused");
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "this route declares no role (auth::routes::ROUTES); refused",
            );
        }
    };
    let Access::Role(required) = rule.access else {
        return next.run(request).await;
    };
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr);
    let identity = match identify(&gate.auth, request.headers(), peer) {
        Ok(identity) => identity,
        Err(refusal) => return refusal_response(&refusal),
    };
    let what = format!("{} {}", request.method(), request.uri().path());
    if let Err(refusal) = authorize(&identity, required, &format!("{} {path}", rule.method)) {
        if rule.audit != Audit::No {
            audit_call(&gate, &identity, peer, &what, "forbidden").await;
        }
        return refusal_response(&refusal);
    }
    let scope = super::orgs::read_scope(
        &identity,
        header_text(request.headers(), super::orgs::SCOPE_HEADER).as_deref(),
    );
    let scope = match scope {
        Ok(scope) => scope,
        Err(refusal) => {
            if rule.audit != Audit::No {
                audit_call(&gate, &identity, peer, &what, "forbidden").await;
            }
            return refusal_response(&refusal);
        }
    };
    // held until the answer is made: the statement runs inside `next`
    let _slots = match routes::runs_statements(rule) {
        true => match gate.auth.admit_query(&scope) {
            Ok(permit) => Some(permit),
            Err(refusal) => {
                if rule.audit != Audit::No {
                    audit_call(&gate, &identity, peer, &what, "throttled").await;
                }
                return refusal_response(&refusal);
            }
        },
        false => None,
    };
    request.extensions_mut().insert(scope);
    request.extensions_mut().insert(identity.clone());
    let response = next.run(request).await;
    if rule.audit == Audit::Call {
        audit_call(&gate, &identity, peer, &what, outcome(response.status())).await;
    }
    response
}

/// The audit's outcome word for an answer's status.
fn outcome(status: StatusCode) -> &'static str {
    match status.as_u16() {
        100..=399 => "ok",
        400 => "bad_request",
        401 => "unauthenticated",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        413 => "too_large",
        429 => "throttled",
        503 => "unavailable",
        402 | 406..=412 | 414..=428 | 430..=499 => "client_error",
        _ => "internal",
    }
}

/// One access-audit line for an API call: who, which route (path without its query string,
/// which may carry filter values), from where (pseudonymized), and how it ended.
async fn audit_call(
    gate: &ApiGate,
    identity: &Identity,
    peer: Option<SocketAddr>,
    what: &str,
    outcome: &str,
) {
    let Some(audit) = gate.audit.clone() else {
        return;
    };
    let context = AccessContext {
        actor: identity.name.clone(),
        client: peer.map(|addr| audit.client_label(addr.ip())),
        surface: Surface::Api,
        what: Some(what.to_string()),
    };
    let mut record = AccessRecord::new(&context, &AccessedData::default(), 0, Ok(()), None);
    record.outcome = outcome.to_string();
    let written = tokio::task::spawn_blocking(move || audit.append(&record)).await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "access audit not written"),
        Err(error) => tracing::warn!(%error, "access audit not written"),
    }
}

/// Authenticates an export and checks it may ingest; the identity and the org the export is
/// stored for (`orgs::write_org`) go on with the request, where the receivers read the org.
fn admit_export(auth: &Auth, request: &mut Request) -> Result<(), Refusal> {
    // proxies name people, not exporters: an export is admitted by its token only
    let identity = auth.authenticate(
        request
            .headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes),
        |_| None,
        None,
        now_ns(),
    )?;
    authorize(&identity, Role::Ingest, "exporting telemetry")?;
    let org = super::orgs::write_org(
        &identity,
        header_text(request.headers(), super::orgs::SCOPE_HEADER).as_deref(),
    )?;
    auth.admit_ingest(&org)?;
    request
        .extensions_mut()
        .insert(infersight_ingest::receivers::IngestOrg(org));
    request.extensions_mut().insert(identity);
    Ok(())
}

/// The OTLP/HTTP gate: 401 / 403 with OTLP's error body (a `google.rpc.Status`, in the
/// encoding the exporter sent) before the body is read.
pub async fn ingest_http_gate(
    State(auth): State<Arc<Auth>>,
    mut request: Request,
    next: Next,
) -> Response {
    match admit_export(&auth, &mut request) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            let encoding = match request
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
            {
                Some(ct) if ct.contains("protobuf") => infersight_ingest::Encoding::Protobuf,
                _ => infersight_ingest::Encoding::Json,
            };
            let (status, code, message, retry_after_s) = match refusal {
                Refusal::Unauthenticated(m) => (StatusCode::UNAUTHORIZED, 16, m, None),
                Refusal::Forbidden(m) => (StatusCode::FORBIDDEN, 7, m, None),
                // RESOURCE_EXHAUSTED; OTLP exporters retry a 429 after Retry-After
                Refusal::TooManyRequests(m, s) => (StatusCode::TOO_MANY_REQUESTS, 8, m, Some(s)),
            };
            let mut response = infersight_ingest::receivers::otlp_http::error_response(
                status, code, message, encoding,
            );
            if let Some(seconds) = retry_after_s {
                insert_retry_after(&mut response, seconds);
            }
            if status == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"infersight\""),
                );
            }
            response
        }
    }
}

/// The OTLP/gRPC gate: the token in the `authorization` metadata; refusals are the gRPC
/// statuses UNAUTHENTICATED and PERMISSION_DENIED.
pub async fn ingest_grpc_gate(
    State(auth): State<Arc<Auth>>,
    mut request: Request,
    next: Next,
) -> Response {
    match admit_export(&auth, &mut request) {
        Ok(()) => next.run(request).await,
        Err(Refusal::Unauthenticated(message)) => {
            tonic::Status::unauthenticated(message).into_http::<axum::body::Body>()
        }
        Err(Refusal::Forbidden(message)) => {
            tonic::Status::permission_denied(message).into_http::<axum::body::Body>()
        }
        Err(Refusal::TooManyRequests(message, _)) => {
            tonic::Status::resource_exhausted(message).into_http::<axum::body::Body>()
        }
    }
}

/// The OTLP/HTTP router behind the ingest gate when `auth` is on (unchanged when off, so
/// zero-config ingest pays nothing).
pub fn guard_otlp_http(router: axum::Router, auth: Option<Arc<Auth>>) -> axum::Router {
    match auth.filter(|auth| auth.is_enabled()) {
        Some(auth) => router.layer(axum::middleware::from_fn_with_state(auth, ingest_http_gate)),
        None => router,
    }
}

/// The OTLP/gRPC services behind the ingest gate when `auth` is on.
pub fn guard_otlp_grpc(
    routes: tonic::service::Routes,
    auth: Option<Arc<Auth>>,
) -> tonic::service::Routes {
    match auth.filter(|auth| auth.is_enabled()) {
        Some(auth) => tonic::service::Routes::from(
            routes
                .into_axum_router()
                .layer(axum::middleware::from_fn_with_state(auth, ingest_grpc_gate)),
        ),
        None => routes,
    }
}
