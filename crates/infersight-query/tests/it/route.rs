//! A plan route whose result stream fails part-way (an executor lost after the job started):
//! the engine drops what it had, runs the statement here and answers as without the route.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::prelude::SessionConfig;
use infersight_query::{AccessContext, OutputFormat, PlanRoute, QueryEngine, QueryLimits, Surface};
use infersight_store::StorageBackend;

use crate::support::{EngineOf, HOUR_NS, TestStore, base_ns, requests};

/// Takes every plan and answers with the first `good` batches of its real answer (computed
/// here), then an error, as a cluster that lost an executor while its rows were being fetched.
#[derive(Debug, Default)]
struct Failing {
    good: usize,
    executed: AtomicU64,
    failed: AtomicU64,
}

#[async_trait]
impl PlanRoute for Failing {
    fn takes(&self, _plan: &Arc<dyn ExecutionPlan>) -> bool {
        true
    }

    async fn execute(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        _config: &SessionConfig,
    ) -> Option<Result<SendableRecordBatchStream>> {
        self.executed.fetch_add(1, Ordering::SeqCst);
        let schema = plan.schema();
        let real =
            datafusion::physical_plan::collect(Arc::clone(plan), Arc::new(TaskContext::default()))
                .await
                .unwrap();
        let mut items: Vec<Result<RecordBatch>> = real
            .into_iter()
            .filter(|batch| batch.num_rows() > 0)
            .take(self.good)
            .map(Ok)
            .collect();
        assert_eq!(items.len(), self.good, "the plan has {} batches", self.good);
        items.push(Err(DataFusionError::Execution(
            "executor lost with its shuffle output".into(),
        )));
        Some(Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::iter(items),
        ))))
    }

    fn failed(&self, _error: &DataFusionError) {
        self.failed.fetch_add(1, Ordering::SeqCst);
    }

    fn counts(&self) -> Vec<(&'static str, u64)> {
        vec![("failed", self.failed.load(Ordering::SeqCst))]
    }
}

const STATEMENTS: [&str; 3] = [
    "SELECT model, count(*) AS n, sum(e2e_ms) AS total FROM requests GROUP BY model ORDER BY model",
    "SELECT count(*) AS n FROM requests WHERE model = 'qwen'",
    "SELECT ts, model FROM requests ORDER BY ts, model LIMIT 5",
];

#[tokio::test]
async fn a_route_failing_part_way_costs_time_not_the_answer() {
    let store = TestStore::new();
    store.append_requests(&requests(base_ns(), 40, "llama"));
    store.append_requests(&requests(base_ns() + HOUR_NS, 30, "qwen"));
    store.flush().unwrap();
    let here = store.engine();
    let context = AccessContext {
        actor: "test".into(),
        client: None,
        surface: Surface::Api,
        what: None,
    };
    for good in [0, 1] {
        let route = Arc::new(Failing {
            good,
            ..Failing::default()
        });
        let engine = || {
            QueryEngine::new(Arc::clone(&store) as Arc<dyn StorageBackend>)
                .with_route(route.clone())
        };
        let (routed, limited) = (engine(), engine().with_limits(QueryLimits::default()));
        for (n, sql) in STATEMENTS.iter().enumerate() {
            let expected = here.sql(sql).await.unwrap().render(OutputFormat::Csv);
            let got = routed.sql(sql).await.unwrap().render(OutputFormat::Csv);
            assert_eq!(got, expected, "{sql} after {good} batches");
            let audited = limited.sql_audited(sql, Some(100), &context).await;
            let got = audited.result.unwrap().render(OutputFormat::Csv);
            assert_eq!(got, expected, "{sql} under limits after {good} batches");
            let runs = 2 * (n as u64 + 1);
            assert_eq!(route.executed.load(Ordering::SeqCst), runs);
            assert_eq!(route.failed.load(Ordering::SeqCst), runs);
        }
    }
}
