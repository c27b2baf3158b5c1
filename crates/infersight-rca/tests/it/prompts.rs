//! The `prompt_drift` signal of the root-cause engine over hand-made `logs` and `requests` rows:
//! prompts found by their `prompt_input` class, tenants from the request joined by the id at the
//! front of the prompt text or from a leading `tenant=` field, drift reported per tenant with
//! numbers only (never prompt text), steady tenants and `tenant=` inside user text left alone.

use std::collections::BTreeMap;

use infersight_model::{LogRecord, RequestRecord, Table, TableBatch};
use infersight_rca::{RcaContext, collect_signals};
use infersight_store::StorageBackend;

use crate::support::{EngineOf, MINUTE_NS, TestStore, base_ns, rca_context};

const CHAT: [&str; 6] = [
    "Summarize the attached support ticket and draft a polite reply",
    "Write a SQL query that returns monthly revenue per region",
    "Explain why my Kubernetes pod is stuck in CrashLoopBackOff",
    "Translate the following paragraph into German please",
    "Classify the sentiment of these product reviews",
    "Draft an e-mail to the customer about the delayed shipment",
];
const LONG_FORM: [&str; 4] = [
    "Generate a production-ready Rust crate implementing an asynchronous rate limiter with benchmarks",
    "Produce a software license agreement covering perpetual enterprise grants and source escrow",
    "Port this legacy COBOL payroll batch program to idiomatic Java with JUnit tests",
    "Rewrite every clause of this commercial lease so obligations survive assignment and insolvency",
];
const NAMES: [&str; 5] = ["jane", "wei", "carlos", "amira", "olga"];

/// Baseline = the first hour, incident = the next 30 minutes.
fn context() -> RcaContext {
    rca_context("e2e", Vec::new())
}

fn prompt_line(ts: i64, prompt: String) -> LogRecord {
    let attrs = serde_json::json!({ "prompt": prompt, "response": "ok" }).to_string();
    LogRecord {
        ts,
        severity: Some("INFO".into()),
        body: Some("[PROMPT] (redacted) [RESPONSE] ok".into()),
        log_class: Some("prompt_input".into()),
        attrs,
        ..Default::default()
    }
}

/// Four prompts a minute for each of three tenants over 90 minutes:
/// - `stark` (tenant and output length from its request rows, joined by the `request_id=`
///   field of the text) switches to long-form prompts with long outputs at minute 60;
/// - `initech` (known from its `tenant=` field only) switches too, without outputs;
/// - `acme` (`tenant=` field) keeps chatting, with `tenant=evil` inside some of its user text.
fn data() -> (Vec<LogRecord>, Vec<RequestRecord>) {
    let mut logs = Vec::new();
    let mut requests = Vec::new();
    for minute in 0..90_i64 {
        let drifted = minute >= 60;
        for k in 0..4_i64 {
            let i = (minute * 4 + k) as usize;
            let ts = base_ns() + minute * MINUTE_NS + k * (MINUTE_NS / 4);
            let name = NAMES[(i * 7) % NAMES.len()];
            let chat = CHAT[(i * 5 + minute as usize) % CHAT.len()];
            let long = LONG_FORM[(i * 3) % LONG_FORM.len()];
            let stark_text = if drifted { long } else { chat };
            let id = format!("req-stark-{i}");
            logs.push(prompt_line(
                ts,
                format!("request_id={id} {stark_text}. Contact {name}@example.com"),
            ));
            requests.push(RequestRecord {
                ts: ts + 1_000_000,
                request_id: Some(id),
                tenant: Some("stark".into()),
                output_tokens: Some(if drifted {
                    1_200 + (i % 7) as i64 * 20
                } else {
                    200 + (i % 9) as i64 * 10
                }),
                attrs: "{}".into(),
                ..Default::default()
            });
            let initech_text = if drifted { long } else { chat };
            logs.push(prompt_line(
                ts + 1,
                format!("request_id=cmpl-{i} tenant=initech {initech_text} for {name}"),
            ));
            let evil = if i.is_multiple_of(3) {
                " and set tenant=evil"
            } else {
                ""
            };
            logs.push(prompt_line(
                ts + 2,
                format!("tenant=acme {chat}{evil}, signed {name}"),
            ));
        }
    }
    (logs, requests)
}

#[tokio::test]
async fn prompt_drift_is_reported_per_tenant_with_numbers_only() {
    let store = TestStore::new();
    let (logs, requests) = data();
    store.append_requests(&requests);
    store
        .append(&[TableBatch {
            table: Table::Logs,
            batch: LogRecord::to_batch(&logs),
        }])
        .unwrap();
    let signals = collect_signals(&store.engine(), &context()).await.unwrap();
    let drift: BTreeMap<String, &infersight_rca::Signal> = signals
        .iter()
        .filter(|s| s.kind == infersight_rca::SignalKind::PromptDrift)
        .map(|s| (s.subject["tenant"].clone(), s))
        .collect();
    assert_eq!(
        drift.keys().collect::<Vec<_>>(),
        ["initech", "stark"],
        "{signals:#?}"
    );
    let onset = base_ns() + 60 * MINUTE_NS;
    for signal in drift.values() {
        assert_eq!(signal.subject.len(), 1);
        assert!(signal.onset >= onset && signal.onset < onset + 5 * MINUTE_NS);
        assert!(signal.strength > 1.0, "{signal:?}");
        // Numbers and the tenant only: no word of any prompt.
        for text in CHAT.iter().chain(&LONG_FORM).chain(&NAMES) {
            for word in text.split_whitespace().filter(|w| w.len() > 4) {
                assert!(!signal.detail.contains(word), "{word} in {}", signal.detail);
            }
        }
    }
    // Output lengths come from the joined requests: stark's are 3σ outliers, initech has none.
    assert!(
        drift["stark"].detail.contains("3σ length outliers"),
        "{}",
        drift["stark"].detail
    );
    assert!(
        !drift["initech"].detail.contains("outliers"),
        "{}",
        drift["initech"].detail
    );
}
