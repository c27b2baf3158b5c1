//! Notifications, how `serve` pages someone: the watcher's incident transitions and the SLO
//! burn-rate alerts reach [`Notifier`] (an [`IncidentNotifier`]), which hands each to every
//! configured sink's [`delivery::Outbox`] and returns at once. Sinks: Alertmanager's API v2
//! ([`alertmanager`], re-sent while firing) and the generic webhook signed with HMAC-SHA256
//! ([`signed`]). Configured by `[notify]` ([`config`]).

pub mod alertmanager;
pub mod config;
pub mod delivery;
#[cfg(test)]
mod https_tests;
pub mod signed;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use infersight_model::notice::{IncidentNotice, IncidentNotifier, Transition};
use infersight_model::telemetry::Counters;

pub use config::{NotifyConfig, NotifySettings, RetryPolicy, Secret};
pub use delivery::DeliveryLog;
use delivery::{DeliveryPolicy, Event, Outbox};

/// Every configured sink's outbox, and how report links are made absolute.
#[derive(Debug)]
pub struct Notifier {
    outboxes: Vec<Outbox>,
    external_url: String,
    slo_alerts: bool,
}

impl Notifier {
    /// Starts one delivery thread per sink target (each Alertmanager, the webhook).
    pub fn start(settings: &NotifySettings, counters: Arc<Counters>) -> std::io::Result<Notifier> {
        Notifier::start_logged(settings, counters, None)
    }

    /// [`Notifier::start`], reporting each transition's delivery to `log` (the incidents'
    /// timelines in `serve`).
    pub fn start_logged(
        settings: &NotifySettings,
        counters: Arc<Counters>,
        log: Option<Arc<dyn DeliveryLog>>,
    ) -> std::io::Result<Notifier> {
        let policy = DeliveryPolicy {
            retry: settings.retry,
            timeout: settings.timeout,
            queue_capacity: settings.queue_capacity,
            ca_certs: settings.ca_certs.clone(),
        };
        let mut outboxes = Vec::new();
        for base in &settings.alertmanagers {
            let channel = alertmanager::AlertmanagerChannel::new(base, settings.resend_interval);
            outboxes.push(Outbox::start(
                channel,
                policy.clone(),
                Arc::clone(&counters),
                log.clone(),
            )?);
        }
        if let Some((url, secret)) = &settings.webhook {
            let channel = signed::SignedWebhook::new(url, secret.clone());
            outboxes.push(Outbox::start(
                channel,
                policy.clone(),
                Arc::clone(&counters),
                log.clone(),
            )?);
        }
        Ok(Notifier {
            outboxes,
            external_url: settings.external_url.clone(),
            slo_alerts: settings.slo_alerts,
        })
    }

    /// Whether SLO burn-rate alerts should be sent here too (`notify.slo_alerts`).
    pub fn takes_slo_alerts(&self) -> bool {
        self.slo_alerts
    }

    /// The absolute link of a report path (`/api/v1/incidents/7/report`).
    pub fn report_url(&self, path: &str) -> String {
        if path.starts_with("http://") || path.starts_with("https://") {
            return path.to_string();
        }
        format!("{}/{}", self.external_url, path.trim_start_matches('/'))
    }

    /// Stops every sink: later notices are dropped (counted), queued ones too.
    pub fn close(&self) {
        for outbox in &self.outboxes {
            outbox.close();
        }
    }
}

impl IncidentNotifier for Notifier {
    fn notify(&self, transition: Transition, notice: &IncidentNotice) {
        let event = Event {
            transition,
            notice: notice.clone(),
            report_url: notice.report_path.as_deref().map(|p| self.report_url(p)),
            at_ns: infersight_model::time::now_ns(),
        };
        for outbox in &self.outboxes {
            outbox.offer(event.clone());
        }
    }
}
