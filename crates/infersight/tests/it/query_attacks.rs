//! The resource attacks of issue 22 against a real `serve` process, at the sizes that hurt
//! before the limits (20,000 `requests` rows: a 20k × 20k join): a three-way cross join, a
//! `count(DISTINCT concat(…))` over the 20k × 20k join, every row with every column, a cross
//! join whose client hangs up, then ten of them at once. Each ends with a clear 400 naming its
//! limit (or 429 past the caller's concurrency), `/healthz` answers throughout, no thread
//! panics, a normal query answers after, and the process's peak RSS stays under what its
//! limits allow: baseline + concurrency × memory pool + a margin for what no pool counts.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::support::{Server, ok, run};

const MIB: u64 = 1 << 20;
const POOL_MIB: u64 = 64;
const CONCURRENT: u64 = 4;
/// Memory no pool accounts for (decoded segments, answers being built, allocator slack).
const MARGIN_MIB: u64 = 256;

const ATTACKS: [&str; 3] = [
    "SELECT count(*) FROM requests a, requests b, requests c WHERE a.e2e_ms + b.e2e_ms > c.e2e_ms",
    "SELECT count(DISTINCT concat(a.request_id, b.request_id)) FROM requests a, requests b",
    "SELECT * FROM requests a, requests b LIMIT 100000",
];

/// A `/proc/<pid>/status` field in bytes (`VmRSS`, `VmHWM`).
fn proc_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches(" kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

/// `POST /api/v1/query`: status and body.
fn query(api: std::net::SocketAddr, sql: &str) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let body = serde_json::json!({ "sql": sql }).to_string();
    let mut response = agent
        .post(&format!("http://{api}/api/v1/query"))
        .header("content-type", "application/json")
        .send(body.as_str())
        .expect("an answer");
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .with_config()
        .limit(64 * MIB)
        .read_to_string()
        .unwrap_or_default();
    (status, text)
}

/// Sends `sql` and hangs up after `after` without reading the answer.
fn hang_up(api: std::net::SocketAddr, sql: &str, after: Duration) {
    let body = serde_json::json!({ "sql": sql }).to_string();
    let mut stream = std::net::TcpStream::connect(api).unwrap();
    write!(
        stream,
        "POST /api/v1/query HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    std::thread::sleep(after);
    drop(stream);
}

fn limited(status: u16, body: &str) -> bool {
    (status == 400
        && ["memory limit", "time limit", "response limit"]
            .iter()
            .any(|limit| body.contains(limit)))
        || status == 429
}

#[test]
fn resource_attacks_end_at_their_limits_and_memory_stays_within_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap();
    let generated = run(&[
        "bench-gen",
        "requests",
        "--rows",
        "20000",
        "--hours",
        "1",
        "--data",
        data_arg,
    ]);
    ok(&generated, "bench-gen requests");
    let config = format!(
        "[store]\nfsync = \"never\"\n[query]\nmemory_limit_bytes = {}\ntimeout_ms = 20000\n\
         max_response_bytes = {}\nmax_concurrent_per_caller = {CONCURRENT}\n",
        POOL_MIB * MIB,
        4 * MIB
    );
    let server = Server::start(&data, &config);
    let (api, pid) = (server.api, server.pid());
    let (status, body) = query(api, "SELECT count(*) AS n FROM requests");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("20000"), "{body}");
    let baseline = proc_bytes(pid, "VmRSS");
    assert!(baseline > 0, "no /proc for the server");

    // one at a time, then a client that hangs up
    for sql in ATTACKS {
        let started = Instant::now();
        let (status, body) = query(api, sql);
        assert!(limited(status, &body), "{sql}: {status} {body}");
        assert!(started.elapsed() < Duration::from_secs(60), "{sql}");
    }
    hang_up(api, ATTACKS[0], Duration::from_millis(500));

    // ten at once, the health check answering meanwhile
    let attackers: Vec<_> = (0..10)
        .map(|i| {
            let sql = ATTACKS[i % ATTACKS.len()];
            std::thread::spawn(move || (sql, query(api, sql)))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let health_started = Instant::now();
    let mut health = String::new();
    let mut stream = std::net::TcpStream::connect(api).unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n")
        .unwrap();
    stream.read_to_string(&mut health).unwrap();
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health_started.elapsed() < Duration::from_secs(5));
    for attacker in attackers {
        let (sql, (status, body)) = attacker.join().unwrap();
        assert!(limited(status, &body), "{sql}: {status} {body}");
    }

    let peak = proc_bytes(pid, "VmHWM");
    let bound = baseline + (CONCURRENT * POOL_MIB + MARGIN_MIB) * MIB;
    assert!(
        peak <= bound,
        "peak RSS {} MiB over the bound {} MiB (baseline {} MiB)",
        peak / MIB,
        bound / MIB,
        baseline / MIB
    );
    let (status, body) = query(
        api,
        "SELECT model, count(*) AS n FROM requests GROUP BY model ORDER BY n DESC",
    );
    assert_eq!(status, 200, "{body}");
    let stderr = server.stop();
    assert!(!stderr.contains("panicked"), "{stderr}");
    eprintln!(
        "query attacks: baseline {} MiB, peak {} MiB, bound {} MiB",
        baseline / MIB,
        peak / MIB,
        bound / MIB
    );
}
