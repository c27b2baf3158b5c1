//! What a file's lines are: the format of a file from its first non-empty line (under `auto`),
//! and, for an OTLP JSON line, which export request it holds, found from the first bytes without
//! parsing the line.

use serde_json::Value as Json;

use super::FileFormat;

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
