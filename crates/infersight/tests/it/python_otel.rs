//! A real OpenTelemetry client: the Python SDK with its OTLP gRPC and HTTP/protobuf exporters
//! sends GenAI/vLLM spans and log records to `infersight serve`; SQL reads them back normalized.
//! `.ci/run` installs the SDK and sets INFERSIGHT_TEST_PYTHON, which makes this test mandatory.

use std::process::Command;

use crate::support::{Server, rows};

fn python() -> Option<String> {
    if let Ok(p) = std::env::var("INFERSIGHT_TEST_PYTHON") {
        return Some(p);
    }
    let probe = Command::new("python3")
        .args(["-c", "import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.grpc, opentelemetry.exporter.otlp.proto.http"])
        .output()
        .ok()?;
    probe.status.success().then(|| "python3".to_string())
}

/// [`python`], or a line saying the test is skipped.
fn python_or_skip() -> Option<String> {
    let found = python();
    if found.is_none() {
        eprintln!(
            "skipped: the Python OpenTelemetry SDK is not installed (.ci/run installs it and sets INFERSIGHT_TEST_PYTHON)"
        );
    }
    found
}

#[test]
fn python_sdk_over_grpc_and_http_is_normalized() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), "[store]\nfsync = \"always\"\n");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/otel_send.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(format!("http://{}", server.grpc))
        .arg(format!("http://{}", server.http))
        .output()
        .expect("running python");
    assert!(
        out.status.success(),
        "python client failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let answer = server.sql(
        "SELECT request_id, model, runtime, input_tokens, output_tokens, cached_tokens, queue_ms, ttft_ms, e2e_ms, \
         finish_reason, service FROM requests ORDER BY request_id",
    );
    let rows = rows(&answer);
    assert_eq!(rows.len(), 4, "{answer}");
    for row in &rows {
        let r: std::collections::HashMap<_, _> = row.iter().cloned().collect();
        let id = r["request_id"].as_str().unwrap().to_string();
        assert_eq!(r["model"], "llama-3-8b", "{id}");
        assert_eq!(r["input_tokens"], 512, "{id}");
        assert_eq!(r["output_tokens"], 128, "{id}");
        assert!(
            (r["queue_ms"].as_f64().unwrap() - 250.0).abs() < 1e-6,
            "{id}"
        );
        assert!(
            (r["ttft_ms"].as_f64().unwrap() - 400.0).abs() < 1e-6,
            "{id}"
        );
        assert!(
            (r["e2e_ms"].as_f64().unwrap() - 3_000.0).abs() < 1e-6,
            "{id}"
        );
        assert_eq!(r["finish_reason"], "stop", "{id}");
        assert_eq!(r["service"], "vllm-python", "{id}");
        if id.contains("deprecated") {
            assert_eq!(r["runtime"], "vllm", "{id}");
        } else {
            assert_eq!(r["cached_tokens"], 64, "{id}");
        }
    }
    let ids: Vec<String> = rows
        .iter()
        .map(|r| r[0].1.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        ids,
        [
            "grpc-current",
            "grpc-deprecated",
            "http-current",
            "http-deprecated"
        ]
    );

    let logs =
        crate::support::rows(&server.sql("SELECT body, severity, service FROM logs ORDER BY body"));
    let bodies: Vec<&str> = logs.iter().map(|r| r[0].1.as_str().unwrap_or("")).collect();
    assert!(
        bodies.iter().any(|b| b.contains("grpc log record")),
        "{bodies:?}"
    );
    assert!(
        bodies.iter().any(|b| b.contains("http log record")),
        "{bodies:?}"
    );
    assert!(
        logs.iter().all(|r| r[1].1 == "WARN" || r[1].1 == "WARNING"),
        "{logs:?}"
    );
}

/// The Python SDK against a server with authentication and TLS on: refused (gRPC
/// UNAUTHENTICATED, HTTP 401) without a token, accepted with an ingest token given the SDK's own
/// way (`OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20…`, as HTTP header and gRPC metadata),
/// over gRPC with TLS and over https, trusting the server's CA through
/// `OTEL_EXPORTER_OTLP_CERTIFICATE`.
#[test]
fn python_sdk_authenticates_with_a_bearer_token_over_tls_and_is_refused_without() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let pki = infersight_testkit::https::TestPki::new("bearer");
    let files = pki.write(dir.path());
    let config = format!(
        "[store]\nfsync = \"always\"\n[auth]\ntokens_file = \"{}\"\n[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        dir.path().join("tokens.json").display(),
        files.server_cert.display(),
        files.server_key.display(),
    );
    std::fs::write(data.with_extension("toml"), &config).unwrap();
    let token = |name: &str, role: &str| {
        crate::support::create_token(&data.with_extension("toml"), name, role)
    };
    let (exporter, admin) = (token("sdk", "ingest"), token("admin", "admin"));
    let server = Server::start(&data, &config);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/otel_send.py");
    let send = |headers: Option<String>, extra: &[&str]| {
        let mut command = Command::new(&python);
        command
            .arg(script)
            .arg(format!("https://{}", server.grpc))
            .arg(format!("https://{}", server.http))
            .args(extra)
            .env("OTEL_EXPORTER_OTLP_CERTIFICATE", &files.ca)
            // refused exports are retried until this many seconds have passed
            .env("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
            // requests lets these override the session's CA (the exporter's certificate file)
            .env_remove("REQUESTS_CA_BUNDLE")
            .env_remove("CURL_CA_BUNDLE")
            .env_remove("OTEL_EXPORTER_OTLP_HEADERS");
        if let Some(headers) = headers {
            command.env("OTEL_EXPORTER_OTLP_HEADERS", headers);
        }
        let out = command.output().expect("running python");
        assert!(
            out.status.success(),
            "python client:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    send(None, &["--expect-refused"]);
    send(
        Some("Authorization=Bearer%20ist_0000".into()),
        &["--expect-refused"],
    );
    send(Some(format!("Authorization=Bearer%20{exporter}")), &[]);

    let body = serde_json::json!({ "sql": "SELECT count(*) AS n FROM requests" }).to_string();
    let mut response = crate::support::https_agent(&pki.ca_pem)
        .post(&format!("https://{}/api/v1/query", server.api))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {admin}"))
        .send(body.as_str())
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let answer: serde_json::Value =
        serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(rows(&answer)[0][0].1, 4, "{answer}");
}

/// `SELECT count(*) FROM requests` over https, trusting only `ca_pem`.
fn count_over_https(ca_pem: &str, api: std::net::SocketAddr) -> Result<i64, String> {
    let body = serde_json::json!({ "sql": "SELECT count(*) AS n FROM requests" }).to_string();
    let mut response = crate::support::https_agent(ca_pem)
        .post(&format!("https://{api}/api/v1/query"))
        .header("content-type", "application/json")
        .send(body.as_str())
        .map_err(|e| e.to_string())?;
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|e| e.to_string())?;
    let answer: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    Ok(rows(&answer)[0][0].1.as_i64().unwrap_or(-1))
}

/// The Python SDK against a server with `[server.tls]` and a client CA: over gRPC (TLS, ALPN
/// h2) and HTTP (https) with the SDK's own certificate settings (`OTEL_EXPORTER_OTLP_CERTIFICATE`,
/// `…_CLIENT_CERTIFICATE`, `…_CLIENT_KEY`) every export is stored; without a client
/// certificate every one is refused. The API answers over https only, and after the
/// certificate files are replaced and SIGHUP is sent, new connections get the new certificate.
#[test]
fn python_sdk_exports_over_tls_with_a_client_certificate() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pki = infersight_testkit::https::TestPki::new("sdk");
    let files = pki.write(dir.path());
    let config = format!(
        "[store]\nfsync = \"always\"\n[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nclient_ca_file = \"{}\"\n",
        files.server_cert.display(),
        files.server_key.display(),
        files.ca.display()
    );
    let server = Server::start(&dir.path().join("data"), &config);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/otel_send.py");
    let send = |client_certificate: bool, extra: &[&str]| {
        let mut command = Command::new(&python);
        command
            .arg(script)
            .arg(format!("https://{}", server.grpc))
            .arg(format!("https://{}", server.http))
            .args(extra)
            .env("OTEL_EXPORTER_OTLP_CERTIFICATE", &files.ca)
            // refused exports are retried until this many seconds have passed
            .env("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
            // requests lets these override the session's CA (the exporter's certificate file)
            .env_remove("REQUESTS_CA_BUNDLE")
            .env_remove("CURL_CA_BUNDLE")
            .env_remove("OTEL_EXPORTER_OTLP_HEADERS");
        if client_certificate {
            command
                .env("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &files.client_cert)
                .env("OTEL_EXPORTER_OTLP_CLIENT_KEY", &files.client_key);
        }
        let out = command.output().expect("running python");
        assert!(
            out.status.success(),
            "python client:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    send(false, &["--expect-refused"]);
    send(true, &[]);
    assert_eq!(count_over_https(&pki.ca_pem, server.api), Ok(4));
    let plain = crate::support::agent()
        .get(&format!("http://{}/healthz", server.api))
        .call()
        .map(|r| r.status().as_u16());
    assert!(plain.is_err(), "plain http answered: {plain:?}");

    // new certificate files, then SIGHUP: new connections are served with them
    let renewed = infersight_testkit::https::TestPki::new("renewed");
    renewed.write(dir.path());
    let hup = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while count_over_https(&renewed.ca_pem, server.api).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the renewed certificate is not served: {:?}",
            count_over_https(&renewed.ca_pem, server.api)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(count_over_https(&pki.ca_pem, server.api).is_err());
    let audit = std::fs::read_to_string(dir.path().join("data/audit/access.jsonl")).unwrap();
    assert!(
        audit
            .lines()
            .any(|line| line.contains("\"surface\":\"config\"")
                && line.contains("the TLS certificate reloaded")),
        "the reload is not audited:\n{audit}"
    );
}
