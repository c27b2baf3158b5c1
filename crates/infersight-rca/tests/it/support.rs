//! Support of the root-cause tests: the in-memory test store of `infersight-testkit`, the engine
//! over it, and the windows of the hand-made data.

use std::sync::Arc;

use infersight_query::QueryEngine;
use infersight_store::{StorageBackend, TimeRange};
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

/// RCA windows of the hand-made data: baseline = the first hour, incident = the next 30 minutes,
/// onset between them.
pub fn rca_context(
    symptom: &str,
    root_causes: Vec<std::collections::BTreeMap<String, String>>,
) -> infersight_rca::RcaContext {
    let onset = base_ns() + 60 * MINUTE_NS;
    infersight_rca::RcaContext {
        baseline: TimeRange {
            since_ns: Some(base_ns()),
            until_ns: Some(onset),
        },
        incident: TimeRange {
            since_ns: Some(onset),
            until_ns: Some(onset + 30 * MINUTE_NS),
        },
        onset_ns: onset,
        symptom: symptom.into(),
        root_causes: root_causes.into_iter().map(Into::into).collect(),
        latency_symptom: None,
    }
}
