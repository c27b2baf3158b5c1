//! Load-driven queueing among the causes, on generated fleets of two models in a real store:
//! one model's version really regresses (its prefill triples), while the other's load rises
//! and its requests queue longer (prefill and decode unchanged, queue time following the load
//! minute by minute). The second is labelled as load (a `queue_buildup` signal, evidence that
//! says so, no `version_regression`); the first stays a version regression. A queue that steps
//! up at the onset while the load stays flat (a misconfigured batching wait) is not load.

use std::sync::Arc;

use infersight_model::rng::SplitMix64;
use infersight_model::{RequestRecord, Table, TableBatch};
use infersight_query::QueryEngine;
use infersight_rca::{RcaReport, RcaRequest, SignalKind, analyse};
use infersight_store::{StorageBackend, Store, StoreOptions};

const MINUTE_NS: i64 = 60_000_000_000;
const START_NS: i64 = 1_767_225_600_000_000_000; // 2026-01-01T00:00:00Z
const MINUTES: i64 = 60;
const ONSET: i64 = 40;

/// How the second model's queue behaves.
#[derive(Clone, Copy)]
enum Queue {
    /// Its request rate swings in the baseline and climbs ×1.6 in the incident; queue time
    /// grows with the rate (a saturating server).
    FollowsLoad,
    /// Flat rate; queue time steps up ×8 at the onset and stays (a batching wait set wrong).
    StepsUp,
}

fn row(
    rng: &mut SplitMix64,
    ts: i64,
    model: (&str, &str),
    worker: String,
    phases: [f64; 3],
) -> RequestRecord {
    let noise = |rng: &mut SplitMix64, v: f64| v * (0.15 * rng.normal()).exp();
    let [queue, prefill, decode] = phases.map(|v| noise(rng, v));
    RequestRecord {
        ts,
        service: Some("llm".into()),
        worker: Some(worker),
        model: Some(model.0.into()),
        model_version: Some(model.1.into()),
        input_tokens: Some(500 + rng.below(200) as i64),
        output_tokens: Some(150 + rng.below(100) as i64),
        queue_ms: Some(queue),
        prefill_ms: Some(prefill),
        ttft_ms: Some(queue + prefill),
        decode_ms: Some(decode),
        e2e_ms: Some(queue + prefill + decode),
        status: Some("ok".into()),
        finish_reason: Some("stop".into()),
        attrs: "{}".into(),
        ..Default::default()
    }
}

/// `alpha` v7 triples its prefill from the onset (v6 does not); `beta` v3 queues as `queue`
/// says (v2 does not); `gamma` and `delta`, most of the traffic, stay healthy.
fn rows(queue: Queue, seed: u64) -> Vec<RequestRecord> {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::new();
    for minute in 0..MINUTES {
        let incident = minute >= ONSET;
        let load = match queue {
            // ±20 % swings before, then a climb to ×1.6
            Queue::FollowsLoad if incident => 1.3 + 0.3 * (minute - ONSET) as f64 / 20.0,
            Queue::FollowsLoad => 1.0 + 0.2 * (minute as f64 / 4.0).sin(),
            Queue::StepsUp => 1.0,
        };
        // alpha: v6 stays healthy, v7 triples its prefill from the onset
        for (version, count) in [("v6", 15), ("v7", 15)] {
            for i in 0..count {
                let prefill = if incident && version == "v7" {
                    450.0
                } else {
                    150.0
                };
                let ts = START_NS + minute * MINUTE_NS + i * (MINUTE_NS / count);
                let worker = format!("alpha-{version}-{}", i % 2);
                out.push(row(
                    &mut rng,
                    ts,
                    ("alpha", version),
                    worker,
                    [5.0, prefill, 700.0],
                ));
            }
        }
        // two healthy models, most of the traffic
        for (model, version, count) in [("gamma", "v5", 50), ("delta", "v2", 50)] {
            for i in 0..count {
                let ts = START_NS + minute * MINUTE_NS + i * (MINUTE_NS / count);
                let worker = format!("{model}-{}", i % 4);
                out.push(row(
                    &mut rng,
                    ts,
                    (model, version),
                    worker,
                    [5.0, 140.0, 650.0],
                ));
            }
        }
        // beta: v2 at a steady rate; v3's pods take the load that `queue` describes
        for i in 0..15 {
            let ts = START_NS + minute * MINUTE_NS + i * (MINUTE_NS / 15);
            let worker = format!("beta-v2-{}", i % 2);
            out.push(row(
                &mut rng,
                ts,
                ("beta", "v2"),
                worker,
                [25.0, 120.0, 600.0],
            ));
        }
        let beta = (20.0 * load).round() as i64;
        let queue_ms = match queue {
            Queue::FollowsLoad => 25.0 * load.powi(4),
            Queue::StepsUp if incident => 200.0,
            Queue::StepsUp => 25.0,
        };
        for i in 0..beta {
            let ts = START_NS + minute * MINUTE_NS + i * (MINUTE_NS / beta);
            let worker = format!("beta-v3-{}", i % 2);
            out.push(row(
                &mut rng,
                ts,
                ("beta", "v3"),
                worker,
                [queue_ms, 120.0, 600.0],
            ));
        }
    }
    out
}

async fn rca_of(rows: &[RequestRecord]) -> RcaReport {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreOptions::new(dir.path())).unwrap();
    store
        .append(&[TableBatch {
            table: Table::Requests,
            batch: RequestRecord::to_batch(rows),
        }])
        .unwrap();
    let engine = QueryEngine::new(Arc::new(store) as Arc<dyn StorageBackend>);
    let request = RcaRequest {
        incident: Some(infersight_store::TimeRange {
            since_ns: Some(START_NS + ONSET * MINUTE_NS),
            until_ns: Some(START_NS + MINUTES * MINUTE_NS),
        }),
        baseline: None,
    };
    analyse(&engine, request).await.unwrap()
}

/// Whether a cause names the model's version `version`.
fn names(report: &RcaReport, version: &str) -> bool {
    report.root_causes.iter().any(|c| {
        c.dimensions
            .get("model_version")
            .is_some_and(|v| v == version)
    })
}

fn signal_on(report: &RcaReport, kind: SignalKind, version: &str) -> bool {
    report
        .signals
        .iter()
        .any(|s| s.kind == kind && s.subject.get("model_version").is_some_and(|v| v == version))
}

fn explain(report: &RcaReport) -> String {
    let causes: Vec<String> = report
        .root_causes
        .iter()
        .map(|c| format!("{:?} {:?}", c.dimensions, c.evidence.first()))
        .collect();
    let signals: Vec<String> = report
        .signals
        .iter()
        .map(|s| format!("{} {:?}", s.kind, s.subject))
        .collect();
    format!(
        "{}\ncauses: {causes:#?}\nsignals: {signals:?}",
        report.verdict
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queueing_that_follows_the_load_is_labelled_load_not_a_version() {
    for seed in [1, 2] {
        let report = rca_of(&rows(Queue::FollowsLoad, seed)).await;
        let why = explain(&report);
        assert!(
            names(&report, "v7") && names(&report, "v3"),
            "seed {seed}: {why}"
        );
        let beta = report
            .root_causes
            .iter()
            .find(|c| c.dimensions.get("model_version").is_some_and(|v| v == "v3"))
            .unwrap();
        assert!(
            beta.evidence[0].starts_with("load-driven queueing"),
            "seed {seed}: {why}"
        );
        assert!(
            signal_on(&report, SignalKind::QueueBuildup, "v3"),
            "seed {seed}: {why}"
        );
        assert!(
            !signal_on(&report, SignalKind::VersionRegression, "v3"),
            "seed {seed}: {why}"
        );
        // the real regression keeps its label
        assert!(
            signal_on(&report, SignalKind::VersionRegression, "v7"),
            "seed {seed}: {why}"
        );
        assert!(
            !signal_on(&report, SignalKind::QueueBuildup, "v7"),
            "seed {seed}: {why}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_steps_up_under_flat_load_is_not_load() {
    let report = rca_of(&rows(Queue::StepsUp, 3)).await;
    let why = explain(&report);
    assert!(names(&report, "v3"), "{why}");
    assert!(
        signal_on(&report, SignalKind::VersionRegression, "v3"),
        "{why}"
    );
    assert!(
        !report
            .root_causes
            .iter()
            .any(|c| c.evidence.iter().any(|e| e.starts_with("load-driven"))),
        "{why}"
    );
    assert!(!signal_on(&report, SignalKind::QueueBuildup, "v3"), "{why}");
}
