//! `infersight simulate` and `infersight scenarios`: run the fleet simulator (crate
//! `infersight-sim`) and deliver its telemetry — to files (OTLP JSON Lines + raw engine logs +
//! `ground_truth.json`) or to a running server's OTLP/HTTP receiver (protobuf, honouring 429/503
//! `Retry-After`). The OTLP/HTTP sink is also what `demo` uses to feed its in-process server.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use infersight_sim::{
    ArrivalKind, DimensionNames, FileSink, Scenario, SimConfig, SimError, SimErrorKind, SimSummary,
    Simulator, TelemetrySink,
};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use serde_json::json;

use crate::cli::OutputFormat;
use crate::exit::CliError;

pub fn sim_error(e: SimError) -> CliError {
    match e.kind() {
        SimErrorKind::BadInput => CliError::usage(e.to_string()),
        SimErrorKind::Failed => CliError::failed(e.to_string()),
    }
}

/// `infersight scenarios`: name and description of every scenario.
pub fn scenarios(format: OutputFormat) -> Result<i32, CliError> {
    use std::io::Write as _;
    let mut text = String::new();
    match format {
        OutputFormat::Json => {
            let list: Vec<_> = Scenario::ALL
                .iter()
                .map(|s| json!({"name": s.name(), "description": s.description()}))
                .collect();
            text = serde_json::Value::Array(list).to_string() + "\n";
        }
        OutputFormat::Csv => {
            text.push_str("name,description\n");
            for s in Scenario::ALL {
                text.push_str(&format!(
                    "{},\"{}\"\n",
                    s.name(),
                    s.description().replace('"', "\"\"")
                ));
            }
        }
        OutputFormat::Table => {
            let width = Scenario::ALL
                .iter()
                .map(|s| s.name().len())
                .max()
                .unwrap_or(0);
            for s in Scenario::ALL {
                text.push_str(&format!("{:width$}  {}\n", s.name(), s.description()));
            }
        }
    }
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Ok(0)
}

/// Everything `infersight simulate` was asked for.
#[derive(Debug, Clone)]
pub struct SimulateArgs {
    pub scenario: String,
    pub seed: u64,
    pub duration: String,
    pub start: Option<String>,
    pub workers: usize,
    pub rate: f64,
    pub arrivals: String,
    pub dimensions: Vec<String>,
    pub out: Option<PathBuf>,
    pub otlp: Option<String>,
    pub ground_truth: Option<PathBuf>,
    /// Fraction of requests with per-token span events (0 = none).
    pub token_events: f64,
    /// SGLang workers trace their phases as child spans instead of latency attributes.
    pub phase_spans: bool,
    pub format: OutputFormat,
    pub quiet: bool,
}

/// Resolves the arrival source: `auto` replays Mooncake when the data folder has it, else Poisson.
fn arrival_kind(text: &str, data_dir: &std::path::Path) -> Result<ArrivalKind, CliError> {
    if text == "auto" {
        let kind = ArrivalKind::Mooncake;
        let present =
            infersight_sim::arrivals::trace_path(kind, data_dir).is_some_and(|p| p.is_file());
        if present {
            return Ok(kind);
        }
        eprintln!(
            "infersight simulate: no trace data at {} (INFERSIGHT_DATA_DIR); using Poisson arrivals",
            data_dir.display()
        );
        return Ok(ArrivalKind::Poisson);
    }
    text.parse().map_err(sim_error)
}

pub fn build_config(args: &SimulateArgs) -> Result<SimConfig, CliError> {
    let scenario: Scenario = args.scenario.parse().map_err(sim_error)?;
    let mut config = SimConfig::new(scenario);
    config.seed = args.seed;
    let duration_ns =
        infersight_model::time::parse_duration_ns(&args.duration).ok_or_else(|| {
            CliError::usage(format!(
                "--duration `{}`: expected e.g. 90s, 30m, 1h, 2d",
                args.duration
            ))
        })?;
    config.duration_s = duration_ns as f64 / 1e9;
    if let Some(start) = &args.start {
        config.start_ns =
            infersight_model::time::parse_time(start, infersight_model::time::now_ns())
                .map_err(|e| CliError::usage(format!("--start: {e}")))?;
    }
    config.workers = args.workers;
    config.rate_per_s = args.rate;
    config.token_events = args.token_events;
    config.phase_spans = args.phase_spans;
    let data_dir = infersight_sim::default_data_dir();
    config.arrivals = arrival_kind(&args.arrivals, &data_dir)?;
    config.data_dir = Some(data_dir);
    let mut names = DimensionNames::default();
    for spec in &args.dimensions {
        names = names.with_override(spec).map_err(sim_error)?;
    }
    config.dimension_names = names;
    config.validate().map_err(sim_error)?;
    Ok(config)
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

/// `infersight simulate` (blocking: run it on a blocking thread).
pub fn simulate(args: SimulateArgs) -> Result<i32, CliError> {
    let config = build_config(&args)?;
    let started = std::time::Instant::now();
    let sim = Simulator::new(config.clone()).map_err(sim_error)?;
    let truth = sim.ground_truth();
    let show = !args.quiet && std::io::stderr().is_terminal();
    let (summary, destination) = match (&args.out, &args.otlp) {
        (Some(dir), None) => {
            let mut sink = FileSink::create(dir).map_err(sim_error)?;
            let summary = run_into(sim, &mut sink, progress_bar("simulating", show))?;
            (summary, dir.display().to_string())
        }
        (None, Some(url)) => {
            let mut sink = OtlpHttpSink::new(url);
            let summary = run_into(sim, &mut sink, progress_bar("sending over OTLP/HTTP", show))?;
            (summary, sink.base_url.clone())
        }
        _ => {
            return Err(CliError::usage(
                "give exactly one of --out DIR and --otlp URL",
            ));
        }
    };
    let truth_path = match (&args.ground_truth, &args.out) {
        (Some(path), _) => {
            let text = serde_json::to_string_pretty(&truth)
                .map_err(|e| CliError::failed(e.to_string()))?;
            std::fs::write(path, text + "\n")
                .map_err(|e| CliError::failed(format!("{}: {e}", path.display())))?;
            Some(path.clone())
        }
        (None, Some(dir)) => {
            Some(infersight_sim::write_ground_truth(dir, &truth).map_err(sim_error)?)
        }
        (None, None) => None,
    };
    let seconds = started.elapsed().as_secs_f64();
    match args.format {
        OutputFormat::Json => println!(
            "{}",
            json!({
                "scenario": config.scenario.name(),
                "destination": destination,
                "ground_truth_file": truth_path.as_ref().map(|p| p.display().to_string()),
                "seconds": (seconds * 1000.0).round() / 1000.0,
                "summary": summary,
                "ground_truth": truth,
            })
        ),
        OutputFormat::Table | OutputFormat::Csv => {
            println!(
                "{}: {} requests ({} spans, {} token events, {} log records, {} raw log lines, {} metric points; {} timeouts, {} errors, {} preemptions) in {seconds:.1} s → {destination}",
                config.scenario.name(),
                summary.requests,
                summary.spans,
                summary.token_events,
                summary.log_records,
                summary.raw_lines,
                summary.metric_points,
                summary.timeouts,
                summary.errors,
                summary.preemptions
            );
            println!(
                "arrivals: {}; incident {} .. {}",
                config.arrivals.name(),
                truth.incident_window.start,
                truth.incident_window.end
            );
            if let Some(path) = &truth_path {
                println!("ground truth: {}", path.display());
            }
        }
    }
    Ok(0)
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
