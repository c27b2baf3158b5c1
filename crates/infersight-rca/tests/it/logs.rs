//! Log evidence of the root-cause engine over hand-made log rows: lead time and lift of a
//! template that rises before the onset, steady templates left out, slice restriction (by worker
//! and through requests) and the fleet fallback.

use std::collections::BTreeMap;

use infersight_model::{LogRecord, RequestRecord, Table, TableBatch, TemplateRecord};
use infersight_rca::{LogEvidence, RcaContext, log_evidence, sequence_evidence};
use infersight_store::StorageBackend;

use crate::support::{EngineOf, MINUTE_NS, TestStore, base_ns, rca_context};

/// Baseline = the first hour, incident = the next 30 minutes, onset between them.
fn context(root_causes: Vec<BTreeMap<String, String>>) -> RcaContext {
    rca_context("ttft", root_causes)
}

fn slice(key: &str, value: &str) -> BTreeMap<String, String> {
    [(key.to_string(), value.to_string())].into_iter().collect()
}

/// `per_minute` records of `template` on `worker` in every minute of `[from_minute, until_minute)`
/// (minutes after the start of the data), spread evenly within the minute.
fn every_minute(
    template: &str,
    worker: &str,
    from_minute: i64,
    until_minute: i64,
    per_minute: i64,
) -> Vec<LogRecord> {
    (from_minute..until_minute)
        .flat_map(|minute| {
            (0..per_minute).map(move |i| LogRecord {
                ts: base_ns() + minute * MINUTE_NS + i * (MINUTE_NS / per_minute),
                severity: Some("INFO".into()),
                worker: Some(worker.to_string()),
                body: Some(format!("{template} line {minute}.{i}")),
                template_id: Some(template.to_string()),
                attrs: "{}".into(),
                ..Default::default()
            })
        })
        .collect()
}

fn append_logs(store: &TestStore, logs: &[LogRecord]) {
    store
        .append(&[TableBatch {
            table: Table::Logs,
            batch: LogRecord::to_batch(logs),
        }])
        .unwrap();
}

fn find<'a>(evidence: &'a [LogEvidence], template_id: &str) -> Option<&'a LogEvidence> {
    evidence.iter().find(|e| e.template_id == template_id)
}

fn ids(evidence: &[LogEvidence]) -> Vec<&str> {
    evidence.iter().map(|e| e.template_id.as_str()).collect()
}

#[tokio::test]
async fn a_template_rising_five_minutes_before_the_onset_leads_by_300_seconds() {
    let store = TestStore::new();
    let mut logs = Vec::new();
    // periodic stats line, all along
    logs.extend(every_minute("stats", "w1", 0, 90, 6));
    // the precursor: absent, then 10 a minute from 5 minutes before the onset
    logs.extend(every_minute("preempt", "w1", 55, 90, 10));
    // a one-off burst 10 minutes before the onset that is over by the onset
    logs.extend(every_minute("reload", "w1", 50, 58, 8));
    append_logs(&store, &logs);
    // two versions of the template text: the latest wins
    let template = |ts: i64, text: &str| TemplateRecord {
        ts,
        template_id: Some("preempt".into()),
        template: Some(text.into()),
        count: Some(1),
        param_types: "[]".into(),
        ..Default::default()
    };
    store
        .append(&[TableBatch {
            table: Table::Templates,
            batch: TemplateRecord::to_batch(&[
                template(
                    base_ns() + 56 * MINUTE_NS,
                    "Sequence group <*> is preempted",
                ),
                template(
                    base_ns() + 80 * MINUTE_NS,
                    "Sequence group <*> is preempted by <*>",
                ),
            ]),
        }])
        .unwrap();
    store.flush().unwrap();
    let engine = store.engine();
    let evidence = log_evidence(&engine, &context(Vec::new())).await.unwrap();
    assert_eq!(ids(&evidence), ["preempt", "reload"], "{evidence:#?}");
    let top = &evidence[0];
    assert!((top.lead_seconds - 300.0).abs() < 1e-6, "{top:?}");
    assert_eq!(top.baseline_count, 50);
    assert_eq!(top.incident_count, 300);
    // (301 / 30) / (51 / 60)
    let expected_lift = (301.0 / 30.0) / (51.0 / 60.0);
    assert!((top.lift - expected_lift).abs() < 1e-9, "{top:?}");
    assert!(top.lift > 10.0);
    assert_eq!(top.template, "Sequence group <*> is preempted by <*>");
    assert!(top.subject.is_empty());
    // the burst is not a rise of the incident, but it preceded the onset by 10 minutes
    let reload = &evidence[1];
    assert!((reload.lead_seconds - 600.0).abs() < 1e-6, "{reload:?}");
    assert_eq!(reload.incident_count, 0);
    // no templates row: a representative body stands in
    assert!(reload.template.starts_with("reload line"), "{reload:?}");
}

#[tokio::test]
async fn a_steady_template_has_lift_near_one_and_is_not_evidence() {
    let store = TestStore::new();
    // steady but not constant: 4..8 a minute in a repeating pattern
    let mut logs = Vec::new();
    for minute in 0..90 {
        logs.extend(every_minute(
            "stats",
            "w1",
            minute,
            minute + 1,
            4 + (minute * 7) % 5,
        ));
    }
    append_logs(&store, &logs);
    let engine = store.engine();
    let evidence = log_evidence(&engine, &context(Vec::new())).await.unwrap();
    assert!(evidence.is_empty(), "{evidence:#?}");

    // with a real rise next to it, only the rise is evidence
    append_logs(&store, &every_minute("oom", "w1", 62, 90, 3));
    let evidence = log_evidence(&engine, &context(Vec::new())).await.unwrap();
    assert_eq!(ids(&evidence), ["oom"], "{evidence:#?}");
    assert!(
        (evidence[0].lead_seconds + 120.0).abs() < 1e-6,
        "rose 2 minutes after the onset"
    );
}

#[tokio::test]
async fn slice_restriction_keeps_a_workers_templates_and_drops_another_workers() {
    let store = TestStore::new();
    let mut logs = Vec::new();
    logs.extend(every_minute("stats", "w1", 0, 90, 6));
    logs.extend(every_minute("stats", "w2", 0, 90, 6));
    logs.extend(every_minute("oom_w1", "w1", 58, 90, 4));
    logs.extend(every_minute("timeout_w2", "w2", 60, 90, 20));
    append_logs(&store, &logs);
    let engine = store.engine();

    let fleet = log_evidence(&engine, &context(Vec::new())).await.unwrap();
    assert_eq!(ids(&fleet), ["timeout_w2", "oom_w1"], "{fleet:#?}");

    let sliced = log_evidence(&engine, &context(vec![slice("worker", "w1")]))
        .await
        .unwrap();
    assert_eq!(ids(&sliced), ["oom_w1"], "{sliced:#?}");
    assert_eq!(sliced[0].subject, slice("worker", "w1"));
    assert!((sliced[0].lead_seconds - 120.0).abs() < 1e-6, "{sliced:?}");

    // a slice with no log records at all falls back to the fleet, with an empty subject
    let fallback = log_evidence(&engine, &context(vec![slice("worker", "w9")]))
        .await
        .unwrap();
    assert_eq!(ids(&fallback), ["timeout_w2", "oom_w1"], "{fallback:#?}");
    assert!(fallback.iter().all(|e| e.subject.is_empty()));

    // the first slice with logs wins
    let second = log_evidence(
        &engine,
        &context(vec![slice("worker", "w9"), slice("worker", "w2")]),
    )
    .await
    .unwrap();
    assert_eq!(ids(&second), ["timeout_w2"], "{second:#?}");
    assert_eq!(second[0].subject, slice("worker", "w2"));
}

#[tokio::test]
async fn a_request_attribute_slice_joins_logs_through_request_and_trace_ids() {
    let store = TestStore::new();
    let mut requests = Vec::new();
    let mut logs = Vec::new();
    for minute in 0..90 {
        for version in ["v1", "v2"] {
            let id = format!("{version}-{minute}");
            let ts = base_ns() + minute * MINUTE_NS;
            requests.push(RequestRecord {
                ts,
                request_id: Some(format!("req-{id}")),
                trace_id: Some(format!("trace-{id}")),
                model_version: Some(version.into()),
                worker: Some("w1".into()),
                ..Default::default()
            });
            // gateway access line: both ids, all along (steady)
            logs.push(LogRecord {
                ts: ts + 1_000_000_000,
                request_id: Some(format!("req-{id}")),
                trace_id: Some(format!("trace-{id}")),
                body: Some("access".into()),
                template_id: Some("access".into()),
                ..Default::default()
            });
            if minute >= 60 {
                // each version's requests now log a distinct error, 3 per request
                for i in 0..3 {
                    let by_trace = version == "v2";
                    logs.push(LogRecord {
                        ts: ts + 2_000_000_000 + i,
                        request_id: (!by_trace).then(|| format!("req-{id}")),
                        trace_id: by_trace.then(|| format!("trace-{id}")),
                        body: Some(format!("{version} error")),
                        template_id: Some(format!("error_{version}")),
                        ..Default::default()
                    });
                }
                // an engine line naming the request only in its text (`parse` lifted it into
                // attrs), on a worker label no request carries: only the id can join it
                if version == "v2" {
                    logs.push(LogRecord {
                        ts: ts + 3_000_000_000,
                        worker: Some("engine-7".into()),
                        body: Some(format!("Loading LoRA adapters for request_id=req-{id}")),
                        template_id: Some("lora_reload".into()),
                        attrs: format!(r#"{{"request_id":"req-{id}"}}"#),
                        ..Default::default()
                    });
                }
            }
        }
    }
    store.append_requests(&requests);
    append_logs(&store, &logs);
    let engine = store.engine();
    let v2 = log_evidence(&engine, &context(vec![slice("model_version", "v2")]))
        .await
        .unwrap();
    let mut v2_ids = ids(&v2);
    v2_ids.sort();
    assert_eq!(v2_ids, ["error_v2", "lora_reload"], "{v2:#?}");
    assert_eq!(v2[0].subject, slice("model_version", "v2"));
    assert_eq!(v2[0].incident_count, 90);
    assert_eq!(v2[0].baseline_count, 0);
    let v1 = log_evidence(&engine, &context(vec![slice("model_version", "v1")]))
        .await
        .unwrap();
    assert_eq!(ids(&v1), ["error_v1"], "{v1:#?}");
    assert!(find(&v1, "access").is_none());
    assert!(find(&v1, "lora_reload").is_none(), "v2's requests only");
}

#[tokio::test]
async fn workers_that_mostly_served_the_slice_stand_for_it() {
    let store = TestStore::new();
    let mut requests = Vec::new();
    for minute in 0..90 {
        let ts = base_ns() + minute * MINUTE_NS;
        // w2 switches to v2 at the onset; w1 stays on v1
        let w2_version = if minute >= 60 { "v2" } else { "v1" };
        for (worker, version) in [("w1", "v1"), ("w2", w2_version)] {
            requests.push(RequestRecord {
                ts,
                request_id: Some(format!("{worker}-{minute}")),
                model_version: Some(version.into()),
                worker: Some(worker.into()),
                ..Default::default()
            });
        }
    }
    store.append_requests(&requests);
    // engine lines carry a worker but no request id
    let mut logs = Vec::new();
    logs.extend(every_minute("cuda_graph_recapture", "w2", 60, 90, 5));
    logs.extend(every_minute("kv_warning", "w1", 60, 90, 5));
    append_logs(&store, &logs);
    let engine = store.engine();
    let evidence = log_evidence(&engine, &context(vec![slice("model_version", "v2")]))
        .await
        .unwrap();
    assert_eq!(ids(&evidence), ["cuda_graph_recapture"], "{evidence:#?}");
}

#[tokio::test]
async fn no_logs_or_null_template_ids_yield_no_evidence() {
    let store = TestStore::new();
    let engine = store.engine();
    assert!(
        log_evidence(&engine, &context(vec![slice("worker", "w1")]))
            .await
            .unwrap()
            .is_empty()
    );
    // rows without a template id (unmined) are ignored, not an error
    let mut logs = every_minute("x", "w1", 0, 90, 5);
    for log in &mut logs {
        log.template_id = None;
    }
    append_logs(&store, &logs);
    assert!(
        log_evidence(&engine, &context(Vec::new()))
            .await
            .unwrap()
            .is_empty()
    );
    // unbounded windows are filled from the data
    let mut unbounded = context(Vec::new());
    unbounded.baseline.since_ns = None;
    unbounded.incident.until_ns = None;
    append_logs(&store, &every_minute("late", "w1", 70, 90, 5));
    let evidence = log_evidence(&engine, &unbounded).await.unwrap();
    assert_eq!(ids(&evidence), ["late"], "{evidence:#?}");
    assert!(
        (evidence[0].lead_seconds + 600.0).abs() < 1e-6,
        "{evidence:?}"
    );
}

/// One request's log session: `templates` in order, one second apart, on `worker`, keyed by
/// the `request_id` column or (every other request) by the attribute `parse` lifts.
fn session(request: usize, start_ns: i64, worker: &str, templates: &[&str]) -> Vec<LogRecord> {
    let id = format!("req-{request}");
    templates
        .iter()
        .enumerate()
        .map(|(i, template)| LogRecord {
            ts: start_ns + i as i64 * 1_000_000_000,
            severity: Some("INFO".into()),
            worker: Some(worker.to_string()),
            body: Some(format!("{template} for {id}")),
            template_id: Some((*template).to_string()),
            request_id: request.is_multiple_of(2).then(|| id.clone()),
            attrs: if request.is_multiple_of(2) {
                "{}".into()
            } else {
                format!("{{\"request_id\": \"{id}\"}}")
            },
            ..Default::default()
        })
        .collect()
}

/// Baseline requests log `recv → (cache_hit | cache_miss) → done`; in the incident a share of
/// the requests on w2 log an adapter reload between receiving and the cache step, and a few on
/// w1 stop after `recv`. The model of the baseline's sessions flags both; with the incident
/// logging like the baseline, nothing is flagged.
#[tokio::test]
async fn unexpected_log_sequences_of_the_incident_are_grouped_by_their_first_surprise() {
    let build = |faulty: bool| {
        let mut logs = Vec::new();
        let mut request = 0;
        for minute in 0..90 {
            for k in 0..6 {
                request += 1;
                let start = base_ns() + minute * MINUTE_NS + k * 9_000_000_000;
                let worker = if k % 2 == 0 { "w1" } else { "w2" };
                let cache = if (request * 7) % 10 < 3 {
                    "cache_miss"
                } else {
                    "cache_hit"
                };
                let incident = minute >= 60;
                let templates: Vec<&str> = if faulty && incident && worker == "w2" && k % 3 == 1 {
                    vec!["recv", "reload", cache, "done"]
                } else if faulty && incident && worker == "w1" && k == 0 && minute % 5 == 0 {
                    vec!["recv"]
                } else {
                    vec!["recv", cache, "done"]
                };
                logs.extend(session(request, start, worker, &templates));
                if faulty && incident && k == 2 {
                    // prompt lines under templates minted in the incident: users' text, not
                    // system behaviour — never a sequence anomaly
                    let mut prompt = session(request, start + 500_000_000, worker, &["prompt-new"]);
                    prompt[0].log_class = Some("prompt_input".into());
                    logs.extend(prompt);
                }
            }
        }
        logs
    };
    let store = TestStore::new();
    append_logs(&store, &build(true));
    store.flush().unwrap();
    let engine = store.engine();
    let found = sequence_evidence(&engine, &context(Vec::new()))
        .await
        .unwrap();
    assert_eq!(found.len(), 2, "{found:#?}");
    let reload = &found[0];
    assert_eq!(reload.reason, "unseen_event");
    assert_eq!(reload.template_id.as_deref(), Some("reload"));
    assert_eq!(reload.after_template_id.as_deref(), Some("recv"));
    // w2 serves k = 1, 3, 5 of each minute; k % 3 == 1 picks k = 1 only; the incident's last
    // minute is left out (its sessions may still be running): 29 minutes
    assert_eq!(reload.incident_sessions, 29);
    assert_eq!(reload.incident_total, 29 * 6);
    assert_eq!(reload.baseline_sessions, 0);
    assert_eq!(reload.baseline_total, 60 * 6);
    assert_eq!(reload.workers, vec![("w2".to_string(), 29)]);
    assert_eq!(
        reload.expected_template_ids.len(),
        2,
        "both cache steps were expected: {reload:?}"
    );
    let cut = &found[1];
    assert_eq!(cut.reason, "premature_end");
    assert_eq!(cut.template_id, None);
    assert_eq!(cut.after_template_id.as_deref(), Some("recv"));
    assert_eq!(cut.incident_sessions, 6);
    assert_eq!(cut.workers, vec![("w1".to_string(), 6)]);

    let healthy = TestStore::new();
    append_logs(&healthy, &build(false));
    healthy.flush().unwrap();
    let none = sequence_evidence(&healthy.engine(), &context(Vec::new()))
        .await
        .unwrap();
    assert!(none.is_empty(), "{none:#?}");
}
