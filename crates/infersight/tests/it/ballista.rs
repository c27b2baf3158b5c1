//! A cluster of processes on 127.0.0.1 with the query node's statements on Apache DataFusion
//! Ballista (the `cluster` feature): `infersight ballista scheduler`, two `infersight ballista
//! executor`s, and per scenario two ingest nodes, a query node whose `[query.ballista]` sends
//! every plan over the bucket's segments to the scheduler (threshold 0) and a compactor, on
//! SeaweedFS when it is there (`.ci/run`) and on a `file://` bucket otherwise. Each of
//! `lora_kv_regression`, `two_causes` and `healthy` is sent whole to one node and split across
//! the two ingest nodes (traces to one, metrics to the other); the query node's SQL answers and
//! its RCA verdict must equal the one node's, which must be the ground truth's, and its
//! `/metrics` must count plans run on the cluster and none fallen back. Then an executor is
//! killed while statements run, and the answers stay; then the scheduler: the query node still
//! answers, on its own, and counts the fallbacks.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::incidents_api::post_json;
use crate::rca::causes_match_truth;
use crate::storage::{BASE, answers, eventually};
use crate::support::{Server, bin, free_port, rows, simulate_to};

/// A `infersight ballista …` process, killed when dropped; its stderr collected.
struct Process {
    child: Child,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Process {
    fn start(args: &[&str], config: &Path) -> Process {
        let mut child = Command::new(bin())
            .arg("ballista")
            .args(args)
            .arg("--config")
            .arg(config)
            .env("INFERSIGHT_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting infersight ballista");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&stderr);
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Process { child, stderr }
    }

    fn log(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the `/metrics` series `series` (labels included), 0 when absent.
fn series(server: &Server, series: &str) -> f64 {
    let (status, text) = server.get("/metrics");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{series} ")))
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0)
}

/// What must not differ between two RCA answers over the same data: the verdict and its causes,
/// their scores to 1e-9 (the cluster sums partitions in another order, so last digits move).
fn assert_same_verdict(got: &Value, expected: &Value, context: &str) {
    assert_eq!(got["verdict"], expected["verdict"], "{context}");
    let causes = |rca: &Value| rca["root_causes"].as_array().cloned().unwrap_or_default();
    let (got_causes, expected_causes) = (causes(got), causes(expected));
    assert_eq!(got_causes.len(), expected_causes.len(), "{context}");
    for (a, b) in got_causes.iter().zip(&expected_causes) {
        for key in ["dimensions", "evidence", "rank"] {
            assert_eq!(a[key], b[key], "{key}: {context}");
        }
        for key in ["score", "explained_fraction"] {
            let (x, y) = (a[key].as_f64().unwrap(), b[key].as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
                "{key} {x} vs {y}: {context}"
            );
        }
    }
}

fn wait_listening(port: u16, what: &Process) {
    let listening = eventually(Duration::from_secs(60), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(listening, "nothing listens on {port}: {}", what.log());
}

/// The scenarios, each with the seed `rca.rs` checks it with: a regression on one slice, two
/// causes at once, and a healthy fleet (no cause).
const SCENARIOS: [(&str, u64); 3] = [("lora_kv_regression", 1), ("two_causes", 1), ("healthy", 1)];

/// The metrics one ingest node received, to know when the query node sees them all (the
/// other statements read requests, spans and logs).
const METRICS: &str = "SELECT name, count(*) AS n, max(ts) AS last, max(value) AS top FROM metrics GROUP BY name ORDER BY name";

/// Sends each line of `file` (one OTLP/JSON export request per line) to `server`'s `path`.
fn send_lines(server: &Server, path: &str, file: &Path) {
    let text = std::fs::read_to_string(file).unwrap();
    for line in text.lines() {
        let (status, _, body) = server.post_otlp(path, "application/json", line.as_bytes(), false);
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
    }
}

/// The scheduler and executors every scenario's query node sends its plans to.
struct Cluster {
    scheduler: Option<Process>,
    executors: Mutex<Vec<Process>>,
    address: String,
}

impl Cluster {
    fn start(dir: &Path, storage: &str) -> Cluster {
        let storage_config = dir.join("storage.toml");
        std::fs::write(&storage_config, format!("[storage]\n{storage}")).unwrap();
        let port = free_port();
        let address = format!("127.0.0.1:{port}");
        let scheduler = Process::start(&["scheduler", "--bind", &address], &storage_config);
        wait_listening(port, &scheduler);
        let executors = (0..2)
            .map(|index| {
                let work = dir.join(format!("executor-{index}"));
                Process::start(
                    &[
                        "executor",
                        "--scheduler",
                        &address,
                        "--bind",
                        &format!("127.0.0.1:{}", free_port()),
                        "--grpc-port",
                        &free_port().to_string(),
                        "--concurrency",
                        "2",
                        "--work-dir",
                        work.to_str().unwrap(),
                    ],
                    &storage_config,
                )
            })
            .collect();
        Cluster {
            scheduler: Some(scheduler),
            executors: Mutex::new(executors),
            address,
        }
    }

    fn logs(&self) -> String {
        let executors: Vec<String> = self
            .executors
            .lock()
            .unwrap()
            .iter()
            .map(Process::log)
            .collect();
        let scheduler = self.scheduler.as_ref().map(Process::log);
        format!("scheduler: {scheduler:?}\nexecutors: {executors:?}")
    }
}

/// The query node of a cluster run, once its answers equal `expected`.
struct Run {
    query: Server,
    compact: Server,
    ingest_logs: String,
}

/// One scenario: one node receives everything; then, on the bucket at `storage`, two ingest
/// nodes receive half each (traces to one, metrics to the other) and a query node whose plans
/// go to `cluster` must answer the same SQL and give the same verdict, which must be the ground
/// truth's. Plans must have run on the cluster and none fallen back.
fn scenario_on_the_cluster(
    dir: &Path,
    storage: &str,
    cluster: &Cluster,
    (scenario, seed): (&str, u64),
) -> (Run, Vec<crate::storage::Rows>) {
    // rca.rs's size; of the files, traces and metrics (as rca.rs ingests them, without the
    // prompt lines it adds for some scenarios)
    let (sim, truth) = simulate_to(dir, (scenario, seed, "30m"), &[]);
    let (traces, metrics) = (sim.join("traces.jsonl"), sim.join("metrics.jsonl"));
    let local = Server::start(&dir.join("local"), BASE);
    send_lines(&local, "/v1/traces", &traces);
    send_lines(&local, "/v1/metrics", &metrics);
    let expected = answers(&local);
    let expected_metrics = rows(&local.sql(METRICS));
    let (status, expected_rca) = post_json(&local, "/api/v1/rca", "{}");
    assert_eq!(status, 200, "{expected_rca}");
    local.stop();
    if let Err(miss) = causes_match_truth(&truth, &expected_rca) {
        panic!("{scenario} seed {seed} on one node: {miss}");
    }

    let node = |name: &str, role: &str, extra: &str| {
        Server::start(
            &dir.join(name),
            &format!("{BASE}role = \"{role}\"\n[storage]\n{storage}node = \"{name}\"\n{extra}"),
        )
    };
    // a short timeout: a statement the cluster holds after an executor died falls back soon
    let ballista = format!(
        "[query.ballista]\nscheduler = \"{}\"\nmin_bytes = 0\ntimeout_ms = 15000\n",
        cluster.address
    );
    let query = node("query-1", "query", &ballista);
    let compact = node("compact-1", "compact", "");
    let ingest_a = node("ingest-1", "ingest", "");
    let ingest_b = node("ingest-2", "ingest", "");
    send_lines(&ingest_a, "/v1/traces", &traces);
    send_lines(&ingest_b, "/v1/metrics", &metrics);
    let ingest_logs = format!("{}\n{}", ingest_a.stop(), ingest_b.stop());

    let mut last = Vec::new();
    let fresh = eventually(Duration::from_secs(60), || {
        last = answers(&query);
        last == expected && rows(&query.sql(METRICS)) == expected_metrics
    });
    let logs = || {
        format!(
            "{}\nquery: {}\ningest: {ingest_logs}",
            cluster.logs(),
            query.log()
        )
    };
    assert!(
        fresh,
        "{scenario}: {last:?}\nexpected {expected:?}\n{}",
        logs()
    );
    let before = on_cluster(&query);
    assert!(
        before > 0.0,
        "{scenario}: the SQL answers came from the cluster: {}",
        logs()
    );
    let (status, rca) = post_json(&query, "/api/v1/rca", "{}");
    assert_eq!(status, 200, "{rca}");
    assert_same_verdict(&rca, &expected_rca, &format!("{scenario}: {}", logs()));
    assert!(
        on_cluster(&query) > before,
        "{scenario}: the RCA's scans ran on the cluster: {}",
        logs()
    );
    assert_eq!(fallbacks(&query), 0.0, "{scenario}: {}", logs());
    let run = Run {
        query,
        compact,
        ingest_logs,
    };
    (run, expected)
}

fn on_cluster(query: &Server) -> f64 {
    series(query, "infersight_query_plans_total{route=\"cluster\"}")
}

fn fallbacks(query: &Server) -> f64 {
    series(query, "infersight_query_plans_total{route=\"fallback\"}")
}

/// Every scenario on its own prefix of the bucket `storage_at(scenario)` names, through one
/// cluster; then, on the last one's query node, an executor killed while statements run and the
/// scheduler killed.
fn cluster_answers_and_verdicts_equal_one_node(storage_at: impl Fn(&str) -> String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), &storage_at("cluster"));
    let mut last = None;
    for scenario in SCENARIOS {
        let run_dir = dir.path().join(scenario.0);
        let (run, expected) =
            scenario_on_the_cluster(&run_dir, &storage_at(scenario.0), &cluster, scenario);
        if let Some((previous, _)) = last.replace((run, expected)) {
            let previous: Run = previous;
            previous.compact.stop();
            previous.query.stop();
        }
    }
    let (run, expected) = last.unwrap();
    let query = &run.query;

    // an executor killed while the statements run: the same answers (from the other executor,
    // or here once the cluster failed or held the statement past the timeout)
    let started = std::time::Instant::now();
    assert_eq!(answers(query), expected);
    let once = started.elapsed();
    let during = std::thread::scope(|scope| {
        let asking = scope.spawn(|| (0..3).map(|_| answers(query)).collect::<Vec<_>>());
        std::thread::sleep(once);
        drop(cluster.executors.lock().unwrap().remove(0));
        asking.join().unwrap()
    });
    for answer in during {
        assert_eq!(
            answer,
            expected,
            "{}\nquery: {}",
            cluster.logs(),
            query.log()
        );
    }
    assert_eq!(answers(query), expected, "{}", cluster.logs());

    // the scheduler gone: the same answers, from the query node itself, counted
    let before = fallbacks(query);
    drop(cluster.scheduler.take());
    assert_eq!(answers(query), expected);
    assert!(fallbacks(query) > before, "{}", query.log());
    assert!(
        query
            .log()
            .contains("the Ballista cluster did not take the statement"),
        "{}\ningest: {}",
        query.log(),
        run.ingest_logs
    );
    drop(cluster);
    run.compact.stop();
    run.query.stop();
}

#[test]
fn a_ballista_cluster_on_a_file_bucket_answers_like_one_node() {
    let bucket = tempfile::tempdir().unwrap();
    cluster_answers_and_verdicts_equal_one_node(|prefix| {
        format!("url = \"file://{}/{prefix}\"\n", bucket.path().display())
    });
}

mod s3 {
    use infersight_testkit::seaweedfs::SeaweedFs;

    #[test]
    fn a_ballista_cluster_on_seaweedfs_answers_like_one_node() {
        let Some(server) = SeaweedFs::start("infersight") else {
            return;
        };
        super::cluster_answers_and_verdicts_equal_one_node(|prefix| {
            format!(
                "url = \"s3://infersight/ballista-{prefix}\"\nendpoint = \"{}\"\n\
                 region = \"us-east-1\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n",
                server.endpoint()
            )
        });
    }
}
