//! The Alertmanager sink: incident transitions as alerts of Alertmanager's API v2
//! (`POST /api/v2/alerts`, a JSON array of `{labels, annotations, startsAt, endsAt,
//! generatorURL}`). An open incident is an alert whose `endsAt` lies 4 re-send intervals ahead,
//! re-sent every interval while it fires (as Prometheus does, so Alertmanager resolves it by
//! itself if infersight stops); a resolved incident is sent once more with `endsAt` = when it
//! resolved. Alertmanager identifies an alert by its label set, so when an update changes the
//! labels (a new cause slice), the old label set is resolved in the same POST.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use infersight_model::notice::{IncidentNotice, Transition};
use infersight_model::time::format_rfc3339;
use serde_json::{Value, json};

use super::delivery::{Channel, Event, Message, Request};

/// One alert as Alertmanager will identify it (labels) and show it (the rest).
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub starts_at_ns: i64,
    pub generator_url: Option<String>,
}

impl Alert {
    /// The alert of `event`'s incident.
    pub fn of(event: &Event) -> Alert {
        let notice = &event.notice;
        Alert {
            labels: labels(notice),
            annotations: annotations(notice, event.report_url.as_deref()),
            starts_at_ns: if notice.onset_ns > 0 {
                notice.onset_ns
            } else {
                notice.detected_ns
            },
            generator_url: event.report_url.clone(),
        }
    }

    /// The API v2 JSON object, ending at `ends_at_ns`.
    pub fn to_json(&self, ends_at_ns: i64) -> Value {
        let mut alert = json!({
            "labels": self.labels,
            "annotations": self.annotations,
            "startsAt": format_rfc3339(self.starts_at_ns),
            "endsAt": format_rfc3339(ends_at_ns.max(self.starts_at_ns)),
        });
        if let Some(url) = &self.generator_url {
            alert["generatorURL"] = Value::String(url.clone());
        }
        alert
    }
}

/// `alertname`, `severity`, `incident_id`, `model`, `worker`, the cause slice (`cause`, the
/// slice as people write it, and `cause_<attribute>` per attribute), then the notice's extra
/// labels where they name nothing above. Names are made valid Prometheus label names.
pub fn labels(notice: &IncidentNotice) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let alertname = if notice.alertname.is_empty() {
        "InferenceIncident"
    } else {
        &notice.alertname
    };
    labels.insert("alertname".to_string(), alertname.to_string());
    labels.insert("severity".to_string(), notice.severity.as_str().to_string());
    labels.insert("incident_id".to_string(), notice.incident_id.clone());
    for (name, value) in [("model", &notice.model), ("worker", &notice.worker)] {
        if let Some(value) = value.as_ref().filter(|v| !v.is_empty()) {
            labels.insert(name.to_string(), value.clone());
        }
    }
    if !notice.cause.is_empty() {
        labels.insert("cause".to_string(), notice.cause.to_string());
        for (attribute, value) in notice.cause.iter() {
            labels.insert(format!("cause_{}", label_name(attribute)), value.clone());
        }
    }
    for (name, value) in &notice.extra_labels {
        labels
            .entry(label_name(name))
            .or_insert_with(|| value.clone());
    }
    labels.retain(|_, value| !value.is_empty());
    labels
}

/// `summary`, `description`, `report_url`, `onset`, `detected_at`.
fn annotations(notice: &IncidentNotice, report_url: Option<&str>) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::new();
    annotations.insert("summary".to_string(), notice.summary.clone());
    annotations.insert("description".to_string(), notice.description.clone());
    if let Some(url) = report_url {
        annotations.insert("report_url".to_string(), url.to_string());
    }
    annotations.insert("onset".to_string(), format_rfc3339(notice.onset_ns));
    annotations.insert(
        "detected_at".to_string(),
        format_rfc3339(notice.detected_ns),
    );
    annotations.retain(|_, value| !value.is_empty());
    annotations
}

/// `name` as a Prometheus label name (`[a-zA-Z_][a-zA-Z0-9_]*`): other characters become `_`.
pub fn label_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// The Alertmanager sink of one instance: the alerts firing now, and when to re-send them.
#[derive(Debug)]
pub struct AlertmanagerChannel {
    /// `{base}/api/v2/alerts`.
    url: String,
    resend_interval: Duration,
    /// Firing alerts by incident id.
    firing: BTreeMap<String, Alert>,
    next_resend: Option<Instant>,
}

impl AlertmanagerChannel {
    /// The sink of the Alertmanager at `base_url` (`http://host:9093`).
    pub fn new(base_url: &str, resend_interval: Duration) -> AlertmanagerChannel {
        AlertmanagerChannel {
            url: format!("{}/api/v2/alerts", base_url.trim_end_matches('/')),
            resend_interval,
            firing: BTreeMap::new(),
            next_resend: None,
        }
    }

    /// How far ahead a firing alert's `endsAt` lies: 4 re-sends may be lost before
    /// Alertmanager resolves it by itself.
    fn firing_horizon_ns(&self) -> i64 {
        i64::try_from(self.resend_interval.as_nanos().saturating_mul(4)).unwrap_or(i64::MAX)
    }

    /// A message of `alerts`, each with the `endsAt` it was given (`None`: still firing,
    /// rendered at each attempt as now + the horizon).
    fn message(
        &self,
        what: String,
        alerts: Vec<(Alert, Option<i64>)>,
        attempts: Option<u32>,
    ) -> Message {
        let horizon = self.firing_horizon_ns();
        Message {
            what,
            attempts,
            render: Box::new(move |now_ns| {
                let body: Vec<Value> = alerts
                    .iter()
                    .map(|(alert, ends)| {
                        alert.to_json(ends.unwrap_or(now_ns.saturating_add(horizon)))
                    })
                    .collect();
                Request {
                    body: Value::Array(body).to_string().into_bytes(),
                    headers: vec![("content-type", "application/json".to_string())],
                }
            }),
        }
    }
}

impl Channel for AlertmanagerChannel {
    fn sink(&self) -> &'static str {
        "alertmanager"
    }

    fn url(&self) -> &str {
        &self.url
    }

    fn on_event(&mut self, event: &Event) -> Vec<Message> {
        let id = event.notice.incident_id.clone();
        let alert = Alert::of(event);
        let what = format!("incident {id} {}", event.transition.as_str());
        let mut alerts = Vec::new();
        match event.transition {
            Transition::Opened | Transition::Updated => {
                if let Some(previous) = self.firing.get(&id)
                    && previous.labels != alert.labels
                {
                    // a new label set is a new alert to Alertmanager: end the old one
                    alerts.push((previous.clone(), Some(event.at_ns)));
                }
                alerts.push((alert.clone(), None));
                self.firing.insert(id, alert);
                self.next_resend
                    .get_or_insert_with(|| Instant::now() + self.resend_interval);
            }
            Transition::Resolved => {
                let ended = event.notice.resolved_ns.unwrap_or(event.at_ns);
                if let Some(previous) = self.firing.remove(&id)
                    && previous.labels != alert.labels
                {
                    alerts.push((previous, Some(ended)));
                }
                alerts.push((alert, Some(ended)));
                if self.firing.is_empty() {
                    self.next_resend = None;
                }
            }
        }
        vec![self.message(what, alerts, None)]
    }

    fn next_resend(&self) -> Option<Instant> {
        self.next_resend
    }

    fn resend(&mut self, now: Instant) -> Vec<Message> {
        if self.firing.is_empty() {
            self.next_resend = None;
            return Vec::new();
        }
        self.next_resend = Some(now + self.resend_interval);
        let alerts: Vec<(Alert, Option<i64>)> =
            self.firing.values().map(|a| (a.clone(), None)).collect();
        let what = format!("re-send of {} firing alert(s)", alerts.len());
        vec![self.message(what, alerts, Some(1))]
    }
}
