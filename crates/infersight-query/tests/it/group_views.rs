//! String GROUP BY keys read as views (`group_views`): the same answers as the plan without the
//! rewrite, the rewrite where it applies, and none where a key is computed with.

use infersight_model::RequestRecord;
use infersight_query::{OutputFormat, QueryEngine};
use infersight_store::StorageBackend;

use crate::support::{EngineOf, TestStore, base_ns, request, rfc3339};

const MODELS: [&str; 3] = ["llama-3.1-8b-instruct", "qwen", "mistral-small-24b"];

/// 600 requests over three models (names longer and shorter than a view's 12 inline bytes),
/// five workers and a tenant that is sometimes missing; two flushed segments and the memtable.
fn fleet() -> std::sync::Arc<TestStore> {
    let store = TestStore::new();
    let rows: Vec<RequestRecord> = (0..600_i64)
        .map(|i| {
            let mut row = request(
                base_ns() + i * 1_000_000_000,
                MODELS[(i % 3) as usize],
                10.0 + ((i * 37) % 101) as f64,
                "{}",
            );
            row.worker = Some(format!("worker-{}", i % 5));
            row.tenant = (i % 7 != 0).then(|| format!("tenant-{}", i % 4));
            row
        })
        .collect();
    store.append_requests(&rows[..250]);
    store.flush().unwrap();
    store.append_requests(&rows[250..450]);
    store.flush().unwrap();
    store.append_requests(&rows[450..]);
    store
}

async fn csv(engine: &QueryEngine, sql: &str) -> String {
    engine
        .sql(sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
        .render(OutputFormat::Csv)
}

async fn explain(engine: &QueryEngine, sql: &str) -> String {
    csv(engine, &format!("EXPLAIN {sql}")).await
}

#[tokio::test]
async fn grouping_by_a_plain_string_column_answers_as_grouping_by_an_expression_of_it() {
    let store = fleet();
    let engine = store.engine();
    let since = format!("'{}'", rfc3339(base_ns() + 100 * 1_000_000_000));
    // each statement, then the same with every key an expression the rewrite leaves alone
    let pairs = [
        (
            "SELECT model, count(*) AS n, avg(e2e_ms) AS mean FROM requests GROUP BY model ORDER BY model".to_string(),
            "SELECT model || '' AS model, count(*) AS n, avg(e2e_ms) AS mean FROM requests GROUP BY model || '' ORDER BY model".to_string(),
        ),
        (
            format!("SELECT model, worker, tenant, sum(e2e_ms) AS total, percentile_cont(0.9) WITHIN GROUP (ORDER BY e2e_ms) AS p90 FROM requests WHERE ts >= {since} GROUP BY model, worker, tenant ORDER BY model, worker, tenant NULLS FIRST"),
            format!("SELECT model || '' AS model, worker || '' AS worker, tenant || '' AS tenant, sum(e2e_ms) AS total, percentile_cont(0.9) WITHIN GROUP (ORDER BY e2e_ms) AS p90 FROM requests WHERE ts >= {since} GROUP BY model || '', worker || '', tenant || '' ORDER BY model, worker, tenant NULLS FIRST"),
        ),
        (
            "SELECT tenant, max(e2e_ms) AS worst, count(*) AS n FROM requests GROUP BY tenant ORDER BY tenant NULLS FIRST".to_string(),
            "SELECT tenant || '' AS tenant, max(e2e_ms) AS worst, count(*) AS n FROM requests GROUP BY tenant || '' ORDER BY tenant NULLS FIRST".to_string(),
        ),
        (
            "SELECT worker, count(*) AS n FROM requests WHERE e2e_ms > 50 GROUP BY worker HAVING count(*) > 1 ORDER BY n DESC, worker LIMIT 3".to_string(),
            "SELECT worker || '' AS worker, count(*) AS n FROM requests WHERE e2e_ms > 50 GROUP BY worker || '' HAVING count(*) > 1 ORDER BY n DESC, worker LIMIT 3".to_string(),
        ),
    ];
    for (viewed, reference) in &pairs {
        let answer = csv(&engine, viewed).await;
        assert_eq!(answer, csv(&engine, reference).await, "{viewed}");
        assert!(answer.lines().count() > 3, "{viewed}: {answer}");
        let plan = explain(&engine, viewed).await;
        assert!(
            plan.contains("Utf8View"),
            "{viewed} was not rewritten:\n{plan}"
        );
        // the keys are `Utf8` again in the answer
        let output = engine.sql(viewed).await.unwrap();
        assert!(
            output.schema.fields().iter().all(|field| !matches!(
                field.data_type(),
                datafusion::arrow::datatypes::DataType::Utf8View
            )),
            "{viewed}: {:?}",
            output.schema
        );
        let reference_plan = explain(&engine, reference).await;
        assert!(
            !reference_plan.contains("Utf8View"),
            "{reference}:\n{reference_plan}"
        );
    }
    // the counts add up to the rows: no group lost or split between the segments and memtable
    let total = csv(
        &engine,
        "SELECT sum(n) FROM (SELECT model, worker, count(*) AS n FROM requests GROUP BY model, worker)",
    )
    .await;
    assert!(
        total.ends_with("600\n") || total.ends_with("600"),
        "{total}"
    );
}

#[tokio::test]
async fn a_key_an_aggregate_or_filter_computes_with_keeps_its_type() {
    let store = fleet();
    let engine = store.engine();
    for sql in [
        "SELECT model, min(model) AS first, count(DISTINCT model) AS n FROM requests GROUP BY model",
        "SELECT model, count(*) FILTER (WHERE model LIKE 'q%') AS n FROM requests GROUP BY model",
        "SELECT model, count(*) AS n FROM requests WHERE model <> 'qwen' GROUP BY model",
        "SELECT upper(model) AS m, count(*) AS n FROM requests GROUP BY upper(model)",
    ] {
        let plan = explain(&engine, sql).await;
        assert!(!plan.contains("Utf8View"), "{sql} was rewritten:\n{plan}");
        assert!(csv(&engine, sql).await.lines().count() > 1, "{sql}");
    }
    // with a key that qualifies beside one that does not, only the first is read as a view
    let sql = "SELECT model, worker, max(worker) AS w FROM requests GROUP BY model, worker";
    let plan = explain(&engine, sql).await;
    assert!(plan.contains("CAST(model@0 AS Utf8)"), "{plan}");
    assert!(!plan.contains("CAST(worker"), "{plan}");
}
