//! The state of one file being read: its options, the summary's counts and first errors, the
//! records converted but not yet handed on, and the time and span-tree memory carried from line to
//! line. [`FileReader::line`] sends each line to the reader of the file's format (`otlp_lines`,
//! `json_lines`, `raw`); [`FileReader::flush`] hands what is pending to the caller's sink, grouped
//! by table.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use infersight_model::mapping::AttributeMapper;
use infersight_model::{LogRecord, RequestRecord, Table, TableBatch};

use super::detect::sniff;
use super::raw_times::RawState;
use super::{
    DEFAULT_BATCH_ROWS, FILE_PATH_ATTR, FileFormat, FileOptions, FileSummary, MAX_FIRST_ERRORS,
};
use crate::error::IngestError;
use crate::otlp::tree::SpanTreeCache;

/// Records converted but not yet handed to the sink.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) requests: Vec<RequestRecord>,
    pub(super) logs: Vec<LogRecord>,
    /// Batches converted from OTLP lines.
    pub(super) batches: Vec<TableBatch>,
    /// Source records in all of the above.
    pub(super) records: u64,
}

pub(super) struct FileReader<'a> {
    pub(super) path: PathBuf,
    pub(super) path_display: String,
    pub(super) options: &'a FileOptions,
    pub(super) mapper: &'a AttributeMapper,
    pub(super) on_batch: &'a mut dyn FnMut(Vec<TableBatch>) -> Result<(), String>,
    pub(super) summary: FileSummary,
    pub(super) pending: Pending,
    /// Time of records that carry none and follow no record that had one.
    pub(super) mtime_ns: i64,
    /// Time of the last raw line that had one: continuation lines (tracebacks) inherit it.
    pub(super) last_ts_ns: Option<i64>,
    pub(super) now: DateTime<Utc>,
    /// `{"log.file.path": …}`: the attrs of every raw line, and part of those of JSON log lines.
    pub(super) file_attrs: String,
    /// Where raw lines' year-less times are placed, and the attributes of their process tags.
    pub(super) raw: RawState,
    /// Phase spans of earlier lines, for request spans written after their children, and the
    /// request rows held until their request's other spans are read (maybe in a later file).
    pub(super) span_tree: &'a SpanTreeCache,
}

impl<'a> FileReader<'a> {
    pub(super) fn new(
        path: &Path,
        options: &'a FileOptions,
        mapper: &'a AttributeMapper,
        on_batch: &'a mut dyn FnMut(Vec<TableBatch>) -> Result<(), String>,
        mtime_ns: i64,
        span_tree: &'a SpanTreeCache,
    ) -> Self {
        FileReader {
            path: path.to_path_buf(),
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
            file_attrs: serde_json::json!({ FILE_PATH_ATTR: path.display().to_string() })
                .to_string(),
            raw: RawState::default(),
            span_tree,
        }
    }
}

impl FileReader<'_> {
    pub(super) fn batch_rows(&self) -> u64 {
        match self.options.batch_rows {
            0 => DEFAULT_BATCH_ROWS as u64,
            n => n as u64,
        }
    }

    pub(super) fn reject(&mut self, reason: String) {
        self.summary.rejected += 1;
        self.note_error(reason);
    }

    fn note_error(&mut self, reason: String) {
        self.note_error_at(self.summary.lines, reason);
    }

    /// Notes the reason of a rejection on line `line` (1-based).
    pub(super) fn note_error_at(&mut self, line: u64, reason: String) {
        if self.summary.first_errors.len() < MAX_FIRST_ERRORS {
            self.summary
                .first_errors
                .push(format!("{}:{line}: {reason}", self.path_display));
        }
    }

    pub(super) fn line(&mut self, raw: &[u8]) {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if self.summary.format == FileFormat::Auto {
            let sniffed = sniff(&self.path, raw);
            self.summary.format = sniffed.format;
            if let Some(note) = sniffed.note {
                self.summary
                    .notes
                    .push(format!("{}: {note}", self.path_display));
            }
        }
        match self.summary.format {
            FileFormat::OtlpJsonl => self.otlp_line(raw),
            FileFormat::JsonLines => self.json_line(raw),
            FileFormat::Raw | FileFormat::Auto => self.raw_line(raw),
        }
    }

    /// Releases every request row held (the last file of a stream is read) and flushes.
    pub(super) fn finish(&mut self, drain_requests: bool) -> Result<(), IngestError> {
        if drain_requests {
            let rows = self.span_tree.drain_requests();
            self.pending.requests.extend(rows);
        }
        self.flush()
    }

    /// Hands pending records to the sink, grouped by table (see [`merge_by_table`]).
    pub(super) fn flush(&mut self) -> Result<(), IngestError> {
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
pub(super) fn merge_by_table(batches: Vec<TableBatch>) -> Result<Vec<TableBatch>, IngestError> {
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
