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
    let Some((first_minute, last_minute)) = bounds else {
        return Ok(Localized {
            report: None,
            context: empty_context(),
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
    /// Localizes the measures that moved between the baseline and `incident` into root causes;
    /// `detected` names the fleet SLI whose change chose the window, if one did.
    pub(crate) fn analyse(
        &self,
        incident: TimeRange,
        detected: Option<String>,
    ) -> Result<Localized, QueryError> {
        let refs = self.refs;
        let onset = incident.since_ns.unwrap_or(self.first_minute);
        let baseline = self.baseline_before(onset);
        let base_total = merge_range(refs, &[], baseline.since_ns, baseline.until_ns);
        let inc_total = merge_range(refs, &[], incident.since_ns, incident.until_ns);
        let mut report = self.empty_report(incident, baseline, detected.as_deref());
        if base_total.requests == 0 || inc_total.requests == 0 {
            report.verdict = "not enough requests in the baseline or the incident window".into();
            return Ok(Localized {
                report: Some(report),
                context: RcaContext {
                    baseline,
                    incident,
                    onset_ns: onset,
                    ..empty_context()
                },
                demand_shifts: Vec::new(),
            });
        }
        let cells = LeafCells::of(refs, baseline, incident);
        let mut scored: Vec<(f64, Measure)> = measures(&base_total, &inc_total)
            .into_iter()
            .map(|m| (fleet_z(&m, &base_total, &inc_total), m))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
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
        let params = Params::default();
        let mut findings = Findings::default();
        for (z, measure) in localized {
            findings.add_measure(&cells, measure, *z, onset, &params)?;
        }
        findings.rank_causes();
        let Findings {
            symptom,
            causes,
            fleet_wide,
            demand_shifts,
            ..
        } = findings;
        report.fleet_wide = fleet_wide && causes.is_empty();
        report.verdict = verdict(symptom.as_ref(), causes.first(), detected.as_deref(), onset);
        report.symptom = symptom;
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

    /// The caller's baseline, or the hour before `onset` (at least ten minutes, even before the
    /// data starts).
    fn baseline_before(&self, onset: i64) -> TimeRange {
        self.request.baseline.unwrap_or_else(|| {
            let earliest = (onset - 60 * MINUTE_NS).max(self.first_minute);
            TimeRange {
                since_ns: Some(earliest.min(onset - 10 * MINUTE_NS)),
                until_ns: Some(onset),
            }
        })
    }

    /// The report before anything is localized: its windows and where the incident one came from.
    fn empty_report(
        &self,
        incident: TimeRange,
        baseline: TimeRange,
        detected: Option<&str>,
    ) -> RcaReport {
        let window = |r: TimeRange| Window {
            since: r.since_ns.unwrap_or(self.first_minute),
            until: r.until_ns.unwrap_or(self.data_end),
        };
        RcaReport {
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
            window_source: match (&self.request.incident, detected) {
                (Some(_), _) => "given".into(),
                (None, Some(sli)) => format!("change in the fleet's {sli}"),
                (None, None) => "fallback: last third (no fleet series changed)".into(),
            },
            verdict: String::new(),
            elapsed_ms: 0.0,
            timings_ms: BTreeMap::new(),
            incident_id: None,
        }
    }
}

/// The context of an analysis that found no data.
fn empty_context() -> RcaContext {
    RcaContext {
        baseline: TimeRange::ALL,
        incident: TimeRange::ALL,
        onset_ns: 0,
        symptom: String::new(),
        root_causes: Vec::new(),
        latency_symptom: None,
    }
}

/// One leaf per dimension combination seen in either window, with its cell in each.
struct LeafCells {
    dims: Vec<String>,
    values: Vec<Vec<String>>,
    base: Vec<Cell>,
    incident: Vec<Cell>,
}

impl LeafCells {
    fn of(refs: &[&Rollup], baseline: TimeRange, incident: TimeRange) -> LeafCells {
        let (dims, base_leaves) = combination_totals(refs, baseline.since_ns, baseline.until_ns);
        let (_, inc_leaves) = combination_totals(refs, incident.since_ns, incident.until_ns);
        let mut leaf_of: BTreeMap<Vec<String>, usize> = BTreeMap::new();
        let mut cells = LeafCells {
            dims,
            values: Vec::new(),
            base: Vec::new(),
            incident: Vec::new(),
        };
        for (values, cell, is_incident) in base_leaves
            .iter()
            .map(|(v, c)| (v, c, false))
            .chain(inc_leaves.iter().map(|(v, c)| (v, c, true)))
        {
            let leaf = *leaf_of.entry(values.clone()).or_insert_with(|| {
                cells.base.push(Cell::default());
                cells.incident.push(Cell::default());
                cells.values.push(values.clone());
                cells.values.len() - 1
            });
            if is_incident {
                cells.incident[leaf].merge(cell);
            } else {
                cells.base[leaf].merge(cell);
            }
        }
        cells
    }

    /// The leaves as `measure` counts them.
    fn leaves<'a>(&'a self, measure: &'a Measure) -> Leaves<'a> {
        Leaves {
            dims: &self.dims,
            values: &self.values,
            base: &self.base,
            incident: &self.incident,
            event_of: &*measure.event_of,
            denominator_of: &*measure.denominator_of,
        }
    }
}

/// What the measures localized so far found, in the order they were localized.
#[derive(Default)]
struct Findings {
    /// The first symptom measure localized.
    symptom: Option<Symptom>,
    causes: Vec<RootCause>,
    /// Causes only an explanatory measure found: they rank after those of the symptom measures.
    explanatory_only: Vec<BTreeMap<String, String>>,
    fleet_wide: bool,
    demand_shifts: Vec<DemandShift>,
}

impl Findings {
    /// Localizes one measure that moved, and adds its causes (or its evidence to causes found).
    fn add_measure(
        &mut self,
        cells: &LeafCells,
        measure: &Measure,
        z: f64,
        onset: i64,
        params: &Params,
    ) -> Result<(), QueryError> {
        let leaves = cells.leaves(measure);
        let mut all: Vec<usize> = (0..cells.values.len())
            .filter(|&leaf| (measure.eligible)(&cells.base[leaf]))
            .collect();
        let result = localize_apart_from_demand_shifts(
            &leaves,
            measure,
            &mut all,
            params,
            &mut self.demand_shifts,
        )?;
        if result.fleet_wide
            && self.causes.is_empty()
            && self.symptom.is_none()
            && !measure.explanatory
        {
            self.fleet_wide = true;
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
            let evidence = evidence(measure, z, &cause);
            self.add_cause(&cause, evidence, measure.explanatory);
        }
        if self.symptom.is_none() && !measure.explanatory {
            self.symptom = Some(Symptom {
                sli: measure.name.clone(),
                baseline: measure.fleet_values.0,
                current: measure.fleet_values.1,
                onset,
                z,
            });
        }
        Ok(())
    }

    /// A new cause, or more evidence for one found before.
    fn add_cause(
        &mut self,
        cause: &infersight_analytics::localize::RootCause,
        evidence: String,
        explanatory: bool,
    ) {
        let dimensions: BTreeMap<String, String> = cause.elements.iter().cloned().collect();
        match self.causes.iter_mut().find(|c| c.dimensions == dimensions) {
            Some(existing) => {
                // an explanatory measure's scores are in other units: it adds
                // evidence to a cause, never rank
                if !explanatory {
                    existing.score = existing.score.max(cause.score);
                    self.explanatory_only.retain(|d| d != &dimensions);
                }
                existing.evidence.push(evidence);
            }
            None => {
                if explanatory {
                    self.explanatory_only.push(dimensions.clone());
                }
                self.causes.push(RootCause {
                    rank: 0,
                    dimensions: dimensions.into(),
                    explained_fraction: cause.explained_fraction,
                    score: cause.score,
                    evidence: vec![evidence],
                });
            }
        }
    }

    /// Orders the causes (those of symptom measures first, then by score) and numbers them.
    fn rank_causes(&mut self) {
        let explanatory_only = &self.explanatory_only;
        self.causes.sort_by(|a, b| {
            let late = |c: &RootCause| explanatory_only.contains(&c.dimensions);
            late(a)
                .cmp(&late(b))
                .then_with(|| b.score.total_cmp(&a.score))
        });
        for (i, cause) in self.causes.iter_mut().enumerate() {
            cause.rank = i + 1;
        }
    }
}

/// Localizes `measure` over the leaves `all`; for a latency measure, slices whose prompts grew are
/// set aside (into `demand_shifts`, and out of `all`) and the rest localized again, a few times
/// at most.
fn localize_apart_from_demand_shifts(
    leaves: &Leaves<'_>,
    measure: &Measure,
    all: &mut Vec<usize>,
    params: &Params,
    demand_shifts: &mut Vec<DemandShift>,
) -> Result<infersight_analytics::localize::Localization, QueryError> {
    let mut passes = 0;
    loop {
        let mut result = leaves.localize(all, params)?;
        backfit(leaves, all, &mut result.root_causes, params)?;
        passes += 1;
        if !measure.latency || passes > DEMAND_SHIFT_PASSES {
            return Ok(result);
        }
        let grown: Vec<DemandShift> = result
            .root_causes
            .iter()
            .filter_map(|c| leaves.demand_shift(all, &c.elements))
            .collect();
        if grown.is_empty() {
            return Ok(result);
        }
        for shift in grown {
            all.retain(|&leaf| !leaves.matches(leaf, &shift.elements));
            if !demand_shifts.iter().any(|d| d.elements == shift.elements) {
                demand_shifts.push(shift);
            }
        }
    }
}

/// One line of evidence for a cause `measure` found: the slice's rate in both windows.
fn evidence(
    measure: &Measure,
    z: f64,
    cause: &infersight_analytics::localize::RootCause,
) -> String {
    let fleet = if measure.explanatory {
        format!(
            "fleet {:.1} % → {:.1} %",
            measure.fleet_values.0 * 100.0,
            measure.fleet_values.1 * 100.0
        )
    } else {
        format!("fleet z {z:.1}")
    };
    format!(
        "{}: {:.1} % of the slice's {} in the incident vs {:.1} % in the baseline ({fleet}); {:.0} % of the excess",
        measure.event,
        cause.real * 100.0,
        measure.unit,
        cause.forecast * 100.0,
        cause.explained_fraction * 100.0
    )
}

/// The report's one-line verdict.
fn verdict(
    symptom: Option<&Symptom>,
    top: Option<&RootCause>,
    detected: Option<&str>,
    onset: i64,
) -> String {
    match (symptom, top) {
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
    }
}
