//! Assembles the report: an incident's RCA verdict, the runbooks and past incidents retrieved for
//! its evidence, advice drawn from them (with the retrieval score), the chart data read from the
//! store, and the optional LLM narrative. Rendering lives in `render`.

use std::path::PathBuf;

use infersight_query::rca::RcaReport;
use serde::{Deserialize, Serialize};

use crate::data::ChartData;
use crate::knowledge::KnowledgeHit;
use crate::narrative::{LlmConfig, Narrative};

/// The `[report]` configuration section.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportConfig {
    /// Extra runbooks (Markdown, same format as `knowledge/`) indexed beside the built-in ones;
    /// a file with the id of a built-in runbook replaces it. Empty: built-in only.
    pub knowledge_dir: PathBuf,
    /// How many runbooks and past incidents the report shows.
    pub retrieval_limit: usize,
    /// Optional OpenAI-compatible endpoint for a narrative.
    pub llm: LlmConfig,
}

impl Default for ReportConfig {
    fn default() -> Self {
        Self {
            knowledge_dir: PathBuf::new(),
            retrieval_limit: 5,
            llm: LlmConfig::default(),
        }
    }
}

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
