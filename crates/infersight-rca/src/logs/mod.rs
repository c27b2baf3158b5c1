//! Log evidence for an incident: templates whose rate changed most in the incident window, and
//! those whose rise preceded the onset (lead time, lift, support), within the localized slice;
//! plus the [`lineage`] graph that links the records of those templates to requests, traces,
//! sessions, workers and model versions for the report to walk.
//!
//! Decision rules (documented because users act on them):
//! - Counts: per `template_id`, the records in the baseline and in the incident window; rates are
//!   per minute. `lift` = incident rate / baseline rate with one pseudo-event in each window, so
//!   a template new in the incident has a finite lift.
//! - Significance: the incident count must lie in the Poisson upper tail of the baseline rate
//!   (plus half a pseudo-event) with p below [`FAMILY_ALPHA`] divided by the number of
//!   templates, with `lift` ≥ [`MIN_LIFT`] and at least [`MIN_SUPPORT`] records. Periodic noise
//!   (engine stats lines, access lines at a steady traffic) fails this test by its statistics
//!   alone; no template text is special.
//! - Lead: the most likely single upward step of the template's per-minute counts (Poisson
//!   likelihood ratio), searched from up to 30 minutes before the onset (at most half of a
//!   baseline that ends at the onset) to the end of the incident; `lead_seconds` = onset − first
//!   minute at the higher rate, positive when the rise preceded the onset.
//! - Rank: significant rises by `lift × ln(support)`, ties by lead; then templates whose rise
//!   (likelihood ratio ≥ [`MIN_STEP_LLR`]) preceded the onset although the incident as a whole
//!   is not significant for them, by lead. At most [`MAX_EVIDENCE`].
//! - Lines: only lines about what the system did ([`system_lines`]): prompt and response lines
//!   follow the users' text (a burst of new chats is a burst of new templates), the same rule as
//!   for log sequences.
//! - Slice: with a localized slice, `worker` filters the logs directly; other attributes join
//!   logs to the slice's `requests` by `request_id` (the column, else the `request_id` attribute
//!   `parse` lifts from engine lines) or `trace_id`, and also admit the logs of
//!   workers that served mostly (≥ [`SLICE_WORKER_SHARE`]) the slice's requests during the
//!   incident, since engine lines carry a worker but no request id column. The first of the top
//!   three slices that has any log records wins; with none, the evidence is fleet-wide and
//!   `subject` is empty.

mod lineage;
mod sequences;
mod stats;

use std::collections::{BTreeMap, HashMap};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use infersight_model::RequestRecord;

use crate::{LogEvidence, RcaContext};
use infersight_query::QueryEngine;
use infersight_query::QueryError;

pub use crate::contract::{LineageSummary, SequenceAnomaly};
pub use lineage::lineage;

/// Unexpected log sequences of the incident's requests and traces (see [`sequences`]), with
/// template texts.
pub async fn sequence_evidence(
    engine: &QueryEngine,
    ctx: &RcaContext,
) -> Result<Vec<SequenceAnomaly>, QueryError> {
    let mut found = sequences::sequence_anomalies(engine, ctx).await?;
    if found.is_empty() {
        return Ok(found);
    }
    let Some(windows) = Windows::resolve(engine, ctx).await? else {
        return Ok(found);
    };
    let mut ids: Vec<&str> = found
        .iter()
        .flat_map(|a| [a.template_id.as_deref(), a.after_template_id.as_deref()])
        .flatten()
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let texts = template_texts(engine, &windows, &ids).await?;
    for anomaly in &mut found {
        anomaly.template = anomaly
            .template_id
            .as_ref()
            .and_then(|id| texts.get(id).cloned());
        anomaly.after_template = anomaly
            .after_template_id
            .as_ref()
            .and_then(|id| texts.get(id).cloned());
    }
    Ok(found)
}

const MINUTE_NS: i64 = 60_000_000_000;
/// The longest stretch before the onset searched for a template's rise.
const LEAD_WINDOW_NS: i64 = 30 * MINUTE_NS;
/// Evidence items returned at most.
pub const MAX_EVIDENCE: usize = 10;
/// A rise must at least multiply the template's rate by this.
pub const MIN_LIFT: f64 = 1.5;
/// A rise needs at least this many incident records.
pub const MIN_SUPPORT: u64 = 3;
/// Family-wise false-alarm rate of the significance test (Bonferroni over templates).
pub const FAMILY_ALPHA: f64 = 0.01;
/// A pre-onset step counts as a rise from this Poisson log-likelihood ratio on.
pub const MIN_STEP_LLR: f64 = 10.0;
/// A worker stands for a request slice when at least this share of its incident requests is in it.
pub const SLICE_WORKER_SHARE: f64 = 0.5;
/// Slices tried in turn before falling back to the fleet.
const MAX_SLICES_TRIED: usize = 3;
/// Longest representative body used when a template has no `templates` row.
const MAX_BODY_CHARS: usize = 300;

/// Templates ranked by how much their rate rose in the incident, with their lead time.
pub async fn log_evidence(
    engine: &QueryEngine,
    ctx: &RcaContext,
) -> Result<Vec<LogEvidence>, QueryError> {
    let Some(windows) = Windows::resolve(engine, ctx).await? else {
        return Ok(Vec::new());
    };
    let mut chosen: Option<(BTreeMap<String, String>, HashMap<String, TemplateCounts>)> = None;
    for slice in ctx.root_causes.iter().take(MAX_SLICES_TRIED) {
        if slice.is_empty() {
            continue;
        }
        let counts = collect_counts(engine, &windows, &SliceFilter::new(slice, &windows)).await?;
        if counts.values().any(|c| c.baseline + c.incident > 0) {
            chosen = Some((slice.clone().into(), counts));
            break;
        }
    }
    let (subject, counts) = match chosen {
        Some(found) => found,
        None => (
            BTreeMap::new(),
            collect_counts(engine, &windows, &SliceFilter::fleet()).await?,
        ),
    };
    let ranked = rank(&windows, &counts);
    if ranked.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = ranked.iter().map(|s| s.template_id.as_str()).collect();
    let texts = template_texts(engine, &windows, &ids).await?;
    Ok(ranked
        .into_iter()
        .map(|scored| {
            let counts = &counts[&scored.template_id];
            LogEvidence {
                template: texts
                    .get(&scored.template_id)
                    .cloned()
                    .unwrap_or_else(|| scored.template_id.clone()),
                template_id: scored.template_id,
                lift: scored.lift,
                lead_seconds: scored.lead_seconds,
                baseline_count: counts.baseline,
                incident_count: counts.incident,
                subject: subject.clone().into(),
                lineage: None,
            }
        })
        .collect())
}

/// The windows of one evidence search, in ns, all half-open.
#[derive(Debug, Clone, Copy)]
struct Windows {
    baseline: (i64, i64),
    incident: (i64, i64),
    onset_ns: i64,
    /// Earliest start of a template's rise that still counts (onset minus the lead window).
    lead_start_ns: i64,
    /// Per-minute counts cover `[series_start, series_end)` (minute aligned).
    series_start_ns: i64,
    series_end_ns: i64,
    /// The baseline lies wholly before the series: its counts are a separate prior.
    baseline_disjoint: bool,
}

fn floor_minute(ns: i64) -> i64 {
    ns.div_euclid(MINUTE_NS) * MINUTE_NS
}

fn ceil_minute(ns: i64) -> i64 {
    floor_minute(ns.saturating_add(MINUTE_NS - 1))
}

impl Windows {
    /// Fills unbounded window ends from the data; `None` when there is nothing to compare.
    async fn resolve(
        engine: &QueryEngine,
        ctx: &RcaContext,
    ) -> Result<Option<Windows>, QueryError> {
        let ends = [
            ctx.baseline.since_ns,
            ctx.baseline.until_ns,
            ctx.incident.since_ns,
            ctx.incident.until_ns,
        ];
        let bounds = if ends.iter().any(Option::is_none) {
            match log_bounds(engine).await? {
                Some(bounds) => bounds,
                None => return Ok(None),
            }
        } else {
            (0, 0)
        };
        let baseline = (
            ctx.baseline.since_ns.unwrap_or(bounds.0),
            ctx.baseline.until_ns.unwrap_or(bounds.1),
        );
        let incident = (
            ctx.incident.since_ns.unwrap_or(bounds.0),
            ctx.incident.until_ns.unwrap_or(bounds.1),
        );
        if baseline.1 <= baseline.0 || incident.1 <= incident.0 {
            return Ok(None);
        }
        let onset_ns = ctx.onset_ns.clamp(incident.0, incident.1);
        // a baseline that runs up to the onset keeps at least half of itself as reference
        let mut lead_ns = LEAD_WINDOW_NS;
        if baseline.1 > onset_ns - LEAD_WINDOW_NS && baseline.0 < onset_ns {
            lead_ns = lead_ns.min(floor_minute((baseline.1 - baseline.0) / 2).max(MINUTE_NS));
        }
        let lead_start_ns = floor_minute(onset_ns - lead_ns);
        let baseline_disjoint = baseline.1 < lead_start_ns;
        let mut series_start_ns = lead_start_ns.min(incident.0);
        if !baseline_disjoint {
            series_start_ns = series_start_ns.min(baseline.0);
        }
        Ok(Some(Windows {
            baseline,
            incident,
            onset_ns,
            lead_start_ns,
            series_start_ns: floor_minute(series_start_ns),
            series_end_ns: ceil_minute(incident.1.max(if baseline_disjoint {
                i64::MIN
            } else {
                baseline.1
            })),
            baseline_disjoint,
        }))
    }

    fn minutes(range: (i64, i64)) -> f64 {
        (range.1 - range.0) as f64 / MINUTE_NS as f64
    }

    fn series_len(&self) -> usize {
        ((self.series_end_ns - self.series_start_ns) / MINUTE_NS).max(0) as usize
    }
}

async fn log_bounds(engine: &QueryEngine) -> Result<Option<(i64, i64)>, QueryError> {
    let output = engine
        .sql("SELECT CAST(min(ts) AS BIGINT), CAST(max(ts) AS BIGINT) FROM logs")
        .await?;
    for batch in &output.batches {
        let (lo, hi) = (i64_column(batch, 0)?, i64_column(batch, 1)?);
        if batch.num_rows() > 0 && lo.is_valid(0) && hi.is_valid(0) {
            return Ok(Some((lo.value(0), hi.value(0) + 1)));
        }
    }
    Ok(None)
}

/// `'text'` with quotes doubled.
/// The SQL condition, over the `log_class` column named `log_class`, that keeps the lines about
/// what the system did and leaves out users' text: prompt and response lines (`prompt_input`,
/// `response_output`) have templates that follow what users wrote, and the online miner keeps
/// minting new ones for them. Template evidence and log sequences both read logs through it.
pub(super) fn system_lines(log_class: &str) -> String {
    format!("({log_class} IS NULL OR {log_class} NOT IN ('prompt_input', 'response_output'))")
}

pub(super) fn sql_string(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

pub(super) fn ts_between(column: &str, range: (i64, i64)) -> String {
    format!(
        "{column} >= to_timestamp_nanos({}) AND {column} < to_timestamp_nanos({})",
        range.0, range.1
    )
}

pub(super) fn string_column(
    batch: &RecordBatch,
    index: usize,
) -> Result<arrow::array::StringArray, QueryError> {
    let array = cast(batch.column(index), &DataType::Utf8)
        .map_err(|e| QueryError::Internal(format!("log evidence: column {index}: {e}")))?;
    Ok(array.as_string::<i32>().clone())
}

pub(super) fn i64_column(
    batch: &RecordBatch,
    index: usize,
) -> Result<arrow::array::Int64Array, QueryError> {
    let array = cast(batch.column(index), &DataType::Int64)
        .map_err(|e| QueryError::Internal(format!("log evidence: column {index}: {e}")))?;
    Ok(array.as_primitive::<Int64Type>().clone())
}

pub(super) fn optional(array: &arrow::array::StringArray, row: usize) -> Option<&str> {
    array.is_valid(row).then(|| array.value(row))
}

/// How the logs of a slice are selected (see the module doc); empty = the fleet.
struct SliceFilter {
    /// Conditions on `logs` columns (alias `l`).
    direct: Vec<String>,
    /// A predicate over `requests` columns selecting the slice's requests, when the slice names
    /// request attributes.
    requests: Option<String>,
    /// Range of `requests` joined (requests start before their logs).
    requests_range: (i64, i64),
    /// Range whose requests decide which workers stand for the slice.
    worker_range: (i64, i64),
}

/// `column = 'value'`, where the empty value (how rollups show a missing attribute) is NULL too.
fn equals(expression: &str, value: &str) -> String {
    if value.is_empty() {
        format!("({expression} IS NULL OR {expression} = '')")
    } else {
        format!("{expression} = {}", sql_string(value))
    }
}

impl SliceFilter {
    fn fleet() -> SliceFilter {
        SliceFilter {
            direct: Vec::new(),
            requests: None,
            requests_range: (0, 0),
            worker_range: (0, 0),
        }
    }

    fn new(slice: &BTreeMap<String, String>, windows: &Windows) -> SliceFilter {
        let mut direct = Vec::new();
        let mut request_conditions = Vec::new();
        let mut names_request_attributes = false;
        for (key, value) in slice {
            let request_expression = if RequestRecord::COLUMNS.contains(&key.as_str()) {
                format!("CAST({key} AS VARCHAR)")
            } else {
                format!("json_get(attrs, {})", sql_string(key))
            };
            request_conditions.push(equals(&request_expression, value));
            if key == "worker" {
                direct.push(equals("l.worker", value));
            } else {
                names_request_attributes = true;
            }
        }
        SliceFilter {
            direct,
            requests: names_request_attributes.then(|| request_conditions.join(" AND ")),
            requests_range: (
                windows.series_start_ns.min(windows.baseline.0) - 10 * MINUTE_NS,
                windows.series_end_ns,
            ),
            worker_range: windows.incident,
        }
    }

    /// `WITH` clause, joins and the WHERE conditions it adds to a query over `logs l`.
    fn sql_parts(&self) -> (String, String, Vec<String>) {
        let mut conditions = self.direct.clone();
        let Some(predicate) = &self.requests else {
            return (String::new(), String::new(), conditions);
        };
        let range = ts_between("ts", self.requests_range);
        let worker_range = ts_between("ts", self.worker_range);
        let with = format!(
            "WITH slice_requests AS (SELECT DISTINCT request_id AS k FROM requests WHERE {range} AND request_id IS NOT NULL AND {predicate}), \
             slice_traces AS (SELECT DISTINCT trace_id AS k FROM requests WHERE {range} AND trace_id IS NOT NULL AND {predicate}), \
             slice_workers AS (SELECT worker AS k FROM requests WHERE {worker_range} AND worker IS NOT NULL GROUP BY worker \
               HAVING avg(CASE WHEN {predicate} THEN 1.0 ELSE 0.0 END) >= {SLICE_WORKER_SHARE}) "
        );
        // Engine lines carry the request id in their text, lifted into `attrs` by `parse`.
        let joins = " LEFT JOIN slice_requests sr \
                        ON COALESCE(l.request_id, json_get(l.attrs, 'request_id')) = sr.k \
                      LEFT JOIN slice_traces st ON l.trace_id = st.k \
                      LEFT JOIN slice_workers sw ON l.worker = sw.k"
            .to_string();
        conditions.push("(sr.k IS NOT NULL OR st.k IS NOT NULL OR sw.k IS NOT NULL)".into());
        (with, joins, conditions)
    }
}

/// One template's counts.
#[derive(Debug, Clone, Default)]
struct TemplateCounts {
    baseline: u64,
    incident: u64,
    /// Records per minute over the series range.
    per_minute: Vec<u64>,
}

/// Per template: per-minute counts over the series range and the two window counts, in one
/// scan (two when the baseline is far from the incident).
async fn collect_counts(
    engine: &QueryEngine,
    windows: &Windows,
    slice: &SliceFilter,
) -> Result<HashMap<String, TemplateCounts>, QueryError> {
    let mut out: HashMap<String, TemplateCounts> = HashMap::new();
    let series_len = windows.series_len();
    let series_range = (windows.series_start_ns, windows.series_end_ns);
    let mut scans = vec![series_range];
    if windows.baseline_disjoint {
        scans.push(windows.baseline);
    }
    for (scan_index, scan_range) in scans.into_iter().enumerate() {
        let (with, joins, mut conditions) = slice.sql_parts();
        conditions.insert(0, ts_between("l.ts", scan_range));
        conditions.insert(1, "l.template_id IS NOT NULL".into());
        conditions.insert(2, system_lines("l.log_class"));
        let sql = format!(
            "{with}SELECT l.template_id, CAST(l.ts AS BIGINT) / {MINUTE_NS} AS minute, count(*) AS records, \
             sum(CASE WHEN {} THEN 1 ELSE 0 END) AS in_baseline, \
             sum(CASE WHEN {} THEN 1 ELSE 0 END) AS in_incident \
             FROM logs l{joins} WHERE {} GROUP BY 1, 2",
            ts_between("l.ts", windows.baseline),
            ts_between("l.ts", windows.incident),
            conditions.join(" AND ")
        );
        let output = engine.sql(&sql).await?;
        for batch in &output.batches {
            let ids = string_column(batch, 0)?;
            let minutes = i64_column(batch, 1)?;
            let records = i64_column(batch, 2)?;
            let in_baseline = i64_column(batch, 3)?;
            let in_incident = i64_column(batch, 4)?;
            for row in 0..batch.num_rows() {
                let Some(id) = optional(&ids, row) else {
                    continue;
                };
                let entry = out.entry(id.to_string()).or_insert_with(|| TemplateCounts {
                    per_minute: vec![0; series_len],
                    ..TemplateCounts::default()
                });
                let count = |a: &arrow::array::Int64Array| {
                    if a.is_valid(row) {
                        a.value(row).max(0) as u64
                    } else {
                        0
                    }
                };
                entry.baseline += count(&in_baseline);
                if scan_index == 0 {
                    entry.incident += count(&in_incident);
                    if minutes.is_valid(row) {
                        let offset = minutes.value(row) * MINUTE_NS - windows.series_start_ns;
                        if offset >= 0
                            && let Some(slot) =
                                entry.per_minute.get_mut((offset / MINUTE_NS) as usize)
                        {
                            *slot += count(&records);
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

/// One template's verdict.
#[derive(Debug, Clone)]
struct Scored {
    template_id: String,
    lift: f64,
    lead_seconds: f64,
    significant: bool,
    score: f64,
}

fn rank(windows: &Windows, counts: &HashMap<String, TemplateCounts>) -> Vec<Scored> {
    let baseline_minutes = Windows::minutes(windows.baseline);
    let incident_minutes = Windows::minutes(windows.incident);
    let ln_alpha = (FAMILY_ALPHA / counts.len().max(1) as f64).ln();
    let first_candidate =
        ((windows.lead_start_ns - windows.series_start_ns) / MINUTE_NS).max(0) as usize;
    let mut significant = Vec::new();
    let mut precursors = Vec::new();
    for (template_id, c) in counts {
        let lift = stats::lift(c.baseline, baseline_minutes, c.incident, incident_minutes);
        let expected = (c.baseline as f64 + 0.5) / baseline_minutes * incident_minutes;
        let is_significant = c.incident >= MIN_SUPPORT
            && lift >= MIN_LIFT
            && stats::ln_poisson_upper_tail(c.incident, expected) <= ln_alpha;
        let prior = if windows.baseline_disjoint {
            (c.baseline, baseline_minutes)
        } else {
            (0, 0.0)
        };
        let step = stats::upward_change_point(&c.per_minute, prior, first_candidate);
        let lead_of = |index: usize| {
            let rise_ns = windows.series_start_ns + index as i64 * MINUTE_NS;
            (windows.onset_ns - rise_ns) as f64 / 1e9
        };
        if is_significant {
            significant.push(Scored {
                template_id: template_id.clone(),
                lift,
                lead_seconds: step.map_or(0.0, |s| lead_of(s.index)),
                significant: true,
                score: lift * (c.incident as f64).ln(),
            });
        } else if let Some(step) = step
            && step.llr >= MIN_STEP_LLR
            && step.rate_after >= MIN_LIFT * step.rate_before
            && lead_of(step.index) > 0.0
        {
            precursors.push(Scored {
                template_id: template_id.clone(),
                lift,
                lead_seconds: lead_of(step.index),
                significant: false,
                score: step.llr,
            });
        }
    }
    significant.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.lead_seconds.total_cmp(&a.lead_seconds))
            .then(a.template_id.cmp(&b.template_id))
    });
    precursors.sort_by(|a, b| {
        b.lead_seconds
            .total_cmp(&a.lead_seconds)
            .then(b.score.total_cmp(&a.score))
            .then(a.template_id.cmp(&b.template_id))
    });
    debug_assert!(significant.iter().all(|s| s.significant));
    significant.extend(precursors);
    significant.truncate(MAX_EVIDENCE);
    significant
}

/// Text of each template: its latest `templates` row, else a representative body.
async fn template_texts(
    engine: &QueryEngine,
    windows: &Windows,
    ids: &[&str],
) -> Result<HashMap<String, String>, QueryError> {
    let list = ids
        .iter()
        .map(|id| sql_string(id))
        .collect::<Vec<_>>()
        .join(", ");
    let output = engine
        .sql(&format!(
            "SELECT template_id, template, CAST(ts AS BIGINT) FROM templates \
             WHERE template_id IN ({list}) AND template IS NOT NULL"
        ))
        .await?;
    let mut latest: HashMap<String, (i64, String)> = HashMap::new();
    for batch in &output.batches {
        let id_column = string_column(batch, 0)?;
        let text_column = string_column(batch, 1)?;
        let ts_column = i64_column(batch, 2)?;
        for row in 0..batch.num_rows() {
            let (Some(id), Some(text)) = (optional(&id_column, row), optional(&text_column, row))
            else {
                continue;
            };
            let ts = if ts_column.is_valid(row) {
                ts_column.value(row)
            } else {
                i64::MIN
            };
            match latest.get(id) {
                Some((seen, _)) if *seen > ts => {}
                _ => {
                    latest.insert(id.to_string(), (ts, text.to_string()));
                }
            }
        }
    }
    let mut texts: HashMap<String, String> =
        latest.into_iter().map(|(id, (_, t))| (id, t)).collect();
    let missing: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| !texts.contains_key(*id))
        .collect();
    if !missing.is_empty() {
        let list = missing
            .iter()
            .map(|id| sql_string(id))
            .collect::<Vec<_>>()
            .join(", ");
        let output = engine
            .sql(&format!(
                "SELECT template_id, min(body) FROM logs WHERE {} AND template_id IN ({list}) GROUP BY 1",
                ts_between("ts", (windows.series_start_ns.min(windows.baseline.0), windows.series_end_ns))
            ))
            .await?;
        for batch in &output.batches {
            let id_column = string_column(batch, 0)?;
            let body_column = string_column(batch, 1)?;
            for row in 0..batch.num_rows() {
                if let (Some(id), Some(body)) =
                    (optional(&id_column, row), optional(&body_column, row))
                {
                    texts.insert(id.to_string(), body.chars().take(MAX_BODY_CHARS).collect());
                }
            }
        }
    }
    Ok(texts)
}

#[cfg(test)]
mod tests;
