//! The lineage graph of log evidence: records of the evidence templates, linked to the requests,
//! traces, sessions, workers and model versions they belong to, and to each other (declared
//! `upstream_log_ids`, or the same worker within a few seconds), so the report can walk from a
//! template to the version or worker behind it. Bounded: a few records per template, a node cap.
//! [`LineageGraph::summary_of`] is that walk for one template, attached to its log evidence.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use arrow::array::Array;
use serde::Serialize;

use super::{
    RcaContext, Windows, i64_column, optional, sql_string, string_column, template_texts,
    ts_between,
};
use crate::contract::LineageSummary;
use infersight_query::QueryEngine;
use infersight_query::QueryError;

/// Records sampled per seed template (those nearest the onset).
pub const MAX_LOGS_PER_TEMPLATE: usize = 20;
/// Seed templates used at most.
pub const MAX_SEED_TEMPLATES: usize = 10;
/// Nodes in one graph at most; `truncated` says when more would have come.
pub const MAX_NODES: usize = 500;
/// Records of different templates on one worker this close in time are linked.
pub const NEAR_ON_WORKER_NS: i64 = 5_000_000_000;
/// Requests are looked up this far around the sampled records (a request starts before its logs).
const REQUEST_PAD_NS: i64 = 10 * 60_000_000_000;
/// Attribute keys of a log record that carry a request id when the column does not.
const REQUEST_ID_KEYS: [&str; 3] = ["request_id", "request.id", "gen_ai.request.id"];
/// Attribute keys that name a log record itself, and the records it derives from.
const LOG_ID_KEYS: [&str; 2] = ["log.record.uid", "log_id"];
const UPSTREAM_KEY: &str = "upstream_log_ids";
const MAX_BODY_CHARS: usize = 200;

/// Serializable graph: nodes with kinds, directed edges with relations.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LineageGraph {
    pub nodes: Vec<LineageNode>,
    pub edges: Vec<LineageEdge>,
    /// Nodes were dropped to respect [`MAX_NODES`].
    pub truncated: bool,
}

/// One node. `id` is `<kind>:<key>`; kinds: `template`, `log`, `request`, `trace`, `session`,
/// `worker`, `model_version`.
#[derive(Debug, Clone, Serialize)]
pub struct LineageNode {
    pub id: String,
    pub kind: String,
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts_ns: Option<i64>,
    pub attrs: BTreeMap<String, String>,
}

/// One directed edge. Relations: `instance_of` (log → template), `emitted_on` (log → worker),
/// `in_trace` (log/request → trace), `same_request_id` / `same_trace_id` (log → request),
/// `in_session` (request → session), `served_on` (request → worker), `served_by_version`
/// (request → model_version), `upstream` (log → the log it names in `upstream_log_ids`),
/// `near_on_worker` (log → a later log of another template on the same worker within 5 s).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineageEdge {
    pub from: String,
    pub to: String,
    pub relation: String,
}

impl LineageGraph {
    /// The walk from `template:<template_id>` through its records; `None` when the graph has no
    /// record of it.
    pub fn summary_of(&self, template_id: &str) -> Option<LineageSummary> {
        let template = format!("template:{template_id}");
        let mut out_edges: HashMap<&str, Vec<&LineageEdge>> = HashMap::new();
        for edge in &self.edges {
            out_edges.entry(edge.from.as_str()).or_default().push(edge);
        }
        let label = |id: &str| {
            self.node(id)
                .map_or_else(|| id.to_string(), |n| n.label.clone())
        };
        let from = |id: &str| out_edges.get(id).map_or(&[][..], Vec::as_slice);
        let mut summary = LineageSummary::default();
        let (mut requests, mut traces, mut sessions) =
            (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
        let records = self
            .edges
            .iter()
            .filter(|e| e.relation == "instance_of" && e.to == template);
        for record in records {
            summary.records += 1;
            for edge in from(&record.from) {
                match edge.relation.as_str() {
                    "emitted_on" => *summary.workers.entry(label(&edge.to)).or_default() += 1,
                    "same_request_id" | "same_trace_id" => {
                        requests.insert(edge.to.as_str());
                    }
                    "in_trace" => {
                        traces.insert(edge.to.as_str());
                    }
                    "upstream" | "near_on_worker" => summary.linked_records += 1,
                    _ => {}
                }
            }
        }
        if summary.records == 0 {
            return None;
        }
        for request in &requests {
            for edge in from(request) {
                match edge.relation.as_str() {
                    "served_by_version" => {
                        *summary.model_versions.entry(label(&edge.to)).or_default() += 1
                    }
                    "in_trace" => {
                        traces.insert(edge.to.as_str());
                    }
                    "in_session" => {
                        sessions.insert(edge.to.as_str());
                    }
                    _ => {}
                }
            }
        }
        summary.requests = requests.len();
        summary.traces = traces.len();
        summary.sessions = sessions.len();
        Some(summary)
    }

    pub fn node(&self, id: &str) -> Option<&LineageNode> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// Edges leaving `id`.
    pub fn edges_from<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a LineageEdge> + 'a {
        self.edges.iter().filter(move |e| e.from == id)
    }
}

struct Builder {
    graph: LineageGraph,
    index: HashMap<String, usize>,
    edge_set: BTreeSet<(String, String, String)>,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            graph: LineageGraph::default(),
            index: HashMap::new(),
            edge_set: BTreeSet::new(),
        }
    }

    /// Adds a node unless present; false when the cap refused it.
    fn node(
        &mut self,
        kind: &str,
        key: &str,
        label: &str,
        ts_ns: Option<i64>,
        attrs: BTreeMap<String, String>,
    ) -> Option<String> {
        let id = format!("{kind}:{key}");
        if self.index.contains_key(&id) {
            return Some(id);
        }
        if self.graph.nodes.len() >= MAX_NODES {
            self.graph.truncated = true;
            return None;
        }
        self.index.insert(id.clone(), self.graph.nodes.len());
        self.graph.nodes.push(LineageNode {
            id: id.clone(),
            kind: kind.to_string(),
            label: label.to_string(),
            ts_ns,
            attrs,
        });
        Some(id)
    }

    fn simple(&mut self, kind: &str, key: &str) -> Option<String> {
        self.node(kind, key, key, None, BTreeMap::new())
    }

    fn edge(&mut self, from: &Option<String>, to: &Option<String>, relation: &str) {
        let (Some(from), Some(to)) = (from, to) else {
            return;
        };
        if from != to
            && self
                .edge_set
                .insert((from.clone(), to.clone(), relation.to_string()))
        {
            self.graph.edges.push(LineageEdge {
                from: from.clone(),
                to: to.clone(),
                relation: relation.to_string(),
            });
        }
    }
}

/// One sampled log record.
struct SampledLog {
    ts_ns: i64,
    template_id: String,
    worker: Option<String>,
    trace_id: Option<String>,
    request_id: Option<String>,
    severity: Option<String>,
    body: Option<String>,
    uid: Option<String>,
    upstream: Vec<String>,
}

fn non_empty(value: Option<&str>) -> Option<String> {
    value.filter(|v| !v.is_empty()).map(str::to_string)
}

/// Ids in `upstream_log_ids`: a JSON array, or a comma-separated string.
fn upstream_ids(value: &serde_json::Value) -> Vec<String> {
    match value {
        serde_json::Value::Array(items) => items
            .iter()
            .filter_map(|v| match v {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect(),
        serde_json::Value::String(s) => s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Links the records of `seed_template_ids` (evidence templates, best first) to their requests,
/// traces, sessions, workers and model versions, around the incident's onset.
pub async fn lineage(
    engine: &QueryEngine,
    ctx: &RcaContext,
    seed_template_ids: &[String],
) -> Result<LineageGraph, QueryError> {
    let seeds: Vec<&str> = seed_template_ids
        .iter()
        .take(MAX_SEED_TEMPLATES)
        .map(String::as_str)
        .collect();
    let Some(windows) = Windows::resolve(engine, ctx).await? else {
        return Ok(LineageGraph::default());
    };
    if seeds.is_empty() {
        return Ok(LineageGraph::default());
    }
    let logs = sample_logs(engine, &windows, &seeds).await?;
    let requests = related_requests(engine, &logs).await?;
    let texts = template_texts(engine, &windows, &seeds).await?;

    let mut builder = Builder::new();
    for seed in &seeds {
        let label = texts
            .get(*seed)
            .cloned()
            .unwrap_or_else(|| seed.to_string());
        builder.node("template", seed, &label, None, BTreeMap::new());
    }
    let log_ids: Vec<Option<String>> = logs
        .iter()
        .enumerate()
        .map(|(position, log)| add_log(&mut builder, position, log, &requests))
        .collect();
    link_upstream(&mut builder, &logs, &log_ids);
    link_near_on_worker(&mut builder, &logs, &log_ids);
    Ok(builder.graph)
}

/// The records of the seed templates nearest the onset ([`MAX_LOGS_PER_TEMPLATE`] each), from
/// the lead-in to the incident's end, in time order.
async fn sample_logs(
    engine: &QueryEngine,
    windows: &Windows,
    seeds: &[&str],
) -> Result<Vec<SampledLog>, QueryError> {
    let range = (
        windows.lead_start_ns.min(windows.incident.0),
        windows.incident.1,
    );
    let list = seeds
        .iter()
        .map(|s| sql_string(s))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT ts_ns, template_id, worker, trace_id, request_id, severity, body, attrs FROM ( \
           SELECT CAST(ts AS BIGINT) AS ts_ns, template_id, worker, trace_id, request_id, severity, body, attrs, \
             row_number() OVER (PARTITION BY template_id ORDER BY abs(CAST(ts AS BIGINT) - {onset}), ts) AS rn \
           FROM logs WHERE {} AND template_id IN ({list})) sampled \
         WHERE rn <= {MAX_LOGS_PER_TEMPLATE} ORDER BY ts_ns, template_id",
        ts_between("ts", range),
        onset = windows.onset_ns,
    );
    let output = engine.sql(&sql).await?;
    let mut logs: Vec<SampledLog> = Vec::new();
    for batch in &output.batches {
        let ts = i64_column(batch, 0)?;
        let columns: Vec<_> = (1..8)
            .map(|i| string_column(batch, i))
            .collect::<Result<_, _>>()?;
        logs.extend((0..batch.num_rows()).filter_map(|row| sampled_log(&ts, &columns, row)));
    }
    Ok(logs)
}

/// One row of [`sample_logs`]' query (`columns`: template_id, worker, trace_id, request_id,
/// severity, body, attrs); `None` without a template id or a timestamp.
fn sampled_log(
    ts: &arrow::array::Int64Array,
    columns: &[arrow::array::StringArray],
    row: usize,
) -> Option<SampledLog> {
    let (Some(template_id), true) = (optional(&columns[0], row), ts.is_valid(row)) else {
        return None;
    };
    let attrs: serde_json::Map<String, serde_json::Value> = optional(&columns[6], row)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    let attr_text = |key: &str| {
        attrs
            .get(key)
            .and_then(infersight_query::value_text)
            .filter(|v| !v.is_empty())
    };
    Some(SampledLog {
        ts_ns: ts.value(row),
        template_id: template_id.to_string(),
        worker: non_empty(optional(&columns[1], row)),
        trace_id: non_empty(optional(&columns[2], row)),
        request_id: non_empty(optional(&columns[3], row))
            .or_else(|| REQUEST_ID_KEYS.iter().find_map(|k| attr_text(k))),
        severity: non_empty(optional(&columns[4], row)),
        body: optional(&columns[5], row).map(|b| b.chars().take(MAX_BODY_CHARS).collect()),
        uid: LOG_ID_KEYS.iter().find_map(|k| attr_text(k)),
        upstream: attrs
            .get(UPSTREAM_KEY)
            .map(upstream_ids)
            .unwrap_or_default(),
    })
}

/// The node of one sampled record (the `position`th), linked to its template, worker, trace
/// and the requests sharing its request id or trace id; its id, `None` when the cap refused it.
fn add_log(
    builder: &mut Builder,
    position: usize,
    log: &SampledLog,
    requests: &RelatedRequests,
) -> Option<String> {
    let key = log
        .uid
        .clone()
        .unwrap_or_else(|| format!("{}@{}#{position}", log.template_id, log.ts_ns));
    let mut attrs = BTreeMap::new();
    attrs.insert("template_id".to_string(), log.template_id.clone());
    for (name, value) in [
        ("worker", &log.worker),
        ("trace_id", &log.trace_id),
        ("request_id", &log.request_id),
        ("severity", &log.severity),
    ] {
        if let Some(value) = value {
            attrs.insert(name.to_string(), value.clone());
        }
    }
    let label = log.body.clone().unwrap_or_else(|| log.template_id.clone());
    let id = builder.node("log", &key, &label, Some(log.ts_ns), attrs);
    let template = Some(format!("template:{}", log.template_id));
    builder.edge(&id, &template, "instance_of");
    if let Some(worker) = &log.worker {
        let worker = builder.simple("worker", worker);
        builder.edge(&id, &worker, "emitted_on");
    }
    if let Some(trace_id) = &log.trace_id {
        let trace = builder.simple("trace", trace_id);
        builder.edge(&id, &trace, "in_trace");
    }
    let mut matched: Vec<(usize, &str)> = Vec::new();
    if let Some(request_id) = &log.request_id {
        matched.extend(
            requests
                .by_request_id
                .get(request_id)
                .map(|&r| (r, "same_request_id")),
        );
    }
    if let Some(trace_id) = &log.trace_id {
        for &r in requests.by_trace_id.get(trace_id).into_iter().flatten() {
            if !matched.iter().any(|(m, _)| *m == r) {
                matched.push((r, "same_trace_id"));
            }
        }
    }
    for (r, relation) in matched {
        let request_node = add_request(builder, &requests.rows[r]);
        builder.edge(&id, &request_node, relation);
    }
    id
}

/// `upstream` edges: a record to the sampled records it names in `upstream_log_ids` (the last
/// record with that uid when several share it).
fn link_upstream(builder: &mut Builder, logs: &[SampledLog], log_ids: &[Option<String>]) {
    let mut by_uid: HashMap<&str, usize> = HashMap::new();
    for (position, log) in logs.iter().enumerate() {
        if let Some(uid) = &log.uid {
            by_uid.insert(uid.as_str(), position);
        }
    }
    for (position, log) in logs.iter().enumerate() {
        for upstream in &log.upstream {
            if let Some(&other) = by_uid.get(upstream.as_str()) {
                builder.edge(&log_ids[position], &log_ids[other], "upstream");
            }
        }
    }
}

/// `near_on_worker` edges: same worker, another template, within a few seconds
/// ([`NEAR_ON_WORKER_NS`]): consecutive records per worker.
fn link_near_on_worker(builder: &mut Builder, logs: &[SampledLog], log_ids: &[Option<String>]) {
    let mut on_worker: Vec<usize> = (0..logs.len())
        .filter(|&i| logs[i].worker.is_some())
        .collect();
    on_worker.sort_by(|&a, &b| {
        logs[a]
            .worker
            .cmp(&logs[b].worker)
            .then(logs[a].ts_ns.cmp(&logs[b].ts_ns))
    });
    for pair in on_worker.windows(2) {
        let (a, b) = (&logs[pair[0]], &logs[pair[1]]);
        if a.worker == b.worker
            && a.template_id != b.template_id
            && b.ts_ns - a.ts_ns <= NEAR_ON_WORKER_NS
        {
            builder.edge(&log_ids[pair[0]], &log_ids[pair[1]], "near_on_worker");
        }
    }
}

fn add_request(builder: &mut Builder, request: &RequestRow) -> Option<String> {
    let key = request
        .request_id
        .clone()
        .or_else(|| request.trace_id.as_ref().map(|t| format!("trace/{t}")))?;
    let mut attrs = BTreeMap::new();
    for (name, value) in [
        ("model", &request.model),
        ("model_version", &request.model_version),
        ("tenant", &request.tenant),
        ("worker", &request.worker),
        ("session_id", &request.session_id),
        ("trace_id", &request.trace_id),
    ] {
        if let Some(value) = value {
            attrs.insert(name.to_string(), value.clone());
        }
    }
    let id = builder.node("request", &key, &key, Some(request.ts_ns), attrs);
    if let Some(trace_id) = &request.trace_id {
        let trace = builder.simple("trace", trace_id);
        builder.edge(&id, &trace, "in_trace");
    }
    if let Some(session_id) = &request.session_id {
        let session = builder.simple("session", session_id);
        builder.edge(&id, &session, "in_session");
    }
    if let Some(worker) = &request.worker {
        let worker = builder.simple("worker", worker);
        builder.edge(&id, &worker, "served_on");
    }
    if let Some(version) = &request.model_version {
        let mut attrs = BTreeMap::new();
        if let Some(model) = &request.model {
            attrs.insert("model".to_string(), model.clone());
        }
        let node = builder.node("model_version", version, version, None, attrs);
        builder.edge(&id, &node, "served_by_version");
    }
    id
}

struct RequestRow {
    ts_ns: i64,
    request_id: Option<String>,
    trace_id: Option<String>,
    session_id: Option<String>,
    worker: Option<String>,
    model: Option<String>,
    model_version: Option<String>,
    tenant: Option<String>,
}

#[derive(Default)]
struct RelatedRequests {
    rows: Vec<RequestRow>,
    by_request_id: HashMap<String, usize>,
    by_trace_id: HashMap<String, Vec<usize>>,
}

/// The requests sharing a request id or trace id with the sampled records.
async fn related_requests(
    engine: &QueryEngine,
    logs: &[SampledLog],
) -> Result<RelatedRequests, QueryError> {
    let mut out = RelatedRequests::default();
    let request_ids: BTreeSet<&str> = logs
        .iter()
        .filter_map(|l| l.request_id.as_deref())
        .collect();
    let trace_ids: BTreeSet<&str> = logs.iter().filter_map(|l| l.trace_id.as_deref()).collect();
    let (Some(first), Some(last)) = (
        logs.iter().map(|l| l.ts_ns).min(),
        logs.iter().map(|l| l.ts_ns).max(),
    ) else {
        return Ok(out);
    };
    let mut keys = Vec::new();
    let quoted = |ids: &BTreeSet<&str>| {
        ids.iter()
            .map(|id| sql_string(id))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !request_ids.is_empty() {
        keys.push(format!("request_id IN ({})", quoted(&request_ids)));
    }
    if !trace_ids.is_empty() {
        keys.push(format!("trace_id IN ({})", quoted(&trace_ids)));
    }
    if keys.is_empty() {
        return Ok(out);
    }
    let sql = format!(
        "SELECT CAST(ts AS BIGINT), request_id, trace_id, session_id, worker, model, model_version, tenant \
         FROM requests WHERE {} AND ({}) ORDER BY 1 LIMIT {}",
        ts_between("ts", (first - REQUEST_PAD_NS, last + REQUEST_PAD_NS)),
        keys.join(" OR "),
        MAX_NODES
    );
    let output = engine.sql(&sql).await?;
    for batch in &output.batches {
        let ts = i64_column(batch, 0)?;
        let columns: Vec<_> = (1..8)
            .map(|i| string_column(batch, i))
            .collect::<Result<_, _>>()?;
        for row in 0..batch.num_rows() {
            if !ts.is_valid(row) {
                continue;
            }
            let text = |i: usize| non_empty(optional(&columns[i], row));
            let request = RequestRow {
                ts_ns: ts.value(row),
                request_id: text(0),
                trace_id: text(1),
                session_id: text(2),
                worker: text(3),
                model: text(4),
                model_version: text(5),
                tenant: text(6),
            };
            let index = out.rows.len();
            if let Some(request_id) = &request.request_id {
                out.by_request_id.entry(request_id.clone()).or_insert(index);
            }
            if let Some(trace_id) = &request.trace_id {
                out.by_trace_id
                    .entry(trace_id.clone())
                    .or_default()
                    .push(index);
            }
            out.rows.push(request);
        }
    }
    Ok(out)
}
