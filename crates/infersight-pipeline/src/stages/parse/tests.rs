//! Tests of the `parse` stage on literal lines: real vLLM V0 stats lines (excerpts of the
//! vLLMBatchingMemoryGap server log, Apache-2.0), the V1 `Engine 000:` form, spec-decoding lines,
//! SGLang batch lines, TGI request spans, access lines and mixed prompt/response/logits lines.

use infersight_model::{LogRecord, MetricRecord, Table, TableBatch};

use super::*;
use crate::stage::Stage;

/// Real lines (vLLMBatchingMemoryGap `server_out.log`, vLLM 0.5.2 V0 engine).
const VLLM_V0: &str = "INFO 02-21 20:07:04 metrics.py:360] Avg prompt throughput: 6388.4 tokens/s, Avg generation throughput: 1311.0 tokens/s, Running: 128 reqs, Swapped: 0 reqs, Pending: 1872 reqs, GPU KV cache usage: 92.5%, CPU KV cache usage: 0.0%.";
const VLLM_ACCESS: &str = "INFO:     127.0.0.1:58774 - \"GET /metrics HTTP/1.1\" 200 OK";
/// The V1 engine's logger line.
const VLLM_V1: &str = "INFO 05-12 10:15:31 [loggers.py:111] Engine 000: Avg prompt throughput: 1205.3 tokens/s, Avg generation throughput: 340.2 tokens/s, Running: 12 reqs, Waiting: 3 reqs, GPU KV cache usage: 41.7%, Prefix cache hit rate: 63.0%";
const VLLM_V1_NO_ENGINE: &str = "INFO 05-12 10:15:31 [loggers.py:111] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 12.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.3%, Prefix cache hit rate: 0.0%";
const SPEC_V0: &str = "INFO 08-14 09:00:00 metrics.py:415] Speculative metrics: Draft acceptance rate: 0.556, System efficiency: 0.402, Number of speculative tokens: 5, Number of accepted tokens: 1234, Number of draft tokens: 2220, Number of emitted tokens: 1456.";
const SPEC_V1: &str = "INFO 05-12 10:15:31 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 2.35, Accepted throughput: 40.20 tokens/s, Drafted throughput: 90.00 tokens/s, Accepted: 402 tokens, Drafted: 900 tokens, Per-position acceptance rate: 0.716, 0.418, 0.216, Avg Draft acceptance rate: 44.7%";
const SGLANG_DECODE: &str = "[2024-12-03 10:00:00 TP0] Decode batch. #running-req: 3, #token: 950, token usage: 0.05, gen throughput (token/s): 61.02, #queue-req: 2";
const SGLANG_PREFILL: &str = "[2024-12-03 10:00:00 TP0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0";
const TGI: &str = "2024-05-01T10:00:00.123Z  INFO generate{parameters=GenerateParameters { max_new_tokens: Some(20) } total_time=\"2.046046581s\" validation_time=\"311.13µs\" queue_time=\"64.16µs\" inference_time=\"2.045671466s\" time_per_token=\"20.253182ms\" seed=\"None\"}: text_generation_router::server: router/src/server.rs:305: Success";

fn metric<'a>(parsed: &'a ParsedLine, name: &str) -> &'a MetricSample {
    parsed
        .metrics
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", parsed.metrics))
}

#[track_caller]
fn close(actual: f64, expected: f64) {
    assert!((actual - expected).abs() < 1e-9, "{actual} != {expected}");
}

#[test]
fn vllm_v0_stats_line_becomes_canonical_samples() {
    let parsed = parse_line(VLLM_V0);
    assert_eq!(parsed.class, LogClass::EngineStats);
    assert_eq!(parsed.metrics.len(), 7);
    close(
        metric(&parsed, "prompt_throughput_tokens_per_second").value,
        6388.4,
    );
    close(
        metric(&parsed, "generation_throughput_tokens_per_second").value,
        1311.0,
    );
    close(metric(&parsed, "requests_running").value, 128.0);
    close(metric(&parsed, "requests_swapped").value, 0.0);
    close(metric(&parsed, "requests_waiting").value, 1872.0);
    let kv = metric(&parsed, "kv_cache_usage_ratio");
    close(kv.value, 0.925);
    assert_eq!(kv.source_name, "vllm:gpu_cache_usage_perc");
    assert_eq!(kv.engine, "vllm");
    close(metric(&parsed, "cpu_kv_cache_usage_ratio").value, 0.0);
}

#[test]
fn vllm_v1_stats_lines_with_and_without_engine_prefix() {
    let parsed = parse_line(VLLM_V1);
    assert_eq!(parsed.class, LogClass::EngineStats);
    assert_eq!(parsed.metrics.len(), 6);
    close(metric(&parsed, "requests_waiting").value, 3.0);
    close(metric(&parsed, "prefix_cache_hit_ratio").value, 0.63);
    close(metric(&parsed, "kv_cache_usage_ratio").value, 0.417);
    assert_eq!(
        metric(&parsed, "requests_running").labels,
        vec![("engine_index".to_string(), "000".to_string())]
    );
    let parsed = parse_line(VLLM_V1_NO_ENGINE);
    assert_eq!(parsed.metrics.len(), 6);
    close(
        metric(&parsed, "generation_throughput_tokens_per_second").value,
        12.5,
    );
    assert!(metric(&parsed, "requests_running").labels.is_empty());
}

#[test]
fn spec_decoding_lines_v0_and_v1() {
    let parsed = parse_line(SPEC_V0);
    assert_eq!(parsed.class, LogClass::EngineStats);
    assert_eq!(parsed.metrics.len(), 6);
    close(metric(&parsed, "spec_draft_acceptance_ratio").value, 0.556);
    close(metric(&parsed, "spec_accepted_tokens_total").value, 1234.0);
    close(metric(&parsed, "spec_draft_tokens_total").value, 2220.0);
    close(metric(&parsed, "spec_emitted_tokens_total").value, 1456.0);
    let parsed = parse_line(SPEC_V1);
    let positions: Vec<f64> = parsed
        .metrics
        .iter()
        .filter(|m| m.name == "spec_position_acceptance_ratio")
        .map(|m| m.value)
        .collect();
    assert_eq!(positions, vec![0.716, 0.418, 0.216]);
    close(metric(&parsed, "spec_accept_length").value, 2.35);
    close(metric(&parsed, "spec_accepted_tokens").value, 402.0);
    close(metric(&parsed, "spec_draft_acceptance_ratio").value, 0.447);
    assert_eq!(parsed.metrics.len(), 9);
}

#[test]
fn sglang_batch_lines() {
    let parsed = parse_line(SGLANG_DECODE);
    assert_eq!(parsed.class, LogClass::EngineStats);
    assert_eq!(parsed.metrics.len(), 5);
    close(metric(&parsed, "requests_running").value, 3.0);
    close(metric(&parsed, "kv_cache_usage_ratio").value, 0.05);
    close(
        metric(&parsed, "generation_throughput_tokens_per_second").value,
        61.02,
    );
    close(metric(&parsed, "requests_waiting").value, 2.0);
    close(metric(&parsed, "kv_cache_used_tokens").value, 950.0);
    assert!(
        metric(&parsed, "requests_running")
            .labels
            .contains(&("tp_rank".into(), "0".into()))
    );
    let parsed = parse_line(SGLANG_PREFILL);
    assert_eq!(parsed.metrics.len(), 6);
    close(metric(&parsed, "prefill_new_tokens").value, 7.0);
}

#[test]
fn tgi_request_spans_become_latency_samples() {
    let parsed = parse_line(TGI);
    assert_eq!(parsed.class, LogClass::InferenceMetrics);
    close(metric(&parsed, "e2e_seconds").value, 2.046046581);
    close(metric(&parsed, "queue_seconds").value, 64.16e-6);
    close(metric(&parsed, "itl_seconds").value, 0.020253182);
    assert_eq!(parsed.metrics.len(), 5);
}

#[test]
fn access_lines_and_key_values() {
    let parsed = parse_line(VLLM_ACCESS);
    assert_eq!(parsed.class, LogClass::Access);
    assert_eq!(parsed.fields["http_method"], "GET");
    assert_eq!(parsed.fields["http_path"], "/metrics");
    assert_eq!(parsed.fields["http_status"], 200);
    let parsed = parse_line(
        r#"request done request_id=cmpl-42 status=ok latency_ms=12.5 note="two words" body={"model": "llama", "n": 2}"#,
    );
    assert_eq!(parsed.class, LogClass::System);
    assert_eq!(parsed.fields["request_id"], "cmpl-42");
    assert_eq!(parsed.fields["latency_ms"], 12.5);
    assert_eq!(parsed.fields["note"], "two words");
    assert_eq!(parsed.fields["model"], "llama");
    assert_eq!(parsed.fields["n"], 2);
    // `==` is a comparison, not a pair.
    let parsed = parse_line("ledNotification == null");
    assert!(parsed.fields.is_empty(), "{:?}", parsed.fields);
}

#[test]
fn mixed_lines_split_by_anchors() {
    let parsed = parse_line(
        r#"[PROMPT] Write to bob@example.com please [RESPONSE] Sure, done. [LOGITS] {"ids": [11, 42, 7], "probs": [0.5, 0.3, 0.2]}"#,
    );
    assert_eq!(parsed.class, LogClass::PromptInput);
    assert_eq!(
        parsed.prompt.as_deref(),
        Some("Write to bob@example.com please")
    );
    assert_eq!(parsed.response.as_deref(), Some("Sure, done."));
    let logits = parsed.logits.unwrap();
    assert_eq!(logits.top_k_ids, vec![11, 42, 7]);
    assert_eq!(logits.top_k_probs, vec![0.5, 0.3, 0.2]);
    assert!(!logits.logprobs);
    let parsed = parse_line(
        r#"[RESPONSE]: ok [LOGPROBS] [{"id": 5, "logprob": -0.1}, {"id": 9, "logprob": -2.3}]"#,
    );
    assert_eq!(parsed.class, LogClass::ResponseOutput);
    let logits = parsed.logits.unwrap();
    assert_eq!(logits.top_k_ids, vec![5, 9]);
    assert!(logits.logprobs);
    let parsed = parse_line(r#"[LOGITS] {"top_k": [[1, 0.9], [2, 0.1]]}"#);
    assert_eq!(parsed.class, LogClass::InferenceMetrics);
    assert_eq!(parsed.logits.unwrap().top_k_ids, vec![1, 2]);
    let parsed = parse_line("[LOGITS] not json");
    assert_eq!(parsed.fields["logits_unparsed"], "not json");
    // Brackets that are not anchors leave the line alone.
    assert_eq!(parse_line("[main] started").class, LogClass::System);
}

#[test]
fn the_stage_sets_classes_redacts_and_emits_metrics() {
    let records = vec![
        LogRecord {
            ts: 7,
            worker: Some("w1".into()),
            body: Some(VLLM_V0.into()),
            ..Default::default()
        },
        LogRecord {
            ts: 8,
            body: Some("[PROMPT] mail bob@example.com [RESPONSE] ok".into()),
            attrs: r#"{"prompt": "kept"}"#.into(),
            ..Default::default()
        },
        LogRecord {
            ts: 9,
            body: Some(VLLM_ACCESS.into()),
            log_class: Some("custom".into()),
            ..Default::default()
        },
        LogRecord {
            ts: 10,
            ..Default::default()
        },
    ];
    let mut stage = ParseStage::new(&ParseConfig::default()).unwrap();
    let mut out = Vec::new();
    stage
        .process(
            TableBatch {
                table: Table::Logs,
                batch: LogRecord::to_batch(&records),
            },
            &mut out,
        )
        .unwrap();
    assert_eq!(out.len(), 2);
    let rows = LogRecord::from_batch(&out[0].batch).unwrap();
    assert_eq!(rows[0].log_class.as_deref(), Some("engine_stats"));
    assert_eq!(rows[1].log_class.as_deref(), Some("prompt_input"));
    assert_eq!(
        rows[2].log_class.as_deref(),
        Some("custom"),
        "a set class is kept"
    );
    assert_eq!(rows[3].log_class, None);
    let body = rows[1].body.as_deref().unwrap();
    assert!(!body.contains("bob@example.com"), "{body}");
    let attrs: serde_json::Value = serde_json::from_str(&rows[1].attrs).unwrap();
    assert_eq!(attrs["prompt"], "kept", "existing attrs win");
    assert_eq!(attrs["response"], "ok");
    assert_eq!(out[1].table, Table::Metrics);
    let metrics = MetricRecord::from_batch(&out[1].batch).unwrap();
    assert_eq!(metrics.len(), 7);
    assert!(
        metrics
            .iter()
            .all(|m| m.ts == 7 && m.worker.as_deref() == Some("w1"))
    );
    assert_eq!(stage.stats()["metric_samples"], 7);
    assert_eq!(stage.stats()["rows_engine_stats"], 1);
}

#[test]
fn a_prompt_without_anchors_in_fields_is_redacted_too() {
    let mut stage = ParseStage::new(&ParseConfig::default()).unwrap();
    let mut out = Vec::new();
    stage
        .process(
            TableBatch {
                table: Table::Logs,
                batch: LogRecord::to_batch(&[LogRecord {
                    ts: 1,
                    body: Some(
                        r#"received request prompt="call +14155552671 now" max_tokens=5"#.into(),
                    ),
                    ..Default::default()
                }]),
            },
            &mut out,
        )
        .unwrap();
    let rows = LogRecord::from_batch(&out[0].batch).unwrap();
    assert_eq!(rows[0].log_class.as_deref(), Some("prompt_input"));
    assert!(!rows[0].attrs.contains("14155552671"), "{}", rows[0].attrs);
    assert!(!rows[0].body.as_deref().unwrap().contains("14155552671"));
}
