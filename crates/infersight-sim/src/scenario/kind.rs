//! The scenarios the simulator knows, by name (`lora_kv_regression`, …), with their descriptions
//! and the runbooks a correct report names first; what each one does is in the parent module.

use std::str::FromStr;

use serde::Serialize;

use crate::error::SimError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    LoraKvRegression,
    GpuMemoryLeak,
    BatchingMisconfig,
    CachePollution,
    InjectionResonance,
    TruncationSurge,
    TraceContextLoss,
    FlowControlStall,
    PreemptionStorm,
    SlowWorker,
    TwoCauses,
    PromptDrift,
    Healthy,
}

impl Scenario {
    pub const ALL: [Scenario; 13] = [
        Scenario::LoraKvRegression,
        Scenario::GpuMemoryLeak,
        Scenario::BatchingMisconfig,
        Scenario::CachePollution,
        Scenario::InjectionResonance,
        Scenario::TruncationSurge,
        Scenario::TraceContextLoss,
        Scenario::FlowControlStall,
        Scenario::PreemptionStorm,
        Scenario::SlowWorker,
        Scenario::TwoCauses,
        Scenario::PromptDrift,
        Scenario::Healthy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::LoraKvRegression => "lora_kv_regression",
            Scenario::GpuMemoryLeak => "gpu_memory_leak",
            Scenario::BatchingMisconfig => "batching_misconfig",
            Scenario::CachePollution => "cache_pollution",
            Scenario::InjectionResonance => "injection_resonance",
            Scenario::TruncationSurge => "truncation_surge",
            Scenario::TraceContextLoss => "trace_context_loss",
            Scenario::FlowControlStall => "flow_control_stall",
            Scenario::PreemptionStorm => "preemption_storm",
            Scenario::SlowWorker => "slow_worker",
            Scenario::TwoCauses => "two_causes",
            Scenario::PromptDrift => "prompt_drift",
            Scenario::Healthy => "healthy",
        }
    }

    /// What the scenario injects, with its worker named as in the default 16-worker fleet
    /// (see `Scenario::named_worker`; a run's ground truth names the worker of its own fleet).
    pub fn description(self) -> &'static str {
        match self {
            Scenario::LoraKvRegression => {
                "model_version r2 × paged KV cache × LoRA set chat-lora,sql-lora: the adapter pair is reloaded for every request → +900 ms TTFT and e2e (p50 to p99) on that slice only (the headline case)"
            }
            Scenario::GpuMemoryLeak => {
                "worker-03's logits processor leaks GPU memory (12 → 23 GB) while utilization stays under 5 %; its latency grows to ×10, CUDA OOM errors at the end"
            }
            Scenario::BatchingMisconfig => {
                "qwen2.5-7b-instruct r1 deployment's batching wait set to 2000 ms instead of 2 (a unit slip): prefills starve, queue builds up, gateway timeouts (504)"
            }
            Scenario::CachePollution => {
                "tenant hooli's long unique document scans evict tenant globex's 12k-token system prompt from the prefix cache → globex TTFT rises on prefix_cache workers"
            }
            Scenario::InjectionResonance => {
                "prompt-injection burst from tenant initech: injection scores, rejection-sampling failures and speculative-decoding rollbacks rise together"
            }
            Scenario::TruncationSurge => {
                "qwen2.5-7b-instruct starts rambling: outputs ×3, finish_reason=length jumps on that model"
            }
            Scenario::TraceContextLoss => {
                "gateway-1 upgraded to 2.4.0 stops propagating traceparent: engine spans start orphan traces, gateway spans lose their children"
            }
            Scenario::FlowControlStall => {
                "gateway-1 upgraded to 2.4.0 with a 16 KiB HTTP/2 window: long streamed outputs stall (client-side latency up, engine latency unchanged)"
            }
            Scenario::PreemptionStorm => {
                "worker-06 restarts with a KV pool of 1 % (6k tokens, wrong gpu_memory_utilization): preemptions (recompute) storm, its e2e latency rises"
            }
            Scenario::SlowWorker => {
                "worker-11's GPU is thermally throttled (92 °C, SM clock −45 %): decode and prefill ×2.2 on that worker"
            }
            Scenario::TwoCauses => {
                "lora_kv_regression and slow_worker at the same time (two independent causes)"
            }
            Scenario::PromptDrift => {
                "tenant stark's client switches from chat to long-form generation (contracts, whole code files): its prompts' vocabulary changes and its outputs grow ≈ ×5 (beyond 3σ of its baseline), so its e2e rises; nothing on the serving side changed"
            }
            Scenario::Healthy => {
                "load varies (±25 % over 30 min), no fault: the right answer is nothing to blame"
            }
        }
    }
}

impl Scenario {
    /// The runbooks (ids of `knowledge/*.md`) a correct report names first for this scenario
    /// (any one of them): the fault's own runbook, or either cause's for `two_causes`.
    pub fn expected_runbooks(self) -> &'static [&'static str] {
        match self {
            Scenario::LoraKvRegression => &["lora-adapter-swapping"],
            Scenario::GpuMemoryLeak => &["gpu-memory-leak"],
            Scenario::BatchingMisconfig => &["batching-wait-misconfig"],
            Scenario::CachePollution => &["prefix-cache-pollution"],
            Scenario::InjectionResonance => &["speculative-decoding-resonance"],
            Scenario::TruncationSurge => &["truncation-surge"],
            Scenario::TraceContextLoss => &["trace-context-loss"],
            Scenario::FlowControlStall => &["http2-flow-control"],
            Scenario::PreemptionStorm => &["kv-cache-preemption"],
            Scenario::SlowWorker => &["slow-worker"],
            // The LoRA slice is often localized as the version alone (`model_version=r2`);
            // the version-regression runbook is then the right first read (it points to the
            // LoRA runbook), as is the slow worker's.
            Scenario::TwoCauses => &["lora-adapter-swapping", "version-regression", "slow-worker"],
            Scenario::PromptDrift => &["prompt-drift"],
            Scenario::Healthy => &[],
        }
    }
}

impl Scenario {
    /// Whether the fault is one cause on a slice of several workers, so that a variation can
    /// narrow it to one pod or one region of that slice.
    pub fn narrowable(self) -> bool {
        matches!(
            self,
            Scenario::LoraKvRegression | Scenario::BatchingMisconfig | Scenario::TruncationSurge
        )
    }
}

impl FromStr for Scenario {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        Scenario::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| SimError::UnknownScenario(s.to_string()))
    }
}
