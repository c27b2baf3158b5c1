//! The OTLP telemetry of one request: its trace (gateway → tokenizer → engine, with optional
//! phase children and `gen_ai.token` events → detokenizer) and the gateway's trace-correlated
//! access log record. The engine span becomes the `requests` row, so its attributes follow the
//! worker's dialect (current or deprecated GenAI names; `llm.*` ones under a variation) and the
//! run's dimension names ([`crate::variation::Conventions`]).

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, SeverityNumber};
use opentelemetry_proto::tonic::trace::v1::span::{Event, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};

use crate::config::MAX_TOKEN_EVENTS_PER_REQUEST;
use crate::engine::Timing;
use crate::fleet::{Dialect, KvPolicy, Runtime};
use crate::otlp::{self, b, f, i, s};
use crate::rng::{Rng, mix64};
use crate::scenario::BYTES_PER_STREAMED_TOKEN;
use crate::variation::conventions::LlmDialect;

use super::{RequestFacts, ms_to_ns, round3, round6};

/// The spans a request leaves on its worker, in export order, and how many token events they
/// carry.
pub(super) struct WorkerSpans {
    pub(super) spans: Vec<Span>,
    pub(super) token_events: u64,
}

/// The root span, on the gateway (with GenAI attributes of its own under `gateway_genai`).
pub(super) fn gateway_span(facts: &RequestFacts) -> Span {
    let (ids, times, outcome) = (&facts.ids, &facts.times, &facts.outcome);
    let mut span = Span {
        trace_id: ids.trace_id.clone(),
        span_id: ids.gateway_span_id.clone(),
        name: "POST /v1/chat/completions".into(),
        kind: SpanKind::Server as i32,
        start_time_unix_nano: times.at_ns as u64,
        end_time_unix_nano: times.gateway_end_ns as u64,
        attributes: vec![
            s("http.request.method", "POST"),
            s("http.route", "/v1/chat/completions"),
            s("url.path", "/v1/chat/completions"),
            i("http.response.status_code", outcome.http_status),
            i(
                "http.response.body.size",
                (outcome.output_emitted as f64 * BYTES_PER_STREAMED_TOKEN) as i64 + 180,
            ),
            s("network.protocol.name", "http"),
            s("network.protocol.version", "2"),
            s("server.address", "llm.internal"),
            s("user_agent.original", "openai-python/1.54.3"),
            s("tenant", facts.tenant_name),
            s("gateway.upstream", facts.worker.name.clone()),
            s("gateway.version", facts.gateway_version),
            f(
                "guardrail.injection_score",
                round3(facts.client.injection_score),
            ),
        ],
        status: error_status(outcome.error_type.map(|_| "upstream error")),
        ..Default::default()
    };
    if facts.conventions.gateway_genai() {
        span.attributes.extend(gateway_genai_attributes(facts));
    }
    span
}

/// What an LLM gateway records of a request in GenAI names: the model asked for and answered,
/// the response id, token usage and the caller's tenant.
fn gateway_genai_attributes(facts: &RequestFacts) -> Vec<KeyValue> {
    vec![
        s("gen_ai.operation.name", "chat"),
        s("gen_ai.request.model", facts.worker.model),
        s("gen_ai.response.model", facts.worker.model),
        s("gen_ai.response.id", facts.ids.request_id.clone()),
        i("gen_ai.usage.input_tokens", facts.lengths.input as i64),
        i(
            "gen_ai.usage.output_tokens",
            facts.outcome.output_emitted as i64,
        ),
        s("tenant.id", facts.tenant_name),
    ]
}

/// The worker's spans: phase children (SGLang with phase spans on), tokenizer, engine (with
/// token events when `with_token_events`) and detokenizer.
pub(super) fn worker_spans(
    facts: &RequestFacts,
    phase_spans: bool,
    with_token_events: bool,
) -> WorkerSpans {
    let phase_spans = phase_spans && facts.worker.runtime == Runtime::Sglang;
    let events = if with_token_events {
        let timing = &facts.served.timing;
        let kv_hit =
            (facts.worker.kv_policy == KvPolicy::PrefixCache).then_some(timing.cached_tokens > 0);
        token_events(
            timing,
            facts.times.engine_start_ns,
            facts.lengths.output,
            facts.outcome.output_emitted,
            kv_hit,
        )
    } else {
        Vec::new()
    };
    let token_events = events.len() as u64;
    let mut spans = if phase_spans {
        phase_children(facts)
    } else {
        Vec::new()
    };
    spans.push(tokenizer_span(facts));
    spans.push(engine_span(
        facts,
        engine_attributes(facts, phase_spans),
        events,
    ));
    spans.push(detokenizer_span(facts));
    WorkerSpans {
        spans,
        token_events,
    }
}

fn tokenizer_span(facts: &RequestFacts) -> Span {
    let (ids, times) = (&facts.ids, &facts.times);
    Span {
        trace_id: ids.engine_trace_id.clone(),
        span_id: ids.tokenizer_span_id.clone(),
        parent_span_id: ids.tokenizer_parent.clone(),
        name: "tokenize".into(),
        kind: SpanKind::Internal as i32,
        start_time_unix_nano: times.tokenizer_start_ns as u64,
        end_time_unix_nano: times.engine_start_ns as u64,
        attributes: vec![
            i("tokenizer.prompt_chars", facts.lengths.input as i64 * 4),
            s("tokenizer.name", facts.worker.model),
        ],
        ..Default::default()
    }
}

/// The engine span (it becomes the `requests` row).
fn engine_span(facts: &RequestFacts, attributes: Vec<KeyValue>, events: Vec<Event>) -> Span {
    let (ids, times) = (&facts.ids, &facts.times);
    Span {
        trace_id: ids.engine_trace_id.clone(),
        span_id: ids.engine_span_id.clone(),
        parent_span_id: ids.tokenizer_span_id.clone(),
        name: "llm_request".into(),
        kind: SpanKind::Server as i32,
        start_time_unix_nano: times.engine_start_ns as u64,
        end_time_unix_nano: times.engine_end_ns as u64,
        attributes,
        events,
        status: error_status(facts.outcome.error_type),
        ..Default::default()
    }
}

fn detokenizer_span(facts: &RequestFacts) -> Span {
    let (ids, times) = (&facts.ids, &facts.times);
    Span {
        trace_id: ids.engine_trace_id.clone(),
        span_id: ids.post_span_id.clone(),
        parent_span_id: ids.engine_span_id.clone(),
        name: "detokenize".into(),
        kind: SpanKind::Internal as i32,
        start_time_unix_nano: times.engine_end_ns as u64,
        end_time_unix_nano: times.post_end_ns as u64,
        attributes: vec![
            i(
                "postprocess.stream_chunks",
                facts.outcome.output_emitted as i64,
            ),
            b("postprocess.stream", true),
        ],
        ..Default::default()
    }
}

/// `queued`, `prefill` and `decode` children of the engine span. Children end before their
/// parent and are exported first, as an SDK would.
fn phase_children(facts: &RequestFacts) -> Vec<Span> {
    let (ids, timing) = (&facts.ids, &facts.served.timing);
    let at = |offset_ms: f64| (facts.times.engine_start_ns + ms_to_ns(offset_ms)) as u64;
    let mut phases = vec![("queued", 0.0, timing.queue_ms)];
    if !timing.aborted {
        phases.push(("prefill", timing.queue_ms, timing.ttft_ms));
        phases.push(("decode", timing.ttft_ms, timing.ttft_ms + timing.decode_ms));
    }
    phases
        .into_iter()
        .enumerate()
        .map(|(k, (name, from_ms, to_ms))| {
            // Derived from the engine span's id, so the random streams stay as they were.
            let mut span_id = ids.engine_span_id.clone();
            span_id[0] ^= 0x80 | k as u8;
            Span {
                trace_id: ids.engine_trace_id.clone(),
                span_id,
                parent_span_id: ids.engine_span_id.clone(),
                name: name.into(),
                kind: SpanKind::Internal as i32,
                start_time_unix_nano: at(from_ms),
                end_time_unix_nano: at(to_ms),
                ..Default::default()
            }
        })
        .collect()
}

/// The engine span's attributes: GenAI usage in the worker's dialect, request parameters,
/// latencies (unless phase spans carry them), the serving dimensions (the per-worker ones on
/// the resource instead under `resource_dims`) and the request's tenant, session, user and
/// outcome, under the run's names.
fn engine_attributes(facts: &RequestFacts, phase_spans: bool) -> Vec<KeyValue> {
    let (worker, timing) = (facts.worker, &facts.served.timing);
    let conventions = facts.conventions;
    let dims = &conventions.dims;
    let input = facts.lengths.input;
    let session = facts.route.session;
    let mut attrs = Vec::with_capacity(40);
    match conventions.llm_dialect(worker) {
        Some(dialect) => push_llm_usage(&mut attrs, facts, dialect),
        None => {
            push_genai_usage(&mut attrs, facts);
            attrs.push(s("gen_ai.request.id", facts.ids.request_id.clone()));
            attrs.push(i(
                "gen_ai.request.max_tokens",
                facts.lengths.max_tokens as i64,
            ));
            attrs.push(f("gen_ai.request.temperature", facts.client.temperature));
            attrs.push(f("gen_ai.request.top_p", 0.95));
            attrs.push(f("gen_ai.request.n", 1.0));
        }
    }
    if !phase_spans {
        push_latencies(&mut attrs, timing);
    }
    if !conventions.dims_on_resource() {
        attrs.push(s(&dims.model_version, facts.model_version));
    }
    attrs.push(s(&dims.lora_adapters, facts.route.lora));
    if !conventions.dims_on_resource() {
        attrs.push(s(&dims.kv_cache_policy, worker.kv_policy.name()));
    }
    attrs.push(i(&dims.batch_size, timing.batch_size as i64));
    attrs.push(i(&dims.max_batch_size, worker.max_batch as i64));
    attrs.push(i(
        &dims.batch_wait_ms,
        facts.served.batch_wait_ms.round() as i64,
    ));
    attrs.push(s(conventions.tenant_key, facts.tenant_name));
    attrs.push(s("session.id", format!("sess-{:012x}", session >> 16)));
    attrs.push(s(
        "serving.prompt_hash",
        format!("{:016x}", mix64(session ^ input as u64)),
    ));
    attrs.push(s("enduser.id", facts.client.email.clone()));
    attrs.push(i("serving.preemptions", timing.preemptions as i64));
    attrs.push(f(
        "serving.guardrail.injection_score",
        round3(facts.client.injection_score),
    ));
    if worker.spec_tokens.is_some() && !timing.aborted {
        attrs.push(i(
            "serving.spec_decode.draft_tokens",
            timing.spec_draft_tokens as i64,
        ));
        attrs.push(i(
            "serving.spec_decode.accepted_tokens",
            timing.spec_accepted_tokens as i64,
        ));
    }
    if let Some(e) = facts.outcome.error_type {
        attrs.push(s("error.type", e));
    }
    attrs
}

/// Operation, system, model, token usage and finish reason, in the worker's dialect.
fn push_genai_usage(attrs: &mut Vec<KeyValue>, facts: &RequestFacts) {
    let (worker, timing) = (facts.worker, &facts.served.timing);
    let input = facts.lengths.input as i64;
    let output_emitted = facts.outcome.output_emitted as i64;
    let finish = facts.outcome.finish_reason;
    match worker.dialect {
        Dialect::Current => {
            attrs.push(s("gen_ai.operation.name", "chat"));
            attrs.push(s("gen_ai.provider.name", worker.runtime.name()));
            attrs.push(s("gen_ai.request.model", worker.model));
            attrs.push(s("gen_ai.response.model", worker.model));
            attrs.push(i("gen_ai.usage.input_tokens", input));
            attrs.push(i("gen_ai.usage.output_tokens", output_emitted));
            attrs.push(i(
                "gen_ai.usage.cache_read.input_tokens",
                timing.cached_tokens as i64,
            ));
            attrs.push(otlp::str_array("gen_ai.response.finish_reasons", &[finish]));
        }
        Dialect::Deprecated => {
            attrs.push(s("gen_ai.system", worker.runtime.name()));
            attrs.push(s("gen_ai.request.model", worker.model));
            attrs.push(i("gen_ai.usage.prompt_tokens", input));
            attrs.push(i("gen_ai.usage.completion_tokens", output_emitted));
            attrs.push(i(
                "gen_ai.usage.cache_read_input_tokens",
                timing.cached_tokens as i64,
            ));
            attrs.push(s("gen_ai.response.finish_reason", finish));
        }
    }
}

/// Model, provider, token usage, finish reason, request id and parameters in an `llm.*`
/// dialect: OpenInference (`llm.model_name`, `llm.token_count.*`, `llm.invocation_parameters`)
/// or OpenLLMetry (`llm.request.model`, `llm.usage.*`, `llm.request.*`).
fn push_llm_usage(attrs: &mut Vec<KeyValue>, facts: &RequestFacts, dialect: LlmDialect) {
    let (worker, timing) = (facts.worker, &facts.served.timing);
    let input = facts.lengths.input as i64;
    let output_emitted = facts.outcome.output_emitted as i64;
    let cached = timing.cached_tokens as i64;
    let temperature = facts.client.temperature;
    match dialect {
        LlmDialect::OpenInference => {
            attrs.push(s("openinference.span.kind", "LLM"));
            attrs.push(s("llm.provider", worker.runtime.name()));
            attrs.push(s("llm.model_name", worker.model));
            attrs.push(i("llm.token_count.prompt", input));
            attrs.push(i("llm.token_count.completion", output_emitted));
            attrs.push(i("llm.token_count.total", input + output_emitted));
            attrs.push(i("llm.token_count.prompt_details.cache_read", cached));
            attrs.push(s(
                "llm.invocation_parameters",
                format!(
                    "{{\"max_tokens\": {}, \"temperature\": {temperature}, \"top_p\": 0.95}}",
                    facts.lengths.max_tokens
                ),
            ));
            attrs.push(s("request.id", facts.ids.request_id.clone()));
        }
        LlmDialect::OpenLlmetry => {
            attrs.push(s("llm.request.type", "chat"));
            attrs.push(s("llm.system", worker.runtime.name()));
            attrs.push(s("llm.request.model", worker.model));
            attrs.push(s("llm.response.model", worker.model));
            attrs.push(i("llm.usage.prompt_tokens", input));
            attrs.push(i("llm.usage.completion_tokens", output_emitted));
            attrs.push(i("llm.usage.total_tokens", input + output_emitted));
            attrs.push(i("llm.usage.cache_read_input_tokens", cached));
            attrs.push(s("llm.response.finish_reason", facts.outcome.finish_reason));
            attrs.push(i("llm.request.max_tokens", facts.lengths.max_tokens as i64));
            attrs.push(f("llm.request.temperature", temperature));
            attrs.push(f("llm.top_p", 0.95));
            attrs.push(s("gen_ai.request.id", facts.ids.request_id.clone()));
        }
    }
}

/// `gen_ai.latency.*` in seconds (queue and e2e always, the rest unless aborted).
fn push_latencies(attrs: &mut Vec<KeyValue>, timing: &Timing) {
    let sec = |ms: f64| round6(ms / 1_000.0);
    attrs.push(f("gen_ai.latency.time_in_queue", sec(timing.queue_ms)));
    if !timing.aborted {
        attrs.push(f("gen_ai.latency.time_to_first_token", sec(timing.ttft_ms)));
        attrs.push(f(
            "gen_ai.latency.time_in_model_prefill",
            sec(timing.prefill_ms),
        ));
        attrs.push(f(
            "gen_ai.latency.time_in_model_decode",
            sec(timing.decode_ms),
        ));
        attrs.push(f(
            "gen_ai.latency.time_per_output_token",
            sec(timing.tpot_ms),
        ));
        attrs.push(f(
            "gen_ai.latency.time_in_model_forward",
            sec((timing.prefill_ms + timing.decode_ms) * 0.92),
        ));
    }
    attrs.push(f("gen_ai.latency.e2e", sec(timing.e2e_ms)));
}

/// The gateway's access record when the response ends (trace-correlated).
pub(super) fn access_record(facts: &RequestFacts, rng: &mut Rng) -> LogRecord {
    let (times, http_status) = (&facts.times, facts.outcome.http_status);
    LogRecord {
        time_unix_nano: times.gateway_end_ns as u64,
        observed_time_unix_nano: times.gateway_end_ns as u64,
        severity_number: if http_status >= 500 {
            SeverityNumber::Error as i32
        } else {
            SeverityNumber::Info as i32
        },
        severity_text: if http_status >= 500 { "ERROR" } else { "INFO" }.into(),
        body: otlp::text_body(format!(
            "10.8.{}.{} - \"POST /v1/chat/completions HTTP/2\" {http_status} {:.0}ms upstream={} tenant={}",
            rng.below(8),
            rng.below(250),
            times.client_e2e_ms,
            facts.worker.name,
            facts.tenant_name
        )),
        attributes: vec![
            s("tenant", facts.tenant_name),
            i("http.response.status_code", http_status),
            f("duration_ms", round3(times.client_e2e_ms)),
            s("request.id", facts.ids.request_id.clone()),
        ],
        trace_id: facts.ids.trace_id.clone(),
        span_id: facts.ids.gateway_span_id.clone(),
        ..Default::default()
    }
}

fn error_status(error: Option<&str>) -> Option<Status> {
    error.map(|e| Status {
        code: StatusCode::Error as i32,
        message: e.to_string(),
    })
}

/// `gen_ai.token` events of one engine span, one per emitted output token (at most
/// [`MAX_TOKEN_EVENTS_PER_REQUEST`]), timed like the latency model: the first at TTFT after the
/// engine arrival (the span start), the second one max inter-token latency later (a preemption
/// stall happens at the first decode step, where the preemption warning is logged), then one
/// decode step apart, so that over all `output` tokens the gaps average TPOT. Attributes:
/// `gen_ai.token.index`, `gen_ai.token.stage` (`prefill` for the first token, `decode` after)
/// and, on the first token of a prefix-cache worker, `gen_ai.token.kv_hit` (prompt blocks found
/// in the prefix cache).
fn token_events(
    timing: &Timing,
    engine_start_ns: i64,
    output: u32,
    emitted: u32,
    kv_hit: Option<bool>,
) -> Vec<Event> {
    if timing.aborted {
        return Vec::new();
    }
    let count = emitted.min(MAX_TOKEN_EVENTS_PER_REQUEST);
    // decode = itl_max + (output − 2) · step
    let step_ms = if output > 2 {
        ((timing.decode_ms - timing.itl_max_ms) / (output - 2) as f64).max(0.0)
    } else {
        0.0
    };
    (0..count)
        .map(|k| {
            let after_start_ms = match k {
                0 => timing.ttft_ms,
                _ => timing.ttft_ms + timing.itl_max_ms + (k - 1) as f64 * step_ms,
            };
            let mut attributes = vec![
                i("gen_ai.token.index", k as i64),
                s(
                    "gen_ai.token.stage",
                    if k == 0 { "prefill" } else { "decode" },
                ),
            ];
            if k == 0
                && let Some(hit) = kv_hit
            {
                attributes.push(b("gen_ai.token.kv_hit", hit));
            }
            Event {
                time_unix_nano: (engine_start_ns + (after_start_ms * 1e6) as i64) as u64,
                name: "gen_ai.token".into(),
                attributes,
                dropped_attributes_count: 0,
            }
        })
        .collect()
}
