//! `infersight serve` with a `[scrape]` section: a tiny HTTP server plays a vLLM `/metrics`
//! endpoint, the scraped samples land in `metrics` under canonical names and the configured
//! worker, a target that is down records `scrape_up = 0` and a counted failure without harming
//! the server, and the README's "Engine metrics" SQL recipe joins each request to the KV-cache
//! usage and queue length its worker reported at or just before its start.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message;

use crate::support::{Server, request_spans, rows};

/// Serves `bodies[n]` to the n-th request (the last one from then on) on a free port; records
/// each request's `Accept` header. The thread lives as long as the test process.
fn exposition_server(bodies: Vec<String>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    let accepts = Arc::new(Mutex::new(Vec::new()));
    let seen = accepts.clone();
    let served = AtomicUsize::new(0);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut request = Vec::new();
            let mut buffer = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buffer[..n]),
                }
            }
            let text = String::from_utf8_lossy(&request).to_string();
            let accept = text
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("accept")
                        .then(|| value.trim().to_string())
                })
                .unwrap_or_default();
            seen.lock().unwrap().push(accept);
            let n = served.fetch_add(1, Ordering::SeqCst);
            let body = &bodies[n.min(bodies.len() - 1)];
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (url, accepts)
}

/// A vLLM V0-style exposition (old metric names) whose samples carry their own timestamp.
fn vllm_body(kv_cache: f64, waiting: f64, ts_ms: i64) -> String {
    format!(
        "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n\
         # TYPE vllm:gpu_cache_usage_perc gauge\n\
         vllm:gpu_cache_usage_perc{{model_name=\"llama-3-8b\"}} {kv_cache} {ts_ms}\n\
         # HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
         # TYPE vllm:num_requests_waiting gauge\n\
         vllm:num_requests_waiting{{model_name=\"llama-3-8b\"}} {waiting} {ts_ms}\n\
         # HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n\
         # TYPE vllm:num_preemptions_total counter\n\
         vllm:num_preemptions_total{{model_name=\"llama-3-8b\"}} 2.0 {ts_ms}\n"
    )
}

fn closed_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/metrics")
}

/// Polls `sql` (a `SELECT count(...) AS n`) until it reaches `at_least`, or fails after 60 s.
fn wait_for_count(server: &Server, sql: &str, at_least: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = server.scalar(sql);
        if n >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "`{sql}` stayed at {n} (< {at_least}); server stderr: {:?}",
            server.stderr.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The SQL block of README.md's "Engine metrics" section: the documented recipe is the tested one.
fn readme_recipe() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let start = readme
        .find("-- Engine state each request saw")
        .expect("README.md has the Engine metrics recipe");
    let end = readme[start..].find("```").unwrap();
    readme[start..start + end].to_string()
}

fn ms_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn serve_scrapes_engine_metrics_and_joins_them_to_requests() {
    let t0_ms = ms_now() - 20 * 60 * 1000;
    let t1_ms = t0_ms + 5 * 60 * 1000;
    // First scrape: the state at t0; every later one: the state at t1.
    let (url, accepts) = exposition_server(vec![
        vllm_body(0.25, 3.0, t0_ms),
        vllm_body(0.75, 7.0, t1_ms),
    ]);
    let down_url = closed_url();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = format!(
        "[scrape]\ninterval = \"200ms\"\ntimeout = \"150ms\"\ntargets = [\n  {{ url = \"{url}\", job = \"vllm\", worker = \"worker-1\" }},\n  {{ url = \"{down_url}\", job = \"vllm\", worker = \"worker-down\" }},\n]\n"
    );
    let server = Server::start(&data, &config);

    // Both scraped states arrive under the canonical name and the configured worker.
    wait_for_count(
        &server,
        "SELECT count(DISTINCT ts) AS n FROM metrics WHERE name = 'kv_cache_usage_ratio' AND worker = 'worker-1'",
        2,
    );
    let answer = server.sql(
        "SELECT DISTINCT value, source_name, engine, model, kind FROM metrics \
         WHERE name = 'kv_cache_usage_ratio' AND worker = 'worker-1' ORDER BY value",
    );
    let found = rows(&answer);
    assert_eq!(found.len(), 2, "{answer}");
    for (row, expected) in found.iter().zip([0.25, 0.75]) {
        let get = |c: &str| row.iter().find(|(k, _)| k == c).unwrap().1.clone();
        assert_eq!(get("value").as_f64(), Some(expected), "{answer}");
        assert_eq!(get("source_name"), "vllm:gpu_cache_usage_perc");
        assert_eq!(get("engine"), "vllm");
        assert_eq!(get("model"), "llama-3-8b");
        assert_eq!(get("kind"), "gauge");
    }
    assert!(
        server.scalar(
            "SELECT count(*) AS n FROM metrics WHERE name = 'preemptions_total' AND worker = 'worker-1' AND kind = 'counter'"
        ) >= 1
    );
    assert!(
        server.scalar(
            "SELECT count(*) AS n FROM metrics WHERE name = 'scrape_up' AND worker = 'worker-1' AND value = 1"
        ) >= 2
    );
    assert_eq!(accepts.lock().unwrap()[0], "text/plain;version=0.0.4");

    // The target that is down: scrape_up = 0, a counted failure, and the server carries on.
    wait_for_count(
        &server,
        "SELECT count(*) AS n FROM metrics WHERE name = 'scrape_up' AND worker = 'worker-down' AND value = 0",
        2,
    );
    assert_eq!(
        server.scalar("SELECT count(*) AS n FROM metrics WHERE name = 'scrape_up' AND worker = 'worker-down' AND value = 1"),
        0
    );
    let (status, exposition) = server.get("/metrics");
    assert_eq!(status, 200);
    let failed = exposition
        .lines()
        .find(|l| {
            l.starts_with("infersight_scrapes_total{")
                && l.contains("outcome=\"failed\"")
                && l.contains("reason=\"connect\"")
        })
        .unwrap_or_else(|| panic!("no counted connect failure in:\n{exposition}"));
    let failures: f64 = failed.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(failures >= 1.0, "{failed}");
    assert!(
        exposition.contains("infersight_scrape_samples_total{job=\"vllm\"}"),
        "{exposition}"
    );

    // Requests of worker-1: before any engine sample, just after t0, just after t1.
    let ns = |ms: i64| (ms * 1_000_000) as u64;
    for (prefix, start_ms) in [
        ("before", t0_ms - 30_000),
        ("mid", t0_ms + 1_000),
        ("late", t1_ms + 2_000),
    ] {
        let body = request_spans(prefix, 1, ns(start_ms)).encode_to_vec();
        let (status, _, _) = server.post_otlp("/v1/traces", "application/x-protobuf", &body, false);
        assert_eq!(status, 200);
    }
    let answer = server.sql(&readme_recipe());
    let joined = rows(&answer);
    assert_eq!(joined.len(), 3, "{answer}");
    let expected = [
        ("before-0", None, None),
        ("mid-0", Some(0.25), Some(3.0)),
        ("late-0", Some(0.75), Some(7.0)),
    ];
    for (row, (request_id, kv, waiting)) in joined.iter().zip(expected) {
        let get = |c: &str| {
            row.iter()
                .find(|(k, _)| k == c)
                .unwrap_or_else(|| panic!("no column {c} in {answer}"))
                .1
                .clone()
        };
        assert_eq!(get("request_id"), request_id, "{answer}");
        assert_eq!(get("worker"), "worker-1", "{answer}");
        assert_eq!(get("kv_cache_usage_ratio").as_f64(), kv, "{answer}");
        assert_eq!(get("requests_waiting").as_f64(), waiting, "{answer}");
    }

    // Shutdown stops the scrapers and exits cleanly.
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
}
