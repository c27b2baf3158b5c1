//! The running server over real sockets: OTLP HTTP (protobuf, JSON, gzip), OTLP gRPC, bad
//! input, SIGTERM flush, SIGKILL durability, backpressure and the API.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;

use crate::support::{Server, kv, request_spans, rows, s};

const TS: u64 = 1_764_400_000_000_000_000;

const QUIET: &str = "[store]\nfsync = \"always\"\n";

#[test]
fn otlp_http_protobuf_json_and_gzip_are_normalized() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), QUIET);

    let proto = request_spans("pb", 3, TS).encode_to_vec();
    let (status, ct, _) = server.post_otlp("/v1/traces", "application/x-protobuf", &proto, false);
    assert_eq!((status, ct.as_str()), (200, "application/x-protobuf"));

    let json = serde_json::to_vec(&request_spans("js", 2, TS)).unwrap();
    let (status, ct, body) = server.post_otlp("/v1/traces", "application/json", &json, true);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(ct.starts_with("application/json"));

    let answer = server.sql(
        "SELECT request_id, model, input_tokens, output_tokens, queue_ms, ttft_ms, e2e_ms, worker, service \
         FROM requests ORDER BY request_id",
    );
    let rows = rows(&answer);
    assert_eq!(rows.len(), 5, "{answer}");
    let first: std::collections::HashMap<_, _> = rows[2].iter().cloned().collect();
    assert_eq!(first["request_id"], "pb-0");
    assert_eq!(first["model"], "llama-3-8b");
    assert_eq!(first["input_tokens"], 100);
    assert_eq!(first["output_tokens"], 20);
    assert_eq!(first["queue_ms"].as_f64(), Some(125.0));
    assert_eq!(first["ttft_ms"].as_f64(), Some(500.0));
    assert_eq!(first["e2e_ms"].as_f64(), Some(2000.0));
    assert_eq!(first["worker"], "worker-1");
    assert_eq!(first["service"], "vllm");
    assert_eq!(server.scalar("SELECT count(*) AS n FROM spans"), 5);
}

#[test]
fn bad_input_gets_a_clear_error_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        "[server]\nmax_body_bytes = 65536\n",
    );

    let (status, _, body) = server.post_otlp(
        "/v1/traces",
        "application/x-protobuf",
        b"\xff\xff\xff\x0f garbage",
        false,
    );
    let text = String::from_utf8_lossy(&body).to_lowercase();
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("protobuf"), "{text}");

    let json = serde_json::to_string(&request_spans("t", 2, TS)).unwrap();
    let (status, _, body) = server.post_otlp(
        "/v1/traces",
        "application/json",
        &json.as_bytes()[..json.len() / 2],
        false,
    );
    let text = String::from_utf8_lossy(&body).to_lowercase();
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("json"), "{text}");

    let (status, _, body) = server.post_otlp("/v1/traces", "text/plain", json.as_bytes(), false);
    assert!(status == 400 || status == 415, "{status}");
    assert!(
        String::from_utf8_lossy(&body)
            .to_lowercase()
            .contains("content type"),
        "{}",
        String::from_utf8_lossy(&body)
    );

    let big = request_spans("big", 400, TS).encode_to_vec();
    assert!(big.len() > 65_536);
    let (status, _, _) = server.post_otlp("/v1/traces", "application/x-protobuf", &big, false);
    assert_eq!(status, 413);

    let mut wrong = request_spans("wrong", 3, TS);
    wrong.resource_spans[0].scope_spans[0].spans[1]
        .attributes
        .push(kv("gen_ai.usage.input_tokens", Value::BoolValue(true)));
    let (status, _, body) = server.post_otlp(
        "/v1/traces",
        "application/x-protobuf",
        &wrong.encode_to_vec(),
        false,
    );
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("gen_ai.usage.input_tokens"), "{text}");

    // nothing from any of these requests is stored, and the server keeps serving
    assert_eq!(server.scalar("SELECT count(*) AS n FROM spans"), 0);
    assert_eq!(server.get("/healthz").0, 200);
    let (status, _, _) = server.post_otlp(
        "/v1/traces",
        "application/x-protobuf",
        &request_spans("ok", 1, TS).encode_to_vec(),
        false,
    );
    assert_eq!(status, 200);
    assert_eq!(server.scalar("SELECT count(*) AS n FROM requests"), 1);
}

#[test]
fn partial_success_reports_rejected_spans() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), QUIET);
    let mut req = request_spans("p", 3, TS);
    req.resource_spans[0].scope_spans[0].spans[0].span_id = vec![1, 2, 3]; // not 8 bytes
    let (status, _, body) = server.post_otlp(
        "/v1/traces",
        "application/json",
        &serde_json::to_vec(&req).unwrap(),
        false,
    );
    assert_eq!(status, 200);
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        answer["partialSuccess"]["rejectedSpans"]
            .as_i64()
            .or_else(|| answer["partialSuccess"]["rejectedSpans"]
                .as_str()
                .and_then(|s| s.parse().ok())),
        Some(1),
        "{answer}"
    );
    assert_eq!(server.scalar("SELECT count(*) AS n FROM spans"), 2);
}

#[test]
fn grpc_export_and_self_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), QUIET);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let endpoint = format!("http://{}", server.grpc);
    runtime.block_on(async {
        let mut client = TraceServiceClient::connect(endpoint)
            .await
            .expect("grpc connect");
        let response = client
            .export(request_spans("g", 4, TS))
            .await
            .expect("grpc export");
        assert!(response.into_inner().partial_success.is_none());
        let mut bad = request_spans("gbad", 1, TS);
        bad.resource_spans[0].scope_spans[0].spans[0]
            .attributes
            .push(kv(
                "gen_ai.latency.e2e",
                Value::ArrayValue(Default::default()),
            ));
        let status = client
            .export(bad)
            .await
            .expect_err("wrong attribute type must fail");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("gen_ai.latency.e2e"),
            "{}",
            status.message()
        );
    });
    assert_eq!(
        server.scalar("SELECT count(*) AS n FROM requests WHERE request_id LIKE 'g-%'"),
        4
    );
    let (status, metrics) = server.get("/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains(r#"infersight_receiver_requests_total{protocol="otlp_grpc",signal="traces",outcome="ok"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("infersight_store_memtable_rows"),
        "{metrics}"
    );
}

#[test]
fn sigterm_flushes_and_restart_serves_the_same_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, QUIET);
    for i in 0..3 {
        let body = request_spans(&format!("t{i}"), 10, TS).encode_to_vec();
        assert_eq!(
            server
                .post_otlp("/v1/traces", "application/x-protobuf", &body, false)
                .0,
            200
        );
    }
    let stderr = server.stderr.clone();
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
    let stderr = stderr.lock().unwrap().join("\n");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("ERROR"),
        "{stderr}"
    );
    let segments = walk(&data.join("segments"));
    assert!(
        segments
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "parquet")),
        "{segments:?}"
    );
    let server = Server::start(&data, QUIET);
    assert_eq!(server.scalar("SELECT count(*) AS n FROM requests"), 30);
    assert_eq!(
        server.scalar("SELECT count(DISTINCT request_id) AS n FROM requests"),
        30
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn sigkill_mid_stream_loses_nothing_acknowledged_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(
        &data,
        "[store]\nfsync = \"always\"\nmemtable_max_rows = 500\n[server]\nmaintenance_interval = \"100ms\"\n",
    );
    let url = format!("http://{}/v1/traces", server.http);
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    for t in 0..3 {
        let (url, acked, stop, sent) = (url.clone(), acked.clone(), stop.clone(), sent.clone());
        senders.push(std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) && i < 2_000 {
                let prefix = format!("k{t}x{i}");
                let body =
                    request_spans(&prefix, 20, TS + i as u64 * 1_000_000_000).encode_to_vec();
                let agent = crate::support::agent();
                let result = agent
                    .post(&url)
                    .header("content-type", "application/x-protobuf")
                    .send(&body[..]);
                sent.fetch_add(1, Ordering::SeqCst);
                match result {
                    Ok(r) if r.status().as_u16() == 200 => acked.lock().unwrap().push(prefix),
                    _ => {}
                }
                i += 1;
            }
        }));
    }
    // let some batches be acknowledged (and some flushes happen), then kill without warning
    let start = std::time::Instant::now();
    while acked.lock().unwrap().len() < 60 && start.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    server.kill();
    stop.store(true, Ordering::SeqCst);
    for s in senders {
        s.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 60, "only {} acknowledged", acked.len());

    let server = Server::start(&data, QUIET);
    let total = server.scalar("SELECT count(*) AS n FROM requests");
    let distinct = server.scalar("SELECT count(DISTINCT request_id) AS n FROM requests");
    assert_eq!(total, distinct, "duplicated rows after replay");
    for prefix in &acked {
        let n = server.scalar(&format!(
            "SELECT count(*) AS n FROM requests WHERE request_id LIKE '{prefix}-%'"
        ));
        assert_eq!(
            n, 20,
            "acknowledged batch {prefix} is incomplete after SIGKILL + restart"
        );
    }
    // every stored row belongs to a whole batch (all-or-nothing per request)
    assert_eq!(total % 20, 0, "a half-written request was stored");
}

#[test]
fn backpressure_answers_429_and_keeps_every_acknowledged_record() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        "[server]\nqueue_capacity = 1\n[store]\nfsync = \"always\"\n",
    );
    let url = format!("http://{}/v1/traces", server.http);
    let ok = Arc::new(AtomicUsize::new(0));
    let throttled = Arc::new(AtomicUsize::new(0));
    let retry_after_seen = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (url, ok, throttled, retry_after_seen) = (
                url.clone(),
                ok.clone(),
                throttled.clone(),
                retry_after_seen.clone(),
            );
            std::thread::spawn(move || {
                let agent = crate::support::agent();
                for i in 0..40 {
                    let body = request_spans(&format!("b{t}x{i}"), 500, TS).encode_to_vec();
                    let response = agent
                        .post(&url)
                        .header("content-type", "application/x-protobuf")
                        .send(&body[..])
                        .unwrap();
                    match response.status().as_u16() {
                        200 => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        429 => {
                            throttled.fetch_add(1, Ordering::SeqCst);
                            if response.headers().contains_key("retry-after") {
                                retry_after_seen.store(true, Ordering::SeqCst);
                            }
                        }
                        other => panic!("unexpected status {other}"),
                    }
                }
            })
        })
        .collect();
    let pid = server.pid();
    let mut max_rss_kib = 0u64;
    let mut done = false;
    while !done {
        done = threads.iter().all(|t| t.is_finished());
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status"))
            && let Some(line) = status.lines().find(|l| l.starts_with("VmRSS:"))
        {
            {
                let kib: u64 = line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                max_rss_kib = max_rss_kib.max(kib);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    for t in threads {
        t.join().unwrap();
    }
    let ok = ok.load(Ordering::SeqCst);
    let throttled = throttled.load(Ordering::SeqCst);
    assert_eq!(ok + throttled, 320);
    assert!(
        throttled > 0,
        "a flood into a queue of 1 was never throttled"
    );
    assert!(
        retry_after_seen.load(Ordering::SeqCst),
        "429 without Retry-After"
    );
    assert!(ok > 0);
    assert_eq!(
        server.scalar("SELECT count(*) AS n FROM requests") as usize,
        ok * 500
    );
    assert!(
        max_rss_kib < 1_500_000,
        "server RSS grew to {max_rss_kib} KiB"
    );
}

#[test]
fn dimensions_api_lists_low_cardinality_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), QUIET);
    let mut req = request_spans("d", 40, TS);
    for (i, span) in req.resource_spans[0].scope_spans[0]
        .spans
        .iter_mut()
        .enumerate()
    {
        span.attributes.push(kv(
            "llm.lora.adapters",
            s(if i % 4 == 0 { "sql-lora" } else { "chat-lora" }),
        ));
        span.attributes.push(kv(
            "acme.kv_policy",
            s(if i % 2 == 0 { "paged" } else { "contiguous" }),
        ));
    }
    assert_eq!(
        server
            .post_otlp(
                "/v1/traces",
                "application/x-protobuf",
                &req.encode_to_vec(),
                false
            )
            .0,
        200
    );
    let (status, text) = server.get("/api/v1/dimensions");
    assert_eq!(status, 200, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    let dims = answer["dimensions"].as_array().unwrap();
    let find = |name: &str| dims.iter().find(|d| d["name"] == name).cloned();
    let lora = find("lora_adapters").expect("lora_adapters listed");
    assert_eq!(lora["distinct_values"], 2);
    let policy = find("acme.kv_policy").expect("attrs key listed");
    assert_eq!(policy["distinct_values"], 2);
    assert!(
        find("request_id").is_none(),
        "ids are not dimensions: {answer}"
    );
}

/// `infersight simulate --otlp` against a running `infersight serve` stores every record it sent
/// (spans, request rows, log records and raw engine lines, metric points), also when a tiny
/// ingest queue answers 429 and the sender has to honour Retry-After.
#[test]
fn simulate_otlp_stores_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        "[server]\nqueue_capacity = 1\n[store]\nfsync = \"always\"\n",
    );
    let url = format!("http://{}", server.http);
    let out = crate::support::run(&[
        "simulate",
        "--scenario",
        "lora_kv_regression",
        "--duration",
        "3m",
        "--workers",
        "6",
        "--rate",
        "25",
        "--arrivals",
        "poisson",
        "--format",
        "json",
        "--quiet",
        "--otlp",
        &url,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let summary = &answer["summary"];
    let n = |key: &str| summary[key].as_i64().unwrap();
    assert!(n("requests") > 3_000, "{summary}");
    assert_eq!(answer["ground_truth"]["scenario"], "lora_kv_regression");
    assert_eq!(server.scalar("SELECT count(*) AS n FROM spans"), n("spans"));
    assert_eq!(
        server.scalar("SELECT count(*) AS n FROM requests"),
        n("requests")
    );
    assert_eq!(
        server.scalar("SELECT count(*) AS n FROM logs"),
        n("log_records") + n("raw_lines")
    );
    // Metric points sent over OTLP carry the worker resource's `serving.lora.loaded`; the
    // pipeline may add rows of its own (metrics parsed from engine log lines), so the total is
    // at least the points sent.
    assert_eq!(
        server
            .scalar("SELECT count(*) AS n FROM metrics WHERE labels LIKE '%serving.lora.loaded%'"),
        n("metric_points")
    );
    assert!(server.scalar("SELECT count(*) AS n FROM metrics") >= n("metric_points"));
    // The dimension columns the root-cause engine needs are filled on every request row.
    assert_eq!(
        server.scalar(
            "SELECT count(*) AS n FROM requests WHERE model_version IS NULL OR lora_adapters IS NULL \
             OR kv_cache_policy IS NULL OR batch_size IS NULL OR worker IS NULL OR tenant IS NULL \
             OR queue_ms IS NULL OR e2e_ms IS NULL"
        ),
        0
    );
}
