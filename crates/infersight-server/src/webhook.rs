//! Webhooks, how `serve` tells other systems what it saw or decided: SLO alerts (`[alerts]`,
//! firing / resolved) and automatic actions (`[actions]`, fire / rollback). One config, the
//! `webhook_*` keys both sections flatten in ([`WebhookConfig`]); one resolved setting
//! ([`WebhookSettings`]); one sender ([`WebhookSettings::post_json`]): a JSON POST with a timeout,
//! retried with waits doubling from 200 ms, whose outcome ([`Delivery`]) is returned, never raised.

use std::time::Duration;

use infersight_model::time::parse_duration_ns;
use serde::{Deserialize, Serialize};

/// The `webhook_url`, `webhook_timeout` and `webhook_attempts` keys of a section, as written;
/// `#[serde(flatten)]`ed into `[alerts]` and `[actions]`, so the keys stay where users wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebhookConfig {
    /// Where JSON payloads are POSTed; empty: none.
    pub webhook_url: String,
    pub webhook_timeout: String,
    /// Attempts per payload (backoff 200 ms, doubling).
    pub webhook_attempts: u32,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            webhook_url: String::new(),
            webhook_timeout: "5s".into(),
            webhook_attempts: 3,
        }
    }
}

impl WebhookConfig {
    /// Every problem of the keys, each named `{section}.webhook_*`, in key order (timeout, url,
    /// attempts). `duration_error(key, text)` words a bad timeout the way the rest of the
    /// section words its durations.
    pub fn validate(
        &self,
        section: &str,
        duration_error: impl Fn(&str, &str) -> String,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        if positive_duration(&self.webhook_timeout).is_none() {
            errors.push(duration_error(
                &format!("{section}.webhook_timeout"),
                &self.webhook_timeout,
            ));
        }
        if !self.webhook_url.is_empty() && !self.webhook_url.starts_with("http://") {
            errors.push(format!(
                "{section}.webhook_url: `{}` must be an http:// URL (no TLS in this build)",
                self.webhook_url
            ));
        }
        if self.webhook_attempts == 0 {
            errors.push(format!("{section}.webhook_attempts: must be at least 1"));
        }
        errors
    }

    /// The webhook to send to; `None` when no URL is set. A timeout that does not parse (which
    /// `validate` reports) falls back to 5 s.
    pub fn settings(&self) -> Option<WebhookSettings> {
        (!self.webhook_url.is_empty()).then(|| WebhookSettings {
            url: self.webhook_url.clone(),
            timeout: positive_duration(&self.webhook_timeout)
                .map_or(Duration::from_secs(5), Duration::from_nanos),
            attempts: self.webhook_attempts.max(1),
        })
    }
}

fn positive_duration(text: &str) -> Option<u64> {
    parse_duration_ns(text)
        .filter(|ns| *ns > 0)
        .and_then(|ns| u64::try_from(ns).ok())
}

/// A webhook to send to, resolved from a [`WebhookConfig`].
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    pub url: String,
    pub timeout: Duration,
    /// Attempts per notification (at least 1); waits double from 200 ms between them.
    pub attempts: u32,
}

/// What became of one webhook POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A 2xx answer on attempt `attempts`.
    Delivered { attempts: u32, status: u16 },
    /// Every attempt failed; `error` describes the last one.
    Failed { attempts: u32, error: String },
}

impl Delivery {
    pub fn is_delivered(&self) -> bool {
        matches!(self, Delivery::Delivered { .. })
    }
}

impl WebhookSettings {
    /// An HTTP agent with this webhook's timeout that reports non-2xx answers as answers.
    pub fn agent(&self) -> ureq::Agent {
        ureq::Agent::config_builder()
            .timeout_global(Some(self.timeout))
            .http_status_as_error(false)
            .build()
            .into()
    }

    /// POSTs `body` (JSON) to the webhook, retrying up to `attempts` times with waits doubling
    /// from 200 ms. `what` names the sender in logs (`alert`, `action`). Never panics, never
    /// errors: the outcome says what happened. Blocking: call from a blocking thread.
    pub fn post_json(&self, agent: &ureq::Agent, body: &str, what: &str) -> Delivery {
        let attempts = self.attempts.max(1);
        let mut delay = Duration::from_millis(200);
        let mut last_error = String::new();
        for attempt in 1..=attempts {
            let result = agent
                .post(&self.url)
                .header("content-type", "application/json")
                .send(body.as_bytes());
            match result {
                Ok(response) if response.status().is_success() => {
                    return Delivery::Delivered {
                        attempts: attempt,
                        status: response.status().as_u16(),
                    };
                }
                Ok(response) => {
                    let status = response.status().as_u16();
                    tracing::warn!(status, attempt, "{what} webhook refused the notification");
                    last_error = format!("webhook answered http {status}");
                }
                Err(err) => {
                    tracing::warn!(%err, attempt, "{what} webhook unreachable");
                    last_error = format!("webhook unreachable: {err}");
                }
            }
            if attempt < attempts {
                std::thread::sleep(delay);
                delay *= 2;
            }
        }
        Delivery::Failed {
            attempts,
            error: last_error,
        }
    }
}
