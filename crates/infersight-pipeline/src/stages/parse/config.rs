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
    /// Emit a `requests` row for every TGI / SGLang request-completion log line that belongs to
    /// no traced span (see `requests.rs`). Off by default: when the same engines also export
    /// spans, their raw log lines carry no `span_id` and each request would be counted twice.
    /// Turn it on for engines that only log; while off, such lines are counted
    /// (`request_lines_ignored`) and the first one is reported once.
    pub requests_from_logs: bool,
}

impl Default for ParseConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            emit_metrics: true,
            redact_text: true,
            requests_from_logs: false,
        }
    }
}

impl ParseConfig {
    pub fn validate(&self) -> Vec<String> {
        Vec::new()
    }
}
