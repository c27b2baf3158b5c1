//! Authentication and authorization in front of every listener of `serve`: the API and UI port
//! (`middleware::api_gate`, driven by the one route table in `routes`) and both OTLP receivers
//! (`middleware::ingest_http_gate`, `middleware::ingest_grpc_gate`), all answering from one
//! [`Auth`]: the tokens file (`tokens`, hashed API tokens with a role, tenants and an expiry),
//! re-read when it changes or on SIGHUP, and the reverse proxies trusted to name the user.
//!
//! Off by default: with no `[auth] tokens_file` every caller is an anonymous admin, which is
//! today's zero-config behaviour on 127.0.0.1 (`serve` refuses any other address without
//! authentication unless told otherwise, `config::AuthConfig::check_listen`).

pub mod config;
pub mod header;
pub mod limits;
pub mod middleware;
pub mod oidc;
pub mod oidc_login;
pub mod orgs;
pub mod role;
pub mod routes;
pub mod session;
pub mod tokens;

#[cfg(test)]
mod matrix;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

pub use config::{AuthConfig, AuthSettings};
pub use header::{Cidr, parse_bearer};
pub use limits::{IngestLimiter, OrgLimitConfig, OrgQueryPermit, OrgQuerySlots, StorageQuota};
pub use middleware::{api_gate, ingest_grpc_gate, ingest_http_gate};
pub use role::{Access, Role};
pub use tokens::{TokenError, TokenFile, TokenSet};

/// Who is calling, as the handlers and the audit see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The token's name, the user a trusted proxy named, or `anonymous`.
    pub name: String,
    pub role: Role,
    /// The tenants the caller may see and write; empty: not bound to tenants.
    pub tenants: Vec<String>,
    pub via: Via,
}

/// How an [`Identity`] was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// Authentication is off: everyone may do everything.
    Open,
    Token,
    /// A trusted reverse proxy's user header.
    Proxy,
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 401: no usable credentials.
    Unauthenticated(String),
    /// 403: known caller, not allowed.
    Forbidden(String),
    /// 429: an export over its org's ingest rate (`limits`); retry after that many seconds.
    TooManyRequests(String, u64),
}

/// The identity of the anonymous caller when authentication is off.
pub const ANONYMOUS: &str = infersight_query::audit::ANONYMOUS_ACTOR;

/// The tokens file as last read, and what it looked like then.
struct Loaded {
    tokens: Arc<TokenSet>,
    stamp: Option<FileStamp>,
}

/// What tells a changed file: size, modification time and inode (an atomic replace changes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    let metadata = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&metadata);
    #[cfg(not(unix))]
    let inode = 0;
    Some(FileStamp {
        len: metadata.len(),
        modified: metadata.modified().ok(),
        inode,
    })
}

/// The authenticator every gate shares.
pub struct Auth {
    tokens_file: Option<PathBuf>,
    trusted_proxies: Vec<Cidr>,
    proxy_role: Role,
    loaded: RwLock<Loaded>,
    /// Each org's ingest rate (`[auth.orgs]`); none: no org is limited.
    ingest_limits: limits::IngestLimiter,
    /// Each org's concurrent statements (`[auth.orgs]`); none: no org is limited.
    query_slots: limits::OrgQuerySlots,
    /// Each org's stored bytes against its limit (`[auth.orgs]`); none: no org is limited.
    storage_quota: limits::StorageQuota,
    /// JWT bearer tokens of an identity provider (`[auth.oidc]`), beside the tokens file's.
    oidc: Option<Arc<oidc::Oidc>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("tokens_file", &self.tokens_file)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("tokens", &self.loaded.read().tokens.len())
            .finish_non_exhaustive()
    }
}

impl Auth {
    /// Authentication off: every caller is an anonymous admin (proxies trusted per `settings`).
    pub fn disabled() -> Auth {
        Auth {
            tokens_file: None,
            trusted_proxies: Vec::new(),
            proxy_role: Role::Viewer,
            loaded: RwLock::new(Loaded {
                tokens: Arc::default(),
                stamp: None,
            }),
            ingest_limits: limits::IngestLimiter::default(),
            query_slots: limits::OrgQuerySlots::default(),
            storage_quota: limits::StorageQuota::default(),
            oidc: None,
        }
    }

    /// From `[auth]`: reads the tokens file now (a missing one holds no token yet; an invalid
    /// one is an error).
    /// Limits each org's ingest rate as `limiter` says (checked by the ingest gates).
    pub fn with_ingest_limits(mut self, limiter: limits::IngestLimiter) -> Auth {
        self.ingest_limits = limiter;
        self
    }

    /// Limits how many statements each org runs at once as `slots` say (checked by the API gate
    /// on the routes that run statements).
    pub fn with_query_limits(mut self, slots: limits::OrgQuerySlots) -> Auth {
        self.query_slots = slots;
        self
    }

    /// Refuses the exports of an org whose rows take its storage limit as `quota` says
    /// (counted by `serve` every [`limits::STORAGE_POLL`]).
    pub fn with_storage_limits(mut self, quota: limits::StorageQuota) -> Auth {
        self.storage_quota = quota;
        self
    }

    /// The storage limits, to record what each org stores.
    pub fn storage_quota(&self) -> &limits::StorageQuota {
        &self.storage_quota
    }

    /// One running statement for each limited org of `scope`, or the refusal (429) naming an
    /// org whose slots are all taken.
    pub fn admit_query(
        &self,
        scope: &infersight_query::OrgScope,
    ) -> Result<limits::OrgQueryPermit, Refusal> {
        let orgs: &[String] = match scope {
            infersight_query::OrgScope::All => &[],
            infersight_query::OrgScope::Only(orgs) => orgs,
        };
        self.query_slots.try_acquire(orgs).map_err(|(org, limit)| {
            Refusal::TooManyRequests(
                format!(
                    "the org `{}` already runs {limit} statements, the most it may at once \
                     (auth.orgs.{}.max_concurrent_queries); retry when one has ended",
                    org.escape_debug(),
                    org.escape_debug()
                ),
                1,
            )
        })
    }

    /// Accepts the JWTs `oidc` verifies as well as the tokens file's tokens.
    pub fn with_oidc(mut self, oidc: oidc::Oidc) -> Auth {
        self.oidc = Some(Arc::new(oidc));
        self
    }

    /// The JWT verifier, when `[auth.oidc]` is set.
    pub fn oidc(&self) -> Option<&Arc<oidc::Oidc>> {
        self.oidc.as_ref()
    }

    /// One export of `org` now, or the refusal (429) when it is over its rate or stores its
    /// storage limit already.
    pub fn admit_ingest(&self, org: &str) -> Result<(), Refusal> {
        if let Err((stored, limit)) = self.storage_quota.admit(org) {
            return Err(Refusal::TooManyRequests(
                format!(
                    "the org `{}` stores {stored} bytes, at its limit of {limit} \
                     (auth.orgs.{}.max_storage_bytes); exports are refused until retention \
                     makes room or the limit is raised",
                    org.escape_debug(),
                    org.escape_debug()
                ),
                limits::STORAGE_POLL.as_secs().max(1) * 12,
            ));
        }
        self.ingest_limits
            .admit(org, infersight_model::time::now_ns())
            .map_err(|retry_after_s| {
                Refusal::TooManyRequests(
                    format!(
                        "the org `{}` is over its ingest rate (auth.orgs.{}.ingest_exports_per_s); \
                         retry in {retry_after_s} s",
                        org.escape_debug(),
                        org.escape_debug()
                    ),
                    retry_after_s,
                )
            })
    }

    pub fn open(settings: AuthSettings) -> Result<Auth, TokenError> {
        let auth = Auth {
            tokens_file: settings.tokens_file,
            trusted_proxies: settings.trusted_proxies,
            proxy_role: settings.proxy_role,
            loaded: RwLock::new(Loaded {
                tokens: Arc::default(),
                stamp: None,
            }),
            ingest_limits: limits::IngestLimiter::default(),
            query_slots: limits::OrgQuerySlots::default(),
            storage_quota: limits::StorageQuota::default(),
            oidc: None,
        };
        if let Some(path) = &auth.tokens_file {
            let set = TokenFile::read(path)?
                .to_set()
                .map_err(TokenError::Invalid)?;
            if set.is_empty() {
                tracing::warn!(
                    path = %path.display(),
                    "authentication is on but the tokens file holds no token yet: every \
                     request is refused until `infersight tokens create` adds one"
                );
            }
            *auth.loaded.write() = Loaded {
                tokens: Arc::new(set),
                stamp: stamp(path),
            };
        }
        Ok(auth)
    }

    pub fn is_enabled(&self) -> bool {
        self.tokens_file.is_some()
    }

    /// Re-reads the tokens file when it changed since the last read. An unreadable or invalid
    /// file leaves the tokens as they were (and is reported); `Ok(true)` when reloaded.
    pub fn reload_if_changed(&self) -> Result<bool, TokenError> {
        let Some(path) = &self.tokens_file else {
            return Ok(false);
        };
        let now = stamp(path);
        if now == self.loaded.read().stamp {
            return Ok(false);
        }
        self.reload().map(|()| true)
    }

    /// Re-reads the tokens file whatever its stamp.
    pub fn reload(&self) -> Result<(), TokenError> {
        let Some(path) = &self.tokens_file else {
            return Ok(());
        };
        let before = stamp(path);
        let read =
            TokenFile::read(path).and_then(|file| file.to_set().map_err(TokenError::Invalid));
        let mut loaded = self.loaded.write();
        // a bad version is reported once, not at every check, and tried again once it changes
        loaded.stamp = before;
        loaded.tokens = Arc::new(read?);
        Ok(())
    }

    fn tokens(&self) -> Arc<TokenSet> {
        Arc::clone(&self.loaded.read().tokens)
    }

    fn trusted(&self, peer: Option<IpAddr>) -> bool {
        peer.is_some_and(|ip| self.trusted_proxies.iter().any(|net| net.contains(ip)))
    }

    /// Who sends this request: the bearer token in `authorization` when authentication is on,
    /// else the user a trusted proxy (`peer` in `trusted_proxies`) names in `proxy_user`'s
    /// headers. With authentication off every caller is an admin, named by a trusted proxy or
    /// [`ANONYMOUS`].
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        proxy_user: impl Fn(&str) -> Option<String>,
        peer: Option<IpAddr>,
        now_ns: i64,
    ) -> Result<Identity, Refusal> {
        let proxied = || {
            self.trusted(peer)
                .then(|| infersight_query::audit::actor_from_headers(&proxy_user))
                .filter(|name| name != ANONYMOUS)
        };
        if !self.is_enabled() {
            return Ok(Identity {
                name: proxied().unwrap_or_else(|| ANONYMOUS.to_string()),
                role: Role::Admin,
                tenants: Vec::new(),
                via: Via::Open,
            });
        }
        if let Some(value) = authorization {
            let token = parse_bearer(value).map_err(Refusal::Unauthenticated)?;
            if let Some(oidc) = self.oidc.as_ref().filter(|_| oidc::looks_like_jwt(token)) {
                return oidc.verify(token, now_ns.div_euclid(1_000_000_000));
            }
            let tokens = self.tokens();
            return match tokens.find(token, now_ns) {
                tokens::TokenMatch::Valid(stored) => Ok(Identity {
                    name: stored.name.clone(),
                    role: stored.role,
                    tenants: stored.tenants.clone(),
                    via: Via::Token,
                }),
                tokens::TokenMatch::Expired(stored) => Err(Refusal::Unauthenticated(format!(
                    "the token `{}` has expired; create a new one with `infersight tokens create`",
                    stored.name
                ))),
                tokens::TokenMatch::Unknown => Err(Refusal::Unauthenticated(
                    "unknown or revoked token".to_string(),
                )),
            };
        }
        if let Some(name) = proxied() {
            return Ok(Identity {
                name,
                role: self.proxy_role,
                tenants: Vec::new(),
                via: Via::Proxy,
            });
        }
        Err(Refusal::Unauthenticated(
            "authentication required: send `Authorization: Bearer <token>` (an admin creates \
             one with `infersight tokens create`)"
                .to_string(),
        ))
    }
}

/// Whether `identity` may do what `required` asks; `what` names the action in the refusal.
pub fn authorize(identity: &Identity, required: Role, what: &str) -> Result<(), Refusal> {
    if identity.role.grants(required) {
        Ok(())
    } else {
        Err(Refusal::Forbidden(format!(
            "`{}` has the role {}; {what} needs {}",
            identity.name,
            identity.role,
            if required == Role::Ingest {
                "ingest or admin".to_string()
            } else {
                format!("{required} or above")
            }
        )))
    }
}

/// How often the tokens file is checked for changes.
pub const RELOAD_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Re-reads the tokens file when it changes (checked every `poll`) and on SIGHUP, until `stop`;
/// each reload (and refusal) is audited in `audit`.
pub fn spawn_reloader(
    auth: Arc<Auth>,
    poll: std::time::Duration,
    stop: impl Future<Output = ()> + Send + 'static,
    audit: Option<Arc<infersight_query::AccessAudit>>,
) -> tokio::task::JoinHandle<()> {
    if !auth.is_enabled() {
        return tokio::spawn(async {});
    }
    crate::periodic::spawn_reloader("the tokens file", poll, stop, audit, move |forced| {
        let reloaded = if forced {
            auth.reload().map(|()| true)
        } else {
            auth.reload_if_changed()
        }
        .map_err(|e| e.to_string())?;
        Ok(reloaded.then(|| format!(" ({} tokens)", auth.tokens().len())))
    })
}
