//! Benchmark data generators (hidden `infersight bench-gen`): synthetic OTLP JSON Lines with
//! request spans for the ingest benchmark, and synthetic `requests` rows written straight into a
//! store for the query benchmark. Deterministic (seeded) so runs are comparable.

use std::io::{BufWriter, Write};
use std::path::Path;

use infersight_model::RequestRecord;
use infersight_model::tables::RequestBatchBuilder;
use infersight_model::{Table, TableBatch};
use infersight_store::{StorageBackend, StoreError};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use crate::exit::CliError;
use crate::rng::Rng;

const MODELS: [&str; 4] = ["llama-3-8b", "llama-3-70b", "qwen2.5-7b", "mistral-7b"];
const BASE_TS_NS: i64 = 1_764_400_000_000_000_000;

fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// Writes `spans` request spans as OTLP JSON Lines, `spans_per_line` per ExportTraceServiceRequest.
pub fn otlp_jsonl(out: &Path, spans: u64, spans_per_line: u64, seed: u64) -> Result<(), CliError> {
    let file = std::fs::File::create(out)
        .map_err(|e| CliError::failed(format!("{}: {e}", out.display())))?;
    let mut writer = BufWriter::new(file);
    let mut rng = Rng::new(seed);
    let mut written = 0u64;
    while written < spans {
        let n = spans_per_line.min(spans - written);
        let request = request_export(&mut rng, written, n);
        serde_json::to_writer(&mut writer, &request)
            .map_err(|e| CliError::failed(e.to_string()))?;
        writer
            .write_all(b"\n")
            .map_err(|e| CliError::failed(e.to_string()))?;
        written += n;
    }
    writer
        .flush()
        .map_err(|e| CliError::failed(e.to_string()))?;
    Ok(())
}

/// One export of `n` synthetic request spans (ids `first..first + n`, one per millisecond from
/// a fixed start): one span per request with the GenAI and vLLM latency attributes, on one
/// worker's resource. The ingest benchmark's spans (`otlp_jsonl`) and the load generator's
/// `--spans synthetic`.
pub fn request_export(rng: &mut Rng, first: u64, n: u64) -> ExportTraceServiceRequest {
    let mut list = Vec::with_capacity(n as usize);
    for i in 0..n {
        let id = first + i;
        let start = BASE_TS_NS + (id as i64) * 1_000_000;
        let e2e = 0.2 + rng.unit() * 3.0;
        let mut trace_id = [0u8; 16];
        trace_id[..8].copy_from_slice(&(id + 1).to_be_bytes());
        trace_id[8..].copy_from_slice(&rng.next_u64().to_be_bytes());
        list.push(Span {
            trace_id: trace_id.to_vec(),
            span_id: (rng.next_u64() | 1).to_be_bytes().to_vec(),
            name: "llm_request".into(),
            kind: 2,
            start_time_unix_nano: start as u64,
            end_time_unix_nano: (start + (e2e * 1e9) as i64) as u64,
            attributes: vec![
                kv(
                    "gen_ai.request.model",
                    Value::StringValue(MODELS[rng.below(4) as usize].into()),
                ),
                kv(
                    "gen_ai.usage.input_tokens",
                    Value::IntValue(rng.below(4000) as i64 + 16),
                ),
                kv(
                    "gen_ai.usage.output_tokens",
                    Value::IntValue(rng.below(800) as i64 + 1),
                ),
                kv(
                    "gen_ai.latency.time_in_queue",
                    Value::DoubleValue(rng.unit() * 0.1),
                ),
                kv(
                    "gen_ai.latency.time_to_first_token",
                    Value::DoubleValue(0.05 + rng.unit() * 0.3),
                ),
                kv("gen_ai.latency.e2e", Value::DoubleValue(e2e)),
                kv("gen_ai.request.id", Value::StringValue(format!("req-{id}"))),
                kv(
                    "tenant",
                    Value::StringValue(format!("tenant-{}", rng.below(8))),
                ),
            ],
            ..Default::default()
        });
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", Value::StringValue("vllm".into())),
                    kv(
                        "k8s.pod.name",
                        Value::StringValue(format!("worker-{}", rng.below(16))),
                    ),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: list,
                ..Default::default()
            }],
            schema_url: String::new(),
        }],
    }
}

/// Appends `rows` synthetic request rows spread over `hours` hours, then flushes to segments.
pub fn requests(
    store: &dyn StorageBackend,
    rows: u64,
    hours: u64,
    seed: u64,
    flush_every: u64,
) -> Result<(), CliError> {
    let mut rng = Rng::new(seed);
    let mut unflushed = 0u64;
    let span_ns = (hours.max(1) as i64) * 3_600_000_000_000;
    let step = span_ns / rows.max(1) as i64;
    let mut builder = RequestBatchBuilder::new();
    let mut record = RequestRecord::default();
    for i in 0..rows {
        record.ts = BASE_TS_NS + i as i64 * step;
        record.model = Some(MODELS[rng.below(4) as usize].to_string());
        record.worker = Some(format!("worker-{}", rng.below(16)));
        record.tenant = Some(format!("tenant-{}", rng.below(8)));
        record.model_version = Some(format!("r{}", rng.below(3)));
        record.input_tokens = Some(rng.below(4000) as i64);
        record.output_tokens = Some(rng.below(800) as i64);
        // log-normal-ish latency so quantiles are not trivial
        let e2e = (6.0 + rng.unit() * 1.5 + rng.unit() * rng.unit() * 2.0).exp();
        record.e2e_ms = Some(e2e);
        record.ttft_ms = Some(e2e * 0.1);
        builder.push(&record);
        if builder.len() == 65_536 || i + 1 == rows {
            let batches = [TableBatch {
                table: Table::Requests,
                batch: builder.finish(),
            }];
            append_draining(store, &batches)?;
            unflushed += 65_536;
            if flush_every > 0 && unflushed >= flush_every {
                store.flush().map_err(|e| CliError::failed(e.to_string()))?;
                unflushed = 0;
            }
        }
    }
    store.flush().map_err(|e| CliError::failed(e.to_string()))?;
    Ok(())
}

/// Appends, and when the memtable is over its hard limit (the generator appends faster than
/// background flushes drain it) flushes here and tries once more: the generator is the only
/// writer, so a flush always makes room.
fn append_draining(store: &dyn StorageBackend, batches: &[TableBatch]) -> Result<(), CliError> {
    match store.append(batches) {
        Err(StoreError::Overloaded { .. }) => {
            store.flush().map_err(|e| CliError::failed(e.to_string()))?;
            store.append(batches)
        }
        other => other,
    }
    .map(drop)
    .map_err(|e| CliError::failed(e.to_string()))
}

/// Median wall time of `runs` repetitions of `f`, in milliseconds, and its last result.
fn median_ms<T>(
    runs: usize,
    mut f: impl FnMut() -> Result<T, CliError>,
) -> Result<(f64, T), CliError> {
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs.max(1) {
        let start = std::time::Instant::now();
        last = Some(f()?);
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let value = last.ok_or_else(|| CliError::failed("no run"))?;
    Ok((times[times.len() / 2], value))
}

/// p99 of ttft and e2e grouped by (model, worker) over the whole store: from rollups (cold: the
/// store is reopened so sidecars are read from disk once; then warm) vs DataFusion's exact
/// `percentile_cont` and approximate `approx_percentile_cont` scans. Prints JSON.
pub fn sli_compare(
    store: std::sync::Arc<infersight_store::Store>,
    runs: usize,
) -> Result<serde_json::Value, CliError> {
    use infersight_explore::{SliRequest, answer_sli};
    use infersight_query::QueryEngine;
    use infersight_store::TimeRange;
    let fail = |e: infersight_query::QueryError| CliError::failed(e.to_string());
    let by = vec!["model".to_string(), "worker".to_string()];
    let request = |sli: &str| SliRequest {
        sli: sli.into(),
        quantiles: vec![0.99],
        by: by.clone(),
        range: TimeRange::ALL,
        ..SliRequest::default()
    };
    let (rollup_ms, groups) = median_ms(runs, || {
        let ttft = answer_sli(store.as_ref(), &request("ttft")).map_err(fail)?;
        let e2e = answer_sli(store.as_ref(), &request("e2e")).map_err(fail)?;
        Ok(ttft.series.len() + e2e.series.len())
    })?;
    let engine = QueryEngine::new(store.clone() as std::sync::Arc<dyn StorageBackend>);
    // called on a blocking thread of the CLI's runtime
    let runtime = tokio::runtime::Handle::current();
    let rows = runtime
        .block_on(engine.sql("SELECT count(*) AS n FROM requests"))
        .map_err(fail)?
        .to_json_value()
        .map_err(fail)?;
    let scan = |sql: &str| {
        median_ms(runs, || {
            let out = runtime.block_on(engine.sql(sql)).map_err(fail)?;
            Ok(out.batches.iter().map(|b| b.num_rows()).sum::<usize>())
        })
    };
    let (exact_ms, exact_groups) = scan(
        "SELECT model, worker, percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_ms), \
         percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms) FROM requests GROUP BY model, worker",
    )?;
    let (approx_ms, _) = scan(
        "SELECT model, worker, approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY ttft_ms), \
         approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY e2e_ms) FROM requests GROUP BY model, worker",
    )?;
    Ok(serde_json::json!({
        "rows": rows,
        "groups_rollup": groups / 2,
        "groups_scan": exact_groups,
        "rollup_ms": rollup_ms,
        "exact_scan_ms": exact_ms,
        "approx_scan_ms": approx_ms,
        "rollup_vs_exact": rollup_ms / exact_ms,
        "rollup_vs_approx": rollup_ms / approx_ms,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use infersight_store::{
        AppendReceipt, FlushReport, ScanSnapshot, StorageBackend, StoreError, StoreStats, TimeRange,
    };
    use infersight_testkit::store::TestStore;

    use super::*;

    /// A store whose memtable refuses appends over `limit` rows until a flush, as the real
    /// store does over its hard limit when background flushes fall behind.
    struct Bounded {
        inner: Arc<TestStore>,
        unflushed: AtomicU64,
        limit: u64,
        refused: AtomicU64,
    }

    impl StorageBackend for Bounded {
        fn append(&self, batches: &[TableBatch]) -> Result<AppendReceipt, StoreError> {
            let rows: u64 = batches.iter().map(|b| b.batch.num_rows() as u64).sum();
            let held = self.unflushed.load(Ordering::SeqCst);
            if held + rows > self.limit {
                self.refused.fetch_add(1, Ordering::SeqCst);
                return Err(StoreError::Overloaded {
                    bytes: held,
                    limit: self.limit,
                });
            }
            self.unflushed.fetch_add(rows, Ordering::SeqCst);
            self.inner.append(batches)
        }
        fn snapshot(&self, table: Table, range: TimeRange) -> Result<ScanSnapshot, StoreError> {
            self.inner.snapshot(table, range)
        }
        fn flush(&self) -> Result<FlushReport, StoreError> {
            self.unflushed.store(0, Ordering::SeqCst);
            self.inner.flush()
        }
        fn stats(&self) -> StoreStats {
            self.inner.stats()
        }
        fn close(&self) -> Result<(), StoreError> {
            self.inner.close()
        }
    }

    #[test]
    fn requests_flush_when_the_memtable_is_full_and_keep_every_row_once() {
        let store = Bounded {
            inner: TestStore::new(),
            unflushed: AtomicU64::new(0),
            limit: 3 * 65_536,
            refused: AtomicU64::new(0),
        };
        let rows = 10 * 65_536 + 17;
        requests(&store, rows, 2, 7, 0).unwrap();
        assert!(
            store.refused.load(Ordering::SeqCst) > 0,
            "the bound was reached"
        );
        let snapshot = store.snapshot(Table::Requests, TimeRange::ALL).unwrap();
        assert!(snapshot.memtable.is_empty());
        let stored: u64 = snapshot.segments.iter().map(|s| s.rows).sum();
        assert_eq!(stored, rows);
    }
}
