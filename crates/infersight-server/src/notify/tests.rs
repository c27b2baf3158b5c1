//! Tests of notifications: the configuration's checks, the backoff schedule, Alertmanager's
//! alert bodies and their life (open, relabel, re-send, resolve), the webhook signature and its
//! verification, and delivery against real sockets: retries on 5xx, no retry on 4xx, a closed
//! port, a port that accepts but never answers, a full queue, all without blocking the caller.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use infersight_model::notice::{IncidentNotice, IncidentNotifier, Severity, Transition};
use infersight_model::signal::Subject;
use infersight_model::telemetry::Counters;
use serde_json::Value;

use super::alertmanager::{AlertmanagerChannel, label_name, labels};
use super::config::{NotifyConfig, RetryPolicy, Secret};
use super::delivery::{Channel, Event, backoff};
use super::signed::{self, VerifyError, signature, verify};
use super::{Notifier, NotifySettings};

const SECRET: &[u8] = b"0123456789abcdef-test-secret";

fn notice(id: &str) -> IncidentNotice {
    IncidentNotice {
        incident_id: id.into(),
        alertname: "InferenceIncident".into(),
        severity: Severity::Critical,
        summary: "P99 TTFT x3 on llama-3-8b".into(),
        description: "92% of the excess on model_version=r2 & kv_cache=paged".into(),
        cause: Subject::of([("model_version", "r2"), ("kv.cache", "paged")]),
        model: Some("llama-3-8b".into()),
        worker: Some("worker-07".into()),
        onset_ns: 1_764_374_400_000_000_000,
        detected_ns: 1_764_374_460_000_000_000,
        resolved_ns: None,
        report_path: Some(format!("/api/v1/incidents/{id}/report")),
        extra_labels: BTreeMap::from([
            ("team".to_string(), "serving".to_string()),
            ("severity".to_string(), "ignored".to_string()),
        ]),
    }
}

fn event(transition: Transition, notice: IncidentNotice, at_ns: i64) -> Event {
    Event {
        transition,
        report_url: notice
            .report_path
            .as_ref()
            .map(|p| format!("http://infersight:7070{p}")),
        notice,
        at_ns,
    }
}

fn settings(alertmanagers: Vec<String>, webhook: Option<String>) -> NotifySettings {
    NotifySettings {
        alertmanagers,
        resend_interval: Duration::from_secs(60),
        webhook: webhook.map(|url| (url, Secret::new(SECRET.to_vec()))),
        external_url: "http://infersight:7070".into(),
        timeout: Duration::from_millis(400),
        retry: RetryPolicy {
            max_attempts: 3,
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_millis(80),
        },
        queue_capacity: 16,
        slo_alerts: true,
        ca_certs: None,
    }
}

/// One request as a receiver saw it (the testkit's https receiver reads the same).
use infersight_testkit::https::Request as Received;

/// An HTTP receiver on 127.0.0.1 answering the statuses of `script` in turn (the last one
/// from then on), handing every request to the channel.
fn receiver(script: Vec<u16>) -> (SocketAddr, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for (i, stream) in listener.incoming().flatten().enumerate() {
            let status = script[i.min(script.len() - 1)];
            let Some(received) = infersight_testkit::https::read_request(&stream) else {
                continue;
            };
            let answer = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: 9\r\nconnection: close\r\n\r\nsaid: no\n"
            );
            let _ = (&stream).write_all(answer.as_bytes());
            if tx.send(received).is_err() {
                return;
            }
        }
    });
    (addr, rx)
}

/// A port nothing listens on.
fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// A listener that accepts connections and never answers; dropped, it closes them.
struct Silent {
    addr: SocketAddr,
    _held: mpsc::Sender<()>,
}

fn silent() -> Silent {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        listener.set_nonblocking(true).unwrap();
        let mut held = Vec::new();
        // until the test drops its end
        while matches!(rx.try_recv(), Err(mpsc::TryRecvError::Empty)) {
            if let Ok((stream, _)) = listener.accept() {
                held.push(stream);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    Silent { addr, _held: tx }
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn count(counters: &Counters, name: &str, sink: &str) -> f64 {
    counters.sum(name, &[("sink", sink)])
}

#[test]
fn the_configuration_reports_every_problem_at_once() {
    let config = NotifyConfig {
        alertmanager_urls: vec![
            "ftp://am:9093".into(),
            "http://am:9093".into(),
            "http://am:9093".into(),
            "http:///x".into(),
        ],
        resend_interval: "soon".into(),
        webhook_url: "http://hooks/infersight".into(),
        external_url: "infersight.example.com".into(),
        backoff_initial: "1m".into(),
        backoff_max: "10s".into(),
        max_attempts: 0,
        queue_capacity: 0,
        ..NotifyConfig::default()
    };
    let errors = config.validate();
    let expected = [
        "notify.resend_interval: `soon` is not a positive duration like 500ms, 30s, 15m, 2h",
        "notify.backoff_initial: `1m` is longer than notify.backoff_max `10s`",
        "notify.alertmanager_urls[0]: `ftp://am:9093` must be an http:// or https:// URL",
        "notify.alertmanager_urls[2]: `http://am:9093` is listed twice",
        "notify.alertmanager_urls[3]: `http:///x` has no host",
        "notify.webhook_secret_env: required with notify.webhook_url (name the environment variable holding the signing secret)",
        "notify.external_url: `infersight.example.com` must start with http:// or https://",
        "notify.max_attempts: must be at least 1",
        "notify.queue_capacity: must be at least 1",
    ];
    assert_eq!(errors, expected);
    assert!(config.settings("http://x").is_err());

    let unset = NotifyConfig {
        webhook_url: "http://hooks/x".into(),
        webhook_secret_env: "INFERSIGHT_TEST_NOTIFY_NEVER_SET_41c2".into(),
        ..NotifyConfig::default()
    };
    assert_eq!(
        unset.validate(),
        [
            "notify.webhook_secret_env: environment variable `INFERSIGHT_TEST_NOTIFY_NEVER_SET_41c2` is not set; put the webhook's signing secret (at least 16 bytes) in it"
        ]
    );
    // `PATH` is set everywhere; whatever its length, the error never shows its value
    let path_value = std::env::var("PATH").unwrap_or_default();
    let short = NotifyConfig {
        webhook_secret_env: "PATH".into(),
        ..unset
    };
    for error in short.validate() {
        assert!(!error.contains(&path_value), "{error}");
    }

    let off = NotifyConfig::default();
    assert!(off.validate().is_empty());
    assert!(off.settings("http://x").unwrap().is_none());
    let on = NotifyConfig {
        alertmanager_urls: vec!["http://am:9093/".into()],
        ..NotifyConfig::default()
    };
    let settings = on.settings("http://127.0.0.1:7070/").unwrap().unwrap();
    assert_eq!(settings.alertmanagers, ["http://am:9093"]);
    assert_eq!(settings.external_url, "http://127.0.0.1:7070");
    assert_eq!(settings.retry.max_attempts, 6);
    assert_eq!(settings.resend_interval, Duration::from_secs(60));
    let unknown = serde_json::from_value::<NotifyConfig>(serde_json::json!({ "retries": 3 }));
    assert!(
        unknown
            .unwrap_err()
            .to_string()
            .contains("unknown field `retries`")
    );
}

#[test]
fn a_secret_never_shows_in_debug_output() {
    let settings = settings(Vec::new(), Some("http://h/x".into()));
    let printed = format!("{settings:?}");
    assert!(!printed.contains("test-secret"), "{printed}");
    assert!(printed.contains("Secret(<28 bytes>)"), "{printed}");
}

#[test]
fn backoff_doubles_is_capped_and_jittered_within_half() {
    let policy = RetryPolicy {
        max_attempts: 10,
        backoff_initial: Duration::from_millis(500),
        backoff_max: Duration::from_secs(30),
    };
    let ms = |retry, u| backoff(&policy, retry, u).as_millis();
    assert_eq!((ms(1, 0.0), ms(1, 1.0)), (250, 500));
    assert_eq!((ms(2, 0.0), ms(2, 1.0)), (500, 1000));
    assert_eq!((ms(4, 0.5), ms(4, 1.0)), (3000, 4000));
    assert_eq!((ms(7, 0.0), ms(7, 1.0)), (15_000, 30_000), "capped");
    assert_eq!(ms(200, 1.0), 30_000, "no overflow");
}

#[test]
fn alert_labels_carry_the_incident_and_stay_valid_label_names() {
    let labels = labels(&notice("42"));
    let expected: BTreeMap<String, String> = [
        ("alertname", "InferenceIncident"),
        ("severity", "critical"),
        ("incident_id", "42"),
        ("model", "llama-3-8b"),
        ("worker", "worker-07"),
        ("cause", "kv.cache=paged & model_version=r2"),
        ("cause_kv_cache", "paged"),
        ("cause_model_version", "r2"),
        ("team", "serving"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(labels, expected);
    assert_eq!(label_name("9lives"), "_9lives");
    assert_eq!(label_name("gen_ai.request.model"), "gen_ai_request_model");
    assert_eq!(label_name(""), "_");
}

#[test]
fn an_alertmanager_alert_fires_with_a_horizon_is_relabelled_re_sent_and_resolved() {
    let mut channel = AlertmanagerChannel::new("http://am:9093/", Duration::from_secs(60));
    assert_eq!(channel.url(), "http://am:9093/api/v2/alerts");
    assert!(channel.next_resend().is_none());
    let now = 1_764_374_500_000_000_000;
    let render = |messages: Vec<super::delivery::Message>| -> Vec<Value> {
        assert_eq!(messages.len(), 1);
        let request = (messages[0].render)(now);
        serde_json::from_slice::<Value>(&request.body)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    };
    let opened = render(channel.on_event(&event(Transition::Opened, notice("7"), now)));
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0]["labels"]["alertname"], "InferenceIncident");
    assert_eq!(
        opened[0]["annotations"]["summary"],
        "P99 TTFT x3 on llama-3-8b"
    );
    assert_eq!(
        opened[0]["annotations"]["report_url"],
        "http://infersight:7070/api/v1/incidents/7/report"
    );
    assert_eq!(
        opened[0]["generatorURL"],
        opened[0]["annotations"]["report_url"]
    );
    assert_eq!(opened[0]["startsAt"], "2025-11-29T00:00:00.000Z");
    // firing: it ends 4 re-send intervals from the attempt unless re-sent
    assert_eq!(opened[0]["endsAt"], "2025-11-29T00:05:40.000Z");
    assert!(channel.next_resend().is_some());

    let mut moved = notice("7");
    moved.cause = Subject::of([("worker", "worker-01")]);
    let updated = render(channel.on_event(&event(Transition::Updated, moved.clone(), now)));
    assert_eq!(updated.len(), 2, "the old label set ends, the new fires");
    assert_eq!(
        updated[0]["labels"]["cause"],
        "kv.cache=paged & model_version=r2"
    );
    assert_eq!(updated[0]["endsAt"], "2025-11-29T00:01:40.000Z");
    assert_eq!(updated[1]["labels"]["cause"], "worker=worker-01");

    let resent = render(channel.resend(Instant::now()));
    assert_eq!(resent.len(), 1);
    assert_eq!(resent[0]["labels"]["cause"], "worker=worker-01");

    moved.resolved_ns = Some(now - 30_000_000_000);
    let resolved = render(channel.on_event(&event(Transition::Resolved, moved, now)));
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["endsAt"], "2025-11-29T00:01:10.000Z");
    assert!(channel.next_resend().is_none(), "nothing fires any more");
    assert!(channel.resend(Instant::now()).is_empty());
}

#[test]
fn the_signature_is_hmac_sha256_of_the_body_and_verifies_only_fresh_untouched_bodies() {
    // RFC 4231, test case 2
    assert_eq!(
        signature(b"Jefe", b"what do ya want for nothing?"),
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    let mut channel = signed::SignedWebhook::new("http://h/x", Secret::new(SECRET.to_vec()));
    let now_ns = 1_764_374_500_000_000_000;
    let messages = channel.on_event(&event(Transition::Opened, notice("9"), now_ns));
    let request = (messages[0].render)(now_ns);
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    let (sig, ts) = (
        header(signed::SIGNATURE_HEADER),
        header(signed::TIMESTAMP_HEADER),
    );
    assert_eq!(ts, "1764374500");
    assert_eq!(
        header(signed::DELIVERY_HEADER),
        format!("9-opened-{now_ns}")
    );
    let now_s = 1_764_374_500;
    assert_eq!(verify(SECRET, &request.body, &sig, &ts, now_s, 300), Ok(()));
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(body["event"], "opened");
    assert_eq!(body["incident"]["cause"]["model_version"], "r2");
    assert_eq!(
        body["incident"]["report_url"],
        "http://infersight:7070/api/v1/incidents/9/report"
    );

    let mut tampered = request.body.clone();
    tampered[10] ^= 1;
    assert_eq!(
        verify(SECRET, &tampered, &sig, &ts, now_s, 300),
        Err(VerifyError::BadSignature)
    );
    assert_eq!(
        verify(
            b"another-secret-of-16+",
            &request.body,
            &sig,
            &ts,
            now_s,
            300
        ),
        Err(VerifyError::BadSignature)
    );
    assert_eq!(
        verify(SECRET, &request.body, &sig, &ts, now_s + 301, 300),
        Err(VerifyError::Stale {
            age_s: 301,
            tolerance_s: 300
        })
    );
    assert!(matches!(
        verify(SECRET, &request.body, &sig, "1764374999", now_s, 300),
        Err(VerifyError::TimestampMismatch { .. })
    ));
    let multibyte = format!("sha256={}", "é".repeat(32));
    for bad in ["md5=00", "sha256=zz", &multibyte] {
        assert_eq!(
            verify(SECRET, &request.body, bad, &ts, now_s, 300),
            Err(VerifyError::MalformedSignature),
            "{bad}"
        );
    }
    // a retry later is signed afresh, with its own timestamp
    let later = (messages[0].render)(now_ns + 7_000_000_000);
    assert_ne!(later.body, request.body);
}

#[test]
fn a_5xx_is_retried_with_a_fresh_signature_until_accepted_and_counted() {
    let (addr, received) = receiver(vec![503, 502, 200]);
    let counters = Arc::new(Counters::new());
    let notifier = Notifier::start(
        &settings(Vec::new(), Some(format!("http://{addr}/hook"))),
        Arc::clone(&counters),
    )
    .unwrap();
    notifier.incident_opened(&notice("11"));
    let attempts: Vec<Received> = (0..3)
        .map(|_| received.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    wait_for("the sent counter", Duration::from_secs(10), || {
        count(&counters, "infersight_notifications_sent_total", "webhook") == 1.0
    });
    assert_eq!(
        count(
            &counters,
            "infersight_notification_retries_total",
            "webhook"
        ),
        2.0
    );
    assert_eq!(
        count(
            &counters,
            "infersight_notifications_failed_total",
            "webhook"
        ),
        0.0
    );
    let now_s = infersight_model::time::now_ns() / 1_000_000_000;
    let delivery = &attempts[0].headers["x-infersight-delivery"];
    for attempt in &attempts {
        assert_eq!(attempt.path, "/hook");
        assert_eq!(&attempt.headers["x-infersight-delivery"], delivery);
        assert_eq!(attempt.headers["x-infersight-event"], "opened");
        verify(
            SECRET,
            &attempt.body,
            &attempt.headers["x-infersight-signature"],
            &attempt.headers["x-infersight-timestamp"],
            now_s,
            300,
        )
        .unwrap();
    }
    let rendered = counters.render();
    assert!(
        rendered.contains(&format!(
            "infersight_notifications_sent_total{{sink=\"webhook\",target=\"{addr}\"}} 1"
        )),
        "{rendered}"
    );
}

#[test]
fn a_4xx_is_not_retried_and_an_unreachable_sink_gives_up_after_its_attempts() {
    let (refusing, received) = receiver(vec![400]);
    let closed = closed_port();
    let counters = Arc::new(Counters::new());
    let notifier = Notifier::start(
        &settings(
            vec![format!("http://{refusing}"), format!("http://{closed}")],
            None,
        ),
        Arc::clone(&counters),
    )
    .unwrap();
    notifier.incident_opened(&notice("12"));
    let first = received.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(first.path, "/api/v2/alerts");
    wait_for("both failures", Duration::from_secs(10), || {
        count(
            &counters,
            "infersight_notifications_failed_total",
            "alertmanager",
        ) == 2.0
    });
    let failed = |target: &SocketAddr, name: &str| {
        counters.get(
            name,
            &[("sink", "alertmanager"), ("target", &target.to_string())],
        )
    };
    assert_eq!(
        failed(&refusing, "infersight_notification_retries_total"),
        0.0
    );
    assert_eq!(
        failed(&closed, "infersight_notification_retries_total"),
        2.0
    );
    assert_eq!(
        failed(&closed, "infersight_notifications_failed_total"),
        1.0
    );
    assert!(
        received.recv_timeout(Duration::from_millis(300)).is_err(),
        "a refused alert was sent again"
    );
}

#[test]
fn a_sink_that_never_answers_blocks_no_caller_and_a_full_queue_drops_and_counts() {
    let silent = silent();
    let counters = Arc::new(Counters::new());
    let mut slow = settings(vec![format!("http://{}", silent.addr)], None);
    slow.timeout = Duration::from_secs(2);
    slow.queue_capacity = 4;
    let notifier = Notifier::start(&slow, Arc::clone(&counters)).unwrap();
    let started = Instant::now();
    for i in 0..50 {
        notifier.incident_opened(&notice(&format!("n{i}")));
    }
    let elapsed = started.elapsed();
    eprintln!("50 notifications handed to a sink that never answers in {elapsed:?}");
    assert!(
        elapsed < Duration::from_millis(200),
        "50 notifications took {elapsed:?} to hand over"
    );
    // one is in flight (waiting for an answer), four wait, the rest are dropped
    let dropped = counters.get(
        "infersight_notifications_dropped_total",
        &[("sink", "alertmanager"), ("reason", "queue_full")],
    );
    assert!((45.0..=46.0).contains(&dropped), "dropped {dropped}");
    let depth = counters.sum("infersight_notification_queue_depth", &[]);
    assert!((3.0..=4.0).contains(&depth), "depth {depth}");
    // closing stops the thread between attempts; what waits is dropped as `shutdown`
    notifier.close();
    wait_for("the shutdown drops", Duration::from_secs(10), || {
        counters.get(
            "infersight_notifications_dropped_total",
            &[("sink", "alertmanager"), ("reason", "shutdown")],
        ) >= 3.0
    });
    notifier.incident_resolved(&notice("n0"));
    assert_eq!(
        counters.get(
            "infersight_notifications_failed_total",
            &[("sink", "alertmanager")]
        ),
        1.0,
        "the attempt in flight timed out and was given up at close"
    );
}

#[test]
fn report_links_are_made_absolute_with_the_external_url() {
    let notifier = Notifier::start(&settings(Vec::new(), None), Arc::new(Counters::new())).unwrap();
    assert_eq!(
        notifier.report_url("/api/v1/incidents/3/report"),
        "http://infersight:7070/api/v1/incidents/3/report"
    );
    assert_eq!(notifier.report_url("https://x/y"), "https://x/y");
    // no sink: notices go nowhere, quietly
    notifier.notify(Transition::Opened, &notice("1"));
}
