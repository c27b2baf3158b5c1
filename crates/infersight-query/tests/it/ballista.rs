//! Statements on a Ballista cluster (feature `ballista`): a scheduler and two executors embedded
//! in this process on 127.0.0.1, a query node over a `file://` bucket whose engine routes every
//! plan over the bucket's segments to the cluster (threshold 0). Its answers must equal those of
//! an engine running the same plans here, every plan must have gone to the cluster (a plan the
//! scheduler or an executor could not decode, `json_get` included, would fall back and be
//! counted), scan statistics stay on the query node, plans with a window function or over
//! memtable rows run here, and an unreachable or silent scheduler, or one without executors,
//! gives the same answers through the counted fallback within the route's timeout.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use infersight_model::Table;
use infersight_query::QueryEngine;
use infersight_query::ballista::{
    BallistaRoute, ExecutorSettings, RouteCounts, RouteSettings, SchedulerSettings, run_executor,
    run_scheduler,
};
use infersight_store::{StorageBackend, Store};
use infersight_testkit::seaweedfs::free_port;

use crate::bucket::{QUERIES, answers_to, ingest, simulated_exports, store_options};

/// `QUERIES` and what else a cluster must get right: exact percentiles, time buckets, the
/// `json_get` UDF, a nested function (`array_element`), a join.
fn statements() -> Vec<&'static str> {
    let mut all = QUERIES.to_vec();
    all.extend([
        "SELECT model, percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms) AS p99 FROM requests GROUP BY model ORDER BY model",
        "SELECT date_bin(INTERVAL '5 minutes', ts) AS bucket, count(*) AS n, round(avg(ttft_ms), 6) AS ttft FROM requests GROUP BY 1 ORDER BY 1",
        "SELECT json_get(attrs, 'service.name') AS service, count(*) AS n FROM spans GROUP BY 1 ORDER BY 1",
        "SELECT make_array(model, worker)[2] AS worker, count(*) AS n FROM requests GROUP BY 1 ORDER BY 1",
        "SELECT r.worker, count(*) AS n FROM requests r JOIN spans s ON r.trace_id = s.trace_id GROUP BY r.worker ORDER BY r.worker",
    ]);
    all
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// Waits until something accepts connections on `port`.
fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(local(port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn route(scheduler_port: u16, store: &Store) -> Arc<BallistaRoute> {
    route_within(scheduler_port, store, Duration::from_secs(120))
}

fn route_within(scheduler_port: u16, store: &Store, timeout: Duration) -> Arc<BallistaRoute> {
    Arc::new(BallistaRoute::new(
        RouteSettings {
            scheduler: format!("127.0.0.1:{scheduler_port}"),
            min_bytes: 0,
            min_segments: 0,
            timeout,
        },
        store.remote_segments().as_ref(),
    ))
}

/// A statement routed to the scheduler at `port` with the route's `timeout` answers `expected`
/// here within `bound` (well under Ballista's own 20 s timeouts), counted as one fallback.
async fn falls_back_within(
    store: &Arc<Store>,
    port: u16,
    timeout: Duration,
    bound: Duration,
    expected: &[String],
) {
    let route = route_within(port, store, timeout);
    let engine =
        QueryEngine::new(Arc::clone(store) as Arc<dyn StorageBackend>).with_route(route.clone());
    let started = Instant::now();
    let sql = statements()[0];
    assert_eq!(answers_to(&engine, &[sql]).await, expected[..1]);
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
    assert_eq!(route.counts().fallbacks, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plans_over_the_bucket_run_on_the_cluster_and_answer_as_here() {
    let exports = simulated_exports();
    let dir = tempfile::tempdir().unwrap();
    let bucket = infersight_store::BucketConfig {
        url: format!("file://{}/bucket/prefix", dir.path().display()),
        ..Default::default()
    };
    ingest(
        store_options(&dir.path().join("ingest"), Some(bucket.clone()), "ingest-1"),
        &exports,
    );
    let store = Arc::new(
        Store::open(store_options(
            &dir.path().join("query"),
            Some(bucket),
            "query-1",
        ))
        .unwrap(),
    );

    let scheduler_port = free_port();
    let remote = store.remote_segments();
    let settings = SchedulerSettings {
        bind: local(scheduler_port),
        external_host: None,
    };
    let scheduler = tokio::spawn(run_scheduler(settings, remote.clone()));
    tokio::task::spawn_blocking(move || wait_listening(scheduler_port))
        .await
        .unwrap();
    let mut executors = Vec::new();
    for index in 0..2 {
        let settings = ExecutorSettings {
            scheduler_host: "127.0.0.1".into(),
            scheduler_port,
            bind: local(free_port()),
            grpc_port: free_port(),
            external_host: None,
            concurrency: 2,
            work_dir: dir.path().join(format!("executor-{index}")),
        };
        executors.push(tokio::spawn(run_executor(settings, remote.clone())));
    }

    let here = QueryEngine::new(Arc::clone(&store) as Arc<dyn StorageBackend>);
    let cluster_route = route(scheduler_port, &store);
    let cluster = QueryEngine::new(Arc::clone(&store) as Arc<dyn StorageBackend>)
        .with_route(cluster_route.clone());
    let statements = statements();
    let expected = answers_to(&here, &statements).await;
    assert!(
        expected.iter().all(|answer| answer.lines().count() > 1),
        "every statement has rows: {expected:?}"
    );
    let got = answers_to(&cluster, &statements).await;
    for ((sql, want), got) in statements.iter().zip(&expected).zip(&got) {
        assert_eq!(got, want, "{sql}");
    }
    assert_eq!(
        cluster_route.counts(),
        RouteCounts {
            submitted: statements.len() as u64,
            in_process: 0,
            fallbacks: 0
        },
        "every plan over the bucket ran on the cluster"
    );
    // the query node planned the scans: their statistics are its own
    let scanned = cluster.last_scan_stats(Table::Spans).unwrap();
    assert!(scanned.segments_scanned > 1, "{scanned:?}");

    // a window function: here (Ballista 55 loses the order of a window's partitions)
    let window = "SELECT worker, e2e_ms, rank() OVER (PARTITION BY worker ORDER BY e2e_ms DESC) AS r FROM requests ORDER BY worker, r, e2e_ms LIMIT 20";
    assert_eq!(
        answers_to(&cluster, &[window]).await,
        answers_to(&here, &[window]).await
    );
    assert_eq!(cluster_route.counts().in_process, 1);

    // rows only this node holds: the plan runs here, and sees them
    let unflushed = &exports[..3];
    store.append(&unflushed[0]).unwrap();
    let count = "SELECT count(*) FROM requests";
    let with_memtable = answers_to(&cluster, &[count]).await;
    assert_eq!(with_memtable, answers_to(&here, &[count]).await);
    assert_ne!(
        with_memtable[0], expected[0],
        "the memtable rows are counted"
    );
    assert_eq!(cluster_route.counts().in_process, 2);
    assert_eq!(cluster_route.counts().submitted, statements.len() as u64);

    // a scheduler nobody runs: the same answers, here, each counted as a fallback
    let unreachable = route(free_port(), &store);
    let fallback = QueryEngine::new(Arc::clone(&store) as Arc<dyn StorageBackend>)
        .with_route(unreachable.clone());
    store.flush().unwrap();
    let after_flush = answers_to(&here, &statements[..2]).await;
    assert_eq!(answers_to(&fallback, &statements[..2]).await, after_flush);
    assert_eq!(
        unreachable.counts(),
        RouteCounts {
            submitted: 0,
            in_process: 0,
            fallbacks: 2
        }
    );

    // a scheduler that takes the connection and never answers: given up on after the route's
    // timeout, the statement runs here
    let silent = std::net::TcpListener::bind(local(0)).unwrap();
    let port = silent.local_addr().unwrap().port();
    falls_back_within(
        &store,
        port,
        Duration::from_secs(1),
        Duration::from_secs(10),
        &after_flush,
    )
    .await;
    drop(silent);

    // a scheduler with no executor: the job never runs, the route gives up on it
    let lonely_port = free_port();
    let settings = SchedulerSettings {
        bind: local(lonely_port),
        external_host: None,
    };
    let lonely = tokio::spawn(run_scheduler(settings, remote.clone()));
    tokio::task::spawn_blocking(move || wait_listening(lonely_port))
        .await
        .unwrap();
    falls_back_within(
        &store,
        lonely_port,
        Duration::from_secs(2),
        Duration::from_secs(15),
        &after_flush,
    )
    .await;
    lonely.abort();

    for executor in executors {
        executor.abort();
    }
    scheduler.abort();
}
