//! The `[auth]` section: where the tokens file is (setting it turns authentication on), whether
//! an address other than loopback may be served without it, and which reverse proxies may name
//! the user in a header. `validate` reports every problem; `settings` resolves it for `serve`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::header::Cidr;
use super::limits::{IngestLimiter, OrgLimitConfig};
use super::oidc::{OidcConfig, OidcSettings};
use super::role::Role;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The tokens file (`infersight tokens create` writes it); empty: authentication is off and
    /// every caller may do everything (fine on 127.0.0.1 only).
    pub tokens_file: String,
    /// Serve an address other than loopback without authentication anyway.
    pub allow_unauthenticated: bool,
    /// Reverse proxies (`10.0.0.0/8`, `127.0.0.1/32`) whose `X-Forwarded-User` /
    /// `X-Auth-Request-User` / `X-Infersight-User` header names the caller; from any other peer
    /// those headers are ignored. Empty: no proxy is trusted.
    pub trusted_proxies: Vec<String>,
    /// The role of a user a trusted proxy names (when the request carries no token).
    pub proxy_role: String,
    /// Per-org limits, `[auth.orgs.<org>]` (`limits::OrgLimitConfig`); an org not listed is
    /// not limited.
    pub orgs: BTreeMap<String, OrgLimitConfig>,
    /// JWT bearer tokens of an identity provider, `[auth.oidc]` (`oidc::OidcConfig`).
    pub oidc: OidcConfig,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            tokens_file: String::new(),
            allow_unauthenticated: false,
            trusted_proxies: Vec::new(),
            proxy_role: Role::Viewer.name().to_string(),
            orgs: BTreeMap::new(),
            oidc: OidcConfig::default(),
        }
    }
}

/// `[auth]` resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSettings {
    pub tokens_file: Option<PathBuf>,
    pub trusted_proxies: Vec<Cidr>,
    pub proxy_role: Role,
}

impl AuthConfig {
    /// Every problem, each naming `auth.KEY`.
    pub fn validate(&self) -> Vec<String> {
        let mut errors = self.settings().err().unwrap_or_default();
        errors.extend(self.oidc_settings().err().unwrap_or_default());
        errors
    }

    /// `[auth.oidc]` resolved; `None` when it is not set. It needs authentication on
    /// (`tokens_file`; the file may hold no token).
    pub fn oidc_settings(&self) -> Result<Option<OidcSettings>, Vec<String>> {
        let settings = self.oidc.settings()?;
        if settings.is_some() && self.tokens_file.is_empty() {
            return Err(vec![
                "auth.oidc: needs auth.tokens_file (setting it turns authentication on; the \
                 file may hold no token)"
                    .to_string(),
            ]);
        }
        Ok(settings)
    }

    pub fn settings(&self) -> Result<AuthSettings, Vec<String>> {
        let mut errors = Vec::new();
        let mut trusted_proxies = Vec::new();
        for (index, text) in self.trusted_proxies.iter().enumerate() {
            match Cidr::parse(text) {
                Ok(cidr) => trusted_proxies.push(cidr),
                Err(problem) => errors.push(format!("auth.trusted_proxies[{index}]: {problem}")),
            }
        }
        let proxy_role = Role::parse(&self.proxy_role)
            .map_err(|problem| errors.push(format!("auth.proxy_role: {problem}")))
            .ok();
        for (org, limit) in &self.orgs {
            errors.extend(limit.validate(org));
        }
        if self.tokens_file.trim() != self.tokens_file {
            errors.push("auth.tokens_file: has leading or trailing spaces".to_string());
        }
        match proxy_role {
            Some(proxy_role) if errors.is_empty() => Ok(AuthSettings {
                tokens_file: (!self.tokens_file.is_empty())
                    .then(|| PathBuf::from(&self.tokens_file)),
                trusted_proxies,
                proxy_role,
            }),
            _ => Err(errors),
        }
    }

    /// The ingest limiter of `[auth.orgs]`.
    pub fn ingest_limiter(&self) -> IngestLimiter {
        IngestLimiter::new(&self.orgs)
    }

    /// Each org's own retention (`[auth.orgs.<org>] retention`), for the store.
    pub fn retention_by_org(&self) -> std::collections::BTreeMap<String, std::time::Duration> {
        (self.orgs.iter())
            .filter_map(|(org, limits)| Some((org.clone(), limits.retention_duration()?)))
            .collect()
    }

    /// The storage limits of `[auth.orgs]`.
    pub fn storage_quota(&self) -> super::limits::StorageQuota {
        super::limits::StorageQuota::new(&self.orgs)
    }

    /// The concurrent-statement slots of `[auth.orgs]`.
    pub fn query_slots(&self) -> super::limits::OrgQuerySlots {
        super::limits::OrgQuerySlots::new(&self.orgs)
    }

    /// `serve` on `listen`: refused on an address other than loopback without authentication,
    /// unless `allow_unauthenticated` says so.
    pub fn check_listen(&self, listen: IpAddr) -> Result<(), String> {
        if listen.to_canonical().is_loopback()
            || !self.tokens_file.is_empty()
            || self.allow_unauthenticated
        {
            return Ok(());
        }
        Err(format!(
            "refusing to serve {listen} without authentication: anyone who can reach the ports \
             could push data and read everything. Set [auth] tokens_file (create a token with \
             `infersight tokens create --name NAME --role admin`), or set \
             [auth] allow_unauthenticated = true if something in front of infersight \
             authenticates every request"
        ))
    }
}
