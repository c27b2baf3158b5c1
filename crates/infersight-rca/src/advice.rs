//! From findings to advice: a latency spike confined to the top cause, signals promoted to causes
//! when nothing localized, fault signals beside what did (a second fault), signals derived from
//! the causes, and the suggestions and checklist.

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_model::mapping::names_a_deployed_version;
use infersight_model::signal::{SignalKind, Subject};
use infersight_query::QueryError;
use infersight_rollup::{LatencySli, Rollup, merge_range};
use infersight_store::TimeRange;

use crate::{RcaContext, RcaReport, RootCause, SLICE_SPIKE_FACTOR, Signal};

/// A latency spike confined to `subject` (too small to move the fleet's SLIs): its p50 or p99
/// e2e or TTFT in the incident at least [`SLICE_SPIKE_FACTOR`] × the baseline's, with at least
/// 30 requests on each side (a slice's p50 over hundreds of requests moves little by chance).
/// `leaf_rollup`, when the causes came from one (attribute dimensions), is read instead of the
/// store's rollups, which lack those dimensions.
pub(crate) fn slice_latency_spike(
    store: &dyn infersight_store::StorageBackend,
    leaf_rollup: Option<&Rollup>,
    ctx: &RcaContext,
    subject: &BTreeMap<String, String>,
) -> Result<Option<Signal>, QueryError> {
    let parts = match leaf_rollup {
        Some(_) => Vec::new(),
        None => store.rollups(TimeRange::ALL)?,
    };
    let refs: Vec<&Rollup> = match leaf_rollup {
        Some(rollup) => vec![rollup],
        None => parts.iter().map(Arc::as_ref).collect(),
    };
    let filters: Vec<(String, String)> = subject
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let base = merge_range(
        &refs,
        &filters,
        ctx.baseline.since_ns,
        ctx.baseline.until_ns,
    );
    let inc = merge_range(
        &refs,
        &filters,
        ctx.incident.since_ns,
        ctx.incident.until_ns,
    );
    if base.requests < 30 || inc.requests < 30 {
        return Ok(None);
    }
    for (sli, q) in [
        (LatencySli::E2e, 0.5),
        (LatencySli::E2e, 0.99),
        (LatencySli::Ttft, 0.5),
        (LatencySli::Ttft, 0.99),
    ] {
        let (Some(before), Some(after)) =
            (base.sketch(sli).quantile(q), inc.sketch(sli).quantile(q))
        else {
            continue;
        };
        if before > 0.0 && after >= SLICE_SPIKE_FACTOR * before {
            return Ok(Some(Signal {
                kind: SignalKind::LatencySpike,
                subject: subject.clone().into(),
                onset: ctx.onset_ns,
                strength: after / before,
                detail: format!(
                    "p{:.0} {} of {} {before:.0} ms → {after:.0} ms",
                    q * 100.0,
                    sli.name(),
                    Subject::describe(subject)
                ),
            }));
        }
    }
    Ok(None)
}

/// When no request SLI localized anything, a fault signal on a specific subject (a gateway
/// version losing trace context, a tenant's speculative-decoding resonance) is the best
/// explanation there is: it becomes the root cause, with the signal as evidence.
pub(crate) fn promote_signals(report: &mut RcaReport, signals: &[Signal]) {
    if !report.root_causes.is_empty() {
        return;
    }
    for signal in signals {
        if signal.subject.is_empty() || signal.kind == SignalKind::LatencySpike {
            continue;
        }
        if report
            .root_causes
            .iter()
            .any(|c| c.dimensions == signal.subject)
        {
            continue;
        }
        report.root_causes.push(RootCause {
            rank: report.root_causes.len() + 1,
            dimensions: signal.subject.clone(),
            explained_fraction: 0.0,
            score: signal.strength,
            evidence: vec![format!("{} signal: {}", signal.kind, signal.detail)],
            slice_rate: None,
        });
        if report.root_causes.len() == 3 {
            break;
        }
    }
    if let Some(top) = report.root_causes.first() {
        report.verdict = format!(
            "no request SLI moved enough to localize, but {} shows {}; most likely cause: {}",
            Subject::describe(&top.dimensions),
            top.evidence[0],
            Subject::describe(&top.dimensions)
        );
    }
}

/// Signal kinds that are a fault of their own subject wherever localization points: a pod's
/// device (memory leak, a throttled GPU), a pod's preemption storm, a tenant's speculative-decoding
/// resonance, a gateway version losing trace context or stalling streams, a model truncating.
/// Load-driven kinds (queue buildup, kv-cache pressure), pollution (see
/// [`crate::signals::polluters_first`]) and what is read off the causes themselves are not.
pub(crate) const FAULT_KINDS: &[SignalKind] = &[
    SignalKind::GpuMemoryLeak,
    SignalKind::SlowWorker,
    SignalKind::PreemptionStorm,
    SignalKind::Resonance,
    SignalKind::TraceContextLoss,
    SignalKind::FlowControlStall,
    SignalKind::TruncationSurge,
];

/// The fault signals ([`FAULT_KINDS`], on a specific subject) among what the detectors found,
/// strongest first; call it before any signal is derived from the causes.
pub(crate) fn fault_signals(signals: &[Signal]) -> Vec<Signal> {
    let mut faults: Vec<Signal> = signals
        .iter()
        .filter(|s| !s.subject.is_empty() && FAULT_KINDS.contains(&s.kind))
        .cloned()
        .collect();
    faults.sort_by(|a, b| b.strength.total_cmp(&a.strength));
    faults
}

/// Whether two combinations share an `attribute=value` pair.
fn overlaps(a: &Subject, b: &Subject) -> bool {
    a.iter().any(|(k, v)| b.get(k) == Some(v))
}

/// Two faults at once (a throttled pod while a gateway version loses trace context): when
/// localization found causes, a fault signal on a subject none of them touches is a cause of
/// its own. Below the top cause, causes a fault signal backs (those added here and those a
/// detector confirms) rank ahead of slices only the partition found, which may be the
/// consequences of the top cause (traffic moved off a slow pod, a cache gone cold there).
pub(crate) fn add_fault_signals(report: &mut RcaReport, faults: &[Signal]) {
    if report.root_causes.is_empty() {
        return;
    }
    let mut added = Vec::new();
    for fault in faults {
        if report
            .root_causes
            .iter()
            .any(|c| overlaps(&c.dimensions, &fault.subject))
        {
            continue;
        }
        added.push(format!("{} ({} signal)", fault.subject, fault.kind));
        report.root_causes.push(RootCause {
            rank: 0,
            dimensions: fault.subject.clone(),
            explained_fraction: 0.0,
            score: fault.strength,
            evidence: vec![
                format!("{} signal: {}", fault.kind, fault.detail),
                "a fault of its own beside the top cause (no cause found by localization touches it)"
                    .into(),
            ],
            slice_rate: None,
        });
    }
    let backed = |c: &RootCause| faults.iter().any(|f| f.subject == c.dimensions);
    let rest = report.root_causes.split_off(1);
    let (first, second): (Vec<RootCause>, Vec<RootCause>) = rest.into_iter().partition(backed);
    report.root_causes.extend(first);
    report.root_causes.extend(second);
    for (i, cause) in report.root_causes.iter_mut().enumerate() {
        cause.rank = i + 1;
    }
    if !added.is_empty() {
        report.verdict = format!("{}; also: {}", report.verdict, added.join("; "));
    }
}

/// Whether one of `dimensions` is the version, build or revision of what serves the requests,
/// mapped onto `model_version` or not (`service.version`, `model.revision`: see
/// [`names_a_deployed_version`]).
pub(crate) fn names_a_version_dimension(dimensions: &BTreeMap<String, String>) -> bool {
    dimensions.keys().any(|key| names_a_deployed_version(key))
}

/// Signals read off the localization itself: a latency spike on the symptom's slice, a version
/// regression when a cause names a version under any name, a slow worker when a cause is one
/// worker.
pub(crate) fn derived_signals(report: &RcaReport, ctx: &RcaContext) -> Vec<Signal> {
    let mut out = Vec::new();
    let latency = ctx.latency_symptom.is_some();
    if let Some(symptom) = &ctx.latency_symptom {
        out.push(Signal {
            kind: SignalKind::LatencySpike,
            subject: ctx.root_causes.first().cloned().unwrap_or_default(),
            onset: ctx.onset_ns,
            strength: symptom.z,
            detail: format!(
                "fleet p99 {} {:.0} ms → {:.0} ms",
                symptom.sli, symptom.baseline, symptom.current
            ),
        });
    }
    if report.symptom.is_none() {
        return out;
    }
    for cause in &report.root_causes {
        if names_a_version_dimension(&cause.dimensions) {
            out.push(Signal {
                kind: SignalKind::VersionRegression,
                subject: cause.dimensions.clone(),
                onset: ctx.onset_ns,
                strength: cause.score,
                detail: format!(
                    "{} regressed: {}",
                    Subject::describe(&cause.dimensions),
                    cause.evidence[0]
                ),
            });
        }
        if latency && cause.dimensions.len() == 1 && cause.dimensions.contains_key("worker") {
            out.push(Signal {
                kind: SignalKind::SlowWorker,
                subject: cause.dimensions.clone(),
                onset: ctx.onset_ns,
                strength: cause.score,
                detail: format!(
                    "{} is slower than the fleet: {}",
                    Subject::describe(&cause.dimensions),
                    cause.evidence[0]
                ),
            });
        }
    }
    out
}

/// First fixes and verification steps per signal kind (the knowledge base replaces this).
pub(crate) fn advice(report: &RcaReport) -> (Vec<String>, Vec<String>) {
    let mut suggestions = Vec::new();
    let mut checklist = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for signal in &report.signals {
        if !seen.insert(signal.kind) {
            continue;
        }
        let subject = Subject::describe(&signal.subject);
        let (fix, check) = match signal.kind.name() {
            "version_regression" => (
                format!(
                    "roll {subject} back to the previous version or route its traffic elsewhere"
                ),
                format!(
                    "p99 TTFT of {subject} returns to its baseline within 10 minutes of the rollback"
                ),
            ),
            "slow_worker" => (
                format!(
                    "drain {subject} and check GPU temperature, clocks and throttling reasons (nvidia-smi -q -d PERFORMANCE)"
                ),
                format!("{subject}'s p50 e2e matches the other workers after the drain or fix"),
            ),
            "gpu_memory_leak" => (
                format!(
                    "restart the engine on {subject}; look for logits processors or caches that keep tensors per request"
                ),
                format!("GPU memory on {subject} stays flat under load after the restart"),
            ),
            "queue_buildup" => (
                format!(
                    "lower the batching wait / raise max batch size on {subject}, or add capacity; enable admission control"
                ),
                format!("queue_ms of {subject} returns to its baseline and no timeouts are logged"),
            ),
            "kv_cache_pressure" | "preemption_storm" => (
                format!(
                    "reduce max_num_seqs or max model length on {subject}, or raise gpu_memory_utilization; spread long prompts"
                ),
                format!("preemptions on {subject} drop to their baseline rate"),
            ),
            "cache_pollution" => (
                format!("isolate {subject}'s traffic (separate prefix-cache partition or workers)"),
                "the victim tenant's prefix-cache hit rate recovers".into(),
            ),
            "truncation_surge" => (
                format!("check max_tokens defaults and stop sequences for {subject}"),
                format!("share of finish_reason=length for {subject} returns to its baseline"),
            ),
            "trace_context_loss" => (
                format!("check trace-context propagation (traceparent headers) in {subject}"),
                "gateway spans have engine children again".into(),
            ),
            "resonance" => (
                format!(
                    "turn speculative decoding off for {subject} or filter the injected prompts upstream"
                ),
                "draft acceptance rate and rejection-sampling failures return to their baseline"
                    .into(),
            ),
            "error_burst" => (
                format!("look at the error logs of {subject} around the onset"),
                format!("error rate of {subject} returns to its baseline"),
            ),
            "demand_shift" => (
                format!(
                    "{subject} now sends much longer prompts: if that is expected, give it capacity of its own or enable chunked prefill so its prefills do not hold up others; if not, cap its input length at the gateway"
                ),
                format!(
                    "TTFT per 1k prompt tokens of {subject} is at its baseline, and the other slices' TTFT is unaffected"
                ),
            ),
            "latency_spike" => continue,
            other => (
                format!("investigate the {other} signal on {subject}"),
                format!("the {other} signal clears"),
            ),
        };
        suggestions.push(fix);
        checklist.push(check);
    }
    if suggestions.is_empty()
        && let Some(top) = report.root_causes.first()
    {
        let subject = Subject::describe(&top.dimensions);
        suggestions.push(format!(
            "compare the configuration and recent changes of {subject} with the rest of the fleet"
        ));
        checklist.push(format!(
            "the symptom SLI of {subject} returns to its baseline"
        ));
    }
    (suggestions, checklist)
}
