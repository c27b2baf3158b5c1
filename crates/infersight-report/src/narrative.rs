//! Optional LLM narrative: the report's evidence (never raw prompts) goes to an OpenAI-compatible
//! endpoint (http, or https verified as [`crate::tls`] says); the reply must validate against a
//! JSON schema or it is discarded with a reason.
//!
//! What the model sees is an allow-list, built field by field in [`evidence_prompt`]: the
//! verdict, the symptom's numbers and windows, the root-cause slices with their explained
//! fractions and evidence, the signals, the log templates (already masked by the template miner)
//! and the retrieved runbooks' titles, scores, fixes and checklists. Never request payloads, log
//! bodies, chart series, runbook summaries or anything added to the report later without being
//! added here. On top of that, every string is scrubbed ([`scrub`]): e-mail addresses, long digit
//! runs (phone, card and account numbers) and long hex or base64-like tokens (keys, trace ids)
//! are masked; slice entries keyed by an identifier attribute (`session_id`, `enduser.id`, …) are
//! dropped; anything after `prompt:`-like markers in a template is cut; lengths are capped.
//!
//! Failure never breaks the report: an empty endpoint, an unreachable or slow endpoint, a non-2xx
//! answer, a reply that is not a chat completion or not valid against [`NARRATIVE_SCHEMA`] all
//! give no narrative and a note with the reason (also logged as a warning).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub use crate::document::Narrative;
use crate::document::Report;
// slice entries with these keys never reach the prompt (tenants do: the model needs them)
use crate::privacy::{IDENTIFYING_KEYS, cut_content};
use crate::tls;

/// The `[report.llm]` configuration section; an empty endpoint turns the narrative off.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    /// Base URL of an OpenAI-compatible API (`http://127.0.0.1:8000/v1`,
    /// `https://api.example.com/v1`); `/chat/completions` is appended. Empty: no narrative.
    pub endpoint: String,
    /// Model name sent with the request (omitted when empty; servers with one model accept that).
    pub model: String,
    /// Name of the environment variable holding the API key (keys never live in config files).
    /// Empty: no `Authorization` header.
    pub api_key_env: String,
    /// Whole-request timeout, e.g. `20s`, `500ms`.
    pub timeout: String,
    /// Upper bound on the reply's tokens.
    pub max_tokens: u32,
    /// A PEM file of CA certificates an `https://` endpoint is verified against instead of the
    /// web's roots (a private CA, a self-signed gateway); see [`crate::tls`].
    pub ca_file: String,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            endpoint: String::new(),
            model: String::new(),
            api_key_env: String::new(),
            timeout: "20s".to_string(),
            max_tokens: 1024,
            ca_file: String::new(),
        }
    }
}

impl LlmConfig {
    /// Every problem of the section, prefixed with `report.llm.` field names.
    pub fn validate(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if let Err(e) = self.timeout_duration() {
            errors.push(format!("report.llm.timeout: {e}"));
        }
        if self.max_tokens == 0 {
            errors.push("report.llm.max_tokens: must be at least 1".to_string());
        }
        let endpoint = self.endpoint.trim();
        if !endpoint.is_empty() && !tls::is_web_url(endpoint) {
            errors.push(format!(
                "report.llm.endpoint: `{endpoint}` must start with http:// or https://"
            ));
        }
        errors.extend(tls::check_ca_file("report.llm.ca_file", &self.ca_file));
        if !self.api_key_env.is_empty()
            && !self
                .api_key_env
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            errors.push(format!(
                "report.llm.api_key_env: `{}` is not an environment variable name (give the \
                 variable's name, not the key)",
                self.api_key_env
            ));
        }
        errors
    }

    /// The timeout as a duration.
    pub fn timeout_duration(&self) -> Result<Duration, String> {
        infersight_model::time::parse_duration_ns(&self.timeout)
            .filter(|ns| *ns > 0)
            .map(|ns| Duration::from_nanos(ns as u64))
            .ok_or_else(|| format!("`{}` is not a duration like 20s or 500ms", self.timeout))
    }
}

/// What [`narrate`] produced: a narrative, or the reason there is none.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NarrativeOutcome {
    pub narrative: Option<Narrative>,
    pub note: Option<String>,
}

/// One chat message of the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// The JSON Schema (draft 2020-12) a reply must satisfy; [`validate_reply`] enforces it.
pub const NARRATIVE_SCHEMA: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "infersight incident narrative",
  "type": "object",
  "properties": {
    "cause": {"type": "string", "minLength": 1, "maxLength": 2000,
              "description": "the most likely root cause, in a few sentences, citing the evidence"},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1,
                   "description": "how well the evidence supports the cause"},
    "fixes": {"type": "array", "minItems": 1, "maxItems": 10,
              "items": {"type": "string", "minLength": 1},
              "description": "fixes to try, most promising first"},
    "checklist": {"type": "array", "minItems": 1, "maxItems": 20,
                  "items": {"type": "string", "minLength": 1},
                  "description": "checks that verify the fix worked"}
  },
  "required": ["cause", "confidence", "fixes", "checklist"],
  "additionalProperties": false
}"#;

const CAUSE_MAX_CHARS: usize = 2000;
const FIXES_MAX: usize = 10;
const CHECKLIST_MAX: usize = 20;
/// Caps on what the prompt carries (the strongest evidence comes first in every list).
const MAX_ROOT_CAUSES: usize = 5;
const MAX_SIGNALS: usize = 12;
const MAX_LOG_TEMPLATES: usize = 10;
const MAX_RUNBOOKS: usize = 5;
const MAX_LIST_ITEMS: usize = 10;
const MAX_STRING_CHARS: usize = 400;
/// The most of a reply body that is read.
const MAX_REPLY_BYTES: u64 = 1 << 20;

const SYSTEM_PROMPT: &str = "You are an SRE assistant for a fleet of LLM inference servers \
(vLLM, SGLang, TGI behind a gateway). You receive the evidence an automated root-cause engine \
collected about one latency or error incident: the verdict, the symptom, the attribute slices \
that explain it, resource and engine signals, log templates that rose with it, and the runbooks \
retrieved for it. Explain the most likely root cause using only this evidence, say how confident \
the evidence lets you be, list fixes to try (prefer the runbooks' fixes when they match) and a \
checklist that verifies the fix. Do not invent metrics, slices or log lines that are not in the \
evidence.";

/// The chat messages sent to the model: a system message with the instructions and the schema,
/// and a user message with the evidence as JSON (see the module docs for what is included).
pub fn evidence_prompt(report: &Report) -> Vec<ChatMessage> {
    let system = format!(
        "{SYSTEM_PROMPT}\n\nAnswer with exactly one JSON object, no prose and no code fence, \
         valid against this JSON Schema:\n{NARRATIVE_SCHEMA}"
    );
    let evidence = evidence_json(report);
    let user = format!(
        "Evidence for incident {}:\n{}",
        scrub(&report.incident_id),
        serde_json::to_string_pretty(&evidence).unwrap_or_else(|_| evidence.to_string())
    );
    vec![
        ChatMessage {
            role: "system".to_string(),
            content: system,
        },
        ChatMessage {
            role: "user".to_string(),
            content: user,
        },
    ]
}

/// The evidence object of the user message, built from an allow-list of report fields.
pub fn evidence_json(report: &Report) -> Value {
    let rca = &report.rca;
    let time = |ns: i64| infersight_model::time::format_rfc3339(ns);
    let window = |w: &Option<infersight_rca::Window>| {
        w.as_ref()
            .map(|w| json!({"since": time(w.since), "until": time(w.until)}))
    };
    let symptom = rca.symptom.as_ref().map(|s| {
        json!({
            "sli": scrub(&s.sli),
            "baseline": round(s.baseline),
            "current": round(s.current),
            "onset": time(s.onset),
            "z": round(s.z),
        })
    });
    let root_causes: Vec<Value> = rca
        .root_causes
        .iter()
        .take(MAX_ROOT_CAUSES)
        .map(|cause| {
            json!({
                "rank": cause.rank,
                "slice": slice(&cause.dimensions),
                "explained_fraction": round(cause.explained_fraction),
                "score": round(cause.score),
                "evidence": strings(&cause.evidence),
            })
        })
        .collect();
    let signals: Vec<Value> = rca
        .signals
        .iter()
        .take(MAX_SIGNALS)
        .map(|signal| {
            json!({
                "kind": scrub(signal.kind.name()),
                "subject": slice(&signal.subject),
                "onset": time(signal.onset),
                "strength": round(signal.strength),
                "detail": scrub(&signal.detail),
            })
        })
        .collect();
    let log_templates: Vec<Value> = rca
        .log_evidence
        .iter()
        .take(MAX_LOG_TEMPLATES)
        .map(|log| {
            json!({
                "template": scrub(&cut_content(&log.template)),
                "lift": round(log.lift),
                "lead_seconds": round(log.lead_seconds),
                "baseline_count": log.baseline_count,
                "incident_count": log.incident_count,
                "slice": slice(&log.subject),
                "lineage": log.lineage.as_ref().map(|l| json!({
                    "records": l.records,
                    "workers": l.workers,
                    "requests": l.requests,
                    "model_versions": l.model_versions,
                })),
            })
        })
        .collect();
    let runbooks: Vec<Value> = report
        .knowledge
        .iter()
        .take(MAX_RUNBOOKS)
        .map(|hit| {
            json!({
                "id": scrub(&hit.id),
                "title": scrub(&hit.title),
                "score": round(f64::from(hit.score)),
                "fixes": strings(&hit.fixes),
                "checklist": strings(&hit.checklist),
            })
        })
        .collect();
    json!({
        "verdict": scrub(&rca.verdict),
        "fleet_wide": rca.fleet_wide,
        "window_source": scrub(&rca.window_source),
        "symptom": symptom,
        "incident_window": window(&rca.incident_window),
        "baseline_window": window(&rca.baseline_window),
        "root_causes": root_causes,
        "signals": signals,
        "log_templates": log_templates,
        "engine_suggestions": strings(&rca.suggestions),
        "engine_checklist": strings(&rca.checklist),
        "runbooks": runbooks,
    })
}

/// Four significant decimals are plenty for a model and keep the prompt short; non-finite
/// numbers become null.
fn round(value: f64) -> Value {
    if !value.is_finite() {
        return Value::Null;
    }
    let rounded = (value * 1e4).round() / 1e4;
    json!(rounded)
}

fn strings(items: &[String]) -> Vec<String> {
    items
        .iter()
        .take(MAX_LIST_ITEMS)
        .map(|s| scrub(s))
        .collect()
}

/// A slice (attribute → value) without identifying attributes, scrubbed.
fn slice(dimensions: &std::collections::BTreeMap<String, String>) -> Map<String, Value> {
    dimensions
        .iter()
        .filter(|(key, _)| !IDENTIFYING_KEYS.contains(&key.to_ascii_lowercase().as_str()))
        .map(|(key, value)| (scrub(key), Value::String(scrub(value))))
        .collect()
}

/// Masks e-mail addresses (`<EMAIL>`), runs of 9+ digits (`<NUM>`) and runs of 20+ letters and
/// digits that mix both, as keys and ids do (`<TOKEN>`), and caps the length. Idempotent.
pub fn scrub(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_STRING_CHARS + 8));
    let mut rest = text;
    while !rest.is_empty() {
        let start = rest
            .find(|c: char| !is_token_char(c))
            .map_or(rest.len(), |i| i);
        if start == 0 {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let token = &rest[..start];
        out.push_str(&mask_token(token));
        rest = &rest[start..];
    }
    if out.chars().count() > MAX_STRING_CHARS {
        let cut: String = out.chars().take(MAX_STRING_CHARS).collect();
        return format!("{cut}…");
    }
    out
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '@' | '.' | '_' | '-' | '+' | '/' | '=')
}

fn mask_token(token: &str) -> String {
    if let Some(at) = token.find('@') {
        let (local, domain) = (&token[..at], &token[at + 1..]);
        if !local.is_empty() && domain.contains('.') && !domain.starts_with('.') {
            return "<EMAIL>".to_string();
        }
    }
    let longest_digit_run = token
        .split(|c: char| !c.is_ascii_digit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    if longest_digit_run >= 9 {
        return "<NUM>".to_string();
    }
    // Keys and ids: one long run of letters and digits mixed (`sk-<30 chars>`, a trace id), not
    // the short dash-separated parts of host, pod or model names.
    let key_like = token.split(['-', '_', '.', '/', '+', '=']).any(|part| {
        let digits = part.chars().filter(|c| c.is_ascii_digit()).count();
        let letters = part.chars().filter(|c| c.is_ascii_alphabetic()).count();
        part.len() >= 20 && digits >= 4 && letters >= 4
    });
    if key_like {
        return "<TOKEN>".to_string();
    }
    token.to_string()
}

/// Checks a model reply against [`NARRATIVE_SCHEMA`]; every violation is named, joined by `; `.
/// A reply wrapped in a Markdown code fence (```` ```json ````) is accepted.
pub fn validate_reply(content: &str) -> Result<Narrative, String> {
    let text = strip_fence(content.trim());
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(object) = value else {
        return Err(format!("expected a JSON object, got {}", type_name(&value)));
    };
    let mut problems = Vec::new();
    for key in object.keys() {
        if !["cause", "confidence", "fixes", "checklist"].contains(&key.as_str()) {
            problems.push(format!("unexpected field `{key}`"));
        }
    }
    let cause = match object.get("cause") {
        None => {
            problems.push("missing field `cause`".to_string());
            None
        }
        Some(Value::String(cause)) => {
            let chars = cause.chars().count();
            if cause.trim().is_empty() {
                problems.push("cause is empty".to_string());
            } else if chars > CAUSE_MAX_CHARS {
                problems.push(format!(
                    "cause has {chars} characters (at most {CAUSE_MAX_CHARS})"
                ));
            }
            Some(cause.trim().to_string())
        }
        Some(other) => {
            problems.push(format!("cause must be a string, got {}", type_name(other)));
            None
        }
    };
    let confidence = match object.get("confidence") {
        None => {
            problems.push("missing field `confidence`".to_string());
            None
        }
        Some(Value::Number(number)) => {
            let value = number.as_f64().unwrap_or(f64::NAN);
            if !(0.0..=1.0).contains(&value) {
                problems.push(format!("confidence {number} is outside 0..1"));
            }
            Some(value)
        }
        Some(other) => {
            problems.push(format!(
                "confidence must be a number, got {}",
                type_name(other)
            ));
            None
        }
    };
    let fixes = string_list(&object, "fixes", FIXES_MAX, &mut problems);
    let checklist = string_list(&object, "checklist", CHECKLIST_MAX, &mut problems);
    match (cause, confidence, fixes, checklist) {
        (Some(cause), Some(confidence), Some(fixes), Some(checklist)) if problems.is_empty() => {
            Ok(Narrative {
                cause,
                confidence,
                fixes,
                checklist,
            })
        }
        _ => Err(problems.join("; ")),
    }
}

fn string_list(
    object: &Map<String, Value>,
    field: &str,
    max: usize,
    problems: &mut Vec<String>,
) -> Option<Vec<String>> {
    let items = match object.get(field) {
        None => {
            problems.push(format!("missing field `{field}`"));
            return None;
        }
        Some(Value::Array(items)) => items,
        Some(other) => {
            problems.push(format!(
                "{field} must be an array of strings, got {}",
                type_name(other)
            ));
            return None;
        }
    };
    let before = problems.len();
    if items.is_empty() {
        problems.push(format!("{field} is empty (1 to {max} items)"));
    } else if items.len() > max {
        problems.push(format!("{field} has {} items (at most {max})", items.len()));
    }
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        match item {
            Value::String(text) if !text.trim().is_empty() => out.push(text.trim().to_string()),
            Value::String(_) => problems.push(format!("{field}[{index}] is empty")),
            other => problems.push(format!(
                "{field}[{index}] must be a string, got {}",
                type_name(other)
            )),
        }
    }
    (problems.len() == before).then_some(out)
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The inside of a ```` ```json … ``` ```` (or bare ```` ``` ````) fence; the text itself otherwise.
fn strip_fence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(body) = rest.trim_end().strip_suffix("```") else {
        return text;
    };
    // Drop the info string (`json`) on the opening line.
    match body.find('\n') {
        Some(newline) if !body[..newline].trim_start().starts_with('{') => {
            body[newline + 1..].trim()
        }
        _ => body.trim(),
    }
}

/// Asks the configured endpoint for a narrative of `report`; see the module docs. Blocking
/// (network i/o bounded by the configured timeout): call it on a blocking thread.
pub fn narrate(config: &LlmConfig, report: &Report) -> NarrativeOutcome {
    narrate_with_env(config, report, &|name| std::env::var(name).ok())
}

/// [`narrate`] with the environment given as a lookup (tests pass their own).
pub fn narrate_with_env(
    config: &LlmConfig,
    report: &Report,
    env: &dyn Fn(&str) -> Option<String>,
) -> NarrativeOutcome {
    if config.endpoint.trim().is_empty() {
        return NarrativeOutcome {
            narrative: None,
            note: Some("no LLM endpoint configured".to_string()),
        };
    }
    match request_narrative(config, report, env) {
        Ok(narrative) => NarrativeOutcome {
            narrative: Some(narrative),
            note: None,
        },
        Err(reason) => {
            tracing::warn!(endpoint = %config.endpoint, "LLM narrative discarded: {reason}");
            NarrativeOutcome {
                narrative: None,
                note: Some(format!("LLM narrative discarded: {reason}")),
            }
        }
    }
}

/// The request body: OpenAI chat completions, deterministic, JSON mode.
pub fn request_body(config: &LlmConfig, report: &Report) -> Value {
    let mut body = json!({
        "messages": evidence_prompt(report),
        "temperature": 0,
        "response_format": {"type": "json_object"},
        "max_tokens": config.max_tokens,
    });
    if !config.model.trim().is_empty() {
        body["model"] = json!(config.model.trim());
    }
    body
}

fn request_narrative(
    config: &LlmConfig,
    report: &Report,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Narrative, String> {
    let timeout = config.timeout_duration()?;
    let endpoint = config.endpoint.trim().trim_end_matches('/');
    let ca_certs = tls::ca_certs("report.llm.ca_file", &config.ca_file)?;
    let url = format!("{endpoint}/chat/completions");
    let key = if config.api_key_env.is_empty() {
        None
    } else {
        let key = env(&config.api_key_env).filter(|k| !k.trim().is_empty());
        if key.is_none() {
            tracing::warn!(
                variable = %config.api_key_env,
                "report.llm.api_key_env names an unset variable; calling the endpoint without a key"
            );
        }
        key
    };
    let mut builder = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .user_agent("infersight-report");
    // A proxy from the environment must not capture an endpoint on this machine.
    if is_loopback(endpoint) {
        builder = builder.proxy(None);
    }
    let agent: ureq::Agent = tls::with_roots(builder, ca_certs.as_ref()).build().into();
    let mut request = agent
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json");
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {}", key.trim()));
    }
    let timed_out = || format!("the endpoint did not answer within {}", config.timeout);
    let mut response = request
        .send_json(request_body(config, report))
        .map_err(|e| match e {
            ureq::Error::Timeout(_) => timed_out(),
            other => format!("request to {url} failed: {other}"),
        })?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_REPLY_BYTES)
        .read_to_string()
        .map_err(|e| match e {
            ureq::Error::Timeout(_) => timed_out(),
            other => format!("reading the reply failed: {other}"),
        })?;
    if !(200..300).contains(&status) {
        let excerpt: String = body.chars().take(200).collect();
        return Err(format!("the endpoint answered HTTP {status}: {excerpt}"));
    }
    let completion: Value = serde_json::from_str(&body)
        .map_err(|e| format!("the reply is not a chat completion (not JSON: {e})"))?;
    let choice = &completion["choices"][0];
    let Some(content) = choice["message"]["content"].as_str() else {
        return Err("the reply is not a chat completion (no choices[0].message.content)".into());
    };
    validate_reply(content).map_err(|reason| {
        let cut = if choice["finish_reason"] == "length" {
            format!(" (the reply was cut at max_tokens {})", config.max_tokens)
        } else {
            String::new()
        };
        format!("the reply does not match the schema: {reason}{cut}")
    })
}

fn is_loopback(endpoint: &str) -> bool {
    let host = endpoint
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .split(['/', '?'])
        .next()
        .unwrap_or("");
    let host = match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(host, "localhost" | "[::1]") || host.starts_with("127.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_masks_personal_data_and_is_idempotent() {
        let text = "user jane.doe@example.com paid with 4111111111111111, key sk-Abc123Def456Ghi789Jkl012Mno345 at 10.0.0.5";
        let once = scrub(text);
        assert_eq!(
            once,
            "user <EMAIL> paid with <NUM>, key <TOKEN> at 10.0.0.5"
        );
        assert_eq!(scrub(&once), once);
        // Ordinary evidence is untouched.
        for plain in [
            "model_version r2 × paged KV cache: +900 ms TTFT",
            "kv_cache_usage_perc rose from 0.41 to 0.97",
            "chat-lora,sql-lora",
            "Received request cmpl-<*>",
            "vllm-deployment-7f9c8d6b5-x2k4p",
        ] {
            assert_eq!(scrub(plain), plain);
        }
        let long = "x ".repeat(400);
        assert!(scrub(&long).chars().count() <= MAX_STRING_CHARS + 1);
    }

    #[test]
    fn templates_are_cut_after_content_markers() {
        assert_eq!(
            cut_content(
                "Received request cmpl-<*>: prompt: 'tell me about my bank account', params: <*>"
            ),
            "Received request cmpl-<*>: prompt: <cut>"
        );
        assert_eq!(
            cut_content("Avg prompt throughput: <*> tokens/s"),
            "Avg prompt throughput: <*> tokens/s"
        );
    }

    #[test]
    fn fences_are_stripped() {
        assert_eq!(strip_fence("```json\n{\"a\":1}\n```"), "{\"a\":1}");
        assert_eq!(strip_fence("```\n{\"a\":1}\n```"), "{\"a\":1}");
        assert_eq!(strip_fence("```{\"a\":1}```"), "{\"a\":1}");
        assert_eq!(strip_fence("{\"a\":1}"), "{\"a\":1}");
    }

    #[test]
    fn config_validation_names_each_problem() {
        let config = LlmConfig {
            endpoint: "ftp://api.example.com/v1".into(),
            timeout: "soon".into(),
            max_tokens: 0,
            api_key_env: "sk-live-123".into(),
            ..LlmConfig::default()
        };
        let errors = config.validate();
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(LlmConfig::default().validate().is_empty());
        let https = LlmConfig {
            endpoint: "https://api.example.com/v1".into(),
            ..LlmConfig::default()
        };
        assert!(https.validate().is_empty(), "{:?}", https.validate());
        let unreadable = LlmConfig {
            ca_file: "/nonexistent/ca.pem".into(),
            ..https
        };
        let errors = unreadable.validate();
        assert!(
            errors.len() == 1 && errors[0].starts_with("report.llm.ca_file: cannot read"),
            "{errors:?}"
        );
        assert!(is_loopback("https://127.0.0.1:8443/v1"));
        assert!(is_loopback("http://127.0.0.1:8000/v1"));
        assert!(is_loopback("http://localhost/v1"));
        assert!(!is_loopback("http://llm.internal:8000/v1"));
    }
}
