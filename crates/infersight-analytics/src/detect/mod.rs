//! Anomaly detection on SLI and resource series: spikes, level shifts, onsets, and the resource
//! detectors of DESIGN.md. Sits between the SLI rollups (which give per-minute series) and
//! localization / the report (which consume [`Finding`]s as `signals`). IO-free: plain slices
//! in, plain structs out; no clocks — the caller says where the baseline ends.
//!
//! # Series detector ([`detect_change`], module [`change`])
//!
//! 1. The series is put on a grid of `step_ns` (default one minute); several points in one step
//!    are averaged, non-finite values and missing steps are gaps.
//! 2. Baseline: points before `baseline_end_ns` (default: the first half of the grid). When a
//!    `period_ns` is set and the baseline holds at least two periods, the expected value is a
//!    robust seasonal profile (per phase, the median over all baseline periods of a window of
//!    ±`seasonal_smooth_points` phases); baseline residuals are computed *leaving the point's own
//!    period out*, so their spread is the honest out-of-sample spread. Otherwise the expected
//!    value is the baseline median. Scale = 1.4826·MAD of the baseline residuals, floored by
//!    `min_scale_abs` and `min_scale_rel`·|median| (a constant series has scale 0).
//! 3. Threshold: SPOT (Siffer et al., "Anomaly Detection in Streams with Extreme Value
//!    Theory", KDD 2017) on the standardized baseline residuals: initial threshold t at the
//!    `spot_init_quantile` (0.98) quantile, a generalized Pareto fit of the excesses by Grimshaw's
//!    method (with the probability-weighted-moment fit of Hosking & Wallis 1987 and the
//!    exponential fit as candidates; highest likelihood wins), and
//!    z_q = t + σ/γ·((q·n/N_t)^(−γ) − 1) for risk `risk_q` (1e-4). With fewer than
//!    `spot_min_peaks` excesses the threshold falls back to the robust z-score
//!    `fallback_z` (5) (SPOT wants ~1,000 baseline points: 0.98 × 1,000 leaves 20 peaks). A
//!    negative fitted shape (bounded tail, typical of a GPD fitted to a Gaussian's tail) is not
//!    trusted for extrapolation: the exponential tail (γ = 0) gives the quantile then. The
//!    threshold is never below `min_threshold_z` (3). Up and down tails get separate
//!    thresholds.
//! 4. Alarms after the baseline: a point beyond the threshold, or a two-sided CUSUM on the
//!    standardized residuals (Page 1954; slack `cusum_k` = 1, decision `cusum_h` = 6, in units
//!    of the baseline scale) for smaller sustained shifts. The first alarm wins.
//! 5. Spike or level shift: over the `confirm_points` (10) steps from the alarm, a level shift
//!    when the median standardized residual stays beyond `shift_band_z` (2) in the alarm's
//!    direction (beyond `cusum_k` for a CUSUM alarm, which is tuned for shifts ≥ 2k); a spike
//!    otherwise.
//! 6. Onset: for a threshold alarm, walk back while the residual stays beyond `onset_band_z` (2)
//!    in the same direction (gaps of up to `max_gap_points` are stepped over); for a CUSUM alarm,
//!    the step after the CUSUM last left zero (the CUSUM change-point estimate).
//!
//! # Resource detectors (module [`resource`])
//!
//! | detector | kind(s) | method |
//! |---|---|---|
//! | [`gpu_memory_leak`] | `gpu_memory_leak` | Theil–Sen slope + Mann–Kendall trend test (one-sided p < `alpha`) of memory, relative growth ≥ `min_growth_fraction`, load ruled out (median utilization ≤ `max_utilization`, or memory and utilization not rising together: Spearman ρ < `max_load_correlation`); memory as a fraction of capacity where known; Spearman ρ of memory with the worker's latency as evidence and confidence |
//! | [`queue_buildup`] | `queue_buildup` | Mann–Kendall on the queue and on queue/arrivals (Little's law: a queue that grows faster than arrivals means service rate < arrival rate), growth ≥ `min_growth_ratio`, still rising in the last half |
//! | [`kv_cache_pressure`] | `kv_cache_pressure`, `preemption_storm` | share of current minutes with KV usage ≥ `high_watermark`; preemptions: Poisson tail of the current count given the baseline rate, ratio ≥ `min_ratio`, while KV usage is high |
//! | [`cache_pollution`] | `cache_pollution` | victim tenant's prefix-cache hit rate drops (robust: median shift beyond `band_z` standard errors of the two medians, from the baseline's MAD, and ≥ `min_hit_rate_drop`) while another tenant's access entropy (Shannon, bits; [`access_entropy`]) rises, onsets within `coincidence_ns`; the polluter is the tenant whose distinct missed blocks (2^entropy) grew most, and no polluter is a victim; Spearman ρ between the two as evidence |
//! | [`truncation_surge`] | `truncation_surge` | two-proportion z-test of finish_reason=length rate, current vs baseline, per model |
//! | [`orphan_spans`] | `trace_context_loss` | the same proportion test on the share of spans whose parent is missing ([`count_orphans`]), per service/version |
//! | [`resonance`] | `resonance` | [`detect_change`] upward on injection score, rejection-sampling failures and spec-decode rollbacks; all three onsets within `common_window_ns` and every pairwise Spearman ρ ≥ `min_correlation` |
//! | [`prompt_drift`] | `prompt_drift` | MinHash (`num_hashes` = 64) of word 1- and 2-gram shingles ([`prompt_features`]); per current prompt, the max Jaccard estimate to a baseline sample; drift when the mean falls below (1 − `min_relative_drop`) × the baseline's own leave-one-out mean; output-length 3σ outliers (baseline mean/σ) with a binomial tail vs the Gaussian 0.27 % as evidence |
//! | [`error_burst`] | `error_burst` | Poisson tail of each current step's errors given the baseline rate; when one step passes Bonferroni (p·m < `alpha`) the burst window is the run of steps around it with p < `burst_step_p`, otherwise the whole current window; fires when the window's Poisson tail p < `alpha`, ratio ≥ `min_ratio`, excess ≥ `min_excess` |
//!
//! # Time to exhaustion (module [`exhaustion`])
//!
//! [`project_exhaustion`]: where a rising series (GPU memory, KV-cache usage, a request's
//! expected queue wait) reaches its limit, with an interval: a hinge model finds where the rise
//! starts, a Theil–Sen line with Sen's confidence interval and a Mann–Kendall test fit it, and
//! the ETA interval takes the slope and level intervals together.
//!
//! References: Siffer, Fouque, Termier, Largouët, KDD 2017 (SPOT); Grimshaw, Technometrics 1993
//! (GPD maximum likelihood); Hosking & Wallis, Technometrics 1987 (GPD PWM); Page, Biometrika 1954
//! (CUSUM); Sen, JASA 1968 and Theil 1950 (slope); Mann 1945, Kendall 1975 (trend test); Broder
//! 1997 (MinHash).

pub mod change;
pub mod drift;
pub mod exhaustion;
pub mod resource;
pub mod spot;
pub mod stats;

pub use change::{
    ChangeKind, ChangePoint, DetectParams, Direction, ThresholdMethod, detect_change,
};
pub use drift::{PromptDriftParams, PromptFeatures, PromptSample, prompt_drift, prompt_features};
pub use exhaustion::{ExhaustionParams, Projection, project_exhaustion};
pub use resource::{
    CacheMinute, CachePollutionParams, CountSample, ErrorBurstParams, KvCacheInput, KvCacheParams,
    LeakParams, MemoryInput, MemoryUnit, ProportionParams, QueueInput, QueueParams, ResonanceInput,
    ResonanceParams, SpanRef, TenantCacheSeries, access_entropy, cache_pollution, context_loss,
    count_orphans, error_burst, gpu_memory_leak, kv_cache_pressure, orphan_spans, queue_buildup,
    resonance, truncation_surge,
};
pub use spot::{GpdFit, SpotThreshold, fit_gpd, spot_threshold};

/// One minute in nanoseconds, the default grid step.
pub const MINUTE_NS: i64 = 60_000_000_000;

/// Signal kinds of the `rca` JSON contract, defined with the verdict's vocabulary in the model.
pub use infersight_model::signal::SignalKind;

/// One named number that justifies a finding (e.g. `baseline_rate`, `p_value`), for the report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence {
    pub name: &'static str,
    pub value: f64,
}

/// What a detector found: a typed, self-justifying signal.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub kind: SignalKind,
    /// What it is about, e.g. `[("worker", "w-3")]` or `[("tenant", "a"), ("polluter", "b")]`.
    pub subject: Vec<(String, String)>,
    /// First point of the excursion.
    pub onset_ns: i64,
    /// The window the detector judged (the current window, or the span of the input series).
    pub window_start_ns: i64,
    pub window_end_ns: i64,
    /// Effect size in the signal's own unit (current − baseline; for trends, the growth over
    /// the window). See each detector for the unit.
    pub magnitude: f64,
    /// Magnitude relative to the baseline level, where the baseline is not zero.
    pub relative_change: Option<f64>,
    /// Strength, ≥ 0 and comparable within a kind (a z-score or a ratio past the threshold);
    /// this is the `strength` of the `rca` JSON.
    pub score: f64,
    /// 0..1: 1 − p-value where a test gives one, otherwise a bounded transform of `score`.
    pub confidence: f64,
    /// The numbers behind the decision, in a stable order per detector.
    pub evidence: Vec<Evidence>,
    /// One human-readable sentence.
    pub detail: String,
}

impl Finding {
    /// The value of the named evidence, if present.
    pub fn evidence_value(&self, name: &str) -> Option<f64> {
        self.evidence
            .iter()
            .find(|item| item.name == name)
            .map(|item| item.value)
    }
}

/// Bad input to a detector. Detectors never panic on data; they return one of these.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DetectError {
    #[error("parameter {name} is invalid: {reason}")]
    BadParam { name: &'static str, reason: String },
    #[error("series {series}: timestamps go backwards at index {index}")]
    Unsorted { series: &'static str, index: usize },
    #[error("series {series}: needs at least {needed} usable points, got {got}")]
    TooShort {
        series: &'static str,
        needed: usize,
        got: usize,
    },
    #[error("series {series}: value {value} at index {index} is outside {expected}")]
    OutOfRange {
        series: &'static str,
        index: usize,
        value: f64,
        expected: &'static str,
    },
    #[error("series {series} spans {points} grid steps, more than the limit of {limit}")]
    TooLong {
        series: &'static str,
        points: usize,
        limit: usize,
    },
}

pub(crate) fn bad_param(name: &'static str, reason: impl Into<String>) -> DetectError {
    DetectError::BadParam {
        name,
        reason: reason.into(),
    }
}

/// Checks that timestamps never go backwards.
pub(crate) fn check_sorted(
    series: &'static str,
    ts: impl Iterator<Item = i64>,
) -> Result<(), DetectError> {
    let mut previous = i64::MIN;
    for (index, t) in ts.enumerate() {
        if t < previous {
            return Err(DetectError::Unsorted { series, index });
        }
        previous = t;
    }
    Ok(())
}

pub(crate) fn subject(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

pub(crate) fn ev(name: &'static str, value: f64) -> Evidence {
    Evidence { name, value }
}
