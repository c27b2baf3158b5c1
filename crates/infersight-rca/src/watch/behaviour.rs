//! The RCA's resource and behaviour detectors run incrementally (step 4 of [`super`]): every
//! [`super::WatchSettings::behaviour_every_ns`], `crate::signals::collect_signals_cached` (SQL
//! over metrics, spans, requests and prompts, bounded by its windows) over the last
//! `behaviour_window_ns` against the `behaviour_baseline_ns` before it — or, while an incident
//! is open, over the incident so far (at most an hour) against the time before its onset. The
//! statements whose rows belong to one minute read only the minutes not yet settled (the
//! [`MinuteCache`] kept here); the others read the window. Its signals stay the step's
//! detections until the next evaluation.

use infersight_model::signal::Subject;
use infersight_query::QueryEngine;
use infersight_store::TimeRange;

use super::{Detection, MINUTE_NS, WatchSettings};
use crate::signals::{MinuteCache, collect_signals_cached};
use crate::{RcaContext, RcaError};

/// The longest incident window the detectors read.
const MAX_INCIDENT_NS: i64 = 60 * MINUTE_NS;

/// When the detectors last ran, and what they found.
#[derive(Debug, Clone, Default)]
pub struct BehaviourCache {
    evaluated_at_ns: Option<i64>,
    found: Vec<Detection>,
    /// The detectors' per-minute rows, kept between runs.
    minutes: MinuteCache,
}

impl BehaviourCache {
    /// The latest findings; the detectors run again when their interval has passed since the
    /// last run (or the clock went back, as when a replay starts over).
    pub async fn evaluate(
        &mut self,
        engine: &QueryEngine,
        settings: &WatchSettings,
        end_ns: i64,
        frozen_onset: Option<i64>,
    ) -> Result<Option<Vec<Detection>>, RcaError> {
        let due = self
            .evaluated_at_ns
            .is_none_or(|at| end_ns - at >= settings.behaviour_every_ns || end_ns < at);
        if due {
            self.found = run(engine, settings, end_ns, frozen_onset, &mut self.minutes).await?;
            self.evaluated_at_ns = Some(end_ns);
        }
        Ok(Some(self.found.clone()))
    }
}

/// The windows the detectors judge at `end_ns`: (baseline, incident).
pub fn windows(
    settings: &WatchSettings,
    end_ns: i64,
    frozen_onset: Option<i64>,
) -> (TimeRange, TimeRange) {
    let split = match frozen_onset {
        Some(onset) => onset.max(end_ns - MAX_INCIDENT_NS).min(end_ns - MINUTE_NS),
        None => end_ns - settings.behaviour_window_ns,
    };
    let baseline_end = frozen_onset.map_or(split, |onset| onset.min(split));
    (
        TimeRange {
            since_ns: Some(baseline_end - settings.behaviour_baseline_ns),
            until_ns: Some(baseline_end),
        },
        TimeRange {
            since_ns: Some(split),
            until_ns: Some(end_ns),
        },
    )
}

async fn run(
    engine: &QueryEngine,
    settings: &WatchSettings,
    end_ns: i64,
    frozen_onset: Option<i64>,
    minutes: &mut MinuteCache,
) -> Result<Vec<Detection>, RcaError> {
    let (baseline, incident) = windows(settings, end_ns, frozen_onset);
    let ctx = RcaContext {
        baseline,
        incident,
        onset_ns: incident.since_ns.unwrap_or(end_ns),
        symptom: String::new(),
        root_causes: Vec::new(),
        latency_symptom: None,
    };
    let signals = collect_signals_cached(engine, &ctx, minutes).await?;
    Ok(signals
        .into_iter()
        .map(|s| {
            let subject: Subject = s.subject.clone();
            Detection {
                key: format!("signal/{}/{}", s.kind, subject),
                kind: s.kind.to_string(),
                subject,
                onset_ns: s.onset,
                strength: s.strength,
                detail: s.detail,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_slide_without_an_incident_and_hold_the_onset_with_one() {
        let s = WatchSettings::default();
        let end = 100 * MINUTE_NS;
        let (b, i) = windows(&s, end, None);
        assert_eq!(i.since_ns, Some(95 * MINUTE_NS));
        assert_eq!(b.until_ns, Some(95 * MINUTE_NS));
        assert_eq!(b.since_ns, Some(65 * MINUTE_NS));
        let (b, i) = windows(&s, end, Some(90 * MINUTE_NS));
        assert_eq!(i.since_ns, Some(90 * MINUTE_NS));
        assert_eq!(b.until_ns, Some(90 * MINUTE_NS));
        // an incident older than an hour: the detectors read its last hour
        let (b, i) = windows(&s, end, Some(10 * MINUTE_NS));
        assert_eq!(i.since_ns, Some(40 * MINUTE_NS));
        assert_eq!(b.until_ns, Some(10 * MINUTE_NS));
    }
}
