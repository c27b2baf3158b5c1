//! OTLP trace lines of a file converted on worker threads: the reading thread sends each trace
//! line to one of [`conversion_workers`] threads, which decode and convert it without the span-tree
//! memory; [`InOrder`] takes the results back in reading order and finishes each line on the
//! reading thread (see `FileReader::finish_trace_line`), so the output and the batch boundaries
//! are those of converting every line on one thread. [`read_lines`] is the line loop that feeds
//! them and the reader.

use std::cell::Cell;
use std::io::BufRead;
use std::path::Path;

use infersight_model::mapping::AttributeMapper;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::detect::UTF8_BOM;
use super::input::{LineRead, read_line_bounded};
use super::reader::FileReader;
use super::{MAX_PENDING_BYTES, MAX_SPARE_LINE_BYTES};
use crate::error::IngestError;
use crate::otlp::convert::{Converted, traces_to_batches_detached};
use crate::otlp::decode::decode_json;
use crate::otlp::tree::ExportTraces;

/// Threads that decode and convert OTLP trace lines: one per core, at most four (the reader and
/// the store writer need their share too; beyond that the writer is the bottleneck anyway).
pub(super) fn conversion_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
}

/// One OTLP trace line for a worker, numbered in reading order.
pub(super) struct TraceJob {
    seq: u64,
    line_number: u64,
    raw: Vec<u8>,
}

/// A worker's result for one line: the decoded export (or the decoding error) and its conversion
/// without the span-tree cache, which the reader checks against the cache in order.
pub(super) struct TraceDone {
    seq: u64,
    pub(super) line_number: u64,
    pub(super) raw: Vec<u8>,
    /// The conversion without the cache and the export's traces, or why it did not decode.
    pub(super) converted: Result<(Result<Converted, IngestError>, ExportTraces), IngestError>,
}

pub(super) fn convert_traces_worker(
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
pub(super) struct InOrder {
    pub(super) to_workers: Option<std::sync::mpsc::SyncSender<TraceJob>>,
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
    pub(super) spare_lines: Vec<Vec<u8>>,
}

impl InOrder {
    pub(super) fn new(
        to_workers: std::sync::mpsc::SyncSender<TraceJob>,
        done: std::sync::mpsc::Receiver<TraceDone>,
        capacity: u64,
    ) -> Self {
        InOrder {
            to_workers: Some(to_workers),
            done,
            waiting: std::collections::BTreeMap::new(),
            next_sent: 0,
            next_done: 0,
            capacity,
            pending_line_bytes: 0,
            spare_lines: Vec::new(),
        }
    }

    pub(super) fn send(
        &mut self,
        state: &mut FileReader<'_>,
        raw: Vec<u8>,
    ) -> Result<(), IngestError> {
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
    pub(super) fn drain(&mut self, state: &mut FileReader<'_>) -> Result<(), IngestError> {
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
    pub(super) fn after_line(
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

/// Reads every line of `reader`: an OTLP trace line goes to the conversion workers, any other
/// line is converted here once the workers' lines before it are taken back; `on_progress` gets
/// the bytes read every megabyte. An I/O error stops the reading after what was read before it
/// is handed on.
pub(super) fn read_lines(
    path: &Path,
    reader: &mut dyn BufRead,
    state: &mut FileReader<'_>,
    in_order: &mut InOrder,
    bytes_read: &Cell<u64>,
    on_progress: &mut dyn FnMut(u64),
) -> Result<(), IngestError> {
    let max_line = state.options.max_line_bytes.max(1);
    let mut line = Vec::new();
    let mut last_progress = 0u64;
    loop {
        let outcome = match read_line_bounded(reader, &mut line, max_line) {
            Ok(outcome) => outcome,
            Err(source) => {
                in_order.drain(state)?;
                // the stream stops here: the request rows held are handed on too
                state.finish(true)?;
                on_progress(bytes_read.get());
                return Err(IngestError::Io {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        match outcome {
            LineRead::Eof => return Ok(()),
            LineRead::TooLong(length) => {
                in_order.drain(state)?;
                state.summary.lines += 1;
                state.summary.records_read += 1;
                state.reject(format!("line exceeds {max_line} bytes ({length} bytes)"));
                in_order.after_line(state, 0)?;
            }
            LineRead::Line => {
                state.summary.lines += 1;
                if state.summary.lines == 1 && line.starts_with(UTF8_BOM) {
                    line.drain(..UTF8_BOM.len());
                }
                if state.is_trace_line(&line) {
                    // the workers' lines come back as buffers for the next ones
                    let next = in_order.spare_lines.pop().unwrap_or_default();
                    let raw = std::mem::replace(&mut line, next);
                    in_order.send(state, raw)?;
                } else {
                    in_order.drain(state)?;
                    state.line(&line);
                    in_order.after_line(state, line.len())?;
                }
            }
        }
        if bytes_read.get() >= last_progress + (1 << 20) {
            last_progress = bytes_read.get();
            on_progress(last_progress);
        }
    }
}
