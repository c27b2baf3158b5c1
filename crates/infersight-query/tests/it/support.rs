//! Support of the query tests: the in-memory test store of `infersight-testkit` and the engine
//! over it, plus a helper that reads one scalar.

use std::sync::Arc;

use infersight_query::QueryEngine;
use infersight_store::StorageBackend;
pub use infersight_testkit::store::*;

/// A query engine over a test store.
pub trait EngineOf {
    fn engine(self: &Arc<Self>) -> QueryEngine;
}

impl EngineOf for TestStore {
    fn engine(self: &Arc<Self>) -> QueryEngine {
        QueryEngine::new(Arc::clone(self) as Arc<dyn StorageBackend>)
    }
}

/// The single value of a one-row, one-column result, as text.
pub async fn scalar(engine: &QueryEngine, sql: &str) -> String {
    let output = engine
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(output.row_count(), 1, "{sql}");
    let batch = output.batches.iter().find(|b| b.num_rows() > 0).unwrap();
    datafusion::arrow::util::display::array_value_to_string(batch.column(0), 0).unwrap()
}
