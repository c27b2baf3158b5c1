//! The report as a document: everything a person needs to act on one incident, as `report`
//! assembles it and `render` writes it (JSON, Markdown, HTML) and `charts` draws it.

use infersight_rca::RcaReport;
use infersight_rca::incidents::{ActionRecord, Incident, IncidentState, TimelineEntry};
use serde::{Deserialize, Serialize};

use crate::data::ChartData;
use crate::knowledge::KnowledgeHit;

/// One suggestion or checklist item with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Advice {
    pub text: String,
    /// Runbook id, `incident:<id>`, or `rca` (the engine's own advice).
    pub source: String,
    /// Retrieval score of the source (BM25); 0 for the engine's own advice.
    pub score: f32,
}

/// Everything a person needs to act on one incident.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub incident_id: String,
    /// RFC 3339.
    pub generated_at: String,
    /// The engine's verdict (the `rca` JSON contract).
    pub rca: RcaReport,
    /// Runbooks and past incidents matching the evidence, best first.
    pub knowledge: Vec<KnowledgeHit>,
    pub suggestions: Vec<Advice>,
    pub checklist: Vec<Advice>,
    /// The series the charts are drawn from.
    pub charts: ChartData,
    /// The LLM's narrative, when an endpoint is configured and its reply validated.
    pub narrative: Option<Narrative>,
    /// Why there is no narrative (not configured, timed out, failed validation: the reason).
    pub narrative_note: Option<String>,
    /// How the incident unfolded: the watcher's record, the automatic actions taken, the
    /// timeline (absent when nothing was recorded beyond the verdict).
    #[serde(default, skip_serializing_if = "IncidentSection::is_empty")]
    pub incident: IncidentSection,
    /// What to read first: the symptom with units, what to do now, the first check and the
    /// runbook's confirm steps with their SQL, each cause's kind and workers.
    #[serde(default)]
    pub lead: crate::lead::Lead,
}

/// The report's incident section: what the stored incident recorded besides its verdict.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IncidentSection {
    /// `open` / `resolved` for an incident the watcher opened; `None` for one a person asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<IncidentState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    /// RFC 3339 times of the watcher's record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub onset: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detected_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<String>,
    /// What fired, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detections: Vec<String>,
    /// Automatic actions taken while it was open (time, action, target, outcome).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionRecord>,
    /// Onset, detection, verdict updates, actions, notifications, resolution, judgement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<TimelineEntry>,
}

impl IncidentSection {
    /// The section of a stored incident (`Incident::timeline` is the one merge).
    pub fn of(incident: &Incident) -> IncidentSection {
        let watch = incident.watch.as_ref();
        let timeline = incident.timeline();
        IncidentSection {
            state: watch.map(|w| w.state),
            severity: watch.and_then(|w| w.severity()).map(str::to_string),
            onset: watch.map(|w| w.onset.clone()),
            detected_at: watch.map(|w| w.detected_at.clone()),
            resolved_at: watch.and_then(|w| w.resolved_at.clone()),
            detections: watch.map(|w| w.detections.clone()).unwrap_or_default(),
            actions: incident.actions.clone(),
            // a judgement alone is no story: the section stays empty for a plain verdict
            timeline: if watch.is_some()
                || !incident.actions.is_empty()
                || !incident.notifications.is_empty()
            {
                timeline
            } else {
                Vec::new()
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self == &IncidentSection::default()
    }
}

/// A validated narrative.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Narrative {
    pub cause: String,
    pub confidence: f64,
    pub fixes: Vec<String>,
    pub checklist: Vec<String>,
}
