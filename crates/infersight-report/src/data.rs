//! Chart data: the series the report's charts are drawn from, read from the store with SQL for
//! the incident's windows and implicated slices.
//!
//! Every query aggregates in SQL (per time step, per latency bucket, per slice) so the amount
//! read back is bounded by the number of steps, never by the number of requests; the step is one
//! minute unless the span is longer than [`MAX_STEPS`] minutes. A table without rows, a slice key
//! the data lacks or a query the engine rejects leaves that chart's series empty (with a
//! `tracing` warning): the report is still written. Only a store that cannot answer at all
//! (`Unavailable`) fails the collection.
//!
//! Times in the JSON are milliseconds since the Unix epoch (UTC); latencies are milliseconds.

use std::collections::BTreeMap;

use infersight_model::RequestRecord;
use infersight_query::QueryEngine;
use infersight_query::QueryError;
use infersight_rca::RcaReport;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ReportError;

const NS_PER_MS: i64 = 1_000_000;
const MINUTE_MS: i64 = 60_000;
/// At most this many time steps per series; longer spans use coarser steps than a minute.
pub const MAX_STEPS: i64 = 360;
/// Latency buckets of the heatmap per doubling of latency (bucket bounds grow by 2^(1/3)).
pub const BUCKETS_PER_OCTAVE: i64 = 3;
/// Log templates shown in the template-rate chart.
pub const MAX_TEMPLATES: usize = 5;
/// Workers whose resource series are shown.
pub const MAX_WORKERS: usize = 3;
/// Canonical metric names of the resource chart (see `infersight_model::mapping::METRIC_NAMES`).
pub const RESOURCE_METRICS: [&str; 3] = [
    "gpu_memory_used_bytes",
    "kv_cache_usage_ratio",
    "requests_waiting",
];
/// The request phases of the breakdown and flame charts, in pipeline order.
pub const PHASES: [&str; 4] = ["queue", "prefill", "decode", "other"];

/// A half-open time window `[since_ms, until_ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowMs {
    pub since_ms: i64,
    pub until_ms: i64,
}

impl WindowMs {
    fn contains(&self, ms: i64) -> bool {
        ms >= self.since_ms && ms < self.until_ms
    }
}

/// Requests per time step × latency bucket of the symptom's latency SLI.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Heatmap {
    /// `requests` column of the SLI (`ttft_ms` or `e2e_ms`).
    pub sli: String,
    /// Start of each time step (ms), contiguous from the span's start, `step_ms` apart.
    pub steps_ms: Vec<i64>,
    /// Bucket bounds (ms), one more than buckets; bucket `b` is `[bounds[b], bounds[b + 1])`
    /// (the first bucket also holds everything faster).
    pub bucket_bounds_ms: Vec<f64>,
    /// `counts[step][bucket]`.
    pub counts: Vec<Vec<u64>>,
}

impl Heatmap {
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|row| row.iter().all(|n| *n == 0))
    }

    /// Requests in steps that start inside `window`.
    pub fn total_in(&self, window: &WindowMs) -> u64 {
        self.steps_ms
            .iter()
            .zip(&self.counts)
            .filter(|(step, _)| window.contains(**step))
            .map(|(_, row)| row.iter().sum::<u64>())
            .sum()
    }
}

/// Mean phase times of one group of requests in one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseBreakdown {
    /// `fleet` or `slice`.
    pub scope: String,
    /// What the scope is: `fleet`, or the slice as `key=value & key=value`.
    pub label: String,
    /// `baseline` or `incident`.
    pub window: String,
    pub requests: u64,
    pub queue_ms: f64,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// e2e minus the three phases, at least 0 (gateway, tokenizer, preemption, …).
    pub other_ms: f64,
}

impl PhaseBreakdown {
    /// The phase means in [`PHASES`] order.
    pub fn values(&self) -> [f64; 4] {
        [
            self.queue_ms,
            self.prefill_ms,
            self.decode_ms,
            self.other_ms,
        ]
    }

    pub fn total_ms(&self) -> f64 {
        self.values().iter().sum()
    }
}

/// Requests and requests over the threshold in one time step, for the slice and the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ContributionPoint {
    pub step_ms: i64,
    pub slice_requests: u64,
    pub slice_over: u64,
    pub rest_requests: u64,
    pub rest_over: u64,
}

/// Who the over-threshold requests were: the top root-cause slice vs the rest of the fleet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Contribution {
    /// The slice as `key=value & key=value`; empty when there is no root cause (all is "rest").
    pub slice: String,
    /// The baseline p95 of the SLI (ms).
    pub threshold_ms: Option<f64>,
    pub points: Vec<ContributionPoint>,
}

/// Per-step record counts of one log template.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateRate {
    pub template_id: String,
    pub template: String,
    /// `(step start ms, records)`, steps without records left out.
    pub points: Vec<(i64, u64)>,
}

/// Per-step mean of one metric on one worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceSeries {
    /// Canonical metric name.
    pub metric: String,
    pub worker: String,
    /// `(step start ms, mean value)`.
    pub points: Vec<(i64, f64)>,
}

/// A node of the flame breakdown: total request time (ms, summed over requests) and its parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlameNode {
    pub name: String,
    pub value_ms: f64,
    pub children: Vec<FlameNode>,
}

/// The series behind every chart of the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChartData {
    /// The span the series cover: baseline start → incident end.
    pub span: Option<WindowMs>,
    pub baseline: Option<WindowMs>,
    pub incident: Option<WindowMs>,
    /// When the symptom started (ms).
    pub onset_ms: Option<i64>,
    /// Width of one time step of every series (ms); one minute unless the span is long.
    pub step_ms: i64,
    /// The top root-cause slice the slice-vs-rest charts use (attribute → value); empty: none.
    pub slice: BTreeMap<String, String>,
    pub heatmap: Heatmap,
    /// Fleet baseline, fleet incident, then (with a slice) slice baseline, slice incident.
    pub phases: Vec<PhaseBreakdown>,
    pub contribution: Contribution,
    pub templates: Vec<TemplateRate>,
    /// The implicated workers, in the order their series appear.
    pub workers: Vec<String>,
    pub resources: Vec<ResourceSeries>,
    /// Where request time went during the incident; `None` without incident requests.
    pub flame: Option<FlameNode>,
}

/// `key=value & key=value`, the way the report names a slice.
/// Empty for no slice (charts test for it), the written subject otherwise.
pub fn describe_slice(slice: &BTreeMap<String, String>) -> String {
    if slice.is_empty() {
        return String::new();
    }
    infersight_model::signal::Subject::describe(slice)
}

/// Reads the chart series for `rca`'s windows from the store behind `engine`.
pub async fn collect(engine: &QueryEngine, rca: &RcaReport) -> Result<ChartData, ReportError> {
    let mut data = ChartData {
        step_ms: MINUTE_MS,
        ..ChartData::default()
    };
    let to_ms = |w: &infersight_rca::Window| WindowMs {
        since_ms: w.since.div_euclid(NS_PER_MS),
        until_ms: w.until.div_euclid(NS_PER_MS),
    };
    data.baseline = rca.baseline_window.as_ref().map(to_ms);
    data.incident = rca.incident_window.as_ref().map(to_ms);
    if data.incident.is_none() {
        // no verdict windows: the last hour of data, all of it "incident"
        let rows = degrade(
            "data bounds",
            query(
                engine,
                "SELECT CAST(max(ts) AS BIGINT) AS last_ns FROM requests",
            )
            .await,
        )?
        .unwrap_or_default();
        let Some(last_ns) = rows.first().and_then(|r| int(r, "last_ns")) else {
            return Ok(data);
        };
        let until_ms = last_ns.div_euclid(NS_PER_MS).div_euclid(MINUTE_MS) * MINUTE_MS + MINUTE_MS;
        data.incident = Some(WindowMs {
            since_ms: until_ms - 60 * MINUTE_MS,
            until_ms,
        });
        data.baseline = None;
    }
    let incident = data.incident.expect("set above");
    let since_ms = data
        .baseline
        .map_or(incident.since_ms, |b| b.since_ms.min(incident.since_ms));
    let since_ms = since_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
    let until_ms = incident.until_ms.max(since_ms + MINUTE_MS);
    let span = WindowMs { since_ms, until_ms };
    data.span = Some(span);
    let minutes = (until_ms - since_ms + MINUTE_MS - 1) / MINUTE_MS;
    data.step_ms = MINUTE_MS * ((minutes + MAX_STEPS - 1) / MAX_STEPS).max(1);
    data.onset_ms = rca
        .symptom
        .as_ref()
        .map(|s| s.onset.div_euclid(NS_PER_MS))
        .or(Some(incident.since_ms));
    data.slice = rca
        .root_causes
        .first()
        .map(|c| c.dimensions.clone().into_inner())
        .unwrap_or_default();
    let sli = sli_column(rca);
    let ctx = Ctx {
        span,
        baseline: data.baseline,
        incident,
        step_ms: data.step_ms,
        sli,
        slice: slice_predicate(&data.slice),
    };

    data.heatmap = degrade("latency heatmap", heatmap(engine, &ctx).await)?.unwrap_or_default();
    let (phases, flame) =
        degrade("phase breakdown", phases(engine, &ctx, &data.slice).await)?.unwrap_or_default();
    data.phases = phases;
    data.flame = flame;
    data.contribution = degrade(
        "contribution",
        contribution(engine, &ctx, &data.slice).await,
    )?
    .unwrap_or_default();
    data.templates =
        degrade("template rates", templates(engine, &ctx, rca).await)?.unwrap_or_default();
    data.workers =
        degrade("implicated workers", workers(engine, &ctx, rca).await)?.unwrap_or_default();
    data.resources = degrade(
        "resource series",
        resources(engine, &ctx, &data.workers).await,
    )?
    .unwrap_or_default();
    Ok(data)
}

/// What every chart query needs.
struct Ctx {
    span: WindowMs,
    baseline: Option<WindowMs>,
    incident: WindowMs,
    step_ms: i64,
    sli: &'static str,
    /// SQL predicate over `requests` selecting the top slice; `None` without one.
    slice: Option<String>,
}

impl Ctx {
    fn window_predicate(window: &WindowMs) -> String {
        format!(
            "ts >= to_timestamp_nanos({}) AND ts < to_timestamp_nanos({})",
            window.since_ms * NS_PER_MS,
            window.until_ms * NS_PER_MS
        )
    }

    fn span_predicate(&self) -> String {
        Self::window_predicate(&self.span)
    }

    /// SQL expression of a row's time step (integer index since the epoch).
    fn step_expression(&self) -> String {
        format!("CAST(ts AS BIGINT) / {}", self.step_ms * NS_PER_MS)
    }

    fn step_start_ms(&self, step: i64) -> i64 {
        step * self.step_ms
    }

    /// Step starts covering the span.
    fn steps(&self) -> Vec<i64> {
        let first = self.span.since_ms.div_euclid(self.step_ms);
        let last = (self.span.until_ms - 1).div_euclid(self.step_ms);
        (first..=last).map(|s| self.step_start_ms(s)).collect()
    }

    fn slice_case(&self) -> String {
        match &self.slice {
            Some(p) => format!("CASE WHEN {p} THEN 1 ELSE 0 END"),
            None => "0".into(),
        }
    }
}

/// `ttft_ms` for a TTFT (or queue) symptom, `e2e_ms` for the rest (e2e, errors, aborts, none).
fn sli_column(rca: &RcaReport) -> &'static str {
    match rca.symptom.as_ref().map(|s| s.sli.as_str()) {
        Some(s) if s.starts_with("ttft") || s.starts_with("queue") => "ttft_ms",
        _ => "e2e_ms",
    }
}

fn sql_string(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A predicate over `requests` for a slice: named columns compared as text, other keys read
/// from `attrs` with `json_get` (the way the RCA's log evidence filters slices); an empty value
/// matches a missing one, as in the rollups.
fn slice_predicate(slice: &BTreeMap<String, String>) -> Option<String> {
    if slice.is_empty() {
        return None;
    }
    let conditions: Vec<String> = slice
        .iter()
        .map(|(key, value)| {
            let expression = if RequestRecord::COLUMNS.contains(&key.as_str()) && key != "attrs" {
                format!("CAST({key} AS VARCHAR)")
            } else {
                format!("json_get(attrs, {})", sql_string(key))
            };
            if value.is_empty() {
                format!("({expression} IS NULL OR {expression} = '')")
            } else {
                format!("COALESCE({expression} = {}, FALSE)", sql_string(value))
            }
        })
        .collect();
    Some(format!("({})", conditions.join(" AND ")))
}

type Row = Map<String, Value>;

async fn query(engine: &QueryEngine, sql: &str) -> Result<Vec<Row>, QueryError> {
    let output = engine.sql(sql).await?;
    let value = output.to_json_value()?;
    let rows = match value.get("rows") {
        Some(Value::Array(rows)) => rows.iter().filter_map(|r| r.as_object().cloned()).collect(),
        _ => Vec::new(),
    };
    Ok(rows)
}

/// A chart's query failed: a store that cannot answer fails the report; anything else (a key
/// the data lacks, a function the engine rejects) leaves the chart empty, with a warning.
fn degrade<T>(what: &str, result: Result<T, QueryError>) -> Result<Option<T>, ReportError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error @ QueryError::Unavailable(_)) => Err(error.into()),
        Err(error) => {
            tracing::warn!(chart = what, %error, "chart data left empty");
            Ok(None)
        }
    }
}

fn int(row: &Row, key: &str) -> Option<i64> {
    match row.get(key)? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn float(row: &Row, key: &str) -> Option<f64> {
    match row.get(key)? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .filter(|f| f.is_finite())
}

fn text<'a>(row: &'a Row, key: &str) -> Option<&'a str> {
    row.get(key)?.as_str()
}

fn count(row: &Row, key: &str) -> u64 {
    int(row, key).unwrap_or(0).max(0) as u64
}

// ------------------------------------------------------------------------------------ heatmap

async fn heatmap(engine: &QueryEngine, ctx: &Ctx) -> Result<Heatmap, QueryError> {
    let col = ctx.sli;
    let sql = format!(
        "SELECT {step} AS step, \
           CAST(floor(log2(CASE WHEN {col} < 1.0 THEN 1.0 ELSE {col} END) * {BUCKETS_PER_OCTAVE}) AS BIGINT) AS bucket, \
           count(*) AS n \
         FROM requests WHERE {span} AND {col} IS NOT NULL AND {col} >= 0 GROUP BY 1, 2",
        step = ctx.step_expression(),
        span = ctx.span_predicate(),
    );
    let rows = query(engine, &sql).await?;
    let cells: Vec<(i64, i64, u64)> = rows
        .iter()
        .filter_map(|r| Some((int(r, "step")?, int(r, "bucket")?, count(r, "n"))))
        .collect();
    let (Some(lo), Some(hi)) = (
        cells.iter().map(|c| c.1).min(),
        cells.iter().map(|c| c.1).max(),
    ) else {
        return Ok(Heatmap {
            sli: col.into(),
            ..Heatmap::default()
        });
    };
    let steps = ctx.steps();
    let index: BTreeMap<i64, usize> = steps.iter().enumerate().map(|(i, s)| (*s, i)).collect();
    let buckets = (hi - lo + 1) as usize;
    let mut counts = vec![vec![0u64; buckets]; steps.len()];
    for (step, bucket, n) in cells {
        if let Some(&i) = index.get(&ctx.step_start_ms(step)) {
            counts[i][(bucket - lo) as usize] += n;
        }
    }
    let bound =
        |b: i64| (2f64.powf(b as f64 / BUCKETS_PER_OCTAVE as f64) * 1000.0).round() / 1000.0;
    Ok(Heatmap {
        sli: col.into(),
        steps_ms: steps,
        bucket_bounds_ms: (lo..=hi + 1).map(bound).collect(),
        counts,
    })
}

// ------------------------------------------------------------------------- phases and flame

/// Phase sums of one (window, in-slice) group.
#[derive(Debug, Clone, Copy, Default)]
struct PhaseSums {
    requests: u64,
    sums: [f64; 4],
}

impl PhaseSums {
    fn add(&mut self, other: &PhaseSums) {
        self.requests += other.requests;
        for (a, b) in self.sums.iter_mut().zip(other.sums) {
            *a += b;
        }
    }

    fn breakdown(&self, scope: &str, label: &str, window: &str) -> PhaseBreakdown {
        let mean = |i: usize| {
            if self.requests == 0 {
                0.0
            } else {
                self.sums[i] / self.requests as f64
            }
        };
        PhaseBreakdown {
            scope: scope.into(),
            label: label.into(),
            window: window.into(),
            requests: self.requests,
            queue_ms: mean(0),
            prefill_ms: mean(1),
            decode_ms: mean(2),
            other_ms: mean(3),
        }
    }

    fn flame(&self, name: &str) -> FlameNode {
        FlameNode {
            name: name.into(),
            value_ms: self.sums.iter().sum(),
            children: PHASES
                .iter()
                .zip(self.sums)
                .map(|(phase, value_ms)| FlameNode {
                    name: (*phase).into(),
                    value_ms,
                    children: Vec::new(),
                })
                .collect(),
        }
    }
}

async fn phases(
    engine: &QueryEngine,
    ctx: &Ctx,
    slice: &BTreeMap<String, String>,
) -> Result<(Vec<PhaseBreakdown>, Option<FlameNode>), QueryError> {
    let incident = Ctx::window_predicate(&ctx.incident);
    let (window_case, where_windows) = match &ctx.baseline {
        Some(b) => {
            let baseline = Ctx::window_predicate(b);
            (
                format!("CASE WHEN {incident} THEN 'incident' ELSE 'baseline' END"),
                format!("(({incident}) OR ({baseline}))"),
            )
        }
        None => ("'incident'".to_string(), format!("({incident})")),
    };
    let known = "COALESCE(queue_ms, 0.0) + COALESCE(prefill_ms, 0.0) + COALESCE(decode_ms, 0.0)";
    let sql = format!(
        "SELECT {window_case} AS win, {slice_case} AS in_slice, count(*) AS n, \
           sum(COALESCE(queue_ms, 0.0)) AS queue, sum(COALESCE(prefill_ms, 0.0)) AS prefill, \
           sum(COALESCE(decode_ms, 0.0)) AS decode, \
           sum(CASE WHEN e2e_ms IS NOT NULL AND e2e_ms > {known} THEN e2e_ms - ({known}) ELSE 0.0 END) AS other \
         FROM requests WHERE {where_windows} GROUP BY 1, 2",
        slice_case = ctx.slice_case(),
    );
    let rows = query(engine, &sql).await?;
    // (window, in_slice) → sums
    let mut groups: BTreeMap<(String, bool), PhaseSums> = BTreeMap::new();
    for row in &rows {
        let Some(win) = text(row, "win") else {
            continue;
        };
        let in_slice = int(row, "in_slice").unwrap_or(0) == 1;
        let sums = PhaseSums {
            requests: count(row, "n"),
            sums: ["queue", "prefill", "decode", "other"].map(|k| float(row, k).unwrap_or(0.0)),
        };
        groups
            .entry((win.to_string(), in_slice))
            .or_default()
            .add(&sums);
    }
    let get = |win: &str, in_slice: bool| {
        groups
            .get(&(win.to_string(), in_slice))
            .copied()
            .unwrap_or_default()
    };
    let windows: Vec<&str> = if ctx.baseline.is_some() {
        vec!["baseline", "incident"]
    } else {
        vec!["incident"]
    };
    let mut out = Vec::new();
    for win in &windows {
        let mut fleet = get(win, false);
        fleet.add(&get(win, true));
        if fleet.requests > 0 {
            out.push(fleet.breakdown("fleet", "fleet", win));
        }
    }
    let label = describe_slice(slice);
    if ctx.slice.is_some() {
        for win in &windows {
            let sums = get(win, true);
            if sums.requests > 0 {
                out.push(sums.breakdown("slice", &label, win));
            }
        }
    }
    let (in_slice, rest) = (get("incident", true), get("incident", false));
    let flame = if in_slice.requests + rest.requests == 0 {
        None
    } else if ctx.slice.is_some() {
        let children: Vec<FlameNode> = [(in_slice, label.as_str()), (rest, "rest")]
            .into_iter()
            .filter(|(s, _)| s.requests > 0)
            .map(|(s, name)| s.flame(name))
            .collect();
        Some(FlameNode {
            name: "incident requests".into(),
            value_ms: children.iter().map(|c| c.value_ms).sum(),
            children,
        })
    } else {
        let mut node = rest.flame("incident requests");
        node.name = "incident requests".into();
        Some(node)
    };
    Ok((out, flame))
}

// ------------------------------------------------------------------------------ contribution

async fn threshold(engine: &QueryEngine, ctx: &Ctx) -> Result<Option<f64>, QueryError> {
    let col = ctx.sli;
    let window = ctx.baseline.unwrap_or(ctx.span);
    let predicate = Ctx::window_predicate(&window);
    // DataFusion ≥ 48 writes the ordered-set form; older versions only the two-argument one
    let forms = [
        format!("approx_percentile_cont(0.95) WITHIN GROUP (ORDER BY {col})"),
        format!("approx_percentile_cont({col}, 0.95)"),
    ];
    let mut last_error = None;
    for form in forms {
        let sql = format!(
            "SELECT CAST({form} AS DOUBLE) AS p95 FROM requests WHERE {predicate} AND {col} IS NOT NULL"
        );
        match query(engine, &sql).await {
            Ok(rows) => return Ok(rows.first().and_then(|r| float(r, "p95"))),
            Err(error @ QueryError::Unavailable(_)) => return Err(error),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.expect("two forms tried"))
}

async fn contribution(
    engine: &QueryEngine,
    ctx: &Ctx,
    slice: &BTreeMap<String, String>,
) -> Result<Contribution, QueryError> {
    let Some(threshold_ms) = threshold(engine, ctx).await? else {
        return Ok(Contribution::default());
    };
    let col = ctx.sli;
    let sql = format!(
        "SELECT {step} AS step, {slice_case} AS in_slice, count(*) AS n, \
           sum(CASE WHEN {col} > {threshold_ms} THEN 1 ELSE 0 END) AS over \
         FROM requests WHERE {span} GROUP BY 1, 2",
        step = ctx.step_expression(),
        slice_case = ctx.slice_case(),
        span = ctx.span_predicate(),
    );
    let rows = query(engine, &sql).await?;
    let mut points: BTreeMap<i64, ContributionPoint> = BTreeMap::new();
    for row in &rows {
        let Some(step) = int(row, "step") else {
            continue;
        };
        let step_ms = ctx.step_start_ms(step);
        let point = points.entry(step_ms).or_insert(ContributionPoint {
            step_ms,
            ..ContributionPoint::default()
        });
        if int(row, "in_slice") == Some(1) {
            point.slice_requests += count(row, "n");
            point.slice_over += count(row, "over");
        } else {
            point.rest_requests += count(row, "n");
            point.rest_over += count(row, "over");
        }
    }
    Ok(Contribution {
        slice: describe_slice(slice),
        threshold_ms: Some(threshold_ms),
        points: points.into_values().collect(),
    })
}

// ----------------------------------------------------------------------------- log templates

async fn templates(
    engine: &QueryEngine,
    ctx: &Ctx,
    rca: &RcaReport,
) -> Result<Vec<TemplateRate>, QueryError> {
    let mut chosen: Vec<(String, String)> = Vec::new();
    for evidence in &rca.log_evidence {
        if evidence.template_id.is_empty()
            || chosen.iter().any(|(id, _)| *id == evidence.template_id)
        {
            continue;
        }
        chosen.push((evidence.template_id.clone(), evidence.template.clone()));
        if chosen.len() == MAX_TEMPLATES {
            break;
        }
    }
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    let list = chosen
        .iter()
        .map(|(id, _)| sql_string(id))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT template_id, {step} AS step, count(*) AS n FROM logs \
         WHERE {span} AND template_id IN ({list}) GROUP BY 1, 2",
        step = ctx.step_expression(),
        span = ctx.span_predicate(),
    );
    let rows = query(engine, &sql).await?;
    let mut by_id: BTreeMap<&str, BTreeMap<i64, u64>> = BTreeMap::new();
    for row in &rows {
        if let (Some(id), Some(step)) = (text(row, "template_id"), int(row, "step")) {
            *by_id
                .entry(id)
                .or_default()
                .entry(ctx.step_start_ms(step))
                .or_default() += count(row, "n");
        }
    }
    Ok(chosen
        .iter()
        .map(|(id, template)| TemplateRate {
            template_id: id.clone(),
            template: template.clone(),
            points: by_id
                .get(id.as_str())
                .map(|p| p.iter().map(|(s, n)| (*s, *n)).collect())
                .unwrap_or_default(),
        })
        .collect())
}

// ---------------------------------------------------------------------------------- resources

/// Workers named by the root causes, then by signal subjects (strongest first); failing both,
/// the workers whose mean SLI grew most from the baseline to the incident.
/// The implicated workers of the resource chart: the worker the top cause or a signal about it
/// names, the workers of a device fault; else the workers of the top slice (the whole fleet
/// without one) whose latency rose most. A lower-ranked cause never names them (it may be
/// load elsewhere, or spurious).
async fn workers(
    engine: &QueryEngine,
    ctx: &Ctx,
    rca: &RcaReport,
) -> Result<Vec<String>, QueryError> {
    use infersight_model::signal::SignalKind;
    let mut out: Vec<String> = Vec::new();
    let top = rca.root_causes.first().map(|c| &c.dimensions);
    let device = |kind: SignalKind| {
        matches!(
            kind,
            SignalKind::GpuMemoryLeak | SignalKind::SlowWorker | SignalKind::PreemptionStorm
        )
    };
    let named = top
        .into_iter()
        .chain(
            rca.signals
                .iter()
                .filter(|s| Some(&s.subject) == top || device(s.kind))
                .map(|s| &s.subject),
        )
        .filter_map(|d| d.get("worker"))
        .filter(|w| !w.is_empty());
    for worker in named {
        if !out.contains(worker) {
            out.push(worker.clone());
        }
    }
    if !out.is_empty() {
        out.truncate(MAX_WORKERS);
        return Ok(out);
    }
    let Some(baseline) = ctx.baseline else {
        return Ok(out);
    };
    let col = ctx.sli;
    let sql = format!(
        "SELECT worker, avg(CASE WHEN {incident} THEN {col} END) AS during, \
           avg(CASE WHEN {base} THEN {col} END) AS before \
         FROM requests WHERE {span}{slice} AND worker IS NOT NULL AND worker <> '' GROUP BY 1",
        incident = Ctx::window_predicate(&ctx.incident),
        base = Ctx::window_predicate(&baseline),
        span = ctx.span_predicate(),
        slice = ctx
            .slice
            .as_ref()
            .map_or_else(String::new, |p| format!(" AND {p}")),
    );
    let rows = query(engine, &sql).await?;
    let mut changes: Vec<(f64, String)> = rows
        .iter()
        .filter_map(|r| {
            let change = float(r, "during")? - float(r, "before")?;
            Some((change, text(r, "worker")?.to_string()))
        })
        .filter(|(change, _)| *change > 0.0)
        .collect();
    changes.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    Ok(changes
        .into_iter()
        .take(MAX_WORKERS)
        .map(|(_, w)| w)
        .collect())
}

/// One worker of a cause's slice: its requests of the slice in the incident and how much their
/// mean latency (the symptom's SLI) changed against the slice's requests on it in the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerChange {
    pub worker: String,
    pub requests: u64,
    /// Milliseconds; `None` when the worker served the slice only in the incident.
    pub change_ms: Option<f64>,
}

/// The workers of one cause's slice: those whose latency rose most, at most [`MAX_WORKERS`] + 2,
/// and how many served the slice in the incident.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CauseWorkers {
    pub workers: Vec<WorkerChange>,
    pub serving: usize,
}

/// The workers of the slice `dimensions` in `rca`'s windows (see [`CauseWorkers`]); empty
/// without windows or a slice.
pub async fn cause_workers(
    engine: &QueryEngine,
    rca: &RcaReport,
    dimensions: &BTreeMap<String, String>,
) -> Result<CauseWorkers, QueryError> {
    let (Some(incident), Some(slice)) = (&rca.incident_window, slice_predicate(dimensions)) else {
        return Ok(CauseWorkers::default());
    };
    let within = |since: i64, until: i64| {
        format!("ts >= to_timestamp_nanos({since}) AND ts < to_timestamp_nanos({until})")
    };
    let baseline = rca
        .baseline_window
        .as_ref()
        .map_or((incident.since, incident.since), |b| (b.since, b.until));
    let col = sli_column(rca);
    let sql = format!(
        "SELECT worker, sum(CASE WHEN {inc} THEN 1 ELSE 0 END) AS n, \
           avg(CASE WHEN {inc} THEN {col} END) AS during, \
           avg(CASE WHEN {base} THEN {col} END) AS before \
         FROM requests WHERE {span} AND {slice} AND worker IS NOT NULL AND worker <> '' GROUP BY 1",
        inc = within(incident.since, incident.until),
        base = within(baseline.0, baseline.1),
        span = within(baseline.0.min(incident.since), incident.until),
    );
    let rows = query(engine, &sql).await?;
    let mut workers: Vec<WorkerChange> = rows
        .iter()
        .filter_map(|r| {
            let requests = u64::try_from(int(r, "n")?).ok().filter(|&n| n > 0)?;
            Some(WorkerChange {
                worker: text(r, "worker")?.to_string(),
                requests,
                change_ms: float(r, "during")
                    .zip(float(r, "before"))
                    .map(|(d, b)| d - b),
            })
        })
        .collect();
    let serving = workers.len();
    workers.sort_by(|a, b| {
        let change = |w: &WorkerChange| w.change_ms.unwrap_or(f64::NEG_INFINITY);
        change(b)
            .total_cmp(&change(a))
            .then_with(|| b.requests.cmp(&a.requests))
            .then_with(|| a.worker.cmp(&b.worker))
    });
    workers.truncate(MAX_WORKERS + 2);
    Ok(CauseWorkers { workers, serving })
}

async fn resources(
    engine: &QueryEngine,
    ctx: &Ctx,
    workers: &[String],
) -> Result<Vec<ResourceSeries>, QueryError> {
    if workers.is_empty() {
        return Ok(Vec::new());
    }
    let names = RESOURCE_METRICS
        .iter()
        .map(|n| sql_string(n))
        .collect::<Vec<_>>()
        .join(", ");
    let list = workers
        .iter()
        .map(|w| sql_string(w))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "SELECT worker, name, {step} AS step, avg(value) AS value FROM metrics \
         WHERE {span} AND name IN ({names}) AND worker IN ({list}) AND value IS NOT NULL \
         GROUP BY 1, 2, 3",
        step = ctx.step_expression(),
        span = ctx.span_predicate(),
    );
    let rows = query(engine, &sql).await?;
    let mut series: BTreeMap<(String, String), BTreeMap<i64, f64>> = BTreeMap::new();
    for row in &rows {
        if let (Some(worker), Some(name), Some(step), Some(value)) = (
            text(row, "worker"),
            text(row, "name"),
            int(row, "step"),
            float(row, "value"),
        ) {
            series
                .entry((name.to_string(), worker.to_string()))
                .or_default()
                .insert(ctx.step_start_ms(step), value);
        }
    }
    let mut out = Vec::new();
    // metric order of RESOURCE_METRICS, then worker order of `workers`
    for metric in RESOURCE_METRICS {
        for worker in workers {
            if let Some(points) = series.get(&(metric.to_string(), worker.clone()))
                && !points.is_empty()
            {
                out.push(ResourceSeries {
                    metric: metric.into(),
                    worker: worker.clone(),
                    points: points.iter().map(|(s, v)| (*s, *v)).collect(),
                });
            }
        }
    }
    Ok(out)
}
