//! SLIs from rollups end to end: OTLP in, `GET /api/v1/sli` and `infersight sli` out, the same
//! numbers before and after the server flushed and restarted (memtable vs sidecars).

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;

use crate::support::{Server, kv, request_spans, run, s};

const TS: u64 = 1_764_400_000_000_000_000;

/// 30 requests on `worker` with TTFT `base_ms + i` for i in 0..30.
fn thirty(worker: &str, base_ms: f64) -> Vec<u8> {
    let mut req = request_spans(worker, 30, TS);
    let resource = req.resource_spans[0].resource.as_mut().unwrap();
    resource.attributes.retain(|a| a.key != "k8s.pod.name");
    resource.attributes.push(kv("k8s.pod.name", s(worker)));
    for (i, span) in req.resource_spans[0].scope_spans[0]
        .spans
        .iter_mut()
        .enumerate()
    {
        span.attributes
            .retain(|a| a.key != "gen_ai.latency.time_to_first_token");
        span.attributes.push(kv(
            "gen_ai.latency.time_to_first_token",
            Value::DoubleValue((base_ms + i as f64) / 1000.0),
        ));
    }
    req.encode_to_vec()
}

fn p99_by_worker(answer: &serde_json::Value) -> Vec<(String, f64)> {
    answer["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["group"]["worker"].as_str().unwrap().to_string(),
                s["points"][0]["values"]["p99"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn sli_api_and_cli_answer_from_rollups() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, "[store]\nfsync = \"always\"\n");
    for body in [thirty("worker-a", 100.0), thirty("worker-b", 1000.0)] {
        let (status, _, answer) =
            server.post_otlp("/v1/traces", "application/x-protobuf", &body, false);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    }

    let (status, text) = server.get("/api/v1/sli?sli=ttft&q=p99&by=worker");
    assert_eq!(status, 200, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    let live = p99_by_worker(&answer);
    assert_eq!(live.len(), 2, "{answer}");
    // p99 of 30 values is the one of rank floor(0.99 * 29) = 28: 128 and 1028, within 1 %
    assert_eq!(live[0].0, "worker-a");
    assert!((live[0].1 - 128.0).abs() <= 1.28, "{answer}");
    assert!((live[1].1 - 1028.0).abs() <= 10.28, "{answer}");
    assert_eq!(answer["series"][0]["points"][0]["requests"], 30);

    let (status, text) = server.get("/api/v1/sli?sli=latency");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("known: queue"), "{text}");
    let (status, text) = server.get("/api/v1/sli?sli=ttft&by=colour");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("colour"), "{text}");

    server.terminate();
    let data_arg = data.to_str().unwrap();
    let out = run(&[
        "sli", "--data", data_arg, "--sli", "ttft", "--q", "0.99", "--by", "worker", "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let flushed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        p99_by_worker(&flushed),
        live,
        "flushed rollups differ from live"
    );

    let out = run(&[
        "sli",
        "--data",
        data_arg,
        "--sli",
        "error_rate",
        "--step",
        "1m",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("ts"), "{table}");
    assert!(table.contains("error_rate"), "{table}");

    let out = run(&["sli", "--data", data_arg, "--sli", "ttft", "--step", "10s"]);
    assert_eq!(out.status.code(), Some(2), "a bad step is a usage error");
}

#[test]
fn a_burning_slo_fires_once_to_the_webhook_and_shows_in_the_api() {
    let (hook, notifications) = infersight_testkit::webhook::webhook_receiver(200);
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[alerts]\neval_interval = \"300ms\"\nwebhook_url = \"http://{hook}/hook\"\nslos = [{{ name = \"ttft-fast\", sli = \"ttft\", threshold_ms = 200, objective = 0.99, window = \"30d\" }}]\n"
    );
    let server = Server::start(&dir.path().join("data"), &config);
    // every request breaches the 200 ms threshold: burn rate 100 in every window
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let body = request_spans("slo", 40, now - 150_000_000_000).encode_to_vec();
    let (status, _, _) = server.post_otlp("/v1/traces", "application/x-protobuf", &body, false);
    assert_eq!(status, 200);

    let first = notifications
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("no webhook notification");
    assert_eq!(first["status"], "firing", "{first}");
    assert_eq!(first["labels"]["slo"], "ttft-fast");
    let (_, alerts) = server.get("/api/v1/alerts");
    let alerts: serde_json::Value = serde_json::from_str(&alerts).unwrap();
    let severities: Vec<&str> = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["severity"].as_str().unwrap())
        .collect();
    assert!(severities.contains(&"page"), "{alerts}");
    let (_, slo) = server.get("/api/v1/slo");
    let slo: serde_json::Value = serde_json::from_str(&slo).unwrap();
    assert_eq!(slo["slos"][0]["compliance"], 0.0, "{slo}");
    let (_, metrics) = server.get("/metrics");
    assert!(
        metrics.contains("infersight_slo_alert_firing{slo=\"ttft-fast\",severity=\"page\"} 1"),
        "{metrics}"
    );
    // one notification per alert (page, ticket): nothing more while it keeps burning
    let mut more = Vec::new();
    while let Ok(n) = notifications.recv_timeout(std::time::Duration::from_millis(1500)) {
        more.push(n);
    }
    assert!(more.len() <= 1, "repeated notifications: {more:?}");
}
