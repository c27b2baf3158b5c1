//! The watcher of `serve` with authentication on (issue 22, tenants), between the store and the
//! incident store: one `infersight_rca::watch::Watcher` per org that has sent requests, each
//! stepping over a query engine scoped to its org (`QueryEngine::scoped`: its rows and rollups
//! rebuilt from them), so what it detects, the RCA of each incident and the incident's `orgs`
//! are that org's alone and every other org's token answers 404 for it. Without authentication
//! every row is the default org's and `serve` keeps its one watcher over the whole store.
//!
//! Orgs are found among the requests stored since the last step (the first step looks back
//! [`FIRST_LOOKBACK_NS`], and adds the orgs a previous run left an incident open for); a
//! watcher is started for each new one, after resuming the open incident a previous run left
//! for that org (`crate::resume::resume_org`), and kept while the process runs, so an org that
//! stopped sending still sees its incident resolve. Each watcher's notices carry the label
//! `org` ([`OrgNotifier`]), for Alertmanager's routes.

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_model::notice::{IncidentNotice, IncidentNotifier};
use infersight_model::org::DEFAULT_ORG;
use infersight_query::{OrgScope, QueryEngine};
use infersight_rca::RcaError;
use infersight_rca::incidents::IncidentStore;
use infersight_rca::watch::{StepOutcome, WatchSettings, Watcher};

/// How far back the first step looks for orgs (an hour: the orgs of a restarted process's
/// recent data).
pub const FIRST_LOOKBACK_NS: i64 = 3_600_000_000_000;

/// The watchers of every org seen so far.
pub struct OrgWatchers {
    settings: WatchSettings,
    incidents: Option<IncidentStore>,
    notifier: Option<Arc<dyn IncidentNotifier>>,
    watchers: BTreeMap<String, Watcher>,
    /// Requests before this were already looked at for orgs.
    seen_until_ns: Option<i64>,
}

impl std::fmt::Debug for OrgWatchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrgWatchers")
            .field("orgs", &self.watchers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl OrgWatchers {
    /// No watcher yet; an error when `settings` are invalid (as `Watcher::new`).
    pub fn new(
        settings: WatchSettings,
        incidents: Option<IncidentStore>,
        notifier: Option<Arc<dyn IncidentNotifier>>,
    ) -> Result<OrgWatchers, RcaError> {
        Watcher::new(settings.clone(), None, None)?;
        Ok(OrgWatchers {
            settings,
            incidents,
            notifier,
            watchers: BTreeMap::new(),
            seen_until_ns: None,
        })
    }

    /// The orgs watched so far.
    pub fn orgs(&self) -> impl Iterator<Item = &str> {
        self.watchers.keys().map(String::as_str)
    }

    /// One step at `now_ns` of every org's watcher (after starting those of orgs new since the
    /// last step); `engine` reads every org's rows and each watcher gets it scoped to its org.
    /// Each org's outcome is its own: one org's failed step does not stop the others'.
    pub async fn step(
        &mut self,
        engine: &QueryEngine,
        now_ns: i64,
    ) -> Result<Vec<(String, Result<StepOutcome, RcaError>)>, RcaError> {
        self.discover(engine, now_ns).await?;
        let mut outcomes = Vec::with_capacity(self.watchers.len());
        for (org, watcher) in &mut self.watchers {
            let scoped = engine.scoped(OrgScope::org(org));
            outcomes.push((org.clone(), watcher.step(&scoped, now_ns).await));
        }
        Ok(outcomes)
    }

    /// Starts a watcher for each org with requests since the last look that has none.
    async fn discover(&mut self, engine: &QueryEngine, now_ns: i64) -> Result<(), RcaError> {
        let since = self
            .seen_until_ns
            .map_or(now_ns - FIRST_LOOKBACK_NS, |until| {
                until - self.settings.step_ns
            });
        let sql = format!(
            "SELECT DISTINCT org FROM requests \
             WHERE ts >= to_timestamp_nanos({since}) AND ts < to_timestamp_nanos({now_ns})"
        );
        let rows = engine.sql(&sql).await?.to_json_value()?;
        let mut found: Vec<String> = rows["rows"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|row| row["org"].as_str().unwrap_or(DEFAULT_ORG).to_string())
                    .collect()
            })
            .unwrap_or_default();
        if self.seen_until_ns.is_none() {
            found.extend(self.with_open_incidents().await?);
        }
        self.seen_until_ns = Some(now_ns);
        for org in found {
            if !self.watchers.contains_key(&org) {
                let watcher = self.start(&org, now_ns).await?;
                self.watchers.insert(org, watcher);
            }
        }
        Ok(())
    }

    /// The orgs whose watcher left an incident open (a previous run's): watched from the first
    /// step, so it resolves even when the org sends nothing more.
    async fn with_open_incidents(&self) -> Result<Vec<String>, RcaError> {
        let Some(store) = self.incidents.clone() else {
            return Ok(Vec::new());
        };
        let open = tokio::task::spawn_blocking(move || store.watched_open())
            .await
            .map_err(|e| RcaError::Io(format!("listing the open incidents: {e}")))??;
        Ok(open
            .into_iter()
            .filter_map(|incident| match incident.orgs.as_deref() {
                Some([org]) => Some(org.clone()),
                _ => None,
            })
            .collect())
    }

    /// A new watcher for `org`, with the open incident a previous run left for it resumed; its
    /// notices carry the label `org` (see [`OrgNotifier`]).
    async fn start(&self, org: &str, now_ns: i64) -> Result<Watcher, RcaError> {
        let notifier = self.notifier.clone().map(|inner| {
            Arc::new(OrgNotifier {
                org: org.to_string(),
                inner,
            }) as Arc<dyn IncidentNotifier>
        });
        let mut watcher = Watcher::new(
            self.settings.clone(),
            self.incidents.clone(),
            notifier.clone(),
        )?;
        let Some(store) = self.incidents.clone() else {
            return Ok(watcher);
        };
        let name = org.to_string();
        tracing::info!(org, "watch: watching a new org");
        tokio::task::spawn_blocking(move || {
            crate::resume::resume_org(&store, &mut watcher, notifier.as_deref(), now_ns, &name);
            watcher
        })
        .await
        .map_err(|e| RcaError::Io(format!("resuming the incidents of org {org}: {e}")))
    }
}

/// The notifier of one org's watcher: every notice it hands on (opened, updated, resolved, and
/// those re-sent when a restart resumes an incident) carries the label `org`, so Alertmanager
/// routes each team's incidents to that team (`matchers: [org="team-a"]`) and the signed
/// webhook's `labels` name it.
#[derive(Debug)]
pub struct OrgNotifier {
    pub org: String,
    pub inner: Arc<dyn IncidentNotifier>,
}

impl IncidentNotifier for OrgNotifier {
    fn notify(&self, transition: infersight_model::notice::Transition, notice: &IncidentNotice) {
        let mut notice = notice.clone();
        notice.extra_labels.insert("org".into(), self.org.clone());
        self.inner.notify(transition, &notice);
    }
}

#[cfg(test)]
mod tests {
    use infersight_rca::incidents::{IncidentState, WatchRecord};
    use infersight_store::{Store, StoreOptions};

    use super::*;

    /// An org with an incident its watcher left open is watched from the first step, though it
    /// sent nothing since (so the incident can resolve); the whole-store watcher's is not an
    /// org's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_org_with_an_open_incident_is_watched_without_new_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(StoreOptions::new(dir.path().join("data"))).unwrap();
        let engine = QueryEngine::new(Arc::new(store));
        let incidents = IncidentStore::open(dir.path());
        let now = infersight_model::time::now_ns();
        let at = infersight_model::time::format_rfc3339(now - 600_000_000_000);
        let record = WatchRecord {
            state: IncidentState::Open,
            onset: at.clone(),
            detected_at: at,
            resolved_at: None,
            detections: Vec::new(),
            timeline: Vec::new(),
            notice: None,
        };
        let report: infersight_rca::RcaReport = serde_json::from_value(serde_json::json!({
            "symptom": null, "root_causes": [], "signals": [], "log_evidence": [],
            "suggestions": [], "checklist": [], "fleet_wide": false,
            "incident_window": null, "baseline_window": null,
            "window_source": "watch", "verdict": "slow", "elapsed_ms": 1.0, "timings_ms": {}
        }))
        .unwrap();
        let orgs = Some(vec!["z".to_string()]);
        incidents
            .create_watched_for_orgs(&report, record.clone(), orgs)
            .unwrap();
        incidents.create_watched(&report, record).unwrap();
        let settings = WatchSettings::default();
        let mut watchers = OrgWatchers::new(settings, Some(incidents), None).unwrap();
        let outcomes = watchers.step(&engine, now).await.unwrap();
        assert_eq!(watchers.orgs().collect::<Vec<_>>(), ["z"]);
        assert_eq!(outcomes.len(), 1);
    }
}
