//! The root-cause engine's orchestration: localize the incident (blocking, over rollups), then
//! gather signals, log evidence, lineage and sequences through SQL, then the advice; see the
//! crate documentation for the decision rules.

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_model::signal::SignalKind;
use infersight_query::{QueryEngine, QueryError};
use infersight_rollup::Rollup;
use infersight_store::TimeRange;

use crate::advice::{advice, derived_signals, promote_signals, slice_latency_spike};
use crate::attributes::attribute_rollup;
use crate::windows::{Localized, localize_incident, relocalize};
use crate::{
    RcaReport, RcaRequest, Signal, collect_signals, lineage, log_evidence, sequence_evidence,
};

/// When the first pass (over the stored rollups) found a symptom, localizes it again over the
/// rollup's dimensions and the attribute dimensions of the windows' raw rows (see
/// [`crate::attributes`]); returns the result and that rollup, or the first pass unchanged when
/// no attribute qualifies.
async fn with_attribute_dimensions(
    engine: &QueryEngine,
    request: RcaRequest,
    localized: Localized,
) -> Result<(Localized, Option<Arc<Rollup>>), QueryError> {
    let found_symptom = localized
        .report
        .as_ref()
        .is_some_and(|r| r.symptom.is_some());
    let Some(chosen) = localized.chosen.clone().filter(|_| found_symptom) else {
        return Ok((localized, None));
    };
    let range = TimeRange {
        since_ns: chosen.baseline.since_ns,
        until_ns: chosen.incident.until_ns,
    };
    let Some(attributes) = attribute_rollup(engine, range, &chosen.dimensions).await? else {
        return Ok((localized, None));
    };
    tracing::debug!(keys = ?attributes.keys, "attribute dimensions");
    let rollup = Arc::new(attributes.rollup);
    let store = Arc::clone(engine.store());
    let leaf_rollup = Arc::clone(&rollup);
    let again = tokio::task::spawn_blocking(move || {
        relocalize(store.as_ref(), request, &chosen, leaf_rollup.as_ref())
    })
    .await
    .map_err(|e| QueryError::Internal(format!("rca task failed: {e}")))??;
    Ok((again, Some(rollup)))
}

/// Runs the root-cause engine (blocking parts on a blocking thread).
pub async fn analyse(engine: &QueryEngine, request: RcaRequest) -> Result<RcaReport, QueryError> {
    let started = std::time::Instant::now();
    let store = Arc::clone(engine.store());
    let localized = tokio::task::spawn_blocking(move || localize_incident(store.as_ref(), request))
        .await
        .map_err(|e| QueryError::Internal(format!("rca task failed: {e}")))??;
    let (localized, leaf_rollup) = with_attribute_dimensions(engine, request, localized).await?;
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
    let demand_shifts = localized.demand_shifts;
    let lap = |t: &mut std::time::Instant| {
        let ms = t.elapsed().as_secs_f64() * 1e3;
        *t = std::time::Instant::now();
        ms
    };
    let mut clock = std::time::Instant::now();
    report
        .timings_ms
        .insert("localize".into(), started.elapsed().as_secs_f64() * 1e3);
    let mut signals = collect_signals(engine, &ctx).await?;
    report.timings_ms.insert("signals".into(), lap(&mut clock));
    signals.extend(derived_signals(&report, &ctx));
    signals.extend(demand_shifts);
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
    crate::signals::polluters_first(&mut report, &signals);
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
    let (suggestions, checklist) = advice(&report);
    report.suggestions = suggestions;
    report.checklist = checklist;
    report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}
