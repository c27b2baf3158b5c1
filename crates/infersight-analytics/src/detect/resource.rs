//! Resource detectors of DESIGN.md over per-worker / per-tenant / per-model series: GPU-memory
//! leak, queue build-up, KV-cache pressure and preemption storms, cache pollution, truncation
//! surges, orphan spans (trace context loss), resonance, error bursts. Methods and defaults are
//! tabled in the module docs of [`crate::detect`].
//!
//! Conventions: series are `(ts_ns, value)` with non-decreasing timestamps; non-finite values
//! are skipped; `current_from_ns` splits baseline (before) from current (at or after). Too
//! little baseline is a [`DetectError::TooShort`]; too little current data yields `Ok(None)`.

use std::collections::HashSet;

use super::change::{ChangeKind, DetectParams, Direction, detect_change};
use super::stats::{
    MAD_TO_SIGMA, align, downsample, mad, mann_kendall, median, normal_sf, poisson_sf, spearman,
    squash, theil_sen_slope,
};
use super::{DetectError, Finding, MINUTE_NS, SignalKind, bad_param, check_sorted, ev, subject};

const HOUR_NS: f64 = 3_600e9;

type Points = Vec<(i64, f64)>;

fn finite(
    series_name: &'static str,
    series: &[(i64, f64)],
) -> Result<Vec<(i64, f64)>, DetectError> {
    check_sorted(series_name, series.iter().map(|p| p.0))?;
    Ok(series.iter().copied().filter(|p| p.1.is_finite()).collect())
}

fn check_range(
    series_name: &'static str,
    series: &[(i64, f64)],
    low: f64,
    high: f64,
    expected: &'static str,
) -> Result<(), DetectError> {
    for (index, &(_, value)) in series.iter().enumerate() {
        if value.is_finite() && !(low..=high).contains(&value) {
            return Err(DetectError::OutOfRange {
                series: series_name,
                index,
                value,
                expected,
            });
        }
    }
    Ok(())
}

fn values(points: &[(i64, f64)]) -> Vec<f64> {
    points.iter().map(|p| p.1).collect()
}

/// Start level, end level (medians of the first / last tenth, at least 5 points).
fn end_levels(points: &[(i64, f64)]) -> (f64, f64) {
    let k = (points.len() / 10).max(5).min(points.len());
    let head: Vec<f64> = points[..k].iter().map(|p| p.1).collect();
    let tail: Vec<f64> = points[points.len() - k..].iter().map(|p| p.1).collect();
    (median(&head).unwrap_or(0.0), median(&tail).unwrap_or(0.0))
}

/// Onset of a rise from `start_level`: the point after the last one still within the noise
/// band (3 robust σ of first differences / √2) of the start level.
fn growth_onset(points: &[(i64, f64)], start_level: f64) -> i64 {
    let diffs: Vec<f64> = points.windows(2).map(|w| w[1].1 - w[0].1).collect();
    let noise = MAD_TO_SIGMA * mad(&diffs).unwrap_or(0.0) / std::f64::consts::SQRT_2;
    let band = start_level + 3.0 * noise;
    match points.iter().rposition(|p| p.1 <= band) {
        Some(index) if index + 1 < points.len() => points[index + 1].0,
        Some(index) => points[index].0,
        None => points[0].0,
    }
}

fn trend_points(points: &[(i64, f64)], max_points: usize) -> Vec<(f64, f64)> {
    let origin = points.first().map(|p| p.0).unwrap_or(0);
    let raw: Vec<(f64, f64)> = points
        .iter()
        .map(|p| ((p.0 - origin) as f64 / HOUR_NS, p.1))
        .collect();
    downsample(&raw, max_points)
}

// ------------------------------------------------------------------------ gpu memory leak

/// What a memory series measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryUnit {
    /// Bytes used (the capacity is unknown).
    Bytes,
    /// The used fraction of the device's capacity, 0..=1 (used / limit, used / (used + free) or
    /// a reported ratio): what memory is judged as whenever the capacity is known.
    FractionOfCapacity,
}

/// One worker's GPU memory, utilization and request latency.
#[derive(Debug, Clone, Copy)]
pub struct MemoryInput<'a> {
    pub worker: &'a str,
    /// Memory in use, in `unit`.
    pub memory: &'a [(i64, f64)],
    pub unit: MemoryUnit,
    /// GPU utilization as a fraction, 0..=1; may be empty (then load is not ruled out).
    pub utilization: &'a [(i64, f64)],
    /// Latency of this worker's requests per step (e.g. p99 e2e, ms); may be empty.
    pub latency_ms: &'a [(i64, f64)],
}

#[derive(Debug, Clone, PartialEq)]
pub struct LeakParams {
    /// One-sided Mann–Kendall p-value needed.
    pub alpha: f64,
    /// Growth over the window relative to the start level.
    pub min_growth_fraction: f64,
    /// Median utilization at or below this is "low": growth then cannot be load.
    pub max_utilization: f64,
    /// Above `max_utilization`, growth is load (not a leak) when memory and utilization rise
    /// together: their Spearman ρ at or above this.
    pub max_load_correlation: f64,
    pub min_points: usize,
    /// Longer series are averaged down to this many points for the O(n²) statistics.
    pub max_trend_points: usize,
    /// Bucket used to pair memory with latency and utilization.
    pub step_ns: i64,
}

impl Default for LeakParams {
    fn default() -> Self {
        LeakParams {
            alpha: 1e-3,
            min_growth_fraction: 0.05,
            max_utilization: 0.5,
            max_load_correlation: 0.5,
            min_points: 20,
            max_trend_points: 512,
            step_ns: MINUTE_NS,
        }
    }
}

/// The GPU's utilization over the memory window: its median and its rank correlation with
/// memory (`None`: no utilization sample in the window).
fn utilization_in_window(
    memory: &[(i64, f64)],
    utilization: &[(i64, f64)],
    step_ns: i64,
) -> Option<(f64, Option<f64>)> {
    let (first_ns, last_ns) = (memory.first()?.0, memory.last()?.0);
    let window: Points = utilization
        .iter()
        .copied()
        .filter(|p| p.0 >= first_ns && p.0 <= last_ns)
        .collect();
    let median_utilization = median(&values(&window))?;
    let (xs, ys) = align(memory, &window, step_ns);
    Some((median_utilization, spearman(&xs, &ys)))
}

/// GPU-memory leak: sustained monotone growth that load does not explain (utilization low, or
/// not rising with memory; no utilization series: not ruled out). Memory is judged in its
/// unit, a fraction of capacity whenever the capacity is known. Magnitude: growth over the
/// window (Theil–Sen slope × duration, in the memory's unit); score: Mann–Kendall z;
/// confidence: 1 − p. Evidence includes `latency_spearman`, the rank correlation of memory
/// with latency, and for a fraction the `hours_to_full` at the current slope.
pub fn gpu_memory_leak(
    input: &MemoryInput<'_>,
    params: &LeakParams,
) -> Result<Option<Finding>, DetectError> {
    if !(params.alpha > 0.0 && params.alpha < 1.0) {
        return Err(bad_param("alpha", "must lie in (0, 1)"));
    }
    if input.unit == MemoryUnit::FractionOfCapacity {
        check_range(
            "memory",
            input.memory,
            0.0,
            1.0 + 1e-9,
            "0..=1 (a fraction)",
        )?;
    }
    let memory = finite("memory", input.memory)?;
    check_range(
        "utilization",
        input.utilization,
        0.0,
        1.0,
        "0..=1 (a fraction)",
    )?;
    let utilization = finite("utilization", input.utilization)?;
    let latency = finite("latency_ms", input.latency_ms)?;
    if memory.len() < params.min_points.max(3) {
        return Err(DetectError::TooShort {
            series: "memory",
            needed: params.min_points.max(3),
            got: memory.len(),
        });
    }
    let (first_ns, last_ns) = (memory[0].0, memory[memory.len() - 1].0);
    let load = utilization_in_window(&memory, &utilization, params.step_ns);
    let trend = trend_points(&memory, params.max_trend_points);
    let slope_per_hour = theil_sen_slope(&trend).unwrap_or(0.0);
    let trend_values: Vec<f64> = trend.iter().map(|p| p.1).collect();
    let Some(mk) = mann_kendall(&trend_values) else {
        return Ok(None);
    };
    let hours = (last_ns - first_ns) as f64 / HOUR_NS;
    let growth = slope_per_hour * hours;
    let (start_level, end_level) = end_levels(&memory);
    let relative = (start_level.abs() > 0.0).then(|| growth / start_level.abs());
    let grows = slope_per_hour > 0.0
        && mk.p_increasing < params.alpha
        && relative.is_none_or(|r| r >= params.min_growth_fraction);
    let is_load = load.is_some_and(|(median_utilization, rho)| {
        median_utilization > params.max_utilization
            && rho.is_none_or(|r| r >= params.max_load_correlation)
    });
    if !grows || is_load {
        return Ok(None);
    }
    let (xs, ys) = align(&memory, &latency, params.step_ns);
    let rho = spearman(&xs, &ys);
    let [slope_name, growth_name, start_name, end_name] = leak_evidence_names(input.unit);
    let mut evidence = vec![
        ev(slope_name, slope_per_hour),
        ev(growth_name, growth),
        ev(start_name, start_level),
        ev(end_name, end_level),
        ev("mann_kendall_z", mk.z),
        ev("p_value", mk.p_increasing),
    ];
    if let Some((median_utilization, load_rho)) = load {
        evidence.push(ev("median_utilization", median_utilization));
        if let Some(r) = load_rho {
            evidence.push(ev("utilization_spearman", r));
        }
    }
    let hours_to_full = (input.unit == MemoryUnit::FractionOfCapacity)
        .then(|| (1.0 - end_level).max(0.0) / slope_per_hour);
    if let Some(h) = hours_to_full {
        evidence.push(ev("hours_to_full", h));
    }
    if let Some(rho) = rho {
        evidence.push(ev("latency_spearman", rho));
        evidence.push(ev("latency_pairs", xs.len() as f64));
    }
    Ok(Some(Finding {
        kind: SignalKind::GpuMemoryLeak,
        subject: subject(&[("worker", input.worker)]),
        onset_ns: growth_onset(&memory, start_level),
        window_start_ns: first_ns,
        window_end_ns: last_ns,
        magnitude: growth,
        relative_change: relative,
        score: mk.z,
        confidence: 1.0 - mk.p_increasing,
        evidence,
        detail: leak_detail(input.unit, slope_per_hour, start_level, end_level, relative)
            + &load.map_or_else(
                || "; no utilization reported".to_string(),
                |(u, _)| format!(" at median utilization {:.0} %", 100.0 * u),
            )
            + &hours_to_full
                .filter(|h| h.is_finite())
                .map(|h| format!("; full in {h:.1} h at this rate"))
                .unwrap_or_default()
            + &rho
                .map(|r| format!("; latency rank correlation {r:.2}"))
                .unwrap_or_default(),
    }))
}

/// Evidence names of the slope, growth, start and end levels, which carry the memory's unit.
fn leak_evidence_names(unit: MemoryUnit) -> [&'static str; 4] {
    match unit {
        MemoryUnit::Bytes => [
            "slope_bytes_per_hour",
            "growth_bytes",
            "start_bytes",
            "end_bytes",
        ],
        MemoryUnit::FractionOfCapacity => [
            "slope_fraction_per_hour",
            "growth_fraction",
            "start_fraction",
            "end_fraction",
        ],
    }
}

fn leak_detail(
    unit: MemoryUnit,
    slope_per_hour: f64,
    start_level: f64,
    end_level: f64,
    relative: Option<f64>,
) -> String {
    match unit {
        MemoryUnit::Bytes => format!(
            "gpu memory grows {:.3e} bytes/h ({:+.1} % over the window)",
            slope_per_hour,
            100.0 * relative.unwrap_or(0.0)
        ),
        MemoryUnit::FractionOfCapacity => format!(
            "gpu memory grows from {:.0} % to {:.0} % of capacity ({:+.1} points/h)",
            100.0 * start_level,
            100.0 * end_level,
            100.0 * slope_per_hour
        ),
    }
}

// ------------------------------------------------------------------------ queue build-up

/// One worker's waiting queue (requests waiting, or queue_ms) and arrivals per step.
#[derive(Debug, Clone, Copy)]
pub struct QueueInput<'a> {
    pub worker: &'a str,
    pub waiting: &'a [(i64, f64)],
    /// Arrivals per step; may be empty (then the queue alone is judged).
    pub arrivals: &'a [(i64, f64)],
}

#[derive(Debug, Clone, PartialEq)]
pub struct QueueParams {
    pub alpha: f64,
    /// End level ≥ this × max(start level, `min_increase`).
    pub min_growth_ratio: f64,
    /// Absolute rise needed, in the queue's unit.
    pub min_increase: f64,
    pub min_points: usize,
    pub max_trend_points: usize,
    pub step_ns: i64,
}

impl Default for QueueParams {
    fn default() -> Self {
        QueueParams {
            alpha: 1e-3,
            min_growth_ratio: 2.0,
            min_increase: 1.0,
            min_points: 20,
            max_trend_points: 512,
            step_ns: MINUTE_NS,
        }
    }
}

/// Queue build-up: the queue grows (Mann–Kendall), is still growing over the last half
/// (p < 0.05, not a plateau), and grows faster than arrivals (queue/arrivals trends up too —
/// by Little's law that means the service rate fell behind). Magnitude: end − start level.
pub fn queue_buildup(
    input: &QueueInput<'_>,
    params: &QueueParams,
) -> Result<Option<Finding>, DetectError> {
    if !(params.alpha > 0.0 && params.alpha < 1.0) {
        return Err(bad_param("alpha", "must lie in (0, 1)"));
    }
    let queue = finite("waiting", input.waiting)?;
    let arrivals = finite("arrivals", input.arrivals)?;
    if queue.len() < params.min_points.max(6) {
        return Err(DetectError::TooShort {
            series: "waiting",
            needed: params.min_points.max(6),
            got: queue.len(),
        });
    }
    let trend = trend_points(&queue, params.max_trend_points);
    let trend_values: Vec<f64> = trend.iter().map(|p| p.1).collect();
    let Some(mk) = mann_kendall(&trend_values) else {
        return Ok(None);
    };
    let tail = &trend_values[trend_values.len() / 2..];
    let tail_p = mann_kendall(tail).map_or(1.0, |m| m.p_increasing);
    let (start_level, end_level) = end_levels(&queue);
    let grew = end_level - start_level >= params.min_increase
        && end_level >= params.min_growth_ratio * start_level.max(params.min_increase);
    if !(mk.p_increasing < params.alpha && tail_p < 0.05 && grew) {
        return Ok(None);
    }
    let mut evidence = vec![
        ev("start_level", start_level),
        ev("end_level", end_level),
        ev("slope_per_hour", theil_sen_slope(&trend).unwrap_or(0.0)),
        ev("mann_kendall_z", mk.z),
        ev("p_value", mk.p_increasing),
        ev("last_half_p_value", tail_p),
    ];
    if !arrivals.is_empty() {
        let (qs, arr) = align(&queue, &arrivals, params.step_ns);
        let per_arrival: Vec<f64> = qs
            .iter()
            .zip(&arr)
            .filter(|(_, a)| **a > 0.0)
            .map(|(q, a)| q / a)
            .collect();
        let ratio_p = mann_kendall(&per_arrival).map_or(1.0, |m| m.p_increasing);
        let arrival_points: Vec<(i64, f64)> = arrivals.clone();
        let (arrivals_start, arrivals_end) = end_levels(&arrival_points);
        evidence.push(ev("queue_per_arrival_p_value", ratio_p));
        evidence.push(ev("arrivals_start", arrivals_start));
        evidence.push(ev("arrivals_end", arrivals_end));
        if ratio_p.is_nan() || ratio_p >= params.alpha {
            return Ok(None);
        }
    }
    let ratio = end_level / start_level.max(params.min_increase);
    Ok(Some(Finding {
        kind: SignalKind::QueueBuildup,
        subject: subject(&[("worker", input.worker)]),
        onset_ns: growth_onset(&queue, start_level),
        window_start_ns: queue[0].0,
        window_end_ns: queue[queue.len() - 1].0,
        magnitude: end_level - start_level,
        relative_change: (start_level > 0.0).then(|| (end_level - start_level) / start_level),
        score: mk.z,
        confidence: 1.0 - mk.p_increasing,
        evidence,
        detail: format!(
            "queue grew from {start_level:.1} to {end_level:.1} (×{ratio:.1}) faster than arrivals and is still growing"
        ),
    }))
}

// ------------------------------------------------------------------------ kv cache

/// One worker's KV-cache usage (fraction) and preemptions per step.
#[derive(Debug, Clone, Copy)]
pub struct KvCacheInput<'a> {
    pub worker: &'a str,
    pub kv_usage: &'a [(i64, f64)],
    pub preemptions: &'a [(i64, f64)],
    pub current_from_ns: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct KvCacheParams {
    pub high_watermark: f64,
    /// Share of current points at or above the watermark for "pressure".
    pub min_high_fraction: f64,
    /// Poisson tail p-value needed for a preemption storm.
    pub alpha: f64,
    pub min_ratio: f64,
    /// Current preemptions above expectation needed.
    pub min_excess: f64,
    pub min_baseline_points: usize,
    pub min_current_points: usize,
    /// Pseudo-count added to the baseline preemptions (so a zero baseline has a rate).
    pub prior_count: f64,
}

impl Default for KvCacheParams {
    fn default() -> Self {
        KvCacheParams {
            high_watermark: 0.95,
            min_high_fraction: 0.5,
            alpha: 1e-4,
            min_ratio: 3.0,
            min_excess: 10.0,
            min_baseline_points: 10,
            min_current_points: 5,
            prior_count: 0.5,
        }
    }
}

/// KV-cache pressure (usage at the watermark for most of the current window, not so in the
/// baseline) and preemption storm (preemptions far above the baseline rate — Poisson tail —
/// while usage is at the watermark). Returns 0, 1 or 2 findings.
pub fn kv_cache_pressure(
    input: &KvCacheInput<'_>,
    params: &KvCacheParams,
) -> Result<Vec<Finding>, DetectError> {
    check_range(
        "kv_usage",
        input.kv_usage,
        0.0,
        1.0 + 1e-9,
        "0..=1 (a fraction)",
    )?;
    let usage = finite("kv_usage", input.kv_usage)?;
    let preemptions = finite("preemptions", input.preemptions)?;
    check_range(
        "preemptions",
        &preemptions,
        0.0,
        f64::INFINITY,
        "counts ≥ 0",
    )?;
    let split = input.current_from_ns;
    let (usage_base, usage_cur): (Points, Points) = usage.iter().partition(|p| p.0 < split);
    let (pre_base, pre_cur): (Points, Points) = preemptions.iter().partition(|p| p.0 < split);
    if usage_base.len() < params.min_baseline_points {
        return Err(DetectError::TooShort {
            series: "kv_usage baseline",
            needed: params.min_baseline_points,
            got: usage_base.len(),
        });
    }
    let mut findings = Vec::new();
    if usage_cur.len() < params.min_current_points {
        return Ok(findings);
    }
    let high_share = |points: &[(i64, f64)]| {
        points
            .iter()
            .filter(|p| p.1 >= params.high_watermark)
            .count() as f64
            / points.len().max(1) as f64
    };
    let base_high = high_share(&usage_base);
    let cur_high = high_share(&usage_cur);
    let under_pressure = cur_high >= params.min_high_fraction;
    let window_end = usage_cur[usage_cur.len() - 1].0;
    let pressure_onset = usage_cur
        .iter()
        .find(|p| p.1 >= params.high_watermark)
        .map_or(split, |p| p.0);
    let base_usage = median(&values(&usage_base)).unwrap_or(0.0);
    let cur_usage = median(&values(&usage_cur)).unwrap_or(0.0);
    if under_pressure && base_high < params.min_high_fraction {
        findings.push(Finding {
            kind: SignalKind::KvCachePressure,
            subject: subject(&[("worker", input.worker)]),
            onset_ns: pressure_onset,
            window_start_ns: split,
            window_end_ns: window_end,
            magnitude: cur_usage - base_usage,
            relative_change: (base_usage > 0.0).then(|| (cur_usage - base_usage) / base_usage),
            score: cur_high / params.min_high_fraction,
            confidence: cur_high,
            evidence: vec![
                ev("baseline_median_usage", base_usage),
                ev("current_median_usage", cur_usage),
                ev("baseline_high_share", base_high),
                ev("current_high_share", cur_high),
                ev("high_watermark", params.high_watermark),
            ],
            detail: format!(
                "kv-cache usage at or above {:.0} % in {:.0} % of the window (baseline {:.0} %)",
                100.0 * params.high_watermark,
                100.0 * cur_high,
                100.0 * base_high
            ),
        });
    }
    if !under_pressure || pre_cur.is_empty() {
        return Ok(findings);
    }
    if pre_base.len() < params.min_baseline_points {
        return Err(DetectError::TooShort {
            series: "preemptions baseline",
            needed: params.min_baseline_points,
            got: pre_base.len(),
        });
    }
    let rate =
        (pre_base.iter().map(|p| p.1).sum::<f64>() + params.prior_count) / pre_base.len() as f64;
    let current_total: f64 = pre_cur.iter().map(|p| p.1).sum();
    let expected = rate * pre_cur.len() as f64;
    let p_value = poisson_sf(current_total, expected);
    let ratio = current_total / expected;
    if p_value < params.alpha
        && ratio >= params.min_ratio
        && current_total - expected >= params.min_excess
    {
        let onset = pre_cur
            .iter()
            .find(|p| poisson_sf(p.1, rate) < 1e-3)
            .or_else(|| pre_cur.iter().find(|p| p.1 > rate))
            .map_or(split, |p| p.0);
        findings.push(Finding {
            kind: SignalKind::PreemptionStorm,
            subject: subject(&[("worker", input.worker)]),
            onset_ns: onset,
            window_start_ns: split,
            window_end_ns: pre_cur[pre_cur.len() - 1].0,
            magnitude: current_total / pre_cur.len() as f64 - rate,
            relative_change: Some(ratio - 1.0),
            score: ratio,
            confidence: 1.0 - p_value,
            evidence: vec![
                ev("baseline_rate_per_step", rate),
                ev("current_rate_per_step", current_total / pre_cur.len() as f64),
                ev("current_total", current_total),
                ev("expected_total", expected),
                ev("p_value", p_value),
                ev("current_high_share", cur_high),
            ],
            detail: format!(
                "{current_total:.0} preemptions vs {expected:.1} expected (×{ratio:.1}) with kv-cache usage at {:.0} %",
                100.0 * cur_usage
            ),
        });
    }
    Ok(findings)
}

// ------------------------------------------------------------------------ cache pollution

/// One tenant's prefix-cache hit rate (0..=1) and access entropy (bits, see
/// [`access_entropy`]) per step.
#[derive(Debug, Clone, Copy)]
pub struct TenantCacheSeries<'a> {
    pub tenant: &'a str,
    pub hit_rate: &'a [(i64, f64)],
    pub access_entropy_bits: &'a [(i64, f64)],
    /// For a tenant too sparse for per-step medians (a few requests a minute, or sampled rows:
    /// its `hit_rate` steps pool several minutes), its own minutes, for a token-weighted drop
    /// from an onset on ([`CachePollutionParams::sparse_min_minutes`]); empty otherwise.
    pub sparse_minutes: &'a [CacheMinute],
}

/// One minute of a tenant's prefix-cache use: the share of its prompt tokens served from the
/// cache, and how many prompt tokens that share is of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheMinute {
    pub ts_ns: i64,
    pub hit_rate: f64,
    pub input_tokens: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CachePollutionParams {
    pub min_hit_rate_drop: f64,
    pub min_entropy_rise_bits: f64,
    /// A shift must also exceed this many standard errors of the difference of the two
    /// medians (robust σ of the baseline points, by √(π/2)·√(1/n₁ + 1/n₂)).
    pub band_z: f64,
    /// Victim and polluter onsets at most this far apart.
    pub coincidence_ns: i64,
    pub min_points: usize,
    pub step_ns: i64,
    /// A sparse tenant's drop ([`TenantCacheSeries::sparse_minutes`]) needs at least this many
    /// minutes with prompts from its onset on.
    pub sparse_min_minutes: usize,
}

impl Default for CachePollutionParams {
    fn default() -> Self {
        CachePollutionParams {
            min_hit_rate_drop: 0.15,
            min_entropy_rise_bits: 1.0,
            band_z: 3.0,
            coincidence_ns: 10 * MINUTE_NS,
            min_points: 10,
            step_ns: MINUTE_NS,
            sparse_min_minutes: 3,
        }
    }
}

/// Shannon entropy, in bits, of the distribution of accessed keys (e.g. prefix hashes): a
/// tenant scanning many distinct prefixes has high entropy.
pub fn access_entropy(keys: &[u64]) -> f64 {
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    let n = sorted.len() as f64;
    let mut entropy = 0.0;
    for run in sorted.chunk_by(|a, b| a == b) {
        let p = run.len() as f64 / n;
        entropy -= p * p.log2();
    }
    entropy
}

/// Standard error of a sample median in units of σ/√n (normal data): √(π/2).
const MEDIAN_SE_FACTOR: f64 = 1.253_314_137_315_500_3;

/// A robust shift of the current median from the baseline median, and its onset.
struct Shift {
    before: f64,
    after: f64,
    scale: f64,
    onset_ns: i64,
}

fn robust_shift(
    points: &[(i64, f64)],
    split: i64,
    min_points: usize,
    sign: f64,
    min_shift: f64,
    band_z: f64,
    series: &'static str,
) -> Result<Option<Shift>, DetectError> {
    let (base, cur): (Points, Points) = points.iter().partition(|p| p.0 < split);
    if base.len() < min_points {
        return Err(DetectError::TooShort {
            series,
            needed: min_points,
            got: base.len(),
        });
    }
    if cur.len() < min_points.clamp(1, 5) {
        return Ok(None);
    }
    let base_values = values(&base);
    let before = median(&base_values).unwrap_or(0.0);
    let after = median(&values(&cur)).unwrap_or(0.0);
    let scale = (MAD_TO_SIGMA * mad(&base_values).unwrap_or(0.0)).max(1e-3);
    let shift = sign * (after - before);
    // A sustained shift is judged against the uncertainty of the two medians (standard error
    // of a median ≈ √(π/2)·σ/√n), not against one point's noise: ten minutes at a new level
    // tell far more than one minute beyond a 3σ band (a victim served a few requests a minute
    // has a noisy per-minute hit rate, yet its level shift is plain).
    let n_base = base.len() as f64;
    let n_cur = cur.len() as f64;
    let median_se = MEDIAN_SE_FACTOR * scale * (1.0 / n_base + 1.0 / n_cur).sqrt();
    if shift < min_shift || shift < band_z * median_se {
        return Ok(None);
    }
    // onset: the first current point past the midpoint of the two levels that the next
    // points confirm
    let band = before + sign * shift / 2.0;
    let outside = |v: f64| sign * (v - band) > 0.0;
    let onset_ns = (0..cur.len())
        .find(|&i| {
            let next: Vec<f64> = cur[i..(i + 5).min(cur.len())].iter().map(|p| p.1).collect();
            outside(cur[i].1) && median(&next).is_some_and(outside)
        })
        .map_or(cur[0].0, |i| cur[i].0);
    Ok(Some(Shift {
        before,
        after,
        scale,
        onset_ns,
    }))
}

/// A sparse tenant's minutes are in time order, hit rates in 0..=1, prompt tokens ≥ 0.
fn check_cache_minutes(minutes: &[CacheMinute]) -> Result<(), DetectError> {
    check_sorted("sparse_minutes", minutes.iter().map(|m| m.ts_ns))?;
    for (index, m) in minutes.iter().enumerate() {
        let bad = |value: f64, expected: &'static str| DetectError::OutOfRange {
            series: "sparse_minutes",
            index,
            value,
            expected,
        };
        if !(0.0..=1.0).contains(&m.hit_rate) {
            return Err(bad(m.hit_rate, "hit rate in 0..=1 (a fraction)"));
        }
        if !(m.input_tokens.is_finite() && m.input_tokens >= 0.0) {
            return Err(bad(m.input_tokens, "input tokens ≥ 0"));
        }
    }
    Ok(())
}

/// A token-weighted drop of a sparse tenant's hit rate: the baseline's minutes against those from
/// each current minute on (at least [`CachePollutionParams::sparse_min_minutes`]: a cache is
/// evicted over minutes, so a victim served a few requests a minute may keep hitting for a while
/// after the polluter starts). The two weighted means differ by at least `min_hit_rate_drop` and
/// `band_z` standard errors (each side's from the spread of its minutes, the current side's not
/// below what the baseline's spread gives it); of the onsets that pass, the one with the largest
/// z. `before` and `after` are the weighted means, `scale` the baseline's spread of minutes.
fn weighted_drop(
    minutes: &[CacheMinute],
    split: i64,
    params: &CachePollutionParams,
) -> Option<Shift> {
    let used: Vec<&CacheMinute> = minutes.iter().filter(|m| m.input_tokens > 0.0).collect();
    let (base, cur): (Vec<&CacheMinute>, Vec<&CacheMinute>) =
        used.into_iter().partition(|m| m.ts_ns < split);
    if base.len() < params.min_points.max(1) {
        return None;
    }
    // weighted mean, its standard error (sandwich, floored by `spread` minutes of that weight)
    // and the spread of the side's minutes about the mean
    let weighted = |side: &[&CacheMinute], spread: f64| {
        let total: f64 = side.iter().map(|m| m.input_tokens).sum();
        let mean = side
            .iter()
            .map(|m| m.input_tokens * m.hit_rate)
            .sum::<f64>()
            / total;
        let squares = |f: &dyn Fn(&CacheMinute) -> f64| {
            side.iter()
                .map(|m| f(m) * (m.hit_rate - mean).powi(2))
                .sum::<f64>()
        };
        let sandwich = squares(&|m| m.input_tokens.powi(2)).sqrt() / total;
        let effective = side
            .iter()
            .map(|m| m.input_tokens.powi(2))
            .sum::<f64>()
            .sqrt()
            / total;
        let sd = (squares(&|m| m.input_tokens) / total).sqrt();
        (mean, sandwich.max(spread * effective), sd)
    };
    let (before, se_before, sd) = weighted(&base, 0.0);
    let mut best: Option<(f64, f64, i64)> = None;
    for from in 0..cur.len() {
        if cur.len() - from < params.sparse_min_minutes.max(1) {
            break;
        }
        let (after, se_after, _) = weighted(&cur[from..], sd);
        let drop = before - after;
        let z = drop / se_before.hypot(se_after).max(1e-9);
        if drop >= params.min_hit_rate_drop
            && z >= params.band_z
            && best.is_none_or(|(best_z, _, _)| z > best_z)
        {
            best = Some((z, after, cur[from].ts_ns));
        }
    }
    best.map(|(_, after, onset_ns)| Shift {
        before,
        after,
        scale: sd.max(1e-3),
        onset_ns,
    })
}

/// Distinct blocks a tenant's misses grew by, from its access-entropy shift (entropy of a
/// uniform access over `n` blocks is log2 n): 2^after − 2^before.
fn blocks_added(rise: &Shift) -> f64 {
    rise.after.exp2() - rise.before.exp2()
}

/// Cache pollution: a victim tenant's hit rate drops (median shift of its steps, or for a sparse
/// tenant a token-weighted drop from an onset on, see [`TenantCacheSeries::sparse_minutes`])
/// while another tenant's access entropy rises, with onsets within `coincidence_ns`. One finding per victim; its polluter is, among
/// the tenants whose entropy rose, the one whose distinct missed blocks grew most
/// ([`blocks_added`]: victims' entropy rises too, as they miss more); a polluter is nobody's
/// victim. Magnitude is the hit-rate change (negative).
pub fn cache_pollution(
    tenants: &[TenantCacheSeries<'_>],
    current_from_ns: i64,
    params: &CachePollutionParams,
) -> Result<Vec<Finding>, DetectError> {
    let mut drops = Vec::new();
    let mut rises = Vec::new();
    let mut hit_series = Vec::new();
    let mut entropy_series = Vec::new();
    for tenant in tenants {
        check_range("hit_rate", tenant.hit_rate, 0.0, 1.0, "0..=1 (a fraction)")?;
        let hits = finite("hit_rate", tenant.hit_rate)?;
        let entropy = finite("access_entropy_bits", tenant.access_entropy_bits)?;
        check_cache_minutes(tenant.sparse_minutes)?;
        let drop = robust_shift(
            &hits,
            current_from_ns,
            params.min_points,
            -1.0,
            params.min_hit_rate_drop,
            params.band_z,
            "hit_rate baseline",
        )?;
        drops.push(match drop {
            None if !tenant.sparse_minutes.is_empty() => {
                weighted_drop(tenant.sparse_minutes, current_from_ns, params)
            }
            drop => drop,
        });
        rises.push(if entropy.is_empty() {
            None
        } else {
            robust_shift(
                &entropy,
                current_from_ns,
                params.min_points,
                1.0,
                params.min_entropy_rise_bits,
                params.band_z,
                "access_entropy_bits baseline",
            )?
        });
        hit_series.push(hits);
        entropy_series.push(entropy);
    }
    let mut findings = Vec::new();
    for (victim, drop) in drops.iter().enumerate() {
        let Some(drop) = drop else { continue };
        // Victims miss more too, so their entropy rises with the polluter's: the polluter is
        // the one whose distinct missed blocks (2^entropy) grew most, which is what evicts.
        let polluter = rises
            .iter()
            .enumerate()
            .filter(|(other, _)| *other != victim)
            .filter_map(|(other, rise)| rise.as_ref().map(|r| (other, r)))
            .filter(|(_, rise)| (rise.onset_ns - drop.onset_ns).abs() <= params.coincidence_ns)
            .max_by(|a, b| blocks_added(a.1).total_cmp(&blocks_added(b.1)));
        let Some((polluter, rise)) = polluter else {
            continue;
        };
        let (xs, ys) = align(
            &hit_series[victim],
            &entropy_series[polluter],
            params.step_ns,
        );
        let rho = spearman(&xs, &ys);
        let hit_change = drop.after - drop.before;
        let z = -hit_change / drop.scale;
        let mut evidence = vec![
            ev("victim_hit_rate_before", drop.before),
            ev("victim_hit_rate_after", drop.after),
            ev("victim_hit_rate_sigma", drop.scale),
            ev("polluter_entropy_before_bits", rise.before),
            ev("polluter_entropy_after_bits", rise.after),
            ev(
                "onset_gap_seconds",
                (rise.onset_ns - drop.onset_ns) as f64 / 1e9,
            ),
            ev("polluter_blocks_added", blocks_added(rise)),
        ];
        if let Some(rho) = rho {
            evidence.push(ev("hit_rate_entropy_spearman", rho));
        }
        findings.push(Finding {
            kind: SignalKind::CachePollution,
            subject: subject(&[
                ("tenant", tenants[victim].tenant),
                ("polluter", tenants[polluter].tenant),
            ]),
            onset_ns: drop.onset_ns.min(rise.onset_ns),
            window_start_ns: current_from_ns,
            window_end_ns: hit_series[victim].last().map_or(current_from_ns, |p| p.0),
            magnitude: hit_change,
            relative_change: (drop.before > 0.0).then(|| hit_change / drop.before),
            score: z,
            confidence: squash(z / params.band_z, 1.0),
            evidence,
            detail: format!(
                "tenant {} prefix-cache hit rate fell {:.2} → {:.2} as tenant {} access entropy rose {:.1} → {:.1} bits",
                tenants[victim].tenant,
                drop.before,
                drop.after,
                tenants[polluter].tenant,
                rise.before,
                rise.after
            ),
        });
    }
    // A polluter is no one's victim: its own hit rate may fall as it floods the cache.
    let polluters: HashSet<String> = findings
        .iter()
        .filter_map(|f| f.subject.iter().find(|(k, _)| k == "polluter"))
        .map(|(_, v)| v.clone())
        .collect();
    findings.retain(|f| {
        f.subject
            .iter()
            .find(|(k, _)| k == "tenant")
            .is_none_or(|(_, v)| !polluters.contains(v))
    });
    Ok(findings)
}

// ------------------------------------------------------------------------ proportions

/// Per-step counts of a proportion: `hits` of `total` (truncated of finished requests; orphan
/// spans of spans).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountSample {
    pub ts_ns: i64,
    pub hits: u64,
    pub total: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProportionParams {
    /// One-sided two-proportion z-test p-value needed.
    pub alpha: f64,
    pub min_ratio: f64,
    pub min_abs_increase: f64,
    /// Totals needed: baseline (else an error) and current (else no finding).
    pub min_baseline_total: u64,
    pub min_current_total: u64,
}

impl Default for ProportionParams {
    fn default() -> Self {
        ProportionParams {
            alpha: 1e-4,
            min_ratio: 2.0,
            min_abs_increase: 0.02,
            min_baseline_total: 100,
            min_current_total: 50,
        }
    }
}

fn proportion_surge(
    kind: SignalKind,
    subject_pairs: &[(&str, &str)],
    what: &str,
    counts: &[CountSample],
    current_from_ns: i64,
    params: &ProportionParams,
) -> Result<Option<Finding>, DetectError> {
    check_sorted("counts", counts.iter().map(|c| c.ts_ns))?;
    if let Some(index) = counts.iter().position(|c| c.hits > c.total) {
        return Err(DetectError::OutOfRange {
            series: "counts",
            index,
            value: counts[index].hits as f64,
            expected: "hits ≤ total",
        });
    }
    let (base, cur): (Vec<&CountSample>, Vec<&CountSample>) =
        counts.iter().partition(|c| c.ts_ns < current_from_ns);
    let sum = |side: &[&CountSample]| {
        side.iter().fold((0.0, 0.0), |acc, c| {
            (acc.0 + c.hits as f64, acc.1 + c.total as f64)
        })
    };
    let (h0, n0) = sum(&base);
    let (h1, n1) = sum(&cur);
    if n0 < params.min_baseline_total as f64 || n0 == 0.0 {
        return Err(DetectError::TooShort {
            series: "baseline total",
            needed: params.min_baseline_total.max(1) as usize,
            got: n0 as usize,
        });
    }
    if n1 < params.min_current_total as f64 || n1 == 0.0 {
        return Ok(None);
    }
    let (p0, p1) = (h0 / n0, h1 / n1);
    let pooled = (h0 + h1) / (n0 + n1);
    let se = (pooled * (1.0 - pooled) * (1.0 / n0 + 1.0 / n1)).sqrt();
    let z = if se > 0.0 { (p1 - p0) / se } else { 0.0 };
    let p_value = normal_sf(z);
    let ratio = if p0 > 0.0 { p1 / p0 } else { f64::INFINITY };
    if !(p_value < params.alpha && ratio >= params.min_ratio && p1 - p0 >= params.min_abs_increase)
    {
        return Ok(None);
    }
    let p_ref = p0.max(0.5 / n0);
    let onset = cur
        .iter()
        .find(|c| {
            let n = c.total as f64;
            n > 0.0 && (c.hits as f64 - n * p_ref) / (n * p_ref * (1.0 - p_ref)).sqrt() > 3.0
        })
        .map_or(cur[0].ts_ns, |c| c.ts_ns);
    Ok(Some(Finding {
        kind,
        subject: subject(subject_pairs),
        onset_ns: onset,
        window_start_ns: current_from_ns,
        window_end_ns: cur[cur.len() - 1].ts_ns,
        magnitude: p1 - p0,
        relative_change: (p0 > 0.0).then(|| p1 / p0 - 1.0),
        score: z,
        confidence: 1.0 - p_value,
        evidence: vec![
            ev("baseline_rate", p0),
            ev("current_rate", p1),
            ev("baseline_total", n0),
            ev("current_total", n1),
            ev("z", z),
            ev("p_value", p_value),
        ],
        detail: format!(
            "{what} rate rose from {:.2} % to {:.2} % (z = {z:.1})",
            100.0 * p0,
            100.0 * p1
        ),
    }))
}

/// Truncation surge of one model: finish_reason=length share (`hits` = truncated, `total` =
/// finished requests) jumps. Two-proportion z-test; magnitude is the rate increase.
pub fn truncation_surge(
    model: &str,
    counts: &[CountSample],
    current_from_ns: i64,
    params: &ProportionParams,
) -> Result<Option<Finding>, DetectError> {
    proportion_surge(
        SignalKind::TruncationSurge,
        &[("model", model)],
        "finish_reason=length",
        counts,
        current_from_ns,
        params,
    )
}

/// Trace context loss of one service version: the share of spans whose parent is missing
/// (`hits` = orphans from [`count_orphans`], `total` = spans) jumps.
pub fn orphan_spans(
    service: &str,
    version: &str,
    counts: &[CountSample],
    current_from_ns: i64,
    params: &ProportionParams,
) -> Result<Option<Finding>, DetectError> {
    context_loss(
        &[("service", service), ("version", version)],
        counts,
        current_from_ns,
        params,
    )
}

/// Trace context loss of any group of spans (a service, a build, a pod: `subject_pairs`): the
/// share of its spans that lost their trace context (`hits`: orphans, or entry spans whose trace
/// no longer reaches another service) jumps. Two-proportion z-test as [`truncation_surge`].
pub fn context_loss(
    subject_pairs: &[(&str, &str)],
    counts: &[CountSample],
    current_from_ns: i64,
    params: &ProportionParams,
) -> Result<Option<Finding>, DetectError> {
    proportion_surge(
        SignalKind::TraceContextLoss,
        subject_pairs,
        "orphan span",
        counts,
        current_from_ns,
        params,
    )
}

/// A span's identity and parent link.
#[derive(Debug, Clone, Copy)]
pub struct SpanRef<'a> {
    pub trace_id: &'a str,
    pub span_id: &'a str,
    /// `None` or empty for a root span.
    pub parent_span_id: Option<&'a str>,
}

/// (orphans, total): spans naming a parent that is not among `spans` of the same trace.
pub fn count_orphans(spans: &[SpanRef<'_>]) -> (u64, u64) {
    let known: HashSet<(&str, &str)> = spans.iter().map(|s| (s.trace_id, s.span_id)).collect();
    let orphans = spans
        .iter()
        .filter(|s| {
            s.parent_span_id
                .is_some_and(|parent| !parent.is_empty() && !known.contains(&(s.trace_id, parent)))
        })
        .count();
    (orphans as u64, spans.len() as u64)
}

// ------------------------------------------------------------------------ resonance

/// The three series of one subject (e.g. a model) whose joint rise is "resonance".
#[derive(Debug, Clone, Copy)]
pub struct ResonanceInput<'a> {
    pub subject: &'a [(&'a str, &'a str)],
    pub injection_score: &'a [(i64, f64)],
    pub rejection_failures: &'a [(i64, f64)],
    pub spec_rollbacks: &'a [(i64, f64)],
    pub current_from_ns: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ResonanceParams {
    /// Used for each series; `direction` and `baseline_end_ns` are overridden (up, the split).
    pub detect: DetectParams,
    pub common_window_ns: i64,
    pub min_correlation: f64,
}

impl Default for ResonanceParams {
    fn default() -> Self {
        ResonanceParams {
            detect: DetectParams::default(),
            common_window_ns: 10 * MINUTE_NS,
            min_correlation: 0.5,
        }
    }
}

/// Resonance: injection score, rejection-sampling failures and spec-decode rollbacks all rise
/// ([`detect_change`], upward) with onsets within `common_window_ns`, and every pairwise
/// Spearman ρ over a window balanced around the onset (as long before as after) is at least
/// `min_correlation`. Magnitude: the injection-score shift; score: the smallest peak z.
pub fn resonance(
    input: &ResonanceInput<'_>,
    params: &ResonanceParams,
) -> Result<Option<Finding>, DetectError> {
    let mut detect = params.detect.clone();
    detect.direction = Direction::Up;
    detect.baseline_end_ns = Some(input.current_from_ns);
    let series = [
        input.injection_score,
        input.rejection_failures,
        input.spec_rollbacks,
    ];
    let mut changes = Vec::new();
    for s in series {
        match detect_change(s, &detect)? {
            Some(change) => changes.push(change),
            None => return Ok(None),
        }
    }
    let onset = changes.iter().map(|c| c.onset_ns).min().unwrap_or(0);
    let latest = changes.iter().map(|c| c.onset_ns).max().unwrap_or(0);
    if latest - onset > params.common_window_ns {
        return Ok(None);
    }
    let end = series
        .iter()
        .filter_map(|s| s.last().map(|p| p.0))
        .min()
        .unwrap_or(onset);
    let start = onset - (end - onset).max(detect.step_ns * detect.confirm_points as i64);
    let clip = |s: &[(i64, f64)]| -> Vec<(i64, f64)> {
        s.iter()
            .copied()
            .filter(|p| p.0 >= start && p.0 <= end)
            .collect()
    };
    let clipped: Vec<Vec<(i64, f64)>> = series.iter().map(|s| clip(s)).collect();
    let mut rhos = Vec::new();
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        let (xs, ys) = align(&clipped[a], &clipped[b], detect.step_ns);
        rhos.push(spearman(&xs, &ys).unwrap_or(0.0));
    }
    let min_rho = rhos.iter().copied().fold(f64::INFINITY, f64::min);
    if min_rho < params.min_correlation {
        return Ok(None);
    }
    let min_z = changes
        .iter()
        .map(|c| c.peak_z)
        .fold(f64::INFINITY, f64::min);
    let shifts = ["injection_shift", "rejection_shift", "rollback_shift"];
    let zs = ["injection_peak_z", "rejection_peak_z", "rollback_peak_z"];
    let mut evidence = Vec::new();
    for (i, change) in changes.iter().enumerate() {
        evidence.push(ev(shifts[i], change.shift));
        evidence.push(ev(zs[i], change.peak_z));
    }
    evidence.push(ev("onset_spread_seconds", (latest - onset) as f64 / 1e9));
    evidence.push(ev("spearman_injection_rejection", rhos[0]));
    evidence.push(ev("spearman_injection_rollback", rhos[1]));
    evidence.push(ev("spearman_rejection_rollback", rhos[2]));
    let sustained = changes.iter().all(|c| c.kind == ChangeKind::LevelShift);
    let injection = &changes[0];
    Ok(Some(Finding {
        kind: SignalKind::Resonance,
        subject: input
            .subject
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        onset_ns: onset,
        window_start_ns: onset,
        window_end_ns: end,
        magnitude: injection.shift,
        relative_change: (injection.baseline_median != 0.0)
            .then(|| injection.shift / injection.baseline_median.abs()),
        score: min_z,
        confidence: squash(min_rho, 0.5) * squash(min_z / injection.threshold_z, 1.0),
        evidence,
        detail: format!(
            "injection score, rejection-sampling failures and spec-decode rollbacks rose together{} (onsets within {:.0} s, min rank correlation {min_rho:.2})",
            if sustained { " and stayed up" } else { "" },
            (latest - onset) as f64 / 1e9
        ),
    }))
}

// ------------------------------------------------------------------------ error bursts

#[derive(Debug, Clone, PartialEq)]
pub struct ErrorBurstParams {
    pub alpha: f64,
    pub min_ratio: f64,
    pub min_excess: f64,
    pub min_baseline_points: usize,
    /// Pseudo-count added to the baseline errors.
    pub prior_count: f64,
    /// Per-step tail probability that marks a step as part of the burst.
    pub burst_step_p: f64,
}

impl Default for ErrorBurstParams {
    fn default() -> Self {
        ErrorBurstParams {
            alpha: 1e-4,
            min_ratio: 2.0,
            min_excess: 5.0,
            min_baseline_points: 10,
            prior_count: 0.5,
            burst_step_p: 0.01,
        }
    }
}

/// Error burst: Poisson tail of each current step's error count given the baseline rate. When
/// the most extreme step passes Bonferroni over the current steps, the burst window is the run
/// of steps around it whose tail p < `burst_step_p`; otherwise the whole current window. Fires
/// when the window's total has a Poisson tail p < `alpha`, ratio ≥ `min_ratio` and excess ≥
/// `min_excess`. Magnitude: observed − expected errors in the window.
pub fn error_burst(
    subject_pairs: &[(&str, &str)],
    errors: &[(i64, f64)],
    current_from_ns: i64,
    params: &ErrorBurstParams,
) -> Result<Option<Finding>, DetectError> {
    if !(params.alpha > 0.0 && params.alpha < 1.0) {
        return Err(bad_param("alpha", "must lie in (0, 1)"));
    }
    check_range("errors", errors, 0.0, f64::INFINITY, "counts ≥ 0")?;
    let points = finite("errors", errors)?;
    let (base, cur): (Points, Points) = points.iter().partition(|p| p.0 < current_from_ns);
    if base.len() < params.min_baseline_points {
        return Err(DetectError::TooShort {
            series: "errors baseline",
            needed: params.min_baseline_points,
            got: base.len(),
        });
    }
    if cur.is_empty() {
        return Ok(None);
    }
    let rate = (base.iter().map(|p| p.1).sum::<f64>() + params.prior_count) / base.len() as f64;
    let step_p: Vec<f64> = cur.iter().map(|p| poisson_sf(p.1, rate)).collect();
    let (peak, min_p) = step_p
        .iter()
        .copied()
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0, 1.0));
    let m = cur.len() as f64;
    let (first, last) = if min_p * m < params.alpha {
        let mut first = peak;
        while first > 0 && step_p[first - 1] < params.burst_step_p {
            first -= 1;
        }
        let mut last = peak;
        while last + 1 < cur.len() && step_p[last + 1] < params.burst_step_p {
            last += 1;
        }
        (first, last)
    } else {
        (0, cur.len() - 1)
    };
    let observed: f64 = cur[first..=last].iter().map(|p| p.1).sum();
    let expected = rate * (last - first + 1) as f64;
    let p_window = poisson_sf(observed, expected);
    let ratio = observed / expected;
    if p_window.is_nan()
        || p_window >= params.alpha
        || ratio < params.min_ratio
        || observed - expected < params.min_excess
    {
        return Ok(None);
    }
    let onset = cur[first].0;
    Ok(Some(Finding {
        kind: SignalKind::ErrorBurst,
        subject: subject(subject_pairs),
        onset_ns: onset,
        window_start_ns: onset,
        window_end_ns: cur[last].0,
        magnitude: observed - expected,
        relative_change: Some(ratio - 1.0),
        score: ratio,
        confidence: 1.0 - p_window,
        evidence: vec![
            ev("baseline_rate_per_step", rate),
            ev("observed", observed),
            ev("expected", expected),
            ev("p_value", p_window),
            ev("min_step_p_value", min_p),
            ev("burst_steps", (last - first + 1) as f64),
        ],
        detail: format!(
            "{observed:.0} errors in {} steps vs {expected:.1} expected (×{ratio:.1}, p = {p_window:.1e})",
            last - first + 1
        ),
    }))
}
