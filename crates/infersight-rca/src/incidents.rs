//! Incidents: every RCA verdict is stored under `<data>/incidents/` with an id; a person confirms
//! or rejects it (`infersight incidents confirm ID --note …`), and confirmed ones become
//! retrievable past incidents in the knowledge base.
//!
//! One JSON file per incident, `<data>/incidents/<id>.json`, written atomically (temporary file,
//! fsync, then a no-clobber link or rename), so a crash never leaves a half-written incident
//! under its real name and two creates never overwrite each other. Ids look like
//! `inc-20251129T022000Z-3fa9`: the incident's onset (UTC, so ids sort by time) and 4 hex digits
//! that make them unique.

use std::fs::{File, OpenOptions};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::RcaReport;
use chrono::{DateTime, SecondsFormat, Utc};
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
        };
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
            let tmp = self.write_tmp(&incident)?;
            let target = self.path_of(&incident.id);
            match publish_new(&tmp, &target) {
                Ok(true) => {
                    sync_dir(&self.dir);
                    return Ok(incident);
                }
                Ok(false) => continue,
                Err(e) => return Err(RcaError::io(&target, e)),
            }
        }
        Err(RcaError::Io(format!(
            "{}: no free incident id for onset {stamp} after {MAX_ID_ATTEMPTS} attempts",
            self.dir.display()
        )))
    }

    /// Writes `incident` to a fresh temporary file in the store's directory, synced to disk.
    fn write_tmp(&self, incident: &Incident) -> Result<PathBuf, RcaError> {
        let json = serde_json::to_vec_pretty(incident)
            .map_err(|e| RcaError::Io(format!("incident {}: {e}", incident.id)))?;
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}-{}.json",
            incident.id,
            std::process::id(),
            CREATE_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| RcaError::io(&tmp, e))?;
        let written = file
            .write_all(&json)
            .and_then(|()| file.write_all(b"\n"))
            .and_then(|()| file.sync_all());
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(RcaError::io(&tmp, e));
        }
        Ok(tmp)
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
        let tmp = self.write_tmp(&incident)?;
        let target = self.path_of(id);
        if let Err(e) = std::fs::rename(&tmp, &target) {
            let _ = std::fs::remove_file(&tmp);
            return Err(RcaError::io(&target, e));
        }
        sync_dir(&self.dir);
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

/// Moves the synced temporary file to `target` unless `target` exists: `Ok(false)` when it
/// does. A hard link is atomic and never clobbers; where links are not supported, an existence
/// check and a rename do (racy only against another process creating the same id at once).
fn publish_new(tmp: &Path, target: &Path) -> std::io::Result<bool> {
    let outcome = match std::fs::hard_link(tmp, target) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(_) if target.exists() => Ok(false),
        Err(_) => std::fs::rename(tmp, target).map(|()| true),
    };
    // After a link (or a failure) the temporary name is removed; after a rename it is gone.
    if tmp.exists() {
        let _ = std::fs::remove_file(tmp);
    }
    outcome
}

/// Makes a rename durable (best effort: not every platform can sync a directory).
fn sync_dir(dir: &Path) {
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
}
