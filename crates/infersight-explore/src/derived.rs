//! Derived SLIs over a time range: the composite indices of `infersight_analytics::derived`
//! (throughput health, context pollution, memory efficiency, batching jitter) and length-binned
//! latency, each computed from one SQL aggregation over `requests` per model. These scan raw
//! rows (they need per-request pairs, not sketches), so they answer in scan time, not rollup time.

use std::collections::BTreeMap;

use infersight_analytics::derived::{
    SessionPrompt, batching_jitter, context_pollution_index, memory_efficiency,
    throughput_health_index,
};
use infersight_model::time::format_rfc3339;
use infersight_store::TimeRange;
use serde_json::{Value, json};

use infersight_query::QueryEngine;
use infersight_query::QueryError;

fn where_clause(range: TimeRange) -> String {
    let mut parts = Vec::new();
    if let Some(since) = range.since_ns {
        parts.push(format!("ts >= to_timestamp_nanos({since})"));
    }
    if let Some(until) = range.until_ns {
        parts.push(format!("ts < to_timestamp_nanos({until})"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", parts.join(" AND "))
    }
}

fn rows(value: &Value) -> Vec<serde_json::Map<String, Value>> {
    value["rows"]
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| r.as_object().cloned()).collect())
        .unwrap_or_default()
}

fn f(row: &serde_json::Map<String, Value>, key: &str) -> Option<f64> {
    row.get(key).and_then(Value::as_f64)
}

fn s(row: &serde_json::Map<String, Value>, key: &str) -> String {
    row.get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// Every derived SLI per model over `range`, as JSON (formulas in the README's SLI table).
pub async fn derived_slis(engine: &QueryEngine, range: TimeRange) -> Result<Value, QueryError> {
    let filter = where_clause(range);
    // per model: token throughput (actual vs the best minute), retries (a repeated
    // prompt in one session), memory occupancy, and the jitter inputs
    let per_minute = engine
        .sql(&format!(
            "SELECT coalesce(model, '') AS model, date_trunc('minute', ts) AS minute, \
             sum(coalesce(output_tokens, 0)) AS tokens FROM requests {filter} GROUP BY 1, 2"
        ))
        .await?
        .to_json_value()?;
    let mut peak: BTreeMap<String, f64> = BTreeMap::new();
    let mut minutes: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for row in rows(&per_minute) {
        let tokens = f(&row, "tokens").unwrap_or(0.0);
        let model = s(&row, "model");
        let p = peak.entry(model.clone()).or_insert(0.0);
        *p = p.max(tokens / 60.0);
        let m = minutes.entry(model).or_insert((0.0, 0.0));
        m.0 += tokens;
        m.1 += 60.0;
    }
    let summary = engine
        .sql(&format!(
            "SELECT coalesce(model, '') AS model, count(*) AS requests, \
             count(DISTINCT CASE WHEN prompt_hash IS NOT NULL THEN concat(coalesce(session_id, ''), '/', prompt_hash) END) AS distinct_prompts, \
             sum(CASE WHEN prompt_hash IS NOT NULL THEN 1 ELSE 0 END) AS hashed, \
             sum(coalesce(prefill_ms, 0) + coalesce(decode_ms, 0)) AS effective_ms, \
             sum(CASE WHEN e2e_ms IS NOT NULL THEN e2e_ms - coalesce(queue_ms, 0) ELSE 0 END) AS occupied_ms \
             FROM requests {filter} GROUP BY 1 ORDER BY 1"
        ))
        .await?
        .to_json_value()?;
    let jitter_rows = engine
        .sql(&format!(
            "SELECT coalesce(model, '') AS model, e2e_ms, CAST(batch_size AS DOUBLE) AS batch \
             FROM requests {filter} {and} e2e_ms IS NOT NULL AND batch_size IS NOT NULL",
            and = if filter.is_empty() { "WHERE" } else { "AND" }
        ))
        .await?
        .to_json_value()?;
    let mut jitter_inputs: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for row in rows(&jitter_rows) {
        let entry = jitter_inputs.entry(s(&row, "model")).or_default();
        entry.0.push(f(&row, "e2e_ms").unwrap_or(0.0));
        entry.1.push(f(&row, "batch").unwrap_or(0.0));
    }
    let sessions = engine
        .sql(&format!(
            "SELECT coalesce(model, '') AS model, session_id, \
             sum(coalesce(input_tokens, 0)) AS prompt_tokens, \
             sum(CASE WHEN status = 'error' OR finish_reason = 'length' THEN coalesce(input_tokens, 0) ELSE 0 END) AS rejected_tokens \
             FROM requests {filter} {and} session_id IS NOT NULL GROUP BY 1, 2",
            and = if filter.is_empty() { "WHERE" } else { "AND" }
        ))
        .await?
        .to_json_value()?;
    let mut pollution: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for row in rows(&sessions) {
        let total = f(&row, "prompt_tokens").unwrap_or(0.0) as u64;
        let rejected = f(&row, "rejected_tokens").unwrap_or(0.0) as u64;
        let prompts = [
            SessionPrompt {
                prompt_tokens: total - rejected.min(total),
                rejected: false,
            },
            SessionPrompt {
                prompt_tokens: rejected.min(total),
                rejected: true,
            },
        ];
        if let Some(index) = context_pollution_index(&prompts) {
            pollution.entry(s(&row, "model")).or_default().push(index);
        }
    }
    let mut models = Vec::new();
    for row in rows(&summary) {
        let model = s(&row, "model");
        let requests = f(&row, "requests").unwrap_or(0.0);
        let hashed = f(&row, "hashed").unwrap_or(0.0);
        let distinct = f(&row, "distinct_prompts").unwrap_or(0.0);
        let retry_rate = if hashed > 0.0 {
            (hashed - distinct) / hashed
        } else {
            0.0
        };
        let (tokens, seconds) = minutes.get(&model).copied().unwrap_or((0.0, 0.0));
        let actual = if seconds > 0.0 { tokens / seconds } else { 0.0 };
        let theoretical = peak.get(&model).copied().unwrap_or(0.0);
        let jitter = jitter_inputs
            .get(&model)
            .and_then(|(lat, batch)| batching_jitter(lat, batch));
        let sessions = pollution.get(&model);
        models.push(json!({
            "model": model,
            "requests": requests,
            "throughput_health_index": throughput_health_index(actual, theoretical, retry_rate),
            "actual_output_tokens_per_s": actual,
            "theoretical_output_tokens_per_s": theoretical,
            "retry_rate": retry_rate,
            "memory_efficiency": memory_efficiency(
                f(&row, "effective_ms").unwrap_or(0.0),
                f(&row, "occupied_ms").unwrap_or(0.0),
                0.0,
            ),
            "batching_jitter": jitter,
            "context_pollution_index": sessions.map(|v| v.iter().sum::<f64>() / v.len() as f64),
            "sessions": sessions.map_or(0, Vec::len),
        }));
    }
    let binned = engine
        .sql(&format!(
            "SELECT coalesce(model, '') AS model, {input} AS input_bin, {output} AS output_bin, \
             count(*) AS requests, \
             approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_ms) AS ttft_p99_ms, \
             approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms) AS e2e_p99_ms, \
             avg(tpot_ms) AS tpot_mean_ms \
             FROM requests {filter} GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
            input = bin_sql("input_tokens"),
            output = bin_sql("output_tokens"),
        ))
        .await?
        .to_json_value()?;
    Ok(json!({
        "since": range.since_ns.map(format_rfc3339),
        "until": range.until_ns.map(format_rfc3339),
        "models": models,
        "length_binned": binned["rows"],
        "notes": {
            "theoretical_output_tokens_per_s": "the model's best one-minute output rate in the range",
            "retry_rate": "repeated (session, prompt_hash) pairs / requests with a prompt hash",
            "memory_efficiency": "fragmentation taken as 0: no fragmentation metric in the telemetry",
        },
    }))
}

/// SQL for the length bin of a token column (edges as `derived::LENGTH_BIN_EDGES`).
fn bin_sql(column: &str) -> String {
    format!(
        "CASE WHEN {column} IS NULL THEN 'unknown' WHEN {column} < 256 THEN '0-255' \
     WHEN {column} < 1024 THEN '256-1023' WHEN {column} < 4096 THEN '1024-4095' \
     WHEN {column} < 16384 THEN '4096-16383' ELSE '16384+' END"
    )
}
