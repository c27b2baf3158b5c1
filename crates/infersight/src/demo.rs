//! `infersight demo`: the main job end to end on the embedded default. It starts the real server
//! in-process on free ports with a fresh store, sends a synthetic fleet's telemetry over OTLP/HTTP
//! (with an injected regression), shuts down (flushing to Parquet), then answers with SQL: the
//! latency breakdown before vs during the incident and the slices whose over-SLO counts moved most.
//!
//! The traffic generator here is deliberately small (a documented latency model, seeded); the
//! faithful fleet simulator with scenarios and ground truth replaces it (issue 3), and the
//! root-cause engine replaces the "largest movers" table (issue 6).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use infersight_query::QueryEngine;
use infersight_server::{Counters, ServeSettings};
use infersight_store::StorageBackend;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

use crate::config::Config;
use crate::exit::CliError;
use crate::rng::Rng;
use crate::wiring;

const WORKERS: usize = 16;
const RATE_PER_S: f64 = 40.0;
const BASELINE_MIN: i64 = 30;
const INCIDENT_MIN: i64 = 15;
const START_NS: i64 = 1_764_381_600_000_000_000; // 2025-11-29T02:00:00Z
const INCIDENT_LORA: &str = "chat-lora,sql-lora";

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn text(v: impl Into<String>) -> Value {
    Value::StringValue(v.into())
}

/// Worker settings: model, version, KV-cache policy.
fn worker_settings(w: usize) -> (&'static str, &'static str, &'static str) {
    let model = if w < WORKERS / 2 {
        "llama-3-8b"
    } else {
        "qwen2.5-7b"
    };
    let version = if w.is_multiple_of(2) { "r1" } else { "r2" };
    let kv = if w % 4 < 2 { "paged" } else { "contiguous" };
    (model, version, kv)
}

/// One export per worker per minute of simulated traffic.
fn generate(seed: u64) -> Vec<ExportTraceServiceRequest> {
    let mut rng = Rng::new(seed);
    let mut exports = Vec::new();
    let per_worker_per_min = RATE_PER_S * 60.0 / WORKERS as f64;
    let loras = ["none", INCIDENT_LORA, "summarize-lora"];
    let mut request_no = 0u64;
    for minute in 0..(BASELINE_MIN + INCIDENT_MIN) {
        let incident = minute >= BASELINE_MIN;
        for w in 0..WORKERS {
            let (model, version, kv_policy) = worker_settings(w);
            let mut spans = Vec::new();
            let n = (per_worker_per_min + rng.normal() * per_worker_per_min.sqrt())
                .round()
                .max(0.0) as usize;
            for _ in 0..n {
                request_no += 1;
                let ts = START_NS + minute * 60_000_000_000 + (rng.unit() * 60e9) as i64;
                let input = (6.2 + 0.8 * rng.normal())
                    .exp()
                    .clamp(8.0, 16_000.0)
                    .round();
                let output = (4.6 + 0.6 * rng.normal()).exp().clamp(1.0, 2_048.0).round();
                let lora = loras[(rng.next_u64() % 3) as usize];
                let batch = 8 + (rng.next_u64() % 40) as i64;
                // Latency model: queue (exponential), prefill ∝ input, decode = output × TPOT where
                // TPOT grows with batch size; the incident slows TPOT on one slice.
                let queue_s = rng.exp(0.02);
                let prefill_s = input * 0.000_12;
                let mut tpot_s =
                    0.005 * (1.0 + batch as f64 / 64.0) * (1.0 + 0.1 * rng.normal()).max(0.5);
                if incident && version == "r2" && kv_policy == "paged" && lora == INCIDENT_LORA {
                    tpot_s += 0.009;
                }
                let decode_s = output * tpot_s;
                let ttft_s = queue_s + prefill_s;
                let e2e_s = ttft_s + decode_s + 0.004;
                let mut trace_id = [0u8; 16];
                trace_id[..8].copy_from_slice(&request_no.to_be_bytes());
                trace_id[8..].copy_from_slice(&rng.next_u64().to_be_bytes());
                spans.push(Span {
                    trace_id: trace_id.to_vec(),
                    span_id: (rng.next_u64() | 1).to_be_bytes().to_vec(),
                    name: "llm_request".into(),
                    kind: 2,
                    start_time_unix_nano: ts as u64,
                    end_time_unix_nano: (ts + (e2e_s * 1e9) as i64) as u64,
                    attributes: vec![
                        kv("gen_ai.request.model", text(model)),
                        kv("gen_ai.usage.input_tokens", Value::IntValue(input as i64)),
                        kv("gen_ai.usage.output_tokens", Value::IntValue(output as i64)),
                        kv("gen_ai.latency.time_in_queue", Value::DoubleValue(queue_s)),
                        kv(
                            "gen_ai.latency.time_to_first_token",
                            Value::DoubleValue(ttft_s),
                        ),
                        kv(
                            "gen_ai.latency.time_in_model_prefill",
                            Value::DoubleValue(prefill_s),
                        ),
                        kv(
                            "gen_ai.latency.time_in_model_decode",
                            Value::DoubleValue(decode_s),
                        ),
                        kv("gen_ai.latency.e2e", Value::DoubleValue(e2e_s)),
                        kv("gen_ai.request.id", text(format!("req-{request_no}"))),
                        kv("serving.model.version", text(version)),
                        kv("serving.kv_cache.policy", text(kv_policy)),
                        kv("llm.lora.adapters", text(lora)),
                        kv("serving.batch.size", Value::IntValue(batch)),
                        kv("tenant", text(format!("tenant-{}", rng.next_u64() % 6))),
                        // personal data inside an attribute: redacted before storage
                        kv(
                            "user.contact",
                            text(format!("user{}@example.com", rng.next_u64() % 1000)),
                        ),
                    ],
                    ..Default::default()
                });
            }
            exports.push(ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![
                            kv("service.name", text("vllm")),
                            kv("k8s.pod.name", text(format!("worker-{w:02}"))),
                            kv("gen_ai.system", text("vllm")),
                        ],
                        ..Default::default()
                    }),
                    scope_spans: vec![ScopeSpans {
                        spans,
                        ..Default::default()
                    }],
                    schema_url: String::new(),
                }],
            });
        }
    }
    exports
}

fn ts_literal(ns: i64) -> String {
    format!("'{}'", infersight_model::time::format_rfc3339(ns))
}

pub async fn run(mut config: Config, out: Option<PathBuf>, seed: u64) -> Result<i32, CliError> {
    let started = std::time::Instant::now();
    let out_dir = out.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("infersight-demo-{}", std::process::id()))
    });
    let data = out_dir.join("data");
    if data.exists() {
        std::fs::remove_dir_all(&data)
            .map_err(|e| CliError::failed(format!("{}: {e}", data.display())))?;
    }
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| CliError::failed(format!("{}: {e}", out_dir.display())))?;
    config.store.data_dir = data.clone();
    eprintln!(
        "infersight demo: {WORKERS} workers, {} min of traffic at {RATE_PER_S} req/s, regression injected at minute {BASELINE_MIN}",
        BASELINE_MIN + INCIDENT_MIN
    );

    let store = tokio::task::block_in_place(|| wiring::open_store(&config))?;
    let counters = Arc::new(Counters::new());
    let transform = wiring::build_transform(&config, counters.clone())?;
    let settings = ServeSettings {
        listen: [127, 0, 0, 1].into(),
        otlp_grpc_port: 0,
        otlp_http_port: 0,
        api_port: 0,
        max_body_bytes: config.server.max_body_bytes,
        queue_capacity: config.server.queue_capacity,
        max_query_rows: config.query.max_rows,
        max_dimension_cardinality: config.query.max_dimension_cardinality,
    };
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(infersight_server::serve(
        settings,
        store.clone() as Arc<dyn StorageBackend>,
        transform,
        wiring::mapper(&config),
        counters,
        move |addrs| {
            let _ = addr_tx.send(addrs);
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    let addrs = addr_rx
        .await
        .map_err(|_| CliError::failed("demo server did not start"))?;

    let exports = tokio::task::spawn_blocking(move || generate(seed))
        .await
        .map_err(|e| CliError::failed(e.to_string()))?;
    let url = format!("http://{}/v1/traces", addrs.otlp_http);
    let bar = indicatif::ProgressBar::new(exports.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("sending over OTLP/HTTP {wide_bar} {pos}/{len}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let sent = tokio::task::spawn_blocking(move || -> Result<u64, CliError> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut spans = 0u64;
        for export in &exports {
            let body = export.encode_to_vec();
            loop {
                let response = agent
                    .post(&url)
                    .header("content-type", "application/x-protobuf")
                    .send(&body[..])
                    .map_err(|e| CliError::failed(format!("sending to {url}: {e}")))?;
                match response.status().as_u16() {
                    200 => break,
                    429 | 503 => std::thread::sleep(std::time::Duration::from_millis(20)),
                    other => return Err(CliError::failed(format!("{url} answered {other}"))),
                }
            }
            spans += export
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len() as u64)
                .sum::<u64>();
            bar.inc(1);
        }
        bar.finish_and_clear();
        Ok(spans)
    })
    .await
    .map_err(|e| CliError::failed(e.to_string()))??;
    let _ = stop_tx.send(());
    server
        .await
        .map_err(|e| CliError::failed(e.to_string()))?
        .map_err(|e| CliError::failed(e.to_string()))?;
    drop(store);

    // Reopen the flushed store and ask it questions, as a user would after an incident.
    let store = tokio::task::block_in_place(|| wiring::open_store(&config))?;
    let engine = QueryEngine::new(store.clone() as Arc<dyn StorageBackend>);
    let incident_start = START_NS + BASELINE_MIN * 60_000_000_000;
    let window = |alias: &str| {
        format!(
            "CASE WHEN ts >= {} THEN '2 incident' ELSE '1 baseline' END AS {alias}",
            ts_literal(incident_start)
        )
    };
    let breakdown_sql = format!(
        "SELECT {}, count(*) AS requests, \
         round(avg(queue_ms), 1) AS queue_ms_avg, round(avg(prefill_ms), 1) AS prefill_ms_avg, \
         round(avg(ttft_ms), 1) AS ttft_ms_avg, round(avg(decode_ms), 1) AS decode_ms_avg, \
         round(approx_percentile_cont(e2e_ms, 0.5), 0) AS e2e_ms_p50, round(approx_percentile_cont(e2e_ms, 0.99), 0) AS e2e_ms_p99 \
         FROM requests GROUP BY 1 ORDER BY 1",
        window("window")
    );
    let threshold_sql = format!(
        "SELECT approx_percentile_cont(e2e_ms, 0.99) FROM requests WHERE ts < {}",
        ts_literal(incident_start)
    );
    let q = |sql: String| {
        let engine = &engine;
        async move {
            engine
                .sql(&sql)
                .await
                .map_err(|e| CliError::failed(format!("{e}: {sql}")))
        }
    };
    let breakdown = q(breakdown_sql).await?;
    let threshold = q(threshold_sql).await?;
    let threshold_ms = threshold
        .to_json_value()
        .map_err(|e| CliError::failed(e.to_string()))?
        .get("rows")
        .and_then(|r| r.get(0))
        .and_then(|row| {
            row.as_object()
                .and_then(|o| o.values().next().cloned())
                .or_else(|| row.get(0).cloned())
        })
        .and_then(|v| v.as_f64())
        .unwrap_or(1_000.0);
    let movers_sql = format!(
        "SELECT model_version, kv_cache_policy, lora_adapters, \
         sum(CASE WHEN ts < {inc} AND e2e_ms > {thr} THEN 1 ELSE 0 END) AS slow_before, \
         sum(CASE WHEN ts >= {inc} AND e2e_ms > {thr} THEN 1 ELSE 0 END) AS slow_during, \
         round(avg(CASE WHEN ts < {inc} THEN e2e_ms END), 0) AS e2e_ms_avg_before, \
         round(avg(CASE WHEN ts >= {inc} THEN e2e_ms END), 0) AS e2e_ms_avg_during \
         FROM requests GROUP BY 1, 2, 3 ORDER BY slow_during - slow_before * {ratio} DESC LIMIT 5",
        inc = ts_literal(incident_start),
        thr = threshold_ms,
        ratio = INCIDENT_MIN as f64 / BASELINE_MIN as f64,
    );
    let movers = q(movers_sql).await?;
    let redacted =
        q("SELECT count(*) AS with_email FROM requests WHERE attrs LIKE '%@example.com%'".into())
            .await?;
    let table = infersight_query::OutputFormat::Table;

    let mut report = String::new();
    let _ = writeln!(report, "# infersight demo report\n");
    let _ = writeln!(
        report,
        "{sent} request spans from {WORKERS} workers ingested over OTLP/HTTP into {}.\n",
        data.display()
    );
    let _ = writeln!(
        report,
        "## Latency breakdown, baseline vs incident\n\n```\n{}\n```\n",
        breakdown.render(table).trim_end()
    );
    let _ = writeln!(
        report,
        "## Slices with the most requests over the baseline p99 ({threshold_ms:.0} ms), normalized for window length\n\n```\n{}\n```\n",
        movers.render(table).trim_end()
    );
    let _ = writeln!(
        report,
        "Injected: TPOT +9 ms on model_version=r2 × kv_cache_policy=paged × lora_adapters={INCIDENT_LORA} from minute {BASELINE_MIN}."
    );
    let _ = writeln!(
        report,
        "Requests whose stored attributes still contain an e-mail address (must be 0, redaction): \n\n```\n{}\n```",
        redacted.render(table).trim_end()
    );
    println!("{report}");
    let report_path = out_dir.join("report.md");
    std::fs::write(&report_path, &report)
        .map_err(|e| CliError::failed(format!("{}: {e}", report_path.display())))?;
    eprintln!(
        "infersight demo: finished in {:.1} s; report: {}; store: {} (try: infersight query --data {} \"SELECT worker, count(*) FROM requests GROUP BY worker\")",
        started.elapsed().as_secs_f64(),
        report_path.display(),
        data.display(),
        data.display()
    );
    Ok(0)
}
