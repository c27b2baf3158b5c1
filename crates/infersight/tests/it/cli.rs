//! CLI commands end to end: validate, mapping, ingest of every file format, query, exit codes.

use std::io::Write;

use crate::support::{request_spans, run};

const TS: u64 = 1_764_400_000_000_000_000;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn validate_reports_every_error_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "version = 1\n[server]\napi_port = 9000\n[store]\nretention = \"7d\"\n",
    )
    .unwrap();
    let out = run(&["validate", good.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[server]\nlisten = \"not-an-ip\"\nqueue_capacity = -1\n[store]\nfsync = \"maybe\"\n[typo]\n").unwrap();
    let out = run(&["validate", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    for needle in [
        "server.listen",
        "server.queue_capacity",
        "store.fsync",
        "typo: unknown key",
    ] {
        assert!(err.contains(needle), "missing {needle} in {err}");
    }
}

#[test]
fn mapping_prints_every_convention() {
    let out = run(&["mapping"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for needle in [
        "gen_ai.usage.prompt_tokens",
        "gen_ai.latency.e2e",
        "llm.token_count.prompt",
        "llm.usage.prompt_tokens",
        "vllm:gpu_cache_usage_perc",
    ] {
        assert!(text.contains(needle), "{needle}");
    }
}

#[test]
fn ingest_files_then_query_with_every_output_format() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let otlp = dir.path().join("traces.jsonl");
    let mut file = std::fs::File::create(&otlp).unwrap();
    for i in 0..3 {
        writeln!(
            file,
            "{}",
            serde_json::to_string(&request_spans(&format!("f{i}"), 5, TS)).unwrap()
        )
        .unwrap();
    }
    drop(file);
    let raw = dir.path().join("engine.log.gz");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&raw).unwrap(),
        flate2::Compression::fast(),
    );
    for i in 0..7 {
        writeln!(gz, "INFO 11-29 02:17:0{i} metrics.py:341] Avg prompt throughput: 1.0 tokens/s, Running: {i} reqs").unwrap();
    }
    gz.finish().unwrap();

    let out = run(&[
        "ingest",
        "--data",
        data.to_str().unwrap(),
        "--format",
        "json",
        "--worker",
        "w-9",
        otlp.to_str().unwrap(),
        raw.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(summary["files"][0]["rejected"], 0);
    assert_eq!(summary["files"][1]["records_stored"], 7);

    let q = |sql: &str, format: &str| {
        run(&[
            "query",
            "--data",
            data.to_str().unwrap(),
            "--format",
            format,
            sql,
        ])
    };
    let out = q("SELECT count(*) AS n FROM requests", "csv");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "n\n15");
    let out = q(
        "SELECT worker, count(*) AS n FROM logs GROUP BY worker",
        "json",
    );
    let rows: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(rows[0]["worker"], "w-9");
    assert_eq!(rows[0]["n"], 7);
    let out = q("SELECT model FROM requests LIMIT 1", "table");
    assert!(stdout(&out).contains("llama-3-8b"), "{}", stdout(&out));
}

#[test]
fn a_failed_ingest_keeps_what_it_read_before_the_failure() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("traces.jsonl");
    let mut file = std::fs::File::create(&good).unwrap();
    for i in 0..3 {
        let line = serde_json::to_string(&request_spans(&format!("k{i}"), 5, TS)).unwrap();
        writeln!(file, "{line}").unwrap();
    }
    drop(file);
    // a gzip header, then bytes that do not inflate: a read error after the first file
    let broken = dir.path().join("broken.jsonl.gz");
    let mut bytes = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    bytes.extend_from_slice(&[0xff; 64]);
    std::fs::write(&broken, bytes).unwrap();
    // by default rows skip the WAL, so the failing run must flush what it stored
    for wal in [false, true] {
        let data = dir.path().join(format!("data-{wal}"));
        let mut args = vec![
            "ingest",
            "--data",
            data.to_str().unwrap(),
            "--format",
            "json",
            good.to_str().unwrap(),
            broken.to_str().unwrap(),
        ];
        if wal {
            args.insert(1, "--wal");
        }
        let out = run(&args);
        assert_ne!(out.status.code(), Some(0), "wal {wal}");
        let err = stderr(&out);
        assert_eq!(err.trim().lines().count(), 1, "wal {wal}: {err}");
        assert!(err.contains("broken.jsonl.gz"), "wal {wal}: {err}");
        let summary: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        assert_eq!(summary["files"][0]["records_stored"], 15, "wal {wal}");
        let out = run(&[
            "query",
            "--data",
            data.to_str().unwrap(),
            "--format",
            "csv",
            "SELECT count(*) AS n FROM requests",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(stdout(&out).trim(), "n\n15", "wal {wal}");
    }
}

#[test]
fn bad_sql_and_bad_files_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = run(&["query", "--data", data.to_str().unwrap(), "SELECT 1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no store at"), "{}", stderr(&out));
    let log = dir.path().join("one.log");
    std::fs::write(&log, "hello\n").unwrap();
    assert!(
        run(&[
            "ingest",
            "--data",
            data.to_str().unwrap(),
            log.to_str().unwrap()
        ])
        .status
        .success()
    );
    let out = run(&["query", "--data", data.to_str().unwrap(), "SELEC nonsense"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    let out = run(&[
        "query",
        "--data",
        data.to_str().unwrap(),
        "DROP TABLE requests",
    ]);
    assert_eq!(out.status.code(), Some(2));

    let broken = dir.path().join("broken.jsonl");
    std::fs::write(&broken, "{\"resourceSpans\": [\n").unwrap();
    let out = run(&[
        "ingest",
        "--data",
        data.to_str().unwrap(),
        "--input-format",
        "otlp-jsonl",
        broken.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("rejected"), "{}", stderr(&out));
    // detected, not forced: a one-line file holding a truncated export is rejected the same way
    let one_line = dir.path().join("one-line.jsonl");
    std::fs::write(&one_line, "{\"resourceLogs\":[{\"scopeLogs\":[").unwrap();
    let out = run(&[
        "ingest",
        "--data",
        data.to_str().unwrap(),
        "--format",
        "json",
        one_line.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    let at_line = format!("{}:1: ", one_line.display());
    assert!(stderr(&out).contains(&at_line), "{}", stderr(&out));
    let out = run(&[
        "ingest",
        "--data",
        data.to_str().unwrap(),
        "/nonexistent/file.log",
    ]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn readme_mapping_table_matches_the_code() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let out = run(&["mapping"]);
    let table = stdout(&out);
    assert!(
        readme.contains(table.trim()),
        "README.md's mapping table is stale: replace it with the output of `infersight mapping`"
    );
}

#[test]
fn scenarios_lists_every_scenario() {
    let out = run(&["scenarios", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    for name in [
        "lora_kv_regression",
        "gpu_memory_leak",
        "batching_misconfig",
        "cache_pollution",
        "injection_resonance",
        "truncation_surge",
        "trace_context_loss",
        "flow_control_stall",
        "preemption_storm",
        "slow_worker",
        "two_causes",
        "prompt_drift",
        "healthy",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let table = stdout(&run(&["scenarios"]));
    assert_eq!(table.lines().count(), 13, "{table}");
}

#[test]
fn simulate_to_files_is_reproducible_and_ingestible() {
    let dir = tempfile::tempdir().unwrap();
    let args = |out: &str| {
        vec![
            "simulate".to_string(),
            "--scenario".into(),
            "gpu_memory_leak".into(),
            "--seed".into(),
            "3".into(),
            "--duration".into(),
            "2m".into(),
            "--workers".into(),
            "4".into(),
            "--rate".into(),
            "10".into(),
            "--arrivals".into(),
            "poisson".into(),
            "--format".into(),
            "json".into(),
            "--out".into(),
            out.into(),
        ]
    };
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    let run_args = |v: Vec<String>| run(&v.iter().map(String::as_str).collect::<Vec<_>>());
    let out = run_args(args(a.to_str().unwrap()));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(run_args(args(b.to_str().unwrap())).status.success());
    for file in [
        "traces.jsonl",
        "logs.jsonl",
        "metrics.jsonl",
        "ground_truth.json",
        "raw/worker-00.log",
    ] {
        let x = std::fs::read(a.join(file)).unwrap();
        assert!(!x.is_empty(), "{file}");
        assert_eq!(
            x,
            std::fs::read(b.join(file)).unwrap(),
            "{file} differs between runs"
        );
    }
    let truth: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("ground_truth.json")).unwrap())
            .unwrap();
    assert_eq!(truth["scenario"], "gpu_memory_leak");
    assert_eq!(truth["root_causes"][0]["dimensions"]["worker"], "worker-03");
    assert_eq!(truth["expected_signals"][0]["kind"], "gpu_memory_leak");
    assert!(truth["incident_window"]["start"].as_str().unwrap() < truth["end"].as_str().unwrap());

    // The files go through `ingest` like the Collector's: every span becomes a row.
    let data = dir.path().join("data");
    let jsonl: Vec<String> = ["traces.jsonl", "logs.jsonl", "metrics.jsonl"]
        .iter()
        .map(|f| a.join(f).display().to_string())
        .collect();
    let mut ingest = vec!["ingest", "--quiet", "--data", data.to_str().unwrap()];
    ingest.extend(jsonl.iter().map(String::as_str));
    let out = run(&ingest);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run(&[
        "query",
        "--data",
        data.to_str().unwrap(),
        "--format",
        "csv",
        "SELECT count(*) AS n FROM requests",
    ]);
    let text = stdout(&out);
    assert_eq!(
        text.lines().nth(1).unwrap().trim(),
        summary["summary"]["requests"].to_string(),
        "{text}"
    );
}

#[test]
fn simulate_rejects_bad_input_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("o");
    let out = run(&[
        "simulate",
        "--scenario",
        "nope",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown scenario `nope`"),
        "{}",
        stderr(&out)
    );
    let out = run(&["simulate", "--scenario", "healthy"]);
    assert_eq!(out.status.code(), Some(2), "neither --out nor --otlp");
    let out = run(&[
        "simulate",
        "--scenario",
        "healthy",
        "--duration",
        "soon",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = std::process::Command::new(crate::support::bin())
        .args([
            "simulate",
            "--scenario",
            "healthy",
            "--arrivals",
            "mooncake",
            "--out",
        ])
        .arg(&out_dir)
        .env("INFERSIGHT_DATA_DIR", dir.path().join("no-data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("trace data not found"),
        "{}",
        stderr(&out)
    );
}

/// `simulate --token-events` puts per-token events on a share of engine spans; `ingest` turns
/// them into `tokens` rows joined to their requests by request id, and fills the requests' max
/// inter-token latency (which no span attribute carries) from them. Out-of-range fractions are
/// bad usage.
#[test]
fn simulated_token_events_fill_the_tokens_table() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    let data = dir.path().join("data");
    let out = run(&[
        "simulate",
        "--scenario",
        "healthy",
        "--seed",
        "5",
        "--duration",
        "2m",
        "--workers",
        "4",
        "--rate",
        "10",
        "--arrivals",
        "poisson",
        "--token-events",
        "0.1",
        "--format",
        "json",
        "--quiet",
        "--out",
        sim.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let token_events = summary["summary"]["token_events"].as_i64().unwrap();
    assert!(token_events > 1_000, "{summary}");
    let traces = sim.join("traces.jsonl");
    let out = run(&[
        "ingest",
        "--quiet",
        "--format",
        "json",
        "--data",
        data.to_str().unwrap(),
        traces.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let scalar = |sql: &str| {
        let out = run(&[
            "query",
            "--data",
            data.to_str().unwrap(),
            "--format",
            "csv",
            sql,
        ]);
        assert_eq!(out.status.code(), Some(0), "{sql}: {}", stderr(&out));
        let text = stdout(&out);
        text.lines()
            .nth(1)
            .unwrap_or_else(|| panic!("{sql}: {text}"))
            .trim()
            .parse::<i64>()
            .unwrap_or_else(|e| panic!("{sql}: {e}: {text}"))
    };
    assert_eq!(scalar("SELECT count(*) AS n FROM tokens"), token_events);
    let with_tokens = scalar("SELECT count(DISTINCT request_id) AS n FROM tokens");
    assert!(with_tokens > 10, "{with_tokens}");
    assert_eq!(
        scalar(
            "SELECT count(DISTINCT t.request_id) AS n FROM tokens t \
             JOIN requests r ON r.request_id = t.request_id"
        ),
        with_tokens,
        "every token row belongs to a request row"
    );
    assert_eq!(
        scalar("SELECT count(*) AS n FROM tokens WHERE stage = 'prefill'"),
        with_tokens
    );
    // The sim's spans carry no max-ITL attribute: only requests with token events have one.
    let filled = scalar("SELECT count(*) AS n FROM requests WHERE itl_max_ms IS NOT NULL");
    assert!(
        filled > 0 && filled <= with_tokens,
        "{filled} of {with_tokens}"
    );
    assert_eq!(
        scalar(
            "SELECT count(*) AS n FROM requests WHERE itl_max_ms IS NOT NULL \
             AND itl_max_ms < tpot_ms * 0.999"
        ),
        0,
        "the largest gap is at least the mean"
    );

    let out = run(&[
        "simulate",
        "--scenario",
        "healthy",
        "--token-events",
        "1.5",
        "--out",
        dir.path().join("o").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("token events"), "{}", stderr(&out));
}

/// `simulate --phase-spans`: SGLang workers trace queue / prefill / decode as child spans and set
/// no latency attribute; `ingest` rebuilds the same breakdown from the span tree as the attributes
/// give in a run without the flag (same seed, so the same requests).
#[test]
fn simulated_phase_spans_rebuild_the_breakdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut sums = Vec::new();
    for phase_spans in [false, true] {
        let sim = dir.path().join(format!("sim-{phase_spans}"));
        let data = dir.path().join(format!("data-{phase_spans}"));
        let mut args = vec![
            "simulate",
            "--scenario",
            "healthy",
            "--seed",
            "11",
            "--duration",
            "2m",
            "--workers",
            "8",
            "--rate",
            "12",
            "--arrivals",
            "poisson",
            "--token-events",
            "0",
            "--quiet",
            "--out",
            sim.to_str().unwrap(),
        ];
        if phase_spans {
            args.push("--phase-spans");
        }
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let traces = sim.join("traces.jsonl");
        let out = run(&[
            "ingest",
            "--quiet",
            "--data",
            data.to_str().unwrap(),
            traces.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let out = run(&[
            "query",
            "--data",
            data.to_str().unwrap(),
            "--format",
            "csv",
            "SELECT count(*) AS n, \
             sum(CASE WHEN ttft_ms IS NULL OR queue_ms IS NULL OR prefill_ms IS NULL \
                 OR decode_ms IS NULL THEN 1 ELSE 0 END) AS missing, \
             sum(CASE WHEN attrs LIKE '%breakdown_mismatch%' THEN 1 ELSE 0 END) AS mismatched, \
             sum(CASE WHEN attrs LIKE '%gen_ai.latency%' THEN 1 ELSE 0 END) AS with_latency_attrs, \
             sum(queue_ms) AS queue, sum(prefill_ms) AS prefill, sum(ttft_ms) AS ttft, \
             sum(decode_ms) AS decode, sum(e2e_ms) AS e2e \
             FROM requests WHERE runtime = 'sglang' AND finish_reason <> 'abort'",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = stdout(&out);
        let row: Vec<f64> = text
            .lines()
            .nth(1)
            .unwrap_or_else(|| panic!("{text}"))
            .split(',')
            .map(|v| v.trim().parse().unwrap_or_else(|e| panic!("{e}: {text}")))
            .collect();
        assert!(row[0] > 50.0, "SGLang requests: {text}");
        assert_eq!(row[1], 0.0, "every phase filled: {text}");
        assert_eq!(row[2], 0.0, "no breakdown mismatch: {text}");
        sums.push(row);
    }
    assert_eq!(sums[0][0], sums[1][0], "the same requests");
    assert_eq!(sums[1][3], 0.0, "no latency attribute with --phase-spans");
    for (column, name) in [
        (4, "queue"),
        (5, "prefill"),
        (6, "ttft"),
        (7, "decode"),
        (8, "e2e"),
    ] {
        let (attrs, tree) = (sums[0][column], sums[1][column]);
        assert!(
            (attrs - tree).abs() <= 1e-3 * attrs.abs().max(1.0),
            "{name}: {attrs} from attributes vs {tree} from the span tree"
        );
    }
}

#[test]
fn raw_lines_without_a_year_land_in_the_year_of_the_traces_they_come_with() {
    // traces of 2023-11-29 07:00 UTC, ingested years later with the engine's year-less log given
    // first on the command line
    const TRACES_TS: u64 = 1_701_241_200_000_000_000;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let otlp = dir.path().join("traces.jsonl");
    let line = serde_json::to_string(&request_spans("y", 5, TRACES_TS)).unwrap();
    std::fs::write(&otlp, format!("{line}\n")).unwrap();
    let raw = dir.path().join("engine.log");
    let lines: Vec<String> = (0..4)
        .map(|i| {
            format!("(EngineCore_0 pid=7) INFO 11-29 07:0{i}:30 [loggers.py:1] Running: {i} reqs")
        })
        .collect();
    std::fs::write(&raw, lines.join("\n")).unwrap();
    let ingest = |data: &std::path::Path, extra: &[&str], files: &[&std::path::Path]| {
        let mut args = vec![
            "ingest",
            "--data",
            data.to_str().unwrap(),
            "--format",
            "json",
        ];
        args.extend(extra);
        args.extend(files.iter().map(|f| f.to_str().unwrap()));
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        out
    };
    let years = |data: &std::path::Path| {
        let out = run(&[
            "query",
            "--data",
            data.to_str().unwrap(),
            "--format",
            "csv",
            "SELECT DISTINCT CAST(date_part('year', ts) AS BIGINT) AS y FROM logs ORDER BY y",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out).trim().to_string()
    };
    // the log given first: the traces are read first all the same
    let out = ingest(&data, &[], &[&raw, &otlp]);
    assert!(!stderr(&out).contains("raw log lines"), "{}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let first = summary["files"][0]["path"].as_str().unwrap();
    assert!(
        first.ends_with("engine.log"),
        "summaries in the given order: {summary}"
    );
    assert_eq!(years(&data), "y\n2023");
    // the log loaded later, alone: the store's time range places it
    let later = dir.path().join("data-later");
    ingest(&later, &[], &[&otlp]);
    let out = ingest(&later, &[], &[&raw]);
    assert!(!stderr(&out).contains("raw log lines"), "{}", stderr(&out));
    assert_eq!(years(&later), "y\n2023");
    // a wrong --year is obeyed and warned about, with both ranges
    let out = ingest(&later, &["--year", "2021"], &[&raw]);
    let err = stderr(&out);
    assert!(err.contains("4 of 4 raw log lines"), "{err}");
    assert!(
        err.contains("2023-11-29") && err.contains("2021-11-29"),
        "both ranges: {err}"
    );
    assert_eq!(years(&later), "y\n2021\n2023");
}

/// One OTLP/JSON export line of one service's spans.
fn service_export(service: &str, spans: Vec<serde_json::Value>) -> String {
    serde_json::json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{"spans": spans}]
    }]})
    .to_string()
}

/// A gateway's spans in one file, the engine's in another (each service exports on its own), the
/// engine's file first: the store's `requests` table, what the RCA reads, has one row per
/// request, with the engine's timings and the gateway's tenant, and `service` is no dimension.
#[test]
fn ingest_of_a_gateway_file_and_an_engine_file_stores_one_row_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (engine, gateway) = (dir.path().join("engine.jsonl"), dir.path().join("gw.jsonl"));
    let (mut engine_lines, mut gateway_lines) = (Vec::new(), Vec::new());
    let kv = |key: &str, value: serde_json::Value| serde_json::json!({"key": key, "value": value});
    for n in 0..30u64 {
        let trace = format!("{:032x}", 0xabc0_0000 + n);
        let (root, child) = (
            format!("{:016x}", 0x1000 + n),
            format!("{:016x}", 0x2000 + n),
        );
        let start = TS + n * 100_000_000;
        let time = |offset_ms: u64| (start + offset_ms * 1_000_000).to_string();
        let id = serde_json::json!({"stringValue": format!("chatcmpl-{n}")});
        let model = serde_json::json!({"stringValue": "llama-3-8b"});
        gateway_lines.push(service_export(
            "llm-gateway",
            vec![serde_json::json!({
                "traceId": trace, "spanId": root, "name": "POST /v1/chat/completions",
                "startTimeUnixNano": time(0), "endTimeUnixNano": time(1_010),
                "attributes": [
                    kv("gen_ai.request.model", model.clone()),
                    kv("gen_ai.response.id", id.clone()),
                    kv("tenant.id", serde_json::json!({"stringValue": format!("t{}", n % 2)})),
                ]
            })],
        ));
        engine_lines.push(service_export(
            "vllm-engine",
            vec![serde_json::json!({
                "traceId": trace, "spanId": child, "parentSpanId": root, "name": "llm_request",
                "startTimeUnixNano": time(5), "endTimeUnixNano": time(1_005),
                "attributes": [
                    kv("gen_ai.request.model", model),
                    kv("gen_ai.request.id", id),
                    kv("gen_ai.latency.time_in_queue", serde_json::json!({"doubleValue": 0.05})),
                    kv("gen_ai.latency.time_to_first_token", serde_json::json!({"doubleValue": 0.2})),
                    kv("gen_ai.latency.e2e", serde_json::json!({"doubleValue": 1.0})),
                ]
            })],
        ));
    }
    std::fs::write(&engine, engine_lines.join("\n")).unwrap();
    std::fs::write(&gateway, gateway_lines.join("\n")).unwrap();
    let out = run(&[
        "ingest",
        "--data",
        data.to_str().unwrap(),
        engine.to_str().unwrap(),
        gateway.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run(&[
        "query",
        "--data",
        data.to_str().unwrap(),
        "--format",
        "csv",
        "SELECT count(*) AS n, count(DISTINCT service) AS services, count(tenant) AS tenants, \
         count(ttft_ms) AS timed, (SELECT count(*) FROM spans) AS spans FROM requests",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "n,services,tenants,timed,spans\n30,1,30,30,60"
    );
}
