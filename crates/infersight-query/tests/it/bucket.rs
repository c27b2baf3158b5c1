//! SQL over segments in a bucket: a simulated scenario is ingested once into a store whose
//! segments go to a bucket and once into a plain local store; a second node with an empty data
//! directory opens the bucket, and its query engine (the bucket's object store registered in
//! DataFusion's runtime) answers a row count and GROUP BYs exactly as the local store does, and
//! after a restart reads every segment from its disk cache.
//! On a `file://` bucket always; on real S3 (SeaweedFS, feature `s3`) when `weed` is on PATH or
//! `INFERSIGHT_TEST_S3` is set (by `.ci/run`).

use std::path::Path;
use std::sync::Arc;

use infersight_model::TableBatch;
use infersight_model::mapping::AttributeMapper;
use infersight_query::{OutputFormat, QueryEngine};
use infersight_sim::{MemorySink, Scenario, SimConfig, Simulator};
use infersight_store::{RemoteOptions, StorageBackend, Store, StoreOptions};

use crate::support::scalar;

/// `lora_kv_regression`, 4 workers at 5 requests/s for 20 minutes, as the table batches of each
/// trace export (requests, spans, tokens).
pub(crate) fn simulated_exports() -> Vec<Vec<TableBatch>> {
    let mut config = SimConfig::new(Scenario::LoraKvRegression);
    config.seed = 3;
    config.workers = 4;
    config.rate_per_s = 5.0;
    config.duration_s = 1200.0;
    let mut sink = MemorySink::default();
    Simulator::new(config).unwrap().run(&mut sink).unwrap();
    let mapper = AttributeMapper::default();
    sink.traces
        .iter()
        .map(|export| {
            infersight_ingest::traces_to_batches(export, &mapper)
                .unwrap()
                .batches
        })
        .collect()
}

pub(crate) fn store_options(
    data: &Path,
    bucket: Option<infersight_store::BucketConfig>,
    node: &str,
) -> StoreOptions {
    let mut options = StoreOptions::new(data);
    options.remote = bucket.map(|bucket| RemoteOptions::new(bucket, node));
    options
}

/// Appends every export, flushing after every tenth (several segments per table and hour), then
/// closes the store (the last flush).
pub(crate) fn ingest(options: StoreOptions, exports: &[Vec<TableBatch>]) {
    let store = Store::open(options).unwrap();
    for (index, batches) in exports.iter().enumerate() {
        store.append(batches).unwrap();
        if index % 10 == 9 {
            store.flush().unwrap();
        }
    }
    store.close().unwrap();
}

pub(crate) const QUERIES: [&str; 4] = [
    "SELECT count(*) FROM requests",
    "SELECT model, count(*) AS n, round(avg(ttft_ms), 6) AS ttft FROM requests GROUP BY model ORDER BY model",
    "SELECT worker, lora_adapters, count(*) AS n, max(e2e_ms) AS worst FROM requests GROUP BY worker, lora_adapters ORDER BY worker, lora_adapters",
    "SELECT name, count(*) AS n FROM spans GROUP BY name ORDER BY name",
];

pub(crate) async fn answers(engine: &QueryEngine) -> Vec<String> {
    answers_to(engine, &QUERIES).await
}

/// The CSV answer of each of `queries`.
pub(crate) async fn answers_to(engine: &QueryEngine, queries: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for &sql in queries {
        let output = engine
            .sql(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        out.push(output.render(OutputFormat::Csv));
    }
    out
}

/// Ingests the scenario into `bucket` (node `ingest-1`) and into a local store, then compares
/// the answers of a second node that only has the bucket with the local store's.
async fn bucket_answers_like_local_disk(bucket: infersight_store::BucketConfig) {
    let exports = simulated_exports();
    let dir = tempfile::tempdir().unwrap();
    let (local, ingest_dir, query_dir) = (
        dir.path().join("local"),
        dir.path().join("ingest"),
        dir.path().join("query"),
    );
    ingest(store_options(&local, None, "local"), &exports);
    ingest(
        store_options(&ingest_dir, Some(bucket.clone()), "ingest-1"),
        &exports,
    );

    let local_engine = QueryEngine::new(Arc::new(
        Store::open(store_options(&local, None, "local")).unwrap(),
    ));
    // the query node keeps what it reads on disk too
    let query_options = || {
        let mut options = store_options(&query_dir, Some(bucket.clone()), "query-1");
        if let Some(remote) = options.remote.as_mut() {
            remote.disk_cache_bytes = 256 << 20;
        }
        options
    };
    let query_store = Store::open(query_options()).unwrap();
    assert!(
        query_store
            .segments(infersight_model::Table::Requests)
            .iter()
            .all(|s| s.location.is_some()),
        "the query node reads every segment from the bucket"
    );
    let query_store = Arc::new(query_store);
    let bucket_engine = QueryEngine::new(Arc::clone(&query_store) as Arc<dyn StorageBackend>);

    let rows: u64 = scalar(&local_engine, QUERIES[0]).await.parse().unwrap();
    assert!(rows > 4000, "{rows} requests simulated");
    let expected = answers(&local_engine).await;
    let got = answers(&bucket_engine).await;
    for ((sql, want), got) in QUERIES.iter().zip(&expected).zip(&got) {
        assert_eq!(got, want, "{sql}");
    }
    let scanned = bucket_engine
        .last_scan_stats(infersight_model::Table::Spans)
        .unwrap();
    assert!(scanned.segments_scanned > 1, "{scanned:?}");
    assert_eq!(scanned.memtable_rows, 0);

    // the engine read the segments through the read cache: the first pass fetched each one
    // whole, the second reads them from memory, and the answers stay the same
    let cache = |store: &Store| store.stats().bucket_cache.expect("the cache is on");
    let first = cache(&query_store);
    assert!(first.misses > 0 && first.cached_bytes > 0, "{first:?}");
    assert!(first.cached_bytes <= first.capacity_bytes, "{first:?}");
    assert_eq!(answers(&bucket_engine).await, expected);
    let second = cache(&query_store);
    assert_eq!(second.misses, first.misses, "{first:?} then {second:?}");
    assert!(second.hits > first.hits, "{first:?} then {second:?}");
    assert!(second.disk_bytes > 0, "{second:?}");

    // restarted, the node reads every segment from its disk, none from the bucket
    drop(bucket_engine);
    let Ok(query_store) = Arc::try_unwrap(query_store) else {
        panic!("the engine is gone, and with it every other holder of the store")
    };
    query_store.close().unwrap();
    let restarted = Arc::new(Store::open(query_options()).unwrap());
    let engine = QueryEngine::new(Arc::clone(&restarted) as Arc<dyn StorageBackend>);
    assert_eq!(answers(&engine).await, expected);
    let third = cache(&restarted);
    assert_eq!(third.misses, 0, "{third:?}");
    assert!(third.disk_hits > 0, "{third:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_bucket_answers_like_local_disk() {
    let dir = tempfile::tempdir().unwrap();
    bucket_answers_like_local_disk(infersight_store::BucketConfig {
        url: format!("file://{}/bucket/prefix", dir.path().display()),
        ..Default::default()
    })
    .await;
}

#[cfg(feature = "s3")]
mod s3 {
    use infersight_testkit::seaweedfs::{SeaweedFs, free_port};

    use super::*;

    fn config(endpoint: String, url: &str) -> infersight_store::BucketConfig {
        infersight_store::BucketConfig {
            url: url.to_string(),
            endpoint: Some(endpoint),
            region: Some("us-east-1".into()),
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
            allow_http: true,
            virtual_hosted_style: false,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn seaweedfs_answers_like_local_disk() {
        let Some(server) = tokio::task::spawn_blocking(|| SeaweedFs::start("infersight"))
            .await
            .unwrap()
        else {
            return;
        };
        bucket_answers_like_local_disk(config(server.endpoint(), "s3://infersight/cluster-a"))
            .await;
    }

    #[test]
    fn an_unreachable_bucket_is_a_clear_error_in_seconds() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("http://127.0.0.1:{}", free_port());
        let started = std::time::Instant::now();
        let options = store_options(
            dir.path(),
            Some(config(endpoint.clone(), "s3://infersight/x")),
            "n1",
        );
        let message = match Store::open(options) {
            Ok(_) => panic!("a store opened on a closed port"),
            Err(err) => err.to_string(),
        };
        assert!(
            message.contains(&format!(
                "segment storage s3://infersight/x (endpoint {endpoint})"
            )),
            "{message}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{:?}",
            started.elapsed()
        );
    }
}
