//! Test support: run the simulator into files or memory, parse the OTLP back, and turn engine
//! spans into `requests` rows with the normalizer the server uses.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::Path;

use infersight_model::mapping::AttributeMapper;
use infersight_model::normalize::{SpanFacts, normalize_request};
use infersight_model::{AttrValue, RequestRecord};
use infersight_sim::{FileSink, MemorySink, SimConfig, SimSummary, Simulator};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};

pub fn attr(value: &AnyValue) -> AttrValue {
    match &value.value {
        Some(Value::StringValue(s)) => AttrValue::Str(s.clone()),
        Some(Value::IntValue(i)) => AttrValue::Int(*i),
        Some(Value::DoubleValue(d)) => AttrValue::Double(*d),
        Some(Value::BoolValue(b)) => AttrValue::Bool(*b),
        Some(Value::ArrayValue(a)) => AttrValue::Array(a.values.iter().map(attr).collect()),
        _ => AttrValue::Empty,
    }
}

pub fn pairs(kvs: &[KeyValue]) -> Vec<(String, AttrValue)> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(attr).unwrap_or(AttrValue::Empty),
            )
        })
        .collect()
}

/// A span with its resource, flattened.
#[derive(Debug, Clone)]
pub struct SpanRow {
    pub service: String,
    pub service_version: String,
    pub name: String,
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    pub parent: Vec<u8>,
    pub start_ns: i64,
    pub end_ns: i64,
    pub attrs: BTreeMap<String, AttrValue>,
}

impl SpanRow {
    pub fn duration_ms(&self) -> f64 {
        (self.end_ns - self.start_ns) as f64 / 1e6
    }
    pub fn int(&self, key: &str) -> Option<i64> {
        match self.attrs.get(key) {
            Some(AttrValue::Int(i)) => Some(*i),
            _ => None,
        }
    }
}

/// The emitted telemetry, parsed back.
pub struct Emitted {
    pub summary: SimSummary,
    pub traces: Vec<ExportTraceServiceRequest>,
    pub sink: MemorySink,
}

pub fn run_memory(config: SimConfig) -> Emitted {
    let sim = Simulator::new(config).expect("valid config");
    let mut sink = MemorySink::default();
    let summary = sim.run(&mut sink).expect("run");
    Emitted {
        summary,
        traces: std::mem::take(&mut sink.traces),
        sink,
    }
}

/// Runs into files and parses `traces.jsonl` back (the Collector file-exporter encoding).
pub fn run_files(config: SimConfig, dir: &Path) -> (SimSummary, Vec<ExportTraceServiceRequest>) {
    let sim = Simulator::new(config).expect("valid config");
    let mut sink = FileSink::create(dir).expect("sink");
    let summary = sim.run(&mut sink).expect("run");
    (summary, read_traces(&dir.join("traces.jsonl")))
}

pub fn read_traces(path: &Path) -> Vec<ExportTraceServiceRequest> {
    let file = std::fs::File::open(path).expect("traces file");
    std::io::BufReader::new(file)
        .lines()
        .map(|line| serde_json::from_str(&line.unwrap()).expect("OTLP JSON line"))
        .collect()
}

pub fn spans(traces: &[ExportTraceServiceRequest]) -> Vec<SpanRow> {
    let mut out = Vec::new();
    for export in traces {
        for rs in &export.resource_spans {
            let resource = rs
                .resource
                .as_ref()
                .map(|r| pairs(&r.attributes))
                .unwrap_or_default();
            let label = |key: &str| {
                resource
                    .iter()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, v)| v.as_label())
                    .unwrap_or_default()
            };
            let service = label("service.name");
            let version = label("service.version");
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    out.push(SpanRow {
                        service: service.clone(),
                        service_version: version.clone(),
                        name: span.name.clone(),
                        trace_id: span.trace_id.clone(),
                        span_id: span.span_id.clone(),
                        parent: span.parent_span_id.clone(),
                        start_ns: span.start_time_unix_nano as i64,
                        end_ns: span.end_time_unix_nano as i64,
                        attrs: pairs(&span.attributes).into_iter().collect(),
                    });
                }
            }
        }
    }
    out
}

/// Every span the normalizer turns into a `requests` row.
pub fn requests(traces: &[ExportTraceServiceRequest]) -> Vec<RequestRecord> {
    let mapper = AttributeMapper::default();
    let mut out = Vec::new();
    for export in traces {
        for rs in &export.resource_spans {
            let resource = rs
                .resource
                .as_ref()
                .map(|r| pairs(&r.attributes))
                .unwrap_or_default();
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    let facts = SpanFacts {
                        ts_ns: span.start_time_unix_nano as i64,
                        end_ts_ns: Some(span.end_time_unix_nano as i64),
                        ..Default::default()
                    };
                    if let Some(row) =
                        normalize_request(&mapper, &resource, &pairs(&span.attributes), &facts)
                            .expect("every emitted attribute converts")
                    {
                        out.push(row);
                    }
                }
            }
        }
    }
    out
}

pub fn quantile(values: &[f64], q: f64) -> f64 {
    assert!(!values.is_empty(), "quantile of nothing");
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// A short fleet run: 16 workers, 30 simulated minutes (incident = last 10), Poisson.
pub fn short(scenario: infersight_sim::Scenario, seed: u64) -> SimConfig {
    let mut config = SimConfig::new(scenario);
    config.seed = seed;
    config.duration_s = 1_800.0;
    config.rate_per_s = 30.0;
    config
}

/// Data folder for trace replays, or `None` (with a message) when it is absent.
pub fn data_dir() -> Option<std::path::PathBuf> {
    let dir = infersight_sim::default_data_dir();
    if dir.join("llm_traces").is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: trace data not found at {} (set INFERSIGHT_DATA_DIR)",
            dir.display()
        );
        None
    }
}
