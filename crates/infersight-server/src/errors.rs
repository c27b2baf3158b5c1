//! Error answers of the API router that no handler writes: an unknown path (404), a known path
//! asked with the wrong method (405), and the rejections of axum's extractors (a body over the
//! limit: 413, a body that is not `application/json`: 415, a malformed path or query: 400).
//! Each gets the JSON body every handler's [`ApiError`](crate::state::ApiError) has,
//! `{"error": {"kind": …, "message": …}}`, so a client (the web UI, a script) reads one shape
//! whatever failed; [`json_error_bodies`] is the net under everything else (a handler's panic
//! included: 500), so an error answer without a JSON body cannot leave the router.

use axum::Json;
use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The longest text body of an error answer that is kept as its message (rejection texts are
/// one line; anything longer is cut).
const MAX_MESSAGE_BYTES: usize = 4096;

/// The `kind` word of an error status: the words `ApiError` uses, and the status's own reason
/// for the rest (`method_not_allowed`, `unsupported_media_type`).
pub fn kind_of(status: StatusCode) -> String {
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => "bad_request".into(),
        StatusCode::PAYLOAD_TOO_LARGE => "too_large".into(),
        StatusCode::NOT_FOUND => "not_found".into(),
        StatusCode::SERVICE_UNAVAILABLE => "unavailable".into(),
        StatusCode::INTERNAL_SERVER_ERROR => "internal".into(),
        other => other
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase()
            .replace([' ', '-'], "_"),
    }
}

/// An error answer with the API's JSON body.
pub fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = json!({ "error": { "kind": kind_of(status), "message": message.into() } });
    (status, Json(body)).into_response()
}

/// The router's fallback: no route has this path.
pub async fn not_found(method: Method, uri: Uri) -> Response {
    json_error(
        StatusCode::NOT_FOUND,
        format!(
            "no route {method} {}; the API is under /api/v1 (see the README's API table)",
            uri.path()
        ),
    )
}

/// The answer to a known path asked with a method it does not take (axum adds `Allow`).
pub async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    json_error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} does not take {method}", uri.path()),
    )
}

/// A handler's task that ends with the future waiting for it.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    async fn wait(mut self) -> Result<T, tokio::task::JoinError> {
        (&mut self.0).await
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Gives every error answer (status 400 or more) that has no JSON body one, keeping its status
/// and headers (`Allow` of a 405): the text of the original body becomes the message. A handler
/// that panics answers 500 (it runs as its own task, so the panic ends only that task) instead of
/// a dropped connection.
pub async fn json_error_bodies(request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    // aborted when this future is dropped (the client hung up), so the handler's work stops too
    let handler = AbortOnDrop(tokio::spawn(next.run(request)));
    let response = match handler.wait().await {
        Ok(response) => response,
        Err(error) => {
            tracing::error!(%method, %path, %error, "an API handler failed");
            return json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{method} {path} failed inside the server (see its log)"),
            );
        }
    };
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if status.as_u16() < 400 || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, MAX_MESSAGE_BYTES).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase()
    } else {
        text
    };
    let body = json!({ "error": { "kind": kind_of(status), "message": message } });
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(bytes))
}

/// A JSON request body whose rejection keeps its status: 415 for a body that is not declared
/// `application/json`, 413 for one over the limit, 400 for malformed JSON or fields the body
/// does not take; always with the JSON error body.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    Json<T>: FromRequest<S, Rejection = axum::extract::rejection::JsonRejection>,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => {
                let status = match rejection.status() {
                    status @ (StatusCode::PAYLOAD_TOO_LARGE
                    | StatusCode::UNSUPPORTED_MEDIA_TYPE) => status,
                    _ => StatusCode::BAD_REQUEST,
                };
                Err(json_error(
                    status,
                    format!("invalid request body: {}", rejection.body_text()),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests;
