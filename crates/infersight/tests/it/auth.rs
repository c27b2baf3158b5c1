//! Authentication end to end: `infersight tokens create|list|revoke` write the tokens file,
//! `serve` with `[auth] tokens_file` refuses the API and both OTLP receivers without a token
//! (401), with a token whose role does not allow it (403), serves each role what it may, picks
//! up a revocation without a restart, survives SIGHUP, and records callers by token name in the
//! access audit; without authentication `serve` refuses to listen beyond loopback.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;

use crate::support::{self, Server, request_spans};

const TS: u64 = 1_764_400_000_000_000_000;

fn tokens(config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(support::bin())
        .arg("tokens")
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove("INFERSIGHT_LOG")
        .output()
        .expect("infersight tokens")
}

fn create(config: &Path, name: &str, role: &str) -> String {
    let output = tokens(
        config,
        &["create", "--name", name, "--role", role, "--expires", "30d"],
    );
    support::ok(&output, "infersight tokens create");
    let token = String::from_utf8(output.stdout).unwrap().trim().to_string();
    assert!(token.starts_with("ist_") && token.len() == 68, "{token}");
    token
}

/// A request to the server with an optional bearer token: status and body.
fn call(url: &str, token: Option<&str>, content_type: &str, body: Option<&[u8]>) -> (u16, String) {
    let agent = support::agent();
    let mut response = match body {
        Some(body) => {
            let mut request = agent.post(url).header("content-type", content_type);
            if let Some(token) = token {
                request = request.header("authorization", format!("Bearer {token}"));
            }
            request.send(body)
        }
        None => {
            let mut request = agent.get(url);
            if let Some(token) = token {
                request = request.header("authorization", format!("Bearer {token}"));
            }
            request.call()
        }
    }
    .expect("request");
    let status = response.status().as_u16();
    (
        status,
        response.body_mut().read_to_string().unwrap_or_default(),
    )
}

fn grpc_export(server: &Server, token: Option<&str>) -> Result<(), tonic::Status> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc))
            .await
            .expect("grpc connect");
        let mut request = tonic::Request::new(request_spans("grpc", 2, TS));
        if let Some(token) = token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        client.export(request).await.map(drop)
    })
}

#[test]
fn tokens_roles_and_revocation_on_a_server_with_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tokens_file = dir.path().join("secrets").join("tokens.json");
    let config_text = format!(
        "[store]\ndata_dir = \"{}\"\nfsync = \"always\"\n[auth]\ntokens_file = \"{}\"\n",
        data.display(),
        tokens_file.display()
    );
    let config = data.with_extension("toml");
    std::fs::write(&config, &config_text).unwrap();
    // before the store exists no audit can hold the change, and the command says so
    let output = tokens(&config, &["create", "--name", "early", "--role", "viewer"]);
    let said = support::ok(&output, "infersight tokens create");
    assert!(!said.is_empty());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("in no access audit"),
        "{output:?}"
    );
    support::ok(
        &tokens(&config, &["revoke", "early"]),
        "infersight tokens revoke",
    );
    let exporter = create(&config, "exporters", "ingest");
    let reader = create(&config, "reader", "analyst");
    let listed = tokens(&config, &["list", "--format", "json"]);
    support::ok(&listed, "infersight tokens list");
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(!listed.contains(&exporter) && !listed.contains(&reader) && !listed.contains("sha256"));
    let list: serde_json::Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(list["tokens"][0]["name"], "exporters", "{listed}");
    assert_eq!(list["tokens"][1]["role"], "analyst", "{listed}");
    assert_eq!(list["tokens"][1]["state"], "active", "{listed}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&tokens_file)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let server = Server::start(&data, &config_text);
    let otlp = format!("http://{}/v1/traces", server.http);
    let proto = request_spans("auth", 3, TS).encode_to_vec();
    let pb = "application/x-protobuf";
    assert_eq!(call(&otlp, None, pb, Some(&proto)).0, 401);
    assert_eq!(
        call(&otlp, Some(&reader), pb, Some(&proto)).0,
        403,
        "an analyst does not ingest"
    );
    let (status, body) = call(&otlp, Some("ist_0000"), "application/json", Some(b"{}"));
    assert_eq!(status, 401);
    assert!(
        body.contains("\"code\":16") && body.contains("unknown or revoked"),
        "{body}"
    );
    assert_eq!(call(&otlp, Some(&exporter), pb, Some(&proto)).0, 200);
    let status = grpc_export(&server, None).expect_err("no token");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    let status = grpc_export(&server, Some(&reader)).expect_err("an analyst does not ingest");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    grpc_export(&server, Some(&exporter)).expect("the exporters' token ingests over gRPC");

    let query = format!("http://{}/api/v1/query", server.api);
    let sql = br#"{"sql": "SELECT count(*) AS n FROM requests"}"#;
    let json = "application/json";
    let (status, body) = call(&query, None, json, Some(sql));
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("\"unauthenticated\""), "{body}");
    let (status, body) = call(&query, Some(&exporter), json, Some(sql));
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("\"forbidden\"") && body.contains("analyst"),
        "{body}"
    );
    let (status, body) = call(&query, Some(&reader), json, Some(sql));
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(support::rows(&answer)[0][0].1, 5, "{body}");
    assert_eq!(
        call(&format!("http://{}/healthz", server.api), None, json, None).0,
        200
    );
    // `infersight query --server` sends $INFERSIGHT_TOKEN
    let remote = Command::new(support::bin())
        .args(["query", "--format", "json", "--server"])
        .arg(format!("http://{}", server.api))
        .arg("SELECT count(*) AS n FROM spans")
        .env("INFERSIGHT_TOKEN", &reader)
        .output()
        .unwrap();
    support::ok(&remote, "infersight query --server");

    // SIGHUP re-reads the tokens file and does not stop the server
    let _ = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(call(&query, Some(&reader), json, Some(sql)).0, 200);
    // revoked: refused without a restart
    support::ok(
        &tokens(&config, &["revoke", "reader"]),
        "infersight tokens revoke",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = call(&query, Some(&reader), json, Some(sql));
        if status == 401 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still answered after revocation: {status} {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let stderr = server.stop();

    let audit = std::fs::read_to_string(data.join("audit").join("access.jsonl")).unwrap();
    let by_reader = audit
        .lines()
        .filter(|l| l.contains("\"actor\":\"reader\"") && l.contains("\"surface\":\"api_query\""))
        .count();
    assert!(by_reader >= 3, "{audit}\n{stderr}");
    assert!(
        audit.contains("\"actor\":\"exporters\"") && audit.contains("\"outcome\":\"forbidden\""),
        "{audit}"
    );
    for secret in [&exporter, &reader] {
        assert!(!audit.contains(secret.as_str()) && !stderr.contains(secret.as_str()));
    }
    // token changes and the server's reloads of the tokens file are audited as config changes
    let mut changes: Vec<String> = audit
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|line| line["surface"] == "config")
        .map(|line| format!("{} {}", line["what"].as_str().unwrap(), line["outcome"]))
        .collect();
    let revoked = format!("token `reader` revoked in {} \"ok\"", tokens_file.display());
    // the server may see the new file before the command has written its line
    let mut expected = [
        "the tokens file reloaded (2 tokens) \"ok\"",
        revoked.as_str(),
        "the tokens file reloaded (1 tokens) \"ok\"",
    ];
    changes.sort();
    expected.sort();
    assert_eq!(changes, expected, "{audit}");
    // a refused change is audited too, with the reason
    support::ok(
        &tokens(&config, &["create", "--name", "second", "--role", "viewer"]),
        "infersight tokens create",
    );
    let refused = tokens(&config, &["create", "--name", "second", "--role", "viewer"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let audit = std::fs::read_to_string(data.join("audit").join("access.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(last["surface"], "config", "{last}");
    assert_eq!(last["outcome"], "bad_request", "{last}");
    assert!(
        last["what"]
            .as_str()
            .unwrap()
            .starts_with("token `second` not created: a token named `second` exists"),
        "{last}"
    );
    assert!(
        last["actor"].as_str().unwrap().starts_with("cli:"),
        "{last}"
    );
}

#[test]
fn serve_refuses_an_address_beyond_loopback_without_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(support::bin())
        .args([
            "serve",
            "--listen",
            "0.0.0.0",
            "--otlp-grpc-port",
            "0",
            "--otlp-http-port",
            "0",
        ])
        .args(["--api-port", "0", "--data"])
        .arg(dir.path().join("data"))
        .env_remove("INFERSIGHT_LOG")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve listened on 0.0.0.0 without authentication");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("tokens_file") && stderr.contains("allow_unauthenticated"),
        "{stderr}"
    );
}

/// `serve` with `[auth.oidc]` (a key set in a file, a provider made in the test): an analyst's
/// JWT runs SQL, a viewer's is refused it (403), an ingest JWT pushes OTLP over HTTP and gRPC,
/// an expired or foreign JWT gets 401 with the reason; after the provider rotates its key (the
/// file replaced, SIGHUP) the new key's tokens are accepted and the old key's are not.
#[test]
fn jwts_of_an_identity_provider_authenticate_on_every_surface() {
    use infersight_testkit::jwt::TestIssuer;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let jwks = dir.path().join("jwks.json");
    let (old, new) = (TestIssuer::new("2026-11"), TestIssuer::new("2026-12"));
    std::fs::write(&jwks, TestIssuer::jwks(&[&old])).unwrap();
    let config = format!(
        "[store]\nfsync = \"always\"\n[auth]\ntokens_file = \"{}\"\n[auth.oidc]\nissuer = \"https://idp.test\"\naudience = \"infersight\"\njwks_file = \"{}\"\n",
        dir.path().join("tokens.json").display(),
        jwks.display()
    );
    let server = Server::start(&data, &config);
    let now_s = (infersight_model::time::now_ns() / 1_000_000_000) as u64;
    let claims = |sub: &str, role: &str, exp: u64| {
        serde_json::json!({"iss": "https://idp.test", "aud": "infersight", "sub": sub,
                           "exp": exp, "infersight_role": role})
    };
    let jwt = |issuer: &TestIssuer, sub: &str, role: &str| {
        issuer.sign(serde_json::json!({}), &claims(sub, role, now_s + 600))
    };
    let exporter = jwt(&old, "collector", "ingest");
    let otlp = format!("http://{}/v1/traces", server.http);
    let proto = request_spans("oidc", 3, TS).encode_to_vec();
    let pb = "application/x-protobuf";
    assert_eq!(call(&otlp, Some(&exporter), pb, Some(&proto)).0, 200);
    grpc_export(&server, Some(&exporter)).expect("an ingest JWT exports over gRPC");

    let query = format!("http://{}/api/v1/query", server.api);
    let sql = br#"{"sql": "SELECT count(*) AS n FROM spans"}"#;
    let json = "application/json";
    let (status, body) = call(&query, Some(&jwt(&old, "ana", "analyst")), json, Some(sql));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"n\":5"), "{body}");
    let (status, body) = call(&query, Some(&jwt(&old, "vic", "viewer")), json, Some(sql));
    assert_eq!(status, 403, "{body}");
    let expired = old.sign(
        serde_json::json!({}),
        &claims("ana", "analyst", now_s - 3600),
    );
    let (status, body) = call(&query, Some(&expired), json, Some(sql));
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("expired"), "{body}");
    let rotated = jwt(&new, "ana", "analyst");
    assert_eq!(call(&query, Some(&rotated), json, Some(sql)).0, 401);

    // the provider rotates: the new key set, then SIGHUP
    std::fs::write(&jwks, TestIssuer::jwks(&[&new])).unwrap();
    let hup = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while call(&query, Some(&rotated), json, Some(sql)).0 != 200 {
        assert!(
            Instant::now() < deadline,
            "the rotated key was not picked up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        call(&query, Some(&jwt(&old, "ana", "analyst")), json, Some(sql)).0,
        401
    );
}
