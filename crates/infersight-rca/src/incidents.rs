//! Incidents: every RCA verdict is stored under `<data>/incidents/` with an id; a person confirms
//! or rejects it (`infersight incidents confirm ID --note …`), and confirmed ones become
//! retrievable past incidents in the knowledge base.
//!
//! One JSON file per incident, `<data>/incidents/<id>.json`, written atomically (temporary file,
//! fsync, then a no-clobber link or rename, fsync of the directory: `infersight_model::durable`),
//! so a crash never leaves a half-written incident under its real name and two creates never
//! overwrite each other. Ids look like `inc-20251129T022000Z-3fa9`: the incident's onset (UTC,
//! so ids sort by time) and 4 hex digits that make them unique.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::RcaReport;
use chrono::{DateTime, SecondsFormat, Utc};
use infersight_model::durable::{self, DurableError};
use serde::{Deserialize, Serialize};

use crate::RcaError;

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
}

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
}

/// The incidents of one data directory.
#[derive(Debug, Clone)]
pub struct IncidentStore {
    dir: PathBuf,
}

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
        self.create_with(rca, None)
    }

    /// Stores a new incident for `rca` that the watcher opened, with its record.
    pub fn create_watched(
        &self,
        rca: &RcaReport,
        watch: WatchRecord,
    ) -> Result<Incident, RcaError> {
        self.create_with(rca, Some(watch))
    }

    /// Rewrites an incident the watcher keeps up to date (a new verdict, a detection, its
    /// resolution); a person's judgement stored meanwhile is kept.
    pub fn update_watched(
        &self,
        id: &str,
        rca: &RcaReport,
        watch: &WatchRecord,
    ) -> Result<Incident, RcaError> {
        let mut incident = self.get(id)?;
        incident.rca = rca.clone();
        incident.rca.incident_id = None;
        incident.watch = Some(watch.clone());
        incident.updated_at = timestamp_now();
        durable::write_atomic_concurrent(&self.path_of(id), &incident_bytes(&incident)?)
            .map_err(durable_error)?;
        Ok(incident)
    }

    fn create_with(
        &self,
        rca: &RcaReport,
        watch: Option<WatchRecord>,
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
        };
        incident.rca.incident_id = None;
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
                return Ok(incident);
            }
        }
        Err(RcaError::Io(format!(
            "{}: no free incident id for onset {stamp} after {MAX_ID_ATTEMPTS} attempts",
            self.dir.display()
        )))
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
        let mut incident = self.get(id)?;
        incident.status = status;
        if let Some(note) = note {
            let note = note.trim().to_string();
            incident.note = (!note.is_empty()).then_some(note);
        }
        incident.updated_at = timestamp_now();
        // the CLI and the server may judge the same incident at once: per-call temporary names
        durable::write_atomic_concurrent(&self.path_of(id), &incident_bytes(&incident)?)
            .map_err(durable_error)?;
        Ok(incident)
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
}
