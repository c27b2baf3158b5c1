//! Support of the explore tests: the in-memory test store of `infersight-testkit` and the query
//! engine over it.

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
