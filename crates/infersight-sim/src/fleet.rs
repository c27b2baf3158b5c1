//! The fleet: workers (runtime, GPU, model and version, KV-cache policy, loaded LoRA adapters,
//! batch settings, speculative decoding, telemetry dialect), gateways and tenants. Settings are a
//! fixed function of the worker index, so scenarios can name the workers and slices they hit and
//! the same index always means the same worker.

use serde::Serialize;

pub const MODELS: [&str; 2] = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct"];
pub const VERSIONS: [&str; 2] = ["r1", "r2"];
/// LoRA adapter sets a request may ask for (a pair is served as one set).
pub const LORA_SETS: [&str; 3] = ["none", "chat-lora,sql-lora", "summarize-lora"];
pub const LORA_WEIGHTS: [f64; 3] = [0.5, 0.3, 0.2];
pub const LOADED_ADAPTERS: &str = "chat-lora,sql-lora,summarize-lora";
/// Cloud regions, by ⌊i/2⌋ mod 2 (told only by the variations that tell regions): each model,
/// each revision and the paged policy run in both, so their slices can be narrowed to one.
pub const REGIONS: [&str; 2] = ["us-east-1", "eu-west-1"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    Vllm,
    Sglang,
    Tgi,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Vllm => "vllm",
            Runtime::Sglang => "sglang",
            Runtime::Tgi => "tgi",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KvPolicy {
    /// Paged attention, 16-token blocks, no prefix reuse.
    Paged,
    /// One contiguous region per request sized for prompt + max_tokens (wasteful).
    Contiguous,
    /// Paged with automatic prefix caching over 512-token hash blocks.
    PrefixCache,
}

impl KvPolicy {
    pub fn name(self) -> &'static str {
        match self {
            KvPolicy::Paged => "paged",
            KvPolicy::Contiguous => "contiguous",
            KvPolicy::PrefixCache => "prefix_cache",
        }
    }
}

/// Which attribute names a worker's instrumentation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// Current OTel GenAI names (`gen_ai.provider.name`, `gen_ai.usage.input_tokens`, …).
    Current,
    /// The deprecated names vLLM still emits (`gen_ai.system`, `gen_ai.usage.prompt_tokens`, …).
    Deprecated,
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuSpec {
    pub name: &'static str,
    pub memory_total_mib: f64,
    pub max_sm_clock_mhz: f64,
    /// Throughput relative to the reference GPU (per-token costs are divided by it).
    pub speed: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkerSpec {
    pub index: usize,
    pub name: String,
    pub runtime: Runtime,
    /// Engine version string; for vLLM, 0.6.x logs V0 stats lines and 0.10.x V1 lines.
    pub engine_version: &'static str,
    pub vllm_v1: bool,
    pub gpu: GpuSpec,
    pub model: &'static str,
    pub model_version: &'static str,
    pub kv_policy: KvPolicy,
    pub loaded_adapters: &'static str,
    pub max_batch: usize,
    pub batch_wait_ms: f64,
    /// Speculative decoding with this many draft tokens per step, if enabled.
    pub spec_tokens: Option<u32>,
    pub dialect: Dialect,
    pub ip: String,
    /// One of [`REGIONS`].
    pub region: &'static str,
    // Latency-model parameters (see the crate docs for the formulas). They are calibrated so a
    // 16-worker fleet carries the Mooncake trace at 50 req/s busy but healthy; they are not
    // measurements of the named GPUs.
    pub prefill_tokens_per_s: f64,
    pub prefill_overhead_ms: f64,
    pub step_base_ms: f64,
    pub step_batch_coeff: f64,
    pub step_ctx_ms_per_1k: f64,
    pub kv_capacity_tokens: f64,
    pub prefix_cache_blocks: usize,
}

impl WorkerSpec {
    /// Worker `index` of a fleet of `fleet_size`: the first half serves `MODELS[0]`.
    pub fn new(index: usize, fleet_size: usize) -> Self {
        let runtime = match index % 8 {
            5 => Runtime::Sglang,
            2 => Runtime::Tgi,
            _ => Runtime::Vllm,
        };
        let vllm_v1 = runtime == Runtime::Vllm && !index.is_multiple_of(3);
        let engine_version = match runtime {
            Runtime::Vllm if vllm_v1 => "0.10.2",
            Runtime::Vllm => "0.6.3",
            Runtime::Sglang => "0.4.9",
            Runtime::Tgi => "3.3.4",
        };
        let gpu = if index % 5 == 4 {
            GpuSpec {
                name: "NVIDIA A10G",
                memory_total_mib: 23_028.0,
                max_sm_clock_mhz: 1_710.0,
                speed: 0.8,
            }
        } else {
            GpuSpec {
                name: "NVIDIA L4",
                memory_total_mib: 23_034.0,
                max_sm_clock_mhz: 2_040.0,
                speed: 1.0,
            }
        };
        let model = MODELS[usize::from(fleet_size >= 2 && index >= fleet_size / 2)];
        let model_version = VERSIONS[index % 2];
        // Pairs of workers share a policy, so every policy runs both model versions.
        let kv_policy = match (index / 2) % 4 {
            1 => KvPolicy::Contiguous,
            2 => KvPolicy::PrefixCache,
            _ => KvPolicy::Paged,
        };
        let speed = gpu.speed;
        Self {
            index,
            name: format!("worker-{index:02}"),
            runtime,
            engine_version,
            vllm_v1,
            model,
            model_version,
            kv_policy,
            loaded_adapters: LOADED_ADAPTERS,
            max_batch: if index.is_multiple_of(3) { 128 } else { 64 },
            batch_wait_ms: 5.0,
            spec_tokens: (index.is_multiple_of(4) && runtime == Runtime::Vllm).then_some(4),
            dialect: if (index / 4).is_multiple_of(2) {
                Dialect::Current
            } else {
                Dialect::Deprecated
            },
            ip: format!("10.0.{}.{}", 1 + index / 200, 10 + index % 200),
            region: REGIONS[(index / 2) % 2],
            prefill_tokens_per_s: 90_000.0 * speed,
            prefill_overhead_ms: 12.0,
            step_base_ms: 7.0 / speed,
            step_batch_coeff: 1.0 / 48.0,
            step_ctx_ms_per_1k: 0.12,
            kv_capacity_tokens: 600_000.0,
            prefix_cache_blocks: 96,
            gpu,
        }
    }
}

/// A gateway instance in front of the fleet.
#[derive(Debug, Clone, Serialize)]
pub struct GatewaySpec {
    pub name: String,
    pub version: &'static str,
}

pub const GATEWAY_VERSION: &str = "2.3.1";
pub const GATEWAY_NEW_VERSION: &str = "2.4.0";

#[derive(Debug, Clone, Serialize)]
pub struct TenantSpec {
    pub name: &'static str,
    pub weight: f64,
    /// Index into `MODELS`, or `None` for either.
    pub model: Option<usize>,
    /// Shared system-prompt blocks (512 tokens each) at the start of every prompt.
    pub system_prompt_blocks: u32,
}

pub const TENANTS: [TenantSpec; 6] = [
    TenantSpec {
        name: "acme",
        weight: 0.30,
        model: Some(0),
        system_prompt_blocks: 1,
    },
    TenantSpec {
        name: "initech",
        weight: 0.20,
        model: Some(0),
        system_prompt_blocks: 2,
    },
    TenantSpec {
        name: "umbrella",
        weight: 0.22,
        model: Some(1),
        system_prompt_blocks: 1,
    },
    TenantSpec {
        name: "hooli",
        weight: 0.10,
        model: Some(1),
        system_prompt_blocks: 0,
    },
    TenantSpec {
        name: "stark",
        weight: 0.15,
        model: None,
        system_prompt_blocks: 1,
    },
    TenantSpec {
        name: "globex",
        weight: 0.03,
        model: Some(1),
        system_prompt_blocks: 24,
    },
];

pub fn tenant_index(name: &str) -> usize {
    TENANTS.iter().position(|t| t.name == name).unwrap_or(0)
}

#[derive(Debug, Clone, Serialize)]
pub struct Fleet {
    pub workers: Vec<WorkerSpec>,
    pub gateways: Vec<GatewaySpec>,
    /// Worker indices serving each model (index into `MODELS`).
    pub by_model: [Vec<usize>; 2],
}

impl Fleet {
    pub fn new(workers: usize) -> Self {
        let workers: Vec<WorkerSpec> = (0..workers).map(|i| WorkerSpec::new(i, workers)).collect();
        let mut by_model = [Vec::new(), Vec::new()];
        for w in &workers {
            let m = MODELS.iter().position(|m| *m == w.model).unwrap_or(0);
            by_model[m].push(w.index);
        }
        // With very small fleets one model may have no worker; both then share the fleet.
        for serving in &mut by_model {
            if serving.is_empty() {
                *serving = (0..workers.len()).collect();
            }
        }
        let gateways = (0..2)
            .map(|i| GatewaySpec {
                name: format!("gateway-{i}"),
                version: GATEWAY_VERSION,
            })
            .collect();
        Self {
            workers,
            gateways,
            by_model,
        }
    }
}
