//! Where simulated telemetry goes: the `TelemetrySink` trait (the caller decides: files, an OTLP
//! endpoint, memory), and the file sink — OTLP JSON Lines in the encoding the OpenTelemetry
//! Collector's file exporter writes (one `Export*ServiceRequest` per line; hex ids, int64 as
//! strings, camelCase), plus one raw engine log file per worker.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::error::SimError;
use crate::scenario::GroundTruth;

/// Receives the simulator's output in time order, one chunk of simulated time after another.
pub trait TelemetrySink {
    fn traces(&mut self, request: ExportTraceServiceRequest) -> Result<(), SimError>;
    fn logs(&mut self, request: ExportLogsServiceRequest) -> Result<(), SimError>;
    fn metrics(&mut self, request: ExportMetricsServiceRequest) -> Result<(), SimError>;
    /// One line of a worker's raw engine output (stdout/stderr), with the worker's name, its
    /// runtime (`vllm`, `sglang`, `tgi`, the `service.name` of its other telemetry) and its time.
    /// Lines of one worker arrive in time order.
    fn raw_log_line(
        &mut self,
        worker: &str,
        service: &str,
        ts_ns: i64,
        line: &str,
    ) -> Result<(), SimError>;
    /// A chunk of simulated time is complete (up to `until_ns`); `fraction` of the run is done.
    fn chunk_done(&mut self, _until_ns: i64, _fraction: f64) -> Result<(), SimError> {
        Ok(())
    }
    /// The run is complete; flush.
    fn finish(&mut self) -> Result<(), SimError> {
        Ok(())
    }
}

/// Keeps everything in memory (tests, small in-process runs).
#[derive(Debug, Default)]
pub struct MemorySink {
    pub traces: Vec<ExportTraceServiceRequest>,
    pub logs: Vec<ExportLogsServiceRequest>,
    pub metrics: Vec<ExportMetricsServiceRequest>,
    /// (worker, service, ts, line)
    pub raw_lines: Vec<(String, String, i64, String)>,
}

impl TelemetrySink for MemorySink {
    fn traces(&mut self, request: ExportTraceServiceRequest) -> Result<(), SimError> {
        self.traces.push(request);
        Ok(())
    }
    fn logs(&mut self, request: ExportLogsServiceRequest) -> Result<(), SimError> {
        self.logs.push(request);
        Ok(())
    }
    fn metrics(&mut self, request: ExportMetricsServiceRequest) -> Result<(), SimError> {
        self.metrics.push(request);
        Ok(())
    }
    fn raw_log_line(
        &mut self,
        worker: &str,
        service: &str,
        ts_ns: i64,
        line: &str,
    ) -> Result<(), SimError> {
        self.raw_lines.push((
            worker.to_string(),
            service.to_string(),
            ts_ns,
            line.to_string(),
        ));
        Ok(())
    }
}

/// File names inside the output folder.
pub const TRACES_FILE: &str = "traces.jsonl";
pub const LOGS_FILE: &str = "logs.jsonl";
pub const METRICS_FILE: &str = "metrics.jsonl";
pub const RAW_DIR: &str = "raw";
pub const GROUND_TRUTH_FILE: &str = "ground_truth.json";

/// Writes `traces.jsonl`, `logs.jsonl`, `metrics.jsonl` and `raw/<worker>.log` into a folder.
pub struct FileSink {
    dir: PathBuf,
    traces: BufWriter<File>,
    logs: BufWriter<File>,
    metrics: BufWriter<File>,
    raw: BTreeMap<String, BufWriter<File>>,
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> SimError + '_ {
    move |source| SimError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn create(path: &Path) -> Result<BufWriter<File>, SimError> {
    File::create(path)
        .map(|f| BufWriter::with_capacity(1 << 20, f))
        .map_err(io_error(path))
}

fn write_json_line<T: serde::Serialize>(
    out: &mut BufWriter<File>,
    value: &T,
    path: &Path,
) -> Result<(), SimError> {
    serde_json::to_writer(&mut *out, value).map_err(|e| SimError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    out.write_all(b"\n").map_err(io_error(path))
}

impl FileSink {
    /// Creates the folder (and `raw/`) and the three JSON Lines files, truncating old ones.
    pub fn create(dir: &Path) -> Result<Self, SimError> {
        std::fs::create_dir_all(dir.join(RAW_DIR)).map_err(io_error(dir))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            traces: create(&dir.join(TRACES_FILE))?,
            logs: create(&dir.join(LOGS_FILE))?,
            metrics: create(&dir.join(METRICS_FILE))?,
            raw: BTreeMap::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl TelemetrySink for FileSink {
    fn traces(&mut self, request: ExportTraceServiceRequest) -> Result<(), SimError> {
        let path = self.dir.join(TRACES_FILE);
        write_json_line(&mut self.traces, &request, &path)
    }
    fn logs(&mut self, request: ExportLogsServiceRequest) -> Result<(), SimError> {
        let path = self.dir.join(LOGS_FILE);
        write_json_line(&mut self.logs, &request, &path)
    }
    fn metrics(&mut self, request: ExportMetricsServiceRequest) -> Result<(), SimError> {
        let path = self.dir.join(METRICS_FILE);
        write_json_line(&mut self.metrics, &request, &path)
    }
    fn raw_log_line(
        &mut self,
        worker: &str,
        _service: &str,
        _ts_ns: i64,
        line: &str,
    ) -> Result<(), SimError> {
        if !self.raw.contains_key(worker) {
            let path = self.dir.join(RAW_DIR).join(format!("{worker}.log"));
            self.raw.insert(worker.to_string(), create(&path)?);
        }
        let out = self.raw.get_mut(worker).expect("inserted above");
        out.write_all(line.as_bytes())
            .and_then(|()| out.write_all(b"\n"))
            .map_err(|source| SimError::Io {
                path: PathBuf::from(format!("{RAW_DIR}/{worker}.log")),
                source,
            })
    }
    fn finish(&mut self) -> Result<(), SimError> {
        let dir = self.dir.clone();
        self.traces.flush().map_err(io_error(&dir))?;
        self.logs.flush().map_err(io_error(&dir))?;
        self.metrics.flush().map_err(io_error(&dir))?;
        for out in self.raw.values_mut() {
            out.flush().map_err(io_error(&dir))?;
        }
        Ok(())
    }
}

/// Writes `ground_truth.json` (pretty, stable key order) into `dir`.
pub fn write_ground_truth(dir: &Path, truth: &GroundTruth) -> Result<PathBuf, SimError> {
    let path = dir.join(GROUND_TRUTH_FILE);
    let mut text = serde_json::to_string_pretty(truth).map_err(|e| SimError::Io {
        path: path.clone(),
        source: std::io::Error::other(e),
    })?;
    text.push('\n');
    std::fs::write(&path, text).map_err(io_error(&path))?;
    Ok(path)
}
