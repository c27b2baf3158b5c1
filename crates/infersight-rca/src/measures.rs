//! The measures localization counts per leaf (requests over the baseline p95 of a latency SLI,
//! errors, truncations, prefix-cache misses), their fleet-level significance, and the per-minute
//! fleet cells the onset detector reads.

use infersight_analytics::detect::{ChangeKind, DetectParams, Direction, detect_change};
use infersight_rollup::{Cell, LatencySli, Rollup, merge_range};

use crate::{DAY_NS, MINUTE_NS, THRESHOLD_QUANTILE};

/// One countable measure per leaf: incident and baseline "events" per unit (requests, or
/// prompt tokens for the cache measure).
pub(crate) struct Measure {
    pub(crate) name: String,
    /// Latency measures localize only combinations that have a baseline, and set aside demand
    /// shifts.
    pub(crate) latency: bool,
    /// An explanatory measure is never the symptom: it is localized only when a latency
    /// measure is one, to say where the latency came from.
    pub(crate) explanatory: bool,
    /// What an event is, for evidence text.
    pub(crate) event: String,
    /// What the events are counted out of, for evidence text ("requests", "prompt tokens").
    pub(crate) unit: &'static str,
    pub(crate) event_of: Box<dyn Fn(&Cell) -> f64 + Send + Sync>,
    pub(crate) denominator_of: Box<dyn Fn(&Cell) -> f64 + Send + Sync>,
    /// Which leaves the measure can say anything about, from their baseline cell.
    pub(crate) eligible: fn(&Cell) -> bool,
    /// The fleet SLI value shown as the symptom (baseline, incident).
    pub(crate) fleet_values: (f64, f64),
}

pub(crate) fn latency_measure(
    sli: LatencySli,
    baseline: &Cell,
    incident: &Cell,
) -> Option<Measure> {
    let sketch = baseline.sketch(sli);
    let threshold = sketch.quantile(THRESHOLD_QUANTILE)?;
    let p99 = |c: &Cell| c.sketch(sli).quantile(0.99).unwrap_or(0.0);
    Some(Measure {
        name: sli.name().to_string(),
        latency: true,
        explanatory: false,
        event: format!("{} over {threshold:.0} ms (baseline p95)", sli.column()),
        unit: "requests",
        event_of: Box::new(move |c: &Cell| {
            let s = c.sketch(sli);
            (s.count() - s.count_at_most(threshold)) as f64
        }),
        denominator_of: Box::new(requests_of),
        // a latency regression needs a baseline: combinations new in the incident (a tenant
        // that just started, say) have no latency of their own to regress from, and their
        // excess would otherwise be blamed on them
        eligible: |base| base.requests > 0,
        fleet_values: (p99(baseline), p99(incident)),
    })
}

pub(crate) fn requests_of(c: &Cell) -> f64 {
    c.requests as f64
}

/// Prefix-cache misses: prompt tokens not served from the prefix cache, per prompt token. No
/// user sees it, but it says where a TTFT rise came from when caching stopped working for a
/// slice (another tenant's scans evicting its system prompt): the same requests now prefill
/// what used to be cached. Per prompt token, so a tenant that merely sends longer prompts does
/// not stand out. Explanatory only; absent when the baseline cached nothing.
pub(crate) fn cache_miss_measure(baseline: &Cell, incident: &Cell) -> Option<Measure> {
    if baseline.cached_tokens == 0 || baseline.input_tokens == 0 {
        return None;
    }
    let miss = |c: &Cell| {
        rate(
            c.input_tokens.saturating_sub(c.cached_tokens),
            c.input_tokens,
        )
    };
    Some(Measure {
        name: "prefix_cache_miss_rate".into(),
        latency: false,
        explanatory: true,
        event: "prompt tokens not served from the prefix cache".into(),
        unit: "prompt tokens",
        event_of: Box::new(|c: &Cell| c.input_tokens.saturating_sub(c.cached_tokens) as f64),
        denominator_of: Box::new(|c: &Cell| c.input_tokens as f64),
        // only leaves that were served from the prefix cache have hits to lose; the rest
        // (workers without prefix caching) would make the noise model think the data exact
        eligible: |base| base.cached_tokens > 0,
        fleet_values: (miss(baseline), miss(incident)),
    })
}

pub(crate) fn rate(n: u64, d: u64) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

pub(crate) fn measures(baseline: &Cell, incident: &Cell) -> Vec<Measure> {
    let mut out: Vec<Measure> = [LatencySli::Ttft, LatencySli::E2e, LatencySli::Queue]
        .into_iter()
        .filter_map(|s| latency_measure(s, baseline, incident))
        .collect();
    out.push(Measure {
        name: "error_rate".into(),
        latency: false,
        explanatory: false,
        event: "failed requests".into(),
        unit: "requests",
        event_of: Box::new(|c: &Cell| c.errors as f64),
        denominator_of: Box::new(requests_of),
        eligible: |_| true,
        fleet_values: (
            rate(baseline.errors, baseline.requests),
            rate(incident.errors, incident.requests),
        ),
    });
    out.push(Measure {
        name: "abort_rate".into(),
        latency: false,
        explanatory: false,
        event: "requests stopped at the token limit (finish_reason=length)".into(),
        unit: "requests",
        event_of: Box::new(|c: &Cell| c.truncated as f64),
        denominator_of: Box::new(requests_of),
        eligible: |_| true,
        fleet_values: (
            rate(baseline.truncated, baseline.requests),
            rate(incident.truncated, incident.requests),
        ),
    });
    out.extend(cache_miss_measure(baseline, incident));
    out
}

/// Fleet-level Poisson z of the incident's events against the baseline rate (0 for an
/// explanatory measure: its units are not Poisson events, and it is never the symptom).
pub(crate) fn fleet_z(measure: &Measure, baseline: &Cell, incident: &Cell) -> f64 {
    if measure.explanatory {
        return 0.0;
    }
    let base_rate = ((measure.event_of)(baseline) + 1.0) / (baseline.requests as f64 + 1.0);
    let expected = base_rate * incident.requests as f64;
    ((measure.event_of)(incident) - expected) / (expected + 1.0).sqrt()
}

/// Per-minute fleet cells from `first` to `end` (whole minutes).
pub(crate) fn minute_cells(parts: &[&Rollup], first: i64, end: i64) -> Vec<(i64, Cell)> {
    let mut out = Vec::new();
    let mut minute = first;
    while minute < end {
        let cell = merge_range(parts, &[], Some(minute), Some(minute + MINUTE_NS));
        if cell.requests > 0 {
            out.push((minute, cell));
        }
        minute += MINUTE_NS;
    }
    out
}

/// Chooses the incident onset from the fleet's per-minute SLIs (see the module doc): the share
/// of requests over the reference p95 of TTFT, e2e and queue time, the error rate and the abort
/// rate — proportions, far steadier minute to minute than a per-minute p99 — each against the
/// first third of the data. The most significant confirmed level shift wins, else the most
/// significant spike.
pub(crate) fn choose_onset(parts: &[&Rollup], first: i64, end: i64) -> Option<(i64, String)> {
    let cells = minute_cells(parts, first, end);
    if cells.len() < 20 {
        return None;
    }
    let reference_end = first + (end - first) / 3;
    let reference = merge_range(parts, &[], Some(first), Some(reference_end));
    let mut series: Vec<(String, Vec<(i64, f64)>)> = Vec::new();
    for sli in [LatencySli::Ttft, LatencySli::E2e, LatencySli::Queue] {
        let Some(threshold) = reference.sketch(sli).quantile(THRESHOLD_QUANTILE) else {
            continue;
        };
        let points: Vec<(i64, f64)> = cells
            .iter()
            .filter(|(_, c)| c.sketch(sli).count() > 0)
            .map(|(m, c)| {
                let s = c.sketch(sli);
                (
                    *m,
                    (s.count() - s.count_at_most(threshold)) as f64 / s.count() as f64,
                )
            })
            .collect();
        series.push((sli.name().to_string(), points));
    }
    series.push((
        "error_rate".into(),
        cells
            .iter()
            .map(|(m, c)| (*m, rate(c.errors, c.requests)))
            .collect(),
    ));
    series.push((
        "abort_rate".into(),
        cells
            .iter()
            .map(|(m, c)| (*m, rate(c.truncated, c.requests)))
            .collect(),
    ));
    let mut best_shift: Option<(f64, i64, String)> = None;
    let mut best_spike: Option<(f64, i64, String)> = None;
    for (name, points) in series {
        if points.len() < 20 {
            continue;
        }
        let params = DetectParams {
            direction: Direction::Up,
            baseline_end_ns: Some(reference_end),
            min_baseline_points: 10,
            risk_q: 1e-5,
            // daily load cycles: the detector compares each minute with the same time of day
            // once the reference holds two days (with less, the flat baseline is all there is)
            period_ns: Some(DAY_NS),
            ..DetectParams::default()
        };
        let Ok(Some(change)) = detect_change(&points, &params) else {
            continue;
        };
        let slot = match change.kind {
            ChangeKind::LevelShift if change.confirmed => &mut best_shift,
            _ => &mut best_spike,
        };
        if slot.as_ref().is_none_or(|(z, _, _)| change.peak_z > *z) {
            *slot = Some((change.peak_z, change.onset_ns, name));
        }
    }
    best_shift
        .or(best_spike)
        .map(|(_, onset, name)| (onset, name))
}
