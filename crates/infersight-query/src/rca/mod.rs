//! The root-cause engine's orchestration, `infersight rca` and `POST /api/v1/rca`: choose the
//! incident window (change detection on the fleet's per-minute SLIs from rollups) and its
//! baseline, find which SLI moved (over-threshold latency, errors, truncations — each a count per
//! leaf, so latency is localized as "requests over the baseline p95", never as a quantile),
//! localize it to attribute combinations (`infersight_analytics::localize`), then gather the
//! resource signals ([`signals`]) and log evidence ([`logs`]) that came with it, and write the
//! JSON contract of DESIGN.md.
//!
//! Decision rules (documented because users act on them):
//! - Window: the most significant confirmed level shift (or else spike) upwards in the fleet's
//!   per-minute share of requests over the reference p95 of TTFT, e2e or queue time, error rate
//!   or abort rate, against the first third of the data as reference (seasonal, by time of day,
//!   once that reference holds two days); incident = onset → end of data, baseline = the hour before the onset (at least
//!   10 minutes). When no fleet series changes (a fault confined to a small slice), the last
//!   third of the data is compared with what came before, so a slice-local fault still surfaces;
//!   the report then says the onset was not detected.
//! - Symptom: each candidate measure gets a fleet-level Poisson z of its incident count against
//!   the baseline rate times the incident's requests; measures with z ≥ [`MIN_SYMPTOM_Z`] are
//!   localized; the symptom reported is the one with the largest z.
//! - Root causes: the localizer's causes across the significant measures, the same combination
//!   found by several measures merged (evidence from each), ranked by scan score. A fleet-wide
//!   change yields `fleet_wide = true` and no specific cause. When no measure localizes anything
//!   but a fault signal names a subject (trace-context loss on a gateway version, resonance on a
//!   tenant), that subject becomes the root cause with the signal as its evidence.
//! - Latency measures leave out combinations without baseline traffic (nothing to regress
//!   from); count measures keep them.
//! - Demand shifts: a latency cause whose requests became at least [`DEMAND_SHIFT_FACTOR`] ×
//!   longer (mean input tokens per request, incident vs baseline, at least
//!   [`DEMAND_SHIFT_MIN_REQUESTS`] requests each side) has no comparable baseline either: its
//!   latency follows its own prompt length (a tenant that started sending 16k-token documents
//!   has a high TTFT because prefill is proportional to the prompt), not a service regression.
//!   Its combinations are set aside and the measure localized again, so the slice whose *same*
//!   requests got slower comes out; the set-aside slice is reported as a `demand_shift` signal
//!   (when nothing else localizes, that signal becomes the root cause like any other).

mod logs;
mod signals;

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_analytics::detect::{ChangeKind, DetectParams, Direction, detect_change};
use infersight_analytics::localize::{DerivedMeasure, LeafTable, Params, localize_derived};
use infersight_rollup::{Cell, LatencySli, Rollup, combination_totals, merge_range};
use infersight_model::time::format_rfc3339;
use infersight_store::TimeRange;
use serde::{Deserialize, Serialize};

use crate::engine::QueryEngine;
use crate::error::QueryError;

pub use logs::{LineageSummary, SequenceAnomaly, lineage, log_evidence, sequence_evidence};
pub use signals::collect_signals;

const MINUTE_NS: i64 = 60_000_000_000;
const DAY_NS: i64 = 24 * 60 * MINUTE_NS;
/// A measure is a symptom when its fleet-level excess is at least this many Poisson σ.
pub const MIN_SYMPTOM_Z: f64 = 5.0;
/// Latency thresholds are this quantile of the baseline.
const THRESHOLD_QUANTILE: f64 = 0.95;
/// A root-cause slice whose median or tail latency grew by this factor has a latency spike.
const SLICE_SPIKE_FACTOR: f64 = 1.2;
/// A latency cause whose mean input tokens per request grew by this factor is a demand shift.
pub const DEMAND_SHIFT_FACTOR: f64 = 2.0;
/// Requests each side before a slice's mean prompt length is trusted.
pub const DEMAND_SHIFT_MIN_REQUESTS: u64 = 20;
/// An explanatory cause's ratio must rise by this factor…
const EXPLANATION_MIN_FACTOR: f64 = 1.25;
/// …and by this much (a fraction: 5 percentage points of prompt tokens).
const EXPLANATION_MIN_RISE: f64 = 0.05;
/// At most this many demand-shift passes per measure.
const DEMAND_SHIFT_PASSES: usize = 3;

/// Windows of an RCA question; `None` means "choose".
#[derive(Debug, Clone, Copy, Default)]
pub struct RcaRequest {
    pub incident: Option<TimeRange>,
    pub baseline: Option<TimeRange>,
}

/// What the signal and log-evidence collectors get: the windows and what localization found.
#[derive(Debug, Clone)]
pub struct RcaContext {
    pub baseline: TimeRange,
    pub incident: TimeRange,
    pub onset_ns: i64,
    /// Name of the symptom measure (`ttft`, `e2e`, `errors`, …).
    pub symptom: String,
    /// The localized slices (attribute → value), best first; empty when none.
    pub root_causes: Vec<BTreeMap<String, String>>,
    /// The most significant latency measure, when one moved (it need not be the symptom: errors
    /// may have moved more).
    pub latency_symptom: Option<Symptom>,
}

/// One signal, as the contract shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Signal {
    pub kind: String,
    pub subject: BTreeMap<String, String>,
    #[serde(serialize_with = "ser_ts", deserialize_with = "de_ts")]
    pub onset: i64,
    pub strength: f64,
    pub detail: String,
}

/// One log template that rose with (or before) the incident.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogEvidence {
    pub template: String,
    pub template_id: String,
    /// Incident rate / baseline rate (with one pseudo-event each, so new templates are finite).
    pub lift: f64,
    /// How long before the onset the template's rate first rose (negative: after).
    pub lead_seconds: f64,
    pub baseline_count: u64,
    pub incident_count: u64,
    /// The slice the evidence was restricted to (empty: fleet).
    pub subject: BTreeMap<String, String>,
    /// Where the template's records lead in the lineage graph (workers, requests, model
    /// versions); absent in reports stored before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<LineageSummary>,
}

fn ser_ts<S: serde::Serializer>(ns: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_rfc3339(*ns))
}

/// Reads back what `ser_ts` wrote (stored incidents are RCA reports read back from JSON).
fn de_ts<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    infersight_model::time::parse_time(&text, 0).map_err(serde::de::Error::custom)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Symptom {
    pub sli: String,
    /// The SLI's value in the baseline and in the incident (p99 ms for latency, a rate otherwise).
    pub baseline: f64,
    pub current: f64,
    #[serde(serialize_with = "ser_ts", deserialize_with = "de_ts")]
    pub onset: i64,
    pub z: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootCause {
    pub rank: usize,
    pub dimensions: BTreeMap<String, String>,
    pub explained_fraction: f64,
    pub score: f64,
    pub evidence: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    #[serde(serialize_with = "ser_ts", deserialize_with = "de_ts")]
    pub since: i64,
    #[serde(serialize_with = "ser_ts", deserialize_with = "de_ts")]
    pub until: i64,
}

/// The `rca` JSON contract (DESIGN.md), plus the windows used and a one-line verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RcaReport {
    pub symptom: Option<Symptom>,
    pub root_causes: Vec<RootCause>,
    pub signals: Vec<Signal>,
    pub log_evidence: Vec<LogEvidence>,
    /// Unexpected log sequences of the incident's requests and traces against a next-event
    /// model of the baseline's (see `logs::sequences`); absent in reports stored before it.
    #[serde(default)]
    pub log_sequences: Vec<SequenceAnomaly>,
    pub suggestions: Vec<String>,
    pub checklist: Vec<String>,
    pub fleet_wide: bool,
    pub incident_window: Option<Window>,
    pub baseline_window: Option<Window>,
    /// How the incident window was chosen: `given`, `change in <sli>` (change-point detection),
    /// or `fallback: last third` (no fleet series changed).
    pub window_source: String,
    pub verdict: String,
    pub elapsed_ms: f64,
    /// Where the time went: localize, signals, log_evidence (milliseconds).
    pub timings_ms: BTreeMap<String, f64>,
}

/// One countable measure per leaf: incident and baseline "events" per unit (requests, or
/// prompt tokens for the cache measure).
struct Measure {
    name: String,
    /// Latency measures localize only combinations that have a baseline, and set aside demand
    /// shifts.
    latency: bool,
    /// An explanatory measure is never the symptom: it is localized only when a latency
    /// measure is one, to say where the latency came from.
    explanatory: bool,
    /// What an event is, for evidence text.
    event: String,
    /// What the events are counted out of, for evidence text ("requests", "prompt tokens").
    unit: &'static str,
    event_of: Box<dyn Fn(&Cell) -> f64 + Send + Sync>,
    denominator_of: Box<dyn Fn(&Cell) -> f64 + Send + Sync>,
    /// Which leaves the measure can say anything about, from their baseline cell.
    eligible: fn(&Cell) -> bool,
    /// The fleet SLI value shown as the symptom (baseline, incident).
    fleet_values: (f64, f64),
}

fn latency_measure(sli: LatencySli, baseline: &Cell, incident: &Cell) -> Option<Measure> {
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

fn requests_of(c: &Cell) -> f64 {
    c.requests as f64
}

/// Prefix-cache misses: prompt tokens not served from the prefix cache, per prompt token. No
/// user sees it, but it says where a TTFT rise came from when caching stopped working for a
/// slice (another tenant's scans evicting its system prompt): the same requests now prefill
/// what used to be cached. Per prompt token, so a tenant that merely sends longer prompts does
/// not stand out. Explanatory only; absent when the baseline cached nothing.
fn cache_miss_measure(baseline: &Cell, incident: &Cell) -> Option<Measure> {
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

fn rate(n: u64, d: u64) -> f64 {
    if d == 0 { 0.0 } else { n as f64 / d as f64 }
}

fn measures(baseline: &Cell, incident: &Cell) -> Vec<Measure> {
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
fn fleet_z(measure: &Measure, baseline: &Cell, incident: &Cell) -> f64 {
    if measure.explanatory {
        return 0.0;
    }
    let base_rate = ((measure.event_of)(baseline) + 1.0) / (baseline.requests as f64 + 1.0);
    let expected = base_rate * incident.requests as f64;
    ((measure.event_of)(incident) - expected) / (expected + 1.0).sqrt()
}

/// Per-minute fleet cells from `first` to `end` (whole minutes).
fn minute_cells(parts: &[&Rollup], first: i64, end: i64) -> Vec<(i64, Cell)> {
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
fn choose_onset(parts: &[&Rollup], first: i64, end: i64) -> Option<(i64, String)> {
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

fn describe(dimensions: &BTreeMap<String, String>) -> String {
    if dimensions.is_empty() {
        "the whole fleet".into()
    } else {
        dimensions
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" & ")
    }
}

impl QueryEngine {
    /// Runs the root-cause engine (blocking parts on a blocking thread).
    pub async fn rca(&self, request: RcaRequest) -> Result<RcaReport, QueryError> {
        let started = std::time::Instant::now();
        let store = Arc::clone(&self.store);
        let localized =
            tokio::task::spawn_blocking(move || localize_incident(store.as_ref(), request))
                .await
                .map_err(|e| QueryError::Internal(format!("rca task failed: {e}")))??;
        let Some(mut report) = localized.report else {
            return Ok(RcaReport {
                symptom: None,
                root_causes: Vec::new(),
                signals: Vec::new(),
                log_evidence: Vec::new(),
                log_sequences: Vec::new(),
                suggestions: Vec::new(),
                checklist: Vec::new(),
                fleet_wide: false,
                incident_window: None,
                baseline_window: None,
                window_source: String::new(),
                verdict: "no request data in the store".into(),
                elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
                timings_ms: BTreeMap::new(),
            });
        };
        let ctx = localized.context;
        let demand_shifts = localized.demand_shifts;
        let lap = |t: &mut std::time::Instant| {
            let ms = t.elapsed().as_secs_f64() * 1e3;
            *t = std::time::Instant::now();
            ms
        };
        let mut clock = std::time::Instant::now();
        report
            .timings_ms
            .insert("localize".into(), started.elapsed().as_secs_f64() * 1e3);
        let mut signals = collect_signals(self, &ctx).await?;
        report.timings_ms.insert("signals".into(), lap(&mut clock));
        signals.extend(derived_signals(&report, &ctx));
        signals.extend(demand_shifts);
        // a flow-control stall is a latency spike at the gateway, whatever the engine SLIs say
        let stalls: Vec<Signal> = signals
            .iter()
            .filter(|s| s.kind == "flow_control_stall")
            .map(|s| Signal {
                kind: "latency_spike".into(),
                detail: format!("gateway latency: {}", s.detail),
                ..s.clone()
            })
            .collect();
        if !signals.iter().any(|s| s.kind == "latency_spike") {
            signals.extend(stalls);
        }
        signals.sort_by(|a, b| b.strength.total_cmp(&a.strength));
        promote_signals(&mut report, &signals);
        if !signals.iter().any(|s| s.kind == "latency_spike")
            && let Some(top) = report.root_causes.first()
        {
            let store = Arc::clone(&self.store);
            let (subject, ctx2) = (top.dimensions.clone(), ctx.clone());
            let spike = tokio::task::spawn_blocking(move || {
                slice_latency_spike(store.as_ref(), &ctx2, &subject)
            })
            .await
            .map_err(|e| QueryError::Internal(format!("rca task failed: {e}")))??;
            signals.extend(spike);
        }
        report.signals = signals;
        report.log_evidence = log_evidence(self, &ctx).await?;
        report
            .timings_ms
            .insert("log_evidence".into(), lap(&mut clock));
        if !report.log_evidence.is_empty() {
            let seeds: Vec<String> = report
                .log_evidence
                .iter()
                .map(|e| e.template_id.clone())
                .collect();
            let graph = lineage(self, &ctx, &seeds).await?;
            for evidence in &mut report.log_evidence {
                evidence.lineage = graph.summary_of(&evidence.template_id);
            }
            report.timings_ms.insert("lineage".into(), lap(&mut clock));
        }
        report.log_sequences = sequence_evidence(self, &ctx).await?;
        report
            .timings_ms
            .insert("log_sequences".into(), lap(&mut clock));
        let (suggestions, checklist) = advice(&report);
        report.suggestions = suggestions;
        report.checklist = checklist;
        report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(report)
    }
}

struct Localized {
    report: Option<RcaReport>,
    context: RcaContext,
    /// Slices set aside because their prompts grew (see the module doc), as signals.
    demand_shifts: Vec<Signal>,
}

fn localize_incident(
    store: &dyn infersight_store::StorageBackend,
    request: RcaRequest,
) -> Result<Localized, QueryError> {
    let parts: Vec<Arc<Rollup>> = store.rollups(TimeRange::ALL)?;
    let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
    let bounds = refs.iter().filter_map(|r| r.minute_bounds()).fold(
        None,
        |acc: Option<(i64, i64)>, (lo, hi)| {
            Some(acc.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))))
        },
    );
    let empty_context = RcaContext {
        baseline: TimeRange::ALL,
        incident: TimeRange::ALL,
        onset_ns: 0,
        symptom: String::new(),
        root_causes: Vec::new(),
        latency_symptom: None,
    };
    let Some((first_minute, last_minute)) = bounds else {
        return Ok(Localized {
            report: None,
            context: empty_context,
            demand_shifts: Vec::new(),
        });
    };
    let data_end = last_minute + MINUTE_NS;
    let fallback = || {
        let split = first_minute + (data_end - first_minute) * 2 / 3;
        let split = split.div_euclid(MINUTE_NS) * MINUTE_NS;
        TimeRange {
            since_ns: Some(split),
            until_ns: Some(data_end),
        }
    };
    let (incident, detected) = match request.incident {
        Some(range) => (range, None),
        None => match choose_onset(&refs, first_minute, data_end) {
            Some((onset, sli)) => (
                TimeRange {
                    since_ns: Some(onset),
                    until_ns: Some(data_end),
                },
                Some(sli),
            ),
            None => (fallback(), None),
        },
    };
    let windows = Windows {
        refs: &refs,
        request,
        first_minute,
        data_end,
    };
    let result = windows.analyse(incident, detected.clone())?;
    // a change that no SLI confirms against its baseline was a false alarm of the detector:
    // look at the data as if nothing had changed fleet-wide
    if detected.is_some()
        && request.incident.is_none()
        && result.report.as_ref().is_some_and(|r| r.symptom.is_none())
    {
        return windows.analyse(fallback(), None);
    }
    Ok(result)
}

/// The data and the caller's request, for analysing one choice of incident window.
struct Windows<'a> {
    refs: &'a [&'a Rollup],
    request: RcaRequest,
    first_minute: i64,
    data_end: i64,
}

impl Windows<'_> {
    fn analyse(
        &self,
        incident: TimeRange,
        detected: Option<String>,
    ) -> Result<Localized, QueryError> {
        let (refs, request, first_minute, data_end) =
            (self.refs, self.request, self.first_minute, self.data_end);
        let empty_context = RcaContext {
            baseline: TimeRange::ALL,
            incident: TimeRange::ALL,
            onset_ns: 0,
            symptom: String::new(),
            root_causes: Vec::new(),
            latency_symptom: None,
        };
        let onset = incident.since_ns.unwrap_or(first_minute);
        let baseline = request.baseline.unwrap_or_else(|| {
            let earliest = (onset - 60 * MINUTE_NS).max(first_minute);
            TimeRange {
                since_ns: Some(earliest.min(onset - 10 * MINUTE_NS)),
                until_ns: Some(onset),
            }
        });
        let base_total = merge_range(refs, &[], baseline.since_ns, baseline.until_ns);
        let inc_total = merge_range(refs, &[], incident.since_ns, incident.until_ns);
        let window = |r: TimeRange| Window {
            since: r.since_ns.unwrap_or(first_minute),
            until: r.until_ns.unwrap_or(data_end),
        };
        let mut report = RcaReport {
            symptom: None,
            root_causes: Vec::new(),
            signals: Vec::new(),
            log_evidence: Vec::new(),
            log_sequences: Vec::new(),
            suggestions: Vec::new(),
            checklist: Vec::new(),
            fleet_wide: false,
            incident_window: Some(window(incident)),
            baseline_window: Some(window(baseline)),
            window_source: match (&request.incident, &detected) {
                (Some(_), _) => "given".into(),
                (None, Some(sli)) => format!("change in the fleet's {sli}"),
                (None, None) => "fallback: last third (no fleet series changed)".into(),
            },
            verdict: String::new(),
            elapsed_ms: 0.0,
            timings_ms: BTreeMap::new(),
        };
        if base_total.requests == 0 || inc_total.requests == 0 {
            report.verdict = "not enough requests in the baseline or the incident window".into();
            return Ok(Localized {
                report: Some(report),
                context: RcaContext {
                    baseline,
                    incident,
                    onset_ns: onset,
                    ..empty_context
                },
                demand_shifts: Vec::new(),
            });
        }
        let (dims, base_leaves) = combination_totals(refs, baseline.since_ns, baseline.until_ns);
        let (_, inc_leaves) = combination_totals(refs, incident.since_ns, incident.until_ns);
        // one leaf per combination seen in either window
        let mut leaf_of: BTreeMap<Vec<String>, usize> = BTreeMap::new();
        let mut leaf_values: Vec<Vec<String>> = Vec::new();
        let mut base_cells: Vec<Cell> = Vec::new();
        let mut inc_cells: Vec<Cell> = Vec::new();
        for (values, cell, is_incident) in base_leaves
            .iter()
            .map(|(v, c)| (v, c, false))
            .chain(inc_leaves.iter().map(|(v, c)| (v, c, true)))
        {
            let leaf = *leaf_of.entry(values.clone()).or_insert_with(|| {
                base_cells.push(Cell::default());
                inc_cells.push(Cell::default());
                leaf_values.push(values.clone());
                leaf_values.len() - 1
            });
            if is_incident {
                inc_cells[leaf].merge(cell);
            } else {
                base_cells[leaf].merge(cell);
            }
        }
        let mut scored: Vec<(f64, Measure)> = measures(&base_total, &inc_total)
            .into_iter()
            .map(|m| (fleet_z(&m, &base_total, &inc_total), m))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut causes: Vec<RootCause> = Vec::new();
        let mut fleet_wide = false;
        let params = Params::default();
        let mut demand_shifts: Vec<DemandShift> = Vec::new();
        // causes only an explanatory measure found rank after those of the symptom measures
        let mut explanatory_only: Vec<BTreeMap<String, String>> = Vec::new();
        let latency_symptom = scored
            .iter()
            .find(|(z, m)| m.latency && *z >= MIN_SYMPTOM_Z)
            .map(|(z, m)| Symptom {
                sli: m.name.clone(),
                baseline: m.fleet_values.0,
                current: m.fleet_values.1,
                onset,
                z: *z,
            });
        let localized = scored.iter().filter(|(z, m)| {
            if m.explanatory {
                latency_symptom.is_some()
            } else {
                *z >= MIN_SYMPTOM_Z
            }
        });
        for (z, measure) in localized {
            let leaves = Leaves {
                dims: &dims,
                values: &leaf_values,
                base: &base_cells,
                incident: &inc_cells,
                event_of: &*measure.event_of,
                denominator_of: &*measure.denominator_of,
            };
            let mut all: Vec<usize> = (0..leaf_values.len())
                .filter(|&leaf| (measure.eligible)(&base_cells[leaf]))
                .collect();
            let mut passes = 0;
            let result = loop {
                let mut result = leaves.localize(&all, &params)?;
                backfit(&leaves, &all, &mut result.root_causes, &params)?;
                passes += 1;
                if !measure.latency || passes > DEMAND_SHIFT_PASSES {
                    break result;
                }
                let grown: Vec<DemandShift> = result
                    .root_causes
                    .iter()
                    .filter_map(|c| leaves.demand_shift(&all, &c.elements))
                    .collect();
                if grown.is_empty() {
                    break result;
                }
                for shift in grown {
                    all.retain(|&leaf| !leaves.matches(leaf, &shift.elements));
                    if !demand_shifts.iter().any(|d| d.elements == shift.elements) {
                        demand_shifts.push(shift);
                    }
                }
            };
            if result.fleet_wide
                && causes.is_empty()
                && report.symptom.is_none()
                && !measure.explanatory
            {
                fleet_wide = true;
            }
            for mut cause in result.root_causes {
                if measure.explanatory {
                    // an explanation must be a rise that matters: the slice lost a good part
                    // of its cache hits (token counts are overdispersed far beyond what the
                    // scan's noise model sees, so a significant but small or falling change is
                    // no explanation)
                    if cause.real < EXPLANATION_MIN_FACTOR * cause.forecast
                        || cause.real - cause.forecast < EXPLANATION_MIN_RISE
                    {
                        continue;
                    }
                    cause.elements = leaves.specialize(&all, cause.elements);
                }
                let dimensions: BTreeMap<String, String> = cause.elements.iter().cloned().collect();
                let fleet = if measure.explanatory {
                    format!(
                        "fleet {:.1} % → {:.1} %",
                        measure.fleet_values.0 * 100.0,
                        measure.fleet_values.1 * 100.0
                    )
                } else {
                    format!("fleet z {z:.1}")
                };
                let evidence = format!(
                    "{}: {:.1} % of the slice's {} in the incident vs {:.1} % in the baseline ({fleet}); {:.0} % of the excess",
                    measure.event,
                    cause.real * 100.0,
                    measure.unit,
                    cause.forecast * 100.0,
                    cause.explained_fraction * 100.0
                );
                match causes.iter_mut().find(|c| c.dimensions == dimensions) {
                    Some(existing) => {
                        // an explanatory measure's scores are in other units: it adds
                        // evidence to a cause, never rank
                        if !measure.explanatory {
                            existing.score = existing.score.max(cause.score);
                            explanatory_only.retain(|d| d != &dimensions);
                        }
                        existing.evidence.push(evidence);
                    }
                    None => {
                        if measure.explanatory {
                            explanatory_only.push(dimensions.clone());
                        }
                        causes.push(RootCause {
                            rank: 0,
                            dimensions,
                            explained_fraction: cause.explained_fraction,
                            score: cause.score,
                            evidence: vec![evidence],
                        });
                    }
                }
            }
            if report.symptom.is_none() && !measure.explanatory {
                report.symptom = Some(Symptom {
                    sli: measure.name.clone(),
                    baseline: measure.fleet_values.0,
                    current: measure.fleet_values.1,
                    onset,
                    z: *z,
                });
            }
        }
        causes.sort_by(|a, b| {
            let late = |c: &RootCause| explanatory_only.contains(&c.dimensions);
            late(a)
                .cmp(&late(b))
                .then_with(|| b.score.total_cmp(&a.score))
        });
        for (i, cause) in causes.iter_mut().enumerate() {
            cause.rank = i + 1;
        }
        report.fleet_wide = fleet_wide && causes.is_empty();
        report.verdict = match (&report.symptom, causes.first()) {
            (None, _) => match detected {
                Some(sli) => format!(
                    "{sli} changed at {} but no SLI moved significantly against the baseline: nothing to blame",
                    format_rfc3339(onset)
                ),
                None => "no anomaly: SLIs are within their baseline; nothing to blame".into(),
            },
            (Some(symptom), Some(top)) => format!(
                "{} rose from {:.3} to {:.3} since {}; most likely cause: {} ({})",
                symptom.sli,
                symptom.baseline,
                symptom.current,
                format_rfc3339(onset),
                describe(&top.dimensions),
                top.evidence[0]
            ),
            (Some(symptom), None) => format!(
                "{} rose from {:.3} to {:.3} since {} across the whole fleet: no specific slice explains it",
                symptom.sli,
                symptom.baseline,
                symptom.current,
                format_rfc3339(onset)
            ),
        };
        let context = RcaContext {
            baseline,
            incident,
            onset_ns: onset,
            symptom: report
                .symptom
                .as_ref()
                .map(|s| s.sli.clone())
                .unwrap_or_default(),
            root_causes: causes.iter().map(|c| c.dimensions.clone()).collect(),
            latency_symptom,
        };
        report.root_causes = causes;
        let demand_shifts = demand_shifts.into_iter().map(|d| d.signal(onset)).collect();
        Ok(Localized {
            report: Some(report),
            context,
            demand_shifts,
        })
    }
}

/// The leaves of one measure, for localizing any subset of them.
struct Leaves<'a> {
    dims: &'a [String],
    values: &'a [Vec<String>],
    base: &'a [Cell],
    incident: &'a [Cell],
    event_of: &'a (dyn Fn(&Cell) -> f64 + Send + Sync),
    denominator_of: &'a (dyn Fn(&Cell) -> f64 + Send + Sync),
}

impl Leaves<'_> {
    fn localize(
        &self,
        subset: &[usize],
        params: &Params,
    ) -> Result<infersight_analytics::localize::Localization, QueryError> {
        let mut table = LeafTable::new(self.dims.iter().cloned());
        let mut measure = DerivedMeasure::default();
        for &leaf in subset {
            table.push_leaf(&self.values[leaf]);
            measure
                .numerator_real
                .push((self.event_of)(&self.incident[leaf]));
            measure
                .numerator_forecast
                .push((self.event_of)(&self.base[leaf]));
            measure
                .denominator_real
                .push((self.denominator_of)(&self.incident[leaf]));
            measure
                .denominator_forecast
                .push((self.denominator_of)(&self.base[leaf]));
        }
        localize_derived(&table, &measure, params)
            .map_err(|e| QueryError::Internal(format!("localization: {e}")))
    }

    /// The slice `elements` (among `subset`) as a demand shift, when its requests' mean prompt
    /// length grew by [`DEMAND_SHIFT_FACTOR`] or more (see the module doc).
    fn demand_shift(&self, subset: &[usize], elements: &[(String, String)]) -> Option<DemandShift> {
        let (mut base, mut inc) = ((0u64, 0u64), (0u64, 0u64));
        for &leaf in subset.iter().filter(|&&leaf| self.matches(leaf, elements)) {
            base.0 += self.base[leaf].requests;
            base.1 += self.base[leaf].input_tokens;
            inc.0 += self.incident[leaf].requests;
            inc.1 += self.incident[leaf].input_tokens;
        }
        if base.0 < DEMAND_SHIFT_MIN_REQUESTS || inc.0 < DEMAND_SHIFT_MIN_REQUESTS || base.1 == 0 {
            return None;
        }
        let before = base.1 as f64 / base.0 as f64;
        let after = inc.1 as f64 / inc.0 as f64;
        (after >= DEMAND_SHIFT_FACTOR * before).then(|| DemandShift {
            elements: elements.to_vec(),
            before,
            after,
        })
    }

    /// `elements` localized among `subset` only, described in the whole table: pairs that hold
    /// on every leaf it covers in `subset` are added while they leave out leaves of the table
    /// outside `subset` that it also matches (a tenant's slice found among prefix-caching leaves
    /// is that tenant *on prefix-caching workers*).
    fn specialize(
        &self,
        subset: &[usize],
        mut elements: Vec<(String, String)>,
    ) -> Vec<(String, String)> {
        let covered: Vec<usize> = subset
            .iter()
            .copied()
            .filter(|&leaf| self.matches(leaf, &elements))
            .collect();
        let outside = |elements: &[(String, String)]| -> usize {
            (0..self.values.len())
                .filter(|leaf| !subset.contains(leaf) && self.matches(*leaf, elements))
                .count()
        };
        let mut left = outside(&elements);
        while left > 0 {
            let mut best: Option<(usize, (String, String))> = None;
            for (d, dim) in self.dims.iter().enumerate() {
                if elements.iter().any(|(name, _)| name == dim) {
                    continue;
                }
                let Some(&first) = covered.first() else {
                    return elements;
                };
                let value = &self.values[first][d];
                if covered.iter().any(|&leaf| &self.values[leaf][d] != value) {
                    continue;
                }
                let mut candidate = elements.clone();
                candidate.push((dim.clone(), value.clone()));
                let remaining = outside(&candidate);
                if remaining < left && best.as_ref().is_none_or(|(r, _)| remaining < *r) {
                    best = Some((remaining, (dim.clone(), value.clone())));
                }
            }
            let Some((remaining, pair)) = best else {
                break;
            };
            elements.push(pair);
            left = remaining;
        }
        elements.sort();
        elements
    }

    fn matches(&self, leaf: usize, elements: &[(String, String)]) -> bool {
        elements.iter().all(|(dim, value)| {
            self.dims
                .iter()
                .position(|d| d == dim)
                .is_some_and(|i| &self.values[leaf][i] == value)
        })
    }
}

/// A slice whose requests' mean prompt length grew: set aside from latency localization.
struct DemandShift {
    elements: Vec<(String, String)>,
    /// Mean input tokens per request in the baseline and in the incident.
    before: f64,
    after: f64,
}

impl DemandShift {
    fn signal(&self, onset: i64) -> Signal {
        let subject: BTreeMap<String, String> = self.elements.iter().cloned().collect();
        let factor = self.after / self.before;
        Signal {
            kind: "demand_shift".into(),
            detail: format!(
                "{}: prompts {factor:.1}× longer (mean input tokens {:.0} → {:.0}); its latency rise follows its own prompt length, so it was set aside when localizing latency",
                describe(&subject),
                self.before,
                self.after
            ),
            subject,
            onset,
            strength: factor,
        }
    }
}

/// With several causes, the greedy scan may pick for the first one a coarser combination that
/// also covers the leaves of a later, independent cause (their excess makes the superset look
/// better). Backfitting: localize each cause again on the leaves no *other* cause covers, and
/// keep the refined combination when it overlaps the original one.
fn backfit(
    leaves: &Leaves<'_>,
    universe: &[usize],
    causes: &mut [infersight_analytics::localize::RootCause],
    params: &Params,
) -> Result<(), QueryError> {
    if causes.len() < 2 {
        return Ok(());
    }
    let originals: Vec<Vec<(String, String)>> = causes.iter().map(|c| c.elements.clone()).collect();
    for i in 0..causes.len() {
        let subset: Vec<usize> = universe
            .iter()
            .copied()
            .filter(|&leaf| {
                originals
                    .iter()
                    .enumerate()
                    .all(|(j, other)| j == i || !leaves.matches(leaf, other))
            })
            .collect();
        let refined = leaves.localize(&subset, params)?;
        let mut elements = originals[i].clone();
        if let Some(best) = refined.root_causes.into_iter().next()
            && best.elements.iter().any(|pair| originals[i].contains(pair))
        {
            causes[i].real = best.real;
            causes[i].forecast = best.forecast;
            causes[i].score = causes[i].score.max(best.score);
            elements = best.elements;
        }
        let others: Vec<&Vec<(String, String)>> = originals
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, o)| o)
            .collect();
        causes[i].elements = prefer_disjoint(leaves, &subset, elements, &others);
    }
    Ok(())
}

/// Among combinations that cover exactly the same leaves of `subset` as `elements` (one pair
/// swapped for another dimension's value), the one that covers the fewest leaves of the other
/// causes in the whole table: of two equivalent descriptions of a cause, the one that does not
/// also describe another cause's leaves is the more specific explanation.
fn prefer_disjoint(
    leaves: &Leaves<'_>,
    subset: &[usize],
    elements: Vec<(String, String)>,
    others: &[&Vec<(String, String)>],
) -> Vec<(String, String)> {
    let coverage = |e: &[(String, String)]| -> Vec<usize> {
        subset
            .iter()
            .copied()
            .filter(|&leaf| leaves.matches(leaf, e))
            .collect()
    };
    let overlap = |e: &[(String, String)]| -> usize {
        (0..leaves.values.len())
            .filter(|&leaf| {
                leaves.matches(leaf, e) && others.iter().any(|o| leaves.matches(leaf, o))
            })
            .count()
    };
    let target = coverage(&elements);
    let mut best = (overlap(&elements), elements.clone());
    for (k, _) in elements.iter().enumerate() {
        for (d, dim) in leaves.dims.iter().enumerate() {
            if elements.iter().any(|(name, _)| name == dim) {
                continue;
            }
            let mut values: Vec<&String> =
                target.iter().map(|&leaf| &leaves.values[leaf][d]).collect();
            values.sort();
            values.dedup();
            let [value] = values.as_slice() else {
                continue; // the swapped-in pair must hold on every covered leaf
            };
            let mut candidate = elements.clone();
            candidate[k] = (dim.clone(), (*value).clone());
            if coverage(&candidate) == target {
                let score = overlap(&candidate);
                if score < best.0 {
                    best = (score, candidate);
                }
            }
        }
    }
    let mut chosen = best.1;
    chosen.sort();
    chosen
}

/// A latency spike confined to `subject` (too small to move the fleet's SLIs): its p50 or p99
/// e2e or TTFT in the incident at least [`SLICE_SPIKE_FACTOR`] × the baseline's, with at least
/// 30 requests on each side (a slice's p50 over hundreds of requests moves little by chance).
fn slice_latency_spike(
    store: &dyn infersight_store::StorageBackend,
    ctx: &RcaContext,
    subject: &BTreeMap<String, String>,
) -> Result<Option<Signal>, QueryError> {
    let parts = store.rollups(TimeRange::ALL)?;
    let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
    let filters: Vec<(String, String)> = subject
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let base = merge_range(
        &refs,
        &filters,
        ctx.baseline.since_ns,
        ctx.baseline.until_ns,
    );
    let inc = merge_range(
        &refs,
        &filters,
        ctx.incident.since_ns,
        ctx.incident.until_ns,
    );
    if base.requests < 30 || inc.requests < 30 {
        return Ok(None);
    }
    for (sli, q) in [
        (LatencySli::E2e, 0.5),
        (LatencySli::E2e, 0.99),
        (LatencySli::Ttft, 0.5),
        (LatencySli::Ttft, 0.99),
    ] {
        let (Some(before), Some(after)) =
            (base.sketch(sli).quantile(q), inc.sketch(sli).quantile(q))
        else {
            continue;
        };
        if before > 0.0 && after >= SLICE_SPIKE_FACTOR * before {
            return Ok(Some(Signal {
                kind: "latency_spike".into(),
                subject: subject.clone(),
                onset: ctx.onset_ns,
                strength: after / before,
                detail: format!(
                    "p{:.0} {} of {} {before:.0} ms → {after:.0} ms",
                    q * 100.0,
                    sli.name(),
                    describe(subject)
                ),
            }));
        }
    }
    Ok(None)
}

/// When no request SLI localized anything, a fault signal on a specific subject (a gateway
/// version losing trace context, a tenant's speculative-decoding resonance) is the best
/// explanation there is: it becomes the root cause, with the signal as evidence.
fn promote_signals(report: &mut RcaReport, signals: &[Signal]) {
    if !report.root_causes.is_empty() {
        return;
    }
    for signal in signals {
        if signal.subject.is_empty() || signal.kind == "latency_spike" {
            continue;
        }
        if report
            .root_causes
            .iter()
            .any(|c| c.dimensions == signal.subject)
        {
            continue;
        }
        report.root_causes.push(RootCause {
            rank: report.root_causes.len() + 1,
            dimensions: signal.subject.clone(),
            explained_fraction: 0.0,
            score: signal.strength,
            evidence: vec![format!("{} signal: {}", signal.kind, signal.detail)],
        });
        if report.root_causes.len() == 3 {
            break;
        }
    }
    if let Some(top) = report.root_causes.first() {
        report.verdict = format!(
            "no request SLI moved enough to localize, but {} shows {}; most likely cause: {}",
            describe(&top.dimensions),
            top.evidence[0],
            describe(&top.dimensions)
        );
    }
}

/// Signals read off the localization itself: a latency spike on the symptom's slice, a version
/// regression when a cause names a model version, a slow worker when a cause is one worker.
fn derived_signals(report: &RcaReport, ctx: &RcaContext) -> Vec<Signal> {
    let mut out = Vec::new();
    let latency = ctx.latency_symptom.is_some();
    if let Some(symptom) = &ctx.latency_symptom {
        out.push(Signal {
            kind: "latency_spike".into(),
            subject: ctx.root_causes.first().cloned().unwrap_or_default(),
            onset: ctx.onset_ns,
            strength: symptom.z,
            detail: format!(
                "fleet p99 {} {:.0} ms → {:.0} ms",
                symptom.sli, symptom.baseline, symptom.current
            ),
        });
    }
    if report.symptom.is_none() {
        return out;
    }
    for cause in &report.root_causes {
        if cause.dimensions.contains_key("model_version") {
            out.push(Signal {
                kind: "version_regression".into(),
                subject: cause.dimensions.clone(),
                onset: ctx.onset_ns,
                strength: cause.score,
                detail: format!(
                    "{} regressed: {}",
                    describe(&cause.dimensions),
                    cause.evidence[0]
                ),
            });
        }
        if latency && cause.dimensions.len() == 1 && cause.dimensions.contains_key("worker") {
            out.push(Signal {
                kind: "slow_worker".into(),
                subject: cause.dimensions.clone(),
                onset: ctx.onset_ns,
                strength: cause.score,
                detail: format!(
                    "{} is slower than the fleet: {}",
                    describe(&cause.dimensions),
                    cause.evidence[0]
                ),
            });
        }
    }
    out
}

/// First fixes and verification steps per signal kind (the knowledge base replaces this).
fn advice(report: &RcaReport) -> (Vec<String>, Vec<String>) {
    let mut suggestions = Vec::new();
    let mut checklist = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for signal in &report.signals {
        if !seen.insert(signal.kind.clone()) {
            continue;
        }
        let subject = describe(&signal.subject);
        let (fix, check) = match signal.kind.as_str() {
            "version_regression" => (
                format!(
                    "roll {subject} back to the previous version or route its traffic elsewhere"
                ),
                format!(
                    "p99 TTFT of {subject} returns to its baseline within 10 minutes of the rollback"
                ),
            ),
            "slow_worker" => (
                format!(
                    "drain {subject} and check GPU temperature, clocks and throttling reasons (nvidia-smi -q -d PERFORMANCE)"
                ),
                format!("{subject}'s p50 e2e matches the other workers after the drain or fix"),
            ),
            "gpu_memory_leak" => (
                format!(
                    "restart the engine on {subject}; look for logits processors or caches that keep tensors per request"
                ),
                format!("GPU memory on {subject} stays flat under load after the restart"),
            ),
            "queue_buildup" => (
                format!(
                    "lower the batching wait / raise max batch size on {subject}, or add capacity; enable admission control"
                ),
                format!("queue_ms of {subject} returns to its baseline and no timeouts are logged"),
            ),
            "kv_cache_pressure" | "preemption_storm" => (
                format!(
                    "reduce max_num_seqs or max model length on {subject}, or raise gpu_memory_utilization; spread long prompts"
                ),
                format!("preemptions on {subject} drop to their baseline rate"),
            ),
            "cache_pollution" => (
                format!("isolate {subject}'s traffic (separate prefix-cache partition or workers)"),
                "the victim tenant's prefix-cache hit rate recovers".into(),
            ),
            "truncation_surge" => (
                format!("check max_tokens defaults and stop sequences for {subject}"),
                format!("share of finish_reason=length for {subject} returns to its baseline"),
            ),
            "trace_context_loss" => (
                format!("check trace-context propagation (traceparent headers) in {subject}"),
                "gateway spans have engine children again".into(),
            ),
            "resonance" => (
                format!(
                    "turn speculative decoding off for {subject} or filter the injected prompts upstream"
                ),
                "draft acceptance rate and rejection-sampling failures return to their baseline"
                    .into(),
            ),
            "error_burst" => (
                format!("look at the error logs of {subject} around the onset"),
                format!("error rate of {subject} returns to its baseline"),
            ),
            "demand_shift" => (
                format!(
                    "{subject} now sends much longer prompts: if that is expected, give it capacity of its own or enable chunked prefill so its prefills do not hold up others; if not, cap its input length at the gateway"
                ),
                format!(
                    "TTFT per 1k prompt tokens of {subject} is at its baseline, and the other slices' TTFT is unaffected"
                ),
            ),
            "latency_spike" => continue,
            other => (
                format!("investigate the {other} signal on {subject}"),
                format!("the {other} signal clears"),
            ),
        };
        suggestions.push(fix);
        checklist.push(check);
    }
    if suggestions.is_empty()
        && let Some(top) = report.root_causes.first()
    {
        let subject = describe(&top.dimensions);
        suggestions.push(format!(
            "compare the configuration and recent changes of {subject} with the rest of the fleet"
        ));
        checklist.push(format!(
            "the symptom SLI of {subject} returns to its baseline"
        ));
    }
    (suggestions, checklist)
}
