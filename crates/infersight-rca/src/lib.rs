//! infersight-rca, the root-cause application behind `infersight rca`, `POST /api/v1/rca` and the
//! incident reports: it reads the store through `infersight-query` (SQL) and the rollups, and
//! writes the `rca` JSON contract of DESIGN.md ([`contract`]). The steps: choose the
//! incident window (change detection on the fleet's per-minute SLIs from rollups) and its
//! baseline, find which SLI moved (over-threshold latency, errors, truncations — each a count per
//! leaf, so latency is localized as "requests over the baseline p95", never as a quantile),
//! localize it to attribute combinations (`infersight_analytics::localize`), then gather the
//! resource signals ([`signals`]) and log evidence ([`logs`]) that came with it, and write the
//! JSON contract of DESIGN.md.
//!
//! Decision rules (documented because users act on them):
//! - Window: the most significant confirmed level shift (or else spike) upwards in the fleet's
//!   per-minute share of requests over the reference p95 of TTFT, e2e or queue time, error rate
//!   or abort rate, against the first third of the data as reference (seasonal, by time of day,
//!   once that reference holds two days); where rows are sampled, a level shift's onset is
//!   re-dated within 15 minutes by the maximum-likelihood change point of the counts behind the
//!   shares (each minute weighed by the rows it holds), and the series are ranked by the
//!   Poisson z of their counts from the onset on (variance scaled by the sampling weight), a
//!   shift the data ends too soon to confirm among the shifts; incident = onset → end of data,
//!   baseline = the hour before the onset (at least 10 minutes). A window whose top cause
//!   changed at another time is analysed again from the cause's own change point: earlier
//!   without limit, later by at most 15 minutes (a cause that changed later still is another
//!   change than the one that chose the window). When no fleet series changes (a fault confined to a small slice), the last
//!   third of the data is compared with what came before, so a slice-local fault still surfaces;
//!   the report then says the onset was not detected. A detected window that starts at least
//!   three minutes before a pod's GPU clock fell (the clock's own change point: complete
//!   metrics, where request rows may be head-sampled), with no such fault near its start, is
//!   analysed again from that change point, and kept when its symptom's z is at least as high.
//! - Symptom: each candidate measure gets a fleet-level Poisson z of its incident count against
//!   the baseline rate times the incident's requests; measures with z ≥ [`MIN_SYMPTOM_Z`] are
//!   localized; the symptom reported is the one with the largest z.
//! - Root causes: the localizer's causes across the significant measures, the same combination
//!   found by several measures merged (evidence from each), ranked by scan score. A fleet-wide
//!   change yields `fleet_wide = true` and no specific cause. When no measure localizes anything
//!   but a fault signal names a subject (trace-context loss on a gateway version, resonance on a
//!   tenant), that subject becomes the root cause with the signal as its evidence.
//! - Second pass: the window's rows over the attribute dimensions too (see [`attributes`]);
//!   the refinements of a combination the first pass found significant in the same measure are
//!   tested at the multiplicity of that combination's descendants once nothing passes the
//!   whole lattice's bar (hierarchical testing; see `infersight_analytics::localize::Around`).
//! - Pods (see [`pods`]): the serving runtimes' TTFT histograms count every request where
//!   traces may be head-sampled. A pod whose share of requests over its own baseline p90 bucket
//!   rose (binomial LLR over `ln(tests) + ln 1e10`, at least doubled against its baseline moved as
//!   the other pods' moved) and that no cause found so far covers is localized inside: its
//!   leaves over the dimensions that vary within it and did not turn over at the incident (a
//!   rollout to the pod is merged away), at α = 1e-3 with Poisson noise; a slice found there is
//!   named with the pod, else the pod itself. Where no fleet measure moved enough to be a
//!   symptom, such a pod's TTFT is the symptom.
//! - Latency measures leave out combinations without baseline traffic (nothing to regress
//!   from); count measures keep them.
//! - Demand shifts: a latency cause whose requests became at least [`DEMAND_SHIFT_FACTOR`] ×
//!   longer (mean input tokens per request, incident vs baseline, at least
//!   [`DEMAND_SHIFT_MIN_REQUESTS`] requests each side) has no comparable baseline either: its
//!   latency follows its own prompt length (a tenant that started sending 16k-token documents
//!   has a high TTFT because prefill is proportional to the prompt), not a service regression.
//!   Its combinations are set aside and the measure localized again, so the slice whose *same*
//!   requests got slower comes out; the set-aside slice is reported as a `demand_shift` signal
//!   (when nothing else localizes, that signal becomes the root cause like any other).
//!
//! Where it lives: [`analyse`] runs the steps below in order; [`windows`] chooses the incident and
//! baseline windows and drives localization per measure ([`measures`], [`leaves`]); [`signals`]
//! and [`logs`] gather resource signals, log evidence, lineage and sequences; [`advice`] turns the
//! findings into promoted causes, suggestions and a checklist; [`incidents`] stores every verdict
//! and [`record`] is the one "analyse, then store the incident" path of the CLI and the API.

pub mod advice;
pub mod analyse;
pub mod attributes;
pub mod contract;
pub mod error;
pub mod incidents;
pub mod leaves;
pub mod load;
pub mod logs;
pub mod measures;
pub mod pods;
pub mod record;
pub mod rollout;
pub mod signals;
pub mod watch;
pub mod windows;

use infersight_store::TimeRange;

pub use analyse::analyse;
pub use contract::{
    LOAD_DRIVEN, LogEvidence, RcaReport, RcaRequest, RootCause, Signal, SliceRate, Symptom, Window,
};
pub use error::RcaError;
pub use incidents::{
    ActionRecord, Incident, IncidentState, IncidentStatus, IncidentStore, NotificationRecord,
    StoredNotice, TimelineEntry, WatchRecord,
};
pub use infersight_model::signal::{SignalKind, Subject};
pub use logs::{LineageSummary, SequenceAnomaly, lineage, log_evidence, sequence_evidence};
pub use record::{RecordedRca, analyse_and_record};
pub use signals::collect_signals;

pub(crate) const MINUTE_NS: i64 = 60_000_000_000;
pub(crate) const DAY_NS: i64 = 24 * 60 * MINUTE_NS;
/// A measure is a symptom when its fleet-level excess is at least this many Poisson σ.
pub const MIN_SYMPTOM_Z: f64 = 5.0;
/// Latency thresholds are this quantile of the baseline.
pub(crate) const THRESHOLD_QUANTILE: f64 = 0.95;
/// A root-cause slice whose median or tail latency grew by this factor has a latency spike.
pub(crate) const SLICE_SPIKE_FACTOR: f64 = 1.2;
/// A latency cause whose mean input tokens per request grew by this factor is a demand shift.
pub const DEMAND_SHIFT_FACTOR: f64 = 2.0;
/// Requests each side before a slice's mean prompt length is trusted.
pub const DEMAND_SHIFT_MIN_REQUESTS: u64 = 20;
/// An explanatory cause's ratio must rise by this factor…
pub(crate) const EXPLANATION_MIN_FACTOR: f64 = 1.25;
/// …and by this much (a fraction: 5 percentage points of prompt tokens).
pub(crate) const EXPLANATION_MIN_RISE: f64 = 0.05;
/// At most this many demand-shift passes per measure.
pub(crate) const DEMAND_SHIFT_PASSES: usize = 3;

/// What the signal and log-evidence collectors get: the windows and what localization found.
#[derive(Debug, Clone)]
pub struct RcaContext {
    pub baseline: TimeRange,
    pub incident: TimeRange,
    pub onset_ns: i64,
    /// Name of the symptom measure (`ttft`, `e2e`, `errors`, …).
    pub symptom: String,
    /// The localized slices (attribute → value), best first; empty when none.
    pub root_causes: Vec<Subject>,
    /// The most significant latency measure, when one moved (it need not be the symptom: errors
    /// may have moved more).
    pub latency_symptom: Option<Symptom>,
}
