//! OIDC / JWT bearer tokens (`[auth.oidc]`): an identity provider's access or ID token sent as
//! `Authorization: Bearer <JWT>` (or logged in through the UI's token form) is accepted when its
//! signature verifies against the provider's JSON Web Key Set and its claims hold: `iss` is the
//! configured issuer, `aud` names the configured audience, `exp` / `nbf` allow now within the
//! clock skew. The caller's name, role and orgs come from claims (`sub`, `infersight_role`,
//! `infersight_orgs` by default). Algorithms: RS256 and ES256 (ring); `none` and the HMAC ones
//! are refused (a shared secret is no provider's signature). The key set is read from a file or
//! fetched from a URL (https verified against the web's roots), at start and again on SIGHUP and
//! every `jwks_refresh`; a key rotated in shows up within that interval.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::RwLock;
use ring::signature::{self, UnparsedPublicKey};
use serde::{Deserialize, Serialize};

use super::role::Role;
use super::{Identity, Refusal, Via};

/// `[auth.oidc]` as written; `issuer` empty: off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OidcConfig {
    /// The provider's issuer (`iss`), e.g. `https://login.example.com/realms/ml`.
    pub issuer: String,
    /// The audience a token must name (`aud`): the client id infersight is registered as.
    pub audience: String,
    /// The key set as a file (JWKS JSON) …
    pub jwks_file: String,
    /// … or fetched from the provider (`https://…/protocol/openid-connect/certs`).
    pub jwks_url: String,
    /// How often the key set is read again (`10m`).
    pub jwks_refresh: String,
    /// Tolerance on `exp` and `nbf`, seconds.
    pub clock_skew_s: u64,
    /// The claim naming the caller in logs and the audit (never an e-mail by default).
    pub name_claim: String,
    /// The claim holding the role (`viewer`, `analyst`, `operator`, `admin`, `ingest`; a list
    /// gives the highest of those it names).
    pub role_claim: String,
    /// The claim holding the orgs (a string or a list); absent: bound to none.
    pub orgs_claim: String,
    /// The UI's login through the provider (`auth::oidc_login`): where the provider sends the
    /// browser back, `https://<infersight>/api/v1/session/oidc/callback` as registered with
    /// it; empty: the UI logs in with tokens only. The client id is `audience`.
    pub redirect_url: String,
    /// A file holding the client secret (a confidential client); empty: a public client
    /// (PKCE only).
    pub client_secret_file: String,
    /// The provider's endpoints; empty: read from `<issuer>/.well-known/openid-configuration`
    /// at start.
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    /// The scopes asked for (`openid` is always among them).
    pub scopes: String,
}

impl Default for OidcConfig {
    fn default() -> Self {
        OidcConfig {
            issuer: String::new(),
            audience: String::new(),
            jwks_file: String::new(),
            jwks_url: String::new(),
            jwks_refresh: "10m".into(),
            clock_skew_s: 60,
            name_claim: "sub".into(),
            role_claim: "infersight_role".into(),
            orgs_claim: "infersight_orgs".into(),
            redirect_url: String::new(),
            client_secret_file: String::new(),
            authorization_endpoint: String::new(),
            token_endpoint: String::new(),
            scopes: "openid profile".into(),
        }
    }
}

/// Where the key set comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    File(PathBuf),
    Url(String),
}

/// `[auth.oidc]` resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcSettings {
    pub issuer: String,
    pub audience: String,
    pub jwks: JwksSource,
    pub refresh: Duration,
    pub clock_skew_s: i64,
    pub name_claim: String,
    pub role_claim: String,
    pub orgs_claim: String,
    /// The UI's login through the provider; `None`: tokens only.
    pub login: Option<super::oidc_login::LoginSettings>,
}

impl OidcConfig {
    /// `None` when off; every problem, each naming `auth.oidc.KEY`.
    pub fn settings(&self) -> Result<Option<OidcSettings>, Vec<String>> {
        if self.issuer.is_empty() && self.jwks_file.is_empty() && self.jwks_url.is_empty() {
            return Ok(None);
        }
        let mut errors = Vec::new();
        if self.issuer.is_empty() {
            errors.push("auth.oidc.issuer: must be set (the provider's `iss`)".to_string());
        }
        if self.audience.is_empty() {
            errors.push("auth.oidc.audience: must be set (infersight's client id)".to_string());
        }
        let jwks = match (self.jwks_file.is_empty(), self.jwks_url.is_empty()) {
            (false, true) => Some(JwksSource::File(PathBuf::from(&self.jwks_file))),
            (true, false)
                if self.jwks_url.starts_with("https://")
                    || self.jwks_url.starts_with("http://") =>
            {
                Some(JwksSource::Url(self.jwks_url.clone()))
            }
            (true, false) => {
                errors.push(format!(
                    "auth.oidc.jwks_url: `{}` is not an http(s) URL",
                    self.jwks_url
                ));
                None
            }
            _ => {
                errors.push("auth.oidc: set one of jwks_file and jwks_url".to_string());
                None
            }
        };
        let refresh = infersight_model::time::parse_duration_ns(&self.jwks_refresh)
            .and_then(|ns| u64::try_from(ns).ok())
            .map(Duration::from_nanos)
            .filter(|d| *d >= Duration::from_secs(10));
        if refresh.is_none() {
            errors.push(format!(
                "auth.oidc.jwks_refresh: `{}` is not a duration of at least 10s",
                self.jwks_refresh
            ));
        }
        for (key, value) in [
            ("name_claim", &self.name_claim),
            ("role_claim", &self.role_claim),
            ("orgs_claim", &self.orgs_claim),
        ] {
            if value.is_empty() {
                errors.push(format!("auth.oidc.{key}: must not be empty"));
            }
        }
        let keys = super::oidc_login::LoginKeys {
            redirect_url: &self.redirect_url,
            client_secret_file: &self.client_secret_file,
            authorization_endpoint: &self.authorization_endpoint,
            token_endpoint: &self.token_endpoint,
            scopes: &self.scopes,
        };
        let login = super::oidc_login::LoginSettings::of(&keys).unwrap_or_else(|mut more| {
            errors.append(&mut more);
            None
        });
        match (jwks, refresh) {
            (Some(jwks), Some(refresh)) if errors.is_empty() => Ok(Some(OidcSettings {
                issuer: self.issuer.clone(),
                audience: self.audience.clone(),
                jwks,
                refresh,
                clock_skew_s: i64::try_from(self.clock_skew_s).unwrap_or(i64::MAX),
                name_claim: self.name_claim.clone(),
                role_claim: self.role_claim.clone(),
                orgs_claim: self.orgs_claim.clone(),
                login,
            })),
            _ => Err(errors),
        }
    }
}

/// One verification key of the set.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    /// RS256: modulus and exponent, big-endian.
    Rsa {
        kid: Option<String>,
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// ES256: the uncompressed P-256 point (`04 ‖ x ‖ y`).
    P256 { kid: Option<String>, point: Vec<u8> },
}

impl Key {
    fn kid(&self) -> Option<&str> {
        match self {
            Key::Rsa { kid, .. } | Key::P256 { kid, .. } => kid.as_deref(),
        }
    }
}

/// The verifier: settings and the key set as last read.
pub struct Oidc {
    settings: OidcSettings,
    keys: RwLock<Arc<Vec<Key>>>,
    /// The UI's login through the provider, its endpoints resolved.
    login: Option<super::oidc_login::OidcLogin>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.settings.issuer)
            .field("keys", &self.keys.read().len())
            .finish_non_exhaustive()
    }
}

impl Oidc {
    /// Reads (or fetches) the key set now; an error names the source and what is wrong.
    /// With a login (`redirect_url`), the provider's endpoints are discovered now when not set.
    pub fn open(settings: OidcSettings) -> Result<Oidc, String> {
        let keys = read_jwks(&settings.jwks)?;
        let login = match &settings.login {
            Some(login) => Some(super::oidc_login::OidcLogin::open(
                login,
                &settings.issuer,
                &settings.audience,
            )?),
            None => None,
        };
        Ok(Oidc {
            settings,
            keys: RwLock::new(Arc::new(keys)),
            login,
        })
    }

    /// The UI's login through the provider, when `redirect_url` is set.
    pub fn login(&self) -> Option<&super::oidc_login::OidcLogin> {
        self.login.as_ref()
    }

    /// The provider's issuer.
    pub fn issuer(&self) -> &str {
        &self.settings.issuer
    }

    pub fn refresh_interval(&self) -> Duration {
        self.settings.refresh
    }

    /// Reads the key set again; on error the keys read before stay. Answers how many keys
    /// when they changed, `None` when the provider serves the same ones.
    pub fn reload(&self) -> Result<Option<usize>, String> {
        let keys = read_jwks(&self.settings.jwks)?;
        let count = keys.len();
        let mut current = self.keys.write();
        if **current == keys {
            return Ok(None);
        }
        *current = Arc::new(keys);
        Ok(Some(count))
    }

    /// The identity of `token` at `now_s` (seconds since the epoch), or why it is refused.
    pub fn verify(&self, token: &str, now_s: i64) -> Result<Identity, Refusal> {
        self.verify_claims(token, now_s)
            .map(|(identity, _)| identity)
    }

    /// [`Oidc::verify`], with the token's claims.
    pub fn verify_claims(
        &self,
        token: &str,
        now_s: i64,
    ) -> Result<(Identity, serde_json::Value), Refusal> {
        let refuse =
            |why: &str| Refusal::Unauthenticated(format!("the JWT is not accepted: {why}"));
        let mut parts = token.split('.');
        let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(refuse("not three dot-separated parts"));
        };
        let header: serde_json::Value =
            decode_json(header_b64).ok_or_else(|| refuse("its header is not base64url JSON"))?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature_b64)
            .map_err(|_| refuse("its signature is not base64url"))?;
        let signed = &token.as_bytes()[..header_b64.len() + 1 + payload_b64.len()];
        let alg = header["alg"].as_str().unwrap_or_default();
        let kid = header["kid"].as_str();
        let keys = Arc::clone(&self.keys.read());
        let candidates = keys
            .iter()
            .filter(|k| kid.is_none_or(|kid| k.kid() == Some(kid)));
        let mut verified = false;
        for key in candidates {
            verified = match (alg, key) {
                ("RS256", Key::Rsa { n, e, .. }) => signature::RsaPublicKeyComponents { n, e }
                    .verify(&signature::RSA_PKCS1_2048_8192_SHA256, signed, &signature)
                    .is_ok(),
                ("ES256", Key::P256 { point, .. }) => {
                    UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                        .verify(signed, &signature)
                        .is_ok()
                }
                _ => false,
            };
            if verified {
                break;
            }
        }
        if !matches!(alg, "RS256" | "ES256") {
            return Err(refuse(&format!(
                "algorithm `{}` is not accepted (RS256, ES256)",
                alg.escape_debug()
            )));
        }
        if !verified {
            return Err(refuse(
                "its signature does not verify against the provider's keys",
            ));
        }
        let claims: serde_json::Value =
            decode_json(payload_b64).ok_or_else(|| refuse("its payload is not base64url JSON"))?;
        self.check_claims(&claims, now_s)
            .map_err(|why| refuse(&why))?;
        let identity = self.identity(&claims)?;
        Ok((identity, claims))
    }

    fn check_claims(&self, claims: &serde_json::Value, now_s: i64) -> Result<(), String> {
        let skew = self.settings.clock_skew_s;
        if claims["iss"].as_str() != Some(self.settings.issuer.as_str()) {
            return Err("its issuer is not the configured one".into());
        }
        let audience = &self.settings.audience;
        let names_audience = match &claims["aud"] {
            serde_json::Value::String(aud) => aud == audience,
            serde_json::Value::Array(auds) => auds.iter().any(|a| a.as_str() == Some(audience)),
            _ => false,
        };
        if !names_audience {
            return Err(format!("it is not meant for the audience `{audience}`"));
        }
        let exp = claims["exp"].as_i64().ok_or("it has no expiry (`exp`)")?;
        if now_s > exp.saturating_add(skew) {
            return Err("it has expired".into());
        }
        if let Some(nbf) = claims["nbf"].as_i64()
            && now_s < nbf.saturating_sub(skew)
        {
            return Err("it is not valid yet (`nbf`)".into());
        }
        Ok(())
    }

    fn identity(&self, claims: &serde_json::Value) -> Result<Identity, Refusal> {
        let settings = &self.settings;
        let name = claims[settings.name_claim.as_str()]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                Refusal::Unauthenticated(format!(
                    "the JWT has no `{}` claim to name its caller",
                    settings.name_claim
                ))
            })?;
        let named: Vec<&str> = match &claims[settings.role_claim.as_str()] {
            serde_json::Value::String(role) => vec![role.as_str()],
            serde_json::Value::Array(roles) => roles.iter().filter_map(|r| r.as_str()).collect(),
            _ => Vec::new(),
        };
        let role = named
            .iter()
            .filter_map(|r| Role::parse(r).ok())
            .max_by_key(|r| r.rank())
            .ok_or_else(|| {
                Refusal::Forbidden(format!(
                    "the JWT of `{}` names no infersight role in its `{}` claim",
                    name.escape_debug(),
                    settings.role_claim
                ))
            })?;
        let tenants = match &claims[settings.orgs_claim.as_str()] {
            serde_json::Value::String(org) => vec![org.clone()],
            serde_json::Value::Array(orgs) => orgs
                .iter()
                .filter_map(|o| o.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        Ok(Identity {
            name: format!("oidc:{name}"),
            role,
            tenants,
            via: Via::Token,
        })
    }
}

/// Whether a bearer token is shaped like a JWT (three base64url parts, a JSON header).
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.bytes().filter(|b| *b == b'.').count() == 2
}

fn decode_json(part: &str) -> Option<serde_json::Value> {
    let bytes = URL_SAFE_NO_PAD.decode(part).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The keys of a JWKS document (`{"keys": [...]}`); keys of other types or curves are skipped,
/// a set with none usable is an error.
fn parse_jwks(text: &[u8]) -> Result<Vec<Key>, String> {
    let document: serde_json::Value =
        serde_json::from_slice(text).map_err(|e| format!("not JSON: {e}"))?;
    let listed = document["keys"].as_array().ok_or("no `keys` array")?;
    let field = |key: &serde_json::Value, name: &str| {
        key[name]
            .as_str()
            .and_then(|v| URL_SAFE_NO_PAD.decode(v).ok())
    };
    let mut keys = Vec::new();
    for key in listed {
        if key["use"].as_str().is_some_and(|u| u != "sig") {
            continue;
        }
        let kid = key["kid"].as_str().map(str::to_string);
        match (key["kty"].as_str(), key["crv"].as_str()) {
            (Some("RSA"), _) => {
                if let (Some(n), Some(e)) = (field(key, "n"), field(key, "e")) {
                    keys.push(Key::Rsa { kid, n, e });
                }
            }
            (Some("EC"), Some("P-256")) => {
                if let (Some(x), Some(y)) = (field(key, "x"), field(key, "y"))
                    && x.len() == 32
                    && y.len() == 32
                {
                    let mut point = vec![4u8];
                    point.extend(x);
                    point.extend(y);
                    keys.push(Key::P256 { kid, point });
                }
            }
            _ => {}
        }
    }
    if keys.is_empty() {
        return Err("no RSA or P-256 signing key in it".into());
    }
    Ok(keys)
}

fn read_jwks(source: &JwksSource) -> Result<Vec<Key>, String> {
    match source {
        JwksSource::File(path) => {
            let text = std::fs::read(path).map_err(|e| {
                format!("auth.oidc.jwks_file: cannot read `{}`: {e}", path.display())
            })?;
            parse_jwks(&text).map_err(|e| format!("auth.oidc.jwks_file: `{}`: {e}", path.display()))
        }
        JwksSource::Url(url) => {
            let text =
                super::oidc_login::fetch(url).map_err(|e| format!("auth.oidc.jwks_url: {e}"))?;
            parse_jwks(&text).map_err(|e| format!("auth.oidc.jwks_url: `{url}`: {e}"))
        }
    }
}

#[cfg(test)]
#[path = "oidc_tests.rs"]
mod tests;
