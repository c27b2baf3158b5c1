//! Freshness over a store where one worker stops while the others go on: that worker is the
//! stopped source, the others are not; when everything stops, the store is stale and nothing
//! is "stopped" (the pipeline is, not one source); a source of two rows has no rhythm to judge.

use infersight_explore::freshness;
use infersight_model::{LogRecord, MetricRecord, RequestRecord, Table, TableBatch};
use infersight_store::StorageBackend;

use crate::support::{EngineOf, MINUTE_NS, TestStore, base_ns};

/// Requests of w0 and w1 every 2 s for an hour, but w1 stops 10 minutes before the end;
/// metrics of w0 every 15 s to the end; two log lines of a scheduler.
fn fleet() -> (std::sync::Arc<TestStore>, i64) {
    let store = TestStore::new();
    let end = base_ns() + 60 * MINUTE_NS;
    let mut requests = Vec::new();
    for (worker, stop) in [("w0", end), ("w1", end - 10 * MINUTE_NS)] {
        let mut ts = base_ns();
        while ts <= stop {
            requests.push(RequestRecord {
                ts,
                worker: Some(worker.into()),
                service: Some("vllm".into()),
                ..Default::default()
            });
            ts += 2_000_000_000;
        }
    }
    store.append_requests(&requests);
    let metrics: Vec<MetricRecord> = (0..=240)
        .map(|i| MetricRecord {
            ts: base_ns() + i * 15_000_000_000,
            name: Some("kv_cache_usage_ratio".into()),
            worker: Some("w0".into()),
            value: Some(0.5),
            ..Default::default()
        })
        .collect();
    let logs: Vec<LogRecord> = [5, 30]
        .iter()
        .map(|m| LogRecord {
            ts: base_ns() + m * MINUTE_NS,
            service: Some("scheduler".into()),
            body: Some("rebalanced".into()),
            ..Default::default()
        })
        .collect();
    store
        .append(&[
            TableBatch {
                table: Table::Metrics,
                batch: MetricRecord::to_batch(&metrics),
            },
            TableBatch {
                table: Table::Logs,
                batch: LogRecord::to_batch(&logs),
            },
        ])
        .unwrap();
    (store, end)
}

#[tokio::test]
async fn a_worker_that_stops_while_the_others_go_on_is_the_stopped_source() {
    let (store, end) = fleet();
    let engine = store.engine();
    let answer = freshness(&engine, end + MINUTE_NS).await.unwrap();
    assert_eq!(answer.last_data_ms, Some(end / 1_000_000));
    assert!(!answer.stale, "one minute of silence is not stale");
    let stopped: Vec<_> = answer.sources.iter().filter(|s| s.stopped).collect();
    assert_eq!(stopped.len(), 1, "{:#?}", answer.sources);
    assert_eq!(
        (stopped[0].table, stopped[0].worker.as_deref()),
        ("requests", Some("w1"))
    );
    assert!(stopped[0].stale);
    assert_eq!(stopped[0].last_ms, (end - 10 * MINUTE_NS) / 1_000_000);
    // the scheduler's two lines, 25 minutes apart, are no rhythm: not judged
    let scheduler = answer
        .sources
        .iter()
        .find(|s| s.service.as_deref() == Some("scheduler"))
        .unwrap();
    assert!(!scheduler.stale && !scheduler.stopped);
    assert_eq!(answer.tables.len(), 3);

    // twenty minutes later with nothing new: the store is stale, every source with a rhythm
    // is, and still only w1 stopped before the rest
    let later = freshness(&engine, end + 20 * MINUTE_NS).await.unwrap();
    assert!(later.stale);
    let w0 = later
        .sources
        .iter()
        .find(|s| s.table == "requests" && s.worker.as_deref() == Some("w0"))
        .unwrap();
    assert!(w0.stale && !w0.stopped);
    assert_eq!(later.sources.iter().filter(|s| s.stopped).count(), 1);
}

#[tokio::test]
async fn an_empty_store_has_no_last_data() {
    let store = TestStore::new();
    let answer = freshness(&store.engine(), base_ns()).await.unwrap();
    assert_eq!(answer.last_data_ms, None);
    assert!(!answer.stale && answer.sources.is_empty());
}
