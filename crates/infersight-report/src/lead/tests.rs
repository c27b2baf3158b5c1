//! The lead of a verdict with a version regression on top and load-driven queueing second
//! (explaining more): the headline has units, "do now" is the top cause's rollback, the first
//! check is the runbook's SQL with its placeholder filled, each cause has its kind and workers,
//! and the ranking says why it differs from the shares.

use serde_json::json;

use super::*;
use crate::data::WorkerChange;

fn rca() -> RcaReport {
    serde_json::from_value(json!({
        "symptom": {"sli": "ttft", "baseline": 2276.075, "current": 2951.936,
                    "onset": "2026-01-01T20:02:00Z", "z": 40.9},
        "root_causes": [
            {"rank": 1, "dimensions": {"model_version": "r2", "lora_adapters": "a,b"},
             "explained_fraction": 0.437, "score": 90.0, "evidence": ["ttft over 100 ms: 100 % vs 6 %"]},
            {"rank": 2, "dimensions": {"model": "m", "model_version": "r1"},
             "explained_fraction": 0.501, "score": 40.0,
             "evidence": ["load-driven queueing: queue p90 20 ms → 300 ms …", "ttft over 100 ms"]}
        ],
        "signals": [
            {"kind": "version_regression", "subject": {"model_version": "r2", "lora_adapters": "a,b"},
             "onset": "2026-01-01T20:02:00Z", "strength": 90.0, "detail": "regressed"},
            {"kind": "latency_spike", "subject": {"model_version": "r2", "lora_adapters": "a,b"},
             "onset": "2026-01-01T20:02:00Z", "strength": 40.9, "detail": "spike"},
            {"kind": "queue_buildup", "subject": {"model": "m", "model_version": "r1"},
             "onset": "2026-01-01T20:02:00Z", "strength": 1.4, "detail": "load"}
        ],
        "log_evidence": [], "suggestions": [
            "lower the batching wait / raise max batch size on model=m & model_version=r1, or add capacity",
            "roll lora_adapters=a,b & model_version=r2 back to the previous version or route its traffic elsewhere"
        ], "checklist": [], "fleet_wide": false,
        "incident_window": {"since": "2026-01-01T20:02:00Z", "until": "2026-01-01T20:45:00Z"},
        "baseline_window": {"since": "2026-01-01T19:02:00Z", "until": "2026-01-01T20:02:00Z"},
        "window_source": "given", "verdict": "v", "elapsed_ms": 1.0, "timings_ms": {}
    }))
    .unwrap()
}

fn hit(id: &str, signals: &[&str], confirm: &[&str]) -> KnowledgeHit {
    KnowledgeHit {
        id: id.into(),
        kind: HitKind::Runbook,
        title: id.into(),
        score: 1.0,
        summary: String::new(),
        fixes: vec![format!("fix from {id}")],
        checklist: Vec::new(),
        confirm: confirm.iter().map(|s| s.to_string()).collect(),
        signals: signals.iter().map(|s| s.to_string()).collect(),
    }
}

fn workers(names: &[(&str, f64)], serving: usize) -> CauseWorkers {
    CauseWorkers {
        workers: names
            .iter()
            .map(|(w, change)| WorkerChange {
                worker: w.to_string(),
                requests: 100,
                change_ms: Some(*change),
            })
            .collect(),
        serving,
    }
}

#[test]
fn the_lead_says_what_to_do_first_with_units_kinds_and_workers() {
    let knowledge = [
        // retrieved first, but about another kind of cause
        hit(
            "queue-backlog",
            &["queue_buildup"],
            &["Look at `SELECT 1 FROM requests`."],
        ),
        hit(
            "adapters",
            &["version_regression"],
            &[
                "Compare versions with `infersight sli --by model_version`.",
                "Adapter reloads per worker: `SELECT worker, count(*) FROM logs WHERE worker = '<worker>' GROUP BY 1`.",
                "Per version:\n```sql\nSELECT model_version, avg(prefill_ms) FROM requests GROUP BY 1\n```",
                "Logs of `<tenant>`: `SELECT body FROM logs WHERE tenant = '<tenant>'`",
            ],
        ),
    ];
    let lead = Lead::of(
        &rca(),
        &knowledge,
        &[
            workers(&[("worker-03", 880.0), ("worker-07", 860.0)], 2),
            workers(&[("worker-11", 240.0)], 4),
        ],
    );
    assert_eq!(
        lead.headline.as_deref(),
        Some("TTFT p99 2.28 s → 2.95 s, +30 %")
    );
    assert!(
        lead.do_now
            .as_deref()
            .is_some_and(|d| d.starts_with("roll lora_adapters=a,b")),
        "{lead:#?}"
    );
    let check = lead.first_check.clone().unwrap();
    assert_eq!(check.source, "adapters");
    assert_eq!(
        check.sql.as_deref(),
        Some("SELECT worker, count(*) FROM logs WHERE worker = 'worker-03' GROUP BY 1")
    );
    assert_eq!(lead.confirm.len(), 4);
    assert_eq!(lead.confirm[0].sql, None, "a CLI step has no SQL");
    assert_eq!(
        lead.confirm[2].sql.as_deref(),
        Some("SELECT model_version, avg(prefill_ms) FROM requests GROUP BY 1")
    );
    assert_eq!(lead.confirm[2].text, "Per version:");
    assert_eq!(
        lead.confirm[1].text,
        "Adapter reloads per worker: the query below."
    );
    assert!(
        lead.confirm[3].text.contains("`SELECT body"),
        "an unrun query stays in the text"
    );
    assert_eq!(
        lead.confirm[3].sql, None,
        "an unfilled placeholder is not run"
    );
    let kinds: Vec<&str> = lead.causes.iter().map(|c| c.kind.as_str()).collect();
    assert_eq!(kinds, ["version regression", "load"]);
    assert_eq!(lead.causes[0].explained, "44 %");
    assert_eq!(
        lead.causes[0].workers,
        ["worker-03 +880 ms", "worker-07 +860 ms"]
    );
    assert_eq!(lead.causes[1].workers, ["worker-11 +240 ms"]);
    let note = lead.ranking_note.unwrap();
    assert!(
        note.contains("model=m & model_version=r1 explains 50 %") && note.contains("load-driven"),
        "{note}"
    );
}

#[test]
fn without_a_matching_runbook_or_suggestion_the_lead_falls_back_and_says_nothing_it_lacks() {
    let mut rca = rca();
    rca.suggestions.clear();
    rca.root_causes.truncate(1);
    let lead = Lead::of(
        &rca,
        &[hit("other", &["gpu_memory_leak"], &["Just look."])],
        &[],
    );
    assert_eq!(lead.do_now.as_deref(), Some("fix from other"));
    assert_eq!(lead.first_check.unwrap().text, "Just look.");
    assert_eq!(lead.ranking_note, None);
    assert!(lead.causes[0].workers.is_empty());
    assert!(!has_placeholder("SELECT a FROM t WHERE a < 3 AND b > 2"));
    assert!(has_placeholder("SELECT a FROM t WHERE w = '<worker>'"));
}

#[test]
fn the_report_opens_with_the_lead_in_markdown_and_html() {
    let rca = rca();
    let knowledge = [hit(
        "adapters",
        &["version_regression"],
        &["Per version: `SELECT model_version, avg(prefill_ms) FROM requests GROUP BY 1`"],
    )];
    let lead = Lead::of(&rca, &knowledge, &[workers(&[("worker-03", 880.0)], 2)]);
    let report = crate::Report {
        incident_id: "inc-1".into(),
        generated_at: "2026-01-01T21:00:00Z".into(),
        rca,
        knowledge: knowledge.to_vec(),
        suggestions: Vec::new(),
        checklist: Vec::new(),
        charts: Default::default(),
        narrative: None,
        narrative_note: None,
        incident: Default::default(),
        lead,
    };
    let markdown = crate::render::markdown(&report);
    let lead_at = markdown.find("## Do now").expect("a lead section");
    assert!(lead_at < markdown.find("## Symptom").unwrap(), "{markdown}");
    for needle in [
        "**TTFT p99 2.28 s → 2.95 s, +30 %**",
        "- **Do now:** roll lora\\_adapters=a,b",
        "```sql\n  SELECT model_version, avg(prefill_ms) FROM requests GROUP BY 1\n  ```",
        "### How to confirm (adapters)",
        "workers: worker-03 +880 ms (2 serving it)",
    ] {
        assert!(markdown.contains(needle), "{needle} in {markdown}");
    }
    let html = crate::render::html(&report);
    for needle in [
        "<p class=\"headline\">TTFT p99 2.28 s → 2.95 s, +30 %</p>",
        "<p class=\"do-now\"><b>Do now:</b> roll lora_adapters=a,b",
        "<pre><code>SELECT model_version, avg(prefill_ms) FROM requests GROUP BY 1</code></pre>",
    ] {
        assert!(html.contains(needle), "{needle} in the html");
    }
}
