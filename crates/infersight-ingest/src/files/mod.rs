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
//!
//! Files, in the order a line goes through them: `input` (open, gzip, bytes read for progress,
//! bounded lines) → `detect` (the file's format from its name and content, an OTLP line's signal) → `reader` (per-file
//! state, the summary's counts, hand-over to the sink) → one of `otlp_lines` (with `workers` for
//! trace lines), `json_lines` (and `json_request` for request rows) or `raw`.

mod detect;
mod input;
mod json_lines;
mod json_request;
mod otlp_lines;
mod raw;
mod raw_times;
mod reader;
mod workers;

use std::path::Path;

use infersight_model::TableBatch;
use infersight_model::mapping::AttributeMapper;

use crate::error::IngestError;
use crate::otlp::tree::SpanTreeCache;
use input::OpenedFile;
use reader::FileReader;
use workers::read_lines;
use workers::{InOrder, TraceDone, TraceJob, conversion_workers, convert_traces_worker};

pub use detect::detect_file_format;
pub use json_lines::json_time_ns;
pub use raw_times::{CONTEXT_SLACK_NS, RawTimes, YearSource};

/// How the lines of a file are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FileFormat {
    /// Decided per file from its name and first non-empty line (see `detect`).
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
    /// Year of the first year-less time of raw lines (vLLM, glog); found from the data when
    /// `None` (see `raw`).
    pub year: Option<i32>,
    /// Time range (ns) of the data around the file (the store's, the files read before): places
    /// year-less raw times and tells which raw lines fall outside it.
    pub time_context_ns: Option<(i64, i64)>,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            format: FileFormat::Auto,
            service: None,
            worker: None,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            batch_rows: DEFAULT_BATCH_ROWS,
            year: None,
            time_context_ns: None,
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
    /// What the reader decided that the user may not expect, each `path: note` (a file read by
    /// its content where its name said another format).
    pub notes: Vec<String>,
    /// The times of raw text lines: their year's source, their range, those outside the data
    /// around the file.
    pub raw_times: RawTimes,
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
    let span_tree = SpanTreeCache::for_files();
    let reading = FileStream {
        span_tree: &span_tree,
        last: true,
    };
    read_file_of_stream(path, options, mapper, reading, on_batch, on_progress)
}

/// Files read one after the other as one stream of telemetry: the span tree (and the request
/// rows it holds until their request's spans have all been read, see
/// [`crate::otlp::correlate`]) carries from file to file, so a gateway's spans in one file and
/// the engine's in another make one request row.
#[derive(Clone, Copy)]
pub struct FileStream<'a> {
    pub span_tree: &'a SpanTreeCache,
    /// The stream's last file: every request row still held is handed on at its end (an earlier
    /// file that fails hands them on too, since the stream stops there).
    pub last: bool,
}

/// [`read_file`] for one file of a [`FileStream`].
pub fn read_file_of_stream(
    path: &Path,
    options: &FileOptions,
    mapper: &AttributeMapper,
    stream: FileStream<'_>,
    on_batch: &mut dyn FnMut(Vec<TableBatch>) -> Result<(), String>,
    on_progress: &mut dyn FnMut(u64),
) -> Result<FileSummary, IngestError> {
    let io_error = |source| IngestError::Io {
        path: path.to_path_buf(),
        source,
    };
    let OpenedFile {
        mut reader,
        bytes_read,
        mtime_ns,
    } = input::open(path).map_err(io_error)?;
    let mut state = FileReader::new(path, options, mapper, on_batch, mtime_ns, stream.span_tree);
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
        let mut in_order = InOrder::new(to_workers, done, (jobs_capacity + workers) as u64);
        read_lines(
            path,
            reader.as_mut(),
            &mut state,
            &mut in_order,
            &bytes_read,
            on_progress,
        )?;
        in_order.drain(&mut state)?;
        // workers stop when the job channel closes; the scope joins them
        in_order.to_workers = None;
        state.finish(stream.last)?;
        on_progress(bytes_read.get());
        Ok(state.summary)
    })
}

#[cfg(test)]
mod tests;
