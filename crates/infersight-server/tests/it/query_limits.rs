//! `POST /api/v1/query` as an attacker meets it, over a real socket: escape attempts are 400s
//! and audited, expensive statements end at small configured limits with a 400 naming the limit,
//! a caller's extra statements get 429 + Retry-After, a client that hangs up stops its statement,
//! and the server keeps answering `/healthz` and normal queries throughout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use infersight_model::telemetry::Counters;
use infersight_query::audit::read_records;
use infersight_query::{AccessAudit, QueryEngine, QueryLimits};
use infersight_server::api::{ApiState, router};
use infersight_store::StorageBackend;
use infersight_testkit::store::{TestStore, base_ns, requests};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CROSS_JOIN: &str = "SELECT count(*) FROM requests a, requests b, requests c \
                          WHERE a.e2e_ms + b.e2e_ms > c.e2e_ms";

fn small_limits() -> QueryLimits {
    QueryLimits {
        memory_limit_bytes: 4 * 1024 * 1024,
        timeout: Duration::from_millis(1500),
        max_response_bytes: 16 * 1024,
        max_concurrent_per_caller: 4,
    }
}

/// A server over 2000 requests with `limits` and an access audit under `dir`.
async fn serve(limits: QueryLimits, dir: &std::path::Path) -> (SocketAddr, Arc<QueryEngine>) {
    let store = TestStore::new();
    store.append_requests(&requests(base_ns(), 2000, "m"));
    let store = store as Arc<dyn StorageBackend>;
    let engine = Arc::new(
        QueryEngine::new(Arc::clone(&store))
            .with_access_audit(Arc::new(AccessAudit::for_data_dir(dir)))
            .with_limits(limits),
    );
    let state = ApiState {
        store,
        engine: Arc::clone(&engine),
        counters: Arc::new(Counters::new()),
        max_query_rows: 100_000,
        max_dimension_cardinality: 100,
        alerts: None,
        actions: None,
        reports: None,
    };
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, engine)
}

/// One HTTP/1.1 exchange; the status, the lowercase head and the body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

/// A request; `connection: close` unless `keep_alive` (as browsers and most clients send).
fn request_text(method: &str, path: &str, body: &str, keep_alive: bool) -> String {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    format!(
        "{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: {connection}\r\n\r\n{body}",
        body.len()
    )
}

async fn exchange(addr: SocketAddr, method: &str, path: &str, body: &str) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(request_text(method, path, body, false).as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

async fn query(addr: SocketAddr, sql: &str) -> Answer {
    let body = serde_json::json!({ "sql": sql }).to_string();
    exchange(addr, "POST", "/api/v1/query", &body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_attempts_are_refused_with_400_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, engine) = serve(small_limits(), dir.path()).await;
    let attempts = [
        "SELECT * FROM '/etc/passwd'",
        "CREATE EXTERNAL TABLE pw (line VARCHAR) STORED AS CSV LOCATION '/etc/passwd'",
        "COPY (SELECT * FROM requests) TO '/tmp/infersight-escape.csv'",
        "SELECT * FROM generate_series(1, 10)",
        "SET datafusion.execution.batch_size = 1",
    ];
    for sql in attempts {
        let answer = query(addr, sql).await;
        assert_eq!(answer.status, 400, "{sql}: {}", answer.body);
        let error: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
        assert!(error["error"]["message"].as_str().is_some(), "{sql}");
    }
    assert!(!std::path::Path::new("/tmp/infersight-escape.csv").exists());
    let audit = engine.access_audit().unwrap();
    let (records, _) = read_records(audit.path()).unwrap();
    assert_eq!(records.len(), attempts.len());
    assert!(records.iter().all(|record| record.outcome == "bad_request"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_attacks_at_once_end_within_their_limits_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, engine) = serve(small_limits(), dir.path()).await;
    let attacks = [
        CROSS_JOIN,
        "SELECT count(DISTINCT concat(a.request_id, b.request_id)) FROM requests a, requests b",
        "SELECT * FROM requests",
        "SELECT a.*, b.* FROM requests a, requests b ORDER BY a.e2e_ms - b.e2e_ms",
    ];
    let started = Instant::now();
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let sql = attacks[i % attacks.len()];
            tokio::spawn(async move { (sql, query(addr, sql).await) })
        })
        .collect();
    // the server answers its health check while they run
    tokio::time::sleep(Duration::from_millis(200)).await;
    let health_started = Instant::now();
    let health = exchange(addr, "GET", "/healthz", "").await;
    assert_eq!(health.status, 200);
    assert!(health_started.elapsed() < Duration::from_secs(5));
    let (mut refused, mut limited) = (0, 0);
    for task in tasks {
        let (sql, answer) = task.await.unwrap();
        match answer.status {
            429 => {
                assert!(answer.head.contains("retry-after: 1"), "{}", answer.head);
                assert!(answer.body.contains("max_concurrent_per_caller"));
                refused += 1;
            }
            400 => {
                assert!(
                    ["memory limit", "time limit", "response limit"]
                        .iter()
                        .any(|limit| answer.body.contains(limit)),
                    "{sql}: {}",
                    answer.body
                );
                limited += 1;
            }
            status => panic!("{sql}: {status} {}", answer.body),
        }
    }
    assert_eq!(refused + limited, 10);
    assert!(
        limited >= 4 && refused >= 1,
        "{limited} limited, {refused} refused"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    // a timed-out statement's task is aborted on the statements' threads: it stops a moment
    // after its caller got the error
    let deadline = Instant::now() + Duration::from_secs(5);
    while engine.query_counts().running > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(engine.query_counts().running, 0);
    let normal = query(
        addr,
        "SELECT model, count(*) AS n FROM requests GROUP BY model",
    )
    .await;
    assert_eq!(normal.status, 200, "{}", normal.body);
    let answer: serde_json::Value = serde_json::from_str(&normal.body).unwrap();
    assert_eq!(answer["rows"][0]["n"], 2000);
    assert_eq!(answer["row_count"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_stops_its_statement() {
    let dir = tempfile::tempdir().unwrap();
    let limits = QueryLimits {
        timeout: Duration::from_secs(120),
        ..small_limits()
    };
    let (addr, engine) = serve(limits, dir.path()).await;
    let metrics = tokio::runtime::Handle::current().metrics();
    let tasks_before = metrics.num_alive_tasks();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let body = serde_json::json!({ "sql": CROSS_JOIN }).to_string();
    stream
        .write_all(request_text("POST", "/api/v1/query", &body, true).as_bytes())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.query_counts().running == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(engine.query_counts().running, 1, "the statement started");
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(stream);
    // far sooner than its 120 s timeout, the statement is dropped and counted as cancelled
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.query_counts().running > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let counts = engine.query_counts();
    assert_eq!((counts.running, counts.cancelled), (0, 1), "{counts:?}");
    assert_eq!(counts.timed_out, 0);
    // the tasks DataFusion spawned for it and the connection's task are gone too
    while metrics.num_alive_tasks() > tasks_before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        metrics.num_alive_tasks(),
        tasks_before,
        "tasks left running"
    );
    // and the server still answers
    let answer = query(addr, "SELECT count(*) AS n FROM requests").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}
