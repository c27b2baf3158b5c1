//! Incidents: every RCA verdict is stored under `<data>/incidents/` with an id; a person confirms
//! or rejects it (`infersight incidents confirm ID --note …`), and confirmed ones become
//! retrievable past incidents in the knowledge base.
//!
//! One JSON file per incident, `<data>/incidents/<id>.json`, written atomically (temporary file,
//! fsync, then a no-clobber link or rename, fsync of the directory: `infersight_model::durable`),
//! so a crash never leaves a half-written incident under its real name and two creates never
//! overwrite each other. Ids look like `inc-20251129T022000Z-3fa9`: the incident's onset (UTC,
//! so ids sort by time) and 4 hex digits that make them unique.
//!
//! Besides the verdict, an incident carries what happened around it: the watcher's record
//! ([`WatchRecord`]: state, severity, detection time, its timeline), the automatic actions taken
//! while it was open ([`ActionRecord`], added by `serve`'s action runner) and the notifications
//! sent about it ([`NotificationRecord`], added by the delivery threads). Every change to a
//! stored incident is a read-modify-write under one lock per process ([`IncidentStore::modify`]),
//! so the watcher, the action runner, the notifier and a person's judgement never undo each
//! other's writes. [`Incident::summary`] is the one list row (API, CLI) and
//! [`Incident::timeline`] the one merged timeline (UI, report).
//!
//! Which verdicts become incidents and how incidents of one event find each other: a window
//! with too few requests to judge gives an answer but no incident ([`quality`]); a new incident
//! is linked both ways to the stored ones of the same event ([`related`]).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use std::collections::BTreeMap;

use crate::RcaReport;
use chrono::{DateTime, SecondsFormat, Utc};
use infersight_model::durable::{self, DurableError};
use infersight_model::notice::{IncidentNotice, Severity};
use infersight_model::signal::Subject;
use serde::{Deserialize, Serialize};

use crate::RcaError;

pub mod quality;
pub mod related;

/// A person's judgement of a stored verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IncidentStatus {
    /// Nobody has judged it yet.
    Open,
    /// The verdict was right: it becomes a retrievable past incident.
    Confirmed,
    /// The verdict was wrong: never retrieved.
    Rejected,
}

impl IncidentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            IncidentStatus::Open => "open",
            IncidentStatus::Confirmed => "confirmed",
            IncidentStatus::Rejected => "rejected",
        }
    }
}

impl std::fmt::Display for IncidentStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an episode opened by the watcher stands (`crate::watch`); a person's judgement is
/// [`IncidentStatus`], apart from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IncidentState {
    /// Detections still fire (or fired within the last quiet steps).
    Open,
    /// Quiet for the configured number of steps.
    Resolved,
}

impl IncidentState {
    pub fn as_str(self) -> &'static str {
        match self {
            IncidentState::Open => "open",
            IncidentState::Resolved => "resolved",
        }
    }
}

/// One event in an auto-opened incident's life: onset, detection, verdict updates, further
/// detections, actions, resolution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineEntry {
    /// RFC 3339, on the watcher's clock (simulated time in a replay).
    pub at: String,
    /// `onset`, `detected`, `detection`, `verdict`, `action`, `resolved`.
    pub event: String,
    pub detail: String,
}

/// What the watcher knows of an incident it opened: absent on incidents a person asked for
/// (`infersight rca`, `POST /api/v1/rca`) and on incidents stored before the watcher existed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchRecord {
    pub state: IncidentState,
    /// RFC 3339: the earliest onset of the episode's detections.
    pub onset: String,
    /// RFC 3339: the step at which the first detection was confirmed.
    pub detected_at: String,
    /// RFC 3339: the step at which it resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<String>,
    /// What fired, one line each (`kind subject: detail`), in order of first firing.
    pub detections: Vec<String>,
    pub timeline: Vec<TimelineEntry>,
    /// The alert as the watcher last sent it (its labels identify it in Alertmanager), so a
    /// restarted `serve` re-sends the same alert; absent on incidents stored before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<StoredNotice>,
}

impl WatchRecord {
    /// `critical`, `warning` or `info`, when known.
    pub fn severity(&self) -> Option<&str> {
        self.notice.as_ref().map(|n| n.severity.as_str())
    }
}

/// What identifies and describes an incident's alert, without its times (the part of an
/// [`IncidentNotice`] a stored incident keeps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredNotice {
    pub alertname: String,
    /// `critical`, `warning`, `info`.
    pub severity: String,
    pub summary: String,
    pub description: String,
    /// The slice the verdict blamed (empty: the whole fleet).
    #[serde(default)]
    pub cause: Subject,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_labels: BTreeMap<String, String>,
}

impl StoredNotice {
    pub fn of(notice: &IncidentNotice) -> StoredNotice {
        StoredNotice {
            alertname: notice.alertname.clone(),
            severity: notice.severity.as_str().to_string(),
            summary: notice.summary.clone(),
            description: notice.description.clone(),
            cause: notice.cause.clone(),
            model: notice.model.clone(),
            worker: notice.worker.clone(),
            extra_labels: notice.extra_labels.clone(),
        }
    }

    /// The severity as notifications write it (an unknown word reads as `critical`).
    pub fn severity(&self) -> Severity {
        match self.severity.as_str() {
            "warning" => Severity::Warning,
            "info" => Severity::Info,
            _ => Severity::Critical,
        }
    }
}

/// One automatic action taken while an incident was open (`serve`'s `[actions]` policies).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// RFC 3339.
    pub at: String,
    /// What was done (`downgrade_model`, a rollback of it, …).
    pub action: String,
    /// What it acted on: the policy's slice (`model=llama`), or `fleet`.
    pub target: String,
    /// `delivered`, `failed`, `dry_run`, …: what became of it.
    pub outcome: String,
    /// The policy that took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One notification about an incident, as its sink answered (re-sends are not recorded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotificationRecord {
    /// RFC 3339: when the sink answered (or delivery gave up).
    pub at: String,
    /// `alertmanager` or `webhook`.
    pub sink: String,
    /// `host:port` of the sink.
    pub target: String,
    /// `opened`, `updated`, `resolved`.
    pub transition: String,
    /// `sent` or `failed`.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Notifications kept on one incident (a flapping sink must not grow it without bound).
pub const MAX_NOTIFICATIONS: usize = 200;
/// Actions kept on one incident.
pub const MAX_ACTIONS: usize = 200;

/// One stored RCA verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Incident {
    pub id: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339; the last status change.
    pub updated_at: String,
    pub status: IncidentStatus,
    /// What the person who confirmed or rejected it said (the fix that worked, why it was wrong).
    pub note: Option<String>,
    pub rca: RcaReport,
    /// Set when the watcher opened the incident (see [`WatchRecord`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchRecord>,
    /// Automatic actions taken while it was open, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionRecord>,
    /// Notifications sent about it, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<NotificationRecord>,
    /// Other stored incidents of the same event ([`related::same_event`]: overlapping incident
    /// windows with the same top cause or onsets a few minutes apart), oldest first; each of
    /// them lists this one too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<String>,
    /// The orgs whose rows the RCA read (an API caller's scope, a watcher's org); absent: every
    /// org's (the API and the watcher without authentication, incidents stored before orgs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orgs: Option<Vec<String>>,
}

impl Incident {
    /// Whether a reader of `orgs` (`None`: every org) may see it: only when the RCA read none
    /// but those orgs' rows.
    pub fn visible_to_orgs(&self, orgs: Option<&[String]>) -> bool {
        match (orgs, &self.orgs) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(reader), Some(read)) => read.iter().all(|org| reader.contains(org)),
        }
    }

    /// [`Incident::visible_to_orgs`] for a query scope.
    pub fn visible_in(&self, scope: &infersight_query::OrgScope) -> bool {
        self.visible_to_orgs(scope.orgs())
    }

    /// Whether the watcher opened it and it has not resolved.
    pub fn is_watched_open(&self) -> bool {
        self.watch
            .as_ref()
            .is_some_and(|w| w.state == IncidentState::Open)
    }

    /// The top root cause, written as `key=value & …` (`None`: no root cause).
    pub fn top_cause(&self) -> Option<String> {
        self.rca
            .root_causes
            .first()
            .map(|cause| cause.dimensions.to_string())
    }

    /// One row of an incident list (the API's `GET /api/v1/incidents`, `infersight incidents
    /// list --format json`): everything but the full RCA. `origin` is `watch` for incidents the
    /// watcher opened (then `state`, `severity`, `detected_at` are set) and `rca` otherwise.
    pub fn summary(&self) -> serde_json::Value {
        let rca = &self.rca;
        let watch = self.watch.as_ref();
        serde_json::json!({
            "id": self.id,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "status": self.status,
            "note": self.note,
            "verdict": rca.verdict,
            "symptom": rca.symptom.as_ref().map(|s| &s.sli),
            "onset": watch.map(|w| w.onset.clone()).or_else(|| {
                rca.symptom
                    .as_ref()
                    .map(|s| infersight_model::time::format_rfc3339(s.onset))
            }),
            "root_causes": rca.root_causes.iter().map(|c| &c.dimensions).collect::<Vec<_>>(),
            "top_cause": self.top_cause(),
            "signals": rca.signals.iter().map(|s| &s.kind).collect::<Vec<_>>(),
            "origin": if watch.is_some() { "watch" } else { "rca" },
            "state": watch.map(|w| w.state),
            "severity": watch.and_then(WatchRecord::severity),
            "detected_at": watch.map(|w| &w.detected_at),
            "resolved_at": watch.and_then(|w| w.resolved_at.as_ref()),
            "actions": self.actions.len(),
            "notifications": self.notifications.len(),
            "related": self.related,
        })
    }

    /// The notice the watcher last sent about this incident, rebuilt from what is stored (same
    /// labels, so Alertmanager takes a re-send for the same alert); `None` for incidents the
    /// watcher did not open or stored before it kept its notice.
    pub fn notice(&self) -> Option<IncidentNotice> {
        let watch = self.watch.as_ref()?;
        let stored = watch.notice.as_ref()?;
        let now = infersight_model::time::now_ns();
        let at = |text: &str| infersight_model::time::parse_time(text, now).ok();
        let detected_ns = at(&watch.detected_at).unwrap_or(now);
        Some(IncidentNotice {
            incident_id: self.id.clone(),
            alertname: stored.alertname.clone(),
            severity: stored.severity(),
            summary: stored.summary.clone(),
            description: stored.description.clone(),
            cause: stored.cause.clone(),
            model: stored.model.clone(),
            worker: stored.worker.clone(),
            onset_ns: at(&watch.onset).unwrap_or(detected_ns),
            detected_ns,
            resolved_ns: watch.resolved_at.as_deref().and_then(at),
            report_path: Some(format!("/api/v1/incidents/{}/report", self.id)),
            extra_labels: stored.extra_labels.clone(),
        })
    }

    /// Everything that happened to the incident, oldest first: the watcher's timeline (onset,
    /// detection, verdict updates, further detections, resolution), each automatic action
    /// (`action`) and each notification (`notified`); a person's judgement (`confirmed`,
    /// `rejected`) last. Times are RFC 3339 and sort as text.
    pub fn timeline(&self) -> Vec<TimelineEntry> {
        let mut out: Vec<TimelineEntry> = self
            .watch
            .as_ref()
            .map(|w| w.timeline.clone())
            .unwrap_or_default();
        out.extend(self.actions.iter().map(|a| TimelineEntry {
            at: a.at.clone(),
            event: "action".into(),
            detail: format!("{} on {}: {}", a.action, a.target, a.outcome),
        }));
        out.extend(self.notifications.iter().map(|n| TimelineEntry {
            at: n.at.clone(),
            event: "notified".into(),
            detail: format!("{} {} ({}): {}", n.sink, n.transition, n.target, n.outcome),
        }));
        // the watcher's own `action` entries (if any) and ours are one kind of event; a stable
        // sort keeps each source's order for equal times
        out.sort_by(|a, b| a.at.cmp(&b.at));
        if self.status != IncidentStatus::Open {
            out.push(TimelineEntry {
                at: self.updated_at.clone(),
                event: self.status.as_str().into(),
                detail: self.note.clone().unwrap_or_default(),
            });
        }
        out
    }
}

/// The incidents of one data directory.
#[derive(Debug, Clone)]
pub struct IncidentStore {
    dir: PathBuf,
}

/// Serializes every read-modify-write of an incident file within the process: the watcher, the
/// action runner, the delivery threads and the API all change incidents.
static MODIFY: Mutex<()> = Mutex::new(());

/// Distinguishes creates within one process (mixed into the id's hash).
static CREATE_COUNTER: AtomicU64 = AtomicU64::new(0);
/// Suffixes tried for one onset before giving up (65 536 possible).
const MAX_ID_ATTEMPTS: u32 = 64;
const MAX_ID_LEN: usize = 128;

/// RFC 3339 with microseconds, so incidents created in one second still sort.
fn timestamp_now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn check_id(id: &str) -> Result<(), RcaError> {
    if id.is_empty()
        || id.len() > MAX_ID_LEN
        || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(RcaError::BadRequest(format!(
            "bad incident id `{id}`: only letters, digits and `-` are allowed"
        )));
    }
    Ok(())
}

impl IncidentStore {
    /// The store under `<data_dir>/incidents/` (created on the first write).
    pub fn open(data_dir: &Path) -> IncidentStore {
        IncidentStore {
            dir: data_dir.join("incidents"),
        }
    }

    /// The directory holding the incident files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Stores a new, open incident for `rca`.
    pub fn create(&self, rca: &RcaReport) -> Result<Incident, RcaError> {
        self.create_with(rca, None, None)
    }

    /// Stores a new incident for `rca`, an RCA that read only `orgs`' rows (`None`: every
    /// org's); it is linked only to incidents of the same orgs.
    pub fn create_for_orgs(
        &self,
        rca: &RcaReport,
        orgs: Option<Vec<String>>,
    ) -> Result<Incident, RcaError> {
        self.create_with(rca, None, orgs)
    }

    /// Stores a new incident for `rca` that the watcher opened, with its record.
    pub fn create_watched(
        &self,
        rca: &RcaReport,
        watch: WatchRecord,
    ) -> Result<Incident, RcaError> {
        self.create_with(rca, Some(watch), None)
    }

    /// [`IncidentStore::create_watched`] for a watcher that reads only `orgs`' rows (`None`:
    /// every org's), who alone see it ([`Incident::visible_to_orgs`]).
    pub fn create_watched_for_orgs(
        &self,
        rca: &RcaReport,
        watch: WatchRecord,
        orgs: Option<Vec<String>>,
    ) -> Result<Incident, RcaError> {
        self.create_with(rca, Some(watch), orgs)
    }

    /// Rewrites an incident the watcher keeps up to date (a new verdict, a detection, its
    /// resolution); a person's judgement stored meanwhile is kept.
    pub fn update_watched(
        &self,
        id: &str,
        rca: &RcaReport,
        watch: &WatchRecord,
    ) -> Result<Incident, RcaError> {
        self.modify(id, |incident| {
            incident.rca = rca.clone();
            incident.rca.incident_id = None;
            incident.watch = Some(watch.clone());
        })
    }

    /// Records an automatic action on the incident (the oldest are dropped past
    /// [`MAX_ACTIONS`]).
    pub fn record_action(&self, id: &str, action: ActionRecord) -> Result<Incident, RcaError> {
        self.modify(id, |incident| {
            incident.actions.push(action);
            let excess = incident.actions.len().saturating_sub(MAX_ACTIONS);
            incident.actions.drain(..excess);
        })
    }

    /// Records a notification about the incident (the oldest are dropped past
    /// [`MAX_NOTIFICATIONS`]).
    pub fn record_notification(
        &self,
        id: &str,
        notification: NotificationRecord,
    ) -> Result<Incident, RcaError> {
        self.modify(id, |incident| {
            incident.notifications.push(notification);
            let excess = incident
                .notifications
                .len()
                .saturating_sub(MAX_NOTIFICATIONS);
            incident.notifications.drain(..excess);
        })
    }

    /// Reads the incident, applies `change`, stamps `updated_at` and writes it back, under the
    /// process's one lock (so concurrent changes from the watcher, the actions, the notifier and
    /// the API all land). Another process writing at once (the CLI judging it) may still win.
    pub fn modify(
        &self,
        id: &str,
        change: impl FnOnce(&mut Incident),
    ) -> Result<Incident, RcaError> {
        // a panic while holding it left no half-written file (writes are atomic): go on
        let _guard = MODIFY
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut incident = self.get(id)?;
        change(&mut incident);
        incident.updated_at = timestamp_now();
        // per-call temporary names: another process may write the same incident
        durable::write_atomic_concurrent(&self.path_of(id), &incident_bytes(&incident)?)
            .map_err(durable_error)?;
        Ok(incident)
    }

    fn create_with(
        &self,
        rca: &RcaReport,
        watch: Option<WatchRecord>,
        orgs: Option<Vec<String>>,
    ) -> Result<Incident, RcaError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| RcaError::io(&self.dir, e))?;
        let onset_ns = rca
            .symptom
            .as_ref()
            .map(|s| s.onset)
            .or_else(|| rca.incident_window.as_ref().map(|w| w.since))
            .unwrap_or_else(infersight_model::time::now_ns);
        let stamp = DateTime::<Utc>::from_timestamp_nanos(onset_ns).format("%Y%m%dT%H%M%SZ");
        let now = timestamp_now();
        let mut incident = Incident {
            id: String::new(),
            created_at: now.clone(),
            updated_at: now,
            status: IncidentStatus::Open,
            note: None,
            rca: rca.clone(),
            watch,
            actions: Vec::new(),
            notifications: Vec::new(),
            related: Vec::new(),
            orgs,
        };
        incident.rca.incident_id = None;
        // incidents of the same event stored before: linked both ways once this one exists
        let earlier = self.same_event_as(rca, incident.orgs.as_ref());
        incident.related = earlier.iter().map(|i| i.id.clone()).collect();
        let counter = CREATE_COUNTER.fetch_add(1, Ordering::Relaxed);
        for attempt in 0..MAX_ID_ATTEMPTS {
            let mut hasher = DefaultHasher::new();
            (
                infersight_model::time::now_ns(),
                std::process::id(),
                counter,
                attempt,
                &rca.verdict,
            )
                .hash(&mut hasher);
            incident.id = format!("inc-{stamp}-{:04x}", hasher.finish() & 0xffff);
            let target = self.path_of(&incident.id);
            if durable::create_new_atomic(&target, &incident_bytes(&incident)?)
                .map_err(durable_error)?
            {
                self.link_back(&incident.id, &earlier);
                return Ok(incident);
            }
        }
        Err(RcaError::Io(format!(
            "{}: no free incident id for onset {stamp} after {MAX_ID_ATTEMPTS} attempts",
            self.dir.display()
        )))
    }

    /// The stored incidents of the same event as `rca` ([`related::same_event`]), oldest
    /// first, at most [`related::MAX_RELATED`]; an unreadable store links nothing.
    fn same_event_as(&self, rca: &RcaReport, orgs: Option<&Vec<String>>) -> Vec<Incident> {
        let mut found: Vec<Incident> = match self.list() {
            Ok(all) => all
                .into_iter()
                .filter(|other| other.orgs.as_ref() == orgs)
                .filter(|other| related::same_event(&other.rca, rca))
                .take(related::MAX_RELATED)
                .collect(),
            Err(error) => {
                tracing::warn!(%error, "incidents not read: the new one is linked to none");
                Vec::new()
            }
        };
        found.reverse();
        found
    }

    /// Adds `id` to the `related` list of each of `earlier`; a failure is warned about (the new
    /// incident still lists them).
    fn link_back(&self, id: &str, earlier: &[Incident]) {
        for other in earlier {
            let linked = self.modify(&other.id, |incident| {
                if !incident.related.iter().any(|r| r == id) {
                    incident.related.push(id.to_string());
                }
            });
            if let Err(error) = linked {
                tracing::warn!(incident = %other.id, related = id, %error, "not linked back");
            }
        }
    }

    /// One incident; `NotFound` when there is none with that id, `BadRequest` for a malformed id.
    pub fn get(&self, id: &str) -> Result<Incident, RcaError> {
        check_id(id)?;
        let path = self.path_of(id);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RcaError::NotFound(format!("no incident `{id}`")));
            }
            Err(e) => return Err(RcaError::io(&path, e)),
        };
        serde_json::from_str(&text)
            .map_err(|e| RcaError::io(&path, format!("unreadable incident: {e}")))
    }

    /// Every readable incident, newest first (by creation time, then id); unreadable files are
    /// skipped with a warning.
    pub fn list(&self) -> Result<Vec<Incident>, RcaError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(RcaError::io(&self.dir, e)),
        };
        let mut incidents = Vec::new();
        for entry in entries {
            let path = match entry {
                Ok(entry) => entry.path(),
                Err(error) => {
                    tracing::warn!(dir = %self.dir.display(), %error, "skipping an unreadable entry");
                    continue;
                }
            };
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            let parsed = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    serde_json::from_str::<Incident>(&text).map_err(|e| e.to_string())
                });
            match parsed {
                Ok(incident) => incidents.push(incident),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "skipping an unreadable incident");
                }
            }
        }
        incidents.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| b.id.cmp(&a.id))
        });
        Ok(incidents)
    }

    /// Records a person's judgement; `note: None` keeps the note there was.
    pub fn set_status(
        &self,
        id: &str,
        status: IncidentStatus,
        note: Option<String>,
    ) -> Result<Incident, RcaError> {
        self.modify(id, |incident| {
            incident.status = status;
            if let Some(note) = note {
                let note = note.trim().to_string();
                incident.note = (!note.is_empty()).then_some(note);
            }
        })
    }

    /// The incidents the watcher opened that have not resolved, newest first.
    pub fn watched_open(&self) -> Result<Vec<Incident>, RcaError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(Incident::is_watched_open)
            .collect())
    }

    /// The confirmed incidents, newest first (the knowledge base's past incidents).
    pub fn confirmed(&self) -> Result<Vec<Incident>, RcaError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|i| i.status == IncidentStatus::Confirmed)
            .collect())
    }
}

/// An incident as stored: pretty JSON and a final newline.
fn incident_bytes(incident: &Incident) -> Result<Vec<u8>, RcaError> {
    let mut json = serde_json::to_vec_pretty(incident)
        .map_err(|e| RcaError::Io(format!("incident {}: {e}", incident.id)))?;
    json.push(b'\n');
    Ok(json)
}

fn durable_error(error: DurableError) -> RcaError {
    RcaError::io(&error.path, error.source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> RcaReport {
        serde_json::from_value(serde_json::json!({
            "symptom": null, "root_causes": [], "signals": [], "log_evidence": [],
            "suggestions": [], "checklist": [], "fleet_wide": false,
            "incident_window": {"since": "2025-11-29T02:20:00.000Z", "until": "2025-11-29T02:30:00.000Z"},
            "baseline_window": {"since": "2025-11-29T02:00:00.000Z", "until": "2025-11-29T02:20:00.000Z"},
            "window_source": "given", "verdict": "nothing changed", "elapsed_ms": 1.0, "timings_ms": {}
        }))
        .unwrap()
    }

    fn file_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn incidents_are_pretty_json_with_a_newline_and_leave_no_temporary_files() {
        let data = tempfile::tempdir().unwrap();
        let store = IncidentStore::open(data.path());
        let created = store.create(&report()).unwrap();
        let path = store.dir().join(format!("{}.json", created.id));
        let mut expected = serde_json::to_vec_pretty(&created).unwrap();
        expected.push(b'\n');
        assert_eq!(std::fs::read(&path).unwrap(), expected);

        let judged = store
            .set_status(
                &created.id,
                IncidentStatus::Confirmed,
                Some(" right ".into()),
            )
            .unwrap();
        let mut expected = serde_json::to_vec_pretty(&judged).unwrap();
        expected.push(b'\n');
        assert_eq!(std::fs::read(&path).unwrap(), expected);
        assert_eq!(judged.note.as_deref(), Some("right"));
        assert_eq!(file_names(store.dir()), [format!("{}.json", created.id)]);
    }
    fn watch_record(state: IncidentState) -> WatchRecord {
        WatchRecord {
            state,
            onset: "2025-11-29T02:20:00.000Z".into(),
            detected_at: "2025-11-29T02:22:00.000Z".into(),
            resolved_at: None,
            detections: vec!["sli_change (fleet): ttft rose".into()],
            timeline: vec![
                TimelineEntry {
                    at: "2025-11-29T02:20:00.000Z".into(),
                    event: "onset".into(),
                    detail: String::new(),
                },
                TimelineEntry {
                    at: "2025-11-29T02:22:00.000Z".into(),
                    event: "detected".into(),
                    detail: "ttft".into(),
                },
            ],
            notice: Some(StoredNotice {
                alertname: "InferenceIncident".into(),
                severity: "critical".into(),
                summary: "ttft rose".into(),
                description: "verdict".into(),
                cause: Subject::of([("model_version", "r2")]),
                model: Some("m".into()),
                worker: None,
                extra_labels: BTreeMap::new(),
            }),
        }
    }

    fn action(at: &str) -> ActionRecord {
        ActionRecord {
            at: at.into(),
            action: "shrink_batch".into(),
            target: "model=m".into(),
            outcome: "delivered".into(),
            policy: Some("p".into()),
            detail: None,
        }
    }

    fn notification(at: &str) -> NotificationRecord {
        NotificationRecord {
            at: at.into(),
            sink: "alertmanager".into(),
            target: "127.0.0.1:9093".into(),
            transition: "opened".into(),
            outcome: "sent".into(),
            detail: None,
        }
    }

    #[test]
    fn concurrent_changes_from_the_watcher_actions_and_notifier_all_land() {
        let data = tempfile::tempdir().unwrap();
        let store = IncidentStore::open(data.path());
        let created = store
            .create_watched(&report(), watch_record(IncidentState::Open))
            .unwrap();
        let id = created.id.clone();
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (store, id) = (store.clone(), id.clone());
                scope.spawn(move || {
                    for i in 0..10 {
                        let at = format!("2025-11-29T02:3{t}:{i:02}.000Z");
                        match t {
                            0 => drop(store.record_action(&id, action(&at)).unwrap()),
                            1 => drop(store.record_notification(&id, notification(&at)).unwrap()),
                            // the watcher rewrites its record and verdict meanwhile
                            _ => drop(
                                store
                                    .update_watched(
                                        &id,
                                        &report(),
                                        &watch_record(IncidentState::Open),
                                    )
                                    .unwrap(),
                            ),
                        }
                    }
                });
            }
        });
        let stored = store.get(&id).unwrap();
        assert_eq!(
            stored.actions.len(),
            10,
            "no action lost to a concurrent rewrite"
        );
        assert_eq!(stored.notifications.len(), 10);
        assert!(stored.watch.is_some());
    }

    #[test]
    fn the_timeline_merges_watcher_actions_notifications_and_judgement_in_time_order() {
        let data = tempfile::tempdir().unwrap();
        let store = IncidentStore::open(data.path());
        let mut record = watch_record(IncidentState::Open);
        let id = store.create_watched(&report(), record.clone()).unwrap().id;
        store
            .record_notification(&id, notification("2025-11-29T02:22:01.000Z"))
            .unwrap();
        store
            .record_action(&id, action("2025-11-29T02:21:00.000Z"))
            .unwrap();
        record.state = IncidentState::Resolved;
        record.resolved_at = Some("2025-11-29T02:40:00.000Z".into());
        record.timeline.push(TimelineEntry {
            at: "2025-11-29T02:40:00.000Z".into(),
            event: "resolved".into(),
            detail: "quiet".into(),
        });
        store.update_watched(&id, &report(), &record).unwrap();
        let judged = store
            .set_status(&id, IncidentStatus::Confirmed, Some("rolled back".into()))
            .unwrap();
        let events: Vec<String> = judged.timeline().into_iter().map(|e| e.event).collect();
        assert_eq!(
            events,
            [
                "onset",
                "action",
                "detected",
                "notified",
                "resolved",
                "confirmed"
            ],
            "{:#?}",
            judged.timeline()
        );
        assert_eq!(
            judged.actions.len(),
            1,
            "the watcher's rewrite kept the action"
        );

        let row = judged.summary();
        assert_eq!(row["origin"], "watch");
        assert_eq!(row["state"], "resolved");
        assert_eq!(row["severity"], "critical");
        assert_eq!(row["detected_at"], "2025-11-29T02:22:00.000Z");
        assert_eq!(row["actions"], 1);

        // the notice is rebuilt with the labels it was sent with
        let notice = judged.notice().unwrap();
        assert_eq!(notice.incident_id, id);
        assert_eq!(notice.severity, Severity::Critical);
        assert_eq!(notice.model.as_deref(), Some("m"));
        assert_eq!(notice.cause, Subject::of([("model_version", "r2")]));
        assert!(notice.resolved_ns.is_some());
        // a verdict a person asked for has none, and an empty story
        let manual = store.create(&report()).unwrap();
        assert!(manual.notice().is_none());
        assert!(manual.timeline().is_empty());
        assert_eq!(manual.summary()["origin"], "rca");
    }
}
