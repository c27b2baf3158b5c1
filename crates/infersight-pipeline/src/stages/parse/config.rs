//! Configuration of the `parse` stage (`[stages.parse]`).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ParseConfig {
    pub enabled: bool,
    /// Emit a `metrics` batch for engine statistics lines.
    pub emit_metrics: bool,
    /// Redact prompt and response text split out of mixed lines with the default detectors.
    /// Only in effect when no enabled `redact` stage runs after `parse` (then that stage, with its
    /// path rules and audit, redacts them); it keeps personal data out of `attrs` otherwise.
    pub redact_text: bool,
}

impl Default for ParseConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            emit_metrics: true,
            redact_text: true,
        }
    }
}

impl ParseConfig {
    pub fn validate(&self) -> Vec<String> {
        Vec::new()
    }
}
