//! `[storage]` and `--storage`: `infersight serve` with its segments in a bucket. A small
//! simulated fleet is sent over OTLP/HTTP once to a server on local disk and once to a server
//! whose segments go to a bucket; after it stops (the last flush uploads), a second server with
//! an empty data directory on the same bucket answers POST /api/v1/query with the local run's
//! counts and groups. On a `file://` bucket always; on SeaweedFS with the `cluster` feature when
//! `weed` is on PATH or `INFERSIGHT_TEST_S3` is set (`.ci/run`). Bad URLs and an unreachable
//! bucket end the command with one line and an exit code.

use std::path::Path;

use crate::support::{Server, rows, run};

const BASE: &str = "[store]\nfsync = \"never\"\nflush_interval = \"2s\"\n[server]\nmaintenance_interval = \"1s\"\n";

const QUERIES: [&str; 5] = [
    "SELECT count(*) AS n FROM requests",
    "SELECT count(*) AS n FROM spans",
    "SELECT count(*) AS n FROM logs",
    "SELECT model, worker, count(*) AS n, max(e2e_ms) AS worst FROM requests GROUP BY model, worker ORDER BY model, worker",
    "SELECT name, count(*) AS n FROM spans GROUP BY name ORDER BY name",
];

/// `lora_kv_regression` for 2 simulated minutes, 4 workers at 20 requests/s, sent to `server`.
fn simulate_into(server: &Server) -> serde_json::Value {
    let url = format!("http://{}", server.http);
    let out = run(&[
        "simulate",
        "--scenario",
        "lora_kv_regression",
        "--seed",
        "5",
        "--duration",
        "2m",
        "--workers",
        "4",
        "--rate",
        "20",
        "--arrivals",
        "poisson",
        "--format",
        "json",
        "--quiet",
        "--otlp",
        &url,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    answer["summary"].clone()
}

type Rows = Vec<Vec<(String, serde_json::Value)>>;

fn answers(server: &Server) -> Vec<Rows> {
    QUERIES.iter().map(|sql| rows(&server.sql(sql))).collect()
}

/// Segment files under a data directory (none when they all went to the bucket).
fn local_segments(data: &Path) -> usize {
    fn walk(dir: &Path, found: &mut usize) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                *found += 1;
            }
        }
    }
    let mut found = 0;
    walk(&data.join("segments"), &mut found);
    found
}

/// The whole check, `storage` being a `[storage]` section without `node`, `env` the extra
/// environment of the ingesting and of the second node.
fn serve_on_a_bucket_answers_like_local_disk(storage: &str, env: [&[(&str, &str)]; 2]) {
    let dir = tempfile::tempdir().unwrap();
    let local = Server::start(&dir.path().join("local"), BASE);
    let summary = simulate_into(&local);
    let expected = answers(&local);
    let stored = local.scalar(QUERIES[0]);
    local.stop();
    assert!(
        local_segments(&dir.path().join("local")) > 0,
        "the local run keeps its segments on disk"
    );
    let requests = summary["requests"].as_i64().unwrap();
    assert!(requests > 1000, "{summary}");
    assert_eq!(stored, requests, "every request sent is stored");

    let ingest_data = dir.path().join("ingest");
    let ingest = Server::start_with(
        &ingest_data,
        &format!("{BASE}[storage]\n{storage}node = \"ingest-1\"\n"),
        env[0],
    );
    simulate_into(&ingest);
    assert_eq!(
        answers(&ingest),
        expected,
        "the ingesting node, while it runs"
    );
    let log = ingest.stop();
    assert!(
        ["file://", "s3://"]
            .iter()
            .any(|scheme| log.contains(&format!("acknowledged is flushed to {scheme}"))),
        "{log}"
    );
    assert_eq!(
        local_segments(&ingest_data),
        0,
        "every segment went to the bucket: {log}"
    );

    let query_data = dir.path().join("query");
    let query = Server::start_with(
        &query_data,
        &format!("{BASE}[storage]\n{storage}node = \"query-1\"\n"),
        env[1],
    );
    assert_eq!(
        answers(&query),
        expected,
        "a second node with an empty data directory"
    );
    query.stop();
}

#[test]
fn serve_on_a_file_bucket_answers_like_local_disk() {
    let bucket = tempfile::tempdir().unwrap();
    serve_on_a_bucket_answers_like_local_disk(
        &format!(
            "url = \"file://{}/bucket/prefix\"\n",
            bucket.path().display()
        ),
        [&[], &[]],
    );
}

/// `infersight` with `args` and `INFERSIGHT__STORAGE__NODE=node`; answers stdout, failing the
/// test when it does not exit 0.
fn run_as(node: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(crate::support::bin())
        .args(args)
        .env_remove("INFERSIGHT_LOG")
        .env("INFERSIGHT__STORAGE__NODE", node)
        .output()
        .unwrap();
    crate::support::ok(&out, &args.join(" "))
}

/// `ingest --storage` puts the segments of simulated files in the bucket, and `query --storage`
/// on another, empty data directory answers what `query` answers over the same files ingested
/// onto local disk.
#[test]
fn ingest_and_query_on_a_file_bucket_answer_like_local_disk() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    run_as(
        "sim",
        &[
            "simulate",
            "--scenario",
            "two_causes",
            "--duration",
            "2m",
            "--workers",
            "4",
            "--rate",
            "20",
            "--quiet",
            "--out",
            sim.to_str().unwrap(),
        ],
    );
    let files: Vec<String> = ["traces.jsonl", "logs.jsonl", "metrics.jsonl"]
        .iter()
        .map(|f| sim.join(f).to_string_lossy().into_owned())
        .collect();
    let bucket = format!("file://{}/bucket", dir.path().display());
    let (local, ingest, query) = (
        dir.path().join("local"),
        dir.path().join("ingest"),
        dir.path().join("query"),
    );
    let ingest_into = |data: &Path, storage: Option<&str>| {
        let mut args = vec!["ingest", "--quiet", "--data", data.to_str().unwrap()];
        args.extend(storage.map(|url| ["--storage", url]).into_iter().flatten());
        args.extend(files.iter().map(String::as_str));
        run_as("ingest-1", &args);
    };
    ingest_into(&local, None);
    ingest_into(&ingest, Some(&bucket));
    assert_eq!(
        local_segments(&ingest),
        0,
        "every segment went to the bucket"
    );
    for sql in QUERIES {
        let want = run_as(
            "local",
            &[
                "query",
                "--format",
                "csv",
                "--data",
                local.to_str().unwrap(),
                sql,
            ],
        );
        let got = run_as(
            "query-1",
            &[
                "query",
                "--format",
                "csv",
                "--data",
                query.to_str().unwrap(),
                "--storage",
                &bucket,
                sql,
            ],
        );
        assert!(want.lines().count() > 1, "{sql}: {want}");
        assert_eq!(got, want, "{sql}");
    }
}

/// `serve` with `--storage URL` (`--data` and free ports); answers the exit code and stderr.
fn serve_with_storage(data: &Path, url: &str, config: Option<&Path>) -> (Option<i32>, String) {
    let mut args = vec![
        "serve",
        "--otlp-grpc-port",
        "0",
        "--otlp-http-port",
        "0",
        "--api-port",
        "0",
        "--data",
        data.to_str().unwrap(),
        "--storage",
        url,
    ];
    if let Some(config) = config {
        args.extend(["--config", config.to_str().unwrap()]);
    }
    let out = run(&args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

#[test]
fn an_unknown_storage_scheme_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = serve_with_storage(&dir.path().join("data"), "gs://bucket/x", None);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("storage.url") && stderr.contains("s3://bucket/prefix or file:///dir"),
        "{stderr}"
    );
}

#[test]
fn a_file_bucket_that_cannot_be_created_is_one_line_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let url = format!("file://{}/bucket", blocker.display());
    let (code, stderr) = serve_with_storage(&dir.path().join("data"), &url, None);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("opening the store"), "{stderr}");
    assert!(stderr.contains(&url), "{stderr}");
}

#[cfg(not(feature = "cluster"))]
#[test]
fn an_s3_url_without_the_cluster_feature_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = serve_with_storage(&dir.path().join("data"), "s3://bucket/x", None);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no S3 support"), "{stderr}");
}

#[cfg(feature = "cluster")]
mod s3 {
    use infersight_testkit::seaweedfs::{SeaweedFs, free_port};

    use super::*;

    const KEYS: &str =
        "region = \"us-east-1\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n";

    #[test]
    fn serve_on_seaweedfs_answers_like_local_disk() {
        let Some(server) = SeaweedFs::start("infersight") else {
            return;
        };
        // credentials from the standard AWS variables on one node, from ours on the other
        serve_on_a_bucket_answers_like_local_disk(
            &format!(
                "url = \"s3://infersight/cluster-a\"\nendpoint = \"{}\"\n",
                server.endpoint()
            ),
            [
                &[
                    ("AWS_ACCESS_KEY_ID", "test"),
                    ("AWS_SECRET_ACCESS_KEY", "test"),
                    ("AWS_REGION", "us-east-1"),
                ],
                &[
                    ("INFERSIGHT__STORAGE__ACCESS_KEY_ID", "test"),
                    ("INFERSIGHT__STORAGE__SECRET_ACCESS_KEY", "test"),
                    ("INFERSIGHT__STORAGE__REGION", "us-east-1"),
                ],
            ],
        );
    }

    #[test]
    fn an_unreachable_bucket_is_one_line_and_exit_1_in_seconds() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("http://127.0.0.1:{}", free_port());
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!("[storage]\nendpoint = \"{endpoint}\"\n{KEYS}"),
        )
        .unwrap();
        let started = std::time::Instant::now();
        let (code, stderr) =
            serve_with_storage(&dir.path().join("data"), "s3://infersight/x", Some(&config));
        // before it: the S3 client's retries, logged at serve's default level (info)
        let last = stderr.lines().last().unwrap_or_default();
        assert_eq!(code, Some(1), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(stderr.matches("infersight: error:").count(), 1, "{stderr}");
        assert!(
            last.starts_with("infersight: error: opening the store: segment storage")
                && last.contains(&format!("s3://infersight/x (endpoint {endpoint})")),
            "{stderr}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{:?}",
            started.elapsed()
        );
    }
}
