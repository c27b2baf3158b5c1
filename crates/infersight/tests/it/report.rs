//! `infersight report` and `infersight incidents` end to end on the headline scenario
//! (`lora_kv_regression`): simulate, ingest traces, logs and metrics, run a fresh RCA through
//! `report` (stored as an incident), and pin the JSON and Markdown against snapshots in
//! `tests/fixtures/report/` (volatile fields — ids, clocks, timings — replaced, numbers rounded
//! to 4 significant digits). `INFERSIGHT_UPDATE_SNAPSHOTS=1` rewrites the snapshots. Then a
//! person confirms the incident, and the next report retrieves it as a past incident.

use std::path::PathBuf;

use serde_json::Value;

use crate::support::{ok, run, simulate_and_ingest};

fn snapshot_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report")
}

/// Compares `actual` with the snapshot `name`, or rewrites it when asked to.
fn assert_snapshot(name: &str, actual: &str) {
    let path = snapshot_dir().join(name);
    if std::env::var_os("INFERSIGHT_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with INFERSIGHT_UPDATE_SNAPSHOTS=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        let actual_path = std::env::temp_dir().join(format!("infersight-snapshot-{name}"));
        std::fs::write(&actual_path, actual).unwrap();
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from its snapshot at line {}: expected {:?}, got {:?}; actual written to {} (INFERSIGHT_UPDATE_SNAPSHOTS=1 accepts it)",
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first),
            actual_path.display()
        );
    }
}

/// Numbers to 4 significant digits: float sums may differ in the last bits between runs
/// (parallel aggregation), the snapshot pins what a reader sees.
fn round_numbers(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() != 0.0 && f.is_finite()) {
                let digits = 4 - 1 - f.abs().log10().floor() as i32;
                let scale = 10f64.powi(digits.max(0));
                let rounded = (f * scale).round() / scale;
                *value = serde_json::json!(rounded);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(round_numbers),
        Value::Object(map) => map.values_mut().for_each(round_numbers),
        _ => {}
    }
}

/// The report JSON without what changes from run to run.
fn stable_json(report: &Value, incident_id: &str) -> String {
    let mut report = report.clone();
    report["incident_id"] = Value::String("<incident>".into());
    report["generated_at"] = Value::String("<generated_at>".into());
    report["rca"]["elapsed_ms"] = Value::from(0);
    report["rca"]["timings_ms"] = Value::Object(Default::default());
    round_numbers(&mut report);
    serde_json::to_string_pretty(&report)
        .unwrap()
        .replace(incident_id, "<incident>")
        + "\n"
}

/// The Markdown without the incident id and the generation time (each `report` run has its own).
fn stable_text(text: &str, incident_id: &str) -> String {
    text.replace(incident_id, "<incident>")
        .lines()
        .map(|line| {
            if line.starts_with("Generated ") {
                "Generated <generated_at>."
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn headline_report_snapshot_and_confirmed_incident_retrieval() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let truth = simulate_and_ingest(
        dir.path(),
        &data,
        ("lora_kv_regression", 3, "30m"),
        &[],
        &["traces.jsonl", "logs.jsonl", "metrics.jsonl"],
    );
    let data_s = data.to_str().unwrap();

    let json_text = ok(
        &run(&["report", "--data", data_s, "--format", "json", "--no-llm"]),
        "report --format json",
    );
    let report: Value = serde_json::from_str(&json_text).expect("report prints JSON");
    let id = report["incident_id"]
        .as_str()
        .expect("incident id")
        .to_string();
    let first = report["knowledge"][0]["id"].clone();
    assert!(
        truth["expected_runbooks"]
            .as_array()
            .is_some_and(|expected| expected.contains(&first)),
        "the headline report names the ground truth's runbook first: {}",
        report["knowledge"]
    );
    assert!(report["narrative"].is_null());
    assert!(
        report["narrative_note"]
            .as_str()
            .is_some_and(|n| !n.is_empty()),
        "the report says why there is no narrative"
    );

    let markdown = ok(
        &run(&[
            "report",
            "--data",
            data_s,
            "--incident",
            &id,
            "--format",
            "markdown",
            "--no-llm",
        ]),
        "report --format markdown",
    );
    let html_path = dir.path().join("out/incident.html");
    ok(
        &run(&[
            "report",
            "--data",
            data_s,
            "--incident",
            &id,
            "--format",
            "html",
            "--no-llm",
            "--out",
            html_path.to_str().unwrap(),
        ]),
        "report --format html",
    );
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(html.contains("<svg") && html.contains(&id));

    assert_snapshot("lora_kv_regression.json", &stable_json(&report, &id));
    assert_snapshot("lora_kv_regression.md", &stable_text(&markdown, &id));

    // A person confirms the verdict; the next RCA of the same data finds it as a past incident.
    let confirm = ok(
        &run(&[
            "incidents",
            "confirm",
            &id,
            "--data",
            data_s,
            "--note",
            "rolled back the LoRA pair on the paged KV workers; TTFT recovered",
        ]),
        "incidents confirm",
    );
    assert!(confirm.contains(&id), "{confirm}");
    let listed: Value = serde_json::from_str(&ok(
        &run(&["incidents", "list", "--data", data_s, "--format", "json"]),
        "incidents list",
    ))
    .expect("incidents list prints JSON");
    assert!(
        listed.as_array().is_some_and(|all| all
            .iter()
            .any(|i| i["id"] == id.as_str() && i["status"] == "confirmed")),
        "{listed}"
    );
    let again: Value = serde_json::from_str(&ok(
        &run(&["report", "--data", data_s, "--format", "json", "--no-llm"]),
        "second report",
    ))
    .unwrap();
    assert_ne!(
        again["incident_id"],
        id.as_str(),
        "a new RCA is a new incident"
    );
    let past = format!("incident:{id}");
    assert!(
        again["knowledge"]
            .as_array()
            .is_some_and(|hits| hits.iter().any(|h| h["id"] == past.as_str())),
        "the confirmed incident is retrieved: {}",
        again["knowledge"]
    );

    // Bad input: an unknown incident is exit 1 with one line; a bad id or format is exit 2.
    let missing = run(&[
        "report",
        "--data",
        data_s,
        "--incident",
        "inc-nope",
        "--no-llm",
    ]);
    assert_ne!(missing.status.code(), Some(0));
    let bad = run(&[
        "report",
        "--data",
        data_s,
        "--incident",
        "../etc",
        "--no-llm",
    ]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let bad_format = run(&["report", "--data", data_s, "--format", "pdf"]);
    assert_eq!(bad_format.status.code(), Some(2));
}
