//! What an incident tells the outside world: the [`IncidentNotice`] the watcher (and SLO alerting)
//! hands to an [`IncidentNotifier`] when an incident opens, changes or resolves. The trait lives
//! here, below every engine, so the watcher (in `infersight-rca`) can call it; the server's
//! `notify` module implements it (Alertmanager API v2, the signed webhook) with a bounded queue,
//! so a call never blocks the caller.

use std::collections::BTreeMap;

use crate::signal::Subject;

/// How urgent an incident is; written as Alertmanager's conventional `severity` label values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Someone should look now (an SLI moved, an SLO burns fast).
    #[default]
    Critical,
    /// Someone should look soon (a projected exhaustion, a slow burn).
    Warning,
    /// For the record.
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// One incident as notifications describe it. `incident_id` identifies the episode: every
/// notice of one incident carries the same id, so receivers (and Alertmanager) group them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IncidentNotice {
    /// The stored incident's id (or, for SLO alerts, `slo/<name>/<severity>`).
    pub incident_id: String,
    /// Alertmanager's `alertname`: `InferenceIncident`, `SloBurnRate`, `ExhaustionRisk`, ...
    pub alertname: String,
    pub severity: Severity,
    /// One line: what is wrong ("P99 TTFT ×3 on model llama-3-8b").
    pub summary: String,
    /// The verdict in a few lines: cause, share of the excess, evidence, runbook.
    pub description: String,
    /// The slice the verdict blames (empty: the whole fleet).
    pub cause: Subject,
    pub model: Option<String>,
    pub worker: Option<String>,
    /// When the fault began (detected onset), Unix ns.
    pub onset_ns: i64,
    /// When the watcher confirmed it, Unix ns.
    pub detected_ns: i64,
    /// When it resolved, Unix ns; set on `incident_resolved`.
    pub resolved_ns: Option<i64>,
    /// Path of the report on the API (`/api/v1/incidents/{id}/report`); the notifier makes it
    /// absolute with its configured external URL.
    pub report_path: Option<String>,
    /// Further labels (low-cardinality; e.g. `slo`). Never overrides the named fields.
    pub extra_labels: BTreeMap<String, String>,
}

/// Which transition a notice reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    Opened,
    Updated,
    Resolved,
}

impl Transition {
    pub fn as_str(self) -> &'static str {
        match self {
            Transition::Opened => "opened",
            Transition::Updated => "updated",
            Transition::Resolved => "resolved",
        }
    }
}

/// Where incident transitions go. Implementations must not block: they enqueue and return
/// (delivery, retries and failures are theirs to count and log).
pub trait IncidentNotifier: Send + Sync + std::fmt::Debug {
    /// Reports `transition` of `notice`.
    fn notify(&self, transition: Transition, notice: &IncidentNotice);

    fn incident_opened(&self, notice: &IncidentNotice) {
        self.notify(Transition::Opened, notice);
    }

    /// The verdict, severity or cause changed while the incident is open.
    fn incident_updated(&self, notice: &IncidentNotice) {
        self.notify(Transition::Updated, notice);
    }

    /// `notice.resolved_ns` says when (the notifier uses now when it is `None`).
    fn incident_resolved(&self, notice: &IncidentNotice) {
        self.notify(Transition::Resolved, notice);
    }
}

/// A notifier that sends nothing (no sink configured; tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoNotifier;

impl IncidentNotifier for NoNotifier {
    fn notify(&self, _transition: Transition, _notice: &IncidentNotice) {}
}
