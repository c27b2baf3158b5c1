//! Notifications end to end: a real Alertmanager (Debian's `prometheus-alertmanager`, started
//! here on 127.0.0.1 with explicit ports and a temporary storage, killed on drop) receives an
//! incident firing with its labels and annotations, routes it to a receiver, and sees it
//! resolved; `serve` sends its SLO burn-rate alerts there and to the signed webhook; with
//! Alertmanager unreachable (a closed port, a port that never answers) `serve` retries, counts,
//! logs, and ingests at its usual rate. The Alertmanager tests are skipped when the binary is
//! missing, except when `INFERSIGHT_TEST_ALERTMANAGER` is set (`.ci/run` sets it), where they fail.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use infersight_model::notice::{IncidentNotice, IncidentNotifier, Severity};
use infersight_model::signal::Subject;
use infersight_model::telemetry::Counters;
use infersight_server::notify::{Notifier, NotifyConfig, signed};
use prost::Message;
use serde_json::Value;

use crate::support::{Server, agent, request_spans};

/// The Alertmanager binary (`alertmanager`, or Debian's `prometheus-alertmanager`).
fn alertmanager_binary() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).find_map(|dir| {
            ["alertmanager", "prometheus-alertmanager"]
                .iter()
                .map(|name| dir.join(name))
                .find(|p| p.is_file())
        })
    });
    if found.is_none() {
        assert!(
            std::env::var_os("INFERSIGHT_TEST_ALERTMANAGER").is_none(),
            "INFERSIGHT_TEST_ALERTMANAGER is set but neither `alertmanager` nor \
             `prometheus-alertmanager` is on PATH"
        );
        eprintln!("skipping: no Alertmanager binary (apt-get install prometheus-alertmanager)");
    }
    found
}

/// A free port on 127.0.0.1 (bound, read, released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running Alertmanager; killed (and waited for) on drop, also when a test fails.
struct Alertmanager {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Alertmanager {
    /// Starts `binary` routing every alert, grouped per incident, to the webhook `receiver`
    /// (resolutions too), and waits until it is ready.
    fn start(binary: &Path, receiver: SocketAddr) -> Alertmanager {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(
            &config,
            format!(
                "route:\n  receiver: hook\n  group_by: ['incident_id']\n  group_wait: 0s\n  \
                 group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: hook\n    \
                 webhook_configs:\n      - url: http://{receiver}/hook\n        send_resolved: true\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            // no gossip: a lone instance, no port of its own
            .arg("--cluster.listen-address=")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting alertmanager");
        let manager = Alertmanager {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        wait_for("alertmanager to be ready", Duration::from_secs(30), || {
            agent()
                .get(&format!("{}/-/ready", manager.url))
                .call()
                .is_ok_and(|r| r.status() == 200)
        });
        manager
    }

    /// `GET /api/v2/alerts`: the alerts it holds and has not seen end.
    fn alerts(&self) -> Vec<Value> {
        let mut response = agent()
            .get(&format!("{}/api/v2/alerts", self.url))
            .call()
            .unwrap();
        let text = response.body_mut().read_to_string().unwrap();
        serde_json::from_str::<Value>(&text)
            .unwrap()
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

fn incident(id: &str) -> IncidentNotice {
    IncidentNotice {
        incident_id: id.into(),
        alertname: "InferenceIncident".into(),
        severity: Severity::Critical,
        summary: "P99 TTFT x3 since 02:17 on llama-3-8b".into(),
        description: "model_version=r2 & kv_cache=paged holds 92% of the excess".into(),
        cause: Subject::of([("model_version", "r2"), ("kv_cache", "paged")]),
        model: Some("llama-3-8b".into()),
        worker: Some("worker-07".into()),
        onset_ns: now_ns() - 120_000_000_000,
        detected_ns: now_ns() - 60_000_000_000,
        resolved_ns: None,
        report_path: Some(format!("/api/v1/incidents/{id}/report")),
        extra_labels: BTreeMap::new(),
    }
}

/// The one alert of `alerts` whose `incident_id` label is `id`.
fn alert_of<'a>(alerts: &'a [Value], id: &str) -> Option<&'a Value> {
    alerts.iter().find(|a| a["labels"]["incident_id"] == id)
}

/// Receives Alertmanager's webhook notifications until one has `status`.
fn notification_with(received: &mpsc::Receiver<Value>, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let notification = received
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("Alertmanager sent no `{status}` notification"));
        if notification["status"] == status {
            return notification;
        }
    }
}

#[test]
fn a_real_alertmanager_gets_the_incident_firing_then_resolved() {
    let Some(binary) = alertmanager_binary() else {
        return;
    };
    let (hook, routed) = infersight_testkit::webhook::webhook_receiver(200);
    let alertmanager = Alertmanager::start(&binary, hook);
    let config = NotifyConfig {
        alertmanager_urls: vec![alertmanager.url.clone()],
        external_url: "http://infersight.test:7070".into(),
        resend_interval: "1s".into(),
        ..NotifyConfig::default()
    };
    let counters = Arc::new(Counters::new());
    let settings = config.settings("http://unused").unwrap().unwrap();
    let notifier = Notifier::start(&settings, Arc::clone(&counters)).unwrap();

    let notice = incident("inc-1");
    notifier.incident_opened(&notice);
    let mut firing = Value::Null;
    wait_for("the alert in Alertmanager", Duration::from_secs(30), || {
        firing = alert_of(&alertmanager.alerts(), "inc-1")
            .cloned()
            .unwrap_or(Value::Null);
        !firing.is_null()
    });
    let labels = &firing["labels"];
    for (name, value) in [
        ("alertname", "InferenceIncident"),
        ("severity", "critical"),
        ("model", "llama-3-8b"),
        ("worker", "worker-07"),
        ("cause", "kv_cache=paged & model_version=r2"),
        ("cause_model_version", "r2"),
        ("cause_kv_cache", "paged"),
    ] {
        assert_eq!(labels[name], value, "label {name}: {firing}");
    }
    let report = "http://infersight.test:7070/api/v1/incidents/inc-1/report";
    assert_eq!(firing["annotations"]["summary"], notice.summary, "{firing}");
    assert_eq!(firing["annotations"]["description"], notice.description);
    assert_eq!(firing["annotations"]["report_url"], report);
    assert_eq!(firing["generatorURL"], report);
    assert_eq!(firing["status"]["state"], "active", "{firing}");
    if let Some(amtool) = binary
        .parent()
        .map(|d| d.join("amtool"))
        .filter(|p| p.is_file())
    {
        let out = Command::new(amtool)
            .args(["alert", "query", "-o", "json", "incident_id=inc-1"])
            .arg(format!("--alertmanager.url={}", alertmanager.url))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("model_version=r2"), "amtool: {text}");
    }
    let routed_firing = notification_with(&routed, "firing");
    assert_eq!(routed_firing["alerts"][0]["labels"]["incident_id"], "inc-1");

    // re-sent while it fires (every second here)
    wait_for("a re-send", Duration::from_secs(20), || {
        counters.sum("infersight_notifications_sent_total", &[]) >= 2.0
    });

    let mut resolved = notice.clone();
    resolved.resolved_ns = Some(now_ns());
    notifier.incident_resolved(&resolved);
    wait_for("the alert to end", Duration::from_secs(30), || {
        alert_of(&alertmanager.alerts(), "inc-1").is_none()
    });
    let routed_resolved = notification_with(&routed, "resolved");
    assert_eq!(
        routed_resolved["alerts"][0]["labels"]["incident_id"],
        "inc-1"
    );
    assert_eq!(routed_resolved["alerts"][0]["status"], "resolved");
    assert_eq!(
        counters.sum("infersight_notifications_failed_total", &[]),
        0.0
    );
}

/// A server whose SLO `ttft-fast` burns as soon as `burning_spans` are posted.
fn slo_config(notify: &str) -> String {
    format!(
        "[store]\nfsync = \"never\"\n[alerts]\neval_interval = \"300ms\"\nslos = [{{ name = \
         \"ttft-fast\", sli = \"ttft\", threshold_ms = 200, objective = 0.99, window = \"30d\" }}]\n\
         [notify]\n{notify}"
    )
}

/// Posts spans that breach the SLO's 200 ms threshold (burn rate 100 in every window).
fn post_burning_spans(server: &Server) {
    let body = request_spans("slo", 40, (now_ns() - 150_000_000_000) as u64).encode_to_vec();
    let (status, _, _) = server.post_otlp("/v1/traces", "application/x-protobuf", &body, false);
    assert_eq!(status, 200);
}

#[test]
fn serve_sends_slo_burn_alerts_to_alertmanager() {
    let Some(binary) = alertmanager_binary() else {
        return;
    };
    let (hook, _routed) = infersight_testkit::webhook::webhook_receiver(200);
    let alertmanager = Alertmanager::start(&binary, hook);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        &slo_config(&format!(
            "alertmanager_urls = [\"{}\"]\nexternal_url = \"http://infersight.test\"\n",
            alertmanager.url
        )),
    );
    post_burning_spans(&server);
    let mut page = Value::Null;
    wait_for(
        "the SLO alert in Alertmanager",
        Duration::from_secs(30),
        || {
            page = alert_of(&alertmanager.alerts(), "slo/ttft-fast/page")
                .cloned()
                .unwrap_or(Value::Null);
            !page.is_null()
        },
    );
    assert_eq!(page["labels"]["alertname"], "SloBurnRate", "{page}");
    assert_eq!(page["labels"]["slo"], "ttft-fast");
    assert_eq!(page["labels"]["severity"], "critical");
    let summary = page["annotations"]["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("ttft-fast"), "{page}");
    let (_, metrics) = server.get("/metrics");
    let target = alertmanager.url.trim_start_matches("http://");
    assert!(
        metrics.contains(&format!(
            "infersight_notifications_failed_total{{sink=\"alertmanager\",target=\"{target}\"}} 0"
        )),
        "{metrics}"
    );
}

/// One request as a receiver saw it: headers (lowercase names) and the exact body bytes.
struct Received {
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

/// A receiver answering 200 that keeps headers (the testkit's keeps bodies only).
fn header_receiver() -> (SocketAddr, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            if let Some(received) = read_request(&stream) {
                let _ = (&stream).write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                if tx.send(received).is_err() {
                    return;
                }
            }
        }
    });
    (addr, rx)
}

fn read_request(stream: &TcpStream) -> Option<Received> {
    let mut reader = BufReader::new(stream);
    let mut headers = BTreeMap::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    let mut body = vec![0; headers.get("content-length")?.parse().ok()?];
    reader.read_exact(&mut body).ok()?;
    Some(Received { headers, body })
}

#[test]
fn serve_signs_its_webhook_and_never_shows_the_secret() {
    const SECRET: &str = "a-signing-secret-for-the-test-3f9e";
    let (hook, received) = header_receiver();
    let dir = tempfile::tempdir().unwrap();
    let config = slo_config(&format!(
        "webhook_url = \"http://{hook}/infersight\"\nwebhook_secret_env = \"TEST_NOTIFY_SECRET\"\n"
    ));
    // without the variable the configuration is refused, naming it (never a value)
    let config_path = dir.path().join("notify.toml");
    std::fs::write(&config_path, &config).unwrap();
    let out = Command::new(crate::support::bin())
        .arg("validate")
        .arg(&config_path)
        .env_remove("TEST_NOTIFY_SECRET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "notify.webhook_secret_env: environment variable `TEST_NOTIFY_SECRET` is not set"
        ),
        "{stderr}"
    );

    let server = Server::start_with(
        &dir.path().join("data"),
        &config,
        &[("TEST_NOTIFY_SECRET", SECRET), ("INFERSIGHT_LOG", "info")],
    );
    post_burning_spans(&server);
    let delivery = received
        .recv_timeout(Duration::from_secs(30))
        .expect("no signed webhook delivery");
    let header = |name: &str| delivery.headers.get(name).cloned().unwrap_or_default();
    let now_s = now_ns() / 1_000_000_000;
    signed::verify(
        SECRET.as_bytes(),
        &delivery.body,
        &header(signed::SIGNATURE_HEADER),
        &header(signed::TIMESTAMP_HEADER),
        now_s,
        300,
    )
    .unwrap();
    let body: Value = serde_json::from_slice(&delivery.body).unwrap();
    assert_eq!(body["event"], "opened", "{body}");
    assert_eq!(body["incident"]["alertname"], "SloBurnRate");
    assert_eq!(body["incident"]["labels"]["slo"], "ttft-fast");
    assert_eq!(header(signed::EVENT_HEADER), "opened");
    let log = server.stop();
    assert!(log.contains("notifications on"), "{log}");
    assert!(!log.contains(SECRET), "the secret is in the log: {log}");
}

/// A port that accepts connections and never answers, for as long as it lives.
struct Silent {
    addr: SocketAddr,
    _stop: mpsc::Sender<()>,
}

fn silent() -> Silent {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while matches!(stopped.try_recv(), Err(mpsc::TryRecvError::Empty)) {
            if let Ok((stream, _)) = listener.accept() {
                held.push(stream);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    Silent { addr, _stop: stop }
}

/// Posts `batches` OTLP batches of 20 spans to each server, alternately (so load from
/// elsewhere falls on both alike); each server's rate (batches per second of its own answers)
/// and the slowest answer of each.
fn ingest_alternately(servers: [&Server; 2], batches: usize) -> [(f64, Duration); 2] {
    let mut spent = [Duration::ZERO; 2];
    let mut slowest = [Duration::ZERO; 2];
    for i in 0..batches {
        for (s, server) in servers.iter().enumerate() {
            let body = request_spans(
                &format!("s{s}b{i}-"),
                20,
                (now_ns() - 60_000_000_000) as u64,
            )
            .encode_to_vec();
            let sent = Instant::now();
            let (status, _, _) =
                server.post_otlp("/v1/traces", "application/x-protobuf", &body, false);
            assert_eq!(status, 200);
            let took = sent.elapsed();
            spent[s] += took;
            slowest[s] = slowest[s].max(took);
        }
    }
    [0, 1].map(|s| (batches as f64 / spent[s].as_secs_f64(), slowest[s]))
}

#[test]
fn an_unreachable_alertmanager_gets_retries_counters_log_lines_and_ingest_keeps_its_rate() {
    let closed = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let silent = silent();
    let dir = tempfile::tempdir().unwrap();
    // the sink's deadline: an ingest blocked on a notification would wait at least this long
    let timeout = Duration::from_secs(2);
    let dead = Server::start(
        &dir.path().join("dead"),
        &slo_config(&format!(
            "alertmanager_urls = [\"http://{closed}\", \"http://{}\"]\ntimeout = \"2s\"\n\
             max_attempts = 3\nbackoff_initial = \"100ms\"\nbackoff_max = \"400ms\"\n\
             resend_interval = \"1s\"\n",
            silent.addr
        )),
    );
    let baseline = Server::start(&dir.path().join("baseline"), &slo_config(""));
    post_burning_spans(&dead);
    post_burning_spans(&baseline);
    let metric = |server: &Server, name: &str, target: SocketAddr| -> f64 {
        let (_, text) = server.get("/metrics");
        let series = format!("{name}{{sink=\"alertmanager\",target=\"{target}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    wait_for(
        "retries to the closed port",
        Duration::from_secs(30),
        || metric(&dead, "infersight_notification_retries_total", closed) >= 1.0,
    );

    // while both sinks fail, each server ingests the same load, batch by batch alternately
    let [(dead_rate, slowest), (base_rate, base_slowest)] =
        ingest_alternately([&dead, &baseline], 150);
    eprintln!(
        "ingest with Alertmanager unreachable: {dead_rate:.0} batches/s (slowest {slowest:?}); \
         without notifications: {base_rate:.0} batches/s (slowest {base_slowest:?})"
    );
    assert!(
        slowest < timeout,
        "an ingest request waited {slowest:?}, as long as a notification attempt"
    );
    // blocking on the sink would cost 2 s a batch, a rate near 0
    assert!(
        dead_rate >= 0.5 * base_rate,
        "ingest slowed down: {dead_rate:.0} vs {base_rate:.0} batches/s"
    );

    wait_for("both sinks to give up", Duration::from_secs(60), || {
        metric(&dead, "infersight_notifications_failed_total", closed) >= 1.0
            && metric(&dead, "infersight_notifications_failed_total", silent.addr) >= 1.0
    });
    assert_eq!(
        metric(&dead, "infersight_notifications_sent_total", closed),
        0.0
    );
    assert!(metric(&dead, "infersight_notification_retries_total", silent.addr) >= 1.0);
    drop(baseline);
    let log = dead.stop();
    let attempts: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("notification failed") && l.contains(&closed.to_string()))
        .collect();
    assert!(
        attempts.iter().any(|l| l.contains("retrying"))
            && attempts.iter().any(|l| l.contains("giving up")),
        "{log}"
    );
    assert!(
        log.lines().any(|l| l.contains("notification failed")
            && l.contains(&silent.addr.to_string())
            && l.contains("no answer within 2000 ms")),
        "{log}"
    );
}

/// An incident as the watcher stores it: `notice` is what it was last sent as.
fn stored_incident(
    store: &infersight_rca::IncidentStore,
    notice: &IncidentNotice,
    resolved_ns: Option<i64>,
) -> String {
    use infersight_model::time::format_rfc3339;
    use infersight_rca::incidents::{IncidentState, StoredNotice, WatchRecord};
    let rca: infersight_rca::RcaReport = serde_json::from_value(serde_json::json!({
        "symptom": null, "root_causes": [], "signals": [], "log_evidence": [],
        "suggestions": [], "checklist": [], "fleet_wide": false,
        "incident_window": null, "baseline_window": null, "window_source": "watch",
        "verdict": notice.description, "elapsed_ms": 1.0, "timings_ms": {}
    }))
    .unwrap();
    let record = WatchRecord {
        state: if resolved_ns.is_some() {
            IncidentState::Resolved
        } else {
            IncidentState::Open
        },
        onset: format_rfc3339(notice.onset_ns),
        detected_at: format_rfc3339(notice.detected_ns),
        resolved_at: resolved_ns.map(format_rfc3339),
        detections: vec!["sli_change (fleet): ttft rose".into()],
        timeline: Vec::new(),
        notice: Some(StoredNotice::of(notice)),
    };
    store.create_watched(&rca, record).unwrap().id
}

#[test]
fn a_restarted_serve_resends_open_incidents_with_the_same_labels_and_ends_resolved_ones() {
    let Some(binary) = alertmanager_binary() else {
        return;
    };
    let (hook, routed) = infersight_testkit::webhook::webhook_receiver(200);
    let alertmanager = Alertmanager::start(&binary, hook);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = infersight_rca::IncidentStore::open(&data);
    // the previous run: one incident still open, one that resolved just before it died
    let open_id = stored_incident(&store, &incident("placeholder"), None);
    let resolved_at = now_ns() - 30_000_000_000;
    let resolved_id = stored_incident(&store, &incident("placeholder"), Some(resolved_at));
    let sent_before = |id: &str| {
        let mut notice = incident(id);
        notice.incident_id = id.to_string();
        notice
    };
    {
        let config = NotifyConfig {
            alertmanager_urls: vec![alertmanager.url.clone()],
            resend_interval: "1h".into(),
            ..NotifyConfig::default()
        };
        let settings = config.settings("http://unused").unwrap().unwrap();
        let previous = Notifier::start(&settings, Arc::new(Counters::new())).unwrap();
        previous.incident_opened(&sent_before(&open_id));
        previous.incident_opened(&sent_before(&resolved_id));
        wait_for("both alerts firing", Duration::from_secs(30), || {
            let alerts = alertmanager.alerts();
            alert_of(&alerts, &open_id).is_some() && alert_of(&alerts, &resolved_id).is_some()
        });
        // it dies before sending the resolution
        previous.close();
    }
    let before = alert_of(&alertmanager.alerts(), &open_id).unwrap()["labels"].clone();
    // let the firing notifications of the previous run go through, then watch for new ones
    std::thread::sleep(Duration::from_secs(2));
    while routed.try_recv().is_ok() {}

    let server = Server::start(
        &data,
        &format!(
            "[store]\nfsync = \"never\"\n[notify]\nalertmanager_urls = [\"{}\"]\n\
             resend_interval = \"1s\"\n",
            alertmanager.url
        ),
    );
    // the resolved one ends, with the time it resolved
    let resolved = notification_with(&routed, "resolved");
    let ended = &resolved["alerts"][0];
    assert_eq!(
        ended["labels"]["incident_id"],
        resolved_id.as_str(),
        "{resolved}"
    );
    let ends_at = infersight_model::time::parse_time(ended["endsAt"].as_str().unwrap(), 0).unwrap();
    assert!(
        (ends_at - resolved_at).abs() < 1_000_000_000,
        "endsAt {} is not when it resolved",
        ended["endsAt"]
    );
    // the open one was re-sent (the server says so on its timeline) with the same labels: one
    // alert, no new notification
    wait_for("the re-send recorded", Duration::from_secs(30), || {
        let (_, body) = server.get(&format!("/api/v1/incidents/{open_id}"));
        body.contains("\"transition\": \"updated\"") || body.contains("\"transition\":\"updated\"")
    });
    std::thread::sleep(Duration::from_secs(3));
    let alerts = alertmanager.alerts();
    let same: Vec<&Value> = alerts
        .iter()
        .filter(|a| a["labels"]["incident_id"] == open_id.as_str())
        .collect();
    assert_eq!(same.len(), 1, "{alerts:#?}");
    assert_eq!(
        same[0]["labels"], before,
        "the labels changed at the restart"
    );
    assert_eq!(same[0]["status"]["state"], "active");
    while let Ok(notification) = routed.try_recv() {
        assert!(
            !(notification["status"] == "firing"
                && notification["alerts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a["labels"]["incident_id"] == open_id.as_str())),
            "Alertmanager took the re-send for a new alert: {notification}"
        );
    }
    let (_, body) = server.get(&format!("/api/v1/incidents/{open_id}"));
    let shown: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        shown["watch"]["state"], "open",
        "still open: the watcher carries it on"
    );
    let note = &shown["notifications"][0];
    assert_eq!(note["sink"], "alertmanager", "{shown:#}");
    assert_eq!(note["outcome"], "sent", "{shown:#}");
}
