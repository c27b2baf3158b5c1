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

/// Starts Prometheus with `scrape_config` (YAML lines of one job, indented under
/// `scrape_configs:`) on a free port; its query URL.
fn start_prometheus(
    prometheus: &std::path::Path,
    dir: &std::path::Path,
    scrape_config: &str,
) -> (KillOnDrop, String) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{scrape_config}"
        ),
    )
    .unwrap();
    let child = KillOnDrop(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting prometheus"),
    );
    (child, format!("http://127.0.0.1:{port}/api/v1/query"))
}

/// Polls Prometheus at `url` for the p99 TTFT series of llama-3-8b (every request's TTFT is
/// 500 ms) scraped by job `infersight`, for up to 90 s.
fn wait_for_ttft_series(url: &str) {
    let query = "infersight_sli_latency_seconds{sli=\"ttft\",q=\"0.99\",model=\"llama-3-8b\"}";
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Ok(mut response) = agent().get(url).query("query", query).call() {
            last = response.body_mut().read_to_string().unwrap_or_default();
            let answer: serde_json::Value =
                serde_json::from_str(&last).unwrap_or(serde_json::Value::Null);
            if let Some(sample) = answer["data"]["result"].get(0) {
                let value: f64 = sample["value"][1].as_str().unwrap().parse().unwrap();
                assert!((value - 0.5).abs() < 0.005, "{answer}");
                assert_eq!(sample["metric"]["job"], "infersight");
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("prometheus never returned our SLI series; last answer: {last}");
}

/// The same over TLS with authentication on: Prometheus scrapes `https://` with its own
/// `tls_config.ca_file` and `authorization.credentials` (an admin token), as the README says.
#[test]
fn a_real_prometheus_scrapes_over_https_with_a_bearer_token() {
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pki = infersight_testkit::https::TestPki::new("prometheus");
    let files = pki.write(dir.path());
    let data = dir.path().join("data");
    let config = format!(
        "[store]\nfsync = \"always\"\n[auth]\ntokens_file = \"{}\"\n[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        dir.path().join("tokens.json").display(),
        files.server_cert.display(),
        files.server_key.display()
    );
    std::fs::write(data.with_extension("toml"), &config).unwrap();
    let token = crate::support::create_token(&data.with_extension("toml"), "prom", "admin");
    let server = Server::start(&data, &config);
    let body = request_spans("prom", 50, now_ns() - 120_000_000_000).encode_to_vec();
    let status = crate::support::https_agent(&pki.ca_pem)
        .post(&format!("https://{}/v1/traces", server.http))
        .header("content-type", "application/x-protobuf")
        .header("authorization", format!("Bearer {token}"))
        .send(&body[..])
        .map(|r| r.status().as_u16());
    assert_eq!(status.as_ref().ok(), Some(&200), "{status:?}");
    let (_prometheus, url) = start_prometheus(
        &prometheus,
        dir.path(),
        &format!(
            "  - job_name: infersight\n    scheme: https\n    tls_config:\n      ca_file: {}\n    authorization:\n      credentials: {token}\n    static_configs:\n      - targets: ['{}']\n",
            files.ca.display(),
            server.api
        ),
    );
    wait_for_ttft_series(&url);
}

#[test]
fn a_real_prometheus_scrapes_our_slis() {
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_recent_traffic(dir.path());
    let (_prometheus, url) = start_prometheus(
        &prometheus,
        dir.path(),
        &format!(
            "  - job_name: infersight\n    static_configs:\n      - targets: ['{}']\n",
            server.api
        ),
    );
    wait_for_ttft_series(&url);
}
