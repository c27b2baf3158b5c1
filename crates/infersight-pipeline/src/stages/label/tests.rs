//! Tests of the `label` stage: every default label on a line engines really print, rule
//! precedence, rules files, validation, and the new-and-frequent template flag.

use std::collections::BTreeMap;

use infersight_model::{LogRecord, Table, TableBatch};

use super::*;
use crate::stage::Stage;

fn run(stage: &mut LabelStage, records: &[LogRecord]) -> Vec<LogRecord> {
    let mut out = Vec::new();
    stage
        .process(
            TableBatch {
                table: Table::Logs,
                batch: LogRecord::to_batch(records),
            },
            &mut out,
        )
        .unwrap();
    LogRecord::from_batch(&out[0].batch).unwrap()
}

fn body(text: &str) -> LogRecord {
    LogRecord {
        ts: 1,
        body: Some(text.into()),
        ..Default::default()
    }
}

#[test]
fn default_rules_cover_the_serving_faults() {
    let cases = [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "oom",
        ),
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "cuda_error",
        ),
        ("Request cmpl-1 timed out after 30 s", "timeout"),
        (
            "Sequence group 12 is preempted by PreemptionMode.RECOMPUTE mode",
            "preemption",
        ),
        (
            "No available blocks for new request; waiting",
            "kv_cache_full",
        ),
        (
            "429 Too Many Requests: rate limit reached for tenant a",
            "rate_limited",
        ),
        ("Invalid API key supplied by client", "auth_failure"),
        (
            "upstream connection reset by peer while reading response",
            "network_delay",
        ),
        ("output truncated: finish_reason=length", "truncation"),
        (
            "NCCL WARN Net : Connection closed by remote peer",
            "nccl_error",
        ),
        (
            "EngineDeadError: engine core died unexpectedly, restarting engine",
            "worker_restart",
        ),
    ];
    let mut stage = LabelStage::new(&LabelConfig::default()).unwrap();
    let records: Vec<LogRecord> = cases.iter().map(|(text, _)| body(text)).collect();
    let rows = run(&mut stage, &records);
    for ((text, expected), row) in cases.iter().zip(&rows) {
        assert_eq!(row.label.as_deref(), Some(*expected), "{text}");
        assert!(row.label_confidence.unwrap() > 0.5);
    }
    let rows = run(&mut stage, &[body("model loaded in 12 s")]);
    assert_eq!(rows[0].label, None);
    assert_eq!(rows[0].label_confidence, None);
}

#[test]
fn fields_and_confidence_decide_between_rules() {
    let mut stage = LabelStage::new(&LabelConfig::default()).unwrap();
    let rows = run(
        &mut stage,
        &[
            LogRecord {
                attrs: r#"{"http_status": 429}"#.into(),
                ..body("POST /v1/completions")
            },
            // Preemption (0.85) beats timeout (0.75) on the same line.
            body("request preempted by scheduler after timeout"),
            LogRecord {
                label: Some("preset".into()),
                label_confidence: Some(1.0),
                ..body("CUDA out of memory")
            },
        ],
    );
    assert_eq!(rows[0].label.as_deref(), Some("rate_limited"));
    assert_eq!(rows[0].label_confidence, Some(0.95));
    assert_eq!(rows[1].label.as_deref(), Some("preemption"));
    assert_eq!(
        rows[2].label.as_deref(),
        Some("preset"),
        "a set label is kept"
    );
}

#[test]
fn rules_files_add_rules_by_template_and_field() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("rules.toml");
    std::fs::write(
        &path,
        r#"
[[rule]]
label = "disk_full"
confidence = 0.99
keywords = ["no space left"]

[[rule]]
label = "known_noise"
confidence = 0.6
templates = ["abc123"]
fields = { severity = "DEBUG" }
"#,
    )
    .unwrap();
    let config = LabelConfig {
        default_rules: false,
        rules_file: Some(path),
        ..LabelConfig::default()
    };
    let mut stage = LabelStage::new(&config).unwrap();
    assert_eq!(stage.rules().rules().len(), 2);
    let rows = run(
        &mut stage,
        &[
            body("write failed: No space left on device"),
            LogRecord {
                template_id: Some("abc123".into()),
                severity: Some("DEBUG".into()),
                ..body("tick")
            },
            LogRecord {
                template_id: Some("abc123".into()),
                severity: Some("INFO".into()),
                ..body("tick")
            },
            body("CUDA out of memory"),
        ],
    );
    assert_eq!(rows[0].label.as_deref(), Some("disk_full"));
    assert_eq!(rows[1].label.as_deref(), Some("known_noise"));
    assert_eq!(rows[2].label, None, "every field must match");
    assert_eq!(rows[3].label, None, "defaults were turned off");
}

#[test]
fn invalid_rules_are_rejected_with_every_problem() {
    let bad = LabelRule {
        label: "Bad Label".into(),
        confidence: 1.5,
        keywords: vec![],
        templates: vec![],
        fields: BTreeMap::new(),
    };
    let error = LabelRules::new(vec![bad.clone()]).unwrap_err().to_string();
    assert!(error.contains("label:"), "{error}");
    assert!(error.contains("confidence:"), "{error}");
    assert!(error.contains("needs keywords"), "{error}");
    let config = LabelConfig {
        rules: vec![bad],
        ..LabelConfig::default()
    };
    assert_eq!(config.validate().len(), 3);
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("rules.toml");
    std::fs::write(&path, "[[rule]]\nlabel = \"x\"\nconfidance = 1\n").unwrap();
    assert!(LabelRules::read_file(&path).is_err());
}

#[test]
fn new_frequent_templates_are_flagged_after_warmup() {
    let config = LabelConfig {
        warmup_rows: 2,
        new_template_min_count: 3,
        ..LabelConfig::default()
    };
    let mut stage = LabelStage::new(&config).unwrap();
    let row = |id: &str| LogRecord {
        template_id: Some(id.into()),
        ..body("something happened")
    };
    // Warm-up: `old` is known.
    run(&mut stage, &[row("old"), row("old")]);
    let rows = run(
        &mut stage,
        &[row("new"), row("new"), row("old"), row("new"), row("new")],
    );
    let labels: Vec<Option<&str>> = rows.iter().map(|r| r.label.as_deref()).collect();
    assert_eq!(
        labels,
        vec![
            None,
            None,
            None,
            Some(NEW_TEMPLATE_LABEL),
            Some(NEW_TEMPLATE_LABEL)
        ]
    );
    assert_eq!(stage.flagged_templates(), vec!["new"]);
    assert_eq!(stage.stats()["templates_flagged_new"], 1);
}
