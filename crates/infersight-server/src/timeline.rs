//! What `serve` adds to a stored incident besides the watcher's own record: the delivery of each
//! notification about it (reported by the notifier's sink threads, [`DeliveryLog`]) and each
//! automatic action taken while it is open (reported by the action runner), written onto the
//! incident (`IncidentStore::record_notification` / `record_action`) so that its page, its
//! timeline and its report show them. Every write here runs on the caller's thread, which is
//! already a blocking one (a sink's delivery thread, the action evaluation); a failed write is
//! logged, never raised: the page must not stop a notification or an action.

use infersight_rca::RcaError;
use infersight_rca::incidents::{ActionRecord, Incident, IncidentStore, NotificationRecord};
use serde_json::Value;

use crate::actions::AuditEntry;
use crate::notify::DeliveryLog;
use crate::notify::delivery::Event;

/// Writes notifications and actions onto the incidents of one data directory.
#[derive(Debug, Clone)]
pub struct IncidentRecorder {
    store: IncidentStore,
}

impl IncidentRecorder {
    pub fn new(store: IncidentStore) -> IncidentRecorder {
        IncidentRecorder { store }
    }

    pub fn store(&self) -> &IncidentStore {
        &self.store
    }

    /// Records the action decision `entry` on every incident the whole-store watcher holds
    /// open (not on an org's: the actions act on every org's fleet, `crate::org_watch`).
    /// Decisions that take no action (suppressed, recovered) are not actions and are left out.
    pub fn action_taken(&self, entry: &AuditEntry) {
        let Some(action) = action_record(entry) else {
            return;
        };
        let open = match self.store.watched_open() {
            Ok(open) => open,
            Err(error) => {
                tracing::warn!(%error, "cannot list open incidents to record an action on");
                return;
            }
        };
        for incident in open.iter().filter(|incident| incident.orgs.is_none()) {
            self.record_action(&incident.id, action.clone());
        }
    }

    /// Records on `incident` the actions of `entries` taken between its onset and its detection
    /// (an action policy may act on the fault before the watcher confirms it).
    pub fn actions_before(&self, incident: &Incident, entries: &[AuditEntry]) {
        let Some(watch) = incident.watch.as_ref() else {
            return;
        };
        let (from, to) = (watch.onset.as_str(), watch.detected_at.as_str());
        let known: Vec<&str> = incident.actions.iter().map(|a| a.at.as_str()).collect();
        for entry in entries {
            // RFC 3339 UTC times of one format sort as text
            if entry.ts.as_str() < from
                || entry.ts.as_str() > to
                || known.contains(&entry.ts.as_str())
            {
                continue;
            }
            if let Some(action) = action_record(entry) {
                self.record_action(&incident.id, action);
            }
        }
    }

    fn record_action(&self, id: &str, action: ActionRecord) {
        if let Err(error) = self.store.record_action(id, action) {
            tracing::warn!(incident = id, %error, "cannot record an action on the incident");
        }
    }
}

/// An audit entry as an action on an incident; `None` when the decision took no action.
fn action_record(entry: &AuditEntry) -> Option<ActionRecord> {
    let (action, outcome) = match entry.decision.as_str() {
        "fire" => (entry.action.clone(), webhook_outcome(entry)),
        "rollback" => (
            format!("roll back {}", entry.action),
            webhook_outcome(entry),
        ),
        "dry_run" => {
            let would = match entry.reason.as_deref() {
                Some("would_roll_back") => format!("roll back {}", entry.action),
                _ => entry.action.clone(),
            };
            (would, "dry_run".to_string())
        }
        _ => return None,
    };
    let threshold = format!(
        "{} {} against {} over {} windows",
        entry.sli,
        number(entry.value),
        number(entry.threshold),
        entry.windows
    );
    Some(ActionRecord {
        at: entry.ts.clone(),
        action,
        target: target_of(&entry.filters),
        outcome,
        policy: Some(entry.policy.clone()),
        detail: Some(match &entry.detail {
            Some(detail) => format!("{threshold}; {detail}"),
            None => threshold,
        }),
    })
}

/// `delivered` / `failed` (with the webhook's error), or `not sent` when there was none.
fn webhook_outcome(entry: &AuditEntry) -> String {
    match &entry.webhook {
        Some(w) => match &w.error {
            Some(error) => format!("{}: {error}", w.outcome),
            None => w.outcome.clone(),
        },
        None => "not sent".to_string(),
    }
}

fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value:.3}")
    }
}

/// The policy's slice, `key=value & …` (as a verdict writes a slice), or `fleet`.
fn target_of(filters: &Value) -> String {
    let pairs: Vec<String> = filters
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.as_str().map_or_else(|| v.to_string(), str::to_string)
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        "fleet".to_string()
    } else {
        pairs.join(" & ")
    }
}

impl DeliveryLog for IncidentRecorder {
    fn delivered(&self, event: &Event, sink: &str, target: &str, outcome: Result<(), String>) {
        let id = &event.notice.incident_id;
        let (outcome, detail) = match outcome {
            Ok(()) => ("sent".to_string(), None),
            Err(error) => ("failed".to_string(), Some(error)),
        };
        let record = NotificationRecord {
            at: infersight_model::time::format_rfc3339(infersight_model::time::now_ns()),
            sink: sink.to_string(),
            target: target.to_string(),
            transition: event.transition.as_str().to_string(),
            outcome,
            detail,
        };
        match self.store.record_notification(id, record) {
            Ok(_) => {}
            // SLO alerts (`slo/<name>/<severity>`) and dry-run episodes are no stored incidents
            Err(RcaError::NotFound(_) | RcaError::BadRequest(_)) => {}
            Err(error) => {
                tracing::warn!(incident = %id, %error, "cannot record a notification on the incident");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use infersight_model::notice::{IncidentNotice, Transition};
    use infersight_rca::RcaReport;
    use infersight_rca::incidents::{IncidentState, TimelineEntry, WatchRecord};
    use serde_json::json;

    use super::*;
    use crate::actions::WebhookOutcome;

    fn report() -> RcaReport {
        serde_json::from_value(json!({
            "symptom": null, "root_causes": [], "signals": [], "log_evidence": [],
            "suggestions": [], "checklist": [], "fleet_wide": false,
            "incident_window": null, "baseline_window": null,
            "window_source": "watch", "verdict": "v", "elapsed_ms": 1.0, "timings_ms": {}
        }))
        .unwrap()
    }

    fn watched(state: IncidentState) -> WatchRecord {
        WatchRecord {
            state,
            onset: "2025-11-29T02:20:00.000Z".into(),
            detected_at: "2025-11-29T02:22:00.000Z".into(),
            resolved_at: None,
            detections: Vec::new(),
            timeline: vec![TimelineEntry {
                at: "2025-11-29T02:20:00.000Z".into(),
                event: "onset".into(),
                detail: String::new(),
            }],
            notice: None,
        }
    }

    fn entry(ts: &str, decision: &str, reason: Option<&str>) -> AuditEntry {
        serde_json::from_value(json!({
            "ts": ts, "ts_ns": 0, "policy": "shrink-on-ttft", "decision": decision,
            "action": "shrink_batch", "params": {"max_num_seqs": 64}, "sli": "ttft",
            "filters": {"model": "llama"}, "value": 2400.0, "threshold": 1500.0, "windows": 3,
            "dry_run": decision == "dry_run", "reason": reason,
        }))
        .unwrap()
    }

    #[test]
    fn actions_land_on_open_incidents_only_and_say_what_became_of_them() {
        let data = tempfile::tempdir().unwrap();
        let store = IncidentStore::open(data.path());
        let open = store
            .create_watched(&report(), watched(IncidentState::Open))
            .unwrap();
        let resolved = store
            .create_watched(&report(), watched(IncidentState::Resolved))
            .unwrap();
        let manual = store.create(&report()).unwrap();
        let recorder = IncidentRecorder::new(store.clone());
        let mut fired = entry("2025-11-29T02:25:00.000Z", "fire", None);
        fired.webhook = Some(WebhookOutcome {
            outcome: "delivered".into(),
            attempts: 1,
            status: Some(200),
            error: None,
        });
        recorder.action_taken(&fired);
        recorder.action_taken(&entry(
            "2025-11-29T02:26:00.000Z",
            "suppressed",
            Some("cooldown"),
        ));
        recorder.action_taken(&entry(
            "2025-11-29T02:27:00.000Z",
            "dry_run",
            Some("would_roll_back"),
        ));

        let actions = store.get(&open.id).unwrap().actions;
        assert_eq!(
            actions.len(),
            2,
            "a suppressed decision is no action: {actions:#?}"
        );
        assert_eq!(actions[0].action, "shrink_batch");
        assert_eq!(actions[0].target, "model=llama");
        assert_eq!(actions[0].outcome, "delivered");
        assert_eq!(actions[1].action, "roll back shrink_batch");
        assert_eq!(actions[1].outcome, "dry_run");
        assert!(store.get(&resolved.id).unwrap().actions.is_empty());
        assert!(store.get(&manual.id).unwrap().actions.is_empty());

        // an action between onset and detection joins the incident the watcher opens later
        let fresh = store
            .create_watched(&report(), watched(IncidentState::Open))
            .unwrap();
        let earlier = [
            entry("2025-11-29T02:10:00.000Z", "fire", None),
            entry("2025-11-29T02:21:00.000Z", "fire", None),
        ];
        recorder.actions_before(&store.get(&fresh.id).unwrap(), &earlier);
        let actions = store.get(&fresh.id).unwrap().actions;
        assert_eq!(
            actions.len(),
            1,
            "before the onset is not the incident's: {actions:#?}"
        );
        assert_eq!(actions[0].at, "2025-11-29T02:21:00.000Z");
        assert_eq!(actions[0].outcome, "not sent");
    }

    #[test]
    fn deliveries_are_recorded_on_stored_incidents_and_other_ids_are_ignored() {
        let data = tempfile::tempdir().unwrap();
        let store = IncidentStore::open(data.path());
        let open = store
            .create_watched(&report(), watched(IncidentState::Open))
            .unwrap();
        let recorder = IncidentRecorder::new(store.clone());
        let event = |id: &str, transition| Event {
            transition,
            notice: IncidentNotice {
                incident_id: id.into(),
                ..IncidentNotice::default()
            },
            report_url: None,
            at_ns: 0,
        };
        recorder.delivered(
            &event(&open.id, Transition::Opened),
            "alertmanager",
            "127.0.0.1:9093",
            Ok(()),
        );
        recorder.delivered(
            &event(&open.id, Transition::Updated),
            "webhook",
            "hooks.test:443",
            Err("http 500".into()),
        );
        // SLO alerts have ids that are no incident's
        recorder.delivered(
            &event("slo/ttft/page", Transition::Opened),
            "alertmanager",
            "x",
            Ok(()),
        );
        let stored = store.get(&open.id).unwrap();
        let outcomes: Vec<(&str, &str, &str)> = stored
            .notifications
            .iter()
            .map(|n| (n.sink.as_str(), n.transition.as_str(), n.outcome.as_str()))
            .collect();
        assert_eq!(
            outcomes,
            [
                ("alertmanager", "opened", "sent"),
                ("webhook", "updated", "failed")
            ]
        );
        assert_eq!(stored.notifications[1].detail.as_deref(), Some("http 500"));
        assert!(stored.timeline().iter().any(|e| e.event == "notified"));
    }
}
