//! Optional LLM narrative: the report's evidence (never raw prompts) goes to an OpenAI-compatible
//! endpoint; the reply must validate against a JSON schema or it is discarded with a reason.

use serde::{Deserialize, Serialize};

/// The `[report.llm]` configuration section; an empty endpoint turns the narrative off.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    pub endpoint: String,
}

/// A validated narrative.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Narrative {
    pub cause: String,
    pub confidence: f64,
    pub fixes: Vec<String>,
    pub checklist: Vec<String>,
}
