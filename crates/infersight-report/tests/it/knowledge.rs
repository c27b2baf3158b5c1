//! Tests of the report's knowledge module: the built-in runbooks, parsing errors, retrieval by
//! evidence, user runbooks, and the incident store whose confirmed incidents become retrievable.

use std::collections::BTreeMap;
use std::path::Path;

use infersight_model::ErrorKind;
use infersight_rca::RcaReport;
use infersight_rca::incidents::{IncidentStatus, IncidentStore};
use infersight_report::ReportError;
use infersight_report::knowledge::{
    HitKind, KnowledgeBase, Runbook, SIGNAL_KINDS, builtin_runbooks,
};
use serde_json::json;

/// A signal for [`rca`]: kind, subject (attribute, value) pairs, strength.
type SignalSpec<'a> = (&'a str, &'a [(&'a str, &'a str)], f64);

/// An RCA verdict in the `rca` JSON contract: signals as (kind, subject, strength), one root
/// cause, a symptom SLI (none: no symptom).
fn rca(signals: &[SignalSpec], cause: &[(&str, &str)], sli: Option<&str>) -> RcaReport {
    let subject = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let signals: Vec<_> = signals
        .iter()
        .map(|(kind, pairs, strength)| {
            json!({"kind": kind, "subject": subject(pairs), "onset": "2025-11-29T02:20:00.000Z",
                   "strength": strength, "detail": format!("{kind} detected")})
        })
        .collect();
    let root_causes: Vec<_> = if cause.is_empty() {
        Vec::new()
    } else {
        vec![
            json!({"rank": 1, "dimensions": subject(cause), "explained_fraction": 0.9,
                    "score": 10.0, "evidence": ["synthetic"]}),
        ]
    };
    let symptom = sli.map(|sli| {
        json!({"sli": sli, "baseline": 100.0, "current": 400.0,
               "onset": "2025-11-29T02:20:00.000Z", "z": 9.0})
    });
    let verdict = match (sli, cause.is_empty()) {
        (None, true) => "nothing changed: no symptom, no cause".to_string(),
        (Some(sli), _) => format!("{sli} rose from 100 to 400"),
        (None, false) => "a slice changed".to_string(),
    };
    serde_json::from_value(json!({
        "symptom": symptom, "root_causes": root_causes, "signals": signals,
        "log_evidence": [], "suggestions": ["roll back the slice"],
        "checklist": ["latency back to its baseline"], "fleet_wide": false,
        "incident_window": {"since": "2025-11-29T02:20:00.000Z", "until": "2025-11-29T02:30:00.000Z"},
        "baseline_window": {"since": "2025-11-29T02:00:00.000Z", "until": "2025-11-29T02:20:00.000Z"},
        "window_source": "given", "verdict": verdict, "elapsed_ms": 1.0, "timings_ms": {}
    }))
    .expect("a valid rca report")
}

fn healthy() -> RcaReport {
    rca(&[], &[], None)
}

fn knowledge_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../knowledge")
}

fn builtin() -> KnowledgeBase {
    KnowledgeBase::load(None, &[]).expect("the built-in knowledge base loads")
}

#[test]
fn every_builtin_runbook_parses_with_every_section_and_known_signal_kinds() {
    assert!(builtin_runbooks().len() >= SIGNAL_KINDS.len() / 2);
    for (id, text) in builtin_runbooks() {
        let runbook = Runbook::parse(id, text).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(runbook.id, *id);
        assert!(!runbook.title.is_empty(), "{id}: title");
        assert!(!runbook.signals.is_empty(), "{id}: covers no signal kind");
        assert!(runbook.keywords.len() >= 3, "{id}: keywords");
        assert!(runbook.summary.len() > 100, "{id}: summary too short");
        for (name, items) in [
            ("causes", &runbook.causes),
            ("confirm", &runbook.confirm),
            ("fixes", &runbook.fixes),
            ("checklist", &runbook.checklist),
        ] {
            assert!(items.len() >= 2, "{id}: {name} has {} items", items.len());
            assert!(
                items.iter().all(|i| !i.trim().is_empty()),
                "{id}: empty {name} item"
            );
        }
        for kind in &runbook.signals {
            assert!(
                SIGNAL_KINDS.contains(&kind.as_str()),
                "{id}: unknown signal kind {kind}"
            );
        }
        // Checklist boxes are stripped, items are sentences.
        assert!(
            runbook.checklist.iter().all(|c| !c.starts_with('[')),
            "{id}"
        );
    }
}

#[test]
fn every_knowledge_file_is_embedded() {
    let mut on_disk: Vec<String> = std::fs::read_dir(knowledge_dir())
        .expect("knowledge/ exists")
        .filter_map(|e| {
            let path = e.ok()?.path();
            (path.extension()? == "md").then(|| path.file_stem()?.to_str().map(String::from))?
        })
        .collect();
    on_disk.sort();
    let mut embedded: Vec<String> = builtin_runbooks()
        .iter()
        .map(|(id, _)| id.to_string())
        .collect();
    embedded.sort();
    assert_eq!(
        on_disk, embedded,
        "add new knowledge/*.md files to builtin_runbooks()"
    );
    for (id, text) in builtin_runbooks() {
        let file = std::fs::read_to_string(knowledge_dir().join(format!("{id}.md"))).unwrap();
        assert_eq!(&file, text, "{id}: embedded text is the file's");
    }
}

#[test]
fn every_signal_kind_is_covered_by_a_runbook() {
    let kb = builtin();
    for kind in SIGNAL_KINDS {
        assert!(
            kb.runbooks()
                .iter()
                .any(|r| r.signals.iter().any(|s| s == kind)),
            "no runbook covers {kind}"
        );
    }
}

fn parse_error(text: &str) -> String {
    match Runbook::parse("broken", text) {
        Err(e @ ReportError::BadRequest(_)) => {
            assert_eq!(e.kind(), ErrorKind::BadRequest);
            e.to_string()
        }
        Err(other) => panic!("expected a bad request, got {other:?}"),
        Ok(runbook) => panic!("parsed a malformed runbook: {runbook:?}"),
    }
}

const GOOD: &str = "---\ntitle: A good runbook\nsignals: [slow_worker]\nkeywords: [a, b, c]\n---\n\
## Summary\nOne paragraph\nover two lines.\n\n## Causes\n- one\n- two\n  continued\n\n\
## How to confirm\n- run this:\n```sql\nSELECT 1\n```\n- and that\n\n## Fixes\n1. first\n2. second\n\n\
## Verification checklist\n- [ ] it works\n- [x] it stays working\n";

#[test]
fn runbook_parsing_reads_lists_fences_and_boxes() {
    let runbook = Runbook::parse("good", GOOD).unwrap();
    assert_eq!(runbook.title, "A good runbook");
    assert_eq!(runbook.signals, ["slow_worker"]);
    assert_eq!(runbook.keywords, ["a", "b", "c"]);
    assert_eq!(runbook.summary, "One paragraph over two lines.");
    assert_eq!(runbook.causes, ["one", "two continued"]);
    assert_eq!(
        runbook.confirm,
        ["run this:\n```sql\nSELECT 1\n```", "and that"]
    );
    assert_eq!(runbook.fixes, ["first", "second"]);
    assert_eq!(runbook.checklist, ["it works", "it stays working"]);
    assert!(runbook.body.contains("## Fixes"));
}

#[test]
fn malformed_runbooks_are_bad_requests_with_the_reason() {
    let cases: [(String, &str); 9] = [
        ("## Summary\nno front matter".into(), "missing front matter"),
        ("---\ntitle: x\n## Summary\n".into(), "not closed"),
        (GOOD.replace("title: A good runbook\n", ""), "no `title`"),
        (
            GOOD.replace("## Fixes\n1. first\n2. second\n", ""),
            "missing section `## Fixes`",
        ),
        (
            GOOD.replace("- one\n- two\n  continued\n", ""),
            "section `## Causes` has no items",
        ),
        (
            GOOD.replace("One paragraph\nover two lines.\n", ""),
            "section `## Summary` is empty",
        ),
        (
            GOOD.replace("[slow_worker]", "[Slow Worker!]"),
            "not a snake_case name",
        ),
        (
            GOOD.replace("title:", "id: other\ntitle:"),
            "differs from the file stem",
        ),
        (
            GOOD.replace("keywords:", "owner: me\nkeywords:"),
            "unknown front matter key `owner`",
        ),
    ];
    for (text, reason) in cases {
        let message = parse_error(&text);
        assert!(message.contains("broken"), "names the runbook: {message}");
        assert!(
            message.contains(reason),
            "`{message}` should say `{reason}`"
        );
    }
    let bad_line = parse_error(&GOOD.replace("keywords: [a, b, c]", "keywords [a, b, c]"));
    assert!(bad_line.contains("bad front matter line 4"), "{bad_line}");
}

/// A subject typical of each kind, so the query carries realistic words.
fn subject_for(kind: &str) -> Vec<(&'static str, &'static str)> {
    match kind {
        "cache_pollution" | "resonance" | "prompt_drift" => vec![("tenant", "hooli")],
        "truncation_surge" => vec![("model", "qwen2.5-7b-instruct")],
        "trace_context_loss" | "flow_control_stall" => {
            vec![("service", "gateway"), ("service.version", "2.4.0")]
        }
        "version_regression" => vec![("model_version", "r2")],
        "queue_buildup" => vec![("model", "llama-3.1-8b"), ("model_version", "r1")],
        _ => vec![("worker", "worker-03")],
    }
}

#[test]
fn the_strongest_signal_kind_decides_the_first_runbook() {
    let kb = builtin();
    for kind in SIGNAL_KINDS {
        let subject = subject_for(kind);
        // A weaker latency spike and a weaker error burst come with most faults.
        let report = rca(
            &[
                (kind, &subject, 50.0),
                ("latency_spike", &subject, 20.0),
                ("error_burst", &subject, 5.0),
            ],
            &subject,
            Some("e2e"),
        );
        let hits = kb.retrieve(&report, 5);
        let first = hits.first().unwrap_or_else(|| panic!("{kind}: no hit"));
        let runbook = kb.runbook(&first.id).expect("a runbook");
        assert!(
            runbook.signals.iter().any(|s| s == kind),
            "{kind}: first hit {} covers {:?}; hits {:?}",
            first.id,
            runbook.signals,
            hits.iter().map(|h| (&h.id, h.score)).collect::<Vec<_>>()
        );
        assert_eq!(first.kind, HitKind::Runbook);
        assert!(first.score > 0.0);
        assert!(
            hits.windows(2).all(|w| w[0].score >= w[1].score),
            "{kind}: best first"
        );
        assert!(
            !first.fixes.is_empty() && !first.checklist.is_empty() && !first.summary.is_empty()
        );
        assert!(hits.len() <= 5);
    }
}

#[test]
fn evidence_words_pick_between_runbooks_covering_the_same_kind() {
    let kb = builtin();
    let lora = [
        ("model_version", "r2"),
        ("kv_cache_policy", "paged"),
        ("lora_adapters", "chat-lora,sql-lora"),
    ];
    let report = rca(
        &[
            ("version_regression", &lora, 400.0),
            ("latency_spike", &lora, 20.0),
        ],
        &lora,
        Some("ttft"),
    );
    assert_eq!(kb.retrieve(&report, 3)[0].id, "lora-adapter-swapping");
    let plain = [("model_version", "r7")];
    let report = rca(
        &[("version_regression", &plain, 400.0)],
        &plain,
        Some("e2e"),
    );
    assert_eq!(kb.retrieve(&report, 3)[0].id, "version-regression");
}

#[test]
fn the_knowledge_base_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>(_: &T) {}
    shared(&builtin());
}

#[test]
fn a_healthy_verdict_retrieves_nothing() {
    assert!(builtin().retrieve(&healthy(), 5).is_empty());
}

#[test]
fn free_text_search_finds_runbooks() {
    let kb = builtin();
    let hits = kb.search_text("HTTP/2 window stalls on streaming", 3);
    assert_eq!(hits[0].id, "http2-flow-control");
    let hits = kb.search_text("preemption_storm", 3);
    assert_eq!(hits[0].id, "kv-cache-preemption");
    assert!(kb.search_text("", 3).is_empty());
}

#[test]
fn a_user_runbook_replaces_a_builtin_and_adds_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let replaced = GOOD.replace("A good runbook", "Our own slow-worker runbook");
    std::fs::write(dir.path().join("slow-worker.md"), &replaced).unwrap();
    let added = GOOD
        .replace("A good runbook", "Tokenizer pool exhaustion")
        .replace("[slow_worker]", "[demand_shift]");
    std::fs::write(dir.path().join("tokenizer-pool.md"), &added).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a runbook").unwrap();
    let kb = KnowledgeBase::load(Some(dir.path()), &[]).unwrap();
    assert_eq!(kb.runbooks().len(), builtin_runbooks().len() + 1);
    assert_eq!(
        kb.runbook("slow-worker").unwrap().title,
        "Our own slow-worker runbook"
    );
    let worker = [("worker", "worker-11")];
    let hits = kb.retrieve(
        &rca(&[("slow_worker", &worker, 9.0)], &worker, Some("e2e")),
        3,
    );
    assert_eq!(hits[0].id, "slow-worker");
    assert_eq!(hits[0].title, "Our own slow-worker runbook");
    assert_eq!(hits[0].fixes, ["first", "second"]);
    let hits = kb.retrieve(&rca(&[("demand_shift", &worker, 9.0)], &worker, None), 3);
    assert_eq!(hits[0].id, "tokenizer-pool");
}

#[test]
fn a_malformed_user_runbook_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ours.md"),
        GOOD.replace("## Fixes", "## Fixed"),
    )
    .unwrap();
    let error = KnowledgeBase::load(Some(dir.path()), &[]).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadRequest);
    let message = error.to_string();
    assert!(
        message.contains("ours.md") && message.contains("missing section `## Fixes`"),
        "{message}"
    );
    let missing = KnowledgeBase::load(Some(&dir.path().join("nope")), &[]).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::BadRequest, "{missing}");
}

fn lora_incident() -> RcaReport {
    let lora = [
        ("model_version", "r2"),
        ("kv_cache_policy", "paged"),
        ("lora_adapters", "chat-lora,sql-lora"),
    ];
    rca(
        &[
            ("version_regression", &lora, 400.0),
            ("latency_spike", &lora, 20.0),
        ],
        &lora,
        Some("ttft"),
    )
}

#[test]
fn incident_store_creates_gets_lists_and_judges() {
    let dir = tempfile::tempdir().unwrap();
    let store = IncidentStore::open(dir.path());
    assert!(
        store.list().unwrap().is_empty(),
        "no directory yet: nothing listed"
    );
    let first = store.create(&lora_incident()).unwrap();
    assert!(
        first.id.starts_with("inc-20251129T022000Z-"),
        "{}",
        first.id
    );
    assert_eq!(first.id.len(), "inc-20251129T022000Z-".len() + 4);
    assert_eq!(first.status, IncidentStatus::Open);
    let second = store.create(&healthy()).unwrap();
    assert_ne!(first.id, second.id);

    let got = store.get(&first.id).unwrap();
    assert_eq!(got.id, first.id);
    assert_eq!(got.rca.verdict, first.rca.verdict);
    assert_eq!(got.rca.signals.len(), 2);

    let listed: Vec<String> = store.list().unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(
        listed,
        [second.id.clone(), first.id.clone()],
        "newest first"
    );

    let confirmed = store
        .set_status(
            &first.id,
            IncidentStatus::Confirmed,
            Some("rolled back r2".into()),
        )
        .unwrap();
    assert_eq!(confirmed.status, IncidentStatus::Confirmed);
    assert_eq!(confirmed.note.as_deref(), Some("rolled back r2"));
    assert!(confirmed.updated_at >= confirmed.created_at);
    let rejected = store
        .set_status(&second.id, IncidentStatus::Rejected, None)
        .unwrap();
    assert_eq!(rejected.note, None);
    // A status change without a note keeps the note.
    let again = store
        .set_status(&first.id, IncidentStatus::Confirmed, None)
        .unwrap();
    assert_eq!(again.note.as_deref(), Some("rolled back r2"));
    let confirmed: Vec<String> = store
        .confirmed()
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(confirmed, std::slice::from_ref(&first.id));

    // The status is stored as snake_case JSON.
    let text = std::fs::read_to_string(store.dir().join(format!("{}.json", first.id))).unwrap();
    assert!(text.contains("\"status\": \"confirmed\""), "{text}");
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(store.dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn incident_ids_are_unique_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let store = IncidentStore::open(dir.path());
    let report = lora_incident();
    let mut ids: Vec<String> = (0..40).map(|_| store.create(&report).unwrap().id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 40, "two creates never collide");
    // Concurrent creates from several threads.
    let ids: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    (0..10)
                        .map(|_| store.create(&report).unwrap().id)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len());
    assert_eq!(store.list().unwrap().len(), 80);

    for bad in ["../etc/passwd", "inc 1", "", "inc_1", "a/b", "inc-1.json"] {
        let error = store.get(bad).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadRequest, "{bad}: {error}");
        let error = store
            .set_status(bad, IncidentStatus::Confirmed, None)
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::BadRequest, "{bad}: {error}");
    }
    let missing = store.get("inc-20250101T000000Z-0000").unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");
}

#[test]
fn a_truncated_incident_file_is_skipped_by_list() {
    let dir = tempfile::tempdir().unwrap();
    let store = IncidentStore::open(dir.path());
    let kept = store.create(&lora_incident()).unwrap();
    let broken = store.create(&lora_incident()).unwrap();
    let path = store.dir().join(format!("{}.json", broken.id));
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, &text[..text.len() / 2]).unwrap();
    let listed: Vec<String> = store.list().unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(listed, [kept.id]);
    assert!(store.get(&broken.id).is_err());
}

#[test]
fn a_confirmed_incident_is_retrievable_and_a_rejected_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let store = IncidentStore::open(dir.path());
    let confirmed = store.create(&lora_incident()).unwrap();
    store
        .set_status(
            &confirmed.id,
            IncidentStatus::Confirmed,
            Some("rolled back the LoRA pair on paged KV workers".into()),
        )
        .unwrap();
    let worker = [("worker", "worker-11")];
    let slow = rca(&[("slow_worker", &worker, 30.0)], &worker, Some("e2e"));
    let rejected = store.create(&slow).unwrap();
    store
        .set_status(&rejected.id, IncidentStatus::Rejected, Some("wrong".into()))
        .unwrap();
    // Everything goes in; only confirmed incidents are indexed.
    let all = store.list().unwrap();
    let kb = KnowledgeBase::load(None, &all).unwrap();

    let hits = kb.retrieve(&lora_incident(), 5);
    let past = format!("incident:{}", confirmed.id);
    let hit = hits
        .iter()
        .find(|h| h.id == past)
        .unwrap_or_else(|| panic!("confirmed incident not retrieved: {hits:?}"));
    assert_eq!(hit.kind, HitKind::Incident);
    assert_eq!(
        hit.fixes[0],
        "rolled back the LoRA pair on paged KV workers"
    );
    assert!(hit.fixes.iter().any(|f| f == "roll back the slice"));
    assert_eq!(hit.checklist, ["latency back to its baseline"]);

    let hits = kb.retrieve(&slow, 10);
    assert!(
        hits.iter()
            .all(|h| h.id != format!("incident:{}", rejected.id)),
        "{hits:?}"
    );
    let hits = kb.search_text("LoRA pair rolled back", 5);
    assert!(hits.iter().any(|h| h.id == past), "{hits:?}");
}
