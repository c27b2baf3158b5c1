//! End-to-end tests of automatic actions: `infersight serve` with a policy, OTLP requests that
//! breach it, a real webhook receiver, `GET /api/v1/actions` and `infersight actions`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;

use infersight_testkit::webhook::webhook_receiver;

use crate::support::{Server, request_spans, run};

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn policy_config(hook: std::net::SocketAddr, dry_run: bool) -> String {
    format!(
        r#"[actions]
dry_run = {dry_run}
eval_interval = "200ms"
webhook_url = "http://{hook}/hook"

[[actions.policies]]
name = "ttft-guard"
sli = "ttft"
q = 0.95
filters = ["model=llama-3-8b"]
threshold = 200
window = "2m"
consecutive = 3
action = "downgrade_model"
fallback_version = "llama-3-8b-v1"
cooldown = "10m"
"#
    )
}

fn actions_json(data: &std::path::Path) -> serde_json::Value {
    let out = run(&[
        "actions",
        "--data",
        data.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("actions --format json prints JSON")
}

#[test]
fn a_sustained_breach_fires_one_action_to_the_webhook_and_is_audited() {
    let (hook, payloads) = webhook_receiver(200);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &policy_config(hook, false));
    // every request's TTFT is 500 ms, above the 200 ms threshold
    let body = request_spans("act", 40, now_ns() - 20_000_000_000).encode_to_vec();
    let (status, _, _) = server.post_otlp("/v1/traces", "application/x-protobuf", &body, false);
    assert_eq!(status, 200);

    let fire = payloads
        .recv_timeout(Duration::from_secs(20))
        .expect("no action webhook call");
    assert_eq!(fire["kind"], "fire", "{fire}");
    assert_eq!(fire["policy"], "ttft-guard");
    assert_eq!(fire["action"], "downgrade_model");
    assert_eq!(fire["params"]["fallback_version"], "llama-3-8b-v1");
    assert_eq!(fire["sli"], "ttft");
    assert_eq!(fire["threshold"], 200.0);
    assert_eq!(fire["consecutive_windows"], 3);
    let value = fire["value"].as_f64().unwrap();
    assert!((value - 500.0).abs() < 10.0, "{fire}");
    // the breach goes on (several more windows): within the cooldown nothing more is sent
    let more: Vec<serde_json::Value> = payloads
        .recv_timeout(Duration::from_millis(1500))
        .into_iter()
        .collect();
    assert!(more.is_empty(), "a second webhook call: {more:?}");

    let (status, state) = server.get("/api/v1/actions");
    assert_eq!(status, 200);
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["dry_run"], false);
    assert_eq!(state["policies"][0]["name"], "ttft-guard");
    assert_eq!(state["policies"][0]["active"], true, "{state}");
    let (_, metrics) = server.get("/metrics");
    assert!(
        metrics.contains(
            "infersight_action_decisions_total{policy=\"ttft-guard\",decision=\"fire\"} 1"
        ),
        "{metrics}"
    );

    // the audit trail, read while serve runs: one fire (delivered), then suppressions
    let audit = actions_json(&data);
    let entries = audit["entries"].as_array().unwrap();
    let fires: Vec<&serde_json::Value> =
        entries.iter().filter(|e| e["decision"] == "fire").collect();
    assert_eq!(fires.len(), 1, "{audit}");
    assert_eq!(fires[0]["webhook"]["outcome"], "delivered");
    assert_eq!(fires[0]["dry_run"], false);
    assert!(
        entries
            .iter()
            .filter(|e| e["decision"] != "fire")
            .all(|e| e["decision"] == "suppressed" && e["reason"] == "already_active"),
        "{audit}"
    );
    assert!(server.terminate().success());

    let out = run(&["actions", "--data", data.to_str().unwrap()]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(table.starts_with("ts"), "{table}");
    assert!(
        table.contains("ttft-guard") && table.contains("fire"),
        "{table}"
    );
}

#[test]
fn dry_run_sends_nothing_and_actions_lists_what_it_would_do() {
    let (hook, payloads) = webhook_receiver(200);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, &policy_config(hook, true));
    let body = request_spans("dry", 40, now_ns() - 20_000_000_000).encode_to_vec();
    let (status, _, _) = server.post_otlp("/v1/traces", "application/x-protobuf", &body, false);
    assert_eq!(status, 200);
    // wait for the would-fire decision to be audited
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let would_fire = loop {
        let audit = actions_json(&data);
        if let Some(entry) = audit["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["decision"] == "dry_run")
        {
            break entry.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no dry-run decision: {audit}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(would_fire["reason"], "would_fire");
    assert_eq!(would_fire["dry_run"], true);
    assert!(would_fire["webhook"].is_null());
    assert!(
        payloads.recv_timeout(Duration::from_millis(800)).is_err(),
        "dry-run called the webhook"
    );
    drop(server);
}

#[test]
fn no_trail_and_corrupt_lines_are_not_errors() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = run(&["actions", "--data", data.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no actions recorded"));

    std::fs::create_dir_all(data.join("actions")).unwrap();
    let good = serde_json::json!({
        "ts": "2025-11-29T00:00:00.000Z", "ts_ns": 1_764_374_400_000_000_000_i64,
        "policy": "p", "decision": "suppressed", "action": "shrink_batch",
        "params": {"max_batch": 8}, "sli": "e2e", "q": 0.99, "filters": {}, "value": 3000.0,
        "threshold": 2000.0, "windows": 4, "dry_run": false, "reason": "cooldown",
        "detail": "last fired 2m ago; cooldown 10m", "webhook": null,
    });
    std::fs::write(
        data.join("actions/audit.jsonl"),
        format!("{good}\n{{not json\n{good}\n"),
    )
    .unwrap();
    let audit = actions_json(&data);
    assert_eq!(audit["entries"].as_array().unwrap().len(), 2, "{audit}");
    assert_eq!(audit["corrupt_lines"], 1);
    let out = run(&["actions", "--data", data.to_str().unwrap(), "--limit", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("corrupt line 2"), "{stderr}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(table.lines().count(), 2, "header and one entry: {table}");
    assert!(
        table.contains("cooldown") && table.contains("max_batch=8"),
        "{table}"
    );
}
