//! One inference request is one `requests` row, whatever the span layout: a gateway (or client
//! SDK, or router) span with GenAI attributes above the engine's span merges into the engine's
//! row, in one export or split across exports (and files) in any order; every span stays in
//! `spans`. Request ids join spans of one request across traces (a lost trace context) but not
//! requests of other times or models that reuse an id.

use infersight_ingest::{
    Converted, FileFormat, FileOptions, FileStream, SpanTreeCache, read_file_of_stream,
    traces_to_batches, traces_to_batches_with,
};
use infersight_model::mapping::AttributeMapper;
use infersight_model::org::DEFAULT_ORG;
use infersight_model::rng::SplitMix64;
use infersight_model::{RequestRecord, SpanRecord, Table, TableBatch};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, status};

use crate::{d, i, json, kv, s};

const T0: u64 = 1_700_000_000_000_000_000;
const MS: u64 = 1_000_000;

/// The services of a traced request, each exporting its own spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Service {
    Client,
    Gateway,
    Router,
    Engine,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::Client => "chat-app",
            Service::Gateway => "llm-gateway",
            Service::Router => "llm-router",
            Service::Engine => "vllm-engine",
        }
    }
}

/// The span layouts one request may have, outermost first.
const LAYOUTS: [&[Service]; 5] = [
    &[Service::Engine],
    &[Service::Gateway, Service::Engine],
    &[Service::Gateway, Service::Router, Service::Engine],
    &[Service::Client, Service::Gateway, Service::Engine],
    &[
        Service::Client,
        Service::Gateway,
        Service::Router,
        Service::Engine,
    ],
];

fn trace_id(request: u32) -> Vec<u8> {
    let mut id = vec![0x42; 16];
    id[12..].copy_from_slice(&request.to_be_bytes());
    id
}

fn span_id(request: u32, depth: usize) -> Vec<u8> {
    let mut id = vec![0x5a; 8];
    id[0] = depth as u8 + 1;
    id[4..].copy_from_slice(&request.to_be_bytes());
    id
}

/// The span of `service` at `depth` (0 = the root) of request `n`, which starts at `start_ms`;
/// spans nest: each starts 2 ms after and ends 2 ms before its parent.
fn span_of(n: u32, depth: usize, service: Service, start_ms: u64, error: bool) -> Span {
    let model = if n.is_multiple_of(2) {
        "llama-3-8b"
    } else {
        "qwen2.5-7b"
    };
    let response_id = format!("chatcmpl-{n:08x}");
    let attributes: Vec<KeyValue> = match service {
        Service::Client => vec![
            kv("gen_ai.operation.name", s("chat")),
            kv("gen_ai.request.model", s(model)),
            kv("gen_ai.response.id", s(&response_id)),
            kv("server.address", s("llm.internal")),
        ],
        Service::Gateway => vec![
            kv("gen_ai.request.model", s(model)),
            kv("gen_ai.response.id", s(&response_id)),
            kv("tenant.id", s(&format!("tenant-{}", n % 3))),
            kv("http.route", s("/v1/chat/completions")),
            kv("client.address", s("10.1.2.3")),
            kv("gen_ai.usage.input_tokens", i(200)),
            kv("gen_ai.usage.output_tokens", i(50)),
        ],
        Service::Router => vec![kv("router.pool", s("a100-pool"))],
        Service::Engine => vec![
            kv("gen_ai.request.model", s(model)),
            kv("gen_ai.response.model", s(model)),
            kv("gen_ai.request.id", s(&response_id)),
            kv("gen_ai.usage.prompt_tokens", i(200)),
            kv("gen_ai.usage.completion_tokens", i(50)),
            kv("gen_ai.latency.time_in_queue", d(0.05)),
            kv("gen_ai.latency.time_to_first_token", d(0.2)),
            kv("gen_ai.latency.e2e", d(1.0)),
        ],
    };
    let inset = depth as u64 * 2;
    Span {
        trace_id: trace_id(n),
        span_id: span_id(n, depth),
        parent_span_id: if depth == 0 {
            Vec::new()
        } else {
            span_id(n, depth - 1)
        },
        name: format!("{} span", service.name()),
        start_time_unix_nano: T0 + (start_ms + inset) * MS,
        end_time_unix_nano: T0 + (start_ms + 1_100 - inset) * MS,
        attributes,
        status: (error && service == Service::Gateway).then(|| Status {
            code: status::StatusCode::Error as i32,
            message: "upstream timed out".into(),
        }),
        ..Default::default()
    }
}

/// The spans of request `n` in `layout`, each with its service.
fn request_spans(n: u32, layout: &[Service], error: bool) -> Vec<(Service, Span)> {
    let start_ms = u64::from(n) * 10;
    layout
        .iter()
        .enumerate()
        .map(|(depth, &service)| (service, span_of(n, depth, service, start_ms, error)))
        .collect()
}

/// One export holding `spans`, one resource per service.
fn export(spans: Vec<(Service, Span)>) -> ExportTraceServiceRequest {
    let mut resource_spans: Vec<ResourceSpans> = Vec::new();
    for (service, span) in spans {
        let name = service.name();
        let position = resource_spans.iter().position(|r| {
            r.resource
                .as_ref()
                .is_some_and(|res| res.attributes[0].value == kv("service.name", s(name)).value)
        });
        let at = position.unwrap_or_else(|| {
            resource_spans.push(ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", s(name))],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans::default()],
                ..Default::default()
            });
            resource_spans.len() - 1
        });
        resource_spans[at].scope_spans[0].spans.push(span);
    }
    ExportTraceServiceRequest { resource_spans }
}

fn rows_of(batches: &[TableBatch], table: Table) -> usize {
    batches
        .iter()
        .filter(|b| b.table == table)
        .map(|b| b.batch.num_rows())
        .sum()
}

fn requests_of(converted: &Converted) -> Vec<RequestRecord> {
    converted
        .batches
        .iter()
        .filter(|b| b.table == Table::Requests)
        .flat_map(|b| RequestRecord::from_batch(&b.batch).unwrap())
        .collect()
}

/// Converts the exports in order through one memory, then drains it: every row, and the spans.
fn convert_in_order(
    exports: &[ExportTraceServiceRequest],
    cache: &SpanTreeCache,
) -> (Vec<RequestRecord>, usize) {
    let mapper = AttributeMapper::default();
    let mut rows = Vec::new();
    let mut spans = 0;
    for export in exports {
        let converted = traces_to_batches_with(export, &mapper, Some(cache)).unwrap();
        spans += rows_of(&converted.batches, Table::Spans);
        rows.extend(requests_of(&converted));
    }
    rows.extend(cache.drain_requests());
    rows.sort_by(|a, b| (a.ts, &a.span_id).cmp(&(b.ts, &b.span_id)));
    (rows, spans)
}

/// What every merged row of request `n` in `layout` must say.
fn assert_one_request(row: &RequestRecord, n: u32, layout: &[Service], error: bool) {
    let engine_depth = layout.len() - 1;
    assert_eq!(
        row.span_id.as_deref(),
        Some(hex(&span_id(n, engine_depth)).as_str()),
        "the engine's span is the row"
    );
    assert_eq!(row.service.as_deref(), Some("vllm-engine"), "{layout:?}");
    assert_eq!(row.queue_ms, Some(50.0), "the engine's timings");
    assert_eq!(row.ttft_ms, Some(200.0));
    assert_eq!(row.e2e_ms, Some(1_000.0));
    assert_eq!(row.input_tokens, Some(200));
    let has_gateway = layout.contains(&Service::Gateway);
    let tenant = format!("tenant-{}", n % 3);
    assert_eq!(
        row.tenant.as_deref(),
        has_gateway.then_some(tenant.as_str()),
        "the gateway's tenant"
    );
    let attrs = json(&row.attrs);
    if has_gateway {
        assert_eq!(attrs["http.route"], "/v1/chat/completions", "{}", row.attrs);
        assert_eq!(attrs["client.address"], "10.1.2.3");
    }
    let expected_status = if error && has_gateway {
        "error"
    } else {
        "unset"
    };
    assert_eq!(
        row.status.as_deref(),
        Some(expected_status),
        "the gateway's status"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_layout_in_one_export_is_one_row_per_request() {
    let mapper = AttributeMapper::default();
    for (index, layout) in LAYOUTS.iter().enumerate() {
        for error in [false, true] {
            let n = index as u32;
            let mut spans = request_spans(n, layout, error);
            for reversed in [false, true] {
                if reversed {
                    spans.reverse();
                }
                let converted = traces_to_batches(&export(spans.clone()), &mapper).unwrap();
                assert_eq!(
                    rows_of(&converted.batches, Table::Spans),
                    layout.len(),
                    "every span stays in spans"
                );
                let rows = requests_of(&converted);
                assert_eq!(rows.len(), 1, "{layout:?}, reversed: {reversed}");
                assert_one_request(&rows[0], n, layout, error);
            }
        }
    }
}

#[test]
fn spans_of_each_service_in_their_own_exports_merge_in_any_order() {
    for (index, layout) in LAYOUTS.iter().enumerate() {
        let n = 100 + index as u32;
        let per_service: Vec<ExportTraceServiceRequest> = request_spans(n, layout, true)
            .into_iter()
            .map(|span| export(vec![span]))
            .collect();
        // every order of the services' exports
        let mut orders: Vec<Vec<usize>> = vec![vec![]];
        for _ in 0..per_service.len() {
            let mut longer = Vec::new();
            for order in &orders {
                for k in (0..per_service.len()).filter(|k| !order.contains(k)) {
                    let mut next = order.clone();
                    next.push(k);
                    longer.push(next);
                }
            }
            orders = longer;
        }
        for order in orders {
            let exports: Vec<_> = order.iter().map(|&k| per_service[k].clone()).collect();
            for cache in [SpanTreeCache::for_files(), SpanTreeCache::default()] {
                let (rows, spans) = convert_in_order(&exports, &cache);
                assert_eq!(spans, layout.len());
                assert_eq!(rows.len(), 1, "{layout:?} in order {order:?}");
                assert_one_request(&rows[0], n, layout, true);
            }
        }
    }
}

#[test]
fn a_receiver_releases_a_complete_request_at_once_and_a_gateway_alone_after_the_drain() {
    let mapper = AttributeMapper::default();
    let cache = SpanTreeCache::default();
    let layout = [Service::Gateway, Service::Engine];
    let spans = request_spans(7, &layout, false);
    // the gateway's export first: it knows no phases, so it waits for its engine
    let gateway =
        traces_to_batches_with(&export(vec![spans[0].clone()]), &mapper, Some(&cache)).unwrap();
    assert!(requests_of(&gateway).is_empty());
    let engine =
        traces_to_batches_with(&export(vec![spans[1].clone()]), &mapper, Some(&cache)).unwrap();
    let rows = requests_of(&engine);
    assert_eq!(
        rows.len(),
        1,
        "the chain reaches the root: released at once"
    );
    assert_one_request(&rows[0], 7, &layout, false);
    assert_eq!(cache.held_requests(), 0);

    // a gateway whose engine never reports is one row too, after the drain
    let lone = request_spans(8, &[Service::Gateway], false);
    let converted = traces_to_batches_with(&export(lone), &mapper, Some(&cache)).unwrap();
    assert!(requests_of(&converted).is_empty());
    let held = cache.drain_requests();
    assert_eq!(held.len(), 1);
    assert_eq!(
        held[0].e2e_ms,
        Some(1_100.0),
        "e2e falls back to the span duration"
    );
    assert_eq!(held[0].service.as_deref(), Some("llm-gateway"));
}

#[test]
fn a_lost_trace_context_is_joined_by_request_id_but_reused_ids_are_not() {
    let layout = [Service::Gateway, Service::Engine];
    let spans = request_spans(9, &layout, true);
    let (mut gateway, mut engine) = (spans[0].clone(), spans[1].clone());
    // the gateway's build dropped the context: the engine starts a trace of its own
    engine.1.trace_id = trace_id(90_009);
    engine.1.parent_span_id = Vec::new();
    for receiver in [false, true] {
        for exports in [
            vec![export(vec![gateway.clone()]), export(vec![engine.clone()])],
            vec![export(vec![engine.clone()]), export(vec![gateway.clone()])],
        ] {
            let cache = if receiver {
                SpanTreeCache::default()
            } else {
                SpanTreeCache::for_files()
            };
            let (rows, _) = convert_in_order(&exports, &cache);
            assert_eq!(rows.len(), 1, "one request, counted once");
            assert_eq!(rows[0].service.as_deref(), Some("vllm-engine"));
            assert_eq!(rows[0].queue_ms, Some(50.0));
        }
    }
    // an engine that numbers requests from 0 reuses ids: a minute later, or another model, is
    // another request
    let (rows, _) = convert_in_order(
        &[export(vec![gateway.clone(), engine.clone()])],
        &SpanTreeCache::for_files(),
    );
    assert_eq!(rows.len(), 1);
    gateway.1.start_time_unix_nano += 60_000 * MS;
    gateway.1.end_time_unix_nano += 60_000 * MS;
    let (rows, _) = convert_in_order(
        &[export(vec![gateway.clone(), engine.clone()])],
        &SpanTreeCache::for_files(),
    );
    assert_eq!(rows.len(), 2, "same id, a minute apart");
}

/// A seeded fleet of requests in every layout, each service's spans in its own exports of a few
/// spans, shuffled within a window as exporters' batches are: the `requests` table has exactly
/// one row per request, and `service` is the engine's on every row (no false dimension).
#[test]
fn a_shuffled_fleet_has_one_row_per_request() {
    const REQUESTS: u32 = 400;
    let mut rng = SplitMix64::new(19);
    let mut by_service: Vec<(Service, Span)> = Vec::new();
    for n in 0..REQUESTS {
        let layout = LAYOUTS[rng.below(LAYOUTS.len())];
        by_service.extend(request_spans(n, layout, rng.uniform() < 0.1));
    }
    // exporters batch by service; batches leave in an order the receiver cannot know
    let mut exports: Vec<ExportTraceServiceRequest> = Vec::new();
    for service in [
        Service::Engine,
        Service::Router,
        Service::Gateway,
        Service::Client,
    ] {
        let spans: Vec<_> = by_service
            .iter()
            .filter(|(s, _)| *s == service)
            .cloned()
            .collect();
        let mut start = 0;
        while start < spans.len() {
            let size = 1 + rng.below(16);
            let end = (start + size).min(spans.len());
            exports.push(export(spans[start..end].to_vec()));
            start = end;
        }
    }
    for k in (1..exports.len()).rev() {
        exports.swap(k, rng.below(k + 1));
    }
    let (rows, spans) = convert_in_order(&exports, &SpanTreeCache::for_files());
    assert_eq!(spans, by_service.len(), "every span stays in spans");
    assert_eq!(rows.len(), REQUESTS as usize, "one row per request");
    let mut ids: Vec<_> = rows.iter().map(|r| r.request_id.clone().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), REQUESTS as usize);
    assert!(
        rows.iter()
            .all(|r| r.service.as_deref() == Some("vllm-engine") && r.queue_ms.is_some())
    );
}

/// `infersight ingest gateway.jsonl engine.jsonl`: files of one stream share the memory, so a
/// request whose gateway spans are in one file and engine spans in another is one row.
#[test]
fn files_of_one_stream_merge_a_request_split_between_them() {
    let dir = tempfile::tempdir().unwrap();
    let layout = [Service::Gateway, Service::Engine];
    let mut paths = Vec::new();
    for (k, service) in [Service::Engine, Service::Gateway].into_iter().enumerate() {
        let lines: Vec<String> = (0..20u32)
            .map(|n| {
                let spans: Vec<_> = request_spans(n, &layout, false)
                    .into_iter()
                    .filter(|(s, _)| *s == service)
                    .collect();
                serde_json::to_string(&export(spans)).unwrap()
            })
            .collect();
        let path = dir.path().join(format!("{k}.jsonl"));
        std::fs::write(&path, lines.join("\n")).unwrap();
        paths.push(path);
    }
    let options = FileOptions {
        format: FileFormat::OtlpJsonl,
        ..FileOptions::default()
    };
    let mapper = AttributeMapper::default();
    let span_tree = SpanTreeCache::for_files();
    let mut rows: Vec<RequestRecord> = Vec::new();
    let mut spans = 0;
    for (k, path) in paths.iter().enumerate() {
        let stream = FileStream {
            span_tree: &span_tree,
            last: k + 1 == paths.len(),
        };
        read_file_of_stream(
            path,
            &options,
            &mapper,
            stream,
            &mut |batches| {
                for batch in &batches {
                    match batch.table {
                        Table::Requests => {
                            rows.extend(RequestRecord::from_batch(&batch.batch).unwrap())
                        }
                        Table::Spans => {
                            spans += SpanRecord::from_batch(&batch.batch).unwrap().len()
                        }
                        _ => {}
                    }
                }
                Ok(())
            },
            &mut |_| {},
        )
        .unwrap();
    }
    assert_eq!(spans, 40);
    assert_eq!(rows.len(), 20);
    rows.sort_by_key(|r| r.ts);
    for (n, row) in rows.iter().enumerate() {
        assert_one_request(row, n as u32, &layout, false);
    }
}

/// Keeps the request rows it is given.
#[derive(Default)]
struct RowSink {
    rows: std::sync::Mutex<Vec<RequestRecord>>,
}

impl infersight_ingest::Sink for RowSink {
    fn submit(&self, _org: &str, batches: Vec<TableBatch>) -> infersight_ingest::SinkFuture {
        for batch in batches.iter().filter(|b| b.table == Table::Requests) {
            let rows = RequestRecord::from_batch(&batch.batch).unwrap();
            self.rows.lock().unwrap().extend(rows);
        }
        Box::pin(async { Ok(()) })
    }
}

/// A receiver's held rows reach the sink without another export: by the tick once their trace
/// has been quiet for the linger, and all of them at shutdown.
#[tokio::test]
async fn held_rows_reach_the_sink_by_tick_and_at_shutdown() {
    use infersight_ingest::otlp::correlate::HoldLimits;
    use infersight_ingest::receivers::{HeldRequests, ReceiverState};
    use std::sync::Arc;
    use std::time::Duration;

    let sink = Arc::new(RowSink::default());
    let limits = HoldLimits {
        linger: Some(Duration::from_millis(50)),
        ..HoldLimits::for_receivers()
    };
    let state = ReceiverState {
        sink: sink.clone(),
        mapper: Arc::new(AttributeMapper::default()),
        span_tree: Arc::new(
            infersight_ingest::receivers::OrgSpanTrees::with_default_org(
                SpanTreeCache::with_limits(1024, limits),
            ),
        ),
        counters: Arc::new(infersight_model::telemetry::Counters::new()),
        max_body_bytes: 1 << 20,
        in_flight: Arc::new(tokio::sync::Semaphore::new(4)),
        decoders: Arc::new(tokio::sync::Semaphore::new(2)),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let held = HeldRequests::spawn(&state, Duration::from_millis(10), async {
        let _ = stop_rx.await;
    });
    let mapper = AttributeMapper::default();
    // a gateway's span alone: held for its engine's
    let gateway = export(request_spans(1, &[Service::Gateway], false));
    let converted = traces_to_batches_with(
        &gateway,
        &mapper,
        Some(&state.span_tree.for_org(DEFAULT_ORG)),
    )
    .unwrap();
    assert!(requests_of(&converted).is_empty());
    let mut waited = Duration::ZERO;
    while sink.rows.lock().unwrap().is_empty() && waited < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += Duration::from_millis(10);
    }
    assert_eq!(sink.rows.lock().unwrap().len(), 1, "released by the tick");

    // an engine span whose parent never comes: held until shutdown at the latest
    let mut orphan = request_spans(2, &[Service::Gateway, Service::Engine], false);
    orphan.remove(0);
    let converted = traces_to_batches_with(
        &export(orphan),
        &mapper,
        Some(&state.span_tree.for_org(DEFAULT_ORG)),
    )
    .unwrap();
    assert!(requests_of(&converted).is_empty());
    stop_tx.send(()).unwrap();
    held.finish().await;
    let rows = sink.rows.lock().unwrap();
    assert_eq!(rows.len(), 2, "drained at shutdown");
    assert_eq!(state.span_tree.held_requests(), 0);
}
