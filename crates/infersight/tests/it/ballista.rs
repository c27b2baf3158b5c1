//! A cluster of processes on 127.0.0.1 with the query node's statements on Apache DataFusion
//! Ballista (the `cluster` feature): `infersight ballista scheduler`, two `infersight ballista
//! executor`s, two ingest nodes, a query node whose `[query.ballista]` sends every plan over the
//! bucket's segments to the scheduler (threshold 0), and a compactor, on SeaweedFS when it is
//! there (`.ci/run`) and on a `file://` bucket otherwise. `lora_kv_regression` goes to one
//! ingest node and `healthy` to the other; the query node's SQL answers and its RCA verdict must
//! equal those of one node that received both, its `/metrics` must count plans run on the
//! cluster and none fallen back. Then an executor is killed, and the answers stay; then the
//! scheduler: the query node still answers, on its own, and counts the fallbacks.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::incidents_api::post_json;
use crate::storage::{BASE, answers, eventually, simulate_scenario_into};
use crate::support::{Server, bin, free_port};

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

/// What must not differ between two RCA answers over the same data: the verdict and its causes.
fn verdict(rca: &Value) -> (Value, Value) {
    (rca["verdict"].clone(), rca["root_causes"].clone())
}

fn wait_listening(port: u16, what: &Process) {
    let listening = eventually(Duration::from_secs(60), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(listening, "nothing listens on {port}: {}", what.log());
}

fn cluster_answers_and_verdicts_equal_one_node(storage: &str) {
    let dir = tempfile::tempdir().unwrap();
    let local = Server::start(&dir.path().join("local"), BASE);
    simulate_scenario_into(&local, "lora_kv_regression", "5");
    simulate_scenario_into(&local, "healthy", "6");
    let expected = answers(&local);
    let (status, expected_rca) = post_json(&local, "/api/v1/rca", "{}");
    assert_eq!(status, 200, "{expected_rca}");
    local.stop();
    assert!(
        expected_rca["root_causes"]
            .as_array()
            .is_some_and(|causes| !causes.is_empty()),
        "the single node finds the regression: {expected_rca}"
    );

    let storage_config = dir.path().join("storage.toml");
    std::fs::write(&storage_config, format!("[storage]\n{storage}")).unwrap();
    let scheduler_port = free_port();
    let scheduler_address = format!("127.0.0.1:{scheduler_port}");
    let scheduler = Process::start(
        &["scheduler", "--bind", &scheduler_address],
        &storage_config,
    );
    wait_listening(scheduler_port, &scheduler);
    let executors: Vec<Process> = (0..2)
        .map(|index| {
            let work = dir.path().join(format!("executor-{index}"));
            Process::start(
                &[
                    "executor",
                    "--scheduler",
                    &scheduler_address,
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

    let node = |name: &str, role: &str, extra: &str| {
        Server::start(
            &dir.path().join(name),
            &format!("{BASE}role = \"{role}\"\n[storage]\n{storage}node = \"{name}\"\n{extra}"),
        )
    };
    let ballista =
        format!("[query.ballista]\nscheduler = \"{scheduler_address}\"\nmin_bytes = 0\n");
    let query = node("query-1", "query", &ballista);
    let compact = node("compact-1", "compact", "");
    let ingest_a = node("ingest-1", "ingest", "");
    let ingest_b = node("ingest-2", "ingest", "");
    simulate_scenario_into(&ingest_a, "lora_kv_regression", "5");
    simulate_scenario_into(&ingest_b, "healthy", "6");
    let (log_a, log_b) = (ingest_a.stop(), ingest_b.stop());

    let mut last = Vec::new();
    let fresh = eventually(Duration::from_secs(60), || {
        last = answers(&query);
        last == expected
    });
    let executors = Mutex::new(executors);
    let logs = || {
        let executors = executors.lock().unwrap();
        let executor_logs: Vec<String> = executors.iter().map(Process::log).collect();
        format!(
            "scheduler: {}\nexecutors: {executor_logs:?}\nquery: {}\ningest: {log_a}\n{log_b}",
            scheduler.log(),
            query.log()
        )
    };
    assert!(fresh, "{last:?}\nexpected {expected:?}\n{}", logs());
    let on_cluster = || series(&query, "infersight_query_plans_total{route=\"cluster\"}");
    let fallbacks = || series(&query, "infersight_query_plans_total{route=\"fallback\"}");
    let before = on_cluster();
    assert!(
        before > 0.0,
        "the SQL answers came from the cluster: {}",
        logs()
    );
    let (status, rca) = post_json(&query, "/api/v1/rca", "{}");
    assert_eq!(status, 200, "{rca}");
    assert_eq!(verdict(&rca), verdict(&expected_rca), "{}", logs());
    assert!(
        on_cluster() > before,
        "the RCA's scans ran on the cluster: {}",
        logs()
    );
    assert_eq!(fallbacks(), 0.0, "{}", logs());

    // an executor killed: the same answers (from the other executor, or here if the job
    // failed on the dead one first)
    let killed = executors.lock().unwrap().remove(0);
    drop(killed);
    assert_eq!(answers(&query), expected, "{}", logs());

    // the scheduler gone: the same answers, from the query node itself, counted
    drop(scheduler);
    assert_eq!(answers(&query), expected);
    assert!(fallbacks() > 0.0, "{}", query.log());
    assert!(
        query
            .log()
            .contains("the Ballista cluster did not take the statement"),
        "{}",
        query.log()
    );
    drop(executors.into_inner());
    compact.stop();
    query.stop();
}

#[test]
fn a_ballista_cluster_on_a_file_bucket_answers_like_one_node() {
    let bucket = tempfile::tempdir().unwrap();
    cluster_answers_and_verdicts_equal_one_node(&format!(
        "url = \"file://{}/b\"\n",
        bucket.path().display()
    ));
}

mod s3 {
    use infersight_testkit::seaweedfs::SeaweedFs;

    #[test]
    fn a_ballista_cluster_on_seaweedfs_answers_like_one_node() {
        let Some(server) = SeaweedFs::start("infersight") else {
            return;
        };
        super::cluster_answers_and_verdicts_equal_one_node(&format!(
            "url = \"s3://infersight/ballista\"\nendpoint = \"{}\"\nregion = \"us-east-1\"\n\
             access_key_id = \"test\"\nsecret_access_key = \"test\"\n",
            server.endpoint()
        ));
    }
}
