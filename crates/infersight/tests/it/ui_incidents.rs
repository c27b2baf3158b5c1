//! The incident pages of the web UI in headless Chromium, against `infersight serve`: the list
//! updates without a reload when the watcher opens an incident and when it resolves (state,
//! severity, detection time, top cause), and the incident page draws its timeline as an SVG
//! chart (onset, detection, verdict, automatic action, notification, resolution) and lists the
//! action taken while it was open. The incident is written into the data directory the way the
//! watcher and `serve` store one (`IncidentStore`, which the server reads on every request), so
//! the test needs no simulated fault. Without Chromium it skips (fails with
//! `INFERSIGHT_TEST_CHROMIUM=1`).

use std::time::Duration;

use infersight_rca::incidents::{
    ActionRecord, IncidentState, IncidentStore, NotificationRecord, StoredNotice, TimelineEntry,
    WatchRecord,
};
use infersight_rca::{RcaReport, Subject};
use infersight_testkit::chromium::{self, Driver};
use serde_json::json;

use crate::support::Server;
use crate::ui::{check_page, click, wait_for_page};

fn verdict() -> RcaReport {
    serde_json::from_value(json!({
        "symptom": null,
        "root_causes": [{"rank": 1, "dimensions": {"model_version": "r2", "pool": "east"},
                         "explained_fraction": 0.9, "score": 3.0, "evidence": []}],
        "signals": [], "log_evidence": [], "suggestions": [], "checklist": [],
        "fleet_wide": false, "incident_window": null, "baseline_window": null,
        "window_source": "watch", "verdict": "ttft rose on model_version=r2 & pool=east",
        "elapsed_ms": 1.0, "timings_ms": {}
    }))
    .unwrap()
}

fn at(now_ns: i64, minutes_ago: i64) -> String {
    infersight_model::time::format_rfc3339(now_ns - minutes_ago * 60_000_000_000)
}

fn entry(at: String, event: &str, detail: &str) -> TimelineEntry {
    TimelineEntry {
        at,
        event: event.into(),
        detail: detail.into(),
    }
}

/// The record of an episode that began 12 minutes ago and was detected 10 minutes ago.
fn record(now: i64) -> WatchRecord {
    WatchRecord {
        state: IncidentState::Open,
        onset: at(now, 12),
        detected_at: at(now, 10),
        resolved_at: None,
        detections: vec!["sli_change (fleet): ttft p99 rose".into()],
        timeline: vec![
            entry(at(now, 12), "onset", "earliest onset of what fired"),
            entry(at(now, 10), "detected", "sli_change (fleet): ttft p99 rose"),
            entry(
                at(now, 10),
                "verdict",
                "ttft rose on model_version=r2 & pool=east",
            ),
        ],
        notice: Some(StoredNotice {
            alertname: "InferenceIncident".into(),
            severity: "critical".into(),
            summary: "ttft p99 rose".into(),
            description: "ttft rose on model_version=r2 & pool=east".into(),
            cause: Subject::of([("model_version", "r2"), ("pool", "east")]),
            model: None,
            worker: None,
            extra_labels: Default::default(),
        }),
    }
}

#[test]
fn the_incident_list_updates_live_and_the_incident_page_draws_its_timeline() {
    if !chromium::available(
        "the_incident_list_updates_live_and_the_incident_page_draws_its_timeline",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, "[store]\nfsync = \"never\"\n");
    let base = format!("http://{}", server.api);
    let out = chromium::screenshot_dir(env!("CARGO_MANIFEST_DIR"), "ui-screenshots");
    let profile = tempfile::tempdir().unwrap();
    let mut driver = Driver::start();
    driver.open_session(profile.path());
    driver.set_window_size(1280, 800);

    driver.navigate(&format!("{base}/?page=incidents"));
    wait_for_page(&driver, "incidents");
    // a mark on this document: a reload would lose it
    driver.execute("window.__sameDocument = true; return true", json!([]));

    // the watcher opens an incident; an action and a notification follow
    let store = IncidentStore::open(&data);
    let now = infersight_model::time::now_ns();
    let mut watch = record(now);
    let id = store.create_watched(&verdict(), watch.clone()).unwrap().id;
    store
        .record_action(
            &id,
            ActionRecord {
                at: at(now, 9),
                action: "route_to_fallback".into(),
                target: "model_version=r2".into(),
                outcome: "delivered".into(),
                policy: Some("fallback-on-ttft".into()),
                detail: None,
            },
        )
        .unwrap();
    store
        .record_notification(
            &id,
            NotificationRecord {
                at: at(now, 10),
                sink: "alertmanager".into(),
                target: "127.0.0.1:9093".into(),
                transition: "opened".into(),
                outcome: "sent".into(),
                detail: None,
            },
        )
        .unwrap();
    let row = driver.wait_for(
        "the new incident in the list",
        &format!(
            "const r = document.querySelector('[data-incident-row=\"{id}\"]');
             return r ? {{ state: r.dataset.state, text: r.innerText, same: window.__sameDocument === true }} : null"
        ),
        Duration::from_secs(30),
    );
    assert_eq!(row["state"], "open", "{row}");
    assert_eq!(
        row["same"], true,
        "the list updated by reloading the page: {row}"
    );
    let text = row["text"].as_str().unwrap_or_default();
    for needle in [
        "critical",
        "model_version=r2 & pool=east",
        &watch.detected_at[..10],
    ] {
        assert!(text.contains(needle), "the row lacks {needle}: {text}");
    }

    // it resolves: the row follows, still without a reload
    watch.state = IncidentState::Resolved;
    watch.resolved_at = Some(at(now, 1));
    watch
        .timeline
        .push(entry(at(now, 1), "resolved", "quiet for 10 steps"));
    store.update_watched(&id, &verdict(), &watch).unwrap();
    let row = driver.wait_for(
        "the incident resolved in the list",
        &format!(
            "const r = document.querySelector('[data-incident-row=\"{id}\"]');
             return r && r.dataset.state === 'resolved' ? {{ same: window.__sameDocument === true }} : null"
        ),
        Duration::from_secs(30),
    );
    assert_eq!(row["same"], true, "{row}");
    check_page(&driver, &out, "incidents-live", 0);

    // the incident page: the timeline chart has every kind of event, the action is listed
    click(&driver, &format!("[data-incident-row=\"{id}\"] a"));
    wait_for_page(&driver, "incident");
    let charts = check_page(&driver, &out, "incident-timeline", 1);
    assert!(
        charts.iter().any(|c| c["id"] == "incident-timeline"),
        "{charts:?}"
    );
    let series = driver.execute(
        "return [...document.querySelectorAll('svg[data-chart=incident-timeline] [data-series]')].map(m => m.dataset.series)",
        json!([]),
    );
    for event in [
        "onset", "detected", "verdict", "action", "notified", "resolved",
    ] {
        assert!(
            series.as_array().unwrap().contains(&json!(event)),
            "the timeline lacks {event}: {series}"
        );
    }
    let actions = driver.execute(
        "const t = document.querySelector('[data-table=incident-actions]'); return t ? t.innerText : ''",
        json!([]),
    );
    let actions = actions.as_str().unwrap_or_default();
    assert!(
        actions.contains("route_to_fallback") && actions.contains("delivered"),
        "{actions}"
    );
    let watch_line = driver.execute(
        "const p = document.querySelector('[data-watch]'); return p ? p.innerText : ''",
        json!([]),
    );
    assert!(
        watch_line
            .as_str()
            .is_some_and(|t| t.contains("resolved") && t.contains("critical")),
        "{watch_line}"
    );
    // the report in the frame has the incident section with the action
    driver.wait_for(
        "the report frame",
        "const f = document.querySelector('iframe.report'); return f && f.dataset.loaded === 'true'",
        Duration::from_secs(60),
    );
    let report = driver.execute(
        "return document.querySelector('iframe.report').contentDocument.body.innerText",
        json!([]),
    );
    assert!(
        report
            .as_str()
            .is_some_and(|t| t.contains("route_to_fallback")),
        "the embedded report shows the action"
    );
    driver.assert_console_channel_works();
}
