//! Variations: the same fault, told in other conventions. A variation changes how the fleet's
//! telemetry is named and laid out (attribute dialects, names no mapping table knows, resource
//! attributes, a gateway span with GenAI attributes, OTel `hw.*` GPU metrics, head sampling,
//! vLLM 0.10 process tags, raw lines of another year) or where and how often the fault strikes
//! (a rollout, one pod, one region, a second fault), never what the fault is. The simulator
//! asks [`Conventions`] how to name and lay out what it writes, and the plan
//! ([`crate::scenario::Plan`]) where the fault acts; the ground truth is then stated in the
//! names the data carries ([`Conventions::restate`]), so a test compares causes by those names.
//!
//! With no variation everything is exactly as before: the same random draws, the same bytes.

use std::str::FromStr;

use serde::Serialize;

use crate::error::SimError;
use crate::rng::Rng;
use crate::scenario::kind::Scenario;

pub mod conventions;

pub use conventions::{Conventions, GpuMetrics, ProcessTag};

/// One way of changing the conventions (or the fault's reach) of a simulated fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Variation {
    /// Engine spans in the OpenInference (`llm.model_name`, `llm.token_count.*`) and
    /// OpenLLMetry (`llm.request.model`, `llm.usage.*`) dialects instead of GenAI, and the
    /// serving dimensions under other mapped names (`tenant.id`, `model.version`, ...).
    Openinference,
    /// The tenant, model version, LoRA set and KV policy under a team's own names that no
    /// mapping table knows (`customer.org`, `model.revision`, `adapter.set`, `engine.kv_layout`).
    CustomNames,
    /// Per-worker dimensions as OTel resource attributes: `service.version` (the model
    /// revision), `k8s.deployment.name`, `k8s.pod.name`, `host.name`, `cloud.region` and the KV
    /// policy, none of them on the engine span.
    ResourceDims,
    /// The gateway span carries GenAI attributes too (`gen_ai.request.model`,
    /// `gen_ai.response.id`, usage, `tenant.id`) above the engine span, as LLM gateways do.
    GatewayGenai,
    /// OTel hardware metrics (`hw.gpu.memory.usage`, `hw.gpu.memory.limit`,
    /// `hw.gpu.utilization`, `hw.temperature`, keyed by `hw.id`) instead of DCGM's.
    HwMetrics,
    /// Consistent head sampling of traces at 10 % (W3C `tracestate` `ot=th:…`); metrics, access
    /// records and engine logs stay complete.
    HeadSampling,
    /// vLLM ≥ 0.10 process tags on raw engine lines: `(APIServer pid=N) INFO 11-29 ...`,
    /// `(EngineCore_0 pid=M) WARNING ...`.
    ProcessTags,
    /// Simulated time one year (365 days) earlier: raw vLLM lines, which carry no year, are
    /// not of the current one.
    PastYear,
    /// A new build of the model (`r3`) replaces `r2` on half the fleet at the incident's
    /// start: a dimension value that exists only from the incident on.
    Rollout,
    /// The fault strikes one pod of the slice it would hit (chosen by the seed).
    OnePod,
    /// The fault strikes the slice in one region only (`cloud.region`, chosen by the seed).
    OneRegion,
    /// A second, independent fault at the same time: a thermally throttled pod outside the
    /// scenario's own slice (chosen by the seed).
    ThrottledPod,
}

impl Variation {
    pub const ALL: [Variation; 12] = [
        Variation::Openinference,
        Variation::CustomNames,
        Variation::ResourceDims,
        Variation::GatewayGenai,
        Variation::HwMetrics,
        Variation::HeadSampling,
        Variation::ProcessTags,
        Variation::PastYear,
        Variation::Rollout,
        Variation::OnePod,
        Variation::OneRegion,
        Variation::ThrottledPod,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Variation::Openinference => "openinference",
            Variation::CustomNames => "custom_names",
            Variation::ResourceDims => "resource_dims",
            Variation::GatewayGenai => "gateway_genai",
            Variation::HwMetrics => "hw_metrics",
            Variation::HeadSampling => "head_sampling",
            Variation::ProcessTags => "process_tags",
            Variation::PastYear => "past_year",
            Variation::Rollout => "rollout",
            Variation::OnePod => "one_pod",
            Variation::OneRegion => "one_region",
            Variation::ThrottledPod => "throttled_pod",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Variation::Openinference => {
                "engine spans in OpenInference / OpenLLMetry names (llm.*), dimensions under other mapped names"
            }
            Variation::CustomNames => {
                "tenant, model version, LoRA set and KV policy under names no mapping table knows"
            }
            Variation::ResourceDims => {
                "per-worker dimensions as resource attributes (service.version, k8s.deployment.name, k8s.pod.name, host.name, cloud.region)"
            }
            Variation::GatewayGenai => {
                "the gateway span carries GenAI attributes (model, response id, usage, tenant.id) above the engine span"
            }
            Variation::HwMetrics => "OTel hw.gpu.* / hw.temperature GPU metrics instead of DCGM",
            Variation::HeadSampling => {
                "traces head-sampled at 10 % (tracestate ot=th:…); metrics and logs complete"
            }
            Variation::ProcessTags => {
                "vLLM 0.10 process tags on raw engine lines ((APIServer pid=N), (EngineCore_0 pid=M))"
            }
            Variation::PastYear => "simulated time one year earlier (raw vLLM lines carry no year)",
            Variation::Rollout => {
                "build r3 replaces r2 on half the fleet at the incident's start (a value with no baseline)"
            }
            Variation::OnePod => "the fault strikes one pod of its slice",
            Variation::OneRegion => "the fault strikes its slice in one region only",
            Variation::ThrottledPod => {
                "a second fault at once: a thermally throttled pod outside the scenario's slice"
            }
        }
    }

    /// Whether the variation only renames span attributes (same span, same values, same
    /// fault): the attribute dialects and a team's own names.
    pub fn renames_span_attributes(self) -> bool {
        matches!(self, Variation::Openinference | Variation::CustomNames)
    }

    /// Whether the variation changes anything in `scenario` that the ground truth or the data
    /// would show: narrowing a fault needs one that spans several workers; a second throttled
    /// pod needs a fault of another kind (on a healthy fleet it would be `slow_worker`).
    pub fn applies_to(self, scenario: Scenario) -> bool {
        match self {
            Variation::OnePod | Variation::OneRegion => scenario.narrowable(),
            Variation::ThrottledPod => !matches!(
                scenario,
                Scenario::Healthy | Scenario::SlowWorker | Scenario::TwoCauses
            ),
            _ => true,
        }
    }
}

impl FromStr for Variation {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        Variation::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Variation::ALL.iter().map(|v| v.name()).collect();
                SimError::Config(format!(
                    "unknown variation `{s}` ({}, or a number for a seeded mix)",
                    names.join(", ")
                ))
            })
    }
}

/// Variations that cannot be combined: a fault confined to one pod and to one region at once.
const EXCLUSIVE: [(Variation, Variation); 1] = [(Variation::OnePod, Variation::OneRegion)];

/// Parses `--variation` values: names separated by commas, or a number `N` for a seeded mix
/// ([`mix`]); several values add up. The result is sorted and without repeats.
pub fn parse_list(specs: &[String]) -> Result<Vec<Variation>, SimError> {
    let mut out = Vec::new();
    for spec in specs {
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.parse::<u64>() {
                Ok(n) => out.extend(mix(n)),
                Err(_) => out.push(part.parse()?),
            }
        }
    }
    out.sort();
    out.dedup();
    check_combination(&out).map_err(SimError::Config)?;
    Ok(out)
}

/// Rejects variations that cannot go together (the message says which).
pub fn check_combination(variations: &[Variation]) -> Result<(), String> {
    for (a, b) in EXCLUSIVE {
        if variations.contains(&a) && variations.contains(&b) {
            return Err(format!(
                "variations {} and {} cannot be combined",
                a.name(),
                b.name()
            ));
        }
    }
    Ok(())
}

/// A seeded mix: each variation with probability ½ (of two exclusive ones, the first drawn
/// wins); the same `n` always gives the same mix, and `0` none.
pub fn mix(n: u64) -> Vec<Variation> {
    if n == 0 {
        return Vec::new();
    }
    let mut rng = Rng::stream(n, 0x7661_7269);
    let mut out: Vec<Variation> = Vec::new();
    for variation in Variation::ALL {
        if rng.chance(0.5) && check_combination(&[out.as_slice(), &[variation]].concat()).is_ok() {
            out.push(variation);
        }
    }
    out
}
