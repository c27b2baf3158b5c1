//! Read-only enforcement and error classification.

use infersight_model::ErrorKind;
use infersight_query::QueryError;

use crate::support::{EngineOf, TestStore, base_ns, requests, scalar};

const READ_ONLY: &str = "only SELECT/EXPLAIN/SHOW/DESCRIBE queries are allowed";

#[tokio::test]
async fn writes_and_session_changes_are_rejected() {
    let store = TestStore::new();
    store.append_requests(&requests(base_ns(), 3, "m"));
    let engine = store.engine();
    for sql in [
        "CREATE TABLE t (x INT)",
        "CREATE TABLE t AS SELECT * FROM requests",
        "CREATE VIEW v AS SELECT 1",
        "DROP TABLE requests",
        "INSERT INTO requests (model) VALUES ('x')",
        "DELETE FROM requests",
        "UPDATE requests SET model = 'x'",
        "COPY requests TO '/tmp/infersight-query-copy.csv'",
        "EXPLAIN ANALYZE INSERT INTO requests (model) VALUES ('x')",
        "SET datafusion.execution.batch_size = 1",
    ] {
        match engine.sql(sql).await {
            Err(QueryError::BadRequest(message)) => assert_eq!(message, READ_ONLY, "{sql}"),
            other => panic!("{sql}: expected a bad request, got {other:?}"),
        }
    }
    // Nothing changed: the table is still there with its rows, and no file was written.
    assert_eq!(scalar(&engine, "SELECT count(*) FROM requests").await, "3");
    assert!(!std::path::Path::new("/tmp/infersight-query-copy.csv").exists());
    assert!(engine.sql("SELECT * FROM t").await.is_err());
}

#[tokio::test]
async fn syntax_and_planning_errors_name_the_problem() {
    let store = TestStore::new();
    let engine = store.engine();

    let error = engine
        .sql("SELEC count(*) FROM requests")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadRequest);
    let message = error.to_string();
    assert!(message.starts_with("sql parser error"), "{message}");
    assert!(message.contains("SELEC"), "{message}");

    let error = engine
        .sql("SELECT no_such_column FROM requests")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadRequest);
    assert!(error.to_string().contains("no_such_column"), "{error}");

    let error = engine.sql("SELECT * FROM no_such_table").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadRequest);
    assert!(error.to_string().contains("no_such_table"), "{error}");

    let error = engine.sql("SELECT 1; SELECT 2").await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadRequest, "{error}");
}

#[tokio::test]
async fn store_failures_are_unavailable() {
    let store = TestStore::new();
    let engine = store.engine();
    store.set_closed(true);
    let error = engine
        .sql("SELECT count(*) FROM requests")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unavailable, "{error}");
    assert!(error.to_string().contains("store is closed"), "{error}");
    store.set_closed(false);
    assert_eq!(scalar(&engine, "SELECT count(*) FROM requests").await, "0");
}
