//! The UI's login through the identity provider (issue 22: "a login page (token or OIDC
//! redirect)"), beside the token login of `auth::session`: the authorization-code flow with PKCE
//! (RFC 7636, S256) and a nonce, as OpenID Connect Core §3.1 has it.
//!
//! `GET /api/v1/session/oidc/login` sends the browser to the provider's authorization endpoint
//! with a fresh `state`, nonce and code challenge, and binds that `state` to the browser with a
//! short-lived `HttpOnly; SameSite=Lax` cookie (Lax: the provider's redirect back is a cross-site
//! navigation). `GET /api/v1/session/oidc/callback` takes the `state` once (it must match the
//! cookie and be at most ten minutes old, so a code from another browser's login cannot be slipped
//! in), trades the code and the verifier for tokens at the token endpoint (with the client secret
//! by HTTP Basic when one is set), verifies the ID token as any JWT of `[auth.oidc]` is verified
//! (signature, issuer, audience = the client id, expiry, role claim) and checks its nonce, then
//! sets the UI's session cookie to it: the caller's name, role and orgs come from its claims, and
//! the session ends with the ID token (the UI then asks to log in again). Every refusal is a small
//! page saying why, with a link to start again.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Extension, Query};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::Mutex;
use ring::rand::SecureRandom;
use serde_json::json;
use sha2::Digest;

use super::middleware::json_error;
use super::{Auth, Refusal};
use infersight_model::time::now_ns;

/// The cookie binding a login's `state` to the browser that started it.
pub const STATE_COOKIE: &str = "infersight_oidc_state";
/// The callback's path; the state cookie is sent to it only.
pub const CALLBACK_PATH: &str = "/api/v1/session/oidc/callback";
/// How long a started login may take at the provider.
const PENDING_TTL_NS: i64 = 10 * 60 * 1_000_000_000;
/// Logins in progress at most (older ones expire first).
const MAX_PENDING: usize = 10_000;

/// `[auth.oidc]`'s login keys, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginSettings {
    pub redirect_url: String,
    /// The client secret's file (read at start); `None`: a public client.
    pub client_secret_file: Option<std::path::PathBuf>,
    /// Both endpoints, or `None` to discover them.
    pub endpoints: Option<(String, String)>,
    pub scopes: String,
}

fn is_http_url(text: &str) -> bool {
    let rest = (text.strip_prefix("https://")).or_else(|| text.strip_prefix("http://"));
    rest.is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace))
}

/// The login's keys of `[auth.oidc]` as written (see `OidcConfig`).
#[derive(Debug, Clone, Copy)]
pub struct LoginKeys<'a> {
    pub redirect_url: &'a str,
    pub client_secret_file: &'a str,
    pub authorization_endpoint: &'a str,
    pub token_endpoint: &'a str,
    pub scopes: &'a str,
}

impl LoginSettings {
    /// The login of `config`, `None` without `redirect_url`; every problem, each naming its key.
    pub fn of(config: &LoginKeys<'_>) -> Result<Option<LoginSettings>, Vec<String>> {
        let mut errors = Vec::new();
        let endpoints = [
            ("authorization_endpoint", config.authorization_endpoint),
            ("token_endpoint", config.token_endpoint),
        ];
        if config.redirect_url.is_empty() {
            let stray = [("client_secret_file", config.client_secret_file)]
                .into_iter()
                .chain(endpoints)
                .filter(|(_, value)| !value.is_empty());
            for (key, _) in stray {
                errors.push(format!(
                    "auth.oidc.{key}: set without auth.oidc.redirect_url (the UI's login needs it)"
                ));
            }
            return if errors.is_empty() {
                Ok(None)
            } else {
                Err(errors)
            };
        }
        if !is_http_url(config.redirect_url) {
            errors.push(format!(
                "auth.oidc.redirect_url: `{}` is not an http(s) URL (https://<infersight>{CALLBACK_PATH})",
                config.redirect_url
            ));
        }
        for (key, value) in endpoints {
            if !value.is_empty() && !is_http_url(value) {
                errors.push(format!("auth.oidc.{key}: `{value}` is not an http(s) URL"));
            }
        }
        let endpoints = match (
            config.authorization_endpoint.is_empty(),
            config.token_endpoint.is_empty(),
        ) {
            (true, true) => None,
            (false, false) => Some((
                config.authorization_endpoint.to_string(),
                config.token_endpoint.to_string(),
            )),
            _ => {
                errors.push(
                    "auth.oidc: set both authorization_endpoint and token_endpoint, or neither \
                     (then they are discovered)"
                        .to_string(),
                );
                None
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Some(LoginSettings {
            redirect_url: config.redirect_url.to_string(),
            client_secret_file: (!config.client_secret_file.is_empty())
                .then(|| config.client_secret_file.into()),
            endpoints,
            scopes: config.scopes.to_string(),
        }))
    }
}

/// A login started and not finished yet.
struct Pending {
    verifier: String,
    nonce: String,
    at_ns: i64,
}

/// The login flow: the provider's endpoints and the logins in progress.
pub struct OidcLogin {
    client_id: String,
    client_secret: Option<String>,
    redirect_url: String,
    authorization_endpoint: String,
    token_endpoint: String,
    scopes: String,
    pending: Mutex<HashMap<String, Pending>>,
}

impl std::fmt::Debug for OidcLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcLogin")
            .field("client_id", &self.client_id)
            .field("authorization_endpoint", &self.authorization_endpoint)
            .finish_non_exhaustive()
    }
}

/// Percent-encodes `text` for a query string (everything but RFC 3986's unreserved bytes).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// 32 random bytes, base64url.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random source");
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The HTTP client towards the provider (key set, discovery, token endpoint): https verified
/// against the web's roots, 10 s for a whole call, a provider's error status read as a body.
pub(super) fn provider_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(std::time::Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into()
}

/// The body of a GET of `url` (at most 1 MiB) when it answers 2xx; else why not.
pub(super) fn fetch(url: &str) -> Result<Vec<u8>, String> {
    let mut response = provider_agent()
        .get(url)
        .call()
        .map_err(|e| format!("fetching `{url}`: {e}"))?;
    if !response.status().is_success() {
        return Err(format!(
            "fetching `{url}`: it answered {}",
            response.status()
        ));
    }
    (response
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_vec())
    .map_err(|e| format!("fetching `{url}`: {e}"))
}

/// The provider's endpoints from its discovery document, which must name `issuer` as its own.
fn discover(issuer: &str) -> Result<(String, String), String> {
    let url = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let text = fetch(&url).map_err(|e| format!("auth.oidc discovery: {e}"))?;
    let document: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| format!("auth.oidc discovery: `{url}` is not JSON: {e}"))?;
    if document["issuer"].as_str() != Some(issuer) {
        return Err(format!(
            "auth.oidc discovery: `{url}` names the issuer {}, not `{issuer}`",
            document["issuer"]
        ));
    }
    let endpoint = |key: &str| {
        (document[key].as_str())
            .filter(|url| is_http_url(url))
            .map(str::to_string)
            .ok_or_else(|| format!("auth.oidc discovery: `{url}` has no http(s) `{key}`"))
    };
    Ok((
        endpoint("authorization_endpoint")?,
        endpoint("token_endpoint")?,
    ))
}

impl OidcLogin {
    /// Reads the client secret and, unless configured, discovers the endpoints of `issuer`;
    /// `client_id` is the audience ID tokens are issued for.
    pub(super) fn open(
        settings: &LoginSettings,
        issuer: &str,
        client_id: &str,
    ) -> Result<OidcLogin, String> {
        let client_secret = match &settings.client_secret_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    format!(
                        "auth.oidc.client_secret_file: cannot read `{}`: {e}",
                        path.display()
                    )
                })?;
                let secret = text.trim().to_string();
                if secret.is_empty() {
                    return Err(format!(
                        "auth.oidc.client_secret_file: `{}` is empty",
                        path.display()
                    ));
                }
                Some(secret)
            }
            None => None,
        };
        let (authorization_endpoint, token_endpoint) = match &settings.endpoints {
            Some(endpoints) => endpoints.clone(),
            None => discover(issuer)?,
        };
        let mut scopes: Vec<&str> = settings.scopes.split_whitespace().collect();
        if !scopes.contains(&"openid") {
            scopes.insert(0, "openid");
        }
        Ok(OidcLogin {
            client_id: client_id.to_string(),
            client_secret,
            redirect_url: settings.redirect_url.clone(),
            authorization_endpoint,
            token_endpoint,
            scopes: scopes.join(" "),
            pending: Mutex::new(HashMap::new()),
        })
    }

    /// Starts a login at `now_ns`: the provider's authorization URL to send the browser to and
    /// the `state` to bind to it; `None` when too many logins are in progress.
    pub fn begin(&self, now_ns: i64) -> Option<(String, String)> {
        let (state, verifier, nonce) = (random_token(), random_token(), random_token());
        let challenge = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
        {
            let mut pending = self.pending.lock();
            pending.retain(|_, p| now_ns.saturating_sub(p.at_ns) < PENDING_TTL_NS);
            if pending.len() >= MAX_PENDING {
                return None;
            }
            pending.insert(
                state.clone(),
                Pending {
                    verifier,
                    nonce: nonce.clone(),
                    at_ns: now_ns,
                },
            );
        }
        let separator = if self.authorization_endpoint.contains('?') {
            '&'
        } else {
            '?'
        };
        let query = [
            ("response_type", "code"),
            ("client_id", &self.client_id),
            ("redirect_uri", &self.redirect_url),
            ("scope", &self.scopes),
            ("state", &state),
            ("nonce", &nonce),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
        ]
        .iter()
        .map(|(key, value)| format!("{key}={}", encode(value)))
        .collect::<Vec<_>>()
        .join("&");
        let location = format!("{}{separator}{query}", self.authorization_endpoint);
        Some((location, state))
    }

    /// The login `state` names, taken (a second callback with it finds nothing), if it is
    /// still pending at `now_ns`: its PKCE verifier and nonce.
    fn take(&self, state: &str, now_ns: i64) -> Option<(String, String)> {
        let pending = self.pending.lock().remove(state)?;
        (now_ns.saturating_sub(pending.at_ns) < PENDING_TTL_NS)
            .then_some((pending.verifier, pending.nonce))
    }

    /// Trades `code` and its `verifier` for tokens: the ID token, or why not (blocking).
    fn exchange(&self, code: &str, verifier: &str) -> Result<String, String> {
        let mut request = provider_agent()
            .post(&self.token_endpoint)
            .header("Accept", "application/json");
        if let Some(secret) = &self.client_secret {
            let pair = format!("{}:{}", encode(&self.client_id), encode(secret));
            let value = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            );
            request = request.header("Authorization", &value);
        }
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &self.redirect_url),
            ("client_id", &self.client_id),
            ("code_verifier", verifier),
        ];
        let endpoint = &self.token_endpoint;
        let mut response = request
            .send_form(form)
            .map_err(|e| format!("the token endpoint `{endpoint}`: {e}"))?;
        let status = response.status();
        let body = (response
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec())
        .map_err(|e| format!("the token endpoint `{endpoint}`: {e}"))?;
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if !status.is_success() {
            let error = answer["error"].as_str().unwrap_or("no error code");
            let description = answer["error_description"].as_str().unwrap_or_default();
            return Err(format!(
                "the token endpoint `{endpoint}` answered {status}: {error} {description}"
            ));
        }
        (answer["id_token"].as_str())
            .filter(|token| !token.is_empty())
            .map(str::to_string)
            .ok_or_else(|| format!("the token endpoint `{endpoint}` answered no `id_token`"))
    }
}

/// The value of cookie `name` in `headers`.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    (headers.get_all(header::COOKIE).iter())
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}

/// A small page: `message`, then on to the UI (at once after a login, by a link otherwise).
fn page(status: StatusCode, message: &str) -> Response {
    let message = infersight_report::charts::escape(message);
    let body = if status.is_success() {
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"refresh\" content=\"0;url=/\"><title>infersight</title></head>\
             <body><p data-oidc-login=\"ok\">{message}</p><p><a href=\"/\">Continue</a></p></body></html>"
        )
    } else {
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>Login refused · infersight</title></head>\
             <body><h1>Login refused</h1><p data-oidc-login=\"refused\">{message}</p>\
             <p><a href=\"/\">Back to infersight</a> · <a href=\"/api/v1/session/oidc/login\">Try again</a></p></body></html>"
        )
    };
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The state cookie: `value` for ten minutes, or cleared.
fn state_cookie(value: Option<&str>) -> HeaderValue {
    let text = match value {
        Some(state) => format!(
            "{STATE_COOKIE}={state}; Path={CALLBACK_PATH}; HttpOnly; SameSite=Lax; Max-Age={}",
            PENDING_TTL_NS / 1_000_000_000
        ),
        None => format!("{STATE_COOKIE}=; Path={CALLBACK_PATH}; HttpOnly; SameSite=Lax; Max-Age=0"),
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// `GET /api/v1/session/methods`: how the UI may log in (public: the login page asks it).
pub async fn methods(Extension(auth): Extension<Arc<Auth>>) -> Response {
    let oidc = auth.oidc().filter(|oidc| oidc.login().is_some());
    axum::Json(json!({
        "authentication": auth.is_enabled(),
        "token": auth.is_enabled(),
        "oidc": oidc.map(|oidc| json!({ "issuer": oidc.issuer(), "login": "/api/v1/session/oidc/login" })),
    }))
    .into_response()
}

/// `GET /api/v1/session/oidc/login`: to the provider (303), the login's `state` in a cookie.
pub async fn begin(Extension(auth): Extension<Arc<Auth>>) -> Response {
    let Some(login) = auth.oidc().and_then(|oidc| oidc.login()) else {
        return json_error(
            StatusCode::NOT_FOUND,
            "not_found",
            "the OIDC login is not configured: set [auth.oidc] redirect_url",
        );
    };
    let Some((location, state)) = login.begin(now_ns()) else {
        return page(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many logins are in progress; try again in a few minutes",
        );
    };
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, location);
    }
    headers.insert(header::SET_COOKIE, state_cookie(Some(&state)));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `GET /api/v1/session/oidc/callback?code=…&state=…`: the provider's answer; see the module.
pub async fn callback(
    Extension(auth): Extension<Arc<Auth>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let mut response = match finish(&auth, &params, &headers).await {
        Ok((token, name, max_age_s)) => {
            tracing::info!(%name, "UI login through the identity provider");
            let mut response = page(StatusCode::OK, &format!("Logged in as {name}."));
            let cookie = super::session::session_cookie(&token, max_age_s);
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().append(header::SET_COOKIE, value);
            }
            response
        }
        Err((status, message)) => {
            tracing::info!(%message, "UI login through the identity provider refused");
            page(status, &message)
        }
    };
    (response.headers_mut()).append(header::SET_COOKIE, state_cookie(None));
    response
}

/// The callback's checks and the code's exchange: the ID token, the caller's name and how long
/// the session may last; or the status and why not.
async fn finish(
    auth: &Arc<Auth>,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<(String, String, u64), (StatusCode, String)> {
    let bad = |message: &str| (StatusCode::BAD_REQUEST, message.to_string());
    let oidc = auth.oidc().cloned();
    let Some(oidc) = oidc.filter(|oidc| oidc.login().is_some()) else {
        return Err((
            StatusCode::NOT_FOUND,
            "the OIDC login is not configured: set [auth.oidc] redirect_url".into(),
        ));
    };
    if let Some(error) = params.get("error") {
        let description = params
            .get("error_description")
            .map(String::as_str)
            .unwrap_or_default();
        return Err((
            StatusCode::UNAUTHORIZED,
            format!("the identity provider refused the login: {error} {description}")
                .trim_end()
                .to_string(),
        ));
    }
    let (Some(code), Some(state)) = (params.get("code"), params.get("state")) else {
        return Err(bad("the identity provider sent no `code` and `state`"));
    };
    if cookie(headers, STATE_COOKIE).as_deref() != Some(state.as_str()) {
        return Err(bad(
            "this login was not started in this browser (its state cookie does not match): \
             start it again",
        ));
    }
    let login = oidc.login().expect("checked above");
    let Some((verifier, nonce)) = login.take(state, now_ns()) else {
        return Err(bad(
            "this login is unknown, used already or older than ten minutes: start it again",
        ));
    };
    let code = code.clone();
    let exchanged = {
        let oidc = Arc::clone(&oidc);
        tokio::task::spawn_blocking(move || {
            let login = oidc.login().expect("checked above");
            login.exchange(&code, &verifier)
        })
        .await
    };
    let id_token = match exchanged {
        Ok(Ok(token)) => token,
        Ok(Err(why)) => return Err((StatusCode::BAD_GATEWAY, why)),
        Err(_) => {
            return Err((
                StatusCode::INTERNAL_SERVER_ERROR,
                "the token exchange failed".into(),
            ));
        }
    };
    let now_s = now_ns() / 1_000_000_000;
    let (identity, claims) =
        oidc.verify_claims(&id_token, now_s)
            .map_err(|refusal| match refusal {
                Refusal::Forbidden(why) => (StatusCode::FORBIDDEN, why),
                Refusal::Unauthenticated(why) | Refusal::TooManyRequests(why, _) => {
                    (StatusCode::UNAUTHORIZED, format!("the ID token: {why}"))
                }
            })?;
    if claims["nonce"].as_str() != Some(nonce.as_str()) {
        return Err((
            StatusCode::UNAUTHORIZED,
            "the ID token's nonce is not this login's (a token replayed from another login)".into(),
        ));
    }
    let left_s = claims["exp"]
        .as_i64()
        .unwrap_or(now_s)
        .saturating_sub(now_s);
    let max_age_s = u64::try_from(left_s).unwrap_or(0).max(1);
    Ok((id_token, identity.name, max_age_s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_name_each_wrong_key_and_login_is_off_without_a_redirect() {
        use super::super::oidc::OidcConfig;
        let config = |f: &dyn Fn(&mut OidcConfig)| {
            let mut config = OidcConfig::default();
            f(&mut config);
            config
        };
        let of = |c: OidcConfig| {
            LoginSettings::of(&LoginKeys {
                redirect_url: &c.redirect_url,
                client_secret_file: &c.client_secret_file,
                authorization_endpoint: &c.authorization_endpoint,
                token_endpoint: &c.token_endpoint,
                scopes: &c.scopes,
            })
        };
        assert_eq!(of(OidcConfig::default()), Ok(None));
        let stray = of(config(&|c| c.token_endpoint = "https://x/t".into()));
        assert_eq!(
            stray.unwrap_err(),
            [
                "auth.oidc.token_endpoint: set without auth.oidc.redirect_url (the UI's login needs it)"
            ]
        );
        let errors = of(config(&|c| {
            c.redirect_url = "infersight.example/callback".into();
            c.authorization_endpoint = "https://idp/authorize".into();
        }))
        .unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("auth.oidc.redirect_url: "),
            "{errors:?}"
        );
        assert!(errors[1].contains("both authorization_endpoint and token_endpoint"));
        let ok = of(config(&|c| {
            c.redirect_url = format!("https://infersight.example{CALLBACK_PATH}");
        }))
        .unwrap()
        .unwrap();
        assert_eq!((ok.endpoints, ok.client_secret_file), (None, None));
    }

    #[test]
    fn a_login_asks_for_a_code_with_pkce_and_its_state_is_taken_once_within_ten_minutes() {
        let settings = LoginSettings {
            redirect_url: format!("https://infersight.example{CALLBACK_PATH}"),
            client_secret_file: None,
            endpoints: Some((
                "https://idp.example/authorize?tenant=ml".into(),
                "https://idp.example/token".into(),
            )),
            scopes: "profile email".into(),
        };
        let login = OidcLogin::open(&settings, "https://idp.example", "infersight").unwrap();
        let (location, state) = login.begin(0).unwrap();
        assert!(
            location.starts_with("https://idp.example/authorize?tenant=ml&response_type=code&"),
            "{location}"
        );
        for part in [
            "client_id=infersight",
            "redirect_uri=https%3A%2F%2Finfersight.example%2Fapi%2Fv1%2Fsession%2Foidc%2Fcallback",
            "scope=openid%20profile%20email",
            "code_challenge_method=S256",
        ] {
            assert!(location.contains(part), "{part}: {location}");
        }
        assert!(location.contains(&format!("state={state}")));
        let challenge = location
            .split('&')
            .find_map(|p| p.strip_prefix("code_challenge="))
            .unwrap();
        let (verifier, nonce) = login.take(&state, 1).unwrap();
        assert_eq!(
            challenge,
            URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()))
        );
        assert!(location.contains(&format!("nonce={nonce}")));
        assert!(login.take(&state, 1).is_none(), "a state is used once");
        let (_, late) = login.begin(0).unwrap();
        assert!(login.take(&late, PENDING_TTL_NS).is_none(), "too late");
        assert_ne!(login.begin(0).unwrap().1, login.begin(0).unwrap().1);
    }

    #[tokio::test]
    async fn refusal_pages_escape_what_the_provider_said_and_cookies_are_found_by_name() {
        let response = page(StatusCode::UNAUTHORIZED, "<script>x</script> & 'y'");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert!(
            body.contains("&lt;script&gt;x&lt;/script&gt; &amp; &#39;y&#39;")
                && !body.contains("<script>"),
            "{body}"
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; infersight_oidc_state=abc; b=2"),
        );
        assert_eq!(cookie(&headers, STATE_COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie(&headers, "c"), None);
    }
}
