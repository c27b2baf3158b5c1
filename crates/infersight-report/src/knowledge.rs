//! The knowledge base: runbooks from `knowledge/` (embedded in the binary) and confirmed past
//! incidents, indexed with tantivy (BM25) and queried with an RCA verdict's evidence.

use serde::{Deserialize, Serialize};

/// One retrieved runbook or past incident.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KnowledgeHit {
    /// Runbook id (its file stem) or `incident:<id>`.
    pub id: String,
    pub kind: HitKind,
    pub title: String,
    /// BM25 score.
    pub score: f32,
    /// One paragraph: what this is about.
    pub summary: String,
    pub fixes: Vec<String>,
    pub checklist: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HitKind {
    Runbook,
    Incident,
}
