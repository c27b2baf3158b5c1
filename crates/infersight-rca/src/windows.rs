//! Windows: for one choice of incident window (given, detected or the fallback), the baseline
//! before it, the measures that moved, and their localization into root causes.

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_analytics::localize::Params;
use infersight_model::signal::Subject;
use infersight_model::time::format_rfc3339;
use infersight_query::QueryError;
use infersight_rollup::{Cell, Rollup, combination_totals, merge_range};
use infersight_store::TimeRange;

use crate::leaves::{DemandShift, Leaves, backfit};
use crate::measures::{Measure, choose_onset, fleet_z, measures};
use crate::{
    DEMAND_SHIFT_PASSES, EXPLANATION_MIN_FACTOR, EXPLANATION_MIN_RISE, MIN_SYMPTOM_Z, MINUTE_NS,
    RcaContext, RcaReport, RcaRequest, RootCause, Signal, Symptom, Window,
};

pub(crate) struct Localized {
    pub(crate) report: Option<RcaReport>,
    pub(crate) context: RcaContext,
    /// Slices set aside because their prompts grew (see the module doc), as signals.
    pub(crate) demand_shifts: Vec<Signal>,
}

pub(crate) fn localize_incident(
    store: &dyn infersight_store::StorageBackend,
    request: RcaRequest,
) -> Result<Localized, QueryError> {
    let parts: Vec<Arc<Rollup>> = store.rollups(TimeRange::ALL)?;
    let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
    let bounds = refs.iter().filter_map(|r| r.minute_bounds()).fold(
        None,
        |acc: Option<(i64, i64)>, (lo, hi)| {
            Some(acc.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))))
        },
    );
    let empty_context = RcaContext {
        baseline: TimeRange::ALL,
        incident: TimeRange::ALL,
        onset_ns: 0,
        symptom: String::new(),
        root_causes: Vec::new(),
        latency_symptom: None,
    };
    let Some((first_minute, last_minute)) = bounds else {
        return Ok(Localized {
            report: None,
            context: empty_context,
            demand_shifts: Vec::new(),
        });
    };
    let data_end = last_minute + MINUTE_NS;
    let fallback = || {
        let split = first_minute + (data_end - first_minute) * 2 / 3;
        let split = split.div_euclid(MINUTE_NS) * MINUTE_NS;
        TimeRange {
            since_ns: Some(split),
            until_ns: Some(data_end),
        }
    };
    let (incident, detected) = match request.incident {
        Some(range) => (range, None),
        None => match choose_onset(&refs, first_minute, data_end) {
            Some((onset, sli)) => (
                TimeRange {
                    since_ns: Some(onset),
                    until_ns: Some(data_end),
                },
                Some(sli),
            ),
            None => (fallback(), None),
        },
    };
    let windows = Windows {
        refs: &refs,
        request,
        first_minute,
        data_end,
    };
    let result = windows.analyse(incident, detected.clone())?;
    // a change that no SLI confirms against its baseline was a false alarm of the detector:
    // look at the data as if nothing had changed fleet-wide
    if detected.is_some()
        && request.incident.is_none()
        && result.report.as_ref().is_some_and(|r| r.symptom.is_none())
    {
        return windows.analyse(fallback(), None);
    }
    Ok(result)
}

/// The data and the caller's request, for analysing one choice of incident window.
pub(crate) struct Windows<'a> {
    pub(crate) refs: &'a [&'a Rollup],
    pub(crate) request: RcaRequest,
    pub(crate) first_minute: i64,
    pub(crate) data_end: i64,
}

impl Windows<'_> {
    pub(crate) fn analyse(
        &self,
        incident: TimeRange,
        detected: Option<String>,
    ) -> Result<Localized, QueryError> {
        let (refs, request, first_minute, data_end) =
            (self.refs, self.request, self.first_minute, self.data_end);
        let empty_context = RcaContext {
            baseline: TimeRange::ALL,
            incident: TimeRange::ALL,
            onset_ns: 0,
            symptom: String::new(),
            root_causes: Vec::new(),
            latency_symptom: None,
        };
        let onset = incident.since_ns.unwrap_or(first_minute);
        let baseline = request.baseline.unwrap_or_else(|| {
            let earliest = (onset - 60 * MINUTE_NS).max(first_minute);
            TimeRange {
                since_ns: Some(earliest.min(onset - 10 * MINUTE_NS)),
                until_ns: Some(onset),
            }
        });
        let base_total = merge_range(refs, &[], baseline.since_ns, baseline.until_ns);
        let inc_total = merge_range(refs, &[], incident.since_ns, incident.until_ns);
        let window = |r: TimeRange| Window {
            since: r.since_ns.unwrap_or(first_minute),
            until: r.until_ns.unwrap_or(data_end),
        };
        let mut report = RcaReport {
            symptom: None,
            root_causes: Vec::new(),
            signals: Vec::new(),
            log_evidence: Vec::new(),
            log_sequences: Vec::new(),
            suggestions: Vec::new(),
            checklist: Vec::new(),
            fleet_wide: false,
            incident_window: Some(window(incident)),
            baseline_window: Some(window(baseline)),
            window_source: match (&request.incident, &detected) {
                (Some(_), _) => "given".into(),
                (None, Some(sli)) => format!("change in the fleet's {sli}"),
                (None, None) => "fallback: last third (no fleet series changed)".into(),
            },
            verdict: String::new(),
            elapsed_ms: 0.0,
            timings_ms: BTreeMap::new(),
            incident_id: None,
        };
        if base_total.requests == 0 || inc_total.requests == 0 {
            report.verdict = "not enough requests in the baseline or the incident window".into();
            return Ok(Localized {
                report: Some(report),
                context: RcaContext {
                    baseline,
                    incident,
                    onset_ns: onset,
                    ..empty_context
                },
                demand_shifts: Vec::new(),
            });
        }
        let (dims, base_leaves) = combination_totals(refs, baseline.since_ns, baseline.until_ns);
        let (_, inc_leaves) = combination_totals(refs, incident.since_ns, incident.until_ns);
        // one leaf per combination seen in either window
        let mut leaf_of: BTreeMap<Vec<String>, usize> = BTreeMap::new();
        let mut leaf_values: Vec<Vec<String>> = Vec::new();
        let mut base_cells: Vec<Cell> = Vec::new();
        let mut inc_cells: Vec<Cell> = Vec::new();
        for (values, cell, is_incident) in base_leaves
            .iter()
            .map(|(v, c)| (v, c, false))
            .chain(inc_leaves.iter().map(|(v, c)| (v, c, true)))
        {
            let leaf = *leaf_of.entry(values.clone()).or_insert_with(|| {
                base_cells.push(Cell::default());
                inc_cells.push(Cell::default());
                leaf_values.push(values.clone());
                leaf_values.len() - 1
            });
            if is_incident {
                inc_cells[leaf].merge(cell);
            } else {
                base_cells[leaf].merge(cell);
            }
        }
        let mut scored: Vec<(f64, Measure)> = measures(&base_total, &inc_total)
            .into_iter()
            .map(|m| (fleet_z(&m, &base_total, &inc_total), m))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut causes: Vec<RootCause> = Vec::new();
        let mut fleet_wide = false;
        let params = Params::default();
        let mut demand_shifts: Vec<DemandShift> = Vec::new();
        // causes only an explanatory measure found rank after those of the symptom measures
        let mut explanatory_only: Vec<BTreeMap<String, String>> = Vec::new();
        let latency_symptom = scored
            .iter()
            .find(|(z, m)| m.latency && *z >= MIN_SYMPTOM_Z)
            .map(|(z, m)| Symptom {
                sli: m.name.clone(),
                baseline: m.fleet_values.0,
                current: m.fleet_values.1,
                onset,
                z: *z,
            });
        let localized = scored.iter().filter(|(z, m)| {
            if m.explanatory {
                latency_symptom.is_some()
            } else {
                *z >= MIN_SYMPTOM_Z
            }
        });
        for (z, measure) in localized {
            let leaves = Leaves {
                dims: &dims,
                values: &leaf_values,
                base: &base_cells,
                incident: &inc_cells,
                event_of: &*measure.event_of,
                denominator_of: &*measure.denominator_of,
            };
            let mut all: Vec<usize> = (0..leaf_values.len())
                .filter(|&leaf| (measure.eligible)(&base_cells[leaf]))
                .collect();
            let mut passes = 0;
            let result = loop {
                let mut result = leaves.localize(&all, &params)?;
                backfit(&leaves, &all, &mut result.root_causes, &params)?;
                passes += 1;
                if !measure.latency || passes > DEMAND_SHIFT_PASSES {
                    break result;
                }
                let grown: Vec<DemandShift> = result
                    .root_causes
                    .iter()
                    .filter_map(|c| leaves.demand_shift(&all, &c.elements))
                    .collect();
                if grown.is_empty() {
                    break result;
                }
                for shift in grown {
                    all.retain(|&leaf| !leaves.matches(leaf, &shift.elements));
                    if !demand_shifts.iter().any(|d| d.elements == shift.elements) {
                        demand_shifts.push(shift);
                    }
                }
            };
            if result.fleet_wide
                && causes.is_empty()
                && report.symptom.is_none()
                && !measure.explanatory
            {
                fleet_wide = true;
            }
            for mut cause in result.root_causes {
                if measure.explanatory {
                    // an explanation must be a rise that matters: the slice lost a good part
                    // of its cache hits (token counts are overdispersed far beyond what the
                    // scan's noise model sees, so a significant but small or falling change is
                    // no explanation)
                    if cause.real < EXPLANATION_MIN_FACTOR * cause.forecast
                        || cause.real - cause.forecast < EXPLANATION_MIN_RISE
                    {
                        continue;
                    }
                    cause.elements = leaves.specialize(&all, cause.elements);
                }
                let dimensions: BTreeMap<String, String> = cause.elements.iter().cloned().collect();
                let fleet = if measure.explanatory {
                    format!(
                        "fleet {:.1} % → {:.1} %",
                        measure.fleet_values.0 * 100.0,
                        measure.fleet_values.1 * 100.0
                    )
                } else {
                    format!("fleet z {z:.1}")
                };
                let evidence = format!(
                    "{}: {:.1} % of the slice's {} in the incident vs {:.1} % in the baseline ({fleet}); {:.0} % of the excess",
                    measure.event,
                    cause.real * 100.0,
                    measure.unit,
                    cause.forecast * 100.0,
                    cause.explained_fraction * 100.0
                );
                match causes.iter_mut().find(|c| c.dimensions == dimensions) {
                    Some(existing) => {
                        // an explanatory measure's scores are in other units: it adds
                        // evidence to a cause, never rank
                        if !measure.explanatory {
                            existing.score = existing.score.max(cause.score);
                            explanatory_only.retain(|d| d != &dimensions);
                        }
                        existing.evidence.push(evidence);
                    }
                    None => {
                        if measure.explanatory {
                            explanatory_only.push(dimensions.clone());
                        }
                        causes.push(RootCause {
                            rank: 0,
                            dimensions: dimensions.into(),
                            explained_fraction: cause.explained_fraction,
                            score: cause.score,
                            evidence: vec![evidence],
                        });
                    }
                }
            }
            if report.symptom.is_none() && !measure.explanatory {
                report.symptom = Some(Symptom {
                    sli: measure.name.clone(),
                    baseline: measure.fleet_values.0,
                    current: measure.fleet_values.1,
                    onset,
                    z: *z,
                });
            }
        }
        causes.sort_by(|a, b| {
            let late = |c: &RootCause| explanatory_only.contains(&c.dimensions);
            late(a)
                .cmp(&late(b))
                .then_with(|| b.score.total_cmp(&a.score))
        });
        for (i, cause) in causes.iter_mut().enumerate() {
            cause.rank = i + 1;
        }
        report.fleet_wide = fleet_wide && causes.is_empty();
        report.verdict = match (&report.symptom, causes.first()) {
            (None, _) => match detected {
                Some(sli) => format!(
                    "{sli} changed at {} but no SLI moved significantly against the baseline: nothing to blame",
                    format_rfc3339(onset)
                ),
                None => "no anomaly: SLIs are within their baseline; nothing to blame".into(),
            },
            (Some(symptom), Some(top)) => format!(
                "{} rose from {:.3} to {:.3} since {}; most likely cause: {} ({})",
                symptom.sli,
                symptom.baseline,
                symptom.current,
                format_rfc3339(onset),
                Subject::describe(&top.dimensions),
                top.evidence[0]
            ),
            (Some(symptom), None) => format!(
                "{} rose from {:.3} to {:.3} since {} across the whole fleet: no specific slice explains it",
                symptom.sli,
                symptom.baseline,
                symptom.current,
                format_rfc3339(onset)
            ),
        };
        let context = RcaContext {
            baseline,
            incident,
            onset_ns: onset,
            symptom: report
                .symptom
                .as_ref()
                .map(|s| s.sli.clone())
                .unwrap_or_default(),
            root_causes: causes.iter().map(|c| c.dimensions.clone()).collect(),
            latency_symptom,
        };
        report.root_causes = causes;
        let demand_shifts = demand_shifts.into_iter().map(|d| d.signal(onset)).collect();
        Ok(Localized {
            report: Some(report),
            context,
            demand_shifts,
        })
    }
}
