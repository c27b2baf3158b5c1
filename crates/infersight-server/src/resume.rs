//! A restarted `serve` picks up the incidents the last one left, before the watcher's first
//! step: the newest incident the watcher still holds open is resumed (later steps update and
//! resolve it as if this process had opened it) and re-sent to the notifier with the labels it
//! was sent with, so Alertmanager takes it for the alert it already has; an older one still
//! open (two crashes in one episode) resolves now, superseded; an incident that resolved within
//! [`RESEND_RESOLVED_WITHIN_NS`] is sent resolved again with its `endsAt`, in case that
//! notification was lost with the process. Without a watcher nothing would ever resolve an
//! open incident, so it is left as it is (and not re-sent: Alertmanager lets it expire).

use std::sync::Arc;

use infersight_model::notice::IncidentNotifier;
use infersight_model::time::{format_rfc3339, parse_time};
use infersight_rca::incidents::{Incident, IncidentState, IncidentStore, TimelineEntry};
use infersight_rca::watch::Watcher;

/// How far back a resolved incident's resolution is sent again at startup (an hour: beyond
/// Alertmanager's usual `resolve_timeout`, its own copy has expired anyway).
pub const RESEND_RESOLVED_WITHIN_NS: i64 = 3_600_000_000_000;

/// What [`resume`] did, for the log and the tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Resumed {
    /// The open incident the watcher took over.
    pub resumed: Option<String>,
    /// Open incidents resolved because a newer one was resumed.
    pub superseded: Vec<String>,
    /// Resolved incidents whose resolution was sent again.
    pub resent_resolved: Vec<String>,
}

/// Resumes and re-notifies the stored incidents at `now_ns` (see the module doc). Blocking
/// (reads and writes incident files): call it from a blocking thread.
pub fn resume(
    store: &IncidentStore,
    watcher: Option<&mut Watcher>,
    notifier: Option<&dyn IncidentNotifier>,
    now_ns: i64,
) -> Resumed {
    let incidents = match store.list() {
        Ok(incidents) => incidents,
        Err(error) => {
            tracing::warn!(%error, "cannot read the stored incidents to resume them");
            return Resumed::default();
        }
    };
    let mut done = Resumed::default();
    if let Some(watcher) = watcher {
        take_over(
            store,
            &incidents,
            |_| true,
            (watcher, notifier),
            now_ns,
            &mut done,
        );
    }
    if let Some(notifier) = notifier {
        for incident in incidents.iter().filter(|i| resolved_since(i, now_ns)) {
            if let Some(notice) = incident.notice() {
                notifier.incident_resolved(&notice);
                done.resent_resolved.push(incident.id.clone());
            }
        }
    }
    done
}

/// [`resume`] for the watcher of one org (`serve` with authentication, `crate::org_watch`):
/// only the open incidents of that org's watcher are resumed or superseded; resolved ones are
/// left to [`resume`] without a watcher, which re-sends them once for every org.
pub fn resume_org(
    store: &IncidentStore,
    watcher: &mut Watcher,
    notifier: Option<&dyn IncidentNotifier>,
    now_ns: i64,
    org: &str,
) -> Resumed {
    let incidents = match store.list() {
        Ok(incidents) => incidents,
        Err(error) => {
            tracing::warn!(%error, org, "cannot read the stored incidents to resume them");
            return Resumed::default();
        }
    };
    let mut done = Resumed::default();
    let of_org = |incident: &Incident| incident.orgs.as_deref() == Some(&[org.to_string()][..]);
    take_over(
        store,
        &incidents,
        of_org,
        (watcher, notifier),
        now_ns,
        &mut done,
    );
    done
}

/// Hands `watcher` the newest open watched incident of `incidents` that `keep` keeps (newest
/// first, as the store lists them) and resolves the older ones, superseded.
fn take_over(
    store: &IncidentStore,
    incidents: &[Incident],
    keep: impl Fn(&Incident) -> bool,
    (watcher, notifier): (&mut Watcher, Option<&dyn IncidentNotifier>),
    now_ns: i64,
    done: &mut Resumed,
) {
    // newest first: the first open one is the episode to carry on
    for incident in incidents.iter().filter(|i| i.is_watched_open() && keep(i)) {
        if done.resumed.is_none() && watcher.resume(incident, now_ns) {
            if let (Some(notifier), Some(notice)) = (notifier, incident.notice()) {
                notifier.incident_updated(&notice);
            }
            tracing::info!(incident = %incident.id, "watch: resumed the open incident");
            done.resumed = Some(incident.id.clone());
            continue;
        }
        let newer = done.resumed.clone().unwrap_or_default();
        if let Some(resolved) = supersede(store, incident, &newer, now_ns) {
            if let (Some(notifier), Some(notice)) = (notifier, resolved.notice()) {
                notifier.incident_resolved(&notice);
            }
            done.superseded.push(incident.id.clone());
        }
    }
}

/// Whether `incident` is a watched incident that resolved within the re-send window.
fn resolved_since(incident: &Incident, now_ns: i64) -> bool {
    incident
        .watch
        .as_ref()
        .filter(|w| w.state == IncidentState::Resolved)
        .and_then(|w| w.resolved_at.as_deref())
        .and_then(|at| parse_time(at, now_ns).ok())
        .is_some_and(|at| now_ns - at <= RESEND_RESOLVED_WITHIN_NS)
}

/// Resolves the open `incident` now, superseded by `newer`; the stored result, or `None` when
/// it could not be written (logged).
fn supersede(
    store: &IncidentStore,
    incident: &Incident,
    newer: &str,
    now_ns: i64,
) -> Option<Incident> {
    let at = format_rfc3339(now_ns);
    let result = store.modify(&incident.id, |stored| {
        if let Some(watch) = stored.watch.as_mut() {
            watch.state = IncidentState::Resolved;
            watch.resolved_at = Some(at.clone());
            watch.timeline.push(TimelineEntry {
                at: at.clone(),
                event: "resolved".into(),
                detail: format!("superseded at restart by {newer}"),
            });
        }
    });
    match result {
        Ok(incident) => Some(incident),
        Err(error) => {
            tracing::warn!(incident = %incident.id, %error, "cannot resolve a superseded incident");
            None
        }
    }
}

/// The start of the watcher's task in `serve`: [`resume`] on a blocking thread, handing the
/// watcher there and back; `None` (logged) when that thread failed, taking the watcher.
pub async fn resume_blocking(
    store: IncidentStore,
    watcher: Watcher,
    notifier: Option<Arc<dyn IncidentNotifier>>,
) -> Option<Watcher> {
    let now = infersight_model::time::now_ns();
    let task = tokio::task::spawn_blocking(move || {
        let mut watcher = watcher;
        let done = resume(&store, Some(&mut watcher), notifier.as_deref(), now);
        if done != Resumed::default() {
            tracing::info!(
                resumed = done.resumed.as_deref().unwrap_or("-"),
                superseded = done.superseded.len(),
                resent_resolved = done.resent_resolved.len(),
                "watch: incidents of the previous run picked up"
            );
        }
        watcher
    });
    match task.await {
        Ok(watcher) => Some(watcher),
        Err(error) => {
            tracing::error!(%error, "the watcher is off: resuming stored incidents failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use infersight_model::notice::{IncidentNotice, Transition};
    use infersight_rca::incidents::{StoredNotice, WatchRecord};
    use infersight_rca::watch::WatchSettings;
    use infersight_rca::{RcaReport, Subject};
    use parking_lot::Mutex;

    use super::*;

    /// Every notice handed to it, in order.
    #[derive(Debug, Default)]
    struct Recorded(Mutex<Vec<(Transition, IncidentNotice)>>);

    impl IncidentNotifier for Recorded {
        fn notify(&self, transition: Transition, notice: &IncidentNotice) {
            self.0.lock().push((transition, notice.clone()));
        }
    }

    fn report() -> RcaReport {
        serde_json::from_value(serde_json::json!({
            "symptom": null, "root_causes": [], "signals": [], "log_evidence": [],
            "suggestions": [], "checklist": [], "fleet_wide": false,
            "incident_window": null, "baseline_window": null,
            "window_source": "watch", "verdict": "worker-3 leaks", "elapsed_ms": 1.0, "timings_ms": {}
        }))
        .unwrap()
    }

    fn record(state: IncidentState, minutes_ago: i64, now: i64, severity: &str) -> WatchRecord {
        let at = |m: i64| format_rfc3339(now - m * 60_000_000_000);
        WatchRecord {
            state,
            onset: at(minutes_ago + 2),
            detected_at: at(minutes_ago),
            resolved_at: (state == IncidentState::Resolved).then(|| at(minutes_ago - 1)),
            detections: vec!["gpu_memory_leak worker=w3: +2 GiB/h".into()],
            timeline: Vec::new(),
            notice: Some(StoredNotice {
                alertname: "InferenceIncident".into(),
                severity: severity.into(),
                summary: "memory grows".into(),
                description: "worker-3 leaks".into(),
                cause: Subject::of([("worker", "w3")]),
                model: Some("m".into()),
                worker: Some("w3".into()),
                extra_labels: BTreeMap::new(),
            }),
        }
    }

    #[test]
    fn a_restart_resumes_the_open_incident_resends_it_and_ends_recent_resolutions() {
        let data = tempfile::tempdir().unwrap();
        let store = IncidentStore::open(data.path());
        let now = infersight_model::time::now_ns();
        let older_open = store
            .create_watched(&report(), record(IncidentState::Open, 90, now, "critical"))
            .unwrap();
        let open = store
            .create_watched(&report(), record(IncidentState::Open, 5, now, "warning"))
            .unwrap();
        let recent = store
            .create_watched(
                &report(),
                record(IncidentState::Resolved, 20, now, "critical"),
            )
            .unwrap();
        let old = store
            .create_watched(
                &report(),
                record(IncidentState::Resolved, 300, now, "critical"),
            )
            .unwrap();
        let manual = store.create(&report()).unwrap();
        let notifier = Recorded::default();
        let mut watcher =
            Watcher::new(WatchSettings::default(), Some(store.clone()), None).unwrap();

        let done = resume(&store, Some(&mut watcher), Some(&notifier), now);
        assert_eq!(
            done.resumed.as_deref(),
            Some(open.id.as_str()),
            "the newest open one"
        );
        assert_eq!(done.superseded, std::slice::from_ref(&older_open.id));
        // resolved long ago (Alertmanager's copy expired) or asked for by a person: not sent
        assert_eq!(
            done.resent_resolved,
            std::slice::from_ref(&recent.id),
            "{} {}",
            old.id,
            manual.id
        );

        let sent = notifier.0.lock().clone();
        let (transition, notice) = sent.iter().find(|(_, n)| n.incident_id == open.id).unwrap();
        assert_eq!(*transition, Transition::Updated);
        // the labels it was sent with before the restart
        assert_eq!(notice.severity.as_str(), "warning");
        assert_eq!(notice.worker.as_deref(), Some("w3"));
        assert_eq!(notice.cause, Subject::of([("worker", "w3")]));
        assert!(notice.resolved_ns.is_none());
        let (transition, notice) = sent
            .iter()
            .find(|(_, n)| n.incident_id == recent.id)
            .unwrap();
        assert_eq!(*transition, Transition::Resolved);
        assert!(
            notice.resolved_ns.is_some_and(|at| at < now),
            "endsAt: when it resolved"
        );

        let superseded = store.get(&older_open.id).unwrap();
        assert_eq!(
            superseded.watch.as_ref().unwrap().state,
            IncidentState::Resolved
        );
        assert!(
            sent.iter()
                .any(|(t, n)| n.incident_id == older_open.id && *t == Transition::Resolved)
        );
        // the watcher holds the resumed one: its reports show it open
        let held = watcher.reports();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].incident_id.as_deref(), Some(open.id.as_str()));
        // and its notices keep the stored identity
        assert_eq!(held[0].notice().severity.as_str(), "warning");
        assert_eq!(held[0].notice().alertname, "InferenceIncident");
    }

    #[test]
    fn without_a_watcher_open_incidents_are_left_alone() {
        let data = tempfile::tempdir().unwrap();
        let store = IncidentStore::open(data.path());
        let now = infersight_model::time::now_ns();
        let open = store
            .create_watched(&report(), record(IncidentState::Open, 5, now, "critical"))
            .unwrap();
        let notifier = Recorded::default();
        let done = resume(&store, None, Some(&notifier), now);
        assert_eq!(done, Resumed::default());
        assert!(notifier.0.lock().is_empty());
        assert!(store.get(&open.id).unwrap().is_watched_open());
    }

    /// An org's watcher takes over only its org's open incident: another org's and the
    /// whole-store watcher's stay open, and nothing resolved is re-sent.
    #[test]
    fn an_orgs_watcher_resumes_only_that_orgs_open_incident() {
        let data = tempfile::tempdir().unwrap();
        let store = IncidentStore::open(data.path());
        let now = infersight_model::time::now_ns();
        let open_for = |org: Option<&str>, minutes_ago: i64| {
            let record = record(IncidentState::Open, minutes_ago, now, "critical");
            let orgs = org.map(|org| vec![org.to_string()]);
            store
                .create_watched_for_orgs(&report(), record, orgs)
                .unwrap()
        };
        let older_a = open_for(Some("a"), 90);
        let a = open_for(Some("a"), 10);
        let b = open_for(Some("b"), 5);
        let whole = open_for(None, 3);
        let resolved = store
            .create_watched(
                &report(),
                record(IncidentState::Resolved, 20, now, "critical"),
            )
            .unwrap();
        let notifier = Recorded::default();
        let mut watcher =
            Watcher::new(WatchSettings::default(), Some(store.clone()), None).unwrap();

        let done = resume_org(&store, &mut watcher, Some(&notifier), now, "a");
        assert_eq!(done.resumed.as_deref(), Some(a.id.as_str()));
        assert_eq!(done.superseded, std::slice::from_ref(&older_a.id));
        assert!(done.resent_resolved.is_empty(), "{}", resolved.id);
        for other in [&b, &whole] {
            assert!(store.get(&other.id).unwrap().is_watched_open());
            assert!(
                !notifier
                    .0
                    .lock()
                    .iter()
                    .any(|(_, n)| n.incident_id == other.id)
            );
        }
    }
}
