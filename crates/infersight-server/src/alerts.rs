//! SLO alerting: on an interval the server evaluates every configured SLO against the store's
//! rollups (`infersight_analytics::slo`), keeps one alert per (SLO, severity), and tells a
//! webhook when an alert starts firing and when it resolves — once per transition (dedupe), with
//! retries (the sender actions use too, `crate::webhook`). The state is what `GET /api/v1/alerts`,
//! `GET /api/v1/slo` and `/metrics` show.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use infersight_analytics::slo::{BurnRule, Slo, SloStatus, default_rules, evaluate};
use infersight_model::notice::{IncidentNotice, IncidentNotifier, Severity, Transition};
use infersight_model::time::format_rfc3339;
use infersight_rollup::Rollup;
use infersight_store::{StorageBackend, TimeRange};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::webhook::WebhookSettings;

/// One alert's life.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub slo: String,
    pub severity: &'static str,
    pub firing_since_ns: i64,
    /// Burn rates of the long and short windows of the rule that fired, at the last evaluation.
    pub burn_rates: Vec<(i64, Option<f64>)>,
}

/// A state change worth telling someone about.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub status: &'static str,
    pub alert: Alert,
    pub at_ns: i64,
}

impl Notification {
    /// The webhook body (Alertmanager-like, so existing receivers understand most of it).
    pub fn to_json(&self) -> Value {
        json!({
            "status": self.status,
            "labels": { "alertname": "SloBurnRate", "slo": self.alert.slo, "severity": self.alert.severity },
            "startsAt": format_rfc3339(self.alert.firing_since_ns),
            "at": format_rfc3339(self.at_ns),
            "fingerprint": format!("{}/{}", self.alert.slo, self.alert.severity),
            "burn_rates": self.alert.burn_rates.iter().map(|(w, b)| json!({
                "window_s": w / 1_000_000_000,
                "burn_rate": b,
            })).collect::<Vec<_>>(),
        })
    }

    /// The notice the notifier (`[notify]`: Alertmanager, the signed webhook) gets: alert
    /// `SloBurnRate`, `page` as `critical` and `ticket` as `warning`, label `slo`.
    pub fn to_notice(&self) -> IncidentNotice {
        let alert = &self.alert;
        let burn_rates: Vec<String> = alert
            .burn_rates
            .iter()
            .map(|(window_ns, rate)| match rate {
                Some(rate) => format!("{rate:.1}x over {}", window_text(*window_ns)),
                None => format!("no data over {}", window_text(*window_ns)),
            })
            .collect();
        IncidentNotice {
            incident_id: format!("slo/{}/{}", alert.slo, alert.severity),
            alertname: "SloBurnRate".into(),
            severity: if alert.severity == "page" {
                Severity::Critical
            } else {
                Severity::Warning
            },
            summary: format!(
                "SLO {} burns its error budget ({})",
                alert.slo, alert.severity
            ),
            description: format!("burn rate {}", burn_rates.join(", ")),
            onset_ns: alert.firing_since_ns,
            detected_ns: alert.firing_since_ns,
            resolved_ns: (self.status == "resolved").then_some(self.at_ns),
            extra_labels: [("slo".to_string(), alert.slo.clone())].into(),
            ..IncidentNotice::default()
        }
    }

    fn transition(&self) -> Transition {
        if self.status == "resolved" {
            Transition::Resolved
        } else {
            Transition::Opened
        }
    }
}

/// `5m`, `1h`, `3d`: a burn-rate window as people write it.
fn window_text(window_ns: i64) -> String {
    let seconds = window_ns / 1_000_000_000;
    match seconds {
        s if s % 86_400 == 0 && s > 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 && s > 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 && s > 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[derive(Debug, Default)]
struct State {
    statuses: Vec<SloStatus>,
    firing: BTreeMap<(String, &'static str), Alert>,
    evaluations: u64,
    notifications_sent: u64,
    notifications_failed: u64,
}

/// The SLOs, their rules, and the alert state.
#[derive(Debug)]
pub struct AlertManager {
    slos: Vec<(Slo, Vec<BurnRule>)>,
    webhook: Option<WebhookSettings>,
    /// `[notify]`'s sinks, when SLO alerts go there too.
    notifier: Option<Arc<dyn IncidentNotifier>>,
    state: Mutex<State>,
}

impl AlertManager {
    pub fn new(slos: Vec<Slo>, webhook: Option<WebhookSettings>) -> AlertManager {
        let slos = slos
            .into_iter()
            .map(|slo| {
                let rules = default_rules(slo.window_ns);
                (slo, rules)
            })
            .collect();
        AlertManager {
            slos,
            webhook,
            notifier: None,
            state: Mutex::new(State::default()),
        }
    }

    /// Sends every transition to `notifier` too (enqueued, never waited for).
    pub fn with_notifier(mut self, notifier: Arc<dyn IncidentNotifier>) -> AlertManager {
        self.notifier = Some(notifier);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.slos.is_empty()
    }

    /// Evaluates every SLO at `now_ns` and returns the transitions (firing / resolved).
    /// Blocking (reads rollups): call from a blocking thread.
    pub fn evaluate(
        &self,
        store: &dyn StorageBackend,
        now_ns: i64,
    ) -> Result<Vec<Notification>, infersight_store::StoreError> {
        let longest = self
            .slos
            .iter()
            .flat_map(|(slo, rules)| {
                std::iter::once(slo.window_ns).chain(rules.iter().map(|r| r.long_ns))
            })
            .max()
            .unwrap_or(0);
        let parts: Vec<Arc<Rollup>> = if self.slos.is_empty() {
            Vec::new()
        } else {
            store.rollups(TimeRange {
                since_ns: Some(now_ns - longest),
                until_ns: Some(now_ns),
            })?
        };
        let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
        let statuses: Vec<SloStatus> = self
            .slos
            .iter()
            .map(|(slo, rules)| evaluate(&refs, slo, rules, now_ns))
            .collect();
        let mut now_firing: BTreeMap<(String, &'static str), Alert> = BTreeMap::new();
        for status in &statuses {
            for rule in status.rules.iter().filter(|r| r.firing) {
                let key = (status.name.clone(), rule.rule.severity);
                // the first firing rule of a severity names the burn rates
                now_firing.entry(key).or_insert_with(|| Alert {
                    slo: status.name.clone(),
                    severity: rule.rule.severity,
                    firing_since_ns: now_ns,
                    burn_rates: vec![
                        (rule.long.window_ns, rule.long.burn_rate),
                        (rule.short.window_ns, rule.short.burn_rate),
                    ],
                });
            }
        }
        let mut state = self.state.lock();
        let mut notifications = Vec::new();
        for (key, alert) in &mut now_firing {
            match state.firing.get(key) {
                Some(previous) => alert.firing_since_ns = previous.firing_since_ns,
                None => notifications.push(Notification {
                    status: "firing",
                    alert: alert.clone(),
                    at_ns: now_ns,
                }),
            }
        }
        for (key, alert) in &state.firing {
            if !now_firing.contains_key(key) {
                notifications.push(Notification {
                    status: "resolved",
                    alert: alert.clone(),
                    at_ns: now_ns,
                });
            }
        }
        state.firing = now_firing;
        state.statuses = statuses;
        state.evaluations += 1;
        Ok(notifications)
    }

    /// Hands each notification to the notifier (if any), then posts it to the `[alerts]`
    /// webhook, retrying; counts what that webhook took. Blocking: call from a blocking thread.
    pub fn deliver(&self, notifications: &[Notification]) {
        if let Some(notifier) = &self.notifier {
            for notification in notifications {
                notifier.notify(notification.transition(), &notification.to_notice());
            }
        }
        let Some(webhook) = &self.webhook else {
            return;
        };
        let agent = webhook.agent();
        for notification in notifications {
            let body = notification.to_json().to_string();
            let delivery = webhook.post_json(&agent, &body, "alert");
            let mut state = self.state.lock();
            if delivery.is_delivered() {
                state.notifications_sent += 1;
            } else {
                state.notifications_failed += 1;
            }
        }
    }

    /// `GET /api/v1/alerts`.
    pub fn alerts_json(&self) -> Value {
        let state = self.state.lock();
        let alerts: Vec<Value> = state
            .firing
            .values()
            .map(|a| {
                json!({
                    "slo": a.slo,
                    "severity": a.severity,
                    "state": "firing",
                    "since": format_rfc3339(a.firing_since_ns),
                    "burn_rates": a.burn_rates.iter().map(|(w, b)| json!({"window_s": w / 1_000_000_000, "burn_rate": b})).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({
            "alerts": alerts,
            "evaluations": state.evaluations,
            "notifications_sent": state.notifications_sent,
            "notifications_failed": state.notifications_failed,
        })
    }

    /// `GET /api/v1/slo`.
    pub fn slo_json(&self) -> Value {
        let state = self.state.lock();
        let slos: Vec<Value> = state
            .statuses
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "objective": s.objective,
                    "compliance": s.compliance,
                    "budget_remaining": s.budget_remaining,
                    "rules": s.rules.iter().map(|r| json!({
                        "severity": r.rule.severity,
                        "burn_rate_threshold": r.rule.burn_rate,
                        "long_window_s": r.long.window_ns / 1_000_000_000,
                        "short_window_s": r.short.window_ns / 1_000_000_000,
                        "long_burn_rate": r.long.burn_rate,
                        "short_burn_rate": r.short.burn_rate,
                        "firing": r.firing,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({ "slos": slos })
    }

    /// Prometheus text for `/metrics`: per SLO its budget left, burn rate per rule window and
    /// whether each severity fires. Labels: `slo` (configured, few), `window` (seconds),
    /// `severity` (`page`/`ticket`).
    pub fn render_metrics(&self) -> String {
        let state = self.state.lock();
        let mut out = String::new();
        if state.statuses.is_empty() {
            return out;
        }
        out.push_str("# HELP infersight_slo_budget_remaining Fraction of the SLO window's error budget left (negative when overspent).\n# TYPE infersight_slo_budget_remaining gauge\n");
        for s in &state.statuses {
            if let Some(b) = s.budget_remaining {
                let _ = writeln!(
                    out,
                    "infersight_slo_budget_remaining{{slo=\"{}\"}} {b}",
                    escape(&s.name)
                );
            }
        }
        out.push_str("# HELP infersight_slo_burn_rate Error-budget burn rate over a window (1 = exactly on budget).\n# TYPE infersight_slo_burn_rate gauge\n");
        for s in &state.statuses {
            let mut windows: BTreeMap<i64, Option<f64>> = BTreeMap::new();
            for r in &s.rules {
                windows.insert(r.long.window_ns, r.long.burn_rate);
                windows.insert(r.short.window_ns, r.short.burn_rate);
            }
            for (w, b) in windows {
                if let Some(b) = b {
                    let _ = writeln!(
                        out,
                        "infersight_slo_burn_rate{{slo=\"{}\",window=\"{}s\"}} {b}",
                        escape(&s.name),
                        w / 1_000_000_000
                    );
                }
            }
        }
        out.push_str("# HELP infersight_slo_alert_firing Whether the SLO's burn-rate alert of a severity fires.\n# TYPE infersight_slo_alert_firing gauge\n");
        for s in &state.statuses {
            for severity in ["page", "ticket"] {
                let firing = state.firing.contains_key(&(s.name.clone(), severity));
                let _ = writeln!(
                    out,
                    "infersight_slo_alert_firing{{slo=\"{}\",severity=\"{severity}\"}} {}",
                    escape(&s.name),
                    u8::from(firing)
                );
            }
        }
        out
    }
}

/// Escapes a Prometheus label value.
pub fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Evaluates and delivers every `interval` until `shutdown` resolves (the loop of
/// [`crate::periodic::run_every`], shared with actions).
pub async fn run_alert_loop(
    manager: Arc<AlertManager>,
    store: Arc<dyn StorageBackend>,
    interval: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    if manager.is_empty() {
        return;
    }
    crate::periodic::run_every(interval, "slo evaluation", shutdown, move || {
        let now = infersight_model::time::now_ns();
        match manager.evaluate(store.as_ref(), now) {
            Ok(notifications) => manager.deliver(&notifications),
            Err(err) => tracing::warn!(%err, "slo evaluation failed"),
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use infersight_model::{RequestRecord, Table, TableBatch};
    use infersight_store::{FsyncPolicy, Store, StoreOptions};

    const MINUTE: i64 = 60_000_000_000;
    const T0: i64 = 1_764_374_400_000_000_000;

    fn append(store: &Store, from_min: i64, to_min: i64, slow: bool) {
        let records: Vec<RequestRecord> = (from_min * 60..to_min * 60)
            .map(|s| RequestRecord {
                ts: T0 + s * 1_000_000_000,
                ttft_ms: Some(if slow { 3000.0 } else { 100.0 }),
                ..RequestRecord::default()
            })
            .collect();
        store
            .append(&[TableBatch {
                table: Table::Requests,
                batch: RequestRecord::to_batch(&records),
            }])
            .unwrap();
    }

    #[test]
    fn alerts_fire_once_and_resolve_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut options = StoreOptions::new(dir.path());
        options.fsync = FsyncPolicy::Never;
        let store = Store::open(options).unwrap();
        let slo = Slo::new(
            "ttft",
            "ttft",
            Some(500.0),
            0.99,
            30 * 24 * 60 * MINUTE,
            vec![],
        )
        .unwrap();
        let manager = AlertManager::new(vec![slo], None);
        append(&store, 0, 60, false);
        assert!(
            manager
                .evaluate(&store, T0 + 60 * MINUTE)
                .unwrap()
                .is_empty()
        );
        append(&store, 60, 80, true);
        let fired = manager.evaluate(&store, T0 + 80 * MINUTE).unwrap();
        assert!(
            fired
                .iter()
                .any(|n| n.status == "firing" && n.alert.severity == "page"),
            "{fired:?}"
        );
        // still burning: no repeat
        append(&store, 80, 81, true);
        assert!(
            manager
                .evaluate(&store, T0 + 81 * MINUTE)
                .unwrap()
                .is_empty()
        );
        assert!(
            manager
                .render_metrics()
                .contains("infersight_slo_alert_firing{slo=\"ttft\",severity=\"page\"} 1")
        );
        assert_eq!(manager.alerts_json()["alerts"].as_array().unwrap().len(), 2);
        // healthy again for long enough that every short window is clean
        append(&store, 81, 81 + 6 * 60 + 5, false);
        let resolved = manager
            .evaluate(&store, T0 + (81 + 6 * 60 + 5) * MINUTE)
            .unwrap();
        assert!(
            resolved
                .iter()
                .any(|n| n.status == "resolved" && n.alert.severity == "page"),
            "{resolved:?}"
        );
        assert_eq!(resolved[0].to_json()["labels"]["slo"], "ttft");
    }
}
