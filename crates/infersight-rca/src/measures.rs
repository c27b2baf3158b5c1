//! The measures localization counts per leaf (requests over the baseline p95 of a latency SLI,
//! errors, truncations, prefix-cache misses), their fleet-level significance, and the per-minute
//! fleet cells the onset detector reads.

use infersight_analytics::detect::{ChangeKind, DetectParams, Direction, detect_change};
use infersight_rollup::{Cell, LatencySli, Rollup, combination_totals, merge_range};

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
    /// For a latency measure, the threshold an event is over (the baseline p95, ms).
    pub(crate) threshold_ms: Option<f64>,
}

impl Measure {
    /// What changed, in words with numbers that differ and their units: for a latency measure
    /// the share of requests over the baseline p95 (what was localized) and the p99 when it
    /// moved visibly; for a rate, the rate in percent.
    pub(crate) fn change_text(&self, baseline: &Cell, incident: &Cell) -> String {
        let share = |c: &Cell| {
            let d = (self.denominator_of)(c);
            if d > 0.0 {
                (self.event_of)(c) / d * 100.0
            } else {
                0.0
            }
        };
        let (before, after) = (share(baseline), share(incident));
        match self.threshold_ms {
            Some(threshold) => {
                let (p99_before, p99_after) = self.fleet_values;
                let p99 = if format!("{p99_before:.0}") != format!("{p99_after:.0}") {
                    format!(", p99 {p99_before:.0} ms → {p99_after:.0} ms")
                } else {
                    String::new()
                };
                format!(
                    "{}: requests over {threshold:.0} ms (the baseline p95) rose from {before:.1} % to {after:.1} %{p99}",
                    self.name
                )
            }
            None => format!("{} rose from {before:.2} % to {after:.2} %", self.name),
        }
    }
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
        threshold_ms: Some(threshold),
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
        threshold_ms: None,
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
        threshold_ms: None,
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
        threshold_ms: None,
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
        let params = rise_params(reference_end);
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

/// Most slices whose own series the onset detector reads when no fleet series changed.
pub(crate) const MAX_ONSET_SLICES: usize = 64;
/// At most this many slice onsets are tried, most significant first.
pub(crate) const MAX_SLICE_ONSETS: usize = 5;
/// A slice must carry at least this share of the reference's requests to get its own series.
pub(crate) const MIN_ONSET_SLICE_SHARE: f64 = 0.01;

/// Per-minute counts of one slice (one value of one dimension).
#[derive(Clone, Default)]
struct SliceMinute {
    requests: f64,
    errors: f64,
    truncated: f64,
    /// Requests over the fleet's reference p95 of TTFT, e2e and queue time, and how many had
    /// each.
    over: [f64; 3],
    counted: [f64; 3],
}

/// The onset of a change confined to a slice too small to move any fleet series (one version,
/// one pod, one model: a few percent of the traffic): the same series as [`choose_onset`], per
/// value of every rollup dimension that carries at least [`MIN_ONSET_SLICE_SHARE`] of the
/// reference's requests (the [`MAX_ONSET_SLICES`] largest), over the fleet's reference
/// thresholds. Only a confirmed level shift counts (many series are read, so a lone spike is
/// more likely chance); the [`MAX_SLICE_ONSETS`] most significant, best first, each named
/// `sli of dim=value` (the caller keeps the first a symptom confirms).
pub(crate) fn choose_slice_onsets(parts: &[&Rollup], first: i64, end: i64) -> Vec<(i64, String)> {
    let reference_end = first + (end - first) / 3;
    let reference = merge_range(parts, &[], Some(first), Some(reference_end));
    let slis = [LatencySli::Ttft, LatencySli::E2e, LatencySli::Queue];
    let thresholds: Vec<Option<f64>> = slis
        .iter()
        .map(|s| reference.sketch(*s).quantile(THRESHOLD_QUANTILE))
        .collect();
    let Some(slices) = onset_slices(parts, first, reference_end, reference.requests) else {
        return Vec::new();
    };
    let index: std::collections::HashMap<&(usize, String), usize> =
        slices.iter().enumerate().map(|(i, s)| (s, i)).collect();
    let mut series: Vec<Vec<(i64, SliceMinute)>> = vec![Vec::new(); slices.len()];
    let mut minute = first;
    while minute < end {
        let (_, combos) = combination_totals(parts, Some(minute), Some(minute + MINUTE_NS));
        let mut counts: Vec<Option<SliceMinute>> = vec![None; slices.len()];
        for (values, cell) in &combos {
            let mut over = [0.0; 3];
            let mut counted = [0.0; 3];
            for (k, sli) in slis.iter().enumerate() {
                let sketch = cell.sketch(*sli);
                counted[k] = sketch.count() as f64;
                if let Some(t) = thresholds[k] {
                    over[k] = (sketch.count() - sketch.count_at_most(t)) as f64;
                }
            }
            for (d, value) in values.iter().enumerate() {
                let Some(&i) = index.get(&(d, value.clone())) else {
                    continue;
                };
                let slot = counts[i].get_or_insert_with(SliceMinute::default);
                slot.requests += cell.requests as f64;
                slot.errors += cell.errors as f64;
                slot.truncated += cell.truncated as f64;
                for k in 0..3 {
                    slot.over[k] += over[k];
                    slot.counted[k] += counted[k];
                }
            }
        }
        for (i, count) in counts.into_iter().enumerate() {
            if let Some(count) = count.filter(|c| c.requests > 0.0) {
                series[i].push((minute, count));
            }
        }
        minute += MINUTE_NS;
    }
    let names = parts
        .first()
        .map(|p| p.dimensions().to_vec())
        .unwrap_or_default();
    let mut found: Vec<(f64, i64, String)> = Vec::new();
    for ((dim, value), points) in slices.iter().zip(&series) {
        let ratio = |num: fn(&SliceMinute) -> (f64, f64)| -> Vec<(i64, f64)> {
            points
                .iter()
                .filter_map(|(m, c)| {
                    let (n, d) = num(c);
                    (d > 0.0).then(|| (*m, n / d))
                })
                .collect()
        };
        let candidates: [(&str, Vec<(i64, f64)>); 5] = [
            ("ttft", ratio(|c| (c.over[0], c.counted[0]))),
            ("e2e", ratio(|c| (c.over[1], c.counted[1]))),
            ("queue", ratio(|c| (c.over[2], c.counted[2]))),
            ("error_rate", ratio(|c| (c.errors, c.requests))),
            ("abort_rate", ratio(|c| (c.truncated, c.requests))),
        ];
        for (sli, points) in candidates {
            let Some((z, onset)) = level_shift(&points, reference_end) else {
                continue;
            };
            let dim_name = names.get(*dim).map_or("?", String::as_str);
            found.push((z, onset, format!("{sli} of {dim_name}={value}")));
        }
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.2.cmp(&b.2)));
    found
        .into_iter()
        .take(MAX_SLICE_ONSETS)
        .map(|(_, onset, name)| (onset, name))
        .collect()
}

/// The slices (dimension index, value) that get their own onset series.
fn onset_slices(
    parts: &[&Rollup],
    first: i64,
    reference_end: i64,
    reference_requests: u64,
) -> Option<Vec<(usize, String)>> {
    if reference_requests == 0 {
        return None;
    }
    let (_, combos) = combination_totals(parts, Some(first), Some(reference_end));
    let mut requests: std::collections::BTreeMap<(usize, String), u64> =
        std::collections::BTreeMap::new();
    for (values, cell) in &combos {
        for (d, value) in values.iter().enumerate() {
            *requests.entry((d, value.clone())).or_default() += cell.requests;
        }
    }
    let mut slices: Vec<((usize, String), u64)> = requests
        .into_iter()
        .filter(|(_, n)| {
            *n < reference_requests
                && *n as f64 >= MIN_ONSET_SLICE_SHARE * reference_requests as f64
        })
        .collect();
    slices.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    slices.truncate(MAX_ONSET_SLICES);
    (!slices.is_empty()).then(|| slices.into_iter().map(|(s, _)| s).collect())
}

/// A confirmed upward level shift of `points` against the data before `reference_end`:
/// `(peak z, onset)`.
fn level_shift(points: &[(i64, f64)], reference_end: i64) -> Option<(f64, i64)> {
    if points.len() < 20 {
        return None;
    }
    let params = rise_params(reference_end);
    let change = detect_change(points, &params).ok()??;
    (change.kind == ChangeKind::LevelShift && change.confirmed)
        .then_some((change.peak_z, change.onset_ns))
}

/// How a measure's per-minute series is searched for a rise after `reference_end`. Daily load
/// cycles: the detector compares each minute with the same time of day once the reference holds
/// two days (with less, the flat baseline is all there is).
fn rise_params(reference_end: i64) -> DetectParams {
    DetectParams {
        direction: Direction::Up,
        baseline_end_ns: Some(reference_end),
        min_baseline_points: 10,
        risk_q: 1e-5,
        period_ns: Some(DAY_NS),
        ..DetectParams::default()
    }
}
