//! Line parsers of the `parse` stage, pure functions over one log body: mixed LLM lines split by
//! their anchors, key=value pairs and embedded JSON lifted into fields, engine statistics lines
//! (vLLM V0/V1 incl. spec decoding, SGLang batch lines, TGI request spans) turned into metric
//! samples, and uvicorn-style access lines recognized.
//!
//! Hand-written scanners, not regexes: statistics lines are `Label: value unit` lists separated
//! by `, `, which one generic item splitter handles for every engine and every version; a table
//! per engine maps labels to Prometheus source names, and `infersight_model::mapping` maps those to
//! canonical names. Unknown numeric labels are kept (slugged) so a new engine version loses nothing.

use infersight_model::mapping::canonical_metric;
use infersight_model::time::duration_text_seconds;
use serde_json::{Map, Value};

/// What kind of line a log record is (the `log_class` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogClass {
    PromptInput,
    InferenceMetrics,
    ResponseOutput,
    EngineStats,
    Access,
    System,
}

impl LogClass {
    pub fn as_str(self) -> &'static str {
        match self {
            LogClass::PromptInput => "prompt_input",
            LogClass::InferenceMetrics => "inference_metrics",
            LogClass::ResponseOutput => "response_output",
            LogClass::EngineStats => "engine_stats",
            LogClass::Access => "access",
            LogClass::System => "system",
        }
    }
}

/// One metric sample read from a statistics line.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSample {
    /// Canonical name (`requests_running`, `kv_cache_usage_ratio`, …).
    pub name: String,
    /// The engine's own metric name (`vllm:num_requests_running`) or, for labels without one, the
    /// label as printed.
    pub source_name: String,
    /// The number in the line, scaled to the canonical unit (percentages become ratios).
    pub value: f64,
    pub engine: &'static str,
    pub labels: Vec<(String, String)>,
}

/// Top-k token ids and their probabilities (or log-probabilities) from a `[LOGITS]` section.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Logits {
    pub top_k_ids: Vec<i64>,
    pub top_k_probs: Vec<f64>,
    /// `top_k_probs` holds log-probabilities.
    pub logprobs: bool,
}

/// Everything `parse_line` found in one body.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedLine {
    pub class: LogClass,
    /// key=value pairs, embedded JSON fields, access-line fields.
    pub fields: Map<String, Value>,
    pub metrics: Vec<MetricSample>,
    /// Raw (unredacted) prompt and response sections; the stage redacts before storing.
    pub prompt: Option<String>,
    pub response: Option<String>,
    pub logits: Option<Logits>,
}

/// Parses one log body (a full raw line or just its message; anchors are searched anywhere).
pub fn parse_line(body: &str) -> ParsedLine {
    let mut parsed = ParsedLine {
        class: LogClass::System,
        fields: Map::new(),
        metrics: Vec::new(),
        prompt: None,
        response: None,
        logits: None,
    };
    if let Some(sections) = split_anchors(body) {
        apply_sections(&mut parsed, sections);
        return parsed;
    }
    if parse_vllm_stats(body, &mut parsed.metrics) || parse_sglang_batch(body, &mut parsed.metrics)
    {
        parsed.class = LogClass::EngineStats;
        return parsed;
    }
    if let Some(access) = parse_access(body) {
        parsed.fields = access;
        parsed.class = LogClass::Access;
        return parsed;
    }
    key_values(body, &mut parsed.fields);
    embedded_json(body, &mut parsed.fields);
    if parse_tgi(&parsed.fields, &mut parsed.metrics) {
        parsed.class = LogClass::InferenceMetrics;
    }
    // `prompt=` / `response=` fields are text too: take them out of the fields to be redacted.
    for (key, slot) in [("prompt", 0), ("response", 1)] {
        if let Some(Value::String(text)) = parsed.fields.remove(key) {
            if slot == 0 {
                parsed.prompt = Some(text);
            } else {
                parsed.response = Some(text);
            }
        }
    }
    if parsed.prompt.is_some() {
        parsed.class = LogClass::PromptInput;
    } else if parsed.response.is_some() {
        parsed.class = LogClass::ResponseOutput;
    }
    parsed
}

// ---------------------------------------------------------------------------------------------
// Mixed lines: `[PROMPT] … [RESPONSE] … [LOGITS] {…}`

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    Prompt,
    Response,
    Logits,
}

fn anchor_of(name: &str) -> Option<(Anchor, bool)> {
    let upper = name.to_ascii_uppercase();
    match upper.as_str() {
        "PROMPT" | "INPUT" | "USER" => Some((Anchor::Prompt, false)),
        "RESPONSE" | "OUTPUT" | "COMPLETION" | "ASSISTANT" => Some((Anchor::Response, false)),
        "LOGITS" | "TOP_K" | "TOPK" => Some((Anchor::Logits, false)),
        "LOGPROBS" | "TOP_LOGPROBS" => Some((Anchor::Logits, true)),
        _ => None,
    }
}

/// Sections of a mixed line in order, or `None` when the line has no anchor.
fn split_anchors(body: &str) -> Option<Vec<(Anchor, bool, &str)>> {
    let bytes = body.as_bytes();
    let mut anchors: Vec<(usize, usize, Anchor, bool)> = Vec::new(); // (start, end, kind, logprobs)
    let mut index = 0;
    while let Some(offset) = body[index..].find('[') {
        let open = index + offset;
        let Some(close_offset) = body[open..].find(']') else {
            break;
        };
        let close = open + close_offset;
        if close - open <= 14
            && let Some((anchor, logprobs)) = anchor_of(&body[open + 1..close])
        {
            anchors.push((open, close + 1, anchor, logprobs));
        }
        index = open + 1;
        if index >= bytes.len() {
            break;
        }
    }
    if anchors.is_empty() {
        return None;
    }
    let mut sections = Vec::with_capacity(anchors.len());
    for (position, &(_, end, anchor, logprobs)) in anchors.iter().enumerate() {
        let stop = anchors.get(position + 1).map_or(body.len(), |next| next.0);
        let text = body[end..stop].trim();
        let text = text.strip_prefix(':').unwrap_or(text).trim();
        sections.push((anchor, logprobs, text));
    }
    Some(sections)
}

fn apply_sections(parsed: &mut ParsedLine, sections: Vec<(Anchor, bool, &str)>) {
    for (anchor, logprobs, text) in sections {
        match anchor {
            Anchor::Prompt => {
                let text = leading_key_values(text, &mut parsed.fields);
                parsed.prompt = Some(text.to_string());
            }
            Anchor::Response => parsed.response = Some(text.to_string()),
            Anchor::Logits => {
                if let Ok(value) = serde_json::from_str::<Value>(text)
                    && let Some(mut logits) = logits_from_json(&value)
                {
                    logits.logprobs |= logprobs;
                    parsed.logits = Some(logits);
                } else {
                    parsed
                        .fields
                        .insert("logits_unparsed".into(), Value::String(text.to_string()));
                }
            }
        }
    }
    parsed.class = if parsed.prompt.is_some() {
        LogClass::PromptInput
    } else if parsed.response.is_some() {
        LogClass::ResponseOutput
    } else {
        LogClass::InferenceMetrics
    };
}

const ID_KEYS: &[&str] = &[
    "top_k_ids",
    "token_ids",
    "ids",
    "tokens",
    "indices",
    "top_k",
];
const PROB_KEYS: &[&str] = &["top_k_probs", "probs", "probabilities", "values", "scores"];
const LOGPROB_KEYS: &[&str] = &["top_k_logprobs", "logprobs", "log_probs"];

/// Accepts the shapes engines and users print: `{"ids":[…],"probs":[…]}`, `[[id, p], …]`,
/// `[{"id": …, "prob"|"logprob": …}, …]`, `{"<id>": p, …}` — and an object wrapping any of them
/// (`{"top_k": […]}`).
fn logits_from_json(value: &Value) -> Option<Logits> {
    match value {
        Value::Object(object) => {
            let ids = ID_KEYS
                .iter()
                .find_map(|key| object.get(*key).and_then(Value::as_array));
            let probs = PROB_KEYS
                .iter()
                .find_map(|key| object.get(*key).and_then(Value::as_array));
            let logprobs = LOGPROB_KEYS
                .iter()
                .find_map(|key| object.get(*key).and_then(Value::as_array));
            if let (Some(ids), Some(values)) = (ids, probs.or(logprobs))
                && let (Some(ids), Some(values)) = (int_array(ids), float_array(values))
                && ids.len() == values.len()
            {
                return Some(Logits {
                    top_k_ids: ids,
                    top_k_probs: values,
                    logprobs: probs.is_none(),
                });
            }
            // A wrapper around a list: {"top_k": [[id, p], …]}.
            for nested in object.values() {
                if nested.is_array()
                    && let Some(logits) = logits_from_json(nested)
                {
                    return Some(logits);
                }
            }
            // {"<id>": p, …}
            let mut logits = Logits::default();
            for (key, value) in object {
                logits.top_k_ids.push(key.parse().ok()?);
                logits.top_k_probs.push(value.as_f64()?);
            }
            (!logits.top_k_ids.is_empty()).then_some(logits)
        }
        Value::Array(items) => {
            let mut logits = Logits::default();
            for item in items {
                let (id, value, is_log) = match item {
                    Value::Array(pair) if pair.len() == 2 => {
                        (pair[0].as_i64()?, pair[1].as_f64()?, false)
                    }
                    Value::Object(entry) => {
                        let id = ["id", "token_id", "token"]
                            .iter()
                            .find_map(|key| entry.get(*key).and_then(Value::as_i64))?;
                        if let Some(p) = ["prob", "probability", "p"]
                            .iter()
                            .find_map(|key| entry.get(*key).and_then(Value::as_f64))
                        {
                            (id, p, false)
                        } else {
                            let lp = ["logprob", "log_prob"]
                                .iter()
                                .find_map(|key| entry.get(*key).and_then(Value::as_f64))?;
                            (id, lp, true)
                        }
                    }
                    _ => return None,
                };
                logits.top_k_ids.push(id);
                logits.top_k_probs.push(value);
                logits.logprobs |= is_log;
            }
            (!logits.top_k_ids.is_empty()).then_some(logits)
        }
        _ => None,
    }
}

fn int_array(values: &[Value]) -> Option<Vec<i64>> {
    values.iter().map(Value::as_i64).collect()
}

fn float_array(values: &[Value]) -> Option<Vec<f64>> {
    values.iter().map(Value::as_f64).collect()
}

// ---------------------------------------------------------------------------------------------
// Statistics lines

/// `(label as printed, engine source name, canonical name when the mapping table has none)`.
type StatRow = (&'static str, &'static str, &'static str);

const VLLM_STATS: &[StatRow] = &[
    (
        "Avg prompt throughput",
        "vllm:avg_prompt_throughput_toks_per_s",
        "prompt_throughput_tokens_per_second",
    ),
    (
        "Avg generation throughput",
        "vllm:avg_generation_throughput_toks_per_s",
        "generation_throughput_tokens_per_second",
    ),
    ("Running", "vllm:num_requests_running", "requests_running"),
    ("Swapped", "vllm:num_requests_swapped", "requests_swapped"),
    ("Pending", "vllm:num_requests_waiting", "requests_waiting"),
    ("Waiting", "vllm:num_requests_waiting", "requests_waiting"),
    (
        "GPU KV cache usage",
        "vllm:gpu_cache_usage_perc",
        "kv_cache_usage_ratio",
    ),
    (
        "KV cache usage",
        "vllm:kv_cache_usage_perc",
        "kv_cache_usage_ratio",
    ),
    (
        "CPU KV cache usage",
        "vllm:cpu_cache_usage_perc",
        "cpu_kv_cache_usage_ratio",
    ),
    (
        "Prefix cache hit rate",
        "vllm:gpu_prefix_cache_hit_rate",
        "prefix_cache_hit_ratio",
    ),
    (
        "GPU prefix cache hit rate",
        "vllm:gpu_prefix_cache_hit_rate",
        "prefix_cache_hit_ratio",
    ),
    (
        "CPU prefix cache hit rate",
        "vllm:cpu_prefix_cache_hit_rate",
        "cpu_prefix_cache_hit_ratio",
    ),
    // Spec decoding, V0 (`Speculative metrics:`).
    (
        "Draft acceptance rate",
        "vllm:spec_decode_draft_acceptance_rate",
        "spec_draft_acceptance_ratio",
    ),
    (
        "System efficiency",
        "vllm:spec_decode_efficiency",
        "spec_efficiency_ratio",
    ),
    (
        "Number of speculative tokens",
        "vllm:spec_decode_num_speculative_tokens",
        "spec_speculative_tokens",
    ),
    (
        "Number of accepted tokens",
        "vllm:spec_decode_num_accepted_tokens_total",
        "spec_accepted_tokens_total",
    ),
    (
        "Number of draft tokens",
        "vllm:spec_decode_num_draft_tokens_total",
        "spec_draft_tokens_total",
    ),
    (
        "Number of emitted tokens",
        "vllm:spec_decode_num_emitted_tokens_total",
        "spec_emitted_tokens_total",
    ),
    // Spec decoding, V1 (`SpecDecoding metrics:`).
    (
        "Mean acceptance length",
        "vllm:spec_decode_mean_acceptance_length",
        "spec_accept_length",
    ),
    (
        "Accepted throughput",
        "vllm:spec_decode_accepted_throughput",
        "spec_accepted_throughput_tokens_per_second",
    ),
    (
        "Drafted throughput",
        "vllm:spec_decode_drafted_throughput",
        "spec_drafted_throughput_tokens_per_second",
    ),
    (
        "Accepted",
        "vllm:spec_decode_num_accepted_tokens",
        "spec_accepted_tokens",
    ),
    (
        "Drafted",
        "vllm:spec_decode_num_draft_tokens",
        "spec_draft_tokens",
    ),
    (
        "Per-position acceptance rate",
        "vllm:spec_decode_per_position_acceptance_rate",
        "spec_position_acceptance_ratio",
    ),
    (
        "Avg Draft acceptance rate",
        "vllm:spec_decode_draft_acceptance_rate",
        "spec_draft_acceptance_ratio",
    ),
];

const SGLANG_STATS: &[StatRow] = &[
    (
        "#running-req",
        "sglang:num_running_reqs",
        "requests_running",
    ),
    ("#queue-req", "sglang:num_queue_reqs", "requests_waiting"),
    ("token usage", "sglang:token_usage", "kv_cache_usage_ratio"),
    ("#token", "sglang:num_used_tokens", "kv_cache_used_tokens"),
    (
        "gen throughput (token/s)",
        "sglang:gen_throughput",
        "generation_throughput_tokens_per_second",
    ),
    ("#new-seq", "sglang:prefill_new_seqs", "prefill_new_seqs"),
    (
        "#new-token",
        "sglang:prefill_new_tokens",
        "prefill_new_tokens",
    ),
    (
        "#cached-token",
        "sglang:prefill_cached_tokens",
        "prefill_cached_tokens",
    ),
    (
        "#retracted-req",
        "sglang:num_retracted_reqs",
        "requests_retracted",
    ),
    (
        "accept len",
        "sglang:spec_accept_length",
        "spec_accept_length",
    ),
];

/// `Label: value unit` items of a statistics list; items without a colon continue the previous
/// item's value (`Per-position acceptance rate: 0.7, 0.4, 0.2`).
fn stat_items(text: &str) -> Vec<(&str, Vec<&str>)> {
    let mut items: Vec<(&str, Vec<&str>)> = Vec::new();
    for piece in text.split(", ") {
        let piece = piece.trim();
        match piece.rfind(": ") {
            Some(colon) => items.push((piece[..colon].trim(), vec![piece[colon + 2..].trim()])),
            None => {
                if let Some(last) = items.last_mut() {
                    last.1.push(piece);
                }
            }
        }
    }
    items
}

/// `50.0 tokens/s` → (50.0, "tokens/s"); `0.9%` → (0.9, "%"); `3 reqs.` → (3, "reqs").
fn number_and_unit(value: &str) -> Option<(f64, &str)> {
    let value = value.trim().trim_end_matches('.');
    let end = value
        .char_indices()
        .find(|&(index, ch)| {
            !(ch.is_ascii_digit()
                || ch == '.'
                || ((ch == '-' || ch == '+') && index == 0)
                || ch == 'e' && index > 0)
        })
        .map_or(value.len(), |(index, _)| index);
    let number: f64 = value[..end].parse().ok()?;
    Some((number, value[end..].trim()))
}

fn slug(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    for ch in label.chars() {
        if ch.is_ascii_alphanumeric() {
            out.push(ch.to_ascii_lowercase());
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
    }
    out.trim_end_matches('_').to_string()
}

fn push_stats(
    text: &str,
    table: &[StatRow],
    engine: &'static str,
    base_labels: &[(String, String)],
    metrics: &mut Vec<MetricSample>,
) -> usize {
    let before = metrics.len();
    for (label, values) in stat_items(text) {
        let row = table.iter().find(|row| row.0.eq_ignore_ascii_case(label));
        let many = values.len() > 1;
        for (position, value) in values.iter().enumerate() {
            let Some((number, unit)) = number_and_unit(value) else {
                continue;
            };
            let percent = unit == "%";
            let (source, name) = match row {
                Some(&(_, source, fallback)) => {
                    let name =
                        canonical_metric(source).map_or(fallback, |(mapping, _)| mapping.canonical);
                    (source.to_string(), name.to_string())
                }
                None => {
                    let slugged = slug(label);
                    let suffix = if percent { "_ratio" } else { "" };
                    (label.to_string(), format!("{engine}_{slugged}{suffix}"))
                }
            };
            let mut labels = base_labels.to_vec();
            if many {
                labels.push(("position".into(), position.to_string()));
            }
            metrics.push(MetricSample {
                name,
                source_name: source,
                value: if percent { number / 100.0 } else { number },
                engine,
                labels,
            });
        }
    }
    metrics.len() - before
}

/// The vLLM periodic stats line (V0 `Avg prompt throughput: …`, V1 `Engine 000: Avg prompt …`)
/// and the spec-decoding lines (V0 `Speculative metrics: …`, V1 `SpecDecoding metrics: …`).
fn parse_vllm_stats(body: &str, metrics: &mut Vec<MetricSample>) -> bool {
    let start = if let Some(at) = body.find("Avg prompt throughput:") {
        at
    } else if let Some(at) = body
        .find("SpecDecoding metrics:")
        .map(|at| at + "SpecDecoding metrics:".len())
        .or_else(|| {
            body.find("Speculative metrics:")
                .map(|at| at + "Speculative metrics:".len())
        })
    {
        at
    } else {
        return false;
    };
    let mut labels = Vec::new();
    if let Some(engine) = body[..start].rfind("Engine ") {
        let digits: String = body[engine + 7..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if !digits.is_empty() {
            labels.push(("engine_index".to_string(), digits));
        }
    }
    push_stats(body[start..].trim(), VLLM_STATS, "vllm", &labels, metrics) > 0
}

/// SGLang's `Decode batch. #running-req: 1, #token: 95, token usage: 0.00, gen throughput
/// (token/s): 6.02, #queue-req: 0` and `Prefill batch. …` lines.
fn parse_sglang_batch(body: &str, metrics: &mut Vec<MetricSample>) -> bool {
    let Some((at, phase)) = body
        .find("Decode batch.")
        .map(|at| (at + "Decode batch.".len(), "decode"))
        .or_else(|| {
            body.find("Prefill batch.")
                .map(|at| (at + "Prefill batch.".len(), "prefill"))
        })
    else {
        return false;
    };
    let mut labels = vec![("phase".to_string(), phase.to_string())];
    if let Some(tp) = body[..at].find(" TP") {
        let digits: String = body[tp + 3..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if !digits.is_empty() {
            labels.push(("tp_rank".into(), digits));
        }
    }
    push_stats(body[at..].trim(), SGLANG_STATS, "sglang", &labels, metrics) > 0
}

/// TGI's per-request span fields (`total_time="1.2s" queue_time="64µs" time_per_token="20ms"`).
fn parse_tgi(fields: &Map<String, Value>, metrics: &mut Vec<MetricSample>) -> bool {
    const TGI: &[(&str, &str, &str)] = &[
        ("total_time", "tgi_request_duration", "e2e_seconds"),
        (
            "validation_time",
            "tgi_request_validation_duration",
            "validation_seconds",
        ),
        ("queue_time", "tgi_request_queue_duration", "queue_seconds"),
        (
            "inference_time",
            "tgi_request_inference_duration",
            "inference_seconds",
        ),
        (
            "time_per_token",
            "tgi_request_mean_time_per_token_duration",
            "itl_seconds",
        ),
    ];
    if !fields.contains_key("total_time") || !fields.contains_key("time_per_token") {
        return false;
    }
    for &(key, source, fallback) in TGI {
        let Some(seconds) = fields
            .get(key)
            .and_then(Value::as_str)
            .and_then(duration_text_seconds)
        else {
            continue;
        };
        let name = canonical_metric(source).map_or(fallback, |(mapping, _)| mapping.canonical);
        metrics.push(MetricSample {
            name: name.to_string(),
            source_name: source.to_string(),
            value: seconds,
            engine: "tgi",
            labels: Vec::new(),
        });
    }
    true
}

// ---------------------------------------------------------------------------------------------
// Access lines, key=value pairs, embedded JSON

const METHODS: &[&str] = &["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];

/// `"POST /v1/completions HTTP/1.1" 200` anywhere in the line (uvicorn, nginx, gateways).
fn parse_access(body: &str) -> Option<Map<String, Value>> {
    let mut search = 0;
    while let Some(offset) = body[search..].find('"') {
        let quote = search + offset;
        let rest = &body[quote + 1..];
        search = quote + 1;
        let Some(method) = METHODS
            .iter()
            .find(|m| rest.starts_with(*m) && rest[m.len()..].starts_with(' '))
        else {
            continue;
        };
        let after_method = &rest[method.len() + 1..];
        let Some(space) = after_method.find(' ') else {
            continue;
        };
        let path = &after_method[..space];
        let after_path = &after_method[space + 1..];
        if !after_path.starts_with("HTTP/") {
            continue;
        }
        let Some(close) = after_path.find('"') else {
            continue;
        };
        let status: String = after_path[close + 1..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let Ok(status) = status.parse::<u16>() else {
            continue;
        };
        let mut fields = Map::new();
        fields.insert("http_method".into(), Value::String((*method).to_string()));
        fields.insert("http_path".into(), Value::String(path.to_string()));
        fields.insert("http_status".into(), Value::from(status));
        return Some(fields);
    }
    None
}

fn json_scalar(value: &str) -> Value {
    if let Ok(number) = value.parse::<i64>() {
        return Value::from(number);
    }
    if let Ok(number) = value.parse::<f64>()
        && number.is_finite()
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'))
    {
        return Value::from(number);
    }
    Value::String(value.to_string())
}

/// Lifts the `key=value` tokens that open a prompt section (`[PROMPT] request_id=r-7
/// tenant=acme Summarize …`: metadata the logger put before the user's text) into `fields` and
/// returns the rest. Only whole leading tokens with an identifier key and an unquoted value
/// count (at most 16); the first token that is not one ends the metadata, so nothing inside the
/// user's text is read.
fn leading_key_values<'a>(text: &'a str, fields: &mut Map<String, Value>) -> &'a str {
    let mut rest = text;
    for _ in 0..16 {
        let token_end = rest
            .find(|c: char| c.is_ascii_whitespace())
            .unwrap_or(rest.len());
        let token = &rest[..token_end];
        let Some((key, value)) = token.split_once('=') else {
            break;
        };
        let key_ok = key
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !key_ok || value.is_empty() || value.contains(['=', '"', '\'']) {
            break;
        }
        fields
            .entry(key.to_string())
            .or_insert_with(|| json_scalar(value));
        rest = rest[token_end..].trim_start();
    }
    rest
}

/// `key=value` and `key="quoted value"` pairs (at most 64 per line; the first occurrence wins).
fn key_values(body: &str, fields: &mut Map<String, Value>) {
    let bytes = body.as_bytes();
    let mut index = 0;
    let mut found = 0;
    while index < bytes.len() && found < 64 {
        let Some(offset) = body[index..].find('=') else {
            break;
        };
        let equals = index + offset;
        index = equals + 1;
        // The key: identifier characters right before `=`, starting after a boundary.
        let mut key_start = equals;
        while key_start > 0
            && (bytes[key_start - 1].is_ascii_alphanumeric()
                || matches!(bytes[key_start - 1], b'_' | b'.' | b'-'))
        {
            key_start -= 1;
        }
        if key_start == equals
            || !(bytes[key_start].is_ascii_alphabetic() || bytes[key_start] == b'_')
            || (key_start > 0
                && !matches!(
                    bytes[key_start - 1],
                    b' ' | b',' | b'(' | b'{' | b'\t' | b';'
                ))
        {
            continue;
        }
        if bytes.get(equals + 1) == Some(&b'=') {
            index = equals + 2;
            continue;
        }
        let key = &body[key_start..equals];
        let (value, end) = match bytes.get(equals + 1) {
            Some(&quote @ (b'"' | b'\'')) => {
                let mut end = equals + 2;
                while end < bytes.len() && (bytes[end] != quote || bytes[end - 1] == b'\\') {
                    end += 1;
                }
                (
                    &body[(equals + 2).min(end)..end],
                    (end + 1).min(bytes.len()),
                )
            }
            _ => {
                let mut end = equals + 1;
                while end < bytes.len()
                    && !matches!(bytes[end], b' ' | b',' | b')' | b'}' | b'\t' | b';')
                {
                    end += 1;
                }
                (&body[equals + 1..end], end)
            }
        };
        index = end.max(index);
        if !fields.contains_key(key) {
            fields.insert(key.to_string(), json_scalar(value));
            found += 1;
        }
    }
}

/// The first `{…}` in the line that parses as a JSON object: its fields (first occurrence wins).
fn embedded_json(body: &str, fields: &mut Map<String, Value>) {
    let mut search = 0;
    while let Some(offset) = body[search..].find('{') {
        let open = search + offset;
        let mut stream = serde_json::Deserializer::from_str(&body[open..]).into_iter::<Value>();
        if let Some(Ok(Value::Object(object))) = stream.next() {
            for (key, value) in object {
                fields.entry(key).or_insert(value);
            }
            return;
        }
        search = open + 1;
    }
}
