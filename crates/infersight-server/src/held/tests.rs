//! A `serve` killed while it holds request rows, restarted on the same store: every request is
//! one row, with what each of its spans knew, and none is written twice (issue 19 class 1); a
//! span of a stored request arriving after the restart makes no second row.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use infersight_model::RequestRecord;
use infersight_model::mapping::AttributeMapper;
use infersight_model::telemetry::Counters;
use infersight_pipeline::{BatchWriter, Pipeline};
use infersight_query::QueryEngine;
use infersight_store::{FsyncPolicy, StorageBackend, Store, StoreOptions};
use serde_json::{Value, json};

use crate::serve::{BoundAddrs, ServeExtras, ServeSettings, serve_with};

const T0_MS: u64 = 1_700_000_000_000;

fn settings() -> ServeSettings {
    ServeSettings {
        listen: IpAddr::V4(Ipv4Addr::LOCALHOST),
        otlp_grpc_port: 0,
        otlp_http_port: 0,
        api_port: 0,
        max_body_bytes: 1 << 22,
        queue_capacity: 64,
        decode_threads: 0,
        max_query_rows: 100_000,
        max_dimension_cardinality: 1_000,
        query_limits: infersight_query::QueryLimits::default(),
        role: crate::role::Role::All,
    }
}

fn open(dir: &Path) -> Arc<Store> {
    let mut options = StoreOptions::new(dir);
    options.fsync = FsyncPolicy::Never;
    Arc::new(Store::open(options).unwrap())
}

/// One running `serve` on its own runtime: dropping the runtime is the kill.
struct Run {
    runtime: tokio::runtime::Runtime,
    addrs: BoundAddrs,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

fn start(store: Arc<Store>, mark: &Path) -> Run {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let counters = Arc::new(Counters::new());
    let writer = BatchWriter::new(Pipeline::new(Vec::new()), store.clone(), counters.clone());
    let extras = ServeExtras {
        held_requests_mark: Some(mark.to_path_buf()),
        ..ServeExtras::default()
    };
    let backend: Arc<dyn StorageBackend> = store;
    let done = runtime.spawn(async move {
        serve_with(
            settings(),
            extras,
            backend,
            writer,
            Arc::new(AttributeMapper::default()),
            counters,
            move |addrs| bound_tx.send(addrs).unwrap(),
            async move {
                let _ = stopped.await;
            },
        )
        .await
        .unwrap();
    });
    let addrs = bound_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    Run {
        runtime,
        addrs,
        stop: Some(stop),
        done: Some(done),
    }
}

impl Run {
    fn post(&self, export: &Value) {
        let url = format!(
            "http://{}/v1/traces",
            self.addrs.otlp_http.expect("role all receives")
        );
        let status = ureq::post(&url)
            .header("content-type", "application/json")
            .send(export.to_string())
            .unwrap()
            .status();
        assert_eq!(status, 200);
    }

    fn shut_down(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let done = self.done.take().unwrap();
        self.runtime.block_on(done).unwrap();
    }

    /// Every task stops where it is: rows held in memory are gone, stored spans stay (the store
    /// itself is not closed: the next run appends to it as it is).
    fn kill(self) {
        self.runtime.shutdown_timeout(Duration::from_secs(5));
    }
}

fn hex(prefix: u8, n: u8, len: usize) -> String {
    let mut id = vec![prefix; len];
    id[len - 1] = n;
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// One service's export of one span of request `n` (`depth` 0 = a client, 1 = the gateway, 2 =
/// the engine), its parent the span one level up.
fn export(service: &str, n: u8, depth: u8) -> Value {
    let request_id = format!("chatcmpl-{n}");
    let attrs: Vec<(&str, Value)> = match depth {
        1 => vec![
            ("gen_ai.request.model", json!("llama-3-8b")),
            ("gen_ai.response.id", json!(request_id)),
            ("tenant.id", json!("tenant-a")),
            ("http.route", json!("/v1/chat/completions")),
        ],
        _ => vec![
            ("gen_ai.request.model", json!("llama-3-8b")),
            ("gen_ai.request.id", json!(request_id)),
            ("gen_ai.latency.time_in_queue", json!({"doubleValue": 0.05})),
            (
                "gen_ai.latency.time_to_first_token",
                json!({"doubleValue": 0.2}),
            ),
            ("gen_ai.latency.e2e", json!({"doubleValue": 1.0})),
        ],
    };
    let attributes: Vec<Value> = attrs
        .into_iter()
        .map(|(key, value)| match value {
            Value::String(text) => json!({"key": key, "value": {"stringValue": text}}),
            other => json!({"key": key, "value": other}),
        })
        .collect();
    let start_ms = T0_MS + u64::from(n) * 10_000 + u64::from(depth) * 2;
    let mut span = json!({
        "traceId": hex(0x42, n, 16),
        "spanId": hex(depth + 1, n, 8),
        "name": format!("{service} span"),
        "startTimeUnixNano": (start_ms * 1_000_000).to_string(),
        "endTimeUnixNano": ((start_ms + 1_000) * 1_000_000).to_string(),
        "attributes": attributes,
    });
    if depth > 0 {
        span["parentSpanId"] = json!(hex(depth, n, 8));
    }
    json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{"spans": [span]}]
    }]})
}

/// The stored `requests` rows, read through a fresh open of the store.
fn stored_rows(dir: &Path) -> Vec<RequestRecord> {
    let store = open(dir);
    let engine = QueryEngine::new(store.clone());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let output = runtime
        .block_on(engine.sql("SELECT * FROM requests"))
        .unwrap();
    let rows = output
        .batches
        .iter()
        .flat_map(|batch| RequestRecord::from_batch(batch).unwrap())
        .collect();
    store.close().unwrap();
    rows
}

#[test]
fn rows_held_at_a_kill_are_rebuilt_once_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mark = dir.path().join(super::MARK_FILE);

    let store = open(&data);
    let run = start(store.clone(), &mark);
    assert!(mark.exists(), "a running serve sets its mark");
    // request 1: engine, then gateway; the client's root span never comes, so the row is held
    run.post(&export("vllm-engine", 1, 2));
    run.post(&export("llm-gateway", 1, 1));
    // request 2: the same, the gateway the trace's root: complete, stored at once
    let mut whole = export("llm-gateway", 2, 1);
    whole["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        .as_object_mut()
        .unwrap()
        .remove("parentSpanId");
    run.post(&whole);
    run.post(&export("vllm-engine", 2, 2));
    // request 3: an engine span alone, its parent never comes
    run.post(&export("vllm-engine", 3, 2));
    run.kill();
    assert!(mark.exists(), "a killed serve leaves its mark");

    let check = |rows: &[RequestRecord]| {
        for n in [1u8, 2, 3] {
            let trace = hex(0x42, n, 16);
            let of: Vec<_> = rows
                .iter()
                .filter(|r| r.trace_id.as_deref() == Some(&trace))
                .collect();
            assert_eq!(of.len(), 1, "request {n}: {of:?}");
            let row = of[0];
            assert_eq!(row.span_id.as_deref(), Some(hex(3, n, 8).as_str()));
            assert!(row.ttft_ms.is_some(), "request {n}: the engine's timings");
            let tenant = (n != 3).then_some("tenant-a");
            assert_eq!(
                row.tenant.as_deref(),
                tenant,
                "request {n}: the gateway's tenant"
            );
        }
    };
    start(store.clone(), &mark).shut_down();
    drop(store);
    assert!(!mark.exists(), "a clean shutdown clears the mark");
    let rows = stored_rows(&data);
    assert_eq!(rows.len(), 3, "{rows:?}");
    check(&rows);

    // a crash during the rebuild only repeats it: nothing is written twice
    std::fs::write(&mark, b"").unwrap();
    let store = open(&data);
    start(store.clone(), &mark).shut_down();
    drop(store);
    let rows = stored_rows(&data);
    assert_eq!(rows.len(), 3, "{rows:?}");
    check(&rows);
}

/// A span of a request whose row a restart found stored or rebuilt, arriving after the restart
/// (a gateway's, exported late): by its request id, or without one by its trace, it is known as
/// that request's and makes no second row; the stored row stays the request's one row.
#[test]
fn a_span_arriving_after_a_restart_is_no_second_row_of_its_stored_request() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mark = dir.path().join(super::MARK_FILE);
    let store = open(&data);
    let run = start(store.clone(), &mark);
    // requests 3 and 4: engine spans whose parents have not come, held at the kill
    run.post(&export("vllm-engine", 3, 2));
    run.post(&export("vllm-engine", 4, 2));
    // request 5: an engine span that is its trace's root, stored at once
    let mut root = export("vllm-engine", 5, 2);
    root["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        .as_object_mut()
        .unwrap()
        .remove("parentSpanId");
    run.post(&root);
    run.kill();

    let run = start(store.clone(), &mark);
    // the gateways' spans come late: 3's and 5's name the request, 4's only shares the trace
    run.post(&export("llm-gateway", 3, 1));
    let mut anonymous = export("llm-gateway", 4, 1);
    anonymous["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
        .as_array_mut()
        .unwrap()
        .retain(|a| a["key"] != "gen_ai.response.id");
    run.post(&anonymous);
    run.post(&export("llm-gateway", 5, 1));
    run.shut_down();
    drop(store);

    let rows = stored_rows(&data);
    for n in [3u8, 4, 5] {
        let trace = hex(0x42, n, 16);
        let of: Vec<_> = rows
            .iter()
            .filter(|r| r.trace_id.as_deref() == Some(&trace))
            .collect();
        assert_eq!(of.len(), 1, "request {n}: {of:?}");
        assert_eq!(of[0].span_id.as_deref(), Some(hex(3, n, 8).as_str()));
        assert!(of[0].ttft_ms.is_some(), "request {n}: the engine's row");
    }
    assert_eq!(rows.len(), 3, "{rows:?}");
}
