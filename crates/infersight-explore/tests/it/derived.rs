//! Derived SLIs from raw rows: hand-checkable fixtures through the real SQL path.

use infersight_model::RequestRecord;
use infersight_store::TimeRange;

use crate::support::{EngineOf, MINUTE_NS, TestStore, base_ns};

fn record(minute: i64, i: i64) -> RequestRecord {
    RequestRecord {
        ts: base_ns() + minute * MINUTE_NS + i * 1_000_000_000,
        model: Some("m".into()),
        session_id: Some(format!("s{}", i % 2)),
        // session s0 repeats one prompt: one retry among the two hashed requests of s0
        prompt_hash: Some(if i % 2 == 0 {
            "same".into()
        } else {
            format!("p{minute}-{i}")
        }),
        input_tokens: Some(100),
        output_tokens: Some(if minute == 0 { 60 } else { 30 }),
        queue_ms: Some(10.0),
        prefill_ms: Some(40.0),
        decode_ms: Some(50.0),
        e2e_ms: Some(110.0),
        batch_size: Some(4),
        status: Some(if minute == 1 && i == 1 { "error" } else { "ok" }.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn derived_indices_follow_their_formulas() {
    let store = TestStore::new();
    // minute 0: two requests of 60 tokens; minute 1: two of 30 (one failed, session s1)
    let records: Vec<RequestRecord> = (0..2)
        .flat_map(|minute| (0..2).map(move |i| record(minute, i)))
        .collect();
    store.append_requests(&records);
    let engine = store.engine();
    let answer = infersight_explore::derived_slis(
        &engine,
        TimeRange {
            since_ns: Some(base_ns()),
            until_ns: Some(base_ns() + 10 * MINUTE_NS),
        },
    )
    .await
    .unwrap();
    let model = &answer["models"][0];
    assert_eq!(model["model"], "m");
    // actual: 180 tokens over 2 minutes = 1.5/s; theoretical: best minute 120/60 = 2/s;
    // retries: 4 hashed, 3 distinct (s0/same twice) → 0.25; THI = 0.75 × 0.75²
    assert_eq!(model["actual_output_tokens_per_s"], 1.5);
    assert_eq!(model["theoretical_output_tokens_per_s"], 2.0);
    assert_eq!(model["retry_rate"], 0.25);
    let thi = model["throughput_health_index"].as_f64().unwrap();
    assert!((thi - 0.75 * 0.5625).abs() < 1e-12, "{answer}");
    // effective 90 of occupied 100 ms per request
    let mem = model["memory_efficiency"].as_f64().unwrap();
    assert!((mem - 0.9).abs() < 1e-12, "{answer}");
    // s1 has 200 prompt tokens, 100 rejected (0.5); s0 none (0) → mean 0.25
    assert_eq!(model["context_pollution_index"], 0.25);
    // constant latency: no jitter
    assert_eq!(model["batching_jitter"], 0.0);
    let bins = answer["length_binned"].as_array().unwrap();
    assert_eq!(bins.len(), 1, "{answer}");
    assert_eq!(bins[0]["input_bin"], "0-255");
    assert_eq!(bins[0]["requests"], 4);
}
