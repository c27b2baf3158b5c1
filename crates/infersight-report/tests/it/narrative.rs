//! Tests of the report's narrative module: a fake OpenAI-compatible endpoint on 127.0.0.1:0
//! answers valid, invalid, slow and failing replies; the request it receives is checked for the
//! schema, temperature 0, JSON mode, the key, and the absence of anything but the allowed
//! evidence (a raw prompt planted in the report must not leave the process).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use infersight_rca::{LogEvidence, RcaReport, RootCause, Signal, Symptom, Window};
use infersight_report::Report;
use infersight_report::data::ChartData;
use infersight_report::knowledge::{HitKind, KnowledgeHit};
use infersight_report::narrative::{
    LlmConfig, NARRATIVE_SCHEMA, Narrative, evidence_prompt, narrate, narrate_with_env,
    validate_reply,
};
use serde_json::{Value, json};

/// Text that only a raw prompt or payload would contain; it must never reach the endpoint.
const RAW_PROMPT: &str = "PLEASE-SUMMARIZE-MY-MEDICAL-RECORD-4471";
const ONSET_NS: i64 = 1_764_381_600_000_000_000;

fn slice(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn report() -> Report {
    let rca = RcaReport {
        symptom: Some(Symptom {
            sli: "ttft".into(),
            baseline: 812.0,
            current: 1712.5,
            onset: ONSET_NS,
            z: 41.2,
        }),
        root_causes: vec![RootCause {
            rank: 1,
            dimensions: slice(&[
                ("model_version", "r2"),
                ("kv_cache_policy", "paged"),
                ("lora_adapters", "chat-lora,sql-lora"),
                // an identifying attribute: dropped from the prompt
                ("session_id", "sess-00ab12cd"),
            ])
            .into(),
            explained_fraction: 0.93,
            score: 120.4,
            evidence: vec!["ttft_ms over 812 ms (baseline p95): 412 of 440 requests".into()],
            slice_rate: None,
        }],
        signals: vec![Signal {
            kind: infersight_rca::SignalKind::VersionRegression,
            subject: slice(&[("model_version", "r2")]).into(),
            onset: ONSET_NS,
            strength: 3.4,
            // personal data that slipped into a detail is masked
            detail: "reported by ops.oncall@example.com".into(),
        }],
        log_evidence: vec![
            LogEvidence {
                template: "LoRA adapter <*> reloaded into slot <*>".into(),
                template_id: "t-17".into(),
                lift: 38.0,
                lead_seconds: 45.0,
                baseline_count: 0,
                incident_count: 412,
                subject: Default::default(),
                lineage: None,
            },
            LogEvidence {
                // a template whose masking missed the prompt: cut after the marker
                template: format!("Received request cmpl-<*>: prompt: '{RAW_PROMPT}', params: <*>"),
                template_id: "t-18".into(),
                lift: 1.1,
                lead_seconds: 0.0,
                baseline_count: 5,
                incident_count: 6,
                subject: Default::default(),
                lineage: None,
            },
        ],
        log_sequences: Vec::new(),
        suggestions: vec!["pin the LoRA set on r2 workers".into()],
        checklist: vec!["TTFT p95 of r2 back under 900 ms".into()],
        fleet_wide: false,
        incident_window: Some(Window {
            since: ONSET_NS,
            until: ONSET_NS + 600_000_000_000,
        }),
        baseline_window: Some(Window {
            since: ONSET_NS - 3_600_000_000_000,
            until: ONSET_NS,
        }),
        window_source: "change in ttft".into(),
        verdict: "TTFT p99 rose from 812 ms to 1713 ms on model_version=r2".into(),
        elapsed_ms: 12.0,
        timings_ms: BTreeMap::new(),
        incident_id: None,
    };
    Report {
        incident_id: "inc-test-1".into(),
        generated_at: "2025-11-29T02:30:00.000Z".into(),
        rca,
        knowledge: vec![KnowledgeHit {
            id: "lora-thrash".into(),
            kind: HitKind::Runbook,
            title: "LoRA adapter thrash".into(),
            score: 7.5,
            // not evidence: summaries stay out of the prompt
            summary: format!("example conversation: {RAW_PROMPT}"),
            fixes: vec!["raise max_loras so the set stays resident".into()],
            checklist: vec!["no adapter reload lines for 10 minutes".into()],
            confirm: vec![],
            signals: vec![],
        }],
        suggestions: vec![],
        checklist: vec![],
        charts: ChartData::default(),
        narrative: None,
        narrative_note: None,
        incident: Default::default(),
        lead: Default::default(),
    }
}

fn valid_reply() -> Value {
    json!({
        "cause": "Model version r2 reloads the chat-lora,sql-lora pair for every request on paged-KV workers.",
        "confidence": 0.8,
        "fixes": ["raise max_loras on r2 workers", "roll back to r1"],
        "checklist": ["no adapter reloads for 10 minutes", "TTFT p95 of r2 back under 900 ms"]
    })
}

/// What the fake endpoint answers.
#[derive(Clone)]
struct Answer {
    status: u16,
    body: String,
    delay: Duration,
}

impl Answer {
    fn content(content: &str) -> Answer {
        let body = json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
        });
        Answer {
            status: 200,
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }
}

/// One request as the endpoint saw it.
struct Received {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Serves one connection on 127.0.0.1:0 with `answer`; returns the endpoint base URL and a
/// receiver for the request it got.
fn serve_once(answer: Answer) -> (String, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut request_line = String::new();
        reader.read_line(&mut request_line).unwrap();
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                headers.push((name.trim().to_string(), value.trim().to_string()));
            }
        }
        let length: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let _ = sender.send(Received {
            request_line: request_line.trim_end().to_string(),
            headers,
            body,
        });
        std::thread::sleep(answer.delay);
        let mut stream = stream;
        let _ = write!(
            stream,
            "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
            answer.status,
            answer.body.len(),
            answer.body
        );
    });
    (format!("http://{address}/v1"), receiver)
}

fn config(endpoint: &str) -> LlmConfig {
    LlmConfig {
        endpoint: endpoint.to_string(),
        model: "qwen2.5-7b-instruct".into(),
        api_key_env: "TEST_LLM_KEY".into(),
        timeout: "5s".into(),
        max_tokens: 700,
        ca_file: String::new(),
    }
}

fn test_env(name: &str) -> Option<String> {
    (name == "TEST_LLM_KEY").then(|| "sk-test-123".to_string())
}

#[test]
fn a_valid_reply_becomes_the_narrative_and_the_request_carries_only_evidence() {
    let (endpoint, received) = serve_once(Answer::content(&valid_reply().to_string()));
    let outcome = narrate_with_env(&config(&endpoint), &report(), &test_env);
    assert_eq!(outcome.note, None);
    let narrative = outcome.narrative.expect("a narrative");
    assert_eq!(narrative.confidence, 0.8);
    assert_eq!(narrative.fixes.len(), 2);
    assert!(narrative.cause.starts_with("Model version r2"));

    let request = received.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(request.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test-123"));
    let raw = String::from_utf8(request.body.clone()).unwrap();
    assert!(
        !raw.contains(RAW_PROMPT),
        "raw prompt text left the process"
    );
    assert!(!raw.contains("sess-00ab12cd"), "an identifying slice entry");
    assert!(!raw.contains("ops.oncall@example.com"), "an e-mail address");
    let body: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(body["temperature"], 0);
    assert_eq!(body["response_format"]["type"], "json_object");
    assert_eq!(body["max_tokens"], 700);
    assert_eq!(body["model"], "qwen2.5-7b-instruct");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages[1]["role"], "user");
    let system = messages[0]["content"].as_str().unwrap();
    assert!(
        system.contains(NARRATIVE_SCHEMA),
        "the schema is in the prompt"
    );
    assert!(system.contains("exactly one JSON object"));

    // The user message is the evidence object and nothing else: allowed keys only.
    let user = messages[1]["content"].as_str().unwrap();
    let evidence: Value = serde_json::from_str(&user[user.find('{').unwrap()..]).unwrap();
    let keys: Vec<&str> = evidence
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let allowed = [
        "verdict",
        "fleet_wide",
        "window_source",
        "symptom",
        "incident_window",
        "baseline_window",
        "root_causes",
        "signals",
        "log_templates",
        "engine_suggestions",
        "engine_checklist",
        "runbooks",
    ];
    for key in &keys {
        assert!(allowed.contains(key), "unexpected evidence field {key}");
    }
    assert_eq!(evidence["symptom"]["baseline"], 812.0);
    assert_eq!(evidence["root_causes"][0]["explained_fraction"], 0.93);
    assert_eq!(
        evidence["root_causes"][0]["slice"],
        json!({"kv_cache_policy": "paged", "lora_adapters": "chat-lora,sql-lora", "model_version": "r2"})
    );
    assert_eq!(evidence["signals"][0]["detail"], "reported by <EMAIL>");
    assert_eq!(
        evidence["log_templates"][1]["template"],
        "Received request cmpl-<*>: prompt: <cut>"
    );
    assert_eq!(evidence["runbooks"][0]["title"], "LoRA adapter thrash");
    assert_eq!(evidence["runbooks"][0]["score"], 7.5);
    assert!(evidence["runbooks"][0].get("summary").is_none());
}

#[test]
fn invalid_replies_are_rejected_with_the_reason() {
    let mut extra = valid_reply();
    extra["foo"] = json!(1);
    let mut missing = valid_reply();
    missing.as_object_mut().unwrap().remove("fixes");
    let mut too_confident = valid_reply();
    too_confident["confidence"] = json!(1.7);
    let mut no_fixes = valid_reply();
    no_fixes["fixes"] = json!([]);
    let mut blank_check = valid_reply();
    blank_check["checklist"] = json!(["ok", "  "]);
    let cases = [
        ("The cause is the LoRA reload.".to_string(), "not JSON: "),
        (too_confident.to_string(), "confidence 1.7 is outside 0..1"),
        (missing.to_string(), "missing field `fixes`"),
        (extra.to_string(), "unexpected field `foo`"),
        (no_fixes.to_string(), "fixes is empty (1 to 10 items)"),
        (blank_check.to_string(), "checklist[1] is empty"),
        ("[1, 2]".to_string(), "expected a JSON object, got an array"),
    ];
    for (content, reason) in cases {
        let (endpoint, _received) = serve_once(Answer::content(&content));
        let outcome = narrate_with_env(&config(&endpoint), &report(), &test_env);
        assert_eq!(outcome.narrative, None, "{content}");
        let note = outcome.note.expect("a note");
        assert!(
            note.starts_with("LLM narrative discarded: the reply does not match the schema: "),
            "{note}"
        );
        assert!(note.contains(reason), "{content}: {note}");
    }
    // Several violations are all named.
    let error =
        validate_reply(r#"{"cause": 3, "confidence": "high", "fixes": ["a"]}"#).unwrap_err();
    assert_eq!(
        error,
        "cause must be a string, got a number; confidence must be a number, got a string; missing field `checklist`"
    );
    // A reply that is not a chat completion at all.
    let (endpoint, _received) = serve_once(Answer {
        status: 200,
        body: "{\"result\": \"ok\"}".into(),
        delay: Duration::ZERO,
    });
    let note = narrate_with_env(&config(&endpoint), &report(), &test_env)
        .note
        .unwrap();
    assert!(note.contains("no choices[0].message.content"), "{note}");
}

#[test]
fn a_fenced_reply_is_accepted() {
    let fenced = format!("```json\n{}\n```", valid_reply());
    let (endpoint, _received) = serve_once(Answer::content(&fenced));
    let outcome = narrate_with_env(&config(&endpoint), &report(), &test_env);
    assert_eq!(outcome.note, None);
    assert_eq!(
        outcome.narrative,
        Some(validate_reply(&valid_reply().to_string()).unwrap())
    );
}

#[test]
fn a_slow_endpoint_times_out_within_the_configured_time() {
    let (endpoint, _received) = serve_once(Answer {
        delay: Duration::from_secs(3),
        ..Answer::content(&valid_reply().to_string())
    });
    let config = LlmConfig {
        timeout: "300ms".into(),
        ..config(&endpoint)
    };
    let started = Instant::now();
    let outcome = narrate_with_env(&config, &report(), &test_env);
    let elapsed = started.elapsed();
    assert_eq!(outcome.narrative, None);
    let note = outcome.note.unwrap();
    assert!(
        note.contains("the endpoint did not answer within 300ms"),
        "{note}"
    );
    assert!(elapsed < Duration::from_millis(1500), "took {elapsed:?}");
}

#[test]
fn http_errors_and_missing_endpoints_give_a_note() {
    let (endpoint, _received) = serve_once(Answer {
        status: 500,
        body: "{\"error\": \"model overloaded\"}".into(),
        delay: Duration::ZERO,
    });
    let outcome = narrate_with_env(&config(&endpoint), &report(), &test_env);
    assert_eq!(outcome.narrative, None);
    let note = outcome.note.unwrap();
    assert!(
        note.contains("the endpoint answered HTTP 500: {\"error\": \"model overloaded\"}"),
        "{note}"
    );

    // Nothing listens on this port any more.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let outcome = narrate(&config(&format!("http://127.0.0.1:{port}/v1")), &report());
    assert_eq!(outcome.narrative, None);
    assert!(
        outcome
            .note
            .as_deref()
            .unwrap()
            .contains("request to http://127.0.0.1:"),
        "{:?}",
        outcome.note
    );

    let outcome = narrate(&LlmConfig::default(), &report());
    assert_eq!(outcome.narrative, None);
    assert_eq!(outcome.note.as_deref(), Some("no LLM endpoint configured"));
}

/// An https endpoint: its certificate verified against `ca_file` (here self-signed, so the web's
/// roots refuse it and nothing is sent: a note says why).
#[test]
fn an_https_endpoint_is_called_when_its_ca_is_given_and_never_unverified() {
    let completion = json!({
        "choices": [{"message": {"role": "assistant", "content": valid_reply().to_string()},
                     "finish_reason": "stop"}]
    });
    let receiver = infersight_testkit::https::https_receiver(200, &completion.to_string());
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &receiver.ca_pem).unwrap();
    let endpoint = format!("https://{}/v1", receiver.addr);

    let trusted = LlmConfig {
        ca_file: ca_file.display().to_string(),
        ..config(&endpoint)
    };
    assert!(trusted.validate().is_empty(), "{:?}", trusted.validate());
    let outcome = narrate_with_env(&trusted, &report(), &test_env);
    assert!(outcome.narrative.is_some(), "{:?}", outcome.note);
    let request = receiver
        .requests
        .recv_timeout(Duration::from_secs(10))
        .unwrap();
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.headers.get("authorization").map(String::as_str),
        Some("Bearer sk-test-123")
    );

    let outcome = narrate_with_env(&config(&endpoint), &report(), &test_env);
    assert_eq!(outcome.narrative, None);
    let note = outcome.note.unwrap_or_default();
    assert!(note.contains("request to https://"), "{note}");
    assert!(
        receiver.requests.try_recv().is_err(),
        "a request got through an unverified certificate"
    );
}

#[test]
fn no_key_header_without_a_key() {
    let (endpoint, received) = serve_once(Answer::content(&valid_reply().to_string()));
    let config = LlmConfig {
        api_key_env: String::new(),
        model: String::new(),
        ..config(&endpoint)
    };
    let outcome = narrate_with_env(&config, &report(), &test_env);
    assert!(outcome.narrative.is_some(), "{:?}", outcome.note);
    let request = received.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(request.header("authorization"), None);
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    assert!(body.get("model").is_none(), "an empty model is left out");
}

#[test]
fn the_prompt_is_deterministic_and_says_what_to_answer() {
    let first = evidence_prompt(&report());
    assert_eq!(first, evidence_prompt(&report()));
    assert!(
        first[1]
            .content
            .starts_with("Evidence for incident inc-test-1:")
    );
    let narrative: Narrative = validate_reply(&valid_reply().to_string()).unwrap();
    assert_eq!(narrative.checklist.len(), 2);
    // The schema is itself valid JSON with the documented bounds.
    let schema: Value = serde_json::from_str(NARRATIVE_SCHEMA).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["properties"]["fixes"]["maxItems"], 10);
    assert_eq!(schema["properties"]["checklist"]["maxItems"], 20);
    assert_eq!(schema["properties"]["cause"]["maxLength"], 2000);
    assert_eq!(schema["additionalProperties"], false);
}

/// What a viewer gets of a report: in every format the session's id and the prompt that
/// slipped into a template are gone, the rest of the evidence (versions, policies, measures)
/// stays; the report itself still carries them, for analysts.
#[test]
fn a_report_without_personal_fields_hides_them_in_every_format() {
    use infersight_report::ReportFormat;
    let full = report();
    let shown = full.without_personal().unwrap();
    // the prompt that slipped into a template (a runbook's own summary is not personal data)
    let in_template = format!("prompt: '{RAW_PROMPT}'");
    let whole = full.render(ReportFormat::Json).unwrap();
    assert!(whole.contains("sess-00ab12cd") && whole.contains(&in_template));
    for format in [
        ReportFormat::Json,
        ReportFormat::Markdown,
        ReportFormat::Html,
    ] {
        let text = shown.render(format).unwrap();
        assert!(!text.contains("sess-00ab12cd"), "{format:?}: {text}");
        assert!(!text.contains(&in_template), "{format:?}: {text}");
        assert!(
            text.contains("chat-lora,sql-lora") && text.contains("paged"),
            "{format:?}"
        );
    }
    assert_eq!(
        shown.rca.root_causes[0]
            .dimensions
            .0
            .get("session_id")
            .map(String::as_str),
        Some(infersight_report::privacy::HIDDEN)
    );
    assert_eq!(
        shown.rca.root_causes[0].score,
        full.rca.root_causes[0].score
    );
}
