//! A flattened JSON line as a `requests` row: whether the object is a request at all, canonical
//! column names and their common aliases (OpenAI `usage`, gateway logs) set straight into their
//! columns in the column's unit, everything else through the model's `normalize_request`.

use infersight_model::mapping::{AttributeMapper, REQUEST_ATTRIBUTES, RequestColumn, ValueKind};
use infersight_model::normalize::{SpanFacts, normalize_request};
use infersight_model::{AttrValue, RequestRecord};
use serde_json::Value as Json;

/// Keys that identify a JSON line as a request even without `gen_ai.*` / `llm.*` keys.
const REQUEST_HINT_KEYS: &[&str] = &[
    "model",
    "model_name",
    "usage.prompt_tokens",
    "usage.completion_tokens",
    "usage.input_tokens",
    "usage.output_tokens",
    "prompt_tokens",
    "completion_tokens",
    "input_tokens",
    "output_tokens",
    "ttft_ms",
    "e2e_ms",
    "queue_ms",
    "prefill_ms",
    "decode_ms",
];

pub(super) fn looks_like_request(pairs: &[(String, Json)]) -> bool {
    pairs.iter().any(|(key, value)| {
        !value.is_null()
            && (key.starts_with("gen_ai.")
                || key.starts_with("llm.")
                || REQUEST_HINT_KEYS.contains(&key.as_str()))
    })
}

/// Common JSON-lines names for canonical columns (OpenAI `usage`, gateway logs).
const COLUMN_ALIASES: &[(&str, RequestColumn)] = &[
    ("model_name", RequestColumn::Model),
    ("usage.prompt_tokens", RequestColumn::InputTokens),
    ("usage.input_tokens", RequestColumn::InputTokens),
    ("prompt_tokens", RequestColumn::InputTokens),
    ("usage.completion_tokens", RequestColumn::OutputTokens),
    ("usage.output_tokens", RequestColumn::OutputTokens),
    ("completion_tokens", RequestColumn::OutputTokens),
    (
        "usage.prompt_tokens_details.cached_tokens",
        RequestColumn::CachedTokens,
    ),
];

pub(super) enum JsonRequest {
    Request(Box<RequestRecord>),
    /// Nothing in the object marks a request after all; the pairs come back for a log row.
    NotARequest(Vec<(String, Json)>, SpanFacts),
}

/// A JSON object as a request row. Keys that are canonical column names (`ttft_ms`, `model`,
/// `tenant`, …) or their common aliases fill their column directly, in the column's unit, and win
/// over mapped attribute names; everything else goes through `normalize_request`.
pub(super) fn json_request(
    mapper: &AttributeMapper,
    resource: &[(String, AttrValue)],
    pairs: Vec<(String, Json)>,
    facts: SpanFacts,
) -> Result<JsonRequest, String> {
    let mut direct: Vec<(RequestColumn, String, Json)> = Vec::new();
    let mut rest: Vec<(String, Json)> = Vec::new();
    for (key, value) in pairs {
        let column = RequestColumn::from_column_name(&key)
            .filter(|c| *c != RequestColumn::Service)
            .or_else(|| {
                COLUMN_ALIASES
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, c)| *c)
            });
        let Some(column) = column else {
            rest.push((key, value));
            continue;
        };
        // A canonical name wins over an alias (`model` over `model_name`); the loser stays an
        // attribute.
        match direct.iter().position(|(c, _, _)| *c == column) {
            None => direct.push((column, key, value)),
            Some(index) if key == column.column_name() => {
                let (_, old_key, old_value) =
                    std::mem::replace(&mut direct[index], (column, key, value));
                rest.push((old_key, old_value));
            }
            Some(_) => rest.push((key, value)),
        }
    }
    let mut attrs: Vec<(String, AttrValue)> = rest
        .iter()
        .map(|(k, v)| (k.clone(), AttrValue::from_json(v)))
        .collect();
    // A placeholder under the column's first mapped name makes normalize_request treat the
    // column as filled (and request-marking) and drop competing names into attrs; the real value
    // is set afterwards.
    for (column, _, value) in &direct {
        if value.is_null() {
            continue;
        }
        let Some(row) = REQUEST_ATTRIBUTES.iter().find(|row| row.column == *column) else {
            continue;
        };
        if attrs.iter().any(|(k, _)| k == row.key) {
            attrs.retain(|(k, _)| k != row.key);
        }
        let placeholder = match column.value_kind() {
            ValueKind::Label => AttrValue::Str("-".into()),
            ValueKind::Integer => AttrValue::Int(0),
            ValueKind::Number => AttrValue::Double(0.0),
        };
        attrs.push((row.key.to_string(), placeholder));
    }
    let Some(mut record) =
        normalize_request(mapper, resource, &attrs, &facts).map_err(|e| e.to_string())?
    else {
        let mut back = rest;
        back.extend(direct.into_iter().map(|(_, key, value)| (key, value)));
        return Ok(JsonRequest::NotARequest(back, facts));
    };
    for (column, key, value) in &direct {
        set_direct(&mut record, *column, key, value)?;
    }
    Ok(JsonRequest::Request(Box::new(record)))
}

/// Sets a request column from a JSON value given in the column's own unit.
fn set_direct(
    record: &mut RequestRecord,
    column: RequestColumn,
    key: &str,
    value: &Json,
) -> Result<(), String> {
    use RequestColumn::*;
    let attr = AttrValue::from_json(value);
    let wrong = |expected: &str| {
        format!(
            "attribute `{key}` has type {}, expected {expected}",
            attr.type_name()
        )
    };
    let number = || -> Result<Option<f64>, String> {
        match value {
            Json::Null => Ok(None),
            Json::Number(n) => Ok(n.as_f64()),
            Json::String(s) => s.trim().parse::<f64>().map(Some).map_err(|_| {
                format!("attribute `{key}` has value {s:?} that is not a valid number")
            }),
            _ => Err(wrong("number")),
        }
    };
    let integer = || -> Result<Option<i64>, String> {
        match number()? {
            Some(n) if n.fract() == 0.0 && n.is_finite() => Ok(Some(n as i64)),
            Some(n) => Err(format!(
                "attribute `{key}` has value {n} that is not a valid integer"
            )),
            None => Ok(None),
        }
    };
    let label = || -> Result<Option<String>, String> {
        match &attr {
            AttrValue::Empty => Ok(None),
            other => other.as_label().map(Some).ok_or_else(|| wrong("string")),
        }
    };
    match column {
        RequestId => record.request_id = label()?,
        Tenant => record.tenant = label()?,
        SessionId => record.session_id = label()?,
        Service => record.service = label()?,
        Runtime => record.runtime = label()?,
        Worker => record.worker = label()?,
        Device => record.device = label()?,
        Model => record.model = label()?,
        ModelVersion => record.model_version = label()?,
        LoraAdapters => record.lora_adapters = label()?,
        KvCachePolicy => record.kv_cache_policy = label()?,
        FinishReason => record.finish_reason = label()?,
        ErrorType => record.error_type = label()?,
        PromptHash => record.prompt_hash = label()?,
        BatchSize => record.batch_size = integer()?,
        InputTokens => record.input_tokens = integer()?,
        CachedTokens => record.cached_tokens = integer()?,
        OutputTokens => record.output_tokens = integer()?,
        MaxTokens => record.max_tokens = integer()?,
        SpecDraftTokens => record.spec_draft_tokens = integer()?,
        SpecAcceptedTokens => record.spec_accepted_tokens = integer()?,
        QueueMs => record.queue_ms = number()?,
        PrefillMs => record.prefill_ms = number()?,
        TtftMs => record.ttft_ms = number()?,
        DecodeMs => record.decode_ms = number()?,
        TpotMs => record.tpot_ms = number()?,
        ItlMaxMs => record.itl_max_ms = number()?,
        E2eMs => record.e2e_ms = number()?,
        Temperature => record.temperature = number()?,
        TopP => record.top_p = number()?,
    }
    Ok(())
}
