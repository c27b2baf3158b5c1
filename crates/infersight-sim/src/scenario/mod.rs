//! Fault scenarios: what each injects, where, and when, and the ground truth an analysis should
//! recover (incident and baseline windows, root-cause attribute combinations, expected signal
//! kinds from DESIGN.md). The simulator asks a scenario for the effects on each request and the
//! condition of each worker; nothing else knows which fault is active.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::SimConfig;
use crate::fleet::{Fleet, GATEWAY_NEW_VERSION, KvPolicy, MODELS, WorkerSpec};
use crate::timefmt;

pub use kind::Scenario;
pub use reach::Reach;

pub mod kind;
pub mod reach;

/// The headline LoRA set of `lora_kv_regression`.
pub const INCIDENT_LORA: &str = "chat-lora,sql-lora";
pub const INCIDENT_VERSION: &str = "r2";
/// Added time before the first token on the regressed slice, ms (the adapter pair is reloaded
/// into the paged KV pool's LoRA slots for every request).
pub const LORA_REGRESSION_MS: f64 = 900.0;
pub const LEAK_WORKER: usize = 3;
pub const SLOW_WORKER: usize = 11;
pub const PREEMPTION_WORKER: usize = 6;
pub const CACHE_VICTIM: &str = "globex";
pub const CACHE_SCANNER: &str = "hooli";
pub const INJECTION_TENANT: &str = "initech";
/// The tenant whose traffic drifts in `prompt_drift` (it sends to both models, so the tenant
/// alone is the cause).
pub const DRIFT_TENANT: &str = "stark";
/// Median and log-space σ of the drifted tenant's output lengths (tokens): ≈ ×5 its baseline's
/// median of ≈ 180 with Poisson arrivals, nearly all beyond its baseline mean + 3σ (≈ 780).
pub const DRIFT_OUTPUT_MEDIAN_TOKENS: f64 = 1_100.0;
pub const DRIFT_OUTPUT_SIGMA: f64 = 0.2;
pub const MISCONFIG_BATCH_WAIT_MS: f64 = 2_000.0;
/// KV capacity left on the preemption-storm worker.
pub const PREEMPTION_KV_FACTOR: f64 = 0.01;
pub const GATEWAY_TIMEOUT_MS: f64 = 60_000.0;
/// Output tokens beyond which a stalled HTTP/2 stream waits for window updates.
pub const FLOW_WINDOW_BYTES: f64 = 16_384.0;
pub const BYTES_PER_STREAMED_TOKEN: f64 = 64.0;
pub const STALL_PER_WINDOW_MS: f64 = 250.0;

/// Effects of the active fault on one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Effects {
    pub step_factor: f64,
    pub prefill_factor: f64,
    pub extra_prefill_ms: f64,
    pub batch_wait_ms: Option<f64>,
    pub kv_capacity_factor: f64,
    pub output_factor: f64,
    pub drop_context: bool,
    pub flow_stall: bool,
    pub gateway_version: Option<&'static str>,
}

impl Default for Effects {
    fn default() -> Self {
        Self {
            step_factor: 1.0,
            prefill_factor: 1.0,
            extra_prefill_ms: 0.0,
            batch_wait_ms: None,
            kv_capacity_factor: 1.0,
            output_factor: 1.0,
            drop_context: false,
            flow_stall: false,
            gateway_version: None,
        }
    }
}

/// The resource condition of a worker at an instant (for metrics and logs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerCondition {
    pub leaked_gb: f64,
    pub utilization_cap: Option<f64>,
    pub throttle: f64,
    pub kv_capacity_factor: f64,
    pub batch_wait_ms: Option<f64>,
}

/// A scenario placed on a timeline and a fleet.
#[derive(Debug, Clone)]
pub struct Plan {
    pub scenario: Scenario,
    pub start_ns: i64,
    pub end_ns: i64,
    pub incident_start_ns: i64,
    pub workers: usize,
    pub rate_per_s: f64,
    /// Where the fault strikes when a variation moves it (see [`reach`]); the default is
    /// where the scenario says.
    pub reach: Reach,
}

impl Plan {
    pub fn new(config: &SimConfig) -> Self {
        let start = config.start_ns;
        let end = config.end_ns();
        // The incident takes the last third, aligned to a whole minute.
        let third = ((end - start) / 3 / 60_000_000_000).max(1) * 60_000_000_000;
        Self {
            scenario: config.scenario,
            start_ns: start,
            end_ns: end,
            incident_start_ns: end - third,
            workers: config.workers,
            rate_per_s: config.rate_per_s,
            reach: Reach::default(),
        }
    }

    fn has(&self, s: Scenario) -> bool {
        self.scenario == s
            || (self.scenario == Scenario::TwoCauses
                && matches!(s, Scenario::LoraKvRegression | Scenario::SlowWorker))
    }

    pub fn worker_of(&self, index: usize) -> usize {
        index % self.workers.max(1)
    }

    /// Fraction of the incident elapsed at `t_ns` (0 before it).
    pub fn progress(&self, t_ns: i64) -> f64 {
        if t_ns < self.incident_start_ns {
            0.0
        } else {
            ((t_ns - self.incident_start_ns) as f64 / (self.end_ns - self.incident_start_ns) as f64)
                .clamp(0.0, 1.0)
        }
    }

    pub fn in_incident(&self, t_ns: i64) -> bool {
        self.scenario != Scenario::Healthy && t_ns >= self.incident_start_ns
    }

    pub fn condition(&self, worker: &WorkerSpec, t_ns: i64) -> WorkerCondition {
        let mut c = WorkerCondition {
            leaked_gb: 0.0,
            utilization_cap: None,
            throttle: 0.0,
            kv_capacity_factor: 1.0,
            batch_wait_ms: None,
        };
        if !self.in_incident(t_ns) {
            return c;
        }
        if self.reach.throttled == Some(worker.index) {
            c.throttle = 1.0;
        }
        if !self.reach.admits(worker) {
            return c;
        }
        let p = self.progress(t_ns);
        if self.has(Scenario::GpuMemoryLeak) && worker.index == self.worker_of(LEAK_WORKER) {
            c.leaked_gb = 11.0 * p;
            c.utilization_cap = Some(4.5);
        }
        if self.has(Scenario::SlowWorker) && worker.index == self.worker_of(SLOW_WORKER) {
            c.throttle = 1.0;
        }
        if self.has(Scenario::PreemptionStorm) && worker.index == self.worker_of(PREEMPTION_WORKER)
        {
            c.kv_capacity_factor = PREEMPTION_KV_FACTOR;
        }
        if self.has(Scenario::BatchingMisconfig)
            && worker.model == MODELS[1]
            && worker.model_version == "r1"
        {
            c.batch_wait_ms = Some(MISCONFIG_BATCH_WAIT_MS);
        }
        c
    }

    /// Effects on one request arriving at `t_ns`.
    pub fn effects(&self, worker: &WorkerSpec, lora: &str, gateway: usize, t_ns: i64) -> Effects {
        let mut e = Effects::default();
        if !self.in_incident(t_ns) {
            return e;
        }
        let cond = self.condition(worker, t_ns);
        e.kv_capacity_factor = cond.kv_capacity_factor;
        e.batch_wait_ms = cond.batch_wait_ms;
        if cond.leaked_gb > 0.0 {
            // Allocator thrash as the leak grows: ×1 at onset → ×10 at the end.
            let f = 1.0 + 9.0 * self.progress(t_ns);
            e.step_factor *= f;
            e.prefill_factor *= f;
        }
        if cond.throttle > 0.0 {
            e.step_factor *= 2.2;
            e.prefill_factor *= 2.2;
        }
        let here = self.reach.admits(worker);
        if here
            && self.has(Scenario::LoraKvRegression)
            && worker.model_version == INCIDENT_VERSION
            && worker.kv_policy == KvPolicy::Paged
            && lora == INCIDENT_LORA
        {
            e.extra_prefill_ms = LORA_REGRESSION_MS;
        }
        if here && self.has(Scenario::TruncationSurge) && worker.model == MODELS[1] {
            e.output_factor = 3.0;
        }
        if gateway == 1
            && (self.has(Scenario::TraceContextLoss) || self.has(Scenario::FlowControlStall))
        {
            e.gateway_version = Some(GATEWAY_NEW_VERSION);
            e.drop_context = self.has(Scenario::TraceContextLoss);
            e.flow_stall = self.has(Scenario::FlowControlStall);
        }
        e
    }

    /// Whether a request of `tenant` arriving at `t_ns` is drifted traffic (`prompt_drift`):
    /// long-form generation prompts with long outputs.
    pub fn prompt_drift(&self, tenant: &str, t_ns: i64) -> bool {
        self.scenario == Scenario::PromptDrift && tenant == DRIFT_TENANT && self.in_incident(t_ns)
    }

    /// Extra traffic the scenario adds during the incident: (tenant, rate as a fraction of the
    /// base rate).
    pub fn extra_traffic(&self) -> Option<(&'static str, f64)> {
        match self.scenario {
            Scenario::CachePollution => Some((CACHE_SCANNER, 0.08)),
            Scenario::InjectionResonance => Some((INJECTION_TENANT, 0.10)),
            _ => None,
        }
    }

    pub fn ground_truth(&self, config: &SimConfig, fleet: &Fleet) -> GroundTruth {
        let mut truth = GroundTruth {
            scenario: self.scenario.name().to_string(),
            description: self.description(fleet),
            fault: self.scenario != Scenario::Healthy,
            seed: config.seed,
            arrivals: config.arrivals.name().to_string(),
            workers: config.workers,
            rate_per_s: config.rate_per_s,
            start: timefmt::rfc3339_millis(self.start_ns),
            end: timefmt::rfc3339_millis(self.end_ns),
            baseline_window: Window {
                start: timefmt::rfc3339_millis(self.start_ns),
                end: timefmt::rfc3339_millis(self.incident_start_ns),
            },
            incident_window: Window {
                start: timefmt::rfc3339_millis(self.incident_start_ns),
                end: timefmt::rfc3339_millis(self.end_ns),
            },
            root_causes: self.root_causes(fleet),
            expected_signals: self.expected_signals(fleet),
            expected_runbooks: self
                .scenario
                .expected_runbooks()
                .iter()
                .map(|id| id.to_string())
                .collect(),
            dimension_attributes: config.dimension_names.clone(),
            variations: Vec::new(),
        };
        self.reach.restate(fleet, &mut truth);
        truth
    }

    /// The injected causes: where each fault acts, the SLI that moves and by how much.
    fn root_causes(&self, fleet: &Fleet) -> Vec<RootCauseTruth> {
        match self.scenario {
            Scenario::LoraKvRegression => vec![lora_cause()],
            Scenario::GpuMemoryLeak => vec![cause(
                self.worker_dims(fleet, LEAK_WORKER),
                "e2e_ms p50",
                "×1 → ×10 over the incident; gpu_memory_used 12 → 23 GB with utilization < 5 %",
            )],
            Scenario::BatchingMisconfig => vec![cause(
                misconfig_dims(),
                "queue_ms p50",
                "grows to the 60 s gateway timeout; requests time out (error.type=timeout)",
            )],
            Scenario::CachePollution => vec![cause(
                dims(&[("tenant", CACHE_SCANNER)]),
                "ttft_ms p50 of the victim tenant on prefix-caching workers",
                "the polluter: its scans evict the victims' 12k-token system prompt from the prefix cache (+≈130 ms TTFT on the victims' prefix-caching slice)",
            )],
            Scenario::InjectionResonance => vec![cause(
                dims(&[("tenant", INJECTION_TENANT)]),
                "spec_accepted_tokens / spec_draft_tokens",
                "draft acceptance rate (accepted / drafted) ≈ 0.45 → ≈ 0.05 for injected prompts on speculative workers; guardrail injection scores > 0.85; rejection-sampling failures and rollbacks logged",
            )],
            Scenario::TruncationSurge => vec![cause(
                dims(&[("model", MODELS[1])]),
                "share of finish_reason=length",
                "≈2 % → > 25 %",
            )],
            Scenario::TraceContextLoss => vec![cause(
                new_gateway_dims(),
                "share of gateway spans without children",
                "0 → 1 for gateway 2.4.0; engine-side spans start new (orphan) traces",
            )],
            Scenario::FlowControlStall => vec![cause(
                new_gateway_dims(),
                "gateway span duration for outputs > 256 tokens",
                "+250 ms per 16 KiB window beyond the first; engine e2e unchanged",
            )],
            Scenario::PreemptionStorm => vec![cause(
                self.worker_dims(fleet, PREEMPTION_WORKER),
                "preemptions and e2e_ms p50",
                "preemptions from ≈0 to most requests; e2e up on that worker",
            )],
            Scenario::SlowWorker => vec![self.slow_cause(fleet)],
            Scenario::TwoCauses => vec![lora_cause(), self.slow_cause(fleet)],
            Scenario::PromptDrift => vec![cause(
                dims(&[("tenant", DRIFT_TENANT)]),
                "e2e_ms p50",
                "≈ ×4 (outputs ≈ 180 → ≈ 1100 tokens, ≥ 3σ of the tenant's baseline; prompts switch from chat to long-form legal and code generation); other tenants unchanged",
            )],
            Scenario::Healthy => Vec::new(),
        }
    }

    /// The signal kinds (DESIGN.md) an analysis should raise, each with its subject.
    fn expected_signals(&self, fleet: &Fleet) -> Vec<ExpectedSignal> {
        match self.scenario {
            Scenario::LoraKvRegression => vec![
                signal("latency_spike", BTreeMap::new()),
                signal("version_regression", lora_dims()),
            ],
            Scenario::GpuMemoryLeak => {
                let w = self.worker_dims(fleet, LEAK_WORKER);
                vec![
                    signal("gpu_memory_leak", w.clone()),
                    signal("latency_spike", w.clone()),
                    signal("error_burst", w),
                ]
            }
            Scenario::BatchingMisconfig => {
                let d = misconfig_dims();
                vec![
                    signal("queue_buildup", d.clone()),
                    signal("latency_spike", d.clone()),
                    signal("error_burst", d),
                ]
            }
            Scenario::CachePollution => vec![
                signal("cache_pollution", dims(&[("tenant", CACHE_SCANNER)])),
                signal("latency_spike", cache_victim_dims()),
            ],
            Scenario::InjectionResonance => {
                vec![signal("resonance", dims(&[("tenant", INJECTION_TENANT)]))]
            }
            Scenario::TruncationSurge => {
                vec![signal("truncation_surge", dims(&[("model", MODELS[1])]))]
            }
            Scenario::TraceContextLoss => vec![signal("trace_context_loss", new_gateway_dims())],
            Scenario::FlowControlStall => vec![
                signal("flow_control_stall", new_gateway_dims()),
                signal("latency_spike", new_gateway_dims()),
            ],
            Scenario::PreemptionStorm => {
                let w = self.worker_dims(fleet, PREEMPTION_WORKER);
                vec![
                    signal("preemption_storm", w.clone()),
                    signal("kv_cache_pressure", w.clone()),
                    signal("latency_spike", w),
                ]
            }
            Scenario::SlowWorker => {
                let w = self.worker_dims(fleet, SLOW_WORKER);
                vec![signal("slow_worker", w.clone()), signal("latency_spike", w)]
            }
            Scenario::TwoCauses => vec![
                signal("latency_spike", BTreeMap::new()),
                signal("version_regression", lora_dims()),
                signal("slow_worker", self.worker_dims(fleet, SLOW_WORKER)),
            ],
            Scenario::PromptDrift => {
                let d = dims(&[("tenant", DRIFT_TENANT)]);
                vec![
                    signal("prompt_drift", d.clone()),
                    signal("latency_spike", d),
                ]
            }
            Scenario::Healthy => Vec::new(),
        }
    }

    /// `worker=<name>` of the scenario's worker `index` (wrapped into the fleet).
    /// The scenario's description with the worker it names as `fleet` names it (the
    /// description's index wraps in a smaller fleet, as the fault's does).
    fn description(&self, fleet: &Fleet) -> String {
        let text = self.scenario.description();
        match self.scenario.named_worker() {
            Some(index) => text.replace(
                &format!("worker-{index:02}"),
                &fleet.workers[self.worker_of(index)].name,
            ),
            None => text.to_string(),
        }
    }

    fn worker_dims(&self, fleet: &Fleet, index: usize) -> BTreeMap<String, String> {
        dims(&[("worker", &fleet.workers[self.worker_of(index)].name)])
    }

    fn slow_cause(&self, fleet: &Fleet) -> RootCauseTruth {
        cause(
            self.worker_dims(fleet, SLOW_WORKER),
            "e2e_ms p50",
            "×2.2 (prefill and decode) on that worker; GPU temperature 92 °C, SM clock −45 %",
        )
    }
}

impl Scenario {
    /// The index of the worker the scenario's fault names (its description names it as in
    /// the default 16-worker fleet); `None` when it names none.
    pub fn named_worker(self) -> Option<usize> {
        match self {
            Scenario::GpuMemoryLeak => Some(LEAK_WORKER),
            Scenario::SlowWorker => Some(SLOW_WORKER),
            Scenario::PreemptionStorm => Some(PREEMPTION_WORKER),
            _ => None,
        }
    }
}

fn dims(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn cause(dimensions: BTreeMap<String, String>, sli: &str, effect: &str) -> RootCauseTruth {
    RootCauseTruth {
        dimensions,
        sli: sli.to_string(),
        effect: effect.to_string(),
        equivalent: Vec::new(),
    }
}

fn signal(kind: &str, subject: BTreeMap<String, String>) -> ExpectedSignal {
    ExpectedSignal {
        kind: kind.to_string(),
        subject,
    }
}

/// The regressed slice of `lora_kv_regression`.
fn lora_dims() -> BTreeMap<String, String> {
    dims(&[
        ("model_version", INCIDENT_VERSION),
        ("kv_cache_policy", "paged"),
        ("lora_adapters", INCIDENT_LORA),
    ])
}

fn lora_cause() -> RootCauseTruth {
    cause(
        lora_dims(),
        "ttft_ms and e2e_ms p99",
        "+900 ms (prefill: LoRA pair reload) on every request of the slice; other slices unchanged",
    )
}

/// The deployment whose batching wait is misconfigured (`batching_misconfig`).
fn misconfig_dims() -> BTreeMap<String, String> {
    dims(&[("model", MODELS[1]), ("model_version", "r1")])
}

/// The tenant whose cached system prompt is evicted (`cache_pollution`).
fn cache_victim_dims() -> BTreeMap<String, String> {
    dims(&[
        ("tenant", CACHE_VICTIM),
        ("kv_cache_policy", "prefix_cache"),
    ])
}

/// The upgraded gateway (`trace_context_loss`, `flow_control_stall`).
fn new_gateway_dims() -> BTreeMap<String, String> {
    dims(&[
        ("service", "gateway"),
        ("service.version", GATEWAY_NEW_VERSION),
    ])
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    pub start: String,
    pub end: String,
}

/// One injected cause: the attribute combination (canonical column names where one exists,
/// attribute names otherwise), the SLI that moves and by how much.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RootCauseTruth {
    pub dimensions: BTreeMap<String, String>,
    pub sli: String,
    pub effect: String,
    /// Other combinations that select the same requests in the data (under a variation that
    /// tells one setting by several attributes: the deployment for model and revision, the node
    /// for the pod); a report naming one of them is as right. Absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub equivalent: Vec<BTreeMap<String, String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExpectedSignal {
    pub kind: String,
    pub subject: BTreeMap<String, String>,
}

/// `ground_truth.json`. For `healthy` the incident window is the window to analyse, where the
/// right answer is no root cause.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroundTruth {
    pub scenario: String,
    pub description: String,
    pub fault: bool,
    pub seed: u64,
    pub arrivals: String,
    pub workers: usize,
    pub rate_per_s: f64,
    pub start: String,
    pub end: String,
    pub baseline_window: Window,
    pub incident_window: Window,
    pub root_causes: Vec<RootCauseTruth>,
    pub expected_signals: Vec<ExpectedSignal>,
    /// Ids of the `knowledge/` runbooks a correct report names first (any one of them); empty
    /// for `healthy`.
    pub expected_runbooks: Vec<String>,
    pub dimension_attributes: crate::config::DimensionNames,
    /// The variations that took effect in the run (see [`crate::variation`]; one that does not
    /// apply to the scenario is left out); absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variations: Vec<crate::variation::Variation>,
}
