//! Second stage of OTLP ingestion: decoded `Export*ServiceRequest` messages → canonical Arrow
//! batches (`spans` + `requests` + `tokens`, `logs`, `metrics`) ready for the pipeline. Attribute
//! values are turned into protocol-neutral [`AttrValue`]s here; the mapping onto request columns
//! is `infersight_model::normalize`'s job. Records that are invalid on their own (bad ids, no time,
//! no value) are rejected one by one and counted for OTLP's `partial_success`; an attribute of the
//! wrong type for a canonical column rejects the whole request, as a client bug should.

use infersight_model::mapping::{AttributeMapper, MetricMapping, RequestColumn, canonical_metric};
use infersight_model::normalize::{
    ChildEvidence, SAMPLE_WEIGHT_KEY, SpanFacts, attrs_json, normalize_request_with,
};
use infersight_model::{
    AttrValue, LogRecord, MetricRecord, RequestRecord, SpanRecord, Table, TableBatch, TokenRecord,
};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, DataPointFlags, ExponentialHistogramDataPoint, HistogramDataPoint,
    NumberDataPoint, SummaryDataPoint, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

use super::correlate::{Candidate, ExportRequests, SpanLink};
use super::sampling::sample_weight;
use super::tokens::span_tokens;
use super::tree::{ExportTraces, SpanTreeCache, TreeView, span_key, trace_key};
use super::values::{Rejections, key_values_into};
pub use super::values::{any_value_to_attr, key_values};
use crate::error::IngestError;

/// Canonical batches made from one export request, with the counts OTLP's `partial_success`
/// reports. `accepted + rejected` is the number of spans, log records or metric data points in
/// the request (data points that explicitly carry no recorded value, such as Prometheus staleness
/// markers, are neither: they are skipped). For traces, `accepted` counts spans only (never the
/// `tokens` rows made from their events); token events that were skipped or dropped (see
/// [`super::tokens`]) are not rejected spans: they are reported in `rejection_message` as a
/// warning, with `rejected` unchanged, as OTLP allows for a fully accepted request.
#[derive(Debug, Clone, Default)]
pub struct Converted {
    /// Non-empty batches only, at most one per table.
    pub batches: Vec<TableBatch>,
    pub accepted: u64,
    pub rejected: u64,
    /// Why the first record was rejected, and how many others were, then why the first part of
    /// an accepted record was skipped and how many were (`None` when nothing was).
    pub rejection_message: Option<String>,
}

/// Where the conversion of an export gets each span's attributes: from the spans (copied), or
/// taken out of them beforehand, in span order, when the caller owns the export.
enum SpanAttributes {
    Copied,
    Taken(std::vec::IntoIter<Vec<KeyValue>>),
}

impl SpanAttributes {
    /// Takes the attributes out of every span of `req`, in the order the conversion visits them.
    fn take_from(req: &mut ExportTraceServiceRequest) -> SpanAttributes {
        let taken: Vec<Vec<KeyValue>> = req
            .resource_spans
            .iter_mut()
            .flat_map(|r| &mut r.scope_spans)
            .flat_map(|s| &mut s.spans)
            .map(|span| std::mem::take(&mut span.attributes))
            .collect();
        SpanAttributes::Taken(taken.into_iter())
    }

    /// The taken attributes of the next span (call once per span, in order), `None` when copied.
    fn next(&mut self) -> Option<Vec<KeyValue>> {
        match self {
            SpanAttributes::Copied => None,
            SpanAttributes::Taken(spans) => Some(spans.next().unwrap_or_default()),
        }
    }
}

fn resource_attrs(resource: Option<&Resource>) -> Vec<(String, AttrValue)> {
    resource
        .map(|r| key_values(&r.attributes))
        .unwrap_or_default()
}

/// Scope name and version as attributes (the OTel Collector's `otel.scope.*` convention).
fn push_scope(attrs: &mut Vec<(String, AttrValue)>, scope: Option<&InstrumentationScope>) {
    let Some(scope) = scope else { return };
    if !scope.name.is_empty() {
        attrs.push(("otel.scope.name".into(), AttrValue::Str(scope.name.clone())));
    }
    if !scope.version.is_empty() {
        attrs.push((
            "otel.scope.version".into(),
            AttrValue::Str(scope.version.clone()),
        ));
    }
}

fn find_label(attrs: &[(String, AttrValue)], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.as_label())
        .filter(|s| !s.is_empty())
}

/// Lowercase hex of an id; `None` for an absent (empty) id.
pub fn hex_id(bytes: &[u8]) -> Option<String> {
    if bytes.is_empty() {
        return None;
    }
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 0x0f)]);
    }
    // ASCII digits only
    String::from_utf8(out).ok()
}

/// An id of the required length that is not all zeroes (the OTLP definition of a valid id).
fn check_id(bytes: &[u8], len: usize, what: &str) -> Result<(), String> {
    if bytes.len() != len {
        return Err(format!("{what} has {} bytes, expected {len}", bytes.len()));
    }
    if bytes.iter().all(|b| *b == 0) {
        return Err(format!("{what} is all zeroes"));
    }
    Ok(())
}

fn time_ns(value: u64, what: &str) -> Result<i64, String> {
    if value == 0 {
        return Err(format!("{what} is missing"));
    }
    i64::try_from(value).map_err(|_| format!("{what} {value} is out of range"))
}

/// The attribute among `attrs` whose key ranks best (lowest) for a column, as a label.
fn best_label(
    attrs: &[(String, AttrValue)],
    rank: &dyn Fn(&str) -> Option<usize>,
) -> Option<(usize, String)> {
    let mut best: Option<(usize, usize, String)> = None;
    for (index, (key, value)) in attrs.iter().enumerate() {
        let Some(r) = rank(key) else { continue };
        if best.as_ref().is_some_and(|(b, _, _)| *b <= r) {
            continue;
        }
        if let Some(label) = value.as_label().filter(|s| !s.is_empty()) {
            best = Some((r, index, label));
        }
    }
    best.map(|(_, index, label)| (index, label))
}

fn mapped_rank(mapper: &AttributeMapper, key: &str, column: RequestColumn) -> Option<usize> {
    mapper
        .lookup(key)
        .filter(|(c, _, _)| *c == column)
        .map(|(_, _, p)| p)
}

/// Fills a column from the log/point attributes or the resource, whichever has the best-ranked
/// key; at equal rank the record's own attribute wins. Returns the value and where it came from
/// (`true` = record attributes) so the caller can leave it out of the remaining labels.
fn pick(
    resource: &[(String, AttrValue)],
    own: &[(String, AttrValue)],
    rank: &dyn Fn(&str) -> Option<usize>,
) -> Option<(bool, usize, String)> {
    let from_own = best_label(own, rank);
    let from_resource = best_label(resource, rank);
    match (from_own, from_resource) {
        (Some((i, v)), None) => Some((true, i, v)),
        (None, Some((i, v))) => Some((false, i, v)),
        (Some((oi, ov)), Some((ri, rv))) => {
            let own_rank = rank(&own[oi].0).unwrap_or(usize::MAX);
            let resource_rank = rank(&resource[ri].0).unwrap_or(usize::MAX);
            if resource_rank < own_rank {
                Some((false, ri, rv))
            } else {
                Some((true, oi, ov))
            }
        }
        (None, None) => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Traces

fn span_kind_name(kind: i32) -> &'static str {
    match SpanKind::try_from(kind) {
        Ok(SpanKind::Internal) => "internal",
        Ok(SpanKind::Server) => "server",
        Ok(SpanKind::Client) => "client",
        Ok(SpanKind::Producer) => "producer",
        Ok(SpanKind::Consumer) => "consumer",
        Ok(SpanKind::Unspecified) | Err(_) => "unspecified",
    }
}

fn status_name(code: i32) -> &'static str {
    match StatusCode::try_from(code) {
        Ok(StatusCode::Ok) => "ok",
        Ok(StatusCode::Error) => "error",
        Ok(StatusCode::Unset) | Err(_) => "unset",
    }
}

/// Converts spans into the `spans` table (every valid span), the `requests` table (one row per
/// inference request: the spans that `normalize_request` recognizes as one, merged by
/// [`super::correlate`] when several describe the same request) and the `tokens` table (the
/// token events of valid spans, see [`super::tokens`]; a request span's token times also fill the
/// latency columns its attributes leave NULL, and so do the phase spans below it, see
/// [`super::tree`]). Only the spans of this export count; see [`traces_to_batches_with`].
pub fn traces_to_batches(
    req: &ExportTraceServiceRequest,
    mapper: &AttributeMapper,
) -> Result<Converted, IngestError> {
    traces_to_batches_with(req, mapper, None)
}

/// [`traces_to_batches`] with a memory of earlier exports: request spans find the phase spans
/// exported before them, and request rows are held by trace until the spans of their request
/// have arrived (see [`super::correlate`]): the `requests` batch holds the rows released now,
/// of this export or earlier ones.
pub fn traces_to_batches_with(
    req: &ExportTraceServiceRequest,
    mapper: &AttributeMapper,
    span_tree: Option<&SpanTreeCache>,
) -> Result<Converted, IngestError> {
    let tree = TreeView::new(req, span_tree);
    let (mut converted, requests) = convert_traces(req, SpanAttributes::Copied, mapper, &tree)?;
    tree.remember();
    let rows = match span_tree {
        Some(cache) => cache.pass_requests(requests),
        None => requests.merged(),
    };
    converted.add_requests(&rows);
    Ok(converted)
}

/// [`traces_to_batches`] for a reader that converts exports on several threads: the conversion
/// (without its request rows), and what its in-order half needs to know of the export, its
/// request rows included (see [`SpanTreeCache`]).
/// The export is consumed: attribute strings move into the rows instead of being copied.
pub(crate) fn traces_to_batches_detached(
    mut req: ExportTraceServiceRequest,
    mapper: &AttributeMapper,
) -> (Result<Converted, IngestError>, ExportTraces) {
    let attributes = SpanAttributes::take_from(&mut req);
    let tree = TreeView::new(&req, None);
    match convert_traces(&req, attributes, mapper, &tree) {
        Ok((converted, requests)) => (
            Ok(converted),
            ExportTraces::new(&req, tree.into_batch(), requests),
        ),
        Err(e) => (
            Err(e),
            ExportTraces::new(&req, tree.into_batch(), ExportRequests::default()),
        ),
    }
}

impl Converted {
    /// Adds request rows as a `requests` batch, after the `spans` batch.
    pub fn add_requests(&mut self, rows: &[RequestRecord]) {
        if rows.is_empty() {
            return;
        }
        let at = self
            .batches
            .iter()
            .position(|b| b.table == Table::Spans)
            .map_or(0, |i| i + 1);
        self.batches.insert(
            at,
            TableBatch {
                table: Table::Requests,
                batch: RequestRecord::to_batch(rows),
            },
        );
    }
}

/// The export's spans and tokens as batches, and its request candidates with every valid span's
/// link, for [`super::correlate`] to merge.
fn convert_traces(
    req: &ExportTraceServiceRequest,
    mut attributes: SpanAttributes,
    mapper: &AttributeMapper,
    tree: &TreeView<'_>,
) -> Result<(Converted, ExportRequests), IngestError> {
    let span_count: usize = req
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum();
    let mut spans = Vec::with_capacity(span_count);
    let mut requests = ExportRequests {
        links: Vec::with_capacity(span_count),
        candidates: Vec::new(),
    };
    let mut tokens: Vec<TokenRecord> = Vec::new();
    let mut rejections = Rejections::default();
    for resource_spans in &req.resource_spans {
        let resource = resource_attrs(resource_spans.resource.as_ref());
        let service = find_label(&resource, "service.name");
        for scope_spans in &resource_spans.scope_spans {
            for span in &scope_spans.spans {
                let taken = attributes.next();
                let checked = check_id(&span.trace_id, 16, "trace_id")
                    .and_then(|()| check_id(&span.span_id, 8, "span_id"))
                    .and_then(|()| time_ns(span.start_time_unix_nano, "start_time_unix_nano"));
                let start_ns = match checked {
                    Ok(ns) => ns,
                    Err(reason) => {
                        rejections.reject(|| format!("span `{}` rejected: {reason}", span.name));
                        continue;
                    }
                };
                let end_ns = i64::try_from(span.end_time_unix_nano)
                    .ok()
                    .filter(|e| *e > 0);
                let duration_ms = end_ns
                    .filter(|end| *end >= start_ns)
                    .map(|end| (end - start_ns) as f64 / 1e6);
                let mut attrs = match taken {
                    Some(pairs) => key_values_into(pairs),
                    None => key_values(&span.attributes),
                };
                push_scope(&mut attrs, scope_spans.scope.as_ref());
                if let Some(weight) = sample_weight(&span.trace_state, &attrs) {
                    attrs.push((SAMPLE_WEIGHT_KEY.to_string(), AttrValue::Double(weight)));
                }
                let status = span.status.as_ref().map_or(0, |s| s.code);
                let status = status_name(status).to_string();
                let status_message = span
                    .status
                    .as_ref()
                    .map(|s| s.message.clone())
                    .filter(|m| !m.is_empty());
                let trace_id = hex_id(&span.trace_id);
                let span_id = hex_id(&span.span_id);

                let facts = SpanFacts {
                    ts_ns: start_ns,
                    end_ts_ns: end_ns,
                    trace_id: trace_id.clone(),
                    span_id: span_id.clone(),
                    status: Some(status.clone()),
                };
                let token_events = span_tokens(span, start_ns, &mut rejections);
                let phases = tree.phases_of(&span.trace_id, &span.span_id);
                let evidence = ChildEvidence {
                    tokens: token_events.timeline(),
                    phases: phases.as_ref(),
                };
                let request = normalize_request_with(mapper, &resource, &attrs, &facts, evidence)?;
                if !token_events.is_empty() {
                    let request_id = request.as_ref().and_then(|r| r.request_id.as_deref());
                    tokens.extend(token_events.into_rows(
                        request_id,
                        &attrs,
                        span_id.as_deref(),
                        start_ns,
                    ));
                }
                // ids were checked above
                let link = SpanLink {
                    trace: trace_key(&span.trace_id).unwrap_or_default(),
                    span: span_key(&span.span_id).unwrap_or_default(),
                    parent: span_key(&span.parent_span_id).filter(|p| *p != 0),
                };
                requests.links.push(link);
                if let Some(row) = request {
                    requests.candidates.push(Candidate { link, row });
                }
                spans.push(SpanRecord {
                    ts: start_ns,
                    end_ts: end_ns,
                    duration_ms,
                    trace_id,
                    span_id,
                    parent_span_id: hex_id(&span.parent_span_id),
                    name: Some(span.name.clone()).filter(|n| !n.is_empty()),
                    kind: Some(span_kind_name(span.kind).to_string()),
                    service: service.clone(),
                    status: Some(status),
                    status_message,
                    attrs: attrs_json(&resource, &attrs),
                    // stamped by the writer with the submitter's org
                    org: None,
                });
            }
        }
    }
    let mut batches = Vec::new();
    if !spans.is_empty() {
        batches.push(TableBatch {
            table: Table::Spans,
            batch: SpanRecord::to_batch(&spans),
        });
    }
    if !tokens.is_empty() {
        batches.push(TableBatch {
            table: Table::Tokens,
            batch: TokenRecord::to_batch(&tokens),
        });
    }
    let converted = Converted {
        batches,
        // Spans only: receivers report this against the request's span count.
        accepted: spans.len() as u64,
        rejected: rejections.count,
        rejection_message: rejections.message(),
    };
    Ok((converted, requests))
}

// ---------------------------------------------------------------------------------------------
// Logs

/// The severity text OTLP's severity number stands for (ranges of four, TRACE..FATAL).
pub fn severity_from_number(number: i32) -> Option<&'static str> {
    match number {
        1..=4 => Some("TRACE"),
        5..=8 => Some("DEBUG"),
        9..=12 => Some("INFO"),
        13..=16 => Some("WARN"),
        17..=20 => Some("ERROR"),
        21..=24 => Some("FATAL"),
        _ => None,
    }
}

/// A log body as text: strings as they are, any other value as JSON.
pub fn body_text(value: &AttrValue) -> Option<String> {
    match value {
        AttrValue::Empty => None,
        AttrValue::Str(s) => Some(s.clone()),
        other => Some(other.to_json().to_string()),
    }
}

/// Converts log records into the `logs` table. `template_id`, `params`, `log_class`, `label` and
/// `label_confidence` stay null: later pipeline stages fill them.
pub fn logs_to_batches(
    req: &ExportLogsServiceRequest,
    mapper: &AttributeMapper,
) -> Result<Converted, IngestError> {
    let mut logs = Vec::new();
    let mut rejections = Rejections::default();
    let worker_rank = |key: &str| mapped_rank(mapper, key, RequestColumn::Worker);
    let request_id_rank = |key: &str| mapped_rank(mapper, key, RequestColumn::RequestId);
    for resource_logs in &req.resource_logs {
        let resource = resource_attrs(resource_logs.resource.as_ref());
        let service = find_label(&resource, "service.name");
        for scope_logs in &resource_logs.scope_logs {
            for record in &scope_logs.log_records {
                let ts = match (record.time_unix_nano, record.observed_time_unix_nano) {
                    (0, 0) => {
                        Err("neither time_unix_nano nor observed_time_unix_nano is set".into())
                    }
                    (0, observed) => time_ns(observed, "observed_time_unix_nano"),
                    (time, _) => time_ns(time, "time_unix_nano"),
                };
                let ts = match ts {
                    Ok(ts) => ts,
                    Err(reason) => {
                        rejections.reject(|| format!("log record rejected: {reason}"));
                        continue;
                    }
                };
                let mut attrs = key_values(&record.attributes);
                if !record.event_name.is_empty() {
                    attrs.push((
                        "event.name".into(),
                        AttrValue::Str(record.event_name.clone()),
                    ));
                }
                push_scope(&mut attrs, scope_logs.scope.as_ref());
                let severity = if record.severity_text.is_empty() {
                    severity_from_number(record.severity_number).map(str::to_string)
                } else {
                    Some(record.severity_text.clone())
                };
                logs.push(LogRecord {
                    ts,
                    severity,
                    service: service.clone(),
                    worker: pick(&resource, &attrs, &worker_rank).map(|(_, _, v)| v),
                    trace_id: hex_id(&record.trace_id),
                    span_id: hex_id(&record.span_id),
                    request_id: pick(&resource, &attrs, &request_id_rank).map(|(_, _, v)| v),
                    body: record
                        .body
                        .as_ref()
                        .map(any_value_to_attr)
                        .as_ref()
                        .and_then(body_text),
                    attrs: attrs_json(&resource, &attrs),
                    ..Default::default()
                });
            }
        }
    }
    let mut batches = Vec::new();
    if !logs.is_empty() {
        batches.push(TableBatch {
            table: Table::Logs,
            batch: LogRecord::to_batch(&logs),
        });
    }
    Ok(Converted {
        batches,
        accepted: logs.len() as u64,
        rejected: rejections.count,
        rejection_message: rejections.message(),
    })
}

// ---------------------------------------------------------------------------------------------
// Metrics

/// The canonical name, the scale into its unit and the engine for an engine metric name; the
/// name itself, scale 1 and no engine for anything unmapped. Monotonic sums are also looked up
/// with `_total` appended, which newer OTel Collector Prometheus receivers strip.
pub fn metric_name(name: &str, monotonic: bool) -> (String, f64, Option<&'static str>) {
    let owned = |(m, suffix): (&'static MetricMapping, &str)| (m, suffix.to_string());
    let found = canonical_metric(name).map(owned).or_else(|| {
        monotonic
            .then(|| canonical_metric(&format!("{name}_total")).map(owned))
            .flatten()
    });
    match found {
        Some((mapping, suffix)) => {
            let canonical = if mapping.canonical.ends_with(&suffix) {
                mapping.canonical.to_string()
            } else {
                format!("{}{suffix}", mapping.canonical)
            };
            (canonical, mapping.scale, Some(mapping.engine))
        }
        None => (name.to_string(), 1.0, None),
    }
}

/// Normalized label columns of one metric point plus the remaining labels as JSON.
#[derive(Debug, Default)]
struct PointLabels {
    model: Option<String>,
    worker: Option<String>,
    device: Option<String>,
    engine: Option<String>,
    labels: String,
}

fn point_labels(
    mapper: &AttributeMapper,
    resource: &[(String, AttrValue)],
    point: &[(String, AttrValue)],
    engine: Option<&'static str>,
) -> PointLabels {
    let model_rank = |key: &str| {
        mapped_rank(mapper, key, RequestColumn::Model).or(match key {
            "model_name" => Some(10_000),
            "model" => Some(10_001),
            _ => None,
        })
    };
    let worker_rank = |key: &str| metric_worker_rank(mapper, key);
    let device_rank = |key: &str| match key {
        "gpu" => Some(0),
        "device" => Some(1),
        "gpu.id" => Some(2),
        "serving.device" => Some(3),
        _ => None,
    };
    let engine_rank = |key: &str| (key == "engine").then_some(0);

    let mut used_resource = vec![false; resource.len()];
    let mut used_point = vec![false; point.len()];
    let mut take = |rank: &dyn Fn(&str) -> Option<usize>| {
        pick(resource, point, rank).map(|(from_point, index, value)| {
            if from_point {
                used_point[index] = true;
            } else {
                used_resource[index] = true;
            }
            value
        })
    };
    let model = take(&model_rank);
    let worker = take(&worker_rank);
    let device = take(&device_rank);
    // The mapping table knows the engine of a mapped name; then an `engine` label (vLLM's engine
    // index, for one) stays a label.
    let engine = match engine {
        Some(e) => Some(e.to_string()),
        None => take(&engine_rank),
    };
    let rest_resource = resource
        .iter()
        .zip(&used_resource)
        .filter(|(_, u)| !**u)
        .map(|(p, _)| p);
    let rest_point = point
        .iter()
        .zip(&used_point)
        .filter(|(_, u)| !**u)
        .map(|(p, _)| p);
    PointLabels {
        model,
        worker,
        device,
        engine,
        labels: attrs_json(rest_resource, rest_point),
    }
}

/// How well a key of a metric point or its resource names the worker (lower is better): the
/// pod that serves first, the scrape target last. On Kubernetes a scraped series carries the
/// target as `instance` (→ `service.instance.id`), an ip:port, while the pod that uses the GPU
/// or serves the model is in a pod label (DCGM's pod mapping, kube-state style relabeling that
/// keeps the series' own pod as `exported_pod` beside the exporter's `pod`) or a resource
/// attribute (`k8s.pod.name`). So: mapped worker keys (`worker`, `k8s.pod.name`, user aliases),
/// then the pod labels, then the host (`host.name`, DCGM's `Hostname`), then the instance.
fn metric_worker_rank(mapper: &AttributeMapper, key: &str) -> Option<usize> {
    const POD_LABELS: [&str; 4] = ["exported_pod", "pod", "pod_name", "kubernetes_pod_name"];
    const HOSTS: usize = 20_000;
    const INSTANCES: usize = 30_000;
    if let Some(rank) = mapped_rank(mapper, key, RequestColumn::Worker) {
        return Some(match key {
            "host.name" => HOSTS + rank,
            "service.instance.id" => INSTANCES + rank,
            _ => rank,
        });
    }
    if let Some(at) = POD_LABELS.iter().position(|label| *label == key) {
        return Some(10_000 + at);
    }
    match key {
        "Hostname" | "hostname" => Some(HOSTS + 10_000 - 1),
        "instance" => Some(INSTANCES + 10_000 - 1),
        _ => None,
    }
}

/// Per-metric context shared by its points.
struct MetricContext<'a> {
    mapper: &'a AttributeMapper,
    resource: &'a [(String, AttrValue)],
    source_name: &'a str,
    name: String,
    scale: f64,
    engine: Option<&'static str>,
    /// Labels every point of this metric gets in addition to its own (temporality).
    extra: Vec<(String, AttrValue)>,
}

impl MetricContext<'_> {
    fn record(&self, ts: i64, kind: &str, point_attrs: &[KeyValue]) -> MetricRecord {
        self.record_with(ts, kind, point_attrs, None)
    }

    fn record_with(
        &self,
        ts: i64,
        kind: &str,
        point_attrs: &[KeyValue],
        extra: Option<(String, AttrValue)>,
    ) -> MetricRecord {
        let mut attrs = key_values(point_attrs);
        attrs.extend(self.extra.iter().cloned());
        attrs.extend(extra);
        let labels = point_labels(self.mapper, self.resource, &attrs, self.engine);
        MetricRecord {
            ts,
            name: Some(self.name.clone()),
            source_name: Some(self.source_name.to_string()),
            kind: Some(kind.to_string()),
            model: labels.model,
            worker: labels.worker,
            device: labels.device,
            engine: labels.engine,
            labels: labels.labels,
            ..Default::default()
        }
    }

    fn reject_reason(&self, reason: &str) -> String {
        format!("data point of `{}` rejected: {reason}", self.source_name)
    }
}

fn no_recorded_value(flags: u32) -> bool {
    flags & (DataPointFlags::NoRecordedValueMask as u32) != 0
}

fn temporality_labels(temporality: i32) -> Vec<(String, AttrValue)> {
    // Cumulative is what Prometheus-style consumers assume; only a delta series is marked.
    if temporality == AggregationTemporality::Delta as i32 {
        vec![("otel.temporality".into(), AttrValue::Str("delta".into()))]
    } else {
        Vec::new()
    }
}

/// Converts metric data points into the `metrics` table, under canonical names.
pub fn metrics_to_batches(
    req: &ExportMetricsServiceRequest,
    mapper: &AttributeMapper,
) -> Result<Converted, IngestError> {
    let mut rows: Vec<MetricRecord> = Vec::new();
    let mut accepted = 0u64;
    let mut rejections = Rejections::default();
    for resource_metrics in &req.resource_metrics {
        let resource = resource_attrs(resource_metrics.resource.as_ref());
        for scope_metrics in &resource_metrics.scope_metrics {
            for metric in &scope_metrics.metrics {
                let Some(data) = &metric.data else {
                    // A metric without data carries no point to accept or reject.
                    continue;
                };
                let monotonic = matches!(data, metric::Data::Sum(s) if s.is_monotonic);
                let (name, scale, engine) = metric_name(&metric.name, monotonic);
                let temporality = match data {
                    metric::Data::Sum(s) => s.aggregation_temporality,
                    metric::Data::Histogram(h) => h.aggregation_temporality,
                    metric::Data::ExponentialHistogram(h) => h.aggregation_temporality,
                    metric::Data::Gauge(_) | metric::Data::Summary(_) => 0,
                };
                let context = MetricContext {
                    mapper,
                    resource: &resource,
                    source_name: &metric.name,
                    name,
                    scale,
                    engine,
                    extra: temporality_labels(temporality),
                };
                let mut outcome = |result: Result<Vec<MetricRecord>, String>| match result {
                    Ok(points) if points.is_empty() => {}
                    Ok(points) => {
                        accepted += 1;
                        rows.extend(points);
                    }
                    Err(reason) => rejections.reject(|| context.reject_reason(&reason)),
                };
                match data {
                    metric::Data::Gauge(gauge) => {
                        for point in &gauge.data_points {
                            outcome(number_point(&context, point, "gauge"));
                        }
                    }
                    metric::Data::Sum(sum) => {
                        let kind = if sum.is_monotonic { "counter" } else { "sum" };
                        for point in &sum.data_points {
                            outcome(number_point(&context, point, kind));
                        }
                    }
                    metric::Data::Histogram(histogram) => {
                        for point in &histogram.data_points {
                            outcome(histogram_point(&context, point));
                        }
                    }
                    metric::Data::ExponentialHistogram(histogram) => {
                        for point in &histogram.data_points {
                            outcome(exponential_histogram_point(&context, point));
                        }
                    }
                    metric::Data::Summary(summary) => {
                        for point in &summary.data_points {
                            outcome(summary_point(&context, point));
                        }
                    }
                }
            }
        }
    }
    let mut batches = Vec::new();
    if !rows.is_empty() {
        batches.push(TableBatch {
            table: Table::Metrics,
            batch: MetricRecord::to_batch(&rows),
        });
    }
    Ok(Converted {
        batches,
        accepted,
        rejected: rejections.count,
        rejection_message: rejections.message(),
    })
}

fn number_point(
    context: &MetricContext<'_>,
    point: &NumberDataPoint,
    kind: &str,
) -> Result<Vec<MetricRecord>, String> {
    if no_recorded_value(point.flags) {
        return Ok(Vec::new());
    }
    let ts = time_ns(point.time_unix_nano, "time_unix_nano")?;
    let value = match point.value {
        Some(number_data_point::Value::AsDouble(d)) => d,
        Some(number_data_point::Value::AsInt(i)) => i as f64,
        None => return Err("no value (as_double or as_int)".into()),
    };
    let mut record = context.record(ts, kind, &point.attributes);
    record.value = Some(value * context.scale);
    Ok(vec![record])
}

fn histogram_point(
    context: &MetricContext<'_>,
    point: &HistogramDataPoint,
) -> Result<Vec<MetricRecord>, String> {
    if no_recorded_value(point.flags) {
        return Ok(Vec::new());
    }
    let ts = time_ns(point.time_unix_nano, "time_unix_nano")?;
    if !point.bucket_counts.is_empty()
        && point.bucket_counts.len() != point.explicit_bounds.len() + 1
    {
        return Err(format!(
            "{} bucket counts for {} explicit bounds, expected {}",
            point.bucket_counts.len(),
            point.explicit_bounds.len(),
            point.explicit_bounds.len() + 1
        ));
    }
    let mut record = context.record(ts, "histogram", &point.attributes);
    record.value = point.sum.map(|s| s * context.scale);
    record.sample_count = i64::try_from(point.count).ok();
    if !point.bucket_counts.is_empty() {
        record.bucket_bounds = point
            .explicit_bounds
            .iter()
            .map(|b| b * context.scale)
            .collect();
        record.bucket_counts = point.bucket_counts.iter().map(|c| *c as f64).collect();
    }
    Ok(vec![record])
}

/// Explicit-bounds form of an exponential histogram's positive buckets: bounds are
/// `base^(offset..=offset+n)` with `base = 2^(2^-scale)`; the first count gathers the zero and
/// negative buckets (everything at or below the first bound), the last (above the last bound) is 0.
pub fn exponential_buckets(point: &ExponentialHistogramDataPoint) -> (Vec<f64>, Vec<f64>) {
    let positive = point.positive.as_ref();
    let counts = positive.map(|b| b.bucket_counts.as_slice()).unwrap_or(&[]);
    if counts.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let offset = positive.map_or(0, |b| b.offset);
    let exponent_step = (-f64::from(point.scale)).exp2();
    let bounds: Vec<f64> = (0..=counts.len())
        .map(|k| ((f64::from(offset) + k as f64) * exponent_step).exp2())
        .collect();
    // Saturating: counts come from the wire and must not overflow (a panic in debug builds).
    let below: u64 = point
        .zero_count
        .saturating_add(point.negative.as_ref().map_or(0, |b| {
            b.bucket_counts
                .iter()
                .fold(0u64, |a, c| a.saturating_add(*c))
        }));
    let mut bucket_counts = Vec::with_capacity(counts.len() + 2);
    bucket_counts.push(below as f64);
    bucket_counts.extend(counts.iter().map(|c| *c as f64));
    bucket_counts.push(0.0);
    (bounds, bucket_counts)
}

fn exponential_histogram_point(
    context: &MetricContext<'_>,
    point: &ExponentialHistogramDataPoint,
) -> Result<Vec<MetricRecord>, String> {
    if no_recorded_value(point.flags) {
        return Ok(Vec::new());
    }
    let ts = time_ns(point.time_unix_nano, "time_unix_nano")?;
    if !(-10..=20).contains(&point.scale) {
        return Err(format!(
            "exponential histogram scale {} is out of range -10..=20",
            point.scale
        ));
    }
    let mut record = context.record(ts, "exponential_histogram", &point.attributes);
    record.value = point.sum.map(|s| s * context.scale);
    record.sample_count = i64::try_from(point.count).ok();
    let (bounds, counts) = exponential_buckets(point);
    record.bucket_bounds = bounds.iter().map(|b| b * context.scale).collect();
    record.bucket_counts = counts;
    Ok(vec![record])
}

fn summary_point(
    context: &MetricContext<'_>,
    point: &SummaryDataPoint,
) -> Result<Vec<MetricRecord>, String> {
    if no_recorded_value(point.flags) {
        return Ok(Vec::new());
    }
    let ts = time_ns(point.time_unix_nano, "time_unix_nano")?;
    let mut rows = Vec::with_capacity(point.quantile_values.len() + 1);
    let mut summary = context.record(ts, "summary", &point.attributes);
    summary.value = Some(point.sum * context.scale);
    summary.sample_count = i64::try_from(point.count).ok();
    rows.push(summary);
    for quantile in &point.quantile_values {
        let label = (
            "quantile".to_string(),
            AttrValue::Str(quantile.quantile.to_string()),
        );
        let mut row = context.record_with(ts, "quantile", &point.attributes, Some(label));
        row.value = Some(quantile.value * context.scale);
        rows.push(row);
    }
    Ok(rows)
}

/// How many bytes converting a request may produce, estimated before converting: resource
/// attributes are copied into every row of their resource, so a small body with large resource
/// attributes and many tiny records could expand enormously. Receivers refuse requests whose
/// estimate exceeds a multiple of their body limit.
pub trait ExpansionEstimate {
    fn expansion_estimate(&self) -> usize;
}

/// One impl per export request: (request, resource list, scope list, item list).
macro_rules! expansion_estimate {
    ($request:ty, $resources:ident, $scopes:ident, $items:ident) => {
        impl ExpansionEstimate for $request {
            fn expansion_estimate(&self) -> usize {
                self.$resources
                    .iter()
                    .map(|r| {
                        let shared = r.resource.as_ref().map_or(0, prost::Message::encoded_len);
                        let items: usize = r.$scopes.iter().map(|s| s.$items.len()).sum();
                        let own: usize = r.$scopes.iter().map(prost::Message::encoded_len).sum();
                        shared.saturating_mul(items).saturating_add(own)
                    })
                    .fold(0usize, usize::saturating_add)
            }
        }
    };
}

expansion_estimate!(
    ExportTraceServiceRequest,
    resource_spans,
    scope_spans,
    spans
);
expansion_estimate!(
    ExportLogsServiceRequest,
    resource_logs,
    scope_logs,
    log_records
);
expansion_estimate!(
    ExportMetricsServiceRequest,
    resource_metrics,
    scope_metrics,
    metrics
);

/// Refuses a request whose converted form would exceed `limit` bytes (see [`ExpansionEstimate`]).
pub fn check_expansion(request: &impl ExpansionEstimate, limit: usize) -> Result<(), IngestError> {
    let estimate = request.expansion_estimate();
    if estimate > limit {
        return Err(IngestError::Expansion { estimate, limit });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    use super::*;
    use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    #[test]
    fn ids_are_lowercase_hex() {
        assert_eq!(hex_id(&[]), None);
        assert_eq!(
            hex_id(&[0x00, 0xab, 0x9f, 0x10]).as_deref(),
            Some("00ab9f10")
        );
        let all: Vec<u8> = (0..=255).collect();
        let expected: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex_id(&all), Some(expected));
    }

    #[test]
    fn a_consumed_export_converts_as_a_borrowed_one() {
        use any_value::Value;
        let span = |i: u8, attributes: Vec<KeyValue>| Span {
            // span 2 has a bad trace id: rejected, its attributes must not shift to span 3
            trace_id: if i == 2 { vec![1; 3] } else { vec![i + 1; 16] },
            span_id: vec![i + 1; 8],
            name: format!("span-{i}"),
            start_time_unix_nano: 1_700_000_000_000_000_000 + u64::from(i),
            end_time_unix_nano: 1_700_000_001_000_000_000,
            attributes,
            ..Default::default()
        };
        let nested = Value::KvlistValue(KeyValueList {
            values: vec![
                kv("inner", Value::StringValue("x".into())),
                kv(
                    "list",
                    Value::ArrayValue(ArrayValue {
                        values: vec![AnyValue {
                            value: Some(Value::BytesValue(vec![1, 2])),
                        }],
                    }),
                ),
            ],
        });
        let spans: Vec<Span> = (0..5u8)
            .map(|i| {
                span(
                    i,
                    vec![
                        kv(
                            "gen_ai.request.model",
                            Value::StringValue(format!("model-{i}")),
                        ),
                        kv("gen_ai.usage.input_tokens", Value::IntValue(i64::from(i))),
                        kv("gen_ai.latency.e2e", Value::DoubleValue(0.5)),
                        kv("nested", nested.clone()),
                        kv("flag", Value::BoolValue(i % 2 == 0)),
                    ],
                )
            })
            .collect();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", Value::StringValue("vllm".into()))],
                    ..Default::default()
                }),
                scope_spans: vec![
                    ScopeSpans {
                        spans: spans[..2].to_vec(),
                        ..Default::default()
                    },
                    ScopeSpans {
                        spans: spans[2..].to_vec(),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }],
        };
        let mapper = AttributeMapper::default();
        let borrowed = traces_to_batches(&request, &mapper).unwrap();
        let (consumed, export) = traces_to_batches_detached(request, &mapper);
        let mut consumed = consumed.unwrap();
        consumed.add_requests(&export.into_requests().merged());
        assert_eq!(borrowed.accepted, 4);
        assert_eq!((consumed.accepted, consumed.rejected), (4, 1));
        assert_eq!(borrowed.batches.len(), consumed.batches.len());
        for (a, b) in borrowed.batches.iter().zip(&consumed.batches) {
            assert_eq!(a.table, b.table);
            assert!(a.batch == b.batch, "{:?} rows differ", a.table);
        }
    }
}
