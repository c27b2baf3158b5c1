//! An OpenID Connect provider for tests of the UI's login (`auth::oidc_login`): a plain
//! HTTP/1.1 listener on 127.0.0.1 serving the discovery document, the key set of a
//! [`TestIssuer`], an authorization endpoint that logs the user in at once (a 302 back to the
//! client's `redirect_uri` with a code and the `state`) and a token endpoint that trades a code
//! for an ES256 ID token only when the PKCE verifier matches the challenge (S256), the
//! `redirect_uri` is the one asked with and the client secret (HTTP Basic) is right. What it
//! checks, it refuses as a provider would (`400 invalid_grant`, `401 invalid_client`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use base64::Engine;
use serde_json::{Value, json};

use crate::jwt::TestIssuer;

/// How the provider behaves; change it between logins through [`OidcProvider::set`].
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// The ID token's `sub`, `infersight_role` and `infersight_orgs`.
    pub subject: String,
    pub role: String,
    pub orgs: Vec<String>,
    /// The audience (`aud`) of the ID tokens: infersight's client id.
    pub audience: String,
    /// The client secret the token endpoint wants by HTTP Basic; `None`: a public client.
    pub client_secret: Option<String>,
    /// The authorization endpoint answers `error=access_denied` instead of a code.
    pub deny: bool,
    /// The ID token carries another nonce than the login asked for.
    pub wrong_nonce: bool,
    /// Seconds the ID token is valid for.
    pub lifetime_s: i64,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            subject: "alice".into(),
            role: "analyst".into(),
            orgs: vec!["acme".into()],
            audience: "infersight".into(),
            client_secret: None,
            deny: false,
            wrong_nonce: false,
            lifetime_s: 600,
        }
    }
}

/// A code handed out and not yet traded: what its authorization request asked.
struct Grant {
    redirect_uri: String,
    challenge: String,
    nonce: String,
}

struct Inner {
    behaviour: Behaviour,
    grants: HashMap<String, Grant>,
    next_code: u64,
    /// ID tokens issued so far.
    issued: u64,
}

/// The running provider; it stops with the test process.
pub struct OidcProvider {
    /// `http://127.0.0.1:<port>`: also the issuer.
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    key: Arc<TestIssuer>,
}

/// Percent-decodes a query or form value (`+` is a space).
pub fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `a=1&b=2` as a map, values decoded.
pub fn parse_query(text: &str) -> HashMap<String, String> {
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (decode(key), decode(value)))
        .collect()
}

fn respond(stream: &mut impl Write, status: &str, headers: &[(&str, String)], body: &str) {
    let mut text = format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    let _ = stream.write_all(text.as_bytes());
}

impl OidcProvider {
    pub fn start(behaviour: Behaviour) -> OidcProvider {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let provider = OidcProvider {
            url: url.clone(),
            inner: Arc::new(Mutex::new(Inner {
                behaviour,
                grants: HashMap::new(),
                next_code: 1,
                issued: 0,
            })),
            key: Arc::new(TestIssuer::new("provider-key")),
        };
        let (inner, key) = (Arc::clone(&provider.inner), Arc::clone(&provider.key));
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (inner, key, url) = (Arc::clone(&inner), Arc::clone(&key), url.clone());
                std::thread::spawn(move || serve_one(stream, &inner, &key, &url));
            }
        });
        provider
    }

    /// Changes how the provider behaves from the next request on.
    pub fn set(&self, change: impl FnOnce(&mut Behaviour)) {
        change(&mut self.inner.lock().unwrap().behaviour);
    }

    /// ID tokens issued so far.
    pub fn issued(&self) -> u64 {
        self.inner.lock().unwrap().issued
    }

    /// A JWT of `claims` signed with the provider's key (to hand-craft a token).
    pub fn sign(&self, claims: &Value) -> String {
        self.key.sign(json!({}), claims)
    }
}

fn serve_one(stream: std::net::TcpStream, inner: &Mutex<Inner>, key: &TestIssuer, url: &str) {
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut length = 0usize;
    let mut authorization = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("authorization:") {
            authorization = Some(line["authorization:".len()..].trim().to_string());
        }
    }
    let mut body = vec![0; length.min(1 << 20)];
    let _ = reader.read_exact(&mut body);
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let stream = reader.get_mut();
    let json_type = [("content-type", "application/json".to_string())];
    match (method, path) {
        ("GET", "/.well-known/openid-configuration") => {
            let document = json!({
                "issuer": url,
                "authorization_endpoint": format!("{url}/authorize"),
                "token_endpoint": format!("{url}/token"),
                "jwks_uri": format!("{url}/jwks"),
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
            });
            respond(stream, "200 OK", &json_type, &document.to_string());
        }
        ("GET", "/jwks") => respond(stream, "200 OK", &json_type, &TestIssuer::jwks(&[key])),
        ("GET", "/authorize") => authorize(stream, inner, &parse_query(query)),
        ("POST", "/token") => {
            let form = parse_query(&String::from_utf8_lossy(&body));
            let (status, answer) = token(inner, key, url, &form, authorization.as_deref());
            respond(stream, status, &json_type, &answer.to_string());
        }
        _ => respond(stream, "404 Not Found", &[], "not found"),
    }
}

fn authorize(stream: &mut impl Write, inner: &Mutex<Inner>, query: &HashMap<String, String>) {
    let field = |key: &str| query.get(key).cloned().unwrap_or_default();
    let redirect_uri = field("redirect_uri");
    let wanted = field("response_type") == "code"
        && field("code_challenge_method") == "S256"
        && field("scope").split(' ').any(|s| s == "openid");
    if redirect_uri.is_empty() || !wanted {
        respond(
            stream,
            "400 Bad Request",
            &[],
            "not an OIDC code request with PKCE",
        );
        return;
    }
    let state = encode(&field("state"));
    let mut inner = inner.lock().unwrap();
    let separator = if redirect_uri.contains('?') { '&' } else { '?' };
    let location = if inner.behaviour.deny {
        format!(
            "{redirect_uri}{separator}error=access_denied&error_description=%3Cb%3Enot%20you%3C%2Fb%3E&state={state}"
        )
    } else {
        let code = format!("code-{}", inner.next_code);
        inner.next_code += 1;
        inner.grants.insert(
            code.clone(),
            Grant {
                redirect_uri: redirect_uri.clone(),
                challenge: field("code_challenge"),
                nonce: field("nonce"),
            },
        );
        format!("{redirect_uri}{separator}code={code}&state={state}")
    };
    respond(stream, "302 Found", &[("location", location)], "");
}

fn token(
    inner: &Mutex<Inner>,
    key: &TestIssuer,
    url: &str,
    form: &HashMap<String, String>,
    authorization: Option<&str>,
) -> (&'static str, Value) {
    let mut inner = inner.lock().unwrap();
    let behaviour = inner.behaviour.clone();
    let invalid =
        |error: &str, description: &str| json!({"error": error, "error_description": description});
    if let Some(secret) = &behaviour.client_secret {
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                encode(&behaviour.audience),
                encode(secret)
            ))
        );
        if authorization != Some(expected.as_str()) {
            return (
                "401 Unauthorized",
                invalid("invalid_client", "wrong client secret"),
            );
        }
    }
    let field = |key: &str| form.get(key).cloned().unwrap_or_default();
    if field("grant_type") != "authorization_code" {
        return ("400 Bad Request", invalid("unsupported_grant_type", ""));
    }
    let Some(grant) = inner.grants.remove(&field("code")) else {
        return (
            "400 Bad Request",
            invalid("invalid_grant", "unknown or used code"),
        );
    };
    if grant.redirect_uri != field("redirect_uri") {
        return (
            "400 Bad Request",
            invalid("invalid_grant", "another redirect_uri"),
        );
    }
    let challenge = {
        use ring::digest::{SHA256, digest};
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(digest(&SHA256, field("code_verifier").as_bytes()))
    };
    if challenge != grant.challenge {
        return (
            "400 Bad Request",
            invalid("invalid_grant", "PKCE verifier mismatch"),
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let nonce = if behaviour.wrong_nonce {
        "another-login".to_string()
    } else {
        grant.nonce
    };
    let claims = json!({
        "iss": url,
        "aud": behaviour.audience,
        "sub": behaviour.subject,
        "iat": now,
        "exp": now + behaviour.lifetime_s,
        "nonce": nonce,
        "infersight_role": behaviour.role,
        "infersight_orgs": behaviour.orgs,
    });
    inner.issued += 1;
    let id_token = key.sign(json!({}), &claims);
    (
        "200 OK",
        json!({"access_token": "opaque", "token_type": "Bearer", "expires_in": behaviour.lifetime_s, "id_token": id_token}),
    )
}

/// Percent-encodes everything but RFC 3986's unreserved bytes.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
