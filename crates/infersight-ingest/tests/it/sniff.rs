//! File sniffing under `auto`: a file is judged by its name and its first non-empty line together.
//! A line that starts like an OTLP/JSON export but does not parse is rejected with its line number
//! wherever it is in the file (a one-line file included), whatever the signal, the name, gzip, the
//! leading whitespace or a byte order mark; a file whose name says one format and whose content
//! another is read by its content, with a note.

use std::io::Write;
use std::path::{Path, PathBuf};

use infersight_ingest::files::detect_file_format;
use infersight_ingest::{FileFormat, FileOptions, FileSummary, read_file};
use infersight_model::mapping::AttributeMapper;

const TRACES: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"engine"}}]},"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"chat","kind":2,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000001000000000","attributes":[{"key":"gen_ai.request.model","value":{"stringValue":"m"}}]}]}]}]}"#;
const LOGS: &str = r#"{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"router"}}]},"scopeLogs":[{"logRecords":[{"timeUnixNano":"1700000000000000000","severityNumber":17,"body":{"stringValue":"upstream timeout"}}]}]}]}"#;
const METRICS: &str = r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"queue_depth","gauge":{"dataPoints":[{"asInt":"3","timeUnixNano":"1700000000000000000"}]}}]}]}]}"#;

/// What the file reader made of one file, and what the detection before it said.
struct Outcome {
    summary: FileSummary,
    detected: FileFormat,
}

fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
    let path = dir.join(name);
    let file = std::fs::File::create(&path).unwrap();
    if name.ends_with(".gz") {
        let mut encoder = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        encoder.write_all(content).unwrap();
        encoder.finish().unwrap();
    } else {
        let mut file = file;
        file.write_all(content).unwrap();
    }
    path
}

fn read(path: &Path) -> Outcome {
    let summary = read_file(
        path,
        &FileOptions::default(),
        &AttributeMapper::default(),
        &mut |_| Ok(()),
        &mut |_| {},
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let detected = detect_file_format(path).unwrap();
    Outcome { summary, detected }
}

/// Cuts of a valid export after its first key: early, in the middle, one byte short of the end.
fn truncations(export: &str) -> Vec<&str> {
    let key_end = export.find("\":").unwrap() + 2;
    let cuts = [key_end, key_end + 3, export.len() / 2, export.len() - 1];
    cuts.iter().map(|&cut| &export[..cut]).collect()
}

/// Ways a line is preceded at the start of a file: nothing, blanks, a byte order mark, both.
const PREFIXES: [&str; 4] = ["", "  \t", "\u{feff}", "\u{feff} "];

/// Names that say JSON, or nothing.
const NAMES: [&str; 5] = [
    "export.jsonl",
    "export.json",
    "export",
    "export.jsonl.gz",
    "otel.ndjson",
];

#[test]
fn a_truncated_otlp_export_alone_in_a_file_is_rejected_with_its_line_number() {
    let dir = tempfile::tempdir().unwrap();
    for export in [TRACES, LOGS, METRICS] {
        for (cut_index, cut) in truncations(export).into_iter().enumerate() {
            for (prefix_index, prefix) in PREFIXES.iter().enumerate() {
                for name in NAMES {
                    let name = format!("{cut_index}-{prefix_index}-{name}");
                    let path = write(dir.path(), &name, format!("{prefix}{cut}\n").as_bytes());
                    let Outcome { summary, detected } = read(&path);
                    let case = format!("{name}: {cut:?}: {summary:?}");
                    assert_eq!(summary.format, FileFormat::OtlpJsonl, "{case}");
                    assert_eq!(detected, FileFormat::OtlpJsonl, "{case}");
                    assert_eq!(summary.records_stored, 0, "{case}");
                    assert!(summary.rejected >= 1, "{case}");
                    let first = summary.first_errors.first().expect("a reason");
                    assert!(
                        first.starts_with(&format!("{}:1: ", path.display())),
                        "{case}"
                    );
                    assert!(summary.notes.is_empty(), "{case}");
                }
            }
        }
    }
}

#[test]
fn the_same_truncated_export_after_good_lines_is_rejected_with_its_line_number() {
    let dir = tempfile::tempdir().unwrap();
    for export in [TRACES, LOGS, METRICS] {
        for cut in truncations(export) {
            let content = format!("{TRACES}\n\n{LOGS}\n{cut}\n{METRICS}\n");
            let path = write(dir.path(), "mixed.jsonl", content.as_bytes());
            let Outcome { summary, .. } = read(&path);
            assert_eq!(summary.format, FileFormat::OtlpJsonl);
            assert_eq!(summary.records_stored, 3, "{summary:?}");
            assert_eq!(summary.first_errors.len(), 1, "{summary:?}");
            assert!(
                summary.first_errors[0].starts_with(&format!("{}:4: ", path.display())),
                "{summary:?}"
            );
        }
    }
}

#[test]
fn a_byte_order_mark_does_not_hide_valid_exports() {
    let dir = tempfile::tempdir().unwrap();
    for export in [TRACES, LOGS, METRICS] {
        let content = format!("\u{feff}{export}\n{export}\n");
        for name in ["bom.jsonl", "bom.jsonl.gz", "bom"] {
            let path = write(dir.path(), name, content.as_bytes());
            let Outcome { summary, detected } = read(&path);
            assert_eq!(
                (summary.format, detected),
                (FileFormat::OtlpJsonl, FileFormat::OtlpJsonl)
            );
            assert_eq!(
                (summary.records_stored, summary.rejected),
                (2, 0),
                "{summary:?}"
            );
        }
    }
    // a forced format reads the first line without its mark too
    let path = write(
        dir.path(),
        "forced.jsonl",
        format!("\u{feff}{TRACES}\n").as_bytes(),
    );
    let options = FileOptions {
        format: FileFormat::OtlpJsonl,
        ..FileOptions::default()
    };
    let summary = read_file(
        &path,
        &options,
        &AttributeMapper::default(),
        &mut |_| Ok(()),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!((summary.records_stored, summary.rejected), (1, 0));
}

#[test]
fn a_file_is_read_by_its_content_with_a_note_when_its_name_says_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    // OTLP export lines under names that say text
    for name in ["collector.log", "collector.txt", "collector.log.gz"] {
        let content = format!("{TRACES}\n{LOGS}\n{METRICS}\n");
        let path = write(dir.path(), name, content.as_bytes());
        let Outcome { summary, detected } = read(&path);
        assert_eq!(
            (summary.format, detected),
            (FileFormat::OtlpJsonl, FileFormat::OtlpJsonl)
        );
        assert_eq!(summary.records_stored, 3, "{summary:?}");
        assert_eq!(summary.notes.len(), 1, "{summary:?}");
        assert!(summary.notes[0].starts_with(&path.display().to_string()));
        assert!(summary.notes[0].contains("OTLP"), "{:?}", summary.notes);
    }
    // plain text under names that say JSON
    for name in ["server.json", "server.jsonl", "server.ndjson.gz"] {
        let content =
            "INFO 02-21 20:06:29 api_server.py:528] vLLM API server started\nsecond line\n";
        let path = write(dir.path(), name, content.as_bytes());
        let Outcome { summary, detected } = read(&path);
        assert_eq!(
            (summary.format, detected),
            (FileFormat::Raw, FileFormat::Raw)
        );
        assert_eq!((summary.records_stored, summary.rejected), (2, 0));
        assert_eq!(summary.notes.len(), 1, "{summary:?}");
        assert!(summary.notes[0].contains("raw text"), "{:?}", summary.notes);
    }
}

#[test]
fn names_only_break_the_ties_the_content_leaves_open() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str, FileFormat, u64); 8] = [
        // broken JSON: rejected with its line number when the name says JSON, text otherwise
        (
            "events.jsonl",
            "{\"msg\": \"cut here",
            FileFormat::JsonLines,
            1,
        ),
        ("events.json", "[1, 2", FileFormat::JsonLines, 1),
        ("events.log", "{\"msg\": \"cut here", FileFormat::Raw, 0),
        ("events", "{main} thread started", FileFormat::Raw, 0),
        // a JSON object is JSON lines under any name, with no note (JSON logs in `.log` files)
        ("events.log", "{\"msg\": \"ok\"}", FileFormat::JsonLines, 0),
        ("events", "{\"msg\": \"ok\"}", FileFormat::JsonLines, 0),
        // text is text under any name but a JSON one
        ("events.out", "plain text line", FileFormat::Raw, 0),
        ("events", "plain text line", FileFormat::Raw, 0),
    ];
    for (name, line, format, rejected) in cases {
        let path = write(dir.path(), name, format!("{line}\n").as_bytes());
        let Outcome { summary, detected } = read(&path);
        let case = format!("{name}: {line}: {summary:?}");
        assert_eq!((summary.format, detected), (format, format), "{case}");
        assert_eq!(summary.rejected, rejected, "{case}");
        if rejected > 0 {
            assert!(
                summary.first_errors[0].starts_with(&format!("{}:1: ", path.display())),
                "{case}"
            );
        }
        assert!(summary.notes.is_empty(), "{case}");
    }
}
