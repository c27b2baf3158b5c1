//! `[notify]`, where incident notifications go, as written ([`NotifyConfig`], checked by
//! [`NotifyConfig::validate`]) and resolved ([`NotifySettings`], with the webhook's secret read
//! from the environment variable the file names: the secret itself is never in the file, never
//! printed, never logged). Sinks may be `http://` or `https://`, verified by the rule every
//! https client shares (`infersight_report::tls`: the web's roots, or only `ca_file`'s).

use std::time::Duration;

use infersight_model::time::parse_duration_ns;
use infersight_report::tls;
use serde::{Deserialize, Serialize};

/// Fewest bytes the webhook's HMAC secret may have (a guessable key signs nothing).
pub const MIN_SECRET_BYTES: usize = 16;

/// The `[notify]` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifyConfig {
    /// Alertmanager base URLs (`http://host:9093`); alerts are POSTed to `/api/v2/alerts` of
    /// each (list every instance of an HA cluster: each must get every alert).
    pub alertmanager_urls: Vec<String>,
    /// How often firing alerts are sent again; each says it ends 4 intervals later unless
    /// re-sent, so Alertmanager resolves them by itself if infersight stops.
    pub resend_interval: String,
    /// The generic webhook: JSON POSTs signed with HMAC-SHA256 (`X-Infersight-Signature`).
    pub webhook_url: String,
    /// The environment variable holding the webhook's secret (at least 16 bytes); required
    /// with `webhook_url`.
    pub webhook_secret_env: String,
    /// Where report links start (`https://infersight.example.com`); empty:
    /// `http://{server.listen}:{server.api_port}`.
    pub external_url: String,
    /// Deadline of one attempt: connect, request and answer.
    pub timeout: String,
    /// Attempts per notification before giving up (retries back off exponentially, jittered).
    pub max_attempts: u32,
    /// Wait before the first retry; it doubles per retry up to `backoff_max`.
    pub backoff_initial: String,
    pub backoff_max: String,
    /// Notifications that may wait per sink; beyond it new ones are dropped (and counted).
    pub queue_capacity: usize,
    /// Whether the SLO burn-rate alerts of `[alerts]` go to these sinks too.
    pub slo_alerts: bool,
    /// A PEM file of CA certificates that `https://` sinks are verified against instead of the
    /// web's roots (a private CA, a self-signed Alertmanager); empty: the web's roots.
    pub ca_file: String,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            alertmanager_urls: Vec::new(),
            resend_interval: "1m".into(),
            webhook_url: String::new(),
            webhook_secret_env: String::new(),
            external_url: String::new(),
            timeout: "5s".into(),
            max_attempts: 6,
            backoff_initial: "500ms".into(),
            backoff_max: "30s".into(),
            queue_capacity: 1024,
            slo_alerts: true,
            ca_file: String::new(),
        }
    }
}

/// The webhook's HMAC key; its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(bytes)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes>)", self.0.len())
    }
}

/// How a notification is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// At least 1.
    pub max_attempts: u32,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

/// `[notify]` resolved: what [`super::Notifier::start`] needs.
#[derive(Debug, Clone)]
pub struct NotifySettings {
    /// Alertmanager base URLs, without a trailing `/`.
    pub alertmanagers: Vec<String>,
    pub resend_interval: Duration,
    /// The signed webhook: URL and secret.
    pub webhook: Option<(String, Secret)>,
    /// Base of report links, without a trailing `/`.
    pub external_url: String,
    pub timeout: Duration,
    pub retry: RetryPolicy,
    pub queue_capacity: usize,
    pub slo_alerts: bool,
    /// The roots `https://` sinks are verified against; `None`: the web's.
    pub ca_certs: Option<CaCerts>,
}

/// The CA certificates of `notify.ca_file`.
pub use infersight_report::tls::CaCerts;

impl NotifyConfig {
    /// True when some sink is configured.
    pub fn is_enabled(&self) -> bool {
        !self.alertmanager_urls.is_empty() || !self.webhook_url.is_empty()
    }

    /// Every problem of the section, each named `notify.key`; reads whether the webhook's secret
    /// variable is set (never its value).
    pub fn validate(&self) -> Vec<String> {
        let mut errors = Vec::new();
        for (key, text) in [
            ("resend_interval", &self.resend_interval),
            ("timeout", &self.timeout),
            ("backoff_initial", &self.backoff_initial),
            ("backoff_max", &self.backoff_max),
        ] {
            if positive(text).is_none() {
                errors.push(format!(
                    "notify.{key}: `{text}` is not a positive duration like 500ms, 30s, 15m, 2h"
                ));
            }
        }
        if let (Some(initial), Some(max)) =
            (positive(&self.backoff_initial), positive(&self.backoff_max))
            && initial > max
        {
            errors.push(format!(
                "notify.backoff_initial: `{}` is longer than notify.backoff_max `{}`",
                self.backoff_initial, self.backoff_max
            ));
        }
        for (i, url) in self.alertmanager_urls.iter().enumerate() {
            if let Err(problem) = check_url(url) {
                errors.push(format!("notify.alertmanager_urls[{i}]: {problem}"));
            } else if self.alertmanager_urls[..i].contains(url) {
                errors.push(format!(
                    "notify.alertmanager_urls[{i}]: `{url}` is listed twice"
                ));
            }
        }
        if !self.webhook_url.is_empty() {
            if let Err(problem) = check_url(&self.webhook_url) {
                errors.push(format!("notify.webhook_url: {problem}"));
            }
            if self.webhook_secret_env.is_empty() {
                errors.push(
                    "notify.webhook_secret_env: required with notify.webhook_url (name the \
                     environment variable holding the signing secret)"
                        .into(),
                );
            } else if let Err(problem) = read_secret(&self.webhook_secret_env) {
                errors.push(format!("notify.webhook_secret_env: {problem}"));
            }
        }
        let web_url = |url: &str| url.starts_with("http://") || url.starts_with("https://");
        if !self.external_url.is_empty() && !web_url(&self.external_url) {
            errors.push(format!(
                "notify.external_url: `{}` must start with http:// or https://",
                self.external_url
            ));
        }
        if self.max_attempts == 0 {
            errors.push("notify.max_attempts: must be at least 1".into());
        }
        if self.queue_capacity == 0 {
            errors.push("notify.queue_capacity: must be at least 1".into());
        }
        errors.extend(tls::check_ca_file("notify.ca_file", &self.ca_file));
        errors
    }

    /// The resolved settings; `Ok(None)` when no sink is configured. `default_external_url`
    /// is used when `external_url` is empty. Errors are [`NotifyConfig::validate`]'s.
    pub fn settings(&self, default_external_url: &str) -> Result<Option<NotifySettings>, String> {
        let errors = self.validate();
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        if !self.is_enabled() {
            return Ok(None);
        }
        let webhook = if self.webhook_url.is_empty() {
            None
        } else {
            let secret = read_secret(&self.webhook_secret_env)
                .map_err(|problem| format!("notify.webhook_secret_env: {problem}"))?;
            Some((self.webhook_url.clone(), Secret(secret)))
        };
        let external = if self.external_url.is_empty() {
            default_external_url
        } else {
            &self.external_url
        };
        let duration = |text: &str| positive(text).unwrap_or(Duration::from_secs(1));
        Ok(Some(NotifySettings {
            alertmanagers: self
                .alertmanager_urls
                .iter()
                .map(|u| u.trim_end_matches('/').to_string())
                .collect(),
            resend_interval: duration(&self.resend_interval),
            webhook,
            external_url: external.trim_end_matches('/').to_string(),
            timeout: duration(&self.timeout),
            retry: RetryPolicy {
                max_attempts: self.max_attempts.max(1),
                backoff_initial: duration(&self.backoff_initial),
                backoff_max: duration(&self.backoff_max),
            },
            queue_capacity: self.queue_capacity.max(1),
            slo_alerts: self.slo_alerts,
            ca_certs: tls::ca_certs("notify.ca_file", &self.ca_file)?,
        }))
    }
}

fn positive(text: &str) -> Option<Duration> {
    parse_duration_ns(text)
        .filter(|ns| *ns > 0)
        .and_then(|ns| u64::try_from(ns).ok())
        .map(Duration::from_nanos)
}

/// A sink URL: `http[s]://host[:port][/path]`.
fn check_url(url: &str) -> Result<(), String> {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err(format!("`{url}` must be an http:// or https:// URL"));
    };
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || host.contains(char::is_whitespace) {
        return Err(format!("`{url}` has no host"));
    }
    Ok(())
}

/// The secret in environment variable `name`, at least [`MIN_SECRET_BYTES`] long.
fn read_secret(name: &str) -> Result<Vec<u8>, String> {
    match std::env::var_os(name) {
        None => Err(format!(
            "environment variable `{name}` is not set; put the webhook's signing secret (at \
             least {MIN_SECRET_BYTES} bytes) in it"
        )),
        Some(value) => {
            let bytes = value.into_encoded_bytes();
            if bytes.len() < MIN_SECRET_BYTES {
                Err(format!(
                    "environment variable `{name}` holds {} bytes; the signing secret must have \
                     at least {MIN_SECRET_BYTES}",
                    bytes.len()
                ))
            } else {
                Ok(bytes)
            }
        }
    }
}
