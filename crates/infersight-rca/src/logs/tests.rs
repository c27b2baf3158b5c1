//! Lineage over a real store in a temporary directory (the lineage graph is crate-internal until
//! the report walks it, so it is tested here rather than in `tests/it`), and which lines template
//! evidence reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_model::{LogRecord, RequestRecord, Table, TableBatch};
use infersight_store::{StorageBackend, Store, StoreOptions, TimeRange};

use super::{MAX_EVIDENCE, lineage, log_evidence};
use crate::RcaContext;
use infersight_query::QueryEngine;

const MINUTE_NS: i64 = 60_000_000_000;
const BASE_NS: i64 = 1_795_000_000_000_000_000;

fn context() -> RcaContext {
    RcaContext {
        baseline: TimeRange {
            since_ns: Some(BASE_NS),
            until_ns: Some(BASE_NS + 30 * MINUTE_NS),
        },
        incident: TimeRange {
            since_ns: Some(BASE_NS + 30 * MINUTE_NS),
            until_ns: Some(BASE_NS + 40 * MINUTE_NS),
        },
        onset_ns: BASE_NS + 30 * MINUTE_NS,
        symptom: "ttft".into(),
        root_causes: Vec::new(),
        latency_symptom: None,
    }
}

fn log(ts: i64, template: &str, worker: &str, trace_id: Option<&str>, attrs: &str) -> LogRecord {
    LogRecord {
        ts,
        worker: Some(worker.into()),
        trace_id: trace_id.map(str::to_string),
        body: Some(format!("{template} happened")),
        template_id: Some(template.into()),
        attrs: attrs.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn lineage_links_a_log_record_to_its_requests_model_version_through_trace_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(StoreOptions::new(dir.path())).unwrap());
    let onset = BASE_NS + 30 * MINUTE_NS;
    let request = RequestRecord {
        ts: onset + MINUTE_NS,
        trace_id: Some("t-1".into()),
        request_id: Some("cmpl-1".into()),
        session_id: Some("s-9".into()),
        worker: Some("w1".into()),
        model: Some("llama".into()),
        model_version: Some("v2".into()),
        ..Default::default()
    };
    let other = RequestRecord {
        ts: onset + MINUTE_NS,
        trace_id: Some("t-2".into()),
        request_id: Some("cmpl-2".into()),
        model_version: Some("v1".into()),
        ..Default::default()
    };
    let logs = vec![
        // linked only by trace id (no request_id column)
        log(
            onset + MINUTE_NS + 1_000_000_000,
            "oom",
            "w1",
            Some("t-1"),
            r#"{"log.record.uid":"L1"}"#,
        ),
        // another template on the same worker 2 s later, declaring the first as upstream
        log(
            onset + MINUTE_NS + 3_000_000_000,
            "retry",
            "w1",
            None,
            r#"{"log.record.uid":"L2","upstream_log_ids":["L1"]}"#,
        ),
        // a record of a template that is not a seed
        log(onset + MINUTE_NS, "noise", "w2", Some("t-2"), "{}"),
    ];
    store
        .append(&[
            TableBatch {
                table: Table::Requests,
                batch: RequestRecord::to_batch(&[request, other]),
            },
            TableBatch {
                table: Table::Logs,
                batch: LogRecord::to_batch(&logs),
            },
        ])
        .unwrap();
    let engine = QueryEngine::new(store as Arc<dyn StorageBackend>);
    let graph = lineage(
        &engine,
        &context(),
        &["oom".to_string(), "retry".to_string()],
    )
    .await
    .unwrap();
    let json = serde_json::to_string(&graph).unwrap();
    let oom = graph.node("log:L1").unwrap_or_else(|| panic!("{json}"));
    assert_eq!(oom.kind, "log");
    // log → request (by trace id) → model_version v2
    let to_request: Vec<_> = graph
        .edges_from("log:L1")
        .filter(|e| e.to.starts_with("request:"))
        .collect();
    assert_eq!(to_request.len(), 1, "{json}");
    assert_eq!(to_request[0].to, "request:cmpl-1");
    assert_eq!(to_request[0].relation, "same_trace_id");
    let version: Vec<_> = graph
        .edges_from("request:cmpl-1")
        .filter(|e| e.relation == "served_by_version")
        .collect();
    assert_eq!(version.len(), 1, "{json}");
    assert_eq!(version[0].to, "model_version:v2");
    assert_eq!(
        graph.node("model_version:v2").unwrap().attrs["model"],
        "llama"
    );
    assert!(
        graph.node("model_version:v1").is_none(),
        "the unrelated request stays out: {json}"
    );
    assert!(graph.node("session:s-9").is_some(), "{json}");
    // template, worker, upstream and same-worker links
    let edges: BTreeMap<(&str, &str), &str> = graph
        .edges
        .iter()
        .map(|e| ((e.from.as_str(), e.to.as_str()), e.relation.as_str()))
        .collect();
    assert_eq!(edges.get(&("log:L1", "template:oom")), Some(&"instance_of"));
    assert_eq!(edges.get(&("log:L1", "worker:w1")), Some(&"emitted_on"));
    assert_eq!(edges.get(&("log:L2", "log:L1")), Some(&"upstream"));
    assert_eq!(edges.get(&("log:L1", "log:L2")), Some(&"near_on_worker"));
    assert!(
        !graph
            .nodes
            .iter()
            .any(|n| n.attrs.get("template_id").is_some_and(|t| t == "noise"))
    );
    assert!(!graph.truncated);

    // the walk the report shows: template → records → worker, requests → model version
    let oom = graph.summary_of("oom").expect("oom has records");
    assert_eq!(oom.records, 1);
    assert_eq!(oom.workers, BTreeMap::from([("w1".to_string(), 1)]));
    assert_eq!(oom.requests, 1);
    assert_eq!(oom.model_versions, BTreeMap::from([("v2".to_string(), 1)]));
    assert_eq!((oom.traces, oom.sessions), (1, 1));
    assert_eq!(oom.linked_records, 1, "near_on_worker to the retry record");
    let retry = graph.summary_of("retry").expect("retry has records");
    assert_eq!((retry.records, retry.requests, retry.traces), (1, 0, 0));
    assert_eq!(retry.linked_records, 1, "its declared upstream");
    assert!(retry.model_versions.is_empty());
    assert_eq!(graph.summary_of("noise"), None, "not a seed");
}

#[tokio::test]
async fn lineage_of_no_seeds_or_no_data_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(StoreOptions::new(dir.path())).unwrap());
    let engine = QueryEngine::new(store as Arc<dyn StorageBackend>);
    let graph = lineage(&engine, &context(), &["x".to_string()])
        .await
        .unwrap();
    assert!(graph.nodes.iter().all(|n| n.kind == "template"));
    assert!(graph.edges.is_empty());
    let graph = lineage(&engine, &context(), &[]).await.unwrap();
    assert!(graph.nodes.is_empty());
}

/// Chat content mixed with engine events, as a fleet logs them: users' prompts and responses
/// under templates the online miner keeps minting (new ones as new users arrive in the
/// incident), steady engine stats lines, and one engine event whose rate rises at the onset.
fn chat_and_engine_logs(seed: u64) -> Vec<LogRecord> {
    let mut state = seed;
    let mut next = move || {
        // SplitMix64: deterministic per seed
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut logs = Vec::new();
    for minute in 0..40 {
        let at = |second: i64| BASE_NS + minute * MINUTE_NS + second * 1_000_000_000;
        let incident = minute >= 30;
        logs.push(log(at(0), "engine-stats", "w1", None, "{}"));
        // chat lines: a few users per minute, each chat a prompt and a response line under a
        // template of its own text; more and newer users in the incident
        let chats = if incident { 8 } else { 2 };
        for chat in 0..chats {
            let user = next() % if incident { 12 } else { 4 } + if incident { 100 } else { 0 };
            let second = 1 + chat * 5;
            for (class, kind) in [("prompt_input", "prompt"), ("response_output", "response")] {
                let mut line = log(at(second), &format!("{kind}-user{user}"), "w1", None, "{}");
                line.log_class = Some(class.into());
                logs.push(line);
            }
        }
        // the engine event: once in the baseline, five a minute in the incident
        if (incident && next() % 10 < 9) || minute == 10 {
            for k in 0..if incident { 5 } else { 1 } {
                logs.push(log(at(50 + k), "kv-preempt", "w1", None, "{}"));
            }
        }
    }
    logs
}

#[tokio::test]
async fn template_evidence_leaves_users_text_out() {
    for seed in [1, 2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(StoreOptions::new(dir.path())).unwrap());
        let logs = chat_and_engine_logs(seed);
        let chat_templates: std::collections::BTreeSet<String> = logs
            .iter()
            .filter(|l| l.log_class.is_some())
            .filter_map(|l| l.template_id.clone())
            .collect();
        store
            .append(&[TableBatch {
                table: Table::Logs,
                batch: LogRecord::to_batch(&logs),
            }])
            .unwrap();
        let engine = QueryEngine::new(store as Arc<dyn StorageBackend>);
        let evidence = log_evidence(&engine, &context()).await.unwrap();
        let ids: Vec<&str> = evidence.iter().map(|e| e.template_id.as_str()).collect();
        assert!(evidence.len() <= MAX_EVIDENCE);
        assert_eq!(ids.first(), Some(&"kv-preempt"), "seed {seed}: {ids:?}");
        assert!(
            ids.iter().all(|id| !chat_templates.contains(*id)),
            "seed {seed}: users' text in the evidence: {ids:?}"
        );
    }
}
