//! Normalization: protocol-neutral key/values of a span (and its resource) → one canonical
//! `RequestRecord`, through the mapping table. Mapped attributes fill columns (with unit
//! conversion); every other attribute, and every mapped one that lost to a higher-priority name,
//! is kept in `attrs` so nothing is dropped.
//!
//! Engines that do not speak GenAI are recognized by their own timing fields: TGI's request span
//! records `total_time`, `queue_time`, `inference_time`, `time_per_token` as duration strings
//! (`"2.046046581s"`), which fill e2e, queue and TPOT when no mapped attribute did.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::breakdown::{
    BreakdownCheck, SpanPhases, TokenTimeline, complete_breakdown, fill_from_phases,
    fill_from_tokens,
};
use crate::error::ModelError;
use crate::mapping::{ALL_REQUEST_COLUMNS, AttributeMapper, RequestColumn, Unit, ValueKind};
use crate::tables::RequestRecord;
use crate::time::duration_text_seconds;
use crate::value::AttrValue;

/// What the span itself says about the request, independent of its attributes.
#[derive(Debug, Clone, Default)]
pub struct SpanFacts {
    pub ts_ns: i64,
    pub end_ts_ns: Option<i64>,
    pub trace_id: Option<String>,
    pub span_id: Option<String>,
    /// `ok`, `error` or `unset`.
    pub status: Option<String>,
}

/// A column value after conversion.
#[derive(Debug, Clone, PartialEq)]
enum Converted {
    Label(String),
    Integer(i64),
    Number(f64),
}

fn convert(
    key: &str,
    value: &AttrValue,
    kind: ValueKind,
    unit: Unit,
) -> Result<Option<Converted>, ModelError> {
    let type_error = |expected: &'static str| ModelError::AttributeType {
        key: key.to_string(),
        expected,
        actual: value.type_name(),
    };
    let number_from_str = |s: &str, expected: &'static str| {
        s.trim()
            .parse::<f64>()
            .map_err(|_| ModelError::AttributeValue {
                key: key.to_string(),
                expected,
                value: s.chars().take(64).collect(),
            })
    };
    match (kind, value) {
        (_, AttrValue::Empty) => Ok(None),
        (ValueKind::Label, AttrValue::Array(items)) if key.ends_with("finish_reasons") => {
            // GenAI puts finish reasons in an array; one request has one reason, so take the first.
            Ok(items
                .first()
                .and_then(AttrValue::as_label)
                .map(Converted::Label))
        }
        (ValueKind::Label, v) => v
            .as_label()
            .map(|s| Some(Converted::Label(s)))
            .ok_or_else(|| type_error("string")),
        (ValueKind::Integer, AttrValue::Int(i)) => Ok(Some(Converted::Integer(*i))),
        (ValueKind::Integer, AttrValue::Double(d)) if d.fract() == 0.0 && d.is_finite() => {
            Ok(Some(Converted::Integer(*d as i64)))
        }
        (ValueKind::Integer, AttrValue::Str(s)) => {
            let n = number_from_str(s, "integer")?;
            if n.fract() != 0.0 || !n.is_finite() {
                return Err(ModelError::AttributeValue {
                    key: key.to_string(),
                    expected: "integer",
                    value: s.clone(),
                });
            }
            Ok(Some(Converted::Integer(n as i64)))
        }
        (ValueKind::Integer, _) => Err(type_error("int")),
        (ValueKind::Number, AttrValue::Int(i)) => {
            Ok(Some(Converted::Number(unit.apply(*i as f64))))
        }
        (ValueKind::Number, AttrValue::Double(d)) if d.is_finite() => {
            Ok(Some(Converted::Number(unit.apply(*d))))
        }
        (ValueKind::Number, AttrValue::Str(s)) => {
            let n = number_from_str(s, "number")?;
            Ok(Some(Converted::Number(unit.apply(n))))
        }
        (ValueKind::Number, _) => Err(type_error("double")),
    }
}

fn set_column(record: &mut RequestRecord, column: RequestColumn, value: Converted) {
    use RequestColumn::*;
    let label = |v: &Converted| match v {
        Converted::Label(s) => Some(s.clone()),
        Converted::Integer(i) => Some(i.to_string()),
        Converted::Number(n) => Some(n.to_string()),
    };
    let integer = |v: &Converted| match v {
        Converted::Integer(i) => Some(*i),
        Converted::Number(n) => Some(*n as i64),
        Converted::Label(_) => None,
    };
    let number = |v: &Converted| match v {
        Converted::Number(n) => Some(*n),
        Converted::Integer(i) => Some(*i as f64),
        Converted::Label(_) => None,
    };
    match column {
        RequestId => record.request_id = label(&value),
        Tenant => record.tenant = label(&value),
        SessionId => record.session_id = label(&value),
        Service => record.service = label(&value),
        Runtime => record.runtime = label(&value),
        Worker => record.worker = label(&value),
        Device => record.device = label(&value),
        Model => record.model = label(&value),
        ModelVersion => record.model_version = label(&value),
        LoraAdapters => record.lora_adapters = label(&value),
        KvCachePolicy => record.kv_cache_policy = label(&value),
        FinishReason => record.finish_reason = label(&value),
        ErrorType => record.error_type = label(&value),
        PromptHash => record.prompt_hash = label(&value),
        BatchSize => record.batch_size = integer(&value),
        InputTokens => record.input_tokens = integer(&value),
        CachedTokens => record.cached_tokens = integer(&value),
        OutputTokens => record.output_tokens = integer(&value),
        MaxTokens => record.max_tokens = integer(&value),
        SpecDraftTokens => record.spec_draft_tokens = integer(&value),
        SpecAcceptedTokens => record.spec_accepted_tokens = integer(&value),
        QueueMs => record.queue_ms = number(&value),
        PrefillMs => record.prefill_ms = number(&value),
        TtftMs => record.ttft_ms = number(&value),
        DecodeMs => record.decode_ms = number(&value),
        TpotMs => record.tpot_ms = number(&value),
        ItlMaxMs => record.itl_max_ms = number(&value),
        E2eMs => record.e2e_ms = number(&value),
        Temperature => record.temperature = number(&value),
        TopP => record.top_p = number(&value),
    }
}

/// Key in `attrs` of a request whose latency phases contradict each other (the value says how).
pub const BREAKDOWN_MISMATCH_KEY: &str = "infersight.breakdown_mismatch";

/// Key in `attrs` of a request row (and its span) kept by head sampling: how many requests it
/// stands for (`1 / probability`, a number above 1; absent means 1). An attribute, not a column:
/// segments are read with the table's one schema, so a new column would make every existing
/// store unreadable, and the common unsampled row pays nothing.
pub const SAMPLE_WEIGHT_KEY: &str = "infersight.sample_weight";

/// Merges resource and span attributes into `attrs` JSON. Span attributes win a key conflict; the
/// resource value is then kept under `resource.<key>` so it is not lost.
///
/// The text is exactly what building a `serde_json::Map` of the values and printing it would give
/// (keys sorted, a later duplicate replacing an earlier one), written without building the map's
/// values: this runs once per span and record.
pub fn attrs_json<'a>(
    resource: impl IntoIterator<Item = &'a (String, AttrValue)>,
    span: impl IntoIterator<Item = &'a (String, AttrValue)>,
) -> String {
    let (resource, span) = (resource.into_iter(), span.into_iter());
    let mut members = Members::with_capacity(resource.size_hint().0 + span.size_hint().0);
    for (k, v) in span {
        members.insert(Cow::Borrowed(k.as_str()), v);
    }
    for (k, v) in resource {
        if members.contains(k) {
            members.insert(Cow::Owned(format!("resource.{k}")), v);
        } else {
            members.insert(Cow::Borrowed(k.as_str()), v);
        }
    }
    let entries = members.into_sorted();
    if entries.is_empty() {
        return "{}".to_string();
    }
    let estimate: usize = entries
        .iter()
        .map(|(key, value)| {
            key.len()
                + 6
                + match value {
                    AttrValue::Str(text) => text.len() + 2,
                    _ => 24,
                }
        })
        .sum();
    let mut out: Vec<u8> = Vec::with_capacity(estimate + 2);
    out.push(b'{');
    for (index, (key, value)) in entries.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write_json_str(&mut out, key.as_ref());
        out.push(b':');
        match value {
            AttrValue::Str(text) => write_json_str(&mut out, text.as_str()),
            AttrValue::Bool(flag) => write_json(&mut out, flag),
            AttrValue::Int(number) => write_json(&mut out, number),
            // non-finite numbers are written as `null`, as `to_json` makes them
            AttrValue::Double(number) => write_json(&mut out, number),
            other => write_json(&mut out, &other.to_json()),
        }
    }
    out.push(b'}');
    // serde_json writes UTF-8 only
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The members of an `attrs` object being built, with a map's semantics (a later value of a key
/// replaces the earlier one). A span has a dozen attributes: a vector searched linearly, then
/// sorted, does what the map did without a node allocation per key; long lists use the map.
#[derive(Default)]
struct Members<'a> {
    few: Vec<(Cow<'a, str>, &'a AttrValue)>,
    many: BTreeMap<Cow<'a, str>, &'a AttrValue>,
}

impl<'a> Members<'a> {
    const LINEAR_MAX: usize = 32;

    fn with_capacity(members: usize) -> Self {
        Members {
            few: Vec::with_capacity(members.min(Self::LINEAR_MAX)),
            many: BTreeMap::new(),
        }
    }

    fn insert(&mut self, key: Cow<'a, str>, value: &'a AttrValue) {
        if self.many.is_empty() && self.few.len() < Self::LINEAR_MAX {
            match self.few.iter_mut().find(|(k, _)| *k == key) {
                Some(member) => member.1 = value,
                None => self.few.push((key, value)),
            }
        } else {
            self.many.extend(self.few.drain(..));
            self.many.insert(key, value);
        }
    }

    fn contains(&self, key: &str) -> bool {
        self.few.iter().any(|(k, _)| k == key) || self.many.contains_key(key)
    }

    /// The members sorted by key (keys are unique).
    fn into_sorted(mut self) -> Vec<(Cow<'a, str>, &'a AttrValue)> {
        if self.many.is_empty() {
            self.few.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            self.few
        } else {
            self.many.into_iter().collect()
        }
    }
}

/// Appends a string as serde_json writes it; most need no escape and are copied as they are.
fn write_json_str(out: &mut Vec<u8>, text: &str) {
    if crate::scan::json_string_is_plain(text) {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        write_json(out, text);
    }
}

/// Appends one value as serde_json writes it (its escaping and number formatting).
fn write_json(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    // Writing into a Vec cannot fail, and these values always serialize.
    let _ = serde_json::to_writer(out, value);
}

/// Normalizes one span into a request row, or `None` when the span does not describe an
/// inference request (no model, token or engine-latency attribute in any known variant).
/// An attribute whose value cannot be converted for its column is an error naming the attribute.
pub fn normalize_request(
    mapper: &AttributeMapper,
    resource: &[(String, AttrValue)],
    span: &[(String, AttrValue)],
    facts: &SpanFacts,
) -> Result<Option<RequestRecord>, ModelError> {
    normalize_request_with(mapper, resource, span, facts, ChildEvidence::default())
}

/// What a request span's children say besides its attributes: its token events and its phase
/// spans. Both only fill latency columns the attributes leave NULL.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChildEvidence<'a> {
    pub tokens: Option<TokenTimeline<'a>>,
    pub phases: Option<&'a SpanPhases>,
}

/// TGI's per-request span fields (duration strings), → (column, ms).
const TGI_TIMINGS: [(&str, RequestColumn); 3] = [
    ("total_time", RequestColumn::E2eMs),
    ("queue_time", RequestColumn::QueueMs),
    ("time_per_token", RequestColumn::TpotMs),
];

fn duration_ms(pairs: &[(String, AttrValue)], key: &str) -> Option<f64> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| match v {
            AttrValue::Str(text) => duration_text_seconds(text).map(|s| s * 1e3),
            _ => None,
        })
}

/// A TGI request span: `total_time` and `inference_time` both present as duration strings.
fn tgi_timings(span: &[(String, AttrValue)]) -> Option<Vec<(RequestColumn, f64)>> {
    duration_ms(span, "total_time")?;
    duration_ms(span, "inference_time")?;
    Some(
        TGI_TIMINGS
            .iter()
            .filter_map(|&(key, column)| duration_ms(span, key).map(|ms| (column, ms)))
            .filter(|(_, ms)| *ms >= 0.0)
            .collect(),
    )
}

/// [`normalize_request`] for a span whose children also tell its phases: latency columns its
/// attributes leave NULL are filled from the token times (see
/// [`fill_from_tokens`](crate::breakdown::fill_from_tokens)), then from the phase spans (see
/// [`fill_from_phases`](crate::breakdown::fill_from_phases)), before the breakdown is completed
/// and checked. Attributes always win.
pub fn normalize_request_with(
    mapper: &AttributeMapper,
    resource: &[(String, AttrValue)],
    span: &[(String, AttrValue)],
    facts: &SpanFacts,
    evidence: ChildEvidence<'_>,
) -> Result<Option<RequestRecord>, ModelError> {
    let mut record = RequestRecord {
        ts: facts.ts_ns,
        ..Default::default()
    };
    // column (by its index) → (priority, from_span, value)
    let mut best: [Option<(usize, bool, Converted)>; ALL_REQUEST_COLUMNS.len()] =
        std::array::from_fn(|_| None);
    let mut unmapped_resource: Vec<&(String, AttrValue)> = Vec::new();
    let mut unmapped_span: Vec<&(String, AttrValue)> = Vec::new();
    let mut is_request = false;

    for (from_span, pairs) in [(false, resource), (true, span)] {
        for pair in pairs {
            let (key, value) = pair;
            let Some((column, unit, priority)) = mapper.lookup(key) else {
                if from_span {
                    unmapped_span.push(pair)
                } else {
                    unmapped_resource.push(pair)
                }
                continue;
            };
            let Some(converted) = convert(key, value, column.value_kind(), unit)? else {
                continue;
            };
            is_request |= from_span && column.marks_request();
            let slot = &mut best[column as usize];
            let wins = match slot {
                None => true,
                // Lower priority index wins; at equal index the span beats the resource.
                Some((p, s, _)) => priority < *p || (priority == *p && from_span && !*s),
            };
            if wins {
                // The previous winner is kept in attrs so nothing is dropped.
                if let Some((p, s, _)) = slot.replace((priority, from_span, converted)) {
                    let lost = lookup_key(mapper, column, p, resource, span, s);
                    if let Some(pair) = lost {
                        if s {
                            unmapped_span.push(pair)
                        } else {
                            unmapped_resource.push(pair)
                        }
                    }
                }
            } else if from_span {
                unmapped_span.push(pair);
            } else {
                unmapped_resource.push(pair);
            }
        }
    }
    let tgi = tgi_timings(span);
    let is_tgi = tgi.is_some();
    if !is_request && !is_tgi {
        return Ok(None);
    }
    for (column, chosen) in ALL_REQUEST_COLUMNS.into_iter().zip(best) {
        if let Some((_, _, value)) = chosen {
            set_column(&mut record, column, value);
        }
    }
    for (column, ms) in tgi.into_iter().flatten() {
        let slot = match column {
            RequestColumn::E2eMs => &mut record.e2e_ms,
            RequestColumn::QueueMs => &mut record.queue_ms,
            _ => &mut record.tpot_ms,
        };
        slot.get_or_insert(ms);
    }
    if is_tgi && record.runtime.is_none() {
        record.runtime = Some("tgi".to_string());
    }
    record.trace_id = facts.trace_id.clone();
    record.span_id = facts.span_id.clone();
    record.status = facts.status.clone();
    if record.e2e_ms.is_none()
        && let Some(end) = facts.end_ts_ns
        && end >= facts.ts_ns
    {
        record.e2e_ms = Some((end - facts.ts_ns) as f64 / 1e6);
    }
    if let Some(tokens) = evidence.tokens {
        fill_from_tokens(&mut record, facts.ts_ns, tokens);
    }
    if let Some(phases) = evidence.phases {
        fill_from_phases(&mut record, facts.ts_ns, phases);
    }
    let mismatch = match complete_breakdown(&mut record) {
        BreakdownCheck::Consistent => None,
        BreakdownCheck::Mismatch(reason) => {
            Some((BREAKDOWN_MISMATCH_KEY.to_string(), AttrValue::Str(reason)))
        }
    };
    record.attrs = attrs_json(
        unmapped_resource,
        unmapped_span.into_iter().chain(&mismatch),
    );
    Ok(Some(record))
}

/// Finds the attribute pair that had been chosen for `column` at `priority` (to move it to attrs).
fn lookup_key<'a>(
    mapper: &AttributeMapper,
    column: RequestColumn,
    priority: usize,
    resource: &'a [(String, AttrValue)],
    span: &'a [(String, AttrValue)],
    from_span: bool,
) -> Option<&'a (String, AttrValue)> {
    let pairs = if from_span { span } else { resource };
    pairs.iter().find(|(k, _)| {
        mapper
            .lookup(k)
            .is_some_and(|(c, _, p)| c == column && p == priority)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value as Json};

    use super::*;

    /// `attrs_json` as it was first written: a `serde_json::Map` of `to_json` values, printed.
    fn attrs_json_through_map(
        resource: &[(String, AttrValue)],
        span: &[(String, AttrValue)],
    ) -> String {
        let mut map = Map::new();
        for (k, v) in span {
            map.insert(k.clone(), v.to_json());
        }
        for (k, v) in resource {
            if map.contains_key(k) {
                map.insert(format!("resource.{k}"), v.to_json());
            } else {
                map.insert(k.clone(), v.to_json());
            }
        }
        if map.is_empty() {
            "{}".to_string()
        } else {
            Json::Object(map).to_string()
        }
    }

    #[test]
    fn attrs_json_writes_what_the_map_printed() {
        let values = [
            AttrValue::Str("plain".into()),
            AttrValue::Str("esc \" \\ \n \u{1} é 日本 \u{2028}".into()),
            AttrValue::Bool(true),
            AttrValue::Int(i64::MIN),
            AttrValue::Int(42),
            AttrValue::Double(0.1819434781140512),
            AttrValue::Double(1e300),
            AttrValue::Double(-0.0),
            AttrValue::Double(3.0),
            AttrValue::Double(f64::NAN),
            AttrValue::Double(f64::INFINITY),
            AttrValue::Bytes(vec![0, 255, 16]),
            AttrValue::Array(vec![AttrValue::Int(1), AttrValue::Str("x".into())]),
            AttrValue::Map(vec![
                ("b".into(), AttrValue::Empty),
                ("a".into(), AttrValue::Double(f64::NAN)),
                ("a".into(), AttrValue::Bool(false)),
            ]),
            AttrValue::Empty,
        ];
        let mut keys: Vec<String> = [
            "model",
            "a",
            "resource.model",
            "b",
            "q\"k\t",
            "é",
            "Z",
            "model",
            "",
        ]
        .map(String::from)
        .to_vec();
        // enough distinct keys that long lists pass the linear search's limit
        keys.extend((0..48).map(|i| format!("k{i}")));
        keys.extend((0..8).map(|i| format!("resource.k{i}")));
        let mut state = 11u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as usize
        };
        for round in 0..2400 {
            let mut pick = |n: usize| -> Vec<(String, AttrValue)> {
                (0..n)
                    .map(|_| {
                        // short lists draw from the first few keys, so they collide often
                        let pool = if n <= 6 { 8 } else { keys.len() };
                        let key = keys[next() % pool].clone();
                        (key, values[next() % values.len()].clone())
                    })
                    .collect()
            };
            let (resource, span) = if round < 2000 {
                (pick(round % 5), pick((round / 5) % 6))
            } else {
                (pick(round % 40), pick(20 + round % 45))
            };
            assert_eq!(
                attrs_json(&resource, &span),
                attrs_json_through_map(&resource, &span),
                "{resource:?} {span:?}"
            );
        }
    }

    fn kv(k: &str, v: AttrValue) -> (String, AttrValue) {
        (k.to_string(), v)
    }

    #[test]
    fn vllm_span_normalizes_units_and_deprecated_names() {
        let resource = vec![
            kv("service.name", AttrValue::Str("vllm".into())),
            kv("k8s.pod.name", AttrValue::Str("w-3".into())),
        ];
        let span = vec![
            kv("gen_ai.request.model", AttrValue::Str("llama".into())),
            kv("gen_ai.usage.prompt_tokens", AttrValue::Int(512)),
            kv("gen_ai.usage.completion_tokens", AttrValue::Int(64)),
            kv("gen_ai.latency.time_in_queue", AttrValue::Double(0.25)),
            kv("gen_ai.latency.time_to_first_token", AttrValue::Double(0.5)),
            kv("gen_ai.latency.e2e", AttrValue::Double(2.0)),
            kv(
                "gen_ai.response.finish_reasons",
                AttrValue::Array(vec![AttrValue::Str("length".into())]),
            ),
            kv("custom.flag", AttrValue::Bool(true)),
        ];
        let facts = SpanFacts {
            ts_ns: 10,
            ..Default::default()
        };
        let r = normalize_request(&AttributeMapper::default(), &resource, &span, &facts)
            .unwrap()
            .unwrap();
        assert_eq!(r.model.as_deref(), Some("llama"));
        assert_eq!((r.input_tokens, r.output_tokens), (Some(512), Some(64)));
        assert_eq!(
            (r.queue_ms, r.ttft_ms, r.e2e_ms),
            (Some(250.0), Some(500.0), Some(2000.0))
        );
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
        assert_eq!(r.service.as_deref(), Some("vllm"));
        assert_eq!(r.worker.as_deref(), Some("w-3"));
        let attrs: Json = serde_json::from_str(&r.attrs).unwrap();
        assert_eq!(attrs["custom.flag"], Json::Bool(true));
        assert!(attrs.get("gen_ai.request.model").is_none());
    }

    #[test]
    fn current_name_wins_and_loser_is_kept() {
        let span = vec![
            kv("gen_ai.usage.prompt_tokens", AttrValue::Int(1)),
            kv("gen_ai.usage.input_tokens", AttrValue::Int(2)),
        ];
        let r = normalize_request(
            &AttributeMapper::default(),
            &[],
            &span,
            &SpanFacts::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.input_tokens, Some(2));
        let attrs: Json = serde_json::from_str(&r.attrs).unwrap();
        assert_eq!(attrs["gen_ai.usage.prompt_tokens"], Json::from(1));
    }

    #[test]
    fn openinference_and_openllmetry_names() {
        let span = vec![
            kv("llm.model_name", AttrValue::Str("gpt".into())),
            kv("llm.token_count.prompt", AttrValue::Int(7)),
            kv("llm.usage.completion_tokens", AttrValue::Int(9)),
        ];
        let r = normalize_request(
            &AttributeMapper::default(),
            &[],
            &span,
            &SpanFacts::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (r.model.as_deref(), r.input_tokens, r.output_tokens),
            (Some("gpt"), Some(7), Some(9))
        );
    }

    #[test]
    fn wrong_type_is_an_error_naming_the_attribute() {
        let span = vec![kv(
            "gen_ai.usage.input_tokens",
            AttrValue::Array(vec![AttrValue::Int(1)]),
        )];
        let err = normalize_request(
            &AttributeMapper::default(),
            &[],
            &span,
            &SpanFacts::default(),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("gen_ai.usage.input_tokens"),
            "{err}"
        );
        let span = vec![kv("gen_ai.latency.e2e", AttrValue::Str("fast".into()))];
        assert!(
            normalize_request(
                &AttributeMapper::default(),
                &[],
                &span,
                &SpanFacts::default()
            )
            .is_err()
        );
    }

    #[test]
    fn non_request_spans_are_not_requests_and_duration_fills_e2e() {
        let span = vec![kv("http.route", AttrValue::Str("/v1".into()))];
        assert!(
            normalize_request(
                &AttributeMapper::default(),
                &[],
                &span,
                &SpanFacts::default()
            )
            .unwrap()
            .is_none()
        );
        let span = vec![kv("gen_ai.request.model", AttrValue::Str("m".into()))];
        let facts = SpanFacts {
            ts_ns: 0,
            end_ts_ns: Some(1_500_000),
            ..Default::default()
        };
        let r = normalize_request(&AttributeMapper::default(), &[], &span, &facts)
            .unwrap()
            .unwrap();
        assert_eq!(r.e2e_ms, Some(1.5));
    }

    #[test]
    fn token_times_fill_missing_phases_and_attributes_win() {
        const MS: i64 = 1_000_000;
        let span = vec![
            kv("gen_ai.request.model", AttrValue::Str("m".into())),
            kv("gen_ai.latency.time_in_queue", AttrValue::Double(0.1)),
            kv(
                "gen_ai.latency.time_per_output_token",
                AttrValue::Double(0.05),
            ),
        ];
        let facts = SpanFacts {
            ts_ns: 1_000 * MS,
            end_ts_ns: Some(1_600 * MS),
            ..Default::default()
        };
        let ts = [1_300 * MS, 1_340 * MS, 1_400 * MS];
        let tokens = TokenTimeline {
            ts_ns: &ts,
            starts_at_first_token: true,
            complete: true,
        };
        let evidence = ChildEvidence {
            tokens: Some(tokens),
            phases: None,
        };
        let r = normalize_request_with(&AttributeMapper::default(), &[], &span, &facts, evidence)
            .unwrap()
            .unwrap();
        assert_eq!(r.ttft_ms, Some(300.0), "first token − span start");
        assert_eq!(r.decode_ms, Some(100.0));
        assert_eq!(r.itl_max_ms, Some(60.0));
        assert_eq!(
            r.tpot_ms,
            Some(50.0),
            "the attribute wins over the token mean"
        );
        assert_eq!(r.prefill_ms, Some(200.0), "derived from token TTFT − queue");
        assert_eq!(r.e2e_ms, Some(600.0));
        // without tokens nothing is invented
        let r = normalize_request(&AttributeMapper::default(), &[], &span, &facts)
            .unwrap()
            .unwrap();
        assert_eq!((r.ttft_ms, r.itl_max_ms), (None, None));
    }

    #[test]
    fn lora_set_array_becomes_sorted_label() {
        let span = vec![
            kv("gen_ai.request.model", AttrValue::Str("m".into())),
            kv(
                "llm.lora.adapters",
                AttrValue::Array(vec![AttrValue::Str("b".into()), AttrValue::Str("a".into())]),
            ),
        ];
        let r = normalize_request(
            &AttributeMapper::default(),
            &[],
            &span,
            &SpanFacts::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.lora_adapters.as_deref(), Some("a,b"));
    }

    #[test]
    fn tgi_request_spans_are_requests_with_their_timings() {
        let text = |v: &str| AttrValue::Str(v.into());
        let span = vec![
            kv(
                "parameters",
                text("GenerateParameters { max_new_tokens: Some(20) }"),
            ),
            kv("total_time", text("2.046046581s")),
            kv("validation_time", text("311.13µs")),
            kv("queue_time", text("64.16µs")),
            kv("inference_time", text("2.045671466s")),
            kv("time_per_token", text("20.253182ms")),
            kv("seed", text("None")),
        ];
        let facts = SpanFacts {
            ts_ns: 10,
            end_ts_ns: Some(10 + 2_100_000_000),
            ..Default::default()
        };
        let mapper = AttributeMapper::default();
        let r = normalize_request(&mapper, &[], &span, &facts)
            .unwrap()
            .expect("a TGI span is a request");
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-6);
        assert!(close(r.e2e_ms, 2046.046581), "{:?}", r.e2e_ms);
        assert!(close(r.queue_ms, 0.06416), "{:?}", r.queue_ms);
        assert!(close(r.tpot_ms, 20.253182), "{:?}", r.tpot_ms);
        assert_eq!(r.runtime.as_deref(), Some("tgi"));
        assert_eq!((r.ttft_ms, r.prefill_ms), (None, None), "TGI does not say");
        assert!(r.attrs.contains("inference_time"), "kept: {}", r.attrs);

        // a GenAI attribute wins over the TGI field
        let mut with_genai = span.clone();
        with_genai.push(kv("gen_ai.latency.e2e", AttrValue::Double(2.5)));
        let r = normalize_request(&mapper, &[], &with_genai, &facts)
            .unwrap()
            .unwrap();
        assert_eq!(r.e2e_ms, Some(2500.0));

        // `total_time` alone, or not a duration, is someone else's attribute: no request
        for pairs in [
            vec![kv("total_time", text("2s"))],
            vec![
                kv("total_time", text("soon")),
                kv("inference_time", text("2s")),
            ],
        ] {
            assert_eq!(
                normalize_request(&mapper, &[], &pairs, &facts).unwrap(),
                None
            );
        }
    }
}
