//! Segment footers decoded once per engine, not once per statement: the statements of an engine,
//! of the engines scoped from it (each HTTP request of `serve`) and of its limited runtimes
//! (`sql_audited`) share one cache, and what they answer does not change.

use std::collections::BTreeSet;
use std::sync::Arc;

use infersight_model::Table;
use infersight_model::time::TimeRange;
use infersight_query::{
    AccessContext, OrgScope, OutputFormat, QueryEngine, QueryLimits, QueryOutput, Surface,
};
use infersight_store::{StorageBackend, Store};

use crate::bucket::{QUERIES, ingest, simulated_exports, store_options};
use crate::support::scalar;

/// The ids of `table`'s segments.
fn segments(store: &Store, table: Table) -> BTreeSet<u64> {
    let snapshot = store.snapshot(table, TimeRange::ALL).unwrap();
    snapshot.segments.iter().map(|segment| segment.id).collect()
}

fn csv(output: QueryOutput) -> String {
    output.render(OutputFormat::Csv)
}

#[tokio::test]
async fn footers_are_decoded_once_for_every_statement_of_an_engine_and_its_scopes() {
    let dir = tempfile::tempdir().unwrap();
    ingest(
        store_options(dir.path(), None, "local"),
        &simulated_exports(),
    );
    let store = Arc::new(Store::open(store_options(dir.path(), None, "local")).unwrap());
    let before = segments(&store, Table::Requests);
    let requests = before.len();
    assert!(requests > 2, "several segments: {requests}");
    let engine = QueryEngine::new(Arc::clone(&store) as Arc<dyn StorageBackend>)
        .with_limits(QueryLimits::default());
    assert_eq!(engine.cached_footers(), 0);

    // the first statement decodes every requests segment's footer
    let first = csv(engine.sql(QUERIES[1]).await.unwrap());
    assert_eq!(engine.cached_footers(), requests);
    // a scoped engine starts with them (a request of `serve`), and adds none for requests
    let scoped = engine.scoped(OrgScope::org(infersight_model::org::DEFAULT_ORG));
    assert_eq!(scoped.cached_footers(), requests);
    let count = scalar(&scoped, "SELECT count(*) FROM requests").await;
    assert_eq!(engine.cached_footers(), requests);
    // a limited statement (the HTTP API's) shares them too, and answers as before
    let audited = engine
        .sql_audited(QUERIES[1], None, &AccessContext::cli(Surface::ApiQuery))
        .await
        .result
        .unwrap();
    assert_eq!(csv(audited), first);
    assert_eq!(engine.cached_footers(), requests);
    // another table's footers join them, from the limited runtime as well
    let spans = segments(&store, Table::Spans).len();
    engine
        .sql_audited(QUERIES[3], None, &AccessContext::cli(Surface::ApiQuery))
        .await
        .result
        .unwrap();
    assert_eq!(engine.cached_footers(), requests + spans);

    // answers do not depend on the cache: a fresh engine reads the same
    let fresh = QueryEngine::new(Arc::clone(&store) as Arc<dyn StorageBackend>);
    assert_eq!(csv(fresh.sql(QUERIES[1]).await.unwrap()), first);
    assert_eq!(scalar(&fresh, "SELECT count(*) FROM requests").await, count);

    // after a compaction the new segments' footers are read (the old ones' are not used)
    store.compact().unwrap();
    let after = segments(&store, Table::Requests);
    let new = after.difference(&before).count();
    assert!(
        new > 0,
        "the compaction wrote new segments: {before:?} -> {after:?}"
    );
    assert_eq!(csv(engine.sql(QUERIES[1]).await.unwrap()), first);
    assert_eq!(
        scalar(&engine, "SELECT count(*) FROM requests").await,
        count
    );
    assert_eq!(engine.cached_footers(), requests + spans + new);
}
