//! Lineage over a real store in a temporary directory (the lineage graph is crate-internal until
//! the report walks it, so it is tested here rather than in `tests/it`).

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_model::{LogRecord, RequestRecord, Table, TableBatch};
use infersight_store::{StorageBackend, Store, StoreOptions, TimeRange};

use super::lineage;
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
