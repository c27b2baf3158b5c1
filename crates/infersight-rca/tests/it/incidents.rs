//! Incident quality on a generated fleet in a real store (rollups, detected and given windows):
//! an RCA over a window after the data stopped answers "not enough data" and stores no
//! incident; two RCAs of one slowdown brushed with onsets minutes apart are stored as two
//! incidents linked to each other (the API and the UI show the link); an RCA of a quiet stretch
//! before it links to neither.

use std::sync::Arc;

use infersight_model::rng::SplitMix64;
use infersight_model::{RequestRecord, Table, TableBatch};
use infersight_query::QueryEngine;
use infersight_rca::incidents::quality::MIN_WINDOW_REQUESTS;
use infersight_rca::{IncidentStatus, IncidentStore, RcaRequest, analyse_and_record};
use infersight_store::{StorageBackend, Store, StoreOptions, TimeRange};

const MINUTE_NS: i64 = 60_000_000_000;
const START_NS: i64 = 1_767_225_600_000_000_000; // 2026-01-01T00:00:00Z
const MINUTES: i64 = 60;
/// From this minute on, one of two deployments is × 3 slower.
const ONSET: i64 = 40;

/// 60 minutes of 40 requests a minute over two deployments on three pods each; from [`ONSET`]
/// the `green` deployment is three times slower.
fn rows(seed: u64) -> Vec<RequestRecord> {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::new();
    for minute in 0..MINUTES {
        for i in 0..40 {
            let deployment = if i % 2 == 0 { "blue" } else { "green" };
            let pod = format!("{deployment}-{}", i % 3);
            let slow = if deployment == "green" && minute >= ONSET {
                3.0
            } else {
                1.0
            };
            let e2e = 900.0 * slow * (0.2 * rng.normal()).exp();
            out.push(RequestRecord {
                ts: START_NS + minute * MINUTE_NS + i * (MINUTE_NS / 40),
                request_id: Some(format!("q-{minute}-{i}")),
                service: Some("llm".into()),
                worker: Some(pod),
                model: Some("m-8b".into()),
                input_tokens: Some(400 + rng.below(200) as i64),
                output_tokens: Some(120 + rng.below(80) as i64),
                ttft_ms: Some(e2e * 0.2),
                queue_ms: Some(3.0),
                e2e_ms: Some(e2e),
                status: Some("ok".into()),
                finish_reason: Some("stop".into()),
                attrs: serde_json::json!({ "app.deployment": deployment }).to_string(),
                ..Default::default()
            });
        }
    }
    out
}

fn window(from_minute: i64, to_minute: i64) -> RcaRequest {
    RcaRequest {
        incident: Some(TimeRange {
            since_ns: Some(START_NS + from_minute * MINUTE_NS),
            until_ns: Some(START_NS + to_minute * MINUTE_NS),
        }),
        baseline: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_window_stores_nothing_and_two_rcas_of_one_event_are_linked() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreOptions::new(dir.path().join("data"))).unwrap();
    store
        .append(&[TableBatch {
            table: Table::Requests,
            batch: RequestRecord::to_batch(&rows(11)),
        }])
        .unwrap();
    let engine = QueryEngine::new(Arc::new(store) as Arc<dyn StorageBackend>);
    let incidents = IncidentStore::open(dir.path());

    // a window after the data stopped: an answer, no incident
    let empty = analyse_and_record(&engine, &incidents, window(90, 100))
        .await
        .unwrap();
    assert!(empty.incident.is_none(), "{}", empty.report.verdict);
    assert!(empty.report.incident_id.is_none());
    assert!(
        empty
            .report
            .verdict
            .starts_with("not enough data: 0 requests in the incident window"),
        "{}",
        empty.report.verdict
    );
    assert!(empty.report.root_causes.is_empty() && empty.report.suggestions.is_empty());
    assert!(
        incidents.list().unwrap().is_empty(),
        "an empty window stored an incident"
    );
    // a window with a few requests only (the last seconds of the data) is no better
    let thin = analyse_and_record(
        &engine,
        &incidents,
        RcaRequest {
            incident: Some(TimeRange {
                since_ns: Some(START_NS + MINUTES * MINUTE_NS - 5_000_000_000),
                until_ns: Some(START_NS + (MINUTES + 10) * MINUTE_NS),
            }),
            baseline: None,
        },
    )
    .await
    .unwrap();
    assert!(thin.incident.is_none(), "{}", thin.report.verdict);
    assert!(
        thin.report.verdict.starts_with("not enough data"),
        "{}",
        thin.report.verdict
    );
    const { assert!(MIN_WINDOW_REQUESTS > 3) };

    // the same slowdown brushed twice, onsets 4 minutes apart: two incidents, linked
    let first = analyse_and_record(&engine, &incidents, window(38, 60))
        .await
        .unwrap()
        .stored()
        .unwrap();
    let second = analyse_and_record(&engine, &incidents, window(42, 60))
        .await
        .unwrap()
        .stored()
        .unwrap();
    for incident in [&first, &second] {
        assert!(
            incident.rca.symptom.is_some(),
            "the slowdown is seen: {}",
            incident.rca.verdict
        );
        assert_eq!(incident.status, IncidentStatus::Open);
    }
    assert_eq!(
        second.related,
        std::slice::from_ref(&first.id),
        "the second lists the first"
    );
    let first = incidents.get(&first.id).unwrap();
    assert_eq!(
        first.related,
        std::slice::from_ref(&second.id),
        "and the first the second"
    );
    assert_eq!(first.summary()["related"], serde_json::json!([second.id]));

    // a quiet stretch before the slowdown is another question: not linked
    let quiet = analyse_and_record(&engine, &incidents, window(15, 30))
        .await
        .unwrap();
    if let Some(quiet) = quiet.incident {
        assert!(
            quiet.related.is_empty(),
            "{}: {:?}",
            quiet.rca.verdict,
            quiet.related
        );
    }
    assert_eq!(
        incidents.get(&second.id).unwrap().related,
        std::slice::from_ref(&first.id)
    );
}
