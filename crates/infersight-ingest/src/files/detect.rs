//! What a file's lines are: the format of a file judged from its name and its first non-empty line
//! together (under `auto`), and, for an OTLP JSON line, which export request it holds, found from
//! the first bytes without parsing the line.
//!
//! The content decides; the name only breaks ties the content leaves open. A line that starts like
//! an OTLP/JSON export request (`{"resourceSpans"`, `resourceLogs`, `resourceMetrics`) makes the
//! file OTLP JSON lines even when it does not parse, so a truncated export is rejected with its
//! line number instead of being stored as a line of text; a line that starts like JSON but is not
//! valid makes a `.json`/`.jsonl` file JSON lines (rejected the same way) and any other file text.
//! A file whose name says one thing and whose content another (OTLP lines in a `.log`, text in a
//! `.json`) is read by its content, with a note in the summary.

use std::path::Path;

use serde_json::Value as Json;

use super::FileFormat;
use super::input::{self, LineRead, read_line_bounded};
use crate::error::IngestError;

/// Longest first line [`detect_file_format`] reads; a longer one is taken for JSON.
const DETECT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// The UTF-8 byte order mark some editors and Windows tools write at the start of a file.
pub(super) const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The format `auto` reads a file as, from its name and first non-empty line (gzip decoded);
/// `Auto` for a file without one. Lets a caller read the files with telemetry before raw text
/// logs, whose year-less times are placed by the data around them.
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
            LineRead::Line => {
                let content = line.strip_prefix(UTF8_BOM).unwrap_or(&line);
                if !content.iter().all(u8::is_ascii_whitespace) {
                    return Ok(sniff(path, content).format);
                }
            }
        }
    }
}

/// What a file's name says its lines are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NamedAs {
    /// `.json`, `.jsonl`, `.ndjson`.
    Json,
    /// `.log`, `.txt`, `.out`, `.err`, `.text`.
    Text,
    /// No extension, or one that says nothing about the lines.
    Unknown,
}

/// The extension of `path` (after a `.gz`), as a kind of content.
fn named_as(path: &Path) -> NamedAs {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let name = name
        .strip_suffix(".gz")
        .or_else(|| name.strip_suffix(".gzip"))
        .unwrap_or(&name);
    match name.rsplit_once('.').map(|(_, extension)| extension) {
        Some("json" | "jsonl" | "ndjson") => NamedAs::Json,
        Some("log" | "txt" | "out" | "err" | "text") => NamedAs::Text,
        _ => NamedAs::Unknown,
    }
}

/// What a file's first non-empty line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Content {
    /// An OTLP/JSON export request, or the start of one that does not parse.
    Otlp,
    /// A JSON object that is not an OTLP export request.
    JsonObject,
    /// Starts like JSON (`{` or `[`) but is not a JSON object.
    NotAnObject,
    /// Anything else.
    Text,
}

fn content_of(line: &[u8]) -> Content {
    let trimmed = line.trim_ascii();
    if starts_like_otlp(trimmed) {
        return Content::Otlp;
    }
    if !trimmed.starts_with(b"{") && !trimmed.starts_with(b"[") {
        return Content::Text;
    }
    match serde_json::from_slice::<Json>(trimmed) {
        Ok(Json::Object(object)) => {
            let otlp = ["resourceSpans", "resourceLogs", "resourceMetrics"]
                .iter()
                .any(|key| object.contains_key(*key));
            if otlp {
                Content::Otlp
            } else {
                Content::JsonObject
            }
        }
        _ => Content::NotAnObject,
    }
}

/// Whether a line opens an object whose first key names an OTLP export request's signal.
fn starts_like_otlp(line: &[u8]) -> bool {
    let Some(rest) = line.strip_prefix(b"{") else {
        return false;
    };
    let rest = rest.trim_ascii_start();
    [
        &b"\"resourceSpans\""[..],
        b"\"resourceLogs\"",
        b"\"resourceMetrics\"",
    ]
    .iter()
    .any(|key| rest.starts_with(key))
}

/// The format a file is read as, and a note when its name said otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sniffed {
    pub(super) format: FileFormat,
    pub(super) note: Option<String>,
}

/// The format of the file at `path` from its name and its first non-empty line (BOM removed).
pub(super) fn sniff(path: &Path, line: &[u8]) -> Sniffed {
    let named = named_as(path);
    let (format, note) = match (content_of(line), named) {
        (Content::Otlp, NamedAs::Text) => (
            FileFormat::OtlpJsonl,
            Some("read as OTLP JSON lines (its content), not as text (its name)"),
        ),
        (Content::Otlp, _) => (FileFormat::OtlpJsonl, None),
        // JSON logs in a `.log` file are common practice: no note
        (Content::JsonObject, _) => (FileFormat::JsonLines, None),
        // the name and the content both say JSON: its bad lines are rejected with their number
        (Content::NotAnObject, NamedAs::Json) => (FileFormat::JsonLines, None),
        (Content::NotAnObject, _) => (FileFormat::Raw, None),
        (Content::Text, NamedAs::Json) => (
            FileFormat::Raw,
            Some(
                "read as raw text (its content), not as JSON (its name): its first line is not JSON",
            ),
        ),
        (Content::Text, _) => (FileFormat::Raw, None),
    };
    Sniffed {
        format,
        note: note.map(str::to_string),
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
