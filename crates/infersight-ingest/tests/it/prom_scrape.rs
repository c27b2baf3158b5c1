//! The scrape receiver against real sockets on 127.0.0.1 with a sink double: a healthy target,
//! one that is down, one that answers 500, one that serves garbage, one that never answers (the
//! timeout), and the scraping tasks' counters and prompt stop.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use infersight_ingest::receivers::ReceiverState;
use infersight_ingest::receivers::prom_scrape::{
    ACCEPT, ScrapeTarget, agent, check_url, scrape_once, spawn_scrapers,
};
use infersight_ingest::{Sink, SinkFuture};
use infersight_model::mapping::AttributeMapper;
use infersight_model::telemetry::Counters;
use infersight_model::{MetricRecord, Table, TableBatch};

/// Keeps every metric row it is given and wakes waiters.
#[derive(Default)]
struct CollectingSink {
    rows: Mutex<Vec<MetricRecord>>,
    changed: tokio::sync::Notify,
}

impl Sink for CollectingSink {
    fn submit(&self, _org: &str, batches: Vec<TableBatch>) -> SinkFuture {
        for batch in batches.iter().filter(|b| b.table == Table::Metrics) {
            let rows = MetricRecord::from_batch(&batch.batch).unwrap();
            self.rows.lock().unwrap().extend(rows);
        }
        self.changed.notify_waiters();
        Box::pin(async { Ok(()) })
    }
}

impl CollectingSink {
    fn named(&self, name: &str) -> Vec<MetricRecord> {
        self.rows
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.name.as_deref() == Some(name))
            .cloned()
            .collect()
    }

    /// Waits (bounded) until `done` holds for the rows collected so far.
    async fn wait_until(&self, what: &str, done: impl Fn(&CollectingSink) -> bool) {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                if done(self) {
                    return;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .is_err()
        {
            panic!("timed out waiting for {what}");
        }
    }
}

fn state(sink: Arc<CollectingSink>) -> ReceiverState {
    ReceiverState {
        sink,
        mapper: Arc::new(AttributeMapper::default()),
        span_tree: Default::default(),
        counters: Arc::new(Counters::new()),
        max_body_bytes: 1 << 20,
        in_flight: Arc::new(tokio::sync::Semaphore::new(4)),
        decoders: Arc::new(tokio::sync::Semaphore::new(2)),
    }
}

const VLLM: &str = "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage.\n\
# TYPE vllm:gpu_cache_usage_perc gauge\n\
vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\n\
# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{model_name=\"m\"} 3.0\n";

/// Serves `/metrics` (the vLLM body above, recording the Accept header), `/error` (500) and
/// `/garbage` (a malformed body) on a free port.
async fn target_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let accepts = Arc::new(Mutex::new(Vec::new()));
    let seen = accepts.clone();
    let app = Router::new()
        .route(
            "/metrics",
            get(move |headers: HeaderMap| {
                let seen = seen.clone();
                async move {
                    let accept = headers
                        .get("accept")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    seen.lock().unwrap().push(accept);
                    VLLM
                }
            }),
        )
        .route(
            "/error",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
        )
        .route(
            "/garbage",
            get(|| async { "ok 1\nthis is { not an exposition\n" }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), accepts)
}

/// A URL on which nothing listens (the port was free a moment ago).
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/metrics")
}

fn target(url: &str, worker: Option<&str>) -> ScrapeTarget {
    ScrapeTarget {
        url: url.to_string(),
        job: "vllm".into(),
        worker: worker.map(str::to_string),
        interval: Duration::from_millis(50),
        timeout: Duration::from_secs(5),
        ca_file: None,
        bearer_token_file: None,
    }
}

fn agent_for(target: &ScrapeTarget) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(target.timeout))
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_stores_canonical_rows_and_scrape_up_under_the_configured_worker() {
    let (base, accepts) = target_server().await;
    let sink = Arc::new(CollectingSink::default());
    let state = state(sink.clone());
    let target = target(&format!("{base}/metrics"), Some("worker-1"));
    let stats = scrape_once(&target, &agent_for(&target), 1 << 20, &state)
        .await
        .unwrap();
    assert_eq!(stats.samples, 2);
    assert!(stats.warnings.is_empty());
    assert_eq!(stats.rejected_points, 0);
    assert_eq!(accepts.lock().unwrap().as_slice(), [ACCEPT]);

    let kv = sink.named("kv_cache_usage_ratio");
    assert_eq!(kv.len(), 1);
    assert_eq!(kv[0].value, Some(0.5));
    assert_eq!(kv[0].worker.as_deref(), Some("worker-1"));
    assert_eq!(kv[0].model.as_deref(), Some("m"));
    assert_eq!(sink.named("requests_waiting")[0].value, Some(3.0));
    let up = sink.named("scrape_up");
    assert_eq!(up.len(), 1);
    assert_eq!(up[0].value, Some(1.0));
    assert_eq!(up[0].worker.as_deref(), Some("worker-1"));
    assert_eq!(
        up[0].ts, kv[0].ts,
        "samples without a timestamp take the scrape time"
    );
    assert_eq!(sink.named("scrape_samples_scraped")[0].value, Some(2.0));
    assert_eq!(sink.named("scrape_duration_seconds").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_scrapes_name_their_reason_and_record_scrape_up_zero() {
    let (base, _) = target_server().await;
    let cases = [
        (closed_url(), "connect"),
        (format!("{base}/error"), "http_status"),
        (format!("{base}/garbage"), "parse"),
    ];
    for (url, reason) in cases {
        let sink = Arc::new(CollectingSink::default());
        let state = state(sink.clone());
        // No worker configured: host:port stands in.
        let target = target(&url, None);
        let error = scrape_once(&target, &agent_for(&target), 1 << 20, &state)
            .await
            .unwrap_err();
        assert_eq!(error.reason(), reason, "{url}: {error}");
        assert!(error.to_string().contains(&url), "{error}");
        let up = sink.named("scrape_up");
        assert_eq!(up.len(), 1, "{url}");
        assert_eq!(up[0].value, Some(0.0));
        assert_eq!(up[0].worker, Some(target.instance()));
        assert!(sink.named("kv_cache_usage_ratio").is_empty());
        if reason == "parse" {
            assert!(error.to_string().contains("line 2"), "{error}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_never_answers_times_out() {
    // Accepts connections and never writes a byte.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    let sink = Arc::new(CollectingSink::default());
    let state = state(sink.clone());
    let mut target = target(&url, Some("w"));
    target.timeout = Duration::from_millis(200);
    let error = scrape_once(&target, &agent_for(&target), 1 << 20, &state)
        .await
        .unwrap_err();
    assert_eq!(error.reason(), "timeout", "{error}");
    assert_eq!(sink.named("scrape_up")[0].value, Some(0.0));
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_are_refused() {
    let (base, _) = target_server().await;
    let sink = Arc::new(CollectingSink::default());
    let state = state(sink.clone());
    let target = target(&format!("{base}/metrics"), Some("w"));
    let error = scrape_once(&target, &agent_for(&target), 16, &state)
        .await
        .unwrap_err();
    assert_eq!(error.reason(), "too_large", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrapers_repeat_count_outcomes_and_stop_on_shutdown() {
    let (base, _) = target_server().await;
    let sink = Arc::new(CollectingSink::default());
    let state = state(sink.clone());
    let counters = state.counters.clone();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let handles = spawn_scrapers(
        vec![
            target(&format!("{base}/metrics"), Some("up-worker")),
            target(&closed_url(), Some("down-worker")),
        ],
        1 << 20,
        state,
        stop_rx,
    );
    fn up_count(s: &CollectingSink, worker: &str, value: f64) -> usize {
        s.named("scrape_up")
            .iter()
            .filter(|r| r.worker.as_deref() == Some(worker) && r.value == Some(value))
            .count()
    }
    let healthy = |s: &CollectingSink| up_count(s, "up-worker", 1.0);
    let down = |s: &CollectingSink| up_count(s, "down-worker", 0.0);
    // A scrape submits its rows before it is counted: after three stored scrapes, at least two
    // are counted.
    sink.wait_until("three scrapes of each target", |s| {
        healthy(s) >= 3 && down(s) >= 3
    })
    .await;
    assert!(
        counters.get(
            "infersight_scrapes_total",
            &[("job", "vllm"), ("outcome", "ok")]
        ) >= 2.0
    );
    assert!(
        counters.get(
            "infersight_scrapes_total",
            &[
                ("job", "vllm"),
                ("outcome", "failed"),
                ("reason", "connect")
            ]
        ) >= 2.0
    );
    assert!(counters.get("infersight_scrape_samples_total", &[("job", "vllm")]) >= 4.0);
    assert_eq!(
        counters.get("infersight_scrape_parse_warnings_total", &[("job", "vllm")]),
        0.0
    );
    assert!(
        counters.get(
            "infersight_receiver_records_total",
            &[("protocol", "prom_scrape"), ("outcome", "accepted")]
        ) >= 4.0
    );
    let rendered = counters.render();
    assert!(rendered.contains("infersight_scrapes_total{"), "{rendered}");

    stop_tx.send(true).unwrap();
    for handle in handles {
        tokio::time::timeout(Duration::from_secs(10), handle)
            .await
            .expect("a scraper did not stop")
            .unwrap();
    }
}

#[test]
fn target_urls_are_checked() {
    assert!(check_url("http://10.0.0.5:8000/metrics").is_ok());
    assert!(check_url("http://vllm-0.llm.svc/metrics").is_ok());
    assert!(check_url("https://dcgm.monitoring.svc:9400/metrics").is_ok());
    for (bad, why) in [
        ("ftp://x/metrics", "scheme `ftp`"),
        ("localhost:8000/metrics", "no scheme"),
        ("/metrics", "no scheme"),
        ("http://", "not a valid URL"),
        ("http://exa mple/metrics", "not a valid URL"),
    ] {
        let error = check_url(bad).unwrap_err();
        assert!(error.contains(why), "{bad}: {error}");
    }
    let t = target("http://10.0.0.5:8000/metrics", None);
    assert_eq!(t.instance(), "10.0.0.5:8000");
    assert_eq!(target("http://h/metrics", Some("")).instance(), "h:80");
    assert_eq!(target("https://h/metrics", None).instance(), "h:443");
    assert_eq!(target("http://h/metrics", Some("w")).instance(), "w");
}

/// An https target (a private CA's certificate) that wants a bearer token: scraped with the
/// target's `ca_file` and the token of its `bearer_token_file`; refused by the web's roots
/// (nothing reaches the target); a token file that cannot be read fails the scrape as
/// `credentials`, before any request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_target_is_scraped_with_its_ca_and_its_bearer_token() {
    let receiver = infersight_testkit::https::https_receiver(200, VLLM);
    let dir = tempfile::tempdir().unwrap();
    let (ca, token) = (dir.path().join("ca.pem"), dir.path().join("token"));
    std::fs::write(&ca, &receiver.ca_pem).unwrap();
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let url = format!("https://{}/metrics", receiver.addr);
    let sink = Arc::new(CollectingSink::default());
    let state = state(sink.clone());

    let mut scraped = target(&url, Some("dcgm-0"));
    scraped.ca_file = Some(ca.clone());
    scraped.bearer_token_file = Some(token.clone());
    let stats = scrape_once(&scraped, &agent(&scraped), 1 << 20, &state)
        .await
        .unwrap();
    assert_eq!(stats.samples, 2);
    let request = receiver
        .requests
        .recv_timeout(Duration::from_secs(5))
        .unwrap();
    assert_eq!(request.path, "/metrics");
    assert_eq!(
        request.headers.get("authorization").map(String::as_str),
        Some("Bearer s3cret-token")
    );
    assert!(
        sink.rows
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.worker.as_deref() == Some("dcgm-0")),
        "the scraped rows are stored under the target's worker"
    );

    let untrusted = target(&url, None);
    let error = scrape_once(&untrusted, &agent(&untrusted), 1 << 20, &state)
        .await
        .unwrap_err();
    assert_eq!(error.reason(), "connect", "{error}");
    assert!(
        receiver
            .requests
            .recv_timeout(Duration::from_millis(300))
            .is_err(),
        "a target whose certificate does not verify was sent the request"
    );

    let mut no_token = scraped.clone();
    no_token.bearer_token_file = Some(dir.path().join("missing"));
    let error = scrape_once(&no_token, &agent(&no_token), 1 << 20, &state)
        .await
        .unwrap_err();
    assert_eq!(error.reason(), "credentials", "{error}");
    assert!(error.to_string().contains("missing"), "{error}");
}
