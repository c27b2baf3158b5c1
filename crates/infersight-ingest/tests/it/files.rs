//! The file reader: format detection, gzip by magic bytes, counts, over-long lines, batching,
//! and real vLLM server logs from ../shared/data.

use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{Datelike, TimeZone, Timelike, Utc};
use infersight_ingest::files::YearSource;
use infersight_ingest::{FileFormat, FileOptions, FileSummary, IngestError, read_file};
use infersight_model::mapping::AttributeMapper;
use infersight_model::{
    ErrorKind, LogRecord, MetricRecord, RequestRecord, SpanRecord, Table, TableBatch,
};

use crate::json;

struct Read {
    summary: FileSummary,
    batches: Vec<TableBatch>,
    calls: usize,
    last_progress: u64,
}

impl Read {
    fn rows<T>(
        &self,
        table: Table,
        from: fn(&arrow::array::RecordBatch) -> Result<Vec<T>, infersight_model::ModelError>,
    ) -> Vec<T> {
        self.batches
            .iter()
            .filter(|b| b.table == table)
            .flat_map(|b| from(&b.batch).unwrap())
            .collect()
    }

    fn logs(&self) -> Vec<LogRecord> {
        self.rows(Table::Logs, LogRecord::from_batch)
    }

    fn requests(&self) -> Vec<RequestRecord> {
        self.rows(Table::Requests, RequestRecord::from_batch)
    }
}

fn read(path: &Path, options: &FileOptions) -> Read {
    let mut batches = Vec::new();
    let mut calls = 0;
    let mut last_progress = 0;
    let summary = read_file(
        path,
        options,
        &AttributeMapper::default(),
        &mut |b| {
            calls += 1;
            batches.extend(b);
            Ok(())
        },
        &mut |bytes| {
            assert!(bytes >= last_progress, "progress goes forward");
            last_progress = bytes;
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Read {
        summary,
        batches,
        calls,
        last_progress,
    }
}

fn write(dir: &Path, name: &str, content: &[u8], gzip: bool) -> PathBuf {
    let path = dir.join(name);
    let mut file = std::fs::File::create(&path).unwrap();
    if gzip {
        let mut encoder = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
        encoder.write_all(content).unwrap();
        encoder.finish().unwrap();
    } else {
        file.write_all(content).unwrap();
    }
    path
}

fn options() -> FileOptions {
    FileOptions {
        service: Some("vllm".into()),
        worker: Some("node-3".into()),
        ..Default::default()
    }
}

const RAW_LOG: &str = "INFO 02-21 20:06:29 api_server.py:528] vLLM API server version 0.5.2\n\
WARNING 02-21 20:06:33 arg_utils.py:1019] [DEPRECATED] Block manager v1 has been removed\n\
\n\
ERROR 02-21 20:07:00 engine.py:1] Engine loop failed\r\n\
Traceback (most recent call last):\n\
INFO:     127.0.0.1:50312 - \"POST /v1/completions HTTP/1.1\" 200 OK\n\
2025-02-21T20:08:00.5Z no level here";

#[test]
fn raw_text_plain_and_gzip_with_any_extension() {
    let dir = tempfile::tempdir().unwrap();
    let plain = write(dir.path(), "server.log", RAW_LOG.as_bytes(), false);
    let gz = write(dir.path(), "server.log.gz", RAW_LOG.as_bytes(), true);
    let disguised = write(dir.path(), "server.txt", RAW_LOG.as_bytes(), true);
    // The year-less times take the year of the file's own dated line (its last).
    let expected_year = 2025;
    for path in [&plain, &gz, &disguised] {
        let result = read(path, &options());
        let summary = &result.summary;
        assert_eq!(summary.format, FileFormat::Raw, "{}", path.display());
        assert_eq!((summary.lines, summary.records_read), (7, 6));
        assert_eq!((summary.records_stored, summary.rejected), (6, 0));
        assert!(summary.first_errors.is_empty());
        assert_eq!(
            summary.raw_times.year_source,
            Some(YearSource::FileDates),
            "{summary:?}"
        );
        assert_eq!(result.last_progress, std::fs::metadata(path).unwrap().len());
        let logs = result.logs();
        assert_eq!(logs.len(), 6);
        let first = Utc.timestamp_nanos(logs[0].ts);
        assert_eq!(
            (first.year(), first.month(), first.day()),
            (expected_year, 2, 21)
        );
        assert_eq!((first.hour(), first.minute(), first.second()), (20, 6, 29));
        let severities: Vec<_> = logs.iter().map(|l| l.severity.as_deref()).collect();
        assert_eq!(
            severities,
            [
                Some("INFO"),
                Some("WARN"),
                Some("ERROR"),
                None,
                Some("INFO"),
                None
            ]
        );
        assert_eq!(
            logs[2].body.as_deref(),
            Some("ERROR 02-21 20:07:00 engine.py:1] Engine loop failed")
        );
        assert_eq!(
            logs[3].ts, logs[2].ts,
            "a continuation line inherits the previous time"
        );
        assert_eq!(logs[4].ts, logs[2].ts);
        assert_eq!(
            Utc.timestamp_nanos(logs[5].ts).to_rfc3339(),
            "2025-02-21T20:08:00.500+00:00"
        );
        assert!(logs.iter().all(|l| l.service.as_deref() == Some("vllm")));
        assert!(logs.iter().all(|l| l.worker.as_deref() == Some("node-3")));
        assert_eq!(
            json(&logs[0].attrs)["log.file.path"],
            path.display().to_string()
        );
    }
}

#[test]
fn raw_lines_without_any_time_use_the_file_mtime() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "plain.log", b"hello\nworld\n", false);
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let mtime_ns = chrono::DateTime::<Utc>::from(mtime)
        .timestamp_nanos_opt()
        .unwrap();
    let logs = read(&path, &FileOptions::default()).logs();
    assert_eq!(
        logs.iter().map(|l| l.ts).collect::<Vec<_>>(),
        [mtime_ns, mtime_ns]
    );
    assert_eq!(logs[0].service, None);
}

const JSON_LINES: &str = r#"{"ts":"2024-11-29T02:17:03Z","gen_ai":{"request":{"model":"llama"},"usage":{"input_tokens":100,"output_tokens":20},"latency":{"time_to_first_token":0.2}},"trace_id":"abc","tenant":"acme"}
{"timestamp":1732846623123,"model":"gpt-4o","usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10},"ttft_ms":83.5,"e2e_ms":400,"user":"u1"}
{"time":1732846624,"level":"warning","msg":"KV cache usage high","worker":"w-2","request_id":"r-9","extra":{"pct":97}}
{"level":30,"message":{"structured":true}}
not json at all
[1,2,3]
{"ts":1732846625,"gen_ai.request.model":"m","gen_ai.usage.input_tokens":[1,2]}

{"gen_ai.system":"openai","message":"no request fields"}
{"ts": 1732846626, "model": "m", "ttft_ms": "fast"}
"#;

#[test]
fn json_lines_become_requests_and_logs() {
    let dir = tempfile::tempdir().unwrap();
    for gzip in [false, true] {
        let path = write(dir.path(), "events.jsonl", JSON_LINES.as_bytes(), gzip);
        let result = read(&path, &options());
        let summary = &result.summary;
        assert_eq!(summary.format, FileFormat::JsonLines);
        assert_eq!(summary.lines, 10);
        assert_eq!(
            (
                summary.records_read,
                summary.records_stored,
                summary.rejected
            ),
            (9, 5, 4)
        );
        assert_eq!(summary.first_errors.len(), 4);
        let errors = summary.first_errors.join("\n");
        assert!(
            errors.contains("events.jsonl:5: invalid json: "),
            "{errors}"
        );
        assert!(
            errors.contains("events.jsonl:6: expected a JSON object, found an array"),
            "{errors}"
        );
        assert!(
            errors.contains("events.jsonl:7: attribute `gen_ai.usage.input_tokens` has type array"),
            "{errors}"
        );
        assert!(
            errors.contains("events.jsonl:10: attribute `ttft_ms` has value \"fast\""),
            "{errors}"
        );

        let requests = result.requests();
        assert_eq!(requests.len(), 2);
        let nested = &requests[0];
        assert_eq!(
            Utc.timestamp_nanos(nested.ts).to_rfc3339(),
            "2024-11-29T02:17:03+00:00"
        );
        assert_eq!(nested.model.as_deref(), Some("llama"));
        assert_eq!(
            (nested.input_tokens, nested.output_tokens),
            (Some(100), Some(20))
        );
        assert_eq!(nested.ttft_ms, Some(200.0));
        assert_eq!(nested.trace_id.as_deref(), Some("abc"));
        assert_eq!(nested.tenant.as_deref(), Some("acme"));
        assert_eq!(nested.service.as_deref(), Some("vllm"));
        assert_eq!(nested.worker.as_deref(), Some("node-3"));
        let openai = &requests[1];
        assert_eq!(openai.ts, 1_732_846_623_123_000_000);
        assert_eq!(openai.model.as_deref(), Some("gpt-4o"));
        assert_eq!(
            (openai.input_tokens, openai.output_tokens),
            (Some(7), Some(3))
        );
        assert_eq!((openai.ttft_ms, openai.e2e_ms), (Some(83.5), Some(400.0)));
        let attrs = json(&openai.attrs);
        assert_eq!(attrs["user"], "u1");
        assert_eq!(attrs["usage.total_tokens"], 10);
        assert!(attrs.get("gen_ai.request.model").is_none(), "{attrs}");

        let logs = result.logs();
        assert_eq!(logs.len(), 3);
        assert_eq!(logs[0].ts, 1_732_846_624_000_000_000);
        assert_eq!(logs[0].severity.as_deref(), Some("WARN"));
        assert_eq!(logs[0].body.as_deref(), Some("KV cache usage high"));
        assert_eq!(logs[0].worker.as_deref(), Some("w-2"));
        assert_eq!(logs[0].request_id.as_deref(), Some("r-9"));
        assert_eq!(json(&logs[0].attrs)["extra.pct"], 97);
        assert_eq!(
            json(&logs[0].attrs)["log.file.path"],
            path.display().to_string()
        );
        assert_eq!(logs[1].severity.as_deref(), Some("INFO"));
        assert_eq!(logs[1].body.as_deref(), Some(r#"{"structured":true}"#));
        assert_eq!(logs[2].body.as_deref(), Some("no request fields"));
        assert_eq!(json(&logs[2].attrs)["gen_ai.system"], "openai");
    }
}

#[test]
fn otlp_json_lines_from_the_collector_file_exporter() {
    let spec: serde_json::Value = json(crate::otlp_json::SPEC_JSON);
    let logs = r#"{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"router"}}]},"scopeLogs":[{"logRecords":[{"timeUnixNano":"1700000000000000000","severityNumber":17,"body":{"stringValue":"upstream timeout"}},{"body":{"stringValue":"no time"}}]}]}]}"#;
    let metrics = r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"vllm:num_requests_waiting","gauge":{"dataPoints":[{"asInt":"3","timeUnixNano":"1700000000000000000"}]}}]}]}]}"#;
    let bad_type = crate::otlp_json::SPEC_JSON
        .replace(
            r#"{"intValue":"5"}"#,
            r#"{"arrayValue":{"values":[{"intValue":"5"}]}}"#,
        )
        .replace('\n', "");
    let content = format!(
        "{}\n{logs}\n{metrics}\n{{\"resourceSpans\": [\n{}\n{{\"other\":1}}\n",
        spec, bad_type
    );
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "otel-export.json", content.as_bytes(), true);
    let result = read(&path, &FileOptions::default());
    let summary = &result.summary;
    assert_eq!(summary.format, FileFormat::OtlpJsonl);
    assert_eq!(summary.lines, 6);
    // 1 span + 2 log records + 1 point + truncated line + 1 span (bad type) + non-OTLP line
    assert_eq!(
        (
            summary.records_read,
            summary.records_stored,
            summary.rejected
        ),
        (7, 3, 4)
    );
    let errors = summary.first_errors.join("\n");
    assert!(errors.contains(":2: log record rejected"), "{errors}");
    assert!(
        errors.contains(":4: invalid otlp json at line 1"),
        "{errors}"
    );
    assert!(
        errors.contains(":5: invalid attribute: attribute `gen_ai.usage.input_tokens`"),
        "{errors}"
    );
    assert!(
        errors.contains(":6: not an OTLP export request"),
        "{errors}"
    );
    assert_eq!(result.calls, 1, "one flush at the end");
    let spans = result.rows(Table::Spans, SpanRecord::from_batch);
    assert_eq!(spans.len(), 1);
    assert_eq!(
        spans[0].trace_id.as_deref(),
        Some("5b8efff798038103d269b633813fc60c")
    );
    let requests = result.requests();
    assert_eq!(
        (requests[0].input_tokens, requests[0].ttft_ms),
        (Some(5), Some(125.0))
    );
    let logs = result.logs();
    assert_eq!(
        (logs.len(), logs[0].severity.as_deref()),
        (1, Some("ERROR"))
    );
    let metrics = result.rows(Table::Metrics, MetricRecord::from_batch);
    assert_eq!(metrics[0].name.as_deref(), Some("requests_waiting"));
    assert_eq!(metrics[0].value, Some(3.0));
}

#[test]
fn overlong_line_is_skipped_and_reading_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut content = b"INFO 02-21 20:06:29 a.py:1] before\n".to_vec();
    content.extend(std::iter::repeat_n(b'x', 20 << 20));
    content.extend_from_slice(b"\nINFO 02-21 20:06:30 a.py:2] after\nlast line");
    let path = write(dir.path(), "huge.log", &content, false);
    let options = FileOptions {
        max_line_bytes: 1 << 20,
        ..FileOptions::default()
    };
    let result = read(&path, &options);
    let summary = &result.summary;
    assert_eq!(
        (summary.lines, summary.records_read, summary.rejected),
        (4, 4, 1)
    );
    assert_eq!(summary.records_stored, 3);
    assert_eq!(summary.first_errors.len(), 1);
    let error = &summary.first_errors[0];
    assert!(
        error.ends_with("huge.log:2: line exceeds 1048576 bytes (20971520 bytes)"),
        "{error}"
    );
    let bodies: Vec<_> = result.logs().into_iter().map(|l| l.body.unwrap()).collect();
    assert_eq!(
        bodies,
        [
            "INFO 02-21 20:06:29 a.py:1] before",
            "INFO 02-21 20:06:30 a.py:2] after",
            "last line"
        ]
    );
}

#[test]
fn forced_format_batches_and_sink_errors() {
    let dir = tempfile::tempdir().unwrap();
    let lines: String = (0..5)
        .map(|n| format!("{{\"msg\":\"line {n}\"}}\n"))
        .collect();
    let path = write(dir.path(), "five.jsonl", lines.as_bytes(), false);
    // Forced raw: JSON lines are text too.
    let options = FileOptions {
        format: FileFormat::Raw,
        batch_rows: 2,
        ..Default::default()
    };
    let result = read(&path, &options);
    assert_eq!(result.summary.format, FileFormat::Raw);
    assert_eq!(result.calls, 3, "2 + 2 + 1");
    assert_eq!(result.summary.records_stored, 5);
    assert_eq!(
        result.logs()[4].body.as_deref(),
        Some(r#"{"msg":"line 4"}"#)
    );

    let mut calls = 0;
    let err = read_file(
        &path,
        &options,
        &AttributeMapper::default(),
        &mut |_| {
            calls += 1;
            Err("store is full".to_string())
        },
        &mut |_| {},
    )
    .unwrap_err();
    assert_eq!(calls, 1);
    assert!(matches!(err, IngestError::Sink(_)), "{err:?}");
    assert_eq!(err.to_string(), "cannot store batch: store is full");

    let err = read_file(
        &dir.path().join("missing.log"),
        &options,
        &AttributeMapper::default(),
        &mut |_| Ok(()),
        &mut |_| {},
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("missing.log"), "{err}");
}

#[test]
fn real_vllm_server_logs() {
    let runs = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/vllm/vLLMBatchingMemoryGap/runs");
    let Ok(entries) = std::fs::read_dir(&runs) else {
        println!("skipped: {} is absent", runs.display());
        return;
    };
    let mut checked = 0;
    for entry in entries {
        let path = entry.unwrap().path().join("server_out.log");
        if !path.exists() {
            continue;
        }
        let result = read(&path, &options());
        let summary = &result.summary;
        assert_eq!(summary.format, FileFormat::Raw);
        assert_eq!(summary.rejected, 0, "{:?}", summary.first_errors);
        assert_eq!(summary.records_stored, summary.records_read);
        let logs = result.logs();
        assert_eq!(logs.len() as u64, summary.records_read);
        // The first line is `INFO 02-21 20:06:29 api_server.py:528] vLLM API server version …`.
        let first = &logs[0];
        assert_eq!(first.severity.as_deref(), Some("INFO"));
        let ts = Utc.timestamp_nanos(first.ts);
        assert_eq!((ts.month(), ts.day()), (2, 21), "{ts}");
        assert!(
            first
                .body
                .as_deref()
                .unwrap()
                .contains("vLLM API server version")
        );
        let warnings = logs
            .iter()
            .filter(|l| l.severity.as_deref() == Some("WARN"))
            .count();
        assert!(warnings >= 1, "the runs log deprecation warnings");
        // Every vLLM-format line parsed its own time; uvicorn access lines inherit one.
        for log in &logs {
            let ts = Utc.timestamp_nanos(log.ts);
            assert_eq!(ts.month(), 2, "{}: {:?}", ts, log.body);
        }
        let stats = logs
            .iter()
            .filter(|l| {
                l.body
                    .as_deref()
                    .is_some_and(|b| b.contains("Avg prompt throughput"))
            })
            .count();
        assert!(stats > 0);
        checked += 1;
    }
    if checked == 0 {
        println!("skipped: no server_out.log under {}", runs.display());
    }
}

// ---------------------------------------------------------------------------------------------
// year-less raw times (issue 19 class 11): ingested months later, they must still land in the
// year of the data around them

fn ns(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> i64 {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s)
        .unwrap()
        .timestamp_nanos_opt()
        .unwrap()
}

/// A vLLM 0.10 log of one engine: process-tagged and bare lines, a traceback, around `month-day`
/// from 23:58 on, so it runs past midnight (and past New Year for 12-31).
fn engine_log(month: u32, day: u32) -> String {
    let (next_month, next_day) = if (month, day) == (12, 31) {
        (1, 1)
    } else {
        (month, day + 1)
    };
    [
        format!("(APIServer pid=4411) INFO {month:02}-{day:02} 23:58:01 [api_server.py:1] vLLM API server version 0.10.1.1"),
        format!("(EngineCore_0 pid=4630) INFO {month:02}-{day:02} 23:59:02 [core.py:77] Initializing a V1 LLM engine"),
        format!("(VllmWorker rank=1 pid=4702) WARNING {month:02}-{day:02} 23:59:59 [gpu_worker.py:9] KV cache is full, preempting"),
        "Traceback (most recent call last):".to_string(),
        format!("INFO {next_month:02}-{next_day:02} 00:00:03 [loggers.py:111] Engine 000: Avg prompt throughput: 1.0 tokens/s"),
    ]
    .join("\n")
}

fn set_mtime(path: &Path, ts_ns: i64) {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ts_ns as u64);
    std::fs::File::options()
        .append(true)
        .open(path)
        .unwrap()
        .set_modified(at)
        .unwrap();
}

#[test]
fn year_less_raw_times_take_the_year_of_the_data_around_them() {
    let dir = tempfile::tempdir().unwrap();
    // the store's data of an incident in November two years ago; the log copied today
    for (year, month, day) in [(2023, 11, 29), (2021, 6, 15), (2024, 12, 31)] {
        let path = write(
            dir.path(),
            &format!("engine-{year}.log"),
            engine_log(month, day).as_bytes(),
            false,
        );
        let context = (
            ns(year, month, day, 20, 0, 0),
            ns(year, month, day, 23, 59, 0),
        );
        let options = FileOptions {
            time_context_ns: Some(context),
            ..options()
        };
        let result = read(&path, &options);
        let times: Vec<i64> = result.logs().iter().map(|l| l.ts).collect();
        let (next_year, next_month, next_day) = if (month, day) == (12, 31) {
            (year + 1, 1, 1)
        } else {
            (year, month, day + 1)
        };
        assert_eq!(
            times,
            [
                ns(year, month, day, 23, 58, 1),
                ns(year, month, day, 23, 59, 2),
                ns(year, month, day, 23, 59, 59),
                ns(year, month, day, 23, 59, 59),
                ns(next_year, next_month, next_day, 0, 0, 3),
            ],
            "{year}: {:?}",
            result.summary.raw_times
        );
        let raw = &result.summary.raw_times;
        assert_eq!(raw.year_source, Some(YearSource::Context));
        assert_eq!(
            (
                raw.timed_lines,
                raw.year_inferred_lines,
                raw.outside_context
            ),
            (4, 4, 0)
        );
        assert_eq!(raw.range_ns, Some((times[0], times[4])));
    }
}

#[test]
fn the_year_comes_from_the_given_year_the_files_dates_or_its_mtime_in_that_order() {
    let dir = tempfile::tempdir().unwrap();
    let log = engine_log(11, 29);
    let first_year = |options: &FileOptions, path: &Path| {
        let result = read(path, options);
        let first = Utc.timestamp_nanos(result.logs()[0].ts);
        (first.year(), result.summary.raw_times.clone())
    };
    // a file modified in December 2022, no data around it: the latest year not after that
    let path = write(dir.path(), "a.log", log.as_bytes(), false);
    set_mtime(&path, ns(2022, 12, 3, 0, 0, 0));
    let (year, raw) = first_year(&options(), &path);
    assert_eq!(
        (year, raw.year_source),
        (2022, Some(YearSource::FileModified))
    );
    set_mtime(&path, ns(2022, 11, 1, 0, 0, 0));
    assert_eq!(
        first_year(&options(), &path).0,
        2021,
        "not after the file's last change"
    );
    // a dated line of the file wins over the data around it and the mtime, even after the lines
    let dated = format!("{log}\n2020-11-30 00:01:00,120 - ray - INFO - worker ready");
    let path = write(dir.path(), "b.log", dated.as_bytes(), true);
    let elsewhere = FileOptions {
        time_context_ns: Some((ns(2023, 1, 1, 0, 0, 0), ns(2023, 2, 1, 0, 0, 0))),
        ..options()
    };
    let (year, raw) = first_year(&elsewhere, &path);
    assert_eq!((year, raw.year_source), (2020, Some(YearSource::FileDates)));
    assert_eq!(
        raw.outside_context, 5,
        "all timed lines are outside the data around them"
    );
    // a given year wins over everything
    let given = FileOptions {
        year: Some(2019),
        ..elsewhere
    };
    let (year, raw) = first_year(&given, &path);
    assert_eq!((year, raw.year_source), (2019, Some(YearSource::Given)));
}

#[test]
fn vllm_process_tags_parse_like_bare_lines_and_become_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let tagged = engine_log(11, 29);
    let bare: String = tagged
        .lines()
        .map(|line| match line.strip_prefix('(') {
            Some(rest) => rest.split_once(") ").unwrap().1,
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let options = FileOptions {
        year: Some(2023),
        ..options()
    };
    let tagged_logs = read(
        &write(dir.path(), "t.log", tagged.as_bytes(), false),
        &options,
    )
    .logs();
    let bare_logs = read(
        &write(dir.path(), "b.log", bare.as_bytes(), false),
        &options,
    )
    .logs();
    let prefix = |logs: &[LogRecord]| -> Vec<(i64, Option<String>)> {
        logs.iter().map(|l| (l.ts, l.severity.clone())).collect()
    };
    assert_eq!(prefix(&tagged_logs), prefix(&bare_logs));
    let attrs: serde_json::Value = serde_json::from_str(&tagged_logs[2].attrs).unwrap();
    assert_eq!(attrs["process.title"], "VllmWorker");
    assert_eq!(attrs["process.pid"], 4702);
    assert_eq!(attrs["rank"], 1);
    assert!(attrs["log.file.path"].as_str().unwrap().ends_with("t.log"));
    let attrs: serde_json::Value = serde_json::from_str(&tagged_logs[0].attrs).unwrap();
    assert_eq!(
        (attrs["process.title"].as_str(), attrs.get("rank")),
        (Some("APIServer"), None)
    );
    assert!(
        !tagged_logs[3].attrs.contains("process"),
        "the traceback line has no tag"
    );
}
