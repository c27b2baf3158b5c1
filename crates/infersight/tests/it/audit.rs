//! The access audit end to end: a query over HTTP (as the web UI sends it, behind a proxy that
//! names the user), a failing one, one by the CLI on the store and a report all land in
//! `<data>/audit/access.jsonl` with who, what they read and how it went, and never with the
//! SQL's literals or the peer's address.

use std::process::Command;

use prost::Message;

use crate::support::{self, Server, request_spans};

const TS: u64 = 1_764_400_000_000_000_000;
const SECRET_ENV: &str = "INFERSIGHT_TEST_AUDIT_SECRET";

fn audit_lines(data: &std::path::Path) -> (String, Vec<serde_json::Value>) {
    let text = std::fs::read_to_string(data.join("audit").join("access.jsonl"))
        .expect("the access audit exists");
    let lines = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    (text, lines)
}

fn strings(value: &serde_json::Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

/// POSTs `sql` to `/api/v1/query` as `user` (via `X-Forwarded-User`, which counts because the
/// test's configuration trusts 127.0.0.1 as a proxy); answers status and body.
fn query_as(server: &Server, user: &str, sql: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({ "sql": sql }).to_string();
    let mut response = support::agent()
        .post(&format!("http://{}/api/v1/query", server.api))
        .header("content-type", "application/json")
        .header("x-forwarded-user", user)
        .send(body.as_str())
        .expect("POST /api/v1/query");
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or_default())
}

#[test]
fn http_cli_and_report_accesses_are_audited_without_literals_or_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = format!(
        "[store]\nfsync = \"always\"\n[query]\nmax_rows = 5\n[stages.redact]\nsecret_env = \"{SECRET_ENV}\"\n\
         [auth]\ntrusted_proxies = [\"127.0.0.1/32\"]\n"
    );
    let server = Server::start_with(
        &data,
        &config,
        &[(SECRET_ENV, "audit-test-secret-0123456789abcdef")],
    );
    let proto = request_spans("aud", 3, TS).encode_to_vec();
    let (status, _, _) = server.post_otlp("/v1/traces", "application/x-protobuf", &proto, false);
    assert_eq!(status, 200);

    // a literal that must never reach the audit; `tenant` is read only by the filter
    let http_literal = "alice-literal-5c1e9b";
    let http_sql = format!(
        "SELECT model, json_get(attrs, 'k8s.pod.name') AS pod FROM requests \
         WHERE tenant IS DISTINCT FROM '{http_literal}' ORDER BY ts"
    );
    let (status, answer) = query_as(&server, "alice", &http_sql);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["row_count"], 3, "{answer}");
    // planned, then refused for its size (max_rows = 5): recorded as a failure
    let too_big = "SELECT s.request_id FROM requests s CROSS JOIN requests t";
    let (status, answer) = query_as(&server, "alice", too_big);
    assert_eq!(status, 400, "{answer}");
    // both lines written, none lost: counted on /metrics
    let (_, metrics) = server.get("/metrics");
    assert!(
        metrics.contains("infersight_audit_writes_total{outcome=\"ok\"} 2\n")
            && metrics.contains("infersight_audit_writes_total{outcome=\"failed\"} 0\n"),
        "{metrics}"
    );
    let stderr = server.stop();

    // the CLI on the store, as OS user `audit-bob`
    let cli_literal = "bob-literal-93d2aa";
    let cli_sql = format!("SELECT count(*) AS n FROM logs WHERE body LIKE '%{cli_literal}%'");
    let output = Command::new(support::bin())
        .args(["query", "--format", "json", "--data"])
        .arg(&data)
        .arg(&cli_sql)
        .env("USER", "audit-bob")
        .env_remove("INFERSIGHT_LOG")
        .output()
        .unwrap();
    support::ok(&output, "infersight query");
    // a report reads the store too: one line, whatever its outcome on three requests
    let report = Command::new(support::bin())
        .args(["report", "--format", "json", "--no-llm", "--data"])
        .arg(&data)
        .env("USER", "audit-bob")
        .env_remove("INFERSIGHT_LOG")
        .output()
        .unwrap();

    let (text, lines) = audit_lines(&data);
    for secret in [http_literal, cli_literal, "127.0.0.1", "CROSS JOIN"] {
        assert!(
            !text.contains(secret),
            "`{secret}` is in the audit:\n{text}"
        );
    }
    let http: Vec<_> = lines
        .iter()
        .filter(|l| l["surface"] == "api_query")
        .collect();
    assert_eq!(http.len(), 2, "{text}\nserver stderr:\n{stderr}");
    let first = http[0];
    assert_eq!(first["actor"], "alice");
    assert_eq!(strings(&first["tables"]), ["requests"]);
    assert_eq!(
        strings(&first["columns"]),
        [
            "requests.attrs",
            "requests.model",
            "requests.tenant",
            "requests.ts"
        ]
    );
    assert_eq!(
        strings(&first["personal_fields"]),
        ["requests.attrs", "requests.tenant"]
    );
    assert_eq!(
        (&first["rows"], &first["outcome"]),
        (&3.into(), &"ok".into())
    );
    assert_eq!(first["query_hash"].as_str().map(str::len), Some(64));
    assert!(first["ts"].as_str().unwrap().ends_with('Z'), "{first}");
    // the peer was seen and pseudonymized with the redact stage's keyed hash
    let client = first["client"].as_str().unwrap_or_default();
    assert!(
        client.starts_with("<IP:h:") && client.ends_with('>'),
        "client {client:?}"
    );
    assert_eq!(http[1]["outcome"], "bad_request");
    assert_eq!(http[1]["rows"], 0);
    assert_eq!(strings(&http[1]["columns"]), ["requests.request_id"]);
    assert_eq!(
        http[1]["client"], first["client"],
        "one peer, one pseudonym"
    );

    let cli: Vec<_> = lines
        .iter()
        .filter(|l| l["surface"] == "cli_query")
        .collect();
    assert_eq!(cli.len(), 1, "{text}");
    assert_eq!(cli[0]["actor"], "cli:audit-bob");
    assert_eq!(cli[0]["client"], serde_json::Value::Null);
    assert_eq!(strings(&cli[0]["tables"]), ["logs"]);
    assert_eq!(strings(&cli[0]["columns"]), ["logs.body"]);
    assert_eq!(strings(&cli[0]["personal_fields"]), ["logs.body"]);
    assert_eq!(
        (&cli[0]["rows"], &cli[0]["outcome"]),
        (&1.into(), &"ok".into())
    );
    assert_ne!(cli[0]["query_hash"], first["query_hash"]);

    let reports: Vec<_> = lines
        .iter()
        .filter(|l| l["surface"] == "cli_report")
        .collect();
    assert_eq!(
        reports.len(),
        1,
        "{text}\nreport stderr: {}",
        String::from_utf8_lossy(&report.stderr)
    );
    assert_eq!(reports[0]["actor"], "cli:audit-bob");
    assert!(
        reports[0]["what"]
            .as_str()
            .is_some_and(|w| w.starts_with("report")),
        "{}",
        reports[0]
    );
    assert!(strings(&reports[0]["tables"]).contains(&"requests"));
    assert_eq!(
        reports[0]["outcome"] == "ok",
        report.status.success(),
        "{}",
        reports[0]
    );

    // `infersight audit` reads the trail back, filtered
    let audit = |args: &[&str]| {
        let output = Command::new(support::bin())
            .arg("audit")
            .args(args)
            .arg("--data")
            .arg(&data)
            .env_remove("INFERSIGHT_LOG")
            .output()
            .unwrap();
        support::ok(&output, "infersight audit");
        String::from_utf8(output.stdout).unwrap()
    };
    let json = |args: &[&str]| -> serde_json::Value {
        let text = audit(&[args, &["--format", "json"]].concat());
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    let alice = json(&["--actor", "alice"]);
    assert_eq!(alice["matching"], 2, "{alice}");
    assert!(
        alice["accesses"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["actor"] == "alice")
    );
    let personal = json(&["--personal"]);
    let with_personal = lines
        .iter()
        .filter(|l| !l["personal_fields"].as_array().unwrap().is_empty())
        .count();
    assert_eq!(personal["matching"], with_personal, "{personal}");
    assert_eq!(json(&["--since", "2100-01-01T00:00:00Z"])["matching"], 0);
    assert_eq!(json(&["--since", "-1h"])["matching"], lines.len());
    assert_eq!(
        json(&["--limit", "1"])["accesses"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let table = audit(&[]);
    assert!(table.starts_with("ts"), "{table}");
    assert!(table.contains("cli:audit-bob"), "{table}");
}

/// `infersight rca`, `sli` and `dimensions` read the store too: one line each in the access
/// audit (`surface: cli`, the command in `what`, the OS user, the tables read, the outcome),
/// a failing one included.
#[test]
fn rca_sli_and_dimensions_commands_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, "[store]\nfsync = \"always\"\n");
    let proto = request_spans("cmd", 20, TS).encode_to_vec();
    let (status, _, _) = server.post_otlp("/v1/traces", "application/x-protobuf", &proto, false);
    assert_eq!(status, 200);
    server.stop();
    let run = |args: &[&str]| {
        Command::new(support::bin())
            .args(args)
            .arg("--data")
            .arg(&data)
            .env("USER", "audit-carol")
            .env_remove("INFERSIGHT_LOG")
            .output()
            .unwrap()
    };
    support::ok(
        &run(&["sli", "--sli", "ttft", "--since", "2025-11-01T00:00:00Z"]),
        "infersight sli",
    );
    support::ok(
        &run(&["dimensions", "--since", "2025-11-01T00:00:00Z"]),
        "infersight dimensions",
    );
    let rca = run(&["rca", "--format", "json"]);
    let failed = run(&[
        "sli",
        "--sli",
        "ttft",
        "--since",
        "2025-11-01T00:00:00Z",
        "--by",
        "no_such_column",
    ]);
    assert!(!failed.status.success());

    let (text, lines) = audit_lines(&data);
    let of = |what: &str| -> Vec<&serde_json::Value> {
        lines
            .iter()
            .filter(|l| l["surface"] == "cli" && l["what"] == what)
            .collect()
    };
    assert_eq!(of("sli").len(), 2, "{text}");
    assert_eq!(of("dimensions").len(), 1, "{text}");
    assert_eq!(of("rca").len(), 1, "{text}");
    for line in of("sli").iter().chain(&of("dimensions")).chain(&of("rca")) {
        assert_eq!(line["actor"], "cli:audit-carol", "{line}");
    }
    assert!(
        strings(&of("dimensions")[0]["tables"]).contains(&"requests"),
        "{text}"
    );
    assert_eq!(
        of("rca")[0]["outcome"] == "ok",
        rca.status.success(),
        "{text}"
    );
    let outcomes: Vec<&str> = of("sli")
        .iter()
        .map(|l| l["outcome"].as_str().unwrap_or_default())
        .collect();
    assert!(
        outcomes.contains(&"ok") && outcomes.iter().any(|o| *o != "ok"),
        "{outcomes:?}"
    );
}

/// Compaction and retention, by `store compact` here (the maintenance thread of `serve` calls
/// the same store methods), each write one `maintenance` line naming what went.
#[test]
fn deletions_by_the_store_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("config.toml");
    // simulated logs are from long ago: one hour of retention expires them all
    std::fs::write(
        &config,
        "[store]\nfsync = \"always\"\ncompaction_min_segments = 2\n[store.retention_by_table]\nlogs = \"1h\"\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(support::bin())
            .args(args)
            .arg("--data")
            .arg(&data)
            .arg("--config")
            .arg(&config)
            .env("USER", "audit-dave")
            .env_remove("INFERSIGHT_LOG")
            .output()
            .unwrap();
        support::ok(&out, &args.join(" "))
    };
    let sim = dir.path().join("sim");
    let simulated = support::run(&[
        "simulate",
        "--scenario",
        "healthy",
        "--duration",
        "2m",
        "--workers",
        "2",
        "--rate",
        "5",
        "--quiet",
        "--out",
        sim.to_str().unwrap(),
    ]);
    assert!(simulated.status.success());
    let traces = sim.join("traces.jsonl");
    let logs = sim.join("logs.jsonl");
    // twice the same files: two small segments per table and hour to merge
    for _ in 0..2 {
        run(&[
            "ingest",
            "--quiet",
            traces.to_str().unwrap(),
            logs.to_str().unwrap(),
        ]);
    }
    let report: serde_json::Value =
        serde_json::from_str(run(&["store", "compact"]).trim()).unwrap();
    assert!(
        report["compaction"]["segments_removed"].as_u64() >= Some(2),
        "{report}"
    );
    let expired_rows = report["retention"]["rows_removed"].as_u64().unwrap_or(0);
    assert!(expired_rows > 0, "{report}");

    let (text, lines) = audit_lines(&data);
    let of = |what: &str| -> Vec<&serde_json::Value> {
        lines
            .iter()
            .filter(|l| {
                l["surface"] == "maintenance"
                    && l["what"].as_str().is_some_and(|w| w.starts_with(what))
            })
            .collect()
    };
    let compaction = of("compaction:");
    assert_eq!(compaction.len(), 1, "{text}");
    assert!(
        strings(&compaction[0]["tables"]).contains(&"requests"),
        "{text}"
    );
    assert_eq!(compaction[0]["actor"], "cli:audit-dave", "{text}");
    let retention = of("retention:");
    assert_eq!(retention.len(), 1, "{text}");
    assert_eq!(strings(&retention[0]["tables"]), ["logs"], "{text}");
    assert_eq!(retention[0]["rows"], expired_rows, "{text}");
}
