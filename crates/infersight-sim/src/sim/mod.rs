//! The simulator's main loop: arrivals → tenant, session, model, LoRA set, gateway and worker →
//! the worker's latency model (with the scenario's effects) → one trace per request (gateway →
//! tokenizer → engine → postprocessor), a gateway access log record, raw engine log lines, and
//! per-worker metrics, handed to the sink one chunk of simulated time at a time so memory stays
//! bounded however long the run. A configurable fraction of engine spans also carries one
//! `gen_ai.token` event per output token, chosen from a random stream of its own so that turning
//! token events on or off changes nothing else.
//!
//! The steps live in one file each: [`request`] routes a request and applies the latency
//! model, [`trace`] writes its spans and the gateway's access record, [`raw_logs`] the engine's
//! raw log lines (per request and the periodic stats lines), [`metrics`] the per-worker metrics
//! of each chunk. This file holds the chunk loop, the arrivals of a chunk, the export of what a
//! chunk produced, and the types the steps share.

mod histograms;
mod metrics;
mod raw_logs;
mod request;
mod trace;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use serde::Serialize;

use crate::arrivals::{Arrival, ArrivalStream, load_trace};
use crate::config::{ArrivalKind, SimConfig, default_data_dir};
use crate::engine::{EngineState, Timing};
use crate::error::SimError;
use crate::fleet::{Fleet, TENANTS, WorkerSpec};
use crate::otlp::{self, s};
use crate::rng::Rng;
use crate::scenario::{CACHE_SCANNER, GroundTruth, Plan, Reach, WorkerCondition};
use crate::sink::TelemetrySink;
use crate::variation::Conventions;
use crate::variation::conventions::{deployment_name, node_name};

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
    conventions: Conventions,
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
    /// Per worker, its latency histograms (see [`histograms`]).
    latency: Vec<histograms::LatencyHistograms>,
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

/// Where a request goes: who sent it, the LoRA set it asks for, the gateway and the worker.
struct Route {
    /// Index into `TENANTS`.
    tenant: usize,
    lora: &'static str,
    gateway: usize,
    session: u64,
    /// Index into the fleet's workers.
    worker: usize,
}

/// How long a request is, in tokens.
struct Lengths {
    input: u32,
    /// Output tokens the engine generates: what the client wanted, capped by `max_tokens`.
    output: u32,
    max_tokens: u32,
    /// The wanted output reached `max_tokens` (`finish_reason=length`).
    truncated: bool,
    /// Drifted traffic of `prompt_drift`: long-form prompts and outputs.
    drifted: bool,
    /// Prefix-cache block hashes of the prompt.
    blocks: Vec<u64>,
}

/// The worker's latency model applied to one request.
struct Served {
    gateway_ms: f64,
    tokenize_ms: f64,
    /// When the request reaches the engine (the engine span's start).
    engine_arrival_ns: i64,
    /// The scheduler's batching wait the request met.
    batch_wait_ms: f64,
    timing: Timing,
    condition: WorkerCondition,
}

/// How a request ended.
struct Outcome {
    /// A leaking worker failed an allocation (CUDA out of memory).
    oom: bool,
    output_emitted: u32,
    finish_reason: &'static str,
    error_type: Option<&'static str>,
    http_status: i64,
    /// Detokenizer time.
    post_ms: f64,
    /// HTTP/2 flow-control stall before the response completes.
    stall_ms: f64,
}

/// Trace and span ids of one request.
struct Ids {
    trace_id: Vec<u8>,
    gateway_span_id: Vec<u8>,
    tokenizer_span_id: Vec<u8>,
    engine_span_id: Vec<u8>,
    post_span_id: Vec<u8>,
    request_id: String,
    /// The gateway's trace, or a new one when the gateway drops the trace context.
    engine_trace_id: Vec<u8>,
    /// The gateway span, or none when the context is dropped.
    tokenizer_parent: Vec<u8>,
}

/// When each part of a request starts and ends.
struct Times {
    at_ns: i64,
    tokenizer_start_ns: i64,
    engine_start_ns: i64,
    engine_end_ns: i64,
    post_end_ns: i64,
    gateway_end_ns: i64,
    /// Latency the client sees (the gateway span).
    client_e2e_ms: f64,
}

/// Attributes of the client and its request that no other step depends on.
struct Client {
    email: String,
    injection_score: f64,
    temperature: f64,
}

/// Everything decided about one request, from which its telemetry is written.
struct RequestFacts<'a> {
    worker: &'a WorkerSpec,
    tenant_name: &'static str,
    route: Route,
    lengths: Lengths,
    served: Served,
    outcome: Outcome,
    ids: Ids,
    times: Times,
    client: Client,
    /// A prompt-injection burst request (`injection_resonance`).
    injected: bool,
    /// Extra prefill of the regressed LoRA slice (`lora_kv_regression`), 0 elsewhere.
    extra_prefill_ms: f64,
    gateway_version: &'static str,
    /// The model revision the worker reports (a rollout's build from the incident on).
    model_version: &'static str,
    conventions: &'a Conventions,
}

impl Simulator {
    /// Validates the configuration and loads the replay trace if one is asked for.
    pub fn new(mut config: SimConfig) -> Result<Self, SimError> {
        config.validate()?;
        let conventions = Conventions::new(&config.variations, &config.dimension_names);
        config.start_ns += conventions.start_shift_ns();
        let trace = match config.arrivals {
            ArrivalKind::Poisson => None,
            kind => {
                let dir = config.data_dir.clone().unwrap_or_else(default_data_dir);
                Some(load_trace(kind, &dir)?)
            }
        };
        let trace_replay = trace.is_some();
        let fleet = Fleet::new(config.workers);
        let mut plan = Plan::new(&config);
        plan.reach = Reach::choose(&plan, &fleet, &config.variations, config.seed);
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
            latency: fleet
                .workers
                .iter()
                .map(|w| histograms::LatencyHistograms::new(w.runtime))
                .collect(),
            lines: (0..n).map(|_| BinaryHeap::new()).collect(),
            line_seq: 0,
            summary: SimSummary::default(),
            fleet,
            plan,
            config,
            conventions,
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
        let mut truth = self.plan.ground_truth(&self.config, &self.fleet);
        self.conventions.restate(&mut truth);
        // The variations that took effect: one that does not apply to the scenario is left out.
        let scenario = self.config.scenario;
        truth.variations.retain(|v| v.applies_to(scenario));
        truth
    }

    /// How the run names and lays out its telemetry.
    pub fn conventions(&self) -> &Conventions {
        &self.conventions
    }

    /// Whether `t_ns` is at or after the incident's start (also for `healthy`, whose window to
    /// analyse starts there).
    fn after_incident_start(&self, t_ns: i64) -> bool {
        t_ns >= self.plan.incident_start_ns
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
        self.scenario_arrivals(from_ns, until_ns, &mut out);
        out.sort_by_key(|p| (p.at_ns, p.seq));
        out
    }

    /// The scenario's extra traffic (scans, injection bursts) during the incident, from its own
    /// random stream.
    fn scenario_arrivals(&mut self, from_ns: i64, until_ns: i64, out: &mut Vec<Pending>) {
        let start = self.config.start_ns;
        let Some((tenant, fraction)) = self.plan.extra_traffic() else {
            return;
        };
        let from = from_ns.max(self.plan.incident_start_ns);
        if from >= until_ns {
            return;
        }
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
            let rolled = self.after_incident_start(from_ns);
            resource_spans.push(ResourceSpans {
                resource: worker_resource(worker, &self.conventions, rolled),
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
}

/// A worker's resource. With dimensions on the resource (`resource_dims`) it says what a
/// Kubernetes deployment would: the model revision as `service.version` (a rollout's build once
/// `after_incident_start`), the deployment, pod, node and region, and the KV policy. The engine
/// build is left to the scope's version there: on small fleets it coincides with the revision
/// on some slices, and the ground truth could not tell which of the two a report should name.
fn worker_resource(
    worker: &WorkerSpec,
    conventions: &Conventions,
    after_incident_start: bool,
) -> Option<opentelemetry_proto::tonic::resource::v1::Resource> {
    if conventions.dims_on_resource() {
        let version = conventions.model_version(worker, after_incident_start);
        return otlp::resource(vec![
            s("service.name", worker.runtime.name()),
            s("service.version", version),
            s(
                "k8s.deployment.name",
                deployment_name(worker.model, version),
            ),
            s("k8s.pod.name", worker.name.clone()),
            s("host.name", node_name(&worker.name)),
            s("cloud.region", worker.region),
            s(&conventions.dims.kv_cache_policy, worker.kv_policy.name()),
            s("host.gpu.model", worker.gpu.name),
            s("serving.lora.loaded", worker.loaded_adapters),
        ]);
    }
    let mut attributes = vec![
        s("service.name", worker.runtime.name()),
        s("service.version", worker.engine_version),
        s("k8s.pod.name", worker.name.clone()),
        s("host.gpu.model", worker.gpu.name),
        s("serving.lora.loaded", worker.loaded_adapters),
    ];
    if let Some(region) = conventions.region(worker) {
        attributes.push(s("cloud.region", region));
    }
    otlp::resource(attributes)
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

/// Milliseconds to whole nanoseconds (truncated).
fn ms_to_ns(ms: f64) -> i64 {
    (ms * 1e6) as i64
}
