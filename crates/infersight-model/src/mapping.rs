//! THE attribute-mapping table: every attribute name seen in the wild for a canonical request
//! column (OTel GenAI current and deprecated, vLLM, OpenInference, OpenLLMetry, infersight's own),
//! and every engine metric name for a canonical metric. Normalization consults only this file; the
//! README's mapping table is generated from it (`infersight mapping`).

use std::collections::HashMap;

/// A canonical column of the `requests` table that attributes can fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestColumn {
    RequestId,
    Tenant,
    SessionId,
    Service,
    Runtime,
    Worker,
    Device,
    Model,
    ModelVersion,
    LoraAdapters,
    KvCachePolicy,
    BatchSize,
    InputTokens,
    CachedTokens,
    OutputTokens,
    QueueMs,
    PrefillMs,
    TtftMs,
    DecodeMs,
    TpotMs,
    ItlMaxMs,
    E2eMs,
    FinishReason,
    ErrorType,
    Temperature,
    TopP,
    MaxTokens,
    SpecDraftTokens,
    SpecAcceptedTokens,
    PromptHash,
}

impl RequestColumn {
    pub fn column_name(self) -> &'static str {
        use RequestColumn::*;
        match self {
            RequestId => "request_id",
            Tenant => "tenant",
            SessionId => "session_id",
            Service => "service",
            Runtime => "runtime",
            Worker => "worker",
            Device => "device",
            Model => "model",
            ModelVersion => "model_version",
            LoraAdapters => "lora_adapters",
            KvCachePolicy => "kv_cache_policy",
            BatchSize => "batch_size",
            InputTokens => "input_tokens",
            CachedTokens => "cached_tokens",
            OutputTokens => "output_tokens",
            QueueMs => "queue_ms",
            PrefillMs => "prefill_ms",
            TtftMs => "ttft_ms",
            DecodeMs => "decode_ms",
            TpotMs => "tpot_ms",
            ItlMaxMs => "itl_max_ms",
            E2eMs => "e2e_ms",
            FinishReason => "finish_reason",
            ErrorType => "error_type",
            Temperature => "temperature",
            TopP => "top_p",
            MaxTokens => "max_tokens",
            SpecDraftTokens => "spec_draft_tokens",
            SpecAcceptedTokens => "spec_accepted_tokens",
            PromptHash => "prompt_hash",
        }
    }

    pub fn from_column_name(name: &str) -> Option<RequestColumn> {
        ALL_REQUEST_COLUMNS
            .iter()
            .copied()
            .find(|c| c.column_name() == name)
    }

    /// What the column holds, which decides how an attribute value is converted.
    pub fn value_kind(self) -> ValueKind {
        use RequestColumn::*;
        match self {
            BatchSize | InputTokens | CachedTokens | OutputTokens | MaxTokens | SpecDraftTokens
            | SpecAcceptedTokens => ValueKind::Integer,
            QueueMs | PrefillMs | TtftMs | DecodeMs | TpotMs | ItlMaxMs | E2eMs | Temperature
            | TopP => ValueKind::Number,
            _ => ValueKind::Label,
        }
    }

    /// Whether an attribute for this column marks a span as an inference request.
    pub fn marks_request(self) -> bool {
        use RequestColumn::*;
        matches!(
            self,
            Model | InputTokens | OutputTokens | QueueMs | TtftMs | E2eMs | PrefillMs | DecodeMs
        )
    }
}

pub const ALL_REQUEST_COLUMNS: [RequestColumn; 30] = {
    use RequestColumn::*;
    [
        RequestId,
        Tenant,
        SessionId,
        Service,
        Runtime,
        Worker,
        Device,
        Model,
        ModelVersion,
        LoraAdapters,
        KvCachePolicy,
        BatchSize,
        InputTokens,
        CachedTokens,
        OutputTokens,
        QueueMs,
        PrefillMs,
        TtftMs,
        DecodeMs,
        TpotMs,
        ItlMaxMs,
        E2eMs,
        FinishReason,
        ErrorType,
        Temperature,
        TopP,
        MaxTokens,
        SpecDraftTokens,
        SpecAcceptedTokens,
        PromptHash,
    ]
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A string label (arrays are joined with `,` after sorting, e.g. a LoRA set).
    Label,
    /// A whole number (token counts, batch size).
    Integer,
    /// A real number (latencies, sampling parameters).
    Number,
}

/// How a source value is scaled into the canonical unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    AsIs,
    SecondsToMs,
    NanosToMs,
}

impl Unit {
    pub fn apply(self, value: f64) -> f64 {
        match self {
            Unit::AsIs => value,
            Unit::SecondsToMs => value * 1_000.0,
            Unit::NanosToMs => value / 1_000_000.0,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Unit::AsIs => "",
            Unit::SecondsToMs => "s → ms",
            Unit::NanosToMs => "ns → ms",
        }
    }
}

/// One row of the mapping table. Among several source keys present for the same column the one
/// listed first wins (current names before deprecated ones).
#[derive(Debug, Clone, Copy)]
pub struct AttributeMapping {
    pub key: &'static str,
    pub column: RequestColumn,
    pub unit: Unit,
    pub convention: &'static str,
}

const fn map(
    key: &'static str,
    column: RequestColumn,
    unit: Unit,
    convention: &'static str,
) -> AttributeMapping {
    AttributeMapping {
        key,
        column,
        unit,
        convention,
    }
}

const GENAI: &str = "OTel GenAI";
const GENAI_OLD: &str = "OTel GenAI (deprecated)";
const VLLM: &str = "vLLM";
const OPENINF: &str = "OpenInference";
const OPENLLM: &str = "OpenLLMetry";
const OTEL: &str = "OTel resource/general";
const OURS: &str = "infersight";

/// The request attribute mapping table, in priority order per column.
pub static REQUEST_ATTRIBUTES: &[AttributeMapping] = {
    use RequestColumn::*;
    use Unit::*;
    &[
        map("gen_ai.request.model", Model, AsIs, GENAI),
        map("gen_ai.response.model", Model, AsIs, GENAI),
        map("llm.model_name", Model, AsIs, OPENINF),
        map("llm.request.model", Model, AsIs, OPENLLM),
        map("llm.response.model", Model, AsIs, OPENLLM),
        map("serving.model.version", ModelVersion, AsIs, OURS),
        map("deploy.model_revision", ModelVersion, AsIs, OURS),
        map("model.version", ModelVersion, AsIs, OURS),
        map("gen_ai.usage.input_tokens", InputTokens, AsIs, GENAI),
        map("gen_ai.usage.prompt_tokens", InputTokens, AsIs, GENAI_OLD),
        map("llm.token_count.prompt", InputTokens, AsIs, OPENINF),
        map("llm.usage.prompt_tokens", InputTokens, AsIs, OPENLLM),
        map("gen_ai.usage.output_tokens", OutputTokens, AsIs, GENAI),
        map(
            "gen_ai.usage.completion_tokens",
            OutputTokens,
            AsIs,
            GENAI_OLD,
        ),
        map("llm.token_count.completion", OutputTokens, AsIs, OPENINF),
        map("llm.usage.completion_tokens", OutputTokens, AsIs, OPENLLM),
        map(
            "gen_ai.usage.cache_read.input_tokens",
            CachedTokens,
            AsIs,
            GENAI,
        ),
        map(
            "gen_ai.usage.cache_read_input_tokens",
            CachedTokens,
            AsIs,
            GENAI_OLD,
        ),
        map(
            "llm.token_count.prompt_details.cache_read",
            CachedTokens,
            AsIs,
            OPENINF,
        ),
        map(
            "llm.usage.cache_read_input_tokens",
            CachedTokens,
            AsIs,
            OPENLLM,
        ),
        map("gen_ai.response.finish_reasons", FinishReason, AsIs, GENAI),
        map(
            "gen_ai.response.finish_reason",
            FinishReason,
            AsIs,
            GENAI_OLD,
        ),
        map("llm.response.finish_reason", FinishReason, AsIs, OPENLLM),
        map("gen_ai.request.id", RequestId, AsIs, VLLM),
        map("gen_ai.response.id", RequestId, AsIs, GENAI),
        map("request.id", RequestId, AsIs, OURS),
        map("gen_ai.latency.time_in_queue", QueueMs, SecondsToMs, VLLM),
        map(
            "gen_ai.latency.time_to_first_token",
            TtftMs,
            SecondsToMs,
            VLLM,
        ),
        map("gen_ai.latency.e2e", E2eMs, SecondsToMs, VLLM),
        map(
            "gen_ai.latency.time_in_model_prefill",
            PrefillMs,
            SecondsToMs,
            VLLM,
        ),
        map(
            "gen_ai.latency.time_in_model_decode",
            DecodeMs,
            SecondsToMs,
            VLLM,
        ),
        map(
            "gen_ai.latency.time_per_output_token",
            TpotMs,
            SecondsToMs,
            VLLM,
        ),
        map(
            "gen_ai.server.time_to_first_token",
            TtftMs,
            SecondsToMs,
            GENAI,
        ),
        map(
            "gen_ai.server.time_per_output_token",
            TpotMs,
            SecondsToMs,
            GENAI,
        ),
        map("gen_ai.request.temperature", Temperature, AsIs, GENAI),
        map("llm.request.temperature", Temperature, AsIs, OPENLLM),
        map("gen_ai.request.top_p", TopP, AsIs, GENAI),
        map("llm.top_p", TopP, AsIs, OPENLLM),
        map("gen_ai.request.max_tokens", MaxTokens, AsIs, GENAI),
        map("llm.request.max_tokens", MaxTokens, AsIs, OPENLLM),
        map("gen_ai.provider.name", Runtime, AsIs, GENAI),
        map("gen_ai.system", Runtime, AsIs, GENAI_OLD),
        map("llm.provider", Runtime, AsIs, OPENINF),
        map("llm.system", Runtime, AsIs, OPENINF),
        map("serving.runtime", Runtime, AsIs, OURS),
        map("tenant", Tenant, AsIs, OURS),
        map("tenant.id", Tenant, AsIs, OURS),
        map("enduser.tenant", Tenant, AsIs, OTEL),
        map("session.id", SessionId, AsIs, OPENINF),
        map("gen_ai.conversation.id", SessionId, AsIs, GENAI),
        map("worker", Worker, AsIs, OURS),
        map("serving.worker", Worker, AsIs, OURS),
        map("k8s.pod.name", Worker, AsIs, OTEL),
        map("service.instance.id", Worker, AsIs, OTEL),
        map("host.name", Worker, AsIs, OTEL),
        map("serving.device", Device, AsIs, OURS),
        map("gpu.id", Device, AsIs, OURS),
        map("host.gpu.model", Device, AsIs, OTEL),
        map("llm.lora.adapters", LoraAdapters, AsIs, OURS),
        map("serving.lora.adapters", LoraAdapters, AsIs, OURS),
        map("gen_ai.request.lora_adapter", LoraAdapters, AsIs, OURS),
        map("serving.kv_cache.policy", KvCachePolicy, AsIs, OURS),
        map("llm.kv_cache.policy", KvCachePolicy, AsIs, OURS),
        map("serving.batch.size", BatchSize, AsIs, OURS),
        map("llm.batch_size", BatchSize, AsIs, OURS),
        map(
            "serving.spec_decode.draft_tokens",
            SpecDraftTokens,
            AsIs,
            OURS,
        ),
        map(
            "serving.spec_decode.accepted_tokens",
            SpecAcceptedTokens,
            AsIs,
            OURS,
        ),
        map("error.type", ErrorType, AsIs, OTEL),
        map("serving.prompt_hash", PromptHash, AsIs, OURS),
        map("service.name", Service, AsIs, OTEL),
    ]
};

/// Resolved lookup from attribute key to (column, unit, priority), with user aliases appended
/// after the built-in rows (so a built-in name wins when both are present).
#[derive(Debug, Clone)]
pub struct AttributeMapper {
    /// foldhash: looked up for every attribute of every span, where SipHash showed in profiles.
    by_key: HashMap<String, (RequestColumn, Unit, usize), foldhash::fast::FixedState>,
}

impl Default for AttributeMapper {
    fn default() -> Self {
        Self::new(&[])
    }
}

impl AttributeMapper {
    /// `aliases` are (attribute key, canonical column name) pairs from configuration, e.g.
    /// `("acme.lora_set", "lora_adapters")`. Unknown column names are reported by `validate`.
    pub fn new(aliases: &[(String, RequestColumn)]) -> Self {
        let mut by_key = HashMap::with_hasher(foldhash::fast::FixedState::default());
        for (priority, row) in REQUEST_ATTRIBUTES.iter().enumerate() {
            by_key.insert(row.key.to_string(), (row.column, row.unit, priority));
        }
        for (offset, (key, column)) in aliases.iter().enumerate() {
            by_key.entry(key.clone()).or_insert((
                *column,
                Unit::AsIs,
                REQUEST_ATTRIBUTES.len() + offset,
            ));
        }
        Self { by_key }
    }

    pub fn lookup(&self, key: &str) -> Option<(RequestColumn, Unit, usize)> {
        self.by_key.get(key).copied()
    }
}

/// Last segments of an attribute name that say its values are versions, builds or revisions.
const VERSION_NAME_SEGMENTS: &[&str] =
    &["version", "ver", "v", "build", "revision", "rev", "release"];

/// True when a key or a word says the value after it is a version, build or revision, by its
/// last segment (`version`, `service.version`, `vllm_version`, `appVersion`, `build`, `git.rev`,
/// `release`, `v`): the redactor keeps dotted versions under such names.
pub fn names_a_version(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let last = lower.rsplit(['_', '.', '-']).next().unwrap_or(&lower);
    VERSION_NAME_SEGMENTS.contains(&last) || lower.ends_with("version")
}

/// Segments of a version's name that say it is the version of a wire protocol, an SDK or an
/// interface, not of what was deployed (`network.protocol.version`, `telemetry.sdk.version`,
/// `tls.protocol.version`, `api_version`). An instrumentation scope's version stays a deployed
/// one: an engine's spans carry its own build there (`otel.scope.version` of vLLM's tracer).
const NOT_DEPLOYED_SEGMENTS: &[&str] = &[
    "protocol",
    "sdk",
    "telemetry",
    "schema",
    "api",
    "tls",
    "http",
    "flavor",
];

/// True when a dimension names the version, build or revision of what serves a request, so a
/// regression confined to one of its values is a version regression: the canonical
/// `model_version`, every name the table maps onto it, and any other name [`names_a_version`]
/// accepts (`service.version`, `model.revision`, `acme.engine_build`, `appVersion`) except a
/// release's name (`release`, `helm.release`), a bare `v`, and the versions of protocols, SDKs
/// and interfaces ([`NOT_DEPLOYED_SEGMENTS`]).
pub fn names_a_deployed_version(name: &str) -> bool {
    if name == RequestColumn::ModelVersion.column_name()
        || REQUEST_ATTRIBUTES
            .iter()
            .any(|row| row.key == name && row.column == RequestColumn::ModelVersion)
    {
        return true;
    }
    let lower = name.to_ascii_lowercase();
    let segments: Vec<&str> = lower.split(['_', '.', '-', '/']).collect();
    let last = segments.last().copied().unwrap_or_default();
    names_a_version(name)
        && !matches!(last, "release" | "v")
        && !segments[..segments.len().saturating_sub(1)]
            .iter()
            .any(|s| NOT_DEPLOYED_SEGMENTS.contains(s))
}

/// One row of the metric-name mapping: engine or exporter name → canonical name, with a scale
/// that converts the source unit into the unit the canonical name states.
#[derive(Debug, Clone, Copy)]
pub struct MetricMapping {
    pub source: &'static str,
    pub canonical: &'static str,
    pub scale: f64,
    pub engine: &'static str,
}

const fn metric(
    source: &'static str,
    canonical: &'static str,
    scale: f64,
    engine: &'static str,
) -> MetricMapping {
    MetricMapping {
        source,
        canonical,
        scale,
        engine,
    }
}

/// Engine metric names (vLLM old and new, SGLang, TGI, Triton) and device metric names (DCGM,
/// OTel `hw.*`, nvidia-smi exporters) → canonical metric names. GPU memory has four canonical
/// names whatever the source: used, free and total bytes and the used fraction of capacity
/// (`gpu_memory_usage_ratio`); [`GpuMemory`] says how the fraction follows from what a source
/// reports.
pub static METRIC_NAMES: &[MetricMapping] = &[
    metric(
        "vllm:time_to_first_token_seconds",
        "ttft_seconds",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:inter_token_latency_seconds",
        "itl_seconds",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:time_per_output_token_seconds",
        "itl_seconds",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:e2e_request_latency_seconds",
        "e2e_seconds",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:request_queue_time_seconds",
        "queue_seconds",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:request_prefill_time_seconds",
        "prefill_seconds",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:request_decode_time_seconds",
        "decode_seconds",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:kv_cache_usage_perc",
        "kv_cache_usage_ratio",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:gpu_cache_usage_perc",
        "kv_cache_usage_ratio",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:cpu_cache_usage_perc",
        "cpu_kv_cache_usage_ratio",
        1.0,
        "vllm",
    ),
    metric("vllm:num_requests_running", "requests_running", 1.0, "vllm"),
    metric("vllm:num_requests_waiting", "requests_waiting", 1.0, "vllm"),
    metric("vllm:num_requests_swapped", "requests_swapped", 1.0, "vllm"),
    metric(
        "vllm:num_preemptions_total",
        "preemptions_total",
        1.0,
        "vllm",
    ),
    metric("vllm:num_preemptions", "preemptions_total", 1.0, "vllm"),
    metric(
        "vllm:prompt_tokens_total",
        "prompt_tokens_total",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:generation_tokens_total",
        "generation_tokens_total",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:request_success_total",
        "requests_finished_total",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:prefix_cache_queries_total",
        "prefix_cache_queries_total",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:prefix_cache_hits_total",
        "prefix_cache_hits_total",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:gpu_prefix_cache_hit_rate",
        "prefix_cache_hit_ratio",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:spec_decode_num_draft_tokens_total",
        "spec_draft_tokens_total",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:spec_decode_num_accepted_tokens_total",
        "spec_accepted_tokens_total",
        1.0,
        "vllm",
    ),
    metric(
        "vllm:iteration_tokens_total",
        "iteration_tokens",
        1.0,
        "vllm",
    ),
    metric(
        "sglang:time_to_first_token_seconds",
        "ttft_seconds",
        1.0,
        "sglang",
    ),
    metric(
        "sglang:inter_token_latency_seconds",
        "itl_seconds",
        1.0,
        "sglang",
    ),
    metric(
        "sglang:time_per_output_token_seconds",
        "itl_seconds",
        1.0,
        "sglang",
    ),
    metric(
        "sglang:e2e_request_latency_seconds",
        "e2e_seconds",
        1.0,
        "sglang",
    ),
    metric("sglang:queue_time_seconds", "queue_seconds", 1.0, "sglang"),
    metric("sglang:token_usage", "kv_cache_usage_ratio", 1.0, "sglang"),
    metric("sglang:num_running_reqs", "requests_running", 1.0, "sglang"),
    metric("sglang:num_queue_reqs", "requests_waiting", 1.0, "sglang"),
    metric(
        "sglang:cache_hit_rate",
        "prefix_cache_hit_ratio",
        1.0,
        "sglang",
    ),
    metric(
        "sglang:prompt_tokens_total",
        "prompt_tokens_total",
        1.0,
        "sglang",
    ),
    metric(
        "sglang:generation_tokens_total",
        "generation_tokens_total",
        1.0,
        "sglang",
    ),
    metric(
        "sglang:spec_accept_length",
        "spec_accept_length",
        1.0,
        "sglang",
    ),
    metric("tgi_request_duration", "e2e_seconds", 1.0, "tgi"),
    metric("tgi_request_queue_duration", "queue_seconds", 1.0, "tgi"),
    metric(
        "tgi_request_mean_time_per_token_duration",
        "itl_seconds",
        1.0,
        "tgi",
    ),
    metric("tgi_batch_current_size", "requests_running", 1.0, "tgi"),
    metric("tgi_queue_size", "requests_waiting", 1.0, "tgi"),
    metric(
        "tgi_request_input_length",
        "request_input_tokens",
        1.0,
        "tgi",
    ),
    metric(
        "tgi_request_generated_tokens",
        "request_output_tokens",
        1.0,
        "tgi",
    ),
    metric(
        "nv_inference_request_success",
        "requests_finished_total",
        1.0,
        "triton",
    ),
    metric(
        "nv_inference_request_failure",
        "requests_failed_total",
        1.0,
        "triton",
    ),
    metric(
        "nv_inference_queue_duration_us",
        "queue_seconds_total",
        1e-6,
        "triton",
    ),
    metric(
        "nv_inference_compute_infer_duration_us",
        "compute_seconds_total",
        1e-6,
        "triton",
    ),
    metric(
        "nv_inference_request_duration_us",
        "e2e_seconds_total",
        1e-6,
        "triton",
    ),
    metric(
        "nv_inference_pending_request_count",
        "requests_waiting",
        1.0,
        "triton",
    ),
    metric(
        "DCGM_FI_DEV_FB_USED",
        "gpu_memory_used_bytes",
        1_048_576.0,
        "dcgm",
    ),
    metric(
        "DCGM_FI_DEV_FB_FREE",
        "gpu_memory_free_bytes",
        1_048_576.0,
        "dcgm",
    ),
    metric(
        "DCGM_FI_DEV_FB_TOTAL",
        "gpu_memory_total_bytes",
        1_048_576.0,
        "dcgm",
    ),
    metric(
        "DCGM_FI_DEV_GPU_UTIL",
        "gpu_utilization_ratio",
        0.01,
        "dcgm",
    ),
    metric(
        "DCGM_FI_DEV_GPU_TEMP",
        "gpu_temperature_celsius",
        1.0,
        "dcgm",
    ),
    metric("DCGM_FI_DEV_POWER_USAGE", "gpu_power_watts", 1.0, "dcgm"),
    metric("DCGM_FI_DEV_SM_CLOCK", "gpu_sm_clock_hertz", 1e6, "dcgm"),
    // OTel hardware semantic conventions (`hw.*`, the device in the `hw.id` point attribute,
    // the worker in the resource), as exported over OTLP and as an OTel Collector Prometheus
    // exporter names them (dots to underscores, the unit appended).
    metric("hw.gpu.memory.usage", "gpu_memory_used_bytes", 1.0, HW),
    metric(
        "hw_gpu_memory_usage_bytes",
        "gpu_memory_used_bytes",
        1.0,
        HW,
    ),
    metric("hw.gpu.memory.limit", "gpu_memory_total_bytes", 1.0, HW),
    metric(
        "hw_gpu_memory_limit_bytes",
        "gpu_memory_total_bytes",
        1.0,
        HW,
    ),
    metric(
        "hw.gpu.memory.utilization",
        "gpu_memory_usage_ratio",
        1.0,
        HW,
    ),
    metric(
        "hw_gpu_memory_utilization_ratio",
        "gpu_memory_usage_ratio",
        1.0,
        HW,
    ),
    metric("hw.gpu.utilization", "gpu_utilization_ratio", 1.0, HW),
    metric("hw_gpu_utilization_ratio", "gpu_utilization_ratio", 1.0, HW),
    metric("hw.errors", "hw_errors_total", 1.0, HW),
    metric("hw_errors_total", "hw_errors_total", 1.0, HW),
    metric("hw.power", "hw_power_watts", 1.0, HW),
    metric("hw_power_watts", "hw_power_watts", 1.0, HW),
    metric("hw.energy", "hw_energy_joules_total", 1.0, HW),
    metric("hw_energy_joules_total", "hw_energy_joules_total", 1.0, HW),
    metric("hw.temperature", "hw_temperature_celsius", 1.0, HW),
    metric("hw_temperature_celsius", "hw_temperature_celsius", 1.0, HW),
    // GPU collectors that extend the `hw.gpu.*` namespace (OpenLIT's, for one).
    metric("hw.gpu.memory.free", "gpu_memory_free_bytes", 1.0, HW),
    metric("hw.gpu.temperature", "gpu_temperature_celsius", 1.0, HW),
    metric("hw.gpu.power.draw", "gpu_power_watts", 1.0, HW),
    metric("hw.gpu.clock.graphics", "gpu_sm_clock_hertz", 1e6, HW),
    // nvidia-smi exporters: utkuozdemir/nvidia_gpu_exporter (bytes, ratios) and the NVML
    // exporters (`nvidia_gpu_*`: bytes, MB, duty cycle in percent).
    metric(
        "nvidia_smi_memory_used_bytes",
        "gpu_memory_used_bytes",
        1.0,
        NVSMI,
    ),
    metric(
        "nvidia_smi_memory_free_bytes",
        "gpu_memory_free_bytes",
        1.0,
        NVSMI,
    ),
    metric(
        "nvidia_smi_memory_total_bytes",
        "gpu_memory_total_bytes",
        1.0,
        NVSMI,
    ),
    metric(
        "nvidia_smi_utilization_gpu_ratio",
        "gpu_utilization_ratio",
        1.0,
        NVSMI,
    ),
    metric(
        "nvidia_smi_temperature_gpu",
        "gpu_temperature_celsius",
        1.0,
        NVSMI,
    ),
    metric("nvidia_smi_power_draw_watts", "gpu_power_watts", 1.0, NVSMI),
    metric(
        "nvidia_gpu_memory_used_bytes",
        "gpu_memory_used_bytes",
        1.0,
        NVSMI,
    ),
    metric(
        "nvidia_gpu_memory_total_bytes",
        "gpu_memory_total_bytes",
        1.0,
        NVSMI,
    ),
    metric(
        "nvidia_gpu_memory_used_mb",
        "gpu_memory_used_bytes",
        1_048_576.0,
        NVSMI,
    ),
    metric(
        "nvidia_gpu_memory_total_mb",
        "gpu_memory_total_bytes",
        1_048_576.0,
        NVSMI,
    ),
    metric(
        "nvidia_gpu_duty_cycle",
        "gpu_utilization_ratio",
        0.01,
        NVSMI,
    ),
];

const HW: &str = "otel-hw";
const NVSMI: &str = "nvidia-smi";

/// One device's GPU memory at one time, in canonical units (bytes, a fraction), as far as its
/// sources report it: DCGM reports used and free, nvidia-smi used, free and total, the OTel
/// hardware conventions usage and limit (and perhaps the used fraction).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuMemory {
    pub used_bytes: Option<f64>,
    pub free_bytes: Option<f64>,
    pub total_bytes: Option<f64>,
    /// `gpu_memory_usage_ratio`: the used fraction of capacity, 0..=1.
    pub usage_ratio: Option<f64>,
}

impl GpuMemory {
    /// Canonical names of the four series, in the order of the fields.
    pub const NAMES: [&'static str; 4] = [
        "gpu_memory_used_bytes",
        "gpu_memory_free_bytes",
        "gpu_memory_total_bytes",
        "gpu_memory_usage_ratio",
    ];

    /// The used fraction of capacity: used / total, else used / (used + free), else the
    /// reported ratio (a percentage above 1 is read as percent). Memory is judged as this
    /// fraction wherever capacity is known, so that sources in bytes, MiB or ratios agree and a
    /// leak is measured against the room the device has.
    pub fn fraction(&self) -> Option<f64> {
        let positive = |v: Option<f64>| v.filter(|v| v.is_finite() && *v >= 0.0);
        let used = positive(self.used_bytes);
        let from_total = used
            .zip(positive(self.total_bytes).filter(|t| *t > 0.0))
            .map(|(u, t)| u / t);
        let from_free = || {
            used.zip(positive(self.free_bytes))
                .filter(|(u, f)| u + f > 0.0)
                .map(|(u, f)| u / (u + f))
        };
        let reported = || positive(self.usage_ratio).map(|r| if r > 1.0 { r / 100.0 } else { r });
        from_total
            .or_else(from_free)
            .or_else(reported)
            .map(|f| f.clamp(0.0, 1.0))
    }
}

/// Maps an engine metric name to its canonical name. Histogram and summary series suffixes
/// (`_bucket`, `_sum`, `_count`, `_created`) are stripped before the lookup and kept on the result.
pub fn canonical_metric(name: &str) -> Option<(&'static MetricMapping, &str)> {
    static INDEX: std::sync::OnceLock<HashMap<&'static str, &'static MetricMapping>> =
        std::sync::OnceLock::new();
    let index = INDEX.get_or_init(|| METRIC_NAMES.iter().map(|m| (m.source, m)).collect());
    if let Some(m) = index.get(name) {
        return Some((m, ""));
    }
    for suffix in ["_bucket", "_sum", "_count", "_created", "_total"] {
        if let Some(stem) = name.strip_suffix(suffix)
            && let Some(m) = index.get(stem)
        {
            return Some((m, suffix));
        }
    }
    None
}

/// Markdown rendering of both tables for the README and `infersight mapping`.
pub fn mapping_markdown() -> String {
    let mut out = String::from("| attribute | column | unit | convention |\n|---|---|---|---|\n");
    for row in REQUEST_ATTRIBUTES {
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} |\n",
            row.key,
            row.column.column_name(),
            row.unit.describe(),
            row.convention
        ));
    }
    out.push_str("\n| metric | canonical name | scale | engine |\n|---|---|---|---|\n");
    for row in METRIC_NAMES {
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} |\n",
            row.source, row.canonical, row.scale, row.engine
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_versions_are_told_apart_from_other_names() {
        for name in [
            "model_version",
            "service.version",
            "model.revision",
            "vllm_version",
            "appVersion",
            "acme.engine_build",
            "git.rev",
            "k8s.deployment.revision",
            "process.runtime.version",
            "otel.scope.version",
        ] {
            assert!(names_a_version(name), "{name}");
            assert!(names_a_deployed_version(name), "{name}");
        }
        // every name the table maps onto the model version column
        for row in REQUEST_ATTRIBUTES
            .iter()
            .filter(|r| r.column == RequestColumn::ModelVersion)
        {
            assert!(names_a_deployed_version(row.key), "{}", row.key);
        }
        // versions, but not of what was deployed: no version regression is read off them
        for name in [
            "network.protocol.version",
            "tls.protocol.version",
            "telemetry.sdk.version",
            "api_version",
            "helm.release",
            "RELEASE",
            "v",
        ] {
            assert!(names_a_version(name), "{name}");
            assert!(!names_a_deployed_version(name), "{name}");
        }
        for name in [
            "worker",
            "tenant",
            "k8s.deployment.name",
            "acme.pool",
            "reverse_proxy",
            "builder.host",
            "versions_seen.count",
            "lora_adapters",
        ] {
            assert!(!names_a_version(name), "{name}");
            assert!(!names_a_deployed_version(name), "{name}");
        }
    }

    #[test]
    fn every_key_appears_once() {
        let mut seen = std::collections::HashSet::new();
        for row in REQUEST_ATTRIBUTES {
            assert!(seen.insert(row.key), "duplicate mapping for {}", row.key);
        }
        let mut seen = std::collections::HashSet::new();
        for row in METRIC_NAMES {
            assert!(
                seen.insert(row.source),
                "duplicate metric mapping for {}",
                row.source
            );
        }
    }

    #[test]
    fn all_request_columns_are_in_declaration_order() {
        // normalization indexes a per-column array by `column as usize`
        for (index, column) in ALL_REQUEST_COLUMNS.into_iter().enumerate() {
            assert_eq!(column as usize, index, "{column:?}");
        }
    }

    #[test]
    fn column_names_round_trip() {
        for column in ALL_REQUEST_COLUMNS {
            assert_eq!(
                RequestColumn::from_column_name(column.column_name()),
                Some(column)
            );
            assert!(crate::RequestRecord::COLUMNS.contains(&column.column_name()));
        }
    }

    #[test]
    fn metric_names_map_old_and_new_vllm_names_and_suffixes() {
        let (new, _) = canonical_metric("vllm:kv_cache_usage_perc").unwrap();
        let (old, _) = canonical_metric("vllm:gpu_cache_usage_perc").unwrap();
        assert_eq!(new.canonical, old.canonical);
        let (m, suffix) = canonical_metric("vllm:time_to_first_token_seconds_bucket").unwrap();
        assert_eq!((m.canonical, suffix), ("ttft_seconds", "_bucket"));
        assert!(canonical_metric("my_app_requests").is_none());
    }

    #[test]
    fn device_metric_conventions_map_to_one_set_of_gpu_names() {
        // the OTel hardware conventions over OTLP and through a Prometheus exporter, DCGM and
        // nvidia-smi exporters: each memory and utilization source lands on a canonical name
        let expected = [
            ("hw.gpu.memory.usage", "gpu_memory_used_bytes", 1.0),
            ("hw_gpu_memory_usage_bytes", "gpu_memory_used_bytes", 1.0),
            ("hw.gpu.memory.limit", "gpu_memory_total_bytes", 1.0),
            ("hw.gpu.memory.utilization", "gpu_memory_usage_ratio", 1.0),
            ("hw.gpu.utilization", "gpu_utilization_ratio", 1.0),
            ("hw_gpu_utilization_ratio", "gpu_utilization_ratio", 1.0),
            ("hw.errors", "hw_errors_total", 1.0),
            ("hw.power", "hw_power_watts", 1.0),
            ("hw.temperature", "hw_temperature_celsius", 1.0),
            ("DCGM_FI_DEV_FB_USED", "gpu_memory_used_bytes", 1_048_576.0),
            ("DCGM_FI_DEV_FB_FREE", "gpu_memory_free_bytes", 1_048_576.0),
            (
                "nvidia_smi_memory_total_bytes",
                "gpu_memory_total_bytes",
                1.0,
            ),
            (
                "nvidia_gpu_memory_used_mb",
                "gpu_memory_used_bytes",
                1_048_576.0,
            ),
            ("nvidia_gpu_duty_cycle", "gpu_utilization_ratio", 0.01),
        ];
        for (source, canonical, scale) in expected {
            let (m, suffix) = canonical_metric(source).unwrap();
            assert_eq!(
                (m.canonical, m.scale, suffix),
                (canonical, scale, ""),
                "{source}"
            );
        }
        for name in GpuMemory::NAMES {
            assert!(
                METRIC_NAMES.iter().any(|m| m.canonical == name),
                "{name} has no source"
            );
        }
    }

    #[test]
    fn gpu_memory_fraction_from_any_pair_of_sources() {
        let gib = 1_073_741_824.0;
        let of = |used, free, total, ratio| {
            GpuMemory {
                used_bytes: used,
                free_bytes: free,
                total_bytes: total,
                usage_ratio: ratio,
            }
            .fraction()
        };
        let close = |got: Option<f64>, want: f64| {
            assert!(
                got.is_some_and(|g| (g - want).abs() < 1e-9),
                "{got:?} vs {want}"
            )
        };
        close(of(Some(20.0 * gib), None, Some(80.0 * gib), None), 0.25);
        close(of(Some(20.0 * gib), Some(60.0 * gib), None, None), 0.25);
        // total wins over free, free over a reported ratio
        close(
            of(Some(20.0 * gib), Some(0.0), Some(80.0 * gib), Some(0.9)),
            0.25,
        );
        close(
            of(Some(20.0 * gib), Some(60.0 * gib), None, Some(0.9)),
            0.25,
        );
        close(of(None, None, None, Some(0.4)), 0.4);
        close(of(None, None, None, Some(40.0)), 0.4);
        // used bytes alone, a zero capacity or nothing: no fraction
        assert_eq!(of(Some(gib), None, None, None), None);
        assert_eq!(of(Some(0.0), Some(0.0), Some(0.0), None), None);
        assert_eq!(of(None, Some(gib), Some(gib), None), None);
        assert_eq!(of(Some(f64::NAN), None, Some(gib), None), None);
    }

    #[test]
    fn aliases_do_not_override_builtin_names() {
        let mapper = AttributeMapper::new(&[
            ("acme.lora".to_string(), RequestColumn::LoraAdapters),
            ("gen_ai.request.model".to_string(), RequestColumn::Tenant),
        ]);
        assert_eq!(
            mapper.lookup("acme.lora").unwrap().0,
            RequestColumn::LoraAdapters
        );
        assert_eq!(
            mapper.lookup("gen_ai.request.model").unwrap().0,
            RequestColumn::Model
        );
    }
}
