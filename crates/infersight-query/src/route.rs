//! Where a planned statement runs: on this node, or elsewhere through a [`PlanRoute`] (the
//! `ballista` module's cluster). The engine plans every statement itself, so scan statistics,
//! the access audit and the org scope stay on this node whatever executes the plan; the route
//! sees only the finished physical plan and answers with its result stream, or declines.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::error::Result;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;

/// Runs some physical plans elsewhere.
#[async_trait]
pub trait PlanRoute: Send + Sync + std::fmt::Debug {
    /// Whether `plan` (as planned for this node) goes elsewhere. If so, the engine plans the
    /// statement again without what only works inside one process (dynamic filters) and hands
    /// that plan to [`PlanRoute::execute`]; if not, it runs `plan` here.
    fn takes(&self, plan: &Arc<dyn ExecutionPlan>) -> bool;

    /// The result stream of `plan` executed elsewhere, or `None`: it could not be sent or was
    /// not answered (said in the route's log and counters), and the engine runs the statement
    /// here. The statement still gets its answer: an error (`Some(Err)`, or a stream that
    /// fails) also has the engine run it here, after telling [`PlanRoute::failed`].
    async fn execute(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        config: &SessionConfig,
    ) -> Option<Result<SendableRecordBatchStream>>;

    /// The stream [`PlanRoute::execute`] answered with failed before its end (`error`); the
    /// engine drops what it had collected and runs the statement here.
    fn failed(&self, error: &datafusion::error::DataFusionError);

    /// How many plans went where since start, by place (`/metrics`).
    fn counts(&self) -> Vec<(&'static str, u64)>;
}
