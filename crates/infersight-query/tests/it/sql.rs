//! SQL over the memtable, over segments, and over both at once.

use infersight_model::Table;
use infersight_query::ScanStats;
use infersight_store::StorageBackend;

use crate::support::{EngineOf, HOUR_NS, TestStore, base_ns, request, requests, scalar};

#[tokio::test]
async fn memtable_only() {
    let store = TestStore::new();
    store.append_requests(&requests(base_ns(), 7, "llama"));
    let engine = store.engine();
    assert_eq!(scalar(&engine, "SELECT count(*) FROM requests").await, "7");
    let stats = engine.last_scan_stats(Table::Requests).unwrap();
    assert_eq!((stats.segments_scanned, stats.memtable_rows), (0, 7));
    assert_eq!(
        scalar(
            &engine,
            "SELECT sum(e2e_ms) FROM requests WHERE model = 'llama'"
        )
        .await,
        "721.0"
    );
}

#[tokio::test]
async fn segments_only() {
    let store = TestStore::new();
    store.append_requests(&requests(base_ns(), 5, "llama"));
    store.append_requests(&requests(base_ns() + HOUR_NS, 4, "qwen"));
    store.flush().unwrap();
    assert_eq!(store.segment_count(Table::Requests), 2);
    let engine = store.engine();
    assert_eq!(scalar(&engine, "SELECT count(*) FROM requests").await, "9");
    let stats = engine.last_scan_stats(Table::Requests).unwrap();
    assert_eq!(stats.segments_scanned, 2);
    assert_eq!(stats.memtable_rows, 0);
    let output = engine
        .sql("SELECT model, count(*) AS n FROM requests GROUP BY model ORDER BY model")
        .await
        .unwrap();
    let text = output.render(infersight_query::OutputFormat::Csv);
    assert_eq!(text, "model,n\nllama,5\nqwen,4\n");
}

#[tokio::test]
async fn memtable_and_segments_without_double_counting() {
    let store = TestStore::new();
    store.append_requests(&requests(base_ns(), 10, "llama"));
    store.flush().unwrap();
    store.append_requests(&requests(base_ns() + 20_000_000_000, 3, "llama"));
    store.append_requests(&[request(base_ns() + 2 * HOUR_NS, "qwen", 5.0, "{}")]);
    let engine = store.engine();
    assert_eq!(scalar(&engine, "SELECT count(*) FROM requests").await, "14");
    let stats = engine.last_scan_stats(Table::Requests).unwrap();
    assert_eq!(
        stats,
        ScanStats {
            range: infersight_store::TimeRange::ALL,
            segments_scanned: 1,
            segments_pruned: 0,
            memtable_batches: 2,
            memtable_rows: 4,
        }
    );
    // Projection and filters apply to both halves of the union.
    assert_eq!(
        scalar(
            &engine,
            "SELECT count(DISTINCT request_id) FROM requests WHERE model = 'llama'"
        )
        .await,
        "13"
    );
    assert_eq!(
        scalar(&engine, "SELECT max(e2e_ms) FROM requests").await,
        "109.0"
    );
    // ORDER BY + LIMIT across both sources.
    assert_eq!(
        scalar(
            &engine,
            "SELECT model FROM requests ORDER BY ts DESC LIMIT 1"
        )
        .await,
        "qwen"
    );
}

#[tokio::test]
async fn empty_store_and_other_tables() {
    let store = TestStore::new();
    let engine = store.engine();
    for table in Table::ALL {
        let count = scalar(&engine, &format!("SELECT count(*) FROM {table}")).await;
        assert_eq!(count, "0", "{table}");
    }
    let output = engine.sql("SELECT ts, model FROM requests").await.unwrap();
    assert_eq!(output.row_count(), 0);
    assert_eq!(output.schema.fields().len(), 2);
}

#[tokio::test]
async fn json_get_groups_by_an_attribute() {
    let store = TestStore::new();
    let rows: Vec<_> = (0..30)
        .map(|i| {
            let adapter = if i % 3 == 0 { "a" } else { "b" };
            request(
                base_ns() + i,
                "m",
                1.0,
                &format!(r#"{{"llm.lora.adapters":"{adapter}","n":{i}}}"#),
            )
        })
        .collect();
    store.append_requests(&rows[..10]);
    store.flush().unwrap();
    store.append_requests(&rows[10..]);
    let engine = store.engine();
    let output = engine
        .sql(
            "SELECT json_get(attrs, 'llm.lora.adapters') AS adapters, count(*) AS n \
             FROM requests GROUP BY 1 ORDER BY 1",
        )
        .await
        .unwrap();
    assert_eq!(
        output.render(infersight_query::OutputFormat::Csv),
        "adapters,n\na,10\nb,20\n"
    );
    assert_eq!(
        scalar(
            &engine,
            "SELECT count(*) FROM requests WHERE json_get(attrs, 'missing') IS NULL"
        )
        .await,
        "30"
    );
    assert_eq!(
        scalar(&engine, "SELECT json_get('{\"x\": 1.5}', 'x')").await,
        "1.5"
    );
}

#[tokio::test]
async fn show_and_describe_work() {
    let store = TestStore::new();
    let engine = store.engine();
    let tables = engine
        .sql("SHOW TABLES")
        .await
        .unwrap()
        .render(infersight_query::OutputFormat::Csv);
    for table in Table::ALL {
        assert!(tables.contains(&format!(",{table},")), "{tables}");
    }
    let described = engine.sql("DESCRIBE requests").await.unwrap();
    assert_eq!(
        described.row_count(),
        Table::Requests.schema().fields().len()
    );
    let explained = engine
        .sql("EXPLAIN SELECT count(*) FROM requests")
        .await
        .unwrap();
    assert!(explained.row_count() > 0);
}

#[test]
fn the_engine_and_its_futures_can_be_shared_across_tasks() {
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    fn assert_send<T: Send>(_: &T) {}
    let store = TestStore::new();
    let engine = store.engine();
    assert_send_sync(&engine);
    assert_send(&engine.sql("SELECT 1"));
    assert_send(&engine.scan_partitions(
        infersight_model::Table::Requests,
        infersight_store::TimeRange::ALL,
        &["ts"],
    ));
}

#[tokio::test]
async fn row_limit_refuses_large_results_but_not_limited_or_aggregated_ones() {
    let store = TestStore::new();
    store.append_requests(&requests(base_ns(), 50, "llama"));
    let engine = store.engine();
    let err = engine
        .sql_limited("SELECT * FROM requests", 10)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), infersight_model::ErrorKind::BadRequest);
    assert!(err.to_string().contains("more than 10 rows"), "{err}");
    let ok = engine
        .sql_limited("SELECT * FROM requests LIMIT 10", 10)
        .await
        .unwrap();
    assert_eq!(ok.batches.iter().map(|b| b.num_rows()).sum::<usize>(), 10);
    let agg = engine
        .sql_limited("SELECT model, count(*) FROM requests GROUP BY model", 10)
        .await
        .unwrap();
    assert_eq!(agg.batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
}
