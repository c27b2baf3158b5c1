//! Predictive risk (step 2b of [`super`]): time-to-exhaustion projections per worker from the
//! last [`PredictSettings::window_ns`] of metric samples (one bounded SQL query, the
//! watermarks' reader), fitted by `infersight_analytics::detect::project_exhaustion` (a
//! Theil–Sen line from where the rise starts, with Sen's interval):
//! - GPU memory per worker and device: the used fraction of capacity (`GpuMemory::fraction`,
//!   whatever the source reports: DCGM, `hw.*`, nvidia-smi) toward 1;
//! - KV-cache usage per worker toward a full pool (1), unless the rise goes with the worker's
//!   throughput (an engine fills its pool under load by design: that is the load's cycle) or
//!   began less than [`PredictSettings::kv_min_trend_ns`] ago (a burst);
//! - the queue: a new request's expected wait on a worker, `requests_waiting / drain rate`
//!   (Little's law; the drain rate is the worker's finished-requests counter over the minute
//!   before each sample), toward the gateway timeout: `[watch] gateway_timeout` when set, else
//!   the median e2e of the requests that timed out in the history (what the 504s reveal), else
//!   60 s (the common proxy default: nginx `proxy_read_timeout`, AWS ALB idle timeout).
//!
//! A projection becomes a [`Prediction`] when the interval's latest end is inside
//! [`PredictSettings::horizon_ns`]: even the slowest rise the data allows exhausts the resource
//! within the horizon. Predictions open *warning* incidents (their own episodes, see
//! [`super::episode`]) that resolve when the trend stops (no confident projection for the
//! quiet steps).

use std::collections::BTreeMap;

use infersight_analytics::detect::stats::spearman;
use infersight_analytics::detect::{ExhaustionParams, Projection, project_exhaustion};
use infersight_model::mapping::GpuMemory;
use infersight_model::signal::Subject;
use infersight_model::time::format_rfc3339;
use infersight_query::QueryEngine;
use serde::Serialize;

use super::watermarks::{SeriesByKey, read_series};
use super::{Detection, MINUTE_NS, WatchSettings};
use crate::RcaError;

/// Alertmanager's `alertname` of a warning episode (a projected exhaustion): what its notice
/// is sent as, and how a resumed incident is known to be a warning.
pub const EXHAUSTION_RISK_ALERTNAME: &str = "ExhaustionRisk";

/// The gateway timeout assumed when neither the config nor a timed-out request says (60 s).
pub const DEFAULT_GATEWAY_TIMEOUT_NS: i64 = 60_000_000_000;
/// Timed-out requests needed before their e2e is taken as the timeout.
const MIN_TIMEOUTS: f64 = 3.0;
/// The learned timeout is read again this often.
const TIMEOUT_REFRESH_NS: i64 = 60 * MINUTE_NS;
/// The drain rate of a queue sample: finished requests over this long before it.
const DRAIN_WINDOW_NS: i64 = MINUTE_NS;
/// A rise this correlated with the worker's throughput is load (the leak detector's rule).
const MAX_LOAD_CORRELATION: f64 = 0.5;
/// Projections judged per step at most (the busiest fleets: the first workers by name).
const MAX_PROJECTIONS: usize = 4_096;

const KV_USAGE: &str = "kv_cache_usage_ratio";
/// The resource a KV-cache projection names.
const KV_RESOURCE: &str = "kv_cache";
const WAITING: &str = "requests_waiting";
const FINISHED: &str = "requests_finished_total";

/// Which projections run, and when they warn.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictSettings {
    /// A warning opens when exhaustion is this close at the interval's latest end (30 min).
    pub horizon_ns: i64,
    /// Samples fitted (the last 15 min).
    pub window_ns: i64,
    pub gpu_memory: bool,
    pub kv_cache: bool,
    pub queue: bool,
    /// The gateway's timeout (`None`: learned from timed-out requests, else 60 s).
    pub gateway_timeout_ns: Option<i64>,
    /// A KV-cache projection needs a rise that has lasted this long (10 min). KV usage is the
    /// work in flight: under bursty traffic it swings by half the pool between two 10-s samples
    /// (the Mooncake trace: 0.02 → 0.73 → 0.00), so six rising samples are a burst, and a
    /// minute of them projected 30 minutes ahead warned 4–9 times a day of pools that never
    /// passed 0.72. A pool that really fills (longer sessions, a growing context) rises for
    /// many minutes, and a full one is the watermark's and the preemptions' to report.
    pub kv_min_trend_ns: i64,
    pub fit: ExhaustionParams,
}

impl Default for PredictSettings {
    fn default() -> Self {
        PredictSettings {
            horizon_ns: 30 * MINUTE_NS,
            window_ns: 15 * MINUTE_NS,
            gpu_memory: true,
            kv_cache: true,
            queue: true,
            gateway_timeout_ns: None,
            kv_min_trend_ns: 10 * MINUTE_NS,
            fit: ExhaustionParams::default(),
        }
    }
}

impl PredictSettings {
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.horizon_ns < MINUTE_NS {
            out.push("watch.predict_horizon must be at least 1m".into());
        }
        if self.window_ns < 3 * MINUTE_NS {
            out.push("watch.predict_window must be at least 3m".into());
        }
        if self.gateway_timeout_ns.is_some_and(|t| t < 1_000_000_000) {
            out.push("watch.gateway_timeout must be at least 1s".into());
        }
        if self.kv_min_trend_ns < 0 || self.kv_min_trend_ns >= self.window_ns {
            out.push(format!(
                "watch.predict_kv_min_trend must be at least 0 and shorter than the fitted window ({} min)",
                self.window_ns / MINUTE_NS
            ));
        }
        out
    }

    fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.gpu_memory {
            names.extend(GpuMemory::NAMES);
        }
        if self.kv_cache {
            names.push(KV_USAGE);
        }
        if self.queue {
            names.push(WAITING);
        }
        if !names.is_empty() {
            // the queue's drain rate, and the load memory and KV usage are judged against
            names.push(FINISHED);
        }
        names
    }
}

/// One resource projected to run out within the horizon.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// `predict/<resource>/<worker>/<device>`: identity across steps.
    pub key: String,
    /// `gpu_memory`, `kv_cache` or `queue_wait`.
    pub resource: &'static str,
    pub subject: Subject,
    /// The step that projected it.
    #[serde(rename = "predicted_at", serialize_with = "ser_ts")]
    pub at_ns: i64,
    /// Fitted level now, and the limit (fractions of capacity; seconds for `queue_wait`).
    pub level: f64,
    pub limit: f64,
    /// What the limit is (`device capacity`, `full KV-cache pool`, `gateway timeout (config)`…).
    pub limit_source: String,
    pub slope_per_minute: f64,
    /// When the limit is reached: the estimate, the interval's earliest and latest ends.
    #[serde(rename = "eta", serialize_with = "ser_ts")]
    pub eta_ns: i64,
    #[serde(rename = "eta_earliest", serialize_with = "ser_ts")]
    pub eta_low_ns: i64,
    #[serde(rename = "eta_latest", serialize_with = "ser_ts")]
    pub eta_high_ns: i64,
    /// Where the fitted rise starts.
    #[serde(rename = "trend_from", serialize_with = "ser_ts")]
    pub trend_from_ns: i64,
}

fn ser_ts<S: serde::Serializer>(ns: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_rfc3339(*ns))
}

impl Prediction {
    fn minutes(&self, at: i64) -> f64 {
        (at - self.at_ns) as f64 / 60e9
    }

    /// `gpu_memory of worker=w & device=0 exhausted in ~14 min (11–19 min): 0.62 → 1 (device
    /// capacity), +0.021/min since 02:14`, one line.
    pub fn line(&self) -> String {
        let unit = if self.resource == "queue_wait" {
            " s"
        } else {
            ""
        };
        format!(
            "{} of {} reaches its limit in ~{:.0} min ({:.0}–{:.0} min, at {}): {:.3}{unit} → \
             {}{unit} ({}), {:+.4}{unit}/min since {}",
            self.resource,
            self.subject,
            self.minutes(self.eta_ns),
            self.minutes(self.eta_low_ns),
            self.minutes(self.eta_high_ns),
            format_rfc3339(self.eta_ns),
            self.level,
            self.limit,
            self.limit_source,
            self.slope_per_minute,
            format_rfc3339(self.trend_from_ns)
        )
    }

    /// `gpu_memory of worker=w runs out in ~14 min (11–19 min)`: a warning's summary.
    pub fn summary(&self) -> String {
        format!(
            "{} of {} runs out in ~{:.0} min ({:.0}–{:.0} min)",
            self.resource,
            self.subject,
            self.minutes(self.eta_ns),
            self.minutes(self.eta_low_ns),
            self.minutes(self.eta_high_ns)
        )
    }

    /// The detection a warning episode is made of.
    pub fn detection(&self, horizon_ns: i64) -> Detection {
        let latest = (self.eta_high_ns - self.at_ns).max(1) as f64;
        Detection {
            key: self.key.clone(),
            kind: "exhaustion_risk".into(),
            subject: self.subject.clone(),
            onset_ns: self.trend_from_ns,
            strength: horizon_ns as f64 / latest,
            detail: self.line(),
        }
    }
}

/// The timeout learned from the history, and when.
#[derive(Debug, Clone, Default)]
pub struct PredictCache {
    learned_timeout: Option<(i64, Option<f64>)>,
}

impl PredictCache {
    /// Every confident projection at `end_ns` (whole minutes before it).
    pub async fn evaluate(
        &mut self,
        engine: &QueryEngine,
        settings: &WatchSettings,
        end_ns: i64,
    ) -> Result<Vec<Prediction>, RcaError> {
        let p = &settings.predict;
        let names = p.names();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let series = read_series(engine, &names, end_ns - p.window_ns, end_ns).await?;
        let timeout = if p.queue {
            Some(self.gateway_timeout(engine, settings, end_ns).await?)
        } else {
            None
        };
        let mut candidates: Vec<Candidate> = Vec::new();
        if p.gpu_memory {
            candidates.extend(gpu_memory(&series));
        }
        if p.kv_cache {
            candidates.extend(kv_cache(&series, p.fit.max_points));
        }
        if let Some((seconds, source)) = timeout {
            candidates.extend(queue_wait(&series, seconds, &source));
        }
        let mut out = Vec::new();
        for c in candidates.into_iter().take(MAX_PROJECTIONS) {
            let Ok(Some(projection)) = project_exhaustion(&c.points, c.limit, end_ns, &p.fit)
            else {
                continue;
            };
            let burst =
                c.resource == KV_RESOURCE && end_ns - projection.fit_from_ns < p.kv_min_trend_ns;
            if projection.confident_within(p.horizon_ns as f64 / 1e9)
                && !burst
                && !c.follows_load(&projection)
            {
                out.push(c.prediction(&projection, end_ns));
            }
        }
        Ok(out)
    }

    /// The gateway timeout in seconds and where it comes from.
    async fn gateway_timeout(
        &mut self,
        engine: &QueryEngine,
        settings: &WatchSettings,
        end_ns: i64,
    ) -> Result<(f64, String), RcaError> {
        if let Some(ns) = settings.predict.gateway_timeout_ns {
            return Ok((ns as f64 / 1e9, "gateway timeout, config".into()));
        }
        let stale = self
            .learned_timeout
            .is_none_or(|(at, _)| end_ns - at >= TIMEOUT_REFRESH_NS || end_ns < at);
        if stale {
            let learned = learn_timeout(engine, end_ns - settings.history_ns, end_ns).await?;
            self.learned_timeout = Some((end_ns, learned));
        }
        Ok(match self.learned_timeout.and_then(|(_, t)| t) {
            Some(seconds) => (seconds, "gateway timeout, from timed-out requests".into()),
            None => (
                DEFAULT_GATEWAY_TIMEOUT_NS as f64 / 1e9,
                "gateway timeout, default".into(),
            ),
        })
    }
}

/// The median e2e (seconds) of the requests in `[since, until)` that timed out (`error_type`
/// naming a timeout or a deadline, or HTTP 504), when there are enough of them.
async fn learn_timeout(
    engine: &QueryEngine,
    since: i64,
    until: i64,
) -> Result<Option<f64>, RcaError> {
    let sql = format!(
        "SELECT approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e_ms) AS timeout_ms, \
         count(*) AS n FROM requests \
         WHERE ts >= to_timestamp_nanos({since}) AND ts < to_timestamp_nanos({until}) \
         AND e2e_ms > 0 AND error_type IS NOT NULL \
         AND (lower(error_type) LIKE '%timeout%' OR lower(error_type) LIKE '%deadline%' \
              OR error_type = '504')"
    );
    let value = engine.sql(&sql).await?.to_json_value()?;
    let row = value["rows"].as_array().and_then(|rows| rows.first());
    let n = row.and_then(|r| r["n"].as_f64()).unwrap_or(0.0);
    let ms = row.and_then(|r| r["timeout_ms"].as_f64());
    Ok(ms
        .filter(|ms| n >= MIN_TIMEOUTS && ms.is_finite() && *ms > 0.0)
        .map(|ms| ms / 1e3))
}

/// One series to project.
struct Candidate {
    resource: &'static str,
    worker: String,
    device: String,
    points: Vec<(i64, f64)>,
    limit: f64,
    limit_source: String,
    /// The worker's throughput at the samples (finished requests per second; empty: unknown).
    load: Vec<(i64, f64)>,
}

impl Candidate {
    /// True when the fitted rise goes with the worker's throughput (Spearman ρ ≥
    /// [`MAX_LOAD_CORRELATION`]): KV usage that grows with the load is the load's cycle, and an
    /// engine runs its pool near full under load by design (vLLM preempts, nothing fails); a
    /// real overload shows in the queue.
    fn follows_load(&self, p: &Projection) -> bool {
        let pairs: Vec<(f64, f64)> = self
            .points
            .iter()
            .filter(|q| q.0 >= p.fit_from_ns)
            .filter_map(|&(t, y)| {
                let at = self.load.partition_point(|l| l.0 < t);
                self.load.get(at).filter(|l| l.0 == t).map(|l| (y, l.1))
            })
            .collect();
        if pairs.len() < 4 {
            return false;
        }
        let (ys, loads): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
        spearman(&ys, &loads).is_some_and(|rho| rho >= MAX_LOAD_CORRELATION)
    }

    fn prediction(&self, p: &Projection, now_ns: i64) -> Prediction {
        let at = |seconds: f64| now_ns.saturating_add((seconds * 1e9).min(1e17) as i64);
        let mut subject = Subject::of([("worker", self.worker.as_str())]);
        if !self.device.is_empty() {
            subject.insert("device".into(), self.device.clone());
        }
        Prediction {
            key: format!("predict/{}/{}/{}", self.resource, self.worker, self.device),
            resource: self.resource,
            subject,
            at_ns: now_ns,
            level: p.level,
            limit: p.limit,
            limit_source: self.limit_source.clone(),
            slope_per_minute: p.slope_per_s * 60.0,
            eta_ns: at(p.eta_s),
            eta_low_ns: at(p.eta_low_s),
            eta_high_ns: at(p.eta_high_s.unwrap_or(f64::INFINITY)),
            trend_from_ns: p.fit_from_ns,
        }
    }
}

/// Per (worker, device), the used fraction of capacity at each sample time (a capacity series
/// sampled less often than the used bytes is carried forward).
fn gpu_memory(series: &SeriesByKey) -> Vec<Candidate> {
    let mut per_device: BTreeMap<(&str, &str), BTreeMap<i64, GpuMemory>> = BTreeMap::new();
    for ((worker, device, name), points) in series {
        if !GpuMemory::NAMES.contains(&name.as_str()) {
            continue;
        }
        let by_ts = per_device.entry((worker, device)).or_default();
        for &(ts, value) in points {
            let m = by_ts.entry(ts).or_default();
            match name.as_str() {
                "gpu_memory_used_bytes" => m.used_bytes = Some(value),
                "gpu_memory_free_bytes" => m.free_bytes = Some(value),
                "gpu_memory_total_bytes" => m.total_bytes = Some(value),
                _ => m.usage_ratio = Some(value),
            }
        }
    }
    let mut out = Vec::new();
    for ((worker, device), by_ts) in per_device {
        let mut total = None;
        let points: Vec<(i64, f64)> = by_ts
            .into_iter()
            .filter_map(|(ts, mut m)| {
                total = m.total_bytes.or(total);
                m.total_bytes = total;
                m.fraction().map(|f| (ts, f))
            })
            .collect();
        out.push(Candidate {
            resource: "gpu_memory",
            worker: worker.to_string(),
            device: device.to_string(),
            points,
            limit: 1.0,
            limit_source: "device capacity".into(),
            // memory that grows to the capacity fails allocations whatever makes it grow
            load: Vec::new(),
        });
    }
    out
}

/// KV-cache usage per worker, thinned to every k-th sample so that at most `max_points` span
/// the whole window (the fit keeps only its latest `max_points`: at a 5-s scrape that would be
/// 7.5 minutes, never the rise of [`PredictSettings::kv_min_trend_ns`]); thinning keeps the
/// samples' own times, which the load check pairs with the throughput's.
fn kv_cache(series: &SeriesByKey, max_points: usize) -> Vec<Candidate> {
    series
        .iter()
        .filter(|((_, _, name), _)| name == KV_USAGE)
        .map(|((worker, device, _), points)| Candidate {
            resource: KV_RESOURCE,
            worker: worker.clone(),
            device: device.clone(),
            points: points
                .iter()
                .rev()
                .step_by(points.len().div_ceil(max_points.max(1)).max(1))
                .rev()
                .map(|&(t, v)| (t, if v > 1.0 { v / 100.0 } else { v }))
                .collect(),
            limit: 1.0,
            limit_source: "full KV-cache pool".into(),
            load: load_at(series, worker, points),
        })
        .collect()
}

/// Per worker with a finished-requests counter, the expected wait of a new request at each
/// `requests_waiting` sample: waiting / (finished over the minute before it, per second).
fn queue_wait(series: &SeriesByKey, timeout_s: f64, source: &str) -> Vec<Candidate> {
    let mut out = Vec::new();
    for ((worker, device, name), waiting) in series {
        if name != WAITING {
            continue;
        }
        let Some(finished) = series.get(&(worker.clone(), device.clone(), FINISHED.into())) else {
            continue;
        };
        let points: Vec<(i64, f64)> = waiting
            .iter()
            .filter_map(|&(t, w)| {
                if w <= 0.0 {
                    return Some((t, 0.0));
                }
                drain_rate(finished, t).map(|rate| (t, w / rate))
            })
            .collect();
        out.push(Candidate {
            resource: "queue_wait",
            worker: worker.clone(),
            device: device.clone(),
            points,
            limit: timeout_s,
            limit_source: format!("{source} {timeout_s:.0} s"),
            load: Vec::new(),
        });
    }
    out
}

/// The worker's throughput (finished requests per second, [`drain_rate`]) at each of `points`'
/// times; empty when the worker exports no finished-requests counter.
fn load_at(series: &SeriesByKey, worker: &str, points: &[(i64, f64)]) -> Vec<(i64, f64)> {
    let Some((_, finished)) = series
        .iter()
        .find(|((w, _, name), _)| w == worker && name == FINISHED)
    else {
        return Vec::new();
    };
    points
        .iter()
        .filter_map(|&(t, _)| drain_rate(finished, t).map(|rate| (t, rate)))
        .collect()
}

/// Finished requests per second over the [`DRAIN_WINDOW_NS`] up to `t` (counter resets count
/// from zero); `None` without two samples half a window apart or without any finished.
fn drain_rate(counter: &[(i64, f64)], t: i64) -> Option<f64> {
    let from = counter.partition_point(|p| p.0 < t - DRAIN_WINDOW_NS);
    let to = counter.partition_point(|p| p.0 <= t);
    let window = counter.get(from..to)?;
    let (first, last) = (window.first()?, window.last()?);
    let span_s = (last.0 - first.0) as f64 / 1e9;
    if span_s < DRAIN_WINDOW_NS as f64 / 2e9 {
        return None;
    }
    let increase: f64 = window
        .windows(2)
        .map(|p| {
            if p[1].1 >= p[0].1 {
                p[1].1 - p[0].1
            } else {
                p[1].1
            }
        })
        .sum();
    (increase > 0.0).then(|| increase / span_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn the_drain_rate_reads_the_minute_before_and_survives_resets() {
        let counter: Vec<(i64, f64)> = (0..13).map(|i| (i * 10 * S, (i * 5) as f64)).collect();
        let rate = drain_rate(&counter, 120 * S).unwrap();
        assert!((rate - 0.5).abs() < 1e-9, "{rate}");
        let reset = [(0, 100.0), (30 * S, 115.0), (40 * S, 5.0), (60 * S, 15.0)];
        assert!((drain_rate(&reset, 60 * S).unwrap() - 30.0 / 60.0).abs() < 1e-9);
        assert_eq!(drain_rate(&counter[..2], 10 * S), None);
        assert_eq!(drain_rate(&[(0, 3.0), (60 * S, 3.0)], 60 * S), None);
    }

    #[test]
    fn gpu_memory_carries_the_capacity_forward() {
        let mut series = SeriesByKey::new();
        let key = |n: &str| ("w".to_string(), "0".to_string(), n.to_string());
        series.insert(key("gpu_memory_total_bytes"), vec![(0, 100.0)]);
        series.insert(
            key("gpu_memory_used_bytes"),
            vec![(0, 50.0), (10 * S, 60.0), (20 * S, 70.0)],
        );
        let c = gpu_memory(&series);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].points, vec![(0, 0.5), (10 * S, 0.6), (20 * S, 0.7)]);
    }

    #[test]
    fn bad_settings_are_reported() {
        let p = PredictSettings {
            horizon_ns: 0,
            gateway_timeout_ns: Some(5),
            ..PredictSettings::default()
        };
        assert_eq!(p.problems().len(), 2, "{:?}", p.problems());
    }
}
