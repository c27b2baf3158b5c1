//! When two stored verdicts are about the same event, so the incident store links them
//! (`Incident::related`) instead of leaving two unrelated open incidents: a person who brushed
//! the same slowdown twice (onsets 20:02 and 20:08), or the watcher and a person who both asked,
//! gets one event with two analyses.
//!
//! Decision rule (documented because the UI shows the links): two verdicts are of the same event
//! when their incident windows overlap and either
//! - they blame the same top cause (the same attribute combination), or
//! - both found a symptom and their onsets are at most [`SAME_EVENT_ONSET_NS`] apart.
//!
//! Verdicts without a window never link; a healthy verdict (no symptom, no cause) links only
//! through nothing, so "no anomaly" answers do not gather into an event.

use crate::RcaReport;

/// Onsets this close (10 minutes) are one event when the windows overlap.
pub const SAME_EVENT_ONSET_NS: i64 = 10 * crate::MINUTE_NS;
/// At most this many earlier incidents are linked to a new one (the most recent).
pub const MAX_RELATED: usize = 20;

/// Whether `a` and `b` are verdicts about the same event (see the module's rule).
pub fn same_event(a: &RcaReport, b: &RcaReport) -> bool {
    let (Some(wa), Some(wb)) = (&a.incident_window, &b.incident_window) else {
        return false;
    };
    let overlap = wa.since < wb.until && wb.since < wa.until;
    if !overlap {
        return false;
    }
    let same_cause = match (a.root_causes.first(), b.root_causes.first()) {
        (Some(ca), Some(cb)) => ca.dimensions == cb.dimensions && !ca.dimensions.is_empty(),
        _ => false,
    };
    let close_onsets = match (&a.symptom, &b.symptom) {
        (Some(sa), Some(sb)) => (sa.onset - sb.onset).abs() <= SAME_EVENT_ONSET_NS,
        _ => false,
    };
    same_cause || close_onsets
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A verdict over `since`..`until` (minutes after 20:00), with a symptom at `onset` (minutes)
    /// and a top cause, when given.
    fn verdict(since: i64, until: i64, onset: Option<i64>, cause: Option<&str>) -> RcaReport {
        // minutes after 20:00 (negative: before)
        let at = |minutes: i64| {
            infersight_model::time::format_rfc3339(
                1_767_297_600_000_000_000 + minutes * crate::MINUTE_NS,
            )
        };
        serde_json::from_value(json!({
            "symptom": onset.map(|m| json!({"sli": "ttft", "baseline": 200.0, "current": 900.0, "onset": at(m), "z": 40.0})),
            "root_causes": cause.map(|c| vec![json!({"rank": 1, "dimensions": {"model_version": c},
                "explained_fraction": 0.9, "score": 10.0, "evidence": ["e"]})]).unwrap_or_default(),
            "signals": [], "log_evidence": [], "suggestions": [], "checklist": [], "fleet_wide": false,
            "incident_window": {"since": at(since), "until": at(until)},
            "baseline_window": {"since": at(since - 30), "until": at(since)},
            "window_source": "given", "verdict": "v", "elapsed_ms": 1.0, "timings_ms": {}
        }))
        .unwrap()
    }

    #[test]
    fn overlapping_windows_with_near_onsets_or_the_same_cause_are_one_event() {
        // two brushes of one slowdown: onsets 6 minutes apart, different top causes
        assert!(same_event(
            &verdict(2, 45, Some(2), Some("r2")),
            &verdict(8, 45, Some(8), Some("r1"))
        ));
        // the same cause found from onsets far apart, windows overlapping
        assert!(same_event(
            &verdict(0, 120, Some(5), Some("r2")),
            &verdict(60, 120, Some(70), Some("r2"))
        ));
        // the order does not matter
        assert!(same_event(
            &verdict(8, 45, Some(8), None),
            &verdict(2, 45, Some(2), None)
        ));
    }

    #[test]
    fn separate_windows_far_onsets_and_healthy_verdicts_are_not() {
        // the same cause on two days' windows that do not overlap
        assert!(!same_event(
            &verdict(0, 30, Some(5), Some("r2")),
            &verdict(30, 60, Some(35), Some("r2"))
        ));
        // one long window holding a second, later fault with another cause
        assert!(!same_event(
            &verdict(0, 180, Some(5), Some("r2")),
            &verdict(120, 180, Some(125), Some("worker-03"))
        ));
        // two "no anomaly" answers over the same window
        assert!(!same_event(
            &verdict(0, 30, None, None),
            &verdict(0, 30, None, None)
        ));
    }
}
