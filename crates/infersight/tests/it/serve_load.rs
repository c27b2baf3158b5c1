//! The serve-path load generator (`infersight bench-gen otlp-load`, bench/serve_ingest.sh)
//! against a real `serve`: two exporters, one gRPC and one HTTP, send twelve batches cycling
//! through a pool of six, the second pass with rewritten ids. Every span the generator reports
//! acknowledged is in `spans`, each trace of the pool is stored once per pass, and the file the
//! generator writes of the same passes ingests to the same spans.

use serde_json::Value;

use crate::support::{Server, ok, run};

fn number(value: &Value) -> i64 {
    value
        .as_i64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

#[test]
fn every_span_the_load_generator_reports_acknowledged_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("spans.jsonl");
    let server = Server::start(&data, "[store]\nfsync = \"always\"\n");
    let (grpc, http) = (
        format!("http://{}", server.grpc),
        format!("http://{}", server.http),
    );
    let out = run(&[
        "bench-gen",
        "otlp-load",
        "--grpc",
        &grpc,
        "--http",
        &http,
        "--exporters",
        "2",
        "--batches",
        "12",
        "--batch-spans",
        "100",
        "--pool-spans",
        "600",
        "--progress-every",
        "0s",
        "--write-jsonl",
        file.to_str().unwrap(),
        "--jsonl-rounds",
        "2",
    ]);
    let report: Value = serde_json::from_str(&ok(&out, "bench-gen otlp-load")).unwrap();
    assert_eq!(report["pool"]["batches"], 6, "{report}");
    assert_eq!(report["sent_batches"], 12, "{report}");
    assert_eq!(report["acked_spans"], 1200, "{report}");
    for answer in ["throttled", "unavailable", "failed", "rejected_spans"] {
        assert_eq!(report[answer], 0, "{answer}: {report}");
    }
    for protocol in ["grpc", "http"] {
        let acked = number(&report["by_protocol"][protocol]["acked_spans"]);
        assert!(acked > 0, "no span acknowledged over {protocol}: {report}");
    }
    assert!(report["ack_latency_ms"]["p99"].as_f64().unwrap() > 0.0);

    let acked = number(&report["acked_spans"]);
    let pool_traces = number(&report["pool"]["traces"]);
    assert_eq!(server.scalar("SELECT count(*) AS n FROM spans"), acked);
    assert_eq!(
        server.scalar("SELECT count(DISTINCT trace_id) AS n FROM spans"),
        2 * pool_traces,
        "each pass over the pool stores new traces"
    );
    server.stop();

    let file_data = dir.path().join("file-data");
    let ingest = run(&[
        "ingest",
        "--quiet",
        "--data",
        file_data.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    ok(&ingest, "ingest of the generator's file");
    let query = |sql: &str| {
        let out = run(&[
            "query",
            "--data",
            file_data.to_str().unwrap(),
            "--format",
            "csv",
            sql,
        ]);
        let text = ok(&out, "query");
        text.lines().nth(1).unwrap_or_default().trim().to_string()
    };
    assert_eq!(query("SELECT count(*) FROM spans"), acked.to_string());
    assert_eq!(
        query("SELECT count(DISTINCT trace_id) FROM spans"),
        (2 * pool_traces).to_string()
    );
}

/// bench/ingest.sh's one-span requests, sent twice over: every pass stores new requests (their
/// request ids are rewritten too, or the second pass's rows would be dropped as duplicates).
#[test]
fn synthetic_spans_sent_again_are_new_requests() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, "[store]\nfsync = \"always\"\n");
    let http = format!("http://{}", server.http);
    let out = run(&[
        "bench-gen",
        "otlp-load",
        "--spans",
        "synthetic",
        "--http",
        &http,
        "--exporters",
        "2",
        "--batches",
        "6",
        "--batch-spans",
        "50",
        "--pool-spans",
        "150",
        "--progress-every",
        "0s",
    ]);
    let report: Value = serde_json::from_str(&ok(&out, "bench-gen otlp-load")).unwrap();
    assert_eq!(report["acked_spans"], 300, "{report}");
    assert_eq!(server.scalar("SELECT count(*) AS n FROM spans"), 300);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let requests = loop {
        let n = server.scalar("SELECT count(DISTINCT request_id) AS n FROM requests");
        if n >= 300 || std::time::Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(
        requests, 300,
        "one request row per span, none taken for a duplicate"
    );
}
