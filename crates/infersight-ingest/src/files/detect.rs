//! What a file's lines are: the format of a file from its first non-empty line (under `auto`),
//! and, for an OTLP JSON line, which export request it holds, found from the first bytes without
//! parsing the line.

use std::path::Path;

use serde_json::Value as Json;

use super::FileFormat;
use super::input::{self, LineRead, read_line_bounded};
use crate::error::IngestError;

/// Longest first line [`detect_file_format`] reads; a longer one is taken for JSON.
const DETECT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// The format `auto` reads a file as, from its first non-empty line (gzip decoded); `Auto` for a
/// file without one. Lets a caller read the files with telemetry before raw text logs, whose
/// year-less times are placed by the data around them.
pub fn detect_file_format(path: &Path) -> Result<FileFormat, IngestError> {
    let io_error = |source| IngestError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut opened = input::open(path).map_err(io_error)?;
    let mut line = Vec::new();
    loop {
        match read_line_bounded(opened.reader.as_mut(), &mut line, DETECT_MAX_LINE_BYTES)
            .map_err(io_error)?
        {
            LineRead::Eof => return Ok(FileFormat::Auto),
            LineRead::TooLong(_) => return Ok(FileFormat::JsonLines),
            LineRead::Line if line.iter().all(u8::is_ascii_whitespace) => {}
            LineRead::Line => return Ok(detect_format(&line)),
        }
    }
}

/// Format of a file from its first non-empty line.
pub(super) fn detect_format(line: &[u8]) -> FileFormat {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OtlpSignal {
    Traces,
    Logs,
    Metrics,
}

/// Which export request a line holds: the first `"resource…"` key names it (the top-level key
/// comes first in every exporter's output, so this stops within a few bytes).
pub(super) fn otlp_signal(raw: &[u8]) -> Option<OtlpSignal> {
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
