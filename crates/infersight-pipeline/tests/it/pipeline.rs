//! The pipeline as the server wires it: config from a file section, batches in, batches out.

use infersight_model::{LogRecord, RequestRecord, Table, TableBatch};
use infersight_pipeline::{Pipeline, PipelineError, StagesConfig};

fn config(json: &str) -> StagesConfig {
    serde_json::from_str(json).unwrap()
}

#[test]
fn configured_pipeline_redacts_requests_and_logs() {
    let mut pipeline = Pipeline::from_config(&config(
        r#"{"order": ["redact"],
            "redact": {"custom": [{"name": "tenant_key", "regex": "tk_[0-9a-f]{8}"}]}}"#,
    ))
    .unwrap();
    let requests = RequestRecord::to_batch(&[RequestRecord {
        ts: 1,
        model: Some("llama-3-8b".into()),
        tenant: Some("acme".into()),
        error_type: Some("rate limited for bob@acme.io".into()),
        attrs: r#"{"user.id":"tk_0a1b2c3d","input_tokens":512}"#.into(),
        ..Default::default()
    }]);
    let logs = LogRecord::to_batch(&[LogRecord {
        ts: 2,
        body: Some("prompt from +86 138 1234 5678: hello".into()),
        attrs: "{}".into(),
        ..Default::default()
    }]);
    let out = pipeline
        .run(vec![
            TableBatch {
                table: Table::Requests,
                batch: requests,
            },
            TableBatch {
                table: Table::Logs,
                batch: logs,
            },
        ])
        .unwrap();
    // each redacted batch is followed by its redaction audit
    let tables: Vec<Table> = out.iter().map(|b| b.table).collect();
    assert_eq!(
        tables,
        [
            Table::Requests,
            Table::Redactions,
            Table::Logs,
            Table::Redactions
        ]
    );
    let request = &RequestRecord::from_batch(&out[0].batch).unwrap()[0];
    assert_eq!(
        request.error_type.as_deref(),
        Some("rate limited for <EMAIL>")
    );
    assert_eq!(
        request.attrs,
        r#"{"user.id":"<CUSTOM:tenant_key>","input_tokens":512}"#
    );
    assert_eq!(request.model.as_deref(), Some("llama-3-8b"));
    assert_eq!(request.tenant.as_deref(), Some("acme"));
    let log = &LogRecord::from_batch(&out[2].batch).unwrap()[0];
    assert_eq!(log.body.as_deref(), Some("prompt from <PHONE>: hello"));

    let counters = pipeline.counters();
    assert_eq!(counters.len(), 1);
    let (name, redact) = &counters[0];
    assert_eq!(*name, "redact");
    assert_eq!(
        (
            redact.received_rows,
            redact.emitted_rows,
            redact.failed_rows
        ),
        (2, 2 + 3, 0)
    );
    assert!(redact.dropped_rows.is_empty());
    assert_eq!(redact.detail["rows_redacted"], 2);
    assert_eq!(redact.detail["hits_custom"], 1);
    assert_eq!(redact.detail["hits_email"], 1);
    assert_eq!(redact.detail["hits_phone"], 1);
}

#[test]
fn disabled_redaction_passes_batches_through_and_still_counts() {
    let mut pipeline = Pipeline::from_config(&config(
        r#"{"order": ["redact"], "redact": {"enabled": false}}"#,
    ))
    .unwrap();
    let logs = LogRecord::to_batch(&[LogRecord {
        ts: 1,
        body: Some("a@b.com".into()),
        attrs: "{}".into(),
        ..Default::default()
    }]);
    let out = pipeline
        .run(vec![TableBatch {
            table: Table::Logs,
            batch: logs.clone(),
        }])
        .unwrap();
    assert_eq!(out[0].batch, logs);
    assert_eq!(pipeline.counters()[0].1.received_rows, 1);
}

#[test]
fn invalid_config_reports_every_problem_as_bad_request() {
    let error = Pipeline::from_config(&config(
        r#"{"order": ["redact", "sample"],
            "redact": {"custom": [{"name": "x", "regex": "[unclosed"}]}}"#,
    ))
    .unwrap_err();
    assert!(matches!(&error, PipelineError::InvalidConfig(problems) if problems.len() == 2));
    assert_eq!(error.kind(), infersight_model::ErrorKind::BadRequest);
    let message = error.to_string();
    assert!(
        message.starts_with("invalid pipeline config: "),
        "{message}"
    );
    assert!(message.contains("unknown stage `sample`"), "{message}");
    assert!(
        message.contains("stages.redact.custom[0].regex: invalid regex"),
        "{message}"
    );
}

#[test]
fn prompts_split_by_parse_are_redacted_by_the_redact_stage_with_its_rules_and_audit() {
    let mut pipeline = Pipeline::from_config(&config(
        r#"{"order": ["parse", "redact"],
            "redact": {"rules": [{"path": "logs.attrs.response", "action": "drop"}]}}"#,
    ))
    .unwrap();
    let logs = LogRecord::to_batch(&[LogRecord {
        ts: 2,
        body: Some("[PROMPT] write to bob@acme.io please [RESPONSE] sent to bob@acme.io".into()),
        attrs: "{}".into(),
        ..Default::default()
    }]);
    let out = pipeline
        .run(vec![TableBatch {
            table: Table::Logs,
            batch: logs,
        }])
        .unwrap();
    let log = out
        .iter()
        .find(|b| b.table == Table::Logs)
        .map(|b| LogRecord::from_batch(&b.batch).unwrap().remove(0))
        .unwrap();
    assert!(!log.body.as_deref().unwrap().contains("bob@"), "{log:?}");
    let attrs: serde_json::Value = serde_json::from_str(&log.attrs).unwrap();
    assert_eq!(attrs["prompt"], "write to <EMAIL> please", "{attrs}");
    assert!(
        attrs.get("response").is_none(),
        "the rule drops it: {attrs}"
    );
    // the audit sees the prompt's email and the dropped response: parse left them to redact
    let audit = out
        .iter()
        .filter(|b| b.table == Table::Redactions)
        .flat_map(|b| infersight_model::RedactionRecord::from_batch(&b.batch).unwrap())
        .map(|r| (r.path.unwrap_or_default(), r.action.unwrap_or_default()))
        .collect::<Vec<_>>();
    assert!(
        audit.contains(&("logs.attrs.prompt".to_string(), "mask".to_string())),
        "{audit:?}"
    );
    assert!(
        audit.contains(&("logs.attrs.response".to_string(), "drop".to_string())),
        "{audit:?}"
    );
}
