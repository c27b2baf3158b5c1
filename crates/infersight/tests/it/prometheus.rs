//! Our `/metrics` as Prometheus sees it: `promtool check metrics` accepts it, and a real
//! Prometheus server (Debian's package) scrapes `infersight serve` and returns our SLI series
//! through its own query API. Skipped when the binaries are missing, except in CI
//! (`INFERSIGHT_TEST_PROMETHEUS=1`, set by `.ci/run` after installing them), where it must run.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message;

use crate::support::{Server, agent, request_spans};

fn tool(name: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("INFERSIGHT_TEST_PROMETHEUS").is_none(),
            "INFERSIGHT_TEST_PROMETHEUS is set but `{name}` is not on PATH"
        );
        eprintln!("skipping: `{name}` not found (apt-get install prometheus)");
    }
    found
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A server holding 50 requests from two minutes ago (inside the 5-minute SLI window).
fn server_with_recent_traffic(dir: &std::path::Path) -> Server {
    let server = Server::start(&dir.join("data"), "[store]\nfsync = \"always\"\n");
    let body = request_spans("prom", 50, now_ns() - 120_000_000_000).encode_to_vec();
    let (status, _, answer) =
        server.post_otlp("/v1/traces", "application/x-protobuf", &body, false);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    server
}

#[test]
fn promtool_accepts_our_metrics() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_recent_traffic(dir.path());
    let (status, text) = server.get("/metrics");
    assert_eq!(status, 200);
    assert!(
        text.contains("infersight_sli_latency_seconds{sli=\"ttft\",q=\"0.99\""),
        "{text}"
    );
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_real_prometheus_scrapes_our_slis() {
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_recent_traffic(dir.path());
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: infersight\n    static_configs:\n      - targets: ['{}']\n",
            server.api
        ),
    )
    .unwrap();
    let _prometheus = KillOnDrop(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting prometheus"),
    );
    let query = "infersight_sli_latency_seconds{sli=\"ttft\",q=\"0.99\",model=\"llama-3-8b\"}";
    let url = format!("http://127.0.0.1:{port}/api/v1/query");
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Ok(mut response) = agent().get(&url).query("query", query).call() {
            last = response.body_mut().read_to_string().unwrap_or_default();
            let answer: serde_json::Value =
                serde_json::from_str(&last).unwrap_or(serde_json::Value::Null);
            if let Some(sample) = answer["data"]["result"].get(0) {
                let value: f64 = sample["value"][1].as_str().unwrap().parse().unwrap();
                // every request has TTFT 500 ms
                assert!((value - 0.5).abs() < 0.005, "{answer}");
                assert_eq!(sample["metric"]["job"], "infersight");
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("prometheus never returned our SLI series; last answer: {last}");
}
