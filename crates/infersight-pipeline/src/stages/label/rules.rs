//! Intent rules: `keywords` (case-insensitive substrings of the body, any of them), `templates`
//! (template ids, any of them) and `fields` (all must equal: a logs column such as `severity` or
//! `log_class`, or a key of `attrs`) → `label` with `confidence`. A rule needs at least one
//! criterion; every criterion it has must hold. When several rules match, the highest confidence
//! wins (ties: the earlier rule).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::PipelineError;

/// Label of rows whose template is new and frequent and that no rule labeled.
pub const NEW_TEMPLATE_LABEL: &str = "new_frequent_template";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelRule {
    pub label: String,
    pub confidence: f64,
    #[serde(default)]
    pub keywords: Vec<String>,
    #[serde(default)]
    pub templates: Vec<String>,
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}

impl LabelRule {
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.label.is_empty()
            || !self
                .label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            problems.push(format!(
                "label: `{}` must be non-empty [a-z0-9_]",
                self.label
            ));
        }
        if !(0.0..=1.0).contains(&self.confidence) || self.confidence.is_nan() {
            problems.push(format!("confidence: {} must be in [0, 1]", self.confidence));
        }
        if self.keywords.is_empty() && self.templates.is_empty() && self.fields.is_empty() {
            problems.push("a rule needs keywords, templates or fields".into());
        }
        if self.keywords.iter().any(String::is_empty) {
            problems.push("keywords: must not contain an empty keyword".into());
        }
        problems
    }
}

fn rule(label: &str, confidence: f64, keywords: &[&str]) -> LabelRule {
    LabelRule {
        label: label.into(),
        confidence,
        keywords: keywords.iter().map(|k| k.to_string()).collect(),
        templates: Vec::new(),
        fields: BTreeMap::new(),
    }
}

fn field_rule(label: &str, confidence: f64, key: &str, value: &str) -> LabelRule {
    LabelRule {
        label: label.into(),
        confidence,
        keywords: Vec::new(),
        templates: Vec::new(),
        fields: BTreeMap::from([(key.to_string(), value.to_string())]),
    }
}

/// The built-in rules for serving faults, phrased after what vLLM, SGLang, TGI, PyTorch, NCCL,
/// CUDA and the Linux kernel actually print.
pub fn default_rules() -> Vec<LabelRule> {
    vec![
        rule("oom", 0.9, OOM_KEYWORDS),
        rule("cuda_error", 0.85, CUDA_ERROR_KEYWORDS),
        rule("nccl_error", 0.9, NCCL_ERROR_KEYWORDS),
        rule("timeout", 0.75, TIMEOUT_KEYWORDS),
        rule("preemption", 0.85, PREEMPTION_KEYWORDS),
        rule("kv_cache_full", 0.8, KV_CACHE_FULL_KEYWORDS),
        rule("rate_limited", 0.85, RATE_LIMITED_KEYWORDS),
        field_rule("rate_limited", 0.95, "http_status", "429"),
        rule("auth_failure", 0.8, AUTH_FAILURE_KEYWORDS),
        field_rule("auth_failure", 0.9, "http_status", "401"),
        field_rule("auth_failure", 0.9, "http_status", "403"),
        rule("network_delay", 0.7, NETWORK_DELAY_KEYWORDS),
        rule("truncation", 0.75, TRUNCATION_KEYWORDS),
        field_rule("truncation", 0.85, "finish_reason", "length"),
        rule("worker_restart", 0.8, WORKER_RESTART_KEYWORDS),
    ]
}

// The keywords of the built-in rules, one list per label, in the order of `default_rules`.
const OOM_KEYWORDS: &[&str] = &[
    "out of memory",
    "outofmemoryerror",
    "oom-kill",
    "oom killer",
    "oom_kill",
    "cannot allocate memory",
    "memory allocation failed",
    "failed to allocate",
];

const CUDA_ERROR_KEYWORDS: &[&str] = &[
    "cuda error",
    "cudaerror",
    "cuda runtime error",
    "cublas_status",
    "cudnn_status",
    "device-side assert",
    "illegal memory access",
    "xid ",
    "uncorrectable ecc",
    "cuda driver error",
    "no cuda gpus are available",
];

const NCCL_ERROR_KEYWORDS: &[&str] = &[
    "nccl error",
    "nccl warn",
    "ncclunhandledcudaerror",
    "ncclsystemerror",
    "ncclinternalerror",
    "ncclinvalidusage",
    "ncclremoteerror",
    "nccl timeout",
    "watchdog caught collective operation timeout",
    "process group watchdog",
];

const TIMEOUT_KEYWORDS: &[&str] = &[
    "timed out",
    "timeout",
    "deadline exceeded",
    "deadline_exceeded",
    "time out",
];

const PREEMPTION_KEYWORDS: &[&str] = &[
    "is preempted",
    "preempted by",
    "preemption",
    "preempting",
    "swapped out",
    "retracted",
];

const KV_CACHE_FULL_KEYWORDS: &[&str] = &[
    "not enough kv cache",
    "kv cache is full",
    "no available blocks",
    "out of kv cache",
    "insufficient kv cache",
    "kv cache space",
    "cache blocks exhausted",
    "not enough cache blocks",
];

const RATE_LIMITED_KEYWORDS: &[&str] = &[
    "rate limit",
    "ratelimit",
    "rate_limit",
    "too many requests",
    "quota exceeded",
    "throttled",
    "throttling",
];

const AUTH_FAILURE_KEYWORDS: &[&str] = &[
    "authentication failure",
    "authentication failed",
    "unauthorized",
    "invalid api key",
    "invalid_api_key",
    "permission denied",
    "forbidden",
    "failed password",
    "invalid user",
    "access denied",
];

const NETWORK_DELAY_KEYWORDS: &[&str] = &[
    "connection reset",
    "connection refused",
    "broken pipe",
    "network is unreachable",
    "no route to host",
    "connection aborted",
    "retrying connect",
    "slow network",
    "high latency",
    "packet loss",
    "econnreset",
    "econnrefused",
];

const TRUNCATION_KEYWORDS: &[&str] = &[
    "truncated",
    "finish_reason=length",
    "finish_reason: length",
    "maximum context length",
    "exceeds the maximum",
    "max_tokens reached",
    "too long and exceeds",
];

const WORKER_RESTART_KEYWORDS: &[&str] = &[
    "worker died",
    "worker exited",
    "restarting worker",
    "worker restart",
    "engine core died",
    "enginedeaderror",
    "engine is dead",
    "process died",
    "respawn",
    "restarting engine",
    "shutting down worker",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    rule: Vec<LabelRule>,
}

/// The compiled rule set.
#[derive(Debug, Clone, Default)]
pub struct LabelRules {
    rules: Vec<LabelRule>,
    /// Lower-cased keywords per rule.
    lowered: Vec<Vec<String>>,
}

/// What the matcher needs from one row.
pub struct RowView<'a> {
    pub body: &'a str,
    pub template_id: Option<&'a str>,
    /// Column or attrs value by name.
    pub field: &'a dyn Fn(&str) -> Option<String>,
}

impl LabelRules {
    /// Validates (every problem at once) and compiles `rules`.
    pub fn new(rules: Vec<LabelRule>) -> Result<Self, PipelineError> {
        let problems: Vec<String> = rules
            .iter()
            .enumerate()
            .flat_map(|(index, rule)| {
                rule.validate()
                    .into_iter()
                    .map(move |p| format!("rule[{index}].{p}"))
            })
            .collect();
        if !problems.is_empty() {
            return Err(PipelineError::LabelRules(problems.join("; ")));
        }
        let lowered = rules
            .iter()
            .map(|rule| rule.keywords.iter().map(|k| k.to_lowercase()).collect())
            .collect();
        Ok(Self { rules, lowered })
    }

    /// Reads a TOML (`[[rule]]`) or JSON (`{"rule": [...]}`) rules file.
    pub fn read_file(path: &Path) -> Result<Vec<LabelRule>, PipelineError> {
        let bad =
            |reason: String| PipelineError::LabelRules(format!("{}: {reason}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let file: RulesFile = if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?
        } else {
            toml::from_str(&text).map_err(|e| bad(e.to_string().replace('\n', " ")))?
        };
        Ok(file.rule)
    }

    pub fn rules(&self) -> &[LabelRule] {
        &self.rules
    }

    /// The best matching rule's label and confidence. `lowered_body` is the body lower-cased.
    pub fn classify(&self, row: &RowView<'_>, lowered_body: &str) -> Option<(&str, f64)> {
        let mut best: Option<(usize, f64)> = None;
        for (index, rule) in self.rules.iter().enumerate() {
            if best.is_some_and(|(_, confidence)| rule.confidence <= confidence) {
                continue;
            }
            let keywords = &self.lowered[index];
            if !keywords.is_empty() && !keywords.iter().any(|k| lowered_body.contains(k.as_str())) {
                continue;
            }
            if !rule.templates.is_empty()
                && !row
                    .template_id
                    .is_some_and(|id| rule.templates.iter().any(|t| t == id))
            {
                continue;
            }
            if !rule
                .fields
                .iter()
                .all(|(key, value)| (row.field)(key).is_some_and(|actual| actual == *value))
            {
                continue;
            }
            best = Some((index, rule.confidence));
        }
        best.map(|(index, confidence)| (self.rules[index].label.as_str(), confidence))
    }
}
