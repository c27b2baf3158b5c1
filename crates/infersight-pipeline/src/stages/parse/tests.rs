//! Tests of the `parse` stage on literal lines: real vLLM V0 stats lines (excerpts of the
//! vLLMBatchingMemoryGap server log, Apache-2.0), the V1 `Engine 000:` form, spec-decoding lines,
//! SGLang batch lines, TGI request spans, access lines and mixed prompt/response/logits lines;
//! request rows from TGI span lines and SGLang `Finish:` lines (repr and JSON, truncated, with
//! field-like text in the prompt and output).

use infersight_model::normalize::BREAKDOWN_MISMATCH_KEY;
use infersight_model::{LogRecord, MetricRecord, RequestRecord, Table, TableBatch};

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
fn leading_key_values_of_a_prompt_are_metadata_the_rest_is_the_prompt() {
    let parsed = parse_line(
        "[PROMPT] request_id=cmpl-7 tenant=acme Set x=1 then mail bob@example.com [RESPONSE] ok",
    );
    assert_eq!(parsed.fields["request_id"], "cmpl-7");
    assert_eq!(parsed.fields["tenant"], "acme");
    // `x=1` is inside the user's text: not a field, and the prompt keeps it
    assert!(!parsed.fields.contains_key("x"), "{:?}", parsed.fields);
    assert_eq!(
        parsed.prompt.as_deref(),
        Some("Set x=1 then mail bob@example.com")
    );
    // a prompt that opens with something else keeps all of its text
    let parsed = parse_line("[PROMPT] 2+2=4? [RESPONSE] yes");
    assert_eq!(parsed.prompt.as_deref(), Some("2+2=4?"));
    assert!(parsed.fields.is_empty(), "{:?}", parsed.fields);
    let parsed = parse_line("[PROMPT] note=\"quoted text\" rest");
    assert_eq!(parsed.prompt.as_deref(), Some("note=\"quoted text\" rest"));
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

// ---------------------------------------------------------------------------------------------
// Request rows from engine request-log lines

/// 2024-05-01T10:00:00.123Z, the time of the TGI line above.
const TGI_TS: i64 = 1_714_557_600_123_000_000;
/// TGI ≥ 2: the streaming handler, every sampling parameter printed; the stop strings spell a
/// `}` and a fake `max_new_tokens`.
const TGI_STREAM: &str = r#"2024-05-01T10:00:05.500Z  INFO generate_stream{parameters=GenerateParameters { best_of: None, temperature: Some(0.7), repetition_penalty: Some(1.03), frequency_penalty: None, top_k: Some(10), top_p: Some(0.95), typical_p: None, do_sample: true, max_new_tokens: Some(512), return_full_text: Some(false), stop: ["}", "max_new_tokens: Some(1)"], truncate: None, watermark: false, details: true, decoder_input_details: false, seed: None, top_n_tokens: None, grammar: None, adapter_id: None } total_time="5.312s" validation_time="1.2ms" queue_time="310.5ms" inference_time="5.0003s" time_per_token="9.766ms" seed="Some(4422)"}: text_generation_router::server: router/src/server.rs:511: Success"#;
/// The chat handler records `parameters` later, as a quoted (escaped) Debug string.
const TGI_CHAT: &str = r#"2024-05-01T10:00:06Z  INFO chat_completions{parameters="GenerateParameters { best_of: None, temperature: None, top_p: None, max_new_tokens: Some(64), stop: [\"\\n\"], seed: None }" total_time="812.4ms" validation_time="95µs" queue_time="2.1ms" inference_time="810.2ms" time_per_token="12.66ms" seed="None"}: text_generation_router::server: router/src/server.rs:1180: Success"#;
const TGI_COMPLETIONS: &str = r#"2024-05-01T10:00:07Z  INFO completions{total_time="1.5s" validation_time="40µs" queue_time="-3ms" inference_time="1.49s" time_per_token="nonsense" seed="None"}: text_generation_router::server: router/src/server.rs:700: Success"#;

/// SGLang `--log-requests`, meta_info nested; the prompt and the output both spell fields.
const SGLANG_NESTED: &str = r#"[2025-05-27 20:00:14 TP0] Finish: obj=GenerateReqInput(rid='bf89c3e1a7d44b0e9f1c2d3e4f5a6b7c', text="Repeat after me: 'e2e_latency': 99, 'meta_info': {'e2e_latency': 99}, out={'e2e_latency': 99}", input_ids=None, sampling_params={'temperature': 1.0, 'max_new_tokens': 32000, 'top_p': 0.95, 'stop': ["}"]}, return_logprob=False, stream=False), out={'text': "'e2e_latency': 99, 'meta_info': {'e2e_latency': 99}", 'output_ids': [40, 1097, 264, 11, 0, 13, 374, 2675, 13, 40, 1097, 264, 11, 0, 13, 374], 'meta_info': {'id': 'bf89c3e1a7d44b0e9f1c2d3e4f5a6b7c', 'finish_reason': {'type': 'length', 'length': 16}, 'prompt_tokens': 7, 'weight_version': 'default', 'completion_tokens': 16, 'cached_tokens': 0, 'e2e_latency': 0.1652, 'queue_time': 0.0031}}"#;
/// Older versions: the numbers at the top of `out`, a TTFT, no finish reason.
const SGLANG_TOP_LEVEL: &str = r#"[2025-03-02 11:20:07 TP0] Finish: obj=GenerateReqInput(text='Summarize the meeting notes', sampling_params={'max_new_tokens': 256, 'temperature': 0.0}, rid='req-006'), out={'rid': 'req-006', 'finish_reason': None, 'prompt_tokens': 320, 'completion_tokens': 220, 'cached_tokens': 80, 'e2e_latency': 8.512, 'ttft': 5.521}"#;
/// SGLang's JSON request logging: the same fields, double quotes.
const SGLANG_JSON: &str = r#"{"timestamp": "2025-06-01T08:00:00.250Z", "event": "request.finished", "rid": "json-1", "obj": {"text": "say \"e2e_latency\": 99", "sampling_params": {"temperature": 0.6, "top_p": 1.0, "max_new_tokens": 128}}, "out": {"text": "ok", "meta_info": {"id": "json-1", "finish_reason": {"type": "stop", "matched": 151645}, "prompt_tokens": 12, "completion_tokens": 40, "cached_tokens": 8, "e2e_latency": 1.25, "queue_time": 0.05, "ttft": 0.3}}}"#;

fn request_line(line: &str) -> LogRequest {
    parse_request_line(line).unwrap_or_else(|| panic!("no request in {line}"))
}

fn ms(value: Option<f64>) -> f64 {
    value.unwrap_or_else(|| panic!("NULL where a value was expected"))
}

fn run_stage(config: &ParseConfig, records: &[LogRecord]) -> (ParseStage, Vec<TableBatch>) {
    let mut stage = ParseStage::new(config).unwrap();
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
    (stage, out)
}

fn request_rows(out: &[TableBatch]) -> Vec<RequestRecord> {
    out.iter()
        .filter(|batch| batch.table == Table::Requests)
        .flat_map(|batch| RequestRecord::from_batch(&batch.batch).unwrap())
        .collect()
}

fn attrs_of(record: &RequestRecord) -> serde_json::Value {
    serde_json::from_str(&record.attrs).unwrap()
}

#[test]
fn tgi_span_lines_of_every_handler_become_requests() {
    let request = request_line(TGI);
    assert_eq!(request.runtime, "tgi");
    close(request.e2e_ms, 2046.046581);
    close(ms(request.queue_ms), 0.06416);
    close(ms(request.tpot_ms), 20.253182);
    assert_eq!(request.max_tokens, Some(20));
    assert_eq!((request.temperature, request.top_p), (None, None));
    assert_eq!(request.ttft_ms, None, "TGI prints no TTFT");
    assert_eq!(request.extras["tgi.span"], "generate");
    close(
        request.extras["tgi.validation_ms"].as_f64().unwrap(),
        0.31113,
    );
    close(
        request.extras["tgi.inference_ms"].as_f64().unwrap(),
        2045.671466,
    );

    let request = request_line(TGI_STREAM);
    assert_eq!(request.extras["tgi.span"], "generate_stream");
    close(request.e2e_ms, 5312.0);
    close(ms(request.queue_ms), 310.5);
    close(ms(request.tpot_ms), 9.766);
    assert_eq!(request.max_tokens, Some(512), "not the stop string's");
    close(ms(request.temperature), 0.7);
    close(ms(request.top_p), 0.95);

    let request = request_line(TGI_CHAT);
    assert_eq!(request.extras["tgi.span"], "chat_completions");
    close(request.e2e_ms, 812.4);
    close(ms(request.queue_ms), 2.1);
    assert_eq!(request.max_tokens, Some(64));
    assert_eq!(request.temperature, None, "`None` is no temperature");

    // A negative queue and an unreadable TPOT are NULL; the row stays.
    let request = request_line(TGI_COMPLETIONS);
    assert_eq!(request.extras["tgi.span"], "completions");
    close(request.e2e_ms, 1500.0);
    assert_eq!((request.queue_ms, request.tpot_ms), (None, None));
    assert_eq!(request.max_tokens, None);

    // No total time, another span, a cut-off total time: no request.
    for line in [
        "2024-05-01T10:00:00Z ERROR generate{parameters=GenerateParameters { max_new_tokens: Some(20) }}: text_generation_router::server: Incomplete generation",
        "2024-05-01T10:00:00Z  INFO embed{total_time=\"2s\"}: text_embeddings_router: Success",
        "2024-05-01T10:00:00Z  INFO generate{parameters=GenerateParameters { max_new_tokens: Some(20) } total_time=\"2.04",
        "generate{total_time=\"-2s\" queue_time=\"1ms\"}: Success",
        "generate{total_time=\"NaNs\"}: Success",
    ] {
        assert_eq!(parse_request_line(line), None, "{line}");
    }
}

#[test]
fn sglang_finish_lines_nested_top_level_and_json() {
    let request = request_line(SGLANG_NESTED);
    assert_eq!(request.runtime, "sglang");
    assert_eq!(
        request.request_id.as_deref(),
        Some("bf89c3e1a7d44b0e9f1c2d3e4f5a6b7c")
    );
    close(request.e2e_ms, 165.2);
    close(ms(request.queue_ms), 3.1);
    assert_eq!(request.ttft_ms, None);
    assert_eq!(request.input_tokens, Some(7));
    assert_eq!(request.output_tokens, Some(16));
    assert_eq!(request.cached_tokens, Some(0));
    assert_eq!(request.finish_reason.as_deref(), Some("length"));
    assert_eq!(request.max_tokens, Some(32000));
    close(ms(request.temperature), 1.0);
    close(ms(request.top_p), 0.95);
    assert_eq!(request.extras["sglang.weight_version"], "default");

    let request = request_line(SGLANG_TOP_LEVEL);
    assert_eq!(request.request_id.as_deref(), Some("req-006"));
    close(request.e2e_ms, 8512.0);
    close(ms(request.ttft_ms), 5521.0);
    assert_eq!(request.queue_ms, None);
    assert_eq!(
        (
            request.input_tokens,
            request.output_tokens,
            request.cached_tokens
        ),
        (Some(320), Some(220), Some(80))
    );
    assert_eq!(request.finish_reason, None, "`None` is no reason");
    assert_eq!(request.max_tokens, Some(256));
    close(ms(request.temperature), 0.0);
    assert_eq!(request.top_p, None);

    let request = request_line(SGLANG_JSON);
    assert_eq!(request.request_id.as_deref(), Some("json-1"));
    close(request.e2e_ms, 1250.0);
    close(ms(request.queue_ms), 50.0);
    close(ms(request.ttft_ms), 300.0);
    assert_eq!(request.finish_reason.as_deref(), Some("stop"));
    assert_eq!(
        (request.input_tokens, request.output_tokens),
        (Some(12), Some(40))
    );
    assert_eq!(request.max_tokens, Some(128));
    close(ms(request.temperature), 0.6);
    close(ms(request.top_p), 1.0);
}

#[test]
fn text_that_spells_fields_is_never_read_as_fields() {
    // The only `e2e_latency` outside quoted text is in the prompt's `obj` part before `out=`:
    // not a request.
    let line = r#"[2025-05-27 20:00:14 TP0] Finish: obj=GenerateReqInput(text="'e2e_latency': 99", rid='x'), out={'text': "'e2e_latency': 99, 'meta_info': {'e2e_latency': 99}", 'prompt_tokens': 3}"#;
    assert_eq!(parse_request_line(line), None);
    // Top-level numbers after a text that spells them: the real ones.
    let line = r#"[2025-05-27 20:00:14 TP0] Finish: obj=GenerateReqInput(rid='r1'), out={'text': "x', 'e2e_latency': 99, 'y", 'rid': 'r1', 'e2e_latency': 0.5, 'completion_tokens': 2}"#;
    let request = request_line(line);
    close(request.e2e_ms, 500.0);
    assert_eq!(request.output_tokens, Some(2));
    // No prompt or output text reaches the row.
    let (_, out) = run_stage(
        &from_logs(),
        &[LogRecord {
            ts: 1_000_000_000_000,
            body: Some(SGLANG_NESTED.into()),
            ..Default::default()
        }],
    );
    let rows = request_rows(&out);
    assert_eq!(rows.len(), 1);
    let row = serde_json::to_string(&rows[0]).unwrap();
    assert!(!row.contains("Repeat after me"), "{row}");
    assert!(!row.contains("e2e_latency"), "{row}");
}

#[test]
fn truncated_and_garbage_lines_give_no_row_or_null_columns() {
    // Every prefix of a real line: no panic, and a row only with the full e2e (a number cut by
    // the line's end is never read).
    for end in (0..=SGLANG_NESTED.len()).filter(|&end| SGLANG_NESTED.is_char_boundary(end)) {
        if let Some(request) = parse_request_line(&SGLANG_NESTED[..end]) {
            close(request.e2e_ms, 165.2);
            assert!(
                request.queue_ms.is_none() || request.queue_ms == Some(0.0031 * 1e3),
                "{:?} at {end}",
                request.queue_ms
            );
        }
    }
    for (line, e2e_ms) in [
        (TGI_STREAM, 5312.0),
        (TGI_CHAT, 812.4),
        (SGLANG_TOP_LEVEL, 8512.0),
        (SGLANG_JSON, 1250.0),
    ] {
        for end in (0..=line.len()).filter(|&end| line.is_char_boundary(end)) {
            if let Some(request) = parse_request_line(&line[..end]) {
                close(request.e2e_ms, e2e_ms);
            }
        }
    }
    // Cut right after the e2e: the row is there, the queue after it is NULL.
    let cut = SGLANG_NESTED.find("'queue_time'").unwrap();
    let request = request_line(&SGLANG_NESTED[..cut]);
    close(request.e2e_ms, 165.2);
    assert_eq!(request.queue_ms, None);
    // Cut before the e2e: no row.
    let cut = SGLANG_NESTED.find("'e2e_latency'").unwrap() + 8;
    assert_eq!(parse_request_line(&SGLANG_NESTED[..cut]), None);

    let with = |e2e: &str, rest: &str| {
        format!(
            "[2025-05-27 20:00:14 TP0] Finish: obj=GenerateReqInput(rid='g'), out={{'meta_info': {{'id': 'g', 'e2e_latency': {e2e}{rest}}}}}"
        )
    };
    for e2e in [
        "nan", "-0.5", "inf", "None", "'1.0'", "1e400", "90000", "[1]", "",
    ] {
        assert_eq!(parse_request_line(&with(e2e, "")), None, "e2e {e2e}");
    }
    let request = request_line(&with(
        "np.float64(0.25)",
        ", 'queue_time': -0.1, 'prompt_tokens': -5, 'completion_tokens': 3.0, 'cached_tokens': 'x', 'ttft': nan, 'finish_reason': {'type': None}",
    ));
    close(request.e2e_ms, 250.0);
    assert_eq!((request.queue_ms, request.ttft_ms), (None, None));
    assert_eq!(request.input_tokens, None);
    assert_eq!(request.output_tokens, Some(3));
    assert_eq!(request.cached_tokens, None);
    assert_eq!(request.finish_reason, None);
    for garbage in [
        "",
        "Finish: obj=",
        "Finish: obj=X(), out=",
        "Finish: obj=X(), out={",
        "Finish: obj=X(), out={'e2e_latency'",
        "Finish: obj=X(), out={'e2e_latency': 1.0",
        "Finish: obj=X(), out={: 1.0, 'e2e_latency': 1.0}",
        "Finish: obj=X(), out={'meta_info': {'e2e_latency': \"unterminated}}",
        "Finish: obj=X(text='a)b', out={'e2e_latency': 1.0}",
        "Finish: obj=(((((((((((, out={'e2e_latency': 1.0}",
        "Finish: obj=X()]]]], out={'e2e_latency': 1.0}",
        "{\"event\": \"request.finished\", \"out\": {\"meta_info\": {\"e2e_latency\": 0.1",
        "request.finished",
        "total_time=\"1s\"",
        "generate{total_time=}",
        "generate{parameters=GenerateParameters { max_new_tokens: Some(2",
        "Finish: obj=X(), out={'\\",
        "Finish: obj=X(), out={'é': ñ, 'e2e_latency': nan}}} total_time=\"\"",
    ] {
        assert_eq!(parse_request_line(garbage), None, "{garbage}");
    }
    // A `meta_info` that is no dict: the numbers of `out` itself.
    let request = request_line("Finish: obj=X(), out={'meta_info': 7, 'e2e_latency': 1.0}}}}");
    close(request.e2e_ms, 1000.0);
    // Non-ASCII keys and values around the numbers, and a marker spelled inside a JSON text.
    let request = request_line("Finish: obj=X(text='ünïcode'), out={'é': 'ñ', 'e2e_latency': 1.0}");
    close(request.e2e_ms, 1000.0);
    let request = request_line(
        r#"{"event": "request.finished", "obj": {"text": "Finish: obj=X(), out={'e2e_latency': 9}"}, "out": {"e2e_latency": 2}}"#,
    );
    close(request.e2e_ms, 2000.0);
}

#[test]
fn the_stage_emits_request_rows_that_start_at_log_ts_minus_e2e() {
    let log = |ts: i64, body: &str| LogRecord {
        ts,
        service: Some("llm-api".into()),
        worker: Some("gpu-node-3".into()),
        body: Some(body.into()),
        ..Default::default()
    };
    let records = vec![
        log(TGI_TS, TGI),
        LogRecord {
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            request_id: Some("from-receiver".into()),
            ..log(2_000_000_000_000, SGLANG_TOP_LEVEL)
        },
        log(3_000_000_000_000, SGLANG_JSON),
        log(4_000_000_000_000, VLLM_V0),
    ];
    let (stage, out) = run_stage(&from_logs(), &records);
    let tables: Vec<Table> = out.iter().map(|batch| batch.table).collect();
    assert_eq!(tables, vec![Table::Logs, Table::Metrics, Table::Requests]);
    let rows = request_rows(&out);
    assert_eq!(rows.len(), 3);

    let tgi = &rows[0];
    assert_eq!(tgi.ts, TGI_TS - 2_046_046_581);
    assert_eq!(tgi.runtime.as_deref(), Some("tgi"));
    assert_eq!(tgi.service.as_deref(), Some("llm-api"));
    assert_eq!(tgi.worker.as_deref(), Some("gpu-node-3"));
    assert_eq!(
        (tgi.trace_id.as_deref(), tgi.span_id.as_deref()),
        (None, None)
    );
    close(ms(tgi.e2e_ms), 2046.046581);
    close(ms(tgi.queue_ms), 0.06416);
    close(ms(tgi.tpot_ms), 20.253182);
    assert_eq!(
        (tgi.ttft_ms, tgi.prefill_ms, tgi.decode_ms),
        (None, None, None)
    );
    assert_eq!(tgi.max_tokens, Some(20));
    let attrs = attrs_of(tgi);
    assert_eq!(attrs["infersight.request_source"], "log");
    close(attrs["tgi.validation_ms"].as_f64().unwrap(), 0.31113);
    close(attrs["tgi.inference_ms"].as_f64().unwrap(), 2045.671466);
    assert!(attrs.get(BREAKDOWN_MISMATCH_KEY).is_none(), "{attrs}");

    // The breakdown is completed from what SGLang printed: decode = e2e − TTFT, TPOT from it.
    let top = &rows[1];
    assert_eq!(top.ts, 2_000_000_000_000 - 8_512_000_000);
    assert_eq!(top.runtime.as_deref(), Some("sglang"));
    assert_eq!(
        top.request_id.as_deref(),
        Some("req-006"),
        "the line's id wins"
    );
    assert_eq!(
        top.trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );
    close(ms(top.ttft_ms), 5521.0);
    close(ms(top.decode_ms), 2991.0);
    close(ms(top.tpot_ms), 2991.0 / 219.0);
    assert_eq!(top.prefill_ms, None, "no queue, no prefill");

    let json = &rows[2];
    assert_eq!(json.ts, 3_000_000_000_000 - 1_250_000_000);
    close(ms(json.prefill_ms), 250.0);
    close(ms(json.decode_ms), 950.0);
    close(ms(json.tpot_ms), 950.0 / 39.0);
    assert_eq!(json.cached_tokens, Some(8));

    let stats = stage.stats();
    assert_eq!(stats["request_rows"], 3);
    assert_eq!(stats["request_rows_mismatched"], 0);
    assert_eq!(stats["request_lines_traced"], 0);
    assert_eq!(stats["metric_samples"], 5 + 7, "TGI timings and vLLM stats");
}

/// The parse stage with request rows from log lines turned on.
fn from_logs() -> ParseConfig {
    ParseConfig {
        requests_from_logs: true,
        ..ParseConfig::default()
    }
}

#[test]
fn lines_of_traced_spans_and_a_disabled_switch_give_no_rows() {
    let records = vec![
        LogRecord {
            ts: TGI_TS,
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            span_id: Some("00f067aa0ba902b7".into()),
            body: Some(TGI.into()),
            ..Default::default()
        },
        LogRecord {
            ts: TGI_TS,
            body: Some(SGLANG_NESTED.into()),
            ..Default::default()
        },
    ];
    let (stage, out) = run_stage(&from_logs(), &records);
    let rows = request_rows(&out);
    assert_eq!(rows.len(), 1, "the traced line is the span's row already");
    assert_eq!(rows[0].runtime.as_deref(), Some("sglang"));
    assert_eq!(stage.stats()["request_lines_traced"], 1);
    assert_eq!(stage.stats()["request_rows"], 1);

    let config: ParseConfig = toml::from_str("requests_from_logs = false").unwrap();
    assert!(!config.requests_from_logs);
    assert!(
        !ParseConfig::default().requests_from_logs,
        "off by default: traced engines would count twice"
    );
    assert!(toml::from_str::<ParseConfig>("request_from_logs = false").is_err());
    for config in [config, ParseConfig::default()] {
        let (stage, out) = run_stage(&config, &records);
        assert!(request_rows(&out).is_empty());
        assert_eq!(out.len(), 2, "logs and TGI metrics only");
        assert_eq!(stage.stats()["request_rows"], 0);
        assert_eq!(stage.stats()["request_lines_traced"], 0);
        assert_eq!(
            stage.stats()["request_lines_ignored"],
            2,
            "seen and counted"
        );
    }
}

#[test]
fn contradicting_phases_are_flagged_not_fixed() {
    let line = |meta: &str| {
        format!(
            "[2025-05-27 20:00:14 TP0] Finish: obj=GenerateReqInput(rid='m'), out={{'text': 'x', 'meta_info': {{'id': 'm', 'completion_tokens': 11, {meta}}}}}"
        )
    };
    let records = vec![
        // The queue alone is longer than the whole request.
        LogRecord {
            ts: 10_000_000_000,
            body: Some(line("'e2e_latency': 0.5, 'queue_time': 2.0")),
            ..Default::default()
        },
        // TTFT after the end.
        LogRecord {
            ts: 10_000_000_000,
            body: Some(line("'e2e_latency': 0.5, 'ttft': 0.9, 'queue_time': 0.1")),
            ..Default::default()
        },
        // Consistent.
        LogRecord {
            ts: 10_000_000_000,
            body: Some(line("'e2e_latency': 0.5, 'ttft': 0.2, 'queue_time': 0.1")),
            ..Default::default()
        },
    ];
    let (stage, out) = run_stage(&from_logs(), &records);
    let rows = request_rows(&out);
    assert_eq!(rows.len(), 3);
    let reason = |row: &RequestRecord| {
        attrs_of(row)
            .get(BREAKDOWN_MISMATCH_KEY)
            .and_then(|v| v.as_str().map(str::to_string))
    };
    let queue = reason(&rows[0]).expect("queue > e2e flagged");
    assert!(
        queue.contains("queue 2000.0 exceeds e2e 500.0 ms"),
        "{queue}"
    );
    close(ms(rows[0].queue_ms), 2000.0);
    close(ms(rows[0].e2e_ms), 500.0);
    assert_eq!(rows[0].ts, 10_000_000_000 - 500_000_000);
    let ttft = reason(&rows[1]).expect("ttft > e2e flagged");
    assert!(ttft.contains("ttft 900.0"), "{ttft}");
    assert_eq!(
        (rows[1].prefill_ms, rows[1].decode_ms, rows[1].tpot_ms),
        (None, None, None),
        "nothing derived from contradicting phases"
    );
    assert_eq!(reason(&rows[2]), None);
    close(ms(rows[2].prefill_ms), 100.0);
    close(ms(rows[2].decode_ms), 300.0);
    close(ms(rows[2].tpot_ms), 30.0);
    assert_eq!(stage.stats()["request_rows_mismatched"], 2);
    assert_eq!(stage.stats()["request_rows"], 3);
}
