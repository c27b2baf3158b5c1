//! The watcher's SLI series (step 1 of [`super`]): per minute, for the fleet and for each
//! model, a few counts out of the rollups — requests, errors, truncations, tokens, and per
//! latency SLI the requests over the subject's reference p95 (the RCA's "share over the
//! baseline p95", steadier minute to minute than a per-minute p99). Kept between steps: a step
//! merges only the minutes it has not seen and the last [`LATE_MINUTES`] (late data); the
//! reference thresholds are recomputed at most hourly, never while an incident is open.

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_analytics::detect::{ChangeKind, DetectParams, Direction, detect_change};
use infersight_model::signal::Subject;
use infersight_rollup::{Cell, LatencySli, Rollup, combination_totals};
use infersight_store::{StorageBackend, StoreError, TimeRange};

use super::{Detection, MINUTE_NS, WatchSettings};

/// The kind of a [`Detection`] that a series change makes.
pub const SLI_CHANGE: &str = "sli_change";

/// The key of a series change: `sli/<sli name>/<fleet | model=…>`.
pub fn sli_key(sli: &str, scope: &str) -> String {
    format!("sli/{sli}/{scope}")
}

/// The SLI name of a series change's key ([`sli_key`]); `None` for any other detection.
pub fn sli_of_key(key: &str) -> Option<&str> {
    key.strip_prefix("sli/")?.split('/').next()
}

pub use crate::signals::LATE_MINUTES;
/// The reference must hold this many minutes with requests before anything is judged (ten
/// minutes' MAD is too rough a noise scale: a healthy fleet's wobble then looks like a shift).
pub const MIN_REFERENCE_MINUTES: usize = 15;
/// The noise scale of a series is at least this fraction of its baseline median…
const MIN_SCALE_REL: f64 = 0.1;
/// …and at least this much for rates and shares (one percentage point): a model with few
/// requests a minute moves by more than that with one request.
const MIN_SCALE_RATE: f64 = 0.01;
const HOUR_NS: i64 = 60 * MINUTE_NS;
const DAY_NS: i64 = 24 * HOUR_NS;
/// Latency SLIs watched, as shares of requests over the reference p95.
const LATENCY: [LatencySli; 4] = [
    LatencySli::Ttft,
    LatencySli::Tpot,
    LatencySli::E2e,
    LatencySli::Queue,
];
const THRESHOLD_QUANTILE: f64 = 0.95;

/// One minute of one subject.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MinuteCounts {
    pub requests: u64,
    pub errors: u64,
    pub truncated: u64,
    pub output_tokens: u64,
    pub input_tokens: u64,
    pub cached_tokens: u64,
    /// Per [`LATENCY`] SLI: requests with a value, and those over the reference threshold.
    pub latency_counts: [u64; 4],
    pub over: [u64; 4],
}

impl MinuteCounts {
    fn add(&mut self, cell: &Cell, thresholds: &[Option<f64>; 4]) {
        self.requests += cell.requests;
        self.errors += cell.errors;
        self.truncated += cell.truncated;
        self.output_tokens += cell.output_tokens;
        self.input_tokens += cell.input_tokens;
        self.cached_tokens += cell.cached_tokens;
        for (i, sli) in LATENCY.iter().enumerate() {
            let sketch = cell.sketch(*sli);
            self.latency_counts[i] += sketch.count();
            if let Some(t) = thresholds[i] {
                self.over[i] += sketch.count() - sketch.count_at_most(t);
            }
        }
    }
}

/// One watched subject: the fleet (model `None`) or one model.
#[derive(Debug, Clone, Default)]
struct SubjectSeries {
    thresholds: [Option<f64>; 4],
    minutes: BTreeMap<i64, MinuteCounts>,
    /// Mean requests per minute of the reference.
    reference_rate: f64,
}

/// The series of every subject, and when their thresholds were set.
#[derive(Debug, Clone, Default)]
pub struct SeriesCache {
    subjects: BTreeMap<Option<String>, SubjectSeries>,
    thresholds_at_ns: Option<i64>,
    merged_until_ns: Option<i64>,
}

/// One series of a subject, as the detector reads it.
struct Series {
    name: &'static str,
    direction: Direction,
    points: Vec<(i64, f64)>,
    /// Floor of the noise scale, in the series' unit.
    min_scale: f64,
}

impl SeriesCache {
    /// Brings the minutes up to the last whole minute before `now_ns`.
    pub fn update(
        &mut self,
        store: &dyn StorageBackend,
        settings: &WatchSettings,
        now_ns: i64,
        incident_open: bool,
    ) -> Result<(), StoreError> {
        let end = now_ns.div_euclid(MINUTE_NS) * MINUTE_NS;
        let history_start = end - settings.history_ns;
        let stale = self
            .thresholds_at_ns
            .is_none_or(|at| !incident_open && end - at >= HOUR_NS);
        let mut from = self.merged_until_ns.map_or(history_start, |m| {
            (m - LATE_MINUTES * MINUTE_NS).max(history_start)
        });
        let parts: Vec<Arc<Rollup>>;
        if stale {
            parts = store.rollups(TimeRange {
                since_ns: Some(history_start),
                until_ns: Some(end),
            })?;
            let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
            let reference_end = end - settings.current_minutes as i64 * MINUTE_NS;
            if self.set_thresholds(&refs, history_start, reference_end) {
                self.thresholds_at_ns = Some(end);
                from = history_start;
            } else if self.thresholds_at_ns.is_none() {
                return Ok(());
            }
        } else {
            parts = store.rollups(TimeRange {
                since_ns: Some(from),
                until_ns: Some(end),
            })?;
        }
        let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
        self.merge_minutes(&refs, from, end);
        for subject in self.subjects.values_mut() {
            subject.minutes = subject.minutes.split_off(&history_start);
        }
        self.merged_until_ns = Some(end);
        Ok(())
    }

    /// Sets every subject's thresholds from `[since, until)`; false (nothing changed) when the
    /// reference holds too few minutes.
    fn set_thresholds(&mut self, parts: &[&Rollup], since: i64, until: i64) -> bool {
        let (dimensions, combos) = combination_totals(parts, Some(since), Some(until));
        let model_at = dimensions.iter().position(|d| d == "model");
        let mut totals: BTreeMap<Option<String>, Cell> = BTreeMap::new();
        for (values, cell) in &combos {
            totals.entry(None).or_default().merge(cell);
            if let Some(i) = model_at {
                totals
                    .entry(Some(values[i].clone()))
                    .or_default()
                    .merge(cell);
            }
        }
        let minutes = parts
            .iter()
            .filter_map(|r| r.minute_bounds())
            .fold(None, |acc: Option<(i64, i64)>, (lo, hi)| {
                Some(acc.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))))
            })
            .map_or(0, |(lo, _)| {
                ((until - lo.max(since)) / MINUTE_NS).max(0) as usize
            });
        if minutes < MIN_REFERENCE_MINUTES {
            return false;
        }
        self.subjects.clear();
        for (subject, cell) in totals {
            let mut thresholds = [None; 4];
            for (i, sli) in LATENCY.iter().enumerate() {
                thresholds[i] = cell.sketch(*sli).quantile(THRESHOLD_QUANTILE);
            }
            self.subjects.insert(
                subject,
                SubjectSeries {
                    thresholds,
                    minutes: BTreeMap::new(),
                    reference_rate: cell.requests as f64 / minutes as f64,
                },
            );
        }
        true
    }

    /// Merges the minutes `[from, end)` of every known subject again.
    fn merge_minutes(&mut self, parts: &[&Rollup], from: i64, end: i64) {
        let mut minute = from;
        while minute < end {
            let (dimensions, combos) =
                combination_totals(parts, Some(minute), Some(minute + MINUTE_NS));
            let model_at = dimensions.iter().position(|d| d == "model");
            let mut counts: BTreeMap<Option<String>, MinuteCounts> = BTreeMap::new();
            for (values, cell) in &combos {
                if let Some(fleet) = self.subjects.get(&None) {
                    counts.entry(None).or_default().add(cell, &fleet.thresholds);
                }
                if let Some(model) = model_at.map(|i| Some(values[i].clone()))
                    && let Some(series) = self.subjects.get(&model)
                {
                    counts
                        .entry(model)
                        .or_default()
                        .add(cell, &series.thresholds);
                }
            }
            for (subject, series) in &mut self.subjects {
                match counts.remove(subject) {
                    Some(c) if c.requests > 0 => {
                        series.minutes.insert(minute, c);
                    }
                    _ => {
                        series.minutes.remove(&minute);
                    }
                }
            }
            minute += MINUTE_NS;
        }
    }

    /// What fires at `now_ns`: against the history before the current minutes, or, while an
    /// incident is open, against the time before its onset (`frozen_onset`).
    pub fn detect(
        &self,
        settings: &WatchSettings,
        now_ns: i64,
        frozen_onset: Option<i64>,
    ) -> Vec<Detection> {
        let end = now_ns.div_euclid(MINUTE_NS) * MINUTE_NS;
        let current = settings.current_minutes as i64 * MINUTE_NS;
        let baseline_end = frozen_onset.map_or(end - current, |onset| onset.min(end - current));
        // while an incident is open only the latest minutes say whether it still fires
        let recent_from =
            frozen_onset.map(|_| end - (settings.confirm_minutes as i64 + 1) * MINUTE_NS);
        let mut out = Vec::new();
        for (subject, series) in &self.subjects {
            if subject.is_some() && series.reference_rate < settings.min_requests_per_minute {
                continue;
            }
            for s in series_of(series) {
                let points: Vec<(i64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|(m, _)| *m < baseline_end || recent_from.is_none_or(|r| *m >= r))
                    .collect();
                let series = Series { points, ..s };
                if let Some(d) = judge(settings, subject.as_deref(), &series, baseline_end) {
                    out.push(d);
                }
            }
            out.extend(efficiency_watermarks(
                settings,
                subject.as_deref(),
                series,
                baseline_end,
                end,
            ));
        }
        out
    }
}

/// The series the watcher judges for one subject.
fn series_of(series: &SubjectSeries) -> Vec<Series> {
    let minutes = &series.minutes;
    let ratio = |f: &dyn Fn(&MinuteCounts) -> (u64, u64)| -> Vec<(i64, f64)> {
        minutes
            .iter()
            .filter_map(|(m, c)| {
                let (n, d) = f(c);
                (d > 0).then(|| (*m, n as f64 / d as f64))
            })
            .collect()
    };
    let mut out = Vec::new();
    for (i, sli) in LATENCY.iter().enumerate() {
        if series.thresholds[i].is_none() {
            continue;
        }
        out.push(Series {
            name: sli.name(),
            direction: Direction::Up,
            points: ratio(&|c| (c.over[i], c.latency_counts[i])),
            min_scale: MIN_SCALE_RATE,
        });
    }
    out.push(Series {
        name: "error_rate",
        direction: Direction::Up,
        points: ratio(&|c| (c.errors, c.requests)),
        min_scale: MIN_SCALE_RATE,
    });
    out.push(Series {
        name: "abort_rate",
        direction: Direction::Up,
        points: ratio(&|c| (c.truncated, c.requests)),
        min_scale: MIN_SCALE_RATE,
    });
    out.push(Series {
        // token throughput per request: a model that rambles or is cut short (throughput per
        // second follows the load, which moves all day)
        name: "output_tokens_per_request",
        direction: Direction::Both,
        points: ratio(&|c| (c.output_tokens, c.requests)),
        min_scale: 1.0,
    });
    out.push(Series {
        name: "prefix_cache_hit_rate",
        direction: Direction::Down,
        points: ratio(&|c| (c.cached_tokens, c.input_tokens)),
        min_scale: MIN_SCALE_RATE,
    });
    out
}

/// The efficiency watermarks of one subject (`[watch]` `thi_min`, `token_efficiency_ratio`):
/// each of the last [`WatchSettings::confirm_minutes`] whole minutes before `end` against the
/// subject's reference (its minutes before `baseline_end`).
/// - THI = actual / theoretical output tokens × (1 − retry rate)² (the derived SLI's formula),
///   with the minute's theoretical throughput its requests at the reference's output tokens per
///   request (the derived SLI's best-minute rate follows the load, which moves all day; this
///   one is 1 on a healthy fleet at any load) and the error rate standing in for the retry rate
///   (rollups carry no prompt hashes; a failed request is retried or lost). Fires below
///   `thi_min` (0.5: half the throughput the demand should get).
/// - token efficiency = output / input tokens, which depends on the workload (RAG ≈ 0.05, chat
///   ≈ 1), so it is judged against the subject's own reference: fires below
///   `token_efficiency_ratio` (0.5) × the reference's.
fn efficiency_watermarks(
    settings: &WatchSettings,
    model: Option<&str>,
    series: &SubjectSeries,
    baseline_end: i64,
    end: i64,
) -> Vec<Detection> {
    let w = &settings.watermarks;
    if w.thi_min.is_none() && w.token_efficiency_ratio.is_none() {
        return Vec::new();
    }
    let reference: Vec<&MinuteCounts> = series
        .minutes
        .range(..baseline_end)
        .map(|(_, c)| c)
        .collect();
    let from = end - settings.confirm_minutes as i64 * MINUTE_NS;
    let current: Vec<(i64, &MinuteCounts)> = series
        .minutes
        .range(from..end)
        .map(|(m, c)| (*m, c))
        .collect();
    if reference.len() < MIN_REFERENCE_MINUTES || current.len() < settings.confirm_minutes {
        return Vec::new();
    }
    let total =
        |f: &dyn Fn(&MinuteCounts) -> u64| reference.iter().map(|c| f(c)).sum::<u64>() as f64;
    let (requests, output, input) = (
        total(&|c| c.requests),
        total(&|c| c.output_tokens),
        total(&|c| c.input_tokens),
    );
    let scope = model.map_or_else(|| "fleet".to_string(), |m| format!("model={m}"));
    let subject = model.map_or_else(Subject::default, |m| Subject::of([("model", m)]));
    let mut out = Vec::new();
    let mut fire = |name: &str, threshold: f64, values: Vec<f64>, what: String| {
        let highest = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if values.is_empty() || highest >= threshold {
            return;
        }
        out.push(Detection {
            key: format!("watermark/{name}/{scope}"),
            kind: "watermark".into(),
            subject: subject.clone(),
            onset_ns: from,
            strength: threshold / highest.max(1e-9),
            detail: format!(
                "{name} at most {highest:.3} in each of the last {} minutes (threshold \
                 {threshold:.3}: {what})",
                values.len()
            ),
        });
    };
    if let Some(thi_min) = w.thi_min
        && requests > 0.0
        && output > 0.0
    {
        let per_request = output / requests;
        let values = current
            .iter()
            .map(|(_, c)| {
                let expected = c.requests as f64 * per_request;
                let retry = c.errors as f64 / c.requests.max(1) as f64;
                infersight_analytics::derived::throughput_health_index(
                    c.output_tokens as f64,
                    expected,
                    retry.clamp(0.0, 1.0),
                )
                .unwrap_or(0.0)
            })
            .collect();
        fire(
            "thi",
            thi_min,
            values,
            format!("the reference delivers {per_request:.0} output tokens per request"),
        );
    }
    if let Some(ratio) = w.token_efficiency_ratio
        && input > 0.0
        && output > 0.0
    {
        let reference_efficiency = output / input;
        let values = current
            .iter()
            .filter(|(_, c)| c.input_tokens > 0)
            .map(|(_, c)| c.output_tokens as f64 / c.input_tokens as f64)
            .collect();
        fire(
            "token_efficiency",
            ratio * reference_efficiency,
            values,
            format!("{ratio} × the reference's {reference_efficiency:.3}"),
        );
    }
    out
}

/// One series at one step: the change that fires, if any.
fn judge(
    settings: &WatchSettings,
    model: Option<&str>,
    series: &Series,
    baseline_end: i64,
) -> Option<Detection> {
    let (name, points) = (series.name, &series.points);
    let baseline_points = points.iter().filter(|(m, _)| *m < baseline_end).count();
    if baseline_points < MIN_REFERENCE_MINUTES || baseline_points == points.len() {
        return None;
    }
    let params = DetectParams {
        direction: series.direction,
        baseline_end_ns: Some(baseline_end),
        min_scale_abs: series.min_scale,
        min_scale_rel: MIN_SCALE_REL,
        min_baseline_points: MIN_REFERENCE_MINUTES,
        risk_q: settings.risk_q,
        period_ns: Some(DAY_NS),
        confirm_points: settings.confirm_minutes,
        ..DetectParams::default()
    };
    let change = detect_change(points, &params).ok()??;
    let shift = change.kind == ChangeKind::LevelShift && change.confirmed;
    if !shift && change.peak_z.abs() < settings.strong_z {
        return None;
    }
    let subject = model.map_or_else(Subject::default, |m| Subject::of([("model", m)]));
    let scope = model.map_or_else(|| "fleet".to_string(), |m| format!("model={m}"));
    let word = if matches!(change.direction, Direction::Down) {
        "fell"
    } else {
        "rose"
    };
    Some(Detection {
        key: sli_key(name, &scope),
        kind: SLI_CHANGE.into(),
        subject,
        onset_ns: change.onset_ns,
        strength: change.peak_z.abs(),
        detail: format!(
            "{name} {word} from {:.4} to {:.4} ({:.1} σ, {})",
            change.expected_at_onset,
            change.peak_value,
            change.peak_z.abs(),
            if shift { "level shift" } else { "spike" }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `minutes` minutes of a subject: 600 requests a minute, 500 input and 200 output tokens
    /// each (±10 % seeded noise, the load swinging ×0.5–×1.5); from `fault_from` the requests
    /// fail (errors, 5 output tokens each) or ramble to 20 output tokens (`starved`).
    fn subject(minutes: i64, fault_from: i64, starved: bool) -> SubjectSeries {
        let mut rng = infersight_model::rng::SplitMix64::new(3);
        let mut series = SubjectSeries::default();
        for m in 0..minutes {
            let load = 1.0 + 0.5 * (m as f64 / 10.0).sin();
            let requests = (600.0 * load) as u64;
            let noise = |rng: &mut infersight_model::rng::SplitMix64| 1.0 + 0.1 * rng.normal();
            let faulty = m >= fault_from;
            let per_request = match (faulty, starved) {
                (false, _) => 200.0,
                (true, false) => 5.0,
                (true, true) => 20.0,
            };
            series.minutes.insert(
                m * MINUTE_NS,
                MinuteCounts {
                    requests,
                    errors: if faulty && !starved { requests / 2 } else { 0 },
                    input_tokens: (requests as f64 * 500.0 * noise(&mut rng)) as u64,
                    output_tokens: (requests as f64 * per_request * noise(&mut rng)) as u64,
                    ..MinuteCounts::default()
                },
            );
        }
        series
    }

    fn fired(series: &SubjectSeries) -> Vec<String> {
        let settings = WatchSettings::default();
        let end = 60 * MINUTE_NS;
        efficiency_watermarks(&settings, Some("m"), series, end - 5 * MINUTE_NS, end)
            .into_iter()
            .map(|d| d.key)
            .collect()
    }

    #[test]
    fn thi_and_token_efficiency_fire_on_lost_throughput_not_on_load() {
        assert!(fired(&subject(60, 1_000, false)).is_empty());
        assert_eq!(
            fired(&subject(60, 57, false)),
            [
                "watermark/thi/model=m",
                "watermark/token_efficiency/model=m"
            ]
        );
        // outputs cut to a tenth with no error: both fall below half the reference
        assert_eq!(fired(&subject(60, 57, true)).len(), 2);
        // one bad minute of the two judged is not enough
        assert!(fired(&subject(60, 59, false)).is_empty());
    }
}
