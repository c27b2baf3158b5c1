//! `infersight watch`: the watcher of `serve` replayed over one simulated hour of the headline
//! scenario (`lora_kv_regression`, seed 1, 8 workers, 10 req/s) in a debug build. Checked: one
//! incident opens, within two simulated minutes of the fault's onset and not before it; its
//! verdict's top cause is the ground truth's; with `--record` it is stored with its state,
//! detection time and timeline, `infersight incidents show` reads it back, and both
//! `infersight incidents list` and `GET /api/v1/incidents` of `serve` list it with its state,
//! severity, detection time and top cause. Bad arguments
//! are usage errors (exit 2) with a clear message.

use serde_json::Value;

use crate::support::{ok, run};

fn seconds(text: &Value) -> f64 {
    let text = text.as_str().expect("a timestamp");
    infersight_model::time::parse_time(text, 0).unwrap_or_else(|e| panic!("{text}: {e}")) as f64
        / 1e9
}

#[test]
fn a_replayed_hour_opens_one_incident_within_two_minutes_with_the_right_cause() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let truth = crate::support::simulate_and_ingest(
        dir.path(),
        &data,
        ("lora_kv_regression", 1, "1h"),
        &[],
        &["traces.jsonl", "metrics.jsonl"],
    );
    let data_s = data.to_str().unwrap();
    let (since, until) = (
        truth["start"].as_str().unwrap(),
        truth["end"].as_str().unwrap(),
    );
    let started = std::time::Instant::now();
    let out = run(&[
        "watch", "--data", data_s, "--since", since, "--until", until, "--format", "json",
        "--record",
    ]);
    ok(&out, "watch");
    let elapsed = started.elapsed();
    let incidents: Value = serde_json::from_slice(&out.stdout).expect("watch prints JSON");
    let incidents = incidents.as_array().expect("a list of incidents");
    assert_eq!(
        incidents.len(),
        1,
        "one episode, one incident: {incidents:#?}"
    );
    let incident = &incidents[0];
    let onset = seconds(&truth["incident_window"]["start"]);
    let delay = seconds(&incident["detected_at"]) - onset;
    assert!(
        (0.0..=120.0).contains(&delay),
        "detected {delay} s after the onset (replay took {elapsed:?})"
    );
    let top = &incident["rca"]["root_causes"][0]["dimensions"];
    assert_eq!(
        top, &truth["root_causes"][0]["dimensions"],
        "{}",
        incident["rca"]["verdict"]
    );
    assert!(
        incident["detections"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["key"] == "sli/ttft/fleet"),
        "the fleet's TTFT fired: {:#?}",
        incident["detections"]
    );

    // --record stored it, with the watcher's record
    let id = incident["incident_id"]
        .as_str()
        .expect("a recorded incident has an id");
    let out = run(&[
        "incidents",
        "show",
        id,
        "--data",
        data_s,
        "--format",
        "json",
    ]);
    ok(&out, "incidents show");
    let stored: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stored["watch"]["state"], "open", "{stored:#}");
    assert_eq!(stored["watch"]["detected_at"], incident["detected_at"]);
    let events: Vec<&str> = stored["watch"]["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert_eq!(events[..2], ["onset", "detected"], "{events:?}");
    assert!(events.contains(&"verdict"), "{events:?}");
    assert_eq!(
        stored["watch"]["notice"]["severity"], "critical",
        "an SLI moved: it pages"
    );

    // the surfaces list it as the watcher opened it: the CLI's table and the API's list
    let out = run(&["incidents", "list", "--data", data_s]);
    ok(&out, "incidents list");
    let table = String::from_utf8_lossy(&out.stdout);
    let header = table.lines().next().unwrap_or_default();
    for column in ["STATE", "SEVERITY", "DETECTED", "ROOT CAUSE"] {
        assert!(header.contains(column), "{table}");
    }
    let row = table.lines().find(|l| l.contains(id)).unwrap_or_default();
    assert!(row.contains("open") && row.contains("critical"), "{table}");
    let server = crate::support::Server::start(&data, "[store]\nfsync = \"never\"\n");
    let (status, body) = server.get("/api/v1/incidents");
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    let row = listed["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not listed: {listed:#}"));
    assert_eq!(row["origin"], "watch", "{row:#}");
    assert_eq!(row["state"], "open", "{row:#}");
    assert_eq!(row["severity"], "critical", "{row:#}");
    assert_eq!(row["detected_at"], incident["detected_at"], "{row:#}");
    let top_cause = row["top_cause"].as_str().unwrap_or_default();
    for (key, value) in truth["root_causes"][0]["dimensions"].as_object().unwrap() {
        let pair = format!("{key}={}", value.as_str().unwrap());
        assert!(top_cause.contains(&pair), "{top_cause} lacks {pair}");
    }
}

#[test]
fn watch_rejects_bad_windows_and_steps_with_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_s = data.to_str().unwrap();
    for (args, says) in [
        (
            vec![
                "--since",
                "2025-11-29T03:00:00Z",
                "--until",
                "2025-11-29T02:00:00Z",
            ],
            "--until must be after --since",
        ),
        (
            vec!["--since", "yesterday-ish", "--until", "-1h"],
            "--since",
        ),
        (
            vec!["--since", "-2h", "--until", "-1h", "--step", "10ms"],
            "--step",
        ),
        (vec!["--since", "-2h", "--until", "-1h"], "no store at"),
    ] {
        let mut full = vec!["watch", "--data", data_s];
        full.extend(args);
        let out = run(&full);
        assert_eq!(out.status.code(), Some(2), "{full:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{full:?}: {stderr}");
    }
}
