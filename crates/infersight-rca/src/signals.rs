//! Resource and behaviour signals for an incident: series read with SQL from `metrics`, `spans`
//! and `requests` (a handful of grouped queries over the baseline + incident windows, never one
//! query per subject), judged by the detectors of `infersight_analytics::detect`.
//!
//! What each signal reads, and the thresholds added on top of the detectors' defaults:
//! - `gpu_memory_leak` per worker, judged per device (the `device` column, else the OTel
//!   `hw.id` label) and reported for the worker: the used fraction of the device's capacity
//!   (`GpuMemory::fraction`: used / total, used / (used + free) or the reported ratio, whatever
//!   the convention; used bytes only where no capacity is reported) and `gpu_utilization_ratio`
//!   (the busiest series of the device at each sample) of the incident, extended back to at
//!   least [`MIN_TREND_POINTS`] samples; the worker's mean e2e per minute as latency evidence.
//!   A metrics worker that serves no request (a node agent's `host.name`) hands its signals to
//!   the request worker whose rows carry that name as an attribute value (the pod on the host).
//! - `slow_worker` per worker whose GPU clock throttles (module [`throttle`]).
//! - `queue_buildup` per (model, model_version) from `requests` (mean `queue_ms` against
//!   arrivals per minute) and per worker from `requests_waiting`; queue rise ≥ 250 ms or ≥ 2
//!   waiting requests.
//! - `kv_cache_pressure` / `preemption_storm` per worker: the per-minute peak of
//!   `kv_cache_usage_ratio` (watermark 0.95 in ≥ 50 % of the incident's minutes, < 50 % of the
//!   baseline's) and the `preemptions_total` counter turned into per-minute increases (Poisson
//!   tail p < 1e-4, ×3, ≥ 10 more than expected).
//! - `cache_pollution` per polluting tenant: each tenant's prefix-cache hit rate
//!   (Σcached/Σinput per minute, on workers that cached anything) and its access entropy, the
//!   entropy of a uniform access over the distinct 512-token prefix blocks it missed per minute
//!   (log2(1 + uncached tokens / 512)); victims are named in the detail.
//! - `truncation_surge` per model: finish_reason = 'length' counts per minute.
//! - `resonance` per tenant: per minute, the mean guardrail injection score, the share of
//!   speculative requests whose drafts were mostly rejected (accepted < 20 % of drafted) and the
//!   share of drafted tokens rolled back (shares, so load swings do not rise with them); change
//!   detection with a 15-minute minimum baseline and a 0.01 floor on the noise scale.
//! - `prompt_drift` per tenant: the prompts of `logs` rows of class `prompt_input` (the redacted
//!   `prompt` attribute the parse stage splits out of `[PROMPT] … [RESPONSE] …` lines), evenly
//!   spaced samples (in SQL: at most [`PROMPT_PRESAMPLE`] lines per side of the split, then at
//!   most [`PROMPT_SAMPLE`] per tenant and side, ties in time broken by the attributes and the
//!   text so the choice is deterministic), with the tenant and output length of the request they belong to (joined by request id,
//!   which is the row's, an attribute or a leading `request_id=` field of the prompt text; a
//!   leading `tenant=` field stands in when no request row matches). MinHash similarity to the
//!   baseline's prompts falling by ≥ 30 %, output-length 3σ outliers as corroboration; the
//!   detail holds numbers only, never prompt text.
//! - `error_burst` per worker and per (model, model_version): errored requests per minute.
//! - `trace_context_loss` per service and attribute: entry spans (no parent among the stored
//!   spans: roots, or orphans of a client that exports nothing) are broken when they have no
//!   child, their trace reaches no other service, or their trace has a second entry (a span
//!   whose parent is missing); at most [`ENTRY_SAMPLE`] per service and side are read with their
//!   attributes. The service as a whole and each group of its entries by a low-cardinality
//!   attribute (resource or span, whatever it is named) whose broken share jumped (own baseline,
//!   or the service's for a group new in the incident) compete; the group that best sets the
//!   broken entries apart (F1) is the subject, ties going to a value new in the incident, then to
//!   the service as a whole, then to a key naming a build, then to an OTel resource key, then
//!   to fewer distinct values.
//! - `flow_control_stall` per (service, service.version): root-span duration minus the engine's
//!   e2e for requests with ≥ 256 output tokens; fires when the incident median of the per-minute
//!   means is ≥ 100 ms and ≥ 5 robust σ above the service's baseline.
//!
//! A detector that lacks data for a subject (too short a baseline) skips that subject; only SQL
//! failures are errors.

mod minutes;
mod throttle;

use minutes::Statement;
pub use minutes::{LATE_MINUTES, MinuteCache};

use std::collections::{BTreeMap, HashMap};

use arrow::array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use infersight_analytics::detect::stats::{mad, median};
use infersight_analytics::detect::{
    CacheMinute, CachePollutionParams, CountSample, DetectParams, ErrorBurstParams, Finding,
    KvCacheInput, KvCacheParams, LeakParams, MemoryInput, MemoryUnit, PromptDriftParams,
    PromptSample, ProportionParams, QueueInput, QueueParams, ResonanceInput, ResonanceParams,
    TenantCacheSeries, cache_pollution, context_loss, error_burst, gpu_memory_leak,
    kv_cache_pressure, prompt_drift, prompt_features, queue_buildup, resonance, truncation_surge,
};

use crate::{RcaContext, RcaReport, RootCause, Signal};
use infersight_model::RequestRecord;
use infersight_model::attrs::{ValueTexts, read_attrs};
use infersight_model::mapping::names_a_version;
use infersight_query::QueryEngine;
use infersight_query::QueryError;

const MINUTE_NS: i64 = 60_000_000_000;
/// SQL: the request failed (an error status, or an error type recorded).
const FAILED: &str = "(status = 'error' OR (error_type IS NOT NULL AND error_type <> ''))";
/// At most this many subjects of one kind are judged (the busiest).
const MAX_SUBJECTS: usize = 64;
/// Trend detectors want at least this many samples.
const MIN_TREND_POINTS: usize = 24;
/// Prefix-cache block size used to turn missed tokens into distinct blocks.
const PREFIX_BLOCK_TOKENS: f64 = 512.0;
/// A request whose accepted drafts are below this share of its drafted tokens "failed"
/// rejection sampling.
const REJECTION_SHARE: f64 = 0.2;
/// Output length from which a streamed response spans several flow-control windows.
const LONG_OUTPUT_TOKENS: i64 = 256;
const MIN_STALL_MS: f64 = 100.0;
const MIN_STALL_Z: f64 = 5.0;
/// Prompt lines kept per side of the split before anything is parsed (evenly spaced in time):
/// bounds the cost of a busy window (JSON and regex work on this many rows at most); a tenant
/// with less than ≈ 1/400 of the prompts may then have too few to judge.
const PROMPT_PRESAMPLE: i64 = 8_192;
/// Prompts read per tenant and side of the split (evenly spaced among the presampled ones); the
/// detector compares at most `PromptDriftParams::max_sample` of them.
const PROMPT_SAMPLE: i64 = 256;
/// MinHash slots per prompt.
const PROMPT_HASHES: usize = 64;
/// Request rows sampled to find attributes that play the tenant's part.
const TENANT_KEY_SAMPLE: i64 = 4_096;
/// Most attributes judged as tenants, and most distinct values of one.
const MAX_TENANT_KEYS: usize = 4;
const MAX_TENANT_VALUES: usize = 64;
/// Entry spans sampled per service and side of the split for trace-context loss.
const ENTRY_SAMPLE: i64 = 4_096;
/// Entry spans kept per service and minute where the watcher keeps minutes between runs
/// ([`MinuteCache`]); the sides are then sampled down to [`ENTRY_SAMPLE`] from them.
const ENTRY_MINUTE_SAMPLE: i64 = 1_024;
/// Parents and the rest of a trace are looked up this far beyond the window.
const TRACE_MARGIN_NS: i64 = 5 * MINUTE_NS;
/// An attribute key with more distinct values (among a service's sampled entry spans) is an
/// identifier, not a group.
const MAX_KEY_VALUES: usize = 32;
/// Two groups whose F1 differs by at most this much fit the broken entries equally well.
const F1_TIE: f64 = 0.02;
/// Requests are joined to prompt lines within the window widened by this much (a line is
/// written when the engine starts the request, the request row is dated at its span's start).
const PROMPT_JOIN_MARGIN_NS: i64 = 5 * MINUTE_NS;

type Series = Vec<(i64, f64)>;
use infersight_model::mapping::GpuMemory;
use infersight_model::signal::{SignalKind, Subject};
type StallPoint = (i64, f64, f64);

/// Every signal the telemetry of `ctx`'s windows shows, strongest first.
pub async fn collect_signals(
    engine: &QueryEngine,
    ctx: &RcaContext,
) -> Result<Vec<Signal>, QueryError> {
    collect(engine, ctx, None).await
}

/// [`collect_signals`] for a caller that runs it again and again over a sliding window (the
/// watcher): the statements whose rows each belong to one minute (requests per worker and
/// minute, metric samples, entry spans, flow-control overhead) read only the minutes `cache`
/// does not hold as settled; the window starts on a whole minute.
pub async fn collect_signals_cached(
    engine: &QueryEngine,
    ctx: &RcaContext,
    cache: &mut MinuteCache,
) -> Result<Vec<Signal>, QueryError> {
    collect(engine, ctx, Some(cache)).await
}

async fn collect(
    engine: &QueryEngine,
    ctx: &RcaContext,
    mut cache: Option<&mut MinuteCache>,
) -> Result<Vec<Signal>, QueryError> {
    let window = Window::of(ctx);
    let mut signals = Vec::new();
    let per_worker = read_worker_minutes(engine, &window, cache.as_deref_mut()).await?;
    signals.extend(worker_signals(&per_worker, &window));
    let metrics = read_metric_samples(engine, &window, cache.as_deref_mut()).await?;
    let mut worker_signals_from_metrics = metric_signals(&metrics, &per_worker, &window);
    worker_signals_from_metrics.extend(throttle::throttled_workers(&metrics, window.split_ns));
    attribute_to_request_workers(
        engine,
        &window,
        &per_worker,
        &mut worker_signals_from_metrics,
    )
    .await?;
    signals.extend(slice_queue_buildups(
        &signals,
        &worker_signals_from_metrics,
        &per_worker,
    ));
    signals.extend(worker_signals_from_metrics);
    let tenants = read_tenant_minutes(engine, &window, &TenantSource::Column).await?;
    signals.extend(tenant_signals(&TenantSource::Column, &tenants, &window));
    let attribute_tenants = if tenants.len() < 2 {
        tenant_attribute_keys(engine, &window).await?
    } else {
        Vec::new()
    };
    for source in attribute_tenants {
        let by_value = read_tenant_minutes(engine, &window, &source).await?;
        signals.extend(tenant_signals(&source, &by_value, &window));
    }
    signals.extend(prompt_drift_signals(engine, &window).await?);
    signals.extend(trace_signals(engine, &window, cache).await?);
    signals.sort_by(|a, b| b.strength.total_cmp(&a.strength));
    Ok(signals)
}

// ------------------------------------------------------------------------ windows and SQL

/// The analysed time range: baseline start (or the incident's start minus an hour) to the
/// incident's end, and the split between them.
#[derive(Debug, Clone, Copy)]
struct Window {
    since_ns: Option<i64>,
    until_ns: Option<i64>,
    split_ns: i64,
}

impl Window {
    fn of(ctx: &RcaContext) -> Window {
        let split_ns = ctx.incident.since_ns.unwrap_or(ctx.onset_ns);
        let since_ns = ctx
            .baseline
            .since_ns
            .map(|s| s.min(split_ns))
            .or(ctx.baseline.until_ns.map(|u| u - 60 * MINUTE_NS));
        Window {
            since_ns,
            until_ns: ctx.incident.until_ns,
            split_ns,
        }
    }

    /// `ts` predicate of the window, for column `column`.
    fn predicate(&self, column: &str) -> String {
        self.widened_predicate(column, 0)
    }

    /// `ts` predicate of the window widened by `margin_ns` on both sides.
    fn widened_predicate(&self, column: &str, margin_ns: i64) -> String {
        let mut parts = vec!["TRUE".to_string()];
        if let Some(since) = self.since_ns {
            let since = since.saturating_sub(margin_ns);
            parts.push(format!("{column} >= to_timestamp_nanos({since})"));
        }
        if let Some(until) = self.until_ns {
            let until = until.saturating_add(margin_ns);
            parts.push(format!("{column} < to_timestamp_nanos({until})"));
        }
        parts.join(" AND ")
    }
}

/// Columns of a result, cast once to the types the collectors read.
struct Rows {
    batches: Vec<RecordBatch>,
}

impl Rows {
    async fn query(engine: &QueryEngine, sql: &str) -> Result<Rows, QueryError> {
        let started = std::time::Instant::now();
        let output = engine.sql(sql).await?;
        tracing::debug!(
            elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
            rows = output.batches.iter().map(RecordBatch::num_rows).sum::<usize>(),
            statement = %sql.chars().take(60).collect::<String>(),
            "signals: query"
        );
        Ok(Rows {
            batches: output.batches,
        })
    }

    fn column(
        &self,
        batch: &RecordBatch,
        name: &str,
        to: &DataType,
    ) -> Result<ArrayRef, QueryError> {
        let column = batch
            .column_by_name(name)
            .ok_or_else(|| QueryError::Internal(format!("signal query lacks column {name}")))?;
        cast(column, to).map_err(|e| QueryError::Internal(format!("column {name}: {e}")))
    }

    /// Calls `f` for each row with accessors for string, float and integer columns.
    fn for_each(
        &self,
        strings: &[&str],
        floats: &[&str],
        ints: &[&str],
        mut f: impl FnMut(&[Option<&str>], &[Option<f64>], &[Option<i64>]),
    ) -> Result<(), QueryError> {
        for batch in &self.batches {
            let s: Vec<ArrayRef> = strings
                .iter()
                .map(|n| self.column(batch, n, &DataType::Utf8))
                .collect::<Result<_, _>>()?;
            let fl: Vec<ArrayRef> = floats
                .iter()
                .map(|n| self.column(batch, n, &DataType::Float64))
                .collect::<Result<_, _>>()?;
            let it: Vec<ArrayRef> = ints
                .iter()
                .map(|n| self.column(batch, n, &DataType::Int64))
                .collect::<Result<_, _>>()?;
            let s: Vec<&StringArray> = s.iter().filter_map(|a| a.as_any().downcast_ref()).collect();
            let fl: Vec<&Float64Array> = fl
                .iter()
                .filter_map(|a| a.as_any().downcast_ref())
                .collect();
            let it: Vec<&Int64Array> = it
                .iter()
                .filter_map(|a| a.as_any().downcast_ref())
                .collect();
            let mut sv = Vec::with_capacity(s.len());
            let mut fv = Vec::with_capacity(fl.len());
            let mut iv = Vec::with_capacity(it.len());
            for row in 0..batch.num_rows() {
                sv.clear();
                fv.clear();
                iv.clear();
                sv.extend(s.iter().map(|a| a.is_valid(row).then(|| a.value(row))));
                fv.extend(
                    fl.iter().map(|a| {
                        (a.is_valid(row) && a.value(row).is_finite()).then(|| a.value(row))
                    }),
                );
                iv.extend(it.iter().map(|a| a.is_valid(row).then(|| a.value(row))));
                f(&sv, &fv, &iv);
            }
        }
        Ok(())
    }
}

/// Rows of a statement whose rows each belong to one minute (its `time_column`) over `w`: read
/// whole, or, with a cache, only from the first minute it does not hold as settled (module
/// [`minutes`]; the window then starts on a whole minute). `sql` writes the statement for a
/// window.
async fn minute_rows(
    engine: &QueryEngine,
    cache: Option<&mut MinuteCache>,
    name: Statement,
    (w, time_column): (&Window, &str),
    sql: impl Fn(&Window) -> String,
) -> Result<Rows, QueryError> {
    let (Some(cache), Some(since), Some(until)) = (cache, w.since_ns, w.until_ns) else {
        return Rows::query(engine, &sql(w)).await;
    };
    let since = since.div_euclid(MINUTE_NS) * MINUTE_NS;
    let plan = cache.plan(name, since, until);
    let part = Window {
        since_ns: Some(plan.from_ns),
        until_ns: Some(until),
        split_ns: w.split_ns,
    };
    let fresh = Rows::query(engine, &sql(&part)).await?;
    let batches = cache.merge(name, since, plan, time_column, fresh.batches)?;
    Ok(Rows { batches })
}

fn subject(pairs: &[(&str, &str)]) -> Subject {
    Subject::of(pairs.iter().copied())
}

fn signal(finding: &Finding, subject: Subject, kind: SignalKind) -> Signal {
    Signal {
        kind,
        subject,
        onset: finding.onset_ns,
        strength: if finding.score.is_finite() {
            finding.score.max(0.0)
        } else {
            0.0
        },
        detail: finding.detail.clone(),
    }
}

fn sort_series(series: &mut Series) {
    series.sort_by_key(|p| p.0);
}

/// Keys ordered by weight, at most [`MAX_SUBJECTS`].
fn busiest<K: Clone + Ord>(weights: &BTreeMap<K, f64>) -> Vec<K> {
    let mut keys: Vec<(&K, f64)> = weights.iter().map(|(k, w)| (k, *w)).collect();
    keys.sort_by(|a, b| b.1.total_cmp(&a.1));
    keys.into_iter()
        .take(MAX_SUBJECTS)
        .map(|(k, _)| k.clone())
        .collect()
}

// ------------------------------------------------------------------------ requests per worker

/// Per (worker, model, model_version) and minute: the request-side counts.
#[derive(Debug, Clone, Copy, Default)]
struct WorkerMinute {
    requests: f64,
    errors: f64,
    truncated: f64,
    finished: f64,
    queue_sum_ms: f64,
    e2e_sum_ms: f64,
}

struct WorkerMinutes {
    /// (worker, model, model_version) → minute → counts
    cells: BTreeMap<(String, String, String), BTreeMap<i64, WorkerMinute>>,
}

async fn read_worker_minutes(
    engine: &QueryEngine,
    w: &Window,
    cache: Option<&mut MinuteCache>,
) -> Result<WorkerMinutes, QueryError> {
    let sql = |w: &Window| {
        format!(
            "SELECT COALESCE(worker, '') AS worker, COALESCE(model, '') AS model, \
         COALESCE(model_version, '') AS model_version, \
         date_trunc('minute', ts) AS minute, count(*) AS n, \
         sum(CASE WHEN {FAILED} THEN 1 ELSE 0 END) AS errors, \
         sum(CASE WHEN finish_reason = 'length' THEN 1 ELSE 0 END) AS truncated, \
         sum(CASE WHEN finish_reason IS NOT NULL AND finish_reason <> '' THEN 1 ELSE 0 END) AS finished, \
         sum(COALESCE(queue_ms, 0.0)) AS queue_sum, sum(COALESCE(e2e_ms, 0.0)) AS e2e_sum \
         FROM requests WHERE {} GROUP BY 1, 2, 3, 4",
            w.predicate("ts")
        )
    };
    let rows = minute_rows(engine, cache, Statement::WorkerMinutes, (w, "minute"), sql).await?;
    let mut cells: BTreeMap<(String, String, String), BTreeMap<i64, WorkerMinute>> =
        BTreeMap::new();
    rows.for_each(
        &["worker", "model", "model_version"],
        &[
            "n",
            "errors",
            "truncated",
            "finished",
            "queue_sum",
            "e2e_sum",
        ],
        &["minute"],
        |s, f, i| {
            let Some(minute) = i[0] else { return };
            let key = (
                s[0].unwrap_or("").to_string(),
                s[1].unwrap_or("").to_string(),
                s[2].unwrap_or("").to_string(),
            );
            let cell = cells.entry(key).or_default().entry(minute).or_default();
            cell.requests += f[0].unwrap_or(0.0);
            cell.errors += f[1].unwrap_or(0.0);
            cell.truncated += f[2].unwrap_or(0.0);
            cell.finished += f[3].unwrap_or(0.0);
            cell.queue_sum_ms += f[4].unwrap_or(0.0);
            cell.e2e_sum_ms += f[5].unwrap_or(0.0);
        },
    )?;
    Ok(WorkerMinutes { cells })
}

impl WorkerMinutes {
    /// Sums the cells by a key derived from (worker, model, model_version).
    fn group<K: Ord + Clone>(
        &self,
        key_of: impl Fn(&(String, String, String)) -> Option<K>,
    ) -> BTreeMap<K, BTreeMap<i64, WorkerMinute>> {
        let mut out: BTreeMap<K, BTreeMap<i64, WorkerMinute>> = BTreeMap::new();
        for (key, minutes) in &self.cells {
            let Some(k) = key_of(key) else { continue };
            let target = out.entry(k).or_default();
            for (minute, cell) in minutes {
                let t = target.entry(*minute).or_default();
                t.requests += cell.requests;
                t.errors += cell.errors;
                t.truncated += cell.truncated;
                t.finished += cell.finished;
                t.queue_sum_ms += cell.queue_sum_ms;
                t.e2e_sum_ms += cell.e2e_sum_ms;
            }
        }
        out
    }
}

fn weights<K: Ord + Clone>(groups: &BTreeMap<K, BTreeMap<i64, WorkerMinute>>) -> BTreeMap<K, f64> {
    groups
        .iter()
        .map(|(k, m)| (k.clone(), m.values().map(|c| c.requests).sum()))
        .collect()
}

/// Error bursts (worker; model × version), truncation surges (model), queue build-up
/// (model × version).
fn worker_signals(data: &WorkerMinutes, w: &Window) -> Vec<Signal> {
    let mut out = Vec::new();
    let by_worker = data.group(|k| (!k.0.is_empty()).then(|| k.0.clone()));
    let by_slice = data.group(|k| (!k.1.is_empty()).then(|| (k.1.clone(), k.2.clone())));
    let by_model = data.group(|k| (!k.1.is_empty()).then(|| k.1.clone()));
    let burst = ErrorBurstParams::default();
    let errors_of = |minutes: &BTreeMap<i64, WorkerMinute>| -> Series {
        minutes.iter().map(|(t, c)| (*t, c.errors)).collect()
    };
    for worker in busiest(&weights(&by_worker)) {
        let series = errors_of(&by_worker[&worker]);
        if let Ok(Some(finding)) = error_burst(&[("worker", &worker)], &series, w.split_ns, &burst)
        {
            out.push(signal(
                &finding,
                subject(&[("worker", &worker)]),
                SignalKind::ErrorBurst,
            ));
        }
    }
    for (model, version) in busiest(&weights(&by_slice)) {
        let minutes = &by_slice[&(model.clone(), version.clone())];
        let series = errors_of(minutes);
        let pairs = [
            ("model", model.as_str()),
            ("model_version", version.as_str()),
        ];
        let Ok(Some(finding)) = error_burst(&pairs, &series, w.split_ns, &burst) else {
            continue;
        };
        out.push(signal(&finding, subject(&pairs), SignalKind::ErrorBurst));
    }
    let proportion = ProportionParams::default();
    for model in busiest(&weights(&by_model)) {
        let counts: Vec<CountSample> = by_model[&model]
            .iter()
            .map(|(t, c)| CountSample {
                ts_ns: *t,
                hits: c.truncated.max(0.0) as u64,
                total: (c.finished.max(c.truncated)).max(0.0) as u64,
            })
            .collect();
        if let Ok(Some(finding)) = truncation_surge(&model, &counts, w.split_ns, &proportion) {
            out.push(signal(
                &finding,
                subject(&[("model", &model)]),
                SignalKind::TruncationSurge,
            ));
        }
    }
    let queue = QueueParams {
        min_increase: 250.0,
        ..QueueParams::default()
    };
    for (model, version) in busiest(&weights(&by_slice)) {
        let minutes = &by_slice[&(model.clone(), version.clone())];
        let waiting: Series = minutes
            .iter()
            .filter(|(_, c)| c.requests > 0.0)
            .map(|(t, c)| (*t, c.queue_sum_ms / c.requests))
            .collect();
        let arrivals: Series = minutes.iter().map(|(t, c)| (*t, c.requests)).collect();
        let input = QueueInput {
            worker: &model,
            waiting: &waiting,
            arrivals: &arrivals,
        };
        if let Ok(Some(finding)) = queue_buildup(&input, &queue) {
            let pairs = [
                ("model", model.as_str()),
                ("model_version", version.as_str()),
            ];
            let mut s = signal(&finding, subject(&pairs), SignalKind::QueueBuildup);
            s.detail = format!("mean queue_ms per minute: {}", finding.detail);
            out.push(s);
        }
    }
    out
}

// ------------------------------------------------------------------------ metrics per worker

/// One worker's metric samples: canonical name → samples for the worker's own series, and per
/// device (`device` column, else the OTel `hw.id` label) the GPU series.
#[derive(Debug, Default)]
struct WorkerMetrics {
    names: BTreeMap<String, Series>,
    devices: BTreeMap<String, BTreeMap<String, Series>>,
}

/// Per worker, its samples.
type MetricSamples = BTreeMap<String, WorkerMetrics>;

/// GPU series, read per device: the four memory names of [`GpuMemory::NAMES`] and utilization.
const GPU_UTILIZATION: &str = "gpu_utilization_ratio";
const WORKER_METRICS: [&str; 3] = [
    "kv_cache_usage_ratio",
    "preemptions_total",
    "requests_waiting",
];

async fn read_metric_samples(
    engine: &QueryEngine,
    w: &Window,
    cache: Option<&mut MinuteCache>,
) -> Result<MetricSamples, QueryError> {
    let quoted = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut gpu_names = GpuMemory::NAMES.to_vec();
    gpu_names.extend([
        GPU_UTILIZATION,
        throttle::GPU_SM_CLOCK,
        throttle::GPU_TEMPERATURE,
    ]);
    let (gpu, worker) = (quoted(&gpu_names), quoted(&WORKER_METRICS));
    // One sample per (worker, device, name, scrape time): a worker's own series are averaged
    // over what else tells them apart (an engine index); a GPU's utilization takes the busiest
    // of its series (OTel `hw.gpu.utilization` has one per task: general, encoder, decoder).
    let sql = |w: &Window| {
        format!(
            "SELECT worker, CASE WHEN name IN ({gpu}) \
           THEN COALESCE(NULLIF(device, ''), json_get(labels, 'hw.id'), '') ELSE '' END AS device, \
           name, ts, avg(value) AS value, max(value) AS peak FROM metrics \
         WHERE {} AND name IN ({gpu}, {worker}) AND worker IS NOT NULL AND worker <> '' \
         GROUP BY 1, 2, 3, 4",
            w.predicate("ts")
        )
    };
    let rows = minute_rows(engine, cache, Statement::MetricSamples, (w, "ts"), sql).await?;
    let mut out: MetricSamples = BTreeMap::new();
    rows.for_each(
        &["worker", "device", "name"],
        &["value", "peak"],
        &["ts"],
        |s, f, i| {
            let (Some(worker), Some(name), Some(value), Some(ts)) = (s[0], s[2], f[0], i[0]) else {
                return;
            };
            let entry = out.entry(worker.to_string()).or_default();
            if gpu_names.contains(&name) {
                let value = if name == GPU_UTILIZATION {
                    f[1].unwrap_or(value)
                } else {
                    value
                };
                entry
                    .devices
                    .entry(s[1].unwrap_or("").to_string())
                    .or_default()
                    .entry(name.to_string())
                    .or_default()
                    .push((ts, value));
            } else {
                entry
                    .names
                    .entry(name.to_string())
                    .or_default()
                    .push((ts, value));
            }
        },
    )?;
    for metrics in out.values_mut() {
        metrics.names.values_mut().for_each(sort_series);
        for names in metrics.devices.values_mut() {
            names.values_mut().for_each(sort_series);
        }
    }
    Ok(out)
}

/// A device's memory as the leak detector judges it: the used fraction of capacity at each
/// sample where a source gives one ([`GpuMemory::fraction`]; a capacity reported at other times
/// than usage is carried to the nearest usage sample), else the used bytes.
fn device_memory(names: &BTreeMap<String, Series>) -> (Series, MemoryUnit) {
    let empty = Series::new();
    let get = |name: &str| names.get(name).unwrap_or(&empty);
    let [used_name, free_name, total_name, ratio_name] = GpuMemory::NAMES;
    let (used, free, total, ratio) = (
        get(used_name),
        get(free_name),
        get(total_name),
        get(ratio_name),
    );
    let at = |series: &Series, ts: i64| {
        series
            .binary_search_by_key(&ts, |p| p.0)
            .ok()
            .map(|i| series[i].1)
    };
    // the capacity of the device: the sample nearest in time (it rarely changes)
    let nearest = |series: &Series, ts: i64| {
        let i = series.partition_point(|p| p.0 < ts);
        [i.checked_sub(1), Some(i)]
            .into_iter()
            .flatten()
            .filter_map(|j| series.get(j))
            .min_by_key(|p| (p.0 - ts).unsigned_abs())
            .map(|p| p.1)
    };
    let mut times: Vec<i64> = used.iter().chain(ratio).map(|p| p.0).collect();
    times.sort_unstable();
    times.dedup();
    let fraction: Series = times
        .iter()
        .filter_map(|&ts| {
            let memory = GpuMemory {
                used_bytes: at(used, ts),
                free_bytes: at(free, ts),
                total_bytes: nearest(total, ts),
                usage_ratio: at(ratio, ts),
            };
            memory.fraction().map(|f| (ts, f))
        })
        .collect();
    if fraction.len() * 2 >= times.len() && !fraction.is_empty() {
        (fraction, MemoryUnit::FractionOfCapacity)
    } else {
        (used.clone(), MemoryUnit::Bytes)
    }
}

/// A worker of metrics that serves no request is a host, a node or an exporter (device metrics
/// of a node agent carry `host.name`, the requests the pod's name): a signal on it is
/// attributed to the one request worker whose rows carry its name as an attribute value (the
/// pod on that host), and names the pods when several do.
async fn attribute_to_request_workers(
    engine: &QueryEngine,
    w: &Window,
    requests: &WorkerMinutes,
    signals: &mut [Signal],
) -> Result<(), QueryError> {
    let serving: std::collections::BTreeSet<&str> =
        requests.cells.keys().map(|k| k.0.as_str()).collect();
    for s in signals.iter_mut() {
        let Some(host) = s.subject.get("worker").cloned() else {
            continue;
        };
        if serving.contains(host.as_str()) || serving.is_empty() {
            continue;
        }
        // the host's name as a whole JSON string value of `attrs`
        let needle = serde_json::Value::String(host.clone())
            .to_string()
            .replace('\'', "''");
        let sql = format!(
            "SELECT worker, count(*) AS n FROM requests WHERE {} AND worker IS NOT NULL \
               AND worker <> '' AND strpos(attrs, ':{needle}') > 0 GROUP BY worker ORDER BY worker",
            w.predicate("ts")
        );
        let rows = Rows::query(engine, &sql).await?;
        let mut pods = Vec::new();
        rows.for_each(&["worker"], &[], &[], |r, _, _| {
            pods.extend(r[0].map(str::to_string));
        })?;
        match pods.as_slice() {
            [] => {}
            [pod] => {
                s.subject = subject(&[("worker", pod)]);
                s.detail = format!("{} (reported by {host}, which serves {pod})", s.detail);
            }
            many => {
                s.detail = format!("{} (pods on {host}: {})", s.detail, many.join(", "));
            }
        }
    }
    Ok(())
}

/// Per-sample increases of a cumulative counter (a drop is a reset: the new value counts).
fn increases(counter: &[(i64, f64)]) -> Series {
    counter
        .windows(2)
        .map(|pair| {
            let delta = pair[1].1 - pair[0].1;
            (
                pair[1].0,
                if delta >= 0.0 {
                    delta
                } else {
                    pair[1].1.max(0.0)
                },
            )
        })
        .collect()
}

/// A (model, model_version) served by two or more workers, all of which show a queue build-up
/// (from `requests_waiting`), has a slice-wide build-up even when its mean `queue_ms` series
/// did not pass the trend tests (requests stuck until the gateway timeout flatten it).
fn slice_queue_buildups(
    already: &[Signal],
    from_metrics: &[Signal],
    requests: &WorkerMinutes,
) -> Vec<Signal> {
    let mut workers_of: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (worker, model, version) in requests.cells.keys() {
        if !worker.is_empty() && !model.is_empty() {
            workers_of
                .entry((model.clone(), version.clone()))
                .or_default()
                .push(worker.clone());
        }
    }
    let mut out = Vec::new();
    for ((model, version), workers) in workers_of {
        let pairs = [
            ("model", model.as_str()),
            ("model_version", version.as_str()),
        ];
        let slice = subject(&pairs);
        if workers.len() < 2
            || already
                .iter()
                .any(|s| s.kind == SignalKind::QueueBuildup && s.subject == slice)
        {
            continue;
        }
        let found: Vec<&Signal> = workers
            .iter()
            .filter_map(|w| {
                from_metrics.iter().find(|s| {
                    s.kind == SignalKind::QueueBuildup && s.subject.get("worker") == Some(w)
                })
            })
            .collect();
        if found.len() < workers.len() {
            continue;
        }
        out.push(Signal {
            kind: SignalKind::QueueBuildup,
            subject: slice,
            onset: found.iter().map(|s| s.onset).min().unwrap_or(0),
            strength: found
                .iter()
                .map(|s| s.strength)
                .fold(f64::INFINITY, f64::min),
            detail: format!(
                "every worker of the slice ({}) builds a queue: {}",
                workers.join(", "),
                found
                    .iter()
                    .map(|s| s.detail.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        });
    }
    out
}

/// Folds samples into one value per minute (samples sorted by time).
fn per_minute(samples: &[(i64, f64)], fold: impl Fn(f64, f64) -> f64) -> Series {
    let mut out: Series = Vec::new();
    for &(ts, value) in samples {
        let minute = ts.div_euclid(MINUTE_NS) * MINUTE_NS;
        match out.last_mut() {
            Some(last) if last.0 == minute => last.1 = fold(last.1, value),
            _ => out.push((minute, value)),
        }
    }
    out
}

/// The strongest GPU-memory leak among a worker's devices, judged on the incident extended back
/// until the trend has [`MIN_TREND_POINTS`] samples.
fn worker_memory_leak(
    worker: &str,
    metrics: &WorkerMetrics,
    latency: &Series,
    params: &LeakParams,
    w: &Window,
) -> Option<Signal> {
    let mut best: Option<(Finding, &str)> = None;
    for (device, names) in &metrics.devices {
        let (memory, unit) = device_memory(names);
        if memory.is_empty() {
            continue;
        }
        let in_incident = memory.iter().filter(|p| p.0 >= w.split_ns).count();
        let take = in_incident.max(MIN_TREND_POINTS).min(memory.len());
        let memory_window = &memory[memory.len() - take..];
        let from = memory_window[0].0;
        let utilization: Series = names
            .get(GPU_UTILIZATION)
            .into_iter()
            .flatten()
            .filter(|p| p.0 >= from)
            .map(|p| (p.0, p.1.clamp(0.0, 1.0)))
            .collect();
        let latency: Series = latency.iter().copied().filter(|p| p.0 >= from).collect();
        let input = MemoryInput {
            worker,
            memory: memory_window,
            unit,
            utilization: &utilization,
            latency_ms: &latency,
        };
        if let Ok(Some(finding)) = gpu_memory_leak(&input, params)
            && best.as_ref().is_none_or(|(b, _)| finding.score > b.score)
        {
            best = Some((finding, device));
        }
    }
    let (finding, device) = best?;
    let mut s = signal(
        &finding,
        subject(&[("worker", worker)]),
        SignalKind::GpuMemoryLeak,
    );
    if !device.is_empty() {
        s.detail = format!("device {device}: {}", finding.detail);
    }
    Some(s)
}

fn metric_signals(metrics: &MetricSamples, requests: &WorkerMinutes, w: &Window) -> Vec<Signal> {
    let mut out = Vec::new();
    let by_worker = requests.group(|k| (!k.0.is_empty()).then(|| k.0.clone()));
    let leak = LeakParams {
        min_points: MIN_TREND_POINTS,
        ..LeakParams::default()
    };
    let kv = KvCacheParams::default();
    let queue = QueueParams {
        min_increase: 2.0,
        ..QueueParams::default()
    };
    let empty = Series::new();
    for (worker, metrics) in metrics.iter().take(MAX_SUBJECTS * 4) {
        let names = &metrics.names;
        let get = |name: &str| names.get(name).unwrap_or(&empty);
        let latency: Series = by_worker
            .get(worker)
            .map(|m| {
                m.iter()
                    .filter(|(_, c)| c.requests > 0.0)
                    .map(|(t, c)| (*t, c.e2e_sum_ms / c.requests))
                    .collect()
            })
            .unwrap_or_default();
        out.extend(worker_memory_leak(worker, metrics, &latency, &leak, w));
        // KV usage: the per-minute peak (a scrape catches a lightly loaded worker between
        // bursts, but the pool filling up within the minute is what preempts); preemptions:
        // per-minute increases of the counter.
        let usage: Series = per_minute(get("kv_cache_usage_ratio"), f64::max)
            .into_iter()
            .map(|p| (p.0, p.1.clamp(0.0, 1.0)))
            .collect();
        if !usage.is_empty() {
            let preemptions = per_minute(&increases(get("preemptions_total")), |a, b| a + b);
            let input = KvCacheInput {
                worker,
                kv_usage: &usage,
                preemptions: &preemptions,
                current_from_ns: w.split_ns,
            };
            if let Ok(findings) = kv_cache_pressure(&input, &kv) {
                for finding in findings {
                    let kind = finding.kind;
                    out.push(signal(&finding, subject(&[("worker", worker)]), kind));
                }
            }
        }
        let waiting = get("requests_waiting");
        if waiting.len() >= MIN_TREND_POINTS {
            let arrivals: Series = by_worker
                .get(worker)
                .map(|m| m.iter().map(|(t, c)| (*t, c.requests)).collect())
                .unwrap_or_default();
            let input = QueueInput {
                worker,
                waiting,
                arrivals: &arrivals,
            };
            if let Ok(Some(finding)) = queue_buildup(&input, &queue) {
                let mut s = signal(
                    &finding,
                    subject(&[("worker", worker)]),
                    SignalKind::QueueBuildup,
                );
                s.detail = format!("requests waiting: {}", finding.detail);
                out.push(s);
            }
        }
    }
    out
}

// ------------------------------------------------------------------------ requests per tenant

#[derive(Debug, Clone, Copy, Default)]
struct TenantMinute {
    requests: f64,
    cached_tokens: f64,
    input_tokens: f64,
    injection_score: Option<f64>,
    rejections: f64,
    rollbacks: f64,
    /// Requests that drafted speculative tokens, and the tokens drafted.
    spec_requests: f64,
    drafted: f64,
}

/// Requests a tenant's per-minute share or mean should rest on: a share of 3 requests moves by a
/// third with one request (head-sampled traces keep about 1 row in 10).
const TENANT_POINT_FLOOR: f64 = 20.0;
/// Minutes pooled into one point at most (see [`pooled_minutes`]).
const MAX_POOLED_MINUTES: i64 = 5;

/// The tenant's minutes pooled over `k` trailing minutes, `k` the fewest that put
/// [`TENANT_POINT_FLOOR`] of `count` under a point at the baseline's median rate (at most
/// [`MAX_POOLED_MINUTES`]; 1 leaves the minutes as they are). Sparse rows — a small tenant, or
/// head-sampled traces — then give shares and means that a change can stand out of, instead of
/// minutes of 0 % and 100 %; onsets are dated at most `k - 1` minutes late. Each minute from the
/// first to the last gets a point when its window holds rows; counts are per minute of the
/// window (sums over it divided by its length), so levels compare across tenants pooled over
/// different `k`; the mean injection score is weighted by the requests of each minute.
fn pooled_minutes(
    minutes: &BTreeMap<i64, TenantMinute>,
    count: impl Fn(&TenantMinute) -> f64,
    split_ns: i64,
) -> std::borrow::Cow<'_, BTreeMap<i64, TenantMinute>> {
    let mut baseline: Vec<f64> = minutes.range(..split_ns).map(|(_, c)| count(c)).collect();
    baseline.sort_by(f64::total_cmp);
    let median = baseline.get(baseline.len() / 2).copied().unwrap_or(0.0);
    let k = if median <= 0.0 {
        MAX_POOLED_MINUTES
    } else {
        ((TENANT_POINT_FLOOR / median).ceil() as i64).clamp(1, MAX_POOLED_MINUTES)
    };
    let (Some(&first), Some(&last)) = (minutes.keys().next(), minutes.keys().next_back()) else {
        return std::borrow::Cow::Borrowed(minutes);
    };
    if k == 1 {
        return std::borrow::Cow::Borrowed(minutes);
    }
    let mut pooled = BTreeMap::new();
    let mut t = first;
    while t <= last {
        let from = (t - (k - 1) * MINUTE_NS).max(first);
        let span = ((t - from) / MINUTE_NS + 1) as f64;
        let mut sum = TenantMinute::default();
        let (mut scored, mut score, mut rows) = (0.0, 0.0, 0);
        for (_, c) in minutes.range(from..=t) {
            rows += 1;
            sum.requests += c.requests;
            sum.cached_tokens += c.cached_tokens;
            sum.input_tokens += c.input_tokens;
            sum.rejections += c.rejections;
            sum.rollbacks += c.rollbacks;
            sum.spec_requests += c.spec_requests;
            sum.drafted += c.drafted;
            if let Some(v) = c.injection_score {
                scored += c.requests.max(1.0);
                score += v * c.requests.max(1.0);
            }
        }
        if rows > 0 {
            for v in [
                &mut sum.requests,
                &mut sum.cached_tokens,
                &mut sum.input_tokens,
                &mut sum.rejections,
                &mut sum.rollbacks,
                &mut sum.spec_requests,
                &mut sum.drafted,
            ] {
                *v /= span;
            }
            sum.injection_score = (scored > 0.0).then(|| score / scored);
            pooled.insert(t, sum);
        }
        t += MINUTE_NS;
    }
    std::borrow::Cow::Owned(pooled)
}

/// Per value of the tenant dimension (`source`: the `tenant` column, or an attribute that plays
/// the tenant's part) and minute, the tenant-side counts.
async fn read_tenant_minutes(
    engine: &QueryEngine,
    w: &Window,
    source: &TenantSource,
) -> Result<BTreeMap<String, BTreeMap<i64, TenantMinute>>, QueryError> {
    let p = w.predicate("ts");
    let tenant = source.sql();
    // Prefix-cache workers: those that served any cached token in the window; only their
    // requests say anything about a tenant's prefix-cache hit rate, and only those that did not
    // fail: a request that timed out or was rejected before its prefill looked nothing up, and
    // its prompt would count as missed tokens (a fault's timeouts would read as a tenant whose
    // accesses scattered).
    let sql = format!(
        "WITH caching AS (SELECT worker AS caching_worker FROM requests WHERE {p} \
           GROUP BY worker HAVING sum(cached_tokens) > 0), \
         r AS (SELECT {tenant} AS tenant, ts, worker, cached_tokens, input_tokens, spec_draft_tokens, \
           spec_accepted_tokens, COALESCE({FAILED}, false) AS failed, \
           COALESCE(json_get(attrs, 'serving.guardrail.injection_score'), json_get(attrs, 'guardrail.injection_score')) AS injection \
           FROM requests WHERE {p} AND {tenant} IS NOT NULL AND {tenant} <> '') \
         SELECT r.tenant AS tenant, date_trunc('minute', r.ts) AS minute, count(*) AS n, \
           sum(CASE WHEN caching_worker IS NOT NULL AND NOT failed THEN COALESCE(cached_tokens, 0) ELSE 0 END) AS cached, \
           sum(CASE WHEN caching_worker IS NOT NULL AND NOT failed THEN COALESCE(input_tokens, 0) ELSE 0 END) AS input, \
           avg(TRY_CAST(injection AS DOUBLE)) AS injection, \
           sum(CASE WHEN spec_draft_tokens > 0 AND spec_accepted_tokens < {REJECTION_SHARE} * spec_draft_tokens THEN 1 ELSE 0 END) AS rejections, \
           sum(CASE WHEN spec_draft_tokens > 0 THEN spec_draft_tokens - COALESCE(spec_accepted_tokens, 0) ELSE 0 END) AS rollbacks, \
           sum(CASE WHEN spec_draft_tokens > 0 THEN 1 ELSE 0 END) AS spec_requests, \
           sum(CASE WHEN spec_draft_tokens > 0 THEN spec_draft_tokens ELSE 0 END) AS drafted \
         FROM r LEFT JOIN caching ON r.worker = caching.caching_worker \
         GROUP BY 1, 2"
    );
    let rows = Rows::query(engine, &sql).await?;
    let mut out: BTreeMap<String, BTreeMap<i64, TenantMinute>> = BTreeMap::new();
    rows.for_each(
        &["tenant"],
        &[
            "n",
            "cached",
            "input",
            "injection",
            "rejections",
            "rollbacks",
            "spec_requests",
            "drafted",
        ],
        &["minute"],
        |s, f, i| {
            let (Some(tenant), Some(minute)) = (s[0], i[0]) else {
                return;
            };
            out.entry(tenant.to_string()).or_default().insert(
                minute,
                TenantMinute {
                    requests: f[0].unwrap_or(0.0),
                    cached_tokens: f[1].unwrap_or(0.0).max(0.0),
                    input_tokens: f[2].unwrap_or(0.0).max(0.0),
                    injection_score: f[3],
                    rejections: f[4].unwrap_or(0.0).max(0.0),
                    rollbacks: f[5].unwrap_or(0.0).max(0.0),
                    spec_requests: f[6].unwrap_or(0.0).max(0.0),
                    drafted: f[7].unwrap_or(0.0).max(0.0),
                },
            );
        },
    )?;
    Ok(out)
}

/// Where a request's tenant is read: the `tenant` column (the mapped names: `tenant`,
/// `tenant.id`, …), or an attribute that plays the tenant's part in a fleet whose tenant key is
/// in no mapping table (`user.org`, an API key's hash).
#[derive(Debug, Clone, PartialEq, Eq)]
enum TenantSource {
    Column,
    Attribute(String),
}

impl TenantSource {
    /// The SQL expression of a request's tenant.
    fn sql(&self) -> String {
        match self {
            TenantSource::Column => "tenant".into(),
            TenantSource::Attribute(key) => {
                format!("json_get(attrs, '{}')", key.replace('\'', "''"))
            }
        }
    }

    /// The subject key of a tenant of this source.
    fn key(&self) -> &str {
        match self {
            TenantSource::Column => "tenant",
            TenantSource::Attribute(key) => key,
        }
    }
}

/// What a sample of the window's rows says of one attribute key: on how many rows it is, its
/// first distinct values (up to [`MAX_TENANT_VALUES`] + 1), and whether a worker was seen with
/// two of them.
#[derive(Debug, Default)]
struct KeyValues {
    rows: usize,
    values: Vec<String>,
    /// worker → the value first seen on it
    by_worker: BTreeMap<String, String>,
    /// Some worker served two values of the key.
    mixed_on_a_worker: bool,
}

impl KeyValues {
    fn add(&mut self, value: &str, worker: Option<&str>) {
        self.rows += 1;
        if self.values.len() <= MAX_TENANT_VALUES && !self.values.iter().any(|v| v == value) {
            self.values.push(value.to_string());
        }
        if let Some(worker) = worker.filter(|w| !w.is_empty()) {
            match self.by_worker.get(worker) {
                Some(seen) => self.mixed_on_a_worker |= seen != value,
                None => {
                    self.by_worker.insert(worker.to_string(), value.to_string());
                }
            }
        }
    }

    /// The key is a property of what served the request: every worker it was seen on served
    /// one value of it, and there were at least two workers (an engine's build, its tracer's
    /// scope, a region, a deployment). Senders reach every worker; a sender pinned to workers
    /// of its own shares no prefix cache with anyone.
    fn set_by_the_worker(&self) -> bool {
        self.by_worker.len() >= 2 && !self.mixed_on_a_worker
    }
}

/// Attribute keys of `requests` that may play the tenant's part (read when the `tenant` column
/// holds fewer than two tenants), from a sample of the window's rows (see [`tenant_keys_of`]).
async fn tenant_attribute_keys(
    engine: &QueryEngine,
    w: &Window,
) -> Result<Vec<TenantSource>, QueryError> {
    let p = w.predicate("ts");
    let sql = format!(
        "WITH r AS (SELECT ts, tenant, worker, attrs, row_number() OVER (ORDER BY ts) AS rn, \
           count(*) OVER () AS n FROM requests WHERE {p}) \
         SELECT tenant, worker, attrs FROM r WHERE (rn - 1) % ((n + {TENANT_KEY_SAMPLE} - 1) / {TENANT_KEY_SAMPLE}) = 0"
    );
    let rows = Rows::query(engine, &sql).await?;
    let mut tenants: Vec<String> = Vec::new();
    let mut rows_read = 0usize;
    let mut keys: BTreeMap<String, KeyValues> = BTreeMap::new();
    let mut texts = ValueTexts::default();
    rows.for_each(&["tenant", "worker", "attrs"], &[], &[], |s, _, _| {
        rows_read += 1;
        if let Some(t) = s[0].filter(|t| !t.is_empty())
            && tenants.len() < 2
            && !tenants.iter().any(|known| known == t)
        {
            tenants.push(t.to_string());
        }
        let mut entries = Vec::new();
        if !read_attrs(s[2].unwrap_or("{}"), &mut entries) {
            return;
        }
        for (key, value) in &entries {
            if let Some(text) = texts.text(value) {
                keys.entry(key.to_string()).or_default().add(text, s[1]);
            }
        }
    })?;
    if tenants.len() >= 2 {
        return Ok(Vec::new());
    }
    Ok(tenant_keys_of(keys, rows_read)
        .into_iter()
        .map(TenantSource::Attribute)
        .collect())
}

/// Of the attribute keys of `rows_read` sampled rows, those that may play the tenant's part:
/// scalar keys of at most [`MAX_TENANT_VALUES`] distinct values (at least two) on at least half
/// of the rows, that are not a canonical column, do not name a version ([`names_a_version`]:
/// `service.version`, `build`) and are not set by the worker ([`KeyValues::set_by_the_worker`]):
/// a build, a tracer or a region says what served the request, never who sent it, and a
/// rollout's versions differ in cache hits as tenants do. Keys whose name says who sends (org,
/// tenant, customer, account, user, team, project, client, key) first, then by more distinct
/// values; at most [`MAX_TENANT_KEYS`].
fn tenant_keys_of(keys: BTreeMap<String, KeyValues>, rows_read: usize) -> Vec<String> {
    let sender = |key: &str| {
        let key = key.to_ascii_lowercase();
        [
            "org", "tenant", "customer", "account", "user", "team", "project", "client", "key",
        ]
        .iter()
        .any(|word| key.split(['.', '_', '-', '/']).any(|part| part == *word))
    };
    let mut chosen: Vec<(bool, usize, String)> = keys
        .into_iter()
        .filter(|(key, seen)| {
            (2..=MAX_TENANT_VALUES).contains(&seen.values.len())
                && 2 * seen.rows >= rows_read
                && RequestRecord::COLUMNS.iter().all(|c| c != key)
                && !names_a_version(key)
                && !seen.set_by_the_worker()
        })
        .map(|(key, seen)| (!sender(&key), usize::MAX - seen.values.len(), key))
        .collect();
    chosen.sort();
    chosen
        .into_iter()
        .take(MAX_TENANT_KEYS)
        .map(|(_, _, key)| key)
        .collect()
}

/// Cache pollution among the tenants of `source`: one signal per polluter (the subject), its
/// victims and their hit rates in the detail.
fn cache_pollution_signals(
    source: &TenantSource,
    data: &BTreeMap<String, BTreeMap<i64, TenantMinute>>,
    w: &Window,
) -> Vec<Signal> {
    let weights: BTreeMap<String, f64> = data
        .iter()
        .map(|(t, m)| (t.clone(), m.values().map(|c| c.requests).sum()))
        .collect();
    let tenants = busiest(&weights);
    let mut hit_rates: Vec<Series> = Vec::new();
    let mut entropies: Vec<Series> = Vec::new();
    // a tenant whose points pool several minutes also gives its own minutes, for a
    // token-weighted drop from an onset on (a sparse victim is evicted over minutes)
    let mut sparse: Vec<Vec<CacheMinute>> = Vec::new();
    for tenant in &tenants {
        let minutes = pooled_minutes(&data[tenant], |c| c.requests, w.split_ns);
        sparse.push(if matches!(minutes, std::borrow::Cow::Owned(_)) {
            data[tenant]
                .iter()
                .filter(|(_, c)| c.input_tokens > 0.0)
                .map(|(t, c)| CacheMinute {
                    ts_ns: *t,
                    hit_rate: (c.cached_tokens / c.input_tokens).clamp(0.0, 1.0),
                    input_tokens: c.input_tokens,
                })
                .collect()
        } else {
            Vec::new()
        });
        hit_rates.push(
            minutes
                .iter()
                .filter(|(_, c)| c.input_tokens > 0.0)
                .map(|(t, c)| (*t, (c.cached_tokens / c.input_tokens).clamp(0.0, 1.0)))
                .collect(),
        );
        entropies.push(
            minutes
                .iter()
                .filter(|(_, c)| c.input_tokens > 0.0)
                .map(|(t, c)| {
                    let missed = (c.input_tokens - c.cached_tokens).max(0.0);
                    (*t, (1.0 + missed / PREFIX_BLOCK_TOKENS).log2())
                })
                .collect(),
        );
    }
    // Tenants with too little data would make the detector fail as a whole: leave them out.
    let params = CachePollutionParams::default();
    let usable: Vec<usize> = (0..tenants.len())
        .filter(|&i| {
            hit_rates[i].iter().filter(|p| p.0 < w.split_ns).count() >= params.min_points
                && entropies[i].iter().filter(|p| p.0 < w.split_ns).count() >= params.min_points
        })
        .collect();
    let inputs: Vec<TenantCacheSeries<'_>> = usable
        .iter()
        .map(|&i| TenantCacheSeries {
            tenant: &tenants[i],
            hit_rate: &hit_rates[i],
            access_entropy_bits: &entropies[i],
            sparse_minutes: &sparse[i],
        })
        .collect();
    let Ok(findings) = cache_pollution(&inputs, w.split_ns, &params) else {
        return Vec::new();
    };
    // One signal per polluter, naming its victims.
    let mut by_polluter: BTreeMap<String, Vec<Finding>> = BTreeMap::new();
    for finding in findings {
        let polluter = finding
            .subject
            .iter()
            .find(|(k, _)| k == "polluter")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        by_polluter.entry(polluter).or_default().push(finding);
    }
    let key = source.key();
    let mut out = Vec::new();
    for (polluter, findings) in by_polluter {
        let Some(strongest) = findings.iter().max_by(|a, b| a.score.total_cmp(&b.score)) else {
            continue;
        };
        let mut s = signal(
            strongest,
            subject(&[(key, &polluter)]),
            SignalKind::CachePollution,
        );
        s.onset = findings.iter().map(|f| f.onset_ns).min().unwrap_or(s.onset);
        let value = |f: &Finding, name: &str| f.evidence_value(name).unwrap_or(f64::NAN);
        let victims: Vec<String> = findings
            .iter()
            .map(|f| {
                let victim = f
                    .subject
                    .iter()
                    .find(|(k, _)| k == "tenant")
                    .map_or("", |(_, v)| v.as_str());
                format!(
                    "{key}={victim} {:.2} → {:.2}",
                    value(f, "victim_hit_rate_before"),
                    value(f, "victim_hit_rate_after")
                )
            })
            .collect();
        s.detail = format!(
            "{key}={polluter} polluted the prefix cache: its access entropy rose {:.1} → {:.1} bits (distinct prefix blocks it misses) as the prefix-cache hit rate of its victims fell ({})",
            value(strongest, "polluter_entropy_before_bits"),
            value(strongest, "polluter_entropy_after_bits"),
            victims.join(", ")
        );
        out.push(s);
    }
    out
}

/// The signals about tenants of `source` (the `tenant` column, or an attribute that plays its
/// part under a name no mapping knows): cache pollution and resonance.
fn tenant_signals(
    source: &TenantSource,
    data: &BTreeMap<String, BTreeMap<i64, TenantMinute>>,
    w: &Window,
) -> Vec<Signal> {
    let mut out = cache_pollution_signals(source, data, w);
    let weights: BTreeMap<String, f64> = data
        .iter()
        .map(|(t, m)| (t.clone(), m.values().map(|c| c.requests).sum()))
        .collect();
    let tenants = busiest(&weights);
    // resonance: shares, not counts, so that load swings do not look like a rise
    let params = ResonanceParams {
        detect: DetectParams {
            min_baseline_points: 15,
            // every series is a fraction: a 1 % floor on the noise scale
            min_scale_abs: 0.01,
            ..DetectParams::default()
        },
        ..ResonanceParams::default()
    };
    for tenant in &tenants {
        let minutes = pooled_minutes(&data[tenant], |c| c.spec_requests, w.split_ns);
        let injection: Series = minutes
            .iter()
            .filter_map(|(t, c)| c.injection_score.map(|v| (*t, v)))
            .collect();
        let spec = || {
            minutes
                .iter()
                .filter(|(_, c)| c.spec_requests > 0.0 && c.drafted > 0.0)
        };
        let rejections: Series = spec()
            .map(|(t, c)| (*t, c.rejections / c.spec_requests))
            .collect();
        let rollbacks: Series = spec().map(|(t, c)| (*t, c.rollbacks / c.drafted)).collect();
        let enough = |s: &Series| s.iter().filter(|p| p.0 < w.split_ns).count() >= 15;
        if !(enough(&injection) && enough(&rejections)) {
            continue;
        }
        let pairs = [(source.key(), tenant.as_str())];
        let input = ResonanceInput {
            subject: &pairs,
            injection_score: &injection,
            rejection_failures: &rejections,
            spec_rollbacks: &rollbacks,
            current_from_ns: w.split_ns,
        };
        if let Ok(Some(finding)) = resonance(&input, &params) {
            let mut s = signal(&finding, subject(&pairs), SignalKind::Resonance);
            s.detail = format!(
                "{} (mean injection score; share of speculative requests with < {:.0} % drafts accepted; share of drafted tokens rolled back)",
                finding.detail,
                100.0 * REJECTION_SHARE
            );
            out.push(s);
        }
    }
    out
}

/// Cache pollution names its cause: the polluting tenant. Localization finds where the effect
/// shows (the victims' slice, the prefix-caching pool: their time to first token rose), so when
/// a `cache_pollution` signal names a polluter that is not already the top cause, the polluter
/// becomes the first root cause, with the signal (victims and their hit rates) as evidence, and
/// the localized causes follow as the context where the pollution shows, except those a fault
/// signal of their own backs (`faults`: a throttled pod is no effect of the pollution), which
/// rank right after the polluter. The verdict says so.
pub(crate) fn polluters_first(report: &mut RcaReport, signals: &[Signal], faults: &[Signal]) {
    let Some(pollution) = signals
        .iter()
        .filter(|s| s.kind == SignalKind::CachePollution && !s.subject.is_empty())
        .max_by(|a, b| a.strength.total_cmp(&b.strength))
    else {
        return;
    };
    // No localized cause: the signals were promoted already, strongest first.
    let Some(top) = report.root_causes.first() else {
        return;
    };
    if report.symptom.is_none() || top.dimensions == pollution.subject {
        return;
    }
    let polluter = pollution.subject.to_string();
    // a cause a fault signal of its own backs (a throttled pod) is no effect of the pollution
    let (independent, effects): (Vec<RootCause>, Vec<RootCause>) = report
        .root_causes
        .drain(..)
        .filter(|c| c.dimensions != pollution.subject)
        .partition(|c| faults.iter().any(|f| f.subject == c.dimensions));
    let shown_on: Vec<String> = effects.iter().map(|c| c.dimensions.to_string()).collect();
    let mut evidence = vec![format!("{} signal: {}", pollution.kind, pollution.detail)];
    if !shown_on.is_empty() {
        evidence.push(format!("the effect shows on {}", shown_on.join("; ")));
    }
    report.root_causes.push(RootCause {
        rank: 1,
        dimensions: pollution.subject.clone(),
        explained_fraction: effects.first().map_or(0.0, |c| c.explained_fraction),
        score: pollution.strength,
        evidence,
        slice_rate: None,
    });
    report.root_causes.extend(independent);
    for mut cause in effects {
        cause
            .evidence
            .push(format!("where {polluter}'s cache pollution shows"));
        report.root_causes.push(cause);
    }
    for (i, cause) in report.root_causes.iter_mut().enumerate() {
        cause.rank = i + 1;
    }
    let change = report
        .verdict
        .split_once("; most likely cause: ")
        .map_or(report.verdict.as_str(), |(change, _)| change)
        .to_string();
    report.verdict = format!(
        "{change}; most likely cause: {polluter} (cache pollution: {}){}",
        pollution.detail,
        if shown_on.is_empty() {
            String::new()
        } else {
            format!("; it shows on {}", shown_on.join("; "))
        }
    );
}

// ------------------------------------------------------------------------ prompts per tenant

/// Sampled prompts of one tenant: (baseline, incident), each in time order.
type TenantPrompts = (Vec<PromptSample>, Vec<PromptSample>);

/// A leading `key=value` field of a prompt section's text (`request_id=… tenant=…` written by
/// the engine before the user's text) is metadata, not prompt: it is dropped before hashing so
/// that ids unique to every request do not lower every similarity alike.
fn prompt_body(text: &str) -> &str {
    let mut rest = text.trim_start();
    loop {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let token = &rest[..end];
        let is_field = token.split_once('=').is_some_and(|(key, _)| {
            !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        });
        if !is_field || end == rest.len() {
            return if is_field { "" } else { rest };
        }
        rest = rest[end..].trim_start();
    }
}

/// The SQL that samples prompts per tenant and side (0: baseline, 1: incident), with the
/// output length of their request. Lines are thinned by time first, so that the JSON and regex
/// work is bounded whatever the window's volume; ties in time are broken by `attrs` (read
/// anyway; the body would cost a second column scan).
fn prompt_sample_sql(w: &Window) -> String {
    let p = w.predicate("ts");
    let requests_range = w.widened_predicate("ts", PROMPT_JOIN_MARGIN_NS);
    let split = w.split_ns;
    // A leading run of `key=value` fields, then the wanted one.
    let field =
        |name: &str| format!("regexp_match(prompt, '^(?:[\\w.-]+=\\S*\\s+)*?{name}=(\\S+)')[1]");
    let (line_request_id, line_tenant) = (field("request_id"), field("tenant"));
    format!(
        "WITH lines AS (SELECT ts, request_id, attrs, \
           CASE WHEN ts < to_timestamp_nanos({split}) THEN 0 ELSE 1 END AS side \
           FROM logs WHERE {p} AND log_class = 'prompt_input'), \
         spaced AS (SELECT ts, request_id, attrs, side, \
           row_number() OVER (PARTITION BY side ORDER BY ts, attrs) AS rn, \
           count(*) OVER (PARTITION BY side) AS n FROM lines), \
         presampled AS (SELECT ts, request_id, side, json_get(attrs, 'prompt') AS prompt, \
           json_get(attrs, 'request_id') AS attr_request_id, json_get(attrs, 'tenant') AS attr_tenant \
           FROM spaced WHERE (rn - 1) % ((n + {PROMPT_PRESAMPLE} - 1) / {PROMPT_PRESAMPLE}) = 0), \
         prompts AS (SELECT ts, side, prompt, \
           COALESCE(request_id, attr_request_id, {line_request_id}) AS rid, \
           COALESCE(attr_tenant, {line_tenant}) AS line_tenant \
           FROM presampled WHERE prompt IS NOT NULL AND prompt <> ''), \
         r AS (SELECT request_id AS r_id, max(tenant) AS r_tenant, max(output_tokens) AS output_tokens \
           FROM requests WHERE {requests_range} AND request_id IS NOT NULL GROUP BY request_id), \
         joined AS (SELECT ts, side, prompt, COALESCE(r_tenant, line_tenant) AS tenant, output_tokens \
           FROM prompts LEFT JOIN r ON prompts.rid = r.r_id), \
         numbered AS (SELECT ts, prompt, tenant, output_tokens, side, \
           row_number() OVER (PARTITION BY tenant, side ORDER BY ts, prompt) AS rn, \
           count(*) OVER (PARTITION BY tenant, side) AS n \
           FROM joined WHERE tenant IS NOT NULL AND tenant <> '') \
         SELECT tenant, side, ts, prompt, output_tokens, n FROM numbered \
         WHERE (rn - 1) % ((n + {PROMPT_SAMPLE} - 1) / {PROMPT_SAMPLE}) = 0 \
         ORDER BY tenant, side, ts, prompt"
    )
}

/// Prompt drift per tenant: the incident's prompts against the baseline's.
async fn prompt_drift_signals(engine: &QueryEngine, w: &Window) -> Result<Vec<Signal>, QueryError> {
    let rows = Rows::query(engine, &prompt_sample_sql(w)).await?;
    let mut by_tenant: BTreeMap<String, TenantPrompts> = BTreeMap::new();
    // Prompts per side in the windows (not only those sampled), to pick the busiest tenants.
    let mut side_counts: BTreeMap<String, [f64; 2]> = BTreeMap::new();
    rows.for_each(
        &["tenant", "prompt"],
        &["output_tokens"],
        &["side", "ts", "n"],
        |s, f, i| {
            let (Some(tenant), Some(prompt), Some(side), Some(ts_ns)) = (s[0], s[1], i[0], i[1])
            else {
                return;
            };
            let sample = PromptSample {
                ts_ns,
                features: prompt_features(prompt_body(prompt), PROMPT_HASHES),
                output_tokens: f[0].filter(|x| *x >= 0.0),
            };
            let side = usize::from(side != 0);
            let entry = by_tenant.entry(tenant.to_string()).or_default();
            if side == 0 {
                entry.0.push(sample);
            } else {
                entry.1.push(sample);
            }
            // `n` counts the side's presampled prompts.
            let counts = side_counts.entry(tenant.to_string()).or_default();
            counts[side] = counts[side].max(i[2].unwrap_or(0).max(0) as f64);
        },
    )?;
    let totals: BTreeMap<String, f64> = side_counts
        .into_iter()
        .map(|(tenant, counts)| (tenant, counts[0] + counts[1]))
        .collect();
    let params = PromptDriftParams::default();
    let mut out = Vec::new();
    for tenant in busiest(&totals) {
        let Some((baseline, current)) = by_tenant.get_mut(&tenant) else {
            continue;
        };
        // Stable: rows come ordered by (time, text), ties keep that order.
        baseline.sort_by_key(|p| p.ts_ns);
        current.sort_by_key(|p| p.ts_ns);
        let pairs = [("tenant", tenant.as_str())];
        // Too few baseline prompts (a new tenant) is no evidence either way.
        let Ok(Some(finding)) = prompt_drift(&pairs, baseline, current, &params) else {
            continue;
        };
        let mut s = signal(&finding, subject(&pairs), SignalKind::PromptDrift);
        s.detail = format!(
            "tenant {tenant}: {} (MinHash similarity of word shingles, {} baseline and {} incident prompts sampled)",
            finding.detail,
            baseline.len(),
            current.len()
        );
        out.push(s);
    }
    Ok(out)
}

// ------------------------------------------------------------------------ spans

async fn trace_signals(
    engine: &QueryEngine,
    w: &Window,
    mut cache: Option<&mut MinuteCache>,
) -> Result<Vec<Signal>, QueryError> {
    let mut out = Vec::new();
    let entries = read_entry_spans(engine, w, cache.as_deref_mut()).await?;
    let weights: BTreeMap<String, f64> = entries
        .iter()
        .map(|(service, sample)| (service.clone(), sample.len() as f64))
        .collect();
    for service in busiest(&weights) {
        out.extend(context_loss_of_service(&service, &entries[&service], w));
    }
    out.extend(flow_control_stalls(engine, w, cache).await?);
    Ok(out)
}

/// A span where a trace enters the store (no parent among the stored spans: a root, or an
/// orphan whose parent never arrived), sampled for [`context_loss_of_service`].
#[derive(Debug)]
struct EntrySpan {
    ts_ns: i64,
    /// The trace lost its context at this entry: the entry has no child, its trace reaches no
    /// other service, or the trace has another entry (a span whose parent is missing).
    broken: bool,
    /// Scalar attributes (resource and span) as text.
    attrs: Vec<(String, String)>,
}

/// The SQL of [`read_entry_spans`]: entry spans flagged broken or not, at most
/// [`ENTRY_SAMPLE`] per service and side of the split (evenly spaced in time), or with
/// `per_minute` at most [`ENTRY_MINUTE_SAMPLE`] per service and minute, with their attributes.
/// Parents and the rest of a trace are looked up in the window widened by [`TRACE_MARGIN_NS`],
/// so that traces crossing its edges are whole.
fn entry_span_sql(w: &Window, per_minute: bool) -> String {
    let p = w.predicate("ts");
    let wide = w.widened_predicate("ts", TRACE_MARGIN_NS);
    let split = w.split_ns;
    // Per minute, a read starts at the first unsettled minute, inside the incident: entries
    // (and a trace's count of them) are judged over the widened window, and only then cut to
    // the read's range, so a trace that straddles where a read starts counts both its entries.
    let (side, sample, entries_p, flagged_p) = if per_minute {
        (
            "date_trunc('minute', ts)".to_string(),
            ENTRY_MINUTE_SAMPLE,
            "TRUE".to_string(),
            p.clone(),
        )
    } else {
        (
            format!("CASE WHEN ts < to_timestamp_nanos({split}) THEN 0 ELSE 1 END"),
            ENTRY_SAMPLE,
            p.clone(),
            "TRUE".to_string(),
        )
    };
    format!(
        "WITH s AS (SELECT trace_id, span_id, parent_span_id, COALESCE(service, '') AS service, ts \
           FROM spans WHERE {wide} AND trace_id IS NOT NULL AND span_id IS NOT NULL), \
         known AS (SELECT DISTINCT trace_id AS k_trace, span_id AS k_span FROM s), \
         entries AS (SELECT s.trace_id, s.span_id, s.service, s.ts FROM s \
           LEFT JOIN known ON s.trace_id = known.k_trace AND s.parent_span_id = known.k_span \
           WHERE known.k_span IS NULL AND {entries_p}), \
         facts AS (SELECT trace_id AS f_trace, count(DISTINCT service) AS services FROM s GROUP BY trace_id), \
         entry_counts AS (SELECT trace_id AS e_trace, count(*) AS n_entries FROM entries GROUP BY trace_id), \
         parents AS (SELECT DISTINCT trace_id AS c_trace, parent_span_id AS c_parent FROM s \
           WHERE parent_span_id IS NOT NULL AND parent_span_id <> ''), \
         flagged AS (SELECT trace_id, span_id, service, ts, \
           CASE WHEN c_trace IS NULL OR services < 2 OR n_entries > 1 THEN 1 ELSE 0 END AS broken, \
           {side} AS side \
           FROM entries JOIN facts ON entries.trace_id = facts.f_trace \
           JOIN entry_counts ON entries.trace_id = entry_counts.e_trace \
           LEFT JOIN parents ON entries.trace_id = parents.c_trace AND entries.span_id = parents.c_parent \
           WHERE {flagged_p}), \
         numbered AS (SELECT trace_id, span_id, service, ts, broken, side, \
           row_number() OVER (PARTITION BY service, side ORDER BY ts, span_id) AS rn, \
           count(*) OVER (PARTITION BY service, side) AS n FROM flagged), \
         sampled AS (SELECT trace_id AS x_trace, span_id AS x_span, service, ts AS x_ts, broken \
           FROM numbered WHERE (rn - 1) % ((n + {sample} - 1) / {sample}) = 0) \
         SELECT sampled.service AS service, sampled.x_ts AS ts, sampled.broken AS broken, spans.attrs AS attrs \
         FROM sampled JOIN spans ON spans.trace_id = sampled.x_trace AND spans.span_id = sampled.x_span \
         WHERE {spans_p} ORDER BY service, ts, attrs",
        spans_p = w.predicate("spans.ts"),
    )
}

/// Entry spans per service (see [`entry_span_sql`]), in time order; with a cache, read per
/// minute and then sampled to at most [`ENTRY_SAMPLE`] per side.
async fn read_entry_spans(
    engine: &QueryEngine,
    w: &Window,
    cache: Option<&mut MinuteCache>,
) -> Result<BTreeMap<String, Vec<EntrySpan>>, QueryError> {
    let per_minute = cache.is_some();
    let rows = minute_rows(engine, cache, Statement::EntrySpans, (w, "ts"), |w| {
        entry_span_sql(w, per_minute)
    })
    .await?;
    let mut out: BTreeMap<String, Vec<EntrySpan>> = BTreeMap::new();
    let mut texts = ValueTexts::default();
    rows.for_each(&["service", "attrs"], &[], &["ts", "broken"], |s, _, i| {
        let (Some(service), Some(ts_ns)) = (s[0], i[0]) else {
            return;
        };
        let mut entries = Vec::new();
        let mut attrs = Vec::new();
        if read_attrs(s[1].unwrap_or("{}"), &mut entries) {
            for (key, value) in &entries {
                if let Some(text) = texts.text(value) {
                    attrs.push((key.to_string(), text.to_string()));
                }
            }
        }
        out.entry(service.to_string()).or_default().push(EntrySpan {
            ts_ns,
            broken: i[1].unwrap_or(0) != 0,
            attrs,
        });
    })?;
    if per_minute {
        for entries in out.values_mut() {
            *entries = sample_sides(std::mem::take(entries), w.split_ns);
        }
    }
    Ok(out)
}

/// At most [`ENTRY_SAMPLE`] entries per side of `split_ns`, evenly spaced in time (exactly that
/// many where a side holds more), in time order.
fn sample_sides(mut entries: Vec<EntrySpan>, split_ns: i64) -> Vec<EntrySpan> {
    entries.sort_by_key(|e| e.ts_ns);
    let (before, after): (Vec<EntrySpan>, Vec<EntrySpan>) =
        entries.into_iter().partition(|e| e.ts_ns < split_ns);
    let evenly = |side: Vec<EntrySpan>| -> Vec<EntrySpan> {
        let (n, at_most) = (side.len(), ENTRY_SAMPLE as usize);
        if n <= at_most {
            return side;
        }
        // the i-th of `at_most` picks is entry ⌊i·n / at_most⌋: strictly increasing, as n > at_most
        let mut picks = (0..at_most).map(|i| i * n / at_most).peekable();
        side.into_iter()
            .enumerate()
            .filter_map(|(j, e)| {
                (picks.peek() == Some(&j)).then(|| {
                    picks.next();
                    e
                })
            })
            .collect()
    };
    let mut out = evenly(before);
    out.extend(evenly(after));
    out
}

/// A group of a service's entry spans: the whole service, or those with one attribute value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct EntryGroup {
    key: String,
    value: String,
}

/// How well a group that lost context describes the service's broken entries of the incident.
#[derive(Debug)]
struct GroupFit {
    group: Option<EntryGroup>,
    finding: Finding,
    /// F1 of "in the group" as a predictor of "broken", over the incident's entries.
    f1: f64,
    /// Share of the incident's broken entries in the group.
    recall: f64,
    /// The value never occurs in the baseline (a rollout: a new build, a new pod), or first
    /// occurs in its last quarter and is broken there already (a rollout just before the split).
    new_value: bool,
    /// The key names a build (`service.version`, `deployment.version`, …): what a rollout changes.
    names_a_build: bool,
    /// The key is an OTel resource convention (`service.*`, `k8s.*`, …): of two keys that split
    /// the entries alike, the one every tool knows.
    standard_key: bool,
    /// Distinct values of the key among the service's entries.
    cardinality: usize,
}

impl GroupFit {
    /// Orders fits from best to worst: F1 (within [`F1_TIE`]), then a value new in the incident,
    /// then the service as a whole over an attribute value that is not new, then a build key,
    /// then an OTel resource key, then fewer distinct values, then the key's name.
    fn better_than(&self, other: &GroupFit) -> bool {
        if (self.f1 - other.f1).abs() > F1_TIE {
            return self.f1 > other.f1;
        }
        let rank = |f: &GroupFit| {
            (
                !f.new_value,
                f.group.is_some(),
                !f.names_a_build,
                !f.standard_key,
                f.cardinality,
                f.group.clone(),
            )
        };
        rank(self) < rank(other)
    }
}

/// Trace-context loss of one service: among the service as a whole and the groups of its entry
/// spans by any low-cardinality attribute (resource or span: a build, a pod, a region, whatever
/// it is named), those whose share of broken entries jumped (own baseline, or the service's for
/// a group new in the incident, or for one that first appeared in the last quarter of the
/// baseline and was broken from then on: the service's before it appeared); the one that best
/// sets the broken entries apart is the subject.
fn context_loss_of_service(service: &str, entries: &[EntrySpan], w: &Window) -> Option<Signal> {
    let params = ProportionParams::default();
    let incident: Vec<&EntrySpan> = entries.iter().filter(|e| e.ts_ns >= w.split_ns).collect();
    let broken_total = incident.iter().filter(|e| e.broken).count();
    if broken_total == 0 {
        return None;
    }
    let per_minute = |pick: &dyn Fn(&EntrySpan) -> bool, side: Option<bool>| {
        let mut minutes: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
        for e in entries.iter().filter(|e| pick(e)) {
            if side.is_some_and(|incident| (e.ts_ns >= w.split_ns) != incident) {
                continue;
            }
            let cell = minutes
                .entry(e.ts_ns.div_euclid(MINUTE_NS) * MINUTE_NS)
                .or_default();
            cell.0 += u64::from(e.broken);
            cell.1 += 1;
        }
        minutes
    };
    let service_baseline = per_minute(&|_| true, Some(false));
    // a value first seen in the last quarter of the baseline came with a rollout just before the
    // split: where its own few minutes show no rise (they were already broken), it is judged as
    // new, against the service before it appeared
    let baseline_start = entries.iter().map(|e| e.ts_ns).min().unwrap_or(w.split_ns);
    let late_from = w.split_ns - (w.split_ns - baseline_start) / 4;
    let judge = |group: Option<EntryGroup>, cardinality: usize| -> Option<GroupFit> {
        let member = |e: &EntrySpan| {
            group
                .as_ref()
                .is_none_or(|g| e.attrs.iter().any(|(k, v)| *k == g.key && *v == g.value))
        };
        let own_baseline = per_minute(&member, Some(false));
        let own_total: u64 = own_baseline.values().map(|c| c.1).sum();
        let first_seen = entries.iter().filter(|e| member(e)).map(|e| e.ts_ns).min();
        let rolled_out_late = group.is_some() && first_seen.is_some_and(|ts| ts >= late_from);
        let mut pairs = vec![("service", service)];
        if let Some(g) = &group {
            pairs.push((g.key.as_str(), g.value.as_str()));
        }
        let incident_counts = per_minute(&member, Some(true));
        let rise = |baseline: BTreeMap<i64, (u64, u64)>| {
            let counts: Vec<CountSample> = baseline
                .into_iter()
                .chain(incident_counts.clone())
                .map(|(ts_ns, (hits, total))| CountSample {
                    ts_ns,
                    hits: hits.min(total),
                    total,
                })
                .collect();
            context_loss(&pairs, &counts, w.split_ns, &params).ok()?
        };
        // the service's minutes before the group first appeared
        let before_it = || {
            let before = first_seen.unwrap_or(w.split_ns).div_euclid(MINUTE_NS) * MINUTE_NS;
            service_baseline
                .range(..before)
                .map(|(t, c)| (*t, *c))
                .collect()
        };
        let (finding, new_value) = if own_total >= params.min_baseline_total {
            match rise(own_baseline) {
                Some(finding) => (finding, false),
                None if rolled_out_late => (rise(before_it())?, true),
                None => return None,
            }
        } else if rolled_out_late {
            // too few of its own minutes to judge: the service's own would count its broken ones
            (rise(before_it())?, true)
        } else {
            (rise(service_baseline.clone())?, own_total == 0)
        };
        let members = incident.iter().filter(|e| member(e)).count();
        let hits = incident.iter().filter(|e| e.broken && member(e)).count();
        let f1 = 2.0 * hits as f64 / (broken_total + members).max(1) as f64;
        Some(GroupFit {
            recall: hits as f64 / broken_total as f64,
            new_value,
            names_a_build: group.as_ref().is_some_and(|g| is_build_key(&g.key)),
            standard_key: group
                .as_ref()
                .is_some_and(|g| is_resource_convention(&g.key)),
            group,
            finding,
            f1,
            cardinality,
        })
    };
    let mut best: Option<GroupFit> = judge(None, 1);
    for (key, values) in candidate_keys(entries) {
        let cardinality = values.len();
        for value in values {
            let fit = judge(
                Some(EntryGroup {
                    key: key.clone(),
                    value,
                }),
                cardinality,
            );
            if let Some(fit) = fit
                && best.as_ref().is_none_or(|b| fit.better_than(b))
            {
                best = Some(fit);
            }
        }
    }
    let fit = best?;
    let mut pairs = vec![("service", service)];
    if let Some(g) = &fit.group {
        pairs.push((g.key.as_str(), g.value.as_str()));
    }
    let mut s = signal(&fit.finding, subject(&pairs), SignalKind::TraceContextLoss);
    s.detail = format!(
        "share of entry spans (no stored parent) whose trace lost its context (no child, no other service reached, or a second entry): {}; this group holds {:.0} % of {service}'s broken entries in the incident",
        fit.finding.detail,
        100.0 * fit.recall,
    );
    Some(s)
}
/// Keys of entry-span attributes that can set a group apart: scalar values, at most
/// [`MAX_KEY_VALUES`] distinct ones, not on every entry with one value; each with its values.
fn candidate_keys(entries: &[EntrySpan]) -> BTreeMap<String, Vec<String>> {
    let mut values: BTreeMap<&str, (usize, Vec<&str>)> = BTreeMap::new();
    for entry in entries {
        for (key, value) in &entry.attrs {
            let (count, seen) = values.entry(key.as_str()).or_default();
            *count += 1;
            if seen.len() <= MAX_KEY_VALUES && !seen.contains(&value.as_str()) {
                seen.push(value.as_str());
            }
        }
    }
    values
        .into_iter()
        .filter(|(_, (count, seen))| {
            seen.len() <= MAX_KEY_VALUES && (seen.len() > 1 || *count < entries.len())
        })
        .map(|(key, (_, mut seen))| {
            seen.sort_unstable();
            (
                key.to_string(),
                seen.into_iter().map(str::to_string).collect(),
            )
        })
        .collect()
}

/// A key of the OTel resource semantic conventions (the namespaces that describe what emits
/// telemetry).
fn is_resource_convention(key: &str) -> bool {
    const NAMESPACES: [&str; 9] = [
        "service.",
        "deployment.",
        "k8s.",
        "host.",
        "container.",
        "cloud.",
        "process.",
        "os.",
        "faas.",
    ];
    NAMESPACES.iter().any(|ns| key.starts_with(ns))
}

/// A key naming a build (`service.version`, `deployment.version`, `app.kubernetes.io/version`,
/// `build_id`): the OTel and Kubernetes spellings of what a rollout changes.
fn is_build_key(key: &str) -> bool {
    let last = key
        .rsplit(['.', '/', '_'])
        .next()
        .unwrap_or(key)
        .to_ascii_lowercase();
    matches!(last.as_str(), "version" | "revision" | "build" | "commit")
        || key.to_ascii_lowercase().ends_with("build_id")
}

/// Client-side time beyond the engine's for long outputs, per (service, version) of the root
/// span: a rise on one version with the engine unchanged is a flow-control stall.
async fn flow_control_stalls(
    engine: &QueryEngine,
    w: &Window,
    cache: Option<&mut MinuteCache>,
) -> Result<Vec<Signal>, QueryError> {
    let sql = |w: &Window| {
        let p = w.predicate("ts");
        format!(
            "WITH roots AS (SELECT trace_id AS root_trace, service, ts AS root_ts, duration_ms, \
           COALESCE(json_get(attrs, 'service.version'), '') AS version FROM spans \
           WHERE {p} AND (parent_span_id IS NULL OR parent_span_id = '') AND duration_ms IS NOT NULL), \
         r AS (SELECT trace_id, e2e_ms FROM requests WHERE {p} AND output_tokens >= {LONG_OUTPUT_TOKENS} \
           AND e2e_ms IS NOT NULL) \
         SELECT COALESCE(service, '') AS service, version, date_trunc('minute', root_ts) AS minute, \
           count(*) AS n, avg(duration_ms - e2e_ms) AS overhead \
         FROM roots JOIN r ON roots.root_trace = r.trace_id GROUP BY 1, 2, 3"
        )
    };
    let rows = minute_rows(engine, cache, Statement::FlowControl, (w, "minute"), sql).await?;
    // (service, version) → (minute, requests, mean overhead ms)
    let mut cells: BTreeMap<(String, String), Vec<StallPoint>> = BTreeMap::new();
    rows.for_each(
        &["service", "version"],
        &["n", "overhead"],
        &["minute"],
        |s, f, i| {
            if let (Some(minute), Some(n), Some(overhead)) = (i[0], f[0], f[1]) {
                let key = (
                    s[0].unwrap_or("").to_string(),
                    s[1].unwrap_or("").to_string(),
                );
                cells.entry(key).or_default().push((minute, n, overhead));
            }
        },
    )?;
    let mut base_by_service: HashMap<String, Vec<f64>> = HashMap::new();
    for ((service, _), points) in &cells {
        base_by_service
            .entry(service.clone())
            .or_default()
            .extend(points.iter().filter(|p| p.0 < w.split_ns).map(|p| p.2));
    }
    let mut out = Vec::new();
    for ((service, version), points) in &mut cells {
        points.sort_by_key(|p| p.0);
        let current: Vec<&(i64, f64, f64)> = points.iter().filter(|p| p.0 >= w.split_ns).collect();
        let requests: f64 = current.iter().map(|p| p.1).sum();
        let base = base_by_service
            .get(service.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if requests < 20.0 || current.len() < 3 || base.len() < 10 {
            continue;
        }
        let values: Vec<f64> = current.iter().map(|p| p.2).collect();
        let (Some(before), Some(after)) = (median(base), median(&values)) else {
            continue;
        };
        let scale = (1.4826 * mad(base).unwrap_or(0.0))
            .max(0.1 * before.abs())
            .max(5.0);
        let excess = after - before;
        let z = excess / scale;
        if excess < MIN_STALL_MS || z < MIN_STALL_Z {
            continue;
        }
        let threshold = before + 3.0 * scale;
        let onset = current
            .iter()
            .find(|p| p.2 > threshold)
            .map_or(w.split_ns, |p| p.0);
        out.push(Signal {
            kind: SignalKind::FlowControlStall,
            subject: subject(&[("service", service), ("service.version", version)]),
            onset,
            strength: z,
            detail: format!(
                "{service} {version}: time beyond the engine's e2e for outputs ≥ {LONG_OUTPUT_TOKENS} tokens rose from {before:.0} ms to {after:.0} ms ({requests:.0} requests, z = {z:.1}) while the engine's own latency is not part of it"
            ),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_sides_keeps_at_most_the_sample_per_side_evenly_and_in_order() {
        let entry = |ts_ns: i64| EntrySpan {
            ts_ns,
            broken: false,
            attrs: Vec::new(),
        };
        let cap = ENTRY_SAMPLE as usize;
        // an empty side and a small one are kept whole
        let small: Vec<EntrySpan> = (0..10).rev().map(|t| entry(1_000 + t)).collect();
        let got = sample_sides(small, 0);
        assert_eq!(got.len(), 10);
        assert!(
            got.windows(2).all(|p| p[0].ts_ns < p[1].ts_ns),
            "in time order"
        );
        // 5,120 before the split and 3 after: exactly the cap before, evenly, all 3 after
        let many: Vec<EntrySpan> = (0..5_120).chain(10_000..10_003).map(entry).collect();
        let got = sample_sides(many, 10_000);
        let before: Vec<i64> = got
            .iter()
            .filter(|e| e.ts_ns < 10_000)
            .map(|e| e.ts_ns)
            .collect();
        assert_eq!(before.len(), cap);
        assert_eq!(got.len(), cap + 3);
        assert_eq!(before[0], 0);
        assert!(
            before.windows(2).all(|p| (1..=2).contains(&(p[1] - p[0]))),
            "evenly spaced"
        );
        assert!(
            *before.last().unwrap() >= 5_115,
            "the whole side is spanned"
        );
    }

    #[test]
    fn counter_increases_survive_resets() {
        let counter = vec![(0, 5.0), (1, 7.0), (2, 2.0), (3, 2.0)];
        assert_eq!(increases(&counter), vec![(1, 2.0), (2, 2.0), (3, 0.0)]);
        assert!(increases(&[]).is_empty());
    }

    #[test]
    fn per_minute_folds_samples_of_one_minute() {
        let samples = vec![(1, 0.2), (MINUTE_NS - 1, 0.9), (MINUTE_NS, 0.1)];
        assert_eq!(
            per_minute(&samples, f64::max),
            vec![(0, 0.9), (MINUTE_NS, 0.1)]
        );
    }

    #[test]
    fn prompt_body_drops_leading_fields_only() {
        assert_eq!(
            prompt_body("request_id=cmpl-1 tenant=acme Write a=b query"),
            "Write a=b query"
        );
        assert_eq!(prompt_body("  plain text tenant=x"), "plain text tenant=x");
        assert_eq!(prompt_body("request_id=1 tenant=acme"), "");
        assert_eq!(prompt_body("=x y"), "=x y");
        assert_eq!(prompt_body(""), "");
    }

    fn report_with(causes: &[&[(&str, &str)]]) -> RcaReport {
        let symptom = crate::Symptom {
            sli: "ttft".into(),
            baseline: 300.0,
            current: 450.0,
            onset: 0,
            z: 12.0,
        };
        let causes = causes
            .iter()
            .enumerate()
            .map(|(i, pairs)| RootCause {
                rank: i + 1,
                dimensions: subject(pairs),
                explained_fraction: 0.7,
                score: 9.0,
                evidence: vec!["ttft over the baseline p95".into()],
                slice_rate: None,
            })
            .collect();
        RcaReport {
            fleet_wide: false,
            verdict: "p99 ttft rose from 300 to 450 ms since 2026-01-01T00:00:00Z; most likely cause: k8s.deployment.name=prefix-pool (ttft over the baseline p95)".into(),
            ..RcaReport::of(Some(symptom), causes)
        }
    }

    fn pollution_signal(pairs: &[(&str, &str)]) -> Signal {
        Signal {
            kind: SignalKind::CachePollution,
            subject: subject(pairs),
            onset: 0,
            strength: 6.0,
            detail: "user.org=scanco polluted the prefix cache".into(),
        }
    }

    #[test]
    fn the_polluter_leads_and_where_it_shows_follows() {
        // localization found the pool the victims are served from and a pod whose GPU
        // throttles (a fault of its own, no effect of the pollution); the signal found the
        // polluter
        let mut report = report_with(&[
            &[("k8s.deployment.name", "prefix-pool")],
            &[("worker", "engine-3")],
            &[("user.org", "scanco")],
        ]);
        let signals = [pollution_signal(&[("user.org", "scanco")])];
        let throttled = Signal {
            kind: SignalKind::SlowWorker,
            detail: "device 0: SM clock 2020 MHz → 1122 MHz (−44 %)".into(),
            ..pollution_signal(&[("worker", "engine-3")])
        };
        polluters_first(&mut report, &signals, std::slice::from_ref(&throttled));
        let causes: Vec<String> = report
            .root_causes
            .iter()
            .map(|c| format!("{} {}", c.rank, c.dimensions))
            .collect();
        assert_eq!(
            causes,
            [
                "1 user.org=scanco",
                "2 worker=engine-3",
                "3 k8s.deployment.name=prefix-pool"
            ]
        );
        assert!(report.root_causes[0].evidence[0].starts_with("cache_pollution signal: "));
        assert!(report.root_causes[0].evidence[1].contains("prefix-pool"));
        assert!(
            report.verdict.starts_with(
                "p99 ttft rose from 300 to 450 ms since 2026-01-01T00:00:00Z; most likely cause: user.org=scanco (cache pollution: "
            ),
            "{}",
            report.verdict
        );
        assert!(
            report
                .verdict
                .ends_with("; it shows on k8s.deployment.name=prefix-pool")
        );
        // nothing changes when the polluter already leads, or without a pollution signal
        let before = report.verdict.clone();
        polluters_first(&mut report, &signals, &[]);
        assert_eq!(report.verdict, before);
        let mut plain = report_with(&[&[("worker", "backend-1")]]);
        polluters_first(&mut plain, &[], &[]);
        assert_eq!(
            plain.root_causes[0].dimensions,
            subject(&[("worker", "backend-1")])
        );
    }

    /// Keys that say who sends stay candidates for the tenant's part; keys that say what served
    /// the request do not, by their name (a version, even one a rollout changed on a worker) or
    /// by their values (one per worker: a tracer's scope, a region).
    #[test]
    fn tenant_keys_leave_out_what_serves_the_request() {
        let mut keys: BTreeMap<String, KeyValues> = BTreeMap::new();
        let mut rows = 0;
        for i in 0..200_usize {
            rows += 1;
            let worker = format!("pod-{}", i % 4);
            let mut add = |key: &str, value: &str| {
                keys.entry(key.into())
                    .or_default()
                    .add(value, Some(&worker));
            };
            add("customer.org", ["hooli", "globex", "acme"][i % 3]);
            add("plan", ["free", "pro"][(i / 4) % 2]);
            add(
                "otel.scope.name",
                ["vllm.tracing", "sglang.tracing"][(i % 4) / 2],
            );
            add(
                "cloud.region",
                ["eu-west-1", "us-east-1", "eu-west-1", "ap-south-1"][i % 4],
            );
            add(
                "service.version",
                if i < 100 || i % 4 != 0 {
                    "0.4.9"
                } else {
                    "0.10.2"
                },
            );
            add("service.name", "llm-backend");
        }
        // a key on rows without a worker is judged by its name and values alone
        let mut unplaced = KeyValues::default();
        for i in 0..200 {
            unplaced.add(["a", "b"][i % 2], None);
        }
        keys.insert("team.bucket".into(), unplaced);
        assert!(keys["service.version"].mixed_on_a_worker);
        assert!(keys["otel.scope.name"].set_by_the_worker());
        assert_eq!(
            tenant_keys_of(keys, rows),
            ["customer.org", "team.bucket", "plan"]
        );
    }

    /// Forty minutes of two tenants, split at minute 30; `resonating` gets the injection score,
    /// rejection failures and rollbacks rising together from the split.
    fn tenant_minutes(
        seed: u64,
        resonating: &str,
        calm: &str,
    ) -> BTreeMap<String, BTreeMap<i64, TenantMinute>> {
        let mut rng = infersight_model::rng::SplitMix64::new(seed);
        let mut data = BTreeMap::new();
        for tenant in [resonating, calm] {
            let mut minutes = BTreeMap::new();
            for m in 0..40i64 {
                let after = tenant == resonating && m >= 30;
                let noise = |rng: &mut infersight_model::rng::SplitMix64| 0.01 * rng.normal();
                let (score, rejected, rolled) = if after {
                    (0.6, 0.5, 0.6)
                } else {
                    (0.03, 0.05, 0.1)
                };
                minutes.insert(
                    m * MINUTE_NS,
                    TenantMinute {
                        requests: 100.0,
                        cached_tokens: 400.0,
                        input_tokens: 1000.0,
                        injection_score: Some(score + noise(&mut rng)),
                        rejections: 40.0 * (rejected + noise(&mut rng)),
                        rollbacks: 400.0 * (rolled + noise(&mut rng)),
                        spec_requests: 40.0,
                        drafted: 400.0,
                    },
                );
            }
            data.insert(tenant.to_string(), minutes);
        }
        data
    }

    #[test]
    fn resonance_is_found_under_a_tenant_name_no_mapping_knows() {
        let w = Window {
            since_ns: Some(0),
            until_ns: Some(40 * MINUTE_NS),
            split_ns: 30 * MINUTE_NS,
        };
        for seed in 1..=3 {
            let data = tenant_minutes(seed, "initech", "acme");
            for source in [
                TenantSource::Column,
                TenantSource::Attribute("customer.org".into()),
            ] {
                let found: Vec<String> = tenant_signals(&source, &data, &w)
                    .iter()
                    .filter(|s| s.kind == SignalKind::Resonance)
                    .map(|s| s.subject.to_string())
                    .collect();
                // the subject is named by the source's own key, whatever it is
                assert_eq!(found, [format!("{}=initech", source.key())], "seed {seed}");
            }
        }
    }

    /// Forty minutes, split at minute 30, of four tenants built request by request and kept
    /// 1 in 10 (head-sampled traces): about 10 rows a minute for `initech`, `hooli` and `acme`,
    /// 2 for `globex`. With `fault`, from the split: `initech` resonates (injection scores up,
    /// drafts mostly rejected) and `hooli`'s long unique documents evict `globex`'s cached
    /// system prompt (globex's hit rate 0.9 → about 0.45, hooli's misses ×4).
    fn sampled_tenant_minutes(
        seed: u64,
        fault: bool,
    ) -> BTreeMap<String, BTreeMap<i64, TenantMinute>> {
        let mut rng = infersight_model::rng::SplitMix64::new(seed);
        let mut data: BTreeMap<String, BTreeMap<i64, TenantMinute>> = BTreeMap::new();
        for (tenant, per_minute) in [
            ("initech", 100),
            ("hooli", 100),
            ("acme", 100),
            ("globex", 20),
        ] {
            let minutes = data.entry(tenant.to_string()).or_default();
            for m in 0..40i64 {
                let after = fault && m >= 30;
                let mut c = TenantMinute::default();
                let (mut scored, mut score) = (0.0, 0.0);
                for _ in 0..per_minute {
                    if rng.uniform() >= 0.1 {
                        continue;
                    }
                    c.requests += 1.0;
                    let (input, cached) = match tenant {
                        "globex" => {
                            let hit = rng.uniform() < if after { 0.5 } else { 0.95 };
                            (12_000.0, if hit { 10_800.0 } else { 0.0 })
                        }
                        "hooli" => (
                            if after { 32_000.0 } else { 8_000.0 } * (0.5 + rng.uniform()),
                            0.0,
                        ),
                        _ => (1_000.0, 400.0 * rng.uniform()),
                    };
                    c.input_tokens += input;
                    c.cached_tokens += cached;
                    let injection = if after && tenant == "initech" {
                        0.35
                    } else {
                        0.02
                    };
                    scored += 1.0;
                    score += (injection + 0.05 * rng.normal()).clamp(0.0, 1.0);
                    if rng.uniform() < 0.3 {
                        let drafted = 40.0;
                        let acceptance = if after && tenant == "initech" && rng.uniform() < 0.5 {
                            0.1
                        } else {
                            0.5 + 0.1 * rng.normal()
                        };
                        let accepted = (drafted * acceptance).round().clamp(0.0, drafted);
                        c.spec_requests += 1.0;
                        c.drafted += drafted;
                        c.rollbacks += drafted - accepted;
                        if accepted < REJECTION_SHARE * drafted {
                            c.rejections += 1.0;
                        }
                    }
                }
                if c.requests > 0.0 {
                    c.injection_score = Some(score / scored);
                    minutes.insert(m * MINUTE_NS, c);
                }
            }
        }
        data
    }

    #[test]
    fn sparse_tenant_minutes_are_pooled_and_dense_ones_kept() {
        let data = sampled_tenant_minutes(1, false);
        let split = 30 * MINUTE_NS;
        // 100 requests a minute: kept as they are
        let dense: BTreeMap<i64, TenantMinute> = (0..40)
            .map(|m| {
                (
                    m * MINUTE_NS,
                    TenantMinute {
                        requests: 100.0,
                        ..TenantMinute::default()
                    },
                )
            })
            .collect();
        assert!(matches!(
            pooled_minutes(&dense, |c| c.requests, split),
            std::borrow::Cow::Borrowed(_)
        ));
        // about 2 rows a minute: every minute gets a point, each the mean of the last 5 minutes
        let globex = &data["globex"];
        let pooled = pooled_minutes(globex, |c| c.requests, split);
        assert_eq!(
            pooled.len(),
            40,
            "a point for every minute, rows in it or not"
        );
        let last = 39 * MINUTE_NS;
        let mean: f64 = globex
            .range(35 * MINUTE_NS..=last)
            .map(|(_, c)| c.requests)
            .sum::<f64>()
            / 5.0;
        assert!((pooled[&last].requests - mean).abs() < 1e-9);
    }

    #[test]
    fn resonance_and_cache_pollution_are_found_on_head_sampled_rows() {
        let w = Window {
            since_ns: Some(0),
            until_ns: Some(40 * MINUTE_NS),
            split_ns: 30 * MINUTE_NS,
        };
        let kinds = |signals: &[Signal]| -> Vec<(SignalKind, String)> {
            let mut found: Vec<(SignalKind, String)> = signals
                .iter()
                .filter(|s| matches!(s.kind, SignalKind::Resonance | SignalKind::CachePollution))
                .map(|s| (s.kind, s.subject.to_string()))
                .collect();
            found.sort_by(|a, b| a.1.cmp(&b.1));
            found
        };
        for seed in 1..=5 {
            let found = kinds(&tenant_signals(
                &TenantSource::Column,
                &sampled_tenant_minutes(seed, true),
                &w,
            ));
            assert_eq!(
                found,
                [
                    (SignalKind::CachePollution, "tenant=hooli".to_string()),
                    (SignalKind::Resonance, "tenant=initech".to_string())
                ],
                "seed {seed}"
            );
            // the same tenants without a fault: nothing
            let calm = kinds(&tenant_signals(
                &TenantSource::Column,
                &sampled_tenant_minutes(seed, false),
                &w,
            ));
            assert!(calm.is_empty(), "seed {seed}: {calm:?}");
        }
    }

    #[test]
    fn busiest_keeps_the_heaviest() {
        let mut w = BTreeMap::new();
        w.insert("a", 1.0);
        w.insert("b", 3.0);
        assert_eq!(busiest(&w), vec!["b", "a"]);
    }
}
