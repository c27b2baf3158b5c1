//! Per-token events of OTLP spans → rows of the `tokens` table, part of [`super::convert`]'s
//! trace conversion. A streaming engine or SDK can record each generated token (or streamed
//! chunk) as a span event; this module recognizes those events ([`TOKEN_EVENT_NAMES`]), reads
//! step, stage, KV-cache hit and latency from their attributes (deriving what is missing), and
//! hands the times to the request normalization so a request span without vLLM's latency
//! attributes still gets its TTFT / TPOT / max ITL / decode (see
//! `infersight_model::breakdown::fill_from_tokens`).
//!
//! Per event, first attribute present wins:
//!
//! * **step**: `gen_ai.token.index` | `token.index` | `step` | `index` (a non-negative integer),
//!   else the event's ordinal among the span's token events (0-based, skipped events included).
//! * **stage**: `gen_ai.token.stage` | `stage` when it says `prefill` or `decode`, else `prefill`
//!   for the span's first token event and `decode` after.
//! * **kv_hit**: boolean `gen_ai.token.kv_hit` | `kv_hit`, else NULL.
//! * **latency_ms**: `gen_ai.token.latency_ms` | `latency_ms` (a finite non-negative number),
//!   else the time since the previous token event of the span (the first: since the span start).
//! * **request_id**: the span's normalized request id when the span is a request with one; else
//!   the event's `gen_ai.request.id` | `request_id`; else the span's; else the span id (hex).
//!
//! An event with a zero time or one before its span's start is skipped, and at most
//! [`MAX_TOKEN_EVENTS_PER_SPAN`] are kept per span; both are counted as skipped, a warning in the
//! export's `partial_success` message (a bad event never rejects its span, and is not counted
//! as a rejected span). Rows come out in time order.

use infersight_model::breakdown::TokenTimeline;
use infersight_model::{AttrValue, TokenRecord};
use opentelemetry_proto::tonic::trace::v1::Span;

use super::values::{Rejections, key_values};

/// Names of span events that are token events: OTel GenAI style, OpenInference style, a bare
/// `token`, and OpenLLMetry's streamed completion chunk (one event per chunk, treated as a token).
pub const TOKEN_EVENT_NAMES: [&str; 4] = [
    "gen_ai.token",
    "llm.token",
    "token",
    "llm.content.completion.chunk",
];

/// Most token events kept per span; later ones are dropped and counted. 4096 tokens cover almost
/// every completion while bounding what one span can add to the `tokens` table.
pub const MAX_TOKEN_EVENTS_PER_SPAN: usize = 4096;

const STEP_KEYS: [&str; 4] = ["gen_ai.token.index", "token.index", "step", "index"];
const STAGE_KEYS: [&str; 2] = ["gen_ai.token.stage", "stage"];
const KV_HIT_KEYS: [&str; 2] = ["gen_ai.token.kv_hit", "kv_hit"];
const LATENCY_KEYS: [&str; 2] = ["gen_ai.token.latency_ms", "latency_ms"];
/// Request-id attributes of a token event or of a span that is not a normalized request.
pub const REQUEST_ID_KEYS: [&str; 2] = ["gen_ai.request.id", "request_id"];

/// Whether a span event is a token event.
pub fn is_token_event(name: &str) -> bool {
    TOKEN_EVENT_NAMES.contains(&name)
}

/// One kept token event before its request id is known.
#[derive(Debug, Clone)]
struct PendingToken {
    ts_ns: i64,
    ordinal: usize,
    step: i64,
    explicit_step: bool,
    stage: &'static str,
    kv_hit: Option<bool>,
    latency_ms: Option<f64>,
    request_id: Option<String>,
}

/// The token events of one span, validated and sorted by time.
#[derive(Debug, Default)]
pub(crate) struct SpanTokens {
    tokens: Vec<PendingToken>,
    ts_ns: Vec<i64>,
    /// Some token event was skipped or dropped.
    lost_any: bool,
}

fn find<'a>(attrs: &'a [(String, AttrValue)], keys: &[&str]) -> Option<&'a AttrValue> {
    keys.iter()
        .find_map(|key| attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v))
}

fn as_step(value: &AttrValue) -> Option<i64> {
    match value {
        AttrValue::Int(i) => Some(*i),
        AttrValue::Double(d) if d.fract() == 0.0 && d.is_finite() && d.abs() < 9e15 => {
            Some(*d as i64)
        }
        AttrValue::Str(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|step| *step >= 0)
}

fn as_stage(value: &AttrValue) -> Option<&'static str> {
    match value {
        AttrValue::Str(s) if s.trim().eq_ignore_ascii_case("prefill") => Some("prefill"),
        AttrValue::Str(s) if s.trim().eq_ignore_ascii_case("decode") => Some("decode"),
        _ => None,
    }
}

fn as_bool(value: &AttrValue) -> Option<bool> {
    match value {
        AttrValue::Bool(b) => Some(*b),
        AttrValue::Str(s) if s.trim().eq_ignore_ascii_case("true") => Some(true),
        AttrValue::Str(s) if s.trim().eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

fn as_latency_ms(value: &AttrValue) -> Option<f64> {
    match value {
        AttrValue::Int(i) => Some(*i as f64),
        AttrValue::Double(d) => Some(*d),
        AttrValue::Str(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|ms| ms.is_finite() && *ms >= 0.0)
}

fn as_request_id(value: &AttrValue) -> Option<String> {
    value.as_label().filter(|s| !s.is_empty())
}

/// Collects the token events of `span` (which starts at `start_ns`), counting skipped and dropped
/// ones in `rejections`. Cheap for the common span without events.
pub(crate) fn span_tokens(span: &Span, start_ns: i64, rejections: &mut Rejections) -> SpanTokens {
    let mut out = SpanTokens::default();
    let mut ordinal = 0usize;
    for event in &span.events {
        if !is_token_event(&event.name) {
            continue;
        }
        let this = ordinal;
        ordinal += 1;
        if out.tokens.len() >= MAX_TOKEN_EVENTS_PER_SPAN {
            out.lost_any = true;
            rejections.skip(|| {
                format!(
                    "token event {this} of span `{}` dropped: more than {MAX_TOKEN_EVENTS_PER_SPAN} token events in one span",
                    span.name
                )
            });
            continue;
        }
        let ts_ns = match i64::try_from(event.time_unix_nano) {
            Ok(0) => Err("its time is zero".to_string()),
            Ok(ts) if ts < start_ns => Err("it is timed before the span start".to_string()),
            Ok(ts) => Ok(ts),
            Err(_) => Err(format!("time {} is out of range", event.time_unix_nano)),
        };
        let ts_ns = match ts_ns {
            Ok(ts) => ts,
            Err(reason) => {
                out.lost_any = true;
                rejections.skip(|| {
                    format!(
                        "token event {this} of span `{}` skipped: {reason}",
                        span.name
                    )
                });
                continue;
            }
        };
        let attrs = key_values(&event.attributes);
        let explicit_step = find(&attrs, &STEP_KEYS).and_then(as_step);
        let stage = find(&attrs, &STAGE_KEYS)
            .and_then(as_stage)
            .unwrap_or(if this == 0 { "prefill" } else { "decode" });
        out.tokens.push(PendingToken {
            ts_ns,
            ordinal: this,
            step: explicit_step.unwrap_or(this as i64),
            explicit_step: explicit_step.is_some(),
            stage,
            kv_hit: find(&attrs, &KV_HIT_KEYS).and_then(as_bool),
            latency_ms: find(&attrs, &LATENCY_KEYS).and_then(as_latency_ms),
            request_id: find(&attrs, &REQUEST_ID_KEYS).and_then(as_request_id),
        });
    }
    // Stable: events at the same time keep their order.
    out.tokens.sort_by_key(|t| (t.ts_ns, t.ordinal));
    out.ts_ns = out.tokens.iter().map(|t| t.ts_ns).collect();
    out
}

impl SpanTokens {
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The token times for the request breakdown; `None` without token events.
    pub fn timeline(&self) -> Option<TokenTimeline<'_>> {
        let first = self.tokens.first()?;
        let consecutive = self.tokens.windows(2).all(|w| w[1].step == w[0].step + 1);
        Some(TokenTimeline {
            ts_ns: &self.ts_ns,
            starts_at_first_token: first.stage == "prefill"
                && (!first.explicit_step || first.step <= 1),
            complete: !self.lost_any && consecutive,
        })
    }

    /// The `tokens` rows. `request_id` is the span's normalized request id (when it is a request
    /// that has one), `span_attrs` the span's own attributes, `span_id` its hex id.
    pub fn into_rows(
        self,
        request_id: Option<&str>,
        span_attrs: &[(String, AttrValue)],
        span_id: Option<&str>,
        start_ns: i64,
    ) -> Vec<TokenRecord> {
        if self.tokens.is_empty() {
            return Vec::new();
        }
        let span_request_id = find(span_attrs, &REQUEST_ID_KEYS).and_then(as_request_id);
        let mut previous_ns = start_ns;
        self.tokens
            .into_iter()
            .map(|t| {
                let since_previous_ms = (t.ts_ns - previous_ns) as f64 / 1e6;
                previous_ns = t.ts_ns;
                let request_id = request_id
                    .map(str::to_string)
                    .or(t.request_id)
                    .or_else(|| span_request_id.clone())
                    .or_else(|| span_id.map(str::to_string));
                TokenRecord {
                    ts: t.ts_ns,
                    request_id,
                    step: Some(t.step),
                    latency_ms: Some(t.latency_ms.unwrap_or(since_previous_ms)),
                    stage: Some(t.stage.to_string()),
                    kv_hit: t.kv_hit,
                    // stamped by the writer with the submitter's org
                    org: None,
                }
            })
            .collect()
    }
}
