//! The root-cause engine's orchestration: localize the incident (blocking, over rollups), then
//! gather signals, log evidence, lineage and sequences through SQL, then the advice; see the
//! crate documentation for the decision rules.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::AsArray;

use infersight_model::signal::SignalKind;
use infersight_query::{QueryEngine, QueryError};
use infersight_rollup::Rollup;
use infersight_store::TimeRange;

use crate::advice::{
    add_fault_signals, advice, derived_signals, fault_signals, promote_signals, slice_latency_spike,
};
use crate::attributes::attribute_rollup;
use crate::pods::slow_pods;
use crate::windows::{KnownCause, Localized, localize_incident, relocalize, with_attribute_onsets};
use crate::{
    RcaReport, RcaRequest, Signal, collect_signals, lineage, log_evidence, sequence_evidence,
};

/// Signal kinds that name a pod's own device fault from its metrics (complete where traces may
/// be sampled), not a consequence of load: localization takes such a pod as a known cause.
const DEVICE_FAULTS: &[SignalKind] = &[SignalKind::GpuMemoryLeak, SignalKind::SlowWorker];

/// Device faults that are steps: the change point the complete metrics give is when their
/// effect on requests begins (a leak's growth starts long before it slows anything).
const STEP_FAULTS: &[SignalKind] = &[SignalKind::SlowWorker];

/// The onsets of the [`STEP_FAULTS`] that `signals` show on one pod each, with the series that
/// dated each (`slow_worker of worker=…`).
fn step_faults(signals: &[Signal]) -> Vec<(i64, String)> {
    signals
        .iter()
        .filter(|s| STEP_FAULTS.contains(&s.kind) && s.subject.len() == 1)
        .filter_map(|s| {
            let worker = s.subject.get("worker")?;
            Some((s.onset, format!("{} of worker={worker}", s.kind)))
        })
        .collect()
}

/// The pods that `signals` show a device fault on ([`DEVICE_FAULTS`]), as known causes.
fn device_faults(signals: &[Signal]) -> Vec<KnownCause> {
    let mut known: Vec<KnownCause> = Vec::new();
    for signal in signals {
        let Some(worker) = signal.subject.get("worker") else {
            continue;
        };
        let elements = vec![("worker".to_string(), worker.clone())];
        if signal.subject.len() != 1
            || !DEVICE_FAULTS.contains(&signal.kind)
            || known.iter().any(|k| k.elements == elements)
        {
            continue;
        }
        known.push(KnownCause {
            elements,
            evidence: format!("{} signal: {}", signal.kind, signal.detail),
        });
    }
    known
}

/// When the first pass (over the stored rollups) found a symptom, or pods slowed over its
/// windows (see [`crate::pods`]), localizes it again over the rollup's dimensions and the
/// attribute dimensions of the windows' raw rows (see [`crate::attributes`]), each leaf judged on
/// the rows it holds when rows are sampled, around the `known` causes, looking inside the slowed
/// pods; returns the result and that rollup, or the first pass unchanged when no
/// attribute qualifies, no row is sampled and nothing is known.
async fn with_attribute_dimensions(
    engine: &QueryEngine,
    request: RcaRequest,
    localized: Localized,
    known: Vec<KnownCause>,
) -> Result<(Localized, Option<Arc<Rollup>>), QueryError> {
    // pods whose complete latency histograms rose: looked inside where no cause covers them
    let pods = match localized.chosen.as_ref() {
        Some(chosen) => slow_pods(engine, chosen.baseline, chosen.incident).await?,
        None => Vec::new(),
    };
    if !pods.is_empty() {
        tracing::debug!(?pods, "pods slowed by their latency histograms");
    }
    let found_symptom = localized
        .report
        .as_ref()
        .is_some_and(|r| r.symptom.is_some());
    // a pod whose complete latency histograms rose is a symptom the fleet's series may hide
    let Some(chosen) = localized
        .chosen
        .clone()
        .filter(|_| found_symptom || !pods.is_empty())
    else {
        return Ok((localized, None));
    };
    let range = TimeRange {
        since_ns: chosen.baseline.since_ns,
        until_ns: chosen.incident.until_ns,
    };
    let attributes = attribute_rollup(engine, range, &chosen.dimensions).await?;
    if attributes.is_none() && known.is_empty() && pods.is_empty() {
        return Ok((localized, None));
    }
    let (rollup, observed_rows) = match attributes {
        Some(attributes) => {
            tracing::debug!(keys = ?attributes.keys, "attribute dimensions");
            (Some(Arc::new(attributes.rollup)), attributes.observed_rows)
        }
        None => (None, None),
    };
    let store = Arc::clone(engine.store());
    let leaf_rollup = rollup.clone();
    let again = tokio::task::spawn_blocking(move || {
        let rollups = (leaf_rollup.as_deref(), observed_rows.as_ref());
        relocalize(store.as_ref(), request, &chosen, rollups, (&known, &pods))
    })
    .await
    .map_err(|e| QueryError::Internal(format!("rca task failed: {e}")))??;
    Ok((again, rollup))
}

/// How many `requests` rows the store holds (sampled rows count once here, by their weight in
/// the rollups); `None` when the count gives no number.
async fn stored_request_rows(engine: &QueryEngine) -> Result<Option<u64>, QueryError> {
    let result = engine.sql("SELECT count(*) AS n FROM requests").await?;
    Ok(result
        .batches
        .first()
        .filter(|b| b.num_rows() > 0)
        .and_then(|b| {
            b.column(0)
                .as_primitive_opt::<arrow::datatypes::Int64Type>()
                .map(|c| c.value(0).max(0) as u64)
        }))
}

/// `localized` analysed again from the onset of a step fault in `signals` when its detected
/// window starts well before it (see `windows::moved_to_step_fault`), with `signals` read
/// again over the new windows; else `localized` unchanged.
async fn redated_by_step_fault(
    engine: &QueryEngine,
    request: RcaRequest,
    stored_rows: Option<u64>,
    localized: Localized,
    signals: &mut Vec<Signal>,
) -> Result<Localized, QueryError> {
    let steps = step_faults(signals);
    if steps.is_empty() {
        return Ok(localized);
    }
    let store = Arc::clone(engine.store());
    let (moved, localized) = tokio::task::spawn_blocking(move || {
        let moved = crate::windows::moved_to_step_fault(
            store.as_ref(),
            request,
            stored_rows,
            &localized,
            &steps,
        );
        (moved, localized)
    })
    .await
    .map_err(|e| QueryError::Internal(format!("rca task failed: {e}")))?;
    Ok(match moved? {
        Some(moved) => {
            *signals = collect_signals(engine, &moved.context).await?;
            moved
        }
        None => localized,
    })
}

/// Runs the root-cause engine (blocking parts on a blocking thread).
pub async fn analyse(engine: &QueryEngine, request: RcaRequest) -> Result<RcaReport, QueryError> {
    let started = std::time::Instant::now();
    let store = Arc::clone(engine.store());
    let stored_rows = stored_request_rows(engine).await?;
    let localized = tokio::task::spawn_blocking(move || {
        localize_incident(store.as_ref(), request, stored_rows)
    })
    .await
    .map_err(|e| QueryError::Internal(format!("rca task failed: {e}")))??;
    // a slice of an attribute no rollup column holds may have changed when nothing else did
    let localized = with_attribute_onsets(engine, request, stored_rows, localized).await?;
    // the signals read the windows alone; a pod they show a device fault on is a known cause
    let signals_started = std::time::Instant::now();
    let mut signals = match localized.report {
        Some(_) => collect_signals(engine, &localized.context).await?,
        None => Vec::new(),
    };
    // a detected window well before the step fault the complete metrics date was dated by noise
    let localized =
        redated_by_step_fault(engine, request, stored_rows, localized, &mut signals).await?;
    let signals_ms = signals_started.elapsed().as_secs_f64() * 1e3;
    let known = device_faults(&signals);
    let (mut localized, mut leaf_rollup) =
        with_attribute_dimensions(engine, request, localized, known).await?;
    let store = Arc::clone(engine.store());
    let (again, fell_back) = tokio::task::spawn_blocking(move || {
        let fallback = crate::windows::unconfirmed_to_fallback(
            store.as_ref(),
            request,
            stored_rows,
            &localized,
        )?;
        Ok::<_, QueryError>(match fallback {
            Some(fallback) => (fallback, true),
            None => (localized, false),
        })
    })
    .await
    .map_err(|e| QueryError::Internal(format!("rca task failed: {e}")))??;
    localized = again;
    if fell_back {
        // the signals read the new windows
        signals = collect_signals(engine, &localized.context).await?;
        leaf_rollup = None;
    }
    let Some(mut report) = localized.report else {
        return Ok(RcaReport {
            symptom: None,
            root_causes: Vec::new(),
            signals: Vec::new(),
            log_evidence: Vec::new(),
            log_sequences: Vec::new(),
            suggestions: Vec::new(),
            checklist: Vec::new(),
            fleet_wide: false,
            incident_window: None,
            baseline_window: None,
            window_source: String::new(),
            verdict: "no request data in the store".into(),
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
            timings_ms: BTreeMap::new(),
            incident_id: None,
        });
    };
    let ctx = localized.context;
    let found_signals = localized.signals;
    let lap = |t: &mut std::time::Instant| {
        let ms = t.elapsed().as_secs_f64() * 1e3;
        *t = std::time::Instant::now();
        ms
    };
    let mut clock = std::time::Instant::now();
    report.timings_ms.insert(
        "localize".into(),
        started.elapsed().as_secs_f64() * 1e3 - signals_ms,
    );
    report.timings_ms.insert("signals".into(), signals_ms);
    // faults the detectors found on their own subjects, before anything is read off the causes
    let faults = fault_signals(&signals);
    let localized_causes = !report.root_causes.is_empty();
    signals.extend(derived_signals(&report, &ctx));
    signals.extend(found_signals);
    // a flow-control stall is a latency spike at the gateway, whatever the engine SLIs say
    let stalls: Vec<Signal> = signals
        .iter()
        .filter(|s| s.kind == SignalKind::FlowControlStall)
        .map(|s| Signal {
            kind: SignalKind::LatencySpike,
            detail: format!("gateway latency: {}", s.detail),
            ..s.clone()
        })
        .collect();
    if !signals.iter().any(|s| s.kind == SignalKind::LatencySpike) {
        signals.extend(stalls);
    }
    signals.sort_by(|a, b| b.strength.total_cmp(&a.strength));
    promote_signals(&mut report, &signals);
    if !signals.iter().any(|s| s.kind == SignalKind::LatencySpike)
        && let Some(top) = report.root_causes.first()
    {
        let store = Arc::clone(engine.store());
        let (subject, ctx2) = (top.dimensions.clone(), ctx.clone());
        let leaf_rollup = leaf_rollup.clone();
        let spike = tokio::task::spawn_blocking(move || {
            slice_latency_spike(store.as_ref(), leaf_rollup.as_deref(), &ctx2, &subject)
        })
        .await
        .map_err(|e| QueryError::Internal(format!("rca task failed: {e}")))??;
        signals.extend(spike);
    }
    // the polluter is the cause of what localization found where its pollution shows
    crate::signals::polluters_first(&mut report, &signals, &faults);
    if localized_causes {
        add_fault_signals(&mut report, &faults);
    }
    report.signals = signals;
    report.log_evidence = log_evidence(engine, &ctx).await?;
    report
        .timings_ms
        .insert("log_evidence".into(), lap(&mut clock));
    if !report.log_evidence.is_empty() {
        let seeds: Vec<String> = report
            .log_evidence
            .iter()
            .map(|e| e.template_id.clone())
            .collect();
        let graph = lineage(engine, &ctx, &seeds).await?;
        for evidence in &mut report.log_evidence {
            evidence.lineage = graph.summary_of(&evidence.template_id);
        }
        report.timings_ms.insert("lineage".into(), lap(&mut clock));
    }
    report.log_sequences = sequence_evidence(engine, &ctx).await?;
    report
        .timings_ms
        .insert("log_sequences".into(), lap(&mut clock));
    // a cause that is the load on its workers is labelled so before the advice reads it
    let store = Arc::clone(engine.store());
    let mut report = tokio::task::spawn_blocking(move || {
        crate::load::label_load_causes(store.as_ref(), leaf_rollup.as_deref(), &ctx, &mut report)
            .map(|()| report)
    })
    .await
    .map_err(|e| QueryError::Internal(format!("rca task failed: {e}")))??;
    let (suggestions, checklist) = advice(&report);
    report.suggestions = suggestions;
    report.checklist = checklist;
    report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}
