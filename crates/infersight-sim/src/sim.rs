//! The simulator's main loop: arrivals → tenant, session, model, LoRA set, gateway and worker →
//! the worker's latency model (with the scenario's effects) → one trace per request (gateway →
//! tokenizer → engine → postprocessor), a gateway access log record, raw engine log lines, and
//! per-worker metrics, handed to the sink one chunk of simulated time at a time so memory stays
//! bounded however long the run. A configurable fraction of engine spans also carries one
//! `gen_ai.token` event per output token, chosen from a random stream of its own so that turning
//! token events on or off changes nothing else.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::metrics::v1::{Metric, ResourceMetrics, ScopeMetrics};
use opentelemetry_proto::tonic::trace::v1::span::{Event, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use serde::Serialize;

use crate::arrivals::{Arrival, ArrivalStream, load_trace};
use crate::config::{ArrivalKind, MAX_TOKEN_EVENTS_PER_REQUEST, SimConfig, default_data_dir};
use crate::engine::{EngineRequest, EngineState, PREFIX_BLOCK_TOKENS, Timing};
use crate::error::SimError;
use crate::fleet::{
    Dialect, Fleet, KvPolicy, LORA_SETS, LORA_WEIGHTS, Runtime, TENANTS, WorkerSpec, tenant_index,
};
use crate::otlp::{self, b, f, i, s};
use crate::prompts;
use crate::rng::{Rng, mix64};
use crate::scenario::{
    BYTES_PER_STREAMED_TOKEN, CACHE_SCANNER, DRIFT_OUTPUT_MEDIAN_TOKENS, DRIFT_OUTPUT_SIGMA,
    FLOW_WINDOW_BYTES, GATEWAY_TIMEOUT_MS, GroundTruth, INJECTION_TENANT, Plan,
    STALL_PER_WINDOW_MS,
};
use crate::sink::TelemetrySink;
use crate::timefmt;

/// What a run produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SimSummary {
    pub requests: u64,
    pub spans: u64,
    pub log_records: u64,
    pub metric_points: u64,
    pub raw_lines: u64,
    pub chunks: u64,
    pub timeouts: u64,
    pub errors: u64,
    pub preemptions: u64,
    /// `gen_ai.token` span events (see `SimConfig::token_events`).
    pub token_events: u64,
}

/// Random stream that picks the requests with token events (streams 1–3 drive everything else).
const TOKEN_EVENTS_STREAM: u64 = 4;

/// Why a request arrived (ordinary traffic or a scenario's extra stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Normal,
    Scanner,
    Injection,
}

struct Pending {
    at_ns: i64,
    seq: u64,
    arrival: Arrival,
    origin: Origin,
}

/// Per-chunk accumulators of one worker (stats lines).
#[derive(Debug, Default, Clone, Copy)]
struct ChunkStats {
    prompt_tokens: u64,
    generation_tokens: u64,
    prefix_queries: u64,
    prefix_hits: u64,
    draft: u64,
    accepted: u64,
}

/// Raw lines waiting for their time to pass, so each worker's file is in time order.
type LineHeap = BinaryHeap<Reverse<(i64, u64, String)>>;

pub struct Simulator {
    config: SimConfig,
    fleet: Fleet,
    plan: Plan,
    arrivals: ArrivalStream,
    trace_replay: bool,
    engines: Vec<EngineState>,
    rng: Rng,
    extra_rng: Rng,
    token_rng: Rng,
    sessions: Vec<Vec<u64>>,
    next_arrival: Option<Arrival>,
    seq: u64,
    chunk_stats: Vec<ChunkStats>,
    lines: Vec<LineHeap>,
    line_seq: u64,
    summary: SimSummary,
}

/// Spans, logs and raw lines of the current chunk.
#[derive(Default)]
struct ChunkOut {
    worker_spans: BTreeMap<usize, Vec<Span>>,
    gateway_spans: BTreeMap<usize, Vec<Span>>,
    gateway_logs: BTreeMap<usize, Vec<LogRecord>>,
}

impl Simulator {
    /// Validates the configuration and loads the replay trace if one is asked for.
    pub fn new(config: SimConfig) -> Result<Self, SimError> {
        config.validate()?;
        let trace = match config.arrivals {
            ArrivalKind::Poisson => None,
            kind => {
                let dir = config.data_dir.clone().unwrap_or_else(default_data_dir);
                Some(load_trace(kind, &dir)?)
            }
        };
        let trace_replay = trace.is_some();
        let fleet = Fleet::new(config.workers);
        let plan = Plan::new(&config);
        let engines = fleet.workers.iter().map(EngineState::new).collect();
        let n = fleet.workers.len();
        Ok(Self {
            arrivals: ArrivalStream::new(&config, trace),
            trace_replay,
            engines,
            rng: Rng::stream(config.seed, 2),
            extra_rng: Rng::stream(config.seed, 3),
            token_rng: Rng::stream(config.seed, TOKEN_EVENTS_STREAM),
            sessions: vec![Vec::new(); TENANTS.len()],
            next_arrival: None,
            seq: 0,
            chunk_stats: vec![ChunkStats::default(); n],
            lines: (0..n).map(|_| BinaryHeap::new()).collect(),
            line_seq: 0,
            summary: SimSummary::default(),
            fleet,
            plan,
            config,
        })
    }

    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    pub fn incident_start_ns(&self) -> i64 {
        self.plan.incident_start_ns
    }

    pub fn ground_truth(&self) -> GroundTruth {
        self.plan.ground_truth(&self.config, &self.fleet)
    }

    /// Runs the whole simulation into `sink`.
    pub fn run(mut self, sink: &mut dyn TelemetrySink) -> Result<SimSummary, SimError> {
        let start = self.config.start_ns;
        let end = self.config.end_ns();
        let chunk_ns = (self.config.chunk_s * 1e9) as i64;
        let mut t = start;
        while t < end {
            let until = (t + chunk_ns).min(end);
            self.run_chunk(t, until, sink)?;
            self.summary.chunks += 1;
            sink.chunk_done(until, (until - start) as f64 / (end - start) as f64)?;
            t = until;
        }
        // Lines that fall after the end (responses still streaming) close the files.
        for w in 0..self.lines.len() {
            self.flush_lines(w, i64::MAX, sink)?;
        }
        sink.finish()?;
        Ok(self.summary)
    }

    fn collect_arrivals(&mut self, from_ns: i64, until_ns: i64) -> Vec<Pending> {
        let start = self.config.start_ns;
        let mut out = Vec::new();
        loop {
            let next = match self.next_arrival.take() {
                Some(a) => Some(a),
                None => self.arrivals.next(),
            };
            let Some(arrival) = next else { break };
            let at_ns = start + (arrival.offset_s * 1e9) as i64;
            if at_ns >= until_ns {
                self.next_arrival = Some(arrival);
                break;
            }
            self.seq += 1;
            out.push(Pending {
                at_ns,
                seq: self.seq,
                arrival,
                origin: Origin::Normal,
            });
        }
        // The scenario's extra traffic (scans, injection bursts) during the incident.
        if let Some((tenant, fraction)) = self.plan.extra_traffic() {
            let from = from_ns.max(self.plan.incident_start_ns);
            if from < until_ns {
                let origin = if tenant == CACHE_SCANNER {
                    Origin::Scanner
                } else {
                    Origin::Injection
                };
                let rate = self.config.rate_per_s * fraction;
                let mut at = from as f64;
                loop {
                    at += self.extra_rng.exp(1e9 / rate);
                    if at >= until_ns as f64 {
                        break;
                    }
                    let (input, output) = match origin {
                        Origin::Scanner => (
                            self.extra_rng
                                .lognormal(16_000.0, 0.15)
                                .clamp(8_192.0, 30_000.0),
                            1.0 + self.extra_rng.below(8) as f64,
                        ),
                        _ => (
                            self.extra_rng.lognormal(700.0, 0.6).clamp(32.0, 8_000.0),
                            self.extra_rng.lognormal(220.0, 0.5).clamp(8.0, 2_000.0),
                        ),
                    };
                    self.seq += 1;
                    out.push(Pending {
                        at_ns: at as i64,
                        seq: self.seq,
                        arrival: Arrival {
                            offset_s: (at - start as f64) / 1e9,
                            input_tokens: input as u32,
                            output_tokens: output as u32,
                            hash_ids: Vec::new(),
                        },
                        origin,
                    });
                }
            }
        }
        out.sort_by_key(|p| (p.at_ns, p.seq));
        out
    }

    fn run_chunk(
        &mut self,
        from_ns: i64,
        until_ns: i64,
        sink: &mut dyn TelemetrySink,
    ) -> Result<(), SimError> {
        let pending = self.collect_arrivals(from_ns, until_ns);
        let mut out = ChunkOut::default();
        for p in pending {
            self.request(p, &mut out);
        }
        // Traces: one export per chunk, a resource per gateway and per worker.
        let mut resource_spans = Vec::new();
        for (g, spans) in std::mem::take(&mut out.gateway_spans) {
            self.summary.spans += spans.len() as u64;
            resource_spans.push(ResourceSpans {
                resource: self.gateway_resource(g, from_ns),
                scope_spans: vec![ScopeSpans {
                    scope: otlp::scope("infersight-gateway", "2"),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            });
        }
        for (w, spans) in std::mem::take(&mut out.worker_spans) {
            self.summary.spans += spans.len() as u64;
            let worker = &self.fleet.workers[w];
            resource_spans.push(ResourceSpans {
                resource: worker_resource(worker),
                scope_spans: vec![ScopeSpans {
                    scope: otlp::scope(
                        &format!("{}.tracing", worker.runtime.name()),
                        worker.engine_version,
                    ),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            });
        }
        if !resource_spans.is_empty() {
            sink.traces(ExportTraceServiceRequest { resource_spans })?;
        }
        let mut resource_logs = Vec::new();
        for (g, log_records) in std::mem::take(&mut out.gateway_logs) {
            self.summary.log_records += log_records.len() as u64;
            resource_logs.push(ResourceLogs {
                resource: self.gateway_resource(g, from_ns),
                scope_logs: vec![ScopeLogs {
                    scope: otlp::scope("infersight-gateway.access", "2"),
                    log_records,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            });
        }
        if !resource_logs.is_empty() {
            sink.logs(ExportLogsServiceRequest { resource_logs })?;
        }
        self.metrics_and_stats(until_ns, sink)?;
        for w in 0..self.lines.len() {
            self.flush_lines(w, until_ns, sink)?;
        }
        Ok(())
    }

    fn gateway_resource(
        &self,
        g: usize,
        t_ns: i64,
    ) -> Option<opentelemetry_proto::tonic::resource::v1::Resource> {
        let gateway = &self.fleet.gateways[g];
        let version = self
            .plan
            .effects(&self.fleet.workers[0], "none", g, t_ns)
            .gateway_version
            .unwrap_or(gateway.version);
        otlp::resource(vec![
            s("service.name", "gateway"),
            s("service.version", version),
            s("service.instance.id", gateway.name.clone()),
            s("deployment.environment.name", "prod"),
        ])
    }

    fn line(&mut self, worker: usize, ts_ns: i64, text: String) {
        self.line_seq += 1;
        self.lines[worker].push(Reverse((ts_ns, self.line_seq, text)));
    }

    fn flush_lines(
        &mut self,
        worker: usize,
        until_ns: i64,
        sink: &mut dyn TelemetrySink,
    ) -> Result<(), SimError> {
        let name = self.fleet.workers[worker].name.clone();
        let service = self.fleet.workers[worker].runtime.name();
        while let Some(Reverse((ts, _, _))) = self.lines[worker].peek() {
            if *ts >= until_ns {
                break;
            }
            let Some(Reverse((ts, _, text))) = self.lines[worker].pop() else {
                break;
            };
            sink.raw_log_line(&name, service, ts, &text)?;
            self.summary.raw_lines += 1;
        }
        Ok(())
    }

    /// Picks a session of `tenant`: 60 % continue a recent one (multi-turn), else a new one.
    fn session(&mut self, tenant: usize) -> u64 {
        let recent = &mut self.sessions[tenant];
        if !recent.is_empty() && self.rng.chance(0.6) {
            return recent[self.rng.below(recent.len() as u64) as usize];
        }
        let id = self.rng.next_u64();
        if recent.len() < 256 {
            recent.push(id);
        } else {
            let slot = self.rng.below(256) as usize;
            recent[slot] = id;
        }
        id
    }

    fn request(&mut self, p: Pending, out: &mut ChunkOut) {
        let Pending {
            at_ns,
            arrival,
            origin,
            ..
        } = p;
        let rng = &mut self.rng;
        let tenant = match origin {
            Origin::Normal => {
                let weights: Vec<f64> = TENANTS.iter().map(|t| t.weight).collect();
                rng.weighted(&weights)
            }
            Origin::Scanner => tenant_index(CACHE_SCANNER),
            Origin::Injection => tenant_index(INJECTION_TENANT),
        };
        let tenant_spec = &TENANTS[tenant];
        let model_index = tenant_spec.model.unwrap_or_else(|| rng.below(2) as usize);
        let lora = LORA_SETS[rng.weighted(&LORA_WEIGHTS)];
        let gateway = rng.below(self.fleet.gateways.len() as u64) as usize;
        let session = match origin {
            Origin::Scanner => self.rng.next_u64(),
            _ if arrival.hash_ids.len() > 1 => mix64(arrival.hash_ids[1]),
            _ => self.session(tenant),
        };
        let rng = &mut self.rng;
        let eligible = &self.fleet.by_model[model_index];
        let worker_index = eligible[(mix64(session ^ 0x77) % eligible.len() as u64) as usize];
        let worker = &self.fleet.workers[worker_index];
        let effects = self.plan.effects(worker, lora, gateway, at_ns);

        // Lengths: trace replay keeps the source's; synthesized prompts get the tenant's system
        // prompt in front.
        let sys_blocks = tenant_spec.system_prompt_blocks;
        let mut input = arrival.input_tokens.max(1);
        if !self.trace_replay && origin == Origin::Normal {
            input += sys_blocks * PREFIX_BLOCK_TOKENS;
        }
        // A drifted tenant's client asks for long documents and sets max_tokens for them, so
        // its outputs grow without being truncated.
        let drifted = self.plan.prompt_drift(tenant_spec.name, at_ns);
        let natural_output = if drifted {
            rng.lognormal(DRIFT_OUTPUT_MEDIAN_TOKENS, DRIFT_OUTPUT_SIGMA)
                .clamp(256.0, 4_000.0) as u32
        } else {
            arrival.output_tokens.max(1)
        };
        // Clients set max_tokens from what they normally get; 1.5 % are set too tight.
        let max_tokens = if rng.chance(0.015) {
            natural_output
        } else {
            [256u32, 512, 1024, 2048, 4096, 8192]
                .into_iter()
                .find(|m| *m as f64 >= natural_output as f64 * 1.2)
                .unwrap_or(natural_output.max(8192))
        };
        let wanted = ((natural_output as f64) * effects.output_factor).round() as u32;
        let output = wanted.min(max_tokens).max(1);
        let truncated = wanted >= max_tokens;

        // Prefix blocks: the trace's, or tenant system prompt + session history by position.
        let full_blocks = input / PREFIX_BLOCK_TOKENS;
        let blocks: Vec<u64> = if !arrival.hash_ids.is_empty() {
            arrival.hash_ids.clone()
        } else {
            (0..full_blocks)
                .map(|j| match origin {
                    Origin::Scanner => mix64(session ^ (j as u64) << 20),
                    _ if j < sys_blocks => (1u64 << 62) | ((tenant as u64) << 16) | j as u64,
                    _ => mix64(session.wrapping_add(j as u64)),
                })
                .collect()
        };

        let injected = origin == Origin::Injection;
        let spec_acceptance = if injected {
            0.15 + 0.05 * rng.unit()
        } else {
            0.68 + 0.06 * rng.unit()
        };
        let gateway_ms = 1.2 + rng.exp(0.6);
        let tokenize_ms = 0.3 + input as f64 * 0.000_4;
        let engine_arrival = at_ns + ((gateway_ms + tokenize_ms) * 1e6) as i64;
        let condition = self.plan.condition(worker, at_ns);
        let engine_request = EngineRequest {
            arrival_ns: engine_arrival,
            input_tokens: input,
            output_tokens: output,
            max_tokens,
            blocks: &blocks,
            step_factor: effects.step_factor * (1.0 + 0.04 * rng.normal()).clamp(0.85, 1.2),
            prefill_factor: effects.prefill_factor,
            extra_prefill_ms: effects.extra_prefill_ms,
            batch_wait_ms: effects.batch_wait_ms.unwrap_or(worker.batch_wait_ms),
            kv_capacity_factor: effects.kv_capacity_factor,
            spec_acceptance,
            timeout_ms: GATEWAY_TIMEOUT_MS,
        };
        let timing = self.engines[worker_index].admit(worker, &engine_request);
        let rng = &mut self.rng;
        if timing.aborted {
            self.engines[worker_index].note_aborted(engine_arrival, timing.end_ns);
            self.summary.timeouts += 1;
        }
        // The end of the incident of a leaking worker: allocations fail.
        let oom = condition.leaked_gb > 10.0 && !timing.aborted && rng.chance(0.3);
        let stats = &mut self.chunk_stats[worker_index];
        if !timing.aborted {
            stats.prompt_tokens += input as u64;
            stats.generation_tokens += output as u64;
            stats.draft += timing.spec_draft_tokens as u64;
            stats.accepted += timing.spec_accepted_tokens as u64;
            if worker.kv_policy == crate::fleet::KvPolicy::PrefixCache {
                stats.prefix_queries += input as u64;
                stats.prefix_hits += timing.cached_tokens as u64;
            }
        }
        self.summary.requests += 1;
        self.summary.preemptions += timing.preemptions as u64;

        let post_ms = 0.2 + output as f64 * 0.003;
        let stall_ms = if effects.flow_stall && !timing.aborted {
            let bytes = output as f64 * BYTES_PER_STREAMED_TOKEN;
            (bytes / FLOW_WINDOW_BYTES).floor() * STALL_PER_WINDOW_MS
        } else {
            0.0
        };
        let (output_emitted, finish_reason, error_type) = if timing.aborted {
            (0, "abort", Some("timeout"))
        } else if oom {
            (output / 3, "abort", Some("OutOfMemoryError"))
        } else if truncated {
            (output, "length", None)
        } else {
            (output, "stop", None)
        };
        if error_type.is_some() {
            self.summary.errors += 1;
        }
        let http_status: i64 = match error_type {
            Some("timeout") => 504,
            Some(_) => 500,
            None => 200,
        };

        // ---- ids and times
        let trace_id = id16(rng);
        let gateway_span_id = id8(rng);
        let tokenizer_span_id = id8(rng);
        let engine_span_id = id8(rng);
        let post_span_id = id8(rng);
        let request_id = format!("cmpl-{}", rng.hex128());
        let ms = |x: f64| (x * 1e6) as i64;
        let tokenizer_start = at_ns + ms(gateway_ms);
        let engine_start = engine_arrival;
        let engine_end = engine_start + ms(timing.e2e_ms);
        let post_end = engine_end + ms(post_ms);
        let gateway_end = post_end + ms(stall_ms + 0.4);
        let client_e2e_ms = (gateway_end - at_ns) as f64 / 1e6;
        let (engine_trace_id, tokenizer_parent) = if effects.drop_context {
            (id16(rng), Vec::new())
        } else {
            (trace_id.clone(), gateway_span_id.clone())
        };
        let status = |error: Option<&str>| {
            error.map(|e| Status {
                code: StatusCode::Error as i32,
                message: e.to_string(),
            })
        };
        let email = format!(
            "{}{}@example.com",
            ["jane.doe", "wei.zhang", "c.garcia", "ops"][rng.below(4) as usize],
            rng.below(1000)
        );
        let injection_score = if injected {
            0.85 + 0.14 * rng.unit()
        } else {
            (rng.exp(0.02)).min(0.6)
        };
        let temperature = [0.0, 0.2, 0.7, 1.0][rng.below(4) as usize];

        // ---- gateway span (root)
        let gateway_version = effects
            .gateway_version
            .unwrap_or(self.fleet.gateways[gateway].version);
        let gateway_span = Span {
            trace_id: trace_id.clone(),
            span_id: gateway_span_id.clone(),
            name: "POST /v1/chat/completions".into(),
            kind: SpanKind::Server as i32,
            start_time_unix_nano: at_ns as u64,
            end_time_unix_nano: gateway_end as u64,
            attributes: vec![
                s("http.request.method", "POST"),
                s("http.route", "/v1/chat/completions"),
                s("url.path", "/v1/chat/completions"),
                i("http.response.status_code", http_status),
                i(
                    "http.response.body.size",
                    (output_emitted as f64 * BYTES_PER_STREAMED_TOKEN) as i64 + 180,
                ),
                s("network.protocol.name", "http"),
                s("network.protocol.version", "2"),
                s("server.address", "llm.internal"),
                s("user_agent.original", "openai-python/1.54.3"),
                s("tenant", tenant_spec.name),
                s("gateway.upstream", worker.name.clone()),
                s("gateway.version", gateway_version),
                f("guardrail.injection_score", round3(injection_score)),
            ],
            status: status(error_type.map(|_| "upstream error")),
            ..Default::default()
        };
        out.gateway_spans
            .entry(gateway)
            .or_default()
            .push(gateway_span);

        // ---- tokenizer span
        let dims = &self.config.dimension_names;
        let tokenizer_span = Span {
            trace_id: engine_trace_id.clone(),
            span_id: tokenizer_span_id.clone(),
            parent_span_id: tokenizer_parent,
            name: "tokenize".into(),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: tokenizer_start as u64,
            end_time_unix_nano: engine_start as u64,
            attributes: vec![
                i("tokenizer.prompt_chars", input as i64 * 4),
                s("tokenizer.name", worker.model),
            ],
            ..Default::default()
        };

        // ---- engine span (becomes the `requests` row)
        let mut attrs = Vec::with_capacity(40);
        let finish = if timing.aborted {
            "abort"
        } else {
            finish_reason
        };
        match worker.dialect {
            Dialect::Current => {
                attrs.push(s("gen_ai.operation.name", "chat"));
                attrs.push(s("gen_ai.provider.name", worker.runtime.name()));
                attrs.push(s("gen_ai.request.model", worker.model));
                attrs.push(s("gen_ai.response.model", worker.model));
                attrs.push(i("gen_ai.usage.input_tokens", input as i64));
                attrs.push(i("gen_ai.usage.output_tokens", output_emitted as i64));
                attrs.push(i(
                    "gen_ai.usage.cache_read.input_tokens",
                    timing.cached_tokens as i64,
                ));
                attrs.push(otlp::str_array("gen_ai.response.finish_reasons", &[finish]));
            }
            Dialect::Deprecated => {
                attrs.push(s("gen_ai.system", worker.runtime.name()));
                attrs.push(s("gen_ai.request.model", worker.model));
                attrs.push(i("gen_ai.usage.prompt_tokens", input as i64));
                attrs.push(i("gen_ai.usage.completion_tokens", output_emitted as i64));
                attrs.push(i(
                    "gen_ai.usage.cache_read_input_tokens",
                    timing.cached_tokens as i64,
                ));
                attrs.push(s("gen_ai.response.finish_reason", finish));
            }
        }
        attrs.push(s("gen_ai.request.id", request_id.clone()));
        attrs.push(i("gen_ai.request.max_tokens", max_tokens as i64));
        attrs.push(f("gen_ai.request.temperature", temperature));
        attrs.push(f("gen_ai.request.top_p", 0.95));
        attrs.push(f("gen_ai.request.n", 1.0));
        let phase_spans = self.config.phase_spans && worker.runtime == Runtime::Sglang;
        if !phase_spans {
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
        attrs.push(s(&dims.model_version, worker.model_version));
        attrs.push(s(&dims.lora_adapters, lora));
        attrs.push(s(&dims.kv_cache_policy, worker.kv_policy.name()));
        attrs.push(i(&dims.batch_size, timing.batch_size as i64));
        attrs.push(i(&dims.max_batch_size, worker.max_batch as i64));
        attrs.push(i(
            &dims.batch_wait_ms,
            engine_request.batch_wait_ms.round() as i64,
        ));
        attrs.push(s("tenant", tenant_spec.name));
        attrs.push(s("session.id", format!("sess-{:012x}", session >> 16)));
        attrs.push(s(
            "serving.prompt_hash",
            format!("{:016x}", mix64(session ^ input as u64)),
        ));
        attrs.push(s("enduser.id", email));
        attrs.push(i("serving.preemptions", timing.preemptions as i64));
        attrs.push(f(
            "serving.guardrail.injection_score",
            round3(injection_score),
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
        if let Some(e) = error_type {
            attrs.push(s("error.type", e));
        }
        // One draw per request whatever its outcome, so the choice depends on the seed and the
        // request's position only.
        let fraction = self.config.token_events;
        let events = if fraction > 0.0 && self.token_rng.chance(fraction) {
            let kv_hit =
                (worker.kv_policy == KvPolicy::PrefixCache).then_some(timing.cached_tokens > 0);
            token_events(&timing, engine_start, output, output_emitted, kv_hit)
        } else {
            Vec::new()
        };
        self.summary.token_events += events.len() as u64;
        let engine_span = Span {
            trace_id: engine_trace_id.clone(),
            span_id: engine_span_id.clone(),
            parent_span_id: tokenizer_span_id,
            name: "llm_request".into(),
            kind: SpanKind::Server as i32,
            start_time_unix_nano: engine_start as u64,
            end_time_unix_nano: engine_end as u64,
            attributes: attrs,
            events,
            status: status(error_type),
            ..Default::default()
        };
        let engine_trace_id_for_phases = engine_trace_id.clone();
        let post_span = Span {
            trace_id: engine_trace_id,
            span_id: post_span_id,
            parent_span_id: engine_span_id.clone(),
            name: "detokenize".into(),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: engine_end as u64,
            end_time_unix_nano: post_end as u64,
            attributes: vec![
                i("postprocess.stream_chunks", output_emitted as i64),
                b("postprocess.stream", true),
            ],
            ..Default::default()
        };
        let spans = out.worker_spans.entry(worker_index).or_default();
        if phase_spans {
            // Children end before their parent and are exported first, as an SDK would.
            let at = |offset_ms: f64| (engine_start + ms(offset_ms)) as u64;
            let mut phases = vec![("queued", 0.0, timing.queue_ms)];
            if !timing.aborted {
                phases.push(("prefill", timing.queue_ms, timing.ttft_ms));
                phases.push(("decode", timing.ttft_ms, timing.ttft_ms + timing.decode_ms));
            }
            for (k, (name, from_ms, to_ms)) in phases.into_iter().enumerate() {
                // Derived from the engine span's id, so the random streams stay as they were.
                let mut span_id = engine_span_id.clone();
                span_id[0] ^= 0x80 | k as u8;
                spans.push(Span {
                    trace_id: engine_trace_id_for_phases.clone(),
                    span_id,
                    parent_span_id: engine_span_id.clone(),
                    name: name.into(),
                    kind: SpanKind::Internal as i32,
                    start_time_unix_nano: at(from_ms),
                    end_time_unix_nano: at(to_ms),
                    ..Default::default()
                });
            }
        }
        spans.push(tokenizer_span);
        spans.push(engine_span);
        spans.push(post_span);

        // ---- gateway access record (trace-correlated)
        out.gateway_logs.entry(gateway).or_default().push(LogRecord {
            time_unix_nano: gateway_end as u64,
            observed_time_unix_nano: gateway_end as u64,
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
                client_e2e_ms,
                worker.name,
                tenant_spec.name
            )),
            attributes: vec![
                s("tenant", tenant_spec.name),
                i("http.response.status_code", http_status),
                f("duration_ms", round3(client_e2e_ms)),
                s("request.id", request_id.clone()),
            ],
            trace_id: trace_id.clone(),
            span_id: gateway_span_id,
            ..Default::default()
        });

        // ---- raw engine lines
        let worker = &self.fleet.workers[worker_index];
        let prefix = |level: &str, file: &str, ts: i64| log_prefix(worker, level, file, ts);
        let mut raw: Vec<(i64, String)> = Vec::with_capacity(4);
        let (prompt, response) = if drifted {
            (prompts::drifted_prompt(rng), prompts::drifted_response())
        } else {
            let prompt = prompts::prompt(rng, injected);
            (prompt, prompts::response(rng, finish))
        };
        let top = rng.below(32_000);
        raw.push((
            engine_start,
            format!(
                "{} [PROMPT] request_id={request_id} tenant={} {prompt} [RESPONSE] {response} [LOGITS] {{\"top_token\": {top}, \"logprob\": {:.3}, \"entropy\": {:.3}}}",
                prefix("INFO", "logger.py:39", engine_start),
                tenant_spec.name,
                -rng.exp(0.4),
                rng.unit() * 3.0
            ),
        ));
        if effects.extra_prefill_ms > 0.0 {
            // The regressed slice reloads its adapter pair for every request (lora_kv_regression):
            // the engine says so when the request leaves the queue.
            let at = timing.start_ns + ms(timing.queue_ms);
            raw.push((
                at,
                format!(
                    "{} Loading LoRA adapters [{}] for request_id={request_id} from /models/lora: not resident in the LoRA slots of the paged KV pool ({:.0} ms)",
                    prefix("INFO", "worker_manager.py:212", at),
                    lora.replace(',', ", "),
                    effects.extra_prefill_ms
                ),
            ));
        }
        if timing.preemptions > 0 {
            let total = self.engines[worker_index].preemptions_total;
            raw.push((
                timing.start_ns + ms(timing.prefill_ms) + 1_000_000,
                format!(
                    "{} Sequence group {request_id}-0 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={total}",
                    prefix("WARNING", "scheduler.py:1560", timing.start_ns)
                ),
            ));
        }
        if injected && worker.spec_tokens.is_some() && timing.spec_draft_tokens > 0 {
            raw.push((
                engine_start + ms(timing.prefill_ms) + 2_000_000,
                format!(
                    "{} Rejection sampling failed for {request_id}: accepted {} of {} draft tokens, rolled back {} speculative positions",
                    prefix("WARNING", "rejection_sampler.py:212", engine_start),
                    timing.spec_accepted_tokens,
                    timing.spec_draft_tokens,
                    timing.spec_draft_tokens - timing.spec_accepted_tokens
                ),
            ));
        }
        if oom {
            let used = 12.0 + condition.leaked_gb;
            raw.push((
                engine_end,
                format!(
                    "{} Error in model execution (request {request_id}): torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of {:.2} GiB of which {:.2} MiB is free. Process 2817 has {:.2} GiB memory in use. Of the allocated memory {:.2} GiB is allocated by PyTorch, and 0.61 GiB is reserved by PyTorch but unallocated.",
                    prefix("ERROR", "engine.py:1124", engine_end),
                    worker.gpu.memory_total_mib / 1024.0,
                    (worker.gpu.memory_total_mib - used * 953.674).max(20.0),
                    used * 0.931,
                    used * 0.931 - 0.61
                ),
            ));
        }
        // Access line when the response ends (uvicorn for vLLM and SGLang; TGI logs its router).
        let access = match worker.runtime {
            Runtime::Vllm | Runtime::Sglang => {
                let reason = match http_status {
                    200 => "OK",
                    504 => "Gateway Timeout",
                    _ => "Internal Server Error",
                };
                format!(
                    "INFO:     10.8.{}.{}:{} - \"POST /v1/chat/completions HTTP/1.1\" {http_status} {reason}",
                    gateway,
                    10 + rng.below(4),
                    30_000 + rng.below(30_000)
                )
            }
            Runtime::Tgi => format!(
                "{}  INFO chat_completions{{total_time=\"{:.6}s\" validation_time=\"{:.6}s\" queue_time=\"{:.6}s\" inference_time=\"{:.6}s\" time_per_token=\"{:.6}s\"}}: text_generation_router::server: router/src/server.rs:637: Success",
                timefmt::rfc3339_micros(engine_end),
                timing.e2e_ms / 1e3,
                tokenize_ms / 1e3,
                timing.queue_ms / 1e3,
                (timing.prefill_ms + timing.decode_ms) / 1e3,
                timing.tpot_ms / 1e3
            ),
        };
        raw.push((engine_end, access));
        for (ts, text) in raw {
            self.line(worker_index, ts, text);
        }
    }

    fn metrics_and_stats(
        &mut self,
        at_ns: i64,
        sink: &mut dyn TelemetrySink,
    ) -> Result<(), SimError> {
        let start = self.config.start_ns;
        let chunk_s = self.config.chunk_s;
        let mut resource_metrics = Vec::with_capacity(self.fleet.workers.len());
        for w in 0..self.fleet.workers.len() {
            let worker = &self.fleet.workers[w];
            let cond = self.plan.condition(worker, at_ns);
            let gauges = self.engines[w].gauges(worker, at_ns, cond.kv_capacity_factor);
            let engine = &self.engines[w];
            let stats = std::mem::take(&mut self.chunk_stats[w]);
            let rng = &mut self.rng;
            let label = || vec![s("model_name", worker.model)];
            let mut metrics: Vec<Metric> = Vec::with_capacity(16);
            match worker.runtime {
                Runtime::Vllm => {
                    let kv_name = if worker.vllm_v1 {
                        "vllm:kv_cache_usage_perc"
                    } else {
                        "vllm:gpu_cache_usage_perc"
                    };
                    metrics.push(otlp::gauge(
                        "vllm:num_requests_running",
                        "",
                        at_ns,
                        gauges.running as f64,
                        label(),
                    ));
                    metrics.push(otlp::gauge(
                        "vllm:num_requests_waiting",
                        "",
                        at_ns,
                        gauges.waiting as f64,
                        label(),
                    ));
                    metrics.push(otlp::gauge(
                        kv_name,
                        "",
                        at_ns,
                        round6(gauges.kv_usage),
                        label(),
                    ));
                    for (name, value) in [
                        ("vllm:num_preemptions_total", engine.preemptions_total),
                        ("vllm:prompt_tokens_total", engine.prompt_tokens_total),
                        (
                            "vllm:generation_tokens_total",
                            engine.generation_tokens_total,
                        ),
                        ("vllm:request_success_total", engine.requests_total),
                    ] {
                        metrics.push(otlp::counter(name, at_ns, start, value as f64, label()));
                    }
                    if worker.spec_tokens.is_some() {
                        metrics.push(otlp::counter(
                            "vllm:spec_decode_num_draft_tokens_total",
                            at_ns,
                            start,
                            engine.spec_draft_total as f64,
                            label(),
                        ));
                        metrics.push(otlp::counter(
                            "vllm:spec_decode_num_accepted_tokens_total",
                            at_ns,
                            start,
                            engine.spec_accepted_total as f64,
                            label(),
                        ));
                    }
                }
                Runtime::Sglang => {
                    metrics.push(otlp::gauge(
                        "sglang:num_running_reqs",
                        "",
                        at_ns,
                        gauges.running as f64,
                        label(),
                    ));
                    metrics.push(otlp::gauge(
                        "sglang:num_queue_reqs",
                        "",
                        at_ns,
                        gauges.waiting as f64,
                        label(),
                    ));
                    metrics.push(otlp::gauge(
                        "sglang:token_usage",
                        "",
                        at_ns,
                        round6(gauges.kv_usage),
                        label(),
                    ));
                    let hit = if stats.prefix_queries > 0 {
                        stats.prefix_hits as f64 / stats.prefix_queries as f64
                    } else {
                        0.0
                    };
                    metrics.push(otlp::gauge(
                        "sglang:cache_hit_rate",
                        "",
                        at_ns,
                        round6(hit),
                        label(),
                    ));
                    metrics.push(otlp::counter(
                        "sglang:prompt_tokens_total",
                        at_ns,
                        start,
                        engine.prompt_tokens_total as f64,
                        label(),
                    ));
                    metrics.push(otlp::counter(
                        "sglang:generation_tokens_total",
                        at_ns,
                        start,
                        engine.generation_tokens_total as f64,
                        label(),
                    ));
                }
                Runtime::Tgi => {
                    metrics.push(otlp::gauge(
                        "tgi_batch_current_size",
                        "",
                        at_ns,
                        gauges.running as f64,
                        label(),
                    ));
                    metrics.push(otlp::gauge(
                        "tgi_queue_size",
                        "",
                        at_ns,
                        gauges.waiting as f64,
                        label(),
                    ));
                }
            }
            // DCGM exporter: memory (MiB), utilization (%), temperature, SM clock.
            let busy = (gauges.running as f64 / 24.0).min(1.0);
            let mut util = if gauges.running == 0 {
                rng.unit() * 2.0
            } else {
                (22.0 + 76.0 * busy + 2.0 * rng.normal()).clamp(5.0, 99.0)
            };
            if let Some(cap) = cond.utilization_cap {
                util = util.min(cap * rng.unit().max(0.2));
            }
            if cond.throttle > 0.0 && gauges.running > 0 {
                util = 99.0;
            }
            let used_mib = (12.0 + cond.leaked_gb + 0.05 * rng.normal()) * 1e9 / 1_048_576.0;
            let temp = if cond.throttle > 0.0 {
                91.0 + rng.unit() * 2.0
            } else {
                48.0 + 0.22 * util + rng.unit() * 2.0
            };
            let clock = worker.gpu.max_sm_clock_mhz
                * if cond.throttle > 0.0 {
                    0.55
                } else {
                    0.985 + 0.01 * rng.unit()
                };
            let gpu = || {
                vec![
                    s("gpu", "0"),
                    s("modelName", worker.gpu.name),
                    s("Hostname", worker.name.clone()),
                ]
            };
            metrics.push(otlp::gauge(
                "DCGM_FI_DEV_FB_USED",
                "MiB",
                at_ns,
                used_mib.round(),
                gpu(),
            ));
            metrics.push(otlp::gauge(
                "DCGM_FI_DEV_FB_TOTAL",
                "MiB",
                at_ns,
                worker.gpu.memory_total_mib,
                gpu(),
            ));
            metrics.push(otlp::gauge(
                "DCGM_FI_DEV_GPU_UTIL",
                "%",
                at_ns,
                util.round(),
                gpu(),
            ));
            metrics.push(otlp::gauge(
                "DCGM_FI_DEV_GPU_TEMP",
                "C",
                at_ns,
                temp.round(),
                gpu(),
            ));
            metrics.push(otlp::gauge(
                "DCGM_FI_DEV_SM_CLOCK",
                "MHz",
                at_ns,
                clock.round(),
                gpu(),
            ));
            self.summary.metric_points += metrics.len() as u64;
            resource_metrics.push(ResourceMetrics {
                resource: worker_resource(worker),
                scope_metrics: vec![ScopeMetrics {
                    scope: otlp::scope("prometheus-scrape", "1"),
                    metrics,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            });

            // Periodic engine stats line.
            let prompt_tps = stats.prompt_tokens as f64 / chunk_s;
            let gen_tps = stats.generation_tokens as f64 / chunk_s;
            let kv_pct = gauges.kv_usage * 100.0;
            let mut lines = Vec::new();
            match worker.runtime {
                Runtime::Vllm if worker.vllm_v1 => {
                    let hit = if stats.prefix_queries > 0 {
                        stats.prefix_hits as f64 / stats.prefix_queries as f64 * 100.0
                    } else {
                        0.0
                    };
                    lines.push(format!(
                        "{} Engine 000: Avg prompt throughput: {prompt_tps:.1} tokens/s, Avg generation throughput: {gen_tps:.1} tokens/s, Running: {} reqs, Waiting: {} reqs, GPU KV cache usage: {kv_pct:.1}%, Prefix cache hit rate: {hit:.1}%",
                        log_prefix(worker, "INFO", "loggers.py:123", at_ns),
                        gauges.running,
                        gauges.waiting
                    ));
                    if stats.draft > 0 {
                        let rate = stats.accepted as f64 / stats.draft as f64;
                        lines.push(format!(
                            "{} SpecDecoding metrics: Mean acceptance length: {:.2}, Accepted: {} tokens, Drafted: {} tokens, Avg Draft acceptance rate: {:.1}%",
                            log_prefix(worker, "INFO", "metrics.py:96", at_ns),
                            1.0 + rate * worker.spec_tokens.unwrap_or(0) as f64,
                            stats.accepted,
                            stats.draft,
                            rate * 100.0
                        ));
                    }
                }
                Runtime::Vllm => {
                    lines.push(format!(
                        "{} Avg prompt throughput: {prompt_tps:.1} tokens/s, Avg generation throughput: {gen_tps:.1} tokens/s, Running: {} reqs, Swapped: 0 reqs, Pending: {} reqs, GPU KV cache usage: {kv_pct:.1}%, CPU KV cache usage: 0.0%.",
                        log_prefix(worker, "INFO", "metrics.py:351", at_ns),
                        gauges.running,
                        gauges.waiting
                    ));
                    if stats.draft > 0 {
                        let rate = stats.accepted as f64 / stats.draft as f64;
                        lines.push(format!(
                            "{} Speculative metrics: Draft acceptance rate: {rate:.3}, System efficiency: {:.3}, Number of speculative tokens: {}, Number of accepted tokens: {}, Number of draft tokens: {}, Number of emitted tokens: {}.",
                            log_prefix(worker, "INFO", "metrics.py:455", at_ns),
                            (rate * 0.85).min(1.0),
                            worker.spec_tokens.unwrap_or(0),
                            stats.accepted,
                            stats.draft,
                            stats.generation_tokens
                        ));
                    }
                }
                Runtime::Sglang => lines.push(format!(
                    "[{} TP0] Decode batch. #running-req: {}, #token: {}, token usage: {:.2}, gen throughput (token/s): {gen_tps:.2}, #queue-req: {}",
                    timefmt::date_time(at_ns),
                    gauges.running,
                    (gauges.kv_usage * worker.kv_capacity_tokens) as u64,
                    gauges.kv_usage,
                    gauges.waiting
                )),
                Runtime::Tgi => {}
            }
            for line in lines {
                self.line(w, at_ns - 1, line);
            }
        }
        sink.metrics(ExportMetricsServiceRequest { resource_metrics })?;
        Ok(())
    }
}

fn worker_resource(
    worker: &WorkerSpec,
) -> Option<opentelemetry_proto::tonic::resource::v1::Resource> {
    otlp::resource(vec![
        s("service.name", worker.runtime.name()),
        s("service.version", worker.engine_version),
        s("k8s.pod.name", worker.name.clone()),
        s("host.gpu.model", worker.gpu.name),
        s("serving.lora.loaded", worker.loaded_adapters),
    ])
}

/// The logger prefix of a worker's runtime: vLLM V0 `INFO 11-29 02:00:10 file.py:N]`, V1
/// `INFO 11-29 02:00:10 [file.py:N]`, SGLang `[2025-11-29 02:00:10]`, TGI RFC 3339.
fn log_prefix(worker: &WorkerSpec, level: &str, file: &str, ts_ns: i64) -> String {
    match worker.runtime {
        Runtime::Vllm if worker.vllm_v1 => {
            format!("{level} {} [{file}]", timefmt::vllm(ts_ns))
        }
        Runtime::Vllm => format!("{level} {} {file}]", timefmt::vllm(ts_ns)),
        Runtime::Sglang => format!("[{}] {level}", timefmt::date_time(ts_ns)),
        Runtime::Tgi => format!("{}  {level}", timefmt::rfc3339_micros(ts_ns)),
    }
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

fn id16(rng: &mut Rng) -> Vec<u8> {
    let mut id = Vec::with_capacity(16);
    id.extend_from_slice(&rng.next_u64().to_be_bytes());
    id.extend_from_slice(&rng.next_u64().to_be_bytes());
    id
}

fn id8(rng: &mut Rng) -> Vec<u8> {
    (rng.next_u64() | 1).to_be_bytes().to_vec()
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}
