//! The conventions a run writes in, resolved once from its variations: attribute names (dialect,
//! dimension names, the tenant key), where per-worker dimensions live (span or resource), the
//! model revision a worker reports (a rollout), the GPU metric family, head sampling, process
//! tags on raw lines, the shift of simulated time; and the ground truth restated in those names.

use std::collections::BTreeMap;

use crate::config::DimensionNames;
use crate::fleet::WorkerSpec;
use crate::scenario::GroundTruth;

use super::Variation;

/// The revision a rollout replaces, and the build that replaces it from the incident on.
pub const ROLLED_OUT_VERSION: &str = "r2";
pub const ROLLOUT_VERSION: &str = "r3";

/// Head-sampling probability of `head_sampling`.
pub const HEAD_SAMPLING_PROBABILITY: f64 = 0.1;

/// 365 days, the shift of `past_year`.
const YEAR_NS: i64 = 365 * 86_400 * 1_000_000_000;

/// A team's own names (in no mapping table) for the dimensions of `custom_names`.
const CUSTOM_TENANT: &str = "customer.org";
const CUSTOM_MODEL_VERSION: &str = "model.revision";
const CUSTOM_LORA: &str = "adapter.set";
const CUSTOM_KV_POLICY: &str = "engine.kv_layout";

/// Which GPU metrics a worker exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuMetrics {
    /// NVIDIA DCGM exporter (`DCGM_FI_DEV_*`).
    Dcgm,
    /// OTel hardware semantic conventions (`hw.gpu.*`, `hw.temperature`).
    Hw,
}

/// The vLLM process that writes a raw line (vLLM ≥ 0.10 tags each line with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessTag {
    /// The OpenAI-compatible server: request logging, uvicorn access lines, stats loggers.
    ApiServer,
    /// The engine core: scheduler, model runner, LoRA manager, samplers.
    EngineCore,
}

/// The attribute dialect of an engine span under `openinference`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlmDialect {
    OpenInference,
    OpenLlmetry,
}

/// How a run names and lays out its telemetry (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub struct Conventions {
    variations: Vec<Variation>,
    /// Names of the dimension attributes, after the variations' renames (explicit
    /// `--dimension` overrides win over a variation's names).
    pub dims: DimensionNames,
    /// The tenant's attribute on engine spans.
    pub tenant_key: &'static str,
}

impl Conventions {
    pub fn new(variations: &[Variation], configured: &DimensionNames) -> Self {
        let mut variations = variations.to_vec();
        variations.sort();
        variations.dedup();
        let has = |v| variations.contains(&v);
        let defaults = DimensionNames::default();
        let mut dims = configured.clone();
        let mut rename = |slot: fn(&mut DimensionNames) -> &mut String, name: &str| {
            let default = slot(&mut defaults.clone()).clone();
            let current = slot(&mut dims);
            if *current == default {
                *current = name.to_string();
            }
        };
        let tenant_key = if has(Variation::CustomNames) {
            rename(|d| &mut d.model_version, CUSTOM_MODEL_VERSION);
            rename(|d| &mut d.lora_adapters, CUSTOM_LORA);
            rename(|d| &mut d.kv_cache_policy, CUSTOM_KV_POLICY);
            CUSTOM_TENANT
        } else if has(Variation::Openinference) {
            rename(|d| &mut d.model_version, "model.version");
            rename(|d| &mut d.lora_adapters, "serving.lora.adapters");
            rename(|d| &mut d.kv_cache_policy, "llm.kv_cache.policy");
            rename(|d| &mut d.batch_size, "llm.batch_size");
            "tenant.id"
        } else {
            "tenant"
        };
        Self {
            variations,
            dims,
            tenant_key,
        }
    }

    pub fn has(&self, variation: Variation) -> bool {
        self.variations.contains(&variation)
    }

    pub fn variations(&self) -> &[Variation] {
        &self.variations
    }

    /// The `llm.*` dialect of `worker`'s engine spans under `openinference` (alternating in
    /// groups of four workers, like the GenAI dialects), else `None` (GenAI names).
    pub fn llm_dialect(&self, worker: &WorkerSpec) -> Option<LlmDialect> {
        if !self.has(Variation::Openinference) {
            return None;
        }
        Some(if (worker.index / 4).is_multiple_of(2) {
            LlmDialect::OpenInference
        } else {
            LlmDialect::OpenLlmetry
        })
    }

    /// Per-worker dimensions (model revision, KV policy) go on the resource, not the span.
    pub fn dims_on_resource(&self) -> bool {
        self.has(Variation::ResourceDims)
    }

    /// `cloud.region` of `worker`, when the run tells regions.
    pub fn region<'a>(&self, worker: &'a WorkerSpec) -> Option<&'a str> {
        (self.has(Variation::ResourceDims) || self.has(Variation::OneRegion))
            .then_some(worker.region)
    }

    /// The model revision `worker` reports at a time `after_incident_start` or not: under
    /// `rollout` the rolled-out revision's workers report the new build from the incident on.
    pub fn model_version(&self, worker: &WorkerSpec, after_incident_start: bool) -> &'static str {
        if self.has(Variation::Rollout)
            && after_incident_start
            && worker.model_version == ROLLED_OUT_VERSION
        {
            ROLLOUT_VERSION
        } else {
            worker.model_version
        }
    }

    pub fn gpu_metrics(&self) -> GpuMetrics {
        if self.has(Variation::HwMetrics) {
            GpuMetrics::Hw
        } else {
            GpuMetrics::Dcgm
        }
    }

    pub fn gateway_genai(&self) -> bool {
        self.has(Variation::GatewayGenai)
    }

    /// The head-sampling rejection threshold (56 bits) and its `tracestate` entry, if traces
    /// are sampled.
    pub fn sampling(&self) -> Option<(u64, String)> {
        self.has(Variation::HeadSampling)
            .then(|| sampling_threshold(HEAD_SAMPLING_PROBABILITY))
    }

    /// The process-tag prefix of a raw line `process` writes on `worker` (vLLM V1 only).
    pub fn process_tag(&self, worker: &WorkerSpec, process: ProcessTag) -> Option<String> {
        if !(self.has(Variation::ProcessTags) && worker.vllm_v1) {
            return None;
        }
        let api_pid = 1_000 + 37 * worker.index as u64;
        Some(match process {
            ProcessTag::ApiServer => format!("(APIServer pid={api_pid}) "),
            ProcessTag::EngineCore => format!("(EngineCore_0 pid={}) ", api_pid + 214),
        })
    }

    /// How far simulated time moves (ns, negative = earlier).
    pub fn start_shift_ns(&self) -> i64 {
        if self.has(Variation::PastYear) {
            -YEAR_NS
        } else {
            0
        }
    }

    /// Restates the ground truth in the names and values the data carries: the rollout's build
    /// for the revision it replaced, and the attribute names of renamed dimensions.
    pub fn restate(&self, truth: &mut GroundTruth) {
        truth.variations = self.variations.clone();
        truth.dimension_attributes = self.dims.clone();
        let restate = |dims: &mut BTreeMap<String, String>| *dims = self.restate_dims(dims);
        for cause in &mut truth.root_causes {
            let mut equivalent = std::mem::take(&mut cause.equivalent);
            equivalent.extend(self.equivalents(&cause.dimensions));
            cause.equivalent = equivalent.iter().map(|d| self.restate_dims(d)).collect();
            restate(&mut cause.dimensions);
        }
        for signal in &mut truth.expected_signals {
            restate(&mut signal.subject);
        }
    }

    /// Combinations (canonical names) that select the same requests as `dims` because the
    /// resource tells one setting by several attributes: `k8s.deployment.name` for a model and
    /// its revision, `host.name` for a pod.
    fn equivalents(&self, dims: &BTreeMap<String, String>) -> Vec<BTreeMap<String, String>> {
        if !self.dims_on_resource() {
            return Vec::new();
        }
        let mut out = Vec::new();
        if let (Some(model), Some(version)) = (dims.get("model"), dims.get("model_version")) {
            let mut alternative = dims.clone();
            alternative.remove("model");
            alternative.remove("model_version");
            alternative.insert(
                "k8s.deployment.name".to_string(),
                deployment_name(model, self.version_value(version)),
            );
            out.push(alternative);
        }
        if let Some(pod) = dims.get("worker") {
            let mut alternative = dims.clone();
            alternative.remove("worker");
            alternative.insert("host.name".to_string(), node_name(pod));
            out.push(alternative);
        }
        out
    }

    fn restate_dims(&self, dims: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        dims.iter()
            .map(|(key, value)| {
                let value = if key == "model_version" {
                    self.version_value(value)
                } else {
                    value
                };
                (self.data_name(key), value.to_string())
            })
            .collect()
    }

    /// The revision the data reports for the ground truth's `version`: the rollout's build for
    /// the revision it replaced.
    fn version_value<'a>(&self, version: &'a str) -> &'a str {
        if self.has(Variation::Rollout) && version == ROLLED_OUT_VERSION {
            ROLLOUT_VERSION
        } else {
            version
        }
    }

    /// The attribute name the data carries for a canonical dimension of the ground truth, when a
    /// variation renames or moves it; else the canonical name.
    fn data_name(&self, key: &str) -> String {
        let renamed = self.has(Variation::Openinference) || self.has(Variation::CustomNames);
        let on_resource = self.dims_on_resource();
        let name = match key {
            "model_version" if on_resource => "service.version",
            "worker" if on_resource => "k8s.pod.name",
            "model_version" if renamed => &self.dims.model_version,
            "kv_cache_policy" if renamed || on_resource => &self.dims.kv_cache_policy,
            "lora_adapters" if renamed => &self.dims.lora_adapters,
            "tenant" if renamed => self.tenant_key,
            other => other,
        };
        name.to_string()
    }
}

/// The Kubernetes deployment of a model revision (`resource_dims`).
pub fn deployment_name(model: &str, version: &str) -> String {
    format!("{model}-{version}")
}

/// The node a pod runs on (`resource_dims`; one pod per node).
pub fn node_name(pod: &str) -> String {
    format!("node-{pod}")
}

/// OTel consistent probability sampling: the rejection threshold `T = (1 − p) · 2⁵⁶` (a trace
/// is kept when the 56 low bits of its id are ≥ T) and its `tracestate` entry `ot=th:<hex>`
/// (14 hex digits, trailing zeros removed).
pub fn sampling_threshold(probability: f64) -> (u64, String) {
    let full = 1u64 << 56;
    // p · 2⁵⁶ < 2⁵³ for p < ⅛ is exact in f64; larger p lose nothing that matters here.
    let kept = (probability.clamp(0.0, 1.0) * full as f64).round() as u64;
    let threshold = full.saturating_sub(kept).min(full - 1);
    let hex = format!("{threshold:014x}");
    let trimmed = hex.trim_end_matches('0');
    let th = if trimmed.is_empty() { "0" } else { trimmed };
    (threshold, format!("ot=th:{th}"))
}

/// Whether a trace with `trace_id` is kept under `threshold` (its 56 low bits are its randomness).
pub fn sampled(trace_id: &[u8], threshold: u64) -> bool {
    let mut randomness = 0u64;
    for byte in trace_id.iter().rev().take(7).rev() {
        randomness = (randomness << 8) | u64::from(*byte);
    }
    randomness >= threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_percent_threshold_is_the_published_encoding() {
        let (threshold, entry) = sampling_threshold(0.1);
        assert_eq!(entry, "ot=th:e6666666666666");
        let kept = (0u64..10_000)
            .map(crate::rng::mix64)
            .filter(|r| sampled(&r.to_be_bytes(), threshold))
            .count();
        assert!((800..1_200).contains(&kept), "{kept} of 10000 kept");
    }

    #[test]
    fn custom_names_are_in_no_mapping_and_explicit_overrides_win() {
        let configured = DimensionNames::default()
            .with_override("lora_adapters=team.lora")
            .expect("a valid override");
        let c = Conventions::new(&[Variation::CustomNames], &configured);
        assert_eq!(c.dims.lora_adapters, "team.lora");
        assert_eq!(c.dims.model_version, CUSTOM_MODEL_VERSION);
        assert_eq!(c.tenant_key, CUSTOM_TENANT);
        let plain = Conventions::new(&[], &DimensionNames::default());
        assert_eq!(plain.dims, DimensionNames::default());
        assert_eq!(plain.data_name("model_version"), "model_version");
    }
}
