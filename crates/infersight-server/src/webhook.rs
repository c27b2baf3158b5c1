//! Webhooks, how `serve` tells other systems what it saw or decided: SLO alerts (`[alerts]`,
//! firing / resolved) and automatic actions (`[actions]`, fire / rollback). One config, the
//! `webhook_*` keys both sections flatten in ([`WebhookConfig`]); one resolved setting
//! ([`WebhookSettings`]); one sender ([`WebhookSettings::post_json`]): a JSON POST with a timeout,
//! retried with waits doubling from 200 ms, whose outcome ([`Delivery`]) is returned, never raised.
//! `https://` URLs are verified by the rule every https client shares
//! (`infersight_report::tls`): the web's roots, or only the section's `ca_file`.

use std::time::Duration;

use infersight_model::time::parse_duration_ns;
use infersight_report::tls;
use serde::{Deserialize, Serialize};

/// The `webhook_url`, `webhook_timeout`, `webhook_attempts` and `ca_file` keys of a section, as
/// written; `#[serde(flatten)]`ed into `[alerts]` and `[actions]`, so the keys stay where users
/// wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebhookConfig {
    /// Where JSON payloads are POSTed; empty: none.
    pub webhook_url: String,
    pub webhook_timeout: String,
    /// Attempts per payload (backoff 200 ms, doubling).
    pub webhook_attempts: u32,
    /// A PEM file of CA certificates an `https://` webhook is verified against instead of the
    /// web's roots (a private CA, a self-signed receiver); named as `notify.ca_file` is.
    pub ca_file: String,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        Self {
            webhook_url: String::new(),
            webhook_timeout: "5s".into(),
            webhook_attempts: 3,
            ca_file: String::new(),
        }
    }
}

impl WebhookConfig {
    /// Every problem of the keys, each named `{section}.key`, in key order (timeout, url,
    /// attempts, ca_file). `duration_error(key, text)` words a bad timeout the way the rest of the
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
        if !self.webhook_url.is_empty() && !tls::is_web_url(&self.webhook_url) {
            errors.push(format!(
                "{section}.webhook_url: `{}` must be an http:// or https:// URL",
                self.webhook_url
            ));
        }
        if self.webhook_attempts == 0 {
            errors.push(format!("{section}.webhook_attempts: must be at least 1"));
        }
        errors.extend(tls::check_ca_file(
            &format!("{section}.ca_file"),
            &self.ca_file,
        ));
        errors
    }

    /// The webhook to send to; `None` when no URL is set. `section` names the keys in log
    /// lines. A timeout that does not parse (which `validate` reports) falls back to 5 s; a
    /// `ca_file` that cannot be read any more trusts no certificate (never the web's roots in
    /// its place).
    pub fn settings(&self, section: &str) -> Option<WebhookSettings> {
        (!self.webhook_url.is_empty()).then(|| WebhookSettings {
            url: self.webhook_url.clone(),
            timeout: positive_duration(&self.webhook_timeout)
                .map_or(Duration::from_secs(5), Duration::from_nanos),
            attempts: self.webhook_attempts.max(1),
            ca_certs: tls::ca_certs_or_none_trusted(&format!("{section}.ca_file"), &self.ca_file),
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
    /// The roots an `https://` URL is verified against; `None`: the web's.
    pub ca_certs: Option<tls::CaCerts>,
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
    /// An HTTP agent with this webhook's timeout and roots that reports non-2xx answers as
    /// answers.
    pub fn agent(&self) -> ureq::Agent {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(self.timeout))
            .http_status_as_error(false);
        tls::with_roots(config, self.ca_certs.as_ref())
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

#[cfg(test)]
mod tests {
    //! An `https://` webhook (`[alerts]`, `[actions]`): a receiver with a self-signed
    //! certificate gets the payload when the section's `ca_file` holds it, and nothing when
    //! it does not; the key is checked like every other.

    use std::time::Duration;

    use infersight_testkit::https::{HttpsReceiver, https_receiver};

    use super::WebhookConfig;

    fn config(url: String, ca_file: String) -> WebhookConfig {
        WebhookConfig {
            webhook_url: url,
            webhook_timeout: "2s".into(),
            webhook_attempts: 1,
            ca_file,
        }
    }

    fn no_duration_error(key: &str, text: &str) -> String {
        format!("{key}: `{text}`")
    }

    #[test]
    fn an_https_webhook_is_called_when_its_ca_is_given_and_never_unverified() {
        let HttpsReceiver {
            addr,
            ca_pem,
            requests,
        } = https_receiver(200, "");
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, &ca_pem).unwrap();
        let url = format!("https://{addr}/hook");

        let trusted = config(url.clone(), ca_file.display().to_string());
        assert!(trusted.validate("alerts", no_duration_error).is_empty());
        let settings = trusted.settings("alerts").unwrap();
        let delivery = settings.post_json(&settings.agent(), "{\"state\":\"firing\"}", "alert");
        assert!(delivery.is_delivered(), "{delivery:?}");
        let request = requests.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(request.path, "/hook");
        assert_eq!(request.body, b"{\"state\":\"firing\"}");

        // no ca_file: the web's roots, which do not vouch for a self-signed certificate
        let untrusted = config(url, String::new()).settings("actions").unwrap();
        let delivery = untrusted.post_json(&untrusted.agent(), "{}", "action");
        assert!(!delivery.is_delivered(), "{delivery:?}");
        assert!(requests.try_recv().is_err(), "a request got through");
    }

    #[test]
    fn the_url_and_the_ca_file_are_checked_per_section() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem").display().to_string();
        let errors = config("ftp://hooks/x".into(), missing).validate("actions", no_duration_error);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("actions.webhook_url: `ftp://hooks/x` must be an http://"));
        assert!(
            errors[1].starts_with("actions.ca_file: cannot read"),
            "{errors:?}"
        );
        let https = config("https://hooks.example/x".into(), String::new());
        assert!(https.validate("alerts", no_duration_error).is_empty());
    }
}
