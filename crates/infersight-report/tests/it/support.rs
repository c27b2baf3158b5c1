//! A real store holding a simulated incident, for the report's chart-data and browser tests.
//!
//! The report crate does not depend on the ingest pipeline, so the simulator's OTLP output is
//! converted here the short way: engine spans go through the model's own normalization
//! (`infersight_model::normalize::normalize_request`, the same function the OTLP receiver
//! calls), gauges get their canonical names from the mapping table and their worker from the
//! resource's `k8s.pod.name`, and raw engine log lines get a crude template (tokens with digits
//! become `<*>`) instead of Drain's. That is enough for the RCA to find the fault and for the
//! chart queries to run against the tables they read in production.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use infersight_model::mapping::{AttributeMapper, canonical_metric};
use infersight_model::normalize::{SpanFacts, normalize_request};
use infersight_model::value::AttrValue;
use infersight_model::{LogRecord, MetricRecord, RequestRecord, Table, TableBatch, TemplateRecord};
use infersight_query::QueryEngine;
use infersight_rca::RcaReport;
use infersight_report::Report;
use infersight_report::data::ChartData;
use infersight_sim::{ArrivalKind, MemorySink, Scenario, SimConfig, Simulator};
use infersight_store::{StorageBackend, Store, StoreOptions};
use serde_json::Value;

/// The simulated incident: the scenario's leaking worker, the RCA verdict and the chart data.
pub struct Simulated {
    pub leak_worker: String,
    pub rca: RcaReport,
    pub charts: ChartData,
    /// Chart data for the same store with [`degraded_rca`]: no windows, an unknown slice key.
    pub degraded: ChartData,
    pub report: Report,
}

/// The verdict without windows or symptom, its top slice on an attribute no request has: the
/// chart data must fall back to the last hour of data and leave the slice's series empty.
pub fn degraded_rca(rca: &RcaReport) -> RcaReport {
    let mut rca = rca.clone();
    rca.incident_window = None;
    rca.baseline_window = None;
    rca.symptom = None;
    rca.log_evidence.clear();
    rca.signals.clear();
    if let Some(top) = rca.root_causes.first_mut() {
        top.dimensions =
            BTreeMap::from([("serving.no_such_key".to_string(), "x".to_string())]).into();
    }
    rca
}

/// Simulates `gpu_memory_leak` once per test binary (8 workers, 10 req/s, 30 minutes, Poisson
/// arrivals, seed 1), loads it into a fresh store, runs the RCA and collects the chart data.
pub fn simulated() -> &'static Simulated {
    static CELL: OnceLock<Simulated> = OnceLock::new();
    CELL.get_or_init(|| {
        // own thread and runtime: the cell may be filled from inside another test's runtime
        std::thread::spawn(build_simulated)
            .join()
            .expect("simulated store builds")
    })
}

fn build_simulated() -> Simulated {
    let mut config = SimConfig::new(Scenario::GpuMemoryLeak);
    config.seed = 1;
    config.workers = 8;
    config.rate_per_s = 10.0;
    config.duration_s = 1800.0;
    config.arrivals = ArrivalKind::Poisson;
    let simulator = Simulator::new(config).expect("valid simulator config");
    let truth = simulator.ground_truth();
    let leak_worker = truth
        .root_causes
        .iter()
        .find_map(|c| c.dimensions.get("worker").cloned())
        .expect("the leak scenario names its worker");
    let mut sink = MemorySink::default();
    simulator.run(&mut sink).expect("simulation runs");

    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(Store::open(StoreOptions::new(dir.path().join("data"))).expect("store"));
    let batches = convert(&sink);
    store.append(&batches).expect("append");
    let engine = QueryEngine::new(Arc::clone(&store) as Arc<dyn StorageBackend>);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (rca, charts, degraded) = runtime.block_on(async {
        let rca = infersight_rca::analyse(&engine, Default::default())
            .await
            .expect("rca runs");
        let charts = infersight_report::data::collect(&engine, &rca)
            .await
            .expect("chart data");
        let degraded = infersight_report::data::collect(&engine, &degraded_rca(&rca))
            .await
            .expect("chart data without windows");
        (rca, charts, degraded)
    });
    drop(engine);
    drop(store);
    let report = Report {
        incident_id: "sim-gpu-memory-leak".into(),
        generated_at: "2025-11-29T12:00:00Z".into(),
        rca: rca.clone(),
        knowledge: Vec::new(),
        suggestions: Vec::new(),
        checklist: Vec::new(),
        charts: charts.clone(),
        narrative: None,
        narrative_note: Some("no LLM endpoint configured".into()),
        incident: Default::default(),
        lead: Default::default(),
    };
    Simulated {
        leak_worker,
        rca,
        charts,
        degraded,
        report,
    }
}

// ------------------------------------------------------------------------ OTLP JSON reading

fn attr_value(value: &Value) -> AttrValue {
    let Some(object) = value.as_object() else {
        return AttrValue::Empty;
    };
    if let Some(s) = object.get("stringValue").and_then(Value::as_str) {
        return AttrValue::Str(s.to_string());
    }
    if let Some(v) = object.get("intValue") {
        let i = v
            .as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()));
        return i.map_or(AttrValue::Empty, AttrValue::Int);
    }
    if let Some(v) = object.get("doubleValue") {
        let f = v
            .as_f64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()));
        return f.map_or(AttrValue::Empty, AttrValue::Double);
    }
    if let Some(b) = object.get("boolValue").and_then(Value::as_bool) {
        return AttrValue::Bool(b);
    }
    if let Some(values) = object
        .get("arrayValue")
        .and_then(|a| a.get("values"))
        .and_then(Value::as_array)
    {
        return AttrValue::Array(values.iter().map(attr_value).collect());
    }
    AttrValue::Empty
}

fn attributes(value: Option<&Value>) -> Vec<(String, AttrValue)> {
    value
        .and_then(Value::as_array)
        .map(|pairs| {
            pairs
                .iter()
                .filter_map(|kv| {
                    let key = kv.get("key")?.as_str()?.to_string();
                    Some((
                        key,
                        kv.get("value").map(attr_value).unwrap_or(AttrValue::Empty),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn nanos(value: Option<&Value>) -> Option<i64> {
    let v = value?;
    v.as_i64()
        .or_else(|| v.as_u64().map(|u| u as i64))
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

fn label(attrs: &[(String, AttrValue)], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| match v {
            AttrValue::Str(s) => Some(s.clone()),
            _ => None,
        })
}

fn each<'a>(value: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Requests (engine spans), metrics (gauges and sums) and logs (raw engine lines, templated).
fn convert(sink: &MemorySink) -> Vec<TableBatch> {
    let mapper = AttributeMapper::default();
    let mut requests: Vec<RequestRecord> = Vec::new();
    for export in &sink.traces {
        let export = serde_json::to_value(export).expect("traces serialize");
        for resource_spans in each(&export, "resourceSpans") {
            let resource = attributes(resource_spans.pointer("/resource/attributes"));
            for scope in each(resource_spans, "scopeSpans") {
                for span in each(scope, "spans") {
                    // the engine's span is the request; the gateway's is joined in by the
                    // pipeline's correlate stage, which this short path leaves out
                    if span.get("name").and_then(Value::as_str) != Some("llm_request") {
                        continue;
                    }
                    let Some(start) = nanos(span.get("startTimeUnixNano")) else {
                        continue;
                    };
                    let attrs = attributes(span.get("attributes"));
                    let code = span.pointer("/status/code");
                    let error = code.and_then(Value::as_i64) == Some(2)
                        || code.and_then(Value::as_str) == Some("STATUS_CODE_ERROR");
                    let facts = SpanFacts {
                        ts_ns: start,
                        end_ts_ns: nanos(span.get("endTimeUnixNano")),
                        trace_id: span
                            .get("traceId")
                            .and_then(Value::as_str)
                            .map(String::from),
                        span_id: span.get("spanId").and_then(Value::as_str).map(String::from),
                        status: Some(if error { "error" } else { "ok" }.into()),
                    };
                    if let Ok(Some(record)) = normalize_request(&mapper, &resource, &attrs, &facts)
                    {
                        requests.push(record);
                    }
                }
            }
        }
    }

    let mut metrics: Vec<MetricRecord> = Vec::new();
    for export in &sink.metrics {
        let export = serde_json::to_value(export).expect("metrics serialize");
        for resource_metrics in each(&export, "resourceMetrics") {
            let resource = attributes(resource_metrics.pointer("/resource/attributes"));
            let worker = label(&resource, "k8s.pod.name");
            for scope in each(resource_metrics, "scopeMetrics") {
                for metric in each(scope, "metrics") {
                    let Some(source) = metric.get("name").and_then(Value::as_str) else {
                        continue;
                    };
                    let (name, scale) = match canonical_metric(source) {
                        Some((mapping, suffix)) => {
                            (format!("{}{suffix}", mapping.canonical), mapping.scale)
                        }
                        None => (source.to_string(), 1.0),
                    };
                    let points = metric
                        .pointer("/gauge/dataPoints")
                        .or_else(|| metric.pointer("/sum/dataPoints"))
                        .and_then(Value::as_array);
                    for point in points.into_iter().flatten() {
                        let Some(ts) = nanos(point.get("timeUnixNano")) else {
                            continue;
                        };
                        let value = point
                            .get("asDouble")
                            .and_then(Value::as_f64)
                            .or_else(|| nanos(point.get("asInt")).map(|i| i as f64));
                        let Some(value) = value else { continue };
                        metrics.push(MetricRecord {
                            ts,
                            name: Some(name.clone()),
                            source_name: Some(source.to_string()),
                            kind: Some("gauge".into()),
                            value: Some(value * scale),
                            worker: worker.clone(),
                            labels: "{}".into(),
                            ..Default::default()
                        });
                    }
                }
            }
        }
    }

    // raw engine lines → logs with crude templates
    let mut logs: Vec<LogRecord> = Vec::new();
    let mut templates: BTreeMap<String, (String, i64, i64, i64)> = BTreeMap::new();
    for (worker, service, ts, line) in &sink.raw_lines {
        let template = crude_template(line);
        let id = format!("{:016x}", fnv1a(&template));
        let entry = templates
            .entry(id.clone())
            .or_insert_with(|| (template.clone(), *ts, *ts, 0));
        entry.1 = entry.1.min(*ts);
        entry.2 = entry.2.max(*ts);
        entry.3 += 1;
        logs.push(LogRecord {
            ts: *ts,
            severity: Some(severity(line).into()),
            service: Some(service.clone()),
            worker: Some(worker.clone()),
            body: Some(line.clone()),
            template_id: Some(id),
            attrs: "{}".into(),
            ..Default::default()
        });
    }
    let template_rows: Vec<TemplateRecord> = templates
        .into_iter()
        .map(|(id, (template, first, last, count))| TemplateRecord {
            ts: last,
            template_id: Some(id),
            template: Some(template),
            first_seen: Some(first),
            last_seen: Some(last),
            count: Some(count),
            param_types: "{}".into(),
            org: None,
        })
        .collect();

    let mut batches = Vec::new();
    for chunk in requests.chunks(8192) {
        batches.push(TableBatch {
            table: Table::Requests,
            batch: RequestRecord::to_batch(chunk),
        });
    }
    for chunk in metrics.chunks(8192) {
        batches.push(TableBatch {
            table: Table::Metrics,
            batch: MetricRecord::to_batch(chunk),
        });
    }
    for chunk in logs.chunks(8192) {
        batches.push(TableBatch {
            table: Table::Logs,
            batch: LogRecord::to_batch(chunk),
        });
    }
    if !template_rows.is_empty() {
        batches.push(TableBatch {
            table: Table::Templates,
            batch: TemplateRecord::to_batch(&template_rows),
        });
    }
    batches
}

fn severity(line: &str) -> &'static str {
    let head: String = line.chars().take(40).collect();
    if head.contains("ERROR") {
        "ERROR"
    } else if head.contains("WARN") {
        "WARN"
    } else {
        "INFO"
    }
}

/// Tokens containing a digit become `<*>` (timestamps, counts, ids, percentages).
fn crude_template(line: &str) -> String {
    line.split_whitespace()
        .map(|token| {
            if token.chars().any(|c| c.is_ascii_digit()) {
                "<*>"
            } else {
                token
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn fnv1a(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}
