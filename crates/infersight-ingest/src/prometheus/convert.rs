//! Second step of a Prometheus scrape: parsed families → an OTLP `ExportMetricsServiceRequest`,
//! the same message the OTLP receivers decode, so `metrics_to_batches` maps engine names (vLLM
//! old and new, SGLang, TGI, Triton, DCGM) and labels (model, worker, device, engine) once for
//! both paths. Counters become monotonic cumulative sums, histograms explicit-bounds histograms
//! with per-bucket counts, summaries summaries, everything else gauges.

use std::collections::HashMap;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, Summary, SummaryDataPoint, metric, number_data_point,
    summary_data_point::ValueAtQuantile,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::parse::{Exposition, Family, MetricType, ParseWarning, Sample};

/// The OTLP form of one scrape and what could not be converted.
#[derive(Debug, Clone, Default)]
pub struct ScrapedRequest {
    pub request: ExportMetricsServiceRequest,
    /// Data points in `request`.
    pub points: usize,
    /// Series left out (an incomplete histogram or summary is reported by the parser already;
    /// these are conversion problems such as a timestamp out of range).
    pub warnings: Vec<ParseWarning>,
}

/// The names of the health gauges every scrape records, like Prometheus's `up`.
pub const SCRAPE_UP: &str = "scrape_up";
pub const SCRAPE_DURATION_SECONDS: &str = "scrape_duration_seconds";
pub const SCRAPE_SAMPLES_SCRAPED: &str = "scrape_samples_scraped";

fn string_kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

fn label_attrs(labels: &[(String, String)], except: &str) -> Vec<KeyValue> {
    labels
        .iter()
        .filter(|(k, _)| k != except)
        .map(|(k, v)| string_kv(k, v))
        .collect()
}

fn sorted_labels(labels: &[(String, String)]) -> Vec<(String, String)> {
    let mut key = labels.to_vec();
    key.sort();
    key
}

/// A sample's own time when it has a usable one, else the scrape's.
fn point_time_ns(
    timestamp_ms: Option<i64>,
    scrape_time_ns: u64,
    line: usize,
    warnings: &mut Vec<ParseWarning>,
) -> u64 {
    match timestamp_ms {
        None => scrape_time_ns,
        Some(ms) => match u64::try_from(ms)
            .ok()
            .and_then(|ms| ms.checked_mul(1_000_000))
        {
            Some(ns) if ns > 0 => ns,
            _ => {
                warnings.push(ParseWarning {
                    line: Some(line),
                    message: format!(
                        "timestamp {ms} ms is not a time after 1970; the scrape time is used"
                    ),
                });
                scrape_time_ns
            }
        },
    }
}

/// `_created` (float seconds since the epoch) → OTLP start time; 0 (unknown) when unusable.
fn created_ns(seconds: Option<f64>) -> u64 {
    match seconds {
        Some(s) if s.is_finite() && s > 0.0 && s < 1.8e10 => (s * 1e9) as u64,
        _ => 0,
    }
}

fn resource(job: &str, instance: &str) -> Resource {
    Resource {
        attributes: vec![
            string_kv("service.name", job),
            string_kv("service.instance.id", instance),
        ],
        ..Default::default()
    }
}

/// One OTLP request holding `metrics` under the target's resource (`service.name` = job,
/// `service.instance.id` = worker or host:port).
pub fn scrape_request(
    job: &str,
    instance: &str,
    metrics: Vec<Metric>,
) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource(job, instance)),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            schema_url: String::new(),
        }],
    }
}

fn gauge_metric(name: &str, value: f64, time_ns: u64) -> Metric {
    Metric {
        name: name.to_string(),
        data: Some(metric::Data::Gauge(Gauge {
            data_points: vec![NumberDataPoint {
                time_unix_nano: time_ns,
                value: Some(number_data_point::Value::AsDouble(value)),
                ..Default::default()
            }],
        })),
        ..Default::default()
    }
}

/// The per-scrape health gauges: `scrape_up` (1 or 0), `scrape_duration_seconds` and
/// `scrape_samples_scraped`, stamped with the scrape time.
pub fn health_metrics(up: bool, duration_s: f64, samples: usize, time_ns: u64) -> Vec<Metric> {
    vec![
        gauge_metric(SCRAPE_UP, if up { 1.0 } else { 0.0 }, time_ns),
        gauge_metric(SCRAPE_DURATION_SECONDS, duration_s, time_ns),
        gauge_metric(SCRAPE_SAMPLES_SCRAPED, samples as f64, time_ns),
    ]
}

/// Converts a parsed scrape of the target `job` / `instance` taken at `scrape_time_ns`.
pub fn exposition_to_otlp(
    exposition: &Exposition,
    job: &str,
    instance: &str,
    scrape_time_ns: u64,
) -> ScrapedRequest {
    let mut warnings = Vec::new();
    let mut metrics = Vec::new();
    let created = external_created(exposition);
    for family in &exposition.families {
        if created.consumed.contains(&family.name.as_str()) {
            continue;
        }
        let external = created.by_target.get(family.name.as_str()).copied();
        match family.kind {
            MetricType::Counter => counter_metrics(
                family,
                external,
                scrape_time_ns,
                &mut metrics,
                &mut warnings,
            ),
            MetricType::Histogram => metrics.extend(histogram_metric(
                family,
                external,
                scrape_time_ns,
                &mut warnings,
            )),
            MetricType::Summary => metrics.extend(summary_metric(
                family,
                external,
                scrape_time_ns,
                &mut warnings,
            )),
            MetricType::Gauge
            | MetricType::GaugeHistogram
            | MetricType::Info
            | MetricType::StateSet
            | MetricType::Untyped => {
                for (name, samples) in by_sample_name(family.samples.iter()) {
                    let points = samples
                        .iter()
                        .map(|s| number_point(s, 0, scrape_time_ns, &mut warnings))
                        .collect();
                    metrics.push(Metric {
                        name: name.to_string(),
                        description: family.help.clone().unwrap_or_default(),
                        unit: family.unit.clone().unwrap_or_default(),
                        data: Some(metric::Data::Gauge(Gauge {
                            data_points: points,
                        })),
                        ..Default::default()
                    });
                }
            }
        }
    }
    let points = metrics.iter().map(point_count).sum();
    ScrapedRequest {
        request: scrape_request(job, instance, metrics),
        points,
        warnings,
    }
}

fn point_count(metric: &Metric) -> usize {
    match &metric.data {
        Some(metric::Data::Gauge(g)) => g.data_points.len(),
        Some(metric::Data::Sum(s)) => s.data_points.len(),
        Some(metric::Data::Histogram(h)) => h.data_points.len(),
        Some(metric::Data::Summary(s)) => s.data_points.len(),
        Some(metric::Data::ExponentialHistogram(h)) => h.data_points.len(),
        None => 0,
    }
}

/// 0.0.4 writers (the Python client) put a counter's, histogram's or summary's `_created` in a
/// gauge family of its own (`x_created` next to `x_total` / `x`); it is the start time of that
/// family's series, not a metric of its own.
struct ExternalCreated<'a> {
    /// Family name of the counter/histogram/summary → its `_created` family.
    by_target: HashMap<&'a str, &'a Family>,
    /// `_created` families used that way (not converted on their own).
    consumed: Vec<&'a str>,
}

fn external_created(exposition: &Exposition) -> ExternalCreated<'_> {
    let mut by_target = HashMap::new();
    let mut consumed = Vec::new();
    for family in &exposition.families {
        if !matches!(family.kind, MetricType::Gauge | MetricType::Untyped) {
            continue;
        }
        let Some(stem) = family.name.strip_suffix("_created") else {
            continue;
        };
        let target = exposition.families.iter().find(|f| {
            matches!(
                f.kind,
                MetricType::Counter | MetricType::Histogram | MetricType::Summary
            ) && (f.name == stem || f.name.strip_suffix("_total") == Some(stem))
        });
        if let Some(target) = target {
            by_target.insert(target.name.as_str(), family);
            consumed.push(family.name.as_str());
        }
    }
    ExternalCreated {
        by_target,
        consumed,
    }
}

/// `_created` values of a family (its own `x_created` samples and an external family's), by
/// sorted labels.
fn created_by_labels(
    family: &Family,
    external: Option<&Family>,
) -> HashMap<Vec<(String, String)>, f64> {
    let own_name = format!("{}_created", family.name);
    let stem_name = family
        .name
        .strip_suffix("_total")
        .map(|stem| format!("{stem}_created"));
    family
        .samples
        .iter()
        .filter(|s| s.name == own_name || stem_name.as_deref() == Some(s.name.as_str()))
        .chain(external.into_iter().flat_map(|f| f.samples.iter()))
        .map(|s| (sorted_labels(&s.labels), s.value))
        .collect()
}

/// Samples grouped by their own name, in order of first appearance.
fn by_sample_name<'a>(
    samples: impl Iterator<Item = &'a Sample>,
) -> Vec<(&'a str, Vec<&'a Sample>)> {
    let mut groups: Vec<(&str, Vec<&Sample>)> = Vec::new();
    for sample in samples {
        match groups.iter_mut().find(|(n, _)| *n == sample.name) {
            Some((_, group)) => group.push(sample),
            None => groups.push((sample.name.as_str(), vec![sample])),
        }
    }
    groups
}

fn number_point(
    sample: &Sample,
    start_ns: u64,
    scrape_time_ns: u64,
    warnings: &mut Vec<ParseWarning>,
) -> NumberDataPoint {
    NumberDataPoint {
        attributes: label_attrs(&sample.labels, ""),
        start_time_unix_nano: start_ns,
        time_unix_nano: point_time_ns(sample.timestamp_ms, scrape_time_ns, sample.line, warnings),
        value: Some(number_data_point::Value::AsDouble(sample.value)),
        ..Default::default()
    }
}

fn counter_metrics(
    family: &Family,
    external: Option<&Family>,
    scrape_time_ns: u64,
    metrics: &mut Vec<Metric>,
    warnings: &mut Vec<ParseWarning>,
) {
    let created = created_by_labels(family, external);
    let values = family
        .samples
        .iter()
        .filter(|s| !s.name.ends_with("_created") || s.name == family.name);
    for (name, samples) in by_sample_name(values) {
        let points = samples
            .iter()
            .map(|s| {
                let start = created_ns(created.get(&sorted_labels(&s.labels)).copied());
                number_point(s, start, scrape_time_ns, warnings)
            })
            .collect();
        metrics.push(Metric {
            name: name.to_string(),
            description: family.help.clone().unwrap_or_default(),
            unit: family.unit.clone().unwrap_or_default(),
            data: Some(metric::Data::Sum(Sum {
                data_points: points,
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            })),
            ..Default::default()
        });
    }
}

fn histogram_metric(
    family: &Family,
    external: Option<&Family>,
    scrape_time_ns: u64,
    warnings: &mut Vec<ParseWarning>,
) -> Option<Metric> {
    let external_created = created_by_labels(&empty_like(family), external);
    let line = family.samples.first().map_or(0, |s| s.line);
    // Incomplete series were reported by the parser; only complete ones are converted.
    let points: Vec<HistogramDataPoint> = family
        .histogram_series()
        .into_iter()
        .filter_map(Result::ok)
        .map(|series| {
            let created = series
                .created_s
                .or_else(|| external_created.get(&series.labels).copied());
            HistogramDataPoint {
                attributes: label_attrs(&series.labels, ""),
                start_time_unix_nano: created_ns(created),
                time_unix_nano: point_time_ns(series.timestamp_ms, scrape_time_ns, line, warnings),
                count: series.count,
                sum: series.sum,
                bucket_counts: series.bucket_counts,
                explicit_bounds: series.bounds,
                ..Default::default()
            }
        })
        .collect();
    (!points.is_empty()).then(|| Metric {
        name: family.name.clone(),
        description: family.help.clone().unwrap_or_default(),
        unit: family.unit.clone().unwrap_or_default(),
        data: Some(metric::Data::Histogram(Histogram {
            data_points: points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    })
}

fn summary_metric(
    family: &Family,
    external: Option<&Family>,
    scrape_time_ns: u64,
    warnings: &mut Vec<ParseWarning>,
) -> Option<Metric> {
    let external_created = created_by_labels(&empty_like(family), external);
    let line = family.samples.first().map_or(0, |s| s.line);
    let points: Vec<SummaryDataPoint> = family
        .summary_series()
        .into_iter()
        .filter_map(Result::ok)
        .map(|series| {
            let created = series
                .created_s
                .or_else(|| external_created.get(&series.labels).copied());
            SummaryDataPoint {
                attributes: label_attrs(&series.labels, ""),
                start_time_unix_nano: created_ns(created),
                time_unix_nano: point_time_ns(series.timestamp_ms, scrape_time_ns, line, warnings),
                count: series.count,
                sum: series.sum,
                quantile_values: series
                    .quantiles
                    .iter()
                    .map(|(quantile, value)| ValueAtQuantile {
                        quantile: *quantile,
                        value: *value,
                    })
                    .collect(),
                ..Default::default()
            }
        })
        .collect();
    (!points.is_empty()).then(|| Metric {
        name: family.name.clone(),
        description: family.help.clone().unwrap_or_default(),
        unit: family.unit.clone().unwrap_or_default(),
        data: Some(metric::Data::Summary(Summary {
            data_points: points,
        })),
        ..Default::default()
    })
}

/// A family with `family`'s name and no samples, to look up only an external `_created` family.
fn empty_like(family: &Family) -> Family {
    Family {
        name: family.name.clone(),
        kind: family.kind,
        help: None,
        unit: None,
        samples: Vec::new(),
    }
}
