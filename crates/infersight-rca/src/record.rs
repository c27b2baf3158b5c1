//! The one "analyse, then store the verdict as an incident" path that `infersight rca`,
//! `infersight report` (without `--incident`), the demo and `POST /api/v1/rca` share: every
//! verdict over windows with enough requests is stored, so it can be confirmed, rejected and
//! reported on later, and the report carries the id it was stored under; one over windows with
//! too few requests is answered ("not enough data: …", [`crate::incidents::quality`]) and not
//! stored.

use crate::incidents::quality;
use crate::{Incident, IncidentStore, RcaError, RcaReport, RcaRequest, analyse};
use infersight_query::QueryEngine;

/// A verdict and the incident it was stored as; `report.incident_id` is the incident's id.
#[derive(Debug, Clone)]
pub struct RecordedRca {
    pub report: RcaReport,
    /// `None` when the windows held too few requests to judge (the verdict says so).
    pub incident: Option<Incident>,
}

impl RecordedRca {
    /// The stored incident, or the verdict as a `BadRequest` when none was stored (for callers
    /// that go on to report on it).
    pub fn stored(self) -> Result<Incident, RcaError> {
        self.incident
            .ok_or_else(|| RcaError::BadRequest(self.report.verdict.clone()))
    }
}

/// Runs the root-cause analysis and stores the verdict in `incidents` (the file write runs on a
/// blocking thread) when its windows hold enough requests. The stored copy has no
/// `incident_id`; the returned report has it.
pub async fn analyse_and_record(
    engine: &QueryEngine,
    incidents: &IncidentStore,
    request: RcaRequest,
) -> Result<RecordedRca, RcaError> {
    let mut report = analyse(engine, request).await?;
    if !quality::check(engine, &mut report).await? {
        return Ok(RecordedRca {
            report,
            incident: None,
        });
    }
    let store = incidents.clone();
    let orgs = engine.scope().orgs().map(<[String]>::to_vec);
    let (report_back, incident) = tokio::task::spawn_blocking(move || {
        let incident = store.create_for_orgs(&report, orgs);
        (report, incident)
    })
    .await
    .map_err(|e| RcaError::Io(format!("incident store task failed: {e}")))?;
    report = report_back;
    let incident = incident?;
    report.incident_id = Some(incident.id.clone());
    Ok(RecordedRca {
        report,
        incident: Some(incident),
    })
}
