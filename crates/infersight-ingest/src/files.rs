//! File receiver behind `infersight ingest PATH...`: a file on disk (plain or gzip) → lines →
//! canonical batches handed to the caller's sink every `batch_rows` records. Three line formats:
//! OTLP JSON lines (the OpenTelemetry Collector file exporter; decoded and converted by
//! [`crate::otlp`]), generic JSON lines (requests when they carry GenAI/LLM fields, logs
//! otherwise) and raw text logs (vLLM, SGLang, TGI, Triton, uvicorn, Python logging, …).
//!
//! Lines are read with a hard cap: a line longer than `max_line_bytes` is skipped to its newline
//! without ever being held in memory, counted as rejected, and reading goes on.
//!
//! OTLP trace lines are decoded and converted on worker threads (one per core) and taken back in
//! file order; the span-tree memory is applied in that order, so the output is the same as
//! converting line after line on one thread.

use std::cell::Cell;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::rc::Rc;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use infersight_model::mapping::{AttributeMapper, REQUEST_ATTRIBUTES, RequestColumn, ValueKind};
use infersight_model::normalize::{SpanFacts, attrs_json, normalize_request};
use infersight_model::{AttrValue, LogRecord, RequestRecord, Table, TableBatch};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use serde_json::{Map, Value as Json};

use crate::error::IngestError;
use crate::otlp::convert::traces_to_batches_detached;
use crate::otlp::convert::{
    Converted, logs_to_batches, metrics_to_batches, traces_to_batches_with,
};
use crate::otlp::decode::decode_json;
use crate::otlp::tree::{ExportTraces, SpanTreeCache};

/// How the lines of a file are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileFormat {
    /// Decided per file from its first non-empty line.
    #[default]
    Auto,
    /// One `Export{Trace,Logs,Metrics}ServiceRequest` in OTLP/JSON per line.
    OtlpJsonl,
    /// One JSON object per line: a request or a log record.
    JsonLines,
    /// One log record per line of text.
    Raw,
}

impl FileFormat {
    pub fn name(self) -> &'static str {
        match self {
            FileFormat::Auto => "auto",
            FileFormat::OtlpJsonl => "otlp-jsonl",
            FileFormat::JsonLines => "jsonl",
            FileFormat::Raw => "raw",
        }
    }

    pub fn from_name(name: &str) -> Option<FileFormat> {
        match name.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(FileFormat::Auto),
            "otlp-jsonl" | "otlp_jsonl" | "otlp" | "otlpjsonl" => Some(FileFormat::OtlpJsonl),
            "jsonl" | "json-lines" | "json_lines" | "json" | "ndjson" => {
                Some(FileFormat::JsonLines)
            }
            "raw" | "text" | "log" => Some(FileFormat::Raw),
            _ => None,
        }
    }
}

/// Attribute naming the file a log line came from (OTel semantic conventions).
pub const FILE_PATH_ATTR: &str = "log.file.path";

pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
pub const DEFAULT_BATCH_ROWS: usize = 8192;
/// Input bytes converted before the pending records are handed on, whatever their count.
const MAX_PENDING_BYTES: usize = 64 * 1024 * 1024;
/// Line buffers larger than this are not kept for reuse (one huge line must not pin its memory).
const MAX_SPARE_LINE_BYTES: usize = 4 * 1024 * 1024;
/// At most this many rejection reasons are kept per file.
pub const MAX_FIRST_ERRORS: usize = 5;

#[derive(Debug, Clone)]
pub struct FileOptions {
    pub format: FileFormat,
    /// Service of records that do not name one themselves.
    pub service: Option<String>,
    /// Worker of records that do not name one themselves.
    pub worker: Option<String>,
    /// Longer lines are rejected without being read into memory.
    pub max_line_bytes: usize,
    /// Records per call of the batch sink (0 = the default).
    pub batch_rows: usize,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            format: FileFormat::Auto,
            service: None,
            worker: None,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            batch_rows: DEFAULT_BATCH_ROWS,
        }
    }
}

/// What reading one file did. `records_read = records_stored + rejected` unless the sink failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileSummary {
    /// The format the file was read as (the detected one under `Auto`).
    pub format: FileFormat,
    /// Lines seen, empty ones included.
    pub lines: u64,
    /// Records found: spans, log records and metric points of OTLP lines; objects of JSON lines;
    /// non-empty lines of raw text (over-long lines count as one rejected record).
    pub records_read: u64,
    /// Records in batches the sink accepted.
    pub records_stored: u64,
    pub rejected: u64,
    /// The first few rejection reasons, each `path:line: reason`.
    pub first_errors: Vec<String>,
}

/// Reads one file and hands its records, converted to canonical batches, to `on_batch` every
/// `batch_rows` records and at the end; `on_progress` gets the bytes read from disk so far
/// (compressed bytes for a gzip file, so it can be compared with the file size).
///
/// A record that cannot be used is counted and the reading continues; an I/O error, or the sink
/// refusing a batch, stops it (batches handed over before stay stored).
pub fn read_file(
    path: &Path,
    options: &FileOptions,
    mapper: &AttributeMapper,
    on_batch: &mut dyn FnMut(Vec<TableBatch>) -> Result<(), String>,
    on_progress: &mut dyn FnMut(u64),
) -> Result<FileSummary, IngestError> {
    let io_error = |source| IngestError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_error)?;
    let mtime_ns = file
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| DateTime::<Utc>::from(t).timestamp_nanos_opt())
        .unwrap_or_else(infersight_model::time::now_ns);
    let bytes_read = Rc::new(Cell::new(0u64));
    let counting = CountingReader {
        inner: file,
        count: Rc::clone(&bytes_read),
    };
    let mut buffered = BufReader::with_capacity(256 * 1024, counting);
    let is_gzip = buffered
        .fill_buf()
        .map_err(io_error)?
        .starts_with(&[0x1f, 0x8b]);
    let mut reader: Box<dyn BufRead> = if is_gzip {
        let decoder = flate2::bufread::MultiGzDecoder::new(buffered);
        Box::new(BufReader::with_capacity(256 * 1024, decoder))
    } else {
        Box::new(buffered)
    };

    let mut state = FileReader {
        path_display: path.display().to_string(),
        options,
        mapper,
        on_batch,
        summary: FileSummary {
            format: options.format,
            ..Default::default()
        },
        pending: Pending::default(),
        mtime_ns,
        last_ts_ns: None,
        now: Utc::now(),
        file_attrs: serde_json::json!({ FILE_PATH_ATTR: path.display().to_string() }).to_string(),
        span_tree: SpanTreeCache::default(),
    };
    let max_line = options.max_line_bytes.max(1);
    let workers = conversion_workers();
    let jobs_capacity = 2 * workers;
    let (to_workers, jobs) = std::sync::mpsc::sync_channel::<TraceJob>(jobs_capacity);
    let jobs = std::sync::Mutex::new(jobs);
    let (to_reader, done) = std::sync::mpsc::channel::<TraceDone>();
    std::thread::scope(|scope| -> Result<FileSummary, IngestError> {
        for index in 0..workers {
            let to_reader = to_reader.clone();
            let jobs = &jobs;
            std::thread::Builder::new()
                .name(format!("infersight-convert-{index}"))
                .spawn_scoped(scope, move || {
                    convert_traces_worker(jobs, &to_reader, mapper)
                })
                .map_err(io_error)?;
        }
        drop(to_reader);
        let mut in_order = InOrder {
            to_workers: Some(to_workers),
            done,
            waiting: std::collections::BTreeMap::new(),
            next_sent: 0,
            next_done: 0,
            capacity: (jobs_capacity + workers) as u64,
            pending_line_bytes: 0,
            spare_lines: Vec::new(),
        };
        let mut line = Vec::new();
        let mut last_progress = 0u64;
        loop {
            let outcome = match read_line_bounded(reader.as_mut(), &mut line, max_line) {
                Ok(outcome) => outcome,
                Err(source) => {
                    in_order.drain(&mut state)?;
                    state.flush()?;
                    on_progress(bytes_read.get());
                    return Err(io_error(source));
                }
            };
            match outcome {
                LineRead::Eof => break,
                LineRead::TooLong(length) => {
                    in_order.drain(&mut state)?;
                    state.summary.lines += 1;
                    state.summary.records_read += 1;
                    state.reject(format!("line exceeds {max_line} bytes ({length} bytes)"));
                    in_order.after_line(&mut state, 0)?;
                }
                LineRead::Line => {
                    state.summary.lines += 1;
                    if state.is_trace_line(&line) {
                        // the workers' lines come back as buffers for the next ones
                        let next = in_order.spare_lines.pop().unwrap_or_default();
                        let raw = std::mem::replace(&mut line, next);
                        in_order.send(&mut state, raw)?;
                    } else {
                        in_order.drain(&mut state)?;
                        state.line(&line);
                        in_order.after_line(&mut state, line.len())?;
                    }
                }
            }
            if bytes_read.get() >= last_progress + (1 << 20) {
                last_progress = bytes_read.get();
                on_progress(last_progress);
            }
        }
        in_order.drain(&mut state)?;
        // workers stop when the job channel closes; the scope joins them
        in_order.to_workers = None;
        state.flush()?;
        on_progress(bytes_read.get());
        Ok(state.summary)
    })
}

/// Threads that decode and convert OTLP trace lines: one per core, at most four (the reader and
/// the store writer need their share too; beyond that the writer is the bottleneck anyway).
fn conversion_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
}

/// One OTLP trace line for a worker, numbered in reading order.
struct TraceJob {
    seq: u64,
    line_number: u64,
    raw: Vec<u8>,
}

/// A worker's result for one line: the decoded export (or the decoding error) and its conversion
/// without the span-tree cache, which the reader checks against the cache in order.
struct TraceDone {
    seq: u64,
    line_number: u64,
    raw: Vec<u8>,
    /// The conversion without the cache and the export's traces, or why it did not decode.
    converted: Result<(Result<Converted, IngestError>, ExportTraces), IngestError>,
}

fn convert_traces_worker(
    jobs: &std::sync::Mutex<std::sync::mpsc::Receiver<TraceJob>>,
    to_reader: &std::sync::mpsc::Sender<TraceDone>,
    mapper: &AttributeMapper,
) {
    loop {
        // A poisoned lock means another worker panicked; the scope reports that panic.
        let job = match jobs.lock() {
            Ok(receiver) => receiver.recv(),
            Err(_) => return,
        };
        let Ok(TraceJob {
            seq,
            line_number,
            raw,
        }) = job
        else {
            return;
        };
        // the export is dropped here, on the thread that allocated it
        let converted = decode_json::<ExportTraceServiceRequest>(&raw)
            .map(|request| traces_to_batches_detached(request, mapper));
        let done = TraceDone {
            seq,
            line_number,
            raw,
            converted,
        };
        if to_reader.send(done).is_err() {
            return;
        }
    }
}

/// Keeps the lines handed to the workers in reading order: results are taken in the order the
/// lines were read, and the hand-over to the sink is checked after each line exactly as when every
/// line was converted on the reading thread, so the batches and their boundaries do not change.
struct InOrder {
    to_workers: Option<std::sync::mpsc::SyncSender<TraceJob>>,
    done: std::sync::mpsc::Receiver<TraceDone>,
    waiting: std::collections::BTreeMap<u64, TraceDone>,
    next_sent: u64,
    next_done: u64,
    /// Lines in flight at most.
    capacity: u64,
    /// Input bytes of the lines taken since the last hand-over.
    pending_line_bytes: usize,
    /// Buffers of converted lines, reused for reading: a fresh buffer per line, grown to a
    /// megabyte, made the kernel zero new pages for every line.
    spare_lines: Vec<Vec<u8>>,
}

impl InOrder {
    fn send(&mut self, state: &mut FileReader<'_>, raw: Vec<u8>) -> Result<(), IngestError> {
        while self.next_sent - self.next_done >= self.capacity {
            self.take_next(state)?;
        }
        let job = TraceJob {
            seq: self.next_sent,
            line_number: state.summary.lines,
            raw,
        };
        let sent = self
            .to_workers
            .as_ref()
            .is_some_and(|to_workers| to_workers.send(job).is_ok());
        if !sent {
            return Err(IngestError::Sink(
                "the conversion workers stopped".to_string(),
            ));
        }
        self.next_sent += 1;
        Ok(())
    }

    /// Takes the results of every line in flight, in order.
    fn drain(&mut self, state: &mut FileReader<'_>) -> Result<(), IngestError> {
        while self.next_done < self.next_sent {
            self.take_next(state)?;
        }
        Ok(())
    }

    fn take_next(&mut self, state: &mut FileReader<'_>) -> Result<(), IngestError> {
        let done = loop {
            if let Some(done) = self.waiting.remove(&self.next_done) {
                break done;
            }
            let done = self
                .done
                .recv()
                .map_err(|_| IngestError::Sink("the conversion workers stopped".to_string()))?;
            self.waiting.insert(done.seq, done);
        };
        self.next_done += 1;
        let line_bytes = done.raw.len();
        let raw = state.finish_trace_line(done);
        if self.spare_lines.len() < 2 && raw.capacity() <= MAX_SPARE_LINE_BYTES {
            self.spare_lines.push(raw);
        }
        self.after_line(state, line_bytes)
    }

    /// Hands batches on by record count, and by input size so that long lines cannot pile up
    /// gigabytes (or overflow an Arrow string column) before a hand-over.
    fn after_line(
        &mut self,
        state: &mut FileReader<'_>,
        line_bytes: usize,
    ) -> Result<(), IngestError> {
        self.pending_line_bytes += line_bytes;
        if state.pending.records >= state.batch_rows()
            || self.pending_line_bytes >= MAX_PENDING_BYTES
        {
            state.flush()?;
            self.pending_line_bytes = 0;
        }
        Ok(())
    }
}

/// Counts the bytes read from the file underneath any decompression.
struct CountingReader<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineRead {
    Eof,
    /// A line (without its `\n`) is in the buffer.
    Line,
    /// The line was longer than the cap; it was skipped and its length is given.
    TooLong(u64),
}

/// Reads the next line into `line` (without the newline), holding at most `max_bytes` of it: a
/// longer line is consumed chunk by chunk up to its newline and reported as `TooLong`.
fn read_line_bounded(
    reader: &mut dyn BufRead,
    line: &mut Vec<u8>,
    max_bytes: usize,
) -> std::io::Result<LineRead> {
    line.clear();
    let mut length = 0u64;
    let mut too_long = false;
    let mut started = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(match (started, too_long) {
                (false, _) => LineRead::Eof,
                (true, true) => LineRead::TooLong(length),
                (true, false) => LineRead::Line,
            });
        }
        started = true;
        let newline = memchr::memchr(b'\n', available);
        let chunk = &available[..newline.unwrap_or(available.len())];
        length += chunk.len() as u64;
        if !too_long {
            if line.len() + chunk.len() > max_bytes {
                too_long = true;
                line.clear();
                line.shrink_to(64 * 1024);
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let consumed = chunk.len() + usize::from(newline.is_some());
        reader.consume(consumed);
        if newline.is_some() {
            return Ok(if too_long {
                LineRead::TooLong(length)
            } else {
                LineRead::Line
            });
        }
    }
}

/// Records converted but not yet handed to the sink.
#[derive(Default)]
struct Pending {
    requests: Vec<RequestRecord>,
    logs: Vec<LogRecord>,
    /// Batches converted from OTLP lines.
    batches: Vec<TableBatch>,
    /// Source records in all of the above.
    records: u64,
}

struct FileReader<'a> {
    path_display: String,
    options: &'a FileOptions,
    mapper: &'a AttributeMapper,
    on_batch: &'a mut dyn FnMut(Vec<TableBatch>) -> Result<(), String>,
    summary: FileSummary,
    pending: Pending,
    /// Time of records that carry none and follow no record that had one.
    mtime_ns: i64,
    /// Time of the last raw line that had one: continuation lines (tracebacks) inherit it.
    last_ts_ns: Option<i64>,
    now: DateTime<Utc>,
    /// `{"log.file.path": …}`: the attrs of every raw line, and part of those of JSON log lines.
    file_attrs: String,
    /// Phase spans of earlier lines, for request spans written after their children.
    span_tree: SpanTreeCache,
}

impl FileReader<'_> {
    fn batch_rows(&self) -> u64 {
        match self.options.batch_rows {
            0 => DEFAULT_BATCH_ROWS as u64,
            n => n as u64,
        }
    }

    fn reject(&mut self, reason: String) {
        self.summary.rejected += 1;
        self.note_error(reason);
    }

    fn note_error(&mut self, reason: String) {
        self.note_error_at(self.summary.lines, reason);
    }

    /// Notes the reason of a rejection on line `line` (1-based).
    fn note_error_at(&mut self, line: u64, reason: String) {
        if self.summary.first_errors.len() < MAX_FIRST_ERRORS {
            self.summary
                .first_errors
                .push(format!("{}:{line}: {reason}", self.path_display));
        }
    }

    fn line(&mut self, raw: &[u8]) {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if self.summary.format == FileFormat::Auto {
            self.summary.format = detect_format(raw);
        }
        match self.summary.format {
            FileFormat::OtlpJsonl => self.otlp_line(raw),
            FileFormat::JsonLines => self.json_line(raw),
            FileFormat::Raw | FileFormat::Auto => self.raw_line(raw),
        }
    }

    fn otlp_line(&mut self, raw: &[u8]) {
        // Fast path: the signal is the top-level key, found near the start of the line, and the
        // bytes go straight to serde; only a failing line is parsed into a `Value` (to count its
        // items and report the error).
        let converted = match otlp_signal(raw) {
            Some(OtlpSignal::Traces) => decode_json::<ExportTraceServiceRequest>(raw)
                .and_then(|req| traces_to_batches_with(&req, self.mapper, Some(&self.span_tree))),
            Some(OtlpSignal::Logs) => decode_json::<ExportLogsServiceRequest>(raw)
                .and_then(|req| logs_to_batches(&req, self.mapper)),
            Some(OtlpSignal::Metrics) => decode_json::<ExportMetricsServiceRequest>(raw)
                .and_then(|req| metrics_to_batches(&req, self.mapper)),
            None => {
                self.summary.records_read += 1;
                return match serde_json::from_slice::<Json>(raw) {
                    Err(e) => self.reject(format!("invalid json: {e}")),
                    Ok(_) => self.reject(
                        "not an OTLP export request (no resourceSpans, resourceLogs or resourceMetrics)"
                            .into(),
                    ),
                };
            }
        };
        let line = self.summary.lines;
        self.take_converted(converted, raw, line);
    }

    /// Whether a line goes to the conversion workers: an OTLP traces line, once the file's format
    /// is known (every other line is read on the reading thread, after the workers' lines).
    fn is_trace_line(&self, raw: &[u8]) -> bool {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        self.summary.format == FileFormat::OtlpJsonl
            && !raw.iter().all(u8::is_ascii_whitespace)
            && otlp_signal(raw) == Some(OtlpSignal::Traces)
    }

    /// The in-order half of a trace line converted by a worker: an export whose traces have phase
    /// spans in the cache is converted again with it; otherwise the worker's conversion is the
    /// one the cache would have given, and the export's phase spans are remembered.
    fn finish_trace_line(&mut self, done: TraceDone) -> Vec<u8> {
        let raw = done.raw.strip_suffix(b"\r").unwrap_or(&done.raw);
        let converted = match done.converted {
            // rare: decoded again, to be converted with the cache
            Ok((_, export)) if self.span_tree.knows_any_trace_of(&export) => {
                decode_json::<ExportTraceServiceRequest>(raw).and_then(|request| {
                    traces_to_batches_with(&request, self.mapper, Some(&self.span_tree))
                })
            }
            Ok((Ok(converted), export)) => {
                self.span_tree.remember_export(export);
                Ok(converted)
            }
            Ok((Err(e), _)) | Err(e) => Err(e),
        };
        self.take_converted(converted, raw, done.line_number);
        done.raw
    }

    /// Counts a converted OTLP line (of line number `line`) and keeps its batches.
    fn take_converted(&mut self, converted: Result<Converted, IngestError>, raw: &[u8], line: u64) {
        let items = match &converted {
            Ok(_) => 0,
            Err(_) => serde_json::from_slice::<Json>(raw)
                .map(|v| otlp_item_count(&v))
                .unwrap_or(1),
        };
        match converted {
            Ok(Converted {
                batches,
                accepted,
                rejected,
                rejection_message,
            }) => {
                self.summary.records_read += accepted + rejected;
                self.summary.rejected += rejected;
                if let Some(message) = rejection_message {
                    self.note_error_at(line, message);
                }
                self.pending.batches.extend(batches);
                self.pending.records += accepted;
            }
            Err(e) => {
                let items = items.max(1);
                self.summary.records_read += items;
                self.summary.rejected += items;
                self.note_error_at(line, e.to_string());
            }
        }
    }

    fn json_line(&mut self, raw: &[u8]) {
        self.summary.records_read += 1;
        let value: Json = match serde_json::from_slice(raw) {
            Ok(value) => value,
            Err(e) => return self.reject(format!("invalid json: {e}")),
        };
        let Json::Object(object) = value else {
            return self.reject(format!(
                "expected a JSON object, found {}",
                json_type(&value)
            ));
        };
        let mut pairs = Vec::with_capacity(object.len());
        flatten("", object, &mut pairs);
        match self.json_record(pairs, raw) {
            Ok(()) => self.pending.records += 1,
            Err(reason) => self.reject(reason),
        }
    }

    /// One flattened JSON object → a request row, or a log row when it is not a request.
    fn json_record(&mut self, mut pairs: Vec<(String, Json)>, raw: &[u8]) -> Result<(), String> {
        let ts = take_first(&mut pairs, TIME_KEYS, json_time_ns);
        let trace_id = take_first(&mut pairs, &["trace_id", "traceId", "trace.id"], json_label);
        let span_id = take_first(&mut pairs, &["span_id", "spanId", "span.id"], json_label);
        let ts_ns = ts.unwrap_or(self.mtime_ns);
        if looks_like_request(&pairs) {
            let facts = SpanFacts {
                ts_ns,
                end_ts_ns: None,
                trace_id,
                span_id,
                status: None,
            };
            let resource = self.option_resource();
            match json_request(self.mapper, &resource, pairs, facts)? {
                JsonRequest::Request(record) => {
                    self.pending.requests.push(*record);
                    return Ok(());
                }
                JsonRequest::NotARequest(back, facts) => {
                    return self.json_log(back, raw, ts_ns, facts.trace_id, facts.span_id);
                }
            }
        }
        self.json_log(pairs, raw, ts_ns, trace_id, span_id)
    }

    fn json_log(
        &mut self,
        mut pairs: Vec<(String, Json)>,
        raw: &[u8],
        ts_ns: i64,
        trace_id: Option<String>,
        span_id: Option<String>,
    ) -> Result<(), String> {
        let body = take_first(&mut pairs, BODY_KEYS, |v| match v {
            Json::Null => None,
            Json::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        })
        .unwrap_or_else(|| String::from_utf8_lossy(raw).into_owned());
        let severity = take_first(
            &mut pairs,
            &[
                "level",
                "severity",
                "levelname",
                "lvl",
                "severity_text",
                "log.level",
            ],
            json_severity,
        );
        let service = take_first(
            &mut pairs,
            &["service.name", "service", "service_name"],
            json_label,
        )
        .or_else(|| self.options.service.clone());
        let attrs: Vec<(String, AttrValue)> = pairs
            .iter()
            .map(|(k, v)| (k.clone(), AttrValue::from_json(v)))
            .collect();
        let mapped = |column: RequestColumn| {
            let mut best: Option<(usize, String)> = None;
            for (key, value) in &attrs {
                let Some((c, _, priority)) = self.mapper.lookup(key) else {
                    continue;
                };
                if c != column || best.as_ref().is_some_and(|(p, _)| *p <= priority) {
                    continue;
                }
                if let Some(label) = value.as_label().filter(|l| !l.is_empty()) {
                    best = Some((priority, label));
                }
            }
            best.map(|(_, label)| label)
        };
        let worker = mapped(RequestColumn::Worker).or_else(|| self.options.worker.clone());
        let request_id = mapped(RequestColumn::RequestId).or_else(|| {
            attrs
                .iter()
                .find(|(k, _)| matches!(k.as_str(), "request_id" | "requestId" | "req_id"))
                .and_then(|(_, v)| v.as_label())
        });
        let file_attr = [(
            FILE_PATH_ATTR.to_string(),
            AttrValue::Str(self.path_display.clone()),
        )];
        let record = LogRecord {
            ts: ts_ns,
            severity,
            service,
            worker,
            trace_id,
            span_id,
            request_id,
            body: Some(body),
            attrs: attrs_json(&file_attr, &attrs),
            ..Default::default()
        };
        self.pending.logs.push(record);
        Ok(())
    }

    fn option_resource(&self) -> Vec<(String, AttrValue)> {
        let mut resource = Vec::new();
        if let Some(service) = &self.options.service {
            resource.push(("service.name".to_string(), AttrValue::Str(service.clone())));
        }
        if let Some(worker) = &self.options.worker {
            resource.push(("worker".to_string(), AttrValue::Str(worker.clone())));
        }
        resource
    }

    fn raw_line(&mut self, raw: &[u8]) {
        self.summary.records_read += 1;
        let text = String::from_utf8_lossy(raw);
        let parsed = parse_log_prefix(&text, self.now);
        let ts = match parsed.ts_ns {
            Some(ts) => {
                self.last_ts_ns = Some(ts);
                ts
            }
            None => self.last_ts_ns.unwrap_or(self.mtime_ns),
        };
        self.pending.logs.push(LogRecord {
            ts,
            severity: parsed.severity.map(str::to_string),
            service: self.options.service.clone(),
            worker: self.options.worker.clone(),
            body: Some(text.into_owned()),
            attrs: self.file_attrs.clone(),
            ..Default::default()
        });
        self.pending.records += 1;
    }

    /// Hands pending records to the sink, grouped by table (see [`merge_by_table`]).
    fn flush(&mut self) -> Result<(), IngestError> {
        let pending = std::mem::take(&mut self.pending);
        if pending.records == 0
            && pending.batches.is_empty()
            && pending.requests.is_empty()
            && pending.logs.is_empty()
        {
            return Ok(());
        }
        let mut batches = pending.batches;
        if !pending.requests.is_empty() {
            batches.push(TableBatch {
                table: Table::Requests,
                batch: RequestRecord::to_batch(&pending.requests),
            });
        }
        if !pending.logs.is_empty() {
            batches.push(TableBatch {
                table: Table::Logs,
                batch: LogRecord::to_batch(&pending.logs),
            });
        }
        let batches = merge_by_table(batches)?;
        if !batches.is_empty() {
            (self.on_batch)(batches).map_err(IngestError::Sink)?;
        }
        self.summary.records_stored += pending.records;
        Ok(())
    }
}

/// Batches of at least this many rows on average are handed on as they are.
const MIN_HANDED_BATCH_ROWS: usize = 1024;

/// Groups batches by table (in table order, each table's batches in reading order).
/// Small batches of a table (exports of a few spans, say) are concatenated into one so the sink
/// does not pay its per-batch costs for a handful of rows; batches that are large already are
/// not copied again.
fn merge_by_table(batches: Vec<TableBatch>) -> Result<Vec<TableBatch>, IngestError> {
    let mut merged: Vec<TableBatch> = Vec::new();
    for table in Table::ALL {
        let parts: Vec<_> = batches
            .iter()
            .filter(|b| b.table == table && b.batch.num_rows() > 0)
            .map(|b| b.batch.clone())
            .collect();
        let rows: usize = parts.iter().map(|b| b.num_rows()).sum();
        if parts.len() > 1 && rows < MIN_HANDED_BATCH_ROWS * parts.len() {
            let batch = arrow::compute::concat_batches(&table.schema(), &parts)?;
            merged.push(TableBatch { table, batch });
        } else {
            merged.extend(parts.into_iter().map(|batch| TableBatch { table, batch }));
        }
    }
    Ok(merged)
}

/// Format of a file from its first non-empty line.
fn detect_format(line: &[u8]) -> FileFormat {
    let trimmed = line.trim_ascii_start();
    if !trimmed.starts_with(b"{") {
        return FileFormat::Raw;
    }
    match serde_json::from_slice::<Json>(line) {
        Ok(Json::Object(object)) => {
            let otlp = ["resourceSpans", "resourceLogs", "resourceMetrics"]
                .iter()
                .any(|key| object.contains_key(*key));
            if otlp {
                FileFormat::OtlpJsonl
            } else {
                FileFormat::JsonLines
            }
        }
        _ => FileFormat::Raw,
    }
}

/// Spans, log records or data points in an OTLP/JSON export request (to count a rejected line).
fn otlp_item_count(value: &Json) -> u64 {
    let count = |outer: &str, middle: &str, inner: &str| -> u64 {
        value[outer]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r[middle].as_array().into_iter().flatten())
            .map(|s| s[inner].as_array().map_or(0, |a| a.len() as u64))
            .sum()
    };
    count("resourceSpans", "scopeSpans", "spans")
        + count("resourceLogs", "scopeLogs", "logRecords")
        + count("resourceMetrics", "scopeMetrics", "metrics")
}

fn json_type(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------------------------
// JSON lines

/// Keys that carry a log record's body, in order of preference.
const BODY_KEYS: &[&str] = &["message", "msg", "body", "log"];

/// Keys that carry a record's time, in order of preference.
const TIME_KEYS: &[&str] = &[
    "ts",
    "timestamp",
    "time",
    "@timestamp",
    "start_time",
    "created",
];

/// Flattens nested objects into dotted keys (`{"gen_ai":{"request":{"model":…}}}` →
/// `gen_ai.request.model`); arrays stay values.
/// A top-level body (`"message": {…}`) stays one value: it is the log body.
fn flatten(prefix: &str, object: Map<String, Json>, out: &mut Vec<(String, Json)>) {
    for (key, value) in object {
        let is_body = prefix.is_empty() && BODY_KEYS.contains(&key.as_str());
        let key = if prefix.is_empty() {
            key
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            Json::Object(inner) if !inner.is_empty() && !is_body => flatten(&key, inner, out),
            other => out.push((key, other)),
        }
    }
}

/// Removes and converts the first of `keys` present whose value converts.
fn take_first<T>(
    pairs: &mut Vec<(String, Json)>,
    keys: &[&str],
    convert: impl Fn(&Json) -> Option<T>,
) -> Option<T> {
    for key in keys {
        if let Some(index) = pairs.iter().position(|(k, _)| k == key)
            && let Some(converted) = convert(&pairs[index].1)
        {
            pairs.remove(index);
            return Some(converted);
        }
    }
    None
}

fn json_label(value: &Json) -> Option<String> {
    AttrValue::from_json(value)
        .as_label()
        .filter(|s| !s.is_empty())
}

/// A JSON time: RFC 3339 / ISO 8601 text, or a Unix time in s, ms, µs or ns (by magnitude), as
/// a number or a numeric string.
pub fn json_time_ns(value: &Json) -> Option<i64> {
    match value {
        Json::Number(n) => match n.as_i64() {
            Some(integer) => epoch_int_to_ns(integer),
            None => epoch_float_to_ns(n.as_f64()?),
        },
        Json::String(s) => {
            let s = s.trim();
            if let Ok(integer) = s.parse::<i64>() {
                return epoch_int_to_ns(integer);
            }
            if let Ok(number) = s.parse::<f64>() {
                return epoch_float_to_ns(number);
            }
            parse_iso_timestamp(s)
        }
        _ => None,
    }
}

/// Nanoseconds per unit of a Unix time of unknown unit: below 1e11 it is seconds (until the year
/// 5138), below 1e14 milliseconds, below 1e17 microseconds, else nanoseconds.
fn epoch_unit_ns(magnitude: f64) -> i64 {
    if magnitude < 1e11 {
        1_000_000_000
    } else if magnitude < 1e14 {
        1_000_000
    } else if magnitude < 1e17 {
        1_000
    } else {
        1
    }
}

/// Integer Unix times are converted exactly (f64 would round nanoseconds).
fn epoch_int_to_ns(value: i64) -> Option<i64> {
    if value <= 0 {
        return None;
    }
    value.checked_mul(epoch_unit_ns(value as f64))
}

/// Fractional Unix times: the whole part exactly, the fraction rounded to the nanosecond.
fn epoch_float_to_ns(value: f64) -> Option<i64> {
    if !value.is_finite() || value <= 0.0 || value >= i64::MAX as f64 {
        return None;
    }
    let unit = epoch_unit_ns(value);
    let whole = value.trunc() as i64;
    let fraction = ((value - value.trunc()) * unit as f64).round() as i64;
    whole.checked_mul(unit)?.checked_add(fraction)
}

fn json_severity(value: &Json) -> Option<String> {
    match value {
        Json::String(s) if !s.trim().is_empty() => Some(
            normalize_severity(s.trim())
                .map(str::to_string)
                .unwrap_or_else(|| s.trim().to_ascii_uppercase()),
        ),
        // pino / bunyan numeric levels.
        Json::Number(n) => match n.as_i64()? {
            10 => Some("TRACE".into()),
            20 => Some("DEBUG".into()),
            30 => Some("INFO".into()),
            40 => Some("WARN".into()),
            50 => Some("ERROR".into()),
            60 => Some("FATAL".into()),
            _ => None,
        },
        _ => None,
    }
}

/// Keys that identify a JSON line as a request even without `gen_ai.*` / `llm.*` keys.
const REQUEST_HINT_KEYS: &[&str] = &[
    "model",
    "model_name",
    "usage.prompt_tokens",
    "usage.completion_tokens",
    "usage.input_tokens",
    "usage.output_tokens",
    "prompt_tokens",
    "completion_tokens",
    "input_tokens",
    "output_tokens",
    "ttft_ms",
    "e2e_ms",
    "queue_ms",
    "prefill_ms",
    "decode_ms",
];

fn looks_like_request(pairs: &[(String, Json)]) -> bool {
    pairs.iter().any(|(key, value)| {
        !value.is_null()
            && (key.starts_with("gen_ai.")
                || key.starts_with("llm.")
                || REQUEST_HINT_KEYS.contains(&key.as_str()))
    })
}

/// Common JSON-lines names for canonical columns (OpenAI `usage`, gateway logs).
const COLUMN_ALIASES: &[(&str, RequestColumn)] = &[
    ("model_name", RequestColumn::Model),
    ("usage.prompt_tokens", RequestColumn::InputTokens),
    ("usage.input_tokens", RequestColumn::InputTokens),
    ("prompt_tokens", RequestColumn::InputTokens),
    ("usage.completion_tokens", RequestColumn::OutputTokens),
    ("usage.output_tokens", RequestColumn::OutputTokens),
    ("completion_tokens", RequestColumn::OutputTokens),
    (
        "usage.prompt_tokens_details.cached_tokens",
        RequestColumn::CachedTokens,
    ),
];

enum JsonRequest {
    Request(Box<RequestRecord>),
    /// Nothing in the object marks a request after all; the pairs come back for a log row.
    NotARequest(Vec<(String, Json)>, SpanFacts),
}

/// A JSON object as a request row. Keys that are canonical column names (`ttft_ms`, `model`,
/// `tenant`, …) or their common aliases fill their column directly, in the column's unit, and win
/// over mapped attribute names; everything else goes through `normalize_request`.
fn json_request(
    mapper: &AttributeMapper,
    resource: &[(String, AttrValue)],
    pairs: Vec<(String, Json)>,
    facts: SpanFacts,
) -> Result<JsonRequest, String> {
    let mut direct: Vec<(RequestColumn, String, Json)> = Vec::new();
    let mut rest: Vec<(String, Json)> = Vec::new();
    for (key, value) in pairs {
        let column = RequestColumn::from_column_name(&key)
            .filter(|c| *c != RequestColumn::Service)
            .or_else(|| {
                COLUMN_ALIASES
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, c)| *c)
            });
        let Some(column) = column else {
            rest.push((key, value));
            continue;
        };
        // A canonical name wins over an alias (`model` over `model_name`); the loser stays an
        // attribute.
        match direct.iter().position(|(c, _, _)| *c == column) {
            None => direct.push((column, key, value)),
            Some(index) if key == column.column_name() => {
                let (_, old_key, old_value) =
                    std::mem::replace(&mut direct[index], (column, key, value));
                rest.push((old_key, old_value));
            }
            Some(_) => rest.push((key, value)),
        }
    }
    let mut attrs: Vec<(String, AttrValue)> = rest
        .iter()
        .map(|(k, v)| (k.clone(), AttrValue::from_json(v)))
        .collect();
    // A placeholder under the column's first mapped name makes normalize_request treat the
    // column as filled (and request-marking) and drop competing names into attrs; the real value
    // is set afterwards.
    for (column, _, value) in &direct {
        if value.is_null() {
            continue;
        }
        let Some(row) = REQUEST_ATTRIBUTES.iter().find(|row| row.column == *column) else {
            continue;
        };
        if attrs.iter().any(|(k, _)| k == row.key) {
            attrs.retain(|(k, _)| k != row.key);
        }
        let placeholder = match column.value_kind() {
            ValueKind::Label => AttrValue::Str("-".into()),
            ValueKind::Integer => AttrValue::Int(0),
            ValueKind::Number => AttrValue::Double(0.0),
        };
        attrs.push((row.key.to_string(), placeholder));
    }
    let Some(mut record) =
        normalize_request(mapper, resource, &attrs, &facts).map_err(|e| e.to_string())?
    else {
        let mut back = rest;
        back.extend(direct.into_iter().map(|(_, key, value)| (key, value)));
        return Ok(JsonRequest::NotARequest(back, facts));
    };
    for (column, key, value) in &direct {
        set_direct(&mut record, *column, key, value)?;
    }
    Ok(JsonRequest::Request(Box::new(record)))
}

/// Sets a request column from a JSON value given in the column's own unit.
fn set_direct(
    record: &mut RequestRecord,
    column: RequestColumn,
    key: &str,
    value: &Json,
) -> Result<(), String> {
    use RequestColumn::*;
    let attr = AttrValue::from_json(value);
    let wrong = |expected: &str| {
        format!(
            "attribute `{key}` has type {}, expected {expected}",
            attr.type_name()
        )
    };
    let number = || -> Result<Option<f64>, String> {
        match value {
            Json::Null => Ok(None),
            Json::Number(n) => Ok(n.as_f64()),
            Json::String(s) => s.trim().parse::<f64>().map(Some).map_err(|_| {
                format!("attribute `{key}` has value {s:?} that is not a valid number")
            }),
            _ => Err(wrong("number")),
        }
    };
    let integer = || -> Result<Option<i64>, String> {
        match number()? {
            Some(n) if n.fract() == 0.0 && n.is_finite() => Ok(Some(n as i64)),
            Some(n) => Err(format!(
                "attribute `{key}` has value {n} that is not a valid integer"
            )),
            None => Ok(None),
        }
    };
    let label = || -> Result<Option<String>, String> {
        match &attr {
            AttrValue::Empty => Ok(None),
            other => other.as_label().map(Some).ok_or_else(|| wrong("string")),
        }
    };
    match column {
        RequestId => record.request_id = label()?,
        Tenant => record.tenant = label()?,
        SessionId => record.session_id = label()?,
        Service => record.service = label()?,
        Runtime => record.runtime = label()?,
        Worker => record.worker = label()?,
        Device => record.device = label()?,
        Model => record.model = label()?,
        ModelVersion => record.model_version = label()?,
        LoraAdapters => record.lora_adapters = label()?,
        KvCachePolicy => record.kv_cache_policy = label()?,
        FinishReason => record.finish_reason = label()?,
        ErrorType => record.error_type = label()?,
        PromptHash => record.prompt_hash = label()?,
        BatchSize => record.batch_size = integer()?,
        InputTokens => record.input_tokens = integer()?,
        CachedTokens => record.cached_tokens = integer()?,
        OutputTokens => record.output_tokens = integer()?,
        MaxTokens => record.max_tokens = integer()?,
        SpecDraftTokens => record.spec_draft_tokens = integer()?,
        SpecAcceptedTokens => record.spec_accepted_tokens = integer()?,
        QueueMs => record.queue_ms = number()?,
        PrefillMs => record.prefill_ms = number()?,
        TtftMs => record.ttft_ms = number()?,
        DecodeMs => record.decode_ms = number()?,
        TpotMs => record.tpot_ms = number()?,
        ItlMaxMs => record.itl_max_ms = number()?,
        E2eMs => record.e2e_ms = number()?,
        Temperature => record.temperature = number()?,
        TopP => record.top_p = number()?,
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Raw text

/// What the start of a text log line says about the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinePrefix {
    pub ts_ns: Option<i64>,
    pub severity: Option<&'static str>,
}

/// The canonical severity for a level word (`WARNING` → `WARN`, `CRITICAL` → `FATAL`).
pub fn normalize_severity(word: &str) -> Option<&'static str> {
    Some(match word.to_ascii_uppercase().as_str() {
        "TRACE" => "TRACE",
        "DEBUG" | "DBG" => "DEBUG",
        "INFO" | "INFORMATION" | "NOTICE" => "INFO",
        "WARN" | "WARNING" => "WARN",
        "ERROR" | "ERR" => "ERROR",
        "FATAL" | "CRITICAL" | "CRIT" | "PANIC" | "EMERG" | "ALERT" => "FATAL",
        _ => return None,
    })
}

/// Parses the time and level at the start of a log line. Recognized times (without a zone they
/// are taken as UTC):
/// * RFC 3339 / ISO 8601, `T` or space separated, optionally in brackets
///   (`2024-11-29T02:17:03.123Z`, `[2024-11-29 02:17:03]`, Python's `2024-11-29 02:17:03,123`);
/// * vLLM's `INFO 11-29 02:17:03 file.py:123]`, with the year that puts it closest before `now`,
///   also behind vLLM V1's `(APIServer pid=1) ` prefix;
/// * glog (Triton): `I1129 02:17:03.123456 …`.
///
/// The level is the first of the first six words that is an upper-case level name (`INFO`,
/// `WARNING`, `ERROR:`, `[debug]`, `level=warn`).
pub fn parse_log_prefix(line: &str, now: DateTime<Utc>) -> LinePrefix {
    let line = strip_process_prefix(line.trim_start());
    let tokens: Vec<&str> = line.split_whitespace().take(8).collect();
    if tokens.is_empty() {
        return LinePrefix::default();
    }
    if let Some(prefix) = parse_vllm(&tokens, now).or_else(|| parse_glog(&tokens, now)) {
        return prefix;
    }
    // The time leads, or follows a level word (`INFO 2024-11-29 02:17:03 …`).
    let ts_ns = parse_iso_tokens(&tokens)
        .or_else(|| level_word(tokens[0]).and_then(|_| parse_iso_tokens(&tokens[1..])));
    let severity = tokens.iter().take(6).find_map(|token| level_word(token));
    LinePrefix { ts_ns, severity }
}

/// vLLM V1 prefixes lines with the process: `(APIServer pid=123) INFO 11-29 …`.
fn strip_process_prefix(line: &str) -> &str {
    if let Some(rest) = line.strip_prefix('(')
        && let Some(close) = rest.find(") ")
        && close < 64
    {
        return rest[close + 2..].trim_start();
    }
    line
}

/// A level word as a token: upper case, or marked as one by brackets or `level=`.
fn level_word(token: &str) -> Option<&'static str> {
    let lowered = token.to_ascii_lowercase();
    let (marked, rest) = match lowered.strip_prefix("level=") {
        Some(_) => (true, &token[6..]),
        None => (token.starts_with('[') || token.starts_with('<'), token),
    };
    let word = rest.trim_matches(|c: char| "[]()<>:,|\"'".contains(c));
    if word.is_empty() {
        return None;
    }
    let upper = word.chars().all(|c| c.is_ascii_uppercase());
    if !(upper || marked) {
        return None;
    }
    normalize_severity(word)
}

fn parse_vllm(tokens: &[&str], now: DateTime<Utc>) -> Option<LinePrefix> {
    let [level, date, time, ..] = tokens else {
        return None;
    };
    let severity = level_word(level)?;
    let (month, day) = date.split_once('-')?;
    if month.len() != 2 || day.len() != 2 {
        return None;
    }
    let month: u32 = month.parse().ok()?;
    let day: u32 = day.parse().ok()?;
    let time = NaiveTime::parse_from_str(time.trim_end_matches(']'), "%H:%M:%S%.f").ok()?;
    let ts_ns = ts_with_recent_year(month, day, time, now)?;
    Some(LinePrefix {
        ts_ns: Some(ts_ns),
        severity: Some(severity),
    })
}

fn parse_glog(tokens: &[&str], now: DateTime<Utc>) -> Option<LinePrefix> {
    let [head, time, ..] = tokens else {
        return None;
    };
    let bytes = head.as_bytes();
    if bytes.len() != 5 || !bytes[1..].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let severity = match bytes[0] {
        b'I' => "INFO",
        b'W' => "WARN",
        b'E' => "ERROR",
        b'F' => "FATAL",
        _ => return None,
    };
    let month: u32 = head[1..3].parse().ok()?;
    let day: u32 = head[3..5].parse().ok()?;
    let time = NaiveTime::parse_from_str(time, "%H:%M:%S%.f").ok()?;
    let ts_ns = ts_with_recent_year(month, day, time, now)?;
    Some(LinePrefix {
        ts_ns: Some(ts_ns),
        severity: Some(severity),
    })
}

/// A year-less time in the current year, or the previous one when that would be more than a day
/// in the future (a December log read in January).
fn ts_with_recent_year(month: u32, day: u32, time: NaiveTime, now: DateTime<Utc>) -> Option<i64> {
    let at_year = |year: i32| {
        NaiveDate::from_ymd_opt(year, month, day)
            .map(|date| Utc.from_utc_datetime(&date.and_time(time)))
    };
    let mut ts = at_year(now.year())?;
    if ts > now + chrono::Duration::days(1) {
        ts = at_year(now.year() - 1)?;
    }
    ts.timestamp_nanos_opt()
}

/// An ISO time in the first one or two tokens (`2024-11-29T02:17:03Z`, `2024-11-29 02:17:03,5`).
fn parse_iso_tokens(tokens: &[&str]) -> Option<i64> {
    let first = tokens.first()?.trim_start_matches('[');
    if !looks_like_date(first) {
        return None;
    }
    if first.len() > 10 {
        return parse_iso_timestamp(first.trim_end_matches([']', ',', '|']));
    }
    let time = tokens.get(1)?.trim_end_matches([']', ',', '|']);
    parse_iso_timestamp(&format!("{first}T{time}"))
}

fn looks_like_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

/// RFC 3339 or ISO 8601 date-time (`T` or space, `,` or `.` before the fraction, zone optional
/// and UTC when absent) → ns.
pub fn parse_iso_timestamp(text: &str) -> Option<i64> {
    let text = text.trim().trim_end_matches(':');
    if !looks_like_date(text) {
        return None;
    }
    let mut normalized = text.replacen(' ', "T", 1);
    if let Some(comma) = normalized.find(',') {
        normalized.replace_range(comma..comma + 1, ".");
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(&normalized) {
        return t.timestamp_nanos_opt();
    }
    if let Ok(t) = DateTime::parse_from_str(&normalized, "%Y-%m-%dT%H:%M:%S%.f%z") {
        return t.timestamp_nanos_opt();
    }
    let naive = NaiveDateTime::parse_from_str(&normalized, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| NaiveDateTime::parse_from_str(&normalized, "%Y-%m-%dT%H:%M"))
        .ok()?;
    Utc.from_utc_datetime(&naive).timestamp_nanos_opt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 3, 1, 0, 0, 0).unwrap()
    }

    fn ns(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
            .unwrap()
            .timestamp_nanos_opt()
            .unwrap()
    }

    #[test]
    fn vllm_lines_get_time_and_level() {
        let p = parse_log_prefix(
            "INFO 02-21 20:06:29 api_server.py:528] vLLM API server",
            now(),
        );
        assert_eq!(p.ts_ns, Some(ns(2025, 2, 21, 20, 6, 29)));
        assert_eq!(p.severity, Some("INFO"));
        let p = parse_log_prefix("WARNING 12-31 23:59:59 scheduler.py:1483] x", now());
        assert_eq!(p.ts_ns, Some(ns(2024, 12, 31, 23, 59, 59)), "previous year");
        assert_eq!(p.severity, Some("WARN"));
        let p = parse_log_prefix(
            "(APIServer pid=42) ERROR 02-28 10:00:00 [core.py:1] boom",
            now(),
        );
        assert_eq!(
            (p.ts_ns, p.severity),
            (Some(ns(2025, 2, 28, 10, 0, 0)), Some("ERROR"))
        );
    }

    #[test]
    fn iso_python_glog_and_uvicorn_lines() {
        let p = parse_log_prefix("2024-11-29 02:17:03,250 - vllm - INFO - ready", now());
        assert_eq!(p.ts_ns, Some(ns(2024, 11, 29, 2, 17, 3) + 250_000_000));
        assert_eq!(p.severity, Some("INFO"));
        let p = parse_log_prefix("2024-11-29T02:17:03.5+01:00  WARN router: slow", now());
        assert_eq!(p.ts_ns, Some(ns(2024, 11, 29, 1, 17, 3) + 500_000_000));
        assert_eq!(p.severity, Some("WARN"));
        let p = parse_log_prefix("[2024-11-29 02:17:03] Prefill batch", now());
        assert_eq!(
            (p.ts_ns, p.severity),
            (Some(ns(2024, 11, 29, 2, 17, 3)), None)
        );
        let p = parse_log_prefix("E0228 10:00:00.000001 1 grpc.cc:1] failed", now());
        assert_eq!(
            (p.ts_ns, p.severity),
            (Some(ns(2025, 2, 28, 10, 0, 0) + 1_000), Some("ERROR"))
        );
        let p = parse_log_prefix(
            "INFO:     127.0.0.1:1 - \"POST /v1/completions HTTP/1.1\" 200 OK",
            now(),
        );
        assert_eq!((p.ts_ns, p.severity), (None, Some("INFO")));
        let p = parse_log_prefix("[INFO] 2024-11-29 02:17:03.5 started", now());
        assert_eq!(p.ts_ns, Some(ns(2024, 11, 29, 2, 17, 3) + 500_000_000));
        assert_eq!(p.severity, Some("INFO"));
        let p = parse_log_prefix("an error happened in info", now());
        assert_eq!(p, LinePrefix::default());
    }

    #[test]
    fn epoch_units_by_magnitude() {
        let expected = Some(1_700_000_000_000_000_000);
        assert_eq!(json_time_ns(&Json::from(1_700_000_000)), expected);
        assert_eq!(json_time_ns(&Json::from(1_700_000_000_000i64)), expected);
        assert_eq!(
            json_time_ns(&Json::from(1_700_000_000_000_000i64)),
            expected
        );
        assert_eq!(
            json_time_ns(&Json::from(1_700_000_000_000_000_000i64)),
            expected
        );
        assert_eq!(json_time_ns(&Json::from("1700000000")), expected);
        assert_eq!(json_time_ns(&Json::from("2023-11-14T22:13:20Z")), expected);
        assert_eq!(
            json_time_ns(&Json::from(1_732_846_623_123i64)),
            Some(1_732_846_623_123_000_000)
        );
        assert_eq!(
            json_time_ns(&Json::from(1_700_000_000.5)),
            Some(1_700_000_000_500_000_000)
        );
        assert_eq!(
            json_time_ns(&Json::from("1700000000.25")),
            Some(1_700_000_000_250_000_000)
        );
        assert_eq!(json_time_ns(&Json::from(-5)), None);
        assert_eq!(json_time_ns(&Json::from("yesterday")), None);
    }

    #[test]
    fn bounded_lines_skip_overlong_ones() {
        let data = b"short\nthis line is too long\r\nok\nlast-no-newline";
        let mut reader: &[u8] = data;
        let mut line = Vec::new();
        let mut seen = Vec::new();
        loop {
            match read_line_bounded(&mut reader, &mut line, 8).unwrap() {
                LineRead::Eof => break,
                LineRead::Line => seen.push(String::from_utf8(line.clone()).unwrap()),
                LineRead::TooLong(n) => seen.push(format!("<{n}>")),
            }
        }
        assert_eq!(seen, ["short", "<22>", "ok", "<15>"]);
    }

    #[test]
    fn small_batches_are_merged_and_large_ones_handed_on() {
        let requests = |from: i64, rows: i64| TableBatch {
            table: Table::Requests,
            batch: RequestRecord::to_batch(
                &(from..from + rows)
                    .map(|ts| RequestRecord {
                        ts,
                        ..Default::default()
                    })
                    .collect::<Vec<_>>(),
            ),
        };
        let logs = TableBatch {
            table: Table::Logs,
            batch: LogRecord::to_batch(&[LogRecord::default()]),
        };
        let ts_of = |batches: &[TableBatch]| -> Vec<Vec<i64>> {
            batches
                .iter()
                .filter(|b| b.table == Table::Requests)
                .map(|b| {
                    RequestRecord::from_batch(&b.batch)
                        .unwrap()
                        .iter()
                        .map(|r| r.ts)
                        .collect()
                })
                .collect()
        };
        // three small exports of one table become one batch, in reading order
        let small = merge_by_table(vec![requests(0, 3), logs.clone(), requests(3, 2)]).unwrap();
        assert_eq!(ts_of(&small), vec![vec![0, 1, 2, 3, 4]]);
        assert_eq!(small.iter().filter(|b| b.table == Table::Logs).count(), 1);
        // large ones stay as they are, without a copy
        let large = vec![requests(0, 1500), requests(1500, 1200)];
        let handed = merge_by_table(large.clone()).unwrap();
        assert_eq!(handed.len(), 2);
        for (out, input) in handed.iter().zip(&large) {
            assert!(
                out.batch.column(0).to_data().buffers()[0].as_ptr()
                    == input.batch.column(0).to_data().buffers()[0].as_ptr()
            );
        }
        let rows: Vec<usize> = ts_of(&handed).iter().map(Vec::len).collect();
        assert_eq!(rows, vec![1500, 1200]);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OtlpSignal {
    Traces,
    Logs,
    Metrics,
}

/// Which export request a line holds: the first `"resource…"` key names it (the top-level key
/// comes first in every exporter's output, so this stops within a few bytes).
fn otlp_signal(raw: &[u8]) -> Option<OtlpSignal> {
    const NEEDLE: &[u8] = b"\"resource";
    let mut from = 0;
    while let Some(at) = raw[from..].windows(NEEDLE.len()).position(|w| w == NEEDLE) {
        let rest = &raw[from + at + NEEDLE.len()..];
        if rest.starts_with(b"Spans\"") {
            return Some(OtlpSignal::Traces);
        }
        if rest.starts_with(b"Logs\"") {
            return Some(OtlpSignal::Logs);
        }
        if rest.starts_with(b"Metrics\"") {
            return Some(OtlpSignal::Metrics);
        }
        from += at + NEEDLE.len();
    }
    None
}
