//! Windows: for one choice of incident window (given, detected or the fallback), the baseline
//! before it, the measures that moved, and their localization into root causes.

use std::collections::BTreeMap;
use std::sync::Arc;

use infersight_analytics::localize::Params;
use infersight_model::signal::Subject;
use infersight_model::time::format_rfc3339;
use infersight_query::QueryError;
use infersight_rollup::{Cell, Rollup, combination_totals};
use infersight_store::TimeRange;

use crate::advice;
use crate::leaves::{DemandShift, Leaves, backfit};
use crate::measures::{
    MODEL_DIMENSION, Measure, REDATE_MINUTES, Totals, cause_onset, choose_onset,
    choose_slice_onsets, fleet_z, measures,
};
use crate::pods::SlowPod;
use crate::rollout::{self, Comparison, LeafView};
use crate::{
    DEMAND_SHIFT_PASSES, EXPLANATION_MIN_FACTOR, EXPLANATION_MIN_RISE, MIN_SYMPTOM_Z, MINUTE_NS,
    RcaContext, RcaReport, RcaRequest, RootCause, Signal, SliceRate, Symptom, Window,
};

mod in_pod;

pub(crate) struct Localized {
    pub(crate) report: Option<RcaReport>,
    pub(crate) context: RcaContext,
    /// Signals localization itself found: slices set aside because their prompts grew (see the
    /// module doc), and causes new in the incident that regressed (see [`rollout`]).
    pub(crate) signals: Vec<Signal>,
    /// The windows analysed and the stored rollups' dimensions, for a second pass over
    /// attribute dimensions; `None` when there was no data.
    pub(crate) chosen: Option<Chosen>,
    /// Whether a symptom measure (or a known cause) found a cause, not only an explanatory
    /// measure (a slice that lost its prefix-cache hits says where latency came from, never
    /// what regressed).
    pub(crate) symptom_cause: bool,
}

/// The windows one analysis settled on.
#[derive(Debug, Clone)]
pub(crate) struct Chosen {
    pub(crate) incident: TimeRange,
    pub(crate) baseline: TimeRange,
    pub(crate) detected: Option<String>,
    /// Dimensions of the stored rollups.
    pub(crate) dimensions: Vec<String>,
    /// Per symptom measure, the causes it localized (see [`Significant`]).
    pub(crate) significant: Significant,
}

/// Per symptom measure (by name), the combinations its localization found significant: a
/// second pass over the same window with more dimensions tests their refinements at their own
/// multiplicity (see `infersight_analytics::localize::Around`).
pub(crate) type Significant = BTreeMap<String, Vec<Vec<(String, String)>>>;

/// No significant combinations (a window other than the one they were found in).
static NONE_SIGNIFICANT: Significant = BTreeMap::new();

/// The first pass, over the stored rollups. `stored_rows`: how many `requests` rows the store
/// holds, when known; with sampled rows (counted by their weights in the rollups) it gives the
/// fleet's mean sampling weight, by which fleet-level significance is judged here (the second
/// pass judges each leaf on its own rows).
pub(crate) fn localize_incident(
    store: &dyn infersight_store::StorageBackend,
    request: RcaRequest,
    stored_rows: Option<u64>,
) -> Result<Localized, QueryError> {
    let parts: Vec<Arc<Rollup>> = store.rollups(TimeRange::ALL)?;
    let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
    let bounds = minute_bounds(&refs);
    let Some((first_minute, last_minute)) = bounds else {
        return Ok(Localized {
            report: None,
            context: empty_context(),
            signals: Vec::new(),
            chosen: None,
            symptom_cause: false,
        });
    };
    let data_end = last_minute + MINUTE_NS;
    let fallback = || fallback_window(first_minute, data_end);
    let windows = Windows::over_rollups(&refs, stored_rows, request, (first_minute, data_end));
    let (incident, detected) = match request.incident {
        Some(range) => (range, None),
        None => match choose_onset(&refs, first_minute, data_end, windows.sample_weight) {
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
    let result = windows.analyse(incident, detected.clone())?;
    let confirmed = |l: &Localized| l.report.as_ref().is_some_and(|r| r.symptom.is_some());
    let has_cause = |l: &Localized| l.symptom_cause;
    if request.incident.is_some() {
        return Ok(result);
    }
    if confirmed(&result) {
        let result = windows.moved_to_cause_onset(result)?;
        if has_cause(&result) {
            return Ok(result);
        }
        // a fleet change no slice explains (or only a slice that lost its cache hits: where
        // latency came from, not what regressed) is the last resort: the fleet's series may
        // have dated it by a lone noisy minute before the real onset (sampled rows), diluting
        // the slice that changed; a slice's own series dates it, if its window localizes a
        // cause of a symptom measure
        for (onset, series) in
            choose_slice_onsets(&refs, first_minute, data_end, 0, windows.sample_weight)
        {
            let window = TimeRange {
                since_ns: Some(onset),
                until_ns: Some(data_end),
            };
            let sliced = windows.analyse(window, Some(series))?;
            if confirmed(&sliced) && has_cause(&sliced) {
                // a slice's series that dates the change before the fleet's, when the cause it
                // found changed with the fleet by its own series, was read off noise: the
                // fleet's window stands (a second fault there gets its known cause later)
                let fleet_onset = incident.since_ns.unwrap_or(first_minute);
                let with_fleet = windows.top_cause_onset(&sliced).is_some_and(|cause| {
                    (cause - fleet_onset).abs() < MIN_ONSET_CORRECTION_MINUTES * MINUTE_NS
                });
                if onset < fleet_onset && with_fleet {
                    return Ok(result);
                }
                return windows.moved_to_cause_onset(sliced);
            }
        }
        return Ok(result);
    }
    // no fleet series changed, or its change was a false alarm of the detector (no SLI
    // confirms it against its baseline): a change confined to a slice, the first whose window
    // a symptom confirms; else look at the data as if nothing had changed
    for (onset, series) in
        choose_slice_onsets(&refs, first_minute, data_end, 0, windows.sample_weight)
    {
        let window = TimeRange {
            since_ns: Some(onset),
            until_ns: Some(data_end),
        };
        let sliced = windows.analyse(window, Some(series))?;
        if confirmed(&sliced) {
            return windows.moved_to_cause_onset(sliced);
        }
    }
    if detected.is_some() {
        return windows.analyse(fallback(), None);
    }
    Ok(result)
}

/// The fleet's mean sampling weight: the requests the rollups count (by their weights) per
/// stored row; 1 when the count of rows is unknown.
fn mean_sample_weight(refs: &[&Rollup], stored_rows: Option<u64>) -> f64 {
    stored_rows.filter(|rows| *rows > 0).map_or(1.0, |rows| {
        let requests = Totals::of(refs, None, None).fleet.requests;
        (requests as f64 / rows as f64).max(1.0)
    })
}

/// The window looked at when nothing changed: the last third of the data, on whole minutes.
fn fallback_window(first_minute: i64, data_end: i64) -> TimeRange {
    let split = first_minute + (data_end - first_minute) * 2 / 3;
    TimeRange {
        since_ns: Some(split.div_euclid(MINUTE_NS) * MINUTE_NS),
        until_ns: Some(data_end),
    }
}

/// A window a detected change chose, that the second pass (each leaf judged on the rows it
/// holds: see [`relocalize`]) no longer confirms, was a false alarm of the first pass (sampled
/// rows weighed as if complete make a slice's series noisier than it looks): the data is looked
/// at as if nothing had changed, as [`localize_incident`] does for a fleet change no SLI
/// confirms. `None` when `localized` stands: a symptom, a window the caller gave, or the
/// fallback already.
pub(crate) fn unconfirmed_to_fallback(
    store: &dyn infersight_store::StorageBackend,
    request: RcaRequest,
    stored_rows: Option<u64>,
    localized: &Localized,
) -> Result<Option<Localized>, QueryError> {
    let unconfirmed = localized
        .report
        .as_ref()
        .is_some_and(|r| r.symptom.is_none());
    let detected = localized
        .chosen
        .as_ref()
        .is_some_and(|c| c.detected.is_some());
    if request.incident.is_some() || !unconfirmed || !detected {
        return Ok(None);
    }
    let parts: Vec<Arc<Rollup>> = store.rollups(TimeRange::ALL)?;
    let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
    let Some((first_minute, last_minute)) = minute_bounds(&refs) else {
        return Ok(None);
    };
    let data_end = last_minute + MINUTE_NS;
    let windows = Windows::over_rollups(&refs, stored_rows, request, (first_minute, data_end));
    windows
        .analyse(fallback_window(first_minute, data_end), None)
        .map(Some)
}

/// A detected window that starts well before a step fault the complete metrics date (a pod's
/// GPU clock falling: its change point is when its effect begins), with no such fault near its
/// own start, was dated by noise in sampled request rows (a lone noisy minute of a slice's
/// series): the window from the earliest such fault's onset is analysed too, and taken when a
/// symptom confirms it at least as strongly (the symptom's z is the contrast of the split: the
/// true change point sharpens it). `fault_onsets`: the step faults' onsets. `None` when
/// `localized` stands: a window the caller gave, the fallback, a fault near its start or none
/// after it.
pub(crate) fn moved_to_step_fault(
    store: &dyn infersight_store::StorageBackend,
    request: RcaRequest,
    stored_rows: Option<u64>,
    localized: &Localized,
    fault_onsets: &[(i64, String)],
) -> Result<Option<Localized>, QueryError> {
    let Some(chosen) = localized.chosen.as_ref() else {
        return Ok(None);
    };
    if request.incident.is_some() || chosen.detected.is_none() {
        return Ok(None);
    }
    let current = chosen.incident.since_ns.unwrap_or(i64::MIN);
    let tolerance = MIN_ONSET_CORRECTION_MINUTES * MINUTE_NS;
    if fault_onsets
        .iter()
        .any(|(onset, _)| (onset - current).abs() < tolerance)
    {
        return Ok(None);
    }
    let Some((onset, fault)) = fault_onsets
        .iter()
        .filter(|(onset, _)| *onset >= current + tolerance)
        .min_by_key(|(onset, _)| *onset)
    else {
        return Ok(None);
    };
    let parts: Vec<Arc<Rollup>> = store.rollups(TimeRange::ALL)?;
    let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
    let Some((first_minute, last_minute)) = minute_bounds(&refs) else {
        return Ok(None);
    };
    let data_end = last_minute + MINUTE_NS;
    let onset = onset.div_euclid(MINUTE_NS) * MINUTE_NS;
    if onset >= data_end {
        return Ok(None);
    }
    let windows = Windows::over_rollups(&refs, stored_rows, request, (first_minute, data_end));
    let window = TimeRange {
        since_ns: Some(onset),
        until_ns: Some(data_end),
    };
    let moved = windows.analyse(window, Some(fault.clone()))?;
    let z = |l: &Localized| {
        l.report
            .as_ref()
            .and_then(|r| r.symptom.as_ref())
            .map(|s| s.z)
    };
    Ok(match (z(&moved), z(localized)) {
        (Some(new), Some(old)) if new >= old => Some(moved),
        (Some(_), None) => Some(moved),
        _ => None,
    })
}

/// Localizes again the windows `chosen` settled on, with leaves from `leaf_rollup` (the rows of
/// those windows rolled up over more dimensions: see `attributes`) and, when the rows are
/// sampled, their observed rows per leaf from `observed_rows`; fleet totals still come from the
/// stored rollups.
pub(crate) fn relocalize(
    store: &dyn infersight_store::StorageBackend,
    request: RcaRequest,
    chosen: &Chosen,
    (leaf_rollup, observed_rows): (Option<&Rollup>, Option<&Rollup>),
    (known, pods): (&[KnownCause], &[SlowPod]),
) -> Result<Localized, QueryError> {
    let parts: Vec<Arc<Rollup>> = store.rollups(TimeRange::ALL)?;
    let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
    let bounds = minute_bounds(&refs);
    let (first_minute, last_minute) = bounds.unwrap_or((0, 0));
    let request = RcaRequest {
        baseline: Some(chosen.baseline),
        ..request
    };
    let leaf_refs: Vec<&Rollup> = leaf_rollup.into_iter().collect();
    let row_refs: Vec<&Rollup> = observed_rows.into_iter().collect();
    let windows = Windows {
        refs: &refs,
        leaf_refs: (!leaf_refs.is_empty()).then_some(leaf_refs.as_slice()),
        known,
        pods,
        significant: &chosen.significant,
        row_refs: (!row_refs.is_empty()).then_some(row_refs.as_slice()),
        sample_weight: 1.0,
        request,
        first_minute,
        data_end: last_minute + MINUTE_NS,
    };
    let localized = windows.analyse(chosen.incident, chosen.detected.clone())?;
    if request.incident.is_some() {
        return Ok(localized);
    }
    windows.moved_to_cause_onset(localized)
}

/// The data and the caller's request, for analysing one choice of incident window.
pub(crate) struct Windows<'a> {
    pub(crate) refs: &'a [&'a Rollup],
    /// Where the leaves come from, when not from `refs`.
    pub(crate) leaf_refs: Option<&'a [&'a Rollup]>,
    /// Causes known before localization (see [`KnownCause`]).
    pub(crate) known: &'a [KnownCause],
    /// Pods whose complete latency histograms rose (see [`crate::pods`]): looked inside where
    /// no cause covers them.
    pub(crate) pods: &'a [SlowPod],
    /// What a first pass over the same window found (see [`Significant`]).
    pub(crate) significant: &'a Significant,
    /// The leaves' rows counted once each, when they are sampled (see [`LeafCells::of`]).
    pub(crate) row_refs: Option<&'a [&'a Rollup]>,
    /// Without `row_refs`, the requests one observed row stands for, fleet-wide (1: all
    /// observed).
    pub(crate) sample_weight: f64,
    pub(crate) request: RcaRequest,
    pub(crate) first_minute: i64,
    pub(crate) data_end: i64,
}

impl<'a> Windows<'a> {
    /// The first pass over the stored rollups `refs` (no attribute leaves, nothing known), rows
    /// judged by the fleet's mean sampling weight (see [`mean_sample_weight`]); `bounds`: the
    /// first minute of the data and its end.
    fn over_rollups(
        refs: &'a [&'a Rollup],
        stored_rows: Option<u64>,
        request: RcaRequest,
        (first_minute, data_end): (i64, i64),
    ) -> Windows<'a> {
        Windows {
            refs,
            leaf_refs: None,
            known: &[],
            pods: &[],
            significant: &NONE_SIGNIFICANT,
            row_refs: None,
            sample_weight: mean_sample_weight(refs, stored_rows),
            request,
            first_minute,
            data_end,
        }
    }

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
        let base_total = Totals::of(refs, baseline.since_ns, baseline.until_ns);
        let inc_total = Totals::of(refs, incident.since_ns, incident.until_ns);
        let mut report = self.empty_report(incident, baseline, detected.as_deref());
        let mut chosen = Some(Chosen {
            incident,
            baseline,
            detected: detected.clone(),
            dimensions: refs
                .first()
                .map(|r| r.dimensions().to_vec())
                .unwrap_or_default(),
            significant: Significant::new(),
        });
        if base_total.fleet.requests == 0 || inc_total.fleet.requests == 0 {
            report.verdict = "not enough requests in the baseline or the incident window".into();
            return Ok(Localized {
                report: Some(report),
                context: RcaContext {
                    baseline,
                    incident,
                    onset_ns: onset,
                    ..empty_context()
                },
                signals: Vec::new(),
                chosen,
                symptom_cause: false,
            });
        }
        let base_dimensions = refs.first().map_or(0, |r| r.dimensions().len());
        let mut cells = LeafCells::of(
            self.leaf_refs.unwrap_or(refs),
            (self.row_refs, self.sample_weight),
            baseline,
            incident,
            base_dimensions,
        );
        cells.known = self.known.iter().map(|k| k.elements.clone()).collect();
        cells.significant = self.significant.clone();
        let mut scored: Vec<(f64, Measure)> = measures(&base_total, &inc_total)
            .into_iter()
            .map(|m| {
                let z = fleet_z(&m, &base_total, &inc_total, cells.fleet_sample_weight);
                (z, m)
            })
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
        findings.add_pods(&cells, (&scored, onset), self.pods, &params)?;
        findings.add_known(self.known);
        findings.rank_causes();
        let Findings {
            symptom,
            causes,
            fleet_wide,
            demand_shifts,
            rollouts,
            explanatory_only,
            significant,
        } = findings;
        if let Some(chosen) = chosen.as_mut() {
            chosen.significant = significant;
        }
        let symptom_cause = causes
            .iter()
            .any(|c| !explanatory_only.contains(&c.dimensions));
        report.fleet_wide = fleet_wide && causes.is_empty();
        let change = symptom.as_ref().and_then(|s| {
            scored
                .iter()
                .find(|(_, m)| m.name == s.sli)
                .map(|(_, m)| m.change_text(&base_total, &inc_total))
        });
        report.verdict = verdict(
            change.as_deref(),
            causes.first(),
            detected.as_deref(),
            onset,
        );
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
        let mut signals: Vec<Signal> = demand_shifts.into_iter().map(|d| d.signal(onset)).collect();
        // a version's regression is read off the cause in `advice`, new or not
        signals.extend(
            causes
                .iter()
                .filter(|c| {
                    rollouts.contains(&c.dimensions)
                        && !advice::names_a_version_dimension(&c.dimensions)
                })
                .map(|c| {
                    rollout::version_regression(&c.dimensions, &c.evidence[0], c.score, onset)
                }),
        );
        report.root_causes = causes;
        Ok(Localized {
            report: Some(report),
            context,
            signals,
            chosen,
            symptom_cause,
        })
    }

    /// A detected window analysed again from its top cause's own onset (see
    /// [`cause_onset`]): a fleet series can rise late (a small slice's shift shows only once
    /// noise adds to it) or early, and a window that starts late leaves part of the regression
    /// in the baseline. The new window starts at the cause's onset, the baseline runs from the
    /// same start to it (at least ten minutes); kept when a symptom confirms it and it names the
    /// same top cause. Moved later by at most [`REDATE_MINUTES`] (noise that dated the rise
    /// early): a cause whose own change came later still did not make the rise that chose the
    /// window (a tenant's transient episode an hour after it), and moving to it would leave that
    /// rise in the baseline. Earlier is no limit: a small slice's shift shows in a wider series
    /// only once noise adds to it, long after it began.
    fn moved_to_cause_onset(&self, first: Localized) -> Result<Localized, QueryError> {
        let (Some(report), Some(chosen)) = (first.report.as_ref(), first.chosen.as_ref()) else {
            return Ok(first);
        };
        let (Some(symptom), Some(top)) = (report.symptom.as_ref(), report.root_causes.first())
        else {
            return Ok(first);
        };
        let since = chosen.baseline.since_ns.unwrap_or(self.first_minute);
        let current = chosen.incident.since_ns.unwrap_or(self.first_minute);
        let Some(onset) = self.top_cause_onset(&first) else {
            return Ok(first);
        };
        if (onset - current).abs() < MIN_ONSET_CORRECTION_MINUTES * MINUTE_NS
            || onset - current > REDATE_MINUTES * MINUTE_NS
        {
            return Ok(first);
        }
        let moved = Windows {
            // what the first pass found holds for its own window only
            significant: &NONE_SIGNIFICANT,
            request: RcaRequest {
                baseline: Some(TimeRange {
                    since_ns: Some(since),
                    until_ns: Some(onset),
                }),
                ..self.request
            },
            ..*self
        };
        let window = TimeRange {
            since_ns: Some(onset),
            until_ns: chosen.incident.until_ns,
        };
        let detected = format!("{} of {}", symptom.sli, Subject::describe(&top.dimensions));
        let again = moved.analyse(window, Some(detected))?;
        // the cause's own change point is the better estimate of when it started; the symptom's
        // z is no judge of it (a baseline that holds part of the regression is longer). The same
        // cause may be described wider or narrower there (a second fault in the same version
        // now counts too, or a diluted window had hidden a pair): one slice holding the other
        let same = again.report.as_ref().is_some_and(|r| {
            r.symptom.is_some()
                && r.root_causes
                    .first()
                    .is_some_and(|c| nested(&c.dimensions.0, &top.dimensions.0))
        });
        Ok(if same { again } else { first })
    }

    /// The change point of `localized`'s top cause in the series of its symptom's measure (see
    /// [`cause_onset`]), searched from ten minutes into its baseline; `None` without a symptom,
    /// a cause or enough minutes.
    fn top_cause_onset(&self, localized: &Localized) -> Option<i64> {
        let (report, chosen) = (localized.report.as_ref()?, localized.chosen.as_ref()?);
        let (symptom, top) = (report.symptom.as_ref()?, report.root_causes.first()?);
        let since = chosen.baseline.since_ns.unwrap_or(self.first_minute);
        let until = chosen.incident.until_ns.unwrap_or(self.data_end);
        let current = chosen.incident.since_ns.unwrap_or(self.first_minute);
        let base_total = Totals::of(self.refs, Some(since), Some(current));
        let inc_total = Totals::of(self.refs, Some(current), Some(until));
        let measure = measures(&base_total, &inc_total)
            .into_iter()
            .find(|m| m.name == symptom.sli)?;
        let elements: Vec<(String, String)> = top
            .dimensions
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let parts = self.leaf_refs.unwrap_or(self.refs);
        let earliest = since + 10 * MINUTE_NS;
        cause_onset(
            parts,
            &measure,
            &elements,
            since,
            (earliest, current),
            until,
        )
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
                // a slice's series is named `sli of dim=value`
                (None, Some(sli)) if sli.contains('=') => format!("change in the {sli}"),
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
    /// For a leaf without baseline traffic that carries a value new in the incident (a version,
    /// build or pod that did not exist before): what stands in for its baseline (see
    /// [`stand_ins`]): an index into `stand_in_cells`.
    stand_in: Vec<Option<usize>>,
    stand_in_cells: Vec<Cell>,
    /// Per leaf, the requests one observed row stands for (its rows' mean sampling weight, 1
    /// when every request was observed): its counts are estimates from that many fewer rows.
    sample_weight: Vec<f64>,
    /// The same over the fleet, each leaf weighted by its requests (`Σw² / Σw` per leaf
    /// weight): the variance of one counted request in fleet totals.
    fleet_sample_weight: f64,
    /// The combinations of the [`KnownCause`]s.
    known: Vec<Vec<(String, String)>>,
    /// See [`Significant`].
    significant: Significant,
}

impl LeafCells {
    /// The leaves of `refs` in both windows; dimensions from `extra_from` on (attribute
    /// dimensions) that split the leaves as an earlier one does, or not at all, are dropped.
    /// `rows`: the same rows over the same dimensions counted once each, when sampled, else
    /// the fleet's sampling weight.
    fn of(
        refs: &[&Rollup],
        rows: (Option<&[&Rollup]>, f64),
        baseline: TimeRange,
        incident: TimeRange,
        extra_from: usize,
    ) -> LeafCells {
        let (dims, base_leaves) = combination_totals(refs, baseline.since_ns, baseline.until_ns);
        let (_, inc_leaves) = combination_totals(refs, incident.since_ns, incident.until_ns);
        let mut leaf_of: BTreeMap<Vec<String>, usize> = BTreeMap::new();
        let mut cells = LeafCells {
            dims,
            values: Vec::new(),
            base: Vec::new(),
            incident: Vec::new(),
            stand_in: Vec::new(),
            stand_in_cells: Vec::new(),
            sample_weight: Vec::new(),
            fleet_sample_weight: 1.0,
            known: Vec::new(),
            significant: Significant::new(),
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
        (cells.sample_weight, cells.fleet_sample_weight) =
            sample_weights(&cells, rows, baseline, incident);
        cells.drop_redundant(extra_from);
        (cells.stand_in, cells.stand_in_cells) = stand_ins(
            &cells.values,
            &cells.base,
            &cells.incident,
            &cells.sample_weight,
        );
        cells
    }

    /// Drops dimensions from `extra_from` on that take one value on every leaf, or map one to
    /// one onto an earlier dimension's values (the same split under another name).
    fn drop_redundant(&mut self, extra_from: usize) {
        let mut keep: Vec<bool> = vec![true; self.dims.len()];
        for d in extra_from..self.dims.len() {
            let distinct: std::collections::BTreeSet<&String> =
                self.values.iter().map(|v| &v[d]).collect();
            if distinct.len() <= 1 || (0..d).any(|e| keep[e] && one_to_one(&self.values, d, e)) {
                keep[d] = false;
            }
        }
        if keep.iter().all(|k| *k) {
            return;
        }
        let pick = |row: &Vec<String>| -> Vec<String> {
            row.iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|(v, _)| v.clone())
                .collect()
        };
        self.dims = pick(&self.dims);
        for row in &mut self.values {
            *row = pick(row);
        }
    }

    /// The leaves as `measure` counts them (each leaf's events by its model's threshold).
    fn leaves<'a>(&'a self, measure: &'a Measure) -> Leaves<'a> {
        let model_dim = self.dims.iter().position(|d| d == MODEL_DIMENSION);
        Leaves {
            dims: &self.dims,
            values: &self.values,
            base: &self.base,
            incident: &self.incident,
            stand_in: self
                .stand_in
                .iter()
                .map(|s| s.map(|i| &self.stand_in_cells[i]))
                .collect(),
            event_of: Box::new(move |leaf, cell| {
                (measure.event_of)(model_dim.map(|m| self.values[leaf][m].as_str()), cell)
            }),
            denominator_of: &*measure.denominator_of,
            sample_weight: &self.sample_weight,
            known: &self.known,
            significant: self
                .significant
                .get(&measure.name)
                .map_or(&[], Vec::as_slice),
        }
    }

    /// The leaf's baseline cell, or what stands in for it.
    fn baseline_of(&self, leaf: usize) -> &Cell {
        match self.stand_in[leaf] {
            Some(i) => &self.stand_in_cells[i],
            None => &self.base[leaf],
        }
    }
}

/// Per leaf of `cells` (values not yet reduced), the requests one observed row stands for:
/// its weighted requests in both windows over its rows in `row_refs`; and the fleet's, each
/// leaf weighted by its requests. Without `row_refs`, `fleet` for every leaf.
fn sample_weights(
    cells: &LeafCells,
    (row_refs, fleet): (Option<&[&Rollup]>, f64),
    baseline: TimeRange,
    incident: TimeRange,
) -> (Vec<f64>, f64) {
    let Some(row_refs) = row_refs else {
        return (vec![fleet; cells.values.len()], fleet);
    };
    let mut rows: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    for window in [baseline, incident] {
        let (_, leaves) = combination_totals(row_refs, window.since_ns, window.until_ns);
        for (values, cell) in leaves {
            *rows.entry(values).or_default() += cell.requests;
        }
    }
    let requests = |leaf: usize| (cells.base[leaf].requests + cells.incident[leaf].requests) as f64;
    let own: Vec<Option<f64>> = (0..cells.values.len())
        .map(|leaf| {
            let observed = *rows.get(&cells.values[leaf])? as f64;
            (observed > 0.0).then(|| (requests(leaf) / observed).max(1.0))
        })
        .collect();
    let (mut weighted, mut total) = (0.0, 0.0);
    for (leaf, weight) in own.iter().enumerate() {
        if let Some(weight) = weight {
            weighted += weight * requests(leaf);
            total += requests(leaf);
        }
    }
    let fleet = if total > 0.0 { weighted / total } else { 1.0 };
    let per_leaf = own.into_iter().map(|w| w.unwrap_or(fleet)).collect();
    (per_leaf, fleet)
}

/// Whether one combination's pairs are all among the other's: the slices are nested.
fn nested(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    let within = |x: &BTreeMap<String, String>, y: &BTreeMap<String, String>| {
        x.iter().all(|(key, value)| y.get(key) == Some(value))
    };
    !a.is_empty() && !b.is_empty() && (within(a, b) || within(b, a))
}

/// Whether dimensions `a` and `b` determine each other's value on every leaf.
fn one_to_one(values: &[Vec<String>], a: usize, b: usize) -> bool {
    let mut forward: BTreeMap<&String, &String> = BTreeMap::new();
    let mut backward: BTreeMap<&String, &String> = BTreeMap::new();
    values.iter().all(|row| {
        *forward.entry(&row[a]).or_insert(&row[b]) == &row[b]
            && *backward.entry(&row[b]).or_insert(&row[a]) == &row[a]
    })
}

/// Least distance, in minutes, between a window's onset and its top cause's own before the
/// window is analysed again from the cause's onset.
const MIN_ONSET_CORRECTION_MINUTES: i64 = 3;

/// Fewest requests a stand-in baseline must hold.
const MIN_STAND_IN_REQUESTS: u64 = 20;

/// Stand-in baselines for leaves that have incident traffic but none in the baseline and carry
/// a value no baseline leaf has (a rollout: a version, build or pod that exists only from the
/// incident on). Its peers at the same time stand in: the incident cells of the leaves that
/// agree with it on every other dimension and hold old values where it holds new ones (the
/// same tenants and models on the old version); without such peers, what it replaced: the
/// baseline cells of the leaves that agree with it on every other dimension. `None` for every
/// other leaf, and where neither holds [`MIN_STAND_IN_REQUESTS`] observed rows (requests over
/// each leaf's `sample_weight`).
fn stand_ins(
    values: &[Vec<String>],
    base: &[Cell],
    incident: &[Cell],
    sample_weight: &[f64],
) -> (Vec<Option<usize>>, Vec<Cell>) {
    let n_dims = values.first().map_or(0, Vec::len);
    let old: Vec<std::collections::BTreeSet<&String>> = (0..n_dims)
        .map(|d| {
            values
                .iter()
                .zip(base)
                .filter(|(_, cell)| cell.requests > 0)
                .map(|(row, _)| &row[d])
                .collect()
        })
        .collect();
    let mut out: Vec<Option<usize>> = vec![None; values.len()];
    let mut cells: Vec<Cell> = Vec::new();
    // leaves with the same new dimensions and the same other values share their stand-in
    let mut by_key: BTreeMap<(Vec<bool>, Vec<&String>), Option<usize>> = BTreeMap::new();
    for leaf in 0..values.len() {
        if base[leaf].requests > 0 || incident[leaf].requests == 0 {
            continue;
        }
        let new: Vec<bool> = (0..n_dims)
            .map(|d| !old[d].contains(&values[leaf][d]))
            .collect();
        if !new.iter().any(|n| *n) {
            continue;
        }
        let others: Vec<&String> = (0..n_dims)
            .filter(|&d| !new[d])
            .map(|d| &values[leaf][d])
            .collect();
        let stand_in = by_key.entry((new.clone(), others)).or_insert_with(|| {
            let agrees =
                |row: &Vec<String>| (0..n_dims).all(|d| new[d] || row[d] == values[leaf][d]);
            let mut peers = Cell::default();
            let mut observed = 0.0;
            for (p, row) in values.iter().enumerate() {
                if agrees(row) && (0..n_dims).all(|d| !new[d] || old[d].contains(&row[d])) {
                    peers.merge(&incident[p]);
                    observed += incident[p].requests as f64 / sample_weight[p];
                }
            }
            if observed < MIN_STAND_IN_REQUESTS as f64 {
                (peers, observed) = (Cell::default(), 0.0);
                for (p, row) in values.iter().enumerate() {
                    if agrees(row) {
                        peers.merge(&base[p]);
                        observed += base[p].requests as f64 / sample_weight[p];
                    }
                }
            }
            (observed >= MIN_STAND_IN_REQUESTS as f64).then(|| {
                cells.push(peers);
                cells.len() - 1
            })
        });
        out[leaf] = *stand_in;
    }
    (out, cells)
}

/// A cause known before localization from a complete source: a pod whose own device metrics
/// show a fault (metrics are complete where traces may be sampled). Localization takes it
/// first in every measure where its requests deviate and localizes the rest around it, so a
/// second, independent cause is not merged with it into one coarser combination.
#[derive(Debug, Clone)]
pub(crate) struct KnownCause {
    pub(crate) elements: Vec<(String, String)>,
    /// The signal that names it: its evidence when no request measure shows it.
    pub(crate) evidence: String,
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
    /// Causes of symptom measures that exist only from the incident on (see [`rollout`]).
    rollouts: Vec<BTreeMap<String, String>>,
    /// Per symptom measure, the combinations its scan found (see [`Significant`]).
    significant: Significant,
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
            .filter(|&leaf| (measure.eligible)(cells.baseline_of(leaf)))
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
        if !measure.explanatory {
            self.significant.insert(
                measure.name.clone(),
                result
                    .root_causes
                    .iter()
                    .map(|c| c.elements.clone())
                    .collect(),
            );
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
            let compared = leaves
                .all_stand_in(&all, &cause.elements)
                .then(|| compare_rollout(cells, &leaves, &all, &cause.elements))
                .flatten();
            let evidence = evidence(measure, z, &cause, compared.as_ref());
            if compared.is_some() && !measure.explanatory {
                self.rollouts.push(cause.elements.iter().cloned().collect());
            }
            let rate = slice_rate(&cause, compared.as_ref());
            self.add_cause(&cause, evidence, measure.explanatory, rate);
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
        rate: Option<SliceRate>,
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
                if rate.map(|r| r.odds_ratio()) > existing.odds_ratio() {
                    existing.slice_rate = rate;
                }
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
                    slice_rate: rate,
                });
            }
        }
    }

    /// After a symptom, each known cause no measure localized (its requests hardly deviate, or
    /// too few were sampled to tell) is a cause still, on the evidence of its own signal:
    /// ranked after the symptom measures' causes (score 0), before explanatory ones.
    fn add_known(&mut self, known: &[KnownCause]) {
        if self.symptom.is_none() {
            return;
        }
        for cause in known {
            let dimensions: BTreeMap<String, String> = cause.elements.iter().cloned().collect();
            if self.causes.iter().any(|c| c.dimensions == dimensions) {
                continue;
            }
            self.causes
                .push(on_signal(dimensions, cause.evidence.clone()));
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

/// A cause on the evidence of a signal alone (a known cause, a pod's histograms): no measure
/// localized it, so it has no score, share of the excess or slice rate; ranked after the
/// symptom measures' causes.
fn on_signal(dimensions: BTreeMap<String, String>, evidence: String) -> RootCause {
    RootCause {
        rank: 0,
        dimensions: dimensions.into(),
        explained_fraction: 0.0,
        score: 0.0,
        evidence: vec![evidence],
        slice_rate: None,
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

/// The cause `elements` among the leaves `subset`, new in the incident, compared with its peers
/// and with what it replaced.
fn compare_rollout(
    cells: &LeafCells,
    leaves: &Leaves<'_>,
    subset: &[usize],
    elements: &[(String, String)],
) -> Option<Comparison> {
    let slice: Vec<usize> = subset
        .iter()
        .copied()
        .filter(|&leaf| leaves.matches(leaf, elements))
        .collect();
    let view = LeafView {
        values: &cells.values,
        base: &cells.base,
        incident: &cells.incident,
        event_of: &*leaves.event_of,
        denominator_of: leaves.denominator_of,
    };
    rollout::compare(&view, &slice)
}

/// The fraction of the slice's units that are the measure's events, in both windows (see
/// [`RootCause::slice_rate`]):
/// for a slice new in the incident (`compared`), its peers' share at the same time, else what it
/// replaced, stands for the baseline; `None` when it has neither.
fn slice_rate(
    cause: &infersight_analytics::localize::RootCause,
    compared: Option<&Comparison>,
) -> Option<SliceRate> {
    match compared {
        Some(c) => c.peers.or(c.replaced).map(|baseline| SliceRate {
            baseline,
            incident: c.slice,
        }),
        None => Some(SliceRate {
            baseline: cause.forecast,
            incident: cause.real,
        }),
    }
}

/// One line of evidence for a cause `measure` found: the slice's rate in both windows; when the
/// slice did not exist in the baseline (`compared`), against its peers at the same time and
/// what it replaced.
fn evidence(
    measure: &Measure,
    z: f64,
    cause: &infersight_analytics::localize::RootCause,
    compared: Option<&Comparison>,
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
    if let Some(compared) = compared {
        return format!(
            "{}: {} ({fleet}); {:.0} % of the excess",
            measure.event,
            compared.text(measure.unit),
            cause.explained_fraction * 100.0
        );
    }
    format!(
        "{}: {:.1} % of the slice's {} in the incident vs {:.1} % in the baseline ({fleet}); {:.0} % of the excess",
        measure.event,
        cause.real * 100.0,
        measure.unit,
        cause.forecast * 100.0,
        cause.explained_fraction * 100.0
    )
}

/// The report's one-line verdict; `change` says what the symptom measure did.
fn verdict(
    change: Option<&str>,
    top: Option<&RootCause>,
    detected: Option<&str>,
    onset: i64,
) -> String {
    match (change, top) {
        (None, _) => match detected {
            Some(sli) => format!(
                "{sli} changed at {} but no SLI moved significantly against the baseline: nothing to blame",
                format_rfc3339(onset)
            ),
            None => "no anomaly: SLIs are within their baseline; nothing to blame".into(),
        },
        (Some(change), Some(top)) => format!(
            "{change} since {}; most likely cause: {} ({})",
            format_rfc3339(onset),
            Subject::describe(&top.dimensions),
            top.evidence[0]
        ),
        (Some(change), None) => format!(
            "{change} since {} across the whole fleet: no specific slice explains it",
            format_rfc3339(onset)
        ),
    }
}

/// The first and last minute any of `rollups` covers.
fn minute_bounds(rollups: &[&Rollup]) -> Option<(i64, i64)> {
    rollups.iter().filter_map(|r| r.minute_bounds()).fold(
        None,
        |acc: Option<(i64, i64)>, (lo, hi)| {
            Some(acc.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))))
        },
    )
}

/// When neither the fleet's series nor a stored slice's chose a window a symptom confirms (a
/// regression of a version, build, deployment or revision under a name no rollup column holds,
/// on a few percent of the traffic), the rows of the whole data rolled up with their attribute
/// dimensions (see [`crate::attributes`]) give each attribute value an onset series of its own
/// ([`choose_slice_onsets`]); the first window a symptom confirms is kept. `localized`
/// unchanged otherwise, and whenever the caller gave the incident window.
pub(crate) async fn with_attribute_onsets(
    engine: &infersight_query::QueryEngine,
    request: RcaRequest,
    stored_rows: Option<u64>,
    localized: Localized,
) -> Result<Localized, QueryError> {
    let confirmed = localized
        .report
        .as_ref()
        .is_some_and(|r| r.symptom.is_some());
    let Some(chosen) = localized
        .chosen
        .as_ref()
        .filter(|_| request.incident.is_none() && !confirmed)
    else {
        return Ok(localized);
    };
    let Some(attributes) =
        crate::attributes::attribute_rollup(engine, TimeRange::ALL, &chosen.dimensions).await?
    else {
        return Ok(localized);
    };
    let store = Arc::clone(engine.store());
    let from_dimension = chosen.dimensions.len();
    let found = tokio::task::spawn_blocking(move || {
        attribute_slice_window(
            store.as_ref(),
            (request, stored_rows),
            &attributes.rollup,
            from_dimension,
        )
    })
    .await
    .map_err(|e| QueryError::Internal(format!("rca task failed: {e}")))??;
    Ok(found.unwrap_or(localized))
}

/// The first window an attribute slice's onset (dimensions of `rollup` from `from_dimension`
/// on) gives that a symptom confirms, moved to its top cause's own onset; `None` without one.
fn attribute_slice_window(
    store: &dyn infersight_store::StorageBackend,
    (request, stored_rows): (RcaRequest, Option<u64>),
    rollup: &Rollup,
    from_dimension: usize,
) -> Result<Option<Localized>, QueryError> {
    let parts: Vec<Arc<Rollup>> = store.rollups(TimeRange::ALL)?;
    let refs: Vec<&Rollup> = parts.iter().map(Arc::as_ref).collect();
    let Some((first_minute, last_minute)) = minute_bounds(&refs) else {
        return Ok(None);
    };
    let data_end = last_minute + MINUTE_NS;
    let leaf_refs = [rollup];
    let windows = Windows {
        refs: &refs,
        leaf_refs: Some(&leaf_refs),
        known: &[],
        pods: &[],
        significant: &NONE_SIGNIFICANT,
        row_refs: None,
        sample_weight: 1.0,
        request,
        first_minute,
        data_end,
    };
    let sample_weight = mean_sample_weight(&refs, stored_rows);
    for (onset, series) in choose_slice_onsets(
        &leaf_refs,
        first_minute,
        data_end,
        from_dimension,
        sample_weight,
    ) {
        let window = TimeRange {
            since_ns: Some(onset),
            until_ns: Some(data_end),
        };
        let sliced = windows.analyse(window, Some(series))?;
        if sliced.report.as_ref().is_some_and(|r| r.symptom.is_some()) {
            return windows.moved_to_cause_onset(sliced).map(Some);
        }
    }
    Ok(None)
}
