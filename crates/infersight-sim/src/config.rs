//! Simulation settings: which scenario, seed, time range, fleet size, load, where arrivals come
//! from, and the (configurable) names of the non-standard dimension attributes the fleet emits.

use std::path::PathBuf;
use std::str::FromStr;

use serde::Serialize;

use crate::error::SimError;
use crate::scenario::kind::Scenario;
use crate::variation::{self, Variation};

/// 2025-11-29T02:00:00Z, the default start of simulated time.
pub const DEFAULT_START_NS: i64 = 1_764_381_600_000_000_000;

/// Default share of requests whose engine span carries per-token events (1 in 200: enough for a
/// token timeline on the UI, little output).
pub const DEFAULT_TOKEN_EVENTS: f64 = 0.005;

/// Most token events on one request's engine span; its later tokens get none.
pub const MAX_TOKEN_EVENTS_PER_REQUEST: u32 = 256;

/// Where arrival times and input/output lengths come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalKind {
    /// Mooncake conversation trace (Kimi, FAST'25): arrivals, lengths and prefix hash blocks.
    Mooncake,
    /// Azure LLM inference trace 2023, code completion.
    AzureCode,
    /// Azure LLM inference trace 2023, conversation.
    AzureConv,
    /// Poisson arrivals with lognormal input/output lengths (no data needed).
    Poisson,
}

impl ArrivalKind {
    pub const ALL: [ArrivalKind; 4] = [
        ArrivalKind::Mooncake,
        ArrivalKind::AzureCode,
        ArrivalKind::AzureConv,
        ArrivalKind::Poisson,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ArrivalKind::Mooncake => "mooncake",
            ArrivalKind::AzureCode => "azure_code",
            ArrivalKind::AzureConv => "azure_conv",
            ArrivalKind::Poisson => "poisson",
        }
    }
}

impl FromStr for ArrivalKind {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        ArrivalKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                SimError::Config(format!(
                    "unknown arrival source `{s}` (mooncake, azure_code, azure_conv, poisson)"
                ))
            })
    }
}

/// Names of the non-standard dimension attributes on engine spans. Defaults are names the
/// normalizer maps (see `infersight mapping`); other names land in `attrs` unless the server is
/// configured with `[normalize.aliases]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DimensionNames {
    pub model_version: String,
    pub lora_adapters: String,
    pub kv_cache_policy: String,
    pub batch_size: String,
    pub max_batch_size: String,
    pub batch_wait_ms: String,
}

impl Default for DimensionNames {
    fn default() -> Self {
        Self {
            model_version: "serving.model.version".into(),
            lora_adapters: "llm.lora.adapters".into(),
            kv_cache_policy: "serving.kv_cache.policy".into(),
            batch_size: "serving.batch.size".into(),
            max_batch_size: "serving.batch.max_size".into(),
            batch_wait_ms: "serving.batch.wait_ms".into(),
        }
    }
}

impl DimensionNames {
    /// Overrides from `key=name` pairs (keys: model_version, lora_adapters, kv_cache_policy,
    /// batch_size, max_batch_size, batch_wait_ms).
    pub fn with_override(mut self, spec: &str) -> Result<Self, SimError> {
        let (key, name) = spec
            .split_once('=')
            .ok_or_else(|| SimError::Config(format!("`{spec}`: expected KEY=ATTRIBUTE_NAME")))?;
        let name = name.trim().to_string();
        if name.is_empty() {
            return Err(SimError::Config(format!("`{spec}`: empty attribute name")));
        }
        let slot = match key.trim() {
            "model_version" => &mut self.model_version,
            "lora_adapters" => &mut self.lora_adapters,
            "kv_cache_policy" => &mut self.kv_cache_policy,
            "batch_size" => &mut self.batch_size,
            "max_batch_size" => &mut self.max_batch_size,
            "batch_wait_ms" => &mut self.batch_wait_ms,
            other => {
                return Err(SimError::Config(format!(
                    "unknown dimension `{other}` (model_version, lora_adapters, kv_cache_policy, batch_size, max_batch_size, batch_wait_ms)"
                )));
            }
        };
        *slot = name;
        Ok(self)
    }
}

/// The slow variation of the arrival rate over simulated time (the mean rate is kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadCycle {
    /// A constant mean rate.
    None,
    /// ±25 % over a 30-minute period (short runs see a whole cycle).
    #[default]
    Short,
    /// The daily cycle of an interactive service, on the time of day (UTC) of simulated time:
    /// 1 + 0.5·cos(2π(h − 14)/24), the busiest hour 14:00 at 1.5× the mean, 02:00 at 0.5×
    /// (3× from trough to peak), plus the short cycle's ±25 % on top.
    Daily,
}

impl LoadCycle {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "none" => Some(Self::None),
            "short" => Some(Self::Short),
            "daily" => Some(Self::Daily),
            _ => None,
        }
    }

    /// Rate multiplier at `t_s` seconds since the Unix epoch.
    pub fn multiplier(self, t_s: f64) -> f64 {
        let short = 1.0 + 0.25 * (std::f64::consts::TAU * t_s / 1_800.0).sin();
        match self {
            Self::None => 1.0,
            Self::Short => short,
            Self::Daily => {
                let hour = t_s.rem_euclid(86_400.0) / 3_600.0;
                short * (1.0 + 0.5 * (std::f64::consts::TAU * (hour - 14.0) / 24.0).cos())
            }
        }
    }
}

/// Extra load for a stretch of time: the arrival rate is multiplied by `factor`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Surge {
    pub start_s: f64,
    pub end_s: f64,
    pub factor: f64,
}

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub scenario: Scenario,
    pub seed: u64,
    /// Start of simulated time, ns since the Unix epoch.
    pub start_ns: i64,
    pub duration_s: f64,
    pub workers: usize,
    /// Mean fleet-wide arrival rate (requests per second) before load variation and surges.
    pub rate_per_s: f64,
    pub arrivals: ArrivalKind,
    pub dimension_names: DimensionNames,
    /// Folder holding `llm_traces/`; `None` = `INFERSIGHT_DATA_DIR` or `../shared/data`.
    pub data_dir: Option<PathBuf>,
    /// Simulated seconds per emitted chunk (and the metrics scrape / stats-line interval).
    pub chunk_s: f64,
    /// Slow load variation: ±25 % over 30 minutes by default, or the daily cycle.
    pub load_cycle: LoadCycle,
    pub surges: Vec<Surge>,
    /// Fraction (0..=1) of requests whose engine span carries `gen_ai.token` events, one per
    /// output token up to [`MAX_TOKEN_EVENTS_PER_REQUEST`]; 0 disables. Which requests is drawn
    /// from a random stream of its own, so everything else is the same whatever the fraction.
    pub token_events: f64,
    /// SGLang workers trace their phases as child spans of the engine span (`queued`, `prefill`,
    /// `decode`) instead of setting `gen_ai.latency.*` attributes, as tracing-only engines do.
    pub phase_spans: bool,
    /// Conventions (and reach) the fault is told in (see [`crate::variation`]); none by default.
    pub variations: Vec<Variation>,
}

impl SimConfig {
    pub fn new(scenario: Scenario) -> Self {
        Self {
            scenario,
            seed: 7,
            start_ns: DEFAULT_START_NS,
            duration_s: 3_600.0,
            workers: 16,
            rate_per_s: 50.0,
            arrivals: ArrivalKind::Poisson,
            dimension_names: DimensionNames::default(),
            data_dir: None,
            chunk_s: 10.0,
            load_cycle: LoadCycle::Short,
            surges: Vec::new(),
            token_events: DEFAULT_TOKEN_EVENTS,
            phase_spans: false,
            variations: Vec::new(),
        }
    }

    pub fn validate(&self) -> Result<(), SimError> {
        let mut problems = Vec::new();
        if !(self.duration_s.is_finite() && self.duration_s >= 60.0) {
            problems.push("duration must be at least 1 minute".to_string());
        }
        if self.duration_s > 7.0 * 86_400.0 {
            problems.push("duration must be at most 7 days".to_string());
        }
        if self.workers == 0 || self.workers > 4_096 {
            problems.push("workers must be between 1 and 4096".to_string());
        }
        if !(self.rate_per_s.is_finite() && self.rate_per_s > 0.0 && self.rate_per_s <= 100_000.0) {
            problems.push("rate must be in (0, 100000] requests per second".to_string());
        }
        if !(self.chunk_s.is_finite() && self.chunk_s >= 1.0 && self.chunk_s <= 300.0) {
            problems.push("chunk must be between 1 and 300 seconds".to_string());
        }
        if !(self.token_events.is_finite() && (0.0..=1.0).contains(&self.token_events)) {
            problems.push("token events fraction must be between 0 and 1".to_string());
        }
        for s in &self.surges {
            if !(s.factor > 0.0 && s.factor.is_finite() && s.end_s > s.start_s) {
                problems.push(format!("bad surge {s:?}"));
            }
        }
        if let Err(problem) = variation::check_combination(&self.variations) {
            problems.push(problem);
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(SimError::Config(problems.join("; ")))
        }
    }

    pub fn end_ns(&self) -> i64 {
        self.start_ns + (self.duration_s * 1e9) as i64
    }
}

/// The data folder: `INFERSIGHT_DATA_DIR`, else `shared/data` next to the repository (found from
/// this crate's source location), else `../shared/data` relative to the working directory.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("INFERSIGHT_DATA_DIR") {
        return PathBuf::from(dir);
    }
    let beside_repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    if beside_repo.is_dir() {
        return beside_repo;
    }
    PathBuf::from("../shared/data")
}
