//! Resource watermarks (step 2 of [`super`]): one bounded SQL query over the metric samples of
//! the last [`super::WatchSettings::confirm_minutes`] whole minutes, per worker (and GPU), and a
//! watermark fires when every one of those minutes is beyond its threshold. Defaults come from
//! the runbooks (`knowledge/`): KV-cache usage pinned above 0.95 (kv-cache-preemption), more
//! than a handful of preemptions (ten a minute), GPU memory used within 3 % of the device's
//! capacity (`gpu_memory_used_bytes` against `gpu_memory_total_bytes`, or the free bytes or the
//! ratio a source reports: `GpuMemory::fraction`), a queue of 32 waiting requests per worker.
//! The efficiency watermarks (THI, token efficiency) read the rollups' minutes instead: they
//! are judged with the SLI series (`super::series`), their thresholds live here.

use std::collections::BTreeMap;

use arrow::array::{Array, ArrayRef, Float64Array, Int64Array, StringArray};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use infersight_model::mapping::GpuMemory;
use infersight_model::signal::Subject;
use infersight_query::{QueryEngine, QueryError};

use super::{Detection, MINUTE_NS, WatchSettings};
use crate::RcaError;

/// Rows read at most per step (a 1,000-worker fleet scraped every 5 s with 10 series is 240,000
/// in two minutes: beyond that the newest are judged).
pub const MAX_ROWS: usize = 200_000;

/// Thresholds of the resource watermarks; `None` turns one off.
#[derive(Debug, Clone, PartialEq)]
pub struct Watermarks {
    /// Used fraction of a GPU's memory (0.97).
    pub gpu_memory_used_fraction: Option<f64>,
    /// Mean KV-cache usage ratio of a worker over a minute (0.95).
    pub kv_cache_usage_ratio: Option<f64>,
    /// Preemptions of a worker in a minute (10).
    pub preemptions_per_minute: Option<f64>,
    /// Mean waiting requests of a worker over a minute (32).
    pub requests_waiting: Option<f64>,
    /// Throughput health index of the fleet or a model in a minute, below which it fires
    /// (0.5; computed from rollups by `series`, see `efficiency_watermarks` there).
    pub thi_min: Option<f64>,
    /// Token efficiency (output / input tokens) of the fleet or a model in a minute, as a
    /// fraction of its reference's, below which it fires (0.5).
    pub token_efficiency_ratio: Option<f64>,
}

impl Default for Watermarks {
    fn default() -> Self {
        Watermarks {
            gpu_memory_used_fraction: Some(0.97),
            kv_cache_usage_ratio: Some(0.95),
            preemptions_per_minute: Some(10.0),
            requests_waiting: Some(32.0),
            thi_min: Some(0.5),
            token_efficiency_ratio: Some(0.5),
        }
    }
}

impl Watermarks {
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, value, max) in [
            (
                "gpu_memory_used_fraction",
                self.gpu_memory_used_fraction,
                Some(1.0),
            ),
            ("kv_cache_usage_ratio", self.kv_cache_usage_ratio, Some(1.0)),
            ("preemptions_per_minute", self.preemptions_per_minute, None),
            ("requests_waiting", self.requests_waiting, None),
            ("thi_min", self.thi_min, Some(1.0)),
            (
                "token_efficiency_ratio",
                self.token_efficiency_ratio,
                Some(1.0),
            ),
        ] {
            if let Some(v) = value
                && !(v.is_finite() && v > 0.0 && max.is_none_or(|m| v <= m))
            {
                let range = max.map_or("positive".to_string(), |m| format!("in (0, {m}]"));
                out.push(format!("watch.watermarks.{name} = {v} must be {range}"));
            }
        }
        out
    }

    fn metric_names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.gpu_memory_used_fraction.is_some() {
            names.extend(GpuMemory::NAMES);
        }
        for (on, name) in [
            (self.kv_cache_usage_ratio.is_some(), KV_USAGE),
            (self.preemptions_per_minute.is_some(), PREEMPTIONS),
            (self.requests_waiting.is_some(), WAITING),
        ] {
            if on {
                names.push(name);
            }
        }
        names
    }
}

const KV_USAGE: &str = "kv_cache_usage_ratio";
const PREEMPTIONS: &str = "preemptions_total";
const WAITING: &str = "requests_waiting";

/// Samples of one (worker, device, name) per minute.
type Samples = BTreeMap<(String, String, String), BTreeMap<i64, Vec<f64>>>;

/// The watermarks beyond their thresholds in each of the last minutes before `end_ns`.
pub async fn detect(
    engine: &QueryEngine,
    watermarks: &Watermarks,
    end_ns: i64,
    settings: &WatchSettings,
) -> Result<Vec<Detection>, RcaError> {
    let names = watermarks.metric_names();
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let minutes = settings.confirm_minutes as i64;
    let since = end_ns - minutes * MINUTE_NS;
    let samples = read_samples(engine, &names, since, end_ns).await?;
    let minute_starts: Vec<i64> = (0..minutes).map(|i| since + i * MINUTE_NS).collect();
    let mut out = Vec::new();
    let mut per_device: BTreeMap<(String, String), BTreeMap<i64, GpuMemory>> = BTreeMap::new();
    for ((worker, device, name), by_minute) in &samples {
        let mean = |m: &i64| {
            by_minute
                .get(m)
                .filter(|v| !v.is_empty())
                .map(|v| v.iter().sum::<f64>() / v.len() as f64)
        };
        if GpuMemory::NAMES.contains(&name.as_str()) {
            for m in &minute_starts {
                let entry = per_device
                    .entry((worker.clone(), device.clone()))
                    .or_default()
                    .entry(*m)
                    .or_default();
                let value = mean(m);
                match name.as_str() {
                    "gpu_memory_used_bytes" => entry.used_bytes = value,
                    "gpu_memory_free_bytes" => entry.free_bytes = value,
                    "gpu_memory_total_bytes" => entry.total_bytes = value,
                    _ => entry.usage_ratio = value,
                }
            }
            continue;
        }
        let (threshold, per_minute): (Option<f64>, Vec<Option<f64>>) = match name.as_str() {
            KV_USAGE => (
                watermarks.kv_cache_usage_ratio,
                minute_starts.iter().map(mean).collect(),
            ),
            WAITING => (
                watermarks.requests_waiting,
                minute_starts.iter().map(mean).collect(),
            ),
            PREEMPTIONS => (
                watermarks.preemptions_per_minute,
                minute_starts
                    .iter()
                    .map(|m| increase(by_minute.get(m)))
                    .collect(),
            ),
            _ => continue,
        };
        if let Some(d) = fire(name, worker, device, threshold, &per_minute, since) {
            out.push(d);
        }
    }
    for ((worker, device), by_minute) in per_device {
        let per_minute: Vec<Option<f64>> = minute_starts
            .iter()
            .map(|m| by_minute.get(m).and_then(GpuMemory::fraction))
            .collect();
        if let Some(d) = fire(
            "gpu_memory_used_fraction",
            &worker,
            &device,
            watermarks.gpu_memory_used_fraction,
            &per_minute,
            since,
        ) {
            out.push(d);
        }
    }
    Ok(out)
}

/// A counter's increase within one minute's samples (a reset counts from zero).
fn increase(samples: Option<&Vec<f64>>) -> Option<f64> {
    let samples = samples?;
    let first = *samples.first()?;
    let mut total = 0.0;
    let mut last = first;
    for &v in &samples[1..] {
        total += if v >= last { v - last } else { v };
        last = v;
    }
    Some(total)
}

/// The detection when every minute is at or beyond `threshold`.
fn fire(
    name: &str,
    worker: &str,
    device: &str,
    threshold: Option<f64>,
    per_minute: &[Option<f64>],
    since: i64,
) -> Option<Detection> {
    let threshold = threshold?;
    let values: Vec<f64> = per_minute.iter().copied().collect::<Option<_>>()?;
    if values.is_empty() || values.iter().any(|v| *v < threshold) {
        return None;
    }
    let lowest = values.iter().copied().fold(f64::INFINITY, f64::min);
    let mut subject = Subject::of([("worker", worker)]);
    if !device.is_empty() {
        subject.insert("device".into(), device.to_string());
    }
    Some(Detection {
        key: format!("watermark/{name}/{worker}/{device}"),
        kind: "watermark".into(),
        subject,
        onset_ns: since,
        strength: lowest / threshold,
        detail: format!(
            "{name} at least {lowest:.3} in each of the last {} minutes (threshold {threshold})",
            values.len()
        ),
    })
}

/// Samples of one (worker, device, canonical name), in time order.
pub(super) type SeriesByKey = BTreeMap<(String, String, String), Vec<(i64, f64)>>;

/// The newest [`MAX_ROWS`] samples of `names` in `[since, until)` per (worker, device, name),
/// in time order (one bounded SQL query; the device is the `device` column, else the OTel
/// `hw.id` label).
pub(super) async fn read_series(
    engine: &QueryEngine,
    names: &[&str],
    since: i64,
    until: i64,
) -> Result<SeriesByKey, QueryError> {
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    let sql = format!(
        "SELECT worker, COALESCE(NULLIF(device, ''), json_get(labels, 'hw.id'), '') AS device, \
         name, CAST(ts AS BIGINT) AS ts_ns, value FROM metrics \
         WHERE ts >= to_timestamp_nanos({since}) AND ts < to_timestamp_nanos({until}) \
         AND name IN ({}) AND worker IS NOT NULL AND worker <> '' \
         ORDER BY ts DESC LIMIT {MAX_ROWS}",
        quoted.join(", ")
    );
    let output = engine.sql(&sql).await?;
    let mut series = SeriesByKey::new();
    for batch in &output.batches {
        let column = |name: &str, to: &DataType| -> Result<ArrayRef, QueryError> {
            let c = batch
                .column_by_name(name)
                .ok_or_else(|| QueryError::Internal(format!("watermark query lacks {name}")))?;
            cast(c, to).map_err(|e| QueryError::Internal(format!("column {name}: {e}")))
        };
        let strings: Vec<ArrayRef> = ["worker", "device", "name"]
            .iter()
            .map(|n| column(n, &DataType::Utf8))
            .collect::<Result<_, _>>()?;
        let ts = column("ts_ns", &DataType::Int64)?;
        let value = column("value", &DataType::Float64)?;
        let strings: Vec<&StringArray> = strings
            .iter()
            .filter_map(|a| a.as_any().downcast_ref())
            .collect();
        let (Some(ts), Some(value)) = (
            ts.as_any().downcast_ref::<Int64Array>(),
            value.as_any().downcast_ref::<Float64Array>(),
        ) else {
            continue;
        };
        if strings.len() != 3 {
            continue;
        }
        for row in 0..batch.num_rows() {
            if !(ts.is_valid(row) && value.is_valid(row) && value.value(row).is_finite()) {
                continue;
            }
            let text = |i: usize| {
                let a = strings[i];
                if a.is_valid(row) {
                    a.value(row).to_string()
                } else {
                    String::new()
                }
            };
            series
                .entry((text(0), text(1), text(2)))
                .or_default()
                .push((ts.value(row), value.value(row)));
        }
    }
    // samples came newest first
    for samples in series.values_mut() {
        samples.reverse();
    }
    Ok(series)
}

/// [`read_series`] folded per minute.
async fn read_samples(
    engine: &QueryEngine,
    names: &[&str],
    since: i64,
    until: i64,
) -> Result<Samples, QueryError> {
    let mut samples = Samples::new();
    for (key, points) in read_series(engine, names, since, until).await? {
        let by_minute = samples.entry(key).or_default();
        for (ts, value) in points {
            by_minute
                .entry(ts.div_euclid(MINUTE_NS) * MINUTE_NS)
                .or_default()
                .push(value);
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watermark_fires_only_when_every_minute_is_beyond_it() {
        assert!(fire("kv", "w", "", Some(0.95), &[Some(0.96), Some(0.99)], 0).is_some());
        assert!(fire("kv", "w", "", Some(0.95), &[Some(0.96), Some(0.9)], 0).is_none());
        assert!(fire("kv", "w", "", Some(0.95), &[Some(0.96), None], 0).is_none());
        assert!(fire("kv", "w", "", None, &[Some(1.0)], 0).is_none());
    }

    #[test]
    fn counter_increases_survive_resets() {
        assert_eq!(increase(Some(&vec![10.0, 12.0, 15.0])), Some(5.0));
        assert_eq!(increase(Some(&vec![10.0, 12.0, 3.0])), Some(5.0));
        assert_eq!(increase(None), None);
    }

    #[test]
    fn bad_thresholds_are_reported() {
        let w = Watermarks {
            kv_cache_usage_ratio: Some(1.5),
            requests_waiting: Some(-1.0),
            ..Watermarks::default()
        };
        assert_eq!(w.problems().len(), 2, "{:?}", w.problems());
    }
}
