//! Whether a verdict is worth an incident: an RCA over windows that hold too few requests
//! (a brush over a gap, a range after the data stopped) cannot judge anything, so
//! `analyse_and_record` answers "not enough data: N requests in the incident window" and stores
//! no incident; a person is never handed an open incident that says nothing.
//!
//! Decision rule: each window needs at least [`MIN_WINDOW_REQUESTS`] `requests` rows (sampled
//! rows count once: they are what the analysis sees). Fewer, and the baseline's p95 thresholds
//! and the Poisson z of a symptom rest on a handful of requests.

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use infersight_model::time::format_rfc3339;
use infersight_query::{QueryEngine, QueryError};

use crate::{RcaReport, Window};

/// Fewest requests in each window (incident and baseline) before a verdict is judged.
pub const MIN_WINDOW_REQUESTS: u64 = 10;

/// The requests an RCA's two windows hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowRequests {
    pub incident: u64,
    pub baseline: u64,
}

impl WindowRequests {
    /// Whether both windows hold enough requests to judge.
    pub fn enough(&self) -> bool {
        self.incident >= MIN_WINDOW_REQUESTS && self.baseline >= MIN_WINDOW_REQUESTS
    }

    /// The answer for windows without enough requests, e.g. `not enough data: 0 requests in the
    /// incident window 05:00 → 05:10 (4210 in the baseline); …`.
    pub fn answer(&self, report: &RcaReport) -> String {
        let span = |w: &Option<Window>| match w {
            Some(w) => format!(" {} → {}", format_rfc3339(w.since), format_rfc3339(w.until)),
            None => String::new(),
        };
        let (scarce, count, window, other, other_count) = if self.incident < MIN_WINDOW_REQUESTS {
            (
                "incident",
                self.incident,
                &report.incident_window,
                "baseline",
                self.baseline,
            )
        } else {
            (
                "baseline",
                self.baseline,
                &report.baseline_window,
                "incident",
                self.incident,
            )
        };
        format!(
            "not enough data: {count} request{} in the {scarce} window{} ({other_count} in the {other}); \
             an RCA needs at least {MIN_WINDOW_REQUESTS} in each, so nothing is judged and no incident is stored; \
             choose a window with data",
            if count == 1 { "" } else { "s" },
            span(window),
        )
    }
}

/// Counts the `requests` rows in `report`'s incident and baseline windows (0 each when it has
/// none: the store held no request data).
pub async fn window_requests(
    engine: &QueryEngine,
    report: &RcaReport,
) -> Result<WindowRequests, QueryError> {
    let (Some(incident), Some(baseline)) = (&report.incident_window, &report.baseline_window)
    else {
        return Ok(WindowRequests {
            incident: 0,
            baseline: 0,
        });
    };
    let within = |w: &Window| {
        format!(
            "ts >= to_timestamp_nanos({}) AND ts < to_timestamp_nanos({})",
            w.since, w.until
        )
    };
    let sql = format!(
        "SELECT CAST(sum(CASE WHEN {} THEN 1 ELSE 0 END) AS BIGINT) AS incident, \
                CAST(sum(CASE WHEN {} THEN 1 ELSE 0 END) AS BIGINT) AS baseline \
         FROM requests WHERE ts >= to_timestamp_nanos({}) AND ts < to_timestamp_nanos({})",
        within(incident),
        within(baseline),
        incident.since.min(baseline.since),
        incident.until.max(baseline.until),
    );
    let result = engine.sql(&sql).await?;
    let value = |column: usize| -> u64 {
        result
            .batches
            .first()
            .filter(|b| b.num_rows() > 0)
            .and_then(|b| b.column(column).as_primitive_opt::<Int64Type>().cloned())
            .filter(|c| c.is_valid(0))
            .map_or(0, |c| c.value(0).max(0) as u64)
    };
    Ok(WindowRequests {
        incident: value(0),
        baseline: value(1),
    })
}

/// Counts the requests of `report`'s windows and, when there are too few, turns it into the
/// "not enough data" answer ([`not_enough_data`]); `true` when it holds enough to be judged.
pub async fn check(engine: &QueryEngine, report: &mut RcaReport) -> Result<bool, QueryError> {
    let counts = window_requests(engine, report).await?;
    if !counts.enough() {
        not_enough_data(report, counts);
    }
    Ok(counts.enough())
}

/// Turns `report` into the "not enough data" answer: the verdict says how many requests there
/// were, and nothing found on so few requests is kept (symptom, causes, signals, evidence,
/// advice); the windows stay, so the answer says which ones were asked about.
pub fn not_enough_data(report: &mut RcaReport, counts: WindowRequests) {
    report.verdict = counts.answer(report);
    report.symptom = None;
    report.root_causes.clear();
    report.signals.clear();
    report.log_evidence.clear();
    report.log_sequences.clear();
    report.suggestions.clear();
    report.checklist.clear();
    report.fleet_wide = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> RcaReport {
        serde_json::from_value(serde_json::json!({
            "symptom": null, "root_causes": [], "signals": [], "log_evidence": [],
            "suggestions": [], "checklist": [], "fleet_wide": false,
            "incident_window": {"since": "2025-11-29T05:00:00.000Z", "until": "2025-11-29T05:10:00.000Z"},
            "baseline_window": {"since": "2025-11-29T04:00:00.000Z", "until": "2025-11-29T05:00:00.000Z"},
            "window_source": "given", "verdict": "v", "elapsed_ms": 1.0, "timings_ms": {}
        }))
        .unwrap()
    }

    #[test]
    fn the_answer_names_the_window_short_of_requests_and_its_count() {
        let empty = WindowRequests {
            incident: 0,
            baseline: 4210,
        };
        assert!(!empty.enough());
        let text = empty.answer(&report());
        assert!(
            text.starts_with("not enough data: 0 requests in the incident window 2025-11-29T05:00:00.000Z → 2025-11-29T05:10:00.000Z (4210 in the baseline)"),
            "{text}"
        );
        let thin_baseline = WindowRequests {
            incident: 500,
            baseline: 1,
        };
        assert!(!thin_baseline.enough());
        assert!(
            thin_baseline
                .answer(&report())
                .starts_with("not enough data: 1 request in the baseline window"),
            "{}",
            thin_baseline.answer(&report())
        );
        assert!(
            WindowRequests {
                incident: MIN_WINDOW_REQUESTS,
                baseline: MIN_WINDOW_REQUESTS
            }
            .enough()
        );
    }
}
