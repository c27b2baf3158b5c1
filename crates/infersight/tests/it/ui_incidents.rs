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

/// A verdict shaped like the headline case: a version regression on top and, ranked below it,
/// load-driven queueing that explains a larger share; windows around 20:00 of a fixed day.
fn leading_verdict(onset_ns: i64) -> RcaReport {
    let at =
        |minutes: i64| infersight_model::time::format_rfc3339(onset_ns + minutes * 60_000_000_000);
    let top = json!({"model_version": "r2", "lora_adapters": "chat-lora,sql-lora"});
    let load = json!({"model": "m-8b", "model_version": "r1"});
    serde_json::from_value(json!({
        "symptom": {"sli": "ttft", "baseline": 2276.075, "current": 2951.936, "onset": at(0), "z": 40.9},
        "root_causes": [
            {"rank": 1, "dimensions": top, "explained_fraction": 0.437, "score": 90.0,
             "evidence": ["ttft_ms over 2.1 s (baseline p95): 100 % of the slice's requests vs 6 %"]},
            {"rank": 2, "dimensions": load, "explained_fraction": 0.501, "score": 40.0,
             "evidence": ["load-driven queueing: queue p90 20 ms → 300 ms while prefill and decode did not change"]}
        ],
        "signals": [
            {"kind": "version_regression", "subject": top, "onset": at(0), "strength": 90.0, "detail": "regressed"},
            {"kind": "latency_spike", "subject": top, "onset": at(0), "strength": 40.9, "detail": "spike"},
            {"kind": "queue_buildup", "subject": load, "onset": at(0), "strength": 1.4, "detail": "load"}
        ],
        "log_evidence": [], "suggestions": [
            "roll lora_adapters=chat-lora,sql-lora & model_version=r2 back to the previous version or route its traffic elsewhere",
            "lower the batching wait / raise max batch size on model=m-8b & model_version=r1, or add capacity"
        ],
        "checklist": [], "fleet_wide": false,
        "incident_window": {"since": at(0), "until": at(30)},
        "baseline_window": {"since": at(-30), "until": at(0)},
        "window_source": "given",
        "verdict": "ttft rose since the onset; most likely cause: lora_adapters=chat-lora,sql-lora & model_version=r2",
        "elapsed_ms": 1.0, "timings_ms": {}
    }))
    .unwrap()
}

/// Requests of the two causes' slices around `onset_ns`: the regressed slice's on two workers,
/// slower from the onset; the load slice's on a third.
fn requests_around(onset_ns: i64) -> Vec<infersight_model::RequestRecord> {
    let mut rows = Vec::new();
    for minute in -30..30_i64 {
        for i in 0..6_i64 {
            let slow = minute >= 0;
            let (worker, version, adapters, ttft) = match i % 3 {
                0 => (
                    "w-1",
                    "r2",
                    "chat-lora,sql-lora",
                    if slow { 2900.0 } else { 2000.0 },
                ),
                1 => (
                    "w-2",
                    "r2",
                    "chat-lora,sql-lora",
                    if slow { 2800.0 } else { 2000.0 },
                ),
                _ => ("w-3", "r1", "", 2100.0),
            };
            rows.push(infersight_model::RequestRecord {
                ts: onset_ns + minute * 60_000_000_000 + i * 9_000_000_000,
                request_id: Some(format!("q{minute}-{i}")),
                service: Some("llm".into()),
                worker: Some(worker.into()),
                model: Some("m-8b".into()),
                model_version: Some(version.into()),
                lora_adapters: (!adapters.is_empty()).then(|| adapters.into()),
                input_tokens: Some(500),
                output_tokens: Some(100),
                ttft_ms: Some(ttft),
                e2e_ms: Some(ttft + 1500.0),
                status: Some("ok".into()),
                attrs: "{}".into(),
                ..Default::default()
            });
        }
    }
    rows
}

/// Issue 24: the incident page's first screen at 1440 × 900 holds the symptom with units, the
/// one thing to do now, the first check (its SQL runs from the page) and the causes with their
/// kinds and workers; the verdict is on the page once (the full report is folded); the other
/// incident of the same event is linked.
#[test]
fn the_incident_page_leads_with_the_action_and_the_cause_with_units() {
    if !chromium::available("the_incident_page_leads_with_the_action_and_the_cause_with_units") {
        return;
    }
    use infersight_store::{StorageBackend, Store, StoreOptions};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let onset = 1_767_297_600_000_000_000; // 2026-01-01T20:00:00Z
    {
        let store = Store::open(StoreOptions::new(&data)).unwrap();
        store
            .append(&[infersight_model::TableBatch {
                table: infersight_model::Table::Requests,
                batch: infersight_model::RequestRecord::to_batch(&requests_around(onset)),
            }])
            .unwrap();
    }
    let incidents = IncidentStore::open(&data);
    let earlier = incidents
        .create(&leading_verdict(onset - 6 * 60_000_000_000))
        .unwrap();
    let id = incidents.create(&leading_verdict(onset)).unwrap().id;
    let server = Server::start(&data, "[store]\nfsync = \"never\"\n");
    let base = format!("http://{}", server.api);
    let out = chromium::screenshot_dir(env!("CARGO_MANIFEST_DIR"), "ui-screenshots");
    let profile = tempfile::tempdir().unwrap();
    let mut driver = Driver::start();
    driver.open_session(profile.path());
    driver.set_window_size(1440, 900);
    driver.navigate(&format!("{base}/?page=incident&id={id}"));
    wait_for_page(&driver, "incident");

    let screen = driver.execute(
        "const box = (s) => { const el = document.querySelector(s); if (!el) return null;
           const r = el.getBoundingClientRect(); return { top: r.top, bottom: r.bottom, text: el.innerText }; };
         return { height: window.innerHeight, headline: box('[data-headline]'), doNow: box('[data-do-now]'),
                  check: box('[data-first-check]'), cause: box('[data-root-causes] li'),
                  causes: [...document.querySelectorAll('[data-root-causes] li')].map(li => [li.dataset.kind, li.innerText]),
                  related: box('[data-related]'),
                  verdicts: document.body.innerText.split('most likely cause: lora_adapters').length - 1,
                  stray: document.body.innerText.split('\\n').filter(l => l.trim() === 'null').length };",
        json!([]),
    );
    let height = screen["height"].as_f64().unwrap();
    for part in ["headline", "doNow", "check", "cause"] {
        let bottom = screen[part]["bottom"].as_f64();
        assert!(
            bottom.is_some_and(|b| b <= height),
            "{part} is not on the first screen ({height} px): {screen:#}"
        );
    }
    assert_eq!(
        screen["headline"]["text"], "TTFT p99 2.28 s → 2.95 s, +30 %",
        "{screen:#}"
    );
    let text = |part: &str| {
        screen[part]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        text("doNow").starts_with("Do now: roll lora_adapters=chat-lora,sql-lora"),
        "{screen:#}"
    );
    assert!(
        text("check").contains("SELECT"),
        "the first check has its SQL: {screen:#}"
    );
    // the runbook of the top cause, not one retrieved for the load cause's queue
    assert!(!text("check").contains("batching"), "{screen:#}");
    assert_eq!(screen["stray"], 0, "{screen:#}");
    assert_eq!(screen["causes"][0][0], "version regression", "{screen:#}");
    assert_eq!(screen["causes"][1][0], "load", "{screen:#}");
    let top = screen["causes"][0][1].as_str().unwrap_or_default();
    assert!(
        top.contains("explains 44 %") && top.contains("w-1 +") && !top.contains("w-3"),
        "the top cause's workers are its own: {top}"
    );
    assert!(text("related").contains(&earlier.id), "{screen:#}");
    assert_eq!(
        screen["verdicts"], 1,
        "the verdict is on the page once: {screen:#}"
    );
    check_page(&driver, &out, "incident-lead-1440", 0);

    // the first check runs from the page
    click(&driver, "[data-run-sql=first]");
    let ran = driver.wait_for(
        "the first check's rows",
        "const r = document.querySelector('[data-sql-result=first]');
         if (!r) return null;
         const e = r.querySelector('.error'); if (e) return { error: e.innerText };
         const n = r.querySelector('[data-rows]'); return n ? { rows: Number(n.dataset.rows) } : null;",
        Duration::from_secs(30),
    );
    assert!(ran["rows"].as_u64().is_some_and(|n| n > 0), "{ran}");
    driver.assert_console_channel_works();
}
