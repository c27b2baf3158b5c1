//! The watcher (`infersight_rca::watch`) over a real store with rollups: request rows generated
//! here with seeded noise (two models, eight workers, 10 req/s), a TTFT regression of one
//! worker's model from minute 40 to minute 50. Checked: one incident per episode, opened within
//! two minutes of the onset, with the RCA's verdict naming the worker; it resolves once quiet;
//! the notifier hears opened then resolved with one id; the stored incident keeps the state and
//! the timeline. A healthy hour opens nothing. A step sees nothing after its clock: a store
//! holding the next twenty minutes gives the same detections as one that ends at the clock.
//! A restart takes back an open warning and an open incident, each in its own place. An SLI
//! change that fires alone opens an incident only when the RCA confirms it.

use std::sync::{Arc, Mutex};

use infersight_model::notice::{IncidentNotice, IncidentNotifier, Transition};
use infersight_model::rng::SplitMix64;
use infersight_model::signal::Subject;
use infersight_model::{RequestRecord, Table, TableBatch};
use infersight_query::QueryEngine;
use infersight_rca::incidents::{StoredNotice, WatchRecord};
use infersight_rca::watch::episode::Episodes;
use infersight_rca::watch::series::SLI_CHANGE;
use infersight_rca::watch::{Detection, EXHAUSTION_RISK_ALERTNAME, WatchSettings, Watcher, replay};
use infersight_rca::{IncidentState, IncidentStore, RcaError};
use infersight_store::{StorageBackend, Store, StoreOptions};

const MINUTE_NS: i64 = 60_000_000_000;
const START_NS: i64 = 1_767_225_600_000_000_000; // 2026-01-01T00:00:00Z

/// Requests of minutes `[0, minutes)`; with a fault, worker-3's requests of minutes
/// `[40, 50)` get a TTFT and e2e × 6.
fn rows(minutes: i64, fault: bool) -> Vec<RequestRecord> {
    rows_with(minutes, |minute, worker| {
        let slow = fault && worker == 3 && (40..50).contains(&minute);
        if slow { 6.0 } else { 1.0 }
    })
}

/// `minutes` of a two-model, 8-worker fleet at 10 requests/s; `factor(minute, worker)` scales
/// the TTFT.
fn rows_with(minutes: i64, factor: impl Fn(i64, usize) -> f64) -> Vec<RequestRecord> {
    let mut rng = SplitMix64::new(7);
    let mut rows = Vec::new();
    for minute in 0..minutes {
        for i in 0..600 {
            let ts = START_NS + minute * MINUTE_NS + i * 100_000_000;
            let worker = rng.below(8);
            let model = if worker.is_multiple_of(2) {
                "phi-3-mini"
            } else {
                "llama-3-8b"
            };
            let ttft = 80.0 * factor(minute, worker) * (0.2 * rng.normal()).exp();
            rows.push(RequestRecord {
                ts,
                request_id: Some(format!("r-{minute}-{i}")),
                service: Some("inference".into()),
                worker: Some(format!("worker-{worker}")),
                model: Some(model.into()),
                input_tokens: Some(400 + rng.below(200) as i64),
                output_tokens: Some(150 + rng.below(100) as i64),
                ttft_ms: Some(ttft),
                queue_ms: Some(5.0 * (0.3 * rng.normal()).exp()),
                e2e_ms: Some(ttft + 900.0 * (0.2 * rng.normal()).exp()),
                status: Some("ok".into()),
                finish_reason: Some("stop".into()),
                ..Default::default()
            });
        }
    }
    rows
}

fn engine_of(dir: &std::path::Path, rows: &[RequestRecord]) -> QueryEngine {
    let store = Store::open(StoreOptions::new(dir)).unwrap();
    store
        .append(&[TableBatch {
            table: Table::Requests,
            batch: RequestRecord::to_batch(rows),
        }])
        .unwrap();
    QueryEngine::new(Arc::new(store) as Arc<dyn StorageBackend>)
}

/// Remembers every notice.
#[derive(Debug, Default)]
struct Recorder(Mutex<Vec<(Transition, IncidentNotice)>>);

impl IncidentNotifier for Recorder {
    fn notify(&self, transition: Transition, notice: &IncidentNotice) {
        self.0.lock().unwrap().push((transition, notice.clone()));
    }
}

fn at(minute: i64) -> i64 {
    START_NS + minute * MINUTE_NS
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regression_opens_one_incident_that_resolves_once_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_of(&dir.path().join("store"), &rows(70, true));
    let incidents = IncidentStore::open(&dir.path().join("data"));
    let recorder = Arc::new(Recorder::default());
    let mut watcher = Watcher::new(
        WatchSettings::default(),
        Some(incidents.clone()),
        Some(recorder.clone() as Arc<dyn IncidentNotifier>),
    )
    .unwrap();
    let reports = replay(&engine, &mut watcher, at(0), at(70)).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let report = &reports[0];
    let delay = report.detected_ns - at(40);
    assert!(
        (0..=2 * MINUTE_NS).contains(&delay),
        "detected {} s after the onset; detections: {:#?}",
        delay / 1_000_000_000,
        report.detections
    );
    assert!(
        (at(39)..=at(41)).contains(&report.onset_ns),
        "onset {}",
        report.onset_ns
    );
    assert_eq!(report.state, IncidentState::Resolved);
    let resolved = report.resolved_ns.unwrap();
    assert!(
        (at(50)..=at(60)).contains(&resolved),
        "resolved at minute {}",
        (resolved - START_NS) / MINUTE_NS
    );
    let top = &report.rca.root_causes[0].dimensions;
    assert_eq!(
        top.get("worker").map(String::as_str),
        Some("worker-3"),
        "{}",
        report.rca.verdict
    );

    let heard = recorder.0.lock().unwrap().clone();
    let changes: Vec<Transition> = heard.iter().map(|(t, _)| *t).collect();
    assert_eq!(changes.first(), Some(&Transition::Opened), "{changes:?}");
    assert_eq!(changes.last(), Some(&Transition::Resolved), "{changes:?}");
    let id = report.incident_id.clone().unwrap();
    assert!(heard.iter().all(|(_, n)| n.incident_id == id));
    let (_, last) = heard.last().unwrap();
    assert_eq!(last.resolved_ns, Some(resolved));
    assert_eq!(
        last.report_path.as_deref(),
        Some(&*format!("/api/v1/incidents/{id}/report"))
    );
    assert_eq!(
        last.cause.get("worker").map(String::as_str),
        Some("worker-3")
    );

    let stored = incidents.get(&id).unwrap();
    let record = stored.watch.unwrap();
    assert_eq!(record.state, IncidentState::Resolved);
    let events: Vec<&str> = record.timeline.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(events.first(), Some(&"onset"), "{events:?}");
    assert_eq!(events.last(), Some(&"resolved"), "{events:?}");
    assert!(
        events.contains(&"detected") && events.contains(&"verdict"),
        "{events:?}"
    );
    assert_eq!(stored.rca.verdict, report.rca.verdict);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_hour_opens_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_of(dir.path(), &rows(70, false));
    let mut watcher = Watcher::new(WatchSettings::default(), None, None).unwrap();
    let reports = replay(&engine, &mut watcher, at(0), at(70)).await.unwrap();
    assert!(
        reports.is_empty(),
        "{:#?}",
        reports.iter().map(|r| &r.detections).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_sees_nothing_after_its_clock() {
    let dir = tempfile::tempdir().unwrap();
    let all = rows(62, true);
    let until_41: Vec<RequestRecord> = all
        .iter()
        .filter(|r| r.ts < at(41) + 30_000_000_000)
        .cloned()
        .collect();
    let later = engine_of(&dir.path().join("all"), &all);
    let now = engine_of(&dir.path().join("until"), &until_41);
    let settings = WatchSettings {
        // the behaviour detectors read SQL windows the same way; the series are the point here
        behaviour_every_ns: 60 * MINUTE_NS,
        ..WatchSettings::default()
    };
    let mut a = Watcher::new(settings.clone(), None, None).unwrap();
    let mut b = Watcher::new(settings, None, None).unwrap();
    let mut clock = at(20);
    while clock <= at(41) + 30_000_000_000 {
        let seen_later = a.step(&later, clock).await.unwrap();
        let seen_now = b.step(&now, clock).await.unwrap();
        assert_eq!(seen_later.detections, seen_now.detections, "at {clock}");
        clock += 30_000_000_000;
    }
    assert_eq!(a.reports().len(), 1);
    assert_eq!(a.reports()[0].detected_ns, b.reports()[0].detected_ns);
}

#[test]
fn bad_settings_are_refused_with_every_problem() {
    let settings = WatchSettings {
        step_ns: 0,
        confirm_minutes: 0,
        resolve_after_steps: 0,
        ..WatchSettings::default()
    };
    match Watcher::new(settings, None, None) {
        Err(RcaError::BadRequest(message)) => {
            for key in [
                "watch.step",
                "watch.confirm_minutes",
                "watch.resolve_after_steps",
            ] {
                assert!(message.contains(key), "{message}");
            }
        }
        other => panic!("expected a bad request, got {other:?}"),
    }
}

/// An open incident as a previous watcher stored it, its alert sent as `alertname`.
fn stored_open(incidents: &IncidentStore, alertname: &str, now: i64) -> infersight_rca::Incident {
    let rca: infersight_rca::RcaReport = serde_json::from_value(serde_json::json!({
        "symptom": null, "root_causes": [], "signals": [], "log_evidence": [],
        "suggestions": [], "checklist": [], "fleet_wide": false,
        "incident_window": null, "baseline_window": null,
        "window_source": "watch", "verdict": "worker-3", "elapsed_ms": 1.0, "timings_ms": {}
    }))
    .unwrap();
    let at =
        |minutes_ago: i64| infersight_model::time::format_rfc3339(now - minutes_ago * MINUTE_NS);
    let record = WatchRecord {
        state: IncidentState::Open,
        onset: at(7),
        detected_at: at(5),
        resolved_at: None,
        detections: vec!["gpu_memory worker=worker-3: rising".into()],
        timeline: Vec::new(),
        notice: Some(StoredNotice {
            alertname: alertname.into(),
            severity: "warning".into(),
            summary: "worker-3".into(),
            description: "worker-3".into(),
            cause: infersight_rca::Subject::of([("worker", "worker-3")]),
            model: None,
            worker: Some("worker-3".into()),
            extra_labels: Default::default(),
        }),
    };
    incidents.create_watched(&rca, record).unwrap()
}

/// A restart with a warning (sent under the predictions' alertname) and an incident open takes
/// both back, each in its own place, and neither is refused as a second open episode.
#[test]
fn a_restart_resumes_an_open_warning_beside_an_open_incident() {
    let dir = tempfile::tempdir().unwrap();
    let incidents = IncidentStore::open(dir.path());
    let now = infersight_model::time::now_ns();
    let incident = stored_open(&incidents, "InferenceIncident", now);
    let warning = stored_open(&incidents, EXHAUSTION_RISK_ALERTNAME, now);
    let mut watcher = Watcher::new(WatchSettings::default(), Some(incidents), None).unwrap();

    assert!(watcher.resume(&incident, now), "the incident");
    assert!(
        watcher.resume(&warning, now),
        "the warning, in the warnings' place"
    );
    let held: Vec<_> = watcher
        .reports()
        .into_iter()
        .map(|r| (r.incident_id.clone(), r.notice().alertname))
        .collect();
    assert_eq!(held.len(), 2, "{held:?}");
    assert!(held.contains(&(
        Some(warning.id.clone()),
        EXHAUSTION_RISK_ALERTNAME.to_string()
    )));
    // a second warning finds the place taken
    let another = stored_open(
        &IncidentStore::open(dir.path()),
        EXHAUSTION_RISK_ALERTNAME,
        now,
    );
    assert!(!watcher.resume(&another, now));
}

/// A detection of `kind` about the fleet's TTFT, begun at minute 60 (keyed as the watcher keys it).
fn detection(kind: &str) -> Detection {
    Detection {
        key: if kind == SLI_CHANGE {
            infersight_rca::watch::series::sli_key("ttft", "fleet")
        } else {
            format!("{kind}/ttft/fleet")
        },
        kind: kind.into(),
        subject: Subject::default(),
        onset_ns: at(60),
        strength: 4.0,
        detail: "share over the p95 3.1 % → 6.7 %".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_sli_change_the_rca_does_not_confirm_opens_nothing() {
    // A healthy hour: the RCA finds no symptom and nothing to blame behind a chance shift.
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_of(&dir.path().join("store"), &rows(70, false));
    let settings = WatchSettings::default();
    let mut episodes = Episodes::default();
    for step in 0..6 {
        let now = at(62) + step * 30_000_000_000;
        let fired = [detection(SLI_CHANGE)];
        let transitions = episodes
            .advance(&engine, &settings, now, &fired, None, None)
            .await
            .unwrap();
        assert!(transitions.is_empty(), "step {step}: {transitions:?}");
    }
    assert!(episodes.reports().is_empty());
    // what needs no second opinion opens at once, over the same data
    let fired = [detection("watermark")];
    let transitions = episodes
        .advance(&engine, &settings, at(66), &fired, None, None)
        .await
        .unwrap();
    assert_eq!(transitions.len(), 1);
    assert_eq!(episodes.reports().len(), 1);
    // and the same SLI change over a regression opens one
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_of(&dir.path().join("store"), &rows(50, true));
    let mut episodes = Episodes::default();
    let mut fired = detection(SLI_CHANGE);
    fired.onset_ns = at(40);
    let transitions = episodes
        .advance(&engine, &settings, at(43), &[fired], None, None)
        .await
        .unwrap();
    assert_eq!(transitions.len(), 1, "{:?}", episodes.reports());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_fleet_wide_shift_nothing_explains_opens_nothing() {
    // The whole fleet's TTFT 15 % higher from minute 40 (a bursty real trace does that): the
    // RCA confirms a fleet-wide symptom but blames no slice and finds no signal.
    let dir = tempfile::tempdir().unwrap();
    let fleet = |scale: f64| move |minute: i64, _| if minute >= 40 { scale } else { 1.0 };
    let engine = engine_of(&dir.path().join("store"), &rows_with(50, fleet(1.15)));
    let mut fired = detection(SLI_CHANGE);
    fired.onset_ns = at(40);
    let reports = open_one(WatchSettings::default(), &engine, &fired).await;
    assert!(reports.is_empty(), "{reports:#?}");
    // the same data with the gate off: the RCA does confirm a fleet-wide shift
    let off = WatchSettings {
        min_unexplained_effect: 1.0,
        min_unexplained_rise_ms: 0.0,
        ..WatchSettings::default()
    };
    let reports = open_one(off, &engine, &fired).await;
    assert_eq!(reports.len(), 1);
    assert!(
        reports[0].rca.root_causes.is_empty(),
        "{:?}",
        reports[0].rca.verdict
    );
    let symptom = reports[0].rca.symptom.as_ref().expect("a symptom");
    assert!(symptom.current > symptom.baseline * 1.05, "{symptom:?}");
    // and a fleet twice as slow opens one with the gate on
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_of(&dir.path().join("store"), &rows_with(50, fleet(2.0)));
    let reports = open_one(WatchSettings::default(), &engine, &fired).await;
    let off = WatchSettings {
        min_unexplained_effect: 1.0,
        min_unexplained_rise_ms: 0.0,
        ..WatchSettings::default()
    };
    let seen = open_one(off, &engine, &fired).await;
    let seen = seen.first().map(|r| (&r.rca.symptom, &r.rca.verdict));
    assert_eq!(
        reports.len(),
        1,
        "a fleet-wide doubling must open an incident: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_slice_opens_an_incident_only_when_it_is_often_enough_slower() {
    // workers 1 and 3 15 % slower from minute 40: the RCA names worker-1, whose requests are
    // 4–5 × as often over the p95 as before (odds ratio 4–8), behind a fleet TTFT that moved
    // 6 %. Whether the TTFT change that fired alone opens an incident follows
    // `min_cause_odds_ratio`.
    let slow = |scale: f64| {
        move |minute: i64, worker: usize| {
            if minute >= 40 && (worker == 1 || worker == 3) {
                scale
            } else {
                1.0
            }
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_of(&dir.path().join("store"), &rows_with(50, slow(1.15)));
    let mut fired = detection(SLI_CHANGE);
    fired.onset_ns = at(40);
    let reports = open_one(WatchSettings::default(), &engine, &fired).await;
    assert_eq!(reports.len(), 1, "the RCA must name a slow worker");
    let top = &reports[0].rca.root_causes[0];
    assert!(
        matches!(
            top.dimensions.get("worker").map(String::as_str),
            Some("worker-1" | "worker-3")
        ),
        "{:?}",
        reports[0].rca.verdict
    );
    let ratio = top.odds_ratio().expect("a localized cause has its rate");
    assert!(
        (WatchSettings::default().min_cause_odds_ratio..8.0).contains(&ratio),
        "odds ratio {ratio}: {:?}",
        top.slice_rate
    );
    // the same verdict with a stricter rule is weak: no incident
    let strict = WatchSettings {
        min_cause_odds_ratio: 8.0,
        ..WatchSettings::default()
    };
    let reports = open_one(strict.clone(), &engine, &fired).await;
    assert!(reports.is_empty(), "{reports:#?}");
    // 60 % slower: the share rises past even that rule, and it opens an incident
    let dir = tempfile::tempdir().unwrap();
    let engine = engine_of(&dir.path().join("store"), &rows_with(50, slow(1.6)));
    let reports = open_one(strict, &engine, &fired).await;
    assert_eq!(reports.len(), 1, "a slow worker must open an incident");
    let top = &reports[0].rca.root_causes[0];
    assert!(
        top.odds_ratio().is_some_and(|r| r >= 8.0),
        "{:?}",
        top.slice_rate
    );
}

/// The episodes after one step at minute 43 that saw `fired`.
async fn open_one(
    settings: WatchSettings,
    engine: &QueryEngine,
    fired: &Detection,
) -> Vec<infersight_rca::watch::episode::EpisodeReport> {
    let mut episodes = Episodes::default();
    episodes
        .advance(
            engine,
            &settings,
            at(43),
            std::slice::from_ref(fired),
            None,
            None,
        )
        .await
        .unwrap();
    episodes.reports()
}
