//! The SQL surface people reach (`sql_audited`): only reads of the canonical tables, each refused
//! attempt audited, and statements that would exhaust memory, time or the response end with a
//! clear error within their limits while the engine keeps answering.

use std::sync::Arc;
use std::time::{Duration, Instant};

use infersight_model::ErrorKind;
use infersight_query::audit::read_records;
use infersight_query::{AccessAudit, AccessContext, QueryEngine, QueryLimits, Surface};

use crate::support::{EngineOf, TestStore, base_ns, requests};

fn context() -> AccessContext {
    AccessContext {
        actor: "mallory".into(),
        client: None,
        surface: Surface::ApiQuery,
        what: None,
    }
}

/// Small limits, so each attack ends in a second or two.
fn small_limits() -> QueryLimits {
    QueryLimits {
        memory_limit_bytes: 4 * 1024 * 1024,
        timeout: Duration::from_millis(1500),
        max_response_bytes: 16 * 1024,
        max_concurrent_per_caller: 2,
    }
}

/// `rows` requests, an engine with `limits` and an audit in `dir`.
fn limited_engine(
    rows: usize,
    limits: QueryLimits,
    dir: &std::path::Path,
) -> (QueryEngine, Arc<AccessAudit>) {
    let store = TestStore::new();
    store.append_requests(&requests(base_ns(), rows, "m"));
    let audit = Arc::new(AccessAudit::for_data_dir(dir));
    let engine = store
        .engine()
        .with_access_audit(Arc::clone(&audit))
        .with_limits(limits);
    (engine, audit)
}

#[tokio::test]
async fn file_tables_table_functions_ddl_and_settings_are_refused_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret.csv");
    std::fs::write(&secret, "password\nhunter2\n").unwrap();
    let copied = dir.path().join("copied.csv");
    let (engine, audit) = limited_engine(3, small_limits(), &dir.path().join("data"));
    let attempts = [
        format!("SELECT * FROM '{}'", secret.display()),
        "SELECT * FROM '/etc/passwd'".to_string(),
        format!(
            "CREATE EXTERNAL TABLE leak (line VARCHAR) STORED AS CSV LOCATION '{}'",
            secret.display()
        ),
        "CREATE EXTERNAL TABLE pw (line VARCHAR) STORED AS CSV LOCATION '/etc/passwd'".to_string(),
        format!("COPY (SELECT * FROM requests) TO '{}'", copied.display()),
        format!("COPY requests TO '{}' STORED AS CSV", copied.display()),
        format!("EXPLAIN ANALYZE COPY requests TO '{}'", copied.display()),
        "SELECT * FROM generate_series(1, 1000000000000)".to_string(),
        "SELECT * FROM range(10)".to_string(),
        format!("SELECT * FROM read_csv('{}')", secret.display()),
        format!("SELECT * FROM read_parquet('{}')", secret.display()),
        "SET datafusion.execution.batch_size = 1".to_string(),
        "SET datafusion.runtime.memory_limit = '100G'".to_string(),
        "CREATE VIEW v AS SELECT * FROM requests".to_string(),
        "INSERT INTO requests (model) VALUES ('x')".to_string(),
        "DROP TABLE requests".to_string(),
    ];
    for sql in &attempts {
        let audited = engine.sql_audited(sql, Some(100), &context()).await;
        match audited.result {
            Err(error) => assert_eq!(error.kind(), ErrorKind::BadRequest, "{sql}: {error}"),
            Ok(output) => panic!("{sql}: answered {} rows", output.row_count()),
        }
    }
    assert!(!copied.exists(), "COPY wrote a file");
    let (records, unreadable) = read_records(audit.path()).unwrap();
    assert_eq!(unreadable, 0);
    assert_eq!(records.len(), attempts.len(), "every refusal is audited");
    assert!(records.iter().all(|record| record.outcome == "bad_request"
        && record.actor == "mallory"
        && record.rows == 0));
    // the canonical tables are still there and still read
    for sql in [
        "SELECT count(*) FROM requests",
        "WITH m AS (SELECT model FROM requests) SELECT count(*) FROM m",
        "SELECT table_name FROM information_schema.tables",
        "EXPLAIN SELECT count(*) FROM requests",
        "SHOW TABLES",
    ] {
        let audited = engine.sql_audited(sql, Some(100), &context()).await;
        assert!(audited.result.is_ok(), "{sql}: {:?}", audited.result);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distinct_set_over_a_join_ends_at_its_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _audit) = limited_engine(2000, small_limits(), dir.path());
    let started = Instant::now();
    let sql = "SELECT count(DISTINCT concat(a.request_id, b.request_id, a.model)) \
               FROM requests a CROSS JOIN requests b";
    let error = engine
        .sql_audited(sql, Some(100), &context())
        .await
        .result
        .unwrap_err();
    let message = error.to_string();
    assert_eq!(error.kind(), ErrorKind::BadRequest, "{message}");
    assert!(
        message.contains("exceeded its memory limit of 4 MB"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let counts = engine.query_counts();
    assert_eq!((counts.memory_exceeded, counts.running), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_join_ends_at_its_timeout_and_its_tasks_stop() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _audit) = limited_engine(2000, small_limits(), dir.path());
    let started = Instant::now();
    let sql = "SELECT count(*) FROM requests a, requests b, requests c \
               WHERE a.e2e_ms + b.e2e_ms > c.e2e_ms";
    let error = engine
        .sql_audited(sql, Some(100), &context())
        .await
        .result
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        error
            .to_string()
            .contains("exceeded its time limit of 1.5 s"),
        "{error}"
    );
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert_eq!(engine.query_counts().timed_out, 1);
    // the statement's task was aborted: its plan is dropped (it counts as running until then)
    // once the join's output yields, well before the cross join could end by itself
    let deadline = Instant::now() + Duration::from_secs(5);
    while engine.query_counts().running > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let counts = engine.query_counts();
    assert_eq!((counts.running, counts.cancelled), (0, 1), "{counts:?}");
}

#[tokio::test]
async fn a_large_result_ends_at_its_byte_cap_and_a_small_one_passes() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, audit) = limited_engine(2000, small_limits(), dir.path());
    let error = engine
        .sql_audited("SELECT * FROM requests", Some(100_000), &context())
        .await
        .result
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("exceeds the response limit of 16384 bytes"),
        "{error}"
    );
    // a few rows of the same batches fit: a slice counts its own rows only
    let output = engine
        .sql_audited("SELECT * FROM requests LIMIT 3", Some(100_000), &context())
        .await
        .result
        .unwrap();
    assert_eq!(output.row_count(), 3);
    assert_eq!(engine.query_counts().response_too_large, 1);
    let (records, _) = read_records(audit.path()).unwrap();
    let outcomes: Vec<&str> = records.iter().map(|r| r.outcome.as_str()).collect();
    assert_eq!(outcomes, ["bad_request", "ok"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_attacks_at_once_each_end_with_a_clear_error_and_the_engine_keeps_answering() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, _audit) = limited_engine(2000, small_limits(), dir.path());
    let engine = Arc::new(engine);
    let attacks = [
        "SELECT count(DISTINCT concat(a.request_id, b.request_id)) FROM requests a, requests b",
        "SELECT count(*) FROM requests a, requests b, requests c WHERE a.e2e_ms < c.e2e_ms",
        "SELECT * FROM requests",
        "SELECT a.*, b.* FROM requests a, requests b ORDER BY a.e2e_ms - b.e2e_ms",
        "SELECT * FROM '/etc/passwd'",
    ];
    let started = Instant::now();
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let engine = Arc::clone(&engine);
            let sql = attacks[i % attacks.len()];
            tokio::spawn(async move {
                (
                    sql,
                    engine.sql_audited(sql, Some(100_000), &context()).await,
                )
            })
        })
        .collect();
    for task in tasks {
        let (sql, audited) = task.await.expect("no attack panics its task");
        let error = audited.result.expect_err(sql);
        assert_eq!(error.kind(), ErrorKind::BadRequest, "{sql}: {error}");
        let message = error.to_string();
        assert!(
            ["memory limit", "time limit", "response limit", "not found"]
                .iter()
                .any(|limit| message.contains(limit)),
            "{sql}: {message}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    // a timed-out statement's task is aborted as its handle drops; the abort (and with it the
    // end of its `running` count) completes on a worker thread moments later
    let deadline = Instant::now() + Duration::from_secs(5);
    while engine.query_counts().running != 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(engine.query_counts().running, 0);
    let output = engine
        .sql_audited("SELECT count(*) AS n FROM requests", Some(10), &context())
        .await
        .result
        .unwrap();
    assert_eq!(output.row_count(), 1);
}
