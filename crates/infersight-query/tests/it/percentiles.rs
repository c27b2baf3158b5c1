//! Tail latency per model, approximate (t-digest) and exact, in DataFusion 55 syntax.

use infersight_model::RequestRecord;
use infersight_store::StorageBackend;

use crate::support::{EngineOf, TestStore, base_ns, request};

/// Model `a`: e2e 1..=100 ms; model `b`: e2e 1001..=1200 ms. Half flushed, half in memory.
fn latency_store() -> std::sync::Arc<TestStore> {
    let store = TestStore::new();
    let mut rows: Vec<RequestRecord> = Vec::new();
    for i in 1..=100 {
        rows.push(request(base_ns() + i, "a", i as f64, "{}"));
    }
    for i in 1..=200 {
        rows.push(request(base_ns() + 1000 + i, "b", 1000.0 + i as f64, "{}"));
    }
    store.append_requests(&rows[..150]);
    store.flush().unwrap();
    store.append_requests(&rows[150..]);
    store
}

fn column_f64(output: &infersight_query::QueryOutput, column: usize) -> Vec<f64> {
    output
        .batches
        .iter()
        .flat_map(|batch| {
            let array = batch
                .column(column)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Float64Array>()
                .unwrap()
                .clone();
            array.values().to_vec()
        })
        .collect()
}

#[tokio::test]
async fn approximate_p99_per_model_in_both_syntaxes() {
    let store = latency_store();
    let engine = store.engine();
    for sql in [
        "SELECT model, approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms) AS p99 \
         FROM requests GROUP BY model ORDER BY model",
        "SELECT model, approx_percentile_cont(e2e_ms, 0.99) AS p99 \
         FROM requests GROUP BY model ORDER BY model",
    ] {
        let output = engine
            .sql(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let p99 = column_f64(&output, 1);
        assert_eq!(p99.len(), 2, "{sql}");
        assert!((p99[0] - 99.0).abs() <= 1.5, "{p99:?}");
        assert!((p99[1] - 1198.0).abs() <= 2.5, "{p99:?}");
    }
}

#[tokio::test]
async fn exact_p99_and_median() {
    let store = latency_store();
    let engine = store.engine();
    let sql = "SELECT model, \
                 percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms) AS p99, \
                 percentile_cont(e2e_ms, 0.99) AS p99_alt, \
                 median(e2e_ms) AS p50 \
               FROM requests GROUP BY model ORDER BY model";
    let output = engine.sql(sql).await.unwrap();
    // Linear interpolation between order statistics: 1..=100 -> 99.01, 1001..=1200 -> 1198.01.
    let p99 = column_f64(&output, 1);
    let p99_alt = column_f64(&output, 2);
    let p50 = column_f64(&output, 3);
    assert!((p99[0] - 99.01).abs() < 1e-5, "{p99:?}");
    assert!((p99[1] - 1198.01).abs() < 1e-5, "{p99:?}");
    assert_eq!(p99, p99_alt);
    assert_eq!(p50, vec![50.5, 1100.5]);
}
