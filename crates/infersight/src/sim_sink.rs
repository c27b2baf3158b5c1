//! Delivery of the fleet simulator's telemetry (crate `infersight-sim`): a progress bar over
//! simulated time, and the OTLP/HTTP sink that posts to a running server's receiver (protobuf,
//! honouring 429/503 `Retry-After`). `simulate --otlp` and `demo` (which feeds its in-process
//! server) send through it.

use std::collections::BTreeMap;
use std::time::Duration;

use infersight_sim::{SimError, SimErrorKind, SimSummary, Simulator, TelemetrySink};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::exit::CliError;

pub fn sim_error(e: SimError) -> CliError {
    match e.kind() {
        SimErrorKind::BadInput => CliError::usage(e.to_string()),
        SimErrorKind::Failed => CliError::failed(e.to_string()),
    }
}

/// Wraps a sink with a progress bar over simulated time.
struct Progress<'a> {
    inner: &'a mut dyn TelemetrySink,
    bar: indicatif::ProgressBar,
}

impl TelemetrySink for Progress<'_> {
    fn traces(&mut self, r: ExportTraceServiceRequest) -> Result<(), SimError> {
        self.inner.traces(r)
    }
    fn logs(&mut self, r: ExportLogsServiceRequest) -> Result<(), SimError> {
        self.inner.logs(r)
    }
    fn metrics(&mut self, r: ExportMetricsServiceRequest) -> Result<(), SimError> {
        self.inner.metrics(r)
    }
    fn raw_log_line(&mut self, w: &str, s: &str, ts: i64, l: &str) -> Result<(), SimError> {
        self.inner.raw_log_line(w, s, ts, l)
    }
    fn chunk_done(&mut self, until_ns: i64, fraction: f64) -> Result<(), SimError> {
        self.inner.chunk_done(until_ns, fraction)?;
        self.bar.set_position((fraction * 1_000.0) as u64);
        Ok(())
    }
    fn finish(&mut self) -> Result<(), SimError> {
        self.inner.finish()?;
        self.bar.finish_and_clear();
        Ok(())
    }
}

pub fn progress_bar(message: &str, show: bool) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(1_000);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{message} {{wide_bar}} {{percent}}% simulated, {{elapsed}}"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// Runs the simulator into `sink` with an optional progress bar.
pub fn run_into(
    sim: Simulator,
    sink: &mut dyn TelemetrySink,
    bar: indicatif::ProgressBar,
) -> Result<SimSummary, CliError> {
    let mut progress = Progress { inner: sink, bar };
    sim.run(&mut progress).map_err(sim_error)
}

/// Posts telemetry to an OTLP/HTTP receiver as protobuf; raw engine lines become OTLP log records
/// (one resource per worker), sent once per chunk.
pub struct OtlpHttpSink {
    pub base_url: String,
    agent: ureq::Agent,
    raw: BTreeMap<(String, String), Vec<LogRecord>>,
    pub retries: u64,
}

impl OtlpHttpSink {
    pub fn new(url: &str) -> Self {
        Self {
            base_url: url.trim_end_matches('/').to_string(),
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(120)))
                .build()
                .into(),
            raw: BTreeMap::new(),
            retries: 0,
        }
    }

    fn post(&mut self, path: &str, body: Vec<u8>) -> Result<(), SimError> {
        let url = format!("{}{path}", self.base_url);
        let mut transport_failures = 0u32;
        let mut busy = 0u32;
        loop {
            let response = self
                .agent
                .post(&url)
                .header("content-type", "application/x-protobuf")
                .send(&body[..]);
            let mut response = match response {
                Ok(r) => r,
                Err(e) => {
                    transport_failures += 1;
                    if transport_failures > 5 {
                        return Err(SimError::Sink(format!("sending to {url}: {e}")));
                    }
                    std::thread::sleep(Duration::from_millis(200 << transport_failures));
                    self.retries += 1;
                    continue;
                }
            };
            match response.status().as_u16() {
                200..=299 => return Ok(()),
                429 | 503 => {
                    busy += 1;
                    if busy > 600 {
                        return Err(SimError::Sink(format!("{url} stayed busy (429/503)")));
                    }
                    let wait = response
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .map_or(Duration::from_millis(100), |s| {
                            Duration::from_secs_f64(s.clamp(0.01, 10.0))
                        });
                    std::thread::sleep(wait);
                    self.retries += 1;
                }
                status => {
                    let text = response.body_mut().read_to_string().unwrap_or_default();
                    return Err(SimError::Sink(format!(
                        "{url} answered {status}: {}",
                        text.chars().take(300).collect::<String>()
                    )));
                }
            }
        }
    }

    fn flush_raw(&mut self) -> Result<(), SimError> {
        if self.raw.is_empty() {
            return Ok(());
        }
        let resource_logs = std::mem::take(&mut self.raw)
            .into_iter()
            .map(|((worker, service), log_records)| ResourceLogs {
                resource: Some(Resource {
                    attributes: vec![
                        text_kv("service.name", service),
                        text_kv("k8s.pod.name", worker),
                    ],
                    ..Default::default()
                }),
                scope_logs: vec![ScopeLogs {
                    log_records,
                    ..Default::default()
                }],
                schema_url: String::new(),
            })
            .collect();
        self.post(
            "/v1/logs",
            ExportLogsServiceRequest { resource_logs }.encode_to_vec(),
        )
    }
}

fn text_kv(key: &str, value: String) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value)),
        }),
        ..Default::default()
    }
}

impl TelemetrySink for OtlpHttpSink {
    fn traces(&mut self, request: ExportTraceServiceRequest) -> Result<(), SimError> {
        self.post("/v1/traces", request.encode_to_vec())
    }
    fn logs(&mut self, request: ExportLogsServiceRequest) -> Result<(), SimError> {
        self.post("/v1/logs", request.encode_to_vec())
    }
    fn metrics(&mut self, request: ExportMetricsServiceRequest) -> Result<(), SimError> {
        self.post("/v1/metrics", request.encode_to_vec())
    }
    fn raw_log_line(
        &mut self,
        worker: &str,
        service: &str,
        ts_ns: i64,
        line: &str,
    ) -> Result<(), SimError> {
        self.raw
            .entry((worker.to_string(), service.to_string()))
            .or_default()
            .push(LogRecord {
                time_unix_nano: ts_ns as u64,
                observed_time_unix_nano: ts_ns as u64,
                body: Some(AnyValue {
                    value: Some(Value::StringValue(line.to_string())),
                }),
                ..Default::default()
            });
        Ok(())
    }
    fn chunk_done(&mut self, _until_ns: i64, _fraction: f64) -> Result<(), SimError> {
        self.flush_raw()
    }
    fn finish(&mut self) -> Result<(), SimError> {
        self.flush_raw()
    }
}
