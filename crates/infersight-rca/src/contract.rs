//! The `rca` JSON contract of DESIGN.md as types: what the CLI prints, the API answers and the
//! incident store keeps. Field names and serde names are stable; timestamps are RFC 3339.

use std::collections::BTreeMap;

use infersight_model::signal::{SignalKind, Subject};
use infersight_model::time::format_rfc3339;
use infersight_store::TimeRange;
use serde::{Deserialize, Serialize};

/// Windows of an RCA question; `None` means "choose".
#[derive(Debug, Clone, Copy, Default)]
pub struct RcaRequest {
    pub incident: Option<TimeRange>,
    pub baseline: Option<TimeRange>,
}

impl RcaRequest {
    /// The request from the window bounds the CLI flags and the API body give (`--since`,
    /// `--until`, `--baseline-since`, `--baseline-until`: RFC 3339, epoch or relative like `-1h`,
    /// relative to `now_ns`): both ends of a window or neither. The error is the message for a
    /// usage error (exit 2) or a 400.
    pub fn from_bounds(
        (since, until): (Option<&str>, Option<&str>),
        (baseline_since, baseline_until): (Option<&str>, Option<&str>),
        now_ns: i64,
    ) -> Result<RcaRequest, String> {
        let window = |a: Option<&str>, b: Option<&str>, what: &str| match (a, b) {
            (None, None) => Ok(None),
            (Some(a), Some(b)) => {
                infersight_model::time::parse_range(Some(a), Some(b), now_ns).map(Some)
            }
            _ => Err(format!("give both ends of the {what} window or neither")),
        };
        Ok(RcaRequest {
            incident: window(since, until, "incident")?,
            baseline: window(baseline_since, baseline_until, "baseline")?,
        })
    }
}

/// One signal, as the contract shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Signal {
    pub kind: SignalKind,
    pub subject: Subject,
    #[serde(serialize_with = "ser_ts", deserialize_with = "de_ts")]
    pub onset: i64,
    pub strength: f64,
    pub detail: String,
}

/// One log template that rose with (or before) the incident.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogEvidence {
    pub template: String,
    pub template_id: String,
    /// Incident rate / baseline rate (with one pseudo-event each, so new templates are finite).
    pub lift: f64,
    /// How long before the onset the template's rate first rose (negative: after).
    pub lead_seconds: f64,
    pub baseline_count: u64,
    pub incident_count: u64,
    /// The slice the evidence was restricted to (empty: fleet).
    pub subject: Subject,
    /// Where the template's records lead in the lineage graph (workers, requests, model
    /// versions); absent in reports stored before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<LineageSummary>,
}

fn ser_ts<S: serde::Serializer>(ns: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_rfc3339(*ns))
}

/// Reads back what `ser_ts` wrote (stored incidents are RCA reports read back from JSON).
fn de_ts<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    infersight_model::time::parse_time(&text, 0).map_err(serde::de::Error::custom)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Symptom {
    pub sli: String,
    /// The SLI's value in the baseline and in the incident (p99 ms for latency, a rate otherwise).
    pub baseline: f64,
    pub current: f64,
    #[serde(serialize_with = "ser_ts", deserialize_with = "de_ts")]
    pub onset: i64,
    pub z: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootCause {
    pub rank: usize,
    pub dimensions: Subject,
    pub explained_fraction: f64,
    pub score: f64,
    pub evidence: Vec<String>,
    /// The fraction of the slice's requests (prompt tokens, for the prefix cache) that are a
    /// localized measure's events — requests over the reference, errors, aborts, prompt tokens
    /// not served from the prefix cache — in the baseline and in the incident, of the measure
    /// where it rose most against its baseline; for a slice new in the incident, its peers'
    /// fraction at the same time (else what it replaced) stands for the baseline. Absent for
    /// causes known only from a signal, and in reports stored before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice_rate: Option<SliceRate>,
}

/// First words of a load-driven queueing cause's first evidence line (see `load`).
pub const LOAD_DRIVEN: &str = "load-driven queueing";

impl RootCause {
    /// The odds ratio of the slice's fraction of events, incident against baseline (see
    /// [`SliceRate::odds_ratio`]); `None` without [`RootCause::slice_rate`].
    pub fn odds_ratio(&self) -> Option<f64> {
        self.slice_rate.map(|r| r.odds_ratio())
    }

    /// Whether the cause is labelled load-driven queueing (an effect of load, not a fault of
    /// what the slice names): its evidence leads with the load line.
    pub fn is_load_driven(&self) -> bool {
        self.evidence
            .first()
            .is_some_and(|e| e.starts_with(LOAD_DRIVEN))
    }
}

/// The fraction of a slice's requests that are a measure's events, baseline and incident.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SliceRate {
    pub baseline: f64,
    pub incident: f64,
}

impl SliceRate {
    /// The odds of an event in the incident over its odds in the baseline, `p / (1 − p)` each:
    /// for rare events (5 % of requests over the reference) it is about the ratio of the
    /// fractions, and unlike that ratio it is not capped by a common baseline (a cache missing
    /// 30 % of prompt tokens can miss at most 3.3 × as many, but its odds can grow without
    /// bound). Infinite from a baseline of none or to an incident of all; 1 when both are equal.
    /// A slice small enough to see no event in the baseline by chance gets an infinite ratio:
    /// localization's significance, not this ratio, stands behind such a cause.
    pub fn odds_ratio(&self) -> f64 {
        let (baseline, incident) = (self.baseline.clamp(0.0, 1.0), self.incident.clamp(0.0, 1.0));
        if baseline == incident {
            1.0
        } else if baseline <= 0.0 || incident >= 1.0 {
            f64::INFINITY
        } else if incident <= 0.0 || baseline >= 1.0 {
            0.0
        } else {
            (incident / (1.0 - incident)) / (baseline / (1.0 - baseline))
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    #[serde(serialize_with = "ser_ts", deserialize_with = "de_ts")]
    pub since: i64,
    #[serde(serialize_with = "ser_ts", deserialize_with = "de_ts")]
    pub until: i64,
}

/// The `rca` JSON contract (DESIGN.md), plus the windows used and a one-line verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RcaReport {
    pub symptom: Option<Symptom>,
    pub root_causes: Vec<RootCause>,
    pub signals: Vec<Signal>,
    pub log_evidence: Vec<LogEvidence>,
    /// Unexpected log sequences of the incident's requests and traces against a next-event
    /// model of the baseline's (see `logs::sequences`); absent in reports stored before it.
    #[serde(default)]
    pub log_sequences: Vec<SequenceAnomaly>,
    pub suggestions: Vec<String>,
    pub checklist: Vec<String>,
    pub fleet_wide: bool,
    pub incident_window: Option<Window>,
    pub baseline_window: Option<Window>,
    /// How the incident window was chosen: `given`, `change in <sli>` (change-point detection),
    /// or `fallback: last third` (no fleet series changed).
    pub window_source: String,
    pub verdict: String,
    pub elapsed_ms: f64,
    /// Where the time went: localize, signals, log_evidence (milliseconds).
    pub timings_ms: BTreeMap<String, f64>,
    /// The id of the incident this verdict was stored as ([`crate::record`]); absent until it
    /// is stored, and in the copy the incident store keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incident_id: Option<String>,
}

#[cfg(test)]
impl RcaReport {
    /// A report of the given symptom and causes, nothing else found (for unit tests).
    pub(crate) fn of(symptom: Option<Symptom>, root_causes: Vec<RootCause>) -> RcaReport {
        RcaReport {
            symptom,
            fleet_wide: root_causes.is_empty(),
            root_causes,
            signals: Vec::new(),
            log_evidence: Vec::new(),
            log_sequences: Vec::new(),
            suggestions: Vec::new(),
            checklist: Vec::new(),
            incident_window: None,
            baseline_window: None,
            window_source: "given".into(),
            verdict: String::new(),
            elapsed_ms: 0.0,
            timings_ms: BTreeMap::new(),
            incident_id: None,
        }
    }
}

/// Where one evidence template's sampled records lead, walked from the [`crate::logs::lineage::LineageGraph`]: the
/// workers they were emitted on, the requests they belong to (by request id or trace) and the
/// model versions and sessions of those requests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineageSummary {
    /// Records of the template in the graph (at most [`crate::logs::lineage::MAX_LOGS_PER_TEMPLATE`], those nearest
    /// the onset).
    pub records: usize,
    /// Records per worker they were emitted on.
    pub workers: BTreeMap<String, usize>,
    /// Distinct requests the records link to.
    pub requests: usize,
    /// Those requests per model version that served them.
    pub model_versions: BTreeMap<String, usize>,
    /// Distinct traces and sessions the records and their requests belong to.
    pub traces: usize,
    pub sessions: usize,
    /// Links to records of other evidence templates (declared upstream, or the same worker
    /// within a few seconds).
    pub linked_records: usize,
}

/// One kind of unexpected step in the incident's sessions.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SequenceAnomaly {
    /// `unseen_event` (a template no baseline session logged), `unseen_transition` (it never
    /// followed the event before it), `premature_end` (sessions never ended there), `rare`.
    pub reason: String,
    /// The unexpected template (`None`: the session ended).
    pub template_id: Option<String>,
    pub template: Option<String>,
    /// The event before it (`None`: the start of the session).
    pub after_template_id: Option<String>,
    pub after_template: Option<String>,
    /// What baseline sessions logged there instead, most frequent first (at most 3; `None`
    /// stands for the end of the session).
    pub expected_template_ids: Vec<Option<String>>,
    pub incident_sessions: u64,
    pub incident_total: u64,
    pub baseline_sessions: u64,
    pub baseline_total: u64,
    /// Workers of the incident's sessions with this pattern (the worker of a session's first
    /// record), most first, at most 3.
    pub workers: Vec<(String, u64)>,
}

#[cfg(test)]
mod tests {
    use super::SliceRate;

    #[test]
    fn odds_ratios_of_slice_rates() {
        let ratio = |baseline, incident| SliceRate { baseline, incident }.odds_ratio();
        // a burst on half the fleet: about the ratio of the fractions (1.93)
        assert!((ratio(0.043, 0.083) - 2.0145).abs() < 1e-3);
        // a slow worker
        assert!((ratio(0.055, 0.474) - 15.49).abs() < 0.01);
        // a fraction with a large baseline still reaches a large ratio
        assert!((ratio(0.3, 0.9) - 21.0).abs() < 1e-9);
        assert_eq!(ratio(0.3, 1.0), f64::INFINITY);
        assert_eq!(ratio(0.0, 0.02), f64::INFINITY);
        assert_eq!(ratio(0.0, 0.0), 1.0);
        assert_eq!(ratio(0.2, 0.0), 0.0);
        assert!(ratio(0.3, 0.2) < 1.0);
    }
}
