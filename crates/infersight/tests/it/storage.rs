//! `[storage]` and `--storage`: `infersight serve` with its segments in a bucket. A small
//! simulated fleet is sent over OTLP/HTTP once to a server on local disk and once to a server
//! whose segments go to a bucket; after it stops (the last flush uploads), a second server with
//! an empty data directory on the same bucket answers POST /api/v1/query with the local run's
//! counts and groups. On a `file://` bucket always; on SeaweedFS with the `cluster` feature when
//! `weed` is on PATH or `INFERSIGHT_TEST_S3` is set (`.ci/run`). Bad URLs and an unreachable
//! bucket end the command with one line and an exit code.

use std::path::Path;

use prost::Message;

use crate::support::{Server, request_spans, rows, run};

pub(crate) const BASE: &str = "[store]\nfsync = \"never\"\nflush_interval = \"2s\"\n[server]\nmaintenance_interval = \"1s\"\n";

pub(crate) const QUERIES: [&str; 5] = [
    "SELECT count(*) AS n FROM requests",
    "SELECT count(*) AS n FROM spans",
    "SELECT count(*) AS n FROM logs",
    "SELECT model, worker, count(*) AS n, max(e2e_ms) AS worst FROM requests GROUP BY model, worker ORDER BY model, worker",
    "SELECT name, count(*) AS n FROM spans GROUP BY name ORDER BY name",
];

/// `lora_kv_regression` for 2 simulated minutes, 4 workers at 20 requests/s, sent to `server`.
fn simulate_into(server: &Server) -> serde_json::Value {
    simulate_scenario_into(server, "lora_kv_regression", "5")
}

/// `scenario` with `seed` for 2 simulated minutes, 4 workers at 20 requests/s, sent to `server`.
pub(crate) fn simulate_scenario_into(
    server: &Server,
    scenario: &str,
    seed: &str,
) -> serde_json::Value {
    let url = format!("http://{}", server.http);
    let out = run(&[
        "simulate",
        "--scenario",
        scenario,
        "--seed",
        seed,
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

pub(crate) type Rows = Vec<Vec<(String, serde_json::Value)>>;

pub(crate) fn answers(server: &Server) -> Vec<Rows> {
    QUERIES.iter().map(|sql| rows(&server.sql(sql))).collect()
}

/// Segment files under a data directory (none when they all went to the bucket).
fn local_segments(data: &Path) -> usize {
    local_segments_under(&data.join("segments"))
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
/// onto local disk; `store migrate --to` moves that local store into a bucket where every node,
/// and the store itself, answers the same.
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
    let mut wanted = Vec::new();
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
        wanted.push(want);
    }

    // `store migrate` moves the local store into another bucket, committed under its node name
    let moved = format!("file://{}/moved", dir.path().display());
    let local_data = local.to_str().unwrap();
    let migrate = ["store", "migrate", "--data", local_data, "--to", &moved];
    let report: serde_json::Value = serde_json::from_str(run_as("local", &migrate).trim()).unwrap();
    assert_eq!(report["node"], "local", "{report}");
    assert!(
        report["segments"].as_u64().is_some_and(|n| n >= 3),
        "{report}"
    );
    // a second run is refused, and writes nothing twice
    let again = std::process::Command::new(crate::support::bin())
        .args(migrate)
        .env("INFERSIGHT__STORAGE__NODE", "local")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("already has segments"), "{stderr}");
    // a new node on the bucket, and then the store itself on it, answer as before the move;
    // the store's first open on the bucket removes its local copies
    for (node, data) in [
        ("query-2", dir.path().join("fresh")),
        ("local", local.clone()),
    ] {
        for (sql, want) in QUERIES.iter().zip(&wanted) {
            let got = run_as(
                node,
                &[
                    "query",
                    "--format",
                    "csv",
                    "--data",
                    data.to_str().unwrap(),
                    "--storage",
                    &moved,
                    sql,
                ],
            );
            assert_eq!(&got, want, "{node}: {sql}");
        }
    }
    assert_eq!(local_segments(&local), 0);
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

/// Polls `check` every 250 ms until it holds or `limit` passes; answers whether it held.
pub(crate) fn eventually(limit: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// The catalog log entries (JSON) a node committed that remove segments.
fn removals_by(bucket: &Path, node: &str) -> usize {
    let dir = bucket.join("catalog/log");
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .filter_map(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .filter(|entry| entry["node"] == node)
        .filter(|entry| {
            (entry["actions"].as_array().into_iter().flatten())
                .any(|action| action["op"] == "remove_segment")
        })
        .count()
}

/// The roles on one bucket: two ingest nodes each receive part of the fleet, a query node
/// started before any data answers what both flushed (it follows the catalog log), a compact
/// node merges their segments meanwhile; the answers equal one node that received everything.
/// `fenced`: the bucket has leases (S3), so merges are committed under the `compactor` lease.
fn roles_on_a_bucket_answer_like_one_node(
    storage: &str,
    bucket_dir: Option<&Path>,
    fenced: bool,
    env: &[(&str, &str)],
) {
    let dir = tempfile::tempdir().unwrap();
    let local = Server::start(&dir.path().join("local"), BASE);
    simulate_scenario_into(&local, "lora_kv_regression", "5");
    simulate_scenario_into(&local, "healthy", "6");
    let expected = answers(&local);
    local.stop();

    let node = |name: &str, role: &str, log: &str| {
        let mut env = env.to_vec();
        env.push(("INFERSIGHT_LOG", log));
        // a merge as soon as a table-hour has two segments (one flush of each ingest node)
        let base = BASE.replace("[server]", "compaction_min_segments = 2\n[server]");
        Server::start_with(
            &dir.path().join(name),
            &format!(
                "{base}role = \"{role}\"\n[storage]\n{storage}node = \"{name}\"\ngc_grace = \"1m\"\n"
            ),
            &env,
        )
    };
    let query = node("query-1", "query", "warn");
    // its merges are logged at info
    let compact = node("compact-1", "compact", "info");
    let ingest_a = node("ingest-1", "ingest", "warn");
    let ingest_b = node("ingest-2", "ingest", "warn");
    // the query and compact nodes open no OTLP listener; the ingest nodes answer no query
    assert_eq!(query.http.port(), 0);
    assert_eq!(compact.grpc.port(), 0);
    let body = serde_json::json!({ "sql": QUERIES[0] }).to_string();
    let (status, _, answer) = crate::support::post(
        &format!("http://{}/api/v1/query", ingest_a.api),
        "application/json",
        body.as_bytes(),
        false,
    );
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status, 404, "{answer}");
    assert!(answer.contains("`ingest` role"), "{answer}");
    assert_eq!(ingest_b.get("/healthz").0, 200);

    simulate_scenario_into(&ingest_a, "lora_kv_regression", "5");
    simulate_scenario_into(&ingest_b, "healthy", "6");
    let mut last = Vec::new();
    let fresh = eventually(std::time::Duration::from_secs(60), || {
        last = answers(&query);
        last == expected
    });
    assert!(
        fresh,
        "the query node never caught up: {last:?}\nexpected {expected:?}"
    );
    // several flushes of two nodes per table and hour: the compactor merged some
    let merged = eventually(std::time::Duration::from_secs(60), || {
        compact.log().contains("bucket compaction finished")
    });
    assert!(merged, "no merge by the compact node: {}", compact.log());
    let merge = compact.log();
    assert!(merge.contains(&format!("fenced={fenced}")), "{merge}");
    if let Some(bucket) = bucket_dir {
        assert!(removals_by(bucket, "compact-1") > 0);
        assert_eq!(
            removals_by(bucket, "ingest-1") + removals_by(bucket, "query-1"),
            0
        );
    }
    // after every merge the query node still answers exactly once per row
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(answers(&query), expected, "after compaction");
    // the query node read its segments through the read cache, and says so on /metrics
    let (status, metrics) = query.get("/metrics");
    assert_eq!(status, 200);
    let hits = metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix("infersight_store_bucket_cache_reads_total{result=\"hit\"} ")
        })
        .and_then(|n| n.parse::<u64>().ok());
    assert!(hits.is_some_and(|n| n > 0), "{metrics}");
    let (log_a, log_b) = (ingest_a.stop(), ingest_b.stop());
    assert!(
        log_a.contains("role=ingest") && log_b.contains("otlp_grpc=127.0.0.1:"),
        "{log_a}"
    );
    assert_eq!(answers(&query), expected, "after the ingest nodes stopped");
    compact.stop();
    query.stop();
}

#[test]
fn roles_on_a_file_bucket_answer_like_one_node() {
    let bucket = tempfile::tempdir().unwrap();
    roles_on_a_bucket_answer_like_one_node(
        &format!("url = \"file://{}/b\"\n", bucket.path().display()),
        Some(&bucket.path().join("b")),
        false,
        &[],
    );
}

/// An ingest node SIGKILLed with acknowledged rows in its WAL (some already flushed at the
/// memtable limit, the rest not) restarts, replays only what the catalog log does not cover,
/// and the query node ends with every request once.
#[test]
fn a_killed_ingest_node_loses_and_doubles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("[storage]\nurl = \"file://{}/b\"\n", dir.path().display());
    let config = |role: &str, node: &str| {
        format!(
            "[store]\nfsync = \"always\"\nflush_interval = \"1h\"\nmemtable_max_rows = 1500\n\
             [server]\nmaintenance_interval = \"1s\"\nrole = \"{role}\"\n{storage}node = \"{node}\"\n"
        )
    };
    let query = Server::start(&dir.path().join("query"), &config("query", "query-1"));
    let ingest_dir = dir.path().join("ingest");
    let ingest = Server::start(&ingest_dir, &config("ingest", "ingest-1"));
    let summary = simulate_scenario_into(&ingest, "healthy", "9");
    let simulated = summary["requests"].as_i64().unwrap();
    // the flushes at the memtable limit reach the query node; once its count holds still over
    // three maintenance passes, the memtable holds less than the limit (else a pass flushes it)
    let mut last = -1;
    let settled = eventually(std::time::Duration::from_secs(30), || {
        let now = query.scalar(QUERIES[0]);
        let still = now > 0 && now == last;
        last = now;
        if still {
            std::thread::sleep(std::time::Duration::from_secs(3));
        }
        still && query.scalar(QUERIES[0]) == now
    });
    assert!(
        settled,
        "no flush reached the query node, or it never settled"
    );
    let before = query.scalar(QUERIES[0]);
    // five more requests, far below the limit: acknowledged, in the WAL, not flushed
    let tail = request_spans("tail", 5, 1_700_000_000_000_000_000).encode_to_vec();
    let (status, _, _) = ingest.post_otlp("/v1/traces", "application/x-protobuf", &tail, false);
    assert_eq!(status, 200);
    let sent = simulated + 5;
    assert!(
        before < sent,
        "everything was flushed ({before} of {sent}): nothing to replay"
    );
    ingest.kill();
    let restarted = Server::start(&ingest_dir, &config("ingest", "ingest-1"));
    // a clean stop flushes what the WAL gave back
    let restarted_log = restarted.stop();
    let unique = "SELECT count(DISTINCT request_id) AS n FROM requests";
    let whole = eventually(std::time::Duration::from_secs(30), || {
        query.scalar(QUERIES[0]) == sent
    });
    // what the restarted node and the query node said, should the rows not arrive
    assert!(
        whole,
        "{} of {sent} requests (before the kill: {before})\nrestarted ingest node:\n{restarted_log}\nquery node:\n{}",
        query.scalar(QUERIES[0]),
        query.log()
    );
    assert_eq!(query.scalar(unique), sent, "a request stored twice");
    query.stop();
}

/// The value of the `/metrics` series whose line starts with `series` (0 when absent).
fn metric(server: &Server, series: &str) -> f64 {
    let (status, text) = server.get("/metrics");
    assert_eq!(status, 200, "{text}");
    (text.lines())
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// `[store.tiers]` on a `file://` bucket: the simulated fleet's hours (in the past) go cold
/// with the next maintenance passes, into one segment per table-hour under the cold prefix, and
/// the node answers exactly as a single node on local disk; a second node reads the cold tier
/// alike. Without a bucket, `serve` refuses the section.
#[test]
fn tiers_on_a_file_bucket_move_old_hours_cold_and_answer_alike() {
    let dir = tempfile::tempdir().unwrap();
    let local = Server::start(&dir.path().join("local"), BASE);
    simulate_into(&local);
    let expected = answers(&local);
    local.stop();

    let bucket = dir.path().join("bucket");
    let tiers = "[store.tiers]\nwarm = \"1h\"\ncold_prefix = \"archive\"\n";
    let storage = format!("[storage]\nurl = \"file://{}\"\n", bucket.display());
    let config = format!("{BASE}{storage}node = \"all-1\"\n{tiers}");
    let tiered = Server::start(&dir.path().join("tiered"), &config);
    simulate_into(&tiered);
    let cold = "infersight_store_tier_segments{table=\"requests\",tier=\"cold\"}";
    let warm = "infersight_store_tier_segments{table=\"requests\",tier=\"warm\"}";
    let moved = eventually(std::time::Duration::from_secs(60), || {
        tiered.scalar("SELECT count(*) FROM requests") == expected_count(&expected)
            && metric(&tiered, cold) >= 1.0
            && metric(&tiered, warm) == 0.0
    });
    assert!(moved, "requests never all went cold: {}", tiered.log());
    assert_eq!(answers(&tiered), expected, "the node that moved them");
    tiered.stop();
    let archive = local_segments_under(&bucket.join("archive"));
    assert!(
        archive >= 3,
        "requests, spans and logs went cold: {archive}"
    );

    let reader = Server::start(
        &dir.path().join("reader"),
        &format!("{BASE}{storage}node = \"query-1\"\n"),
    );
    assert_eq!(
        answers(&reader),
        expected,
        "a second node reads the cold tier"
    );
    reader.stop();

    let file = dir.path().join("tiers-alone.toml");
    std::fs::write(&file, format!("{BASE}{tiers}")).unwrap();
    let out = run(&[
        "serve",
        "--config",
        file.to_str().unwrap(),
        "--data",
        dir.path().join("single").to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("store.tiers"), "{stderr}");
}

/// The count of the first answer (`SELECT count(*) AS n FROM requests`).
fn expected_count(expected: &[Rows]) -> i64 {
    expected[0][0][0].1.as_i64().unwrap()
}

/// Parquet files anywhere under `dir`.
fn local_segments_under(dir: &Path) -> usize {
    let mut found = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                found += 1;
            }
        }
    }
    found
}

#[test]
fn a_role_without_a_bucket_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = run(&["serve", "--role", "query", "--data", data.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("`query` needs storage.url"), "{stderr}");
    let out = run(&[
        "serve",
        "--role",
        "reader",
        "--data",
        data.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown role `reader`"), "{stderr}");
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

#[cfg(not(feature = "cluster"))]
#[test]
fn ballista_without_the_cluster_feature_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = run(&["ballista", "scheduler", "--data", data.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no Ballista support"), "{stderr}");
    // a query node configured for a cluster is refused at once, naming the key
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        "[query.ballista]\nscheduler = \"127.0.0.1:50050\"\n",
    )
    .unwrap();
    let out = run(&["validate", config.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("query.ballista.scheduler: this build has no Ballista support"),
        "{stderr}"
    );
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

    /// The same roles on SeaweedFS: the compact node merges under the bucket's `compactor`
    /// lease (If-Match), which a `file://` bucket does not have.
    #[test]
    fn roles_on_seaweedfs_answer_like_one_node() {
        let Some(server) = SeaweedFs::start("infersight") else {
            return;
        };
        roles_on_a_bucket_answer_like_one_node(
            &format!(
                "url = \"s3://infersight/roles\"\nendpoint = \"{}\"\n{KEYS}",
                server.endpoint()
            ),
            None,
            true,
            &[],
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
