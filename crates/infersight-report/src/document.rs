//! The report as a document: everything a person needs to act on one incident, as `report`
//! assembles it and `render` writes it (JSON, Markdown, HTML) and `charts` draws it.

use infersight_rca::RcaReport;
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
}

/// A validated narrative.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Narrative {
    pub cause: String,
    pub confidence: f64,
    pub fixes: Vec<String>,
    pub checklist: Vec<String>,
}
