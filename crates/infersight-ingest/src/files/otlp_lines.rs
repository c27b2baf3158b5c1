//! OTLP JSON lines of a file (the OpenTelemetry Collector file exporter): one
//! `Export{Trace,Logs,Metrics}ServiceRequest` per line, decoded and converted by [`crate::otlp`].
//! Trace lines are converted on the `workers` and finished here in reading order, with the
//! span-tree memory; log and metric lines are converted on the reading thread.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use serde_json::Value as Json;

use super::FileFormat;
use super::detect::{OtlpSignal, otlp_signal};
use super::reader::FileReader;
use super::workers::TraceDone;
use crate::error::IngestError;
use crate::otlp::convert::{
    Converted, logs_to_batches, metrics_to_batches, traces_to_batches_with,
};
use crate::otlp::decode::decode_json;

impl FileReader<'_> {
    pub(super) fn otlp_line(&mut self, raw: &[u8]) {
        // Fast path: the signal is the top-level key, found near the start of the line, and the
        // bytes go straight to serde; only a failing line is parsed into a `Value` (to count its
        // items and report the error).
        let converted = match otlp_signal(raw) {
            Some(OtlpSignal::Traces) => decode_json::<ExportTraceServiceRequest>(raw)
                .and_then(|req| traces_to_batches_with(&req, self.mapper, Some(self.span_tree))),
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
    pub(super) fn is_trace_line(&self, raw: &[u8]) -> bool {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        self.summary.format == FileFormat::OtlpJsonl
            && !raw.iter().all(u8::is_ascii_whitespace)
            && otlp_signal(raw) == Some(OtlpSignal::Traces)
    }

    /// The in-order half of a trace line converted by a worker: an export whose traces have phase
    /// spans in the cache is converted again with it; otherwise the worker's conversion is the
    /// one the cache would have given, and the export's phase spans are remembered. Either way
    /// its request rows go through the cache's hold, in reading order.
    pub(super) fn finish_trace_line(&mut self, done: TraceDone) -> Vec<u8> {
        let raw = done.raw.strip_suffix(b"\r").unwrap_or(&done.raw);
        let converted = match done.converted {
            // rare: decoded again, to be converted with the cache
            Ok((_, export)) if self.span_tree.knows_any_trace_of(&export) => {
                decode_json::<ExportTraceServiceRequest>(raw).and_then(|request| {
                    traces_to_batches_with(&request, self.mapper, Some(self.span_tree))
                })
            }
            Ok((Ok(converted), export)) => {
                let released = self.span_tree.remember_export(export);
                self.pending.requests.extend(released);
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
