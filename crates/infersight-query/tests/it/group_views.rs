//! String GROUP BY keys read as views (`group_views`, `view_aggregate`): the same answers as the
//! plan without the rewrite, the rewrite where it applies (memtable or not, org scope or not),
//! none where a key is computed with, and none in a plan that leaves the node.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::arrow::datatypes::DataType;
use datafusion::error::Result;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::{ExecutionPlan, displayable};
use datafusion::prelude::SessionConfig;
use infersight_model::RequestRecord;
use infersight_query::{OrgScope, OutputFormat, PlanRoute, QueryEngine};
use infersight_store::StorageBackend;

use crate::support::{EngineOf, TestStore, base_ns, request, rfc3339};

const MODELS: [&str; 3] = ["llama-3.1-8b-instruct", "qwen", "mistral-small-24b"];

/// 600 requests over three models (names longer and shorter than a view's 12 inline bytes),
/// five workers, a tenant that is sometimes missing and two orgs; two flushed segments, and the
/// last 150 rows in the memtable unless `all_flushed`.
fn fleet(all_flushed: bool) -> Arc<TestStore> {
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
            row.org = Some(if i % 2 == 0 { "acme" } else { "globex" }.to_string());
            row
        })
        .collect();
    store.append_requests(&rows[..250]);
    store.flush().unwrap();
    store.append_requests(&rows[250..450]);
    store.flush().unwrap();
    store.append_requests(&rows[450..]);
    if all_flushed {
        store.flush().unwrap();
    }
    store
}

/// Whether `plan` casts the aggregate's `key` back to `Utf8`: the mark of the rewrite.
fn casts_back(plan: &str, key: &str) -> bool {
    plan.match_indices(&format!("CAST({key}@")).any(|(at, _)| {
        plan[at..]
            .split(')')
            .next()
            .is_some_and(|cast| cast.ends_with("AS Utf8"))
    })
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
    for (all_flushed, scope) in [
        (false, OrgScope::All),
        (true, OrgScope::All),
        (false, OrgScope::org("acme")),
    ] {
        let store = fleet(all_flushed);
        let engine = store.engine().scoped(scope.clone());
        same_answers(&engine, &format!("all flushed: {all_flushed}, {scope:?}")).await;
    }
}

/// Each statement, then the same with every key an expression the rewrite leaves alone.
async fn same_answers(engine: &QueryEngine, case: &str) {
    let since = format!("'{}'", rfc3339(base_ns() + 100 * 1_000_000_000));
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
        // a limit over the order of the key (the HTTP API limits every statement's rows): the
        // top-k sort's dynamic filter on the key, pushed into the scan, is left out
        (
            "SELECT model, count(*) AS n, avg(e2e_ms) AS mean FROM requests GROUP BY model ORDER BY model DESC LIMIT 100".to_string(),
            "SELECT model || '' AS model, count(*) AS n, avg(e2e_ms) AS mean FROM requests GROUP BY model || '' ORDER BY model DESC LIMIT 100".to_string(),
        ),
        // a common subexpression puts a projection between the aggregate and the scan
        (
            "SELECT worker, sum(e2e_ms * 2) AS a, avg(e2e_ms * 2) AS b FROM requests GROUP BY worker ORDER BY worker".to_string(),
            "SELECT worker || '' AS worker, sum(e2e_ms * 2) AS a, avg(e2e_ms * 2) AS b FROM requests GROUP BY worker || '' ORDER BY worker".to_string(),
        ),
    ];
    for (viewed, reference) in &pairs {
        let answer = csv(engine, viewed).await;
        assert_eq!(answer, csv(engine, reference).await, "{case}: {viewed}");
        assert!(answer.lines().count() > 3, "{case}: {viewed}: {answer}");
        let key = viewed["SELECT ".len()..].split([',', ' ']).next().unwrap();
        let plan = explain(engine, viewed).await;
        assert!(
            casts_back(&plan, key),
            "{case}: {viewed} was not rewritten:\n{plan}"
        );
        // one key over rows from more than one partition: the partial aggregate is the
        // engine's own, grouping by the views (`view_aggregate`)
        let one_key = viewed.contains(&format!("GROUP BY {key} "));
        if one_key && plan.contains("mode=FinalPartitioned") {
            assert!(
                plan.contains("ViewKeyAggregateExec: mode=Partial"),
                "{case}: {viewed}:\n{plan}"
            );
            // a label the store keeps a dictionary of is read as one, not as views
            let verbose = csv(engine, &format!("EXPLAIN VERBOSE {viewed}")).await;
            let schemas = verbose
                .lines()
                .skip_while(|line| !line.starts_with("physical_plan_with_schema"))
                .collect::<Vec<_>>()
                .join("\n");
            assert!(
                schemas.contains(&format!("{key}:Dictionary(Int32, Utf8)")),
                "{case}: {viewed}:\n{schemas}"
            );
        }
        // the keys are `Utf8` again in the batches of the answer
        let output = engine.sql(viewed).await.unwrap();
        for batch in &output.batches {
            for column in batch.columns() {
                assert_ne!(column.data_type(), &DataType::Utf8View, "{case}: {viewed}");
            }
        }
        let reference_plan = explain(engine, reference).await;
        assert!(
            !reference_plan.contains("AS Utf8View)"),
            "{reference}:\n{reference_plan}"
        );
    }
    // the groups add up to the rows: none lost or split between the segments and the memtable
    let total = csv(
        engine,
        "SELECT sum(n) - (SELECT count(*) FROM requests) FROM (SELECT model, worker, count(*) AS n FROM requests GROUP BY model, worker)",
    )
    .await;
    assert_eq!(total.lines().nth(1), Some("0"), "{case}: {total}");
}

#[tokio::test]
async fn a_key_an_aggregate_or_filter_computes_with_keeps_its_type() {
    let store = fleet(false);
    let engine = store.engine();
    for sql in [
        "SELECT model, min(model) AS first, count(DISTINCT model) AS n FROM requests GROUP BY model",
        "SELECT model, count(*) FILTER (WHERE model LIKE 'q%') AS n FROM requests GROUP BY model",
        "SELECT model, count(*) AS n FROM requests WHERE model <> 'qwen' GROUP BY model",
        "SELECT upper(model) AS m, count(*) AS n FROM requests GROUP BY upper(model)",
    ] {
        let plan = explain(&engine, sql).await;
        assert!(!plan.contains("Utf8View"), "{sql} was rewritten:\n{plan}");
        assert!(!casts_back(&plan, "model"), "{sql}:\n{plan}");
        assert!(csv(&engine, sql).await.lines().count() > 1, "{sql}");
    }
    // with a key that qualifies beside one that does not, only the first is read as a view
    let sql = "SELECT model, worker, max(worker) AS w FROM requests GROUP BY model, worker";
    let plan = explain(&engine, sql).await;
    assert!(casts_back(&plan, "model"), "{plan}");
    assert!(!casts_back(&plan, "worker"), "{plan}");
}

/// Records the plans it is offered and declines them, so the engine runs them here.
#[derive(Debug, Default)]
struct Recording {
    plans: Mutex<Vec<String>>,
}

#[async_trait]
impl PlanRoute for Recording {
    fn takes(&self, _plan: &Arc<dyn ExecutionPlan>) -> bool {
        true
    }

    async fn execute(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        _config: &SessionConfig,
    ) -> Option<Result<SendableRecordBatchStream>> {
        let shown = displayable(plan.as_ref()).indent(true).to_string();
        self.plans.lock().unwrap().push(shown);
        None
    }

    fn failed(&self, _error: &datafusion::error::DataFusionError) {}

    fn counts(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

#[tokio::test]
async fn a_plan_that_leaves_the_node_is_planned_without_the_rewrite() {
    let store = fleet(true);
    let route = Arc::new(Recording::default());
    let engine = store
        .engine()
        .with_route(Arc::clone(&route) as Arc<dyn PlanRoute>);
    let sql = "SELECT model, count(*) AS n FROM requests GROUP BY model ORDER BY model";
    // declined, so answered here, by the plan with the rewrite
    assert_eq!(csv(&engine, sql).await, csv(&store.engine(), sql).await);
    assert!(casts_back(&explain(&store.engine(), sql).await, "model"));
    let plans = route.plans.lock().unwrap();
    assert_eq!(plans.len(), 1, "{plans:?}");
    assert!(plans[0].contains("AggregateExec"), "{}", plans[0]);
    assert!(!casts_back(&plans[0], "model"), "{}", plans[0]);
}

/// 24,000 requests over two models in three flushed segments and the memtable: groups long
/// enough per partition that an exact percentile hands its values on in pieces.
fn long_groups() -> Arc<TestStore> {
    let store = TestStore::new();
    let rows: Vec<RequestRecord> = (0..24_000_i64)
        .map(|i| {
            let mut row = request(
                base_ns() + i * 10_000_000,
                MODELS[(i % 2) as usize],
                ((i * 7_919) % 10_007) as f64 * 0.5,
                "{}",
            );
            row.worker = Some(format!("worker-{}", i % 3));
            row
        })
        .collect();
    for part in rows.chunks(7_000) {
        store.append_requests(part);
        if part.len() == 7_000 {
            store.flush().unwrap();
        }
    }
    store
}

/// The sum of the metric `name` over the operators of an `EXPLAIN ANALYZE` answer.
fn metric(analyzed: &str, name: &str) -> usize {
    analyzed
        .match_indices(&format!("{name}="))
        .filter_map(|(at, found)| {
            let digits: String = analyzed[at + found.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<usize>().ok()
        })
        .sum()
}

#[tokio::test]
async fn exact_percentiles_hand_their_values_on_in_pieces_to_one_final_aggregate() {
    let store = long_groups();
    let engine = store.engine();
    let percentiles = "percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms) AS p99, percentile_cont(0.5) WITHIN GROUP (ORDER BY e2e_ms DESC) AS p50";
    let sql = format!("SELECT model, {percentiles} FROM requests GROUP BY model ORDER BY model");
    let reference = format!(
        "SELECT model || '' AS model, {percentiles} FROM requests GROUP BY model || '' ORDER BY model"
    );
    let answer = csv(&engine, &sql).await;
    assert_eq!(answer, csv(&engine, &reference).await);
    assert_eq!(answer.lines().count(), 3, "{answer}");
    // the reference merges its partitions' states through a hash exchange; the rewritten
    // plan merges the pieces in one final aggregate over the partitions' streams
    let reference_plan = explain(&engine, &reference).await;
    assert!(
        reference_plan.contains("mode=FinalPartitioned"),
        "{reference_plan}"
    );
    let plan = explain(&engine, &sql).await;
    assert!(
        plan.contains("AggregateExec: mode=Final,")
            && plan.contains("CoalescePartitionsExec")
            && !plan.contains("mode=FinalPartitioned"),
        "{plan}"
    );
    let analyzed = csv(&engine, &format!("EXPLAIN ANALYZE {sql}")).await;
    assert!(metric(&analyzed, "states_in_pieces") >= 4, "{analyzed}");
    // beside another aggregate the states are whole rows, and the exchange stays
    let mixed = format!(
        "SELECT model, count(*) AS n, {percentiles} FROM requests GROUP BY model ORDER BY model"
    );
    let mixed_plan = explain(&engine, &mixed).await;
    assert!(mixed_plan.contains("mode=FinalPartitioned"), "{mixed_plan}");
    let mixed_analyzed = csv(&engine, &format!("EXPLAIN ANALYZE {mixed}")).await;
    assert_eq!(
        metric(&mixed_analyzed, "states_in_pieces"),
        0,
        "{mixed_analyzed}"
    );
    // with no aggregate at all (the distinct keys) there are no pieces either
    let keys_only = "SELECT model FROM requests GROUP BY model ORDER BY model";
    let keys_plan = explain(&engine, keys_only).await;
    assert!(keys_plan.contains("mode=FinalPartitioned"), "{keys_plan}");
    assert_eq!(csv(&engine, keys_only).await.lines().count(), 3);
    // under a join of partitions the final aggregate keeps its partitions (the pieces go
    // through the exchange), and the answer is the same
    let joined = format!(
        "SELECT a.model, a.p99, a.p50, b.n FROM (SELECT model, {percentiles} FROM requests GROUP BY model) a JOIN (SELECT model, count(*) AS n FROM requests GROUP BY model) b ON a.model = b.model ORDER BY a.model"
    );
    let joined_reference = format!(
        "SELECT a.model, a.p99, a.p50, b.n FROM (SELECT model || '' AS model, {percentiles} FROM requests GROUP BY model || '') a JOIN (SELECT model || '' AS model, count(*) AS n FROM requests GROUP BY model || '') b ON a.model = b.model ORDER BY a.model"
    );
    assert_eq!(
        csv(&engine, &joined).await,
        csv(&engine, &joined_reference).await
    );
    let joined_plan = explain(&engine, &joined).await;
    assert!(!joined_plan.contains("mode=Final,"), "{joined_plan}");
    let joined_analyzed = csv(&engine, &format!("EXPLAIN ANALYZE {joined}")).await;
    assert!(
        metric(&joined_analyzed, "states_in_pieces") >= 4,
        "{joined_analyzed}"
    );
}
